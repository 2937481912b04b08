"""device="cuda" gives exactly what device="cpu" gives.

Without a GPU (CI) the kernels run in Numba's CUDA simulator (conftest sets
NUMBA_ENABLE_CUDASIM=1), which runs every thread in Python: inputs stay tiny.  With a GPU
the same tests run the real kernels.  test_kernels_compile_for_sm90 compiles every
kernel to PTX for an H100 with the launcher's argument types, which the simulator
never checks.
"""
from __future__ import annotations

import dataclasses
import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import pywrapfst as fst
from decoding import one_array, random_log_probs, random_tlg, tied_tlg
from wfst.graphs import compile_graph

import wfst
from wfst import synthetic
from wfst.decoder import Decoder
from wfst.graph import graph_from_fst
from wfst.lm import truncate_arpa
from wfst.symbols import TokenTable, WordTable

pytest.importorskip("numba.cuda")
from numba import cuda, int64  # noqa: E402
from wfst.kernels import cuda as K  # noqa: E402

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
if not SIMULATED:  # a GPU is here: its tests must run, not skip
    try:
        import cupy  # noqa: F401
    except ImportError:
        pytest.fail("a GPU is present but CuPy is not installed: pip install '.[cuda]' "
                    "(or set NUMBA_ENABLE_CUDASIM=1 to use the simulator)", pytrace=False)

CONFIGS = {
    "wide": dict(beam=1e4, max_active=10**6, min_active=0, token_capacity=64),
    "max_active binds": dict(beam=1e4, max_active=3, min_active=2),
    "overflow regrows": dict(beam=8.0, max_active=50, min_active=1, token_capacity=3),
    "FLToP": dict(beam=1e4, max_active=10**6, min_active=0, token_capacity=64, token_top_n=2,
                  token_rel_threshold=0.05),
}


def assert_same(graph, x, lengths, boost=None, gpu=None, **config):
    cpu = Decoder(graph, device="cpu", **config)
    gpu = gpu or Decoder(graph, device="cuda", **config)
    expected, got = cpu.decode(x, lengths, boost=boost), gpu.decode(x, lengths, boost=boost)
    assert got == expected
    assert gpu.stats.tokens_per_frame == pytest.approx(cpu.stats.tokens_per_frame)
    assert gpu.stats.fltop_fallbacks == cpu.stats.fltop_fallbacks
    return gpu, got


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("seed", [0, 1])
def test_random_graphs_cuda_equals_cpu(seed, config):
    _, g = random_tlg(seed, num_states=10)
    x = random_log_probs(seed, batch=3, frames=6, columns=4)
    gpu, _ = assert_same(g, x, np.array([6, 4, 0]), **CONFIGS[config])
    if config == "overflow regrows":
        assert gpu.stats.regrowths > 0


def test_fltop_fallback_cuda_equals_cpu(tiny):
    """Where FLToP leaves no arc a finite cost, both backends expand the frame again unpruned."""
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    x = random_log_probs(8, batch=3, frames=7, columns=5, sharpness=3.0)
    x[:, 1::2, g.tokens.blank] = -np.inf  # FLToP never prunes the blank: take it away
    gpu, got = assert_same(g, x, np.array([7, 6, 7]), beam=20.0, max_active=30, min_active=1, token_top_n=1,
                           token_rel_threshold=0.5)
    assert gpu.stats.fltop_fallbacks > 0 and all(r.words or r.reached_final for r in got)


def test_fltop_large_top_n_cuda_equals_cpu():
    """A top_n large for V takes the radix select (one thread of the block on the GPU)
    instead of one scan per distinct value: both backends keep the same columns."""
    _, g = random_tlg(3, num_states=10, num_columns=64, arcs_per_state=12)
    x = random_log_probs(3, batch=2, frames=5, columns=64)
    x[:, :, 7] = x[:, :, 11]  # a tie near the boundary
    assert_same(g, x, np.array([5, 4]), beam=1e4, max_active=10**6, min_active=0, token_top_n=40)
    assert_same(g, x, np.array([5, 4]), beam=1e4, max_active=10**6, min_active=0, token_top_n=3)  # the scans


def dying_tiny(tiny):
    """The tiny graph, and emissions whose utterance 1 dies at frame 0 (one random letter a
    frame, blank impossible, which the lexicon cannot spell) and utterance 3 part-way
    (from frame 6: c | c | c |, as no word goes on); utterances 0 and 2 decode as usual."""
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    x = random_log_probs(9, batch=4, frames=12, columns=5, sharpness=3.0)
    letters = [c for c in range(5) if c != g.tokens.blank]
    x[1] = -np.inf
    x[1, np.arange(12), np.random.default_rng(0).choice(letters, 12)] = 0.0
    x[3, 6:] = -np.inf
    x[3, np.arange(6, 12), [4, 1] * 3] = 0.0
    return g, x, np.array([12, 12, 9, 12])


@pytest.mark.parametrize("lattice", [None, 4.0])
def test_dead_search_cuda_equals_cpu(tiny, lattice):
    """An utterance whose tokens all die has cost +inf and the words of its best path up to
    the last frame a token lived through, on both backends; the others decode as usual."""
    g, x, lengths = dying_tiny(tiny)
    with pytest.warns(UserWarning, match="no path"):
        gpu, got = assert_same(g, x, lengths, beam=20.0, max_active=30, min_active=1, lattice_beam=lattice)
    assert gpu.stats.no_path == (1, 3) and got[1].cost == got[3].cost == np.inf
    assert got[3].words and got[1].lattice is None and got[3].lattice is None
    assert np.isfinite(got[0].cost) and np.isfinite(got[2].cost)


@pytest.mark.filterwarnings("ignore:.*have no path:UserWarning")
@pytest.mark.parametrize("capacity", [None, 3])
def test_dead_streams_cuda_equal_cpu(tiny, capacity):
    """Streams whose tokens all die, on both backends: the same partial results and readings
    after every call and the offline results; with a capacity of 3 tokens the live streams
    overflow and the lanes grow, the dead ones' ghost tokens moving with them."""
    g, x, lengths = dying_tiny(tiny)
    gpu = assert_streams_same(g, x, lengths, seed=3, beam=20.0, max_active=30, min_active=1,
                              token_capacity=capacity)
    assert capacity is None or gpu._backend._lanes.capacity > capacity


