"""device="cpu": kernels.cpu.search on a thread pool, one utterance per thread.

Single-word boosts reach the search as a dense cost vector per utterance; when the whole
batch boosts one map, its costs go into the graph's word arcs for the pass instead
(kernels.cpu.boosted_weights) and the plain search runs.  Rescoring and phrase boosting
give each utterance a groups.Context, with a memo of its context steps.
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import operator
import os
import queue
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from wfst.kernels import constants as C
from wfst.kernels.groups import InterleavedGraph

from . import contexts
from .batch import LINKS_PER_TOKEN, BatchPlan, Outcome
from .boost import NO_PHRASES
from .config import usable_cores
from .errors import DecoderMemoryError, WfstError
from .inputs import JoinedChunks, chunk_lengths, host_array, input_faults
from .lattice import RawLattice
from .ledger import Ledger, MeetingScratch
from .memory import available_host_bytes
from .results import PathPart, TracedPath, blank_label, emitting_reads

_LM_MEMO_SLOTS = 1 << 21  # 32 MiB; on BPE 2^20 was 10% slower, 2^22 5% faster
_PHRASE_MEMO_SLOTS = 1 << 15  # phrases alone: a small automaton
_PHRASE_LM_MEMO_SLOTS = 1 << 18  # phrases with rescoring
SPARE_BYTES = 1 << 30  # at most, finished streams' arrays kept for the next streams (StreamSlots.keep_spare)


_CAPACITY, _SLOT = operator.attrgetter("capacity"), operator.attrgetter("slot")
_PARTIAL_WORDS = 64  # words after the last meeting point that a stream's row of its partial holds (more: asked alone)


class CpuBackend:
    """The graph in the CPU layout, and decoding of batches on `num_threads` threads."""

    memory = "host"
    device_seconds = 0.0  # no GPU

    def __init__(self, graph, num_threads: int | None):
        from wfst.kernels import cpu

        self.graph = graph
        self.num_threads = num_threads or usable_cores()
        states, arcs = cpu.interleave_graph(graph.e_indptr, graph.ne_indptr, graph.ilabel, graph.olabel,
                                            graph.weight, graph.nextstate)
        self.layout = InterleavedGraph(states, arcs, graph.final, np.int64(graph.start), graph.ilabel,
                                       np.require(graph.olabel, np.int32, "CA"))
        # every output label and every word of the table (a boost may name one no arc outputs) indexes a cost vector
        self.num_words = max(int(graph.olabel.max(initial=0)) + 1, len(graph.words or ()))
        self._word_arcs = None
        self._lm_memos = queue.SimpleQueue()  # see _memo
        self._workspaces = {}  # capacity -> queue of cpu.Workspace, one per utterance searched at a time
        self._link_buffers = {}  # (links, tokens) -> queue of lattice.Links (lattices)
        self._counts = np.zeros(C.STEP_COUNTERS, np.int64)  # the memos' counters, summed over searches
        self._counts_lock = threading.Lock()
        self._memo_bytes = 0  # of the largest memo in use
        self._pool = None  # the streams' thread pool, made on first use (in this process: a fork's child has
        self._pool_pid = None  # the parent's, without its threads)
        self._slots = StreamSlots(self._counts)  # the live streams' arrays
        self._local = threading.local()  # .meeting: this thread's MeetingScratch (partials, commits)
        self._cpu = cpu  # the kernels module (imported here: importing wfst compiles nothing)
        self._advance_streams = DirectCall(cpu.advance_streams, fixed=5, checked=(6,))  # 6: the chunks
        self._advance_parallel = DirectCall(cpu.advance_streams_parallel, fixed=5, checked=(6,))
        self._thread_memos = None  # the streams' memos of LM steps, one per thread (_memos_for)
        self._finish_slot = DirectCall(cpu.finish_slot, fixed=6, checked=())
        self._begin_slot = DirectCall(cpu.begin_slot, fixed=4, checked=())
        self._blank = blank_label(graph)  # (finish_slot's)
        # (capacity, threads) -> workspaces, one per thread of Numba's pool, as a typed list and as
        # a plain one (the same workspaces), and the arrays the threads' returns go in
        self._thread_spaces = {}
        self._pool_guard = PoolGuard()
        self._partial_scratch = None  # the pool's meeting_point scratch for partials (_walk_scratch)
        self._no_walks = np.empty((2, 256, 0), np.int32)  # a thread's scratch with no room: no partial walked
        self._rescoring = False  # whether the streams' contexts have the rescoring LM (set when the first opens)
        self._plain_start = None  # the start closure of every stream without boosts, lattice or phrases

    # ------------------------------------------------------------------ the Backend interface

    to_batch = to_chunk = staticmethod(host_array)  # a batch, a stream's chunk (one call less a chunk)
    joins_chunks = True  # advance() takes the usual call's chunks joined (JoinedChunks): its search reads them so

    def input_faults(self, x, lengths):
        return input_faults(np, x, lengths)

    def free_bytes(self) -> int | None:
        return available_host_bytes()

    def stream_bytes(self, capacity, config) -> int:
        """About what a stream opened now takes (its own arrays: the threads' workspaces are
        shared)."""
        return C.cpu_stream_bytes(capacity.tokens, capacity.lattice_links if config.lattice_beam is not None else 0)

    def concurrent(self, batch: int) -> int:
        """Utterances searched at once (each needs its own workspace)."""
        return max(min(batch, self.num_threads), 1)

    def search_bytes(self, capacity, frames: int, lattice_links: int) -> int:
        """What one utterance's search needs besides its backpointers, which it checks against
        its room as they grow (constants.cpu_search_bytes)."""
        return C.cpu_search_bytes(capacity.tokens, lattice_links)

    def search(self, plan: BatchPlan, utterances: list[int], room: int | None = None) -> list[Outcome]:
        """One pass of the search over these utterances at plan.capacity, each taking at
        most `room` bytes (None: no limit; one past it ends with MEMORY_OUT)."""
        from wfst.kernels import cpu

        links = plan.capacity.lattice_links if plan.lattice is not None else 0
        backpointers = C.backpointer_room(None if room is None else room - self.search_bytes(plan.capacity, 0, links))

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
                    automata[id(phrases)] = contexts.context(plan.rescorer, [phrases], boosts.weight_spread)
                context = automata[id(phrases)]
            word_costs = boosts.word_costs(b, self.num_words) if boosts.boosted(b) and not in_graph else None
            T = int(plan.lengths[b])
            raw = None
            with self._memo(context) as memo, self._workspace(plan.capacity.tokens) as ws:
                before = None if memo is None else memo.counts.copy()
                with self._links(plan.capacity, plan.lattice) as links:
                    lat = None if links is None else links._replace(block=np.zeros(T + 2, np.int64))
                    (status, arcs, steps, reached_final, per_frame, fallbacks, step_starts, final_gids,
                     final_costs, lat) = cpu.search(self.layout, word_costs, context, memo, plan.log_probs[b], T,
                                                    plan.settings, ws, lat, backpointers)
                    if status == C.OK and lat is not None:
                        raw = RawLattice.of(lat, step_starts, final_gids, final_costs, reached_final)
                if status != C.OK:
                    _clean(ws)
                if memo is not None:
                    self._count_steps(memo.counts - before)
                    self._memo_bytes = max(self._memo_bytes, memo.table.nbytes)
            if status == C.MEMORY_OUT:
                return Outcome(int(status), frame=len(step_starts) - 1, stored=int(step_starts[-1]))
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
        counts = (self.counters() - before).tolist()  # (Python ints at once: a rescored stream's call reports it)
        if not any(counts):
            return {}
        lm = {} if rescorer is None else dict(lm_bytes=rescorer.host_bytes)
        lookups = counts[C.STEP_LOOKUPS] + counts[C.STEP_CLOSURE_LOOKUPS]
        return dict(**lm, memo_bytes=self._memo_bytes, word_arcs=counts[C.STEP_ARCS], lookups=counts[C.STEP_LOOKUPS],
                    closure_word_arcs=counts[C.STEP_CLOSURE_ARCS], closure_lookups=counts[C.STEP_CLOSURE_LOOKUPS],
                    hits=lookups - counts[C.STEP_MISSES], misses=counts[C.STEP_MISSES],
                    backoffs=counts[C.STEP_BACKOFFS], frames=frames)

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
        ws = self._take_workspace(capacity)
        yield ws
        self._workspaces[capacity].put(ws)  # not after an exception: an interrupted search leaves its tables full

    def _take_workspace(self, capacity: int):
        """A workspace of the pool (give it back to self._workspaces[capacity]), or a new one."""
        pool = self._workspaces.setdefault(capacity, queue.SimpleQueue())  # streams may differ in capacity
        try:
            return pool.get_nowait()
        except queue.Empty:
            return self._cpu.new_workspace(capacity)

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
        yield links._replace(beam=np.float32(beam), interval=np.int64(interval))
        pool.put(links)  # (not after an exception)

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
        yield memo
        self._lm_memos.put(memo)  # not after an exception: an interrupted step may leave an entry half written

    # ------------------------------------------------------------------ streams

    def open_stream(self, boosts, rescorer, settings, capacity, lattice=None) -> CpuStream:
        """A stream's search state: its start token and the start's epsilon closure.
        boosts: the stream's BoostTables (one row); capacity: the decoder's batch.Capacity;
        lattice: (lattice beam, prune interval) when the stream keeps its lattice."""
        from wfst.kernels import cpu
        from wfst.kernels import lattice as kl

        context = None
        phrases = boosts.phrases[0]
        if self._slots.no_context is None:  # what slots without a context hold (of the types the others hold)
            self._slots.no_context = contexts.context(rescorer, [NO_PHRASES])
            self._rescoring = rescorer is not None
        if rescorer is not None and phrases.num_states <= 1 and boosts.weight_spread == 0:
            context = self._slots.no_context  # (rescored alone: one Context for all, which every slot holds)
        elif rescorer is not None or phrases.num_states > 1:
            context = contexts.context(rescorer, [phrases], boosts.weight_spread)
        word_costs = boosts.word_costs(0, self.num_words) if boosts.boosted(0) else None
        own_memo = None
        if context is not None and phrases.num_states > 1:  # phrase steps are this stream's own
            own_memo = cpu.new_memo(_PHRASE_LM_MEMO_SLOTS if rescorer is not None else _PHRASE_MEMO_SLOTS)
        links = None
        if lattice is not None:
            # (a stream grows its links as it goes: it starts from the default at most, whatever the
            # decoder's capacity grew to)
            size = min(capacity.lattice_links, LINKS_PER_TOKEN * capacity.tokens)
            links = self._slots.spare_links(capacity.tokens) or kl.new_links(size, capacity.tokens, *lattice)
            links = kl.typed(kl.with_room(links, size, size, capacity.tokens, 64)._replace(beam=lattice[0],
                                                                                         interval=lattice[1]))
        state = CpuStream(self._slots, context, own_memo, word_costs, links, settings, capacity.tokens,
                          self.graph.tokens.num_columns)
        # (rescored alone, a stream's context is the one every slot holds: it starts as the others do)
        plain = (context is None or context is self._slots.no_context) and word_costs is None and lattice is None
        if plain and self._plain_start is not None and len(self._plain_start[0]) <= state.capacity:
            for mine, start in zip(state.tl, self._plain_start):  # (its tokens' fields, not n; the hash slots they
                mine[:len(start)] = start  # name were emptied after the first: the next frame empties them anyway)
            state.n = len(self._plain_start[0])
            return state
        while True:
            with self._stream_memo(state) as memo, self._workspace(state.capacity) as ws:
                if links is None:  # (its own memo, if any, is read from the slot)
                    shared = memo if memo is not None and state.memo is None else self._slots.no_memo
                    n, overflow = self._begin_slot(self.layout, ws, shared, self._slots.table(), state.slot)
                else:
                    ws = ws._replace(tl=state.tl)
                    n, overflow = cpu.begin(self.layout, word_costs, context, memo, ws, links)
                    if not overflow:
                        cpu.release(ws, n)
                if not overflow:
                    state.n = n
                    if plain:
                        self._plain_start = tuple(a[:n].copy() for a in state.tl[:6])
                    return state
                _clean(ws)
            if links is not None and links.count[0] == len(links.src):
                links = state.links = kl.typed(kl.with_room(links, 2 * len(links.src), 0, 0, 0))
            else:
                state.grow(None)

    def advance(self, states: list, chunks: list) -> int:
        """Decode each stream's chunk (NumPy (T, V) float32) on the thread pool.  Streams of
        one token capacity are searched by cpu.advance_streams without the GIL, one call per
        thread: the threads take them one by one, dearest first, from a shared counter.
        Returns the tokens that survived pruning, summed over the chunks' frames."""
        if not states:
            return 0
        if len(states) == 1:  # a stream alone, a server's usual call: no grouping
            x = chunks.x if isinstance(chunks, JoinedChunks) else chunks[0]
            return self._advance_alone(states[0], x) if len(x) else 0
        lengths = chunk_lengths(chunks)
        if 0 not in lengths and len(set(map(_CAPACITY, states))) == 1:
            groups = [_Group(states, chunks, lengths)]  # the usual call: a decoder's streams share a capacity
        else:
            by_capacity = {}
            for i, (state, T) in enumerate(zip(states, lengths)):
                if T:
                    by_capacity.setdefault(state.capacity, []).append(i)
            groups = [_Group([states[i] for i in group], [chunks[i] for i in group], [lengths[i] for i in group])
                      for group in by_capacity.values()]
        if not groups:  # no frames to search
            return 0
        self._slots.generation += 1  # the kernels may replace any stream's arrays
        survivors = []  # of the streams whose frame overflowed, from there on, as the threads add them
        threads = min(self.num_threads, sum(len(g.which) for g in groups))
        memos, typed_memos = self._memos_for(threads)

        def run(t):
            held = _Held(self)
            try:
                for group in groups:
                    self._advance_group(group, held.space, memos[t], survivors)
            finally:
                held.close()

        if threads <= 1:
            run(0)
        elif numba_pool_threads() >= threads and self._pool_guard.usable():
            for group in groups:
                self._advance_in_numba_pool(group, threads, memos, typed_memos, survivors)
        else:
            for group in groups:
                self._cpu.work_order(self._slots.numbers, group.which, group.offsets, group.order)
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool, self._pool_pid = ThreadPoolExecutor(self.num_threads - 1), os.getpid()
            futures = [self._pool.submit(run, t) for t in range(1, threads)]
            try:
                run(0)  # this thread takes work too
            finally:
                for future in futures:
                    future.result()
        for group in groups:
            self._flagged(group, group.states)
        return sum(survivors) + sum(int(g.counts[1]) for g in groups)

    def _flagged(self, group: _Group, states: list) -> None:
        """What the search flagged of the group's streams (states): those whose tokens all
        died, and those due a commit."""
        if group.counts[2]:
            for k in np.flatnonzero(group.flags & (C.DIED | C.COMMIT_DUE)):
                if group.flags[k] & C.DIED:
                    states[k].dead = True
                if group.flags[k] & C.COMMIT_DUE:
                    states[k].commit(self.graph, self._meeting())

    def _advance_alone(self, state: CpuStream, x: np.ndarray) -> int:
        """advance() of one stream: its group of one, kept from call to call."""
        group = state.group_for(x)
        self._slots.generation += 1
        ws = self._take_workspace(group.capacity)
        memo = self._memos_for(1)[0][0]
        survivors = 0
        try:
            k, done, beam = self._search_group(group, ws, memo)
            if k >= 0:  # a frame overflowed
                held = _Held(self)
                try:
                    survivors = self._after_overflow(group, k, ws, held.space, memo, done, beam)
                finally:
                    held.close()
        finally:
            self._workspaces[group.capacity].put(ws)
            group.states = group.chunks = group.x = None  # (the stream holds the group)
        self._flagged(group, [state])
        return survivors + int(group.counts[1])

    def _memos_for(self, threads: int):
        """The memos of a call on `threads` threads, one per thread, as a list and as a typed
        list (the same memos): those of the rescoring LM's steps, or, without rescoring, a
        memo no stream reads.  The LM's memos are the offline decodes' (_memo's pool: they
        stay warm from call to call, and a decoder that does both holds no more of them);
        the decoder's lock keeps a decode and an advance() from using them at once."""
        if self._thread_memos is None or len(self._thread_memos[0]) < threads:
            memos = [self._slots.no_memo] * threads
            if self._rescoring:
                memos = []
                for _ in range(threads):
                    try:
                        memos.append(self._lm_memos.get_nowait())
                    except queue.Empty:
                        memos.append(self._cpu.new_memo(_LM_MEMO_SLOTS))
                for memo in memos:
                    self._lm_memos.put(memo)
                self._memo_bytes = max(self._memo_bytes, memos[0].table.nbytes)
            self._thread_memos = memos, self._typed_list(memos)
        return self._thread_memos

    def _typed_list(self, items: list):
        """A typed list of the items (made by compiled code that Numba caches: see cpu.typed_list)."""
        typed = self._cpu.typed_list(items[0])
        for i, item in enumerate(items[1:], 1):
            self._cpu.list_put(typed, i, item)
        return typed

    def _count_steps(self, gained: np.ndarray) -> None:
        """Add what a search's memos' counters gained to the backend's (in atomic steps: the
        streams' searches add to them in place, cpu.StreamTable.steps)."""
        with self._counts_lock:
            self._cpu.add_steps(self._counts, gained)

    def _advance_in_numba_pool(self, group: _Group, threads: int, memos, typed_memos, survivors: list) -> None:
        """The group's streams on `threads` threads of Numba's pool (cpu.advance_streams_parallel),
        thread t with memos[t] (typed_memos: the same in a typed list); a stream whose frame
        overflowed goes on alone on this thread, in a larger workspace."""
        slots = self._slots
        key = (group.capacity, threads)
        arrays = self._thread_spaces.get(key)
        if arrays is None:  # (kept from call to call: an allocation costs µs, a call's search tens)
            spaces = [self._cpu.new_workspace(group.capacity) for _ in range(threads)]
            arrays = self._thread_spaces[key] = (self._typed_list(spaces), spaces, np.zeros((threads, 3), np.int64),
                                                 np.zeros(threads, np.float32))
        typed_spaces, spaces, stops, beams = arrays  # (the same workspaces: Python reads the plain list)
        room = self._walk_room(group)
        walks = self._walk_scratch(threads, room) if room else self._no_walks
        with numba_threads(threads):
            while group.counts[0] < len(group.order):
                overflowed, idle = self._advance_parallel(
                    self.layout, group.settings, typed_spaces, typed_memos, slots.table(), group.which, group.x,
                    group.offsets, group.order, group.flags, group.counts, stops, beams, walks, slots.rows)
                if len(group.order) >= 4 * threads:  # (fewer streams leave threads idle by themselves)
                    self._pool_guard.judge(idle)
                if not overflowed:
                    break
                held = _Held(self)
                for t in np.flatnonzero(stops[:, 0] >= 0):
                    survivors.append(self._after_overflow(group, int(stops[t, 0]), spaces[t], held.space, memos[t],
                                                          int(stops[t, 1]), float(beams[t])))
                held.close()  # (not after an exception: an interrupted search leaves its tables full)

    def _advance_group(self, group: _Group, space, memo, survivors: list) -> None:
        """This thread's share of the group's streams (one token capacity): one
        cpu.advance_streams call with this thread's memo, more only where a frame overflows:
        that stream goes on alone in a larger workspace (its survivors from there on added to
        `survivors`), and the thread takes the next."""
        while True:
            ws = space(group.capacity)
            k, done, beam = self._search_group(group, ws, memo)
            if k < 0:
                return
            survivors.append(self._after_overflow(group, k, ws, space, memo, done, beam))

    def _walk_room(self, group: _Group) -> int:
        """The backpointers a thread's scratch needs room for to walk the partials asked of the
        group's streams after their chunks (twice the most stored, and more: most chunks fit),
        or 0 when none was asked."""
        if not self._slots.partials_asked:  # (a decoder whose partials are never asked reads no numbers)
            return 0
        numbers = self._slots.numbers[group.which]
        return 2 * int(numbers[:, C.S_STORED].max()) + 4096 if numbers[:, C.S_PARTIAL].any() else 0

    def _search_group(self, group: _Group, ws, memo):
        """cpu.advance_streams of the group's streams in workspace ws, on this thread (the
        partials asked of them walked in this thread's MeetingScratch)."""
        slots = self._slots
        room = self._walk_room(group)
        walks = self._meeting().at_least(room) if room else (self._no_walks[0, 0], self._no_walks[1, 0])
        return self._advance_streams(self.layout, group.settings, ws, memo, slots.table(), group.which, group.x,
                                     group.offsets, group.order, group.flags, group.counts, *walks, slots.rows)

    def _after_overflow(self, group: _Group, k: int, ws, space, memo, done: int, beam: float) -> int:
        """Stream k of the group overflowed a frame in workspace ws after `done` frames of its
        chunk: it goes on from the frame's survivors in a larger workspace (its steps in
        `memo`, the memo of the group's call, or its own).  Returns the survivors of pruning
        from there on."""
        state = group.states[k]
        if group.flags[k] & C.BACKPOINTERS_FULL:
            _backpointers_full()
        state.overflowed(ws, bool(group.flags[k] & C.LINKS_FULL))
        _clean(ws)
        memo = _memo_of(state, memo)
        with self._counted(memo):
            return self._advance_one(state, group.chunks[k], space, memo, done, beam)

    def _advance_one(self, state: CpuStream, chunk: np.ndarray, space, memo, t: int, beam: float) -> int:
        """The rest of the stream's chunk (its log-probs appended already) from frame t on,
        which overflowed: its survivors, pruned with this adaptive beam, were kept
        (CpuStream.overflowed).  space(capacity): a workspace of that capacity; memo: the
        stream's memo.  Returns the survivors of pruning over the frames searched."""
        from wfst.kernels import lattice as kl

        T = len(chunk)
        total = 0
        while True:
            ws = state.resumed(space(state.capacity))._replace(tl=state.tl)
            trace = state.trace
            lat = state.links
            if lat is not None:  # room for what storing the chunk's frames can add (links grow on overflow)
                lat, grown = kl.room_for_chunk(lat, state.stored, state.capacity, state.frames - state.base, T - t)
                lat = kl.typed(lat)
                if grown:
                    state.links = lat
            (status, done, n, ns, beam, prev, arc, stored, fallbacks, survivors, keep, relative,
             dead) = self._cpu.advance_stream(
                self.layout, state.word_costs, state.context, memo, chunk[t:], T - t, state.settings, ws,
                state.n, state.ns, np.float32(beam), trace, state.frames - state.base, state.stored, lat)
            if len(prev) != len(trace.prev):
                state.trace = trace._replace(prev=prev, arc=arc)
            state.n, state.ns, state.stored = n, ns, stored
            state.frames += done
            state.fallbacks += fallbacks
            state.survivors += survivors
            total += survivors
            if status == C.OK:
                break
            if status == C.MEMORY_OUT:
                _backpointers_full()
            state.overflowed(ws, status == C.LINK_OVERFLOW)  # again: go on from its survivors
            _clean(ws)
            t += done
        trailing, voiced = self._cpu.trailing_blanks(keep, state.tl.prev, state.tl.arc, state.trace.prev,
                                                     state.trace.arc, state.trace.steps, state.frames - state.base,
                                                     self.layout.ilabel, state.settings.blank_ilabel, state.trail_memo)
        state.set_endpoint_readings(trailing, voiced, relative)
        state.dead = dead
        if state.stored >= state.next_commit:
            state.commit(self.graph, self._meeting())  # (this thread's scratch: overflows commit on the pool's)
        return int(total)

    def _meeting(self) -> MeetingScratch:
        """This thread's scratch for meeting points (a stream whose frame overflowed commits
        on the thread that searched it)."""
        scratch = getattr(self._local, "meeting", None)
        if scratch is None:
            scratch = self._local.meeting = MeetingScratch()
        return scratch

    def stream_partials(self, states: list) -> list:
        """Per stream: (word ids of the best path so far, their frames, how many of them are
        stable).  A stream's partial walked by the search of its last chunk is read from its
        row (cpu.advance_streams: asking for one asks the next chunk's search to walk it);
        several others are walked on the threads of Numba's pool together; what a stream's
        Ledger asks beyond them, one by one."""
        g, slots, words = self.graph, self._slots, self._cpu.slot_partial_words

        def alone(state):  # (each slot is read in the compiled call: boxing its arrays here costs µs)
            return lambda *since_and_scratch: words(slots.list, state.slot, slots.numbers, g.final, self.layout.olabel,
                                                    *since_and_scratch)

        if len(states) == 1:  # (partial(): a stream's numbers and row read as lists, not gathered)
            state = states[0]
            slots.numbers[state.slot, C.S_PARTIAL] = 1
            slots.partials_asked = True
            head, numbers = slots.rows[state.slot, :C.P_HEAD].tolist(), slots.numbers[state.slot].tolist()
            if _walked(head, numbers):
                c, width = head[C.P_WORDS], (slots.rows.shape[1] - C.P_HEAD) // 2
                row = slots.rows[state.slot]
                return [state.partial_found(row[C.P_HEAD:C.P_HEAD + c].tolist(),
                                            row[C.P_HEAD + width:C.P_HEAD + width + c].tolist(), *head[1:3])]
            return [state.partial(numbers[C.S_N], numbers[C.S_STORED], self._meeting(), alone(state))]
        which = np.fromiter(map(_SLOT, states), np.int64, len(states))
        slots.numbers[which, C.S_PARTIAL] = 1  # (the next chunk's search walks them)
        slots.partials_asked = True
        stale = np.flatnonzero(~slots.walked(which))
        if len(stale) > 1:
            self._walk_together(which[stale])
        head, numbers = slots.rows[which, :C.P_HEAD], slots.numbers[which]
        walked = slots.walked(which).tolist()
        counts, width = numbers[:, (C.S_N, C.S_STORED)].tolist(), (slots.rows.shape[1] - C.P_HEAD) // 2
        most = max(int(head[:, C.P_WORDS].max(initial=0)), 0)  # (the rows' words as lists: those in use)
        found = head.tolist()
        ids = slots.rows[which, C.P_HEAD:C.P_HEAD + most].tolist()
        frames = slots.rows[which, C.P_HEAD + width:C.P_HEAD + width + most].tolist()
        scratch, out = self._meeting(), []
        for k, state in enumerate(states):
            if walked[k]:  # (the usual case: the row holds what partial() would find)
                c, stable, meet = found[k][:3]
                out.append(state.partial_found(ids[k][:c], frames[k][:c], stable, meet))
            else:
                out.append(state.partial(*counts[k], scratch, alone(state)))
        return out

    def _walk_together(self, which: np.ndarray) -> None:
        """cpu.slots_partial_words of the stream slots `which` on the threads of Numba's pool,
        into their rows, where the pool would help (two threads and streams at least)."""
        threads = min(self.num_threads, len(which))
        if threads < 2 or numba_pool_threads() < threads or self._pool_guard.resting:
            return
        slots = self._slots
        scratch = self._walk_scratch(threads, int(slots.numbers[which, C.S_STORED].max()))
        with numba_threads(threads):
            self._cpu.slots_partial_words(slots.list, which, slots.numbers, self.layout.final, self.layout.olabel,
                                          scratch, slots.rows, np.zeros(1, np.int64))

    def _walk_scratch(self, threads: int, stored: int) -> np.ndarray:
        """meeting_point's scratch for at least `threads` threads walking partials of up to
        `stored` backpointers: scratch[:, t] is thread t's (depth, meet), all -1 (see
        MeetingScratch); kept from call to call, one array of them all (a kernel entry takes
        at most 15 parameters)."""
        have = self._partial_scratch
        if have is None or have.shape[1] < threads or have.shape[2] < stored:
            size = max(stored, 2 * (0 if have is None else have.shape[2]))
            have = self._partial_scratch = np.full((2, max(threads, 2), size), -1, np.int32)
        return have

    def finish_stream(self, state: CpuStream):
        """The stream's last step: (status, TracedPath of the rest of the path, the
        committed PathPart before it)."""
        lat, part = state.links, None
        with self._workspace(state.capacity) as ws:
            self._slots.generation += 1  # the kernel replaces the stream's arrays
            args = (self._slots.contexts, ws, self._slots.list, state.slot, self._slots.numbers)
            if lat is None:
                graph = self.graph
                status, reached_final, held, arcs, at, read, *sums = self._finish_slot(
                    self.layout, graph.weight, graph.nextstate, *args, self._blank)
                part = PathPart.of_sums(sums)
            else:  # (room for the last step's tokens: storing them cannot overflow)
                from wfst.kernels import lattice as kl

                lat = kl.typed(kl.with_room(lat, 0, state.stored + state.n, 0, 0))
                status, arcs, at, read, reached_final, final_gids, final_costs, held = \
                    self._cpu.finish_slot_lattice(self.layout, *args, lat, self._blank)
        if status != C.OK:
            return status, None, state.prefix
        raw = None if lat is None else RawLattice.of(lat, held.trace.steps[:state.frames + 2], final_gids,
                                                      final_costs, reached_final)
        path = TracedPath(arcs, at, read, bool(reached_final), state.survivors, state.fallbacks, raw, part)
        state.close()
        self._slots.keep_spare(state.capacity, held, lat, state.stored)  # (the raw lattice holds copies)
        return status, path, state.prefix

    @contextlib.contextmanager
    def _stream_memo(self, state: CpuStream):
        """The stream's memo (its own with phrases, else one of the pool), its counters
        added to the backend's."""
        with contextlib.nullcontext(state.memo) if state.memo is not None else self._memo(state.context) as memo:
            with self._counted(memo):
                yield memo

    @contextlib.contextmanager
    def _counted(self, memo):
        """What a search does in `memo` (or None) meanwhile, added to the backend's counters."""
        if memo is None:
            yield
            return
        before = memo.counts.copy()
        yield
        self._count_steps(memo.counts - before)
        self._memo_bytes = max(self._memo_bytes, memo.table.nbytes)


