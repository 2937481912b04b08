"""Batched Viterbi beam search over a CTC decoding graph (TLG) on the CPU or a CUDA GPU.

    g = wfst.load_graph("build/demo/char_compact")
    dec = wfst.Decoder(g, beam=16.0, max_active=7000, device="cpu")
    results = dec.decode(log_probs, lengths)        # (B, T, V) float32 log-posteriors
    results[0].words, results[0].cost, results[0].word_frames

Path cost = sum over frames of -acoustic_scale * logp[t, token] (+ blank_penalty on blank
frames) + the graph's arc and final costs, in natural-log units.  The search is Kaldi's
FasterDecoder made batched and order-independent (docs/design.md); with a wide beam it
finds OpenFST's shortest path of (emissions ∘ TLG).

The Decoder validates a batch, hands its backend (wfst.cpu_backend, wfst.cuda_backend) a
BatchPlan, grows the capacity of utterances whose search overflowed and decodes them
again, and turns the backend's paths into results.
"""
from __future__ import annotations

import dataclasses
import math
import operator
import os
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from wfst.kernels import constants as C
from wfst.kernels.groups import settings_of

from .batch import BatchPlan, Capacity
from .config import DecoderConfig, usable_cores
from .errors import (
    DecodeInputError,
    DecoderMemoryError,
    MissingFileError,
    OptionError,
    SearchStateError,
    WfstError,
    interruptible,
    interrupts_held,
)
from .graph import Graph, check_searchable, load_graph
from .inputs import (
    JoinedChunks,
    batched_chunks,
    check_batch,
    check_log_probs,
    chunk_faults,
    chunk_lengths,
    joined_chunks,
    warn_not_log_probs,
)
from .lattice import Lattice, PathScorer
from .memory import USABLE_SHARE
from .results import DecodeResult, DecodeStats, blank_label, no_path, path_result
from .stream import EndpointConfig, Partial, Stream

_DEAD, _CAPACITY = operator.attrgetter("dead"), operator.attrgetter("capacity")
_DECODER, _FINISHED, _STATE, _PHRASED = (operator.attrgetter(a) for a in ("_decoder", "finished", "_state", "_phrased"))
_FLOAT32 = np.dtype(np.float32)  # (a dtype compares with a dtype at half the cost of with np.float32)
RESCORE_MODES = ("on_the_fly", "lattice")


