"""Streams: chunk-by-chunk decoding equals decoding the whole utterance; partial results,
endpointing, bounded state and bad input."""
from __future__ import annotations

import dataclasses
import math
import os

import numba
import numpy as np
import pytest
from decoding import demo_emissions, dying, one_array, random_log_probs, random_tlg
from wfst.graphs import compile_graph
from wfst.kernels import constants as C

import wfst
from wfst import cpu_backend, synthetic
from wfst.decoder import DecodeInputError, Decoder
from wfst.errors import LogProbsWarning, OptionError
from wfst.ledger import COMMIT_AT as _COMMIT_AT
from wfst.lm import truncate_arpa
from wfst.results import blank_label, path_part
from wfst.stream import KALDI_RULES, EndpointConfig, EndpointRule


def stream_all(dec, x, lengths, seed, boost=None, check_partials=None, nbest=None, batched=False):
    """Decode every utterance as a stream: random chunk sizes (0 frames upward), streams
    advanced in random subsets so that they join and leave between calls.  batched: each
    call's chunks as one array (one_array) of one chunk size."""
    rng = np.random.default_rng(seed)
    boosts = boost if isinstance(boost, list) else [boost] * len(lengths)
    streams = [dec.stream(boost=b) for b in boosts]
    pos = [0] * len(lengths)
    while any(p < n for p, n in zip(pos, lengths)):
        pick = [i for i in range(len(lengths)) if pos[i] < lengths[i] and rng.random() < 0.6]
        chunks = []
        size = int(rng.choice([0, 1, 2, 5, 17, 40]))
        for i in pick:
            k = size if batched else int(rng.choice([0, 1, 2, 5, 17, 40]))
            chunks.append(x[i, pos[i]:min(pos[i] + k, int(lengths[i]))])
            pos[i] = min(pos[i] + k, int(lengths[i]))
        rng.shuffle(order := np.arange(len(pick)))
        chunks = [chunks[j] for j in order]
        if batched and chunks:
            dec.advance([streams[pick[j]] for j in order], *one_array(chunks, size))
        else:
            dec.advance([streams[pick[j]] for j in order], chunks)
        if check_partials is not None:
            for i in pick:
                check_partials(i, streams[i].partial())
    return dec.finish(streams, nbest=nbest)


