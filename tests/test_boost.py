"""Word and phrase boosting: a per-utterance word -> reward map looked up at word arcs,
exactly like decoding TLG ∘ B with B the one-state boost acceptor (the riva decoder paper,
sec. 3.2); phrases through an Aho-Corasick automaton walked on the fly, exactly like
decoding TLG ∘ B with B that automaton expanded over the vocabulary."""
from __future__ import annotations

import decimal
import math
import warnings

import numpy as np
import pytest
import pywrapfst as fst
from decoding import random_log_probs
from fst_paths import emission_fsa, shortest_decode
from hypothesis import given
from hypothesis import strategies as st
from wfst.graphs import compile_graph
from wfst.kernels.common import automaton_step

import wfst
from wfst import contexts, synthetic
from wfst.boost import BoostError, phrase_automaton
from wfst.decoder import Decoder
from wfst.graph import graph_from_fst, read_fst

WIDE = dict(beam=1e4, max_active=10**6, min_active=0, token_capacity=256)


def boost_acceptor(words: wfst.WordTable, boost: dict[str, float]) -> fst.VectorFst:
    """B: one state, final, a loop per word with cost -reward (0 for words not boosted)."""
    b = fst.VectorFst()
    s = b.add_state()
    b.set_start(s)
    b.set_final(s)
    for i, w in enumerate(words.symbols):
        if i:
            b.add_arc(s, fst.Arc(i, i, fst.Weight(b.weight_type(), -boost.get(w, 0.0)), s))
    return b


@pytest.fixture
def tiny_graph(tiny):
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    return wfst.load_graph(r.directory), read_fst(r.directory / "TLG.fst")


@pytest.mark.parametrize("boost", [{"ab": 1.5}, {"ba": 3.0, "abc": 0.7}, {"cab": 2.0, "a": -1.0}])
@pytest.mark.parametrize("batch_wide", [True, False], ids=["in-graph", "per-arc"])
def test_boost_equals_static_composition(tiny_graph, boost, batch_wide):
    """The same paths: B's cost joins each word arc's weight as composing rounds it, whether the
    CPU backend puts one batch-wide map into the graph's weights or adds each utterance's
    map per arc (a batch with another mapping object for its last utterance)."""
    g, tlg = tiny_graph
    composed = fst.compose(tlg.copy().arcsort("olabel"), boost_acceptor(g.words, boost))
    composed.arcsort("ilabel")
    static = graph_from_fst(composed, g.tokens, g.words)
    x = random_log_probs(11, batch=6, frames=10, columns=5, sharpness=3.0)
    dec = Decoder(g, **WIDE)
    weights = dec._backend.layout.arcs[:, 2].copy()
    boosted = dec.decode(x, boost=boost if batch_wide else [boost] * 5 + [dict(boost)])
    assert (dec._backend.layout.arcs[:, 2] == weights).all(), "the graph's weights are restored"
    reference = Decoder(static, **WIDE).decode(x)
    for b, (got, ref) in enumerate(zip(boosted, reference)):
        words, cost = shortest_decode(composed, x[b])
        assert got.word_ids == ref.word_ids == tuple(words)
        assert (got.word_frames, got.acoustic_cost) == (ref.word_frames, ref.acoustic_cost)  # the same path
        assert got.cost == pytest.approx(ref.cost, abs=1e-5) and got.cost == pytest.approx(cost, abs=1e-4)
        expected = -sum(boost.get(g.words[w], 0.0) for w in got.word_ids)
        assert got.boost_cost == pytest.approx(expected)
        assert got.acoustic_cost + got.graph_cost + got.boost_cost == pytest.approx(got.cost)


def test_concurrent_calls_with_batch_wide_boosts(tiny_graph):
    """A batch-wide map edits the CPU graph's weights during its call: calls from other
    threads wait, and each gets what it would alone."""
    from concurrent.futures import ThreadPoolExecutor

    g, _ = tiny_graph
    x = random_log_probs(4, batch=4, frames=10, columns=5, sharpness=3.0)
    dec = Decoder(g, **WIDE)
    boosts = [{"ab": 4.0}, {"ba": 4.0}, None, {"cab": 3.0, "a": -2.0}] * 4
    alone = [dec.decode(x, boost=b) for b in boosts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda b: dec.decode(x, boost=b), boosts))
    assert together == alone


