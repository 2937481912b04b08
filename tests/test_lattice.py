"""Word lattices (lattice_beam): N-best lists against Kaldi's LatticeSimpleDecoder and OpenFST,
the lattice's own properties, the oracle and confidences, and bad options."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import pywrapfst as fst
from decoding import demo_emissions, random_log_probs, random_tlg
from fst_paths import emission_fsa

import wfst
from wfst import Decoder, synthetic
from wfst.errors import InputFileError, MissingFileError, OptionError
from wfst.lattice import _paths


def _same_nbest(ours, reference, tol=1e-3) -> bool:
    """Lists of (word ids, cost), best first, are the same up to the order of equal costs
    and to which of several sequences tied at the last cost made the list."""
    if len(ours) != len(reference):
        return False
    close = lambda a, b: abs(a - b) <= tol + 2e-6 * abs(b)  # noqa: E731
    if not all(close(a[1], b[1]) for a, b in zip(ours, reference)):
        return False
    last = reference[-1][1]
    head = lambda xs: sorted(w for w, c in xs if not close(c, last))  # noqa: E731
    return head(ours) == head(reference)


def _reference_nbest(tlg, log_probs, n):
    """OpenFST: the n best distinct word sequences of (emissions ∘ TLG)."""
    composed = fst.compose(emission_fsa(log_probs), tlg.copy().arcsort("ilabel"))
    composed.project("output")
    composed.rmepsilon()
    return sorted(_paths(fst.shortestpath(fst.determinize(composed), nshortest=n)), key=lambda p: p[1])


@pytest.mark.parametrize("n", [1, 2, 3])
def test_nbest_lists_the_decodes_best_path_first_when_another_ties_it(n):
    """Two word sequences of exactly the same cost (all-blank emissions on this graph):
    OpenFST may list either first; the N-best list starts with the decode's best path."""
    _, g = random_tlg(50, num_states=9, num_columns=5, num_words=4)
    x = np.full((1, 5, 5), np.log(1e-6), np.float32)
    x[..., 0] = 0.0
    r = Decoder(g, beam=1e4, max_active=10**6, min_active=0, lattice_beam=500.0, num_threads=1).decode(x, nbest=n)[0]
    tied = [e for e in r.lattice.nbest(3) if e.cost == r.cost]
    assert len(tied) == 2 and r.word_ids in [e.word_ids for e in tied]  # the case this test is about
    assert r.nbest[0] == r and len(r.nbest) == n
    assert len({e.word_ids for e in r.nbest}) == n and [e.cost for e in r.nbest] == sorted(e.cost for e in r.nbest)


@pytest.mark.parametrize("seed", range(8))
def test_nbest_of_a_wide_search_is_openfst_nbest(seed):
    """Beam and lattice beam wide enough to keep every path: the N best distinct word
    sequences and their costs are OpenFST's on (emissions ∘ TLG)."""
    f, g = random_tlg(seed)
    x = random_log_probs(seed, 3, 7, g.tokens.num_columns)
    dec = Decoder(g, beam=500.0, max_active=10**6, min_active=0, lattice_beam=500.0)
    results = dec.decode(x, nbest=6)
    checked = 0
    for b, r in enumerate(results):
        reference = _reference_nbest(f, x[b], 6)
        if not reference:
            assert not r.reached_final
            continue
        checked += 1
        assert _same_nbest([(e.word_ids, e.cost) for e in r.nbest], reference)
        assert r.nbest[0] == r
    assert checked


@pytest.mark.parametrize("name", ["char_compact", "bpe_compact"])
def test_demo_nbest_matches_kaldi_lattice_simple_decoder(demo, demo_graphs, name):
    """Same beam and lattice beam as Kaldi's LatticeSimpleDecoder (max_active not binding):
    the 10 best distinct word sequences and their costs (to 1e-3) agree on >= 99% of the
    utterances."""
    pytest.importorskip("kaldi_decoder")
    from wfst_bench.kaldi import KaldiLatticeDecoder

    path, kw = demo_graphs[name]
    g = wfst.load_graph(path)
    texts, x, lengths = demo_emissions(demo, g, kw, count=100)
    ours = Decoder(g, beam=12.0, max_active=10**6, min_active=0, lattice_beam=6.0).decode(x, lengths, nbest=10)
    kaldi = KaldiLatticeDecoder(path / "TLG.fst", beam=12.0, lattice_beam=6.0)
    same = [_same_nbest([(e.word_ids, e.cost) for e in r.nbest], kaldi.nbest(lat, 10))
            for r, lat in zip(ours, kaldi.lattices(x, lengths))]
    assert sum(same) >= 0.99 * len(texts), f"{sum(same)}/{len(texts)} N-best lists agree"


