"""The lexicon-free CTC beam search (wfst.beam_search): its token LM against kenlm, its
search against an exhaustive search over every alignment, and its errors."""
from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from arpa_files import random_arpa

from wfst import BoostError, DecodeInputError, DecoderMemoryError, OptionError, TokenTable, VocabularyError
from wfst.beam_search import CtcBeamDecoder, TokenLm
from wfst.errors import MissingFileError
from wfst.synthetic import detokenize

kenlm = pytest.importorskip("kenlm", reason="kenlm is a test dependency: pip install -e '.[test]'")


def token_table(symbols):
    return TokenTable(("<blk>", *symbols), 0, 0)


CHARS = ("|", "a", "b", "c")


@pytest.mark.parametrize("order,seed,orphans", [(2, 0, 0.0), (3, 1, 0.0), (4, 2, 0.0), (3, 3, 0.6), (4, 4, 0.6)])
def test_token_lm_costs_equal_kenlm(tmp_path, order, seed, orphans):
    """Random token sentences (random strings of the model's tokens, so backoffs everywhere),
    and tokens the LM lacks scored as <unk> as kenlm does; `orphans`: also backoff weights of
    n-grams that nothing continues."""
    table = token_table(CHARS + ("d",))  # "d" is not in the LM: <unk>
    arpa = random_arpa(tmp_path / "tok.arpa", CHARS, order, seed, density=0.3 if orphans else 0.5,
                       orphan_backoffs=orphans)
    lm, model = TokenLm(arpa, table), kenlm.Model(str(arpa))
    rng = random.Random(seed)
    assert lm.missing == ["d"]
    for _ in range(300):
        columns = [rng.randrange(1, table.num_columns) for _ in range(rng.randint(0, 9))]
        ref = -model.score(" ".join(table.symbols[c] for c in columns), bos=True, eos=True) * math.log(10)
        assert lm.cost(columns) == pytest.approx(ref, abs=1e-4), columns


def exhaustive(x, blank, cost_of_prefix):
    """The best (cost, token prefix) over every alignment of x (T, V): the acoustic cost of the
    cheapest alignment of each collapsed prefix plus that prefix's cost_of_prefix."""
    T, V = x.shape
    best_ac: dict[tuple, float] = {}
    for path in itertools.product(range(V), repeat=T):
        ac = -float(sum(x[t, v] for t, v in enumerate(path)))
        prefix, last = [], blank
        for v in path:
            if v != blank and v != last:
                prefix.append(v)
            last = v
        key = tuple(prefix)
        best_ac[key] = min(best_ac.get(key, math.inf), ac)
    totals = {p: ac + cost_of_prefix(p) for p, ac in best_ac.items()}
    prefix = min(totals, key=totals.get)
    return totals[prefix], prefix, totals


PHRASES = {"tokens": {"ab": 2.5, "ca": 1.5, "bab": 2.0},  # matched on tokens alone
           "words": {"b": 2.5, "c b": 1.5, "bc": 2.0, "cc": -1.0}}  # whole words between "a"s


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("with_lm,with_phrases", [(False, None), (True, None), (False, "tokens"), (True, "tokens"),
                                                  (True, "words")])
def test_wide_beam_equals_exhaustive_search(tmp_path, seed, with_lm, with_phrases):
    """V = 4 (blank + 3 tokens), T <= 7: with a beam that holds every hypothesis the search
    finds the cheapest prefix over all V^T alignments, LM (with </s>), insertion bonus and
    phrase boosts included (on tokens, or on whole words with "a" as the word boundary), at
    the exhaustive search's cost; its N-best list is the exhaustive ranking's head."""
    rng = np.random.default_rng(seed)
    symbols = ("a", "b", "c")
    table = token_table(symbols)
    T = int(rng.integers(1, 8))
    x = np.log(rng.dirichlet(np.full(4, 0.7), size=T)).astype(np.float32)[None]
    lm = random_arpa(tmp_path / "tok.arpa", symbols, 3, seed) if with_lm else None
    phrases = PHRASES.get(with_phrases)
    dec = CtcBeamDecoder(table, lm, beam_size=4 ** 7, beam_threshold=1e6, lm_weight=0.7, token_insertion=0.3,
                         word_boundary="a" if with_phrases == "words" else None, num_threads=1)
    token_lm = dec.lm
    automaton = dec.phrase_automaton(phrases)

    def cost_of_prefix(p):
        c = -0.3 * len(p)
        if token_lm is not None:
            c += 0.7 * token_lm.cost(p)
        if automaton is not None:
            c += automaton.path_cost(p)
        return c

    ref_cost, ref_prefix, totals = exhaustive(x[0], 0, cost_of_prefix)
    result = dec.decode(x, phrases=phrases)[0]
    assert result.cost == pytest.approx(ref_cost, abs=1e-4)
    assert result.words == tuple(detokenize(ref_prefix, table, word_boundary=dec.word_boundary).split())
    assert result.acoustic_cost + result.graph_cost + result.boost_cost == pytest.approx(result.cost, abs=1e-4)
    ranked = sorted(totals.values())[:len(result.nbest)]
    assert [e.cost for e in result.nbest] == pytest.approx(ranked, abs=1e-4)


