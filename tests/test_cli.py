"""wfst-decode end to end on the tiny graph (wfst-bench: test_bench.py)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from wfst.graphs import compile_graph

import wfst
from wfst import synthetic
from wfst.cli import decode_main


@pytest.fixture
def tiny_setup(tiny, tmp_path):
    r = compile_graph(tmp_path / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    texts = ["ab ba", "abc", "a cab", "ba abc"]
    x, lengths = synthetic.from_texts(texts, g.tokens, word_boundary="|", seed=0, confusion=0.0)
    synthetic.save_npz(tmp_path / "em.npz", x, lengths, texts)
    return r.directory, tmp_path / "em.npz", texts


def test_decode_cli_prints_hypotheses_wer_rtfx(tiny_setup, tmp_path, capsys):
    graph, em, texts = tiny_setup
    out = tmp_path / "hyp.txt"
    assert decode_main(["--graph", str(graph), "--emissions", str(em), "--output", str(out), "--batch-size", "3"]) == 0
    text = capsys.readouterr().out
    assert "0\tab ba" in text and "WER 0.00% (0/7" in text and "RTFx" in text and "SYNTHETIC" in text
    # a max_active below the default min_active alone is taken (min_active follows it)
    assert decode_main(["--graph", str(graph), "--emissions", str(em), "--max-active", "5"]) == 0
    assert "0\tab ba" in capsys.readouterr().out
    assert out.read_text().splitlines() == texts


def test_decode_cli_refs_file_and_errors(tiny_setup, tmp_path, capsys):
    graph, em, texts = tiny_setup
    refs = tmp_path / "refs.txt"
    refs.write_text("ab ba\nabc\na\nba abc\n")
    assert decode_main(["--graph", str(graph), "--emissions", str(em), "--refs", str(refs), "--quiet"]) == 0
    assert "WER 16.67% (1/6: 0 sub, 1 ins, 0 del)" in capsys.readouterr().out
    refs.write_text("one line\n")
    assert decode_main(["--graph", str(graph), "--emissions", str(em), "--refs", str(refs)]) == 2
    assert "1 lines but" in capsys.readouterr().err
    assert decode_main(["--graph", str(tmp_path / "none"), "--emissions", str(em)]) == 2
    assert "cannot read graph" in capsys.readouterr().err


def test_decode_cli_inputs_it_cannot_use_are_said_before_decoding(tiny_setup, tmp_path, capsys, monkeypatch):
    graph, em, texts = tiny_setup
    np.save(tmp_path / "x.npy", np.zeros((1, 4, 5), np.float32))
    assert decode_main(["--graph", str(graph), "--emissions", str(tmp_path / "x.npy")]) == 2
    assert "x.npy: one float32 array of shape (1, 4, 5) (a .npy file), not an .npz" in capsys.readouterr().err
    (graph / "lexicon.txt").unlink()  # word times cannot be had: known before any decoding
    monkeypatch.setattr(wfst.Decoder, "decode", lambda *a, **k: pytest.fail("decoded first"))
    assert decode_main(["--graph", str(graph), "--emissions", str(em), "--ctm", str(tmp_path / "o.ctm")]) == 2
    assert "word times need the graph's lexicon and topology" in capsys.readouterr().err


def test_wer_without_reference_words_is_undefined(tiny_setup, tmp_path, capsys):
    graph, em, _ = tiny_setup
    (tmp_path / "refs.txt").write_text("\n" * 4)
    assert decode_main(["--graph", str(graph), "--emissions", str(em), "--refs", str(tmp_path / "refs.txt")]) == 0
    assert "WER undefined (the references have no words) (7/0: 0 sub, 7 ins, 0 del)" in capsys.readouterr().out


def test_decode_cli_streams_print_partials_then_the_offline_finals(tiny_setup, tmp_path, capsys):
    graph, em, texts = tiny_setup
    base = ["--graph", str(graph), "--emissions", str(em), "--batch-size", "2"]
    assert decode_main(base + ["--output", str(tmp_path / "offline.txt")]) == 0
    tokens = capsys.readouterr().out.split("frames/s, ")[1].split()[0]
    assert decode_main(base + ["--frame-ms", "1000", "--quiet", "--output", str(tmp_path / "slow.txt")]) == 0
    assert (tmp_path / "slow.txt").read_text() == (tmp_path / "offline.txt").read_text()  # (--chunk-ms is streams')
    assert decode_main(base + ["--stream", "--chunk-ms", "80", "--output", str(tmp_path / "streams.txt")]) == 0
    out = capsys.readouterr().out
    partials, finals = out.split("\nfinal:\n")
    assert " | " in partials and "0.08 s" in partials  # stable words | the rest, as the audio comes
    assert "0\tab ba" in finals and "streams of 2 frames (80 ms) a chunk, 2 at a time" in finals
    assert f"frames/s, {tokens} tokens/frame (last batch)" in finals and tokens != "0"  # (finish() searches none)
    assert (tmp_path / "streams.txt").read_text() == (tmp_path / "offline.txt").read_text()
    cuda = tmp_path / "cuda_streams.txt"  # (Numba's CUDA simulator without a GPU)
    assert decode_main(base + ["--stream", "--device", "cuda", "--quiet", "--output", str(cuda)]) == 0
    assert cuda.read_text() == (tmp_path / "offline.txt").read_text()


@pytest.mark.parametrize("frame_ms", [40, 10])
def test_decode_cli_stream_endpoints_count_seconds_of_frame_ms(tiny_setup, tmp_path, capsys, frame_ms):
    """An utterance, then 150 frames of blank: the endpoint comes after at least 0.5 s of
    trailing silence (Kaldi's shortest rule) at the frames' length (at 10 ms it came after
    the frames of 40 ms: 0.13 s)."""
    graph, em, _ = tiny_setup
    data = np.load(em)
    x, n = data["log_probs"][:1, :int(data["lengths"][0])], int(data["lengths"][0])
    blank = np.full((1, 150, x.shape[2]), -30.0, np.float32)
    blank[..., 0] = 0.0
    speech_end = int(np.flatnonzero(x[0].argmax(1) != 0).max()) + 1
    synthetic.save_npz(tmp_path / "pause.npz", np.concatenate([x, blank], 1), np.array([n + 150]), ["ab ba"])
    assert decode_main(["--graph", str(graph), "--emissions", str(tmp_path / "pause.npz"), "--stream",
                        "--frame-ms", str(frame_ms), "--chunk-ms", str(frame_ms)]) == 0
    ends = [line.split("\t")[1] for line in capsys.readouterr().out.splitlines() if line.endswith("(endpoint)")]
    assert ends, "no endpoint in 150 frames of blank"
    frame = round(float(ends[0].split()[0]) * 1000 / frame_ms)
    assert (frame - speech_end) * frame_ms >= 500 and frame < speech_end + 150


def test_decode_cli_boosts_rescores_and_prunes_tokens_as_the_api_does(tiny, tiny_setup, tmp_path, capsys):
    """--phrases (words and phrases, with a reward or the default one), --rescore-lm (with
    a --context-beam) and FLToP's options give the words Decoder gives with the same settings, offline and as
    streams; the summary says what was on."""
    from wfst.config import PHRASE_REWARD
    from wfst.lm import truncate_arpa

    graph, em, texts = tiny_setup
    data = np.load(em)
    x, lengths = data["log_probs"], data["lengths"]

    def cli(*options) -> list[str]:
        out = tmp_path / "hyp.txt"
        assert decode_main(["--emissions", str(em), "--quiet", "--output", str(out), *options]) == 0
        return out.read_text().splitlines()

    def api(g, boost=None, **options) -> list[str]:
        return [r.text for r in wfst.Decoder(g, **options).decode(x, lengths, boost=boost)]

    boosts = tmp_path / "boost.txt"
    boosts.write_text("abc\t-30\n\nab  ba\nzz\n")  # a penalty, a phrase with the default reward, an unknown word
    boost = {"abc": -30.0, "ab ba": PHRASE_REWARD}
    want = api(graph, boost)
    assert want != texts and want != api(graph)  # (the penalty changes the words: the option is read)
    assert cli("--graph", str(graph), "--phrases", str(boosts)) == want
    assert cli("--graph", str(graph), "--phrases", str(boosts), "--stream", "--chunk-ms", "80") == want
    out, err = capsys.readouterr()
    assert "2 boosted words or phrases" in out  # (the unknown word is not counted, and said in the command's words)
    assert err.count(f"1 of the 3 words or phrases of {boosts} are not in the graph's vocabulary and are ignored: "
                     f"'zz'") == 2 and "Decoder.stats" not in err and "Stream." not in err

    unigram = truncate_arpa(tiny / "lm.arpa", tmp_path / "lm1.arpa", 1)  # a graph on a smaller LM, rescored
    small = compile_graph(tmp_path / "g1", tokens=tiny / "tokens.txt", lm=unigram, lexicon=tiny / "lexicon.txt",
                          word_boundary="|", topology="compact").directory
    want = api(small, rescore_lm=tiny / "lm.arpa")
    assert cli("--graph", str(small), "--rescore-lm", str(tiny / "lm.arpa")) == want
    assert cli("--graph", str(small), "--rescore-lm", str(tiny / "lm.arpa"), "--graph-lm", str(unigram),
               "--stream") == want
    assert f"rescored on the fly with {tiny / 'lm.arpa'}" in capsys.readouterr().out
    cli("--graph", str(small), "--rescore-lm", str(tiny / "lm.arpa"), "--graph-lm", str(tiny / "lm.arpa"))
    err = capsys.readouterr().err  # (not the graph's LM: the warning names the option)
    assert f"warning: --graph-lm {tiny / 'lm.arpa'} is not the file the graph was built with" in err
    want = api(small, rescore_lm=tiny / "lm.arpa", rescore_mode="lattice", lattice_beam=6.0)
    assert cli("--graph", str(small), "--rescore-lm", str(tiny / "lm.arpa"), "--rescore-mode", "lattice",
               "--lattice-beam", "6") == want
    assert f"lattices rescored with {tiny / 'lm.arpa'}" in capsys.readouterr().out
    want = api(small, rescore_lm=tiny / "lm.arpa", context_beam=0.0)
    assert cli("--graph", str(small), "--rescore-lm", str(tiny / "lm.arpa"), "--context-beam", "0") == want
    assert "context_beam=0" in capsys.readouterr().out

    want = api(graph, token_top_n=2, token_rel_threshold=0.5)
    assert cli("--graph", str(graph), "--token-top-n", "2", "--token-rel-threshold", "0.5") == want
    assert "FLToP top_n=2, rel_threshold=0.5" in capsys.readouterr().out


def test_decode_cli_bad_boosts_and_rescoring_lms_are_one_line(tiny_setup, tmp_path, capsys):
    graph, em, _ = tiny_setup
    base = ["--graph", str(graph), "--emissions", str(em), "--quiet"]
    boosts = tmp_path / "boost.txt"
    boosts.write_text("ab\t2\nba\tlots\n")
    assert decode_main(base + ["--phrases", str(boosts)]) == 2
    assert "boost.txt:2: reward 'lots' is not a number" in capsys.readouterr().err
    assert decode_main(base + ["--phrases", str(tmp_path / "none.txt")]) == 2
    assert "none.txt" in capsys.readouterr().err
    boosts.write_text("ab ba\t2\nba\t1\nab  ba\t3\n")  # which reward was meant cannot be told
    assert decode_main(base + ["--phrases", str(boosts)]) == 2
    assert "boost.txt:3: 'ab ba' is listed again (first on line 1)" in capsys.readouterr().err
    for text, message in (("ab\t1\nba\tnan\n", "boost.txt:2: 'ba': reward nan must be a finite number"),  # the
                          ("ba\t2e4\n", "boost.txt:1: 'ba': reward 20000 is above 10000"),  # decoder's checks,
                          ("ab\n\t3\n", "boost.txt:2: a reward (3) but no word or phrase before it"),  # of the line
                          ("ab\t1_0\n", "boost.txt:1: reward '1_0' is not a number"),  # (float() read 10)
                          ("ab\t\u0663\n", "boost.txt:1: reward '\u0663' is not a number")):  # (and an Arabic 3)
        boosts.write_text(text)  # (were "utterance 0: ..."; a lone reward was skipped)
        assert decode_main(base + ["--phrases", str(boosts)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert decode_main(base + ["--rescore-lm", str(tmp_path / "big.arpa")]) == 2
    assert "cannot read language model (ARPA or LM store file)" in capsys.readouterr().err


def test_decode_cli_rtfx_leaves_out_numba_compiling():
    """A first run with new options compiles parts of the search: its RTFx counts the
    decoding only (wfst-decode says the compiling apart), nested compiles once."""
    import time

    from numba.core import event

    from wfst.cli import _Clock

    clock = _Clock()
    with clock():
        with event.trigger_event("numba:compile", data={}):
            time.sleep(0.1)
            with event.trigger_event("numba:compile", data={}):  # (a function compiled for another)
                time.sleep(0.2)
        time.sleep(0.1)
    with clock():
        time.sleep(0.05)
    assert 0.3 <= clock.compiling < 0.45 and 0.15 <= clock.seconds < 0.3


def test_decode_cli_nbest_and_confidences(tiny_setup, capsys):
    graph, em, texts = tiny_setup
    assert decode_main(["--graph", str(graph), "--emissions", str(em), "--lattice-beam", "6", "--nbest", "3"]) == 0
    out = capsys.readouterr().out
    assert "0\tab ba\n\tconfidences ab:" in out and "\t1. " in out and "WER 0.00%" in out
    first = out.split("\n1\t")[0]
    assert first.split("\t1. ")[1].split("\t")[1].startswith("ab ba")  # the 1-best heads its N-best list


def test_detokenize_inverts_tokenize(demo):
    tokens = wfst.TokenTable.read(demo / "bpe_tokens.txt")
    text = "it is a truth universally acknowledged"
    assert synthetic.detokenize(synthetic.tokenize(text, tokens, spm=demo / "bpe.model"), tokens) == text
    chars = wfst.TokenTable.read(demo / "chars_tokens.txt")
    ids = synthetic.tokenize(text, chars, word_boundary="|")
    assert synthetic.detokenize(ids, chars, word_boundary="|") == text
    assert np.all(np.array(ids) < chars.num_columns)


@pytest.mark.parametrize("options,message", [
    (["--beam", "-1"], "--beam=-1.0: must be a finite number > 0"),
    (["--threads", "0"], "argument --threads=0: must be an integer >= 1"),
    (["--max-active", "5", "--min-active", "9"], "--min-active=9: must be an integer in [0, --max-active=5]"),
    (["--batch-size", "0"], "--batch-size: must be >= 1"),
    (["--beam", "wide"], "argument --beam: invalid float value: 'wide'"),
    (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    (["--stream", "--chunk-ms", "10"], "--chunk-ms: must be a finite number of ms, at least one frame (40 ms)"),
    (["--stream", "--chunk-ms", "inf"], "--chunk-ms: must be a finite number of ms"),  # was an OverflowError
    (["--stream", "--chunk-ms", "1e308", "--frame-ms", "0.001"], "--chunk-ms: must be a finite number of ms"),
    # (no "None (no lattice) or": an option is never None; "a smaller beam" is the lattice's, not --beam)
    (["--lattice-beam", "0"], "--lattice-beam=0.0: must be a finite number >= 0.1 (float32 path costs round by more "
                              "than a smaller beam on"),
    (["--lattice-beam", "1e-6"], "could prune the best path itself"),
    (["--nbest", "3"], "--nbest: N-best lists come from the lattice; give --lattice-beam too"),
    (["--lattice-beam", "8", "--nbest", "0"], "--nbest: must be >= 1"),
    (["--confidence-calibration", "cal.json"], "--confidence-calibration: confidences come from the lattice"),
    (["--graph-lm", "lm.arpa"], "--graph-lm: names the graph's LM for --rescore-lm; give --rescore-lm too"),
    (["--rescore-mode", "lattice"], "--rescore-mode: says how --rescore-lm rescores; give --rescore-lm too"),
    (["--rescore-lm", "lm.arpa", "--rescore-mode", "lattice"], "--rescore-mode: lattice rescores the search's word "
                                                               "lattices; give --lattice-beam too"),
    (["--rescore-lm", "lm.arpa", "--rescore-mode", "both"], "--rescore-mode: invalid choice: 'both'"),
    (["--token-top-n", "0"], "--token-top-n=0: must be an integer >= 1"),
    (["--token-rel-threshold", "2"], "--token-rel-threshold=2.0: must be a number in [0, 1]"),
    (["--spm", "bpe.model"], "--spm: is for --beam-search"),
    (["--lm-weight", "100"], "--lm-weight: is for --beam-search, not the graph search"),  # (it was ignored)
    (["--beam-size", "1"], "--beam-size: is for --beam-search, not the graph search"),
    (["--context-beam", "-1", "--phrases", "p.txt"],
     "--context-beam=-1.0: must be a finite number >= 0"),
    (["--context-beam", "4"], "--context-beam: prunes the contexts of --rescore-lm or --phrases"),  # (were ignored)
    (["--chunk-ms", "80"], "--chunk-ms: is the chunk of --stream; give --stream too"),
    (["--lattice-beam", "8", "--confidence-calibration", "/no/cal.json"],
     "cannot read confidence calibration /no/cal.json: not found"),
])
def test_decode_cli_bad_options_are_one_line(tiny_setup, capsys, options, message):
    graph, em, _ = tiny_setup
    with pytest.raises(SystemExit) as e:
        decode_main(["--graph", str(graph), "--emissions", str(em), *options])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith("wfst-decode: error: ")
    assert message in err and "Traceback" not in err


def test_decode_cli_never_writes_over_its_inputs(tiny_setup, tmp_path, capsys):
    graph, em, _ = tiny_setup
    refs = tmp_path / "refs.txt"
    refs.write_text("ab\n" * 7)
    before = em.read_bytes()
    for options, message in ((["--ctm", str(em)], f"--ctm: {em} is the --emissions file"),
                             (["--output", str(refs), "--refs", str(refs)], "--output: .*refs.txt is the --refs file"),
                             (["--output", str(tmp_path / "o.txt"), "--ctm", str(tmp_path / "." / "o.txt")],
                              "--ctm: .*o.txt is the --output file")):
        with pytest.raises(SystemExit) as e:
            decode_main(["--graph", str(graph), "--emissions", str(em), *options])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1 and re.search(message, err), err
    assert em.read_bytes() == before and refs.read_text() == "ab\n" * 7


def test_decode_cli_refuses_outputs_in_the_graph_directory_and_frames_it_cannot_time(tiny_setup, tmp_path, capsys,
                                                                                      monkeypatch):
    """--output g/words.txt broke the graph (through a link too); --frame-ms 1e-320 ended in a
    traceback after the decode; '' (an unset variable), a folder's name or '-' wrote nothing or
    a file named so; another user's file in a sticky folder (/tmp) failed after the decode."""
    from wfst import files

    graph, em, _ = tiny_setup
    words = (graph / "words.txt").read_bytes()
    (tmp_path / "link.txt").symlink_to(graph / "words.txt")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "theirs.ctm").write_text("")
    monkeypatch.setattr(files.os, "geteuid", lambda: 4242, raising=False)  # (not root, not the owner)
    for options, message in ((["--output", str(graph / "words.txt")], "--output: .*words.txt is in the --graph"),
                             (["--output", str(tmp_path / "link.txt")], "--output: .*link.txt is in the --graph"),
                             (["--output", ""], "--output: '' names no file \\(an unset variable"),
                             (["--ctm", "out/"], "--ctm: 'out/' names no file but a folder"),
                             (["--output", "-"], "--output: '-' names no file \\(the results go to standard output"),
                             (["--ctm", str(sticky / "theirs.ctm")], "theirs.ctm is another user's, in a folder where "
                                                                     "only its owner may replace it"),
                             (["--ctm", str(graph / "new.ctm")], "--ctm: .*new.ctm is in the --graph directory"),
                             (["--frame-ms", "1e-320"], r"--frame-ms: must be a number of milliseconds in \[0.001, "),
                             (["--frame-ms", "1e300"], "--frame-ms: must be a number of milliseconds")):
        with pytest.raises(SystemExit) as e:
            decode_main(["--graph", str(graph), "--emissions", str(em), *options])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1 and re.search(message, err), err
    assert (graph / "words.txt").read_bytes() == words