class Decoder:
    """Decode batches of CTC log-posteriors with one graph and one config.

    `graph` is a Graph or a graph directory; keywords build a DecoderConfig (or pass one,
    with keywords overriding its fields).  device="cpu" runs Numba code on a thread pool,
    one utterance per thread; device="cuda" runs the Numba-CUDA kernels on CuPy arrays.

    rescore_lm: a big LM (ARPA file, prepared once into a store file beside it, or a store
    file from wfst.lm.prepare_lm) that replaces the graph's LM score on the fly at word
    arcs; graph_lm: the LM the graph was built with (default: the ARPA file graph.json
    names, if it is still there and unchanged).  rescore_mode="lattice" rescores after the
    search instead: the search runs on the graph alone, keeping each utterance's word
    lattice (lattice_beam), and the lattice's paths are rescored with the big LM (Kaldi's
    lattice rescoring); the results are the rescored lattice's best paths, their lattices
    the rescored ones (a stream's partial results are the search's, before rescoring).

    stream(), advance() and finish() decode live streams chunk by chunk (wfst.stream),
    exactly as decode() would decode each stream's whole audio.

    A Decoder decodes one batch at a time: calls from several threads wait their turn.
    """

    def __init__(self, graph: Graph | str | os.PathLike, config: DecoderConfig | None = None, *,
                 device: str = "cpu", rescore_lm=None, graph_lm=None, rescore_mode: str = "on_the_fly",
                 **options):
        if not isinstance(graph, (Graph, str, os.PathLike)):
            raise OptionError(f"graph must be a wfst.Graph or the path of a graph directory or FST; got "
                              f"{type(graph).__name__}")
        if config is not None and not isinstance(config, DecoderConfig):
            raise OptionError(f"config must be a wfst.DecoderConfig or None (options go as keywords: "
                              f"Decoder(graph, beam=..., device=...)); got {config!r}")
        if not isinstance(graph, Graph):
            graph = load_graph(graph)
        if config is None:
            config = DecoderConfig(**options)
        elif options:
            config = config.with_options(**options)
        if device not in ("cpu", "cuda"):
            raise OptionError(f"device={device!r}: must be 'cpu' or 'cuda'")
        if graph.num_arcs >= 2**31 - 1:
            raise OptionError(f"{graph!r}: more than 2^31 - 1 arcs; arc ids must fit in 31 bits")
        check_searchable(graph)
        self.graph = graph
        self.config = config
        self.device = device
        if rescore_mode not in RESCORE_MODES:
            raise OptionError(f"rescore_mode={rescore_mode!r}: must be one of {', '.join(map(repr, RESCORE_MODES))}")
        if rescore_mode == "lattice":
            if rescore_lm is None:
                raise OptionError("rescore_mode='lattice' rescores with a big LM: give rescore_lm=")
            if config.lattice_beam is None:
                raise OptionError("rescore_mode='lattice' rescores each utterance's word lattice: set lattice_beam "
                                  "(e.g. Decoder(..., lattice_beam=8.0))")
        if graph_lm is not None and rescore_lm is None:
            raise OptionError("graph_lm= is the graph's LM, which rescoring subtracts: give rescore_lm= too")
        self.rescorer = _rescorer(graph, rescore_lm, graph_lm) if rescore_lm is not None else None
        self.rescore_mode = rescore_mode
        # the LM the search itself rescores with (on the fly), or None: the lattices are rescored after it
        self._searched_lm = self.rescorer if rescore_mode == "on_the_fly" else None
        tokens = config.token_capacity or C.default_token_capacity(config.max_active)
        self._capacity = Capacity.initial(tokens, config.max_active, config.min_active)
        if self._searched_lm is not None:
            self._capacity = dataclasses.replace(self._capacity,
                                                 lm_cache=C.lm_cache_slots(self._searched_lm.big.num_arcs))
        blank = graph.tokens.blank_ilabel
        if blank is None and config.blank_penalty != 0:
            raise OptionError(f"blank_penalty={config.blank_penalty}: the graph's tokens have no blank to "
                              f"penalise")
        self._settings = settings_of(config, blank_label(graph), graph.tokens.num_columns)
        if device == "cuda":
            from .cuda_backend import CudaBackend

            self._backend = CudaBackend(graph, cuda_graphs=config.cuda_graphs)
        else:
            from .cpu_backend import CpuBackend

            self._backend = CpuBackend(graph, config.num_threads)
        self._lock = threading.Lock()  # one batch at a time: a batch-wide boost edits the CPU graph's weights
        self._opening = None  # [when, room]: the memory reading that stream() opens streams against
        self.stats = DecodeStats()

    def __repr__(self) -> str:
        return f"Decoder({self.graph!r}, {self.config}, device={self.device!r})"

    def __reduce__(self):  # (pickle's own error named a queue; a shallow copy shared this one's search state)
        raise SearchStateError("a Decoder holds its device's search state and cannot be pickled or copied: give worker "
                        "processes the Graph (it pickles) or its directory and make a Decoder in each")

    @interruptible
    def decode(self, log_probs, lengths=None, *, boost=None, nbest: int | None = None) -> list[DecodeResult]:
        """Decode a batch: log_probs (B, T, V) float32 natural-log posteriors, lengths (B,).

        boost: word -> reward (natural log; > 0 makes the word more likely) for the whole
        batch, or a list with one such mapping (or None) per utterance; keys with several
        words are phrases.  Boosted words that are not in the graph's vocabulary are warned
        about and listed in stats.boost_unknown.

        With a lattice_beam each result carries its word lattice (result.lattice, and word
        confidences from it); nbest=N also lists its N best distinct word sequences
        (result.nbest, DecodeResults, best first).
        """
        self.stats = DecodeStats()  # (a call that raises leaves none: not the call before's)
        self._check_nbest(nbest)
        with self._lock:
            start = time.perf_counter()
            plan = self._plan(log_probs, lengths, boost)
            lm_before, device_before = self._backend.counters(), self._backend.device_seconds
            paths, regrowths = self._search(plan)
            g, c, boosts = self.graph, self.config, plan.boosts
            results = [path_result(g, c, paths[b], int(plan.lengths[b]), boosts.maps[b], boosts.phrases[b],
                                   self._searched_lm) for b in range(len(plan.lengths))]
            if plan.lattice is not None:
                results = self._with_lattices(results, [paths[b].lattice for b in range(len(results))], [PathScorer(
                    g, c, int(plan.lengths[b]), boosts.maps[b], boosts.phrases[b], self._searched_lm)
                    for b in range(len(results))], nbest)
            frames = int(plan.lengths.sum())
            lm = self._backend.lm_report(lm_before, frames, self._searched_lm) or self._lattice_lm_report()
            self.stats = DecodeStats(len(results), frames, time.perf_counter() - start,
                                     sum(p.survivors for p in paths.values()) / frames if frames else 0.0,
                                     regrowths, sum(p.fallbacks for p in paths.values()), boosts.unknown, lm,
                                     self._backend.device_seconds - device_before,
                                     no_path(results, "utterance", plan.log_probs))
            return results

    def _check_nbest(self, nbest) -> None:
        if nbest is not None:
            if not isinstance(nbest, (int, np.integer)) or isinstance(nbest, bool) or nbest < 1:
                raise OptionError(f"nbest={nbest!r}: must be an integer >= 1")
            if self.config.lattice_beam is None:
                raise OptionError(f"nbest={nbest} needs a lattice: set lattice_beam (e.g. "
                                  f"Decoder(..., lattice_beam=8.0))")

    def _with_lattices(self, results: list[DecodeResult], raws: list, scorers: list, nbest: int | None):
        """Each result with its lattice (_with_lattice; a search that died has none), made on
        the decoder's threads (rescoring a lattice runs without the GIL): on one thread their
        share of a decode would grow with the threads (or the GPU) that search."""
        todo = [b for b, r in enumerate(results) if r.acoustic_cost < math.inf and raws[b] is not None]
        threads = min(self.config.num_threads or usable_cores(), len(todo))
        if self.rescore_mode == "lattice":
            self.rescorer.context  # (made once, before the threads read it)

        def one(b):
            return self._with_lattice(results[b], raws[b], scorers[b], nbest)

        if threads > 1:
            with ThreadPoolExecutor(threads) as pool:
                done = dict(zip(todo, pool.map(one, todo)))
        else:
            done = {b: one(b) for b in todo}
        return [done.get(b, r) for b, r in enumerate(results)]

    def _with_lattice(self, result: DecodeResult, raw, scorer, nbest: int | None) -> DecodeResult:
        lattice = Lattice(raw, scorer, result)
        if self.rescore_mode == "lattice":
            lattice, result = lattice.rescored(self.rescorer, self.config.lattice_beam)
        listed = tuple(lattice.nbest(nbest)) if nbest else ()
        result = dataclasses.replace(result, lattice=lattice)
        if listed and listed[0].word_ids == result.word_ids:
            listed = (result,) + listed[1:]  # the same path: the best path's own figures
        return dataclasses.replace(result, nbest=listed)

    # ------------------------------------------------------------------ streams

    @interrupts_held
    def stream(self, boost=None, *, endpoint: EndpointConfig | None = None) -> Stream:
        """A new live stream (see wfst.stream): its search state lives on this decoder's
        device until finish().  boost: word or phrase -> reward for this stream, as in
        decode(); endpoint: the endpoint rules (default: Kaldi's)."""
        from .boost import boost_tables

        if self.config.lattice_beam is not None and self.device == "cuda":
            raise OptionError(f"lattice_beam={self.config.lattice_beam}: streams on device='cuda' keep the best "
                              f"path only so far; stream on device='cpu', or without lattice_beam")
        if endpoint is not None and not isinstance(endpoint, EndpointConfig):
            raise OptionError(f"endpoint must be a wfst.EndpointConfig or None; got {type(endpoint).__name__}")
        boosts = boost_tables(None if boost is None else [boost], 1, self.graph, self.config.beam, stream=True)
        c = self.config
        need = self._backend.stream_bytes(self._capacity, c)
        available = self._room_to_open(need)
        if available is not None and need > available:  # as decode() says it, not numpy's MemoryError
            raise DecoderMemoryError(f"a stream needs about {need / 2**30:.2f} GiB of {self._backend.memory} memory "
                                     f"({self._capacity.tokens} token slots per frame, max_active={c.max_active}) "
                                     f"but {available / 2**30:.2f} GiB is available; lower max_active or "
                                     f"token_capacity")
        with self._lock:
            lattice = None if c.lattice_beam is None else (c.lattice_beam, c.prune_interval)
            state = self._backend.open_stream(boosts, self._searched_lm, self._settings, self._capacity,
                                              **({} if lattice is None else dict(lattice=lattice)))
            self._grow_to(state.capacity)
        return Stream(self, state, boosts.maps[0], boosts.phrases[0], endpoint or EndpointConfig(),
                      tuple(w for _, w in boosts.unknown))

    @interrupts_held
    def advance(self, streams, chunks, lengths=None) -> None:
        """Decode the next chunk of each stream in one batched step: chunks[i] is a (T_i, V)
        float32 array of log-posteriors (NumPy, torch or CuPy; T_i may be 0), or chunks is
        one (N, T, V) array, as a batched model gives them, and lengths (N,) the frames of
        each (all T when None).  Streams not given keep their state untouched.  Every input
        is checked before any stream moves."""
        self.stats = DecodeStats()  # (a call that raises leaves none: not the call before's)
        streams = self._check_streams(streams, "advance")
        # (passes of comprehensions: a stream's chunk of 8 frames searches in ~20 µs, and this
        # Python runs on one core while the others wait; one loop doing it all took ~0.7 µs a stream)
        V = self.graph.tokens.num_columns
        if getattr(chunks, "ndim", None) == 3:  # one array (its chunks are views, of a host copy for GPU data)
            arrays = batched_chunks(chunks, lengths, V, len(streams))
        else:
            if lengths is not None:
                raise DecodeInputError("advance(): lengths go with chunks given as one (N, T, V) array; a list of "
                                       "chunks has their lengths")
            if not hasattr(chunks, "__iter__") or isinstance(chunks, (str, bytes)):
                raise DecodeInputError(f"advance(): chunks must be a list of (T, V) arrays, one per stream, or one "
                                       f"(N, T, V) array; got {type(chunks).__name__}")
            one_array = getattr(chunks, "ndim", None) == 2
            chunks = list(chunks)
            if len(chunks) != len(streams):
                raise DecodeInputError(f"advance() got {len(streams)} streams but {len(chunks)} chunks"
                                       + (" (one (T, V) array is T chunks of a frame: give a list, [chunk])"
                                          if one_array else ""))
            arrays = joined_chunks(chunks, V) if self._backend.joins_chunks else None  # the usual call's, at once
            if arrays is None:
                arrays = [self._chunk(i, chunk) for i, chunk in enumerate(chunks)]
                for i, x in enumerate(arrays):
                    if x.ndim != 2 or x.shape[1] != V:
                        raise DecodeInputError(f"stream {i}: a chunk must have shape (T, V={V}) (V: the graph's "
                                               f"tokens, blank included); got shape {tuple(x.shape)}")
                    if x.dtype != _FLOAT32:
                        raise DecodeInputError(f"stream {i}: a chunk must be float32 log-posteriors; got {x.dtype}")
        if not isinstance(arrays, JoinedChunks):  # (joined: their values were checked)
            bad, above = chunk_faults(arrays)
            if bad is not None:
                raise DecodeInputError(f"stream {bad[0]}: chunk frame {bad[1]} {bad[2]}")
            if above is not None:
                warn_not_log_probs(f"stream {above[0]}, chunk frame {above[1]}", above[2])
        states = list(map(_STATE, streams))
        # the context steps' counters only where a stream has a context
        contextual = self._searched_lm is not None or any(map(_PHRASED, streams))
        with self._lock:  # checked again in turn: another thread may have finished one (a finished stream's
            if any(map(_FINISHED, streams)):  # state is replaced; nothing else about them can change meanwhile)
                self._check_streams(streams, "advance")
            moving, moved = states, arrays
            if any(map(_DEAD, states)):  # a stream whose tokens all died: later frames are counted, not kept
                for state, x in zip(states, arrays):
                    if state.dead:
                        state.idle += len(x)
                kept = [k for k, state in enumerate(states) if not state.dead]
                moving, moved = [states[k] for k in kept], [arrays[k] for k in kept]
            start, device_before = time.perf_counter(), self._backend.device_seconds
            lm_before = self._backend.counters() if contextual else None
            try:
                survivors = self._backend.advance(moving, moved)
            except BaseException:  # Ctrl-C, say: a stream moved part-way has no state to go on from
                for s in streams:
                    s._lost = "an advance() call that moved it stopped part-way (interrupted, or an error)"
                    s._final_rule, s.finished, s._state = None, True, _FinishedState(s.frames)
                raise
            if moving:
                self._grow_to(max(map(_CAPACITY, moving)))
            frames = sum(chunk_lengths(arrays))
            lm = self._backend.lm_report(lm_before, frames, self._searched_lm) if contextual else {}
            self.stats = DecodeStats(len(streams), frames, time.perf_counter() - start,
                                     survivors / frames if frames else 0.0, lm=lm,
                                     device_seconds=self._backend.device_seconds - device_before)

    @interrupts_held
    def finish(self, streams, *, nbest: int | None = None) -> list[DecodeResult]:
        """The streams' results, exactly as decode() gives them for the whole of each stream's
        frames (with a lattice_beam: their lattices; nbest=N: their N best word sequences);
        the streams take no more chunks.  stats: this call's (no frames searched; no_path:
        the streams whose tokens all died)."""
        self.stats = DecodeStats()  # (a call that raises leaves none: not the call before's)
        self._check_nbest(nbest)
        results = []
        start = time.perf_counter()
        with self._lock:  # checked in turn: another thread may be finishing one of them
            streams = self._check_streams(streams, "finish")
            lattices, scorers = [], []
            try:
                for s in streams:
                    status, path, prefix = self._backend.finish_stream(s._state)
                    if status == C.EPS_CYCLE:
                        raise WfstError("a stream's path loops: the graph has an epsilon cycle of zero or negative "
                                        "cost")
                    results.append(path_result(self.graph, self.config, path, s.frames, s._boost_map, s._phrases,
                                               self._searched_lm, prefix))
                    lattices.append(path.lattice)
                    scorers.append(PathScorer(self.graph, self.config, s.frames, s._boost_map, s._phrases,
                                              self._searched_lm))
                    s._final_rule = s.endpoint_rule
                    s.finished = True
                    s._state = _FinishedState(s.frames)
                if self.config.lattice_beam is not None:
                    results = self._with_lattices(results, lattices, scorers, nbest)
            except BaseException:
                for s in streams[:len(results)]:  # (their search states are gone, their results unfinished)
                    s._lost = "a finish() call that took its result stopped part-way"
                raise
            for s, r in zip(streams, results):
                s._result = r
            self.stats = DecodeStats(len(results), 0, time.perf_counter() - start, lm=self._lattice_lm_report(),
                                     no_path=no_path(results, "stream"))
        return results

    def _lattice_lm_report(self) -> dict:
        """stats.lm where the lattices are rescored after the search (which reads no LM): the
        big LM's host memory, as on the fly."""
        return dict(lm_bytes=self.rescorer.host_bytes) if self.rescore_mode == "lattice" else {}

    @interrupts_held
    def partials(self, streams) -> list[Partial]:
        """Each stream's partial() in one call: on device="cuda" their lanes are read back
        together (a transfer costs microseconds of host time, so one per stream would cost
        milliseconds a call with hundreds of streams)."""
        with self._lock:  # checked in turn: another thread may be finishing one
            streams = self._check_streams(streams, "partials")
            found = self._backend.stream_partials([s._state for s in streams])
        return [self._named(s, *f) for s, f in zip(streams, found)]

    @interrupts_held
    def _partial(self, s: Stream) -> Partial:
        with self._lock:  # checked in turn: another thread may be finishing it
            if s._lost:
                raise DecodeInputError(f"this stream was lost: {s._lost}; open a new one with Decoder.stream()")
            if s.finished:
                raise DecodeInputError("this stream was finished: its result came from Decoder.finish()")
            (found,) = self._backend.stream_partials([s._state])
        return self._named(s, *found)

    def _named(self, s: Stream, word_ids: tuple, word_frames: tuple, stable: int) -> Partial:
        if self.rescore_mode == "lattice":
            stable = 0  # finish() may choose any lattice path, not only the survivors' best ones
        table = self.graph.words
        named = s._stable_words  # (named once: a partial then costs the words since the last, not all of them)
        words = named + tuple(map(table.symbols.__getitem__ if table is not None else str, word_ids[len(named):]))
        s._stable_words = words[:stable]
        return Partial(words, word_ids, word_frames, stable, s.frames)

    def _chunk(self, i: int, chunk):
        """Stream i's chunk as the backend reads it, or the error that names the stream."""
        try:
            return self._backend.to_chunk(chunk, "a chunk")
        except DecodeInputError as e:
            raise DecodeInputError(f"stream {i}: {e}") from None

    def _check_streams(self, streams, call: str) -> list[Stream]:
        """The streams as a list, or a DecodeInputError that names the first fault."""
        if isinstance(streams, Stream) or not hasattr(streams, "__iter__"):
            raise DecodeInputError(f"{call}() takes a list of streams (e.g. [s]), not {streams!r}")
        streams = list(streams)
        # the usual call, in passes of map (no Python frame a stream: this runs on one core
        # while the others wait, ~1 µs a stream in a loop); a fault is then found one by one
        if len(streams) == 1:  # (a stream alone: its checks at once)
            s = streams[0]
            if type(s) is Stream and s._decoder is self and not s.finished:
                return streams
        elif not (set(map(type, streams)) - {Stream} or set(map(_DECODER, streams)) - {self}
                  or any(map(_FINISHED, streams)) or len(set(map(id, streams))) < len(streams)):
            return streams
        seen = set()
        for i, s in enumerate(streams):
            if not isinstance(s, Stream):
                raise DecodeInputError(f"{call}(): item {i} is a {type(s).__name__}, not a Stream from "
                                       f"Decoder.stream()")
            if s._decoder is not self:
                raise DecodeInputError(f"{call}(): stream {i} belongs to another Decoder")
            if s._lost:
                raise DecodeInputError(f"{call}(): stream {i} was lost: {s._lost}; open a new one with "
                                       f"Decoder.stream()")
            if s.finished:
                raise DecodeInputError(f"{call}(): stream {i} was finished (its result is stream.result); open a new "
                                       f"one with Decoder.stream()")
            if id(s) in seen:
                raise DecodeInputError(f"{call}(): stream {i} is given twice")
            seen.add(id(s))
        return streams

    def _grow_to(self, tokens: int) -> None:
        """New streams and batches start with the capacity a stream had to grow to."""
        c = self.config
        if tokens > self._capacity.tokens:
            bp = C.backpointers_per_frame(tokens, c.max_active, c.min_active)
            self._capacity = dataclasses.replace(self._capacity, tokens=tokens,
                                                 backpointers=max(self._capacity.backpointers, bp))

    # ------------------------------------------------------------------ a batch

    def _plan(self, log_probs, lengths, boost) -> BatchPlan:
        """Validate the batch and its boosts; the plan the backend searches."""
        from .boost import boost_tables

        x = self._backend.to_batch(log_probs)
        lengths = check_batch(x, lengths, self.graph.tokens.num_columns)
        boosts = boost_tables(boost, len(lengths), self.graph, self.config.beam)
        if self._searched_lm is not None:
            for b, automaton in enumerate(boosts.phrases):
                if self._searched_lm.big.num_states * automaton.num_states >= 2**31:
                    raise DecodeInputError(f"utterance {b}: {automaton.num_states} phrase-automaton states x "
                                           f"{self._searched_lm.big.num_states} LM states do not fit a token's 31-bit "
                                           f"context; boost fewer phrases per utterance")
        check_log_probs(self._backend.input_faults(x, lengths), x, lengths)
        lattice = None if self.config.lattice_beam is None else (self.config.lattice_beam, self.config.prune_interval)
        return BatchPlan(x, lengths, boosts, self._searched_lm, self._settings, self._capacity, lattice)

    def _search(self, plan: BatchPlan):
        """The best path of every utterance ({utterance: TracedPath}; one of no frames: the
        start's epsilon path to a final state, as Kaldi's) and how many were decoded again:
        an utterance whose search overflowed is searched again with the capacity it
        overflowed grown (Capacity.grown), until it fits; one whose backpointers outgrew its
        share of the memory (MEMORY_OUT) is searched again alone, and refused if it still
        does not fit."""
        todo, alone = list(range(len(plan.lengths))), []
        paths, regrowths = {}, 0
        while todo or alone:
            groups = [(group, self._share(room, len(group))) for group, room in self._groups(todo, plan.lengths)]
            if alone:
                groups.append(([alone[0]], self._room()))
                alone = alone[1:]
            outcomes = []
            for group, room in groups:
                outcomes += [(b, room, len(group), o) for b, o in zip(group, self._backend.search(plan, group, room))]
            again = []
            for b, room, searched_with, outcome in outcomes:
                if outcome.status == C.EPS_CYCLE:
                    raise WfstError(f"utterance {b}: the graph has an epsilon cycle of zero or negative cost; "
                                    f"the best path cannot be traced back")
                if outcome.status == C.OK:
                    paths[b] = outcome.path
                elif outcome.status == C.MEMORY_OUT:
                    if searched_with == 1 or self._backend.concurrent(searched_with) == 1:
                        self._out_of_memory(b, int(plan.lengths[b]), room, outcome)
                    alone.append(b)
                    regrowths += 1
                else:
                    again.append(b)
            if again:
                self._capacity = self._capacity.grown(o.status for *_, o in outcomes)
                plan = dataclasses.replace(plan, capacity=self._capacity)
                regrowths += len(again)
            todo = sorted(again)
        return paths, regrowths

    def _share(self, room: int | None, n: int) -> int | None:
        """The memory each of n utterances searched at once may take of `room`."""
        return None if room is None else room // self._backend.concurrent(n)

    def _out_of_memory(self, b: int, frames: int, room: int | None, outcome) -> None:
        limit = (f"{C.MAX_BACKPOINTERS:,} backpointers, the most a search holds," if room is None else
                 f"the {room / 2**30:.2f} GiB of {self._backend.memory} memory its search may take")
        what, lower = ("backpointers", "beam")
        if self.config.lattice_beam is not None:
            what, lower = ("backpointers and lattice links", "beam, or lattice_beam")
        raise DecoderMemoryError(
            f"utterance {b} ({frames} frames): its {what} outgrew {limit} at frame {outcome.frame} "
            f"({outcome.stored / max(outcome.frame, 1):,.0f} backpointers a frame so far, max_active="
            f"{self.config.max_active}); lower max_active or {lower}, or decode shorter utterances")

    def _room(self) -> int | None:
        """The memory a search's workspaces may take (None: unknown): memory.USABLE_SHARE of
        what is free."""
        free = self._backend.free_bytes()
        return None if free is None else int(USABLE_SHARE * free)

    def _room_to_open(self, need: int) -> int | None:
        """_room() for a stream about to open, `need` bytes: the memory is read again after
        0.1 s, and in between each stream opened counts as taking `need` (reading it costs
        some 40 µs, a sixth of opening a stream)."""
        now = time.monotonic()
        if self._opening is None or now - self._opening[0] > 0.1:
            self._opening = [now, self._room()]
        available = self._opening[1]
        if available is not None and need <= available:
            self._opening[1] = available - need
        return available

    def _groups(self, todo: list[int], lengths: np.ndarray) -> list[tuple[list[int], int | None]]:
        """The utterances in groups whose workspaces fit the backend's free memory, each with
        that memory (None: unknown): all at once where they fit, else longest first (a
        group's workspace is sized by its longest utterance) in groups as large as fit.
        Refuses an utterance that fits alone no more."""
        if not todo:
            return []
        available = self._room()
        if available is None:
            return [(todo, None)]
        c = self.config
        links = self._capacity.lattice_links if c.lattice_beam is not None else 0

        def need(n, frames):
            return self._backend.concurrent(n) * self._backend.search_bytes(self._capacity, frames, links)

        if need(len(todo), int(lengths[todo].max())) <= available:
            return [(todo, available)]
        order, groups = sorted(todo, key=lambda b: -int(lengths[b])), []
        while order:
            frames = int(lengths[order[0]])
            n = available // need(1, frames)
            if n == 0:
                raise DecoderMemoryError(
                    f"utterance {order[0]} ({frames} frames) alone needs about {need(1, frames) / 2**30:.2f} GiB of "
                    f"{self._backend.memory} memory ({self._capacity.tokens} token slots per frame, max_active="
                    f"{c.max_active}) but {available / 2**30:.2f} GiB is available; lower max_active or "
                    f"token_capacity, or decode shorter utterances")
            groups.append((order[:n], available))
            order = order[n:]
        return groups