def reference_beam(x, K, threshold, lm_weight, insertion, lm=None, automaton=None):
    """The beam search written plainly: every candidate of every hypothesis, recombined by
    (prefix, last label) keeping the smallest (cost, hypothesis x V + column), the best K
    within the threshold kept.  Returns the final (cost, prefix) list, best first."""
    from wfst.kernels.common import automaton_step

    T, V = x.shape
    pb = automaton and __import__("wfst.contexts", fromlist=["automata"]).automata([automaton.automaton()])
    beam = [(0.0, (), 0, lm.store.start if lm else 0, 0)]  # cost, prefix, last, lm state, pb state
    for t in range(T):
        cands = {}
        for k, (cost, prefix, last, ls, ps) in enumerate(beam):
            for v in range(V):
                c = np.float32(cost + np.float32(-x[t, v]))
                new = (prefix, v, ls, ps)
                if v != 0 and v != last:
                    if lm is not None:
                        step, ls2 = automaton_step(lm.arrays.automata, 0, ls, lm.arrays.label[v])
                        c = np.float32(c + np.float32(lm_weight) * step)
                    else:
                        ls2 = ls
                    c = np.float32(c - np.float32(insertion))
                    ps2 = ps
                    if pb is not None:
                        step, ps2 = automaton_step(pb, 0, ps, v)
                        c = np.float32(c + step)
                    new = ((*prefix, v), v, ls2, ps2)
                key = new[:2]
                if key not in cands or (c, k * V + v) < cands[key][0]:
                    cands[key] = ((c, k * V + v), new)
        best = min(c for (c, _), _ in cands.values())
        kept = sorted(v for v in cands.values() if v[0][0] <= best + np.float32(threshold))[:K]
        beam = [(c, *new) for (c, _), new in kept]
    final = []
    for cost, prefix, last, ls, ps in beam:
        if lm is not None:
            cost += lm_weight * float(lm.arrays.automata.final[0, ls])
        if pb is not None:
            cost += float(automaton.final[ps])
        final.append((cost, prefix))
    return sorted(final)


