"""TLG compilation: right sequences accepted per topology, staleness, atomicity, bad inputs."""
import json
import subprocess
import sys

import numpy as np
import pytest
import pywrapfst as fst
from wfst.graphs import TOPOLOGIES, GraphBuildError, compile_graph
from wfst.graphs.paths import best_path, ctc_alignment

import wfst
from wfst import InputFileError, MissingFileError, load_graph


def spell(graph_dir, words):
    """Token columns of a word sequence, from the graph's own lexicon choices (chars + '|')."""
    g = load_graph(graph_dir)
    col = {s: c for c, s in enumerate(g.tokens.symbols)}
    cols = []
    for i, w in enumerate(words):
        if i:
            cols.append(col["|"])
        cols += [col[ch] for ch in w]
    return cols


# ---------------------------------------------------------------- tiny, every topology

@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_tiny_tlg_accepts_exactly_the_right_sequences(tiny, topology):
    out = tiny / topology
    compile_graph(out, tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", word_boundary="|",
                  topology=topology, progress=False)
    tlg = wfst.graph.read_fst(out / "TLG.fst")
    g = load_graph(out)
    ids = g.words.ids()
    blank = g.tokens.blank
    for sentence in (["ab", "ba", "abc"], ["cab"], ["a", "cab"], ["ba"]):
        frames = ctc_alignment(spell(out, sentence), blank, topology)
        words, _ = best_path(tlg, frames)
        assert words == [ids[w] for w in sentence], (topology, sentence)
    # Not words: 'bb', 'abab' without a separator, 'c' alone.
    for cols in (spell(out, ["bb"]), spell(out, ["abab"]), spell(out, ["c"])):
        assert best_path(tlg, ctc_alignment(cols, blank, topology))[0] is None


def test_normal_topology_needs_a_blank_between_repeats(tiny):
    out = tiny / "normal"
    compile_graph(out, tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", word_boundary="|",
                  topology="normal", progress=False)
    # 'aa' is not a word; but frames 'a a' (no blank) collapse to the word 'a'.
    tlg = wfst.graph.read_fst(out / "TLG.fst")
    ids = load_graph(out).words.ids()
    a = spell(out, ["a"])[0]
    assert best_path(tlg, [0, a, a, 0])[0] == [ids["a"]]
    # 'a | a' (two words) needs the separator; 'a blank a' without it is no word sequence.
    assert best_path(tlg, [0, a, 0, a, 0])[0] is None