def test_per_utterance_boosts(tiny_graph):
    g, _ = tiny_graph
    x = random_log_probs(3, batch=3, frames=8, columns=5, sharpness=3.0)
    dec = Decoder(g, **WIDE)
    each = dec.decode(x, boost=[{"ab": 4.0}, None, {"ba": 4.0}])
    assert each[0] == dec.decode(x[:1], boost={"ab": 4.0})[0]
    assert each[1] == dec.decode(x[1:2])[0]
    assert each[2] == dec.decode(x[2:], boost={"ba": 4.0})[0]


def test_word_cost_vectors_hold_each_utterances_map(tiny_graph):
    """The CPU backend's dense form of B: cost -reward at boosted word ids, 0 elsewhere;
    utterances given one mapping share one vector."""
    from wfst.boost import boost_tables

    g, _ = tiny_graph
    shared = {"ab": 1.5, "ba": -0.5}
    tables = boost_tables([shared, None, shared, {"ab": 2.0}], 4, g, beam=20.0)
    ids = g.words.ids()
    costs = [tables.word_costs(b, len(g.words)) for b in range(4)]
    assert costs[0] is costs[2] and [tables.boosted(b) for b in range(4)] == [True, False, True, True]
    expected = np.zeros(len(g.words), np.float32)
    expected[ids["ab"]], expected[ids["ba"]] = -1.5, 0.5
    assert (costs[0] == expected).all() and not costs[1].any()
    assert np.flatnonzero(costs[3]).tolist() == [ids["ab"]] and costs[3][ids["ab"]] == -2.0
    assert not tables.batch_wide() and boost_tables(shared, 3, g, beam=20.0).batch_wide()
    assert not boost_tables([shared, dict(shared)], 2, g, beam=20.0).batch_wide()  # another mapping
    # the bulk check of plain words (Python numbers) and the full one (NumPy numbers) agree
    bulk = boost_tables({"ab": 1.5, "ba": -0.5, "abc": 0}, 1, g, beam=20.0).maps[0]
    full = boost_tables({"ab": np.float64(1.5), "ba": -0.5, "abc": 0}, 1, g, beam=20.0).maps[0]
    assert bulk == full == {ids["ab"]: -1.5, ids["ba"]: 0.5, ids["abc"]: 0.0}


def test_rewards_of_keys_spelled_alike_are_checked_as_their_sum(tiny_graph):
    """Each key was checked alone: {"ab": 6000, " ab": 6000} gave a reward of 12,000 (above the
    float32 limit refused for one key), and two rewards of 6 at beam 20 no half-beam warning."""
    from wfst.boost import boost_tables

    g, _ = tiny_graph
    with pytest.raises(BoostError, match=r"utterance 0: boost of 'ab' \+ ' ab': reward 12000 is above 10000"):
        boost_tables({"ab": 6000, " ab": 6000}, 1, g, beam=20.0)
    with pytest.raises(BoostError, match=r"'ab': reward 10000.0001 is above 10000"):  # (it said "10000 is above")
        boost_tables({"ab": 10000.0001}, 1, g, beam=20.0)
    for number in (decimal.Decimal("1.5"), np.array(1.5), np.float16(1.5)):  # (Decimal, 0-d: "not a number")
        assert boost_tables({"ab": number}, 1, g, beam=20.0).maps[0] == boost_tables({"ab": 1.5}, 1, g,
                                                                                    beam=20.0).maps[0]
    with pytest.raises(BoostError, match=r"boost of 'ab ba' \+ 'ab  ba': reward 12000 is above"):
        boost_tables({"ab ba": 6000, "ab  ba": 6000}, 1, g, beam=20.0)
    with pytest.warns(UserWarning, match=r"boost 12.0 for 'ab' \+ ' ab' is more than half the beam \(20.0\)"):
        tables = boost_tables({"ab": 6.0, " ab": 6.0}, 1, g, beam=20.0)
    assert tables.maps[0] == {g.words.ids()["ab"]: -12.0}