def test_tiny_tlg_with_backoff_epsilons_cuda_equals_cpu(tiny):
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    assert g.num_arcs > g.num_emitting_arcs  # backoff arcs: the closure kernel has work
    x = random_log_probs(5, batch=2, frames=7, columns=5, sharpness=3.0)
    assert_same(g, x, np.array([7, 5]), beam=20.0, max_active=30, min_active=1)


def test_word_boosting_cuda_equals_cpu(tiny):
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    x = random_log_probs(6, batch=3, frames=6, columns=5, sharpness=3.0)
    boost = [{"ab": 3.0, "ba": 1.0}, None, {"cab": 4.0, "a": -2.0}]
    assert_same(g, x, np.array([6, 5, 6]), boost=boost, beam=20.0, max_active=30, min_active=1)
    # one map for the batch: the CPU backend puts it into the graph's weights
    assert_same(g, x, np.array([6, 5, 6]), boost=boost[2], beam=20.0, max_active=30, min_active=1)


@pytest.mark.parametrize("graphs", [False, True], ids=["launches", "graphs"])
def test_calls_reuse_the_last_search_arrays_and_stay_exact(tiny, graphs):
    """A decoder keeps its last search's arrays (and with CUDA graphs its captured frame
    steps, replayed in the simulator as the launches run again) and reuses them for a
    search like it: shorter utterances and other boosts of the same table size decode
    exactly as on a fresh decoder; another batch size or boost table gets new ones."""
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    config = dict(beam=20.0, max_active=30, min_active=1)
    x = random_log_probs(11, batch=2, frames=7, columns=5, sharpness=3.0)
    gpu = Decoder(g, device="cuda", **config)
    gpu._backend.cuda_graphs = graphs
    calls = [(np.array([7, 5]), [{"ab": 3.0}, None]), (np.array([4, 6]), [None, {"ba": 1.0}]),
             (np.array([7, 7]), [{"ab": 3.0}, None])]
    bounds = []
    for lengths, boost in calls:
        assert_same(g, x, lengths, boost=boost, gpu=gpu, **config)
        bounds.append(gpu._backend._bound)
    assert bounds[0] is bounds[1] is bounds[2]  # reset and reused, not made again
    assert (bounds[0].graphs is not None) == graphs
    assert_same(g, x[:1], np.array([7]), gpu=gpu, **config)
    assert gpu._backend._bound is not bounds[0]  # another batch size


def test_a_batch_searched_in_groups_reusing_one_workspace_equals_cpu(tiny):
    """Where free GPU memory holds only part of a batch it is searched in groups, the next on
    the same workspace: the results read back from the first must be copies (the simulator's
    read-back was a view, and the second group overwrote the first's paths)."""
    from wfst.memory import USABLE_SHARE

    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    x, lengths = synthetic.from_texts(["ab ba", "a cab ab", "abc", "ba"], g.tokens, word_boundary="|", seed=3)
    config = dict(beam=10.0, max_active=20, min_active=1)
    gpu = Decoder(g, device="cuda", **config)
    need = gpu._backend.search_bytes(gpu._capacity, int(lengths.max()), 0)
    gpu._backend.free_bytes = lambda: int(2.2 * need / USABLE_SHARE)  # room for 2 of the 4 at once
    searched = []
    search = gpu._backend.search
    gpu._backend.search = lambda plan, group, *a: searched.append(list(group)) or search(plan, group, *a)
    assert_same(g, x, lengths, gpu=gpu, **config)
    assert len(searched) > 1  # (in groups)


def test_phrase_boosting_cuda_equals_cpu(tiny):
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    x = random_log_probs(7, batch=2, frames=6, columns=5, sharpness=1.5)
    boost = [{"ab ba": 3.0, "ba ab": 1.0, "abc": 0.5}, {"a ab": 2.0, "ab a": -1.0, "cab cab": 1.5}]
    _, got = assert_same(g, x, np.array([6, 5]), boost=boost, beam=20.0, max_active=30, min_active=1)
    assert any(r.boost_cost != 0 for r in got)


def test_a_phrase_matched_in_part_at_an_open_end_cuda_equals_cpu(tiny):
    """Utterances that end inside a word (no final state): the refund of a phrase matched in
    part still applies, to the best token and to the lattice's ends, on both backends."""
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    x = random_log_probs(11, batch=2, frames=8, columns=5, sharpness=1.5)
    x[:, -2:] = -np.inf
    x[:, -2, 4] = x[:, -1, 2] = 0.0  # "c a": inside "cab"
    boost = {"ab cab ab": 9.0}
    config = dict(beam=20.0, max_active=30, min_active=1)
    _, got = assert_same(g, x, np.array([8, 8]), boost=boost, **config)
    assert not any(r.reached_final for r in got) and all(abs(r.boost_cost) < 1e-5 for r in got)
    assert_same_lattices(g, x, np.array([8, 8]), boost=boost, lattice_beam=4.0, **config)


def tie_graph(epsilon_weight: float):
    """Words w1 and w2 on two arcs alike from the start to state 1, then w3 on an epsilon
    arc (to 2, then on to 3) and on an emitting arc (to 3).  With phrases "w1 w3" and
    "w2 w3" of one reward, the tokens (1, after w1) and (1, after w2) cost the same and
    both reach (2 or 3, root) by one w3 arc at one cost: only the predecessor's context
    breaks the tie, in the closure (epsilon_weight < 0.25) or in ExpandArcs (> 0.25)."""
    f = fst.VectorFst()
    for _ in range(4):
        f.add_state()
    f.set_start(0)

    def arc(src, ilabel, word, cost, dst):
        f.add_arc(src, fst.Arc(ilabel, word, fst.Weight(f.weight_type(), cost), dst))

    arc(0, 2, 2, 0.5, 1)
    arc(0, 2, 1, 0.5, 1)
    arc(1, 0, 3, epsilon_weight, 2)
    arc(1, 2, 3, 0.25, 3)
    arc(2, 2, 0, 0.0, 3)
    f.set_final(3, fst.Weight(f.weight_type(), 0.0))
    f.arcsort("ilabel")
    return graph_from_fst(f, TokenTable(("<blk>", "t1"), blank=0), WordTable(("<eps>", "w1", "w2", "w3")))


