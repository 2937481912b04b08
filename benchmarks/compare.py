"""Comparison experiments: topologies and decoders side by side, tuned on dev, measured on test.

`make compare-topologies` and `make compare-decoders` (``recipes/compare_*.py``) call
:func:`run_experiment` with a list of :class:`~wfst_bench.systems.Target` graphs and a list
of :class:`~wfst_bench.systems.System` decoders (the adapters ``wfst-bench`` uses too), then
write a results folder (:func:`write_results`):

    results.md      settings, machine, tuned values, the tables, the goal checks
    results.csv     one row per measured (graph, emissions, decoder, setting)
    tuning.csv      every dev cell: the LM weight / insertion values tried and their WER
    wer_vs_rtfx.png WER against RTFx, one line per topology or decoder, one panel per
                    token set and emissions profile
    graph_size.png  (topologies) states, arcs and file size per graph
    run.json        the settings and the machine
    cells/*.json    one file per finished cell: what it measured and with which settings

**Resumable.** Every cell (one decoder, one setting, one split) is a JSON file under
``cells/`` holding its settings; a cell whose file exists with the same settings is not run
again (:class:`CellStore`), so an interrupted run goes on where it stopped and a finished
one only redraws its tables.  Settings include the graph's fingerprint, a digest of the
emissions and the decoder's version, so a changed input reruns the cells it touches.
Every cell also records the code that made it (commit and uncommitted changes), as the
recipe passes it in (``code=``): nothing here runs git.

**Tuning.** Each system's LM weight and word-insertion knob are chosen on the dev split
(``recipes/demo/data/dev.txt``): every combination of its grid is decoded at the system's
tuning setting and the lowest dev WER wins (ties: the first tried).  Test-split
cells then use those values at every beam setting; the test split is never used to
choose anything.

The emissions are SYNTHETIC (:mod:`wfst.synthetic`), made from the sentences' text; two
profiles: ``demo`` (the generator's defaults, each token peaking for 1-3 frames, as in
``make demo``) and ``peaky`` (one frame per token, closer to what CTC models emit).
"""
from __future__ import annotations

import csv
import dataclasses
import datetime
import io
import json
import math
import os
import re
import shutil
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

import wfst
from wfst.config import usable_cores
from wfst.files import atomic_path, write_text_atomic
from wfst.scoring import rtfx, word_errors
from wfst.synthetic import from_texts

from .machine import machine_info
from .peers import PYCTCDECODE_VENV, DecodeRun, PeerUnavailable, lm_weight_for
from .systems import (
    BeamSearchSystem,
    EmissionSet,
    FlashlightLexiconFreeSystem,
    FlashlightSystem,
    GreedySystem,
    KaldiSystem,
    OursSystem,
    PyctcdecodeSystem,
    System,
    Target,
)

PROFILES = {
    "demo": {},  # wfst.synthetic's defaults: 1-3 frames per token, 0-2 blank frames after it
    "peaky": {"frames_per_token": (1, 1)},
}
PROFILE_NOTES = {
    "demo": "wfst.synthetic defaults: each token peaks for 1-3 frames, 0-2 blank frames after it (make demo's)",
    "peaky": "one frame per token, 0-2 blank frames after it (closer to a trained CTC model's spikes)",
}

# The LM weights tried for every decoder, against natural-log acoustic scores (1 / acoustic_scale).
LM_WEIGHTS = (0.35, 0.5, 0.7, 1.0, 1.4)
PLOTS = ("wer_vs_rtfx.png", "graph_size.png")  # every plot an experiment draws (_plots)
GIVEN_TEXTS = ("the dev sentences given", "the test sentences given")  # results.md's words for texts_from=None


# --------------------------------------------------------------------------- cells and resume

def _canonical(value):
    """JSON round trip: tuples become lists, so stored and fresh settings compare equal."""
    return json.loads(json.dumps(value, sort_keys=True))