def same_results(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert (a.words, a.word_frames, a.reached_final, a.num_frames) == (b.words, b.word_frames, b.reached_final,
                                                                          b.num_frames)
        assert a.cost == pytest.approx(b.cost, abs=1e-5)
        assert a.acoustic_cost == pytest.approx(b.acoustic_cost, abs=1e-5)
        assert (a.boost_cost, a.rescore_cost) == pytest.approx((b.boost_cost, b.rescore_cost), abs=1e-5)
        assert np.array_equal(a.frame_tokens, b.frame_tokens)  # (what word times read: the prefix's kept)


def best_path_reads(state, graph, blank):
    """A CPU stream's best path after its commit point (kernels.cpu.partial_path's arcs and
    backpointers, runs of blanks folded) and path_reads of it (arcs, steps and log-probs,
    the runs unfolded).  graph: a Graph or the backend's layout (final, ilabel); blank:
    the blank's input label (results.blank_label)."""
    from wfst.kernels import cpu

    tr = state.trace
    arcs, gids, start, _ = cpu.partial_path(state.tl, state.n, graph.final, None, tr.prev, tr.arc, state.stored, -1)
    lead = tr.prev[gids[0]] if len(gids) and gids[0] >= 0 else start
    return arcs, gids, cpu.path_reads(graph.ilabel, arcs, gids, lead, tr.arc, tr.steps[:state.frames - state.base],
                                      state.base, state.frames, state.kept_reads(), blank)


def same_lattices(got, want):
    """A stream keeps the offline lattice exactly: the same links (tokens numbered alike),
    states, final costs, N-best lists and word confidences."""
    for a, b in zip(got, want):
        assert (a.lattice is None) == (b.lattice is None)
        if a.lattice is not None:
            mine, theirs = a.lattice._raw, b.lattice._raw
            for field in mine._fields:
                assert np.array_equal(getattr(mine, field), getattr(theirs, field)), field
            assert a.word_confidences == b.word_confidences
        assert [(h.words, h.cost) for h in a.nbest] == [(h.words, h.cost) for h in b.nbest]


@pytest.mark.parametrize("name, scales", [("char_compact", {}), ("bpe_compact", {}),
                                           ("char_compact", dict(acoustic_scale=0.7, blank_penalty=0.4))])
def test_streams_equal_offline_decoding_for_any_chunking(demo, demo_graphs, name, scales):
    path, kw = demo_graphs[name]
    g = wfst.load_graph(path)
    texts, x, lengths = demo_emissions(demo, g, kw, count=8, seed=4)
    lengths[5] = 0  # a stream given no frames: the start's epsilon path to a final state, as offline
    dec = Decoder(g, beam=12.0, max_active=600, num_threads=2, **scales)
    want = dec.decode(x, lengths)
    assert want[5].reached_final and want[5].words == ()
    finals = {}

    def check(i, partial):  # stable words never change: they are a prefix of every later partial
        prefix = partial.word_ids[:partial.stable]
        assert finals.get(i, ())[:len(prefix)] == prefix[:len(finals.get(i, ()))]
        finals[i] = prefix

    got = stream_all(dec, x, lengths, seed=1, check_partials=check)
    same_results(got, want)
    for i, prefix in finals.items():
        assert got[i].word_ids[:len(prefix)] == prefix


def test_streams_take_a_call_s_chunks_as_one_array(demo, demo_graphs):
    """Chunks given as one (N, T, V) array and their lengths, as a batched model gives them
    (NumPy, strided, torch): the same results as the list of their chunks; what lies past
    a chunk's length is never read (NaN there)."""
    path, kw = demo_graphs["bpe_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=6, seed=7)
    lengths[2] = 0
    dec = Decoder(g, beam=12.0, max_active=600, num_threads=2)
    want = dec.decode(x, lengths)
    same_results(stream_all(dec, x, lengths, seed=3, batched=True), want)
    streams = [dec.stream() for _ in range(3)]
    dec.advance(streams, np.repeat(x[:3, :4], 2, axis=1)[:, ::2], np.array([4, 4, 3]))  # (strided)
    dec.advance(streams, x[:3, 4:10], [6, 6, 6])
    list_form = [dec.stream() for _ in range(3)]
    dec.advance(list_form, [x[0, :4], x[1, :4], x[2, :3]])
    dec.advance(list_form, [x[0, 4:10], x[1, 4:10], x[2, 4:10]])
    same_results(dec.finish(streams), dec.finish(list_form))
    try:
        import torch
    except ImportError:  # (optional: the NumPy forms above are the test's)
        return
    streams = [dec.stream() for _ in range(3)]
    dec.advance(streams, torch.from_numpy(x[:3, :10].copy()))
    same_results(dec.finish(streams), dec.decode(x[:3, :10]))


@pytest.mark.parametrize("lattice_beam,context_beam,rescore_mode", [(None, None, "on_the_fly"),
                                                                    (4.0, None, "on_the_fly"),
                                                                    (None, 1.0, "on_the_fly"), (4.0, None, "lattice")])
def test_streams_with_boosts_phrases_fltop_and_rescoring(demo, tmp_path, lattice_beam, context_beam, rescore_mode):
    """Per-stream word boosts and phrases, FLToP and on-the-fly rescoring: as offline (with
    their lattices; with a context beam; with the lattices rescored after the search)."""
    small = truncate_arpa(demo / "lm.arpa", tmp_path / "lm2.arpa", 2)
    r = compile_graph(tmp_path / "g", tokens=demo / "chars_tokens.txt", word_boundary="|", lm=small,
                      topology="compact")
    g = wfst.load_graph(r.directory)
    texts = [t for t in (demo / "test.txt").read_text().splitlines() if t.strip()][:6]
    x, lengths = synthetic.from_texts(texts, g.tokens, word_boundary="|", seed=2, confusion=0.15, noise=1.5)
    words = texts[0].split()
    boosts = [{words[0]: 2.0}, None, {" ".join(words[:2]): 3.0, words[-1]: 1.0}, None, {words[1]: 1.5}, None]
    dec = Decoder(g, beam=10.0, max_active=400, token_top_n=12, num_threads=2, rescore_lm=demo / "lm.arpa",
                  lattice_beam=lattice_beam, prune_interval=5, context_beam=context_beam, rescore_mode=rescore_mode)
    lengths[3] = 0  # (the big LM's cost of the empty sentence)
    nbest = None if lattice_beam is None else 3
    want = dec.decode(x, lengths, boost=boosts, nbest=nbest)
    partials = []
    got = stream_all(dec, x, lengths, seed=3, boost=boosts, nbest=nbest,
                     check_partials=lambda i, p: partials.append((i, p)))
    same_results(got, want)
    same_lattices(got, want)
    for i, p in partials:  # stable words are a prefix of the final words; rescoring a lattice may change any
        assert got[i].word_ids[:p.stable] == p.word_ids[:p.stable]
        assert p.stable == 0 or rescore_mode != "lattice"
    assert rescore_mode == "lattice" or any(p.stable for _, p in partials)


@pytest.mark.parametrize("name", ["char_compact", "bpe_compact"])
def test_streams_keep_the_offline_lattices(demo, demo_graphs, name):
    """With a lattice_beam a stream keeps its word lattice, pruned every prune_interval frames
    whatever its chunks: finish() gives the offline lattice, N-best list and confidences,
    through token overflows and links that outgrow their room (it grows as the stream goes,
    as decode()'s does)."""
    path, kw = demo_graphs[name]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=6, seed=3)
    lengths[2] = 0
    dec = Decoder(g, beam=12.0, max_active=600, lattice_beam=5.0, prune_interval=7, token_capacity=64,
                  num_threads=2)
    room = dataclasses.replace(dec._capacity, links=256)
    dec._capacity = room
    want = dec.decode(x, lengths, nbest=4)
    assert dec.stats.regrowths > 0 and all(r.lattice for r in want)
    dec._capacity = room
    same_lattices(stream_all(dec, x, lengths, seed=2, nbest=4), want)
    got = stream_all(dec, x, lengths, seed=5, nbest=4)
    same_results(got, want)
    same_lattices(got, want)
    assert any(len(r.nbest) > 1 for r in got)  # lattices with alternatives, not best paths alone
    # a new stream starts from the default room at most, whatever the decoder's capacity grew to
    dec._capacity = dataclasses.replace(room, links=10**7)
    s = dec.stream()
    assert len(s._state.links.src) <= 16 * dec._capacity.tokens
    dec.finish([s])


def test_a_stream_that_overflows_grows_and_stays_exact(demo, demo_graphs):
    path, kw = demo_graphs["bpe_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=3, seed=6)
    dec = Decoder(g, beam=14.0, max_active=2000, token_capacity=16, num_threads=1)
    streams = [dec.stream() for _ in lengths]
    assert streams[0]._state.capacity >= 16
    want = Decoder(g, beam=14.0, max_active=2000, num_threads=1).decode(x, lengths)
    same_results(stream_all(dec, x, lengths, seed=5), want)
    assert dec._capacity.tokens > 16  # new streams start as large as a stream had to grow


def test_a_stream_advanced_alone_overflows_grows_and_stays_exact(demo, demo_graphs):
    """A call with one stream takes its own path (the stream's group of one, kept between
    calls); a frame that overflows there goes on in a larger workspace."""
    path, kw = demo_graphs["bpe_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=2, seed=7)
    dec = Decoder(g, beam=14.0, max_active=2000, token_capacity=16, num_threads=2)
    got = []
    for b, n in enumerate(lengths):
        s = dec.stream()
        for pos in range(0, int(n), 3):
            dec.advance([s], [x[b, pos:min(pos + 3, int(n))]])
        assert s._state.capacity > 16
        got += dec.finish([s])
    same_results(got, Decoder(g, beam=14.0, max_active=2000, num_threads=1).decode(x, lengths))


def test_streams_of_every_kind_in_one_batched_call(demo, demo_graphs):
    """Plain, word-boosted and phrase-boosted streams advanced together on 2 threads (in
    groups, one Numba call each, the phrase-boosted ones with their own memos) at a token
    capacity that overflows, read-only chunks among them, and a stream dropped unfinished
    whose slot a new stream takes: every stream as offline."""
    path, kw = demo_graphs["bpe_compact"]
    g = wfst.load_graph(path)
    texts, x, lengths = demo_emissions(demo, g, kw, count=7, seed=8)
    words = texts[0].split()
    boosts = [None, {words[0]: 2.0}, None, {" ".join(words[:2]): 3.0}, None, {words[1]: 1.5}, None]
    offline = Decoder(g, beam=12.0, max_active=900, num_threads=1)
    want = offline.decode(x, lengths, boost=boosts)
    dec = Decoder(g, beam=12.0, max_active=900, token_capacity=24, num_threads=2)
    dropped = dec.stream()
    dec.advance([dropped], [x[0, :10]])
    slot = dropped._state.slot
    del dropped  # unfinished: its slot is given back when it is collected
    streams = [dec.stream(boost=b) for b in boosts]
    assert slot in {s._state.slot for s in streams}
    frozen = x.copy()
    frozen.flags.writeable = False
    survivors = 0.0  # the calls' stats: tokens that survived pruning, as offline
    for t in range(0, int(lengths.max()), 7):
        live = [i for i in range(len(streams)) if lengths[i] > t]
        dec.advance([streams[i] for i in live],
                    [(frozen if i % 3 == 0 else x)[i, t:min(t + 7, int(lengths[i]))] for i in live])
        assert dec.stats.frames == sum(min(7, int(lengths[i]) - t) for i in live)
        survivors += dec.stats.tokens_per_frame * dec.stats.frames
    same_results(dec.finish(streams), want)
    assert survivors == pytest.approx(offline.stats.tokens_per_frame * offline.stats.frames)
    assert dec._capacity.tokens > 24


def _threads_of(numba_pool: bool, monkeypatch) -> None:
    """Streams on the threads of Numba's pool (skipped where it cannot take them), or on
    Python threads (as where its threading layer is not thread-safe, or in a forked child)."""
    if numba_pool and cpu_backend.numba_pool_threads() < 2:
        pytest.skip("Numba's pool has no thread-safe threading layer (TBB, OpenMP) or fewer than 2 threads here")
    if not numba_pool:
        monkeypatch.setattr(cpu_backend, "_NUMBA_POOL", 0)


@pytest.mark.parametrize("contexts", [False, True])
@pytest.mark.parametrize("numba_pool", [True, False])
def test_streams_on_two_threads_overflow_and_stay_exact(demo, demo_graphs, monkeypatch, numba_pool, contexts):
    """Streams on 2 threads, at a token capacity that overflows: in parallel regions of
    Numba's pool, or on Python threads where that pool cannot be used (its threading layer
    is not thread-safe, or the process was forked); without contexts, or rescored on the fly
    with phrase and word boosts on some (their steps in each thread's memo or their own).
    Every stream as offline, the calls' survivors too."""
    _threads_of(numba_pool, monkeypatch)
    path, kw = demo_graphs["bpe_compact"]
    g = wfst.load_graph(path)
    texts, x, lengths = demo_emissions(demo, g, kw, count=6, seed=9)
    boosts = [None] * len(lengths)
    options = dict(beam=12.0, max_active=900)
    if contexts:
        words = texts[0].split()
        boosts = [{" ".join(words[:2]): 3.0}, None, {words[1]: 1.5}, None, {" ".join(words[1:3]): 2.0}, None]
        options.update(rescore_lm=demo / "lm.arpa")
    offline = Decoder(g, **options, num_threads=1)
    want = offline.decode(x, lengths, boost=boosts)
    dec = Decoder(g, **options, token_capacity=24, num_threads=2)
    regions = []
    parallel = dec._backend._advance_parallel
    monkeypatch.setattr(dec._backend, "_advance_parallel", lambda *a: regions.append(1) or parallel(*a))
    streams = [dec.stream(boost=b) for b in boosts]
    survivors = 0.0
    numba.set_num_threads(1)  # the caller's setting: the regions take 2 threads and leave it as it was
    try:
        for t in range(0, int(lengths.max()), 5):
            live = [i for i in range(len(streams)) if lengths[i] > t]
            dec.advance([streams[i] for i in live], [x[i, t:min(t + 5, int(lengths[i]))] for i in live])
            survivors += dec.stats.tokens_per_frame * dec.stats.frames
            assert numba.get_num_threads() == 1
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    same_results(dec.finish(streams), want)
    assert survivors == pytest.approx(offline.stats.tokens_per_frame * offline.stats.frames)
    assert dec._capacity.tokens > 24
    assert bool(regions) == numba_pool


@pytest.mark.parametrize("numba_pool", [True, False])
def test_streams_count_their_context_steps_as_offline(demo, demo_graphs, monkeypatch, numba_pool):
    """Rescored streams (phrases on some) searched in batched calls report their context
    steps in each call's stats.lm: summed over the calls, ExpandArcs' word arcs and lookups
    are the offline decode's (the same search), and no call misses more steps than it
    looked up."""
    _threads_of(numba_pool, monkeypatch)
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    texts, x, lengths = demo_emissions(demo, g, kw, count=5, seed=3)
    words = texts[1].split()
    boosts = [None, {" ".join(words[:2]): 3.0}, None, {words[0]: 1.0}, None]
    options = dict(beam=12.0, max_active=900, rescore_lm=demo / "lm.arpa")
    offline = Decoder(g, **options, num_threads=1)
    want = offline.decode(x, lengths, boost=boosts)
    dec = Decoder(g, **options, num_threads=2)
    streams = [dec.stream(boost=b) for b in boosts]
    summed = dict(word_arcs=0, lookups=0)
    for t in range(0, int(lengths.max()), 8):
        live = [i for i in range(len(streams)) if lengths[i] > t]
        dec.advance([streams[i] for i in live], [x[i, t:min(t + 8, int(lengths[i]))] for i in live])
        lm = dec.stats.lm
        assert 0 <= lm["misses"] <= lm["lookups"] + lm["closure_lookups"]
        assert lm["memo_bytes"] > 0 and lm["frames"] == dec.stats.frames
        for key in summed:
            summed[key] += lm[key]
    same_results(dec.finish(streams), want)
    assert summed == {key: offline.stats.lm[key] for key in summed} and summed["lookups"] > 0


def test_streams_that_keep_a_lattice_are_searched_together(demo, demo_graphs):
    """Streams that keep a lattice go in the streams' shared compiled call, their links in the
    slots' typed list (one call per stream and chunk from Python, each typed by Numba's
    dispatcher, ran them at half the offline speed); a stream's finished links are kept for
    the next stream, emptied.  Lattices, N-best lists and results as offline, also with
    rescoring."""
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=6, seed=4)
    for options in (dict(), dict(rescore_lm=demo / "lm.arpa")):
        options = dict(beam=12.0, max_active=600, lattice_beam=5.0, prune_interval=6, **options)
        want = Decoder(g, **options, num_threads=1).decode(x, lengths, nbest=3)
        dec = Decoder(g, **options, num_threads=2)
        backend = dec._backend
        searched = []

        class Counted:  # the kernels module, its calls of one stream's chunk from Python counted
            def __getattr__(self, attr):
                if attr == "advance_stream":
                    searched.append(1)
                return getattr(cpu_backend_kernels, attr)

        cpu_backend_kernels = backend._cpu
        backend._cpu = Counted()
        slots = backend._slots
        for round in range(2):
            streams = [dec.stream() for _ in lengths]
            assert len(slots._spare_links) == 0  # (round 1: the 6 spares of round 0 taken)
            assert all(slots.numbers[s._state.slot, C.S_LATTICE] == 1 for s in streams)
            for t in range(0, int(lengths.max()), 8):
                live = [i for i in range(len(streams)) if lengths[i] > t]
                dec.advance([streams[i] for i in live], [x[i, t:min(t + 8, int(lengths[i]))] for i in live])
            got = dec.finish(streams, nbest=3)
            same_results(got, want)
            same_lattices(got, want)
            assert len(slots._spare_links) == 6 and not any(slots._held) and not slots.numbers[:, C.S_LATTICE].any()
        assert not searched  # (no frame overflowed: every chunk went in the shared call)


def test_finished_streams_lattice_links_count_as_what_they_hold(demo, demo_graphs, monkeypatch):
    """A finished stream's links join the spare pool counted as what its lattice filled, not
    as their buffer (room for the widest frames, mostly never touched): a pool of SPARE_BYTES
    with room for the streams' arrays and filled links keeps every stream's, where counting
    the buffers whole it kept a few; the next wave takes them all."""
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=6, seed=4)
    dec = Decoder(g, beam=12.0, max_active=600, lattice_beam=5.0, num_threads=1)

    def wave():
        streams = [dec.stream() for _ in lengths]
        for t in range(0, int(lengths.max()), 8):
            live = [i for i in range(len(streams)) if lengths[i] > t]
            dec.advance([streams[i] for i in live], [x[i, t:min(t + 8, int(lengths[i]))] for i in live])
        return dec.finish(streams)

    slots = dec._backend._slots
    first = wave()
    held = sum(size for pool in (slots._spares, slots._spare_links) for _, size in pool)
    whole = sum(_array_bytes(kept) for pool in (slots._spares, slots._spare_links) for kept, _ in pool)
    assert len(slots._spare_links) == 6 and 2 * held < whole  # (the buffers: mostly room)
    monkeypatch.setattr(cpu_backend, "SPARE_BYTES", held * 5 // 4)  # (another wave's streams fill a little more)
    assert wave() == first and len(slots._spare_links) == 6 and len(slots._spares) == 6


def _array_bytes(items) -> int:
    """The bytes of every NumPy array in a (nested) tuple of arrays and scalars."""
    return sum(_array_bytes(a) if isinstance(a, tuple) else a.nbytes
               for a in items if isinstance(a, (tuple, np.ndarray)))


def test_rescored_streams_open_and_finish_through_compiled_entry_points(demo, demo_graphs):
    """A stream's start and end read its context from the backend's typed list by slot: a
    Context passed from Python each time was a new argument that Numba's dispatcher typed
    (~0.8 ms a finish, 60 µs a start with rescoring).  After the first, no stream's open or
    finish goes through the dispatcher; rescored streams without phrases or word boosts
    share one Context, so their slots' contexts are never written, and start from a copy
    of the first one's start closure (no search), and a phrase-boosted stream's own Context
    is let go when it finishes.  Results as offline."""
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    texts, x, lengths = demo_emissions(demo, g, kw, count=6, seed=5)
    words = texts[2].split()
    boosts = [None, None, {" ".join(words[:2]): 2.0}, None, None, None]
    options = dict(beam=12.0, max_active=600, rescore_lm=demo / "lm.arpa")
    want = Decoder(g, **options, num_threads=1).decode(x, lengths, boost=boosts)
    dec = Decoder(g, **options, num_threads=2)
    backend = dec._backend
    typed = {"finish": 0, "begin": 0}
    for name, call in (("finish", backend._finish_slot), ("begin", backend._begin_slot)):
        real = call.dispatcher

        class Counted:  # the dispatcher, its calls counted
            def __init__(self, real, name):
                self.real, self.name = real, name

            def __call__(self, *args):
                typed[self.name] += 1
                return self.real(*args)

            def __getattr__(self, attr):
                return getattr(self.real, attr)

        call.dispatcher = Counted(real, name)
    begun = []  # begin_slot's calls, through the entry point or the dispatcher
    begin = backend._begin_slot
    backend._begin_slot = lambda *args: begun.append(args[-1]) or begin(*args)
    slots = backend._slots
    for round in range(2):
        streams = [dec.stream(boost=b) for b in boosts]
        assert [slots._held[s._state.slot] for s in streams] == [False, False, True, False, False, False]
        assert streams[0]._state.context is streams[1]._state.context is slots.no_context
        for t in range(0, int(lengths.max()), 8):
            live = [i for i in range(len(streams)) if lengths[i] > t]
            dec.advance([streams[i] for i in live], [x[i, t:min(t + 8, int(lengths[i]))] for i in live])
        same_results(dec.finish(streams), want)
        assert not any(slots._held)
    # 12 streams opened and finished: the dispatcher typed the arguments once for each
    # workspace and memo of the pool that a call met (then the entry point takes them)
    assert 0 < typed["begin"] <= 4 and 0 < typed["finish"] <= 4, typed
    assert len(begun) == 3  # the first rescored stream's start and the phrase-boosted one's in each round


def test_streams_and_decodes_share_the_rescoring_memos(demo, demo_graphs):
    """The memos of the rescoring LM's steps (32 MiB each) are one per thread whether the
    decoder streams, decodes or both."""
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=4, seed=2)
    dec = Decoder(g, beam=10.0, max_active=300, num_threads=2, rescore_lm=demo / "lm.arpa")
    want = dec.decode(x, lengths)
    streams = [dec.stream() for _ in lengths]
    same_results(_advance_all(dec, streams, x, lengths), want)
    assert dec.decode(x, lengths) == want
    backend, pooled = dec._backend, []
    while not backend._lm_memos.empty():
        pooled.append(backend._lm_memos.get_nowait())
    assert len({id(m) for m in pooled + list(backend._thread_memos[0])}) == 2


def test_the_pool_guard_moves_calls_off_a_stalling_pool():
    """Where other processes hold the cores, regions of Numba's pool stall (their threads
    wait, spinning, for one the scheduler took away): 3 stalls among the last 8 regions and
    the calls go on Python threads for a while, longer each time stalls come back right
    after; a pool that runs well keeps the calls."""
    guard = cpu_backend.PoolGuard()
    for idle in [0.1, 0.9, 0.05, 0.2, 0.2, 0.1, 0.3, 0.1] * 4 + [0.9, 0.1, 0.8]:  # never 3 stalls in 8 regions
        assert guard.usable()
        guard.judge(idle)
    assert guard.usable()
    guard.judge(0.7)  # the third
    first = guard.pause
    assert [guard.usable() for _ in range(first)] == [False] * first and guard.usable()
    for idle in [0.6, 0.7, 0.95]:  # back right after the retry: a longer pause
        guard.judge(idle)
    assert guard.pause == 2 * first
    for _ in range(guard.pause):
        assert not guard.usable()
    for _ in range(8):  # the retry runs well ...
        assert guard.usable()
        guard.judge(0.05)
    for idle in [0.9, 0.9, 0.9]:  # ... so the next stalls pause for the first length again
        guard.judge(idle)
    assert guard.pause == first and not guard.usable()


def test_streams_are_taken_dearest_first():
    """cpu.work_order: by tokens times frames, the dearest first, ties in the order given."""
    from wfst.kernels import cpu

    numbers = np.zeros((6, C.STREAM_FIELDS), np.int64)
    numbers[:, C.S_N] = [936, 0, 100, 36, 100, 5]
    which = np.array([4, 0, 2, 3, 1])  # slots; their chunks of 8, 1, 8, 8 and 0 frames
    offsets = np.cumsum([0, 8, 1, 8, 8, 0])
    order = np.zeros(5, np.int64)
    cpu.work_order(numbers, which, offsets, order)
    assert order.tolist() == [0, 2, 1, 3, 4]  # work 1312, 1000, 1312, 800, 0


def test_a_paths_steps_are_found_as_a_binary_search_finds_them():
    """cpu.steps_of walks the steps once for a path's ascending backpointers; in any order,
    repeated steps (frames that stored nothing) and -1 (not stored yet) included, it gives
    np.searchsorted's answer."""
    from wfst.kernels import cpu

    rng = np.random.default_rng(7)
    for _ in range(300):
        steps = np.cumsum(rng.integers(0, 4, rng.integers(1, 40))).astype(np.int64)
        gids = np.sort(rng.integers(-1, steps[-1] + 3, rng.integers(0, 30))).astype(np.int32)
        if rng.random() < 0.3:
            rng.shuffle(gids)
        expected = np.where(gids < 0, 99, 5 + np.searchsorted(steps, gids, side="right") - 1)
        assert cpu.steps_of(gids, steps, 5, 99).tolist() == expected.tolist()


def test_a_forked_process_leaves_numba_pool_alone():
    """GNU OpenMP's threads do not survive a fork: a child would hang in a parallel region."""
    cpu_backend.numba_pool_threads()
    pid = os.fork()
    if pid == 0:
        os._exit(0 if cpu_backend.numba_pool_threads() == 0 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_streams_after_an_offline_overflow_in_the_same_decoder(demo, demo_graphs):
    """An offline search that overflows leaves keys in its workspace's hash table; streams
    of that capacity take workspaces from the same pool and must find them empty."""
    path, kw = demo_graphs["bpe_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=3, seed=7)
    want = Decoder(g, beam=12.0, max_active=1000, num_threads=1).decode(x, lengths)
    dec = Decoder(g, beam=12.0, max_active=1000, token_capacity=32, num_threads=1)
    streams = [dec.stream() for _ in lengths]  # at capacity 32, opened before the overflow
    assert dec.decode(x, lengths) == want and dec.stats.regrowths > 0
    same_results(_advance_all(dec, streams, x, lengths), want)


def _advance_all(dec, streams, x, lengths, step=9):
    for t in range(0, int(lengths.max()), step):
        live = [i for i in range(len(streams)) if lengths[i] > t]
        dec.advance([streams[i] for i in live], [x[i, t:min(t + step, int(lengths[i]))] for i in live])
    return dec.finish(streams)


def test_the_next_streams_take_finished_streams_arrays(demo, demo_graphs, monkeypatch):
    """A stream opened after others finished takes one's arrays (fresh ones cost page
    faults), their old contents left in them, and decodes as offline; the arrays kept are
    bounded by SPARE_BYTES, and those of a token capacity streams no longer open at are let
    go (the decoder's capacity grows on overflow)."""
    path, kw = demo_graphs["bpe_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=6, seed=3)
    want = Decoder(g, beam=12.0, max_active=900, num_threads=1).decode(x, lengths)
    dec = Decoder(g, beam=12.0, max_active=900, num_threads=2)
    first = [dec.stream() for _ in range(3)]
    old = [s._state.tl.cost for s in first]
    same_results(_advance_all(dec, first, x[:3], lengths[:3]), want[:3])
    later = [dec.stream() for _ in range(3)]
    assert all(any(np.shares_memory(s._state.tl.cost, a) for a in old) for s in later)
    same_results(_advance_all(dec, later, x[3:], lengths[3:], step=5), want[3:])

    monkeypatch.setattr(cpu_backend, "SPARE_BYTES", 0)  # none kept: fresh arrays
    dec = Decoder(g, beam=12.0, max_active=900, num_threads=1)
    first = [dec.stream()]
    old = first[0]._state.tl.cost
    _advance_all(dec, first, x[:1], lengths[:1])
    assert not np.shares_memory(dec.stream()._state.tl.cost, old)

    monkeypatch.undo()
    dec = Decoder(g, beam=12.0, max_active=900, token_capacity=24, num_threads=1)
    same_results(_advance_all(dec, [dec.stream() for _ in range(3)], x[:3], lengths[:3]), want[:3])
    slots = dec._backend._slots
    assert dec._capacity.tokens > 24 and slots._spares  # the streams grew, and so did the decoder
    assert all(len(arrays.tl.cost) == slots._spare_capacity for arrays, _ in slots._spares)
    later = [dec.stream() for _ in range(3)]
    assert all(s._state.capacity == dec._capacity.tokens for s in later)
    same_results(_advance_all(dec, later, x[3:], lengths[3:]), want[3:])


def test_streams_compile_no_typed_list_method_of_numba(demo, demo_graphs, monkeypatch):
    """Typed lists made, grown, read or written from Python compile Numba's methods for them
    in every process (~2 s before a process's first stream moved): the streams' lists of
    slots, contexts, memos and workspaces go through cached compiled helpers instead, so
    that no method of numba.typed.typedlist has a compiled signature after streams opened,
    advanced on the pool's threads with contexts (overflowing), gave partials, finished and
    reopened."""
    from numba.typed import typedlist

    _threads_of(True, monkeypatch)
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    texts, x, lengths = demo_emissions(demo, g, kw, count=4, seed=5)
    dec = Decoder(g, beam=10.0, max_active=500, num_threads=2, rescore_lm=demo / "lm.arpa", token_capacity=24)
    for _ in range(2):  # the second round reuses the slots the first gave back (the first overflows, and grows)
        streams = [dec.stream(boost={" ".join(texts[0].split()[:2]): 2.0} if i == 0 else None) for i in range(4)]
        dec.advance(streams, [x[i, :3] for i in range(4)])
        assert len(dec.partials(streams)) == 4
        _advance_all(dec, streams, x[:, 3:], lengths - 3, step=7)
    methods = [f for name, f in vars(typedlist).items() if name.startswith("_") and hasattr(f, "signatures")]
    assert methods and not [(f.__name__, str(f.signatures)[:200]) for f in methods if f.signatures]


def test_a_long_stream_keeps_bounded_state(demo, demo_graphs):
    """Forty sentences as one stream of about 12,000 frames: the committed prefix releases
    backpointers and frames (so the state stays bounded), and the result is still the
    offline one."""
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    texts = [t for t in (demo / "test.txt").read_text().splitlines() if t.strip()][:40]
    x, lengths = synthetic.from_texts([" ".join(texts)], g.tokens, word_boundary="|", seed=1)
    dec = Decoder(g, beam=12.0, max_active=500, num_threads=1)
    want = dec.decode(x, lengths)
    s = dec.stream()
    T, most_stored, most_rows = int(lengths[0]), 0, 0
    for t in range(0, T, 16):
        dec.advance([s], [x[0, t:t + 16]])
        most_stored = max(most_stored, s._state.stored)
        most_rows = max(most_rows, len(s._state.logp))
    # what a stream holds does not grow with its length: a few commit windows at most
    assert T > 10_000 and s._state.base > T - 3000
    assert most_rows < T / 4 and most_stored < 4 * _COMMIT_AT
    assert s.partial().stable > 0.9 * len(s.partial().words)
    slot, slots = s._state.slot, dec._backend._slots
    assert s._state.prefix.frame_tokens.dtype == np.uint16 and len(s._state.prefix.frame_tokens) > T - 3000
    got = dec.finish([s])
    same_results(got, want)
    assert got[0].word_times == want[0].word_times  # the committed prefix kept its frames' tokens
    held = slots.list[slot]  # a finished stream holds nothing, and its slot goes to the next stream
    assert held.logp.size == held.trace.prev.size == held.trace.steps.size == held.tl.cost.size == 0
    assert dec.stream()._state.slot == slot


@pytest.mark.parametrize("threads", [1, 2])
def test_partial_results_read_the_best_path_and_leave_their_scratch_clean(demo, demo_graphs, monkeypatch, threads):
    """partial() reads the best path's words, their frames and how many are stable in one
    compiled call, with a meeting-point scratch kept from call to call: the same as the
    path's PathPart (the commits' code) and common_ancestor on fresh arrays, with commits
    every few chunks (from the partials' meeting points, in the same scratch), and the
    scratch left as it was found (all -1).  Each partial walks
    the paths back to the last one's meeting point only.  Decoder.partials() of several
    streams is the same.  A stream asked for its partial has the next one walked by its
    chunk's search (on one thread, and on two: Numba's pool), and on two threads several
    others are walked together; both in rows of 2 words there (a stream with more is asked
    alone); their scratch left clean."""
    from wfst.kernels import cpu

    from wfst import ledger

    monkeypatch.setattr(ledger, "COMMIT_AT", 1024)
    together_calls, together_walks = [], cpu.slots_partial_words
    if threads > 1:
        _threads_of(True, monkeypatch)
        monkeypatch.setattr(cpu_backend, "_PARTIAL_WORDS", 2)

        def slots_partial_words(*args):
            together_calls.append(len(args[1]))
            return together_walks(*args)

        monkeypatch.setattr(cpu, "slots_partial_words", slots_partial_words)
    statuses, words = [], cpu.slot_partial_words

    def slot_partial_words(*args):
        out = words(*args)
        statuses.append(out[-1])
        return out

    monkeypatch.setattr(cpu, "slot_partial_words", slot_partial_words)
    starts, commit_stream = [], cpu.commit_stream

    def commit_from(*args):  # where commits walk back from: the last partial's meeting point
        starts.append(args[6])
        return commit_stream(*args)

    monkeypatch.setattr(cpu, "commit_stream", commit_from)
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, 6)
    dec = Decoder(g, beam=14.0, max_active=2000, num_threads=threads)
    streams = [dec.stream() for _ in range(len(lengths))]
    rng, pos, commits = np.random.default_rng(3), [0] * len(lengths), 0
    resumed = partials = 0
    walked = []  # per partial asked: walked by the search of its chunk, and the words fit in a row
    while any(p < n for p, n in zip(pos, lengths)):
        pick = [i for i in range(len(lengths)) if pos[i] < lengths[i] and rng.random() < 0.7]
        chunks = [x[i, pos[i]:pos[i] + int(rng.choice([1, 4, 9, 30]))] for i in pick]
        for i, c in zip(pick, chunks):
            pos[i] += len(c)
        dec.advance([streams[i] for i in pick], chunks)
        walked += dec._backend._slots.walked(np.array([streams[i]._state.slot for i in pick], np.int64)).tolist()
        together = dict(zip(pick, dec.partials([streams[i] for i in pick]))) if partials % 2 else {}
        for i in pick:
            st, got = streams[i]._state, together.get(i) or streams[i].partial()
            arcs, gids, reads = best_path_reads(st, g, blank_label(g))
            whole = st.prefix + path_part(g, *reads)
            meet, stable = cpu.common_ancestor(st.tl, st.n, st.trace.prev, st.stored), len(st.prefix.word_ids)
            if meet >= 0 and (where := np.flatnonzero(gids == meet)).size:
                stable += int(np.count_nonzero(g.olabel[arcs[:where[0] + 1]]))
            assert (got.word_ids, got.word_frames, got.stable) == (whole.word_ids, whole.word_frames, stable)
            assert got.words == tuple(g.words[w] for w in got.word_ids)  # (the stable ones named once)
            commits += st.base > 0
            resumed += st._stable_at >= 0  # the next partial walks back to its meeting point only
            partials += 1
    scratch = dec._backend._meeting()
    assert commits and max(starts) >= 0  # (some commits started from a partial's meeting point)
    assert len(scratch.depth) and (scratch.depth == -1).all() and (scratch.meet == -1).all()
    assert resumed > 0.9 * partials and set(statuses) == {C.PARTIAL_OK}  # (a stale start: asked again)
    if threads > 1:
        assert 0.2 * partials < sum(walked) < 0.9 * partials and len(statuses) > 0.1 * partials  # (the rest alone)
        assert together_calls and max(together_calls) > 1
        assert (dec._backend._partial_scratch == -1).all()
    else:
        assert 0.2 * partials < sum(walked) < 0.9 * partials


@pytest.mark.parametrize("rescored", [False, True])
def test_empty_and_zero_frame_chunks(demo, demo_graphs, rescored):
    """Calls with no frames to search (no streams, or chunks of 0 frames), the first calls of
    a decoder among them, do nothing."""
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=1)
    dec = Decoder(g, beam=10.0, max_active=300, num_threads=2, rescore_lm=demo / "lm.arpa" if rescored else None)
    idle, s = dec.stream(), dec.stream()
    dec.advance([], [])
    dec.advance([idle, s], [x[0, :0], x[0, :0]])
    assert idle.frames == 0 and idle.partial().words == () and idle.partial().stable == 0
    dec.advance([s], [x[0, :int(lengths[0])]])
    empty, result = dec.finish([idle, s])
    assert empty == dec.decode(x[:, :0], np.zeros(1, np.int64))[0]
    assert result == dec.decode(x, lengths)[0]


@pytest.mark.filterwarnings("ignore:.*have no path:UserWarning")
@pytest.mark.parametrize("threads", [1, 2])
def test_streams_whose_tokens_all_die_equal_offline_decoding(demo, demo_graphs, threads):
    """Where every token dies part-way, the search ends at the last frame a token lived
    through, with the words of its best survivor's path: offline and streamed alike, for any
    chunking, and the words a stream had made stable stay."""
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=6, seed=2)
    x = dying(g, x, lengths, [int(n) * k // 6 for k, n in enumerate(lengths)])  # the first at frame 0
    dec = Decoder(g, beam=12.0, max_active=600, num_threads=threads, lattice_beam=5.0 if threads == 2 else None)
    want = dec.decode(x, lengths)
    assert dec.stats.no_path == tuple(range(6))
    assert all(r.cost == np.inf and not r.reached_final for r in want)
    assert want[0].words == () and all(len(r.words) >= k for k, r in enumerate(want))
    stable = {}

    def check(i, partial):
        stable[i] = partial.word_ids[:partial.stable]

    for seed in (1, 2, 3):
        same_results(stream_all(dec, x, lengths, seed=seed, check_partials=check), want)
        assert all(want[i].word_ids[:len(p)] == p for i, p in stable.items())
    s = dec.stream()
    dec.advance([s], [x[5, :int(lengths[5])]])
    assert s.partial().words == want[5].words  # a dead stream's partial: its path to the end
    assert dec.finish([dec.stream()]) and dec.stats.no_path == ()
    with pytest.warns(UserWarning, match="have no path") as caught:
        assert dec.finish([s]) == [want[5]] and dec.stats.no_path == (0,)
    assert caught[0].filename == __file__  # the user's line, not the package's


def test_a_dead_stream_keeps_no_more_frames_and_endpoints_as_silence(demo, demo_graphs):
    """A stream whose tokens all died takes later chunks (counted) but neither keeps nor reads
    them, so its state stays bounded; the frames after its path count as trailing silence,
    the same for any chunking, so Kaldi's rules end it."""
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=1, seed=2)
    T = int(lengths[0])
    x = dying(g, x, lengths, [T // 2])
    dec = Decoder(g, beam=12.0, max_active=600, num_threads=1)
    rules = EndpointConfig(rules=KALDI_RULES[:4])  # no 20 s rule
    whole, chunked = dec.stream(endpoint=rules), dec.stream(endpoint=rules)
    dec.advance([whole], [x[0, :T]])
    for t in range(0, T, 7):
        dec.advance([chunked], [x[0, t:min(t + 7, T)]])
    assert whole._state.dead and chunked._state.dead
    silent = [s._state.trailing + s._state.idle for s in (whole, chunked)]
    assert silent[0] == silent[1] > (T - T // 2) // 2  # (it dies a few frames into the mask)
    kept = (whole._state.frames, len(whole._state.logp), whole._state.stored)
    silence = np.full((1, g.tokens.num_columns), -np.inf, np.float32)
    silence[0, g.tokens.blank] = 0.0
    for _ in range(100):  # 4 s more, every frame a chunk
        dec.advance([whole, chunked], [silence, silence])
        assert whole.endpoint_rule == chunked.endpoint_rule
    assert (whole._state.frames, len(whole._state.logp), whole._state.stored) == kept
    assert whole.frames == T + 100 and whole.endpoint_rule == 0  # 5 s of silence
    with pytest.warns(UserWarning, match="have no path"):
        a, b = dec.finish([whole, chunked])
    assert a == b and a.num_frames == T + 100 and a.cost == np.inf


def speech_and_silence(demo, demo_graphs, seed: int, quiet_frames: int):
    """(char_compact, two demo sentences each followed by blank-dominated noise, in which
    alternatives live on: the paths disagree on the last words through it; the rng)."""
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=2)
    rng = np.random.default_rng(seed)
    quiet = rng.normal(0.0, 1.0, (quiet_frames, g.tokens.num_columns)).astype(np.float32)
    quiet[:, g.tokens.blank] += 12.0
    quiet -= np.logaddexp.reduce(quiet, axis=1, keepdims=True)
    return g, np.concatenate([x[0, :lengths[0]], quiet, x[1, :lengths[1]], quiet]).astype(np.float32), rng


def test_a_stream_in_a_long_silence_keeps_bounded_backpointers(demo, demo_graphs, monkeypatch):
    """Speech then silence in which the paths disagree on the last words, so that they meet
    before them and nothing after the speech can be committed: runs of blanks fold into one
    backpointer (kernels.cpu._store), and a commit that finds nothing to commit drops the
    backpointers no live path passes (compact_stream), and the search drops the rows of
    log-probs before the last frame's (drop_rows: the backpointers' reads and the blank's
    column are kept).  The
    backpointers and rows held stay bounded through the silence while its frames'
    survivors add up to many times more, and the result is still the offline one (its
    frames' tokens too: the runs unfold and read what was kept)."""
    from wfst import ledger

    monkeypatch.setattr(ledger, "COMMIT_AT", 1024)
    g, x, rng = speech_and_silence(demo, demo_graphs, 3, 2500)
    dec = Decoder(g, beam=14.0, max_active=2000, num_threads=1)
    want = dec.decode(x[None], np.array([len(x)]))
    s = dec.stream()
    state, t, most, rows, compactions, survivors = s._state, 0, 0, 0, 0, []
    while t < len(x):
        step = int(rng.integers(1, 40))
        base, stored = state.base, state.stored
        dec.advance([s], [x[t:t + step]])
        t += step
        compactions += state.base == base and state.stored < stored
        survivors.append(state.survivors)
        if t > len(x) - 2000:  # deep in the last silence
            most = max(most, state.stored)
            rows = max(rows, state.frames - state.rows_from)
    assert state.base < len(x) - 2500 and compactions > 2  # nothing committed in the silence
    assert most < 2 * ledger.COMMIT_AT < (state.survivors - survivors[-60]) / 5
    assert rows < 400 and len(state.logp) < 2500 and state.rows_from > len(x) - 500
    assert state.trailing > 2400 and s.endpoint
    same_results(dec.finish([s]), want)


def test_the_trailing_blanks_memo_reads_as_a_walk_from_scratch(demo, demo_graphs, monkeypatch):
    """The endpoint readings walk the best path back only to where the last call's walk began
    (the stream's memo, kernels.common.trailing_blanks): walked whole, silence after speech
    cost every call a walk back to the speech.  After every call of random chunks, commits
    and compactions numbering the backpointers anew in between, the memo's reading is a
    walk from scratch's, which counts the blanks that end the best path's tokens (its runs
    unfolded), and the stream's trailing silence counts it."""
    from wfst.kernels import cpu

    from wfst import ledger

    monkeypatch.setattr(ledger, "COMMIT_AT", 256)
    g, speech, rng = speech_and_silence(demo, demo_graphs, 7, 600)
    dec = Decoder(g, beam=14.0, max_active=2000, num_threads=1)
    s = dec.stream()
    state, t, commits, hits = s._state, 0, 0, 0
    blank, layout = dec._settings.blank_ilabel, dec._backend.layout
    while t < len(speech):
        step = int(rng.integers(1, 40))
        base = state.base
        dec.advance([s], [speech[t:t + step]])
        t += step
        if state.base != base:  # committed after the walk: the memo's backpointer is numbered anew
            commits += 1
            assert state.trail_memo[C.TRAIL_AT] == -1
        keep = cpu._best_token(state.tl, state.n, dec._backend.layout.final, None, False)
        args = (keep, state.tl.prev, state.tl.arc, state.trace.prev, state.trace.arc, state.trace.steps,
                state.frames - state.base, dec._backend.layout.ilabel, blank)
        fresh = cpu.trailing_blanks(*args, np.array([-1, 0, 0], np.int64))
        memo = state.trail_memo.copy()  # (its backpointer is the first one's walk's: a walk with it stops at once)
        hits += memo[C.TRAIL_AT] >= 0 and fresh[1] and fresh[0] > step
        assert cpu.trailing_blanks(*args, memo) == fresh
        # the best path's tokens, runs of blanks unfolded, end in as many blanks
        arcs = best_path_reads(state, layout, blank)[2][0]
        read = layout.ilabel[arcs][layout.ilabel[arcs] != 0]
        voiced = np.flatnonzero(read != blank)
        assert fresh[1] == (len(voiced) > 0)
        if fresh[1]:
            assert fresh[0] == len(read) - 1 - voiced[-1]
        assert state.trailing == (fresh[0] if fresh[1] else state.frames - 1 - state.prefix.last_voiced)
    assert commits > 2 and hits > 10 and state.trailing > 500


def test_the_partial_memo_reads_as_a_walk_from_scratch(demo, demo_graphs, monkeypatch):
    """A partial whose paths met before the first word after the last meeting point walks
    back only to where the last such walk began (the stream's memo, kernels.cpu.partial_words):
    walked whole, each partial in silence after speech whose paths disagree on the last words
    walked every token's path back through the silence.  After every call of random chunks
    through speech and silence, commits numbering the backpointers anew in between, a
    partial with the memo finds what one from scratch finds."""
    from wfst.kernels import cpu

    from wfst import ledger

    monkeypatch.setattr(ledger, "COMMIT_AT", 256)
    g, speech, rng = speech_and_silence(demo, demo_graphs, 11, 500)
    want = Decoder(g, beam=14.0, max_active=2000, num_threads=1)
    dec = Decoder(g, beam=14.0, max_active=2000, num_threads=1)
    s = dec.stream()
    state, t, commits, hits = s._state, 0, 0, 0
    layout, scratch = dec._backend.layout, ledger.MeetingScratch()
    while t < len(speech):
        step = int(rng.integers(1, 40))
        base = state.base
        dec.advance([s], [speech[t:t + step]])
        t += step
        if state.base != base:  # committed: the memo's backpointer is numbered anew
            commits += 1
            assert state.partial_memo[C.PMEMO_AT] == -1
        since = state.stable_at
        args = (state.tl, state.n, layout.final, layout.olabel, state.trace.prev, state.trace.arc, state.stored,
                state.trace.steps, state.base, state.frames, since, *scratch.at_least(state.stored))
        ids, frames, stable, meet, status = cpu.partial_words(*args, np.full(C.PMEMO_FIELDS, -1, np.int64))
        memo = state.partial_memo.copy()
        hits += memo[C.PMEMO_AT] >= 0 and memo[C.PMEMO_SINCE] == since
        found = cpu.partial_words(*args, memo)
        assert (found[0].tolist(), found[1].tolist(), found[2], found[4]) == (ids.tolist(), frames.tolist(), stable,
                                                                              status)
        assert found[3] == meet or (found[3] == -1 and meet in (since, -1))
        p = s.partial()  # (the stream's own, its memo read and updated)
        assert p.words[:p.stable] == s.partial().words[:p.stable]
    assert commits > 2 and hits > 10
    final = dec.finish([s])[0]
    assert final.words[:p.stable] == p.words[:p.stable]
    assert final == want.decode(speech[None])[0]


def test_a_stream_finished_by_another_thread_meanwhile_is_refused(demo, demo_graphs, monkeypatch):
    """advance() checks its chunks before it waits for the decoder; a stream that another
    thread finished meanwhile is refused once the turn comes, and the stream that took over
    its search state is untouched (the late advance wrote into it)."""
    import wfst.decoder

    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=2)
    dec = Decoder(g, num_threads=1)
    want = dec.decode(x[1:2, :lengths[1]])[0]
    s = dec.stream()
    dec.advance([s], [x[0, :20]])
    taker = []
    real = wfst.decoder.joined_chunks

    def finished_meanwhile(chunks, num_columns):  # the other thread's turn, while this one checked its chunks
        if not taker:
            dec.finish([s])
            taker.append(dec.stream())  # may reuse s's state
        return real(chunks, num_columns)

    monkeypatch.setattr(wfst.decoder, "joined_chunks", finished_meanwhile)
    with pytest.raises(DecodeInputError, match="stream 0 was finished"):
        dec.advance([s], [x[0, 20:30]])
    monkeypatch.undo()
    u = taker[0]
    assert u.frames == 0
    dec.advance([u], [x[1, :lengths[1]]])
    assert dec.finish([u])[0] == want


def test_streams_of_an_advance_that_stopped_part_way_are_lost_not_silently_wrong(demo, demo_graphs, monkeypatch):
    """Ctrl-C (or any failure) inside advance() leaves its streams moved part-way: they say
    so from then on; other streams, and new ones, go on exactly."""
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=2)
    dec = Decoder(g, num_threads=1)
    want = dec.decode(x[1:2, :lengths[1]])[0]
    s, bystander = dec.stream(), dec.stream()
    dec.advance([s, bystander], [x[0, :10], x[1, :10]])
    real = dec._backend.advance

    def interrupted(states, chunks):
        real(states[:1], chunks[:1])  # one frame step done, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(dec._backend, "advance", interrupted)
    with pytest.raises(KeyboardInterrupt):
        dec.advance([s], [x[0, 10:20]])
    monkeypatch.undo()
    for call in (lambda: dec.advance([s], [x[0, 20:30]]), lambda: dec.finish([s]), s.partial):
        with pytest.raises(DecodeInputError, match="was lost: an advance\\(\\) call that moved it stopped part-way"):
            call()
    assert repr(s) == "<Stream lost>"
    dec.advance([bystander], [x[1, 10:lengths[1]]])
    assert dec.finish([bystander])[0] == want
    fresh = dec.stream()
    dec.advance([fresh], [x[1, :lengths[1]]])
    assert dec.finish([fresh])[0] == want


def test_ctrl_c_in_a_stream_call_is_raised_when_it_ends_with_its_streams_whole(demo, demo_graphs, monkeypatch):
    """Ctrl-C (SIGINT, on the main thread) in the middle of a stream call is held until the call
    ends, then raised: its streams moved whole and go on exactly.  Raised inside, it could
    land in Numba's unboxing of the slots' typed lists and leave them corrupt: a later call
    on new streams crashed.  A handler of the caller's own gets the signal the same way."""
    import _thread
    import signal

    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=1)
    dec = Decoder(g, num_threads=1)
    want = dec.decode(x[:, :lengths[0]])[0]
    s = dec.stream()
    real = dec._backend.advance

    def interrupted(*args):
        _thread.interrupt_main()  # (as a Ctrl-C in the middle of the call)
        return real(*args)

    monkeypatch.setattr(dec._backend, "advance", interrupted)
    with pytest.raises(KeyboardInterrupt):
        dec.advance([s], [x[0, :10]])
    assert repr(s) == "<Stream 10 frames>"
    noted = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    try:
        dec.advance([s], [x[0, 10:20]])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert noted == [signal.SIGINT] and repr(s) == "<Stream 20 frames>"
    monkeypatch.undo()
    dec.advance([s], [x[0, 20:lengths[0]]])
    assert dec.finish([s])[0] == want


def test_a_finish_that_ctrl_c_interrupts_keeps_the_results_on_the_streams(demo, demo_graphs, monkeypatch):
    """finish() ends its work before Ctrl-C is raised, which loses what it returns, and the
    streams take no second finish(): each keeps its result as stream.result.  A finish() that
    fails part-way leaves the streams it took lost, saying so."""
    import _thread

    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=2)
    dec = Decoder(g, num_threads=1)
    want = dec.decode(x, lengths)
    streams = [dec.stream(), dec.stream()]
    dec.advance(streams, [x[0, :lengths[0]], x[1, :lengths[1]]])
    assert [s.result for s in streams] == [None, None]
    real = dec._backend.finish_stream

    def interrupted(state):
        _thread.interrupt_main()
        return real(state)

    monkeypatch.setattr(dec._backend, "finish_stream", interrupted)
    with pytest.raises(KeyboardInterrupt):
        dec.finish(streams)
    assert [s.result for s in streams] == want
    with pytest.raises(DecodeInputError, match=r"stream 0 was finished \(its result is stream.result\)"):
        dec.finish(streams)

    calls = []

    def failing(state):
        calls.append(state)
        if len(calls) == 2:
            raise MemoryError
        return real(state)

    monkeypatch.setattr(dec._backend, "finish_stream", failing)
    streams = [dec.stream(), dec.stream()]
    dec.advance(streams, [x[0, :lengths[0]], x[1, :lengths[1]]])
    with pytest.raises(MemoryError):
        dec.finish(streams)
    with pytest.raises(DecodeInputError, match="stream 0 was lost: a finish\\(\\) call that took its result stopped"):
        dec.finish(streams[:1])
    assert streams[0].result is None
    monkeypatch.undo()
    assert dec.finish(streams[1:])[0] == want[1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX's")
def test_streams_go_on_in_a_forked_child_of_a_process_whose_pool_ran_them(demo, demo_graphs, monkeypatch):
    """The streams' Python thread pool does not survive fork() (its threads stay in the
    parent): a child that used the decoder waited for ever in advance().  It makes its own."""
    import select

    monkeypatch.setattr(cpu_backend, "_NUMBA_POOL", 0)  # (streams on Python threads)
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=2)
    dec = Decoder(g, num_threads=2)
    want = dec.decode(x, lengths)

    def streamed():
        streams = [dec.stream() for _ in range(2)]
        dec.advance(streams, [x[i, :lengths[i]] for i in range(2)])
        return dec.finish(streams)

    assert streamed() == want and dec._backend._pool is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: say whether its streams decoded as the parent's, and leave
        ok = False
        try:
            ok = streamed() == want
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    try:
        if not select.select([read], [], [], 120)[0]:
            os.kill(pid, 9)
            pytest.fail("the forked child's advance() did not return")
        assert os.read(read, 1) == b"1"
    finally:
        os.close(read)
        os.waitpid(pid, 0)


