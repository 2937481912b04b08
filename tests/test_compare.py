"""wfst_bench.compare, .systems and .peers: resumable cells, tuning on dev only, tables, peers, goal checks."""
from __future__ import annotations

import csv
import io
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from arpa_files import random_arpa
from wfst.graphs import compile_graph
from wfst_bench import compare, peers, systems
from wfst_bench.machine import gpu_name
from wfst_bench.peers import DecodeRun, PeerUnavailable

import wfst
from wfst import synthetic
from wfst.config import usable_cores

TEXTS = ["ab ba", "abc", "a cab", "ba abc"]


@pytest.fixture
def tiny_target(tiny, tmp_path):
    r = compile_graph(tmp_path / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    token_lm = random_arpa(tmp_path / "tokens.arpa", ("|", "a", "b", "c"), 3, seed=0)
    return systems.Target("tiny_compact", r.directory, "char", "compact", tiny / "lm.arpa", word_boundary="|",
                          token_lm=token_lm)


# --------------------------------------------------------------------------- cells and resume

def test_cell_store_returns_a_result_only_for_the_same_settings(tmp_path):
    store = compare.CellStore(tmp_path / "cells")
    settings = {"beam": 16.0, "point": (1, 2), "nested": {"b": 1, "a": [0.5]}}
    assert store.load("dev/x", settings) is None
    store.save("dev/x", settings, {"wer": 0.25})
    assert store.load("dev/x", {"nested": {"a": [0.5], "b": 1}, "point": [1, 2], "beam": 16.0}) == {"wer": 0.25}
    assert store.load("dev/x", {**settings, "beam": 12.0}) is None
    assert store.load("dev/y", settings) is None
    # one readable file per cell, named after the key
    files = list((tmp_path / "cells").iterdir())
    assert len(files) == 1 and json.loads(files[0].read_text())["key"] == "dev/x"
    files[0].write_text("{ truncated")  # a damaged file is recomputed, not trusted
    assert store.load("dev/x", settings) is None


def test_a_stored_result_without_its_numbers_is_measured_again(tiny_target, tmp_path, capsys):
    """A cell of an older result format, or edited: a test cell without its WER printed "-", a
    dev cell's raised a KeyError in the tuning, a null result an AttributeError."""
    calls = []

    def make(target):
        return [FakeSystem("fake", "a fake decoder", grid={"param": [1, 2, 3]}, points=[{"beam": 9}], calls=calls)]

    kw = dict(dev_texts=TEXTS[:2], test_texts=TEXTS, profiles=["demo"], progress=False, repeat=1)
    first = compare.run_experiment(tmp_path / "out", [tiny_target], make, **kw)
    cells = sorted((tmp_path / "out" / "cells").iterdir())
    assert len(cells) == 4  # (3 dev cells, then the test cell)
    for path, damage in zip([cells[0], cells[1], cells[3]], ("wer", None, "seconds")):
        data = json.loads(path.read_text())
        if damage is None:
            data["result"] = None
        else:
            data["result"][damage] = "0.5"
        path.write_text(json.dumps(data))
    calls.clear()
    capsys.readouterr()
    again = compare.run_experiment(tmp_path / "out", [tiny_target], make, **kw)
    assert len(calls) == 3 and again["ran"] == 3 and again["rows"][0]["wer"] == first["rows"][0]["wer"]
    err = capsys.readouterr().err
    assert err.count("; measured again") == 3 and "its result is a NoneType, not an object" in err
    assert "its result's wer is '0.5', not a number >= 0" in err


def test_a_peer_failing_while_it_decodes_gets_a_row_and_the_run_goes_on(tiny_target, tmp_path):
    """A worker that crashed in decode() (not in setup) ended the whole run with no results;
    and a folder named work in --out, the user's, was removed at the end."""
    (tmp_path / "out" / "work").mkdir(parents=True)
    (tmp_path / "out" / "work" / "notes.txt").write_text("mine")

    class Crashing(FakeSystem):
        def decode(self, em, params, *, timed, repeat=1):
            if params.get("param") == 2:
                raise PeerUnavailable("its worker failed (exit 139)")
            return super().decode(em, params, timed=timed, repeat=repeat)

    calls = []
    res = compare.run_experiment(
        tmp_path / "out", [tiny_target],
        lambda t: [Crashing("crash", "a crashing peer", grid={"param": [1, 2]}, points=[{"beam": 9}], calls=calls),
                   FakeSystem("fake", "a fake decoder", grid={"param": [2, 3]}, points=[{"beam": 9}], calls=calls)],
        dev_texts=TEXTS[:2], test_texts=TEXTS, profiles=["demo"], progress=False, repeat=1)
    rows = {r["system"]: r for r in res["rows"]}
    assert rows["crash"]["status"] == "not measured: its worker failed (exit 139)" and len(res["rows"]) == 2
    assert rows["fake"]["status"] == "ok" and rows["fake"]["tuned"] == "param=2"
    assert (tmp_path / "out" / "work" / "notes.txt").read_text() == "mine"


def test_ours_on_every_core_is_keyed_by_its_thread_count(tiny_target):
    """threads=None was the key: a cell of 2 threads was reused under a taskset of 1 and labelled "1 threads"."""
    assert systems.OursSystem("x", "x", threads=None).fixed["threads"] == usable_cores()
    label = next(s.label for s in compare.decoder_systems(True, "v", None)(tiny_target) if s.key == "ours-cpu")
    assert label == f"ours, CPU, {usable_cores()} thread" + ("s" if usable_cores() > 1 else "")


def test_cell_runner_skips_finished_cells(tmp_path):
    store = compare.CellStore(tmp_path)
    calls = []

    def compute(i):
        calls.append(i)
        return {"value": i}

    for force in (False, False, True):
        run = compare.CellRunner(store, 3, progress=False, force=force)
        got = [run(f"cell{i}", {"i": i}, lambda i=i: compute(i)) for i in range(3)]
        run.close()
        assert got == [{"value": i} for i in range(3)]
    assert calls == [0, 1, 2, 0, 1, 2]  # second run: nothing; third (force): everything again


class FakeSystem(systems.System):
    """Hypotheses chosen by `param`: on dev, only param=2 is right; on test, only param=3.
    Tuning must pick 2: the test split is never looked at to choose."""

    family = "fake"

    def __init__(self, *a, calls, **kw):
        super().__init__(*a, **kw)
        self.calls = calls

    def decode(self, em, params, *, timed, repeat=1):
        self.calls.append((em.split, em.profile, dict(params), timed))
        right = {"dev": 2, "test": 3}[em.split]
        hyps = [t.split() if params.get("param") == right else ["wrong"] for t in em.texts]
        return DecodeRun(hyps, 0.01 * len(em.texts), 5.0, 1.0)


def test_run_experiment_tunes_on_dev_and_resumes(tiny_target, tmp_path):
    calls = []

    def systems(target):
        return [FakeSystem("fake", "a fake decoder", grid={"param": [1, 2, 3]}, tune_point={"beam": 9},
                           points=[{"beam": 9}, {"beam": 4}], calls=calls)]

    kw = dict(dev_texts=TEXTS[:2], test_texts=TEXTS, profiles=["demo", "peaky"], progress=False, repeat=1)
    res = compare.run_experiment(tmp_path / "out", [tiny_target], systems, **kw)
    assert res["ran"] == 2 * (3 + 2) and res["skipped"] == 0
    assert [c[0] for c in calls if not c[3]] == ["dev"] * 6  # tuning decodes dev only ...
    assert all(c[0] == "test" and c[2]["param"] == 2 for c in calls if c[3])  # ... and test uses its choice
    rows = res["rows"]
    assert len(rows) == 4 and {r["tuned"] for r in rows} == {"param=2"}
    assert all(r["dev_wer"] == 0.0 and r["wer"] == 1.0 for r in rows)  # right on dev, wrong on test
    assert rows[0]["rtfx"] == pytest.approx(rows[0]["frames"] * 0.04 / 0.04)
    assert len(res["tuning"]) == 6

    calls.clear()
    again = compare.run_experiment(tmp_path / "out", [tiny_target], systems, **kw)
    assert calls == [] and again["ran"] == 0 and again["skipped"] == 10
    assert again["rows"] == rows

    # a changed test setting reruns only the test cells it changes; dev cells are kept
    calls.clear()
    compare.run_experiment(tmp_path / "out", [tiny_target], systems, **{**kw, "repeat": 3})
    assert len(calls) == 4 and all(c[0] == "test" for c in calls)

    # retime: the speeds are measured again, the tuning is kept
    calls.clear()
    res = compare.run_experiment(tmp_path / "out", [tiny_target], systems, retime=True, **kw)
    assert len(calls) == 4 and all(c[0] == "test" for c in calls) and res["skipped"] == 6


def test_graphs_of_one_token_set_name_share_emissions_only_where_their_tokens_and_words_agree(tiny, tiny_target,
                                                                                              tmp_path):
    """The emissions and their in-vocabulary marks were shared by the token_set name alone: a
    graph of other tokens decoded another's emissions (88.9% WER instead of 0), and one whose
    lexicon lacks a word took the first graph's vocabulary.  In the vocabulary now means some
    arc outputs the word (an LM word no spelling reaches is in words.txt too)."""
    seen = {}

    class Recording(systems.System):
        family = "fake"

        def decode(self, em, params, *, timed, repeat=1):
            seen.setdefault(self.target, em)
            return DecodeRun([t.split() for t in em.texts], 0.01, None, 1.0)

        def setup(self, target, workdir):
            self.target = target.name

    (tmp_path / "no_ba.txt").write_text("a a\nab a b\nabc a b c\ncab c a b\n")
    other = compile_graph(tmp_path / "no_ba", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa",
                          lexicon=tmp_path / "no_ba.txt", word_boundary="|", topology="compact").directory
    targets = [tiny_target, systems.Target("no_ba", other, "char", "compact", tiny / "lm.arpa", word_boundary="|")]
    res = compare.run_experiment(tmp_path / "out", targets, lambda t: [Recording("r", "recording", points=[{}])],
                                 dev_texts=TEXTS[:2], test_texts=TEXTS, profiles=["demo"], progress=False, repeat=1)
    assert seen["tiny_compact"].in_vocabulary.tolist() == [True, True, True, True]
    assert seen["no_ba"].in_vocabulary.tolist() == [False, True, True, False]  # ('ab ba', 'ba abc')
    assert res["test_in_vocabulary"] == "2-4"


def test_a_tuning_grid_grows_while_the_best_value_is_on_its_edge(tiny_target, tmp_path):
    assert compare.extend_value([1.0, 2.0, 3.0], "high", "arithmetic") == 4.0
    assert compare.extend_value([0.5, 1.0, 2.0], "low", "geometric") == 0.25
    assert compare.extend_value([0.0, 1.0], "low", "geometric") is None
    calls = []

    class Four(FakeSystem):  # the dev WER falls as param nears 4, beyond the grid
        def decode(self, em, params, *, timed, repeat=1):
            off = abs(params["param"] - 4)
            return DecodeRun([t.split() if i >= off else ["wrong"] for i, t in enumerate(em.texts)], 0.01)

    res = compare.run_experiment(tmp_path, [tiny_target],
                                 lambda t: [Four("f", "f", grid={"param": [1, 2, 3]}, grid_kind={"param": "x"},
                                                 calls=calls)],
                                 dev_texts=TEXTS, test_texts=TEXTS, profiles=["demo"], progress=False, repeat=1)
    assert [r["params"] for r in res["tuning"]] == ["param=1", "param=2", "param=3", "param=4", "param=5"]
    assert res["rows"][0]["tuned"] == "param=4" and res["rows"][0]["dev_wer"] == 0.0
    # bounded: with max_extend=1 it stops one step out, and the table says the best is on the edge
    res = compare.run_experiment(tmp_path / "b", [tiny_target],
                                 lambda t: [Four("f", "f", grid={"param": [1, 2]}, max_extend=1, calls=calls)],
                                 dev_texts=TEXTS, test_texts=TEXTS, profiles=["demo"], progress=False, repeat=1)
    assert res["rows"][0]["tuned"] == "param=3" and compare._tuned_rows(res)[0]["edge"] == "param"


def test_an_unavailable_peer_gets_a_row_with_the_reason(tiny_target, tmp_path):
    class Missing(systems.System):
        def setup(self, target, workdir):
            raise PeerUnavailable("nothing to import here")

    res = compare.run_experiment(tmp_path, [tiny_target], lambda t: [Missing("gone", "a missing peer",
                                                                               grid={"w": [1, 2]})],
                                 dev_texts=TEXTS, test_texts=TEXTS, profiles=["demo"], progress=False)
    assert res["rows"] == [{"target": "tiny_compact", "token_set": "char", "topology": "compact",
                            "profile": "demo", "system": "gone", "label": "a missing peer", "family": "",
                            "status": "not measured: nothing to import here"}]
    table = compare.markdown_table(res["rows"], [compare.Column("label", "decoder"), compare.Column("wer", "WER"),
                                                 compare.Column("rtfx", "RTFx")])
    assert table.splitlines()[-1] == "| a missing peer | not measured: nothing to import here |  |"


def test_pyctcdecode_venv_is_only_used_and_its_absence_names_the_make_target(tmp_path):
    with pytest.raises(PeerUnavailable, match=r"venv .*v1 is missing.*`make pyctcdecode-venv PYCTCDECODE_VENV="):
        peers.pyctcdecode_python(tmp_path / "v1")
    venv = tmp_path / "v2"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    with pytest.raises(PeerUnavailable, match="v2 is not a pyctcdecode venv made by"):  # another venv: the
        peers.pyctcdecode_python(venv)  # advice to `make` it there would have cleared it (venv --clear)
    (venv / ".wfst-made").write_text("")
    with pytest.raises(PeerUnavailable, match="incomplete"):  # made here, but pip did not finish: no marker
        peers.pyctcdecode_python(venv)
    (venv / peers.VENV_MARKER).write_text("pyctcdecode==0.5.0\n")
    assert peers.pyctcdecode_python(venv) == venv / "bin" / "python"
    assert not (tmp_path / "v1").exists()  # nothing was made


# --------------------------------------------------------------------------- tables

def test_markdown_table_and_csv():
    rows = [{"name": "ours", "wer": 0.0312, "rtfx": 2864.4, "status": "ok", "params": {"a": 1}},
            {"name": "peer, with comma", "wer": None, "status": "ok"},
            {"name": "cuda", "status": "not measured: no GPU on this machine"},
            {"name": "flashlight", "status": "not measured: KenLM cannot load x.arpa:\n  a | b"}]
    cols = [compare.Column("name", "decoder"), compare.Column("wer", "WER %", "{:.2%}"),
            compare.Column("rtfx", "RTFx", "{:,.0f}")]
    assert compare.markdown_table(rows, cols).splitlines() == [
        "| decoder | WER % | RTFx |", "|---|---:|---:|", "| ours | 3.12% | 2,864 |", "| peer, with comma | - | - |",
        "| cuda | not measured: no GPU on this machine |  |",
        "| flashlight | not measured: KenLM cannot load x.arpa: a \\| b |  |"]  # (one line, its pipe escaped)
    back = list(csv.reader(io.StringIO(compare.csv_text(rows, ["name", "wer", "params", "status"]))))
    assert back[0] == ["name", "wer", "params", "status"]
    assert back[1] == ["ours", "0.0312", '{"a": 1}', "ok"] and back[2][:2] == ["peer, with comma", ""]
    assert back[3] == ["cuda", "", "", "not measured: no GPU on this machine"]


def test_goal_checks():
    def row(ts, topo, system, wer, speed, label=None):
        return {"token_set": ts, "profile": "demo", "topology": topo, "system": system, "label": label or system,
                "status": "ok", "wer": wer, "rtfx": speed, "setting": f"s{speed}"}

    rows = [row("char", "normal", "o", 0.03, 100), row("char", "normal", "o", 0.04, 300),
            row("char", "compact", "o", 0.03, 150), row("char", "compact", "o", 0.05, 400),
            row("bpe", "normal", "o", 0.07, 100), row("bpe", "compact", "o", 0.08, 200)]
    lines = compare.topology_goal(rows)
    assert lines[0].startswith("- bpe, demo: **not met** (0/1")
    assert lines[1].startswith("- char, demo: **partly met** (1/2")
    assert compare.front_wer_at(rows[2:4], 120) == 0.03 and compare.front_rtfx_at(rows[2:4], 0.03) == 150

    drows = [row("char", "c", "ours", 0.03, 1000), row("char", "c", "ours", 0.05, 5000),
             row("char", "c", "kaldi", 0.03, 600), row("char", "c", "py", 0.02, 900)]
    w, r = compare.decoder_goals(drows, ["ours"], ["kaldi", "py"])
    assert "**not met**" in w and "py 2.00% (ours worse)" in w and "kaldi 3.00% (ok)" in w
    assert "**not met**" in r and "no setting that good ✗" in r and "kaldi s600 (3.00%, 600): ours 1000" in r
    nan = [row("char", "c", "ours", math.nan, 1000), row("char", "c", "kaldi", math.nan, 600)]
    assert compare.decoder_goals(nan, ["ours"], ["kaldi"]) == []  # (no reference words: said "nan% ... not met")
    tried = [({"a": 1}, {"wer": 0.1}), ({"a": 2}, {"wer": 0.05}), ({"a": 3}, {"wer": 0.05})]
    assert compare.choose(tried)[0] == {"a": 2}  # ties: the first in grid order


# --------------------------------------------------------------------------- peers

def test_lm_weight_mapping():
    assert peers.lm_weight_for("ours", 0.5) == 2.0 and peers.lm_weight_for("kaldi", 2.0) == 0.5
    assert peers.lm_weight_for("flashlight", 1.0) == pytest.approx(math.log(10))
    assert peers.lm_weight_for("pyctcdecode", 0.7) == 0.7
    with pytest.raises(ValueError):
        peers.lm_weight_for("other", 1.0)


def test_graph_lexicon_spells_like_the_compiler(demo):
    from wfst.graphs.lexicon import lexicon_from_chars, lexicon_from_sentencepiece

    words = ["elizabeth", "darcy", "o'clock", "x-ray", "<s>", "#0"]
    chars = wfst.TokenTable.read(demo / "chars_tokens.txt")
    got = peers.graph_lexicon(words, chars, word_boundary="|")
    ref = lexicon_from_chars(words[:4], chars, "|")
    assert {w: [chars.symbols[c] for c in s] for w, s in got.items()} == {w: list(p) for w, p in ref.entries}
    bpe = wfst.TokenTable.read(demo / "bpe_tokens.txt")
    got = peers.graph_lexicon(words, bpe, spm=demo / "bpe.model")
    ref = lexicon_from_sentencepiece(words[:4], demo / "bpe.model", bpe)
    assert {w: [bpe.symbols[c] for c in s] for w, s in got.items()} == {w: list(p) for w, p in ref.entries}


def test_pyctcdecode_labels(demo):
    chars = wfst.TokenTable.read(demo / "chars_tokens.txt")
    labels = peers.pyctcdecode_labels(chars, "|")
    assert labels[:4] == ["", " ", "'", "a"] and len(labels) == 29
    bpe = wfst.TokenTable.read(demo / "bpe_tokens.txt")
    labels = peers.pyctcdecode_labels(bpe)
    assert labels[-1] == "" and labels[1] == "\u2581t" and labels[0] == "<unk>"


def test_frames_npz_round_trip(tmp_path):
    x, n = synthetic.emissions([[1, 2], [3], [1, 1, 2]], 4, 0, seed=1)
    peers.save_frames_npz(tmp_path / "e.npz", x, n)
    with np.load(tmp_path / "e.npz") as z:
        frames, lengths = z["frames"], z["lengths"]
    assert frames.shape == (int(n.sum()), 4) and list(lengths) == list(n)
    starts = np.concatenate(([0], np.cumsum(n)[:-1]))
    for b in range(3):
        assert np.array_equal(frames[starts[b]:starts[b] + n[b]], x[b, :n[b]])


def _flashlight():
    return pytest.importorskip("flashlight.lib.text.decoder", reason="flashlight-text is not installed")


def test_flashlight_adapter_decodes_the_right_words(tiny):
    _flashlight()
    tokens = wfst.TokenTable.read(tiny / "tokens.txt")
    lexicon = {"a": [2], "ab": [2, 3], "ba": [3, 2], "abc": [2, 3, 4], "cab": [4, 2, 3]}
    texts = ["ab ba", "abc", "a cab", "ba abc", "cab"]
    x, n = synthetic.from_texts(texts, tokens, word_boundary="|", seed=3, confusion=0.0, frames_per_token=(1, 1))
    dec = peers.FlashlightDecoder(tiny / "lm.arpa", lexicon, tokens.num_columns, tokens.blank, silence=1)
    run = dec.decode(x, n, peers.FlashlightSettings(lm_weight=1.0, beam_size=20))
    assert [" ".join(h) for h in run.hyps] == texts and run.seconds > 0
    # an empty utterance decodes to no words
    assert dec.decode(x[:1], [0], peers.FlashlightSettings()).hyps == [[]]


def test_flashlight_without_the_package_is_unavailable(monkeypatch, tiny):
    monkeypatch.setitem(sys.modules, "flashlight.lib.text", None)
    monkeypatch.setitem(sys.modules, "flashlight.lib.text.decoder", None)
    with pytest.raises(PeerUnavailable, match="flashlight-text is not installed"):
        peers.FlashlightDecoder(tiny / "lm.arpa", {"a": [2]}, 5, 0)


PYCTC_VENV = Path(__file__).resolve().parent.parent / "build" / "peers" / "pyctcdecode-venv"


@pytest.mark.skipif(not (PYCTC_VENV / ".wfst-requirements").is_file(),
                    reason="no pyctcdecode venv (make pyctcdecode-venv makes build/peers/pyctcdecode-venv)")
def test_pyctcdecode_worker_decodes_the_right_words(tiny, tmp_path):
    tokens = wfst.TokenTable.read(tiny / "tokens.txt")
    texts = ["ab ba", "abc", "a cab"]
    x, n = synthetic.from_texts(texts, tokens, word_boundary="|", seed=3, confusion=0.0, frames_per_token=(1, 1))
    peers.save_frames_npz(tmp_path / "e.npz", x, n)
    dec = peers.PyctcdecodeDecoder(PYCTC_VENV, tiny / "lm.arpa", peers.pyctcdecode_labels(tokens, "|"),
                                   ["a", "ab", "ba", "abc", "cab"], workdir=tmp_path / "w")
    assert dec.version["numpy"].startswith("1.")
    run = dec.decode(tmp_path / "e.npz", peers.PyctcdecodeSettings(alpha=0.5, beta=1.0))
    assert [" ".join(h) for h in run.hyps] == texts


# --------------------------------------------------------------------------- end to end

def test_compare_decoders_end_to_end_on_the_tiny_graph(tiny_target, tmp_path):
    include = ["greedy", "ours-cpu1", "ours-cuda", "kaldi", "flashlight", "ours-beam", "ours-beam-cuda",
               "flashlight-lexicon-free", "pyctcdecode"]
    out = tmp_path / "results"
    code = {"commit": "abc1234", "uncommitted": ["wfst/decoder.py"]}
    res = compare.compare_decoders(out, [tiny_target], dev_texts=TEXTS, test_texts=TEXTS, profiles=["peaky"],
                                   quick=True, repeat=1, progress=False, include=include,
                                   venv=tmp_path / "no-venv", code=code)
    rows = {r["system"]: r for r in res["rows"] if r.get("setting") in (None, "-", "beam=16.0,max_active=7000")}
    assert rows["ours-cpu1"]["wer"] == 0.0 and rows["ours-cpu1"]["tuned"].startswith("acoustic_scale=")
    if "kaldi" in rows and rows["kaldi"]["status"] == "ok":
        assert rows["kaldi"]["wer"] == 0.0
    if gpu_name() is None:
        assert rows["ours-cuda"]["status"] == "not measured: no GPU on this machine"
        assert rows["ours-beam-cuda"]["status"] == "not measured: no GPU on this machine"
    assert rows["pyctcdecode"]["status"].startswith("not measured: pyctcdecode's venv ")
    assert "make pyctcdecode-venv" in rows["pyctcdecode"]["status"]
    assert rows["ours-cpu1"]["code"] == code
    beam = [r for r in res["rows"] if r["system"] == "ours-beam"]
    assert beam and all(r["status"] == "ok" and r["tuned"].startswith("lm_weight=") for r in beam)
    free = [r for r in res["rows"] if r["system"] == "flashlight-lexicon-free"]
    assert free and all(r["status"] == "ok" for r in free)
    flash = [r for r in res["rows"] if r["system"] == "flashlight"]
    assert flash and all(r["status"] == "ok" or r["status"].startswith("not measured: ") for r in flash)
    for name in ("results.md", "results.csv", "tuning.csv", "run.json", "wer_vs_rtfx.png"):
        assert (out / name).is_file(), name
    md = (out / "results.md").read_text()
    assert "SYNTHETIC" in md and "## Goals" in md and "| ours, CPU, 1 thread |" in md
    assert "### Lexicon-free: our beam search against the lexicon-free peers" in md and "OOV WER %" in md
    if gpu_name() is None:
        assert "| ours, CUDA | not measured: no GPU on this machine |" in md
    assert "commit abc1234;" in md and "Code of the cells: abc1234 + uncommitted changes to wfst/decoder.py (" in md
    assert json.loads((out / "run.json").read_text())["machine"]["cores"] == usable_cores()
    assert md.startswith("# compare-decoders: our decoder and its peers on the same emissions [--quick: a smoke "
                         "test, not a result]")
    # everything again: nothing is recomputed
    again = compare.compare_decoders(out, [tiny_target], dev_texts=TEXTS, test_texts=TEXTS, profiles=["peaky"],
                                     quick=True, repeat=1, progress=False, include=include,
                                     venv=tmp_path / "no-venv", code=code)
    assert again["ran"] == 0 and again["skipped"] == res["ran"]


def test_a_run_with_nothing_to_plot_leaves_no_plot_of_an_earlier_run(tiny_target, tmp_path):
    """The earlier run's wer_vs_rtfx.png stayed, and the new results.md linked to it."""
    kw = dict(dev_texts=TEXTS[:2], test_texts=TEXTS[:2], profiles=["peaky"], quick=True, repeat=1, progress=False,
              venv=tmp_path / "no-venv")
    out = tmp_path / "results"
    compare.compare_decoders(out, [tiny_target], include=["ours-cpu1"], **kw)
    assert (out / "wer_vs_rtfx.png").is_file() and "![WER vs RTFx](wer_vs_rtfx.png)" in (out / "results.md").read_text()
    compare.compare_decoders(out, [tiny_target], include=["greedy"], **kw)
    md = (out / "results.md").read_text()
    assert not (out / "wer_vs_rtfx.png").exists() and "wer_vs_rtfx.png" not in md and "(No WER vs RTFx plot" in md


def test_compare_topologies_end_to_end_on_the_tiny_graphs(tiny, tmp_path):
    targets = []
    for topo in ("normal", "compact"):
        r = compile_graph(tmp_path / topo, tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa",
                          lexicon=tiny / "lexicon.txt", word_boundary="|", topology=topo,
                          cache_dir=tmp_path / f".cache-{topo}")
        targets.append(systems.Target(f"tiny_{topo}", r.directory, "char", topo, tiny / "lm.arpa",
                                      word_boundary="|"))
    out = tmp_path / "results"
    res = compare.compare_topologies(out, targets, dev_texts=TEXTS, test_texts=TEXTS, profiles=["demo"],
                                     quick=True, repeat=1, progress=False)
    assert len(res["rows"]) == 2 * 2 and all(r["status"] == "ok" and r["wer"] == 0.0 for r in res["rows"])
    g = res["graphs"]["tiny_compact"]
    assert g["arcs"] > 0 and g["states"] > 0 and g["file_mb"] > 0 and g["cold_build"]
    for name in ("results.md", "results.csv", "graphs.csv", "wer_vs_rtfx.png", "graph_size.png"):
        assert (out / name).is_file(), name
    md = (out / "results.md").read_text()
    assert "## Goal: compact WER ≤ normal WER at equal speed" in md and "| tiny_normal |" in md
    assert f"Dev: {len(TEXTS)} sentences, the dev sentences given (tuning only)" in md  # (not the demo's)
    compare.compare_decoders(out, targets[1:], dev_texts=TEXTS, test_texts=TEXTS, profiles=["demo"], quick=True,
                             repeat=1, progress=False, include=["greedy"], texts_from=("a.txt", "b.txt"))
    md = (out / "results.md").read_text()  # the same folder: the topologies' plots are not left beside it
    assert not (out / "graph_size.png").exists() and not (out / "wer_vs_rtfx.png").exists()
    assert "sentences, a.txt (tuning only); test: " in md and "sentences, b.txt (every figure" in md