@pytest.mark.parametrize("epsilon_weight", [0.2, 0.3], ids=["closure", "expand"])
def test_context_ties_go_to_the_smallest_predecessor_context(epsilon_weight):
    g = tie_graph(epsilon_weight)
    x = np.full((1, 2, 2), np.log(0.5), np.float32)  # every path costs its arcs and boosts
    words = set()
    for boost in ({"w1 w3": 2.0, "w2 w3": 2.0}, {"w2 w3": 2.0, "w1 w3": 2.0}):  # phrase states numbered anew
        _, got = assert_same(g, x, None, boost=boost, beam=100.0)
        words.add(got[0].words)
    assert words == {("w1", "w3"), ("w2", "w3")}  # the tie decides the words


@pytest.fixture
def small_graph(tiny, tmp_path):
    """The tiny lexicon's graph built on a bigram cut from the tiny 3-gram (the big LM)."""
    small = truncate_arpa(tiny / "lm.arpa", tmp_path / "small.arpa", 2)
    r = compile_graph(tmp_path / "g", tokens=tiny / "tokens.txt", lm=small, lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    return wfst.load_graph(r.directory), dict(rescore_lm=tiny / "lm.arpa", graph_lm=small)


def test_rescoring_cuda_equals_cpu(small_graph):
    g, lms = small_graph
    x = random_log_probs(5, batch=2, frames=6, columns=5, sharpness=1.5)
    lengths = np.array([6, 5])
    boost = [None, {"ab ba": 2.0, "ba": 0.5}]  # rescoring and phrases: ctx = LM state x phrase state
    config = dict(beam=20.0, max_active=40, min_active=1, token_capacity=128, **lms)
    gpu, got = assert_same(g, x, lengths, boost=boost, **config)
    assert got[0].rescore_cost != 0 and got[1].boost_cost != 0
    stats = gpu.stats.lm
    assert stats["misses"] > 0 and stats["hits"] > stats["misses"] and stats["fetches"] >= stats["misses"]
    assert stats["fetched_bytes"] == 8 * stats["fetches"] and stats["frames"] == lengths.sum()
    assert stats["pinned_bytes"] > 0 and stats["gpu_bytes"] > stats["cache_slots"] * 16
    # on the GPU, per state: int32 offset, backoff state and cost; per arc: a uint16 label
    big = gpu.rescorer.big
    assert stats["lm_bytes"] == sum(a.nbytes for a in gpu.rescorer.automata()[0])
    assert stats["gpu_share"] == (4 * (big.num_states + 1) + 8 * big.num_states + 2 * big.num_arcs) / stats["lm_bytes"]
    # the cache outlives the call: the same batch again reads nothing from host memory
    assert_same(g, x, lengths, boost=boost, gpu=gpu, **config)
    again = gpu.stats.lm
    assert again["fetches"] == again["misses"] == 0 and again["hits"] == again["lookups"] > 0


def test_rescoring_cuda_skips_lookups_out_of_reach(small_graph):
    """The kernels skip the big-LM lookups of word arcs that stay out of the beam whatever
    the big LM gives back (the gain bound the CPU uses): the same results and lattices as
    the CPU and as a GPU search that looks every word arc up, with fewer lookups."""
    g, lms = small_graph
    x = random_log_probs(0, batch=2, frames=7, columns=5, sharpness=1.5)
    lengths = np.array([7, 6])
    config = dict(beam=3.0, max_active=40, min_active=1, token_capacity=128, lattice_beam=2.0, **lms)
    cpu, gpu, unbounded = (Decoder(g, device=d, **config) for d in ("cpu", "cuda", "cuda"))
    unbounded.rescorer.gain = np.full_like(unbounded.rescorer.gain, np.inf)
    want = cpu.decode(x, lengths, nbest=3)
    for dec in (gpu, unbounded):
        got = dec.decode(x, lengths, nbest=3)
        assert got == want
        assert [canonical_lattice(r.lattice) for r in got] == [canonical_lattice(r.lattice) for r in want]
    assert 0 < gpu.stats.lm["lookups"] < unbounded.stats.lm["lookups"]


def test_lattice_rescoring_cuda_equals_cpu(small_graph):
    """rescore_mode="lattice" after a search on the GPU: the lattices the GPU keeps, rescored
    on the host, give the CPU's results and rescored lattices."""
    g, lms = small_graph
    x = random_log_probs(5, batch=2, frames=7, columns=5, sharpness=1.5)  # (the big LM changes both results)
    lengths = np.array([7, 6])
    config = dict(beam=6.0, max_active=40, min_active=1, token_capacity=128, lattice_beam=3.0, rescore_mode="lattice",
                  **lms)
    cpu, gpu = (Decoder(g, device=d, **config) for d in ("cpu", "cuda"))
    want, got = cpu.decode(x, lengths, nbest=3), gpu.decode(x, lengths, nbest=3)
    assert got == want and any(r.rescore_cost != 0 for r in got)
    assert [canonical_lattice(r.lattice) for r in got] == [canonical_lattice(r.lattice) for r in want]


def test_context_beam_cuda_equals_cpu(small_graph, tmp_path):
    """A context beam on the GPU leaves unexpanded the survivors the CPU leaves (more than
    it dearer than their graph state's cheapest): the same results and lattices, with a
    phrase as part of the context too, offline and in streams; and fewer LM lookups than
    the exact search (a big LM for which "ab ba" is a dear end, so that the histories differ)."""
    from conftest import TINY_ARPA_DEAR_END

    g, lms = small_graph
    big = tmp_path / "big.arpa"
    big.write_text(TINY_ARPA_DEAR_END.lstrip())
    lms = dict(lms, rescore_lm=big)
    x = random_log_probs(2, batch=2, frames=7, columns=5, sharpness=1.0)
    lengths = np.array([7, 6])
    boost = [None, {"ab ba": 2.0}]
    config = dict(beam=20.0, max_active=40, min_active=1, token_capacity=128, **lms)
    exact = Decoder(g, device="cpu", **config)
    exact.decode(x, lengths, boost=boost)
    cpu, gpu = (Decoder(g, device=d, context_beam=0.0, lattice_beam=2.0, **config) for d in ("cpu", "cuda"))
    want, got = cpu.decode(x, lengths, boost=boost, nbest=3), gpu.decode(x, lengths, boost=boost, nbest=3)
    assert got == want
    assert [canonical_lattice(r.lattice) for r in got] == [canonical_lattice(r.lattice) for r in want]
    assert gpu.stats.tokens_per_frame == pytest.approx(cpu.stats.tokens_per_frame)
    assert cpu.stats.lm["lookups"] < exact.stats.lm["lookups"]
    assert_streams_same(g, x, lengths, boost=boost, seed=4, context_beam=0.0, **config)


def test_rescoring_with_a_tiny_lm_cache_cuda_equals_cpu(small_graph):
    """A cache of 8 slots: frames fill it (the utterance is decoded again with a larger
    cache) and it is cleared when half full; results stay exact."""
    g, lms = small_graph
    x = random_log_probs(6, batch=2, frames=5, columns=5, sharpness=1.5)
    config = dict(beam=20.0, max_active=40, min_active=1, token_capacity=128, **lms)
    gpu = Decoder(g, device="cuda", **config)
    gpu._capacity = dataclasses.replace(gpu._capacity, lm_cache=8)
    assert_same(g, x, np.array([5, 4]), gpu=gpu, **config)
    assert gpu.stats.regrowths > 0 and gpu._capacity.lm_cache > 8 and gpu.stats.lm["cache_slots"] > 8
    assert gpu.stats.lm["clears"] > 0


# ---------------------------------------------------------------------- lattices

def canonical_lattice(lat):
    """A lattice's links and final states with each state named by its frame and forward
    cost: the backends number stored tokens in their own orders."""
    alpha = [round(float(w), 3) for w in fst.shortestdistance(lat.to_fst())]
    name = lambda s: (int(lat.state_frames[s]), alpha[s])  # noqa: E731
    links = sorted((name(s), name(d), int(a), round(float(g), 3), round(float(ac), 3)) for s, d, a, g, ac in
                   zip(lat.src, lat.dst, lat._raw.arc, lat.graph_cost, lat.acoustic_cost))
    return links, sorted((name(s), round(c, 3)) for s, c in lat.finals.items())


def assert_same_lattices(graph, x, lengths, boost=None, gpu_links=None, **config):
    """CPU and CUDA lattices hold the same links, final states and N-best lists."""
    cpu = Decoder(graph, device="cpu", **config)
    gpu = Decoder(graph, device="cuda", **config)
    if gpu_links:
        gpu._capacity = dataclasses.replace(gpu._capacity, links=gpu_links)
    expected, got = cpu.decode(x, lengths, boost=boost, nbest=5), gpu.decode(x, lengths, boost=boost, nbest=5)
    assert got == expected
    for a, b in zip(expected, got):  # (no frames: the lattice of the start's epsilon paths)
        assert canonical_lattice(b.lattice) == canonical_lattice(a.lattice)
        assert [(e.word_ids, round(e.cost, 4)) for e in b.nbest] == [(e.word_ids, round(e.cost, 4)) for e in a.nbest]
    return gpu, got


@pytest.mark.parametrize("config", ["wide", "max_active binds", "FLToP"])
@pytest.mark.parametrize("seed", [0, 3])
def test_lattices_cuda_equal_cpu(seed, config):
    """Chunks of 2 steps: both halves of the stored links, taken to the host while the
    search goes on, pruned at the frontier and closed with the final costs."""
    _, g = random_tlg(seed, num_states=10)
    x = random_log_probs(seed, batch=3, frames=7, columns=4)
    _, got = assert_same_lattices(g, x, np.array([7, 0, 5]), lattice_beam=3.0, prune_interval=2, **CONFIGS[config])
    assert sum(r.lattice.num_arcs for r in got if r.lattice) > sum(len(r.words) for r in got)  # more than 1-best


def test_lattices_cuda_overflow_regrows(tiny):
    """Links that fill their rows are decoded again with room for more; the lattices stay exact."""
    _, g = random_tlg(1, num_states=10)
    x = random_log_probs(1, batch=2, frames=6, columns=4)
    gpu, _ = assert_same_lattices(g, x, np.array([6, 5]), gpu_links=16, lattice_beam=5.0, prune_interval=3,
                                  **CONFIGS["wide"])
    assert gpu.stats.regrowths > 0


def test_lattices_cuda_with_boosts_phrases_and_rescoring(small_graph):
    g, lms = small_graph
    x = random_log_probs(5, batch=2, frames=6, columns=5, sharpness=1.5)
    boost = [{"ab": 1.0, "abc": -0.5}, {"ab ba": 2.0, "ba": 0.5}]
    assert_same_lattices(g, x, np.array([6, 5]), boost=boost, beam=20.0, max_active=40, min_active=1,
                         token_capacity=128, lattice_beam=4.0, prune_interval=4, **lms)


# ---------------------------------------------------------------------- streams

def assert_streams_same(graph, x, lengths, boost=None, seed=0, graphs=False, batched=False, **config):
    """Every utterance as a stream on both backends, chunked alike at random (0-3 frames,
    random subsets per call): after each call the same partial results and endpoint
    readings, and at the end the offline CPU decode's results.  graphs: frame steps
    replayed as CUDA graphs (in the simulator, the captured launches run again on the
    arrays they were captured with, as a graph's kernels would).  Partials are asked one by
    one or together (Decoder.partials); a CUDA partial reads the backpointers from the step
    of the last one's meeting point on, and needs no others.  batched: each call's chunks
    as one (N, T, V) array and their lengths (one chunk size a call)."""
    from unittest import mock

    from wfst.kernels import constants as C
    from wfst.kernels import cpu as kernels

    statuses, words = [], kernels.partial_words

    def partial_words(*args):
        out = words(*args)
        statuses.append(out[-1])
        return out

    cpu, gpu = Decoder(graph, device="cpu", **config), Decoder(graph, device="cuda", **config)
    gpu._backend.cuda_graphs = graphs
    want = cpu.decode(x, lengths, boost=boost)
    boosts = boost if isinstance(boost, list) else [boost] * len(lengths)
    pairs = [(cpu.stream(boost=b), gpu.stream(boost=b)) for b in boosts]
    rng = np.random.default_rng(seed)
    pos = [0] * len(lengths)
    while any(p < n for p, n in zip(pos, lengths)):
        pick = [i for i in range(len(lengths)) if pos[i] < lengths[i] and rng.random() < 0.7]
        chunks = []
        size = int(rng.integers(0, 4))
        for i in pick:
            k = size if batched else int(rng.integers(0, 4))
            chunks.append(x[i, pos[i]:min(pos[i] + k, int(lengths[i]))])
            pos[i] = min(pos[i] + k, int(lengths[i]))
        given = one_array(chunks, size) if batched and chunks else (chunks,)
        for d in (0, 1):
            (cpu, gpu)[d].advance([pairs[i][d] for i in pick], *given)
        # the CPU's partials first: a kernel compiled under the mock would find the mock there, not
        # a kernel, and Numba keeps a failed compile for good
        want_partials = [pairs[i][0].partial() for i in pick]
        with mock.patch.object(kernels, "partial_words", partial_words):
            together = gpu.partials([pairs[i][1] for i in pick]) if len(statuses) % 2 else [None] * len(pick)
            for i, got, want_partial in zip(pick, together, want_partials):
                assert (got or pairs[i][1].partial()) == want_partial
        for i in pick:
            c, g = (s._state for s in pairs[i])
            assert (g.frames, g.trailing, g.survivors, g.fallbacks) == (c.frames, c.trailing, c.survivors, c.fallbacks)
            assert g.relative_cost == pytest.approx(c.relative_cost, abs=1e-5)
    assert statuses and set(statuses) == {C.PARTIAL_OK}  # (a stale start: asked again from the commit point)
    got = gpu.finish([p[1] for p in pairs])
    assert cpu.finish([p[0] for p in pairs]) == want
    assert_same_results(got, want)
    return gpu


def assert_same_results(got, want):
    """A stream's results against the offline decode's: costs to 1e-5 (a committed prefix's
    cost is summed apart from the rest)."""
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert (a.words, a.word_frames, a.reached_final, a.num_frames) == (b.words, b.word_frames, b.reached_final,
                                                                          b.num_frames)
        assert (a.cost, a.acoustic_cost, a.boost_cost, a.rescore_cost) == pytest.approx(
            (b.cost, b.acoustic_cost, b.boost_cost, b.rescore_cost), abs=1e-5)
        assert np.array_equal(a.frame_tokens, b.frame_tokens)  # (what word times read: the prefix's kept)


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
def test_streams_cuda_equal_cpu_and_offline(config):
    _, g = random_tlg(3, num_states=10)
    x = random_log_probs(3, batch=3, frames=9, columns=4)
    gpu = assert_streams_same(g, x, np.array([9, 6, 0]), seed=1, **CONFIGS[config])
    if config == "overflow regrows":
        assert gpu._backend._lanes.capacity > 3  # a frame overflowed: the lanes grew mid-stream


def test_streams_cuda_take_a_call_s_chunks_as_one_array():
    """advance() given one (N, T, V) array and lengths on both backends: the same as the
    list of its chunks (NaN past each chunk's length, never read); a CuPy array where a GPU
    is here is read back in one transfer."""
    _, g = random_tlg(5, num_states=10)
    x = random_log_probs(5, batch=4, frames=9, columns=4)
    assert_streams_same(g, x, np.array([9, 6, 0, 8]), seed=2, batched=True, **CONFIGS["wide"])
    if not SIMULATED:
        import cupy

        cpu, gpu = Decoder(g, device="cpu"), Decoder(g, device="cuda")
        want = [cpu.stream(), cpu.stream()]
        cpu.advance(want, x[:2, :5], [5, 3])
        got = [gpu.stream(), gpu.stream()]
        gpu.advance(got, cupy.asarray(x[:2, :5]), cupy.asarray([5, 3]))
        assert gpu.stats.device_seconds > 0  # (the call's frame steps, timed by CUDA events)
        assert_same_results(gpu.finish(got), cpu.finish(want))


def test_tokens_tied_at_the_max_active_cost_survive_on_both():
    _, g = tied_tlg()
    x = np.log(np.full((2, 5, 2), 0.5, np.float32))
    _, got = assert_same(g, x, np.array([5, 3]), max_active=1, min_active=1)
    assert all(r.reached_final for r in got)


def test_a_best_path_longer_than_the_path_buffer_is_traced_on_the_host():
    """A chain of 80 epsilon arcs in one frame: a best path of more arcs than the GPU's path
    buffer (2 (T + 2) + 64) is traced from the backpointers on the host (it was reported as
    a token overflow, and the capacity doubled without end)."""
    f = fst.VectorFst()
    for _ in range(81):
        f.add_state()
    f.set_start(0)
    w = lambda c: fst.Weight(f.weight_type(), c)  # noqa: E731
    f.add_arc(0, fst.Arc(1, 0, w(0.0), 0))
    f.add_arc(0, fst.Arc(2, 0, w(0.0), 1))
    for s in range(1, 80):
        f.add_arc(s, fst.Arc(2, 0, w(0.0), s))
        f.add_arc(s, fst.Arc(0, 0, w(-0.01), s + 1))
    f.add_arc(80, fst.Arc(1, 0, w(0.0), 80))
    f.set_final(80, w(0.0))
    f.arcsort("ilabel")
    g = graph_from_fst(f, TokenTable(("<blk>", "t1"), blank=0))
    x = np.log(np.full((2, 2, 2), 0.5, np.float32))
    gpu, got = assert_same(g, x, np.array([1, 2]), beam=50.0, max_active=1000, min_active=1, token_capacity=128)
    assert gpu.stats.regrowths == 0 and got[0].reached_final and got[0].cost < 0


def test_a_cuda_stream_whose_start_overflows_opens_in_grown_lanes(tiny, monkeypatch):
    """A token capacity below the start's epsilon closure: the lanes grow and the stream
    opens (each try read the old workspace's status, and the lanes grew without end)."""
    from wfst.cuda_streams import StreamLanes

    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="normal")
    g = wfst.load_graph(r.directory)
    grown, grow = [], StreamLanes._grow

    def counted(self, *args):
        grown.append(1)
        assert len(grown) < 6, "the lanes grow without end"
        return grow(self, *args)

    monkeypatch.setattr(StreamLanes, "_grow", counted)
    config = dict(beam=7.0, max_active=3, min_active=1, token_capacity=1)
    x = random_log_probs(3, 1, 9, 5)
    gpu = Decoder(g, device="cuda", **config)
    s = gpu.stream()
    assert grown
    gpu.advance([s], [x[0]])
    assert gpu.finish([s]) == Decoder(g, **config).decode(x)