@pytest.fixture(scope="module")
def noisy(demo, demo_graphs):
    """char_compact, 40 noisy held-out utterances, their texts, and a lattice decode of them."""
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    texts = [t for t in (demo / "test.txt").read_text().splitlines() if t.strip()][:40]
    x, lengths = synthetic.from_texts(texts, g.tokens, word_boundary="|", seed=3, noise=1.5, confusion=0.3)
    settings = dict(beam=14.0, max_active=3000)
    results = Decoder(g, lattice_beam=7.0, **settings).decode(x, lengths, nbest=5)
    return g, texts, x, lengths, settings, results


def test_lattice_keeps_the_best_path_and_changes_nothing_else(noisy):
    g, _, x, lengths, settings, results = noisy
    plain = Decoder(g, **settings).decode(x, lengths)
    assert plain == results  # the same best paths, costs and parts
    for r in results:
        lat = r.lattice
        assert r.nbest[0] == r
        assert [e.cost for e in r.nbest] == sorted(e.cost for e in r.nbest)
        assert len({e.word_ids for e in r.nbest}) == len(r.nbest)
        best = float(fst.shortestdistance(lat.to_fst(), reverse=True)[0])
        assert best == pytest.approx(r.cost, abs=1e-3)
        # every path is within the lattice beam of the best: pruning at it removes nothing
        f = lat.to_fst()
        pruned = fst.prune(f, weight=7.0 + 1e-3)
        arcs = lambda f: sum(f.num_arcs(s) for s in f.states())  # noqa: E731
        assert arcs(pruned) == arcs(f) == lat.num_arcs
        assert lat.num_states == lat.state_frames.shape[0] and lat.state_frames.max() == r.num_frames


@pytest.mark.parametrize("seed", range(4))
def test_lattice_states_are_the_named_backpointers_in_order(seed):
    """kernels.lattice.number_states against NumPy: the backpointers that links or final
    states name, and 0, numbered in order, each at the last step that starts at or before it."""
    from wfst.kernels.lattice import number_states

    rng = np.random.default_rng(seed)
    starts = np.concatenate([[0], np.cumsum(rng.integers(0, 5, 40))]).astype(np.int64)  # steps may store nothing
    src, dst = (rng.integers(1, starts[-1], 60).astype(np.int32) for _ in range(2))
    finals = rng.choice(np.arange(1, starts[-1], dtype=np.int32), 2, replace=False)
    gids = np.unique(np.concatenate([[0], src, dst, finals]))
    number = lambda g: np.searchsorted(gids, g)  # noqa: E731
    got = number_states(src, dst, finals, starts)
    expected = number(src), number(dst), number(finals), np.searchsorted(starts, gids, side="right") - 1
    for a, b in zip(got, expected):
        assert a.dtype == np.int32 and np.array_equal(a, b)


def test_periodic_pruning_and_links_grown_mid_search_give_the_same_lattice(noisy):
    """A links buffer that fills grows where it filled (the frame goes on from its
    survivors), not by decoding the utterance again: the same lattices, link for link, and
    the decoder's capacity stays as it was (grown, it stuck for every later call)."""
    g, _, x, lengths, settings, results = noisy
    rarely = Decoder(g, lattice_beam=7.0, prune_interval=10**6, **settings)
    small = Decoder(g, lattice_beam=7.0, prune_interval=1, **settings)
    small._capacity = dataclasses.replace(small._capacity, links=256)  # fills many times over
    for dec in (rarely, small):
        other = dec.decode(x[:12], lengths[:12], nbest=5)
        for a, b in zip(results, other):
            assert (a.lattice.num_states, a.lattice.num_arcs) == (b.lattice.num_states, b.lattice.num_arcs)
            assert [(e.word_ids, e.cost) for e in a.nbest] == [(e.word_ids, e.cost) for e in b.nbest]
    grown = small.decode(x[:12], lengths[:12])
    same = Decoder(g, lattice_beam=7.0, prune_interval=1, **settings).decode(x[:12], lengths[:12])
    for a, b in zip(grown, same):
        for field in a.lattice._raw._fields:
            assert np.array_equal(getattr(a.lattice._raw, field), getattr(b.lattice._raw, field)), field
    assert small.stats.regrowths == 0 and small._capacity.links == 256


def test_a_lattice_does_not_depend_on_the_token_capacity(demo, demo_graphs):
    """Where ExpandArcs' and the closure's deferred context steps fill their room decides the
    order tokens come in, so the numbers of their backpointers and a lattice's states. That
    room is fixed, not the token capacity's: an utterance decoded with phrase boosts at
    capacity 1,024 and 4,096 (a decoder grown by another utterance) gets the same lattice,
    state numbers and all (with room sized by the capacity the two were numbered apart)."""
    path, kw = demo_graphs["bpe_compact"]
    g = wfst.load_graph(path)
    text = [t for t in (demo / "test.txt").read_text().splitlines() if t.strip()][8]
    x, lengths = synthetic.from_texts([text], g.tokens, spm=kw["spm"], seed=1)
    boost = {" ".join(text.split()[:2]): 3.0, text.split()[-1]: 1.0}  # a phrase: the search has a context
    config = dict(beam=10.0, max_active=200, num_threads=1, lattice_beam=2.0)
    (small,), (large,) = (Decoder(g, token_capacity=c, **config).decode(x, lengths, boost=boost) for c in (1024, 4096))
    assert small == large
    for field in small.lattice._raw._fields:
        assert np.array_equal(getattr(small.lattice._raw, field), getattr(large.lattice._raw, field)), field


