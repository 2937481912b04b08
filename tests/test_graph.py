"""The CSR graph: equal to the FST it came from, loadable from foreign directories, robust to damage."""
import gzip
import os
import random
import shutil
import struct

import numpy as np
import pytest
import pywrapfst as fst

import wfst.graph
from wfst import GraphFormatError, MissingFileError, TokenTable, WordTable, load_graph, synthetic
from wfst.errors import InputFileError, OutputFileError
from wfst.graph import graph_from_fst


def random_fst(rng, num_states, num_columns, num_disambig, num_words, arcs_per_state=4):
    f = fst.VectorFst()
    for _ in range(num_states):
        f.add_state()
    f.set_start(rng.randrange(num_states))
    for s in range(num_states):
        if rng.random() < 0.3:
            f.set_final(s, round(rng.uniform(0, 5), 3))
        for _ in range(rng.randrange(arcs_per_state + 1)):
            ilabel = rng.choice([0, rng.randint(1, num_columns + num_disambig)])
            w = fst.Weight(f.weight_type(), round(rng.uniform(-1, 8), 4))
            f.add_arc(s, fst.Arc(ilabel, rng.randrange(num_words), w, rng.randrange(num_states)))
    return f


def reference_arcs(f, num_columns):
    """(emitting, non-emitting) arcs per state straight from pywrapfst; #k inputs are epsilons."""
    out = {}
    for s in f.states():
        e, ne = [], []
        for a in f.arcs(s):
            emitting = 1 <= a.ilabel <= num_columns
            if not emitting and a.nextstate == s and float(a.weight) >= 0:
                continue  # an epsilon self-loop that costs nothing or more: on no best path
            rec = (a.ilabel if emitting else 0, a.olabel, np.float32(float(a.weight)), a.nextstate)
            (e if emitting else ne).append(rec)
        out[s] = (e, ne)
    return out


def csr_arcs(g, s, emitting):
    return [(int(g.ilabel[a]), int(g.olabel[a]), g.weight[a], int(g.nextstate[a]))
            for a in g.arcs(s, emitting)]


@pytest.mark.parametrize("seed,num_states", [(0, 1), (1, 19), (2, 99), (3, 989)])
def test_csr_equals_fst(seed, num_states):
    rng = random.Random(seed)
    V, D, W = 7, 2, 11
    f = random_fst(rng, num_states, V, D, W)
    g = graph_from_fst(f, TokenTable(tuple(f"t{i}" for i in range(V)), 0, D))
    ref = reference_arcs(f, V)
    assert g.start == f.start() and g.num_states == num_states
    assert g.ne_indptr[0] == g.e_indptr[-1] and g.ne_indptr[-1] == g.num_arcs
    for s in range(num_states):
        e, ne = ref[s]
        assert csr_arcs(g, s, True) == e
        assert csr_arcs(g, s, False) == ne
        assert g.final[s] == np.float32(float(f.final(s)))
    assert g.ilabel.dtype == np.int32 and g.weight.dtype == np.float32 and g.e_indptr.dtype == np.int64


def test_bad_labels_and_weights_are_refused():
    tok = TokenTable(("<blk>", "a"), 0, 1)
    f = fst.VectorFst()
    s = f.add_state()
    f.set_start(s)
    f.set_final(s)
    f.add_arc(s, fst.Arc(9, 0, fst.Weight.one(f.weight_type()), s))
    with pytest.raises(GraphFormatError, match="input label 9, but the token table has 2 columns"):
        graph_from_fst(f, tok)
    empty = fst.VectorFst()
    with pytest.raises(GraphFormatError, match="empty"):
        graph_from_fst(empty, tok)