def test_cuda_streams_keep_no_lattice_yet():
    _, g = random_tlg(3, num_states=10)
    with pytest.raises(wfst.OptionError, match="streams on device='cuda' keep the best path only so far"):
        Decoder(g, device="cuda", lattice_beam=4.0).stream()


def test_cuda_streams_count_a_redone_frames_fltop_fallback_once():
    """A frame that takes FLToP's fallback and then overflows the token capacity is rolled
    back and searched again: its fallback counts once, as on the CPU (it counted twice).
    And advance() of no stream before any was opened does nothing, as on the CPU."""
    _, g = random_tlg(0, num_states=7, arcs_per_state=4, eps_per_state=2)
    x = random_log_probs(1, batch=1, frames=6, columns=4, sharpness=3.0)
    gpu = assert_streams_same(g, x, np.array([6]), beam=5.0, max_active=1, min_active=0, token_capacity=1,
                              blank_penalty=-0.7, token_top_n=3, token_rel_threshold=1.0)
    assert gpu._backend._lanes.capacity > 1
    Decoder(g, device="cuda").advance([], [])


@pytest.mark.parametrize("graphs", [False, True], ids=["launches", "graphs"])
def test_streams_cuda_with_boosts_phrases_and_rescoring(small_graph, graphs):
    g, lms = small_graph
    x = random_log_probs(5, batch=3, frames=8, columns=5, sharpness=1.5)
    boost = [{"ab": 2.0}, None, {"ab ba": 2.0, "ba": 0.5}]
    assert_streams_same(g, x, np.array([8, 7, 8]), boost=boost, seed=2, graphs=graphs, beam=20.0, max_active=40,
                        min_active=1, token_capacity=128, **lms)


