"""G from ARPA: checked against kenlm (a scorer nobody here wrote), and bad ARPA files."""
import gzip
import math
import random
import re

import pytest
import pywrapfst as fst
from arpa_files import random_arpa
from wfst.graphs.grammar import arpa_vocabulary, grammar_fst

from wfst import InputFileError, MissingFileError, WordTable, load_graph
from wfst.lm import read_arpa

kenlm = pytest.importorskip("kenlm", reason="kenlm is a test dependency: pip install -e '.[test]'")


def build_G(arpa, tmp_path):
    vocab = arpa_vocabulary(arpa).words
    words = WordTable.from_words(vocab)
    words.write(tmp_path / "words.txt")
    return grammar_fst(arpa, tmp_path / "words.txt"), words


class NgramWalker:
    """Walk G the way an n-gram LM is defined: the explicit n-gram arc when it exists,
    else the backoff (#0) arc and try again; </s> is the final weight, or backoff."""

    def __init__(self, G, words: WordTable):
        self.arcs = {s: {a.ilabel: (float(a.weight), a.nextstate) for a in G.arcs(s)} for s in G.states()}
        zero = fst.Weight.zero(G.weight_type())
        self.final = {s: float(G.final(s)) for s in G.states() if G.final(s) != zero}
        self.start = G.start()
        self.ids = words.ids()
        self.backoff = self.ids["#0"]

    def cost(self, sentence):
        state, total = self.start, 0.0
        for word in sentence:
            w = self.ids.get(word, self.ids["<unk>"])
            while w not in self.arcs[state]:
                c, state = self.arcs[state][self.backoff]
                total += c
            c, state = self.arcs[state][w]
            total += c
        while state not in self.final:
            c, state = self.arcs[state][self.backoff]
            total += c
        return total + self.final[state]


def kenlm_cost(model, sentence):
    return -model.score(" ".join(sentence), bos=True, eos=True) * math.log(10)


def check_against_kenlm(arpa, sentences, tmp_path):
    G, words = build_G(arpa, tmp_path)
    walker = NgramWalker(G, words)
    model = kenlm.Model(str(arpa))
    worst = 0.0
    for s in sentences:
        ours, ref = walker.cost(s), kenlm_cost(model, s)
        worst = max(worst, abs(ours - ref))
        assert ours == pytest.approx(ref, abs=1e-3), s
    return worst


def test_tiny_G_matches_kenlm(tiny, tmp_path):
    vocab = ["a", "ab", "ba", "abc", "cab", "zzz"]  # zzz is out of vocabulary: <unk>
    rng = random.Random(0)
    sentences = [[rng.choice(vocab) for _ in range(rng.randint(0, 6))] for _ in range(200)]
    sentences += [["ab", "ba", "abc"], ["ab", "ba"], []]
    check_against_kenlm(tiny / "lm.arpa", sentences, tmp_path)


def test_demo_G_matches_kenlm(demo, tmp_path):
    """200+ sentences: held-out real text and random word strings (backoff-heavy), incl. OOVs."""
    rng = random.Random(1)
    real = [line.split() for line in (demo / "test.txt").read_text().splitlines() if line.strip()]
    vocab = arpa_vocabulary(demo / "lm.arpa").words
    vocab = [w for w in vocab if w not in ("<s>", "</s>")] + ["qqqzx"]
    sentences = rng.sample(real, min(150, len(real)))
    sentences += [[rng.choice(vocab) for _ in range(rng.randint(1, 12))] for _ in range(150)]
    assert len(sentences) >= 200
    worst = check_against_kenlm(demo / "lm.arpa", sentences, tmp_path)
    print(f"\nG vs kenlm on {len(sentences)} sentences: max |diff| = {worst:.2e} nats")