@pytest.mark.parametrize("seed", range(8))
def test_narrow_beam_equals_the_plain_beam_search(tmp_path, seed):
    """At a narrow beam (3 of up to 5 x 5 candidates) the kernel's short cuts (columns by
    acoustic cost, left at the first that cannot enter; a heap of the best K) keep exactly
    the hypotheses the plain search keeps, LM and phrases on (whole words for odd seeds)."""
    rng = np.random.default_rng(seed)
    symbols = ("a", "b", "c", "d")
    table = token_table(symbols)
    x = np.log(rng.dirichlet(np.full(5, 0.4), size=14)).astype(np.float32)
    lm = random_arpa(tmp_path / "tok.arpa", symbols, 3, seed)
    phrases = {"ab": 2.0, "dca": 3.0} if seed % 2 == 0 else {"b": 2.0, "dc": 3.0, "c b": 1.0}
    threshold = (6.0, 1e6)[seed // 2 % 2]
    dec = CtcBeamDecoder(table, lm, beam_size=3, beam_threshold=threshold, lm_weight=0.6, token_insertion=0.5,
                         word_boundary=None if seed % 2 == 0 else "a", num_threads=1)
    result = dec.decode(x[None], phrases=phrases)[0]
    ref = reference_beam(x, 3, threshold, 0.6, 0.5, dec.lm, dec.phrase_automaton(phrases))
    distinct = {}
    for cost, prefix in ref:
        distinct.setdefault(prefix, cost)
    assert [e.cost for e in result.nbest] == pytest.approx(list(distinct.values()), abs=1e-4)
    assert [e.words for e in result.nbest] == [tuple(detokenize(p, table, word_boundary=dec.word_boundary).split())
                                               for p in distinct]


@pytest.mark.parametrize("beam_size", [1, 4, 16])
def test_same_words_as_flashlight_lexicon_free(tmp_path, beam_size):
    """flashlight-text's LexiconFreeDecoder (Viterbi, the same token LM read by KenLM, no token
    bonus, its LM weight x ln 10) on 40 random utterances over characters with a word
    boundary: the same words on every one, at narrow and wide beams."""
    from wfst_bench.peers import FlashlightLexiconFree

    symbols = ("|", "a", "b", "c", "d")
    table = token_table(symbols)
    arpa = random_arpa(tmp_path / "tok.arpa", symbols, 3, beam_size)
    rng = np.random.default_rng(beam_size)
    x = np.log(rng.dirichlet(np.full(6, 0.3), size=(40, 16))).astype(np.float32)
    lengths = rng.integers(1, 17, size=40)
    ours = CtcBeamDecoder(table, arpa, beam_size=beam_size, lm_weight=0.7, token_insertion=0.0,
                          beam_threshold=15.0, num_threads=1).decode(x, lengths)
    peer = FlashlightLexiconFree(arpa, table)  # silence = the blank: its start state is then ours
    theirs = peer.decode(x, lengths, beam_size=beam_size, lm_weight=0.7, beam_threshold=15.0, word_boundary="|")
    assert [list(r.words) for r in ours] == theirs.hyps


def test_narrow_beam_keeps_its_size_and_the_best_first():
    rng = np.random.default_rng(3)
    table = token_table(CHARS)
    x = np.log(rng.dirichlet(np.full(5, 0.5), size=(2, 12))).astype(np.float32)
    results = CtcBeamDecoder(table, beam_size=3, num_threads=1).decode(x, np.array([12, 5]))
    for r in results:
        assert 1 <= len(r.nbest) <= 3
        assert [e.cost for e in r.nbest] == sorted(e.cost for e in r.nbest)
        assert r.nbest[0].words == r.words and r.nbest[0].cost == r.cost


@pytest.mark.parametrize("blank_last", [False, True])
def test_a_token_32768_columns_from_the_blank_keeps_its_own_hypotheses(blank_last):
    """X, then X or blank, then X: "X X" (through the blank) beats "X" once a token earns a
    bonus.  Keys of (prefix, last label) lost the label's high bits, so with V > 32,768 a
    token 32,768 columns from the blank merged (prefix, X) with (prefix, blank): "X"."""
    from wfst.kernels.beam import _key

    V = 32769
    blank, X = (V - 1, 0) if blank_last else (0, V - 1)
    symbols = [f"t{i}" for i in range(V)]
    symbols[blank] = "<blk>"
    x = np.full((1, 3, V), -30.0, np.float32)
    for t, p in enumerate((0.9, 0.55, 0.9)):
        x[0, t, X], x[0, t, blank] = math.log(p), math.log(1 - p)
    r = CtcBeamDecoder(TokenTable(tuple(symbols), blank), beam_size=8, token_insertion=1.0,
                       num_threads=1).decode(x)[0]
    assert r.words == (f"t{X}t{X}",)
    assert r.cost == pytest.approx(-(math.log(0.9) + math.log(0.45) + math.log(0.9)) - 2.0, abs=1e-4)
    h = np.uint64(0x1234_5678_9ABC_DEF0)
    assert len({_key(h, v) for v in (0, 1, 1 << 15, 1 << 16, (1 << 15) + 1, 1 << 40)}) == 6


def test_characters_split_into_words_with_their_first_frames_and_times():
    """A word runs from its first token's first frame to its last token's last frame: the
    boundary and blank frames around it are not part of it, a repeat is."""
    table = token_table(CHARS)
    x = np.full((1, 8, 5), math.log(1e-4), np.float32)
    for t, c in enumerate([0, 2, 2, 1, 3, 0, 4, 0]):  # <blk> a a | b <blk> c <blk>  ->  "a bc"
        x[0, t, c] = 0.0
    r = CtcBeamDecoder(table, token_insertion=0.0, num_threads=1).decode(x)[0]
    assert r.words == ("a", "bc") and r.word_frames == (1, 4) and r.word_ids == ()
    assert r.word_times == ((1, 2), (4, 6))
    assert all(len(e.word_times) == len(e.words) for e in r.nbest)


def test_bpe_words_start_at_their_word_piece():
    """Sentencepiece words: a word starts at its "▁" piece (alone or not) and runs to its last piece."""
    table = TokenTable(("<blk>", "\u2581", "\u2581a", "b", "c"), 0, 0)
    x = np.full((1, 9, 5), math.log(1e-4), np.float32)
    for t, c in enumerate([2, 3, 3, 0, 1, 0, 4, 4, 0]):  # ▁a b b <blk> ▁ <blk> c c <blk>  ->  "ab c"
        x[0, t, c] = 0.0
    r = CtcBeamDecoder(table, token_insertion=0.0, num_threads=1).decode(x)[0]
    assert r.words == ("ab", "c") and r.word_frames == (0, 4) and r.word_times == ((0, 2), (4, 7))
    for t, c in enumerate([1, 0, 0, 2, 3, 0, 0, 0, 0]):  # ▁ <blk> <blk> ▁a b ...: the bare "▁" is an empty word
        x[0, t] = math.log(1e-4)  # (the word began at it: frame 0)
        x[0, t, c] = 0.0
    r = CtcBeamDecoder(table, token_insertion=0.0, num_threads=1).decode(x)[0]
    assert r.words == ("ab",) and r.word_times == ((3, 4),)
    # a sentencepiece table that has a "|" piece too is cut at its "▁" pieces (it was read as characters, '|'
    # the boundary: one word "▁ab▁c")
    piped = TokenTable(("<blk>", "\u2581", "\u2581a", "b", "c", "|"), 0, 0)
    y = np.concatenate([x, np.full((1, 9, 1), math.log(1e-4), np.float32)], axis=2)
    for t, c in enumerate([2, 3, 3, 0, 1, 0, 4, 4, 0]):
        y[0, t] = math.log(1e-4)
        y[0, t, c] = 0.0
    r = CtcBeamDecoder(piped, token_insertion=0.0, num_threads=1).decode(y)[0]
    assert r.words == ("ab", "c") and r.word_times == ((0, 2), (4, 7))


def test_a_piece_that_holds_word_boundaries_gives_each_of_its_words_its_frames():
    """A sentencepiece model trained without splitting at whitespace has pieces like "▁of▁the":
    its words share its frames (word_times had one span for the two words, and the CTM paired
    the third word's time with the second and dropped the third)."""
    from wfst.cli import ctm_lines

    table = TokenTable(("<blk>", "\u2581of\u2581the", "\u2581cat", "a\u2581"), 0, 0)
    x = np.full((1, 9, 4), math.log(1e-4), np.float32)
    for t, c in enumerate([1, 1, 0, 2, 2, 3, 0, 2, 0]):  # ▁of▁the ▁of▁the <blk> ▁cat ▁cat a▁ <blk> ▁cat <blk>
        x[0, t, c] = 0.0
    r = CtcBeamDecoder(table, token_insertion=0.0, num_threads=1).decode(x)[0]
    assert r.words == ("of", "the", "cata", "cat")
    assert r.word_times == ((0, 1), (0, 1), (3, 5), (7, 7))  # (as after a bare "▁": the word begins at its own)
    assert [line.split()[-1] for line in ctm_lines("u", r, 0.04).splitlines()] == list(r.words)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_an_utterance_whose_every_path_has_probability_0_has_none(tmp_path, device):
    """Where the LM gives probability 0 to every token the frames allow (b, then b or a blank),
    no hypothesis survives: no words, cost +inf, reached_final False (as the graph decoder
    says it).  The beam's bound was inf + threshold there, which let in paths of cost inf, and
    the result was one of them, ranked by the order they were made in, reached_final True."""
    if device == "cuda":
        pytest.importorskip("numba.cuda")
    arpa = tmp_path / "inf.arpa"
    arpa.write_text("\\data\\\nngram 1=5\n\n\\1-grams:\n-1.0\t<unk>\n-99\t<s>\n-0.8\t</s>\n-0.6\ta\n"
                    "-inf\tb\n\n\\end\\\n")
    table = token_table(("a", "b"))
    x = np.full((2, 4, 3), -np.inf, np.float32)
    x[:, 0, 2] = 0.0  # frame 0: only b
    x[:, 1:, 1], x[:, 1:, 0] = math.log(0.6), math.log(0.4)  # then a or a blank
    x[1, 0, 0] = math.log(0.5)  # the second utterance may wait on a blank first
    x[1, 0, 2] = math.log(0.5)
    for beam_size in (1, 4):
        options = dict(beam_size=beam_size, lm_weight=0.5, token_insertion=0.0)
        decoder = CtcBeamDecoder(table, arpa, device=device, **options)
        with pytest.warns(UserWarning, match=r"^1 utterance\(s\) have no path through .*\(utterance 0\)"):
            dead, alive = decoder.decode(x, np.array([4, 4]))
        assert decoder.stats.no_path == (0,)
        assert dead.words == () and dead.cost == math.inf and not dead.reached_final
        assert dead.nbest == () and dead.word_times == ()
        assert alive.reached_final and math.isfinite(alive.cost) and set("".join(alive.words)) <= {"a"}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # (NumPy's scalars in CUDA's simulator)
def test_costs_past_float32_range_say_there_is_no_path_and_why(device):
    """Scores of another scale (-1e37 a frame) overflow a path's float32 cost: no path, said
    as the graph decoder says it, naming the frame no log-softmax gives."""
    if device == "cuda":
        pytest.importorskip("numba.cuda")
    x = np.full((2, 40, 3), math.log(1 / 3), np.float32)
    x[1] = -3e37
    x[1, :, 0] = -1e37
    decoder = CtcBeamDecoder(token_table(("a", "b")), device=device)
    with pytest.warns(UserWarning, match=r"\(utterance 1\).*Utterance 1's frame 0 has its largest log-prob -1e\+37"):
        fine, dead = decoder.decode(x)
    assert decoder.stats.no_path == (1,) and dead.cost == math.inf and math.isfinite(fine.cost)


def test_a_blank_named_beside_a_token_table_is_refused():
    """blank= reads a tokens.txt; beside a TokenTable, which has its own, it was ignored."""
    with pytest.raises(OptionError, match=r"blank='a' names the blank of a tokens.txt read here; the TokenTable"):
        CtcBeamDecoder(token_table(CHARS), blank="a")


@pytest.mark.parametrize("seed", range(4))
def test_traced_token_runs_read_the_hypothesis_acoustic_cost(seed):
    """Every hypothesis of the last beam, traced: its tokens read their columns from their
    first frame to the end of their run and every other frame reads the blank, an alignment
    whose acoustic cost is the hypothesis' own (so the runs' ends, which word times come
    from, are right)."""
    from wfst.kernels import beam

    rng = np.random.default_rng(seed)
    table = token_table(CHARS)
    T = 20
    x = np.log(rng.dirichlet(np.full(5, 0.3), size=T)).astype(np.float32)
    dec = CtcBeamDecoder(table, beam_size=6, beam_threshold=1e4, num_threads=1)
    work = beam.new_beam_work(6, 5)
    parents, labels = np.zeros((T, 6), np.int32), np.full((T, 6), -1, np.int32)
    final, order = beam.search(x, T, dec.settings, None, None, 0, work, parents, labels)
    assert len(order) == 6
    for j in order:
        tokens, frames, ends = beam.trace(parents, labels, T, j, 0)
        columns = np.zeros(T, np.int64)
        for c, f, e in zip(tokens, frames, ends):
            assert f <= e and (columns[f:e + 1] == 0).all()
            columns[f:e + 1] = c
        assert -x[np.arange(T), columns].sum() == pytest.approx(final.acoustic[j], abs=1e-4)


def test_empty_utterance_is_the_empty_prefix_with_its_end_cost(tmp_path):
    table = token_table(CHARS)
    arpa = random_arpa(tmp_path / "tok.arpa", CHARS, 2, 0)
    dec = CtcBeamDecoder(table, arpa, lm_weight=0.5, num_threads=1)
    r = dec.decode(np.zeros((1, 3, 5), np.float32), np.array([0]))[0]
    assert r.words == () and r.cost == pytest.approx(0.5 * dec.lm.cost([]), abs=1e-5)


# ---------------------------------------------------------------------- bad input

def test_an_lm_over_other_tokens_is_refused_naming_them(tmp_path):
    arpa = random_arpa(tmp_path / "words.arpa", ("the", "cat"), 2, 0)
    with pytest.raises(VocabularyError, match=r"2 of its words are not tokens.*'cat'"):
        CtcBeamDecoder(token_table(CHARS), arpa)


def test_a_blank_inside_the_lm_is_refused(tmp_path):
    arpa = random_arpa(tmp_path / "tok.arpa", ("a", "<blk>"), 2, 0)
    with pytest.raises(VocabularyError, match=r"the blank '<blk>' is a word of the LM"):
        CtcBeamDecoder(token_table(CHARS), arpa)


@pytest.mark.parametrize("option,value,message", [
    ("beam_size", 0, r"beam_size=0: must be an integer >= 1"),
    ("beam_size", 2.5, r"beam_size=2.5"),
    ("lm_weight", float("nan"), r"lm_weight=nan: must be a finite number"),
    ("beam_threshold", 0.0, r"beam_threshold=0.0: must be > 0"),
    ("beam_threshold", 1e39, r"beam_threshold=1e\+39: must be a finite number \(of float32's range"),
    ("word_boundary", "<blk>", r"word_boundary='<blk>' is the blank"),
    ("device", "tpu", r"device='tpu'"),
    ("token_insertion", 3e38, r"token_insertion=3e\+38: must be at most 10000 in size"),
    ("beam_size", 2**63, r"beam_size=9223372036854775808: beam_size x the 5 tokens must be at most 2\*\*30"),
    ("spm", "/no/such.model", r"cannot read sentencepiece model \(spm\) /no/such.model: not found"),
])
def test_bad_options_name_the_option(option, value, message):
    with pytest.raises(OptionError if option != "spm" else MissingFileError, match=message):
        CtcBeamDecoder(token_table(CHARS), **{option: value})


def test_an_spm_for_a_table_without_pieces_or_a_beam_the_host_cannot_hold_is_refused(tmp_path, monkeypatch):
    """An spm turns the '|' word boundary off, so one given for a character model decoded
    'a|bc' as one word; a beam_size whose scratch the host cannot hold was numpy's MemoryError
    (or the OOM killer)."""
    from wfst import memory

    model = tmp_path / "bpe.model"
    model.write_bytes(b"x")
    with pytest.raises(OptionError, match=r"the token table has no sentencepiece pieces"):
        CtcBeamDecoder(token_table(CHARS), spm=model)
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 30 * 2**20)
    with pytest.raises(DecoderMemoryError, match=r"beam_size=100000: a search's scratch needs about 0.04 GiB of "
                                                 r"host memory \(5 tokens\) but 0.03 GiB is available"):
        CtcBeamDecoder(token_table(CHARS), beam_size=100_000)
    dec = CtcBeamDecoder(token_table(CHARS), beam_size=1000, num_threads=1)
    with pytest.raises(DecoderMemoryError, match=r"1 search\(es\) of up to 10000 frames need about 0.08 GiB"):
        dec.decode(np.zeros((1, 10_000, 5), np.float32) - 1.6)


