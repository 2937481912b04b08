#!/usr/bin/env python3
"""make gpu-check: verify and measure the CUDA backend on this machine's GPU, in one command.

1. The machine: GPU, driver, CUDA runtime, CuPy (and which wheel: cupy-cuda12x or -13x),
   numba, numba-cuda, NumPy, Python; a tiny kernel must compile and run.
2. The CUDA tests (tests/test_cuda.py and the beam search's) on the GPU, not the simulator.
3. CUDA == CPU on the six demo graphs, for every held-out sentence (seed 0) and 1,128 more
   synthetic utterances (seeds 1-4): the same words, word frames and reached_final, costs
   to 1e-4.  Then, on 256 of them, with 20 boosted words, a phrase and FLToP switched on;
   and on the character and BPE compact graphs of the demo LM's 2-gram, with on-the-fly
   rescoring by the 3-gram as well.
4. The GPU benchmark: char_compact and bpe_compact x beam/max_active 16/7000 and 12/3000 x
   batch 1, 8, 64, 256, 1,024: RTFx, frames/s, milliseconds per frame step, the GPU's share
   of the wall time (CUDA events from a search's first kernel to its last), peak device
   memory (CuPy's pool), and the ratio to Kaldi's FasterDecoder on one CPU thread of this
   machine (same TLG, beam, max_active, utterances); batch 1 without CUDA graphs; word
   boosting of 1,000 words; on-the-fly rescoring on the GPU against our CPU backend on one
   thread, with both WERs; 16, 128 and 512 live streams (bpe_compact, 320 ms chunks, each
   4 utterances back to back so that every call advances all of them):
   their results against the CPU's offline decode, aggregate RTFx and advance() latency
   (the goal: 512 streams within 40 ms a call); word lattices (lattice beam 8) on the GPU:
   the same as the CPU's, and their cost against the GPU's best path; the lexicon-free beam
   search (CtcBeamDecoder, beam 8 and 32, the demo's token LMs): the same as on the CPU,
   with and without a boosted phrase, and its RTFx by batch against the CPU on one thread.
5. build/gpu-check/report.md and report.json (written again after each section, so that a
   run stopped part-way leaves what it did); the exit status is 1 if any check failed.

--only picks sections (in this order): tests, streams, rescoring, rescoring-large,
equality, batches, boost, lattices, beam-search; --stop-after S skips the sections not
begun after S seconds.  rescoring-large is the large setup of make bench-rescore (its
files in build/rescore/large): rescoring on the GPU against our CPU backend on one thread,
both WERs; it is skipped, with a note, where they are missing.  Where pynini is not
installed (a GPU machine with no package index), the graphs are read as built elsewhere:
make gpu-kit packs them with the wheels such a machine lacks (docs/benchmarks.md says how).

Synthetic emissions (wfst.synthetic) of the demo's held-out sentences; 40 ms frames.  A
batch decodes utterances of similar lengths (a random sample sorted by length, as an
offline job would batch them): a batch's step count is its longest utterance's frames.

--simulate (make gpu-check SIMULATE=1) runs the same steps in Numba's CUDA simulator on a
tiny subset (the BPE compact graphs, the shortest sentence, narrow beams, batches of 1 and 2):
it checks the script where there is no GPU (CI); its figures measure nothing.
"""
from __future__ import annotations

import os
import sys

SIMULATE = "--simulate" in sys.argv
os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if SIMULATE else "0"  # before numba is imported

import dataclasses  # noqa: E402
import functools  # noqa: E402
import importlib.metadata as metadata  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import recipe_cli  # noqa: E402
from demo_data import LM, PROFILES, TOKEN_SETS, emission_options, sentences  # noqa: E402
from numba import cuda  # noqa: E402
from slim_wheel import slim_wheel  # noqa: E402
from tqdm import tqdm  # noqa: E402

from wfst.scoring import FRAME_SECONDS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COST_TOLERANCE = 1e-4


@dataclasses.dataclass(frozen=True)
class Scale:
    """How much the check decodes: the real run, or the simulator's tiny subset."""

    sentences: int | None  # held-out sentences (None: all)
    seeds: int  # synthetic copies of each (seed 0 is "the held-out sentences")
    extras: int  # utterances decoded with boosts, phrase, rescoring and FLToP on
    check_config: dict  # the equality check's beam and max_active
    bench_configs: tuple  # (beam, max_active) of the benchmark
    batches: tuple
    kaldi_utterances: int
    rescore_utterances: int
    no_graph_utterances: int
    stream_counts: tuple = (16, 128, 512)  # live streams of the streams benchmark
    topologies: tuple = ("normal", "compact", "minimal")  # of the equality check's demo graphs
    options: dict = dataclasses.field(default_factory=dict)  # more Decoder options of the benchmark
    token_sets: tuple = ("char", "bpe")
    beam_sizes: tuple = (8, 32)  # of the lexicon-free beam search


FULL = Scale(None, 5, 256, dict(beam=16.0, max_active=7000), ((16.0, 7000), (12.0, 3000)), (1, 8, 64, 256, 1024),
             128, 64, 4)
TINY = Scale(1, 1, 1, dict(beam=8.0, max_active=16, min_active=4, token_capacity=64), ((8.0, 16),), (1, 2), 1, 1, 1,
             (1,), ("compact",), dict(token_capacity=64), ("bpe",), (2,))


# ---------------------------------------------------------------------- the report