def _backpointers_full():
    """A stream's backpointers reached MAX_BACKPOINTERS (a lattice stream of hours, which
    commits nothing, or live paths that never meet and grew that long): refused, not
    searched on from no survivors."""
    raise DecoderMemoryError(f"a stream's backpointers outgrew {C.MAX_BACKPOINTERS:,}, the most a search holds, "
                             f"with nothing committed: end streams at their endpoints")


def _nbytes(slot) -> int:
    """The bytes of a cpu.StreamSlot's arrays (field by field: a generic walk of its nested
    tuples took ~40 µs of a stream's finish)."""
    t = slot.trace
    return (sum(map(_NBYTES, slot.tl)) + t.prev.nbytes + t.arc.nbytes + t.steps.nbytes + t.survivors.nbytes
            + slot.word_costs.nbytes + slot.logp.nbytes + slot.blanks.nbytes + slot.reads.nbytes)


_NBYTES = operator.attrgetter("nbytes")


def _links_bytes(links, stored: int) -> int:
    """The bytes of a finished stream's lattice links (kernels.lattice.Links) that its lattice
    filled: its links (6 arrays), its stored backpointers (3) and the per-token and per-step
    rows; the pages it touched, but for the unpruned links of its widest frame.  (Its
    buffer has room for 16 links a token slot: ~16 MiB of address space at max_active
    7,000, of which a demo utterance fills ~60 KiB.)"""
    return 24 * int(links.count[0]) + 12 * stored + links.first.nbytes + links.block.nbytes