def test_phrases_outside_the_token_set_name_the_phrase_and_symbol():
    dec = CtcBeamDecoder(token_table(CHARS), num_threads=1)
    x = np.zeros((1, 2, 5), np.float32)
    with pytest.raises(BoostError, match=r"phrase 'abz' cannot be spelled.*'z'"):
        dec.decode(x, phrases=["abz"])
    with pytest.raises(BoostError, match=r"reward inf"):
        dec.decode(x, phrases={"ab": math.inf})
    with pytest.raises(BoostError, match=r"phrase 'ab': reward 1e\+09 is above 10000: costs are float32"):
        dec.decode(x, phrases={"ab": 1e9})


def test_a_list_mixing_phrases_and_lists_names_the_odd_entry():
    dec = CtcBeamDecoder(token_table(CHARS), num_threads=1)
    with pytest.raises(BoostError, match=r"phrase \['ab'\]: must be a string \(phrases: a list of phrases"):
        dec.decode(np.zeros((2, 3, 5), np.float32) - 1.6, phrases=[["ab"], "ba"])  # (a TypeError: unhashable)


def test_phrases_listed_twice_or_given_by_a_generator_are_the_list():
    dec = CtcBeamDecoder(token_table(CHARS), num_threads=1)
    x = np.log(np.random.default_rng(4).dirichlet(np.full(5, 0.5), size=(2, 12))).astype(np.float32)
    once = dec.decode(x, phrases=["ab", "ba"])
    assert dec.decode(x, phrases=["ab", "ba", "ab", "ab"]) == once  # (each listing added a reward)
    assert dec.decode(x, phrases=(p for p in ["ab", "ba"])) == once  # (read once: len() failed)
    assert dec.decode(x, phrases=["ab", " ab", "ab ", "ba"]) == once  # (spelled alike: rewarded once each)
    r = dec.phrase_reward
    assert dec.decode(x, phrases={"ab": r / 2, " ab": r / 2, "ba": r}) == once  # (a mapping sums them)


