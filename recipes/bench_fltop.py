#!/usr/bin/env python3
"""make bench-fltop: frame-level token pruning (FLToP) on the demo, like the paper's Fig. 3-5.

Decodes SYNTHETIC emissions (wfst.synthetic) of the demo's held-out sentences with the
demo's compact graphs (built by make demo) on one CPU thread, for every top-N in
{1, 2, 4, 8, all} and relative threshold R in {0, 1e-3, 7e-3, 5e-2}, in two profiles:
`demo` (make demo's emissions) and `noisy` (more confusions and noise, and a made-up word
the graph cannot output in half the sentences).  Prints WER, RTFx (40 ms frames, decoding
only), tokens per frame, the frames FLToP emptied and that were expanded again without
it, hypotheses that pruning emptied, and the change against no pruning; then the goal
at the paper's setting N = 4, R = 0.007: WER within 0.1 of no pruning and >= 1.5x faster.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import recipe_cli
from demo_data import PROFILES, emission_options, sentences, with_unknown_words
from wfst_bench.machine import machine

import wfst
from wfst import synthetic
from wfst.scoring import rtfx, word_errors

TOP_N = (1, 2, 4, 8, None)
REL = (0.0, 1e-3, 7e-3, 5e-2)
GOAL = (4, 7e-3)


def cell(graph, x, lengths, texts, repeat: int, top_n, rel) -> tuple[dict, list]:
    dec = wfst.Decoder(graph, num_threads=1, token_top_n=top_n, token_rel_threshold=rel)
    dec.decode(x[:1], lengths[:1])  # compile outside the timing
    best = None
    for _ in range(repeat):
        results = dec.decode(x, lengths)
        best = min(best or dec.stats.seconds, dec.stats.seconds)
    frames = int(lengths.sum())
    return dict(top_n=top_n, rel=rel, wer=word_errors(texts, [r.words for r in results]).rate,
                rtfx=rtfx(frames, best), seconds=best, tokens_per_frame=dec.stats.tokens_per_frame,
                fallbacks=dec.stats.fltop_fallbacks), results


def main() -> int:
    ap = recipe_cli.parser(__doc__)
    ap.add_argument("--graphs", default="build/demo", help="where make demo put the graphs")
    ap.add_argument("--seed", type=recipe_cli.whole(0), default=0)
    ap.add_argument("--repeat", type=recipe_cli.whole(), default=3, help="best of this many timed runs per cell")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    recipe_cli.check_json(ap, args.json)
    recipe_cli.check_graphs(ap, args.graphs, ("char_compact", "bpe_compact"))
    m = machine()
    print(f"FLToP on SYNTHETIC emissions of the demo's held-out sentences (seed {args.seed}); beam 16, "
          f"max_active 7000; CPU backend, 1 thread; {m['cpu']}\n")
    rows = []
    for token_set in ("char", "bpe"):
        name = f"{token_set}_compact"
        graph = wfst.load_graph(Path(args.graphs) / name)
        for profile, options in PROFILES.items():
            texts = sentences("test")
            if profile != "demo":
                texts = with_unknown_words(texts, seed=args.seed)
            x, lengths = synthetic.from_texts(texts, graph.tokens, seed=args.seed, **emission_options(token_set),
                                              **options)
            base, base_results = cell(graph, x, lengths, texts, args.repeat, None, 0.0)
            table = []
            for top_n in TOP_N:
                for rel in REL:
                    if top_n is None and rel == 0.0:
                        row = base
                    else:
                        row, results = cell(graph, x, lengths, texts, args.repeat, top_n, rel)
                        row["emptied"] = sum(1 for r, b in zip(results, base_results) if b.words and not r.words)
                    row.setdefault("emptied", 0)
                    row.update(graph=name, profile=profile, speedup=row["rtfx"] / base["rtfx"],
                               wer_change=row["wer"] - base["wer"])
                    table.append(row)
            rows += table
            print(f"{name}, {profile} emissions: {len(texts)} utterances, {int(lengths.sum())} frames\n")
            print("| top-N | R | WER % | RTFx | tokens/frame | frames re-expanded | emptied | speed-up | WER change |")
            print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
            for r in table:
                print(f"| {r['top_n'] or 'all'} | {r['rel']:g} | {100 * r['wer']:.2f} | {r['rtfx']:.0f} | "
                      f"{r['tokens_per_frame']:.0f} | {r['fallbacks']} | {r['emptied']} | {r['speedup']:.2f}x | "
                      f"{100 * r['wer_change']:+.2f} |")
            ok = [r for r in table if r["wer_change"] <= 0.001]
            fastest = max(ok, key=lambda r: r["rtfx"])
            print(f"\nfastest with WER within +0.1 absolute of no pruning: top-N {fastest['top_n'] or 'all'}, "
                  f"R {fastest['rel']:g}: {fastest['speedup']:.2f}x, WER {100 * fastest['wer']:.2f}%")
            goal = next(r for r in table if (r["top_n"], r["rel"]) == GOAL)
            met = goal["wer_change"] <= 0.001 and goal["speedup"] >= 1.5 and goal["emptied"] == 0
            print(f"goal at N = {GOAL[0]}, R = {GOAL[1]:g} (WER within 0.1 of no pruning, >= 1.5x faster, no "
                  f"hypothesis emptied): {'met' if met else 'NOT met'} (WER {100 * goal['wer_change']:+.2f}, "
                  f"{goal['speedup']:.2f}x, {goal['emptied']} emptied)\n")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"machine": m, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(recipe_cli.run(main))