@pytest.mark.parametrize("graphs", [False, True], ids=["launches", "graphs"])
def test_streams_cuda_lanes_commit_grow_and_are_reused(tiny, monkeypatch, graphs):
    """More streams than lanes (the workspace grows), commits of the stable prefix written
    back to the lanes (after a call once 16 backpointers are stored; before a call when its
    chunk would not fit the lane's 12 step rows, which also grow), and a finished stream's
    lane taken by a new one: all exact."""
    from wfst import cuda_streams, ledger

    monkeypatch.setattr(ledger, "COMMIT_AT", 16)
    monkeypatch.setattr(cuda_streams, "_FIRST_STEP_ROWS", 12)
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    x = random_log_probs(9, batch=6, frames=14, columns=5, sharpness=3.0)
    lengths = np.array([14, 12, 14, 9, 13, 14])
    config = dict(beam=12.0, max_active=20, min_active=1)
    gpu = assert_streams_same(g, x, lengths, seed=4, graphs=graphs, **config)
    lanes = gpu._backend._lanes
    assert (lanes._graphs is not None) == graphs  # captured once the lanes stopped growing
    assert lanes.L >= 6 and all(ref is None for ref in lanes.lanes)
    kept = gpu.stream()
    assert kept._state.lane == 0
    gc.collect()  # the finished streams' finalizers leave the lane to its new stream
    assert lanes.lanes[0]() is kept._state
    dropped = gpu.stream()
    lane = dropped._state.lane
    del dropped
    gc.collect()
    assert lanes.lanes[lane] is None  # a stream dropped unfinished frees its lane
    # streams longer than the first step rows: commits before calls (to fit the chunk) and
    # after, several lanes' at once (their arrays read and written together), in both token
    # buffers (the first stream one frame ahead of the others)
    commits, commit = [], cuda_streams.StreamLanes._commit

    def counted(self, streams):
        done = commit(self, streams)
        commits.append({s.buffer for s, d in zip(streams, done) if d})
        return done

    monkeypatch.setattr(cuda_streams.StreamLanes, "_commit", counted)
    dec = Decoder(g, device="cuda", **config)
    y = random_log_probs(0, batch=4, frames=41, columns=5, sharpness=6.0)
    streams = [dec.stream() for _ in range(4)]
    dec.advance(streams[:1], [y[0, :1]])
    for t in range(0, 40, 4):
        dec.advance(streams, [y[0, 1 + t:5 + t]] + [y[i, t:t + 4] for i in (1, 2, 3)])
    dec.advance(streams[1:], [y[i, 40:] for i in (1, 2, 3)])
    assert all(s._state.base > 0 for s in streams)  # committed
    assert {0, 1} in commits  # two lanes or more in one commit, one in each buffer
    assert_same_results(dec.finish(streams), Decoder(g, **config).decode(y, np.array([41] * 4)))


