#!/usr/bin/env python3
"""make bench-lm-store: how the rescoring LM's store is made and opened at scale.

A big LM for on-the-fly rescoring is read once from its ARPA file into a store file beside
it (wfst.lm.prepare_lm), which decoders then memory-map; a Rescorer pairs it with the
graph's LM (the maps and gain bounds the search reads).  This measures both, in a fresh
process each, for ARPA files from 1M n-grams up: seconds and peak resident memory above the
process's baseline (Python, NumPy, Numba and the compiled kernels loaded; Linux only).

The LMs are SYNTHETIC: every n-gram (orders 1-4) of a random corpus whose words are drawn
from a Zipf distribution over --vocab words, so that prefixes and suffixes of n-grams are
n-grams as in a real LM; log-probabilities and backoffs are random numbers (the store's
build does not depend on them), so they are no normalised model.  The graph's LM for the
Rescorer is the same file cut to a 3-gram (wfst.lm.truncate_arpa).  Generated once into
--out (default build/lm-store/; seeded).  The large setup of make bench-rescore (1.1M n-grams, a real
English vocabulary) is measured too where it has been built.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import recipe_cli
from tqdm import tqdm
from wfst_bench.machine import machine

ROOT = Path(__file__).resolve().parent.parent
LARGE = ROOT / "build/rescore/large/big_4gram.arpa"


def scale_arpa(path: Path, ngrams: int, vocab: int, order: int = 4, seed: int = 0) -> Path:
    """Write an ARPA file of about `ngrams` n-grams: all n-grams of a Zipf corpus (see the
    module doc).  Returns the path; an existing file is kept."""
    if path.is_file():
        return path
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, vocab - 2)  # word 3 + r drawn with weight 1 / (r + 1) (0-2: the marks)
    corpus = 3 + rng.choice(vocab - 3, size=max(ngrams * 3 // 8, 1000), p=zipf / zipf.sum())
    words = ["<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(vocab - 3)]
    grams = [np.arange(vocab, dtype=np.int64)[:, None]]  # every word a unigram
    rank = corpus  # each window's first k - 1 words: their rank among the (k - 1)-grams
    for k in range(2, order + 1):
        key = rank[: len(corpus) - k + 1] * vocab + corpus[k - 1:]
        unique, inverse = np.unique(key, return_inverse=True)
        first = np.zeros(len(unique), np.int64)
        first[inverse[::-1]] = np.arange(len(key))[::-1]  # a window of each k-gram
        grams.append(np.stack([corpus[first + i] for i in range(k)], axis=1))
        rank = inverse
    tmp = path.with_suffix(".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "w") as f:
        f.write("\\data\\\n" + "".join(f"ngram {k}={len(g)}\n" for k, g in enumerate(grams, start=1)))
        bar = tqdm(total=sum(len(g) for g in grams), unit=" n-grams", desc=f"writing {path.name}")
        for k, g in enumerate(grams, start=1):
            f.write(f"\n\\{k}-grams:\n")
            logp = np.round(rng.uniform(-6.0, -0.3, len(g)), 6)
            bo = np.round(rng.uniform(-1.5, 0.0, len(g)), 6)
            for lo in range(0, len(g), 1 << 16):
                rows = g[lo:lo + (1 << 16)]
                text = [" ".join(words[w] for w in row) for row in rows.tolist()]
                if k < order:
                    f.writelines(f"{p:.6f}\t{t}\t{b:.6f}\n" for p, t, b in zip(logp[lo:], text, bo[lo:]))
                else:
                    f.writelines(f"{p:.6f}\t{t}\n" for p, t in zip(logp[lo:], text))
                bar.update(len(rows))
        f.write("\n\\end\\\n")
        bar.close()
    tmp.replace(path)
    return path


_MEASURE = r"""
import json, sys, time, warnings
from wfst import lm
warnings.simplefilter("ignore")
what, arpa, small = sys.argv[1], sys.argv[2], sys.argv[3]