def test_oracle_is_at_most_the_best_path_errors(noisy):
    kaldialign = pytest.importorskip("kaldialign")
    _, texts, _, _, _, results = noisy
    oracle = best = words = 0
    for text, r in zip(texts, results):
        errors, path = r.lattice.oracle(text)
        assert errors == kaldialign.edit_distance(text.split(), list(path))["total"]
        one = kaldialign.edit_distance(text.split(), list(r.words))["total"]
        assert errors <= one
        oracle, best, words = oracle + errors, best + one, words + len(text.split())
    assert oracle < best  # the noisy emissions leave errors that the lattice holds the fix of


def test_an_nbest_list_is_in_the_order_of_its_reported_costs(tiny):
    """OpenFST's n-shortest order is that of float32 sums; the entries' costs are summed in
    float64: a list of thousands of sequences was out of order by up to 5.5e-7 in places."""
    from wfst.graphs import compile_graph

    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      progress=False)
    dec = Decoder(r.directory, lattice_beam=8.0, num_threads=1)
    rng = np.random.default_rng(0)
    for _ in range(3):  # (before, the third list was out of order)
        x = rng.normal(size=(1, 11, 5)) * 2
        result = dec.decode((x - np.log(np.exp(x).sum(-1, keepdims=True))).astype(np.float32), nbest=10**6)[0]
        costs = [e.cost for e in result.nbest]
        assert len(costs) > 100 and costs[0] == result.cost and costs[1:] == sorted(costs[1:])


def test_an_oracle_too_big_for_memory_is_refused_before_it_is_made(noisy, monkeypatch):
    """The oracle's table is the word acceptor's states x the reference's positions: 13.4 GiB
    for a 42k-frame utterance ended in NumPy's MemoryError after minutes."""
    import wfst.memory
    from wfst import DecoderMemoryError

    _, texts, _, _, _, results = noisy
    expected = results[0].lattice.oracle(texts[0])
    monkeypatch.setattr(wfst.memory, "available_host_bytes", lambda: 1000)
    with pytest.raises(DecoderMemoryError, match=r"oracle: the lattice's [\d,]+ word states x the reference's "
                                                 r"[\d,]+ positions need about [\d.]+ GiB of host memory"):
        results[0].lattice.oracle(texts[0])
    monkeypatch.undo()
    assert results[0].lattice.oracle(texts[0]) == expected


def test_confidences_are_posteriors(noisy):
    _, texts, _, _, _, results = noisy
    right, wrong = [], []
    for text, r in zip(texts, results):
        c = r.word_confidences
        assert len(c) == len(r.words) and all(0.0 <= v <= 1.0 for v in c)
        assert 0.0 < r.confidence <= 1.0 + 1e-9
        post = r.lattice.arc_posteriors()
        assert np.all((post >= 0) & (post <= 1.0))
        # the arcs out of the start state carry all of the probability
        assert post[r.lattice.src == 0].sum() == pytest.approx(1.0, abs=1e-4)
        ref = set(text.split())
        for w, v in zip(r.words, c):
            (right if w in ref else wrong).append(v)
    assert wrong and np.mean(right) > np.mean(wrong)
    g, _, x, lengths, settings, _ = noisy  # an utterance of no frames: certain, no lattice needed
    empty = Decoder(g, lattice_beam=7.0, **settings).decode(x[:2], np.array([int(lengths[0]), 0]))[1]
    assert empty.words == () and empty.word_confidences == () and empty.confidence == 1.0


def test_nbest_entries_have_their_confidences(noisy):
    """An N-best entry's confidences raised "decode with lattice_beam set" (it was set): the
    entries had no lattice."""
    _, _, _, _, _, results = noisy
    for r in results[:10]:
        assert r.nbest[0].word_confidences == r.word_confidences and r.nbest[0].confidence == r.confidence
        for e in r.nbest[1:]:
            assert e.lattice is r.lattice and e.confidence == r.lattice.sequence_posterior(e.word_ids) < 1
            assert len(e.word_confidences) == len(e.words) and all(0 <= c <= 1 for c in e.word_confidences)