def test_boosts_of_a_sequence_that_makes_its_mappings_on_access_stay_with_their_utterances(tiny_graph):
    """The mappings were told apart by id() without being held: a freed one's id came back for
    the next, and utterance 2 got utterance 0's boost, silently."""
    from collections.abc import Sequence

    from wfst.boost import boost_tables

    g, _ = tiny_graph

    class Made(Sequence):
        words = ["ab", "ba", "cab"]

        def __len__(self):
            return 3

        def __getitem__(self, i):
            return {self.words[i]: 2.0}

    ids = g.words.ids()
    assert boost_tables(Made(), 3, g, beam=20.0).maps == tuple({ids[w]: -2.0} for w in Made.words)


def test_words_no_arc_outputs_are_unknown(tiny, tmp_path):
    """words.txt holds the LM's words that the lexicon does not spell (and <unk>): no path has
    them, and a boost of one changed nothing, silently."""
    (tmp_path / "lexicon.txt").write_text("a a\nab a b\nba b a\nabc a b c\n")  # no "cab"
    r = compile_graph(tmp_path / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa",
                      lexicon=tmp_path / "lexicon.txt", word_boundary="|", topology="compact", progress=False)
    g = wfst.load_graph(r.directory)
    assert "cab" in g.words.ids() and "<unk>" in g.words.ids()
    dec = Decoder(g, beam=16.0)
    x = random_log_probs(0, 1, 12, g.tokens.num_columns)
    with pytest.warns(UserWarning, match=r"2 boosted word\(s\) or phrase\(s\) are not in the graph's vocabulary"):
        got = dec.decode(x, boost={"cab": 3.0, "<unk>": 3.0, "ab": 1.0})
    assert dec.stats.boost_unknown == ((0, "cab"), (0, "<unk>"))
    assert got == dec.decode(x, boost={"ab": 1.0})


def test_hash_maps_hold_each_utterances_map(tiny_graph):
    """The GPU's form of B: one open-addressing row per utterance, probed like the kernels do."""
    from wfst.kernels.common import boost_cost

    from wfst.boost import boost_tables

    g, _ = tiny_graph
    maps = [{"ab": 1.5, "ba": -0.5, "abc": 2.0}, None, {"cab": 4.0}]
    tables = boost_tables(maps, 3, g, beam=20.0)
    keys, costs, bits = tables.hash_maps([2, 0, 1, 0])
    for r, b in enumerate([2, 0, 1, 0]):
        got = [boost_cost(keys[r], costs[r], bits[r], w) for w in range(len(g.words))]
        assert got == [tables.maps[b].get(w, 0.0) for w in range(len(g.words))]


@pytest.fixture(scope="module")
def char_graph(demo, tmp_path_factory):
    out = tmp_path_factory.mktemp("boost")
    r = compile_graph(out / "char", tokens=demo / "chars_tokens.txt", word_boundary="|", lm=demo / "lm.arpa",
                      topology="compact", cache_dir=out / "cache")
    g = wfst.load_graph(r.directory)
    lines = [t for t in (demo / "test.txt").read_text().splitlines() if t.strip()]
    texts = [t for t in lines if all(w in g.words.ids() for w in t.split())][:60]
    x, lengths = synthetic.from_texts(texts, g.tokens, word_boundary="|", seed=5, confusion=0.25)
    return g, texts, x, lengths


def test_boost_recovers_a_weakly_supported_word(char_graph):
    g, texts, x, lengths = char_graph
    dec = Decoder(g)
    plain = dec.decode(x, lengths)
    fixed = 0
    for b, (text, r) in enumerate(zip(texts, plain)):
        missed = [w for w in text.split() if w not in r.words and len(w) > 3]
        if not missed:
            continue
        boosted = dec.decode(x[b:b + 1], lengths[b:b + 1], boost={missed[0]: 4.0})[0]
        fixed += missed[0] in boosted.words
    assert fixed >= 3, "boosting a missed word should bring it back"


def test_boosting_absent_words_changes_little(char_graph):
    """The paper's 'inaccurate' scenario: boosted words that are not spoken."""
    g, texts, x, lengths = char_graph
    spoken = {w for t in texts for w in t.split()}
    absent = [w for w in g.words.symbols[1:] if w.isalpha() and len(w) > 5 and w not in spoken][:200]
    dec = Decoder(g)
    plain = dec.decode(x, lengths)
    boosted = dec.decode(x, lengths, boost=dict.fromkeys(absent, 2.0))
    from wfst.scoring import word_errors

    before = word_errors(texts, [r.words for r in plain]).rate
    after = word_errors(texts, [r.words for r in boosted]).rate
    assert after <= before + 0.01
    assert sum(a.words == b.words for a, b in zip(plain, boosted)) >= 0.9 * len(texts)