def test_phrases_on_a_sentencepiece_table_without_its_model_are_refused():
    """Spelled per character, "the" matched inside "other" (o t h e r) and never "▁the"."""
    dec = CtcBeamDecoder(token_table(("\u2581the", "\u2581o", "t", "h", "e", "r")), num_threads=1)
    x = np.zeros((1, 4, 7), np.float32) - 2.0
    with pytest.raises(BoostError, match=r"phrases on a sentencepiece token table need spm="):
        dec.decode(x, phrases=["the"])
    assert dec.decode(x)[0].boost_cost == 0.0  # (without phrases it decodes)


def test_an_lm_of_weight_0_is_no_lm_even_where_it_gives_probability_0(tmp_path):
    """0 x the cost of a -inf log-probability was NaN, which dropped every extension through
    that n-gram: 'c b' (c read as <unk>, then b of probability 0) lost to 'c' at cost 5."""
    arpa = tmp_path / "inf.arpa"
    arpa.write_text("\\data\\\nngram 1=5\n\n\\1-grams:\n-1.0\t<unk>\n-99\t<s>\n-0.8\t</s>\n-0.6\ta\n"
                    "-inf\tb\n\n\\end\\\n")
    table = token_table(("a", "b", "c"))
    x = np.full((1, 2, 4), -np.inf, np.float32)
    x[0, 0, 3] = x[0, 1, 2] = 0.0  # c, then b
    x[0, :, 0] = -5.0
    plain = CtcBeamDecoder(table, None, lm_weight=0.0, token_insertion=0.0, num_threads=1).decode(x)[0]
    assert plain.cost == 0.0 and "".join(plain.words) == "cb"
    zero = CtcBeamDecoder(table, arpa, lm_weight=0.0, token_insertion=0.0, num_threads=1).decode(x)[0]
    assert zero == plain
    weighted = CtcBeamDecoder(table, arpa, lm_weight=0.5, token_insertion=0.0, num_threads=1).decode(x)[0]
    assert weighted.cost > 4  # (through b: impossible; c alone then a blank)