_NO_COSTS = np.empty(0, np.float32)  # a StreamSlot's word costs without a boost
_NEVER = np.iinfo(np.int64).max  # a stream's next_commit where it never commits


def _walked(head: list, numbers: list) -> bool:
    """Whether a stream slot's row holds its partial as Ledger.partial would find it (its
    row's head and its numbers as lists): walked at its numbers as they are now, its words
    fitting the row, from tokens (the search has some), PARTIAL_OK."""
    return (head[C.P_FRAMES] == numbers[C.S_FRAMES] and head[C.P_BASE] == numbers[C.S_BASE]
            and head[C.P_SINCE] == numbers[C.S_STABLE_AT] and head[C.P_WORDS] >= 0 and numbers[C.S_N] > 0
            and head[C.P_STATUS] == C.PARTIAL_OK)


_NUMBA_POOL = None  # threads of Numba's pool that may search streams (0: none); see numba_pool_threads


def numba_pool_threads() -> int:
    """How many threads of Numba's pool can search streams in one parallel region: its size
    when the threading layer is safe to enter from several Python threads at once (TBB or
    OpenMP; the workqueue layer aborts the process then), else 0 (the streams go on a
    pool of Python threads)."""
    global _NUMBA_POOL
    if _NUMBA_POOL is None:
        try:
            import numba
            from numba.np.ufunc import parallel

            parallel._launch_threads()
            _NUMBA_POOL = numba.config.NUMBA_NUM_THREADS if numba.threading_layer() in ("tbb", "omp") else 0
        except Exception:  # no layer loads: the Python threads do it
            _NUMBA_POOL = 0
    return _NUMBA_POOL