def test_the_lattice_s_own_nbest_starts_with_the_decode_s_path(noisy):
    """lattice.nbest()'s first entry was OpenFST's shortest path of the best words, which
    breaks ties between paths of equal cost otherwise than the search: a word's frame one
    off from the decode's on 31 of the first 100 demo utterances (character graph)."""
    _, _, _, _, _, results = noisy
    for r in results:
        first = r.lattice.nbest(2)[0]
        assert (first.word_ids, first.word_frames, first.cost) == (r.word_ids, r.word_frames, r.cost)
        assert np.array_equal(first.frame_tokens, r.frame_tokens) and first.lattice is r.lattice


def test_a_long_utterance_s_frames_each_hold_all_of_the_probability(noisy):
    """Posteriors were summed in float32 (OpenFST's "log" arcs): on a long utterance each
    frame's arcs held 0.993-1.0002 of the probability (a 3-minute utterance), its word
    confidences off by up to 0.007.  Ten sentences as one utterance here."""
    g, texts, _, _, settings, _ = noisy
    x, lengths = synthetic.from_texts([" ".join(texts[:10])], g.tokens, word_boundary="|", seed=2, noise=2.5,
                                      confusion=0.4)
    r = Decoder(g, lattice_beam=7.0, **settings).decode(x, lengths)[0]
    lat, post = r.lattice, r.lattice.arc_posteriors()
    emitting = lat.ilabel > 0
    held = np.bincount(lat.state_frames[lat.dst][emitting], weights=post[emitting], minlength=r.num_frames + 1)[1:]
    assert r.num_frames > 1500 and np.abs(held - 1).max() < 1e-4


def test_kaldi_text_format(noisy, tmp_path):
    r = noisy[5][0]
    r.lattice.write(tmp_path / "lat.txt", key="utt1")
    for key in ("has space", "", " utt1"):  # Kaldi reads the key up to the first space
        with pytest.raises(OptionError, match="lattice key"):
            r.lattice.write(tmp_path / "bad.txt", key=key)
    with pytest.raises(wfst.OutputFileError, match="cannot write file .*no_dir"):  # one line, the path named
        r.lattice.write(tmp_path / "no_dir" / "lat.txt")
    lines = (tmp_path / "lat.txt").read_text().splitlines()
    assert lines[0] == "utt1" and lines[-1] == ""
    arcs = [ln.split("\t") for ln in lines[1:-1] if ln.count("\t") == 4]
    finals = [ln.split("\t") for ln in lines[1:-1] if ln.count("\t") == 1]
    assert len(arcs) == r.lattice.num_arcs and len(finals) == len(r.lattice.finals)
    g, a = map(float, arcs[0][4].split(","))
    assert math.isfinite(g) and math.isfinite(a)
    gx, x, lengths, settings = noisy[0], noisy[2], noisy[3], noisy[4]
    scaled = Decoder(gx, lattice_beam=7.0, **{**settings, "acoustic_scale": 0.5}).decode(x[:1], lengths[:1])[0]
    scaled.lattice.write(tmp_path / "scaled.txt")  # acoustic costs unscaled, as Kaldi's decoders write them
    written = [ln.split("\t")[4].split(",") for ln in (tmp_path / "scaled.txt").read_text().splitlines()
               if ln.count("\t") == 4]
    assert [float(a) for _, a in written] == pytest.approx((scaled.lattice.acoustic_cost / 0.5).tolist(), rel=1e-5)
    assert [float(g) for g, _ in written] == pytest.approx(scaled.lattice.graph_cost.tolist(), rel=1e-5, abs=1e-6)


def test_bad_lattice_options(noisy):
    g, _, x, lengths, settings, results = noisy
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(OptionError, match="lattice_beam"):
            Decoder(g, lattice_beam=bad)
    with pytest.raises(OptionError, match="prune_interval"):
        Decoder(g, lattice_beam=8.0, prune_interval=0)
    plain = Decoder(g, **settings)
    with pytest.raises(OptionError, match="lattice_beam"):
        plain.decode(x[:1], lengths[:1], nbest=3)
    r = plain.decode(x[:1], lengths[:1])[0]
    with pytest.raises(OptionError, match="lattice_beam"):
        r.word_confidences  # noqa: B018
    with pytest.raises(OptionError, match="lattice_beam"):
        r.confidence  # noqa: B018
    dec = Decoder(g, lattice_beam=8.0, **settings)
    for bad in (0, -2, 2.5, True):
        with pytest.raises(OptionError, match="nbest"):
            dec.decode(x[:1], lengths[:1], nbest=bad)
    with pytest.raises(OptionError, match="nbest"):
        results[0].lattice.nbest(0)
    lattice = results[0].lattice
    assert lattice.nbest(2**63) == lattice.nbest(10**6)  # every sequence (pywrapfst overflowed)
    for semiring in ("Tropical", "standard", "max"):  # each gave the log semiring
        with pytest.raises(OptionError, match=f"semiring='{semiring}': must be 'tropical' or 'log'"):
            lattice.to_fst(semiring)
    with pytest.raises(OptionError, match="oracle: the reference must be a string or a sequence of words"):
        lattice.oracle(None)
    r = results[0]
    assert lattice.sequence_posterior(r.words) == lattice.sequence_posterior(r.word_ids) > 0
    assert lattice.sequence_posterior(("no-such-word",)) == 0.0
    # <eps> (id 0) is no word: it was read as nothing (the posterior of ('a', 0) was that of ('a',))
    for eps in ([0], ["<eps>"], [*r.word_ids, 0]):
        assert lattice.sequence_posterior(eps) == 0.0
    assert lattice.oracle(list(r.word_ids)) == lattice.oracle(r.words) == (0, r.words)  # ids, as a result's
    with pytest.raises(OptionError, match="word_confidences: give the DecodeResult of this lattice's best path"):
        lattice.word_confidences(None)
    with pytest.raises(OptionError, match="Lattice.write: give a path or a text file open for writing, not None"):
        lattice.write(None)
    with pytest.raises(OptionError, match="nbest"):  # a stream's N-best list is checked alike
        dec.finish([dec.stream()], nbest=0)
    with pytest.raises(OptionError, match="lattice_beam"):
        plain.finish([plain.stream()], nbest=3)