def test_joined_chunks_read_as_the_list_of_their_chunks():
    """The usual call's chunks joined (inputs.JoinedChunks) are, to the code that reads them
    one by one (dead streams, streams searched alone, the CUDA backend), the list they were."""
    from wfst.inputs import JoinedChunks, chunk_lengths, joined_chunks

    rng = np.random.default_rng(0)
    chunks = [np.log(rng.dirichlet(np.ones(4), size=t)).astype(np.float32) for t in (2, 0, 3, 1)]
    joined = joined_chunks(chunks, 4)
    assert isinstance(joined, JoinedChunks) and len(joined) == 4 and chunk_lengths(joined) == [2, 0, 3, 1]
    for got in (list(joined), [joined[i] for i in range(4)], [joined[i - 4] for i in range(4)], joined[0:4]):
        assert all(a.shape == b.shape and (a == b).all() for a, b in zip(got, chunks, strict=True))
    with pytest.raises(IndexError):
        joined[4]
    alone = joined_chunks(chunks[:1], 4)  # one stream's chunk: checked, not copied
    assert alone.x is chunks[0] and chunk_lengths(alone) == [2]
    assert joined_chunks([chunks[0][:, :3]], 4) is None and joined_chunks([np.asfortranarray(chunks[2])], 4) is None
    assert joined_chunks([], 4) is None
    assert joined_chunks(chunks, 5) is None and joined_chunks([*chunks, chunks[0] + 1.0], 4) is None