class Report:
    """The checks, the benchmark's rows and the sections' figures, written out by save()."""

    def __init__(self, out: Path, args: list[str]):
        self.out, self.args = out, args
        self.checks, self.env, self.bench, self.extras = [], {}, [], {}

    def check(self, name: str, ok: bool, detail: str = ""):
        self.checks.append(dict(name=name, ok=bool(ok), detail=detail))
        print(f"  [{'ok' if ok else 'FAILED'}] {name}{': ' + detail if detail else ''}", flush=True)

    @property
    def ok(self) -> bool:
        return all(c["ok"] for c in self.checks)

    def save(self):
        self._write(self.out, self.env, self.bench, self.extras, self.args)

    def _write(self, out: Path, env: dict, bench: list, extras: dict, args):
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(dict(simulated=SIMULATE, environment=env, checks=self.checks,
                                                         benchmark=bench, **extras), indent=1, default=str))
        lines = ["# gpu-check report", ""]
        if SIMULATE:
            lines += ["**Simulated** (Numba's CUDA simulator, tiny subset): checks the script; the figures measure "
                      "nothing.", ""]
        lines += ["## Machine", "", "| | |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in env.items()]
        lines += ["", f"## Checks: {'all passed' if self.ok else 'FAILED'}", ""]
        lines += [f"- {'ok' if c['ok'] else '**FAILED**'}: {c['name']}{' (' + c['detail'] + ')' if c['detail'] else ''}"
                  for c in self.checks]
        if bench:
            lines += ["", "## Benchmark", "", bench_note(), "",
                      "| graph | beam/max_active | batch | CUDA graphs | utts | RTFx | frames/s | ms/step | GPU busy "
                      "| peak GiB | x Kaldi |", "| --- | --- | ---: | --- " + "| ---: " * 7 + "|"]
            for r in bench:
                lines.append(f"| {r['graph']} | {r['beam']:g}/{r['max_active']} | {r['batch']} | "
                             f"{'yes' if r['cuda_graphs'] else 'no'} | {r['utterances']} | {r['rtfx']:,.0f} | "
                             f"{r['frames_per_s']:,.0f} | {r['ms_per_step']:.3f} | {100 * r['gpu_busy']:.0f}% | "
                             f"{r['peak_gib']:.2f} | {r['vs_kaldi']:.1f} |")
        for name, section in extras.items():
            lines += ["", f"## {name}", ""] + [f"- {k}: {v}" for k, v in section.items()]
        lines += ["", f"Command: `{' '.join(['python', 'recipes/gpu_check.py', *args])}`", ""]
        (out / "report.md").write_text("\n".join(lines))


def bench_note() -> str:
    return ("Synthetic emissions of the demo's held-out sentences, 40 ms frames; each batch holds utterances of "
            "similar length (a random sample sorted by length); ms/step = wall time / frame steps (a batch's steps "
            "are its longest utterance's frames); GPU busy = CUDA-event time from each search's first kernel to its "
            "last / wall time; x Kaldi = RTFx / Kaldi FasterDecoder's RTFx on one CPU thread of this machine (same "
            "TLG, beam, max_active).")


# ---------------------------------------------------------------------- the graphs

class DemoGraphs:
    """The demo graphs the sections ask for, by name ("bpe_compact"; "bpe_compact_2gram":
    on the demo 3-gram's 2-gram), loaded once: built here, or found up to date, by
    compile_graph; where pynini is not installed (a GPU machine with no package index), read
    as built elsewhere and copied here (make gpu-kit)."""

    def __init__(self, build: Path):
        self.build, self.loaded = build, {}

    @functools.cached_property
    def small_lm(self) -> Path:
        """The demo 3-gram's 2-gram (the 2-gram graphs' LM), made once a run."""
        from wfst.lm import truncate_arpa

        path = self.build / "gpu-check" / "lm_2gram.arpa"
        if self.built_elsewhere():
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        return truncate_arpa(LM, path, 2)

    def directory(self, name: str) -> Path:
        token_set, topology, *small = name.split("_")
        home = self.build / ("gpu-check" if small else "demo")
        if self.built_elsewhere():
            if not (home / name / "graph.json").is_file():
                raise SystemExit(f"{home / name}: no graph there, and no pynini here to build it: make gpu-kit on "
                                 f"a machine with pynini packs the graphs to copy (docs/benchmarks.md)")
            return home / name
        from wfst.graphs import compile_graph

        return compile_graph(home / name, lm=self.small_lm if small else LM, topology=topology,
                             cache_dir=home / ".wfst-cache", **TOKEN_SETS[token_set]).directory

    def __getitem__(self, name: str):
        import wfst

        if name not in self.loaded:
            self.loaded[name] = wfst.load_graph(self.directory(name))
        return self.loaded[name]

    @staticmethod
    def built_elsewhere() -> bool:
        try:
            import pywrapfst  # noqa: F401 -- pynini's OpenFST bindings: graphs can be built here
        except ImportError:
            return True
        return False


# ---------------------------------------------------------------------- 1. the machine

def environment(report: Report) -> dict:
    env = {"python": platform.python_version()}
    for pkg in ("numpy", "numba", "numba-cuda", "cupy-cuda12x", "cupy-cuda13x", "cupy", "torch"):
        try:
            env[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    wheels = [p for p in ("cupy-cuda12x", "cupy-cuda13x") if p in env]
    env["cupy wheel"] = ", ".join(wheels) or ("none" if "cupy" not in env else "cupy (built from source)")
    if not SIMULATE:
        try:
            import cupy

            rt = cupy.cuda.runtime
            props = rt.getDeviceProperties(0)
            env["device"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            env["compute capability"] = f"{props['major']}.{props['minor']}"
            env["device memory"] = f"{props['totalGlobalMem'] / 2**30:.1f} GiB"
            env["CUDA runtime"] = _cuda_version(rt.runtimeGetVersion())
            env["CUDA driver API"] = _cuda_version(rt.driverGetVersion())
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True)
            if smi.returncode == 0:
                env["driver"] = smi.stdout.strip()
        except Exception as e:  # noqa: BLE001 -- a report, whatever broke
            report.check("CuPy sees a GPU", False, f"{type(e).__name__}: {e}")
    try:
        a = np.arange(4, dtype=np.int32)
        d = cuda.to_device(a)
        cuda.jit(_add_one)[1, 32](d)
        report.check("a Numba-CUDA kernel compiles and runs", (d.copy_to_host() == a + 1).all())
    except Exception as e:  # noqa: BLE001
        report.check("a Numba-CUDA kernel compiles and runs", False,
                     f"{type(e).__name__}: {e} (numba {env.get('numba')}, numba-cuda {env.get('numba-cuda')}, "
                     f"numpy {env.get('numpy')}: install versions that work together)")
    return env


def _add_one(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] += 1


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


# ---------------------------------------------------------------------- 2. the CUDA tests

def test_workers() -> int:
    """pytest processes for the CUDA tests: on a GPU with pytest-xdist and the cores for it, 8
    (most of their time is compiling kernels, on the CPU); else 1."""
    return 8 if not SIMULATE and importlib.util.find_spec("xdist") and (os.cpu_count() or 1) >= 16 else 1


def cuda_tests(report: Report, workers: int):
    tests = ROOT / "tests" / "test_cuda.py"
    if not tests.is_file():
        report.check("CUDA tests", False, f"{tests} not found: run gpu-check from a source checkout")
        return
    paths, note = [str(tests)], ""
    if importlib.util.find_spec("kenlm") is not None:  # (the beam search's test module needs it; a kit has none)
        paths.append(f"{ROOT / 'tests' / 'test_beam_search.py'}::test_cuda_equals_cpu")
    else:
        note = "; the beam search's not run: no kenlm here (the beam-search section compares CUDA and CPU)"
    cmd = [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider"]
    if workers > 1:
        cmd += ["-n", str(workers)]
    if SIMULATE:
        cmd += ["-k", "random_graphs and 0-wide or cuda_equals_cpu and ties"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ))
    summary = (out.stdout.strip().splitlines() or [""])[-1]
    report.check(f"CUDA tests on the {'simulator' if SIMULATE else 'GPU'} (tests/test_cuda.py, the beam search's)",
                 out.returncode == 0,
                 f"{summary.strip('= ')}, {time.perf_counter() - t0:.0f} s"
                 + (f" in {workers} processes" if workers > 1 else "") + note)
    if out.returncode != 0:
        print(out.stdout[-4000:], out.stderr[-2000:])


# ---------------------------------------------------------------------- 3. CUDA == CPU

def differences(gpu, cpu) -> list[str]:
    """What differs between two results: words, frames, reached_final, a cost beyond 1e-4."""
    diff = [f for f in ("words", "word_frames", "reached_final") if getattr(gpu, f) != getattr(cpu, f)]
    diff += [f for f in ("cost", "acoustic_cost", "graph_cost", "boost_cost", "rescore_cost")
             if abs(getattr(gpu, f) - getattr(cpu, f)) > COST_TOLERANCE]
    return diff


def compare(report, name, gpu, cpu, x, lengths, batch, **kw) -> int:
    """Decode with both in batches; report the utterances that differ."""
    bad = []
    for i in range(0, len(lengths), batch):
        sl = slice(i, i + batch)
        for k, (g, c) in enumerate(zip(gpu.decode(x[sl], lengths[sl], **kw), cpu.decode(x[sl], lengths[sl], **kw))):
            if d := differences(g, c):
                bad.append((i + k, d))
    detail = f"{len(lengths) - len(bad)}/{len(lengths)} identical"
    if bad:
        detail += "; first: " + ", ".join(f"utterance {u} ({'/'.join(d)})" for u, d in bad[:3])
    report.check(name, not bad, detail)
    return len(bad)


def utterances(graph, token_set, texts, seeds, profile: str = "demo"):
    """Synthetic emissions of each text with seeds 0 .. seeds-1 (seed 0: the held-out sentences)
    and one of the demo's emission profiles."""
    from wfst import synthetic

    return synthetic.from_texts_seeds(texts, graph.tokens, seeds, **emission_options(token_set), **PROFILES[profile])


def equality(report: Report, scale: Scale, graphs: DemoGraphs, texts: list[str]):
    """CUDA == CPU on every demo graph, plain and with boosts, a phrase and FLToP; on the
    2-gram graphs, with rescoring by the 3-gram as well."""
    import wfst

    words = None
    names = [f"{s}_{t}" for s in scale.token_sets for t in scale.topologies]
    names += [f"{s}_compact_2gram" for s in scale.token_sets]
    for name in tqdm(names, desc="CUDA == CPU", unit="graph", disable=SIMULATE):
        g = graphs[name]
        token_set = name.split("_")[0]
        x, lengths = utterances(g, token_set, texts, scale.seeds)
        if words is None:
            vocab = [w for w in g.words.symbols[1:] if w.isalpha()]
            words = {w: 1.0 for w in np.random.default_rng(0).choice(vocab, min(20, len(vocab)), replace=False)}
            words["of the"] = 2.0  # a phrase
        extras = dict(scale.check_config, token_top_n=4 if token_set == "char" else 16, token_rel_threshold=0.001)
        what = "20 boosted words, a phrase and FLToP"
        if name.endswith("_2gram"):
            extras.update(rescore_lm=LM, graph_lm=graphs.small_lm)
            what = "rescoring by the 3-gram, " + what
        else:
            compare(report, f"{name}: {len(texts)} held-out + {len(lengths) - len(texts)} synthetic utterances",
                    wfst.Decoder(g, device="cuda", **scale.check_config),
                    wfst.Decoder(g, device="cpu", **scale.check_config), x, lengths, 256)
        n = scale.extras
        compare(report, f"{name}: {n} utterances with {what}", wfst.Decoder(g, device="cuda", **extras),
                wfst.Decoder(g, device="cpu", **extras), x[:n], lengths[:n], 64, boost=words)


# ---------------------------------------------------------------------- 4. the benchmark

def timed(decoder, x, lengths, batch, **kw):
    """Wall seconds, GPU seconds, steps and results of decoding in batches (after a warm-up)."""
    if not SIMULATE:  # compiles the kernels (the simulator compiles nothing)
        decoder.decode(x[:1], lengths[:1], **kw)
    wall = device = 0.0
    steps, results = 0, []
    for i in range(0, len(lengths), batch):
        sl = slice(i, i + batch)
        t0 = time.perf_counter()
        results += decoder.decode(x[sl], lengths[sl], **kw)
        wall += time.perf_counter() - t0
        device += decoder.stats.device_seconds
        steps += int(lengths[sl].max())
    return wall, device, steps, results


def batches(report: Report, scale: Scale, graphs: DemoGraphs, texts: list[str]) -> list:
    """The benchmark's rows: the compact graphs by beam and batch, against Kaldi's
    FasterDecoder on one CPU thread (where kaldi-decoder is installed)."""
    from wfst_bench.kaldi import KaldiFasterDecoder
    from wfst_bench.peers import PeerUnavailable

    import wfst

    xp = _array_module()
    rows = []
    rng = np.random.default_rng(0)
    for name in [f"{s}_compact" for s in scale.token_sets]:
        g = graphs[name]
        token_set = name.split("_")[0]
        x, lengths = utterances(g, token_set, texts, scale.seeds)
        for beam, max_active in scale.bench_configs:
            min_active = min(20, max_active // 2)
            cpu = wfst.Decoder(g, device="cpu", beam=beam, max_active=max_active, min_active=min_active,
                               **scale.options)
            sample = rng.permutation(len(lengths))[:scale.kaldi_utterances]
            try:
                kaldi = KaldiFasterDecoder(graphs.directory(name) / "TLG.fst", beam=beam, max_active=max_active,
                                           min_active=min_active, blank_column=g.tokens.blank)
                found = kaldi.decode(x[sample], lengths[sample])
                kaldi_rtfx = FRAME_SECONDS * lengths[sample].sum() / kaldi.seconds
                ours = cpu.decode(x[sample], lengths[sample])
                same = sum(tuple(r.word_ids) == k.word_ids for r, k in zip(ours, found))
                report.check(f"{name} {beam:g}/{max_active}: same words as Kaldi's FasterDecoder", True,
                             f"{same}/{len(sample)} utterances; Kaldi RTFx {kaldi_rtfx:,.0f} on one thread")
            except PeerUnavailable as e:
                kaldi_rtfx = float("nan")
                print(f"  (no Kaldi ratio: {e})")
            for batch in tqdm(scale.batches, desc=f"{name} {beam:g}/{max_active}", disable=SIMULATE):
                n = min(len(lengths), max(batch, 32 if batch == 1 else 128))
                pick = np.sort(rng.permutation(len(lengths))[:n])
                pick = pick[np.argsort(-lengths[pick], kind="stable")]
                xd, ld = xp.asarray(x[pick]), lengths[pick]
                for graphs_on in (True, False) if batch == 1 else (True,):
                    m = n if graphs_on else min(n, scale.no_graph_utterances)
                    gpu = wfst.Decoder(g, device="cuda", beam=beam, max_active=max_active, min_active=min_active,
                                       cuda_graphs=graphs_on, **scale.options)
                    _free_pool()
                    try:
                        wall, device, steps, _ = timed(gpu, xd[:m], ld[:m], batch)
                    except Exception as e:  # noqa: BLE001 -- the other rows still run
                        report.check(f"{name} {beam:g}/{max_active} batch {batch}: decoded", False,
                                     f"{type(e).__name__}: {e}")
                        continue
                    frames = int(ld[:m].sum())
                    rows.append(dict(graph=name, beam=beam, max_active=max_active, batch=batch, cuda_graphs=graphs_on,
                                     utterances=m, frames=frames, seconds=wall, rtfx=FRAME_SECONDS * frames / wall,
                                     frames_per_s=frames / wall, ms_per_step=1000 * wall / steps,
                                     gpu_busy=device / wall, peak_gib=_pool_bytes() / 2**30,
                                     vs_kaldi=FRAME_SECONDS * frames / wall / kaldi_rtfx))
    return rows


def boost(scale: Scale, graphs: DemoGraphs, texts: list[str]) -> dict:
    """Word boosting of 1,000 words on the GPU: bpe_compact, batch 64, the first config's beam."""
    import wfst

    xp = _array_module()
    g = graphs["bpe_compact"]
    beam, max_active = scale.bench_configs[0]
    x, lengths = utterances(g, "bpe", texts, scale.seeds)
    n = min(len(lengths), 256 if not SIMULATE else 2)
    xd = xp.asarray(x[:n])
    vocab = [w for w in g.words.symbols[1:] if w.isalpha()]
    words = {w: 1.0 for w in np.random.default_rng(0).choice(vocab, min(1000, len(vocab)), replace=False)}
    gpu = wfst.Decoder(g, device="cuda", beam=beam, max_active=max_active, min_active=min(20, max_active // 2),
                       **scale.options)
    plain = timed(gpu, xd, lengths[:n], 64)[0]
    boosted = timed(gpu, xd, lengths[:n], 64, boost=words)[0]
    return {"utterances": n, "boosted words": len(words), "seconds without": f"{plain:.3f}",
            "seconds with": f"{boosted:.3f}", "overhead": f"{100 * (boosted / plain - 1):+.1f}%"}


def beam_search(report, scale, g, token_set, texts) -> dict:
    """CtcBeamDecoder (the second decoder) on the GPU: the same results as on the CPU (words,
    frames, costs to 1e-4, N-best sizes), with a phrase boosted as well; RTFx by batch
    against the CPU on one thread."""
    from demo_data import TOKEN_LMS

    import wfst

    xp = _array_module()
    x, lengths = utterances(g, token_set, texts, scale.seeds)
    n = min(len(lengths), 256 if not SIMULATE else 1)
    x, lengths = x[:n], lengths[:n]
    spm = TOKEN_SETS[token_set].get("spm")
    phrases = ["of the"]
    out = {}
    for beam_size in scale.beam_sizes:
        config = dict(lm=TOKEN_LMS[token_set], beam_size=beam_size, lm_weight=0.5, token_insertion=1.0, spm=spm)
        cpu = wfst.CtcBeamDecoder(g.tokens, num_threads=1, **config)
        gpu = wfst.CtcBeamDecoder(g.tokens, device="cuda", **config)
        cpu_wall, _, _, want = timed(cpu, x, lengths, n)
        for kw in ({}, dict(phrases=phrases)):
            got = gpu.decode(xp.asarray(x), lengths, **kw)
            ref = want if not kw else cpu.decode(x, lengths, **kw)
            same = sum(not differences(a, b) and len(a.nbest) == len(b.nbest) for a, b in zip(got, ref))
            report.check(f"beam search {token_set}, beam {beam_size}{', a phrase' if kw else ''}: CUDA == CPU",
                         same == n, f"{same}/{n} identical")
        frames = int(lengths.sum())
        row = [f"CPU (1 thread) RTFx {FRAME_SECONDS * frames / cpu_wall:,.0f}"]
        for batch in scale.batches:
            if batch <= n and not SIMULATE:
                wall, device, _, _ = timed(gpu, xp.asarray(x), lengths, batch)
                row.append(f"batch {batch} RTFx {FRAME_SECONDS * frames / wall:,.0f} "
                           f"(GPU busy {100 * device / wall:.0f}%)")
        out[f"beam {beam_size}, {n} utterances"] = "; ".join(row)
    return out


def lattices(report, scale, g, name, texts, beam, max_active) -> dict:
    """Word lattices on the GPU: the same lattices as the CPU's (sizes, final states, 10-best
    lists with costs to 1e-3), and their cost against the GPU's best path (batch 64) and
    the CPU's lattices on one thread."""
    import wfst

    xp = _array_module()
    x, lengths = utterances(g, name.split("_")[0], texts, scale.seeds)
    n = min(len(lengths), 256 if not SIMULATE else 2)
    config = dict(beam=beam, max_active=max_active, min_active=min(20, max_active // 2), **scale.options)
    gpu = wfst.Decoder(g, device="cuda", lattice_beam=8.0, **config)
    cpu = wfst.Decoder(g, device="cpu", lattice_beam=8.0, num_threads=1, **config)
    xd = xp.asarray(x[:n])
    # (the simulator's timings measure nothing: there only the lattices are checked)
    best_path = timed(wfst.Decoder(g, device="cuda", **config), xd, lengths[:n], 64)[0] if not SIMULATE else math.nan
    with_lattice, _, _, got = timed(gpu, xd, lengths[:n], 64, nbest=10)
    m = min(n, 64 if not SIMULATE else 2)
    t0 = time.perf_counter()
    want = cpu.decode(x[:m], lengths[:m], nbest=10)
    cpu_seconds = time.perf_counter() - t0

    def summary(r):
        lat = r.lattice
        return (lat.num_states, lat.num_arcs, len(lat.finals),
                [(e.word_ids, round(e.cost, 3)) for e in r.nbest])

    same = sum(summary(a) == summary(b) for a, b in zip(got[:m], want))
    report.check(f"{name}: lattices CUDA == CPU", same == m, f"{same}/{m} utterances with the same lattice sizes, "
                 f"final states and 10-best lists")
    frames = int(lengths[:n].sum())
    return {"utterances": n, "GPU best path s": f"{best_path:.3f}", "GPU lattice + 10-best s": f"{with_lattice:.3f}",
            "lattice / best path": f"{with_lattice / best_path:.2f}x",
            "GPU lattice RTFx": f"{FRAME_SECONDS * frames / with_lattice:,.0f}",
            "CPU lattice RTFx (1 thread)": f"{FRAME_SECONDS * int(lengths[:m].sum()) / cpu_seconds:,.0f}"}


def streams(report, scale, g, texts, beam, max_active) -> dict:
    """N live streams on the GPU advanced 320 ms at a time (a call's chunks one (N, T, V)
    array already on the device, as from a batched acoustic model there).  Each stream is 4
    utterances back to back, all cut to the shortest, so that every call advances all N
    (the goal: 512 streams within 40 ms a call), and each call is followed by the N partial
    results (Decoder.partials: a captioning server's loop).  Results against the CPU's
    offline decode, the partials' stable words against the final words, aggregate RTFx
    (partials left out), and the latency of advance() and of partials() without the first
    3 calls (p50 / p95 / max)."""
    import wfst

    xp = _array_module()
    x, lengths = utterances(g, "bpe", texts, scale.seeds)
    config = dict(beam=beam, max_active=max_active, min_active=min(20, max_active // 2), **scale.options)
    gpu, cpu = wfst.Decoder(g, device="cuda", **config), wfst.Decoder(g, device="cpu", **config)
    step = round(0.32 / FRAME_SECONDS)
    rng = np.random.default_rng(0)
    out = {}
    for n in (min(2, scale.stream_counts[-1]),) + scale.stream_counts:  # the first: compiles the stream kernels
        picks = rng.integers(0, len(lengths), (n, 1 if SIMULATE else 4))  # (the simulator: one, it is slow)
        parts = [np.concatenate([x[j, :lengths[j]] for j in row]) for row in picks]
        frames = min(len(p) for p in parts)
        xs = np.stack([p[:frames] for p in parts])
        xd, latencies, on_gpu, asked = xp.asarray(xs), [], [], []
        start = time.perf_counter()
        live = [gpu.stream() for _ in range(n)]
        for pos in range(0, frames, step):
            t = time.perf_counter()
            gpu.advance(live, xd[:, pos:pos + step])  # (N, T, V): as a batched model gives them
            latencies.append(time.perf_counter() - t)
            on_gpu.append(gpu.stats.device_seconds)
            t = time.perf_counter()
            partials = gpu.partials(live)
            asked.append(time.perf_counter() - t)
        got = gpu.finish(live)
        wall = time.perf_counter() - start - sum(asked)
        want = cpu.decode(xs, np.full(n, frames))
        same = sum(not differences(a, b) for a, b in zip(got, want))
        report.check(f"{n} GPU streams (320 ms chunks) == CPU offline decode", same == n, f"{same}/{n} identical")
        kept = sum(p.words[:p.stable] == r.words[:p.stable] for p, r in zip(partials, got))
        report.check(f"{n} GPU streams: the stable words of the last partials begin the final words", kept == n,
                     f"{kept}/{n}")
        ms, pms, gms = (1000 * np.array(a[3:] or a) for a in (latencies, asked, on_gpu))
        out[f"{n} streams"] = (f"RTFx {FRAME_SECONDS * n * frames / wall:,.0f}; advance() p50 / p95 / max "
                               f"{np.median(ms):.1f} / {np.percentile(ms, 95):.1f} / {ms.max():.1f} ms "
                               f"(frame steps on the GPU p50 {np.median(gms):.1f} ms: the rest is host work), "
                               f"partials() {np.median(pms):.1f} / {np.percentile(pms, 95):.1f} / {pms.max():.1f} ms "
                               f"({len(ms)} calls of {n} streams)")
    return out


def rescoring(report, scale, setup: str, g, texts, profile: str, rescore_lm, graph_lm, beam, max_active,
              n: int) -> dict:
    """A BPE compact graph rescored on the fly with a bigger LM: the GPU (batch 64, and all n
    utterances in one batch) against our CPU backend on one thread, the same n utterances,
    the WERs; with make bench-rescore's context beam, all n in one batch; and its lattice
    rescoring, the GPU's lattices (all n in one batch) rescored on the host, against the
    CPU's exact rescoring."""
    from bench_rescore import CONTEXT_BEAM, LATTICE_BEAM

    import wfst
    from wfst.scoring import word_errors

    xp = _array_module()
    x, lengths = utterances(g, "bpe", texts, 1, profile)
    x, lengths, refs = x[:n], lengths[:n], texts[:n]
    config = dict(beam=beam, max_active=max_active, min_active=min(20, max_active // 2), rescore_lm=rescore_lm,
                  graph_lm=graph_lm, **scale.options)
    cpu = wfst.Decoder(g, device="cpu", num_threads=1, **config)
    gpu = wfst.Decoder(g, device="cuda", **config)
    cpu_wall, _, _, cpu_res = timed(cpu, x, lengths, n)
    exact_wall = cpu_wall
    frames = int(lengths.sum())
    out = {"utterances": n, "beam/max_active": f"{beam:g}/{max_active}",
           "CPU (1 thread) RTFx": f"{FRAME_SECONDS * frames / cpu_wall:,.0f}",
           "WER CPU": f"{100 * word_errors(refs, [r.words for r in cpu_res]).rate:.2f}%"}
    for batch in sorted({min(64, n), n}):  # (a GPU fills with larger batches: all of them at once too)
        gpu_wall, _, _, gpu_res = timed(gpu, xp.asarray(x), lengths, batch)
        same = sum(not differences(a, b) for a, b in zip(gpu_res, cpu_res))
        report.check(f"{setup}: GPU (batch {batch}) == CPU", same == n, f"{same}/{n} identical")
        out |= {f"GPU (batch {batch}) RTFx": f"{FRAME_SECONDS * frames / gpu_wall:,.0f}",
                f"GPU (batch {batch}) / CPU": f"{cpu_wall / gpu_wall:.1f}x",
                f"WER GPU (batch {batch})": f"{100 * word_errors(refs, [r.words for r in gpu_res]).rate:.2f}%"}
    # the context beam (make bench-rescore's fourth row): the same survivors left on both
    beamed = dict(config, context_beam=CONTEXT_BEAM)
    cpu_wall, _, _, cpu_res = timed(wfst.Decoder(g, device="cpu", num_threads=1, **beamed), x, lengths, n)
    gpu_wall, _, _, gpu_res = timed(wfst.Decoder(g, device="cuda", **beamed), xp.asarray(x), lengths, n)
    same = sum(not differences(a, b) for a, b in zip(gpu_res, cpu_res))
    report.check(f"{setup}, context_beam {CONTEXT_BEAM:g}: GPU (batch {n}) == CPU", same == n, f"{same}/{n} identical")
    out |= {f"context_beam {CONTEXT_BEAM:g}: CPU (1 thread) RTFx": f"{FRAME_SECONDS * frames / cpu_wall:,.0f}",
            f"context_beam {CONTEXT_BEAM:g}: GPU (batch {n}) / CPU": f"{cpu_wall / gpu_wall:.1f}x",
            f"context_beam {CONTEXT_BEAM:g}: WER": f"{100 * word_errors(refs, [r.words for r in gpu_res]).rate:.2f}%"}
    # lattice rescoring: the same words and costs as the CPU's (paths of equal cost may put a word a frame apart)
    latticed = dict(config, rescore_mode="lattice", lattice_beam=LATTICE_BEAM)
    cpu_wall, _, _, cpu_res = timed(wfst.Decoder(g, device="cpu", num_threads=1, **latticed), x, lengths, n)
    gpu_wall, _, _, gpu_res = timed(wfst.Decoder(g, device="cuda", **latticed), xp.asarray(x), lengths, n)
    same = sum(a.words == b.words and abs(a.cost - b.cost) <= COST_TOLERANCE for a, b in zip(gpu_res, cpu_res))
    report.check(f"{setup}, lattice rescoring: GPU (batch {n}) == CPU (words, costs)", same == n, f"{same}/{n}")
    out |= {"lattice rescoring: CPU (1 thread) RTFx": f"{FRAME_SECONDS * frames / cpu_wall:,.0f}",
            f"lattice rescoring: GPU (batch {n}) / exact rescoring on the CPU": f"{exact_wall / gpu_wall:.1f}x",
            "lattice rescoring: WER": f"{100 * word_errors(refs, [r.words for r in gpu_res]).rate:.2f}%"}
    return out | {"big LM on the GPU": f"{gpu.stats.lm.get('gpu_bytes', 0) / 2**20:.1f} MiB"}


def rescoring_large(report, scale) -> dict | None:
    """make bench-rescore's large setup (a BPE compact graph on a pruned 3-gram of a generated
    12,600-word LM, rescored with its unpruned 4-gram; noisy emissions, beam 17, max_active
    10000), where its files are in build/rescore/large: None where they are not."""
    import wfst

    setup = ROOT / "build" / "rescore" / "large"
    files = [setup / f for f in ("bpe_compact_small/graph.json", "big_4gram.arpa", "small_3gram.arpa", "test.txt")]
    if not all(f.is_file() for f in files):
        return None
    texts = (setup / "test.txt").read_text().splitlines()
    n = len(texts) if not SIMULATE else 1
    beam, max_active = (17.0, 10000) if not SIMULATE else (8.0, 16)
    out = rescoring(report, scale, "large rescoring setup", wfst.load_graph(setup / "bpe_compact_small"), texts,
                    "noisy", setup / "big_4gram.arpa", setup / "small_3gram.arpa", beam, max_active, n)
    return {"graph": "BPE compact on the large setup's pruned 3-gram, rescored with its 4-gram (noisy)", **out}


def _array_module():
    from wfst.cuda_backend import array_module

    return array_module()


def _free_pool():
    if not SIMULATE:
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()


def _pool_bytes() -> int:
    if SIMULATE:
        return 0
    import cupy

    return cupy.get_default_memory_pool().total_bytes()


# ---------------------------------------------------------------------- main

SECTIONS = ("tests", "streams", "rescoring", "rescoring-large", "equality", "batches", "boost", "lattices",
            "beam-search")


def run_section(report: Report, name: str, scale: Scale, graphs: DemoGraphs, texts: list[str],
                test_workers: int = 1) -> None:
    """One section: its checks and figures go into the report."""
    beam, max_active = scale.bench_configs[0]
    if name == "tests":
        cuda_tests(report, test_workers)
    elif name == "streams":
        report.extras["Streams (bpe_compact, 320 ms chunks)"] = streams(report, scale, graphs["bpe_compact"], texts,
                                                                       beam, max_active)
    elif name == "rescoring":
        report.extras["Rescoring"] = {
            "graph": "bpe_compact on the demo 2-gram, rescored with the 3-gram",
            **rescoring(report, scale, "rescoring", graphs["bpe_compact_2gram"], texts, "demo", LM, graphs.small_lm,
                        beam, max_active, scale.rescore_utterances)}
    elif name == "rescoring-large":
        figures = rescoring_large(report, scale)
        report.extras["Rescoring, the large setup"] = figures or {
            "skipped": "its files are not in build/rescore/large (make bench-rescore makes them)"}
    elif name == "equality":
        equality(report, scale, graphs, texts)
    elif name == "batches":
        report.bench = batches(report, scale, graphs, texts)
    elif name == "boost":
        report.extras["Word boosting (bpe_compact, GPU, batch 64)"] = boost(scale, graphs, texts)
    elif name == "lattices":
        for graph in [f"{s}_compact" for s in scale.token_sets]:
            report.extras[f"Lattices ({graph}, lattice beam 8)"] = lattices(report, scale, graphs[graph], graph, texts,
                                                                           beam, max_active)
    elif name == "beam-search":
        for token_set in scale.token_sets:
            report.extras[f"Lexicon-free beam search ({token_set}, the demo's token LM)"] = beam_search(
                report, scale, graphs[f"{token_set}_compact"], token_set, texts)


# ---------------------------------------------------------------------- the kit

DEVICE_PYTHON = "3.12"  # the GPU machines' python3 (/work/.library/device/KINDS.md lists their packages)
LARGE_FILES = ("bpe_compact_small", "big_4gram.arpa", "small_3gram.arpa", "test.txt")  # in build/rescore/large


def kit_graphs(section: str) -> list[str]:
    """The demo graphs a section reads."""
    compact = [f"{s}_compact" for s in FULL.token_sets]
    return {"streams": ["bpe_compact"], "rescoring": ["bpe_compact_2gram"], "boost": ["bpe_compact"],
            "batches": compact, "lattices": compact, "beam-search": compact,
            "equality": [f"{s}_{t}" for s in FULL.token_sets for t in FULL.topologies]
            + [f"{s}_compact_2gram" for s in FULL.token_sets]}.get(section, [])


def make_kit(kit: Path, sections: list[str], python: str = DEVICE_PYTHON) -> None:
    """Pack what these sections read on a GPU machine with no package index into `kit`: the
    graphs (built here first, with CSR caches that hold their FST's digest, so that they load
    there without reading an FST), the wheels such a machine lacks (for its `python`: pynini
    stripped for the CUDA tests, which build their own graphs), and run.sh, which installs
    them with this checkout and runs the check."""
    if not kit.resolve().is_relative_to(ROOT):
        raise SystemExit(f"--kit {kit}: must be inside this checkout ({ROOT}), which is what a device call carries")
    large = ROOT / "build" / "rescore" / "large"
    if "rescoring-large" in sections and not all((large / f).exists() for f in LARGE_FILES):
        from bench_rescore import large_setup  # (make bench-rescore's, where it would put them)

        large_setup(large, graphs=("small",))
    graphs = DemoGraphs(ROOT / "build")
    if graphs.built_elsewhere():
        raise SystemExit("--kit: pynini is not installed here to build the graphs (make install-test)")
    import wfst

    dirs = [graphs.directory(name) for name in dict.fromkeys(n for s in sections for n in kit_graphs(s))]
    dirs += [large / LARGE_FILES[0]] if "rescoring-large" in sections else []
    for path in dirs:  # a cache made before caches held their FST's digest: made again
        with np.load(path / "TLG.csr.npz") as z:
            digested = "digest" in z.files
        if not digested:
            (path / "TLG.csr.npz").unlink()
            wfst.load_graph(path)
    paths = dirs + ([graphs.small_lm] if any(p.name.endswith("_2gram") for p in dirs) else [])
    paths += [large / f for f in LARGE_FILES[1:]] if "rescoring-large" in sections else []
    kit.mkdir(parents=True, exist_ok=True)
    for old in kit.glob("*.whl"):
        old.unlink()
    print(f"packing {len(paths)} graphs and files into {kit}/graphs.tar.xz", flush=True)
    subprocess.run(["tar", "--format=posix", "--exclude=*.lmstore", "--exclude=.wfst-cache", "-cJf",
                    str(kit / "graphs.tar.xz"), "-C", str(ROOT), *(str(p.relative_to(ROOT)) for p in paths)],
                   check=True, env=dict(os.environ, XZ_OPT="-T0"))
    wheels = ["numpy<2.5", f"kaldialign=={metadata.version('kaldialign')}"]  # (numba-cuda 0.30 fails on NumPy 2.5)
    if "batches" in sections:
        wheels += [f"kaldi-decoder=={metadata.version('kaldi-decoder')}", f"kaldifst=={metadata.version('kaldifst')}"]
    if "tests" in sections:  # (their graphs' G: kaldilm's arpa2fst)
        wheels += [f"kaldilm=={metadata.version('kaldilm')}"]
    platforms = [a for n in (28, 27, 24, 17) for a in ("--platform", f"manylinux_2_{n}_x86_64")]

    def download(into: Path, *names: str) -> None:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "--python-version", python, "--implementation", "cp", *platforms, "-d", str(into), *names],
                       check=True)

    download(kit, *wheels)
    if "tests" in sections:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            download(Path(tmp), f"pynini=={metadata.version('pynini')}")
            print("stripping pynini's libraries", flush=True)
            slim_wheel(next(Path(tmp).glob("pynini-*.whl")), kit)
    only = ",".join(sections)
    (kit / "run.sh").write_text(f"""#!/usr/bin/env bash
# make gpu-kit's run on a GPU machine with no package index, from the repository root:
# the kit's wheels, this checkout (editable, without its dependencies: the machine's numba,
# numba-cuda, CuPy, sentencepiece and tqdm are used), the graphs, then the check's sections
# {only}; the report goes to $OUT where it is set.  Arguments go to gpu_check.py.
set -euo pipefail
kit=$(dirname "$0")
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/kit-site "$kit"/*.whl
export PYTHONPATH=/tmp/kit-site${{PYTHONPATH:+:$PYTHONPATH}} PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e .
tar -xJf "$kit/graphs.tar.xz" ||  # (no xz there: Python's own)
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(filter="data")' "$kit/graphs.tar.xz"
python3 recipes/gpu_check.py --only {only} --out "${{OUT:-build/gpu-check}}" "$@"
""")
    (kit / "run.sh").chmod(0o755)
    size = sum(f.stat().st_size for f in kit.iterdir())
    print(f"{kit}: {size / 2**20:.1f} MiB (with this checkout's tracked files, a device call carries at most "
          f"64 MiB); on the GPU machine run: bash {kit.resolve().relative_to(ROOT)}/run.sh --stop-after 420 "
          f"(the device tool's run, carry=[\"{kit.resolve().relative_to(ROOT)}\"])")


def main() -> int:
    ap = recipe_cli.parser(__doc__)
    ap.add_argument("--simulate", action="store_true", help="Numba's CUDA simulator on a tiny subset (no GPU)")
    ap.add_argument("--out", default="build/gpu-check", help="where report.md and report.json go")
    ap.add_argument("--only", type=recipe_cli.listed(SECTIONS), default=",".join(SECTIONS),
                    help=f"the sections to run, comma-separated (default: all): {', '.join(SECTIONS)}")
    ap.add_argument("--skip-tests", action="store_true", help="do not run tests/test_cuda.py")
    ap.add_argument("--test-workers", type=recipe_cli.whole(), default=test_workers(), metavar="N",
                    help="pytest processes for the CUDA tests (pytest-xdist; default: 8 on a GPU machine of 16+ "
                         "cores that has it, else 1)")
    ap.add_argument("--stop-after", type=recipe_cli.positive, default=math.inf, metavar="S",
                    help="skip the sections not begun after S seconds (a device's time limit)")
    ap.add_argument("--kit", type=Path, metavar="DIR",
                    help="no check: pack the graphs and wheels the --only sections need on a GPU machine with no "
                         "package index into DIR, with DIR/run.sh to run them there (make gpu-kit)")
    ap.add_argument("--kit-python", default=DEVICE_PYTHON, metavar="X.Y",
                    help=f"the Python version of the kit's wheels: the GPU machine's (default {DEVICE_PYTHON})")
    args = ap.parse_args()
    if args.test_workers > 1 and not importlib.util.find_spec("xdist"):
        ap.error(f"--test-workers {args.test_workers}: more than one needs pytest-xdist (pip install pytest-xdist)")
    if args.kit is not None:
        make_kit(ROOT / args.kit, args.only, args.kit_python)
        return 0
    scale = TINY if SIMULATE else FULL
    report = Report(ROOT / args.out, sys.argv[1:])
    t0 = time.perf_counter()
    print("1. the machine", flush=True)
    report.env = environment(report)
    for k, v in report.env.items():
        print(f"     {k}: {v}")
    report.save()
    if report.ok:
        texts = sentences("test", scale.sentences)
        if SIMULATE:
            texts = sorted(texts, key=len)[:scale.sentences]
        graphs = DemoGraphs(ROOT / "build")
        for name in [n for n in SECTIONS if n in args.only and not (n == "tests" and args.skip_tests)]:
            if time.perf_counter() - t0 > args.stop_after:  # (not measured: no failed check)
                report.extras.setdefault("Not run", {})[name] = f"not begun after --stop-after {args.stop_after:g} s"
                continue
            print(f"2. {name}", flush=True)
            try:
                run_section(report, name, scale, graphs, texts, args.test_workers)
            except Exception as e:  # noqa: BLE001 -- the report says what broke, and the exit status
                traceback.print_exc()
                report.check(f"{name}: ran to the end", False, f"{type(e).__name__}: {e}")
            report.extras["Run"] = {"seconds": f"{time.perf_counter() - t0:.0f}"}
            report.save()
    report.extras["Run"] = {"seconds": f"{time.perf_counter() - t0:.0f}"}
    report.save()
    for r in report.bench:
        print(f"  {r['graph']:<13}{r['beam']:>5g}/{r['max_active']:<5} batch {r['batch']:>5} "
              f"graphs {'on ' if r['cuda_graphs'] else 'off'} RTFx {r['rtfx']:>9,.0f}  ms/step {r['ms_per_step']:7.3f}"
              f"  GPU busy {100 * r['gpu_busy']:3.0f}%  {r['peak_gib']:6.2f} GiB  x Kaldi {r['vs_kaldi']:6.1f}")
    for section, figures in report.extras.items():
        print(f"  {section}: " + "; ".join(f"{k} {v}" for k, v in figures.items()))
    failed = [c["name"] for c in report.checks if not c["ok"]]
    print(f"\n{'all checks passed' if not failed else f'{len(failed)} check(s) FAILED'}; "
          f"report: {args.out}/report.md ({time.perf_counter() - t0:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