def test_boosting_a_word_no_arc_outputs_changes_nothing(tiny, tmp_path):
    """A word of words.txt that the graph never outputs (an LM word the lexicon cannot spell,
    listed last) may be boosted, reported as unknown: per utterance, batch-wide and in a stream
    (its cost vector held too few words: an IndexError)."""
    r = compile_graph(tmp_path / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    words = r.directory / "words.txt"
    words.write_text(words.read_text() + f"zebra {len(words.read_text().splitlines())}\n")
    g = wfst.load_graph(r.directory)
    assert g.words.ids()["zebra"] > g.olabel.max()
    x = random_log_probs(4, batch=2, frames=6, columns=5)
    dec = Decoder(g, beam=8.0)
    plain = dec.decode(x)
    with pytest.warns(UserWarning, match="'zebra'"):
        boosted = dec.decode(x, boost={"zebra": 2.0, "ab": 1.0})
    assert dec.stats.boost_unknown == ((0, "zebra"), (1, "zebra"))
    assert boosted == dec.decode(x, boost={"ab": 1.0})
    assert dec.decode(x, boost=[{"zebra": 2.0}, None]) == plain
    s = dec.stream(boost={"zebra": 2.0})
    dec.advance([s], [x[0]])
    assert dec.finish([s])[0] == plain[0]


def test_boost_input_is_checked_and_reported(tiny_graph):
    g, _ = tiny_graph
    x = random_log_probs(3, batch=2, frames=6, columns=5)
    dec = Decoder(g, beam=8.0)
    assert dec.decode(x, boost={}) == dec.decode(x)  # empty: no-op
    with pytest.warns(UserWarning, match=r"2 boosted word\(s\) or phrase\(s\) are not in .*'zzz'"):
        dec.decode(x, boost={"zzz": 1.0, "a b": 2.0, "ab": 1.0})
    assert dec.stats.boost_unknown == ((0, "zzz"), (0, "a b"), (1, "zzz"), (1, "a b"))
    with pytest.warns(UserWarning, match="more than half the beam"):
        dec.decode(x, boost={"ab": 5.0})
    # NumPy numbers and padded words are what they look like
    assert dec.decode(x, boost={" ab ": np.float32(1.0)}) == dec.decode(x, boost={"ab": 1.0})
    for bad in [{"ab": math.nan}, {"ab": np.float32("nan")}, {"ab": math.inf}, {"ab": "2"}, {"ab": True}]:
        with pytest.raises(BoostError, match="finite number"):
            dec.decode(x, boost=bad)
    # float32 costs near -1e9 step by 64 nats, more than the beam: every token would die, blamed on the emissions
    for bad in [{"ab": 1e9}, {"ab": 20000}, {"a ab": 1e5}]:
        with pytest.raises(BoostError, match=r"utterance 0: boost of .*: reward .* is above 10000: costs are float32"):
            dec.decode(x, boost=bad)
    with pytest.raises(BoostError, match=r"reward -1e\+39 is below -10000"):  # it overflowed float32
        dec.decode(x, boost={"ab": -1e39})
    for bad in [{"ab": 10**400}, {"ab ba": -10**400}]:  # (beyond float64: an OverflowError)
        with pytest.raises(BoostError, match="reward of 401 digits must be a finite number"):
            dec.decode(x, boost=bad)
    for bad in [{"": 1.0}, {"  ": 1.0, "ab": 1.0}]:  # (was "not in the graph's vocabulary")
        with pytest.raises(BoostError, match="boost key .* holds no word"):
            dec.decode(x, boost=bad)
    # keys spelled alike but for spaces are one word or phrase: their rewards add up
    assert dec.decode(x, boost={"ab ba": 1.0, " ab  ba": 0.5}) == dec.decode(x, boost={"ab ba": 1.5})
    top = Decoder(g, beam=1e6).decode(x, boost={"ab": 1e4})[0]  # the largest reward taken
    assert "ab" in top.words and np.isfinite(top.cost)
    with pytest.warns(UserWarning, match=r"\(listed in Stream.boost_unknown\): 'zzz'"):  # a stream's own
        assert dec.stream(boost={"zzz": 1.0, "ab": 1.0}).boost_unknown == ("zzz",)
    with pytest.raises(BoostError, match=r"Decoder.stream\(\): boost of 'ab': reward nan must be a finite number"):
        dec.stream(boost={"ab": math.nan})
    with pytest.raises(BoostError, match="2 utterances"):
        dec.decode(x, boost=[{"ab": 1.0}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dec.decode(x, boost=[None, {"ab": 1.0}])
    assert np.isfinite([r.cost for r in dec.decode(x, boost={"ab": -3.0})]).all()  # a penalty works too


# --------------------------------------------------------------------------- phrases

def occurrences(words, phrase) -> int:
    n = len(phrase)
    return sum(tuple(words[i:i + n]) == tuple(phrase) for i in range(len(words) - n + 1))


@given(st.dictionaries(st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
                       st.floats(-2, 4, width=32), min_size=1, max_size=6),
       st.lists(st.lists(st.integers(1, 5), max_size=12), min_size=1, max_size=10))
def test_phrase_automaton_rewards_each_complete_occurrence_once(phrases, sentences):
    """Overlapping and nested occurrences all count; a partial match earns nothing."""
    a = phrase_automaton(phrases)
    for words in sentences:
        expected = -sum(r * occurrences(words, p) for p, r in phrases.items())
        assert a.path_cost(words) == pytest.approx(expected, abs=1e-4)


def phrase_acceptor(automaton, num_words: int) -> fst.VectorFst:
    """The phrase automaton with its failure arcs expanded: an arc per state and word."""
    b = fst.VectorFst()
    for _ in range(automaton.num_states):
        b.add_state()
    b.set_start(0)
    rows = contexts.automata([automaton.automaton()])
    for s in range(automaton.num_states):
        b.set_final(s, fst.Weight(b.weight_type(), float(automaton.final[s])))
        for w in range(1, num_words):
            cost, nxt = automaton_step(rows, 0, s, w)
            b.add_arc(s, fst.Arc(w, w, fst.Weight(b.weight_type(), float(cost)), int(nxt)))
    return b


@pytest.mark.parametrize("boost", [{"ab ba": 3.0}, {"ab ba ab": 2.5, "ba ab": 1.0, "abc": 0.5},
                                   {"a ab": 2.0, "ab a": -1.0, "cab cab": 1.5}])
def test_phrase_boost_equals_static_composition(tiny_graph, boost):
    g, tlg = tiny_graph
    ids = g.words.ids()
    phrases = {tuple(ids[w] for w in k.split()): v for k, v in boost.items() if " " in k}
    words_only = {k: v for k, v in boost.items() if " " not in k}
    B = fst.compose(phrase_acceptor(phrase_automaton(phrases), len(g.words)).arcsort("ilabel"),
                    boost_acceptor(g.words, words_only))
    composed = fst.compose(tlg.copy().arcsort("olabel"), B.arcsort("ilabel"))
    composed.arcsort("ilabel")
    x = random_log_probs(7, batch=8, frames=12, columns=5, sharpness=1.5)
    boosted = Decoder(g, **WIDE).decode(x, boost=boost)
    for b, got in enumerate(boosted):
        words, cost = shortest_decode(composed, x[b])
        assert got.word_ids == tuple(words)
        assert got.cost == pytest.approx(cost, abs=1e-4)
        expected = -sum(r * occurrences(got.words, k.split()) for k, r in boost.items())
        assert got.boost_cost == pytest.approx(expected, abs=1e-5)  # partial matches earn nothing
        assert got.acoustic_cost + got.graph_cost + got.boost_cost == pytest.approx(got.cost)


@pytest.mark.parametrize("device", ["cpu", "cuda"])  # (cuda: Numba's simulator without a GPU)
def test_a_phrase_boosted_lattice_holds_every_path_once(tiny_graph, device):
    """With a lattice beam wider than any path, the lattice's probability mass (the log
    semiring's sum over its paths) is that of emissions ∘ TLG ∘ B: on the compact graph a
    token queued twice in the closure, its word arcs' steps deferred, added those links
    twice (posteriors and confidences counted those paths twice)."""
    g, tlg = tiny_graph
    ids = g.words.ids()
    boost = {"ab ba ab": 2.5, "ba ab": 1.0, "a ab": 2.0}
    phrases = {tuple(ids[w] for w in k.split()): v for k, v in boost.items()}
    B = phrase_acceptor(phrase_automaton(phrases), len(g.words)).arcsort("ilabel")
    composed = fst.arcmap(fst.compose(tlg.copy().arcsort("olabel"), B), map_type="to_log").arcsort("ilabel")
    x = random_log_probs(0, batch=6, frames=9, columns=5, sharpness=1.0)
    results = Decoder(g, **WIDE, lattice_beam=1e3, device=device).decode(x, boost=boost)
    for b, r in enumerate(results):
        links = list(zip(r.lattice.src.tolist(), r.lattice.dst.tolist(), r.lattice._raw.arc.tolist()))
        assert len(set(links)) == len(links), "a link held twice"
        emissions = fst.arcmap(emission_fsa(x[b]), map_type="to_log")
        total = float(fst.shortestdistance(fst.compose(emissions, composed), reverse=True)[0])
        mass = float(fst.shortestdistance(r.lattice.to_fst("log"), reverse=True)[0])
        assert mass == pytest.approx(total, abs=1e-3)


def test_a_phrase_matched_in_part_earns_nothing_where_no_final_state_is_reached(tiny_graph):
    """An utterance that ends inside a word reaches no final state: the search ends at its best
    token without the graph's final costs, but a phrase matched in part is still refunded its
    advance (it kept 2 words' advance, -6, and chose its words by it: a boost for an absent
    phrase changed the output), in the result, its lattice and a stream's finish."""
    g, tlg = tiny_graph
    ids = g.words.ids()
    phrase = ("ab", "cab", "ab")
    open_end = tlg.copy()
    for s in open_end.states():  # every state an end, at no cost: the graph's final costs left out
        open_end.set_final(s, 0.0)
    B = phrase_acceptor(phrase_automaton({tuple(ids[w] for w in phrase): 9.0}), len(g.words)).arcsort("ilabel")
    composed = fst.compose(open_end.arcsort("olabel"), B)
    composed.arcsort("ilabel")
    x = random_log_probs(11, batch=12, frames=8, columns=5, sharpness=1.5)
    x[:, -2:] = -np.inf
    x[:, -2, 4] = x[:, -1, 2] = 0.0  # it ends reading "c a": inside "cab", where no final state is
    boost = {" ".join(phrase): 9.0}
    dec = Decoder(g, **WIDE)
    results = dec.decode(x, boost=boost)
    with_lattices = Decoder(g, **WIDE, lattice_beam=4.0).decode(x, boost=boost, nbest=3)
    for b, r in enumerate(results):
        words, cost = shortest_decode(composed, x[b])
        assert not r.reached_final and r.word_ids == tuple(words)
        assert r.cost == pytest.approx(cost, abs=1e-4)
        assert r.boost_cost == pytest.approx(-9.0 * occurrences(r.words, phrase), abs=1e-5)
        lat = with_lattices[b]
        assert (lat.word_ids, lat.nbest[0].word_ids) == (r.word_ids, r.word_ids)
        assert lat.cost == pytest.approx(r.cost, abs=1e-4) and lat.nbest[0].cost == pytest.approx(r.cost, abs=1e-4)
        s = dec.stream(boost=boost)
        dec.advance([s], [x[b, :5]])
        dec.advance([s], [x[b, 5:]])
        (streamed,) = dec.finish([s])
        assert streamed.word_ids == r.word_ids and streamed.cost == pytest.approx(r.cost, abs=1e-5)


def test_boost_recovers_a_weakly_supported_phrase(char_graph):
    g, texts, x, lengths = char_graph
    dec = Decoder(g)
    plain = dec.decode(x, lengths)
    fixed = tried = 0
    for b, (text, r) in enumerate(zip(texts, plain)):
        ref = text.split()
        missed = [i for i, w in enumerate(ref[:-1]) if w not in r.words and len(w) > 3]
        if not missed:
            continue
        phrase = " ".join(ref[missed[0]:missed[0] + 2])
        tried += 1
        boosted = dec.decode(x[b:b + 1], lengths[b:b + 1], boost={phrase: 6.0})[0]
        fixed += phrase in boosted.text
    assert fixed >= 3, f"boosting a missed phrase should bring it back ({fixed} of {tried})"