@contextlib.contextmanager
def numba_threads(threads: int):
    """The calling thread's Numba pool threads set to `threads` meanwhile (set before the
    call: set in a parallel region, it kept the region's code out of Numba's cache)."""
    import numba

    before = numba.get_num_threads()
    if before != threads:
        numba.set_num_threads(threads)
    try:
        yield
    finally:
        if before != threads:
            numba.set_num_threads(before)


def _forked() -> None:
    global _NUMBA_POOL
    _NUMBA_POOL = 0  # GNU OpenMP's pool does not survive a fork: a child that entered it would hang


os.register_at_fork(after_in_child=_forked)


def _clean(ws) -> None:
    """Empty the hash tables of a workspace whose search stopped early (an overflow leaves
    keys behind): a stream takes workspaces from the pool as they are."""
    ws.ht.key[:] = C.EMPTY_KEY
    ws.sg.key[:] = C.EMPTY_KEY


class DirectCall:
    """A Numba function called through its compiled entry point, without the dispatcher's
    typing of every argument (6 of advance_streams' 8 µs a call: its workspace alone is 30
    arrays, and a stream's chunk of 8 frames searches in tens of µs).  The first `fixed`
    arguments are objects reused from call to call (a workspace, the graph, the slots):
    their types are known once their identity is, and they are held here so that no other
    object takes their id.  The arguments at `checked` (the caller's input) must be
    writable, aligned, C-contiguous NumPy arrays of the first call's dtypes, or the call
    goes through the dispatcher; the others are the backend's own arrays, made with the
    first call's types every time, or Python ints (int64)."""

    def __init__(self, dispatcher, fixed: int, checked: tuple[int, ...]):
        self.dispatcher, self.fixed, self.checked = dispatcher, fixed, checked
        self._entries = {}  # ids of the fixed arguments -> (them, the checked ones' types, entry point)

    @staticmethod
    def _plain(a) -> bool:
        return type(a) is np.ndarray and a.flags.c_contiguous and a.flags.writeable and a.flags.aligned

    def __call__(self, *args):
        key = tuple(map(id, args[:self.fixed]))
        entry = self._entries.get(key)
        if entry is not None and all(self._plain(args[i]) and (args[i].dtype, args[i].ndim) == t
                                     for i, t in zip(self.checked, entry[1])):
            return entry[2](*args)
        result = self.dispatcher(*args)
        if all(type(a) is int or self._plain(a) for a in args[self.fixed:]):
            compiled = self.dispatcher.overloads.get(tuple(self.dispatcher.typeof_pyval(a) for a in args))
            if compiled is not None:
                if len(self._entries) >= 64:  # objects made anew each call: hold no more of them
                    self._entries.clear()
                self._entries[key] = (args[:self.fixed], tuple((args[i].dtype, args[i].ndim) for i in self.checked),
                                      compiled.entry_point)
        return result


