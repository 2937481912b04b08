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
        self.layout = InterleavedGraph(states, arcs, graph.final, np.int64(graph.start))
        self.num_words = int(graph.olabel.max(initial=0)) + 1  # every output label indexes a cost vector
        self._word_arcs = None
        self._lm_memos = queue.SimpleQueue()  # see _memo
        self._workspaces = queue.SimpleQueue()  # cpu.Workspace, one per utterance searched at a time
        self._counts = np.zeros(C.STEP_COUNTERS, np.int64)  # the memos' counters, summed over searches
        self._counts_lock = threading.Lock()
        self._memo_bytes = 0  # of the largest memo in use

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
            with self._memo(context) as memo, self._workspace(plan.capacity.tokens) as ws:
                before = None if memo is None else memo.counts.copy()
                status, arcs, steps, reached_final, per_frame, fallbacks = cpu.search(
                    self.layout, word_costs, context, memo, plan.log_probs[b], T, plan.settings, ws)
                if memo is not None:
                    with self._counts_lock:
                        self._counts += memo.counts - before
                        self._memo_bytes = max(self._memo_bytes, memo.table.nbytes)
            if status != 0:
                return Outcome(int(status))
            frames, columns = emitting_reads(self.graph, arcs, steps)
            logp = plan.log_probs[b][frames, columns]
            return Outcome(0, TracedPath(arcs, steps, logp, bool(reached_final), int(per_frame.sum()),
                                         int(fallbacks)))

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

        try:
            ws = self._workspaces.get_nowait()
        except queue.Empty:
            ws = None
        if ws is None or ws.tl.state.shape[0] != capacity:
            ws = cpu.new_workspace(capacity)
        try:
            yield ws
        finally:
            self._workspaces.put(ws)

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
