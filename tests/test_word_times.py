"""Word times: the true token spans of peaked emissions, Kaldi's best-path alignment,
hand-made frames on the tiny graph, N-best entries, CTM lines and what has no word times."""
from __future__ import annotations

import json
import pickle
import shutil

import numpy as np
import pytest
from decoding import demo_emissions, dying, random_log_probs
from wfst.graphs import TOPOLOGIES, compile_graph

import wfst
from wfst import Decoder, synthetic
from wfst.align import word_aligner
from wfst.cli import ctm_lines, decode_main
from wfst.errors import GraphFormatError, OptionError

TOPOS = sorted(TOPOLOGIES)


def _peaked(groups: list[list[int]], num_columns: int, blank: int, rng, longest: int) -> tuple[np.ndarray, list]:
    """Log-probs that leave no doubt about the path: 1 to `longest` frames per token, 0-2 blank
    frames between tokens (at least 1 between equal ones), every frame -30 but its own column.
    Returns them and the (first, last) frame of each group of tokens."""
    frames, spans = [blank] * int(rng.integers(0, 3)), []
    prev = None
    for grp in groups:
        first = None
        for c in grp:
            if c == prev:
                frames.append(blank)
            first = len(frames) if first is None else first
            frames += [c] * int(rng.integers(1, longest + 1))
            last = len(frames) - 1
            frames += [blank] * int(rng.integers(0, 3))
            prev = frames[-1]
        spans.append((first, last))
    x = np.full((len(frames), num_columns), -30.0, np.float32)
    x[np.arange(len(frames)), frames] = 0.0
    return x, spans


@pytest.mark.parametrize("name", [f"{s}_{t}" for s in ("char", "bpe") for t in TOPOS])
def test_word_times_are_the_true_token_spans(demo, demo_graphs, name):
    """Emissions with no doubt about the path, of held-out sentences: each word starts at
    its first token's first frame and ends at its last token's last frame, whatever the
    topology and wherever the graph put the word's label."""
    path, kw = demo_graphs[name]
    g = wfst.load_graph(path)
    vocab = g.words.ids()
    lines = [ln for ln in (demo / "test.txt").read_text().splitlines() if ln.strip()]
    texts = [t for t in lines if all(w in vocab for w in t.split())][:12]
    sep = [g.tokens.symbols.index(kw["word_boundary"])] if "word_boundary" in kw else []
    groups = []  # per utterance: its words' tokens, with the separators between
    for text in texts:
        spelled = [synthetic.tokenize(w, g.tokens, spm=kw.get("spm")) for w in text.split()]
        groups.append([grp for k, word in enumerate(spelled) for grp in ([sep] if k and sep else []) + [word]])
    rng = np.random.default_rng(3)
    longest = 1 if name.endswith("minimal") else 3  # the minimal topology reads a token once per frame
    made = [_peaked(grps, g.tokens.num_columns, g.tokens.blank, rng, longest) for grps in groups]
    lengths = np.array([len(m[0]) for m in made])
    x = np.full((len(made), lengths.max(), g.tokens.num_columns), -30.0, np.float32)
    for b, (xb, _) in enumerate(made):
        x[b, :len(xb)] = xb
    results = Decoder(g, beam=12.0, max_active=3000).decode(x, lengths)
    moved = 0
    for (r, text), (_, spans) in zip(zip(results, texts), made):
        assert r.text == text
        truth = spans[::2] if sep else spans  # not the separators between the words
        assert list(r.word_times) == truth, (text, r.word_times, truth)
        moved += sum(f != s for f, (s, _) in zip(r.word_frames, r.word_times))
    if name != "char_minimal":  # the label frames are not the start frames: the alignment matters
        assert moved


