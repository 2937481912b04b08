"""TLG compilation: right sequences accepted per topology, staleness, atomicity, bad inputs."""
import json
import re
import subprocess
import sys

import numpy as np
import pytest
import pywrapfst as fst
from fst_paths import best_path, ctc_alignment
from wfst.graphs import TOPOLOGIES, GraphBuildError, compile_graph

import wfst
from wfst import InputFileError, MissingFileError, load_graph
from wfst.errors import OptionError, OutputFileError


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
    assert sorted(p.name for p in out.iterdir()) == ["T.fst", "TLG.csr.npz", "TLG.fst", "graph.json",
                                                     "lexicon.txt", "tokens.txt", "words.txt"]
    # the spellings, for word times: the input lexicon's, without disambiguation symbols
    assert (out / "lexicon.txt").read_text() == (tiny / "lexicon.txt").read_text()
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


def test_the_lg_cache_keeps_the_entries_used_last_within_its_size(tiny, monkeypatch):
    """Each LM of a sweep left its LG in the cache for good: the disk filled."""
    from wfst.graphs import compile as C

    kw = dict(tokens=tiny / "tokens.txt", word_boundary="|", topology="compact", progress=False)
    cache = tiny / ".wfst-cache"
    lms = []
    for i in range(4):  # four LMs, four LGs of about the same size
        lms.append(tiny / f"lm{i}.arpa")
        lms[-1].write_text((tiny / "lm.arpa").read_text().replace("-0.9\t</s>", f"-0.9{i}\t</s>"))

    def build(i, name):
        res = compile_graph(tiny / name, lm=lms[i], force=False, **kw)
        return "cached" in res.info["stages"]["det(L ∘ G)"].get("skipped", "")

    assert not build(0, "a0")
    size = next(cache.glob("LG-*.fst")).stat().st_size
    monkeypatch.setattr(C, "LG_CACHE_BYTES", int(2.5 * size))  # room for two
    assert not build(1, "a1")
    assert len(list(cache.glob("LG-*.fst"))) == 2
    assert build(0, "b0")  # LM 0's entry used again: LM 1's is now the one used longest ago
    assert not build(2, "a2")
    assert len(list(cache.glob("LG-*.fst"))) == len(list(cache.glob("LG-*.json"))) == 2
    assert build(0, "c0") and build(2, "c2") and not build(1, "c1")  # (1 evicted, then stored: 0 goes)
    monkeypatch.setattr(C, "LG_CACHE_BYTES", size // 2)  # an entry larger than the whole cache: kept alone
    assert not build(3, "a3")
    assert len(list(cache.glob("LG-*.fst"))) == 1 and build(3, "b3")


def test_a_damaged_lg_cache_entry_is_rebuilt_and_force_rebuilds_it(tiny):
    """An LG cache entry whose FST still parses but whose bytes changed served a wrong graph
    (and --force read it too); one whose .json is not an object raised a TypeError."""
    kw = dict(tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", word_boundary="|", progress=False)
    good = compile_graph(tiny / "c", topology="compact", **kw).info["sizes"]
    lg = next((tiny / ".wfst-cache").glob("LG-*.fst"))
    clean = lg.read_bytes()
    f = fst.Fst.read(str(lg))
    f.set_final(next(s for s in f.states() if f.final(s) != fst.Weight.zero(f.weight_type())), 3.0)
    f.write(str(lg))  # (a cost changed: the file parses, its digest does not match)
    for force in (False, True):
        res = compile_graph(tiny / f"n{force}", topology="normal", force=force, **kw)
        assert "skipped" not in res.info["stages"]["det(L ∘ G)"]
        assert res.info["sizes"]["LG"] == good["LG"]
        assert lg.read_bytes() == clean  # (stored again)
    meta = next((tiny / ".wfst-cache").glob("LG-*.json"))
    for text in ("[]", "null", '{"sizes": [], "sha256": 1}'):
        meta.write_text(text)
        res = compile_graph(tiny / "m", topology="minimal", force=True, **kw)
        assert "skipped" not in res.info["stages"]["det(L ∘ G)"]
    assert compile_graph(tiny / "m2", topology="minimal", **kw).info["stages"]["det(L ∘ G)"]["skipped"].startswith(
        "cached")


def test_no_word_boundary_and_a_boundary_token_named_none_have_two_cache_keys(tmp_path):
    """The lexicon's digest wrote both as 'separator=None': the second build was served the
    first's LG (no separator between words), silently."""
    (tmp_path / "tokens.txt").write_text("<blk> 0\nNone 1\na 2\nb 3\n")
    (tmp_path / "lm.arpa").write_text("\\data\\\nngram 1=4\n\n\\1-grams:\n-1.0\t<s>\n-0.5\t</s>\n-0.3\tab\n"
                                      "-0.4\tba\n\n\\end\\\n")
    kw = dict(tokens=tmp_path / "tokens.txt", lm=tmp_path / "lm.arpa", progress=False)
    plain = compile_graph(tmp_path / "plain", **kw)
    sep = compile_graph(tmp_path / "sep", word_boundary="None", **kw)
    assert "skipped" not in sep.info["stages"]["det(L ∘ G)"]
    assert sep.info["sizes"]["LG"] != plain.info["sizes"]["LG"]


def test_a_temporary_file_of_a_killed_load_does_not_block_a_rebuild(tiny):
    """A load killed while writing TLG.csr.npz left .TLG.csr.npz.<random>.tmp: every later
    build into that directory was refused as holding files it does not write."""
    kw = dict(tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", word_boundary="|", progress=False)
    compile_graph(tiny / "g", **kw)
    (tiny / "g" / ".TLG.csr.npz.k2j4x_8q.tmp").write_bytes(b"half")
    assert compile_graph(tiny / "g", force=True, **kw).rebuilt
    assert not (tiny / "g" / ".TLG.csr.npz.k2j4x_8q.tmp").exists()
    (tiny / "g" / ".notes.tmp").write_bytes(b"mine")
    with pytest.raises(OutputFileError, match=r"holds files a graph build does not write \(.notes.tmp\)"):
        compile_graph(tiny / "g", force=True, **kw)


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


def test_a_folder_that_is_not_a_graph_directory_is_refused_untouched(tiny):
    """An icefall-style data/lang folder (tokens.txt and words.txt of the user's own) or a
    Kaldi/riva graph without graph.json: a build would replace them, so it is refused
    before any work, and nothing in them changes."""
    kw = dict(tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", word_boundary="|", progress=False)
    lang = tiny / "lang"
    lang.mkdir()
    (lang / "tokens.txt").write_text("<blk> 0\n| 1\na 2\nb 3\nc 4\n")
    (lang / "words.txt").write_text("ab\nba\n")
    for out, what in ((lang, r"holds tokens.txt, words.txt but no graph.json: not a graph a build wrote"),
                      (tiny, r"holds files a graph build does not write \(lang, lm.arpa\)"),
                      (tiny / "lang2", r"holds T.fst, TLG.csr.npz, TLG.fst, lexicon.txt, tokens.txt ... but no")):
        if out.name == "lang2":
            compile_graph(out, **kw)
            (out / "graph.json").unlink()
        before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
        with pytest.raises(OutputFileError, match=what):
            compile_graph(out, **{**kw, "tokens": lang / "tokens.txt"} if out == lang else kw)
        assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    with pytest.raises(OptionError, match="the cache directory .*inside the graph directory"):
        compile_graph(tiny / "g", cache_dir=tiny / "g" / "cache", **kw)


def test_a_build_that_fails_while_writing_leaves_the_old_graph_whole(tiny, monkeypatch):
    """The files go to a hidden directory that takes the graph directory's place at the end:
    a build that fails half-way through writing (here: the CSR arrays) leaves every old
    file as it was and no litter; one killed before (its process gone) is cleaned up by the
    next build of the same directory."""
    kw = dict(tokens=tiny / "tokens.txt", word_boundary="|", progress=False)
    compile_graph(tiny / "g", lm=tiny / "lm.arpa", **kw)
    before = {p.name: p.read_bytes() for p in (tiny / "g").iterdir()}
    other = tiny / "other.arpa"
    other.write_text((tiny / "lm.arpa").read_text().replace("-0.45\ta cab", "-0.25\ta cab"))

    def fail(*args):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr("wfst.graph.write_csr_cache", fail)
        with pytest.raises(OutputFileError, match="No space left on device"):
            compile_graph(tiny / "g", lm=other, **kw)
    assert {p.name: p.read_bytes() for p in (tiny / "g").iterdir()} == before
    assert sorted(p.name for p in tiny.iterdir() if p.name.startswith(".g.")) == []
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tiny / f".g.building-{int(dead.stdout)}-0badf00d").mkdir()
    r = compile_graph(tiny / "g", lm=other, **kw)
    assert r.rebuilt and (tiny / "g" / "TLG.fst").read_bytes() != before["TLG.fst"]
    assert sorted(p.name for p in tiny.iterdir() if p.name.startswith(".g.")) == []
    assert load_graph(tiny / "g").info["inputs"]["lm"]["path"].endswith("other.arpa")


def test_a_graph_missing_a_file_is_not_up_to_date(tiny):
    kw = dict(tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", word_boundary="|", progress=False)
    compile_graph(tiny / "g", **kw)
    (tiny / "g" / "words.txt").unlink()
    assert compile_graph(tiny / "g", **kw).rebuilt
    assert load_graph(tiny / "g").words is not None


def test_a_graph_built_with_a_named_blank_loads_with_it(tiny):
    """blank=SYM names the blank when it is not <blk>/<blank>/<b>; load_graph takes it from
    graph.json (tokens.txt alone would not tell it), and decodes with it."""
    (tiny / "pad_tokens.txt").write_text("<pad> 0\n| 1\na 2\nb 3\nc 4\n")
    compile_graph(tiny / "g", tokens=tiny / "pad_tokens.txt", lm=tiny / "lm.arpa", word_boundary="|",
                  blank="<pad>", progress=False)
    g = load_graph(tiny / "g")
    assert g.tokens.blank == 0 and g.tokens.symbols[0] == "<pad>"
    cols = spell(tiny / "g", ["ab", "ba"])
    x = np.full((1, 2 * len(cols), 5), np.log(1e-4), np.float32)
    for i, c in enumerate(cols):
        x[0, 2 * i, c] = x[0, 2 * i + 1, 0] = 0.0
    assert wfst.Decoder(g).decode(x)[0].words == ("ab", "ba")


@pytest.mark.parametrize("change,error,message", [
    (dict(topology="fancy"), OptionError, "unknown topology 'fancy'"),
    (dict(lm="missing.arpa"), MissingFileError, "cannot read ARPA language model .*missing.arpa: not found"),
    (dict(tokens="."), MissingFileError, "cannot read token table .*: not a file"),
    (dict(word_boundary="#"), OptionError, "word-boundary unit '#' is not in .*tokens.txt"),
    (dict(word_boundary="<blk>"), OptionError, "word-boundary unit '<blk>' is the blank of .*tokens.txt"),
    (dict(lexicon="lexicon.txt", words="lexicon.txt"), OptionError,
     "either a lexicon file or a word list .*not both: lexicon=.*lexicon.txt, words=.*lexicon.txt"),
    (dict(spm="tokens.txt"), OptionError, r"word_boundary='\|' is for per-character spelling.*not both"),
    (dict(blank="<nope>"), InputFileError, "blank symbol '<nope>' is not in the table"),
    (dict(out="tokens.txt"), OutputFileError, "cannot write graph directory .*tokens.txt: it exists and is not a dir"),
    (dict(epsilon_free="no"), OptionError, "epsilon_free='no': must be True or False"),
    (dict(out="tokens.txt/g"), OutputFileError, "cannot write graph directory .*tokens.txt/g: .*tokens.txt is not a"),
])
def test_bad_arguments(tiny, change, error, message):
    kw = dict(tokens="tokens.txt", lm="lm.arpa", word_boundary="|", progress=False, out="out")
    kw.update(change)
    kw = {k: (tiny / v if k in ("tokens", "lm", "lexicon", "words", "spm", "out") else v) for k, v in kw.items()}
    with pytest.raises(error, match=message):
        compile_graph(kw.pop("out"), **kw)


def test_empty_paths_are_refused(tiny):
    for name in ("cache_dir", "lexicon", "out_dir"):
        kw = {"out_dir": tiny / "g", "tokens": tiny / "tokens.txt", "lm": tiny / "lm.arpa", "progress": False, name: ""}
        with pytest.raises(OptionError, match=f"{name}='': an empty path"):
            compile_graph(kw.pop("out_dir"), **kw)


def test_inputs_that_do_not_fit(tiny, monkeypatch):
    (tiny / "zero.arpa").write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-99\t<s>\n-1.0\t</s>\n\n\\end\\\n")
    with pytest.raises(InputFileError, match=r"zero.arpa: the LM has no words to spell"):
        compile_graph(tiny / "out", tokens=tiny / "tokens.txt", lm=tiny / "zero.arpa", progress=False)
    (tiny / "other_tokens.txt").write_text("<blk>\nx\ny\n")
    with pytest.raises(OptionError, match=r"other_tokens.txt: no word could be spelled with the token table "
                                          r"\(characters\), e.g. 'a', 'ab'"):
        compile_graph(tiny / "out", tokens=tiny / "other_tokens.txt", lm=tiny / "lm.arpa", progress=False)

    def unreadable(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("wfst.graphs.compile.sha256_file", unreadable)
    with pytest.raises(MissingFileError, match=r"cannot read token table .*tokens.txt: Permission denied"):
        compile_graph(tiny / "out", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", progress=False)


def test_unwritable_out_fails_before_the_build(tiny, monkeypatch):
    monkeypatch.setattr("os.access", lambda path, mode: False)  # as a read-only directory (tests may run as root)
    with pytest.raises(OutputFileError, match=r"cannot write graph directory .*new/g: no permission to write in .*"):
        compile_graph(tiny / "new" / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", progress=False)
    assert not (tiny / "new").exists()


def test_empty_graph_is_refused(tiny):
    (tiny / "other.txt").write_text("bab b a b\n")  # no word of this lexicon is in the LM
    with pytest.raises(GraphBuildError, match=r"L ∘ G has no word arcs: no word the lexicon spells \(e.g. bab\) is in "
                                              r"the language model .*lm.arpa"):
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
    assert v["lm_words_not_in_lexicon"] == 3  # a, abc, cab (<unk> is the LM's class of unknown words: no spelling)
    err = capsys.readouterr().err
    assert "1 lexicon words are not in the LM" in err and "3 LM words have no spelling" in err
    r = compile_graph(tiny / "out2", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lex2.txt",
                      word_boundary="|", progress=False)  # the notes are warnings, not progress
    assert "1 lexicon words are not in the LM" in capsys.readouterr().err
    (tiny / "words.txt").write_text("ab\nba\n<unk>\nabc\n")  # a word list with the LM's <unk>: never spelled
    v = compile_graph(tiny / "out3", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", words=tiny / "words.txt",
                      word_boundary="|", progress=False).info["vocabulary"]
    assert v["unspellable_words"] == 0 and v["lexicon_words"] == 3


def make_graph(*args, cwd):
    return subprocess.run([sys.executable, "-m", "wfst.graphs.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_an_icefall_phone_table_builds_the_graph_of_its_blk_twin(tiny, tmp_path):
    """--blank '<eps>' on icefall's phone table ('<eps> 0' its CTC blank) builds the graph of
    the same table with the blank named <blk>, and the decoder finds the blank there."""
    (tmp_path / "icefall.txt").write_text("<eps> 0\n| 1\na 2\nb 3\nc 4\n#0 5\n#1 6\n")
    base = dict(lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt", word_boundary="|", progress=False)
    with pytest.raises(GraphBuildError, match=r"no blank token.*an icefall phone table, whose '<eps> 0' is the "
                                              r"blank: --blank '<eps>'"):
        compile_graph(tmp_path / "unnamed", tokens=tmp_path / "icefall.txt", **base)
    ours = load_graph(compile_graph(tmp_path / "g", tokens=tmp_path / "icefall.txt", blank="<eps>", **base).directory)
    twin = load_graph(compile_graph(tmp_path / "twin", tokens=tiny / "tokens.txt", **base).directory)
    assert ours.tokens.symbols == twin.tokens.symbols and ours.tokens.blank == twin.tokens.blank == 0
    for field in ("ilabel", "olabel", "weight", "nextstate", "e_indptr", "ne_indptr"):
        assert np.array_equal(getattr(ours, field), getattr(twin, field)), field


def test_cli(tiny):
    base = ["--tokens", "tokens.txt", "--lm", "lm.arpa", "--word-boundary", "|", "--quiet"]
    ok = make_graph(*base, "--out", "cli", "--topo", "normal", cwd=tiny)
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr == ""
    assert "normal TLG" in ok.stdout and load_graph(tiny / "cli").info["topology"] == "normal"
    again = make_graph(*base[:-1], "--out", "cli", "--topo", "normal", cwd=tiny)  # not quiet: it printed nothing
    assert again.returncode == 0 and "(up to date)" in again.stdout
    rebuilt = make_graph(*base[:-1], "--out", "cli", "--topo", "normal", "--force", cwd=tiny)
    assert rebuilt.returncode == 0 and "built in" in rebuilt.stdout and "built in" not in rebuilt.stderr


def test_out_through_a_symlink_or_around_the_current_directory(tiny):
    """--out LINK built beside the link and replaced it, leaving the target stale; --out .
    replaced the directory the shell stood in."""
    base = ["--tokens", "tokens.txt", "--lm", "lm.arpa", "--word-boundary", "|", "--quiet"]
    (tiny / "disk").mkdir()
    assert make_graph(*base, "--out", "disk/g", cwd=tiny).returncode == 0
    (tiny / "link").symlink_to(tiny / "disk" / "g", target_is_directory=True)
    r = make_graph(*base, "--out", "link", "--topo", "minimal", cwd=tiny)
    assert r.returncode == 0, r.stderr
    assert (tiny / "link").is_symlink() and load_graph(tiny / "disk" / "g").info["topology"] == "minimal"
    assert sorted(p.name for p in tiny.iterdir() if p.name.startswith(".link")) == []
    (tiny / "here").mkdir()
    r = make_graph("--tokens", "../tokens.txt", "--lm", "../lm.arpa", "--word-boundary", "|", "--out", ".",
                   cwd=tiny / "here")
    assert r.returncode == 2 and "the current directory" in r.stderr and (tiny / "here").is_dir()


@pytest.mark.parametrize("args,message", [
    (["--topo", "fancy"], r"argument --topo: invalid choice: 'fancy' .*\(see wfst-make-graph --help\)"),
    (["--bogus"], r"unrecognized arguments: --bogus"),
    (["--lm", "missing.arpa"], r"cannot read ARPA language model missing.arpa: not found"),
    (["--lm", "bad.arpa", "--quiet"], r"bad.arpa:22: a 2-gram line needs 3 or 4 fields: '-0.45 a'"),
    (["--lm", "junk.arpa"], r"junk.arpa:1: text before the \\data\\ header: 'junk'"),
    (["--blank", "<nope>"], r"tokens.txt: blank symbol '<nope>' is not in the table"),
    (["--blank", "|"], r"word-boundary unit '\|' is the blank of tokens.txt"),
    (["--word-boundary", "#"], r"word-boundary unit '#' is not in tokens.txt"),
    (["--out", "tokens.txt/g"], r"cannot write graph directory tokens.txt/g: tokens.txt is not a directory"),
    (["--out", "loop"], r"cannot write graph directory loop: "),  # (a symlink loop: a traceback before)
    (["--cache-dir", "loop"], r"cannot write cache directory loop: "),
    (["--lexicon", "empty.txt"], r"empty.txt: the lexicon is empty"),
    (["--lexicon", "lexicon.txt", "--words", "lexicon.txt"], r"argument --words: not allowed with argument --lexicon"),
    (["--lexicon", "lexicon.txt", "--spm", "x.model"], r"--spm spells a word list; it cannot be used with --lexicon"),
    (["--spm", "x.model"], r"--word-boundary '\|' is for per-character spelling; it cannot be used with --spm"),
])
def test_cli_errors_are_one_line(tiny, args, message):
    """A bad option or input: exit status 2 and one line on stderr, never a traceback."""
    (tiny / "empty.txt").write_text("")
    (tiny / "junk.arpa").write_text("junk\n")
    (tiny / "bad.arpa").write_text((tiny / "lm.arpa").read_text().replace("-0.45\ta cab", "-0.45 a"))
    (tiny / "loop").symlink_to(tiny / "loop2")
    (tiny / "loop2").symlink_to(tiny / "loop")
    base = {"--tokens": "tokens.txt", "--lm": "lm.arpa", "--out": "out", "--word-boundary": "|"}
    for flag in args:
        base.pop(flag, None)
    argv = [x for kv in base.items() for x in kv] + args
    r = make_graph(*argv, cwd=tiny)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("wfst-make-graph: error: "), r.stderr
    assert re.search(message, lines[0]), lines[0]
    assert not (tiny / "out").exists()


def test_csr_of_a_compiled_graph_matches_its_fst(tiny):
    compile_graph(tiny / "c", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", word_boundary="|",
                  progress=False)
    g = load_graph(tiny / "c")
    f = wfst.graph.read_fst(tiny / "c" / "TLG.fst")
    assert g.num_states == f.num_states() and g.num_arcs == sum(f.num_arcs(s) for s in f.states())
    assert np.all(g.ilabel[: g.num_emitting_arcs] > 0) and np.all(g.ilabel[g.num_emitting_arcs:] == 0)
