"""wfst-bench (wfst_bench.cli) end to end on the tiny graph: the table, the JSON rows, bad options."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from wfst.graphs import compile_graph
from wfst_bench.cli import main
from wfst_bench.machine import gpu_name

import wfst
from wfst import synthetic

TEXTS = ["ab ba", "abc", "a cab", "ba abc"]


@pytest.fixture
def bench_inputs(tiny, tmp_path):
    """The tiny compact graph, its sentences as a text file, and clean emissions of them as an .npz."""
    graph = compile_graph(tmp_path / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa",
                          lexicon=tiny / "lexicon.txt", word_boundary="|", topology="compact").directory
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    x, n = synthetic.from_texts(TEXTS, wfst.load_graph(graph).tokens, word_boundary="|", seed=0, confusion=0.0)
    synthetic.save_npz(tmp_path / "em.npz", x, n, TEXTS)
    return graph, tmp_path / "texts.txt", tmp_path / "em.npz"


def _has_kaldi() -> bool:
    try:
        import kaldi_decoder  # noqa: F401
        return True
    except ImportError:
        return False


def test_rounds_keep_each_decoders_fastest(bench_inputs, monkeypatch):
    """With rounds, the decoders take turns and each row is its fastest round."""
    from wfst_bench import cli, systems

    graph, _, em = bench_inputs
    from wfst.synthetic import load_npz

    data = load_npz(em)
    calls, times, peaks = [], iter([3.0, 2.0, 1.0, 4.0]), iter([50.0, 40.0, 30.0, 60.0])
    real = systems.OursSystem.decode

    def fake(self, em_, params, *, timed, repeat=1):
        calls.append(self.key)
        return dataclasses.replace(real(self, em_, params, timed=timed, repeat=repeat), seconds=next(times),
                                   peak_mb=next(peaks))

    monkeypatch.setattr(systems.OursSystem, "decode", fake)
    rows = cli.run(graph, data.log_probs, data.lengths, data.texts, decoders=["cpu1", "cpu"], rounds=2,
                   progress=False)
    assert calls == ["cpu1", "cpu", "cpu1", "cpu"]
    assert [r["seconds"] for r in rows] == [1.0, 2.0]
    assert [r["own_mb"] for r in rows] == [30.0, 40.0]  # each one's least over the rounds, kept row or not


def test_bench_compares_decoders(bench_inputs, tmp_path, capsys):
    graph, _, em = bench_inputs
    decoders = "greedy,cpu1,cpu,kaldi,cuda" if _has_kaldi() else "greedy,cpu1,cpu,cuda"
    assert main(["--graph", str(graph), "--emissions", str(em), "--decoders", decoders,
                 "--json", str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "| ours, CPU, 1 thread | 0.00 |" in out and "SYNTHETIC" in out
    assert "| decoder | WER % | RTFx | frames/s | tokens/frame | peak MiB ¹ | own MiB ² |" in out
    assert "¹ the process's" in out and "² what the row's own decoding" in out
    assert "not in the graph's vocabulary" not in out
    report = json.loads((tmp_path / "b.json").read_text())
    assert set(report) == {"title", "machine", "settings", "utterances", "frames", "reference_words", "oov_words",
                           "rows"} and report["machine"]["cores"] > 0
    assert report["settings"]["emissions"] == str(em) and report["settings"]["decoders"] == decoders.split(",")
    assert report["settings"]["beam"] == wfst.DecoderConfig().beam and report["oov_words"] == 0
    assert report["utterances"] == 4 and report["reference_words"] == 7
    rows = {r["decoder"]: r for r in report["rows"]}
    assert list(rows) == decoders.split(",")
    assert rows["cpu1"]["wer"] == 0.0 and rows["cpu1"]["rtfx"] > 0 and rows["cpu1"]["tokens_per_frame"] > 0
    assert rows["greedy"]["tokens_per_frame"] is None
    assert rows["greedy"]["wer"] == 0.0  # (split at graph.json's word boundary: each utterance was one word, 100%)
    if sys.platform == "linux":
        assert rows["cpu1"]["peak_mb"] > 0  # the process's peak resident memory while it ran
        # its own: at least the graph it loads and the decoder's arrays; less than the process's
        assert 0 < rows["cpu1"]["own_mb"] <= rows["cpu1"]["peak_mb"]
    assert rows["cpu1"]["threads"] == 1 and rows["cpu"]["threads"] >= 1 and rows["cpu1"]["device"] == "cpu"
    if "kaldi" in rows:
        assert rows["kaldi"]["wer"] == rows["cpu1"]["wer"]
        assert re.search(r"^ours CPU 1 thread / Kaldi FasterDecoder: \d+\.\d\dx RTFx$", out, re.M)
    if gpu_name() is None:
        assert rows["cuda"] == {"decoder": "cuda", "skipped": "no GPU on this machine"}
        assert "| ours, CUDA | not measured: no GPU on this machine | | | | | |" in out


def test_rtfx_counts_the_frame_shift_given(bench_inputs, tmp_path, capsys):
    """--frame-ms: RTFx and the audio's length at the model's frame shift (they were at 40 ms whatever it was)."""
    graph, _, em = bench_inputs
    assert main(["--graph", str(graph), "--emissions", str(em), "--decoders", "cpu1", "--frame-ms", "80",
                 "--json", str(tmp_path / "b.json")]) == 0
    report = json.loads((tmp_path / "b.json").read_text())
    row = report["rows"][0]
    assert row["rtfx"] == pytest.approx(report["frames"] * 0.08 / row["seconds"])
    assert report["settings"]["frame_ms"] == 80 and "at 80 ms/frame" in capsys.readouterr().out


def test_bench_makes_synthetic_emissions_from_texts(bench_inputs, tmp_path, capsys):
    graph, texts, _ = bench_inputs
    texts.write_text(texts.read_text() + "ab bb\n")  # a word the graph lacks (bb): counted, said
    assert main(["--graph", str(graph), "--texts", str(texts), "--word-boundary", "|", "--seeds", "2",
                 "--decoders", "greedy,cpu1", "--batch-size", "3", "--json", str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert f"{graph}: 10 utterances" in out and "of SYNTHETIC emissions" in out and "batch 3" in out
    assert "2 of the references' 18 words (11.11%) are not in the graph's vocabulary" in out
    report = json.loads((tmp_path / "b.json").read_text())
    assert report["oov_words"] == 2 and report["settings"]["seeds"] == 2 and report["settings"]["texts"] == str(texts)
    rows = report["rows"]
    assert [r["decoder"] for r in rows] == ["greedy", "cpu1"] and all(r["rtfx"] > 0 for r in rows)


def test_texts_are_spelled_as_the_graph_was_built(bench_inputs, tmp_path, capsys):
    """Without --word-boundary, a character graph's sentences get the boundary its graph.json
    names (they were spelled as one word each: WER near 100%)."""
    graph, texts, _ = bench_inputs
    assert main(["--graph", str(graph), "--texts", str(texts), "--decoders", "cpu1",
                 "--json", str(tmp_path / "b.json")]) == 0
    assert json.loads((tmp_path / "b.json").read_text())["rows"][0]["wer"] == 0.0


def test_texts_for_a_sentencepiece_graph_whose_model_moved_are_refused(bench_inputs, tmp_path, capsys):
    """Spelled per character instead, the sentences made a table of ~98% WER, silently."""
    graph, texts, _ = bench_inputs
    info = json.loads((graph / "graph.json").read_text())
    info["lexicon_source"] = "sentencepiece"
    info["inputs"]["spm"] = {"path": str(tmp_path / "moved.model")}
    (graph / "graph.json").write_text(json.dumps(info))
    assert main(["--graph", str(graph), "--texts", str(texts)]) == 2
    assert "moved.model: not found" in capsys.readouterr().err


def test_a_sentencepiece_model_other_than_the_graphs_is_refused(bench_inputs, tmp_path, capsys):
    """Another model's pieces spelled the sentences in tokens the graph was not built on."""
    graph, texts, _ = bench_inputs
    (tmp_path / "built.model").write_bytes(b"the model the graph was built with")
    (tmp_path / "other.model").write_bytes(b"another model")
    info = json.loads((graph / "graph.json").read_text())
    info["lexicon_source"] = "sentencepiece"
    info["inputs"]["spm"] = {"path": str(tmp_path / "built.model"),
                             "sha256": hashlib.sha256(b"the model the graph was built with").hexdigest()}
    (graph / "graph.json").write_text(json.dumps(info))
    assert main(["--graph", str(graph), "--texts", str(texts), "--spm", str(tmp_path / "other.model")]) == 2
    err = capsys.readouterr().err
    assert "other.model is not the sentencepiece model" in err and "built.model: another sha256" in err
    assert main(["--graph", str(graph), "--texts", str(texts), "--spm", str(tmp_path / "none.model")]) == 2
    assert "cannot read sentencepiece model" in capsys.readouterr().err


