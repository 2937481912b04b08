#!/usr/bin/env python3
"""make bench-fltop: frame-level token pruning (FLToP) on the demo, like the paper's Fig. 3-5.

Decodes SYNTHETIC emissions (wfst.synthetic) of the demo's held-out sentences with the
demo's compact graphs (built by make demo) on one CPU thread, for every top-N in
{1, 2, 4, 8, all} and relative threshold R in {0, 1e-3, 7e-3, 5e-2}, and prints WER,
RTFx (40 ms frames, decoding only), tokens per frame, and the change against no pruning.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from demo_data import emission_options, sentences

import wfst
from wfst import synthetic
from wfst.bench import machine
from wfst.scoring import rtfx, word_errors

TOP_N = (1, 2, 4, 8, None)
REL = (0.0, 1e-3, 7e-3, 5e-2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", default="build/demo", help="where make demo put the graphs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="best of this many timed runs per cell")
    args = ap.parse_args()
    texts = sentences("test")
    m = machine()
    print(f"FLToP on SYNTHETIC emissions of {len(texts)} held-out sentences (seed {args.seed}); beam 16, "
          f"max_active 7000; CPU backend, 1 thread; {m['cpu']}\n")
    for token_set in ("char", "bpe"):
        name = f"{token_set}_compact"
        graph = wfst.load_graph(Path(args.graphs) / name)
        x, lengths = synthetic.from_texts(texts, graph.tokens, seed=args.seed, **emission_options(token_set))
        frames = int(lengths.sum())
        rows = []
        for top_n in TOP_N:
            for rel in REL:
                dec = wfst.Decoder(graph, num_threads=1, token_top_n=top_n, token_rel_threshold=rel)
                dec.decode(x[:1], lengths[:1])
                best = None
                for _ in range(args.repeat):
                    results = dec.decode(x, lengths)
                    best = min(best or dec.stats.seconds, dec.stats.seconds)
                wer = word_errors(texts, [r.words for r in results]).rate
                rows.append((top_n, rel, wer, rtfx(frames, best), dec.stats.tokens_per_frame))
        base = next(r for r in rows if r[0] is None and r[1] == 0.0)
        print(f"{name}: {len(texts)} utterances, {frames} frames\n")
        print("| top-N | R | WER % | RTFx | tokens/frame | speed-up | WER change |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for top_n, rel, wer, speed, tokens in rows:
            print(f"| {top_n or 'all'} | {rel:g} | {100 * wer:.2f} | {speed:.0f} | {tokens:.0f} | "
                  f"{speed / base[3]:.2f}x | {100 * (wer - base[2]):+.2f} |")
        ok = [r for r in rows if r[2] - base[2] <= 0.001]
        fastest = max(ok, key=lambda r: r[3])
        print(f"\nfastest with WER within +0.1 absolute of no pruning: top-N {fastest[0] or 'all'}, "
              f"R {fastest[1]:g}: {fastest[3] / base[3]:.2f}x, WER {100 * fastest[2]:.2f}%\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