def test_bad_stream_input_is_refused_before_any_stream_moves(demo, demo_graphs):
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=1)
    dec, other = Decoder(g, num_threads=1), Decoder(g, num_threads=1)
    s, t = dec.stream(), dec.stream()
    good = x[0, :10]
    bad = good.copy()
    bad[3, 2] = np.nan
    empty = good.copy()
    empty[5] = -np.inf
    cases = [([s, t], [good], "2 streams but 1 chunks"),
             ([s, t], [good, good[:, :-1]], "stream 1: a chunk must have shape"),
             ([s, t], [good, good.astype(np.float64)], "stream 1: a chunk must be float32"),
             ([s, t], [good, good.astype(np.float16)], "stream 1: a chunk must be float32"),
             ([s, t], [good, good[:, :, None]], "stream 1: a chunk must have shape"),
             ([s, t], [good, bad], "stream 1: chunk frame 3 has NaN"),
             ([s, t], [empty, good], "stream 0: chunk frame 5 has -inf in every column"),
             ([s, other.stream()], [good, good], "stream 1 belongs to another Decoder"),
             ([s, s], [good, good], "stream 1 is given twice"),
             ([s, "s"], [good, good], "item 1 is a str"),
             (s, [good], "advance\\(\\) takes a list of streams \\(e.g. \\[s\\]\\), not <Stream 0 frames>")]
    batch = np.stack([good, good])
    nan_at = batch.copy()
    nan_at[1, 3, 2] = np.nan
    past = batch.copy()
    past[1, 7:] = np.nan  # past stream 1's length: not read
    cases += [([s, t], (batch[:1],), "advance\\(\\) got 2 streams and chunks of shape \\(1, 10, 29\\)"),
              ([s, t], (batch[..., :-1],), "must have shape \\(N=2, T, V=29\\)"),
              ([s, t], (batch.astype(np.float64),), "chunks must be float32"),
              ([s, t], (batch, [10, 11]), "stream 1: length 11 outside \\[0, T=10\\]"),
              ([s, t], (batch, [-1, 10]), "stream 0: length -1 outside"),
              ([s, t], (batch, [10]), "lengths must have shape \\(2,\\)"),
              ([s, t], (batch, [1.5, 2]), "lengths must be integers"),
              ([s, t], (nan_at, [10, 10]), "stream 1: chunk frame 3 has NaN"),
              ([s, t], (nan_at, None), "stream 1: chunk frame 3 has NaN"),
              ([s, t], ([good, good], [10, 10]), "lengths go with chunks given as one \\(N, T, V\\) array")]
    for streams, chunks, message in cases:
        with pytest.raises(DecodeInputError, match=message):
            dec.advance(streams, *chunks) if isinstance(chunks, tuple) else dec.advance(streams, chunks)
        assert s.frames == 0
    u, v = dec.stream(), dec.stream()
    dec.advance([u, v], past, [10, 7])
    assert (u.frames, v.frames) == (10, 7)
    dec.finish([u, v])
    hot = good.copy()
    hot[2, 1] = 2.0
    u, v = dec.stream(), dec.stream()
    with pytest.warns(LogProbsWarning, match="stream 1, chunk frame 2 has 2 > 0"):
        dec.advance([u, v], [good, hot])
    w, y = dec.stream(), dec.stream()
    with pytest.warns(LogProbsWarning):  # (chunks that are not C-contiguous: the same search)
        dec.advance([w, y], [np.asfortranarray(good), np.repeat(hot, 2, axis=0)[::2]])
    assert dec.finish([w, y]) == dec.finish([u, v])
    masked = good.copy()
    masked[5, :-1] = -np.inf  # probability zero for all but one column: a valid frame
    dec.advance([s], [masked])
    assert s.frames == 10
    dec.finish([t])
    with pytest.raises(DecodeInputError, match="stream 0 was finished"):
        dec.advance([t], [good])
    with pytest.raises(DecodeInputError, match="stream 0 was finished"):
        dec.finish([t])
    with pytest.raises(DecodeInputError, match="finished"):  # (an OptionError, as advance()'s and finish()'s are not)
        t.partial()
    with pytest.raises(DecodeInputError, match="partials\\(\\): stream 1 was finished"):
        dec.partials([s, t])
    with pytest.raises(DecodeInputError, match="partials\\(\\): stream 0 belongs to another Decoder"):
        dec.partials([other.stream()])
    with pytest.raises(DecodeInputError, match="finish\\(\\) takes a list of streams"):
        dec.finish(s)
    assert dec.partials([]) == [] and dec.partials([s]) == [s.partial()]
    with pytest.raises(OptionError, match="EndpointConfig"):
        dec.stream(endpoint={"rules": ()})
    with pytest.raises(OptionError, match="frame_seconds"):
        EndpointConfig(frame_seconds=0)
    with pytest.raises(OptionError, match="min_trailing_silence"):
        EndpointRule(True, -1.0)
    with pytest.raises(OptionError, match="must_contain_nonsilence='False': must be True or False"):
        EndpointRule("False", 0.5)  # read from a config file: it counted as True
    with pytest.raises(OptionError, match="rules=EndpointRule.*must be a sequence of EndpointRule"):
        EndpointConfig(rules=EndpointRule(True, 0.5))
    rule = EndpointRule(True, 0.5)
    assert hash(EndpointConfig(rules=[rule])) == hash(EndpointConfig(rules=(rule,)))  # a list: unhashable
    with pytest.raises(OptionError, match=r"min_trailing_silence=True: must be a number of seconds"):
        EndpointRule(True, True)  # a bool is no number of seconds (it was taken as 1 s)
    with pytest.raises(OptionError, match=r"min_utterance_length=nan: must be a number of seconds >= 0"):
        EndpointRule(False, 0.0, math.inf, math.nan)
    never = EndpointRule(False, math.inf)  # (a rule switched off, as Kaldi takes it)
    assert not never.fires(1e9, 0.0, 1e9) and EndpointRule(False, 0.0, math.inf, math.inf).fires(1.0, 0.0, 1.0) is False
    assert EndpointConfig((EndpointRule(True, np.float32(0.5)),), np.float32(0.04)).frame_seconds == np.float32(0.04)
    # an int beyond floats: "never" where a rule takes inf (s.endpoint raised OverflowError), refused where it does not
    assert EndpointRule(False, 10**400, 10**400) == EndpointRule(False, math.inf, math.inf) and not EndpointRule(
        False, 10**400).fires(1e300, 0.0, 1e300)
    with pytest.raises(OptionError, match="frame_seconds=1000.*: must be a number > 0"):
        EndpointConfig(frame_seconds=10**400)