def test_emissions_of_another_model_and_a_boundary_for_a_sentencepiece_graph_are_refused(bench_inputs, tmp_path,
                                                                                         capsys):
    """Emissions with another V: greedy raised an IndexError, ours a traceback, Kaldi read
    past each row and printed a WER; a BPE graph's sentences spelled per character at a
    --word-boundary decoded at ~99% WER, silently."""
    graph, texts, em = bench_inputs
    x = synthetic.load_npz(em)
    synthetic.save_npz(tmp_path / "wide.npz", np.concatenate([x.log_probs, x.log_probs], axis=2), x.lengths, TEXTS)
    assert main(["--graph", str(graph), "--emissions", str(tmp_path / "wide.npz")]) == 2
    assert "wide.npz: log_probs have V=10 columns, the graph's tokens 5: another model's" in capsys.readouterr().err
    info = json.loads((graph / "graph.json").read_text())
    info["lexicon_source"] = "sentencepiece"
    (graph / "graph.json").write_text(json.dumps(info))
    assert main(["--graph", str(graph), "--texts", str(texts), "--word-boundary", "|"]) == 2
    assert "was built with a sentencepiece model: pass --spm" in capsys.readouterr().err


def test_emissions_no_search_can_read_and_options_they_ignore_are_refused_before_the_run(bench_inputs, tmp_path,
                                                                                         capsys):
    """A NaN in the emissions: a traceback after greedy's work with ours, and WERs printed from
    NaN input with Kaldi and greedy alone; --seeds and --spm with --emissions were ignored
    (and --json recorded the --spm)."""
    graph, texts, em = bench_inputs
    x = synthetic.load_npz(em)
    bad = x.log_probs.copy()
    bad[1, 3, 2] = np.nan
    synthetic.save_npz(tmp_path / "nan.npz", bad, x.lengths, TEXTS)
    for decoders in ("greedy,cpu1", "greedy"):
        assert main(["--graph", str(graph), "--emissions", str(tmp_path / "nan.npz"), "--decoders", decoders]) == 2
        err = capsys.readouterr().err
        assert err == f"wfst-bench: error: {tmp_path / 'nan.npz'}: utterance 1: log_probs at frame 3 has NaN or " \
                      f"+inf (1 utterance(s) affected)\n"
    for option in (["--seeds", "3"], ["--spm", "x.model"]):
        with pytest.raises(SystemExit) as e:
            main(["--graph", str(graph), "--emissions", str(em), *option])
        assert e.value.code == 2 and f"argument {option[0]}: spells --texts" in capsys.readouterr().err