def advance_both(gpu, cpu, pairs, chunks):
    """One call of (GPU stream, CPU stream) pairs with the same chunks: the same readings."""
    for d in (0, 1):
        (gpu, cpu)[d].advance([p[d] for p in pairs], chunks)
    for gs, cs in pairs:
        a, c = gs._state, cs._state
        assert (a.frames, a.trailing, a.survivors, a.dead) == (c.frames, c.trailing, c.survivors, c.dead)


@pytest.mark.filterwarnings("ignore:.*have no path:UserWarning")
def test_cuda_streams_in_a_silence_that_commits_nothing_keep_bounded_backpointers(tiny, monkeypatch):
    """Speech, then blank-dominated frames in which no commit succeeds (a silence whose
    paths disagree on the last words; here every commit is refused), one stream dying at
    its end.  Runs of blanks fold into one backpointer (prune_store_kernel, as the CPU's
    _store) and a commit that commits nothing drops the backpointers no live path passes
    (kernels.cpu.compact_stream on the lane's copy): the backpointers held stay a fraction
    of the frames' survivors.  Step rows grow, a lane's backpointer slots do not with them
    (they were rows x bp_per_frame: one such stream three minutes in held 116 MiB of every
    lane at max_active 7,000).  The host's rows of log-probs are dropped too, for the
    blank's log-prob a frame and each backpointer's read (CudaStream.drop_rows).  Readings
    and results equal the CPU's streams' and the offline decode's; the dying stream's
    ghosts were folded into runs (their backpointers unfolded at its last step: _ghosts)."""
    from wfst import cuda_streams, ledger
    from wfst.cuda_arrays import to_host

    monkeypatch.setattr(ledger, "COMMIT_AT", 16)
    monkeypatch.setattr(cuda_streams, "_FIRST_STEP_ROWS", 12)
    monkeypatch.setattr(cuda_streams, "_DROP_ROWS_AT", 64)  # (kernels.constants.ROWS_AT, the least drop_rows takes)
    monkeypatch.setattr(ledger.Ledger, "commit_arrays", lambda self, *a: setattr(self, "next_commit", 2 * a[4]))
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    blank = g.tokens.blank
    rng = np.random.default_rng(2)
    T = 150
    x = random_log_probs(5, batch=2, frames=T, columns=5, sharpness=3.0)
    quiet = rng.normal(0.0, 1.0, (2, T - 18, 5))
    quiet[..., blank] += 5.0
    x[:, 12:T - 6] = quiet - np.logaddexp.reduce(quiet, axis=2, keepdims=True)
    x[0, T - 6:] = -np.inf  # letters no path reads in a row: stream 0 dies in its last frames
    x[0, np.arange(T - 6, T), [4, 1] * 3] = 0.0
    config = dict(beam=8.0, max_active=8, min_active=1)
    dec, cpu = Decoder(g, device="cuda", **config), Decoder(g, **config)
    pairs = [(dec.stream(), cpu.stream()) for _ in range(2)]
    lanes, most, rows = dec._backend._lanes, 0, 0
    for t in range(0, T, 6):
        advance_both(dec, cpu, pairs, [x[0, t:t + 6], x[1, t:t + 6]])
        if t >= 36:
            most = max(most, int(np.array(to_host(lanes.ws_x.bp.n)).max()))
            rows = max(rows, *(gs._state.held for gs, _ in pairs))
    assert all(gs._state.base == 0 for gs, _ in pairs) and pairs[0][0]._state.dead  # nothing committed
    assert most < min(gs._state.survivors for gs, _ in pairs) / 5  # (without the compaction 173 of 548)
    assert lanes.rows >= 150 and lanes.P < lanes.rows * lanes.bp_per_frame / 4
    assert rows <= 64 + 6 and all(gs._state.rows_from > 64 for gs, _ in pairs)  # (without the drop: 150 rows)
    with pytest.warns(UserWarning, match="no path"):
        want = Decoder(g, **config).decode(x, np.array([T, T]))
    assert want[0].cost == np.inf and want[0].words
    assert_same_results(dec.finish([p[0] for p in pairs]), want)
    assert_same_results(cpu.finish([p[1] for p in pairs]), want)


