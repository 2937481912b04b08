"""The decoder (CPU backend) against references nobody here wrote: OpenFST's shortest path
and Kaldi's FasterDecoder; plus its config, inputs and errors."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from decoding import demo_emissions, random_log_probs, random_tlg, tied_tlg, top_k_only
from fst_paths import shortest_decode
from hypothesis import given, settings
from hypothesis import strategies as st
from wfst.graphs import compile_graph
from wfst.kernels.common import cost_key, key_cost, pack
from wfst.kernels.select import RADIX_BINS, select_cost

import wfst
from wfst import contexts
from wfst.boost import NO_PHRASES
from wfst.decoder import DecodeInputError, Decoder, DecoderConfig, DecoderMemoryError
from wfst.graph import read_fst
from wfst.inputs import host_array

WIDE = dict(beam=1e4, max_active=10**6, min_active=0)


def assert_exact(result, words, cost):
    """Our best path is OpenFST's: same words (the best path is unique here) and cost."""
    if words is None:
        assert not result.reached_final
        return
    assert result.reached_final
    assert list(result.word_ids) == words
    assert result.cost == pytest.approx(cost, abs=1e-4 + 1e-6 * abs(cost))


# --------------------------------------------------------------------------- shared logic

@given(st.lists(st.floats(width=32, allow_nan=False), min_size=2, max_size=50))
def test_cost_key_orders_like_float32(costs):
    costs = np.array(costs, np.float32)
    keys = np.array([cost_key(c) for c in costs], np.uint32)
    for a, ka in zip(costs, keys):
        assert key_cost(ka) == a
        for b, kb in zip(costs[:5], keys[:5]):
            assert (ka < kb) == (a < b) and (ka == kb) == (a == b)


def test_pack_orders_by_cost_then_arc():
    assert pack(1.0, 7) < pack(1.5, 0) < pack(1.5, 1)
    assert pack(-2.0, 9) < pack(-1.0, 0) and pack(-0.0, 3) == pack(0.0, 3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([-3.5, -1.0, 0.0, 0.25, 1.0, 2.0, 7.75, 1e6, np.inf]) |
                st.floats(-100, 100, width=32), min_size=1, max_size=300), st.data())
def test_radix_select_is_nth_element(costs, data):
    costs = np.array(costs, np.float32)
    k = data.draw(st.integers(0, len(costs) - 1))
    assert select_cost(costs, len(costs), k, np.zeros(RADIX_BINS, np.int64)) == np.partition(costs, k)[k]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([-np.inf, -3.5, -1.0, -0.0, 0.0, -7.75]) | st.floats(-60, 0, width=32), min_size=2,
                max_size=120), st.data())
def test_fltop_top_n_bound_by_radix_select_is_the_scans_and_numpys(row, data):
    """FLToP's top_n-th largest log-prob (ties counted) by radix select, as large top_n and V
    take it, and by one scan per distinct value: the same columns kept, NumPy's k-th."""
    from wfst.kernels.fltop import _kth_by_scans
    from wfst.kernels.select import select_largest

    x = np.array([row], np.float32)
    top_n = data.draw(st.integers(1, len(row) - 1))
    radix = select_largest(x[0], top_n - 1, np.zeros(RADIX_BINS, np.int64))
    scans = _kth_by_scans(x, 0, top_n)
    kth = -np.partition(-x[0], top_n - 1)[top_n - 1]
    assert radix == kth
    if kth > -np.inf:
        assert scans == kth
    else:  # fewer finite values than top_n: each keeps every finite column
        assert np.array_equal(x[0] >= scans, x[0] > -np.inf)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3), st.sampled_from([0.0, 0.5, 1.0, -1.0])
                          | st.floats(-5, 5, width=32), st.integers(0, 1000), st.integers(0, 3)), max_size=60),
       st.integers(1, 45), st.booleans())
def test_hash_recombination_keeps_min_cost_arc_then_predecessor_context(candidates, capacity, contextual):
    """The CPU search's open-addressing table against a dict: per (state, context) key the
    smallest (cost, arc id, predecessor's context) wins; a full token list is reported
    (-1), never overwritten.  Without contexts the key is the state alone."""
    from wfst.kernels import cpu

    ws = cpu.new_workspace(capacity)
    context = contexts.context(None, [NO_PHRASES]) if contextual else None
    n, best, full = 0, {}, False
    for state, ctx, cost, arc, pctx in candidates:
        cost = np.float32(cost)
        if not contextual:
            ctx = pctx = 0
        idx, n, _ = cpu._recombine(state, ctx, cost, 0, arc, pctx, ws.ht, ws.tl, n, context)
        if idx < 0:
            assert (state, ctx) not in best
            full = True
            continue
        best[state, ctx] = min(best.get((state, ctx), (np.inf, 0, 0)), (float(cost), arc, pctx))
    tl, ht = ws.tl, ws.ht
    got = {(int(s), int(x)): (float(c), int(a), int(ht.pctx[slot]) if contextual else 0)
           for s, x, c, a, slot in zip(tl.state[:n], tl.ctx[:n], tl.cost[:n], tl.arc[:n], tl.slot[:n])}
    assert got == best and n == len(best)
    # overflow is reported exactly when the distinct keys outnumber the slots
    keys = {(s, x if contextual else 0) for s, x, *_ in candidates}
    assert full == (len(keys) > capacity)


# --------------------------------------------------------------------------- exactness vs OpenFST

@pytest.mark.parametrize("seed", range(25))
def test_random_graphs_match_openfst_shortest_path(seed):
    f, g = random_tlg(seed)
    x = random_log_probs(seed, batch=3, frames=9, columns=4)
    results = Decoder(g, **WIDE).decode(x)
    for b in range(3):
        assert_exact(results[b], *shortest_decode(f, x[b]))