class PoolGuard:
    """Whether a call may search on Numba's pool.  A parallel region ends when its last
    thread does, the others spinning meanwhile: where other processes keep the cores busy,
    a thread descheduled in a region makes the whole call wait for the scheduler to run it
    again, milliseconds where the region's work takes a fraction of one (the character
    graph's streams ran at 5-40% of the Python threads' throughput so, whose waits sleep).
    A region whose threads sat idle for more than half its time is a stall; 3 stalls among
    the last 8 regions judged, and the calls go on Python threads for `pause` calls, twice
    as many each time the stalls come back within 8 regions of a retry."""

    FIRST_PAUSE, MAX_PAUSE = 256, 1 << 16

    def __init__(self):
        self.recent = collections.deque(maxlen=8)  # stalled or not, of the last regions judged
        self.pause = self.FIRST_PAUSE
        self.resting = 0  # calls left on Python threads
        self.retried = False  # the regions since the last pause ended are not yet 8

    def usable(self) -> bool:
        if self.resting:
            self.resting -= 1
            if not self.resting:
                self.recent.clear()
                self.retried = True
            return False
        return True

    def judge(self, idle_share: float) -> None:
        """One region: the share of its threads' time that they sat idle."""
        self.recent.append(idle_share > 0.5)
        if sum(self.recent) >= 3:
            self.pause = min(2 * self.pause, self.MAX_PAUSE) if self.retried else self.FIRST_PAUSE
            self.resting, self.retried = self.pause, False
            self.recent.clear()
        elif self.retried and len(self.recent) == self.recent.maxlen:
            self.retried = False