@pytest.mark.parametrize("name", ["char_compact", "char_normal", "bpe_minimal", "bpe_compact"])
def test_word_times_equal_those_of_kaldis_best_path(demo, demo_graphs, name):
    """Kaldi's FasterDecoder's best-path alignment (its frames' tokens) read the same way gives
    the same word times as ours, on noisy synthetic emissions."""
    pytest.importorskip("kaldi_decoder")
    from wfst_bench.kaldi import KaldiFasterDecoder

    path, kw = demo_graphs[name]
    g = wfst.load_graph(path)
    texts, x, lengths = demo_emissions(demo, g, kw, count=30)
    ours = Decoder(g, beam=12.0, max_active=7000, min_active=20).decode(x, lengths)
    kaldi = KaldiFasterDecoder(path / "TLG.fst", beam=12.0, max_active=7000, min_active=20).decode(x, lengths)
    aligner = word_aligner(g)
    for r, k in zip(ours, kaldi):
        assert r.word_ids == k.word_ids
        assert len(k.alignment) == r.num_frames
        assert r.word_times == aligner.word_times(k.alignment, k.word_ids, k.reached_final)


@pytest.fixture(scope="module")
def tiny_graphs(tmp_path_factory):
    from conftest import TINY_ARPA

    d = tmp_path_factory.mktemp("tiny_times")
    (d / "tokens.txt").write_text("<blk> 0\n| 1\na 2\nb 3\nc 4\n")
    (d / "lm.arpa").write_text(TINY_ARPA.lstrip())
    (d / "lexicon.txt").write_text("a a\nab a b\nba b a\nabc a b c\ncab c a b\ncab c a b c\n")
    return {t: wfst.load_graph(compile_graph(d / t, tokens=d / "tokens.txt", lm=d / "lm.arpa",
                                             lexicon=d / "lexicon.txt", word_boundary="|", topology=t,
                                             progress=False).directory) for t in TOPOS}


def _labels(frames: str) -> list[int]:
    """Frames as characters (. the blank) -> input labels (tokens <blk> | a b c are 1..5)."""
    return ["._abc".index(ch) + 1 if ch != "|" else 2 for ch in frames]


@pytest.mark.parametrize("topo", TOPOS)
def test_hand_made_frames(tiny_graphs, topo):
    """Blank and separator frames around a word are not part of it; a word cut short by the end
    of a path that reached no final state ends where its frames end; a repeated word keeps its
    own times."""
    g = tiny_graphs[topo]
    al = word_aligner(g)
    ids = g.words.ids()
    if topo == "minimal":  # every non-blank frame is a token: no repeats without a blank
        assert al.word_times(_labels(".a.b||.b.a."), [ids["ab"], ids["ba"]]) == ((1, 3), (7, 9))
        return
    assert al.word_times(_labels(".aab.||.b.a.."), [ids["ab"], ids["ba"]]) == ((1, 3), (8, 10))
    assert al.word_times(_labels("ab|ba|ab"), [ids["ab"], ids["ba"], ids["ab"]]) == ((0, 1), (3, 4), (6, 7))
    assert al.word_times(_labels("cab.c|a"), [ids["cab"], ids["a"]]) == ((0, 4), (6, 6))
    # not final: "ba" cut after its first token, then tokens of a word not output yet
    assert al.word_times(_labels("ab|b"), [ids["ab"], ids["ba"]], complete=False) == ((0, 1), (3, 3))
    assert al.word_times(_labels("ab|ca"), [ids["ab"]], complete=False) == ((0, 1),)


def test_nbest_entries_have_word_times(demo, demo_graphs):
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=4)
    for r in Decoder(g, beam=12.0, lattice_beam=6.0).decode(x, lengths, nbest=3):
        for e in r.nbest:
            assert len(e.word_times) == len(e.words)
            assert all(s <= t for s, t in e.word_times)
            assert all(a[1] < b[0] for a, b in zip(e.word_times, e.word_times[1:]))
        assert r.nbest[0].word_times == r.word_times