def test_stats_are_empty_after_a_call_that_raised_and_a_huge_phrase_reward_is_refused_at_once():
    dec = CtcBeamDecoder(token_table(CHARS), num_threads=1)
    dec.decode(np.zeros((1, 3, 5), np.float32) - 1.6)
    assert dec.stats.frames == 3
    with pytest.raises(DecodeInputError):
        dec.decode(np.full((1, 3, 5), np.nan, np.float32))
    assert dec.stats.frames == 0 and dec.stats.utterances == 0
    with pytest.raises(OptionError, match=r"phrase_reward: reward 1e\+30 is above 10000"):
        CtcBeamDecoder(token_table(CHARS), phrase_reward=1e30)  # (refused only when phrases came)


def whole_word_rewards(words, phrases):
    """-(the rewards of every occurrence of a phrase as whole words of `words`), overlaps included."""
    total = 0.0
    for phrase, reward in phrases.items():
        p = phrase.split()
        total -= reward * sum(words[i:i + len(p)] == p for i in range(len(words) - len(p) + 1))
    return total


def random_phrases(rng, first, letters):
    """Rewards and penalties (a penalty was dropped where phrases match whole words)."""
    return {" ".join(rng.choice(first) + "".join(rng.choice(letters) for _ in range(rng.randint(0, 2)))
                     for _ in range(rng.randint(1, 2))): rng.choice((-1, 1)) * round(rng.uniform(0.5, 3.0), 2)
            for _ in range(rng.randint(1, 4))}