def test_a_cuda_stream_drops_its_rows_of_log_probs_for_the_reads_its_paths_make():
    """CudaStream's log-probs on the host, as kernels.cpu.KeptReads keeps them: drop_rows
    keeps the blank's log-prob of each frame before the last decoded one and each
    backpointer's read, and moves the rows of frames not decoded yet with that frame's;
    commits then drop the blanks (the rows start after the new base) or the rows (they
    start before it) of the frames before the commit point."""
    from types import SimpleNamespace

    from wfst.kernels import cpu

    from wfst.cuda_streams import CudaStream

    x = np.random.default_rng(0).normal(size=(105, 3)).astype(np.float32)
    s = CudaStream(SimpleNamespace(V=3), 0, 8, {}, None)
    s.append(x)
    s.frames = 100  # (the last 5 rows: a chunk not decoded yet)
    ilabel = np.array([0, 1, 2, 3], np.int32)  # arc -> input label; label 1 (column 0) is the blank
    trace = cpu.new_trace(100, 8)
    trace.arc[:99] = np.arange(99) % 3 + 1  # backpointer g stored at step g + 1 read frame g (the last
    trace.steps[1:] = np.arange(101)  # frame's tokens are not stored yet)
    s.drop_rows(trace, 99, ilabel, 1)
    assert (s.rows_from, s.held, s.drop_at) == (99, 6, 256)
    np.testing.assert_array_equal(s.hist[:6], x[99:])
    np.testing.assert_array_equal(s.blanks[:99], x[:99, 0])
    np.testing.assert_array_equal(s.reads[:99], x[np.arange(99), np.arange(99) % 3])
    s.base = 40  # a commit of 40 steps (Ledger.commit_arrays moved base): the rows start after it
    s.committed(0)
    assert (s.rows_from, s.held) == (99, 6)
    np.testing.assert_array_equal(s.blanks[:59], x[40:99, 0])
    s.frames, s.base = 105, 102  # the chunk decoded, then a commit past the rows' start
    s.committed(40)
    assert (s.rows_from, s.held) == (102, 3)
    np.testing.assert_array_equal(s.kept_reads().logp[:3], x[102:])