@pytest.mark.parametrize("order", [2, 3, 4])
def test_G_applies_the_backoff_of_ngrams_nothing_continues(tmp_path, order):
    """Backoff weights of n-grams that no higher n-gram continues (pruned LMs keep them; <s>
    may have one) apply to the next word, in G as in kenlm."""
    symbols = ("a", "b", "c", "d", "e")
    arpa = random_arpa(tmp_path / "lm.arpa", symbols, order, seed=order, density=0.1 if order == 2 else 0.2,
                       orphan_backoffs=0.6)
    rng = random.Random(order)
    check_against_kenlm(arpa, [[rng.choice(symbols) for _ in range(rng.randint(0, 6))] for _ in range(200)], tmp_path)


def test_gzipped_arpa_gives_the_same_G(tiny, tmp_path):
    gz = tmp_path / "lm.arpa.gz"
    gz.write_bytes(gzip.compress((tiny / "lm.arpa").read_bytes()))
    G1, _ = build_G(tiny / "lm.arpa", tmp_path)
    G2, _ = build_G(gz, tmp_path)
    assert fst.equal(G1, G2)


def corrupt(tiny, old, new):
    text = (tiny / "lm.arpa").read_text()
    assert old in text
    p = tiny / "bad.arpa"
    p.write_bytes(text.replace(old, new, 1).encode("utf-8", "surrogateescape"))  # (\udcff: the byte 0xff)
    return p


STRUCTURE_FAULTS = [  # wfst.arpa.ArpaReader's checks, shared by the graph compiler and the LM store
    ("ngram 2=7", "ngram 2=8", r"bad.arpa:3: the header says 8 2-grams, the \\2-grams: section has 7"),
    ("ngram 2=7", "ngram 2 seven", r"bad.arpa:3: bad \\data\\ line"),
    ("ngram 2=7", "ngram 1=13", r"bad.arpa:3: a second count of 1-grams \(the first on line 2\)"),
    ("ngram 2=7", "ngram 300000000=0", r"bad.arpa:\d+: \\2-grams: is not declared in the \\data\\ header"),
    ("\\end\\", "", r"bad.arpa: no \\end\\ line: the file is truncated"),
    ("\\data\\", "hello", r"bad.arpa:1: text before the \\data\\ header"),
    ("\\2-grams:", "\\3-grams:", r"bad.arpa:\d+: found \\3-grams: where \\2-grams: was expected"),
]
LINE_FAULTS = [  # wfst.arpa.parse_ngram's, n-grams twice, <s> and </s>: also the same for both
    ("-0.45\ta cab", "-0.45 a", r"bad.arpa:22: a 2-gram line needs 3 or 4 fields"),
    ("-0.45\ta cab", "x\ta cab", r"bad.arpa:22: not a number"),
    ("-0.45\ta cab", "-0.45\ta c\udcffab",
     r"bad.arpa:22: not UTF-8 text \(invalid start byte at byte 10 of the line\)"),
    # Python's float() reads these (-10, -inf, -0.3), arpa2fst -1 and -0 and kenlm none: refused by both
    ("-0.45\ta cab", "-1_0\ta cab", r"bad.arpa:22: not a number"),
    ("-0.45\ta cab", "-Infinity\ta cab", r"bad.arpa:22: not a number"),
    ("-0.8\ta\t-0.30", "-\u0660.\u0663\ta\t-0.30", r"bad.arpa:10: not a number"),
    ("-0.8\ta\t-0.30", "-0.8\ta\t-0_3", r"bad.arpa:10: not a number"),
    ("-0.8\ta\t-0.30", "-0.8", r"bad.arpa:10: a 1-gram line needs 2 or 3 fields"),
    ("-0.8\ta\t-0.30", "-0.8\ta\tnan", r"bad.arpa:10: NaN or infinite value"),
    ("-0.45\ta cab", "-0.45\tab ba", r"bad.arpa:22: 2-gram 'ab ba' listed twice"),
    # the first fault in the file, whatever finds it: a repeat is one line more than the header says,
    # and comes before a bad line after it (a bad line before it comes first)
    ("-0.45\ta cab", "-0.45\ta cab\n-0.45\ta cab", r"bad.arpa:23: 2-gram 'a cab' listed twice"),
    ("-0.45\ta cab\n-0.35\tba </s>", "-0.45\ta cab\n-0.45\ta cab\n-0.35\tba </s> x y",
     r"bad.arpa:23: 2-gram 'a cab' listed twice"),
    ("-0.45\ta cab\n-0.35\tba </s>", "-0.45\ta cab x y\n-0.35\tba </s>\n-0.35\tba </s>",
     r"bad.arpa:22: a 2-gram line needs 3 or 4 fields"),
    ("-0.05\tab ba abc", "-0.05\tab ba abc\n-0.05\tab ba abc", r"bad.arpa:\d+: 3-gram 'ab ba abc' listed twice"),
    ("-0.45\ta cab", "0.45\ta cab", r"bad.arpa:22: positive log10 probability 0.45 \(a probability above 1\)"),
    ("-0.05\tab ba abc", "-0.05\tab ba abc\t-0.1", r"bad.arpa:\d+: a backoff weight on a 3-gram, the LM's "
                                                    r"highest order"),
    ("-0.45\ta cab", "-1e38\ta cab", r"bad.arpa:22: a log10 value beyond 10000 in size"),  # (det spun on it)
    ("-0.8\ta\t-0.30", "-0.8\ta\t3e4", r"bad.arpa:10: a log10 value beyond 10000 in size"),
    # OpenFST's symbol tables cut a symbol at a NUL: the build failed naming a temporary words.txt
    ("-0.45\ta cab", "-0.45\ta c\x00ab", r"bad.arpa:22: a NUL character \(\\x00\): no symbol may hold one"),
]