@pytest.mark.parametrize("mode", ["batches", "streams"])
def test_decode_cli_names_the_files_utterance_and_frame(tiny_setup, tmp_path, capsys, mode):
    """A NaN in utterance 3 at frame 5 read "utterance 1" with --batch-size 2, "stream 0: chunk
    frame 1" in streams; a dead utterance 3 was "utterance 1" too."""
    graph, em, _ = tiny_setup
    d = synthetic.load_npz(em)
    x = d.log_probs.copy()
    x[3, 5, 2] = np.nan
    synthetic.save_npz(tmp_path / "nan.npz", x, d.lengths, d.texts)
    stream = ["--stream", "--chunk-ms", "160"] if mode == "streams" else []
    argv = ["--graph", str(graph), "--batch-size", "2", "--quiet", *stream]
    assert decode_main([*argv, "--emissions", str(tmp_path / "nan.npz")]) == 2
    assert capsys.readouterr().err.startswith(f"wfst-decode: error: {tmp_path / 'nan.npz'}: utterance 3: log_probs at "
                                              f"frame 5 has NaN or +inf")
    x, lengths = d.log_probs.copy(), d.lengths.copy()
    x[3, :4] = -np.inf  # a b c b: no word holds "cb", and words are parted by "|"
    x[3, np.arange(4), [2, 3, 4, 3]] = 0.0
    lengths[3] = 4
    synthetic.save_npz(tmp_path / "dead.npz", x, lengths, d.texts)
    assert decode_main([*argv, "--emissions", str(tmp_path / "dead.npz")]) == 0
    err = capsys.readouterr().err
    assert "warning: 1 utterance(s) have no path through all their frames (utterance 3)" in err and err.count(
        "no path") == 1, err
    ids = [f"spk{b}-utt" for b in range(len(lengths))]  # the file's ids named beside the numbers, as lines show them
    synthetic.save_npz(tmp_path / "dead.npz", x, lengths, d.texts, utt_ids=ids)
    assert decode_main([*argv, "--emissions", str(tmp_path / "dead.npz")]) == 0
    assert "have no path through all their frames (utterance 3 (spk3-utt))" in capsys.readouterr().err
    x[3, 2, 2] = np.nan
    synthetic.save_npz(tmp_path / "nan.npz", x, lengths, d.texts, utt_ids=ids)
    assert decode_main([*argv, "--emissions", str(tmp_path / "nan.npz")]) == 2
    assert f"{tmp_path / 'nan.npz'}: utterance 3 (spk3-utt): log_probs at frame 2" in capsys.readouterr().err