@pytest.mark.filterwarnings("ignore:.*have no path:UserWarning")
def test_a_cuda_stream_that_dies_in_a_run_of_blanks_ends_at_its_last_frame():
    """Two words spelled alike (tied_tlg) whose paths never meet, blanks, then frames of a
    token no arc reads: the search dies while its survivors' backpointers are runs of blanks
    folded into earlier ones (prune_store_kernel), and the ghosts' paths end at their own
    step (_ghosts stores their backpointers after all), as the CPU's do."""
    f, tied = tied_tlg()
    g = graph_from_fst(f, TokenTable(("<blk>", "t1", "t2"), blank=0), tied.words)  # (no arc reads t2)
    rng = np.random.default_rng(5)
    x = rng.normal(0.0, 1.0, (2, 30, 3)).astype(np.float32)
    x[:, 0, 1] += 8.0
    x[:, 1:, 0] += 5.0
    x = x - np.logaddexp.reduce(x, axis=2, keepdims=True)
    x[0, 26:] = -np.inf
    x[0, 26:, 2] = 0.0
    config = dict(beam=8.0, max_active=8, min_active=1)
    dec, cpu = Decoder(g, device="cuda", **config), Decoder(g, **config)
    pairs = [(dec.stream(), cpu.stream()) for _ in range(2)]
    for t in range(0, 30, 5):
        advance_both(dec, cpu, pairs, [x[0, t:t + 5], x[1, t:t + 5]])
        assert all(gs.partial() == cs.partial() for gs, cs in pairs)
    assert pairs[0][0]._state.dead and not pairs[1][0]._state.dead
    with pytest.warns(UserWarning, match="no path"):
        want = Decoder(g, **config).decode(x, np.array([30, 30]))
    assert want[0].cost == np.inf and want[0].words and len(want[0].frame_tokens) == 26
    assert_same_results(dec.finish([p[0] for p in pairs]), want)
    assert_same_results(cpu.finish([p[1] for p in pairs]), want)


def test_demo_graph_cuda_equals_cpu(demo, tmp_path):
    r = compile_graph(tmp_path / "bpe", tokens=demo / "bpe_tokens.txt", spm=demo / "bpe.model",
                      lm=demo / "lm.arpa", topology="compact", cache_dir=tmp_path / "cache")
    g = wfst.load_graph(r.directory)
    x, lengths = synthetic.from_texts(["it is a truth"], g.tokens, spm=demo / "bpe.model", seed=4)
    gpu, _ = assert_same(g, x, lengths, beam=10.0, max_active=12, min_active=4)
    assert gpu.stats.tokens_per_frame > 4


def test_kernels_compile_for_sm90(tiny):
    """Every kernel type-checks and compiles to PTX for compute capability 9.0."""
    pytest.importorskip("nvidia.cuda_nvrtc", reason="needs NVRTC (pip install nvidia-cuda-nvrtc-cu12)")
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("ptx_check.py")), str(r.directory)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("signature(s) compiled to PTX for sm_90") == 21, out.stdout
    assert "refuses" not in out.stdout, out.stdout


@cuda.jit
def _scan_kernel(values, out, total):
    """A block's exclusive scan of `values`, one per thread (K._block_exclusive_scan)."""
    counts = cuda.shared.array(64, int64)
    sh = cuda.shared.array(1, int64)
    tid = cuda.threadIdx.x
    counts[tid] = values[tid]
    cuda.syncthreads()
    K._block_exclusive_scan(counts, cuda.blockDim.x, sh, 0)
    out[tid] = counts[tid]
    if tid == 0:
        total[0] = sh[0]


@pytest.mark.parametrize("threads", [4, 64])
def test_block_exclusive_scan(threads):
    """The block scan of prune_store and batch_scan: one thread's loop for small blocks,
    Hillis-Steele rounds above a warp; both equal NumPy's exclusive prefix sum."""
    values = np.random.default_rng(threads).integers(0, 100, threads).astype(np.int64)
    out, total = np.zeros(threads, np.int64), np.zeros(1, np.int64)
    if SIMULATED:
        _scan_kernel[1, threads](values, out, total)
    else:
        d_out, d_total = cuda.to_device(out), cuda.to_device(total)
        _scan_kernel[1, threads](cuda.to_device(values), d_out, d_total)
        out, total = d_out.copy_to_host(), d_total.copy_to_host()
    assert out.tolist() == (np.cumsum(values) - values).tolist() and total[0] == values.sum()


@pytest.mark.skipif(not SIMULATED, reason="the simulator's stand-in for device memory")
def test_the_simulator_refuses_a_host_array_where_device_memory_belongs():
    # on a GPU a NumPy array has no device view: the simulator must refuse it too, or a
    # missing upload passes every simulated test and fails every real decode
    from wfst.cuda_arrays import array_module, on_device

    xp = array_module()
    made = xp.zeros(4, np.float32)
    for a in (made, made[1:], made + 1, xp.asarray(np.ones(2)), xp.concatenate([made, made])):
        assert on_device(a) is a
    with pytest.raises(AssertionError, match=r"a host array \(NumPy, float32 \(4,\)\)"):
        on_device(np.zeros(4, np.float32))
    assert type(np.asarray(made)) is np.ndarray  # (what a copy to the host gives back)
    from wfst.cuda_arrays import to_host

    back = to_host(made)  # a copy, as from a GPU: a view was overwritten when the workspace was reused
    assert type(back) is np.ndarray and not np.shares_memory(back, made)