class _Held:
    """What one thread of CpuBackend.advance holds while it searches: a workspace per
    capacity, given back by close()."""

    def __init__(self, backend: CpuBackend):
        self.backend = backend
        self.spaces = {}

    def space(self, capacity: int):
        ws = self.spaces.get(capacity)
        if ws is None:
            ws = self.spaces[capacity] = self.backend._take_workspace(capacity)
        return ws

    def close(self) -> None:
        for capacity, ws in self.spaces.items():
            self.backend._workspaces[capacity].put(ws)


def _memo_of(state, lm_memo):
    """The memo a stream's context steps go in: none without a context, its own (phrases),
    or lm_memo, its thread's memo of the rescoring LM's steps."""
    if state.context is None:
        return None
    return state.memo if state.memo is not None else lm_memo


class StreamSlots:
    """The arrays of every live stream (a cpu.StreamSlot each) in one Numba typed list, its
    context, its own memo and its lattice's links in three more (`no_context`, `no_memo` and
    `no_links` where it has none), and its numbers in one array (`numbers[slot]`, fields
    constants.S_*; `relative[slot]`: its final relative cost), with `steps`, the backend's
    counters of context steps, so that one cpu.advance_streams call reaches a thread's share
    of them.  A stream's slot is given back when it is finished (its arrays are dropped then) or
    garbage-collected (they are dropped when the slot is taken again: the lists never hold
    more than the most streams that lived at once)."""

    def __init__(self, steps: np.ndarray):
        from wfst.kernels import cpu
        from wfst.kernels import lattice as kl

        self.steps = steps
        self.list = self.contexts = self.memos = self.links = None
        self.no_context = None  # a groups.Context of the backend's streams' types (the backend makes it)
        self.no_memo = cpu.new_memo(1)
        self.no_links = kl.new_links(0, 0, 0.0, 1)
        self.numbers = np.zeros((0, C.STREAM_FIELDS), np.int64)
        self.relative = np.zeros(0, np.float64)
        self.rows = np.zeros((0, C.P_HEAD + 2 * _PARTIAL_WORDS), np.int32)  # partials walked (constants.P_*)
        self.generation = 0  # advanced before each kernel call that may replace a slot's arrays
        self.partials_asked = False  # whether a partial was ever asked (else no call looks for walks to do)
        self._free = queue.SimpleQueue()  # safe to put into from a finalizer
        self._held = []  # per slot: whether its context, memo or links are a stream's (not the no_* ones)
        self._table = None  # the cpu.StreamTable of the lists and arrays above, made again when one is replaced
        self._spares, self._spare_links, self._spare_capacity, self._spare_bytes = [], [], 0, 0  # see keep_spare

    def keep_spare(self, capacity: int, arrays, links=None, stored: int = 0) -> None:
        """Keep a finished stream's arrays (a cpu.StreamSlot of this token capacity) and its
        lattice's links (or None; stored: the stream's backpointers) for the next streams to
        open: fresh arrays cost page faults and the backpointers' growth, as much as
        searching a chunk of 8 frames (a burst of 128 streams opened at once ran ~3% slower
        with half of them fresh; 128 streams that keep lattices, whose links are megabytes
        each, made 26,000 page faults a wave).  A pool, as a server's decoder keeps one: a
        stream opened takes a spare where there is one, so live streams and spares together
        are never more than the most streams that lived at once (whose arrays the process
        held then); up to SPARE_BYTES in all, and of the largest capacity only: the
        decoder's, which grows to every stream's, and which streams open at.  Links count
        as what the stream's lattice held (_links_bytes): their buffer is sized for the
        widest frames, and counted whole it kept the links and arrays of only 61 of 512
        character streams, the others made fresh by the next wave (~130,000 page faults)."""
        self._spare_for(capacity)
        if capacity != self._spare_capacity:
            return
        for kept, pool in ((arrays, self._spares), (links, self._spare_links)):
            if kept is not None:
                size = _nbytes(kept) if kept is arrays else _links_bytes(kept, stored)
                if self._spare_bytes + size <= SPARE_BYTES:
                    pool.append((kept, size))
                    self._spare_bytes += size

    def spare(self, capacity: int):
        """A finished stream's arrays of this token capacity (keep_spare), as a new stream's,
        or None."""
        arrays = self._take_spare(capacity, self._spares)
        if arrays is not None:
            arrays.trace.steps[:] = 0  # (as new_trace's)
            arrays.trace.survivors[:] = 0
        return arrays

    def spare_links(self, capacity: int):
        """A finished stream's lattice links (kernels.lattice.Links) of this token capacity
        (keep_spare), emptied, or None."""
        links = self._take_spare(capacity, self._spare_links)
        if links is not None:
            links.count[:] = 0
            links.block[:] = 0  # (as new_links's)
        return links

    def _take_spare(self, capacity: int, pool: list):
        self._spare_for(capacity)
        if capacity != self._spare_capacity or not pool:
            return None
        kept, size = pool.pop()
        self._spare_bytes -= size
        return kept

    def _spare_for(self, capacity: int) -> None:
        if capacity > self._spare_capacity:  # the decoder's capacity grew: the older spares fit no stream
            self._spares, self._spare_links, self._spare_capacity, self._spare_bytes = [], [], capacity, 0

    def table(self):
        """The cpu.StreamTable the kernels read (the same object while its parts are: a
        compiled call knows its fixed arguments by identity, cpu_backend.DirectCall)."""
        if self._table is None:
            from wfst.kernels import cpu

            self._table = cpu.StreamTable(self.list, self.contexts, self.memos, self.links, self.numbers,
                                          self.relative, self.steps)
        return self._table

    def take(self, slot, context, memo, links) -> int:
        """A slot holding `slot`'s arrays, `context` (None: none), `memo` (its own memo of
        context steps, or None) and `links` (its lattice's, or None), its numbers zero but
        S_CONTEXT and S_LATTICE (the caller holds the decoder's lock: no search runs)."""
        from wfst.kernels import cpu
        from wfst.kernels import lattice as kl

        kind = C.NO_CONTEXT if context is None else C.SHARED_MEMO if memo is None else C.OWN_MEMO
        context = self.no_context if context is None else context
        memo = self.no_memo if memo is None else memo
        owns = context is not self.no_context or memo is not self.no_memo or links is not None
        items = (slot, context, memo, self.no_links if links is None else kl.typed(links))
        put = cpu.list_put  # (typed lists changed from Python compile their methods in each process)
        try:
            i = self._free.get_nowait()
            put(self.list, i, slot)
            if self._held[i] or owns:
                for items_of, item in zip((self.contexts, self.memos, self.links), items[1:]):
                    put(items_of, i, item)  # (else already there: a typed list's set costs µs)
        except queue.Empty:
            i = len(self._held)
            if self.list is None:
                self.list, self.contexts, self.memos, self.links = map(cpu.typed_list, items)
                self._table = None
            else:
                for items_of, item in zip((self.list, self.contexts, self.memos, self.links), items):
                    put(items_of, i, item)
            self._held.append(False)
            if i >= len(self.numbers):
                rows = max(16, 2 * len(self.numbers))
                numbers = np.zeros((rows, self.numbers.shape[1]), np.int64)
                numbers[:len(self.numbers)] = self.numbers
                relative = np.zeros(rows, np.float64)
                relative[:len(self.relative)] = self.relative
                walked = np.zeros((rows, self.rows.shape[1]), np.int32)
                walked[:len(self.rows)] = self.rows
                self.numbers, self.relative, self.rows = numbers, relative, walked
                self._table = None
        self._held[i] = owns
        self.numbers[i] = 0
        self.numbers[i, C.S_CONTEXT] = kind
        self.numbers[i, C.S_LATTICE] = links is not None
        self.relative[i] = np.inf
        self.rows[i, C.P_FRAMES] = -1  # (no partial walked)
        return i

    def walked(self, which: np.ndarray) -> np.ndarray:
        """_walked of each slot, in one pass."""
        rows, numbers = self.rows[which, :C.P_HEAD], self.numbers[which]
        return ((rows[:, C.P_FRAMES] == numbers[:, C.S_FRAMES]) & (rows[:, C.P_BASE] == numbers[:, C.S_BASE])
                & (rows[:, C.P_SINCE] == numbers[:, C.S_STABLE_AT]) & (rows[:, C.P_WORDS] >= 0)
                & (numbers[:, C.S_N] > 0) & (rows[:, C.P_STATUS] == C.PARTIAL_OK))

    def drop_own(self, i: int) -> None:
        """Slot i's context, memo and links let go (its stream was finished), where they were
        its own (a typed list's item set from Python costs tens of µs: a Context is typed)."""
        from wfst.kernels import cpu

        if not self._held[i]:
            return
        cpu.list_put(self.contexts, i, self.no_context)
        cpu.list_put(self.memos, i, self.no_memo)
        cpu.list_put(self.links, i, self.no_links)
        self.numbers[i, C.S_LATTICE] = 0
        self._held[i] = False

    def give_back(self, i: int) -> None:
        self._free.put(i)