@pytest.mark.parametrize("old,new,message", [
    ("-1.6\tcab", "-1.6\t#0", r"bad.arpa:14: '#0' is reserved and cannot be a word of the LM"),
    ("-1.6\tcab", "-1.6\t<eps>", r"bad.arpa:14: '<eps>' is reserved and cannot be a word of the LM"),
    ("-1.6\tcab", "-1.6\t#1", r"bad.arpa:14: '#1' is reserved and cannot be a word of the LM"),
    *STRUCTURE_FAULTS, *LINE_FAULTS,
])
def test_malformed_arpa_names_file_and_line(tiny, tmp_path, old, new, message):
    bad = corrupt(tiny, old, new)
    with pytest.raises(InputFileError, match=message):
        arpa_vocabulary(bad)
        words = WordTable.from_words(["a", "ab", "ba", "abc", "cab", "<unk>"])
        words.write(tmp_path / "words.txt")
        grammar_fst(bad, tmp_path / "words.txt")  # kaldilm finds what the scan does not


@pytest.mark.parametrize("old,new,message", [
    *STRUCTURE_FAULTS, *LINE_FAULTS,
])
def test_malformed_arpa_for_the_lm_store(tiny, old, new, message):
    with pytest.raises(InputFileError, match=message):
        read_arpa(corrupt(tiny, old, new))