def test_decode_cli_writes_its_files_before_stdout_and_through_links(tiny_setup, tmp_path):
    """| head closed stdout before --output and --ctm were written: both lost. A symlink (to a
    file, or /proc/self/fd/1) was replaced by a file; a file replaced lost its mode."""
    graph, em, texts = tiny_setup
    for stream in ([], ["--stream"]):  # (streams print their partial results while they decode: the files after)
        out, ctm = tmp_path / f"o{len(stream)}.txt", tmp_path / f"o{len(stream)}.ctm"
        p = subprocess.Popen([sys.executable, "-m", "wfst.cli", "--graph", str(graph), "--emissions", str(em),
                              "--output", str(out), "--ctm", str(ctm), *stream], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        p.stdout.close()
        err = p.stderr.read()
        assert p.wait(timeout=120) == 141 and out.read_text().splitlines() == texts and ctm.read_text(), err
        assert b"Traceback" not in err
    (tmp_path / "link.txt").symlink_to("target.txt")
    (tmp_path / "kept.txt").write_text("old\n")
    (tmp_path / "kept.txt").chmod(0o640)
    assert decode_main(["--graph", str(graph), "--emissions", str(em), "--quiet", "--output",
                        str(tmp_path / "link.txt"), "--ctm", str(tmp_path / "kept.txt")]) == 0
    assert (tmp_path / "link.txt").is_symlink() and (tmp_path / "target.txt").read_text().splitlines() == texts
    assert (tmp_path / "kept.txt").stat().st_mode & 0o777 == 0o640 and "ab" in (tmp_path / "kept.txt").read_text()
    (tmp_path / "stdout").symlink_to("/proc/self/fd/1")  # (as /dev/stdout is: which root's run replaced)
    p = subprocess.run([sys.executable, "-m", "wfst.cli", "--graph", str(graph), "--emissions", str(em), "--quiet",
                        "--output", str(tmp_path / "stdout")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.splitlines()[:4] == texts and (tmp_path / "stdout").is_symlink()
    with open(tmp_path / "all.txt", "w") as f:  # (stdout sent to a file: written from its start, then over)
        p = subprocess.run([sys.executable, "-m", "wfst.cli", "--graph", str(graph), "--emissions", str(em),
                            "--ctm", str(tmp_path / "stdout")], stdout=f, timeout=120)
    lines = (tmp_path / "all.txt").read_text().splitlines()
    ctm = [line for line in lines if re.fullmatch(r"\d+ 1 [\d.]+ [\d.]+ \w+", line)]
    assert p.returncode == 0 and lines[:len(ctm)] == ctm and len(ctm) == 7
    assert lines[len(ctm):len(ctm) + 4] == [f"{b}\t{t}" for b, t in enumerate(texts)]


def test_decode_cli_beam_search_without_a_graph(tiny_setup, tmp_path, capsys):
    """--beam-search: the lexicon-free decoder on the same emissions, phrases from a file
    (with and without a reward), N-best lists, on either device; and the options it
    refuses, in one line."""
    _, em, texts = tiny_setup
    tokens = tmp_path / "tokens.txt"  # the tiny fixture's, in the same folder
    phrases = tmp_path / "phrases.txt"
    phrases.write_text("ab ba\t2.0\n\ncab\n")
    base = ["--beam-search", "--tokens", str(tokens), "--emissions", str(em), "--token-insertion", "0"]
    out = tmp_path / "hyp.txt"
    assert decode_main(base + ["--phrases", str(phrases), "--nbest", "2", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "beam search: beam_size=8" in text and "WER 0.00% (0/7" in text and "\t1. " in text
    assert out.read_text().splitlines() == texts
    on_gpu, ctm = tmp_path / "hyp_cuda.txt", tmp_path / "out.ctm"  # (the simulator without a GPU)
    assert decode_main(base + ["--phrases", str(phrases), "--device", "cuda", "--quiet", "--output", str(on_gpu),
                               "--ctm", str(ctm)]) == 0
    assert on_gpu.read_text() == out.read_text()
    lines = [line.split() for line in ctm.read_text().splitlines()]
    assert [w[4] for w in lines] == " ".join(texts).split() and all(float(w[3]) > 0 for w in lines)
    for extra, message in ((["--graph", "g"], "decodes without a graph"), (["--stream"], "--stream: not available"),
                           (["--beam", "3"], "--beam: is for the graph search"),  # was silently ignored
                           (["--rescore-lm", "lm.arpa"], "--rescore-lm: is for the graph search"),
                           (["--token-top-n", "3"], "--token-top-n: is for the graph search"),
                           (["--threads", "-2"], "--threads: must be >= 1"),
                           (["--batch-size", "0"], "--batch-size: must be >= 1"),  # (unchecked here: a traceback)
                           (["--frame-ms", "-40"], "--frame-ms: must be a number of milliseconds in"),
                           (["--ctm", str(tmp_path / "no" / "a.ctm")], "--ctm: cannot write")):  # was after decoding
        with pytest.raises(SystemExit) as e:  # usage errors: argparse's exit, one line
            decode_main(base + extra)
        assert e.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        decode_main(["--emissions", str(em)])
    assert "required: --graph (or --beam-search" in capsys.readouterr().err
    for extra, message in ((["--beam-size", "0"], "argument --beam-size=0: must be"),  # the decoder's own checks,
                           (["--beam-size", "300000000"],  # (numpy's MemoryError, a traceback)
                            "argument --beam-size=300000000: --beam-size x the 5 tokens must be at most 2**30"),
                           (["--token-insertion", "nan"], "argument --token-insertion=nan: must be a finite")):
        with pytest.raises(SystemExit) as e:  # said with the options' names (was "beam_size=0")
            decode_main(base + extra)
        assert e.value.code == 2 and message in capsys.readouterr().err
    assert decode_main(base + ["--spm", str(tmp_path / "nope.model")]) == 2  # (decoded with '|' in the words)
    assert "cannot read sentencepiece model (spm)" in capsys.readouterr().err
    phrases.write_text("ab\tlots\n")
    assert decode_main(base + ["--phrases", str(phrases)]) == 2
    assert "phrases.txt:1: reward 'lots' is not a number" in capsys.readouterr().err


def test_commands_show_warnings_and_interrupts_as_one_line(capsys):
    """A command's warnings name the command, not the library line that raised them; Ctrl-C
    is one line and exit status 130, not a traceback."""
    import warnings

    from wfst.cli import command

    @command("wfst-x")
    def main(interrupt: bool) -> int:
        warnings.warn("the LM has 3 unreachable words", UserWarning)
        if interrupt:
            raise KeyboardInterrupt
        return 0

    assert main(False) == 0
    assert capsys.readouterr().err == "wfst-x: warning: the LM has 3 unreachable words\n"
    assert main(True) == 130
    assert capsys.readouterr().err.splitlines()[-1] == "wfst-x: interrupted"


def test_a_terminated_command_cleans_up_its_temporary_files(tmp_path):
    """SIGTERM (a scheduler's or `timeout`'s stop) ended Python at once: a graph build killed
    so left its /tmp/wfst-G-* folder behind.  Now the command's context managers run first,
    it says so in one line and exits with 143; the handler before it comes back after."""
    import signal

    script = tmp_path / "slow.py"
    script.write_text(
        "import signal, sys, tempfile, time\n"
        "from wfst.cli import command\n"
        "@command('wfst-x')\n"
        "def main():\n"
        f"    with tempfile.TemporaryDirectory(dir={str(tmp_path)!r}) as tmp:\n"
        "        print(tmp, flush=True)\n"
        "        time.sleep(60)\n"
        "status = main()\n"
        "assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL\n"
        "sys.exit(status)\n")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    folder = p.stdout.readline().strip()
    assert os.path.isdir(folder)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 143
    assert p.stderr.read() == "wfst-x: terminated\n" and not os.path.exists(folder)


def test_a_reader_that_stops_early_gets_no_traceback(tiny_setup):
    """wfst-decode ... | head: the pipe closes before the output is printed (a traceback and
    exit status 1 on one run in three)."""
    graph, em, _ = tiny_setup
    p = subprocess.Popen([sys.executable, "-m", "wfst.cli", "--graph", str(graph), "--emissions", str(em)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # (before decoding is done: every print meets the closed pipe)
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141 and "Traceback" not in err and "Broken pipe" not in err, err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full is Linux's")
def test_a_full_stdout_is_one_line_of_error(tiny_setup):
    """> /dev/full (a full disk): an uncaught OSError's traceback, exit status 1."""
    graph, em, _ = tiny_setup
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "wfst.cli", "--graph", str(graph), "--emissions", str(em)],
                           stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr == "wfst-decode: error: cannot write the output: No space left on device\n"