def test_chunk_checks_find_what_numpy_finds():
    """chunk_faults' compiled one-pass check against NumPy on chunks with NaN, +inf, -inf
    (a column, or a whole frame) and values above 0, contiguous or strided, 0 frames among
    them: the first fault, and where there is none, the first value above LOG_PROB_SLACK,
    by stream and frame."""
    from wfst.inputs import LOG_PROB_SLACK, chunk_faults, frame_fault

    rng = np.random.default_rng(5)
    for trial in range(300):
        chunks = []
        for _ in range(int(rng.integers(1, 5))):
            x = np.log(rng.dirichlet(np.ones(7), size=int(rng.integers(0, 6)))).astype(np.float32)
            for _ in range(int(rng.integers(0, 3))):
                if len(x):
                    t, v = int(rng.integers(len(x))), int(rng.integers(7))
                    x[t, v] = rng.choice([np.nan, np.inf, -np.inf, 0.5, LOG_PROB_SLACK, 2 * LOG_PROB_SLACK])
                    if rng.random() < 0.1:
                        x[t] = -np.inf
            if rng.random() < 0.3:  # a strided view of the same shape
                wide = np.full((len(x), 14), np.nan, np.float32)
                wide[:, ::2] = x
                x = wide[:, ::2]
            chunks.append(x)
        fault = next(((i, *f) for i, x in enumerate(chunks) if len(x) and (f := frame_fault(x)) is not None), None)
        above = next(((i, int(t), float(x[t].max())) for i, x in enumerate(chunks)
                      for t in np.flatnonzero(np.nan_to_num(x, nan=-np.inf).max(axis=1, initial=-np.inf)
                                              > LOG_PROB_SLACK)), None)
        got_fault, got_above = chunk_faults(chunks)
        assert got_fault == fault, trial
        if fault is None:  # (with one, advance() raises before it would warn)
            assert got_above == above, trial