def test_graph_directory_contents(tiny):
    out = tiny / "g"
    r = compile_graph(out, tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact", progress=False)
    assert r.rebuilt
    assert sorted(p.name for p in out.iterdir()) == ["TLG.csr.npz", "TLG.fst", "graph.json",
                                                     "tokens.txt", "words.txt"]
    info = json.loads((out / "graph.json").read_text())
    assert info["topology"] == "compact" and info["blank_column"] == 0 and info["num_columns"] == 5
    assert info["inputs"]["lm"]["sha256"] and info["inputs"]["lexicon"]["sha256"]
    assert set(info["stages"]) >= {"G (arpa2fst)", "det(L ∘ G)", "min(det(L ∘ G))", "T ∘ LG"}
    assert all("seconds" in s for s in info["stages"].values())
    assert info["versions"]["pynini"] and info["versions"]["kaldilm"]
    assert info["files"]["TLG.fst"] == (out / "TLG.fst").stat().st_size
    # 'cab' has two spellings; 'cab' and 'abc' ... the lexicon has homophone/prefix cases.
    assert info["num_disambig"] >= 2
    tokens = (out / "tokens.txt").read_text().split("\n")
    assert tokens[:2] == ["<eps> 0", "<blk> 1"] and tokens[6] == "#0 6"
    tlg = wfst.graph.read_fst(out / "TLG.fst")
    # No leftover disambiguation symbols, arc-sorted, connected.
    assert max(a.ilabel for s in tlg.states() for a in tlg.arcs(s)) <= 5
    assert tlg.properties(fst.I_LABEL_SORTED, True) == fst.I_LABEL_SORTED
    assert tlg.properties(fst.ACCESSIBLE | fst.COACCESSIBLE, True) == fst.ACCESSIBLE | fst.COACCESSIBLE


def test_rebuilds_only_what_is_stale(tiny, capsys):
    kw = dict(tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", word_boundary="|", progress=False)
    first = compile_graph(tiny / "c", topology="compact", **kw)
    mtime = (tiny / "c" / "TLG.fst").stat().st_mtime_ns
    again = compile_graph(tiny / "c", topology="compact", **kw)
    assert not again.rebuilt and (tiny / "c" / "TLG.fst").stat().st_mtime_ns == mtime
    assert again.info["fingerprint"] == first.info["fingerprint"]
    # Another topology reuses min(det(L ∘ G)) from the shared cache.
    other = compile_graph(tiny / "n", topology="normal", **kw)
    assert other.info["stages"]["det(L ∘ G)"].get("skipped", "").startswith("cached")
    # A changed input makes the graph stale.
    with open(tiny / "lm.arpa", "a") as f:
        f.write("\n")
    assert compile_graph(tiny / "c", topology="compact", **kw).rebuilt
    assert compile_graph(tiny / "c", topology="compact", force=True, **kw).rebuilt
    # A damaged graph directory is rebuilt, not trusted.
    (tiny / "c" / "TLG.fst").write_bytes(b"x")
    assert compile_graph(tiny / "c", topology="compact", **kw).rebuilt


def test_failed_build_keeps_the_old_graph(tiny):
    kw = dict(tokens=tiny / "tokens.txt", word_boundary="|", progress=False)
    compile_graph(tiny / "c", lm=tiny / "lm.arpa", **kw)
    before = (tiny / "c" / "TLG.fst").read_bytes()
    bad = tiny / "bad.arpa"
    bad.write_text((tiny / "lm.arpa").read_text().replace("-0.45\ta cab", "-0.45 a"))
    with pytest.raises(InputFileError, match="bad.arpa:22"):
        compile_graph(tiny / "c", lm=bad, **kw)
    assert (tiny / "c" / "TLG.fst").read_bytes() == before
    assert not [p for p in (tiny / "c").iterdir() if p.name.endswith(".tmp")]


def test_epsilon_free_option(tiny):
    kw = dict(tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", word_boundary="|", progress=False)
    compile_graph(tiny / "eps", topology="compact", **kw)
    compile_graph(tiny / "noeps", topology="compact", epsilon_free=True, **kw)
    g, with_eps = load_graph(tiny / "noeps"), load_graph(tiny / "eps")
    # Every arc left with an epsilon input carries a word ('a' is a prefix of 'ab', so it is
    # certain only after its last token); all eps:eps arcs are gone.
    rest = g.olabel[g.num_emitting_arcs:]
    assert rest.size and (rest > 0).all()
    assert g.info["sizes"]["TLG"]["epsilon_arcs_with_words"] == rest.size
    assert (with_eps.olabel[with_eps.num_emitting_arcs:] == 0).any()
    t1, t2 = (wfst.graph.read_fst(tiny / d / "TLG.fst") for d in ("eps", "noeps"))
    for sentence in (["ab", "ba", "abc"], ["cab"], ["a", "cab"]):
        frames = ctc_alignment(spell(tiny / "eps", sentence), 0, "compact")
        w1, c1 = best_path(t1, frames)
        w2, c2 = best_path(t2, frames)
        assert w1 == w2 and c1 == pytest.approx(c2, abs=1e-4)


@pytest.mark.parametrize("change,error,message", [
    (dict(topology="fancy"), ValueError, "unknown topology 'fancy'"),
    (dict(lm="missing.arpa"), MissingFileError, "cannot read ARPA language model .*missing.arpa: not found"),
    (dict(tokens="."), MissingFileError, "cannot read token table .*: not a file"),
    (dict(word_boundary="#"), ValueError, "word-boundary unit '#' is not in"),
    (dict(lexicon="lexicon.txt", words="lexicon.txt"), ValueError, "either a lexicon file or a word list"),
    (dict(blank="<nope>"), InputFileError, "blank symbol '<nope>' is not in the table"),
])
def test_bad_arguments(tiny, change, error, message):
    kw = dict(tokens="tokens.txt", lm="lm.arpa", word_boundary="|", progress=False)
    kw.update(change)
    kw = {k: (tiny / v if k in ("tokens", "lm", "lexicon", "words") else v) for k, v in kw.items()}
    with pytest.raises(error, match=message):
        compile_graph(tiny / "out", **kw)


def test_empty_graph_is_refused(tiny):
    (tiny / "other.txt").write_text("bab b a b\n")  # no word of this lexicon is in the LM
    with pytest.raises(GraphBuildError, match="L ∘ G has no word arcs: no word of the lexicon is in the language"):
        compile_graph(tiny / "out", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa",
                      lexicon=tiny / "other.txt", progress=False)
    assert not (tiny / "out" / "TLG.fst").exists()


def test_no_blank_is_refused(tiny):
    (tiny / "noblank.txt").write_text("| 0\na 1\nb 2\nc 3\n")
    with pytest.raises(GraphBuildError, match="no blank token"):
        compile_graph(tiny / "out", tokens=tiny / "noblank.txt", lm=tiny / "lm.arpa", progress=False)


def test_vocabulary_mismatch_is_counted_and_reported(tiny, capsys):
    (tiny / "lex2.txt").write_text("ab a b\nba b a\nbb b b\n")
    r = compile_graph(tiny / "out", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lex2.txt",
                      word_boundary="|")
    v = r.info["vocabulary"]
    assert v["lexicon_words_not_in_lm"] == 1 and v["lexicon_words_not_in_lm_examples"] == ["bb"]
    assert v["lm_words_not_in_lexicon"] == 4  # a, abc, cab, <unk>
    err = capsys.readouterr().err
    assert "1 lexicon words are not in the LM" in err and "4 LM words have no spelling" in err


def test_cli(tiny):
    base = [sys.executable, "-m", "wfst.graphs.cli", "--tokens", str(tiny / "tokens.txt"),
            "--lm", str(tiny / "lm.arpa"), "--word-boundary", "|", "--quiet"]
    ok = subprocess.run(base + ["--out", str(tiny / "cli"), "--topo", "normal"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr == ""
    assert "normal TLG" in ok.stdout and load_graph(tiny / "cli").info["topology"] == "normal"
    bad = subprocess.run(base + ["--out", str(tiny / "cli2"), "--lexicon", str(tiny / "nope.txt")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "error: cannot read lexicon" in bad.stderr and "nope.txt: not found" in bad.stderr
    bad = subprocess.run(base + ["--out", str(tiny / "cli2"), "--topo", "fancy"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'fancy'" in bad.stderr


def test_csr_of_a_compiled_graph_matches_its_fst(tiny):
    compile_graph(tiny / "c", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", word_boundary="|",
                  progress=False)
    g = load_graph(tiny / "c")
    f = wfst.graph.read_fst(tiny / "c" / "TLG.fst")
    assert g.num_states == f.num_states() and g.num_arcs == sum(f.num_arcs(s) for s in f.states())
    assert np.all(g.ilabel[: g.num_emitting_arcs] > 0) and np.all(g.ilabel[g.num_emitting_arcs:] == 0)
