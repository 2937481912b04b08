#!/usr/bin/env python3
"""Benchmark graph compilation on a large generated vocabulary and LM (not a test).

Generates, seeded, a vocabulary of pseudo-English words and a 3-gram ARPA whose
n-grams are consistent (every history and every backoff target exists), then builds
TLG for each topology with the character token set, each in its own process:
compact first with a cold cache (the whole pipeline), then normal and minimal,
which reuse min(det(L ∘ G)).  Prints seconds and peak memory per stage, and the
states, arcs and file size of each graph; writes results.json and results.md.

    python recipes/bench_graph.py --words 100000 --bigrams 700000 --trigrams 400000
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import recipe_cli

HERE = Path(__file__).resolve().parent
CHARS = list("abcdefghijklmnopqrstuvwxyz'")


def pseudo_words(n: int, rng) -> list[str]:
    """n distinct pronounceable words of 1-5 syllables."""
    onsets = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
              "y", "z", "br", "ch", "cl", "dr", "fl", "gr", "pl", "pr", "sh", "st", "str", "th", "tr"]
    nuclei = ["a", "e", "i", "o", "u", "ai", "ea", "ee", "oo", "ou", "y"]
    codas = ["", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "st", "ck", "'s"]
    words: set[str] = set()
    while len(words) < n:
        k = n - len(words)
        syl = rng.integers(1, 6, size=k)
        for s in syl:
            w = "".join(onsets[rng.integers(len(onsets))] + nuclei[rng.integers(len(nuclei))]
                        + codas[rng.integers(len(codas))] for _ in range(s))
            words.add(w.replace("''", "'").strip("'"))
    words.discard("")
    return sorted(words)[:n]


def generate_arpa(path: Path, num_words: int, num_bigrams: int, num_trigrams: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    words = pseudo_words(num_words, rng)
    rng.shuffle(words)  # Zipf rank independent of spelling
    vocab = ["<s>", "</s>", "<unk>"] + words
    V = len(vocab)
    rank = np.arange(1, V + 1, dtype=np.float64)
    zipf = 1.0 / (rank + 5.0)
    zipf /= zipf.sum()
    uni = np.log10(zipf)

    def draw(n, p):
        return rng.choice(V, size=n, p=p)

    p_hist = zipf.copy()
    p_hist[1] = 0  # nothing follows </s>
    p_hist /= p_hist.sum()
    p_next = zipf.copy()
    p_next[0] = 0  # nothing predicts <s>
    p_next /= p_next.sum()
    bigrams = np.unique(np.stack([draw(int(num_bigrams * 1.15), p_hist), draw(int(num_bigrams * 1.15), p_next)],
                                 axis=1), axis=0)
    bigrams = bigrams[bigrams[:, 0] != bigrams[:, 1]][:num_bigrams]
    # Trigrams (a, b, c) with (a, b) and (b, c) both bigrams.
    by_hist: dict[int, np.ndarray] = {}
    order = np.argsort(bigrams[:, 0], kind="stable")
    b_sorted = bigrams[order]
    starts = np.searchsorted(b_sorted[:, 0], np.arange(V + 1))
    picks = rng.integers(0, len(bigrams), size=int(num_trigrams * 1.5))
    tri = []
    for a, b in bigrams[picks]:
        lo, hi = starts[b], starts[b + 1]
        if hi > lo and b != 1:
            tri.append((a, b, b_sorted[rng.integers(lo, hi), 1]))
    trigrams = np.unique(np.array(tri, dtype=np.int64).reshape(-1, 3), axis=0)[:num_trigrams]
    del by_hist

    bi_lp = np.minimum(uni[bigrams[:, 1]] + rng.uniform(0.3, 2.0, len(bigrams)), -0.01)
    tri_lp = np.minimum(uni[trigrams[:, 2]] + rng.uniform(0.6, 2.5, len(trigrams)), -0.01)
    has_bi_ext = np.zeros(V, bool)
    has_bi_ext[bigrams[:, 0]] = True
    tri_hist = {(int(a), int(b)) for a, b, _ in trigrams}
    counts = [V, len(bigrams), len(trigrams)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\\data\\\n" + "".join(f"ngram {i + 1}={n}\n" for i, n in enumerate(counts)) + "\n")
        f.write("\\1-grams:\n")
        bo1 = rng.uniform(-0.9, -0.1, V)
        for i, w in enumerate(vocab):
            lp = -99.0 if w == "<s>" else uni[i]
            f.write(f"{lp:.6f}\t{w}\t{bo1[i]:.6f}\n" if has_bi_ext[i] else f"{lp:.6f}\t{w}\n")
        f.write("\n\\2-grams:\n")
        bo2 = rng.uniform(-0.7, -0.05, len(bigrams))
        lines = []
        for (a, b), lp, bo in zip(bigrams.tolist(), bi_lp.tolist(), bo2.tolist()):
            if (a, b) in tri_hist:
                lines.append(f"{lp:.6f}\t{vocab[a]} {vocab[b]}\t{bo:.6f}\n")
            else:
                lines.append(f"{lp:.6f}\t{vocab[a]} {vocab[b]}\n")
        f.write("".join(lines))
        f.write("\n\\3-grams:\n")
        f.write("".join(f"{lp:.6f}\t{vocab[a]} {vocab[b]} {vocab[c]}\n"
                        for (a, b, c), lp in zip(trigrams.tolist(), tri_lp.tolist())))
        f.write("\n\\end\\\n")
    return counts


def main() -> int:
    ap = recipe_cli.parser(__doc__)
    ap.add_argument("--words", type=recipe_cli.whole(), default=100_000)
    ap.add_argument("--bigrams", type=recipe_cli.whole(), default=700_000)
    ap.add_argument("--trigrams", type=recipe_cli.whole(), default=400_000)
    ap.add_argument("--topologies", type=recipe_cli.listed(("compact", "normal", "minimal")),
                    default="compact,normal,minimal")
    ap.add_argument("--out", default="build/bench_graph")
    ap.add_argument("--seed", type=recipe_cli.whole(0), default=0)
    args = ap.parse_args()
    recipe_cli.check_folder(ap, "--out", args.out)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    arpa = out / "lm.arpa"
    tokens = out / "tokens.txt"
    tokens.write_text("".join(f"{s} {i}\n" for i, s in enumerate(["<blk>", "|", *CHARS])))
    t0 = time.perf_counter()
    counts = generate_arpa(arpa, args.words, args.bigrams, args.trigrams, args.seed)
    print(f"generated {arpa}: n-grams per order {counts} (total {sum(counts):,}) "
          f"in {time.perf_counter() - t0:.1f} s", flush=True)

    results = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                           "python": platform.python_version()},
               "ngrams": counts, "graphs": {}}
    cache = out / "cache"
    shutil.rmtree(cache, ignore_errors=True)  # the first topology pays for the whole pipeline
    for topo in args.topologies:
        gdir = out / f"char_{topo}"
        cmd = [sys.executable, "-m", "wfst.graphs.cli", "--tokens", str(tokens), "--lm", str(arpa),
               "--word-boundary", "|", "--topo", topo, "--out", str(gdir), "--cache-dir", str(cache), "--force"]
        print(f"\n$ {' '.join(cmd)}", flush=True)
        t = time.perf_counter()
        if subprocess.run(cmd).returncode != 0:  # (the build said why)
            return 1
        wall = time.perf_counter() - t
        info = json.loads((gdir / "graph.json").read_text())
        results["graphs"][topo] = {"wall_seconds": round(wall, 1), "build_seconds": info["build_seconds"],
                                   "stages": info["stages"], "sizes": info["sizes"],
                                   "tlg_bytes": info["files"]["TLG.fst"]}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    md = report(results)
    (out / "results.md").write_text(md)
    print("\n" + md)
    return 0


def report(r: dict) -> str:
    topos = list(r["graphs"])
    lines = [f"Machine: {r['machine']['cpus']} CPUs, {r['machine']['platform']}, Python {r['machine']['python']}",
             f"LM: generated 3-gram, n-grams per order {r['ngrams']} ({sum(r['ngrams']):,} total)", "",
             "| stage | " + " | ".join(f"{t} s | {t} peak MiB" for t in topos) + " |",
             "|---|" + "---:|---:|" * len(topos)]
    stages = list(next(iter(r["graphs"].values()))["stages"])
    for st in stages:
        row = [st]
        for t in topos:
            rec = r["graphs"][t]["stages"].get(st, {})
            if "skipped" in rec:
                row += ["cached" if rec["skipped"].startswith("cached") else "-", "-"]
            else:
                row += [f"{rec.get('seconds', 0):.1f}", f"{rec.get('peak_rss_mb', 0):,.0f}"]
        lines.append("| " + " | ".join(row) + " |")
    def peak(t):
        return max(s.get("peak_rss_mb", 0) for s in r["graphs"][t]["stages"].values())

    lines.append("| **total (wall)** | " + " | ".join(
        f"**{r['graphs'][t]['wall_seconds']:.1f}** | **{peak(t):,.0f}**" for t in topos) + " |")
    lines += ["", "| graph | " + " | ".join(topos) + " |", "|---|" + "---:|" * len(topos)]
    for name in ("T", "L", "G", "LG", "TLG"):
        lines.append(f"| {name} states / arcs | " + " | ".join(
            f"{r['graphs'][t]['sizes'][name]['states']:,} / {r['graphs'][t]['sizes'][name]['arcs']:,}"
            for t in topos) + " |")
    lines.append("| TLG epsilon arcs | " + " | ".join(
        f"{r['graphs'][t]['sizes']['TLG']['epsilon_arcs']:,}" for t in topos) + " |")
    lines.append("| TLG.fst size | " + " | ".join(
        f"{r['graphs'][t]['tlg_bytes'] / 2**20:,.1f} MiB" for t in topos) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(recipe_cli.run(main))