@pytest.mark.parametrize("seed", range(5))
def test_cpu_layout_groups_each_states_arcs(seed):
    """Every arc once, in its state's group: emitting then epsilon, word arcs last in each
    and in order of (weight, arc id)."""
    from wfst.kernels.cpu import interleave_graph

    _, g = random_tlg(seed)
    states, arcs = interleave_graph(g.e_indptr, g.ne_indptr, g.ilabel, g.olabel, g.weight, g.nextstate)
    assert sorted(arcs[:, 3]) == list(range(len(g.ilabel)))
    for s in range(len(g.final)):
        first, word, eps, eps_word = states[s]
        end = states[s + 1, 0]
        assert first <= word <= eps <= eps_word <= end
        a = arcs[first:end, 3]
        assert sorted(a[:eps - first]) == list(range(g.e_indptr[s], g.e_indptr[s + 1]))
        assert sorted(a[eps - first:]) == list(range(g.ne_indptr[s], g.ne_indptr[s + 1]))
        words = arcs[first:end, 4] != 0
        assert not words[:word - first].any() and words[word - first:eps - first].all()
        assert not words[eps - first:eps_word - first].any() and words[eps_word - first:].all()
        assert (arcs[first:eps, 0] == g.ilabel[a[:eps - first]]).all() and (arcs[eps:end, 0] == 0).all()
        for lo, hi in [(word, eps), (eps_word, end)]:
            keys = list(zip(g.weight[arcs[lo:hi, 3]], arcs[lo:hi, 3]))
            assert keys == sorted(keys)


@pytest.mark.parametrize("topology", ["normal", "compact", "minimal"])
def test_tiny_tlg_matches_openfst(tiny, topology):
    r = compile_graph(tiny / topology, tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa",
                      lexicon=tiny / "lexicon.txt", word_boundary="|", topology=topology)
    g, tlg = wfst.load_graph(r.directory), read_fst(r.directory / "TLG.fst")
    x = random_log_probs(7, batch=7, frames=12, columns=5, sharpness=3.0)
    lengths = np.array([12, 11, 7, 5, 3, 1, 0])  # 0: the start's epsilon path to a final state
    for b, res in enumerate(Decoder(g, **WIDE).decode(x, lengths)):
        assert_exact(res, *shortest_decode(tlg, x[b, : lengths[b]]))
        assert res.acoustic_cost + res.graph_cost == pytest.approx(res.cost)


@pytest.mark.parametrize("name", ["char_normal", "char_compact", "char_minimal",
                                  "bpe_normal", "bpe_compact", "bpe_minimal"])
def test_demo_graphs_match_openfst(demo, demo_graphs, name):
    """Wide beam on the real demo TLGs: the best path is OpenFST's.  Emissions keep their
    best columns per frame (3 BPE, 2 characters; the rest -inf) so that the exact
    composition stays small."""
    path, kw = demo_graphs[name]
    g, tlg = wfst.load_graph(path), read_fst(path / "TLG.fst")
    _, x, lengths = demo_emissions(demo, g, kw, count=4, seed=2)
    x = top_k_only(x, 3 if name.startswith("bpe") else 2)
    for b, res in enumerate(Decoder(g, **WIDE).decode(x, lengths)):
        assert_exact(res, *shortest_decode(tlg, x[b, : lengths[b]]))


def test_tokens_tied_at_the_max_active_cost_survive():
    """More than max_active tokens tie at the best cost (two words spelled alike): the
    max_active-th cost is the best, Kaldi's cutoff, and keeps none of them (the search
    died); the tied tokens survive and the best path is OpenFST's."""
    tlg, g = tied_tlg()
    x = np.log(np.full((2, 6, 2), 0.5, np.float32))
    x[1, :, 1] = np.log(0.75)
    x[1, :, 0] = np.log(0.25)
    for b, r in enumerate(Decoder(g, max_active=1, min_active=1).decode(x)):
        words, cost = shortest_decode(tlg, x[b])
        assert r.reached_final and len(r.words) == 1 and r.cost == pytest.approx(cost, abs=1e-5)


# --------------------------------------------------------------------------- vs Kaldi's FasterDecoder

@pytest.mark.parametrize("name,max_active", [("char_normal", 3000), ("char_compact", 3000), ("char_minimal", 3000),
                                             ("bpe_normal", 3000), ("bpe_compact", 3000), ("bpe_minimal", 3000),
                                             ("char_compact", 40), ("bpe_compact", 100)])
def test_demo_graphs_match_kaldi_faster_decoder(demo, demo_graphs, name, max_active):
    """Same beam and max_active as Kaldi's FasterDecoder on a few hundred synthetic
    utterances: the same words on >= 99% of them, and the same cost where the words agree
    (to 1e-3 plus Kaldi's float32 summation error, which grows with the cost)."""
    pytest.importorskip("kaldi_decoder")
    from wfst_bench.kaldi import KaldiFasterDecoder

    path, kw = demo_graphs[name]
    g = wfst.load_graph(path)
    texts, x, lengths = demo_emissions(demo, g, kw, count=300)
    assert len(texts) >= 200
    lengths[0] = 0  # no frames: the start's epsilon path to a final state, in both
    settings_ = dict(beam=16.0, max_active=max_active, min_active=20)
    ours = Decoder(g, **settings_).decode(x, lengths)
    kaldi = KaldiFasterDecoder(path / "TLG.fst", **settings_).decode(x, lengths)
    same = [a.word_ids == k.word_ids for a, k in zip(ours, kaldi)]
    assert sum(same) >= 0.99 * len(texts), f"{sum(same)}/{len(texts)} same words"
    assert same[0] and ours[0].reached_final and ours[0].cost > 0
    for a, k, s in zip(ours, kaldi, same):
        if s:
            assert a.reached_final == k.reached_final
            assert a.cost == pytest.approx(k.cost, abs=1e-3 + 2e-6 * abs(k.cost))
        else:  # where the search differs, ours never keeps a worse path than Kaldi's by much
            assert a.cost <= k.cost + 1.0


# --------------------------------------------------------------------------- results and backends