def test_ctm_lines(demo, demo_graphs, tmp_path, capsys):
    path, kw = demo_graphs["bpe_compact"]
    g = wfst.load_graph(path)
    texts, x, lengths = demo_emissions(demo, g, kw, count=3)
    r = Decoder(g, beam=12.0, lattice_beam=4.0).decode(x, lengths)[0]
    assert len(ctm_lines("utt", r, 0.04).split("\n")[0].split()) == 5  # without confidences
    rows = [line.split() for line in ctm_lines("utt", r, 0.04, with_confidence=True).splitlines()]
    assert [row[4] for row in rows] == list(r.words)
    for row, (s, e), c in zip(rows, r.word_times, r.word_confidences):
        assert row[:2] == ["utt", "1"]
        assert float(row[2]) == pytest.approx(s * 0.04) and float(row[3]) == pytest.approx((e + 1 - s) * 0.04)
        assert float(row[5]) == pytest.approx(c, abs=1e-4)
    em = tmp_path / "em.npz"
    synthetic.save_npz(em, x, lengths, texts)
    ctm = tmp_path / "out.ctm"
    assert decode_main(["--graph", str(path), "--emissions", str(em), "--ctm", str(ctm), "--quiet"]) == 0
    lines = ctm.read_text().splitlines()
    assert len(lines) == sum(len(r.words) for r in Decoder(path).decode(x, lengths))
    assert lines[0].split()[:2] == ["0", "1"] and len(lines[0].split()) == 5
    # An utterance whose tokens all die part-way has words but no lattice: its lines keep the
    # confidence column (0), as the file's other lines have it (it had 5 columns among 6s).
    x = dying(g, x, lengths, [int(lengths[0]), int(lengths[1]) // 2, int(lengths[2])])
    synthetic.save_npz(em, x, lengths, texts)
    assert decode_main(["--graph", str(path), "--emissions", str(em), "--ctm", str(ctm), "--quiet",
                        "--lattice-beam", "4"]) == 0
    assert "have no path through all their frames (utterance 1)" in capsys.readouterr().err
    rows = [line.split() for line in ctm.read_text().splitlines()]
    assert {len(row) for row in rows} == {6} and {row[0] for row in rows} == {"0", "1", "2"}
    dead = [row for row in rows if row[0] == "1"]
    assert dead and all(row[5] == "0.0000" for row in dead)
    assert all(0 < float(row[5]) <= 1 for row in rows if row[0] != "1")
    # the file's utterance ids key the lines (they said 0, 1, 2 whatever the file held)
    ids = ["spk1-utt000", "spk1-utt001", "spk2-utt000"]
    synthetic.save_npz(em, x, lengths, texts, utt_ids=ids)
    assert decode_main(["--graph", str(path), "--emissions", str(em), "--ctm", str(ctm), "--lattice-beam", "4"]) == 0
    assert {line.split()[0] for line in ctm.read_text().splitlines()} == set(ids)
    out = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in out if line and not line.startswith("\t")][:3] == ids


def test_ctm_words_never_overlap_and_always_last(demo_graphs):
    """Start and end are rounded, the duration is their difference: rounding start and
    duration apart let a word end 1 ms after the next began (12.5 ms frames), and a word of
    one 0.4 ms frame lasted 0.000 s."""
    g = wfst.load_graph(demo_graphs["bpe_compact"][0])
    column = {s: i for i, s in enumerate(g.tokens.symbols)}
    x = np.full((1, 5, g.tokens.num_columns), -30.0, np.float32)
    x[0, np.arange(5), [g.tokens.blank, column["\u2581a"], column["\u2581my"], column["\u2581a"], g.tokens.blank]] = 0
    r = Decoder(g, beam=12.0).decode(x)[0]
    assert r.words == ("a", "my", "a") and r.word_times == ((1, 1), (2, 2), (3, 3))
    for ms in (12.5, 20 / 3, 0.4, 40.0):
        rows = [line.split() for line in ctm_lines("u", r, ms / 1000).splitlines()]
        starts, durations = [float(row[2]) for row in rows], [float(row[3]) for row in rows]
        assert all(d > 0 for d in durations), (ms, rows)
        assert all(s + d <= t + 1e-9 for s, d, t in zip(starts, durations, starts[1:])), (ms, rows)
        assert starts[0] == pytest.approx(ms / 1000, abs=6e-4 if ms > 1 else 6e-5)


def test_results_pickle_with_their_word_times_not_their_graph(demo, demo_graphs):
    """A result sent between processes is a few kB: the graph (tens of MB) stays behind, the
    word times it gives are worked out first."""
    path, kw = demo_graphs["char_compact"]
    g = wfst.load_graph(path)
    _, x, lengths = demo_emissions(demo, g, kw, count=2)
    dec = Decoder(g)
    for r in dec.decode(x, lengths):
        blob = pickle.dumps(r)
        back = pickle.loads(blob)
        assert len(blob) < 20_000 and back == r and back.graph is None
        assert back.word_times == r.word_times and r.graph is g  # the original keeps its graph
    s = dec.stream()
    dec.advance([s], [x[0, :int(lengths[0])]])
    r = dec.finish([s])[0]
    assert len(pickle.dumps(r)) < 20_000 and pickle.loads(pickle.dumps(r)) == r


def test_what_has_no_word_times(demo, demo_graphs, tmp_path, capsys):
    """A graph directory without lexicon.txt (e.g. riva's) and a pickled result say why; so
    does --ctm with an unwritable path, before decoding."""
    path, kw = demo_graphs["char_compact"]
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("TLG.fst", "tokens.txt", "words.txt"):
        shutil.copy(path / name, bare / name)
    g = wfst.load_graph(bare)
    _, x, lengths = demo_emissions(demo, g, kw, count=1)
    r = Decoder(g).decode(x, lengths)[0]
    with pytest.raises(GraphFormatError, match="no lexicon.txt and no T.fst"):
        r.word_times
    with pytest.raises(OptionError, match="which a pickled result leaves behind"):
        pickle.loads(pickle.dumps(r)).word_times
    r = Decoder(g, lattice_beam=4.0).decode(x, lengths)[0]  # confidences fall back to label-frame windows
    assert len(r.word_confidences) == len(r.words) and all(0.0 < c <= 1.0 for c in r.word_confidences)
    em = tmp_path / "em.npz"
    synthetic.save_npz(em, x, lengths)
    base = ["--graph", str(path), "--emissions", str(em)]
    with pytest.raises(SystemExit):
        decode_main(base + ["--ctm", str(tmp_path / "missing" / "o.ctm")])
    assert "missing does not exist" in capsys.readouterr().err


def test_a_graph_s_word_time_files_that_are_missing_or_wrong_are_named(tiny_graphs, tmp_path):
    """A directory without T.fst was said to have neither lexicon.txt nor T.fst; a lexicon.txt
    of another graph named the path's words by their ids ([4, 7, 5])."""
    g = tiny_graphs["compact"]
    x = np.full((1, 6, 5), -9.0, np.float32)
    for t, column in enumerate([2, 0, 1, 3, 2, 0]):  # "a | b a": the words a, ba
        x[0, t, column] = -0.01
    for name, files, what in [("no_t", ("TLG.fst", "tokens.txt", "words.txt", "lexicon.txt", "graph.json"),
                               r"has no T.fst \(a graph built"),
                              ("other", ("TLG.fst", "tokens.txt", "words.txt", "T.fst", "graph.json"),
                               r"do not spell its words 'a ba' with the graph's lexicon and topology")]:
        (tmp_path / name).mkdir()
        for f in files:
            shutil.copy(g.directory / f, tmp_path / name / f)
        if name == "other":
            (tmp_path / name / "lexicon.txt").write_text("a b\nba a a\n")
        r = Decoder(wfst.load_graph(tmp_path / name)).decode(x)[0]
        assert r.words == ("a", "ba")
        with pytest.raises(GraphFormatError, match=what):
            r.word_times


def test_word_times_of_a_graph_whose_directory_was_built_again_since_it_was_loaded_are_refused(tiny_graphs,
                                                                                                 tmp_path):
    """Word times read lexicon.txt and T.fst when first asked: a directory built again (or
    removed) since the graph was loaded gave another build's files, refused as not a
    spelling, or as a graph built before word times.  Now it says what happened."""
    g = tiny_graphs["compact"]
    x = np.full((1, 6, 5), -9.0, np.float32)
    for t, column in enumerate([2, 0, 1, 3, 2, 0]):  # "a | b a": the words a, ba
        x[0, t, column] = -0.01
    shutil.copytree(g.directory, tmp_path / "g")
    for change in ("built again", "removed"):
        r = Decoder(wfst.load_graph(tmp_path / "g")).decode(x)[0]
        if change == "built again":
            info = json.loads((tmp_path / "g" / "graph.json").read_text())
            (tmp_path / "g" / "graph.json").write_text(json.dumps({**info, "fingerprint": "another build"}))
        else:
            shutil.rmtree(tmp_path / "g")
        with pytest.raises(GraphFormatError, match=r"from .*/g, which was built again or removed since the graph "
                                                   r"was loaded: its files are not this graph's; load the graph again"):
            r.word_times
        if change == "built again":
            shutil.rmtree(tmp_path / "g")
            shutil.copytree(g.directory, tmp_path / "g")


def test_streams_have_the_offline_word_times(demo, demo_graphs, tmp_path):
    """A stream's result has the word times of the offline decode (its committed prefix keeps
    the tokens its frames read), and wfst-decode --stream --ctm writes the offline CTM."""
    path, kw = demo_graphs["bpe_compact"]
    g = wfst.load_graph(path)
    texts, x, lengths = demo_emissions(demo, g, kw, count=4)
    dec = Decoder(g, beam=12.0)
    want = dec.decode(x, lengths)
    streams = [dec.stream() for _ in want]
    for t in range(0, int(lengths.max()), 7):
        live = [i for i in range(len(want)) if lengths[i] > t]
        dec.advance([streams[i] for i in live], [x[i, t:min(t + 7, int(lengths[i]))] for i in live])
    got = dec.finish(streams)
    assert [r.word_times for r in got] == [r.word_times for r in want] and all(r.words for r in got)
    em = tmp_path / "em.npz"
    synthetic.save_npz(em, x, lengths, texts)
    for lattice in ([], ["--lattice-beam", "6"]):  # with a lattice: the words' confidences too
        for mode in ([], ["--stream", "--chunk-ms", "120"]):
            assert decode_main(["--graph", str(path), "--emissions", str(em), "--beam", "12", "--quiet",
                                "--ctm", str(tmp_path / f"o{len(mode)}.ctm")] + mode + lattice) == 0
        assert (tmp_path / "o0.ctm").read_text() == (tmp_path / "o3.ctm").read_text()
        assert len((tmp_path / "o0.ctm").read_text().split("\n")[0].split()) == 5 + len(lattice) // 2


def test_cuda_results_have_the_cpu_word_times(tiny_graphs):
    """Both backends hand back the same path: the same frame tokens, the same word times
    (the CUDA kernels run in Numba's simulator without a GPU)."""
    pytest.importorskip("numba.cuda")
    g = tiny_graphs["compact"]
    x = random_log_probs(5, 3, 12, g.tokens.num_columns, sharpness=3.0)
    cpu = Decoder(g, beam=10.0, max_active=50).decode(x)
    gpu = Decoder(g, beam=10.0, max_active=50, device="cuda").decode(x)
    assert any(r.words for r in cpu)
    for a, b in zip(cpu, gpu):
        assert a == b
        assert np.array_equal(a.frame_tokens, b.frame_tokens)
        assert a.word_times == b.word_times
