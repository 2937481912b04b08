"""Lexicon: reading, deriving, disambiguation symbols, and L itself."""
import warnings

import pytest
import pywrapfst as fst
from fst_paths import linear_fsa
from wfst.graphs.lexicon import (
    Lexicon,
    add_disambig,
    lexicon_from_chars,
    lexicon_from_sentencepiece,
    lexicon_fst,
    read_lexicon,
    read_word_list,
)

from wfst import InputFileError, MissingFileError, TokenTable, WordTable
from wfst.errors import OptionError

TOK = TokenTable(("<blk>", "|", "a", "b", "c"), 0)


@pytest.mark.parametrize("text,message", [
    ("ab a b\nba b x\n", r"lexicon.txt:2: token 'x' of word 'ba' is not in the token table"),
    ("ab a <blk> b\n", r"lexicon.txt:1: word 'ab' is spelled with the blank '<blk>'"),
    ("ab a b\n\nab a b\n", r"lexicon.txt:3: duplicate entry 'ab' 'a b' \(first on line 1\)"),
    ("ab\n", r"lexicon.txt:1: word 'ab' has no tokens"),
    ("#0 a\n", r"lexicon.txt:1: '#0' is reserved"),
    ("<s> a\n", r"lexicon.txt:1: '<s>' is reserved"),
    ("ab a | b\n", r"lexicon.txt:1: word 'ab' contains the word-boundary unit '\|'"),
    ("\n  \n", r"lexicon.txt: the lexicon is empty"),
    ("a a\nab a b\na\x00bc a b c\n", r"lexicon.txt:3: a NUL character \(\\x00\): no symbol may hold one"),
    # Kaldi's lexiconp.txt: every line's second field a probability in (0, 1]
    ("a 0 a\nab 1 a b\n", r"lexicon.txt:1: probability 0 of word 'a' is not in \(0, 1\]"),
    ("a 1.5 a\nab 1 a b\n", r"lexicon.txt:1: probability 1.5 of word 'a' is not in \(0, 1\]"),
    ("a 1.0 a\nab a b\n", r"lexicon.txt:1: token '1.0' of word 'a' is not in the token table \(a probability\? "
                          r"a lexiconp.txt has one on every line\)"),
    ("a 1.0\nab 1 a b\n", r"lexicon.txt:1: word 'a' has no tokens"),
])
def test_bad_lexicons(tmp_path, text, message):
    p = tmp_path / "lexicon.txt"
    p.write_text(text)
    with pytest.raises(InputFileError, match=message):
        read_lexicon(p, TOK, separator="|")


def test_words_and_tokens_may_be_unicode_spaces_or_line_breaks(tmp_path):
    """Fields are split at ASCII spaces and tabs, lines at \\n and \\r, as Kaldi reads them:
    'a<NBSP>b a b' was the word 'a' spelled 'b a b', and a U+3000 token line was dropped (every
    later token a column off)."""
    p = tmp_path / "lexicon.txt"
    p.write_text("a\u00a0b a b\r\nc\u2028d\tc\n", encoding="utf-8")
    assert read_lexicon(p, TOK).entries == (("a\u00a0b", ("a", "b")), ("c\u2028d", ("c",)))
    t = tmp_path / "tokens.txt"
    t.write_text("<blk>\na\n\u3000\n\u0085\nb\n", encoding="utf-8")
    assert TokenTable.read(t).symbols == ("<blk>", "a", "\u3000", "\u0085", "b")


def test_missing_lexicon(tmp_path):
    with pytest.raises(MissingFileError, match="cannot read lexicon"):
        read_lexicon(tmp_path / "none.txt", TOK)


def test_alternative_spellings_are_kept(tmp_path):
    p = tmp_path / "lexicon.txt"
    p.write_text("ab a b\nab a b c\n")
    assert read_lexicon(p, TOK).entries == (("ab", ("a", "b")), ("ab", ("a", "b", "c")))


def test_word_list(tmp_path):
    p = tmp_path / "words.txt"
    p.write_text("<eps> 0\nab 1\nba 2\n#0 3\n<s> 4\n")
    assert read_word_list(p) == ["ab", "ba"]
    p.write_text("ab\nba\nab\n")
    with pytest.raises(InputFileError, match=r"words.txt:3: duplicate word 'ab' \(first on line 1\)"):
        read_word_list(p)
    p.write_text("")
    with pytest.raises(InputFileError, match="the word list is empty"):
        read_word_list(p)