def test_results_deterministic_across_runs_and_threads(demo, demo_graphs):
    path, kw = demo_graphs["bpe_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=12)
    one = Decoder(g, beam=12.0, max_active=500, num_threads=1).decode(x, lengths)
    many = Decoder(g, beam=12.0, max_active=500, num_threads=4).decode(x, lengths)
    again = Decoder(g, beam=12.0, max_active=500, num_threads=4).decode(x, lengths)
    assert one == many == again


def test_result_parts_and_word_frames(demo, demo_graphs):
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    texts, x, lengths = demo_emissions(demo, g, kw, count=10)
    for text, T, r in zip(texts, lengths, Decoder(g).decode(x, lengths)):
        assert r.num_frames == T and r.reached_final
        assert r.text == text  # the synthetic emissions of these sentences are clear enough
        assert r.words == tuple(g.words[i] for i in r.word_ids)
        assert list(r.word_frames) == sorted(r.word_frames) and 0 <= r.word_frames[0] and r.word_frames[-1] < T
        assert r.acoustic_cost > 0 and r.acoustic_cost + r.graph_cost == pytest.approx(r.cost)


def test_acoustic_scale_and_blank_penalty_match_openfst(tiny):
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g, tlg = wfst.load_graph(r.directory), read_fst(r.directory / "TLG.fst")
    x = random_log_probs(3, batch=3, frames=10, columns=5, sharpness=3.0)
    penalised = x.copy()
    penalised[:, :, 0] -= 0.7 / 0.6  # scale 0.6 turns this into +0.7 cost per blank frame
    for b, res in enumerate(Decoder(g, acoustic_scale=0.6, blank_penalty=0.7, **WIDE).decode(x)):
        assert_exact(res, *shortest_decode(tlg, penalised[b], acoustic_scale=0.6))


def test_capacity_overflow_grows_and_redoes(demo, demo_graphs):
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=3)
    reference = Decoder(g, beam=14.0, max_active=2000).decode(x, lengths)
    small = Decoder(g, beam=14.0, max_active=2000, token_capacity=8)
    assert small.decode(x, lengths) == reference
    assert small.stats.regrowths > 0 and small._capacity.tokens > 8


def test_max_active_is_exact(demo, demo_graphs):
    """max_active is the number of tokens kept (no ties here), not an approximation."""
    path, kw = demo_graphs["bpe_normal"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=2)
    d = Decoder(g, beam=40.0, max_active=37, min_active=0)
    d.decode(x, lengths)
    assert 30 < d.stats.tokens_per_frame <= 37


# --------------------------------------------------------------------------- frame-level token pruning

def fltop_reference(log_probs: np.ndarray, top_n: int | None, rel: float, blank: int) -> np.ndarray:
    """FLToP by NumPy: columns outside the frame's top_n (ties kept) or below R x the best
    probability become -inf; the blank is exempt from both."""
    V = log_probs.shape[-1]
    best = log_probs.max(axis=-1, keepdims=True)
    floor = best + (np.log(rel) if rel > 0 else -np.inf)
    kth = np.sort(log_probs, axis=-1)[..., V - min(top_n or V, V)][..., None]
    keep = (log_probs >= floor) & (log_probs >= kth)
    keep[..., blank] = True
    return np.where(keep, log_probs, -np.inf).astype(np.float32)


def dead(result) -> bool:
    """A search in which every token died: no path reads all its frames."""
    return result.acoustic_cost == np.inf and result.cost == np.inf and not result.reached_final


def with_fallback(decoder, x, pruned, T):
    """FLToP's reference with its fallback: the pruned frames, but a frame after which no token
    is left is taken unpruned.  Dying is for good, so the first such frame is found by bisection."""
    mixed = pruned[:T].copy()
    fallbacks = 0
    while dead(decoder.decode(mixed[None])[0]):
        lo, hi = 0, T  # alive after lo frames, dead after hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if dead(decoder.decode(mixed[None, :mid])[0]) else (mid, hi)
        mixed[hi - 1] = x[hi - 1]
        fallbacks += 1
    return mixed, fallbacks


@pytest.mark.filterwarnings("ignore:.*have no path:UserWarning")  # the reference's dead searches
@pytest.mark.parametrize("top_n,rel,blankless", [(1, 0.0, False), (2, 0.0, False), (4, 7e-3, False),
                                                 (None, 5e-2, False), (8, 1e-3, False), (3, 1.0, False),
                                                 (4, 7e-3, True), (3, 1.0, True)])