def many_word_lattice(seed: int):
    """The lattice of 13 flat frames on a graph whose arcs nearly all output one of 5 words:
    many word sequences (a determinized word acceptor of it would not fit in memory)."""
    from wfst.graph import graph_from_fst
    from wfst.symbols import TokenTable, WordTable

    rng = np.random.default_rng(seed)
    f = fst.VectorFst()
    for _ in range(16):
        f.add_state()
    f.set_start(0)
    for s in range(16):
        for _ in range(6):
            word = int(rng.integers(1, 6)) if rng.random() < 0.8 else 0
            f.add_arc(s, fst.Arc(int(rng.integers(1, 6)), word, fst.Weight(f.weight_type(), float(rng.uniform(0, 2))),
                                 int(rng.integers(0, 16))))
        f.set_final(s, fst.Weight(f.weight_type(), float(rng.uniform(0, 2))))
    f.arcsort("ilabel")
    g = graph_from_fst(f, TokenTable(("<blk>", "t1", "t2", "t3", "t4"), blank=0),
                       WordTable.from_words(["a", "ab", "ba", "abc", "cab"]))
    x = random_log_probs(seed, batch=1, frames=13, columns=5, sharpness=0.5)
    return Decoder(g, beam=16.0, lattice_beam=6.0).decode(x)[0].lattice


def test_nbest_of_a_lattice_with_exponentially_many_word_sequences():
    """N-best lists take the distinct sequences from a determinization made only as far as
    they need: a lattice of ~1,050 links whose whole determinized word acceptor aborted the
    process (std::bad_alloc) lists its 3 best in milliseconds, in a child process held to
    2 GB.  They are the 3 best of a determinization pruned to 3 nats (70k states)."""
    import subprocess
    import sys
    from pathlib import Path

    child = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
             f"sys.path.insert(0, {str(Path(__file__).parent)!r}); "
             "from test_lattice import many_word_lattice; "
             "print([h.words for h in many_word_lattice(2).nbest(3)])")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lattice = many_word_lattice(2)
    got = lattice.nbest(3)
    assert out.stdout.strip() == str([h.words for h in got])
    f = lattice._words_fst()
    pruned = fst.determinize(f, weight=fst.Weight(f.weight_type(), 3.0))
    want = sorted(_paths(fst.shortestpath(pruned, nshortest=3)), key=lambda p: p[1])
    assert want[-1][1] - want[0][1] < 3.0  # all three within the pruning: exact
    assert [h.word_ids for h in got] == [words for words, _ in want]
    assert [h.cost for h in got] == pytest.approx([cost for _, cost in want], abs=1e-3)


def test_calibration_fit_recovers_a_logistic_relation():
    """Platt scaling: labels drawn with P(right) = sigmoid(2 logit(p) - 1) give back about 2 and -1."""
    from wfst.confidence import Calibration

    rng = np.random.default_rng(0)
    p = 1 / (1 + np.exp(-rng.normal(0, 2, 20000)))
    right = rng.random(p.size) < 1 / (1 + np.exp(-(2 * np.log(p / (1 - p)) - 1)))
    fit = Calibration.fit_posteriors(p, right)
    assert fit.slope == pytest.approx(2.0, abs=0.1) and fit.offset == pytest.approx(-1.0, abs=0.1)
    assert np.allclose(Calibration()(p), np.clip(p, 1e-6, 1 - 1e-6))  # the identity changes nothing