@pytest.mark.parametrize("seed", range(3))
def test_phrases_match_whole_character_words(seed):
    """Between word boundaries: a phrase earns its reward once per occurrence as whole words
    of the text the tokens spell (boundaries repeated, or missing at the edges, included),
    never inside a longer word ("ab" in "cab" or "abc")."""
    rng = random.Random(seed)
    table = token_table(CHARS)
    dec = CtcBeamDecoder(table, num_threads=1)
    for _ in range(60):
        phrases = random_phrases(rng, "abc", "abc")
        automaton = dec.phrase_automaton(phrases)
        for _ in range(25):
            columns = [rng.randrange(1, 5) for _ in range(rng.randint(0, 12))]
            words = detokenize(columns, table, word_boundary="|").split()
            assert automaton.path_cost(columns) == pytest.approx(whole_word_rewards(words, phrases), abs=1e-4), \
                (phrases, columns)


@pytest.mark.parametrize("seed", range(3))
def test_phrases_match_whole_sentencepiece_words(seed):
    """Sentencepiece pieces: a phrase starts at a "▁" piece and earns its reward only when the
    next piece begins a word too, or the utterance ends (not in "▁a b c" for "ab")."""
    from wfst.boost import phrase_automaton

    rng = random.Random(seed)
    table = TokenTable(("<blk>", "\u2581a", "\u2581b", "a", "b", "c"), 0, 0)
    column = {s: c for c, s in enumerate(table.symbols)}
    starts = np.array([1, 2], np.int64)

    def spell(phrase):
        return tuple(column[("\u2581" if i == 0 else "") + ch] for word in phrase.split() for i, ch in enumerate(word))

    for _ in range(60):
        phrases = random_phrases(rng, "ab", "abc")
        spelled = {}
        for phrase, reward in phrases.items():
            spelled[spell(phrase)] = spelled.get(spell(phrase), 0.0) + reward
        automaton = phrase_automaton(spelled, word_starts=starts)
        for _ in range(25):
            columns = [rng.randrange(1, 3)] + [rng.randrange(1, 6) for _ in range(rng.randint(0, 13))]
            words = detokenize(columns, table).split()
            assert automaton.path_cost(columns) == pytest.approx(whole_word_rewards(words, phrases), abs=1e-4), \
                (phrases, columns)