# ---------------------------------------------------------------------- endpointing

@pytest.mark.parametrize("silence, cost, length, rule", [
    (5.0, math.inf, 5.0, 0),  # 5 s of silence, nothing decoded: rule 1 (and only it)
    (4.9, math.inf, 4.9, None),
    (0.5, 1.9, 3.0, 1),  # speech, then 0.5 s of silence with a good final cost
    (0.5, 2.1, 3.0, None),
    (1.0, 7.9, 3.0, 2),  # a worse final cost needs 1 s
    (1.0, 8.1, 3.0, None),
    (2.0, math.inf, 3.0, 3),  # 2 s after speech in any case
    (1.9, math.inf, 3.0, None),
    (0.0, math.inf, 20.0, 4),  # a 20 s utterance
    (0.0, math.inf, 19.9, None),
])
def test_kaldi_endpoint_rules(silence, cost, length, rule):
    frame = 0.01
    config = EndpointConfig(frame_seconds=frame)
    assert config.fired(round(silence / frame), cost, round(length / frame)) == rule
    assert len(KALDI_RULES) == 5


@pytest.mark.parametrize("frames, frame_seconds", [(30, 0.03), (15, 0.06), (10, 0.09), (60, 0.015), (90, 0.01)])
def test_a_rule_fires_at_the_frame_its_seconds_are_reached(frames, frame_seconds):
    """30 x 0.03 s is 0.8999999999999999 in binary: a 0.9 s rule fired a frame late."""
    config = EndpointConfig(rules=(EndpointRule(False, 0.9),), frame_seconds=frame_seconds)
    assert config.fired(frames, math.inf, frames) == 0
    assert config.fired(frames - 1, math.inf, frames - 1) is None