def test_an_arc_to_no_state_is_refused_not_a_crash():
    """OpenFST's conversion of a VectorFst with an arc past its states crashed the process
    (SIGSEGV) before the arrays' own checks ran (in a child process: a crash is a failure here)."""
    import subprocess
    import sys

    code = """
import pywrapfst as fst
from wfst import GraphFormatError, TokenTable
from wfst.graph import graph_from_fst
f = fst.VectorFst()
s = f.add_state()
f.set_start(s)
f.set_final(s)
f.add_arc(s, fst.Arc(1, 0, fst.Weight.one(f.weight_type()), 7))
try:
    graph_from_fst(f, TokenTable(("<blk>", "a"), 0, 1))
except GraphFormatError as e:
    print(e)
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-500:]
    assert run.stdout == "FST: an arc leaving state 0 goes to state 7, but the graph has states 0..0\n"


@pytest.mark.parametrize("final", ["nan", "-inf"])
def test_bad_final_weights_are_refused(final):
    """NaN read as 'not final' and -inf as a final cost of -inf: both silently wrong."""
    f = fst.VectorFst()
    s = f.add_state()
    f.set_start(s)
    f.set_final(s, 0.5)  # pywrapfst refuses NaN and -inf; other tools' binaries can hold them
    buf = fst.convert(f, "const").write_to_string()
    f = fst.Fst.read_from_string(buf.replace(struct.pack("<f", 0.5), struct.pack("<f", float(final))))
    with pytest.raises(GraphFormatError, match=f"state 0 has final weight {final}"):
        graph_from_fst(f, TokenTable(("<blk>", "a"), 0))


def riva_style_dir(tmp_path):
    """A graph directory as riva/NeMo/Kaldi write it: TLG.fst, words.txt, tokens.txt, no graph.json;
    the TLG keeps a #0 input label on a backoff arc."""
    d = tmp_path / "riva"
    d.mkdir(parents=True)
    (d / "tokens.txt").write_text("<eps> 0\n<blk> 1\na 2\nb 3\n#0 4\n#1 5\n")
    (d / "words.txt").write_text("<eps> 0\nab 1\nba 2\n#0 3\n<s> 4\n</s> 5\n")
    f = fst.VectorFst()
    for _ in range(3):
        f.add_state()
    f.set_start(0)
    f.set_final(2, 0.5)
    one = fst.Weight.one(f.weight_type())
    f.add_arc(0, fst.Arc(2, 1, fst.Weight(f.weight_type(), 1.5), 1))  # a:ab
    f.add_arc(0, fst.Arc(1, 0, one, 0))  # blank
    f.add_arc(1, fst.Arc(3, 0, one, 2))  # b
    f.add_arc(1, fst.Arc(4, 0, fst.Weight(f.weight_type(), 0.25), 0))  # #0 backoff
    f.add_arc(2, fst.Arc(0, 0, one, 0))
    f.write(str(d / "TLG.fst"))
    return d


def test_foreign_graph_directory_loads(tmp_path):
    d = riva_style_dir(tmp_path)
    g = load_graph(d)
    assert g.tokens.symbols == ("<blk>", "a", "b") and g.tokens.blank == 0 and g.tokens.num_disambig == 2
    assert g.words[1] == "ab" and g.info == {}
    assert g.num_emitting_arcs == 3 and g.num_arcs == 5
    assert csr_arcs(g, 1, False) == [(0, 0, np.float32(0.25), 0)]  # #0 became an epsilon
    assert (d / "TLG.csr.npz").is_file()
    # Loading through the FST path gives the same arrays, via the cache.
    g2 = load_graph(d / "TLG.fst")
    for name in ("final", "e_indptr", "ne_indptr", "ilabel", "olabel", "weight", "nextstate"):
        np.testing.assert_array_equal(getattr(g, name), getattr(g2, name))


def test_a_foreign_blank_is_named_when_loading(tmp_path, capsys):
    """A table whose blank is none of <blk>, <blank>, <b> (wav2vec2's <pad>) loaded as having
    no blank, silently: FLToP then pruned it as any token.  Now it warns, and load_graph's
    (and wfst-decode's) blank= names it, as a graph.json of ours would."""
    from decoding import random_log_probs

    from wfst.cli import decode_main

    d = riva_style_dir(tmp_path)
    (d / "tokens.txt").write_text("<eps> 0\n<pad> 1\na 2\nb 3\n#0 4\n#1 5\n")
    with pytest.warns(UserWarning, match=r"tokens.txt names no blank .*blank=SYMBOL\) or wfst-decode --blank"):
        assert load_graph(d).tokens.blank is None
    g = load_graph(d, blank="<pad>")
    assert g.tokens.blank == 0 and load_graph(d, blank=0).tokens.blank == 0
    x = random_log_probs(4, batch=6, frames=7, columns=3, sharpness=1.0)
    named = wfst.Decoder(g, token_top_n=1).decode(x)
    (d / "graph.json").write_text('{"blank_column": 0}')
    assert wfst.Decoder(load_graph(d), token_top_n=1).decode(x) == named
    with pytest.raises(wfst.OptionError, match="graph.json says the graph's blank is column 0"):
        load_graph(d, blank="a")
    (d / "graph.json").unlink()
    synthetic.save_npz(tmp_path / "x.npz", x, np.full(6, 7))
    assert decode_main(["--graph", str(d), "--emissions", str(tmp_path / "x.npz"), "--blank", "<pad>",
                        "--token-top-n", "1", "--quiet", "--output", str(tmp_path / "out.txt")]) == 0
    assert (tmp_path / "out.txt").read_text() == "".join(r.text + "\n" for r in named)