def test_line_endings_and_marks(tiny, tmp_path):
    """Windows line endings, a byte-order mark and gzip under any name read as the plain file
    does, by both readers (kaldilm read CRLF lines' last field with its \\r: every trigram
    without a backoff was lost, silently); an LM without </s> is refused by both, one with
    an n-gram whose history is not an n-gram skips it (with a warning) in both."""
    import gzip

    text = (tiny / "lm.arpa").read_text()
    words = WordTable.from_words(arpa_vocabulary(tiny / "lm.arpa").words)
    words.write(tmp_path / "words.txt")
    reference = grammar_fst(tiny / "lm.arpa", tmp_path / "words.txt")
    (tmp_path / "crlf.arpa").write_bytes(("\ufeff" + text).replace("\n", "\r\n").encode())
    (tmp_path / "lm.bin").write_bytes(gzip.compress(text.encode()))
    # section lines after spaces: read by ours, and kaldilm refused them ("\data\ section missing")
    (tmp_path / "indented.arpa").write_text(re.sub(r"(?m)^(?=\\)", " \t", text))
    for variant in ("crlf.arpa", "lm.bin", "indented.arpa"):
        assert arpa_vocabulary(tmp_path / variant) == arpa_vocabulary(tiny / "lm.arpa")
        g = grammar_fst(tmp_path / variant, tmp_path / "words.txt")
        assert (g.num_states(), sum(g.num_arcs(s) for s in g.states())) == \
            (reference.num_states(), sum(reference.num_arcs(s) for s in reference.states())), variant
        assert read_arpa(tmp_path / variant).num_arcs == read_arpa(tiny / "lm.arpa").num_arcs
    (tmp_path / "noeos.arpa").write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-1.0\t<s>\n-0.5\ta\n\n\\end\\\n")
    for reader in (arpa_vocabulary, read_arpa):
        with pytest.raises(InputFileError, match=r"noeos.arpa: no </s> unigram: no sentence can end"):
            reader(tmp_path / "noeos.arpa")
    skipped = [("whose history is not an n-gram of the file", "-0.05\tab ba abc", "-0.05\tabc cab a",
                r"bad.arpa: 1 n-grams skipped whose history is not an n-gram of the file \(the first on line 27\)"),
               ("with a word that is not a unigram of the file", "-0.45\ta cab", "-0.45\ta zz",
                r"bad.arpa: 1 n-grams skipped with a word that is not a unigram of the file \(the first on line 22\)")]
    for why, old, new, by_g in skipped:  # no bigram "abc cab"; no word "zz": both skip the line
        bad = corrupt(tiny, old, new)
        with pytest.warns(UserWarning, match=rf"bad.arpa: 1 n-grams skipped {why} \(the first on line \d+\)"):
            store = read_arpa(bad)
        assert store.num_arcs == read_arpa(tiny / "lm.arpa").num_arcs - 1
        with pytest.warns(UserWarning, match=by_g):
            grammar_fst(bad, tmp_path / "words.txt")


def test_an_ngram_of_a_word_no_unigram_has_is_left_out_whatever_the_lexicon_spells(tiny, tmp_path):
    """'a zz' without a unigram 'zz': arpa2fst skipped it only where words.txt had no 'zz', so
    a lexicon that spelled 'zz' put it in the graph (after 'a' only), while the build said
    'zz' was unreachable and the rescoring LM's reader left the n-gram out."""
    from wfst.graphs import compile_graph

    bad = corrupt(tiny, "-0.45\ta cab", "-0.45\ta zz")
    (tmp_path / "lexicon.txt").write_text((tiny / "lexicon.txt").read_text() + "zz c c\n")
    with pytest.warns(UserWarning, match=r"1 n-grams skipped with a word that is not a unigram"):
        r = compile_graph(tmp_path / "g", tokens=tiny / "tokens.txt", lm=bad, lexicon=tmp_path / "lexicon.txt",
                          word_boundary="|", progress=False)
    g = load_graph(r.directory)
    assert "zz" in g.words.symbols and g.words.symbols.index("zz") not in set(g.olabel.tolist())
    assert r.info["vocabulary"]["lexicon_words_not_in_lm"] == 1