def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])

# the kernels compiled (or loaded from Numba's cache) first; then the peak is reset (Linux:
# clear_refs 5 sets VmHWM to VmRSS), so that it is the work's alone
tiny = lm.read_arpa(sys.argv[4])
lm.Rescorer(tiny, tiny, ["<eps>", *tiny.words])
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
base = kib("VmRSS")
t = time.perf_counter()
if what == "build":
    store = lm.read_arpa(arpa)
    out = {"n-grams": int(sum(store.counts)), "states": store.num_states}
else:
    big, graph_lm = lm.open_lm(arpa), lm.open_lm(small)
    r = lm.Rescorer(big, graph_lm, ["<eps>", *graph_lm.words])
    out = {"host_bytes": r.host_bytes}
out["seconds"] = time.perf_counter() - t
out["peak_mib"] = (kib("VmHWM") - base) / 1024
print(json.dumps(out))
"""


def measure(what: str, arpa: Path, small: Path, tiny: Path) -> dict:
    run = subprocess.run([sys.executable, "-c", _MEASURE, what, str(arpa), str(small), str(tiny)],
                         capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(f"measuring {what} of {arpa} failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = recipe_cli.parser(__doc__)
    ap.add_argument("--ngrams", type=recipe_cli.listed(item=recipe_cli.whole(10_000)),
                    default=[1_000_000, 10_000_000, 30_000_000],
                    help="sizes of the synthetic LMs, in n-grams (approximate; comma-separated)")
    ap.add_argument("--vocab", type=recipe_cli.whole(10), default=200_000, help="their vocabulary")
    ap.add_argument("--out", type=Path, default=ROOT / "build/lm-store",
                    help="where the synthetic LMs are written (once: an LM of the same size and vocabulary is kept)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    recipe_cli.check_json(ap, args.json)
    recipe_cli.check_folder(ap, "--out", args.out)
    from wfst.lm import prepare_lm, truncate_arpa

    tiny = args.out / "tiny.arpa"
    scale_arpa(tiny, 2_000, 50)
    setups = [(LARGE, LARGE.with_name("small_3gram.arpa"))] if LARGE.is_file() else []
    for n in args.ngrams:  # (named by both: a file of another vocabulary is another LM)
        arpa = scale_arpa(args.out / f"zipf_{n}_v{args.vocab}.arpa", n, args.vocab)
        small = arpa.with_name(f"{arpa.stem}_3gram.arpa")
        if not small.is_file():
            truncate_arpa(arpa, small, 3)
        setups.append((arpa, small))
    m = machine()
    print(f"The rescoring LM's store and Rescorer, a fresh process each; {m['cpu']}, {m['cores']} cores\n")
    rows = []
    for arpa, small in setups:
        for lm_file in (arpa, small):
            prepare_lm(lm_file)  # the stores the Rescorer opens
        build = measure("build", arpa, small, tiny)
        rescorer = measure("rescorer", arpa, small, tiny)
        row = {"arpa": str(arpa), "arpa_mib": arpa.stat().st_size / 2**20, **{f"build_{k}": v for k, v in
               build.items()}, "rescorer_seconds": rescorer["seconds"], "rescorer_peak_mib": rescorer["peak_mib"],
               "rescorer_host_mib": rescorer["host_bytes"] / 2**20}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| ARPA | MiB | n-grams | states | store build s | build peak MiB | Rescorer s | Rescorer peak MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {Path(r['arpa']).name} | {r['arpa_mib']:.0f} | {r['build_n-grams']:,} | {r['build_states']:,} | "
              f"{r['build_seconds']:.1f} | {r['build_peak_mib']:.0f} | {r['rescorer_seconds']:.1f} | "
              f"{r['rescorer_peak_mib']:.0f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(dict(machine=m, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(recipe_cli.run(main))