def test_a_graph_no_search_can_use_is_refused_naming_its_file(tmp_path):
    d = riva_style_dir(tmp_path)
    f = fst.Fst.read(str(d / "TLG.fst"))
    fst.arcmap(f, map_type="to_log").write(str(d / "TLG.fst"))
    with pytest.raises(GraphFormatError, match=r"riva/TLG.fst: arc type 'log'; only 'standard'"):
        load_graph(d)
    f.add_arc(0, fst.Arc(0, 0, fst.Weight(f.weight_type(), 1.0), 2))  # with 2 -> 0: an epsilon cycle
    f.write(str(d / "TLG.fst"))
    with pytest.raises(GraphFormatError, match=r"riva/TLG.fst has a cycle of epsilon arcs"):  # (was "Graph(...)")
        wfst.Decoder(load_graph(d))


def test_cache_follows_the_fst(tmp_path):
    d = riva_style_dir(tmp_path)
    assert load_graph(d).num_arcs == 5
    f = fst.Fst.read(str(d / "TLG.fst"))
    f.add_arc(2, fst.Arc(2, 0, fst.Weight.one(f.weight_type()), 2))
    f.write(str(d / "TLG.fst"))
    os.utime(d / "TLG.fst", ns=(1, 1))  # even with an old mtime, the size changed
    assert load_graph(d).num_arcs == 6
    (d / "TLG.csr.npz").write_bytes(b"garbage")  # a damaged cache is rebuilt, not trusted
    assert load_graph(d).num_arcs == 6
    whole = (d / "TLG.csr.npz").read_bytes()
    (d / "TLG.csr.npz").write_bytes(whole[:len(whole) // 2])  # half written (a full disk): rebuilt too
    assert load_graph(d).num_arcs == 6
    assert (d / "TLG.csr.npz").read_bytes() == whole


def test_a_copied_graph_directory_loads_from_its_cache(tmp_path, monkeypatch):
    """A copy whose times changed (cp without -p, an upload) loads from its cache without
    reading the FST, which a machine that only decodes may have no pynini to read; an FST of
    the same size but other content is read again."""
    d = riva_style_dir(tmp_path / "a")
    good = load_graph(d)
    copy = tmp_path / "b"
    shutil.copytree(d, copy, copy_function=shutil.copyfile)  # the contents alone
    os.utime(copy / "TLG.fst", ns=(5, 5))

    def unread(path):
        raise AssertionError(f"{path} was read")

    monkeypatch.setattr(wfst.graph, "read_fst", unread)
    g = load_graph(copy)
    for name in ("final", "e_indptr", "ne_indptr", "ilabel", "olabel", "weight", "nextstate"):
        np.testing.assert_array_equal(getattr(g, name), getattr(good, name))
    monkeypatch.undo()
    f = fst.Fst.read(str(copy / "TLG.fst"))
    f.set_final(2, 0.75)  # another weight: the same size
    f.write(str(copy / "TLG.fst"))
    assert (copy / "TLG.fst").stat().st_size == (d / "TLG.fst").stat().st_size
    os.utime(copy / "TLG.fst", ns=(5, 5))
    with np.load(copy / "TLG.csr.npz") as z:
        assert z["key"][wfst.graph._KEY_FILE] != 5  # (the cache's key is the first copy's time: the digest tells)
    assert load_graph(copy).final[2] == np.float32(0.75)


def test_the_cache_misses_an_fst_rewritten_with_its_size_and_time(tmp_path):
    """A same-size FST written within the mtime's resolution (or copied in with cp -p, rsync
    -t) kept the old arrays: the key now holds the file's ctime and inode, which a write
    always changes."""
    d = riva_style_dir(tmp_path)
    before = (d / "TLG.fst").stat()
    assert load_graph(d).final[2] != np.float32(0.75)
    f = fst.Fst.read(str(d / "TLG.fst"))
    f.set_final(2, 0.75)
    f.write(str(d / "TLG.fst"))
    os.utime(d / "TLG.fst", ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (d / "TLG.fst").stat().st_size == before.st_size
    assert load_graph(d).final[2] == np.float32(0.75)


def test_an_fst_replaced_while_it_is_read_leaves_no_cache(tmp_path, monkeypatch):
    """A rebuild that replaces TLG.fst while a loader reads it: the loader's arrays were of the
    old file, and were cached under the new file's key, which every later load then trusted.
    The load is now tried again (the file there now); replaced at every try, it is refused."""
    d = riva_style_dir(tmp_path)
    (d / "TLG.csr.npz").unlink(missing_ok=True)
    new = fst.Fst.read(str(d / "TLG.fst"))
    new.set_final(2, 0.75)
    read, reads = wfst.graph.read_fst, []

    def read_then_replaced(path):
        old = read(path)
        if not reads or always:
            new.write(str(tmp_path / "next.fst"))
            os.replace(tmp_path / "next.fst", path)  # (as a build's rename)
        reads.append(path)
        return old

    monkeypatch.setattr(wfst.graph, "read_fst", read_then_replaced)
    always = False
    assert load_graph(d).final[2] == np.float32(0.75) and len(reads) == 2  # read again: the file there now
    monkeypatch.undo()
    assert load_graph(d).final[2] == np.float32(0.75)  # (from the cache the second read wrote)
    (d / "TLG.csr.npz").unlink()
    monkeypatch.setattr(wfst.graph, "read_fst", read_then_replaced)
    always = True
    with pytest.raises(GraphFormatError, match=r"replaced by a rebuild during each of 4 loads"):
        load_graph(d)
    assert not (d / "TLG.csr.npz").exists()


def test_a_graph_directory_swapped_in_during_a_load_is_read_whole(tiny, tmp_path, monkeypatch):
    """A rebuild swaps a new directory in between the loader's reads of graph.json, words.txt and
    the arrays: the graph was of two builds (one's arcs read with the other's word ids, wrong
    words, silently). The load is tried again and returns the new build whole."""
    from wfst.graphs import compile_graph

    def build(out, lexicon):
        (tmp_path / "lexicon.txt").write_text(lexicon)
        return compile_graph(out, tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tmp_path / "lexicon.txt",
                             word_boundary="|", progress=False).directory

    graph = build(tmp_path / "R", "a a\nab a b\nba b a\nabc a b c\ncab c a b\n")
    build(tmp_path / "next", "ab a b\nabc a b c\nba b a\ncab c a b\na a\n")  # other word ids
    want = load_graph(tmp_path / "next")
    read, swapped = wfst.graph.WordTable.read, []

    def read_words_during_a_rebuild(path):
        if not swapped:  # (graph.json and tokens.txt read; words.txt and the arrays still to come)
            wfst.graph._swap_in(tmp_path / "next", graph)
            swapped.append(path)
        return read(path)

    monkeypatch.setattr(wfst.graph.WordTable, "read", read_words_during_a_rebuild)
    g = load_graph(graph)
    assert swapped and g.info["fingerprint"] == want.info["fingerprint"]
    assert g.words.symbols == want.words.symbols and np.array_equal(g.olabel, want.olabel)


def damage(name, arrays):
    """Cached arrays with the FST's key but contents a kernel cannot walk."""
    a = dict(arrays)
    if name == "nextstate":
        a["nextstate"] = a["nextstate"].copy()
        a["nextstate"][1] = 1 << 30  # read past the state arrays (a segfault)
    elif name == "ilabel":
        a["ilabel"] = a["ilabel"].copy()
        a["ilabel"][0] = 99  # a logit column past V
    elif name == "indptr":
        a["e_indptr"] = a["e_indptr"][::-1].copy()
    elif name == "dtype":
        a["weight"] = a["weight"].astype(np.float64)
    elif name == "length":
        a["olabel"] = a["olabel"][:-1]
    elif name == "start":
        a["start"] = np.int64(7)
    elif name == "final":
        a["final"] = np.full_like(a["final"], np.nan)
    elif name == "olabel":
        a["olabel"] = a["olabel"] + 50  # words past words.txt (the FST's are right)
    return a


def test_graph_json_of_another_token_set_is_refused(tmp_path):
    d = riva_style_dir(tmp_path)
    (d / "graph.json").write_text('{"word_boundary": "|"}')
    with pytest.raises(GraphFormatError, match=r"graph.json says the word boundary is '\|', but .*tokens.txt has no"):
        load_graph(d)
    (d / "graph.json").write_text('{"blank_column": 7}')
    with pytest.raises(InputFileError, match=r"tokens.txt: blank column 7 is outside its columns 0..2"):
        load_graph(d)
    (d / "graph.json").write_text('{"blank_column": "1"}')
    with pytest.raises(GraphFormatError, match=r"graph.json says the blank is column '1': not a column number"):
        load_graph(d)


def test_the_blank_graph_json_names_settles_two_blank_names(tmp_path):
    d = riva_style_dir(tmp_path)
    (d / "tokens.txt").write_text("<eps> 0\n<blk> 1\na 2\n<blank> 3\n#0 4\n#1 5\n")
    with pytest.raises(InputFileError, match=r"several symbols could be the blank: <blk> \(column 0\), <blank>"):
        load_graph(d)
    (d / "graph.json").write_text('{"blank_column": 2}')
    assert load_graph(d).tokens.blank == 2


@pytest.mark.parametrize("name", ["nextstate", "ilabel", "indptr", "dtype", "length", "start", "final", "olabel"])
def test_damaged_cache_with_the_right_key_is_rebuilt(tmp_path, name):
    d = riva_style_dir(tmp_path)
    good = load_graph(d)
    cache = d / "TLG.csr.npz"
    with np.load(cache) as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(cache, **damage(name, arrays))
    g = load_graph(d)
    for field in ("final", "e_indptr", "ne_indptr", "ilabel", "olabel", "weight", "nextstate"):
        np.testing.assert_array_equal(getattr(g, field), getattr(good, field))
        assert getattr(g, field).dtype == getattr(good, field).dtype
    assert g.start == good.start


def test_missing_and_corrupt_graphs(tmp_path):
    with pytest.raises(MissingFileError, match="graph directory or FST"):
        load_graph(tmp_path / "nowhere")
    d = riva_style_dir(tmp_path)
    good = (d / "TLG.fst").read_bytes()
    (d / "TLG.fst").write_bytes(good[:40])
    with pytest.raises(GraphFormatError, match="TLG.fst: not a readable OpenFST binary"):
        load_graph(d)
    # other files are said as what they are (OpenFST printed its own error line first)
    for data, what in ((b"\x00" * 64, "another format"), (b"", "empty"),
                       (b"0 1 3 3\n1\n", "text\\? an FST in AT&T text"),
                       (gzip.compress(good), "gzip data: gunzip it")):
        (d / "TLG.fst").write_bytes(data)
        with pytest.raises(GraphFormatError, match=f"TLG.fst: not an OpenFST binary \\({what}"):
            load_graph(d)
    (d / "TLG.fst").unlink()
    with pytest.raises(MissingFileError, match="graph FST"):
        load_graph(d)
    (d / "HCLG.fst").write_bytes(good)  # (Kaldi's name)
    with pytest.raises(MissingFileError, match=r"TLG.fst: not found \(the folder holds HCLG.fst: give the FST file's "
                                               r"path, as .*HCLG.fst\)"):
        load_graph(d)
    assert load_graph(d / "HCLG.fst").num_arcs == 5
    d2 = riva_style_dir(tmp_path / "x")
    (d2 / "tokens.txt").unlink()
    with pytest.raises(MissingFileError, match="token table"):
        load_graph(d2)
    d3 = riva_style_dir(tmp_path / "y")
    (d3 / "words.txt").write_text("<eps> 0\n")
    with pytest.raises(GraphFormatError, match="output label 1, but words.txt has ids 0..0"):
        load_graph(d3)
    d4 = riva_style_dir(tmp_path / "z")
    (d4 / "graph.json").write_text("[]")
    with pytest.raises(GraphFormatError, match=r"graph.json: not a JSON object \(found a list\)"):
        load_graph(d4)


def test_unwritable_directory_still_loads(tmp_path, monkeypatch):
    d = riva_style_dir(tmp_path)

    def refuse(*args):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(wfst.graph, "write_csr_cache", refuse)  # as in a read-only directory
    with pytest.warns(UserWarning, match="could not write the CSR cache .*Permission denied"):
        assert load_graph(d).num_arcs == 5


def test_word_table_is_optional(tmp_path):
    d = riva_style_dir(tmp_path)
    (d / "words.txt").unlink()
    assert load_graph(d).words is None


def test_words_table_type(tmp_path):
    assert isinstance(load_graph(riva_style_dir(tmp_path)).words, WordTable)


def _with_tables(d, tokens: str, words: str):
    """d's TLG.fst rewritten with symbol tables of its own, read from these texts."""
    f = fst.Fst.read(str(d / "TLG.fst"))
    for text, name, put in ((tokens, "isyms.txt", f.set_input_symbols), (words, "osyms.txt", f.set_output_symbols)):
        (d / name).write_text(text)
        put(fst.SymbolTable.read_text(str(d / name)))
    f.write(str(d / "TLG.fst"))
    return f


def test_symbol_tables_that_agree_with_the_files_load_and_are_left_alone(tmp_path):
    d = riva_style_dir(tmp_path)
    plain = load_graph(d, use_cache=False)
    # the same tables, the blank under another of its names
    f = _with_tables(d, "<eps> 0\n<blank> 1\na 2\nb 3\n#0 4\n#1 5\n#2 6\n", (d / "words.txt").read_text())
    with_syms = load_graph(d, use_cache=False)
    for name in ("final", "e_indptr", "ne_indptr", "ilabel", "olabel", "weight", "nextstate"):
        np.testing.assert_array_equal(getattr(plain, name), getattr(with_syms, name))
    assert f.input_symbols() is not None and f.output_symbols() is not None  # (the caller's FST keeps them)
    assert graph_from_fst(f, plain.tokens, plain.words).num_arcs == plain.num_arcs


@pytest.mark.parametrize("tokens, words, said", [
    ("<eps> 0\n<blk> 1\nb 2\na 3\n", None,
     r"input symbol table disagrees with tokens.txt on 2 label\(s\) \(label 2 is 'b' there, 'a' in tokens.txt; "
     r"label 3 is 'a' there, 'b' in tokens.txt\)"),
    (None, "<eps> 0\nba 1\nab 2\n", r"output symbol table disagrees with words.txt on 2 label\(s\) \(label 1 is 'ba' "
                                      r"there, 'ab' in words.txt"),
])
def test_symbol_tables_that_disagree_with_the_files_are_refused(tmp_path, tokens, words, said):
    """A graph built with one token (or word) numbering and loaded with another's table would
    decode into the wrong symbols, silently: its own tables say so, and are read."""
    d = riva_style_dir(tmp_path)
    _with_tables(d, tokens or (d / "tokens.txt").read_text(), words or (d / "words.txt").read_text())
    with pytest.raises(GraphFormatError, match=said):
        load_graph(d)
    assert not (d / "TLG.csr.npz").exists()


def test_unwritable_graph_directory_is_an_output_error(tmp_path):
    rng = random.Random(3)
    f = random_fst(rng, 5, 3, 0, 4)
    g = graph_from_fst(f, TokenTable(("<blk>", "a", "b"), 0))
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputFileError, match="cannot write graph directory .*file/g: ") as e:
        wfst.graph.write_graph_dir(tmp_path / "file" / "g", f, g)
    assert isinstance(e.value, OSError)
    wfst.graph.write_graph_dir(tmp_path / "g", f, g)  # a writable one is fine
    assert load_graph(tmp_path / "g").num_arcs == g.num_arcs


def test_arcs_of_a_state_the_graph_has_not_is_refused():
    """Graph.arcs(-1) gave an empty range (numpy's indptr[-1]), and arcs(num_states) an
    IndexError: a walk past the graph's states went on silently or crashed."""
    from decoding import tied_tlg

    from wfst.errors import OptionError

    _, g = tied_tlg()
    assert len(g.arcs(0)) == 2 and len(g.arcs(np.int32(1))) == 2 and not g.arcs(1, emitting=False)
    for state in (-1, g.num_states, 1.0, True, None):
        with pytest.raises(OptionError, match=rf"no state {state!r}; states are 0\.\.{g.num_states - 1}"):
            g.arcs(state)