def test_calibrated_confidences(noisy, tmp_path):
    """A calibration fitted on the decode is at least as good on it (NCE) as the raw
    posteriors, and a Decoder given it (object or JSON file) reports calibrated confidences."""
    from wfst.confidence import Calibration, normalized_cross_entropy, word_correctness

    g, texts, x, lengths, settings, results = noisy
    posteriors, right = word_correctness(results, texts)
    fit = Calibration.fit(results, texts)
    assert normalized_cross_entropy(fit(posteriors), right) >= normalized_cross_entropy(posteriors, right) - 1e-9
    fit.save(tmp_path / "cal.json")
    assert Calibration.load(tmp_path / "cal.json") == fit
    for given in (fit, str(tmp_path / "cal.json")):
        r = Decoder(g, lattice_beam=7.0, confidence_calibration=given, **settings).decode(x[:3], lengths[:3])[1]
        raw = r.lattice.word_confidences(r, calibrated=False)
        assert r.word_confidences == pytest.approx(tuple(fit(raw)))


def test_bad_calibrations(noisy, tmp_path):
    from wfst.confidence import Calibration

    g, texts, _, _, _, results = noisy
    with pytest.raises(OptionError, match="slope"):
        Calibration(slope=float("nan"))
    with pytest.raises(OptionError, match="slope=-0.5: must be >= 0"):
        Calibration(slope=-0.5)
    with pytest.raises(OptionError, match="slope=True: must be a finite number"):
        Calibration(slope=True)
    numpy_made = Calibration(slope=np.float32(2.0), offset=np.int64(-1))  # (a fit's NumPy numbers were refused)
    assert numpy_made == Calibration(2.0, -1.0) and type(numpy_made.slope) is float
    with pytest.raises(MissingFileError, match="missing.json: not found"):
        Decoder(g, lattice_beam=8.0, confidence_calibration=tmp_path / "missing.json")
    with pytest.raises(MissingFileError, match="is a directory"):
        Calibration.load(tmp_path)
    for text, why in (('{"slope": 1.0}', "'offset'"), ('{"slope": 1' + "0" * 400 + ', "offset": 0}', "too large"),
                      ('[1, 2]', "it holds '\\[1, 2\\]', not a JSON object"), ("null", "'null', not a JSON object"),
                      ('{"slope": 1, "offset": 0, "slope": 5}', "the key 'slope' twice"),  # (the last one was read)
                      ('{"format": 2, "slope": 1, "offset": 0}', "format 2"),
                      ('{"format": true, "slope": 1, "offset": 0}', "format True"),  # (these four loaded)
                      ('{"slope": 1, "offset": 0, "bias": 3}', "unknown keys \\['bias'\\]")):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(InputFileError, match=f"bad.json: not a saved Calibration.*{why}"):
            Calibration.load(tmp_path / "bad.json")
    with pytest.raises(OptionError, match="labels must be bools"):
        Calibration.fit_posteriors([0.5, 0.9], ["no", "yes"])  # "no" read as True
    with pytest.raises(OptionError, match="no words to fit on"):
        Calibration.fit_posteriors([], [])
    for text in ('{"slope": true, "offset": 0}', '{"slope": "1.5", "offset": 0}'):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(InputFileError, match="bad.json: Calibration slope=.*: must be a finite number"):
            Calibration.load(tmp_path / "bad.json")
    with pytest.raises(OptionError, match="rank wrong words above right ones .* on 50 words, 25 right\\): too few"):
        Calibration.fit_posteriors(np.linspace(0.05, 0.95, 50), np.arange(50) < 25)
    for right in (True, False):  # (blamed on the ranking: the data have none)
        with pytest.raises(OptionError, match=f"all 3 words are {'right' if right else 'wrong'}: nothing tells"):
            Calibration.fit_posteriors([0.2, 0.5, 0.9], [right] * 3)
    alike = Calibration.fit_posteriors([0.8] * 10, np.arange(10) < 2)  # no slope to find: the share right
    assert alike.slope == 0.0 and alike([0.1, 0.8])[0] == pytest.approx(2.5 / 11)
    with pytest.raises(OptionError, match="confidence_calibration"):
        Decoder(g, lattice_beam=8.0, confidence_calibration=3)
    with pytest.raises(OptionError, match="confidence_calibration maps the lattice's word confidences: set "
                                          "lattice_beam"):  # (it did nothing)
        Decoder(g, confidence_calibration=Calibration())
    with pytest.raises(OptionError, match="references"):
        Calibration.fit(results, texts[:-1])
    with pytest.raises(OptionError, match="reference 1: must be a string or a sequence of words \\(str\\), got bytes"):
        Calibration.fit(results[:2], [texts[0], texts[1].encode()])  # (kaldialign's TypeError)