class CellStore:
    """One JSON file per finished cell under ``folder``; see the module docstring."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.folder / (re.sub(r"[^A-Za-z0-9_.=+-]+", "__", key).strip("_") + ".json")

    def load(self, key: str, settings: dict, *, with_time: bool = False,
             check: Callable[[object], str | None] | None = None):
        """The stored result of `key` if it was made with exactly `settings`, else None
        (with `with_time`: (result, when it was finished) or None).  `check(result)`: why a
        stored result cannot be used (None: it can); such a cell is said and measured again."""
        p = self.path(key)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            return self._damaged(p, f"unreadable ({e})")
        if not isinstance(data, dict) or data.get("settings") != _canonical(settings) or "result" not in data:
            return None
        problem = check(data["result"]) if check else None
        if problem:  # (a cell of an older result format, or edited: its blanks or a traceback in the tables)
            return self._damaged(p, problem)
        return (data["result"], data.get("finished")) if with_time else data["result"]

    @staticmethod
    def _damaged(path: Path, why: str) -> None:
        print(f"note: {path}: {why}; measured again", file=sys.stderr)
        return None

    def save(self, key: str, settings: dict, result: dict) -> None:
        data = {"key": key, "settings": _canonical(settings), "result": _canonical(result),
                "finished": datetime.datetime.now().isoformat(timespec="seconds")}
        write_text_atomic(self.path(key), json.dumps(data, indent=1, sort_keys=True) + "\n")


# What every cell's result holds (_result), as numbers: a stored one without them is measured again.
_RESULT_NUMBERS = {"wer": float, "errors": int, "words": int, "sub": int, "ins": int, "del": int, "seconds": float,
                   "frames": int}


def _result_problem(result) -> str | None:
    """Why a stored result cannot be used (None: it can)."""
    if not isinstance(result, dict):
        return f"its result is a {type(result).__name__}, not an object"
    for name, kind in _RESULT_NUMBERS.items():
        v = result.get(name)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (
            math.isfinite(v) and v >= 0 or name == "wer" and math.isnan(v) and result.get("words") == 0)
        if not ok or (kind is int and not isinstance(v, int)):
            return f"its result's {name} is {v!r}, not a number >= 0" if name in result else \
                f"its result has no {name}"
    return None


class CellRunner:
    """Runs cells through a store, with one progress bar; counts what it ran and skipped."""

    def __init__(self, store: CellStore, total: int, *, progress: bool = True, force: bool = False,
                 retime: bool = False, desc: str = "", check: Callable[[object], str | None] | None = None):
        from tqdm import tqdm

        self.store, self.force, self.retime, self.check = store, force, retime, check
        self.ran = self.skipped = 0
        self.finished: list[str] = []  # when each cell was measured (ISO times)
        self.bar = tqdm(total=total, desc=desc, unit="cell", disable=not progress, file=sys.stderr,
                        dynamic_ncols=True)

    def __call__(self, key: str, settings: dict, compute: Callable[[], dict], *, timed: bool = False) -> dict:
        """The stored result of `key` made with `settings`, else compute() (stored).  `force`
        recomputes every cell; `retime` the timed ones only (speeds measured again, tuning kept)."""
        stored = None if self.force or (self.retime and timed) else self.store.load(key, settings, with_time=True,
                                                                                    check=self.check)
        if stored is not None:
            result, when = stored
            self.skipped += 1
            if when:
                self.finished.append(when)
        else:
            self.bar.set_postfix_str(key[-60:], refresh=True)
            result = compute()
            self.store.save(key, settings, result)
            result = _canonical(result)
            self.ran += 1
            self.finished.append(datetime.datetime.now().isoformat(timespec="seconds"))
        self.bar.update(1)
        return result

    def grow(self, n: int) -> None:
        """More cells than planned (a tuning grid grew)."""
        self.bar.total += n
        self.bar.refresh()

    def skip(self, n: int) -> None:
        """Advance the bar over cells that will not run (an unavailable system's)."""
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


# --------------------------------------------------------------------------- the experiment

def make_emissions(target: Target, tokens, texts: Sequence[str], split: str, profile: str, seed: int,
                   vocabulary: set[str] | None = None) -> EmissionSet:
    """SYNTHETIC emissions of `texts` in `profile`, spelled as `target`'s token set spells them."""
    log_probs, lengths = from_texts(list(texts), tokens, spm=target.spm, word_boundary=target.word_boundary,
                                    seed=seed, **PROFILES[profile])
    iv = None if vocabulary is None else np.array([all(w in vocabulary for w in t.split()) for t in texts])
    return EmissionSet.of(split, profile, texts, log_probs, lengths, iv)


def _fmt_params(params: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in params.items()) or "-"


def _result(em: EmissionSet, run: DecodeRun, code: dict | None) -> dict:
    e = word_errors(em.texts, run.hyps)
    iv_wer = oov_wer = None
    if em.in_vocabulary is not None and em.in_vocabulary.any():
        keep = np.flatnonzero(em.in_vocabulary)
        iv_wer = word_errors([em.texts[i] for i in keep], [run.hyps[i] for i in keep]).rate
    if em.in_vocabulary is not None and not em.in_vocabulary.all():
        keep = np.flatnonzero(~em.in_vocabulary)
        oov_wer = word_errors([em.texts[i] for i in keep], [run.hyps[i] for i in keep]).rate
    return {"wer": e.rate, "iv_wer": iv_wer, "oov_wer": oov_wer, "errors": e.errors, "words": e.words,
            "gave_up": run.gave_up,
            "sub": e.substitutions, "ins": e.insertions, "del": e.deletions, "seconds": run.seconds,
            "frames": em.frames,
            "rtfx": rtfx(em.frames, run.seconds) if run.seconds > 0 else None,
            "tokens_per_frame": run.tokens_per_frame, "peak_mb": run.peak_mb,
            "load_average": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
            "code": code, "example": " ".join(run.hyps[0]) if run.hyps else ""}


def extend_value(values: Sequence[float], side: str, kind: str) -> float | None:
    """One more grid value beyond the lowest (side="low") or highest: the same ratio
    ("geometric") or the same step ("arithmetic") as the two values next to it."""
    v = sorted(values)
    if len(v) < 2:
        return None
    if kind == "geometric":
        if v[0] <= 0:
            return None
        new = v[0] * v[0] / v[1] if side == "low" else v[-1] * v[-1] / v[-2]
    else:
        new = v[0] - (v[1] - v[0]) if side == "low" else v[-1] + (v[-1] - v[-2])
    return round(new, 4)


def grow_grid(grid: dict[str, list], best: dict, kinds: dict[str, str], steps: dict, max_steps: int) -> int:
    """Extend each dimension whose best value lies on the grid's edge by one value (at most
    `max_steps` a side, counted in `steps`); returns how many values were added."""
    added = 0
    for name, values in grid.items():
        if len(values) < 2 or name not in best:
            continue
        for side, edge in (("low", min(values)), ("high", max(values))):
            if best[name] == edge and steps.get((name, side), 0) < max_steps:
                new = extend_value(values, side, kinds.get(name, "arithmetic"))
                if new is not None and new not in values:
                    values.append(new)
                    steps[(name, side)] = steps.get((name, side), 0) + 1
                    added += 1
    return added


def choose(tuning: list[tuple[dict, dict]]) -> tuple[dict, dict] | None:
    """The (params, result) with the lowest dev WER; ties go to the first tried (a grown grid's
    new values come after the first grid's)."""
    best = None
    for params, res in tuning:
        if best is None or res["wer"] < best[1]["wer"]:
            best = (params, res)
    return best


def run_experiment(out: str | os.PathLike, targets: Sequence[Target], systems: Callable[[Target], list[System]], *,
                   dev_texts: Sequence[str], test_texts: Sequence[str], profiles: Sequence[str] = tuple(PROFILES),
                   seed: int = 0, repeat: int = 2, progress: bool = True, force: bool = False,
                   retime: bool = False, desc: str = "cells", code: dict | None = None) -> dict:
    """Tune every system on dev and measure it on test, for every target and profile.

    `systems(target)` returns the systems to run on that target.  `code` (the commit and
    the uncommitted changes, as the recipe found them) is recorded in every cell run now.
    Returns ``{"rows": [...], "tuning": [...], "ran": n, "skipped": n}``: one row per test
    cell (or one per system that could not run, with ``status``), one tuning row per dev cell.
    """
    out = Path(out)
    store = CellStore(out / "cells")
    # the emissions and jobs written for decoders in child processes: a temporary folder of this
    # run's own (<out>/work, removed at the end, took a folder of the user's with it)
    work = Path(tempfile.mkdtemp(prefix="wfst-compare-"))
    plan = []
    total = 0
    # Grouped by token set and profile: the topologies of a token set decode the same emissions.
    order = {ts: i for i, ts in enumerate(dict.fromkeys(t.token_set for t in targets))}
    for profile_i, profile in enumerate(profiles):
        for t in targets:
            sys_list = systems(t)
            plan.append(((order[t.token_set], profile_i), t, profile, sys_list))
            total += sum((0 if s.tuned_like else len(s.grid_points())) + len(s.points) for s in sys_list)
    plan = [p[1:] for p in sorted(plan, key=lambda p: p[0])]
    runner = CellRunner(store, total, progress=progress, force=force, retime=retime, desc=desc,
                        check=_result_problem)
    rows, tuning_rows = [], []
    tuned: dict[tuple[str, str, str], dict] = {}
    emissions: dict[tuple[str, str], tuple[EmissionSet, EmissionSet]] = {}

    def tune_and_test(s: System, t: Target, profile: str, dev: EmissionSet, test: EmissionSet, base: dict):
        """Tune `s` on dev (or take the values of the system it is tuned like), then measure it on test."""
        ident = s.identity()
        # -- tune on dev
        if s.tuned_like:
            chosen = tuned.get((t.name, profile, s.tuned_like))
            params = dict(chosen["params"]) if chosen else {}
            dev_wer = chosen["dev_wer"] if chosen else None
        elif s.grid:
            # The grid, grown by a step where the best value is on its edge, until it is not.
            grid = {k: list(v) for k, v in s.grid.items()}
            results, done, steps = [], set(), {}
            while True:
                for gp in s.grid_points(grid):
                    k = _fmt_params(gp)
                    if k in done:
                        continue
                    done.add(k)
                    settings = {"split": "dev", "emissions": dev.digest, "system": s.key,
                                "identity": ident, "fixed": s.fixed, "point": s.tune_point, "params": gp}
                    res = runner(f"{t.name}/{profile}/dev/{s.key}/{k}", settings,
                                 lambda gp=gp: _result(dev, s.decode(dev, {**s.tune_point, **gp},
                                                                     timed=False), code))
                    results.append((gp, res))
                    tuning_rows.append({**base, "split": "dev", "setting": _fmt_params(s.tune_point),
                                        "params": k, **_brief(res)})
                params, best = choose(results)
                before = len(s.grid_points(grid))
                if not grow_grid(grid, params, s.grid_kind, steps, s.max_extend):
                    break
                runner.grow(len(s.grid_points(grid)) - before)
            dev_wer = best["wer"]
        else:
            params, dev_wer = {}, None
        tuned[(t.name, profile, s.key)] = {"params": params, "dev_wer": dev_wer}
        # -- measure on test
        for point in s.points:
            settings = {"split": "test", "emissions": test.digest, "system": s.key, "identity": ident,
                        "fixed": s.fixed, "point": point, "params": params, "repeat": repeat}
            res = runner(f"{t.name}/{profile}/test/{s.key}/{_fmt_params(point)}", settings,
                         lambda point=point: _result(test, s.decode(test, {**point, **params}, timed=True,
                                                                    repeat=repeat), code), timed=True)
            rows.append({**base, "status": "ok", "setting": _fmt_params(point), "point": point,
                         "tuned": _fmt_params(params), "params": params, "dev_wer": dev_wer, **res})

    # each target's tokens and the words its graph outputs (read once: the graph is dropped after)
    spelled = {}
    for t in targets:
        g = wfst.load_graph(t.graph_dir)
        spelled[t.name] = (g.tokens, g.output_words())
        del g
    try:
        for t, profile, sys_list in plan:
            tokens, vocab = spelled[t.name]
            # the same tokens, spelling and words, the same emissions: the topologies of a token set decode
            # the same input (the token_set name alone shared them between graphs of other tokens or words)
            key = (t.token_set, profile, tokens.symbols, tokens.blank, t.spm, t.word_boundary, vocab)
            if key not in emissions:
                emissions.clear()
                emissions[key] = (make_emissions(t, tokens, dev_texts, "dev", profile, seed, vocab),
                                  make_emissions(t, tokens, test_texts, "test", profile, seed, vocab))
            dev, test = emissions[key]
            for s in sys_list:
                n_cells = (0 if s.tuned_like else len(s.grid_points())) + len(s.points)
                base = {"target": t.name, "token_set": t.token_set, "topology": t.topology, "profile": profile,
                        "system": s.key, "label": s.label, "family": s.family}
                try:
                    s.setup(t, work)
                except PeerUnavailable as e:
                    rows.append({**base, "status": f"not measured: {e}"})
                    runner.skip(n_cells)
                    continue
                cells_before, first_row = runner.ran + runner.skipped, len(rows)
                try:  # (a peer that fails while decoding, a worker that crashes: its row says why)
                    tune_and_test(s, t, profile, dev, test, base)
                except PeerUnavailable as e:
                    del rows[first_row:]
                    rows.append({**base, "status": f"not measured: {e}"})
                    runner.skip(max(0, n_cells - (runner.ran + runner.skipped - cells_before)))
                s.teardown()
    finally:
        runner.close()
        shutil.rmtree(work, ignore_errors=True)
    return {"rows": rows, "tuning": tuning_rows, "ran": runner.ran, "skipped": runner.skipped,
            "measured": [min(runner.finished), max(runner.finished)] if runner.finished else None,
            "dev_utterances": len(dev_texts), "test_utterances": len(test_texts),
            "test_in_vocabulary": _iv_count(test_texts, [vocab for _, vocab in spelled.values()])}


def _load_range(rows: Sequence[dict]) -> list[float] | None:
    loads = [r["load_average"] for r in rows if r.get("status") == "ok" and r.get("load_average") is not None]
    return [min(loads), max(loads)] if loads else None


def _iv_count(texts: Sequence[str], vocabularies: Sequence[frozenset | None]) -> int | str | None:
    """How many of `texts` have every word among the words a target graph outputs (a range
    "a-b" where the graphs' vocabularies differ; None: no graph has words.txt)."""
    counts = set()
    for vocab in vocabularies:
        if vocab is not None:
            counts.add(sum(all(w in vocab for w in text.split()) for text in texts))
    if not counts:
        return None
    return counts.pop() if len(counts) == 1 else f"{min(counts)}-{max(counts)}"


def _brief(res: dict) -> dict:
    return {k: res.get(k) for k in ("wer", "sub", "ins", "del", "seconds", "rtfx", "code")}


# --------------------------------------------------------------------------- code state

def _machine(code: dict | None) -> dict:
    """The machine, and the commit the report is written at (None: not told)."""
    return {**machine_info(), "commit": (code or {}).get("commit")}


def _code_text(state: dict) -> str:
    extra = state.get("uncommitted") or []
    return f"{state.get('commit')}" + (f" + uncommitted changes to {', '.join(extra)}" if extra else "")


# --------------------------------------------------------------------------- tables

@dataclasses.dataclass(frozen=True)
class Column:
    key: str
    header: str
    fmt: str = "{}"  # format of a present value; None and missing print as "-"

    def text(self, row: dict) -> str:
        v = row.get(self.key)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        return self.fmt.format(v)


def markdown_table(rows: Sequence[dict], columns: Sequence[Column], *, status_key: str = "status",
                   label_columns: int = 1) -> str:
    """A Markdown table; a row whose status is not "ok" prints the status across the value columns."""
    lines = ["| " + " | ".join(c.header for c in columns) + " |",
             "|" + "|".join("---" if i < label_columns else "---:" for i in range(len(columns))) + "|"]
    for r in rows:
        status = r.get(status_key, "ok")
        if status != "ok":  # (on one line, its pipes escaped: a peer's message of two lines broke the table)
            status = " ".join(str(status).split()).replace("|", "\\|")
            cells = [c.text(r) for c in columns[:label_columns]] + [status] + [""] * (len(columns) - label_columns - 1)
        else:
            cells = [c.text(r) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def csv_text(rows: Sequence[dict], keys: Sequence[str]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(keys)
    for r in rows:
        w.writerow(["" if r.get(k) is None else (json.dumps(r[k], sort_keys=True) if isinstance(r[k], (dict, list))
                                                  else r[k]) for k in keys])
    return buf.getvalue()


# --------------------------------------------------------------------------- plots

def _plotted(rows: Sequence[dict], leave_out: Sequence[str] = ("greedy",)) -> list[dict]:
    """The rows plot_wer_rtfx draws: measured, with a speed, of no family in `leave_out`."""
    return [r for r in rows if r.get("status") == "ok" and r.get("rtfx") and r.get("family") not in leave_out]


def _plot_link(rows: Sequence[dict]) -> str:
    """results.md's link to wer_vs_rtfx.png, or why there is no plot."""
    return "![WER vs RTFx](wer_vs_rtfx.png)" if _plotted(rows) else \
        "(No WER vs RTFx plot: no measured decoder but greedy CTC, which the tables hold.)"


def plot_wer_rtfx(rows: Sequence[dict], path: str | os.PathLike, *, line_key: str, title: str,
                  leave_out: Sequence[str] = ("greedy",)) -> None:
    """WER (%) against RTFx (log scale): one panel per (token set, profile), one line per `line_key`.
    Systems of the families in `leave_out` (greedy decoding: far off in both) stay in the tables only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    ok = _plotted(rows, leave_out)
    panels = list(dict.fromkeys((r["token_set"], r["profile"]) for r in ok))
    if not panels:  # (_plots removed an earlier run's)
        return
    cols = len({p[1] for p in panels})
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 4.0 * nrows), squeeze=False)
    title = "\n".join(textwrap.wrap(title, int(11 * 5.2 * cols)))  # (one panel's width cut a long title)
    for ax, (ts, prof) in zip(axes.flat, panels):
        lines: dict[str, list] = {}
        for r in ok:
            if (r["token_set"], r["profile"]) == (ts, prof):
                lines.setdefault(r[line_key], []).append(r)
        for name, pts in lines.items():  # in the order of the settings (widest beam first)
            ax.plot([p["rtfx"] for p in pts], [100 * p["wer"] for p in pts], marker="o", label=name)
        ax.set_xscale("log")
        speeds = [p["rtfx"] for pts in lines.values() for p in pts]
        narrow = max(speeds) < 4 * min(speeds)  # 1-2-5 ticks would crowd a narrow span: a few round ones
        ax.xaxis.set_major_locator(MaxNLocator(4) if narrow else LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("RTFx (decoding only, 40 ms frames)")
        ax.set_ylabel("WER % (test)")
        ax.set_title(f"{ts}, {prof} emissions (SYNTHETIC)", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, framealpha=0.6)  # (the points behind it still show)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def plot_graph_sizes(graphs: Sequence[dict], path: str | os.PathLike, *, title: str) -> None:
    """Bars of TLG states, arcs and file size per graph, grouped by token set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    names = [g["target"] for g in graphs]
    palette = {t: f"C{i}" for i, t in enumerate(dict.fromkeys(g["token_set"] for g in graphs))}
    for ax, (key, label, scale) in zip(axes, [("states", "TLG states (millions)", 1e6),
                                               ("arcs", "TLG arcs (millions)", 1e6),
                                               ("file_mb", "TLG.fst (MiB)", 1.0)]):
        colors = [palette[g["token_set"]] for g in graphs]
        ax.bar(range(len(graphs)), [g[key] / scale for g in graphs], color=colors)
        ax.set_xticks(range(len(graphs)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(label, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    spelled = {"char": "characters", "bpe": "BPE"}
    axes[0].legend(handles=[Patch(color=c, label=spelled.get(t, t)) for t, c in palette.items()], fontsize=8,
                   title="token set", title_fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


# --------------------------------------------------------------------------- goal checks

def front_wer_at(points: Sequence[dict], min_rtfx: float) -> float | None:
    """The lowest WER among `points` that decode at least as fast as `min_rtfx`."""
    w = [p["wer"] for p in points if p.get("rtfx") and p["rtfx"] >= min_rtfx]
    return min(w) if w else None


def front_rtfx_at(points: Sequence[dict], max_wer: float) -> float | None:
    """The highest RTFx among `points` with a WER at most `max_wer`."""
    r = [p["rtfx"] for p in points if p.get("rtfx") and p["wer"] <= max_wer + 1e-12]
    return max(r) if r else None


def topology_goal(rows: Sequence[dict], a: str = "compact", b: str = "normal") -> list[str]:
    """Is `a`'s WER <= `b`'s at equal speed?  For each of `b`'s test points: `a`'s lowest WER
    among its points at least as fast."""
    out = []
    ok_rows = [r for r in rows if r.get("status") == "ok"]
    for ts, prof in sorted({(r["token_set"], r["profile"]) for r in ok_rows}):
        pa = [r for r in ok_rows if (r["token_set"], r["profile"], r["topology"]) == (ts, prof, a)]
        pb = [r for r in ok_rows if (r["token_set"], r["profile"], r["topology"]) == (ts, prof, b)]
        if not pa or not pb:
            continue
        wins = 0
        detail = []
        for p in sorted(pb, key=lambda r: r["rtfx"]):
            w = front_wer_at(pa, p["rtfx"])
            good = w is not None and w <= p["wer"] + 1e-12
            wins += good
            detail.append(f"{b} {p['setting']}: {100 * p['wer']:.2f}% at {p['rtfx']:.0f} RTFx vs {a} "
                          + (f"{100 * w:.2f}%" if w is not None else "none as fast"))
        verdict = "met" if wins == len(pb) else ("not met" if wins == 0 else "partly met")
        out.append(f"- {ts}, {prof}: **{verdict}** ({wins}/{len(pb)} of {b}'s settings: {a} has a setting at least "
                   f"as fast with WER at most as high). " + "; ".join(detail))
    return out


def decoder_goals(rows: Sequence[dict], ours: Sequence[str], cpu_peers: Sequence[str],
                  wer_peers: Sequence[str] | None = None) -> list[str]:
    """Our best WER vs each peer's best; our (single-thread CPU) RTFx vs each CPU peer's at equal or better WER."""
    out = []
    ok_rows = [r for r in rows if r.get("status") == "ok" and not math.isnan(r["wer"])]  # (NaN: no reference words)
    wer_peers = list(wer_peers if wer_peers is not None else cpu_peers)
    for ts, prof in sorted({(r["token_set"], r["profile"]) for r in ok_rows}):
        here = [r for r in ok_rows if (r["token_set"], r["profile"]) == (ts, prof)]
        mine = [r for r in here if r["system"] in ours]
        if not mine:
            continue
        best_ours = min(r["wer"] for r in mine)
        parts_w, parts_r = [], []
        all_w = all_r = True
        for peer in wer_peers:
            pr = [r for r in here if r["system"] == peer]
            if not pr:
                continue
            bw = min(r["wer"] for r in pr)
            good = best_ours <= bw + 1e-12
            all_w &= good
            parts_w.append(f"{pr[0]['label']} {100 * bw:.2f}% ({'ok' if good else 'ours worse'})")
        for peer in cpu_peers:
            pr = [r for r in here if r["system"] == peer]
            if not pr:
                continue
            for p in sorted(pr, key=lambda r: r["wer"]):
                mr = front_rtfx_at(mine, p["wer"])
                good = mr is not None and mr >= p["rtfx"]
                all_r &= good
                parts_r.append(f"{p['label']} {p['setting']} ({100 * p['wer']:.2f}%, {p['rtfx']:.0f}): ours "
                               + (f"{mr:.0f}" if mr is not None else "no setting that good") + ("" if good else " ✗"))
        if parts_w:  # (a run without these peers says nothing of them)
            out.append(f"- {ts}, {prof}: our best WER {100 * best_ours:.2f}% vs peers' best: "
                       f"**{'met' if all_w else 'not met'}** — " + "; ".join(parts_w))
        if parts_r:
            out.append(f"- {ts}, {prof}: our single-thread CPU RTFx at equal or better WER vs each CPU peer "
                       f"setting: **{'met' if all_r else 'not met'}** — " + "; ".join(parts_r))
    return out


def oov_goal(rows: Sequence[dict], lexicon_free: str, tlg: str) -> list[str]:
    """The lexicon-free decoder's best WER on the sentences with out-of-vocabulary words
    against the TLG decoder's best there."""
    out = []
    ok_rows = [r for r in rows if r.get("status") == "ok" and r.get("oov_wer") is not None]
    for ts, prof in sorted({(r["token_set"], r["profile"]) for r in ok_rows}):
        here = [r for r in ok_rows if (r["token_set"], r["profile"]) == (ts, prof)]
        free = [r["oov_wer"] for r in here if r["system"] == lexicon_free]
        graph = [r["oov_wer"] for r in here if r["system"] == tlg]
        if free and graph:
            good = min(free) < min(graph)
            out.append(f"- {ts}, {prof}: WER on the sentences with out-of-vocabulary words, lexicon-free "
                       f"{100 * min(free):.2f}% vs TLG {100 * min(graph):.2f}%: **{'met' if good else 'not met'}**")
    return out


# --------------------------------------------------------------------------- writing results

RESULT_KEYS = ["target", "token_set", "topology", "profile", "system", "label", "status", "setting", "tuned",
               "dev_wer", "wer", "iv_wer", "oov_wer", "sub", "ins", "del", "words", "gave_up", "rtfx", "seconds",
               "frames", "tokens_per_frame", "peak_mb", "load_average"]
TUNING_KEYS = ["target", "token_set", "profile", "system", "label", "setting", "params", "wer", "sub", "ins", "del",
               "seconds"]


def write_results(out: str | os.PathLike, *, title: str, markdown: str, rows: Sequence[dict],
                  tuning: Sequence[dict], run_info: dict, extra_csv: dict[str, str] | None = None) -> None:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "results.md", f"# {_smoke(title, run_info)}\n\n{markdown.rstrip()}\n")
    write_text_atomic(out / "results.csv", csv_text(rows, RESULT_KEYS))
    write_text_atomic(out / "tuning.csv", csv_text(tuning, TUNING_KEYS))
    for name, text in (extra_csv or {}).items():
        write_text_atomic(out / name, text)
    write_text_atomic(out / "run.json", json.dumps(run_info, indent=1, sort_keys=True, default=str) + "\n")


def _smoke(title: str, run_info: dict) -> str:
    """A --quick run's titles say what it is: a few sentences on a small grid, not a result."""
    return f"{title} [--quick: a smoke test, not a result]" if run_info.get("quick") else title


def settings_markdown(run_info: dict) -> str:
    m = run_info["machine"]
    dev, test = run_info.get("texts_from", GIVEN_TEXTS)
    lines = [f"- **Emissions: SYNTHETIC** ({'wfst.synthetic'}, seed {run_info['seed']}), made from the text of "
             f"sentences, not from audio: they show how the decoders behave on this generator, "
             f"not how a recogniser would do. Dev: {run_info['dev_utterances']} sentences, {dev} (tuning only); "
             f"test: {run_info['test_utterances']} sentences, {test} (every figure in the tables). "
             f"In-vocabulary WER is over the {run_info.get('test_in_vocabulary')} test sentences whose words are "
             f"all among the words the graph outputs (in the LM and the lexicon): a TLG (and flashlight's "
             f"lexicon decoder) can only output those words, pyctcdecode and greedy decoding can spell others."]
    for p in run_info["profiles"]:
        lines.append(f"  - `{p}`: {PROFILE_NOTES.get(p, p)}")
    lines += [f"- RTFx = audio seconds (40 ms per frame) / decoding seconds, decoding only (emissions in memory), "
              f"best of {run_info['repeat']} passes. Peak memory = the process's peak resident memory during the "
              f"cell above what it held before (graph or LM loaded inside the cell, plus the search).",
              f"- Machine: {m['cpu']}, {m['cores']} cores, {m.get('memory_gib')} GiB, "
              f"{'GPU ' + m['gpu'] if m.get('gpu') else 'no GPU'}; {m['platform']}, Python {m['python']}; "
              f"commit {m.get('commit')}; report written {m['date']}. 1-minute load average during the timed "
              f"(test) cells: " + ("-" if not run_info.get("timed_load") else
                                   f"{run_info['timed_load'][0]:.2f} to {run_info['timed_load'][1]:.2f}")
              + " (the decoders' own thread counts included; per cell in results.csv).",
              "- Versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v),
              "- Code of the cells: " + "; ".join(f"{_code_text(json.loads(k))} ({n} cells)"
                                                  for k, n in run_info.get("code_states", {}).items()) + ".",
              f"- Cells: {run_info['ran']} run, {run_info['skipped']} reused from an earlier run "
              f"({run_info['seconds']:.0f} s wall); measured between "
              + (" and ".join(run_info["measured"]) if run_info.get("measured") else "-") + "."]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the two experiments

OURS_POINTS = ({"beam": 16.0, "max_active": 7000}, {"beam": 12.0, "max_active": 3000},
               {"beam": 8.0, "max_active": 1000}, {"beam": 5.0, "max_active": 500})
BLANK_PENALTIES = (0.0, 1.0, 2.0, 3.0)  # ours and Kaldi: cost per blank frame (fewer deletions)
WORD_SCORES = (-1.0, 0.0, 1.5, 3.0)  # flashlight: score per word
BETAS = (0.0, 1.0, 2.0, 3.0)  # pyctcdecode: score per word
TOKEN_INSERTIONS = (0.0, 0.5, 1.0, 2.0)  # our beam search: bonus per token
BEAM_POINTS = ({"beam_size": 32, "beam_threshold": 20.0}, {"beam_size": 16, "beam_threshold": 20.0},
               {"beam_size": 8, "beam_threshold": 20.0}, {"beam_size": 4, "beam_threshold": 20.0},
               {"beam_size": 2, "beam_threshold": 20.0})
FLASHLIGHT_POINTS = ({"beam_size": 100, "beam_size_token": 16, "beam_threshold": 25.0},
                     {"beam_size": 50, "beam_size_token": 16, "beam_threshold": 25.0},
                     {"beam_size": 20, "beam_size_token": 8, "beam_threshold": 20.0},
                     {"beam_size": 8, "beam_size_token": 8, "beam_threshold": 15.0})
# pyctcdecode prunes by score (beam_prune_logp, token_min_logp) more than by beam_width.
PYCTCDECODE_POINTS = ({"beam_width": 100}, {"beam_width": 25}, {"beam_width": 8},
                      {"beam_width": 25, "beam_prune_logp": -5.0, "token_min_logp": -3.0})
QUICK = {"weights": (0.5, 1.0), "insertions": 2, "points": 2}


def _weights(quick: bool) -> tuple[float, ...]:
    return QUICK["weights"] if quick else LM_WEIGHTS


def _ins(values, quick: bool) -> tuple[float, ...]:
    return tuple(values[:QUICK["insertions"]]) if quick else tuple(values)


def _pts(points, quick: bool) -> list[dict]:
    return list(points[:QUICK["points"]]) if quick else list(points)


def ours_grid(quick: bool = False) -> dict:
    return {"acoustic_scale": [round(1.0 / w, 4) for w in _weights(quick)],
            "blank_penalty": list(_ins(BLANK_PENALTIES, quick))}


def _tuning(quick: bool, weight: str, insertion: str) -> dict:
    """How the grid of (LM weight, insertion) grows at its edges; not in quick mode."""
    return {"grid_kind": {weight: "geometric", insertion: "arithmetic"}, "max_extend": 0 if quick else 3}


def topology_systems(quick: bool = False) -> Callable[[Target], list[System]]:
    """Our CPU decoder on one thread, tuned per graph on dev."""
    def make(target: Target) -> list[System]:
        return [OursSystem("ours-cpu1", "ours, CPU, 1 thread", threads=1, grid=ours_grid(quick),
                           tune_point=OURS_POINTS[0], points=_pts(OURS_POINTS, quick),
                           **_tuning(quick, "acoustic_scale", "blank_penalty"))]
    return make


DECODER_KEYS = ("greedy", "ours-cpu1", "ours-cpu1-top4", "ours-cpu", "ours-cuda", "kaldi", "flashlight", "ours-beam",
                "ours-beam-cuda", "flashlight-lexicon-free", "pyctcdecode")  # decoder_systems' systems, in order


def decoder_systems(quick: bool = False, venv: str | os.PathLike = PYCTCDECODE_VENV,
                    include: Sequence[str] | None = None) -> Callable[[Target], list[System]]:
    """greedy; ours (CPU 1 thread, with FLToP top-4, all cores, CUDA); Kaldi; flashlight; pyctcdecode."""
    def make(target: Target) -> list[System]:
        threads = usable_cores()
        pts = _pts(OURS_POINTS, quick)
        out = [
            GreedySystem("greedy", "greedy CTC (no LM)"),
            OursSystem("ours-cpu1", "ours, CPU, 1 thread", threads=1, grid=ours_grid(quick),
                       tune_point=OURS_POINTS[0], points=pts, **_tuning(quick, "acoustic_scale", "blank_penalty")),
            OursSystem("ours-cpu1-top4", "ours, CPU, 1 thread, FLToP top-4", threads=1, tuned_like="ours-cpu1",
                       points=pts, fixed={"token_top_n": 4}),
            OursSystem("ours-cpu", f"ours, CPU, {threads} thread{'s' if threads > 1 else ''}", threads=None,
                       tuned_like="ours-cpu1", points=pts[:1]),
            OursSystem("ours-cuda", "ours, CUDA", device="cuda", tuned_like="ours-cpu1", points=pts),
            KaldiSystem("kaldi", "Kaldi FasterDecoder (1 thread)", grid=ours_grid(quick), tune_point=OURS_POINTS[0],
                        points=pts, **_tuning(quick, "acoustic_scale", "blank_penalty")),
            FlashlightSystem("flashlight", "flashlight-text LexiconDecoder + KenLM (1 thread)",
                             grid={"lm_weight": [round(lm_weight_for("flashlight", w), 4) for w in _weights(quick)],
                                   "word_score": list(_ins(WORD_SCORES, quick))},
                             tune_point=FLASHLIGHT_POINTS[1], points=_pts(FLASHLIGHT_POINTS, quick),
                             **_tuning(quick, "lm_weight", "word_score")),
            BeamSearchSystem("ours-beam", "ours, lexicon-free beam search + token LM (1 thread)",
                             grid={"lm_weight": list(_weights(quick)),
                                   "token_insertion": list(_ins(TOKEN_INSERTIONS, quick))},
                             tune_point=BEAM_POINTS[1], points=_pts(BEAM_POINTS, quick),
                             **_tuning(quick, "lm_weight", "token_insertion")),
            BeamSearchSystem("ours-beam-cuda", "ours, lexicon-free beam search + token LM, CUDA", device="cuda",
                             tuned_like="ours-beam", points=_pts(BEAM_POINTS, quick)),
            FlashlightLexiconFreeSystem("flashlight-lexicon-free",
                                        "flashlight-text LexiconFreeDecoder + token KenLM (1 thread)",
                                        grid={"lm_weight": list(_weights(quick)),
                                              "sil_score": list(_ins(WORD_SCORES, quick)) if target.word_boundary
                                              else [0.0]},
                                        tune_point=BEAM_POINTS[1], points=_pts(BEAM_POINTS, quick),
                                        **_tuning(quick, "lm_weight", "sil_score")),
            PyctcdecodeSystem("pyctcdecode", "pyctcdecode 0.5.0 + kenlm (1 thread)", venv=venv,
                              grid={"alpha": [round(lm_weight_for("pyctcdecode", w), 4) for w in _weights(quick)],
                                    "beta": list(_ins(BETAS, quick))},
                              tune_point=PYCTCDECODE_POINTS[0], points=_pts(PYCTCDECODE_POINTS, quick),
                              **_tuning(quick, "alpha", "beta")),
        ]
        assert tuple(s.key for s in out) == DECODER_KEYS
        wanted = set(DECODER_KEYS if include is None else include)
        wanted |= {s.tuned_like for s in out if s.key in wanted and s.tuned_like}  # (else untuned, labelled tuned)
        return [s for s in out if s.key in wanted]
    return make


def graph_row(target: Target) -> dict:
    """Sizes and build costs of a graph directory, from its graph.json."""
    info = json.loads((Path(target.graph_dir) / "graph.json").read_text(encoding="utf-8"))
    sizes = info.get("sizes", {})
    stages = info.get("stages", {})
    skipped = [k for k, v in stages.items() if "cached" in str(v.get("skipped", ""))]
    peaks = [v["peak_rss_mb"] for v in stages.values() if v.get("peak_rss_mb") is not None]
    return {"target": target.name, "token_set": target.token_set, "topology": target.topology,
            "columns": info.get("num_columns"), "lg_states": sizes.get("LG", {}).get("states"),
            "lg_arcs": sizes.get("LG", {}).get("arcs"),
            "states": sizes.get("TLG", {}).get("states"), "arcs": sizes.get("TLG", {}).get("arcs"),
            "epsilon_arcs": sizes.get("TLG", {}).get("epsilon_arcs"),
            "file_mb": info.get("files", {}).get("TLG.fst", 0) / 2**20,
            "build_seconds": info.get("build_seconds"),
            "tlg_seconds": stages.get("T ∘ LG", {}).get("seconds"),
            "build_peak_mb": max(peaks) if peaks else None,
            "cold_build": not skipped}


def code_states(result: dict) -> dict[str, int]:
    """How many cells (test rows and tuning rows) each code state made: {json state: count}."""
    counts: dict[str, int] = {}
    for r in [*result["rows"], *result["tuning"]]:
        if r.get("status", "ok") == "ok":
            k = json.dumps(r.get("code") or {"commit": "unknown"}, sort_keys=True)
            counts[k] = counts.get(k, 0) + 1
    return counts


def _tuned_rows(result: dict) -> list[dict]:
    """One row per (target, profile, system) that was tuned: the chosen values and their dev WER."""
    seen, out = set(), []
    grids: dict[tuple, list] = {}
    for t in result["tuning"]:
        grids.setdefault((t["target"], t["profile"], t["system"]), []).append(t)
    for r in result["rows"]:
        k = (r["target"], r["profile"], r["system"])
        if r.get("status") != "ok" or k in seen or k not in grids:
            continue
        seen.add(k)
        edge = []
        for name, value in r["params"].items():
            values = sorted({float(dict(p.split("=") for p in g["params"].split(","))[name]) for g in grids[k]})
            if len(values) > 1 and float(value) in (values[0], values[-1]):
                edge.append(name)
        out.append({"target": r["target"], "profile": r["profile"], "label": r["label"], "tuned": r["tuned"],
                    "dev_wer": r["dev_wer"], "tried": len(grids[k]),
                    "edge": ", ".join(edge) or "no"})
    return out


TUNED_COLUMNS = [Column("target", "graph"), Column("profile", "emissions"), Column("label", "decoder"),
                 Column("tuned", "chosen on dev"), Column("dev_wer", "dev WER", "{:.2%}"),
                 Column("tried", "settings tried"), Column("edge", "at the grid's edge")]


def _pct(rows):
    for r in rows:
        for k in ("wer", "dev_wer", "iv_wer", "oov_wer"):
            if r.get(k) is not None:
                r[k + "_pct"] = 100 * r[k]
    return rows


def _grid_text(s: System) -> str:
    parts = [f"{k} ∈ {{{', '.join(f'{v:g}' for v in vals)}}}" for k, vals in s.grid.items()]
    return " × ".join(parts)


def _growth_text(s: System) -> str:
    if not s.max_extend:
        return ""
    return (f", a dimension grown by one step (same ratio for weights, same step for insertion scores) while "
            f"the best value lay on its edge, at most {s.max_extend} steps a side")


def systems_markdown(systems: Sequence[System]) -> str:
    lines = []
    for s in systems:
        if s.tuned_like:
            tune = f"uses the values tuned for `{s.tuned_like}`"
        elif s.grid:
            tune = f"tuned on dev over {_grid_text(s)} at {_fmt_params(s.tune_point)}" + _growth_text(s)
        else:
            tune = "nothing to tune"
        fixed = {k: v for k, v in s.fixed.items() if k not in ("graph", "lm", "device", "batch_size")}
        lines.append(f"- `{s.key}` ({s.label}): {tune}; test settings: "
                     + "; ".join(_fmt_params(p) for p in s.points)
                     + (f"; fixed: {_fmt_params(fixed)}" if fixed else ""))
    return "\n".join(lines)


def _run(experiment: str, out, targets: Sequence[Target], systems, *, dev_texts, test_texts, texts_from, profiles, seed,
         repeat, quick, progress, force, retime, code) -> tuple[dict, dict]:
    """:func:`run_experiment`, and what run.json and results.md say about the run: (result, run_info)."""
    t0 = time.time()
    machine = _machine(code)
    res = run_experiment(out, targets, systems, dev_texts=dev_texts, test_texts=test_texts, profiles=profiles,
                         seed=seed, repeat=repeat, progress=progress, force=force, retime=retime, desc=experiment,
                         code=code)
    run_info = {"experiment": experiment, "machine": machine, "seed": seed, "repeat": repeat,
                "quick": quick, "profiles": list(profiles), "dev_utterances": len(dev_texts),
                "texts_from": list(texts_from or GIVEN_TEXTS),
                "test_utterances": len(test_texts), "test_in_vocabulary": res["test_in_vocabulary"],
                "ran": res["ran"], "skipped": res["skipped"], "code_states": code_states(res),
                "measured": res["measured"], "timed_load": _load_range(res["rows"]),
                "seconds": time.time() - t0, "targets": [dataclasses.asdict(t) for t in targets]}
    return res, run_info


def compare_topologies(out: str | os.PathLike, targets: Sequence[Target], *, dev_texts: Sequence[str],
                       test_texts: Sequence[str], profiles: Sequence[str] = tuple(PROFILES), seed: int = 0,
                       repeat: int = 2, quick: bool = False, progress: bool = True, force: bool = False,
                       retime: bool = False, code: dict | None = None,
                       texts_from: tuple[str, str] | None = None) -> dict:
    """normal / compact / minimal TLGs side by side: sizes, build costs, WER, RTFx, tokens/frame, memory.
    `code`: the commit (and uncommitted changes) the recipe runs, recorded per cell and in results.md;
    `texts_from`: where the dev and test sentences come from, as results.md says it."""
    systems = topology_systems(quick)
    res, run_info = _run("compare-topologies", out, targets, systems, dev_texts=dev_texts, test_texts=test_texts,
                         texts_from=texts_from, profiles=profiles, seed=seed, repeat=repeat, quick=quick,
                         progress=progress, force=force, retime=retime, code=code)
    graphs = {t.name: graph_row(t) for t in targets}
    rows = _pct([{**graphs[r["target"]], **r} for r in res["rows"]])
    graph_cols = [Column("target", "graph"), Column("columns", "tokens"), Column("states", "TLG states", "{:,}"),
                  Column("arcs", "TLG arcs", "{:,}"), Column("epsilon_arcs", "epsilon arcs", "{:,}"),
                  Column("file_mb", "TLG.fst MiB", "{:.1f}"), Column("build_seconds", "build s", "{:.1f}"),
                  Column("tlg_seconds", "of which T ∘ LG s", "{:.1f}"),
                  Column("build_peak_mb", "build peak MiB", "{:,.0f}")]
    main_cols = [Column("target", "graph"), Column("profile", "emissions"), Column("setting", "beam, max_active"),
                 Column("states", "states", "{:,}"), Column("arcs", "arcs", "{:,}"),
                 Column("file_mb", "MiB", "{:.1f}"), Column("build_seconds", "build s", "{:.1f}"),
                 Column("wer_pct", "WER %", "{:.2f}"), Column("iv_wer_pct", "in-vocab WER %", "{:.2f}"),
                 Column("rtfx", "RTFx", "{:,.0f}"), Column("tokens_per_frame", "tokens/frame", "{:,.0f}"),
                 Column("peak_mb", "peak MiB", "{:,.0f}")]
    ref = _fmt_params(OURS_POINTS[0])
    summary = [r for r in rows if r.get("setting") == ref or r.get("status") != "ok"]
    cold = all(g["cold_build"] for g in graphs.values())
    md = [settings_markdown(run_info),
          "- Decoder: ours, CPU backend, 1 thread, batches of 64; tuning cells use every core (their WER does "
          "not depend on it).",
          "- Tuned per graph and emissions profile on dev: " + _grid_text(systems(targets[0])[0])
          + f" at {ref}" + _growth_text(systems(targets[0])[0]) + " (LM weight = 1 / acoustic_scale; "
          "blank_penalty is the cost of each blank frame, the word-insertion knob of a TLG search).",
          "- Graphs: built from the same ARPA and word list for each token set; "
          + ("each from scratch (its own cache), so build seconds compare." if cold else
             "some stages were taken from a cache of an earlier build, so their build seconds count only the "
             "stages they ran (graphs.csv: cold_build)."),
          "", "## Graphs", "", markdown_table(list(graphs.values()), graph_cols), "",
          "## Tuned on dev", "", markdown_table(_tuned_rows(res), TUNED_COLUMNS, label_columns=3), "",
          f"## Test, at {ref}", "", markdown_table(summary, main_cols, label_columns=3), "",
          "## Test, every setting", "", markdown_table(rows, main_cols, label_columns=3), "",
          "## Goal: compact WER ≤ normal WER at equal speed", "", *topology_goal(rows), "",
          _plot_link(rows), "", "![graph sizes](graph_size.png)"]
    write_results(out, title="compare-topologies: normal, compact and minimal CTC topologies",
                  markdown="\n".join(md), rows=rows, tuning=res["tuning"], run_info=run_info,
                  extra_csv={"graphs.csv": csv_text(list(graphs.values()), list(next(iter(graphs.values()))))})
    _plots(out, lambda: plot_wer_rtfx(rows, Path(out) / "wer_vs_rtfx.png", line_key="topology",
                                      title=_smoke("Topologies: WER vs speed (ours, CPU, 1 thread; SYNTHETIC "
                                                   "emissions)", run_info)),
           lambda: plot_graph_sizes(list(graphs.values()), Path(out) / "graph_size.png",
                                    title=_smoke("TLG size per topology", run_info)))
    res.update(rows=rows, graphs=graphs, markdown="\n".join(md), run_info=run_info)
    return res


def compare_decoders(out: str | os.PathLike, targets: Sequence[Target], *, dev_texts: Sequence[str],
                     test_texts: Sequence[str], profiles: Sequence[str] = tuple(PROFILES), seed: int = 0,
                     repeat: int = 2, quick: bool = False, progress: bool = True, force: bool = False,
                     retime: bool = False, venv: str | os.PathLike = PYCTCDECODE_VENV,
                     include: Sequence[str] | None = None, code: dict | None = None,
                     texts_from: tuple[str, str] | None = None) -> dict:
    """greedy, ours (CPU, CUDA), Kaldi, flashlight-text, pyctcdecode on the same emissions, LM and lexicon.
    `venv`: pyctcdecode's (``make pyctcdecode-venv``); `code`, `texts_from`: as for :func:`compare_topologies`."""
    systems = decoder_systems(quick, venv, include)
    res, run_info = _run("compare-decoders", out, targets, systems, dev_texts=dev_texts, test_texts=test_texts,
                         texts_from=texts_from, profiles=profiles, seed=seed, repeat=repeat, quick=quick,
                         progress=progress, force=force, retime=retime, code=code)
    rows = _pct(res["rows"])
    cols = [Column("target", "graph"), Column("profile", "emissions"), Column("label", "decoder"),
            Column("setting", "setting"), Column("wer_pct", "WER %", "{:.2f}"),
            Column("iv_wer_pct", "in-vocab WER %", "{:.2f}"), Column("oov_wer_pct", "OOV WER %", "{:.2f}"),
            Column("rtfx", "RTFx", "{:,.0f}"),
            Column("tokens_per_frame", "tokens/frame", "{:,.0f}"), Column("peak_mb", "peak MiB", "{:,.0f}"),
            Column("tuned", "tuned on dev"), Column("dev_wer_pct", "dev WER %", "{:.2f}")]
    best = _best_rows(rows)
    ours = [k for k in ("ours-cpu1", "ours-cpu1-top4")]
    cpu_peers = ["kaldi", "flashlight", "pyctcdecode"]
    md = [settings_markdown(run_info),
          "- The same TLG for ours and Kaldi; flashlight gets the same ARPA and the graph's lexicon (its words "
          "spelled as the graph spells them); pyctcdecode the same ARPA with the graph's words as unigrams. "
          "The LM weights tried are the same for every decoder, "
          f"{{{', '.join(f'{w:g}' for w in _weights(quick))}}} against natural-log acoustic scores: "
          "acoustic_scale = 1/w (ours, Kaldi), lm_weight = ln(10)·w (flashlight: KenLM's log10 scores), "
          "alpha = w (pyctcdecode). Each decoder's own word-insertion knob is tuned with it.",
          "", "### Decoders and settings", "", systems_markdown(systems(targets[0])), "",
          "## Tuned on dev", "", markdown_table(_tuned_rows(res), TUNED_COLUMNS, label_columns=3), "",
          "## Test: each decoder at its best setting (lowest test WER; ties: fastest)", "",
          markdown_table(best, cols, label_columns=3), "",
          "## Test, every setting", "", markdown_table(rows, cols, label_columns=3), "",
          "## Goals", "", *decoder_goals(rows, ours, cpu_peers), "",
          "### Lexicon-free: our beam search against the lexicon-free peers", "",
          "flashlight's LexiconFreeDecoder with the same token LM; pyctcdecode, a token-level prefix search "
          "scored by the word LM at word ends.", "",
          *decoder_goals(rows, ["ours-beam"], ["flashlight-lexicon-free", "pyctcdecode"]),
          *oov_goal(rows, "ours-beam", "ours-cpu1"), "",
          _plot_link(rows)]
    write_results(out, title="compare-decoders: our decoder and its peers on the same emissions",
                  markdown="\n".join(md), rows=rows, tuning=res["tuning"], run_info=run_info)
    _plots(out, lambda: plot_wer_rtfx(rows, Path(out) / "wer_vs_rtfx.png", line_key="label",
                                      title=_smoke("Decoders: WER vs speed, one point per test setting "
                                                   "(SYNTHETIC emissions; greedy CTC in the tables)", run_info)))
    res.update(rows=rows, markdown="\n".join(md), run_info=run_info)
    return res


def _plots(out, *draw) -> None:
    """Draw the plots; without matplotlib, say so in results.md instead of failing the run.
    An earlier run's plots in the folder go first (another experiment's, or one this run
    does not draw, would sit beside its results as if they were theirs)."""
    for name in PLOTS:
        (Path(out) / name).unlink(missing_ok=True)
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        md = Path(out) / "results.md"
        note = f"\n(Plots not drawn: matplotlib is not installed: {e})\n"
        write_text_atomic(md, md.read_text(encoding="utf-8") + note)
        return
    for d in draw:
        d()


def _best_rows(rows: Sequence[dict]) -> list[dict]:
    """Per (graph, profile, decoder): the setting with the lowest WER (then the fastest); unmeasured rows kept."""
    out, index = [], {}
    for r in rows:
        k = (r["target"], r["profile"], r["system"])
        if r.get("status") != "ok":
            out.append(r)
            continue
        if k not in index:
            index[k] = len(out)
            out.append(r)
        else:
            b = out[index[k]]
            if (r["wer"], -(r.get("rtfx") or 0)) < (b["wer"], -(b.get("rtfx") or 0)):
                out[index[k]] = r
    return out
