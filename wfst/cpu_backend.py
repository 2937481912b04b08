"""device="cpu": kernels.cpu.search on a thread pool, one utterance per thread.

Single-word boosts reach the search as a dense cost vector per utterance; when the whole
batch boosts one map, its costs go into the graph's word arcs for the pass instead
(kernels.cpu.boosted_weights) and the plain search runs.  Rescoring and phrase boosting
give each utterance a groups.Context, with a memo of its context steps.
"""
from __future__ import annotations

import contextlib
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from wfst.kernels import constants as C
from wfst.kernels.groups import InterleavedGraph

from . import contexts
from .batch import BatchPlan, Outcome
from .inputs import host_array, nonfinite_rows
from .lattice import RawLattice
from .ledger import Ledger
from .memory import available_host_bytes
from .results import TracedPath, emitting_reads

_LM_MEMO_SLOTS = 1 << 21  # 32 MiB; on BPE 2^20 was 10% slower, 2^22 5% faster
_PHRASE_MEMO_SLOTS = 1 << 15  # phrases alone: a small automaton
_PHRASE_LM_MEMO_SLOTS = 1 << 18  # phrases with rescoring


class CpuBackend:
    """The graph in the CPU layout, and decoding of batches on `num_threads` threads."""

    memory = "host"
    device_seconds = 0.0  # no GPU

    def __init__(self, graph, num_threads: int | None):
        from wfst.kernels import cpu

        self.graph = graph
        self.num_threads = num_threads or os.cpu_count() or 1
        states, arcs = cpu.interleave_graph(graph.e_indptr, graph.ne_indptr, graph.ilabel, graph.olabel,
                                            graph.weight, graph.nextstate)
        self.layout = InterleavedGraph(states, arcs, graph.final, np.int64(graph.start), graph.ilabel)
        self.num_words = int(graph.olabel.max(initial=0)) + 1  # every output label indexes a cost vector
        self._word_arcs = None
        self._lm_memos = queue.SimpleQueue()  # see _memo
        self._workspaces = {}  # capacity -> queue of cpu.Workspace, one per utterance searched at a time
        self._link_buffers = {}  # (links, tokens) -> queue of lattice.Links (lattices)
        self._counts = np.zeros(C.STEP_COUNTERS, np.int64)  # the memos' counters, summed over searches
        self._counts_lock = threading.Lock()
        self._memo_bytes = 0  # of the largest memo in use
        self._pool = None  # the streams' thread pool, made on first use
        self._cpu = cpu  # the kernels module (imported here: importing wfst compiles nothing)

    # ------------------------------------------------------------------ the Backend interface

    def to_batch(self, log_probs) -> np.ndarray:
        return host_array(log_probs)

    def nonfinite_rows(self, x, lengths) -> np.ndarray:
        return nonfinite_rows(np, x, lengths)

    def free_bytes(self) -> int | None:
        return available_host_bytes()

    def concurrent(self, batch: int) -> int:
        """Utterances searched at once (each needs its own workspace)."""
        return max(min(batch, self.num_threads), 1)

    def search(self, plan: BatchPlan, utterances: list[int]) -> list[Outcome]:
        """One pass of the search over these utterances at plan.capacity."""
        from wfst.kernels import cpu

        boosts = plan.boosts
        in_graph = boosts.batch_wide()  # one map for the whole batch: into the weights, at no cost per arc
        weights = (cpu.boosted_weights(self.layout.arcs, self.word_arcs(), boosts.word_costs(0, self.num_words))
                   if in_graph else contextlib.nullcontext())
        automata = {}  # one Context per phrase automaton (utterances given one mapping share it)

        def one(b):
            phrases = boosts.phrases[b]
            context = None
            if plan.rescorer is not None or phrases.num_states > 1:
                if id(phrases) not in automata:
                    automata[id(phrases)] = contexts.context(plan.rescorer, [phrases], boosts.max_reward)
                context = automata[id(phrases)]
            word_costs = boosts.word_costs(b, self.num_words) if boosts.boosted(b) and not in_graph else None
            T = int(plan.lengths[b])
            raw = None
            with self._memo(context) as memo, self._workspace(plan.capacity.tokens) as ws:
                before = None if memo is None else memo.counts.copy()
                with self._links(plan.capacity, plan.lattice) as links:
                    lat = None if links is None else links._replace(block=np.zeros(T + 2, np.int64))
                    (status, arcs, steps, reached_final, per_frame, fallbacks, step_starts, final_gids,
                     final_costs) = cpu.search(self.layout, word_costs, context, memo, plan.log_probs[b], T,
                                               plan.settings, ws, lat)
                    if status == C.OK and lat is not None:
                        raw = RawLattice.of(lat, step_starts, final_gids, final_costs, reached_final)
                if status != C.OK:
                    _clean(ws)
                if memo is not None:
                    with self._counts_lock:
                        self._counts += memo.counts - before
                        self._memo_bytes = max(self._memo_bytes, memo.table.nbytes)
            if status != 0:
                return Outcome(int(status))
            frames, columns = emitting_reads(self.graph, arcs, steps)
            logp = plan.log_probs[b][frames, columns]
            return Outcome(0, TracedPath(arcs, steps, logp, bool(reached_final), int(per_frame.sum()),
                                         int(fallbacks), raw))

        threads = min(self.num_threads, max(len(utterances), 1))
        with weights:
            if threads == 1:
                return [one(b) for b in utterances]
            with ThreadPoolExecutor(threads) as pool:
                return list(pool.map(one, utterances))

    def counters(self) -> np.ndarray:
        """The memos' counters so far (constants.STEP_ARCS, ...)."""
        with self._counts_lock:
            return self._counts.copy()

    def lm_report(self, before, frames: int, rescorer) -> dict:
        """What a decode() call did with its context steps ({} without rescoring or phrases):

        lm_bytes             the big LM's arrays as the search reads them (memory-mapped store)
        memo_bytes           one memo of context steps (one per utterance searched at a time)
        word_arcs            word arcs of the tokens ExpandArcs expanded (both passes)
        lookups              of them, those whose context step was looked up (the others
                             could not enter the beam whatever the LM gives back)
        closure_word_arcs, closure_lookups   the same in the epsilon closure
        misses               lookups the memo did not hold (computed and stored); hits: the others
        backoffs             backoff arcs the misses followed in the big LM
        frames               the call's frames (sum of lengths)

        Decoding again after an overflow counts again."""
        counts = self.counters() - before
        if not counts.any():
            return {}
        lm = {} if rescorer is None else dict(lm_bytes=rescorer.host_bytes)
        lookups = int(counts[C.STEP_LOOKUPS] + counts[C.STEP_CLOSURE_LOOKUPS])
        return dict(**lm, memo_bytes=self._memo_bytes, word_arcs=int(counts[C.STEP_ARCS]),
                    lookups=int(counts[C.STEP_LOOKUPS]), closure_word_arcs=int(counts[C.STEP_CLOSURE_ARCS]),
                    closure_lookups=int(counts[C.STEP_CLOSURE_LOOKUPS]), hits=lookups - int(counts[C.STEP_MISSES]),
                    misses=int(counts[C.STEP_MISSES]), backoffs=int(counts[C.STEP_BACKOFFS]), frames=frames)

    # ------------------------------------------------------------------ helpers

    def word_arcs(self):
        """The CPU layout's word arcs by word (cpu.word_arc_index), built on first use."""
        if self._word_arcs is None:
            from wfst.kernels import cpu

            self._word_arcs = cpu.word_arc_index(self.layout.arcs)
        return self._word_arcs

    @contextlib.contextmanager
    def _workspace(self, capacity: int):
        """A search workspace of `capacity` token slots, reused from utterance to utterance."""
        from wfst.kernels import cpu

        pool = self._workspaces.setdefault(capacity, queue.SimpleQueue())  # streams may differ in capacity
        try:
            ws = pool.get_nowait()
        except queue.Empty:
            ws = cpu.new_workspace(capacity)
        try:
            yield ws
        finally:
            pool.put(ws)

    @contextlib.contextmanager
    def _links(self, capacity, lattice):
        """A lattice links buffer (kernels.lattice.Links) of capacity.lattice_links, reused;
        None when the plan keeps no lattice."""
        from wfst.kernels import lattice as kl

        if lattice is None:
            yield None
            return
        beam, interval = lattice
        pool = self._link_buffers.setdefault((capacity.lattice_links, capacity.tokens), queue.SimpleQueue())
        try:
            links = pool.get_nowait()
        except queue.Empty:
            links = kl.new_links(capacity.lattice_links, capacity.tokens, beam, interval)
        try:
            yield links._replace(beam=np.float32(beam), interval=np.int64(interval))
        finally:
            pool.put(links)

    @contextlib.contextmanager
    def _memo(self, context):
        """The search's memo of context steps (ctx, word) -> (cost, next ctx).  With the
        rescoring LM alone a step depends on the LM only, so the memos are kept from one
        utterance and call to the next (one per utterance searched at a time); phrase
        automata are the utterance's own, and their memo starts empty."""
        from wfst.kernels import cpu

        if context is None:
            yield None
            return
        phrasing = context.phrase_states[0] > 1
        if phrasing:
            yield cpu.new_memo(_PHRASE_LM_MEMO_SLOTS if context.rescoring else _PHRASE_MEMO_SLOTS)
            return
        try:
            memo = self._lm_memos.get_nowait()
        except queue.Empty:
            memo = cpu.new_memo(_LM_MEMO_SLOTS)
        try:
            yield memo
        finally:
            self._lm_memos.put(memo)

    # ------------------------------------------------------------------ streams

    def open_stream(self, boosts, rescorer, settings, capacity) -> CpuStream:
        """A stream's search state: its start token and the start's epsilon closure.
        boosts: the stream's BoostTables (one row); capacity: the decoder's batch.Capacity."""
        from wfst.kernels import cpu

        context = None
        phrases = boosts.phrases[0]
        if rescorer is not None or phrases.num_states > 1:
            context = contexts.context(rescorer, [phrases], boosts.max_reward)
        word_costs = boosts.word_costs(0, self.num_words) if boosts.boosted(0) else None
        own_memo = None
        if context is not None and phrases.num_states > 1:  # phrase steps are this stream's own
            own_memo = cpu.new_memo(_PHRASE_LM_MEMO_SLOTS if rescorer is not None else _PHRASE_MEMO_SLOTS)
        state = CpuStream(context, own_memo, word_costs, settings, capacity.tokens, self.graph.tokens.num_columns)
        while True:
            with self._stream_memo(state) as memo, self._workspace(state.capacity) as ws:
                ws = ws._replace(tl=state.tl)
                n, overflow = cpu.begin(self.layout, word_costs, context, memo, ws, None)
                if not overflow:
                    cpu.release(ws, n)
                    state.n = n
                    return state
                _clean(ws)
            state.grow(None)

    def advance(self, states: list, chunks: list) -> None:
        """Decode each stream's chunk (NumPy (T, V) float32) on the thread pool: one task per
        thread, each a share of the streams (balanced by frames) with one workspace and memo
        for all of them, so that a call costs one hand-off per thread, not per stream."""
        order = sorted((i for i in range(len(states)) if len(chunks[i])), key=lambda i: -len(chunks[i]))
        threads = min(self.num_threads, len(order))
        shares = [order[k::threads] for k in range(threads)]

        def run(share):
            with contextlib.ExitStack() as held:
                spaces, memos = {}, {}

                def space(capacity):
                    if capacity not in spaces:
                        spaces[capacity] = held.enter_context(self._workspace(capacity))
                    return spaces[capacity]

                for i in share:
                    state = states[i]
                    memo = state.memo
                    if memo is None and state.context is not None:  # the LM's steps: a memo of the pool
                        if "lm" not in memos:
                            memos["lm"] = held.enter_context(self._stream_memo(state))
                        memo = memos["lm"]
                    elif memo is not None:
                        memo = held.enter_context(self._stream_memo(state))
                    self._advance_one(state, chunks[i], space, memo)

        if threads <= 1:
            for share in shares:
                run(share)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.num_threads)
        for future in [self._pool.submit(run, share) for share in shares]:
            future.result()

    def _advance_one(self, state: CpuStream, chunk: np.ndarray, space, memo) -> None:
        """space(capacity): a workspace of that capacity; memo: the stream's memo."""
        cpu = self._cpu
        state.append(chunk)
        T, t = len(chunk), 0
        resume, resume_beam = False, np.float32(0.0)
        while True:
            ws = space(state.capacity)
            if resume:
                ws = state.resumed(ws)
            ws = ws._replace(tl=state.tl)
            (status, done, n, ns, beam, prev, arc, stored, fallbacks, survivors, trailing, voiced,
             relative) = cpu.advance_stream(
                self.layout, state.word_costs, state.context, memo, chunk[t:], T - t, state.settings, ws,
                state.n, state.ns, resume, resume_beam, state.trace, state.frames - state.base, state.stored)
            state.trace = state.trace._replace(prev=prev, arc=arc)
            state.n, state.ns, state.stored = n, ns, stored
            state.frames += done
            state.fallbacks += fallbacks
            state.survivors += survivors
            if status == C.OK:
                break
            # a frame overflowed: go on from its survivors in a workspace twice as large
            state.grow(ws)
            _clean(ws)
            t += done
            resume, resume_beam = True, beam
        state.set_endpoint_readings(trailing, voiced, relative)
        if state.stored >= state.next_commit:
            state.commit(self.graph)

    def stream_partial(self, state: CpuStream):
        """(PathPart of the best path so far, how many of its words are stable)."""
        return state.partial(self.graph, state.tl, state.n, state.trace, state.stored)

    def finish_stream(self, state: CpuStream):
        """The stream's last step: (status, TracedPath of the rest of the path, the
        committed PathPart before it)."""
        from wfst.kernels import cpu

        state.reserve(0)
        with self._workspace(state.capacity) as ws:
            ws = ws._replace(tl=state.tl)
            status, arcs, gids, reached_final = cpu.finish(self.layout, state.context, ws, state.n, state.trace,
                                                           state.frames - state.base, state.stored)
        if status != C.OK:
            return status, None, state.prefix
        return status, state.traced(self.graph, state.trace.steps, arcs, gids, reached_final), state.prefix

    @contextlib.contextmanager
    def _stream_memo(self, state: CpuStream):
        """The stream's memo (its own with phrases, else one of the pool), its counters
        added to the backend's."""
        with contextlib.nullcontext(state.memo) if state.memo is not None else self._memo(state.context) as memo:
            if memo is None:
                yield None
                return
            before = memo.counts.copy()
            yield memo
            with self._counts_lock:
                self._counts += memo.counts - before
                self._memo_bytes = max(self._memo_bytes, memo.table.nbytes)