def test_nbest_paths_of_many_words_are_read_without_recursion():
    """shortestpath's paths as (words, cost): a path of 5,000 words (an hour of speech) read
    by a loop; Python's recursion stopped at ~1,000 words and lost the batch's results."""
    f = fst.VectorFst()
    start = f.add_state()
    f.set_start(start)
    for first, words in ((1, 5000), (7, 3)):  # two paths sharing only the start, as shortestpath writes them
        s = start
        for i in range(words):
            t = f.add_state()
            f.add_arc(s, fst.Arc(1, first + i if i % 2 == 0 else 0, fst.Weight(f.weight_type(), 0.5), t))
            s = t
        f.set_final(s, fst.Weight(f.weight_type(), 1.0))
    got = _paths(f)
    assert [len(labels) for labels, _ in got] == [2500, 2]
    assert got[0][0][:3] == (1, 3, 5) and got[1] == ((7, 9), 2.5)
    assert got[0][1] == pytest.approx(5000 * 0.5 + 1.0)


def test_oracle_without_words_txt_reads_words_as_their_ids():
    """A graph with no word table names words by their ids ("3"), in the results and so in
    the oracle's reference: the best path's own words are 0 errors, one word changed is 1."""
    f, g = random_tlg(2)
    assert g.words is None
    x = random_log_probs(2, 4, 9, g.tokens.num_columns)
    for r in Decoder(g, beam=500.0, lattice_beam=8.0).decode(x):
        if not r.reached_final or not r.words:
            continue
        assert r.lattice.oracle(" ".join(r.words)) == (0, r.words)
        assert r.lattice.oracle(["nonword", *r.words[1:]])[0] <= 1
        assert r.lattice.oracle([*r.words, *r.words])[0] <= len(r.words)


def test_words_that_hold_unicode_spaces_are_taken_whole(tmp_path):
    """A word may hold U+00A0 or U+3000 (the graph's files split fields at ASCII spaces and
    tabs only): references, lattice oracles, calibration, phrases and synthetic emissions
    split text into words the same way."""
    import warnings

    from wfst.graphs import compile_graph

    from wfst.confidence import word_correctness
    from wfst.scoring import word_errors

    tokens = tmp_path / "tokens.txt"
    tokens.write_text("<blk> 0\n| 1\na 2\nb 3\n\u00a0 4\n\u3000 5\n", encoding="utf-8")
    arpa = tmp_path / "lm.arpa"
    words = ("a\u00a0b", "b\u3000a", "ab", "ba")
    arpa.write_text("\\data\\\nngram 1=7\n\n\\1-grams:\n-1.0\t</s>\n-99\t<s>\n-2.0\t<unk>\n"
                    + "".join(f"-1.0\t{w}\n" for w in words) + "\n\\end\\\n", encoding="utf-8")
    g = wfst.load_graph(compile_graph(tmp_path / "g", tokens=tokens, lm=arpa, word_boundary="|",
                                      topology="compact").directory)
    text = "a\u00a0b b\u3000a ab"
    x, lengths = synthetic.from_texts([text], g.tokens, word_boundary="|", seed=0)
    dec = Decoder(g, lattice_beam=5.0, num_threads=1)
    (r,) = dec.decode(x, lengths)
    assert r.words == ("a\u00a0b", "b\u3000a", "ab")
    assert word_errors([text], [r.words]).errors == 0 and word_errors([text], [" ".join(r.words)]).errors == 0
    assert r.lattice.oracle(text) == (0, r.words)
    assert word_correctness([r], [text])[1].all() and word_correctness([r], [list(r.words)])[1].all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (an unknown boosted word is warned about)
        dec.decode(x, lengths, boost={"a\u00a0b b\u3000a": 2.0, "b\u3000a": 1.0})
    assert dec.stats.boost_unknown == ()


@pytest.mark.parametrize("topology", ["compact", "minimal", "normal"])
def test_a_word_counts_the_paths_that_start_it_earlier(tmp_path, topology):
    """A word's confidence sums its arcs' posteriors from before its own first frame too:
    other paths may start it earlier (here "ab" is on every path, the 'a' at frame 0 or 1,
    so its confidence is the sentence's)."""
    from wfst.graphs import compile_graph

    (tmp_path / "tokens.txt").write_text("<blk> 0\na 1\nb 2\n")
    (tmp_path / "lexicon.txt").write_text("ab a b\nba b a\n")
    (tmp_path / "lm.arpa").write_text("\\data\\\nngram 1=4\n\n\\1-grams:\n-0.5\t</s>\n-99\t<s>\n-0.3\tab\n"
                                      "-0.3\tba\n\n\\end\\\n")
    g = wfst.load_graph(compile_graph(tmp_path / "g", tokens=tmp_path / "tokens.txt", lm=tmp_path / "lm.arpa",
                                      lexicon=tmp_path / "lexicon.txt", topology=topology).directory)
    p = np.array([[0.50, 0.50, 1e-6], [0.45, 0.55, 1e-6], [0.10, 1e-6, 0.90], [0.98, 0.01, 0.01]])
    x = np.log(p / p.sum(1, keepdims=True)).astype(np.float32)[None]
    (r,) = Decoder(g, lattice_beam=8.0, num_threads=1).decode(x, np.array([4]))
    assert r.words == ("ab",) and r.word_times[0][0] == 1  # (the best path starts it at frame 1)
    assert r.word_confidences[0] == pytest.approx(r.confidence, abs=1e-5)
    assert r.confidence == pytest.approx(r.lattice.sequence_posterior(["ab"]), abs=1e-5) and r.confidence > 0.85