def test_disambiguation_symbols_like_kaldi():
    lex = Lexicon((("red", ("r", "e", "d")), ("read", ("r", "e", "d")), ("re", ("r", "e")),
                   ("redo", ("r", "e", "d", "o")), ("x", ("x",))))
    entries, d = add_disambig(lex)
    assert entries == [("red", ("r", "e", "d", "#1")), ("read", ("r", "e", "d", "#2")),
                       ("re", ("r", "e", "#1")), ("redo", ("r", "e", "d", "o")), ("x", ("x",))]
    assert d == 3  # #0 (G backoff), #1, #2
    assert add_disambig(Lexicon((("x", ("x",)),)))[1] == 1  # always #0


def test_per_character_lexicon_reports_unspellable_words():
    lex = lexicon_from_chars(["ab", "cab", "xyz", "bad"], TOK, "|")
    assert lex.entries == (("ab", ("a", "b")), ("cab", ("c", "a", "b")))
    assert lex.unspellable == ("xyz", "bad") and lex.separator == "|"
    with pytest.raises(OptionError, match="word-boundary unit '#' is not in the token table"):
        lexicon_from_chars(["ab"], TOK, "#")
    with pytest.raises(OptionError, match="word-boundary unit '<blk>' is the blank"):
        lexicon_from_chars(["ab"], TOK, "<blk>")
    with pytest.raises(OptionError, match=r"no word could be spelled .*\(characters\), e.g. 'xyz', 'q'"):
        lexicon_from_chars(["xyz", "q"], TOK, None)
    with pytest.raises(OptionError, match=r"no words to spell \(characters\)"):
        lexicon_from_chars([], TOK, "|")


def test_sentencepiece_lexicon(demo, tmp_path):
    tok = TokenTable.read(demo / "bpe_tokens.txt")
    lex = lexicon_from_sentencepiece(["hello", "world", "the"], demo / "bpe.model", tok)
    assert [w for w, _ in lex.entries] == ["hello", "world", "the"]
    assert all(p[0].startswith("\u2581") for _, p in lex.entries)  # word-initial pieces
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(InputFileError, match="bad.model: not a sentencepiece model"):
        lexicon_from_sentencepiece(["hello"], bad, tok)
    with pytest.raises(MissingFileError, match="sentencepiece model"):
        lexicon_from_sentencepiece(["hello"], tmp_path / "none.model", tok)


def paths(f):
    """(input labels, output labels) of every path of an acyclic-after-one-loop L, from start back to a final."""
    out = []

    def walk(s, ins, outs, depth):
        if depth and f.final(s) != fst.Weight.zero(f.weight_type()):
            out.append((tuple(ins), tuple(outs)))
            return
        if depth > 8:
            return
        for a in f.arcs(s):
            walk(a.nextstate, ins + [a.ilabel], outs + [a.olabel], depth + 1)

    walk(f.start(), [], [], 0)
    return out


def test_lexicon_fst_word_on_first_arc():
    lex = Lexicon((("ab", ("a", "b")), ("ba", ("b", "a")), ("a", ("a",))))
    entries, d = add_disambig(lex)
    tok = TOK.with_disambig(d)
    words = WordTable.from_words(["ab", "ba", "a"])
    L = lexicon_fst(entries, tok, words)
    il, wid = tok.ilabels(), words.ids()
    got = set(paths(L))
    assert ((il["a"], il["b"]), (wid["ab"], 0)) in got
    assert ((il["b"], il["a"]), (wid["ba"], 0)) in got
    assert ((il["a"], il["#1"]), (wid["a"], 0)) in got  # "a" is a prefix of "ab"
    assert ((il["#0"],), (wid["#0"],)) in got  # G's backoff passes through
    assert L.properties(fst.O_LABEL_SORTED, True) == fst.O_LABEL_SORTED


def test_lexicon_fst_with_separator():
    lex = Lexicon((("ab", ("a", "b")),), separator="|")
    entries, d = add_disambig(lex)
    tok = TOK.with_disambig(d)
    words = WordTable.from_words(["ab"])
    L = lexicon_fst(entries, tok, words, "|")
    il, wid = tok.ilabels(), words.ids()
    sep = il["|"]
    # "ab", "ab|", "|ab" are words; "abab" without a separator is not.
    acceptor = fst.arcmap(L, map_type="identity")
    acceptor.project("input")

    def accepts(labels):
        return fst.compose(linear_fsa(labels), acceptor).num_states() > 0

    a, b = il["a"], il["b"]
    assert accepts([a, b]) and accepts([a, b, sep]) and accepts([sep, a, b])
    assert accepts([a, b, sep, a, b])
    assert not accepts([a, b, a, b])
    assert wid["ab"] == 1