class _Group:
    """Streams searched together: their chunks end to end (chunk k is x[offsets[k]:
    offsets[k + 1]]), their slots, the flags cpu.advance_streams writes per stream, the
    order its calls take them in (cpu.work_order) and its counts."""

    def __init__(self, states: list, chunks: list, lengths: list[int]):
        k = len(chunks)
        self.states, self.chunks = states, chunks
        self.capacity, self.settings = states[0].capacity, states[0].settings
        self.x = chunks.x if isinstance(chunks, JoinedChunks) else chunks[0] if k == 1 else np.concatenate(chunks)
        # one array (a µs each saved on a chunk of one stream)
        ints = np.zeros(4 * k + 1 + C.GROUP_COUNTS, np.int64)
        self.offsets, self.which = ints[:k + 1], ints[k + 1:2 * k + 1]
        self.flags, self.order = ints[2 * k + 1:3 * k + 1], ints[3 * k + 1:4 * k + 1]
        self.counts = ints[4 * k + 1:]  # streams taken, survivors, streams flagged COMMIT_DUE or DIED
        if k == 1:
            self.offsets[1], self.which[0] = len(chunks[0]), states[0].slot
            return
        ints[1:2 * k + 1] = [*itertools.accumulate(lengths), *map(_SLOT, states)]  # offsets, which
        self.order[:] = range(k)  # one thread's (several: cpu.work_order)

    def again(self, state, chunk: np.ndarray) -> _Group:
        """This group of one stream for its next chunk."""
        self.states, self.chunks, self.x = [state], [chunk], chunk
        self.offsets[1] = len(chunk)
        self.counts[:] = 0
        return self


def _number(field: int):
    """A CpuStream attribute kept in its row of StreamSlots.numbers."""

    def get(self):
        return int(self._slots.numbers[self.slot, field])

    def put(self, value):
        self._slots.numbers[self.slot, field] = value

    return property(get, put)


def _array(field: str):
    """A CpuStream attribute kept in its cpu.StreamSlot (setting it replaces the slot)."""

    def get(self):
        return getattr(self.arrays, field)

    def put(self, value):
        from wfst.kernels import cpu

        self._arrays = self.arrays._replace(**{field: value})
        cpu.list_put(self._slots.list, self.slot, self._arrays)

    return property(get, put)