def test_endpoints_fire_on_a_stream(demo, demo_graphs):
    """Speech then blank frames: an endpoint fires once the trailing silence is long enough
    (not before the speech ends); an all-blank stream fires only at 5 s."""
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=1)
    speech = x[0, :int(lengths[0])]
    blank = np.full((200, x.shape[2]), -30.0, np.float32)
    blank[:, g.tokens.blank] = 0.0
    dec = Decoder(g, beam=12.0, max_active=500, num_threads=1)
    s = dec.stream(endpoint=EndpointConfig(frame_seconds=0.04))
    dec.advance([s], [speech[:-5]])
    assert not s.endpoint
    dec.advance([s], [speech[-5:]])
    fired_at = rule = None
    for t in range(0, 200, 5):
        dec.advance([s], [blank[t:t + 5]])
        if s.endpoint and fired_at is None:
            fired_at, rule = t + 5, s.endpoint_rule
    assert 10 <= fired_at <= 55 and rule in (1, 2, 3)  # 0.5-2 s after the speech, by the final cost
    quiet = dec.stream()
    for t in range(0, 200, 5):
        dec.advance([quiet], [blank[t:t + 5]])
        assert quiet.endpoint == (t + 5 >= 125), t  # 5 s at 40 ms a frame
    assert quiet.endpoint_rule == 0