def test_a_repeated_word_does_not_count_its_twin(tmp_path):
    """"ab ab": the first word's window reaches into the second, whose arcs (on every path)
    counted for it too, so an uncertain first word reported ~1.  Its confidence is the share
    of the paths that start with it."""
    from wfst.graphs import compile_graph

    (tmp_path / "tokens.txt").write_text("<blk> 0\na 1\nb 2\n")
    (tmp_path / "lexicon.txt").write_text("ab a b\nb b\n")
    (tmp_path / "lm.arpa").write_text("\\data\\\nngram 1=4\n\n\\1-grams:\n-0.5\t</s>\n-99\t<s>\n-0.3\tab\n"
                                      "-0.4\tb\n\n\\end\\\n")
    g = wfst.load_graph(compile_graph(tmp_path / "g", tokens=tmp_path / "tokens.txt", lm=tmp_path / "lm.arpa",
                                      lexicon=tmp_path / "lexicon.txt", topology="compact").directory)
    sure = [[1e-3, 1e-3, 0.998], [0.998, 1e-3, 1e-3], [1e-3, 0.998, 1e-3], [1e-3, 1e-3, 0.998], [0.998, 1e-3, 1e-3]]
    p = np.array([[0.40, 0.60, 1e-6], *sure])  # "a" or blank first: "ab ab" or "b ab"
    x = np.log(p / p.sum(1, keepdims=True)).astype(np.float32)[None]
    (r,) = Decoder(g, lattice_beam=8.0, num_threads=1).decode(x, np.array([6]))
    assert r.words == ("ab", "ab")
    first = sum(r.lattice.sequence_posterior(e.word_ids) for e in r.lattice.nbest(20)
                if e.words[:1] == ("ab",) and e.word_frames[0] == 0)
    assert 0.5 < first < 0.8 and r.word_confidences[0] == pytest.approx(first, abs=1e-3)
    assert r.word_confidences[1] > 0.99  # (the second "ab" is on nearly every path)


BIGRAM_ARPA = """\\data\\
ngram 1=12
ngram 2=8

\\1-grams:
-1.0 </s>
-99 <s> -0.5
-1.2 ab -0.3
-1.3 ba -0.3
-1.1 a -0.2
-1.1 b -0.2
-1.5 cab -0.3
-1.6 dd -0.3
-1.4 ad -0.3
-1.4 da -0.3
-1.2 c -0.3
-1.7 bad -0.3

\\2-grams:
-0.3 <s> ab
-0.4 <s> a
-0.5 ab ba
-0.3 a b
-0.6 b a
-0.4 cab dd
-0.5 ad da
-0.2 bad </s>

\\end\\
"""


def test_a_word_is_at_least_as_certain_as_its_sentence(tmp_path):
    """Every path that outputs the sentence outputs each of its words, so no word's confidence
    is below the sentence's posterior; the window alone read less where a phrase-boosted
    path put a word a frame outside it."""
    from wfst.graphs import compile_graph

    (tmp_path / "tokens.txt").write_text("<blk> 0\na 1\nb 2\nc 3\nd 4\n")
    words = ["ab", "ba", "a", "b", "cab", "dd", "ad", "da", "c", "bad"]
    (tmp_path / "lexicon.txt").write_text("".join(f"{w} {' '.join(w)}\n" for w in words))
    (tmp_path / "lm.arpa").write_text(BIGRAM_ARPA)
    g = wfst.load_graph(compile_graph(tmp_path / "g", tokens=tmp_path / "tokens.txt", lm=tmp_path / "lm.arpa",
                                      lexicon=tmp_path / "lexicon.txt", topology="normal").directory)
    dec = Decoder(g, beam=1e4, max_active=10**6, min_active=0, lattice_beam=3.0, num_threads=1)
    z = np.random.default_rng(0).normal(size=(40, 8, 5)) * 2.0
    x = (z - np.log(np.exp(z).sum(2, keepdims=True))).astype(np.float32)
    for r in dec.decode(x, boost={"ab ba": 3.0, "a b": 2.0, "ad": 1.0}):
        assert all(c >= r.confidence - 1e-6 for c in r.word_confidences), (r.word_confidences, r.confidence)