def _clean(ws) -> None:
    """Empty the hash tables of a workspace whose search stopped early (an overflow leaves
    keys behind): a stream takes workspaces from the pool as they are."""
    ws.ht.key[:] = C.EMPTY_KEY
    ws.sg.key[:] = C.EMPTY_KEY


class CpuStream(Ledger):
    """One stream's CPU search state between calls: the tokens of its last frame (its own
    token list; the rest of a workspace is shared), its backpointers from `base` on (the
    steps before were committed into `prefix`), and the log_probs of frames base.. that a
    path after the commit point may still read."""

    def __init__(self, context, memo, word_costs, settings, capacity: int, num_columns: int):
        from wfst.kernels import cpu

        super().__init__(capacity)
        self.context, self.memo, self.word_costs, self.settings = context, memo, word_costs, settings
        self.tl = cpu.new_workspace(capacity).tl
        self.n = self.ns = 0
        self.trace = cpu.new_trace(64, capacity)
        self.stored = 0
        self.logp = np.empty((0, num_columns), np.float32)  # logp[r] is frame base + r

    def logp_at(self, frames, columns):
        return self.logp[frames - self.base, columns]

    def reserve(self, frames: int) -> None:
        """Room in trace.steps and trace.survivors for `frames` more frames and the last step."""
        need = self.frames - self.base + frames + 2
        if need > min(len(self.trace.steps), len(self.trace.survivors)):
            size = max(need, 2 * len(self.trace.steps))
            steps, survivors = np.zeros(size, np.int64), np.zeros(size, np.int32)
            steps[:len(self.trace.steps)] = self.trace.steps
            survivors[:len(self.trace.survivors)] = self.trace.survivors
            self.trace = self.trace._replace(steps=steps, survivors=survivors)

    def append(self, chunk: np.ndarray) -> None:
        self.reserve(len(chunk))
        kept = self.frames - self.base
        if kept + len(chunk) > len(self.logp) or len(self.logp) == 0:
            grown = np.empty((max(kept + len(chunk), 2 * len(self.logp)), self.logp.shape[1]), np.float32)
            grown[:kept] = self.logp[:kept]
            self.logp = grown
        self.logp[kept:kept + len(chunk)] = chunk

    def grow(self, ws) -> None:
        """Twice the token capacity; ws: the workspace whose frame overflowed (its survivors
        carry over), None before the first frame."""
        from wfst.kernels import cpu

        self.capacity *= 2
        self.tl = cpu.new_workspace(self.capacity).tl
        self._survivors = None if ws is None else tuple(a[:self.ns].copy() for a in ws.sv[:4])

    def resumed(self, ws):
        """ws (of the new capacity) with the overflowed frame's survivors copied in."""
        for mine, theirs in zip(ws.sv[:4], self._survivors):
            mine[:self.ns] = theirs
        self._survivors = None
        return ws

    def commit(self, graph) -> None:
        """Ledger.commit_arrays on this stream's own arrays, and its log-probs before the
        meeting point dropped."""
        kept = self.frames - self.base
        done = self.commit_arrays(graph, self.tl, self.n, self.trace, self.stored)
        if done is not None:
            k, self.stored = done
            self.logp[:kept - k] = self.logp[k:kept]