def test_fltop_equals_decoding_the_pruned_emissions(demo, demo_graphs, top_n, rel, blankless):
    """FLToP decodes as the pruned emissions do, but where they leave no token alive: that
    frame is read unpruned (and counted), so pruning never empties an utterance.  The blank
    is never pruned; `blankless` takes it away on some frames (probability 0), where
    pruning can then leave nothing to follow."""
    path, kw = demo_graphs["bpe_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=20)
    x[:, :, 5] = x[:, :, 9]  # exact ties at some ranks
    if blankless:
        x[:, 2::5, g.tokens.blank] = -np.inf
    pruned = Decoder(g, token_top_n=top_n, token_rel_threshold=rel)
    results = pruned.decode(x, lengths)
    reference = Decoder(g)
    expected = reference.decode(fltop_reference(x, top_n, rel, g.tokens.blank), lengths)
    fallbacks = 0
    for b in range(len(lengths)):
        if dead(expected[b]):
            T = int(lengths[b])
            mixed, n = with_fallback(reference, x[b], fltop_reference(x[b:b + 1], top_n, rel, g.tokens.blank)[0], T)
            expected[b] = reference.decode(mixed[None])[0]
            fallbacks += n
        assert not dead(results[b])
    assert results == expected
    assert pruned.stats.fltop_fallbacks == fallbacks
    assert fallbacks > 0 or not (blankless and rel == 1.0)  # the fallback is exercised
    if top_n == 1:
        full = Decoder(g)
        full.decode(x, lengths)
        assert pruned.stats.tokens_per_frame < full.stats.tokens_per_frame


# --------------------------------------------------------------------------- config and bad input

def test_config_is_frozen_and_validated():
    c = DecoderConfig(beam=10.0, max_active=100)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.beam = 3.0
    for bad, word in [(dict(beam=0), "beam"), (dict(beam=float("nan")), "beam"), (dict(max_active=0), "max_active"),
                      (dict(max_active=10, min_active=11), "min_active"), (dict(acoustic_scale=-1), "acoustic_scale"),
                      (dict(token_capacity=0), "token_capacity"), (dict(max_active=2.5), "max_active"),
                      (dict(blank_penalty=float("inf")), "blank_penalty"), (dict(token_top_n=0), "token_top_n"),
                      (dict(token_rel_threshold=1.5), "token_rel_threshold"),
                      (dict(cuda_graphs="yes"), "cuda_graphs"), (dict(context_beam=-0.5), "context_beam"),
                      (dict(context_beam=float("inf")), "context_beam")]:
        with pytest.raises(ValueError, match=word):
            DecoderConfig(**bad)


def test_min_active_defaults_to_kaldi_s_or_max_active_where_fewer():
    """max_active=5 alone is not refused for a min_active of 20 no one gave."""
    assert (DecoderConfig().min_active, DecoderConfig(max_active=5).min_active) == (20, 5)
    assert DecoderConfig(max_active=5, min_active=0).min_active == 0
    assert dataclasses.replace(DecoderConfig(max_active=5), beam=3.0).min_active == 5


def test_decoder_takes_a_config_and_overrides(tiny):
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|")
    d = Decoder(r.directory, DecoderConfig(beam=9.0), max_active=50)
    assert d.config.beam == 9.0 and d.config.max_active == 50
    # a min_active left to its default is the new max_active's default (the old one was carried
    # over: max_active=10 refused for a min_active of 20 no one gave, 7000 kept one of 10)
    assert Decoder(r.directory, DecoderConfig(), max_active=10).config.min_active == 10
    assert Decoder(r.directory, DecoderConfig(max_active=10), max_active=7000).config.min_active == 20
    assert Decoder(r.directory, DecoderConfig(max_active=10, min_active=3), max_active=7000).config.min_active == 3
    with pytest.raises(ValueError, match="device"):
        Decoder(r.directory, device="tpu")


@pytest.fixture
def tiny_decoder(tiny):
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|")
    return Decoder(r.directory, beam=20.0)


def test_bad_inputs_name_the_problem(tiny_decoder):
    d = tiny_decoder
    x = random_log_probs(0, batch=3, frames=6, columns=5)
    cases = [
        (x[:, :, :4], None, r"V=4 columns but the token table \(tokens.txt\) has 5"),
        (x.astype(np.float64), None, "float32"),
        (x[0], None, r"shape \(B, T, V\).*add a batch axis"),
        (x, np.array([6, 7, 2]), r"utterance 1: length 7 outside \[0, T=6\]"),
        (x, np.array([6, -1, 2]), "utterance 1: length -1"),
        (x, np.array([6, 6]), r"lengths must have shape \(3,\)"),
        (x, np.array([6.5, 6, 6]), "integers"),
        (x, np.array([6, 2**63 + 5, 2], np.uint64), r"utterance 1: length 9223372036854775813 outside"),  # not wrapped
        (x, np.array([1e300, 6, 2]), r"utterance 0: length 1e\+300 outside"),  # nor a float
        # no numbers: they read as shape (1,) ('got shape (1,)'), a generator as 'one number, <generator ...>'
        (None, None, r"log_probs must be an array of numbers \(NumPy, torch, CuPy or nested lists\); got NoneType"),
        ([[[0.0] * 5], [[0.0] * 5, [0.0]]], None, r"log_probs must be an array of numbers; NumPy cannot read this "
                                                 r"list as one \(lists of unequal lengths\?"),
        (x, (n for n in (6, 6, 6)), r"lengths must be an array of numbers .*; got generator"),
        (x, ["6", "6", "6"], r"lengths must be an array of numbers .*; got list"),
    ]
    for inputs, lengths, message in cases:
        with pytest.raises(DecodeInputError, match=message):
            d.decode(inputs, lengths)
    y = x.copy()
    y[2, 4, 1] = np.nan
    with pytest.raises(DecodeInputError, match="utterance 2: log_probs at frame 4 has NaN or"):
        d.decode(y)
    d.decode(y, np.array([6, 6, 4]))  # the NaN lies beyond utterance 2's length: fine
    y[1, 0, 0] = np.inf
    with pytest.raises(DecodeInputError, match=r"utterance 1: log_probs at frame 0 has NaN or \+inf \(2 utt"):
        d.decode(y)
    z = x.copy()
    z[1, 3] = -np.inf  # no token can be read there: no path passes frame 3
    with pytest.raises(DecodeInputError, match="utterance 1: log_probs at frame 3 has -inf in every column"):
        d.decode(z)
    d.decode(z, np.array([6, 3, 6]))  # beyond utterance 1's length: fine


def test_emissions_that_are_no_log_probs_are_warned_about(tiny_decoder, recwarn):
    """Probabilities or raw logits decode without an error, to words the LM weight no longer
    balances: each way in (batch, stream, lexicon-free) says so, on the user's line."""
    import warnings

    from wfst.beam_search import CtcBeamDecoder
    from wfst.errors import LogProbsWarning

    d = tiny_decoder
    x = random_log_probs(2, batch=2, frames=6, columns=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d.decode(x)  # log-softmax rows: nothing to say
        padded = x.copy()
        padded[1, 4:] = 7.0  # beyond utterance 1's length: not read
        d.decode(padded, np.array([6, 4]))
    beam = CtcBeamDecoder(d.graph.tokens)
    for call, where in ((lambda: d.decode(np.exp(x)), "utterance 0, frame 0 has 0.[0-9]+ > 0"),
                        (lambda: d.decode(padded), "utterance 1, frame 4 has 7 > 0"),
        (lambda: d.decode(np.where(padded == 7.0, np.nan, x + 2.0), np.array([6, 4])),  # (NaN padding hid it)
         "utterance 0, frame 0 has"),
                        (lambda: d.advance([d.stream()], [x[1] + 2.0]), "stream 0, chunk frame 0 has"),
                        (lambda: beam.decode(x + 3.0), "utterance 0, frame 0 has")):
        with pytest.warns(LogProbsWarning, match=f"not log-probabilities: {where}") as caught:
            call()
        assert caught[0].filename == __file__  # the user's line, not the package's


def test_frames_no_log_softmax_gives_are_named_where_every_token_died(tiny_decoder):
    """Padding of -1e8 decoded as frames (no lengths): finite, so not refused, but float32
    costs that large step by more than the beam; the warning names the frame."""
    x = random_log_probs(5, batch=2, frames=12, columns=5)
    x[1, 5:] = -1e8  # 7 frames: costs near 7e8 step by 64, more than the beam of 20
    with pytest.warns(UserWarning, match=r"utterance 1\).*Utterance 1's frame 5 has its largest log-prob -1e\+08, "
                                         r"below -log V - 1 = -2.61.*padding decoded as frames"):
        results = tiny_decoder.decode(x)
    assert results[1].cost == np.inf and tiny_decoder.stats.no_path == (1,)
    assert tiny_decoder.decode(x, np.array([12, 5]))[1].cost < np.inf  # with its length: fine


def test_a_search_that_dies_after_a_run_of_blanks_reads_each_blank(tiny_decoder):
    """Every token dies at a letter none can follow, right after a run of blanks (which the
    CPU search stores as one backpointer, and puts back when it reads the path): the path
    up to there reads "a" and each of the five blank frames, offline and as a stream fed a
    frame at a time."""
    d = tiny_decoder
    ilabel = d.graph.tokens.ilabels()
    x = np.full((1, 9, 5), -np.inf, np.float32)
    x[0, 0, ilabel["a"] - 1] = x[0, 1:6, ilabel["<blk>"] - 1] = x[0, 6:, ilabel["c"] - 1] = 0.0
    want = [ilabel["a"]] + [ilabel["<blk>"]] * 5
    with pytest.warns(UserWarning, match="no path"):
        offline = d.decode(x)[0]
    assert offline.cost == np.inf and offline.frame_tokens.tolist() == want
    s = d.stream()
    for t in range(9):
        d.advance([s], [x[0, t:t + 1]])
    assert s._state.dead and s._state.trailing + s._state.idle == 8  # (the frames after "a")
    with pytest.warns(UserWarning, match="no path"):
        assert d.finish([s])[0].frame_tokens.tolist() == want


def test_options_the_float32_search_cannot_hold_are_refused(tiny_decoder):
    """1e39 passes as finite but is +inf in the float32 search: every token would die."""
    g = tiny_decoder.graph
    for name in ("beam", "acoustic_scale", "beam_delta"):
        with pytest.raises(wfst.OptionError, match=f"DecoderConfig.{name}=1e\\+39: must be a finite .*float32.s range"):
            Decoder(g, **{name: 1e39})
    with pytest.raises(wfst.OptionError, match="DecoderConfig.blank_penalty=1e\\+39: must be a finite number of at "
                                               "most 10000 in size"):
        Decoder(g, blank_penalty=1e39)
    no_blank = wfst.TokenTable(g.tokens.symbols, None)
    with pytest.raises(wfst.OptionError, match="blank_penalty=1.0: the graph's tokens have no blank"):
        Decoder(dataclasses.replace(g, tokens=no_blank), blank_penalty=1.0)


def test_decoder_arguments_of_the_wrong_kind_are_named(tiny_decoder):
    g = tiny_decoder.graph
    for config in ("cuda", {"beam": 10.0}):  # the device as the second positional, options as a dict
        with pytest.raises(wfst.OptionError, match="config must be a wfst.DecoderConfig or None"):
            Decoder(g, config)
    with pytest.raises(wfst.OptionError, match="graph must be a wfst.Graph or the path"):
        Decoder(None)
    for lm in ("", False):
        with pytest.raises(wfst.OptionError, match="the language model must be a path"):
            Decoder(g, rescore_lm=lm)
    with pytest.raises(DecoderMemoryError, match="a stream needs about .* GiB"):  # not numpy's MemoryError
        Decoder(g, token_capacity=2**30).stream()


def test_a_graph_that_reads_no_frame_is_refused():
    """Its start state (and what its epsilon arcs reach) has no token arc: every utterance would
    die at frame 0, and the warning would blame the emissions."""
    import pywrapfst as fst

    from wfst.graph import graph_from_fst

    f = fst.VectorFst()
    for _ in range(3):
        f.add_state()
    f.set_start(0)
    f.set_final(2)
    f.add_arc(0, fst.Arc(0, 0, fst.Weight.one(f.weight_type()), 1))
    f.add_arc(2, fst.Arc(2, 0, fst.Weight.one(f.weight_type()), 2))  # unreachable
    g = graph_from_fst(f, wfst.TokenTable(("<blk>", "a"), 0))
    with pytest.raises(wfst.GraphFormatError, match="reads no frame: no arc with a token leaves its start state 0 "
                                                    "or the states its epsilon arcs reach"):
        Decoder(g)
    f.add_arc(1, fst.Arc(1, 0, fst.Weight.one(f.weight_type()), 2))  # one epsilon away: fine
    Decoder(graph_from_fst(f, wfst.TokenTable(("<blk>", "a"), 0)))


def test_edge_inputs_are_handled(tiny_decoder):
    d = tiny_decoder
    x = random_log_probs(1, batch=3, frames=6, columns=5)
    full = d.decode(x)
    empty = d.decode(x, np.array([0, 6, 0]))
    assert empty[0] == empty[2] and empty[0].num_frames == 0 and empty[1] == full[1]
    # no frames: the start's epsilon path to a final state (the empty sentence's LM cost)
    assert empty[0].words == () and empty[0].reached_final and empty[0].cost == empty[0].graph_cost > 0
    strided = np.asfortranarray(x)  # non-contiguous: copied, same answer
    assert d.decode(strided) == full
    frozen = x.copy()  # read-only (np.load's mmap_mode="r", np.frombuffer) and big-endian: copied as the
    frozen.flags.writeable = False  # search's type (a read-only array compiled the search anew, seconds;
    assert d.decode(frozen) == d.decode(x.astype(">f4")) == full  # ">f4" was refused as not float32)
    for array in (frozen, x.astype(">f4")):
        held = host_array(array)
        assert held.flags.writeable and held.dtype.isnative and held.dtype == np.float32
    s = d.stream()
    d.advance([s], [frozen[1, :3]])
    d.advance([s], [x[1, 3:].astype(">f4")])
    assert d.finish([s])[0] == full[1]
    y = x.copy()
    y[0, 2, 3] = -np.inf  # probability zero is a valid posterior
    assert len(d.decode(y)) == 3
    assert d.decode(x[:0]) == []


@pytest.mark.parametrize("lattice", [False, True])
def test_a_search_whose_tokens_all_die_says_so(demo, demo_graphs, lattice):
    """Emissions that the graph cannot spell (a random letter a frame, blank impossible)
    leave no token alive: the result has no words (the search ended before the first frame),
    cost +inf and no lattice, a warning names it and stats.no_path lists it; its neighbours
    in the batch decode as they would alone."""
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=2)
    rng = np.random.default_rng(0)
    spelled = np.full(x.shape[1:], -np.inf, np.float32)
    letters = [c for c in range(g.tokens.num_columns) if c != g.tokens.blank]
    spelled[np.arange(x.shape[1]), rng.choice(letters, x.shape[1])] = 0.0
    batch = np.stack([x[0], spelled, x[1]])
    lens = np.array([lengths[0], x.shape[1], lengths[1]])
    dec = Decoder(g, lattice_beam=4.0 if lattice else None)
    with pytest.warns(UserWarning, match=r"1 utterance\(s\) have no path .*\(utterance 1\)"):
        got = dec.decode(batch, lens)
    assert dec.stats.no_path == (1,)
    assert got[1].words == () and got[1].cost == np.inf and not got[1].reached_final
    assert got[1].lattice is None and got[1].nbest == ()
    if lattice:
        with pytest.raises(wfst.OptionError, match="this search keeps none: every token died"):
            got[1].word_confidences
    assert [got[0], got[2]] == dec.decode(x, lengths) and dec.stats.no_path == ()
    assert all(np.isfinite(r.cost) for r in (got[0], got[2]))


def test_torch_input_if_available(tiny_decoder):
    torch = pytest.importorskip("torch")
    x = random_log_probs(2, batch=2, frames=5, columns=5)
    assert tiny_decoder.decode(torch.from_numpy(x), torch.tensor([5, 3])) == tiny_decoder.decode(x, np.array([5, 3]))


def test_torch_inputs_numpy_cannot_hold_are_refused_or_read_if_available(tiny_decoder):
    """Tensors past NumPy's reach gave torch's own TypeError / RuntimeError from deep in the
    input path: bfloat16 (a model's usual output), meta, sparse, a gradient in a list; a
    lazily negated view, valid float32 data, was refused; a Tensor subclass skipped the
    torch path."""
    torch = pytest.importorskip("torch")
    x = random_log_probs(2, batch=2, frames=5, columns=5)
    lengths = np.array([5, 3])
    expected = tiny_decoder.decode(x, lengths)
    t = torch.from_numpy(x)

    class Mine(torch.Tensor):
        pass

    negated = torch.complex(torch.zeros_like(t), -t).conj().imag  # (float32 with torch's negative bit)
    assert negated.is_neg() and torch.equal(negated, t)
    for same in (negated, t.as_subclass(Mine).requires_grad_(), list(t.requires_grad_())):
        assert tiny_decoder.decode(same, [torch.tensor(5, dtype=torch.float32).requires_grad_(), 3]) == expected
    for bad, what in [(t.bfloat16(), "log_probs has torch dtype bfloat16, which NumPy cannot hold; convert it"),
                      (t.to("meta"), "log_probs is a torch tensor on the 'meta' device: it holds no data"),
                      (t.to_sparse(), "log_probs must be a dense torch tensor"),
                      (list(t.bfloat16()), "log_probs has torch dtype bfloat16")]:
        with pytest.raises(DecodeInputError, match=what):
            tiny_decoder.decode(bad, lengths)
    with pytest.raises(DecodeInputError, match=r"lengths has torch dtype bfloat16, which NumPy cannot hold; "
                                               r"convert it \(\.long\(\)\)"):
        tiny_decoder.decode(t, torch.tensor([5, 3]).bfloat16())
    s = tiny_decoder.stream()
    with pytest.raises(DecodeInputError, match="stream 0: a chunk has torch dtype bfloat16"):
        tiny_decoder.advance([s], [t[0].bfloat16()])
    tiny_decoder.advance([s], [negated[0]])
    assert tiny_decoder.finish([s]) == tiny_decoder.decode(x[:1])


def test_dlpack_input_numpy_cannot_read_is_refused():
    """A DLPack exporter NumPy cannot read (a dtype it has not, a tensor that needs its
    gradient) gave a raw BufferError / RuntimeError."""
    from wfst.inputs import host_array

    class Refusing:
        def __dlpack__(self, stream=None, **kw):
            raise BufferError("Can't export tensors that require gradient")

        def __dlpack_device__(self):
            return (1, 0)  # kDLCPU

    with pytest.raises(DecodeInputError, match=r"log_probs: NumPy cannot read this Refusing through DLPack \(Can't "
                                               r"export tensors that require gradient\); give float32 data"):
        host_array(Refusing())


def test_input_shapes_are_said_as_given(tiny_decoder):
    """A 0-d array was said to have shape (1,) (np.ascontiguousarray makes it 1-d); one (T, V)
    chunk given to advance() as the list of chunks, T chunks for one stream, now says so."""
    with pytest.raises(DecodeInputError, match=r"log_probs must have shape \(B, T, V\); got shape \(\)$"):
        tiny_decoder.decode(np.float32(-1.0))
    with pytest.raises(DecodeInputError, match=r"lengths must have shape \(2,\) to match log_probs; got one number"):
        tiny_decoder.decode(random_log_probs(2, batch=2, frames=5, columns=5), np.int64(5))
    assert tiny_decoder.decode(random_log_probs(2, batch=1, frames=5, columns=5), np.int64(4))  # (a batch of one)
    s = tiny_decoder.stream()
    with pytest.raises(DecodeInputError, match=r"advance\(\) got 1 streams but 3 chunks \(one \(T, V\) array is T "
                                               r"chunks of a frame: give a list, \[chunk\]\)"):
        tiny_decoder.advance([s], random_log_probs(2, batch=1, frames=3, columns=5)[0])


def test_memory_estimate_refuses_impossible_searches(tiny_decoder, tiny):
    huge = Decoder(tiny_decoder.graph, max_active=2_000_000_000, token_capacity=2_000_000_000)
    x = random_log_probs(0, batch=1, frames=3, columns=5)
    with pytest.raises(DecoderMemoryError, match=r"GiB of host memory.*max_active=2000000000"):
        huge.decode(x)


def test_a_batch_too_big_for_memory_is_decoded_in_groups_that_fit(tiny_decoder, monkeypatch):
    """Where the whole batch's workspaces do not fit (a GPU's batch of 1,024 long utterances),
    decode searches it in groups that do, longest first, with the same results."""
    x = random_log_probs(3, batch=5, frames=6, columns=5)
    lengths = np.array([6, 2, 5, 0, 4])
    expected = tiny_decoder.decode(x, lengths)
    backend, groups = tiny_decoder._backend, []
    one = backend.search_bytes(tiny_decoder._capacity, 6, 0)
    search = backend.search
    monkeypatch.setattr(backend, "free_bytes", lambda: int(2 * one / 0.8) + 1)
    monkeypatch.setattr(backend, "concurrent", lambda n: n)  # as on a GPU: the whole group at once
    monkeypatch.setattr(backend, "search",
                        lambda plan, group, room: groups.append(list(group)) or search(plan, group, room))
    assert tiny_decoder.decode(x, lengths) == expected
    assert groups == [[0, 2], [4, 1], [3]]  # (no frames: the start's closure is searched too)
    monkeypatch.setattr(backend, "free_bytes", lambda: one // 2)
    with pytest.raises(DecoderMemoryError, match=r"utterance 0 \(6 frames\) alone needs"):
        tiny_decoder.decode(x, lengths)


def _searches(decoder, monkeypatch) -> list:
    """The backend's searches from now on, as (utterances, each one's room, statuses)."""
    backend, calls = decoder._backend, []
    search = backend.search

    def spy(plan, group, room):
        outcomes = search(plan, group, room)
        calls.append((list(group), room, [o.status for o in outcomes]))
        return outcomes

    monkeypatch.setattr(backend, "search", spy)
    return calls


def test_a_cpu_search_checks_its_backpointers_against_its_room_as_they_grow(tiny_decoder, monkeypatch):
    """The CPU's backpointers grow with what survives each frame (a few hundred a frame on
    clean speech, max_active on noise), which no estimate knows beforehand: the search
    checks them as they grow.  An utterance past its room is refused, saying where; one
    past its share of a batch searched on several threads is searched again alone."""
    from wfst.kernels import constants as C

    d = Decoder(tiny_decoder.graph, beam=20.0, token_capacity=64, num_threads=2)
    x = random_log_probs(5, batch=2, frames=3000, columns=5)
    lengths = np.array([3000, 10])
    expected = d.decode(x, lengths)
    fixed = d._backend.search_bytes(d._capacity, 3000, 0)
    rooms = [fixed + 8 * 1024 * 2**k for k in range(16)]
    fits = None
    for too_small, room in zip(rooms, rooms[1:]):  # the smallest room that holds utterance 0 alone
        monkeypatch.setattr(d, "_room", lambda room=room: room)
        try:
            alone = d.decode(x[:1], lengths[:1])
        except DecoderMemoryError:
            continue
        fits = room
        break
    assert fits is not None and fits > rooms[1], "utterance 0 must need its backpointers to grow"
    assert alone == expected[:1]
    monkeypatch.setattr(d, "_room", lambda: too_small)
    with pytest.raises(DecoderMemoryError, match=r"utterance 0 \(3000 frames\): its backpointers outgrew the "
                                                 r"0\.\d+ GiB of host memory its search may take at frame \d+ "
                                                 r"\(\d+ backpointers a frame so far, max_active="):
        d.decode(x[:1], lengths[:1])
    calls = _searches(d, monkeypatch)
    monkeypatch.setattr(d, "_room", lambda: fits)
    assert d.decode(x, lengths) == expected  # half of `fits` each: utterance 0 is searched again alone
    assert calls == [([0, 1], fits // 2, [C.MEMORY_OUT, C.OK]), ([0], fits, [C.OK])]


def test_a_cpu_lattice_counts_its_links_growth_against_the_room(tiny_decoder, monkeypatch):
    """A lattice's links grow in the search where they fill: what they grow past the buffer
    the decoder sized counts against the search's room with the backpointers, so a long
    utterance that does not fit is refused, saying so, rather than taking memory that no
    check saw."""

    def smallest_room(d, x):
        fixed = d._backend.search_bytes(d._capacity, 3000, d._capacity.lattice_links if d.config.lattice_beam else 0)
        for room in (fixed + 8 * 1024 * 2**k for k in range(20)):
            monkeypatch.setattr(d, "_room", lambda room=room: room)
            try:
                return room, d.decode(x)
            except DecoderMemoryError as e:
                error = e
        raise AssertionError(f"no room fits: {error}")

    x = random_log_probs(5, batch=1, frames=3000, columns=5)
    config = dict(beam=20.0, token_capacity=64, num_threads=1)
    plain = Decoder(tiny_decoder.graph, **config)
    lattice = Decoder(tiny_decoder.graph, lattice_beam=8.0, **config)
    expected = lattice.decode(x)
    plain_room, _ = smallest_room(plain, x)
    room, got = smallest_room(lattice, x)
    assert got == expected and room > plain_room
    monkeypatch.setattr(lattice, "_room", lambda: room // 2)
    with pytest.raises(DecoderMemoryError, match=r"utterance 0 \(3000 frames\): its backpointers and lattice links "
                                                 r"outgrew .* lower max_active or beam, or lattice_beam, or decode "):
        lattice.decode(x)


def test_a_cpu_search_is_not_refused_for_backpointers_it_may_never_store(tiny_decoder, monkeypatch):
    """max_active=10**6 where the beam binds: the CPU's memory check counted max_active / 4
    backpointers for each of the 40,000 frames (80 GB) and refused a search that holds a
    few MiB."""
    d = Decoder(tiny_decoder.graph, beam=20.0, max_active=10**6, num_threads=1)
    x = random_log_probs(6, batch=1, frames=40_000, columns=5)
    expected = d.decode(x)
    monkeypatch.setattr(d, "_room", lambda: 256 * 2**20)
    assert d.decode(x) == expected


def test_a_cpu_stream_counts_its_own_arrays_against_free_memory(tiny_decoder):
    """Opening a CPU stream checks free host memory against what the stream itself holds
    (its token list, a frame of backpointers, its lattice's links), not a search's whole
    workspace, which the streams of a thread share: 512 streams of the large rescoring setup
    were refused on a 24 GiB machine that held them."""
    from wfst.kernels import constants as C

    tokens = tiny_decoder._capacity.tokens
    own = C.cpu_stream_bytes(tokens)
    assert C.workspace_bytes(tokens, tiny_decoder._capacity.backpointers, 1) > 4 * own
    tiny_decoder._opening = [math.inf, 4 * own]  # a memory reading that holds: room for 4 streams' own arrays
    streams = [tiny_decoder.stream() for _ in range(4)]
    with pytest.raises(DecoderMemoryError, match="a stream needs about"):
        tiny_decoder.stream()
    assert tiny_decoder.finish(streams)


def test_missing_or_corrupt_graph(tmp_path, tiny):
    with pytest.raises(wfst.MissingFileError):
        Decoder(tmp_path / "nowhere")
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "TLG.fst").write_bytes(b"not an fst")
    (tmp_path / "g" / "tokens.txt").write_text("<blk> 0\na 1\n")
    with pytest.raises(wfst.GraphFormatError):
        Decoder(tmp_path / "g")


def test_gpu_array_without_known_library_is_explained(tiny_decoder):
    class ForeignGpuArray:  # exports DLPack from a CUDA device, but is neither torch nor CuPy
        def __dlpack__(self, stream=None):
            raise AssertionError("must not be read")

        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

    with pytest.raises(DecodeInputError, match="lives on a GPU.*device='cuda'"):
        tiny_decoder.decode(ForeignGpuArray())


def test_dlpack_host_input(tiny_decoder):
    x = random_log_probs(4, batch=2, frames=5, columns=5)

    class HostDLPack:
        def __dlpack__(self, stream=None):
            return x.__dlpack__()

        def __dlpack_device__(self):
            return x.__dlpack_device__()

    assert tiny_decoder.decode(HostDLPack()) == tiny_decoder.decode(x)


def test_ctrl_c_in_a_one_thread_decode_is_a_keyboard_interrupt_and_leaves_the_decoder_whole(demo, demo_graphs):
    """Ctrl-C inside the Numba search on the calling thread came out as a chained SystemError
    ('returned a result with an exception set'), which `except KeyboardInterrupt` missed; the
    interrupted search's workspace must not carry its half-filled tables into the next decode.
    In a child process: pytest takes a KeyboardInterrupt for its own.  The child sets Python's
    own SIGINT handler: started from a shell's background job it inherits SIGINT ignored, and
    Python then installs none (the decode ran to its end)."""
    import subprocess
    import sys

    path, kw = demo_graphs["char_compact"]
    script = f"""
import os, signal, threading, numpy as np, wfst
from wfst import synthetic
signal.signal(signal.SIGINT, signal.default_int_handler)
g = wfst.load_graph({str(path)!r})
texts = [l for l in open({str(demo / "test.txt")!r}).read().splitlines() if l.strip()] * 3
x, n = synthetic.from_texts(texts, g.tokens, word_boundary="|", seed=0)
d = wfst.Decoder(g, num_threads=1)
d.decode(x[:1], n[:1])
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    d.decode(x, n)
    print("finished before the interrupt")
except KeyboardInterrupt:
    print("KeyboardInterrupt")
print("same after" if d.decode(x[:20], n[:20]) == wfst.Decoder(g, num_threads=1).decode(x[:20], n[:20])
      else "different after")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[:2] == ["KeyboardInterrupt", "same after"], out.stdout + out.stderr[-3000:]


@pytest.mark.parametrize("seed", range(4))
def test_a_path_parts_sums_are_numpys(seed):
    """results.path_part (one compiled pass, cpu.path_sums) gives what NumPy's gathers and
    sums give on random paths: no arcs, only epsilon arcs, blank or not, a graph without a
    blank label."""
    from wfst.results import path_part

    _, g = random_tlg(seed)
    rng = np.random.default_rng(seed)
    for size in (0, 1, 2, 7, 40):
        arcs = rng.integers(0, len(g.ilabel), size)
        steps = np.sort(rng.integers(0, 30, size))
        ilab = g.ilabel[arcs]
        emitting = ilab != 0
        logp = rng.normal(-3.0, 1.0, int(emitting.sum())).astype(np.float32)
        for blank in (g.tokens.blank_ilabel, None):
            graph = g if blank is not None else dataclasses.replace(
                g, tokens=dataclasses.replace(g.tokens, blank=None))
            part = path_part(graph, arcs, steps, logp)
            is_blank = ilab == blank if blank is not None else np.zeros(size, bool)
            voiced, words = emitting & ~is_blank, g.olabel[arcs] != 0
            assert part.logp == pytest.approx(float(logp.astype(np.float64).sum()), abs=1e-9)
            assert part.weights == pytest.approx(float(g.weight[arcs].astype(np.float64).sum()), abs=1e-9)
            assert part.blanks == int(is_blank.sum())
            assert part.word_ids == tuple(g.olabel[arcs][words].tolist())
            assert part.word_frames == tuple(np.maximum(steps - 1, 0)[words].tolist())
            assert part.last_voiced == (int(steps[voiced][-1] - 1) if voiced.any() else -1)
            assert part.last_frame == (int(steps[emitting][-1] - 1) if emitting.any() else -1)
            assert part.end_state == (int(g.nextstate[arcs[-1]]) if size else -1)
            assert np.array_equal(part.frame_tokens, ilab[emitting])


def test_a_failed_call_leaves_no_stats_and_a_decoder_neither_pickles_nor_copies(tiny_decoder):
    """A server logging stats after each request logged the request before's for one that
    failed; pickle's own error named a queue, and copy.copy shared the search state."""
    import copy
    import pickle

    d = tiny_decoder
    x = random_log_probs(0, batch=3, frames=6, columns=5)
    d.decode(x)
    assert (d.stats.utterances, d.stats.frames) == (3, 18)
    with pytest.raises(DecodeInputError):
        d.decode(x[:, :, :4])
    assert (d.stats.utterances, d.stats.frames) == (0, 0)
    s = d.stream()
    d.advance([s], [x[0]])
    assert d.stats.frames == 6
    with pytest.raises(DecodeInputError):
        d.advance([s], [x[0, :, :4]])
    assert d.stats.frames == 0
    for make in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="a Decoder holds its device's search state and cannot be pickled"):
            make(d)
        with pytest.raises(TypeError, match="a Stream is search state on its Decoder's device"):
            make(s)


def test_a_beam_below_the_costs_float32_step_keeps_the_best_token(tiny_decoder):
    """float32(best + beam) rounded onto the best: ExpandArcs' `nc < bound` pruned the best arc
    itself, and every token died (beam 1e-30: after a few hundred frames; 1e-3: after 20k)."""
    from wfst.kernels.common import beam_bound

    assert beam_bound(np.float32(1e4), 1e-30) == np.nextafter(np.float32(1e4), np.float32(np.inf))
    assert beam_bound(np.float32(3.0), 1.5) == np.float32(4.5) and beam_bound(np.float32(np.inf), 1.0) == np.inf
    assert beam_bound(np.float32(2e8), 1.0) == np.float32(2e8)  # (past 2**27: no search, as documented)
    x = random_log_probs(7, batch=1, frames=300, columns=5)
    dec = Decoder(tiny_decoder.graph, beam=1e-30, min_active=0)
    r = dec.decode(x)[0]
    assert r.cost < np.inf and dec.stats.no_path == ()
    assert r.cost == Decoder(tiny_decoder.graph, beam=1e-30, min_active=0, max_active=1).decode(x)[0].cost