def test_reference_words_no_arc_outputs_are_out_of_the_vocabulary(bench_inputs, tiny, tmp_path, capsys):
    """A word of the LM that the lexicon cannot spell ('ba' here) is in words.txt but no arc
    outputs it: it was counted as in the vocabulary."""
    _, _, em = bench_inputs
    (tmp_path / "no_ba.txt").write_text("a a\nab a b\nabc a b c\ncab c a b\n")
    graph = compile_graph(tmp_path / "no_ba", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa",
                          lexicon=tmp_path / "no_ba.txt", word_boundary="|", topology="compact").directory
    g = wfst.load_graph(graph)
    assert "ba" in g.words.symbols and "ba" not in g.output_words() and {"a", "ab", "abc", "cab"} <= g.output_words()
    assert main(["--graph", str(graph), "--emissions", str(em), "--decoders", "greedy"]) == 0
    assert "2 of the references' 7 words (28.57%) are not in the graph's vocabulary" in capsys.readouterr().out


@pytest.mark.skipif(not _has_kaldi(), reason="kaldi-decoder is not installed")
def test_utterances_kaldi_gives_up_on_are_counted_not_scored_silently_as_empty(bench_inputs, tmp_path, capsys):
    """Kaldi finds no path where the frames spell no word ('c', a blank, 'c': no word holds
    'cc'): it was scored as an empty hypothesis, and the table said nothing."""
    graph, _, em = bench_inputs
    x = synthetic.load_npz(em)
    lp, lengths = x.log_probs.copy(), x.lengths.copy()
    lp[0] = -np.inf
    lp[0, np.arange(4), [4, 0, 4, 0]] = 0.0
    lengths[0] = 4
    synthetic.save_npz(tmp_path / "cc.npz", lp, lengths, TEXTS)
    assert main(["--graph", str(graph), "--emissions", str(tmp_path / "cc.npz"), "--decoders", "kaldi",
                 "--json", str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "(1 gave up ³)" in out and "³ utterances the decoder found no path for" in out
    assert json.loads((tmp_path / "b.json").read_text())["rows"][0]["gave_up"] == 1


def test_nothing_to_decode_and_unwritable_json_are_said_before_the_run(bench_inputs, tmp_path, capsys):
    graph, texts, em = bench_inputs
    with pytest.raises(SystemExit) as e:
        main(["--graph", str(graph), "--texts", str(texts), "--json", str(tmp_path / "no" / "b.json")])
    assert e.value.code == 2 and "argument --json: cannot write" in capsys.readouterr().err
    (tmp_path / "blank.txt").write_text("\n \n")
    assert main(["--graph", str(graph), "--texts", str(tmp_path / "blank.txt")]) == 2
    assert "blank.txt: no sentences in the file" in capsys.readouterr().err
    x, n = synthetic.load_npz(em).log_probs, synthetic.load_npz(em).lengths
    synthetic.save_npz(tmp_path / "zero.npz", x, n * 0)
    assert main(["--graph", str(graph), "--emissions", str(tmp_path / "zero.npz")]) == 2
    assert "zero.npz: no frames to decode (4 utterances)" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--decoders", "foo"], "argument --decoders: unknown decoder 'foo'; choose from greedy, cpu1, cpu, kaldi, cuda"),
    (["--decoders", "greedy,cpu2"], "unknown decoder 'cpu2'"),
    (["--decoders", ","], "argument --decoders: none given"),
    (["--seeds", "0"], "argument --seeds: must be >= 1"),
    (["--batch-size", "0"], "argument --batch-size: must be >= 1"),
    (["--frame-ms", "0"], "argument --frame-ms: must be a number of milliseconds"),
    # said with the command's option names (it said DecoderConfig.beam=-1.0)
    (["--beam", "-1"], "argument --beam=-1.0: must be a finite number > 0"),
    (["--beam", "nan"], "argument --beam=nan: must be"),
    (["--max-active", "0"], "argument --max-active=0: must be an integer >= 1"),
    (["--min-active", "9000"], "--min-active"),
    (["--max-active", "x"], "argument --max-active: invalid int value"),
    (["--decoders", "greedy,kaldi,greedy"], "argument --decoders: 'greedy' given twice"),
    # Kaldi's decoder aborts on min_active == max_active (after the other decoders' work)
    (["--decoders", "cpu1,kaldi", "--max-active", "50", "--min-active", "50"],
     "argument --min-active: Kaldi's decoder needs it below --max-active (50 >= 50)"),
])
def test_bad_options_give_one_line_and_status_2(bench_inputs, capsys, argv, message):
    graph, texts, _ = bench_inputs
    with pytest.raises(SystemExit) as e:
        main(["--graph", str(graph), "--texts", str(texts), *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("wfst-bench: error: ") and err.count("\n") == 1 and message in err


def test_missing_inputs_give_one_line_and_status_2(bench_inputs, tmp_path, capsys):
    graph, texts, _ = bench_inputs
    assert main(["--graph", str(tmp_path / "none"), "--texts", str(texts)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wfst-bench: error: cannot read graph") and err.count("\n") == 1
    assert main(["--graph", str(graph), "--texts", str(tmp_path / "none.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wfst-bench: error: cannot read texts file") and err.count("\n") == 1
    with pytest.raises(SystemExit) as e:  # neither --texts nor --emissions
        main(["--graph", str(graph)])
    assert e.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_the_command_prints_no_traceback(bench_inputs):
    graph, texts, _ = bench_inputs
    p = subprocess.run([sys.executable, "-m", "wfst_bench.cli", "--graph", str(graph), "--texts", str(texts),
                        "--decoders", "foo"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == ["wfst-bench: error: argument --decoders: unknown decoder 'foo'; choose from "
                                     "greedy, cpu1, cpu, kaldi, cuda (see wfst-bench --help)"]


RECIPES = Path(__file__).resolve().parent.parent / "recipes"


@pytest.mark.parametrize("argv,message", [
    (["bench_stream.py", "--streams", "16,0"], "argument --streams: must be >= 1, got 0"),
    (["bench_stream.py", "--chunk-ms", "320,x"], "argument --chunk-ms: 'x' is not a number"),
    (["bench_stream.py", "--utterances", "0"], "argument --utterances: must be >= 1, got 0"),
    (["bench_stream.py", "--setups", "char,lage"], "argument --setups: unknown 'lage'; choose from char, bpe,"),
    (["bench_rescore.py", "--setups", "dmeo"], "argument --setups: unknown 'dmeo'; choose from demo, large, wide"),
    (["bench_rescore.py", "--beam", "nan"], "argument --beam: must be a finite number > 0, got nan"),
    (["bench_fltop.py", "--repeat", "0"], "argument --repeat: must be >= 1, got 0"),
    (["bench_beam_search.py", "--json", "."], "argument --json: cannot write .: it is a directory"),
    (["compare_decoders.py", "--decoders", "kaldy"], "argument --decoders: unknown 'kaldy'; choose from greedy,"),
    (["compare_topologies.py", "--profiles", "demo,demo"], "argument --profiles: 'demo' given twice"),
    (["compare_topologies.py", "--test-sentences", "-275"], "argument --test-sentences: must be >= 1, got -275"),
    (["bench_graph.py", "--topologies", "compact,fo"], "argument --topologies: unknown 'fo'"),
    (["bench_graph.py", "--out", "README.md"], "argument --out: README.md is a file, not a folder"),  # (a traceback)
    # (found out after the six graph builds)
    (["compare_topologies.py", "--out", "README.md/sub"], "argument --out: cannot write in README.md/sub: README.md "
                                                          "is not a directory"),
    (["bench_stream.py", "--chunk-ms", "150,170"], "argument --chunk-ms: 150 and 170 are both fed as 4 frames"),
    (["bench_beam_search.py", "--beam-sizes", "2", "2"], "argument --beam-sizes: 2 given twice"),
    (["bench_beam_search.py", "--lm-weights", "nan"], "argument --lm-weights: must be numbers in [0, 10000]"),
    (["compare_decoders.py", "--force", "--retime"], "argument --retime: not allowed with argument --force"),
    # a --json in folders still to be made passes (the recipes make them; it refused every make bench-* then)
    (["bench_fltop.py", "--json", "no/such/folder/b.json", "--graphs", "no/graphs"],
     "argument --graphs: no/graphs/char_compact holds no graph"),
])
def test_recipes_refuse_bad_options_before_any_work(argv, message, tmp_path):
    """As the console scripts do: one line, exit status 2 (a typo ran nothing and exited 0, a
    0 crashed after the work, an unwritable --json lost the whole run). Run where no graphs are,
    as on a fresh clone: the option is named, not the missing build/demo."""
    (tmp_path / "README.md").write_text("a file\n")
    p = subprocess.run([sys.executable, str(RECIPES / argv[0]), *argv[1:]], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"{argv[0]}: error: {message}"), p.stderr


def test_the_stream_bench_feeds_each_utterance_its_frames_once_in_order(monkeypatch):
    """bench_stream's loop, as a server's: every utterance's frames and no more, in order, at
    most n streams live (a version cut the last chunks past an utterance's end, into the
    batch's padding, and the streams searched more frames than the offline decode); the
    same where each call's chunks come as one array and their lengths (--batched)."""
    monkeypatch.syspath_prepend(str(RECIPES))
    import bench_stream
    import numpy as np

    class Fake:
        def __init__(self):
            self.fed, self.most = {}, 0

        def stream(self):
            s = object()
            self.fed[s] = []
            return s

        def advance(self, streams, chunks, lengths=None):
            self.most = max(self.most, len(streams))
            if lengths is not None:  # (one (N, T, V) array: each chunk its first lengths[k] frames)
                chunks = [chunk[:n] for chunk, n in zip(chunks, lengths, strict=True)]
            for s, chunk in zip(streams, chunks, strict=True):
                self.fed[s].append(chunk)

        def finish(self, streams):
            return [np.concatenate(self.fed.pop(s)) for s in streams]

    x = np.random.default_rng(0).standard_normal((7, 30, 3)).astype(np.float32)
    lengths = np.array([30, 1, 0, 17, 8, 9, 25])
    for n, step, rounds, batched in [(3, 4, False, False), (3, 4, True, False), (7, 8, False, False),
                                     (2, 100, False, False), (1, 1, False, False), (3, 4, False, True),
                                     (7, 8, False, True)]:
        dec = Fake()
        results, _, latencies = bench_stream.stream_loop(dec, x, lengths, n, step, rounds=rounds, batched=batched)
        for u, got in enumerate(results):
            np.testing.assert_array_equal(got, x[u, :lengths[u]])
        assert 0 < dec.most <= n and not dec.fed and len(latencies) >= -(-lengths.max() // step)


def test_a_decoder_tuned_like_another_brings_it_along():
    """ours-cpu1-top4 alone ran at untuned defaults under a 'tuned' label."""
    from wfst_bench import compare

    target = compare.Target("t", Path("."), "char", "compact", Path("lm.arpa"), word_boundary="|")
    keys = [s.key for s in compare.decoder_systems(include=["ours-cpu1-top4", "ours-beam-cuda"])(target)]
    assert keys == ["ours-cpu1", "ours-cpu1-top4", "ours-beam", "ours-beam-cuda"]


def test_graphs_built_apart_report_their_own_peak(tiny, tmp_path, monkeypatch):
    """compare-topologies builds each graph in its own process (its peak memory was the
    process's after the graphs built before it); a failed build says so in one line."""
    monkeypatch.syspath_prepend(str(RECIPES))
    from demo_data import build_apart

    from wfst.errors import GraphBuildError

    kw = dict(lm=tiny / "lm.arpa", tokens=tiny / "tokens.txt", lexicon=tiny / "lexicon.txt", word_boundary="|")
    out = build_apart(tmp_path / "g", "compact", tmp_path / "cache", **kw)
    info = json.loads((out / "graph.json").read_text())
    assert info["topology"] == "compact" and 0 < info["stages"]["G (arpa2fst)"]["peak_rss_mb"] < 1e4
    with pytest.raises(GraphBuildError, match="building .*bad failed"):
        build_apart(tmp_path / "bad", "compact", tmp_path / "cache", **{**kw, "lm": tmp_path / "none.arpa"})