@pytest.mark.parametrize("first", ["kept", "orphan"])
def test_an_orphan_ngram_is_left_out_whatever_the_line_order(tiny, tmp_path, first):
    """'cab ba abc' has no bigram 'cab ba' for history. arpa2fst skipped it only while no
    earlier n-gram had made that state: after 'a cab ba' (whose state after is 'cab ba') it
    kept it, silently, where the rescoring LM's reader leaves it out."""
    kept, orphan = "-0.2\ta cab ba\n", "-0.3\tcab ba abc\n"
    lines = kept + orphan if first == "kept" else orphan + kept
    text = (tiny / "lm.arpa").read_text().replace("ngram 3=2", "ngram 3=4")
    (tmp_path / "o.arpa").write_text(text.replace("\\3-grams:\n", "\\3-grams:\n" + lines))
    (tmp_path / "ref.arpa").write_text(text.replace("ngram 3=4", "ngram 3=3")
                                       .replace("\\3-grams:\n", "\\3-grams:\n" + kept))
    words = WordTable.from_words(arpa_vocabulary(tiny / "lm.arpa").words)
    words.write(tmp_path / "words.txt")
    with pytest.warns(UserWarning, match=r"o.arpa: 1 n-grams skipped whose history is not an n-gram"):
        orphans = arpa_vocabulary(tmp_path / "o.arpa").orphans
    assert orphans == [(tmp_path / "o.arpa").read_text().splitlines().index(orphan.strip("\n")) + 1]
    g = grammar_fst(tmp_path / "o.arpa", tmp_path / "words.txt", orphans=orphans)
    assert fst.isomorphic(g, grammar_fst(tmp_path / "ref.arpa", tmp_path / "words.txt"))
    with pytest.warns(UserWarning, match=r"o.arpa: 1 n-grams skipped"):
        store = read_arpa(tmp_path / "o.arpa")
    assert store.num_arcs == read_arpa(tmp_path / "ref.arpa").num_arcs


def test_arpa2fst_failure_without_a_line_is_one_line(tiny, tmp_path, monkeypatch):
    import subprocess

    words = WordTable.from_words(arpa_vocabulary(tiny / "lm.arpa").words)
    words.write(tmp_path / "words.txt")
    crash = subprocess.CompletedProcess([], -6, stdout="", stderr="terminate called\n  what(): bad_alloc\n")
    monkeypatch.setattr(subprocess, "run", lambda *a, **kw: crash)
    with pytest.raises(InputFileError, match=r"lm.arpa: arpa2fst failed \(exit -6\): terminate called \| what\(\): "
                                             r"bad_alloc$") as e:
        grammar_fst(tiny / "lm.arpa", tmp_path / "words.txt")
    assert "\n" not in str(e.value)


def test_not_an_arpa_file(tmp_path):
    with pytest.raises(MissingFileError, match="ARPA language model"):
        arpa_vocabulary(tmp_path / "nothing.arpa")
    p = tmp_path / "x.arpa"
    p.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(InputFileError, match="x.arpa"):
        arpa_vocabulary(p)
    p.write_text("")
    with pytest.raises(InputFileError, match=r"x.arpa: no \\data\\ header"):
        arpa_vocabulary(p)


def test_ngram_words_outside_the_unigrams_are_reported(tiny, tmp_path):
    bad = corrupt(tiny, "-0.45\ta cab", "-0.45\ta qq")
    words = WordTable.from_words(arpa_vocabulary(bad).words)
    words.write(tmp_path / "words.txt")
    with pytest.warns(UserWarning, match=r"bad.arpa: 1 n-grams skipped with a word that is not a unigram of the "
                                         r"file \(the first on line 22\), as Kaldi's arpa2fst skips them"):
        grammar_fst(bad, tmp_path / "words.txt")


def test_a_build_stage_counts_only_its_own_child_process(tmp_path):
    """arpa2fst runs in a child; its peak memory goes to the stage that ran it (the kernel's
    RUSAGE_CHILDREN keeps the largest child ever: every later stage, and the next graph's,
    reported the first G's peak)."""
    from wfst.graphs.compile import Stages

    from wfst.memory import note_child_peak, take_child_peak

    arpa = random_arpa(tmp_path / "lm.arpa", ["a", "b", "c"], 2, seed=3)
    build_G(arpa, tmp_path)  # (writes words.txt)
    take_child_peak()
    stages = Stages(["G", "after", "huge G", "after it"], progress=False, label="t")
    stages.run("G", grammar_fst, arpa, tmp_path / "words.txt")
    stages.run("after", lambda: None)
    stages.run("huge G", note_child_peak, 1e7)  # (as a child of 10 TiB would be reported)
    stages.run("after it", lambda: None)
    peak = {name: r["peak_rss_mb"] for name, r in stages.records.items()}
    assert peak["G"] > 0 and peak["huge G"] == 1e7 and peak["after it"] < 1e6