class CpuStream(Ledger):
    """One stream's CPU search state between calls: the tokens of its last frame (its own
    token list; the rest of a workspace is shared), its backpointers from `base` on (the
    steps before were committed into `prefix`), and what of the log-probs of frames base..
    a path after the commit point may still read (kernels.cpu.KeptReads).  Its arrays and numbers live in the
    backend's StreamSlots at `slot` (the properties below read and write them there)."""

    n = _number(C.S_N)
    ns = _number(C.S_NS)
    stored = _number(C.S_STORED)
    frames = _number(C.S_FRAMES)
    base = _number(C.S_BASE)
    rows_from = _number(C.S_ROWS_FROM)
    fallbacks = _number(C.S_FALLBACKS)
    survivors = _number(C.S_SURVIVORS)
    trailing = _number(C.S_TRAILING)
    trail_memo = property(lambda self: self._slots.numbers[self.slot, C.S_TRAIL:C.S_TRAIL + C.TRAIL_FIELDS])
    partial_memo = property(lambda self: self._slots.numbers[self.slot, C.S_PMEMO:C.S_PMEMO + C.PMEMO_FIELDS])
    next_commit = _number(C.S_NEXT_COMMIT)
    _stable_at = _number(C.S_STABLE_AT)  # (the Ledger's; the search reads it to walk a partial)
    tl = _array("tl")
    trace = _array("trace")
    logp = _array("logp")
    blanks = _array("blanks")
    reads = _array("reads")

    def __init__(self, slots: StreamSlots, context, memo, word_costs, links, settings, capacity: int,
                 num_columns: int):
        from wfst.kernels import cpu

        self.context, self.memo, self.word_costs, self.settings = context, memo, word_costs, settings
        self._slots = slots
        spare = slots.spare(capacity)
        costs = _NO_COSTS if word_costs is None else word_costs
        if spare is None:
            none = np.empty(0, np.float32)
            arrays = cpu.StreamSlot(cpu.new_tokens(capacity), cpu.new_trace(64, capacity), costs,
                                    np.empty((0, num_columns), np.float32), none, none)
        else:
            arrays = spare._replace(word_costs=costs)
        self.slot = slots.take(arrays, context, memo, links)
        self._release = weakref.finalize(self, slots.give_back, self.slot)
        self._arrays, self._generation = arrays, slots.generation  # (what the typed list holds: no read back)
        self._alone = None  # its _Group when a call advances it alone
        super().__init__(capacity)
        if links is not None:
            self.next_commit = _NEVER  # a lattice holds every backpointer

    @property
    def links(self):
        """Its lattice's links (kernels.lattice.Links; the search grows them), or None."""
        from wfst.kernels import cpu
        from wfst.kernels import lattice as kl

        if not self._slots.numbers[self.slot, C.S_LATTICE]:
            return None
        return kl.typed(cpu.list_get(self._slots.links, self.slot))

    @links.setter
    def links(self, links) -> None:
        from wfst.kernels import cpu
        from wfst.kernels import lattice as kl

        cpu.list_put(self._slots.links, self.slot, kl.typed(links))

    def overflowed(self, ws, links_full: bool) -> None:
        """A frame overflowed in workspace ws: its survivors are kept, and the search goes on
        with twice the room for links (links_full: the lattice's filled) or twice the token
        capacity."""
        from wfst.kernels import lattice as kl

        if not links_full:
            self.grow(ws)
            return
        lat = self.links
        if lat.count[0] < len(lat.src):  # (room for storing the chunk's frames is made before it)
            raise WfstError("internal error: a stream's lattice had no room to store a frame's tokens")
        self.keep_survivors(ws)
        self.links = kl.with_room(lat, 2 * len(lat.src), 0, 0, 0)

    def group_for(self, chunk: np.ndarray) -> _Group:
        """The stream's group of one for this chunk (made once: a group costs µs, and a
        stream's chunk of 8 frames searches in tens)."""
        if self._alone is None or self._alone.capacity != self.capacity:
            self._alone = _Group([self], [chunk], [len(chunk)])
        return self._alone.again(self, chunk)

    @property
    def arrays(self):
        """The stream's cpu.StreamSlot, read from the typed list once (reading it boxes a
        dozen arrays) until a kernel may have replaced it (StreamSlots.generation)."""
        if self._generation != self._slots.generation:
            from wfst.kernels import cpu

            self._arrays, self._generation = cpu.list_get(self._slots.list, self.slot), self._slots.generation
        return self._arrays

    @property
    def relative_cost(self) -> float:
        return float(self._slots.relative[self.slot])

    @relative_cost.setter
    def relative_cost(self, value: float) -> None:
        self._slots.relative[self.slot] = value

    @property
    def prefix(self):
        return self._prefix

    @prefix.setter
    def prefix(self, prefix) -> None:
        self._prefix = prefix
        self._slots.numbers[self.slot, C.S_LAST_VOICED] = prefix.last_voiced

    def close(self) -> None:
        """Give the slot back (the stream was finished: cpu.finish_slot took its arrays out)."""
        if self._release.detach() is not None:
            self._arrays, self._generation = None, -1
            self._slots.drop_own(self.slot)  # (where it held its own context, memo or links)
            self._slots.give_back(self.slot)

    def kept_reads(self):
        from wfst.kernels import cpu

        return cpu.KeptReads(self.logp, self.rows_from, self.blanks, self.reads)

    def grow(self, ws) -> None:
        """Twice the token capacity; ws: the workspace whose frame overflowed (its survivors
        carry over), None before the first frame."""
        from wfst.kernels import cpu

        self.capacity *= 2
        self.tl = cpu.new_tokens(self.capacity)
        self._survivors = None
        if ws is not None:
            self.keep_survivors(ws)

    def keep_survivors(self, ws) -> None:
        """Keep the survivors of the frame that overflowed in ws (resumed() puts them back)."""
        self._survivors = tuple(a[:self.ns].copy() for a in ws.sv[:4])

    def resumed(self, ws):
        """ws (of the new capacity) with the overflowed frame's survivors copied in."""
        for mine, theirs in zip(ws.sv[:4], self._survivors):
            mine[:self.ns] = theirs
        self._survivors = None
        return ws

    def commit(self, graph, scratch: MeetingScratch) -> None:
        """Ledger.commit_arrays on this stream's own arrays, and what it keeps of the
        log-probs before the meeting point dropped (kernels.cpu.KeptReads).  Where it
        commits nothing (the paths do not meet, or not late enough), the backpointers that
        no live path passes are dropped instead (kernels.cpu.compact_stream, their reads
        with them): with runs of blanks folded, what a long silence keeps then is a
        backpointer for each live token's run, and its read once the search dropped the
        rows of its frames (kernels.cpu.drop_rows)."""
        from wfst.kernels import cpu

        base, kept = self.base, self.frames - self.base
        done = self.commit_arrays(graph, self.tl, self.n, self.trace, self.stored, scratch)
        if done is not None:
            self.stored = done[1]
            if self.drop_committed_reads(base, self.frames - self.rows_from):
                self.rows_from = self.base
            return
        self.stored = cpu.compact_stream(self.tl, self.n, self.trace, self.stored, kept, self.reads)
        self.compacted(self.stored)
        self._slots.rows[self.slot, C.P_FRAMES] = -1  # (its partial, walked by the search, names the old numbers)