def test_a_boosted_word_is_not_rewarded_inside_a_longer_one():
    """Decoding: "ab" boosted changes nothing where the emissions spell "cab" or "abc", and
    earns its reward where they spell "ab", also with the word boundaries around it."""
    table = token_table(CHARS)
    dec = CtcBeamDecoder(table, token_insertion=0.0, num_threads=1)
    col = {s: c for c, s in enumerate(table.symbols)}
    for text, reward in (("cab", 0.0), ("abc", 0.0), ("ab", 2.0), ("|ab|", 2.0), ("c|ab|ab", 4.0)):
        x = np.full((1, 2 * len(text), 5), math.log(1e-4), np.float32)
        for i, ch in enumerate(text):
            x[0, 2 * i, col[ch]] = x[0, 2 * i + 1, 0] = 0.0
        r = dec.decode(x, phrases={"ab": 2.0})[0]
        assert "|".join(r.words) == text.strip("|") and r.boost_cost == pytest.approx(-reward), text


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_bad_emissions_are_refused_as_by_the_tlg_decoder(device):
    dec = CtcBeamDecoder(token_table(CHARS), num_threads=1, device=device)
    with pytest.raises(DecodeInputError, match=r"V=4 columns"):
        dec.decode(np.zeros((1, 3, 4), np.float32))
    with pytest.raises(DecodeInputError, match=r"float32"):
        dec.decode(np.zeros((1, 3, 5), np.float64))
    with pytest.raises(DecodeInputError, match=r"length 4 outside"):
        dec.decode(np.zeros((1, 3, 5), np.float32), np.array([4]))
    x = np.zeros((2, 3, 5), np.float32)
    x[1, 1, 2] = np.nan
    with pytest.raises(DecodeInputError, match=r"utterance 1"):
        dec.decode(x)


# ---------------------------------------------------------------------- device="cuda"

CUDA_CASES = {  # (LM, phrases per utterance, beam_size, beam_threshold, emissions)
    "no LM, wide": (False, None, 6, 50.0, "random"),
    "LM, beam binds": (True, None, 2, 50.0, "random"),
    "LM + phrases, threshold binds": (True, [{"ab": 2.0, "ca b": 1.0}, None, ["bab"]], 3, 2.5, "random"),
    "ties everywhere": (True, ["ab"], 3, 50.0, "uniform"),
}


@pytest.mark.parametrize("case", CUDA_CASES)
def test_cuda_equals_cpu(tmp_path, case):
    """device="cuda" (the simulator without a GPU) gives the CPU's results exactly: the same
    words, frames, cost parts and N-best lists, for a batch of different lengths (one empty)
    with per-utterance phrases; uniform emissions make every candidate cost tie, which the
    packed (cost, candidate) order must settle as the CPU's heap does."""
    pytest.importorskip("numba.cuda")
    with_lm, phrases, beam_size, threshold, emissions = CUDA_CASES[case]
    table = token_table(CHARS)
    lm = random_arpa(tmp_path / "tok.arpa", CHARS, 3, 4) if with_lm else None
    rng = np.random.default_rng(len(case))
    shape = (3, 6, table.num_columns)
    x = (np.full(shape, -np.log(shape[2])) if emissions == "uniform"
         else np.log(rng.dirichlet(np.full(shape[2], 0.6), size=shape[:2]))).astype(np.float32)
    lengths = np.array([6, 3, 0])
    options = dict(beam_size=beam_size, beam_threshold=threshold, lm_weight=0.8, token_insertion=0.4)
    cpu = CtcBeamDecoder(table, lm, num_threads=1, **options)
    gpu = CtcBeamDecoder(table, lm, device="cuda", **options)
    expected = cpu.decode(x, lengths, phrases=phrases)
    got = gpu.decode(x, lengths, phrases=phrases)
    assert got == expected  # (a DecodeResult's == leaves its N-best list and word times out)
    assert [(r.nbest, r.word_times) for r in got] == [(r.nbest, r.word_times) for r in expected]
    assert max(len(r.nbest) for r in expected) > 1  # (distinct prefixes: fewer than beam_size may be)