def _rescorer(graph: Graph, rescore_lm, graph_lm):
    """The Rescorer of a big LM and the graph's own LM (found through graph.json unless given)."""
    from .files import sha256_file
    from .lm import Rescorer, open_lm

    if graph.words is None:
        raise OptionError(f"{graph!r} has no words.txt: rescoring needs the graph's word symbols")
    big = open_lm(rescore_lm)
    lm = graph.info.get("inputs", {}).get("lm", {})
    if graph_lm is None:
        path = lm.get("path")
        if not path or not os.path.isfile(path):
            raise MissingFileError(path or "(none recorded)", "the graph's LM (graph.json inputs.lm.path)",
                                   "not found; pass graph_lm= the ARPA file or LM store the graph was built with")
        if lm.get("sha256") and sha256_file(Path(path)) != lm["sha256"]:
            raise OptionError(f"{path} changed since the graph was built (sha256 differs from graph.json); "
                              f"pass graph_lm= the LM the graph was built with")
        graph_lm = path
    graph_lm = open_lm(graph_lm)
    made_from = graph_lm.source.get("sha256")  # of the ARPA file a store was prepared from
    if lm.get("sha256") and made_from and made_from != lm["sha256"]:  # (the same LM may be gzipped, say)
        warnings.warn(f"graph_lm= {graph_lm.source.get('path')} is not the file the graph was built with (its sha256 "
                      f"differs from graph.json's inputs.lm, {lm.get('path')}): unless it holds the same n-grams, "
                      f"every rescored cost is off by the difference", stacklevel=3)
    return Rescorer(big, graph_lm, graph.words, graph.olabel)


class _FinishedState:
    """What a finished stream keeps: its length."""

    dead, idle = False, 0

    def __init__(self, frames: int):
        self.frames = frames