def test_kaldi_lexiconp_puts_each_spelling_s_probability_on_its_first_arc(tiny, tmp_path):
    """Kaldi's lexiconp.txt (`word prob tokens`, icefall writes one too) was read as tokens:
    '1.0' refused as an unknown token, or, with a token named '1', a spelling '1 a' built
    silently.  Now each spelling costs -ln prob in L: probabilities of 1 build the graph
    of lexicon.txt, and 0.5 on one of a word's two spellings makes its paths ln 2 dearer."""
    import math

    import numpy as np
    from wfst.graphs import compile_graph

    import wfst

    plain = (tiny / "lexicon.txt").read_text()
    lines = plain.splitlines()
    (tmp_path / "ones.txt").write_text("".join(f"{w} 1.0 {rest}\n" for w, rest in (ln.split(" ", 1) for ln in lines)))
    half = [f"{w} {'0.5' if rest == 'c a b c' else '1'} {rest}\n" for w, rest in (ln.split(" ", 1) for ln in lines)]
    (tmp_path / "half.txt").write_text("".join(half))
    lex = read_lexicon(tmp_path / "half.txt", TOK, separator="|")
    assert lex.entries == read_lexicon(tiny / "lexicon.txt", TOK, separator="|").entries
    assert lex.costs == tuple(math.log(2) if p == ("c", "a", "b", "c") else 0.0 for _, p in lex.entries)
    graphs = {}
    for name, lexicon in (("plain", tiny / "lexicon.txt"), ("ones", tmp_path / "ones.txt"),
                          ("half", tmp_path / "half.txt")):
        r = compile_graph(tmp_path / name, tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=lexicon,
                          word_boundary="|", progress=False)
        graphs[name] = wfst.load_graph(r.directory)
    assert np.array_equal(graphs["ones"].weight, graphs["plain"].weight)
    assert (graphs["ones"].directory / "lexicon.txt").read_text() == plain  # (the spellings, for word times)
    x = np.full((1, 8, 5), -12.0, np.float32)  # "c a b c", each token twice: only the 4-token spelling of 'cab'
    for t, column in enumerate([4, 4, 2, 2, 3, 3, 4, 4]):
        x[0, t, column] = -0.01
    results = {name: wfst.Decoder(g, beam=30.0).decode(x)[0] for name, g in graphs.items()}
    assert all(r.words == ("cab",) for r in results.values())
    assert results["ones"].cost == pytest.approx(results["plain"].cost, abs=1e-5)
    assert results["half"].cost - results["plain"].cost == pytest.approx(math.log(2), abs=1e-4)


def test_numbers_that_are_tokens_too_are_read_by_the_file_s_name_and_said(tmp_path):
    """Tokens named by digits: `ten 1 0` was read as a lexiconp.txt line (probability 1,
    spelling `0`) without a word, and `ab 1 2 / ba 2 1` was refused ("probability 2")."""
    digits = TokenTable(("<blk>", "0", "1", "2"), 0)
    text = "ten 1 0\neleven 1 1\ntwelve 1 2\n"
    (tmp_path / "lexicon.txt").write_text(text)
    (tmp_path / "lexiconp.txt").write_text(text)
    with pytest.warns(UserWarning, match=r"lexicon.txt: every line's second field is a number and a token \(line 1: "
                                         r"'1' of 'ten'\); read as `word tokens` lines"):
        lex = read_lexicon(tmp_path / "lexicon.txt", digits)
    assert lex.entries == (("ten", ("1", "0")), ("eleven", ("1", "1")), ("twelve", ("1", "2"))) and not any(lex.costs)
    with pytest.warns(UserWarning, match=r"read as Kaldi's lexiconp.txt \(`word prob tokens`\), by its name"):
        lex = read_lexicon(tmp_path / "lexiconp.txt", digits)
    assert lex.entries == (("ten", ("0",)), ("eleven", ("1",)), ("twelve", ("2",))) and lex.costs == (0.0,) * 3
    (tmp_path / "ids.txt").write_text("ab 1 2\nba 2 1\n")  # (no probabilities: 2 > 1) read as they are, unsaid
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_lexicon(tmp_path / "ids.txt", digits).entries == (("ab", ("1", "2")), ("ba", ("2", "1")))