def test_epsilon_loops_decode_or_are_refused_never_hang():
    """A foreign graph with an epsilon self-loop (a #0 loop read as an epsilon): one that
    costs nothing is dropped, and decode() and streams give what the graph without it
    gives (partial() spun forever, and a tie could send a backpointer around it); a
    negative one, or any longer cycle of epsilon arcs, is refused when the Decoder is made
    (advance() spun, and the CUDA closure relaxed it round after round)."""
    import pywrapfst as fst

    from wfst.graph import graph_from_fst

    f, g = random_tlg(3)
    x = random_log_probs(3, 1, 8, g.tokens.num_columns)
    plain = Decoder(g).decode(x)[0]
    one = lambda: fst.Weight.one(f.weight_type())  # noqa: E731
    looped = f.copy()
    looped.add_arc(looped.start(), fst.Arc(0, 0, one(), looped.start()))
    dec = Decoder(graph_from_fst(looped, g.tokens, g.words))
    assert dec.decode(x)[0] == plain
    s = dec.stream()
    dec.advance([s], [x[0]])
    assert s.partial().words == plain.words[:len(s.partial().words)]
    assert dec.finish([s])[0] == plain
    for cycle in ([(0, 0, -0.5)], [(4, 5, 1.0), (5, 4, 1.0)]):  # (source, destination, cost) epsilon arcs
        cyclic = f.copy()
        for src, dst, cost in cycle:
            cyclic.add_arc(src, fst.Arc(0, 0, fst.Weight(f.weight_type(), cost), dst))
        with pytest.raises(wfst.GraphFormatError, match=r"has a cycle of epsilon arcs .* through state"):
            Decoder(graph_from_fst(cyclic, g.tokens, g.words))
