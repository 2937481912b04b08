#!/usr/bin/env python3
"""make bench-boost: what word boosting costs in decoding speed (the riva decoder paper's
boosting, sec. 3.2; issue 4's goal: 1,000 boosted words cost under 5% RTFx).

Decodes SYNTHETIC emissions (wfst.synthetic) of the demo's held-out sentences with the
demo's compact graphs (built by make demo), without boosts, with one boosted word, with
1,000 words drawn at random from the vocabulary (one mapping for the batch), and with the
same 1,000 words as a separate mapping per utterance (the per-utterance path: the CPU
backend cannot put them into the graph's weights, and each mapping is checked apart).
Every boost is 1.0.  Times are wall seconds of Decoder.decode (boost checks included),
the best of --repeat runs, the settings taking turns (each leads a round in turn) so
that drift hits them alike.
"""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import recipe_cli
from demo_data import emission_options, sentences
from wfst_bench.machine import machine

import wfst
from wfst import synthetic
from wfst.scoring import rtfx, word_errors


def settings(graph, num_utterances: int, seed: int) -> dict:
    words = [w for w in graph.words.symbols[1:] if w.isalpha()]
    many = dict.fromkeys(np.random.default_rng(seed).choice(words, 1000, replace=False).tolist(), 1.0)
    return {"none": None, "1 word": {words[0]: 1.0}, "1,000 words": many,
            "1,000 words, a mapping per utterance": [dict(many) for _ in range(num_utterances)]}


def main() -> int:
    ap = recipe_cli.parser(__doc__)
    ap.add_argument("--graphs", default="build/demo", help="where make demo put the graphs")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--seed", type=recipe_cli.whole(0), default=0, help="of the emissions and of the 1,000 words")
    ap.add_argument("--repeat", type=recipe_cli.whole(), default=5, help="best of this many timed runs per setting")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    recipe_cli.check_json(ap, args.json)
    recipe_cli.check_graphs(ap, args.graphs, ("char_compact", "bpe_compact"))
    texts = sentences("test")
    m = machine()
    print(f"Word boosting on SYNTHETIC emissions of {len(texts)} held-out sentences (seed {args.seed}); "
          f"beam 16; {args.device} backend" + (", 1 thread" if args.device == "cpu" else "") + f"; {m['cpu']}\n")
    report = {"machine": m, "device": args.device, "graphs": {}}
    for token_set in ("char", "bpe"):
        name = f"{token_set}_compact"
        graph = wfst.load_graph(Path(args.graphs) / name)
        x, lengths = synthetic.from_texts(texts, graph.tokens, seed=args.seed, **emission_options(token_set))
        frames = int(lengths.sum())
        dec = wfst.Decoder(graph, device=args.device, num_threads=1)
        cases = settings(graph, len(texts), args.seed)
        seconds = dict.fromkeys(cases, np.inf)
        results, tokens = {}, {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # boosted words not in a graph's vocabulary: none here
            for boost in cases.values():  # compile each search before timing
                dec.decode(x[:1], lengths[:1], boost=boost[:1] if isinstance(boost, list) else boost)
            order = list(cases)
            for r in range(args.repeat):
                for case in order[r % len(order):] + order[:r % len(order)]:  # each setting leads a round
                    results[case] = dec.decode(x, lengths, boost=cases[case])
                    seconds[case] = min(seconds[case], dec.stats.seconds)
                    tokens[case] = dec.stats.tokens_per_frame
        base = seconds["none"]
        print(f"{name}: {len(texts)} utterances, {frames} frames\n")
        print("| boost | seconds | RTFx | cost | tokens/frame | WER % |")
        print("|---|---:|---:|---:|---:|---:|")
        rows = {}
        for case in cases:
            wer = word_errors(texts, [r.words for r in results[case]]).rate
            rows[case] = dict(seconds=seconds[case], rtfx=rtfx(frames, seconds[case]), tokens_per_frame=tokens[case],
                              wer=wer, cost=seconds[case] / base - 1)
            print(f"| {case} | {seconds[case]:.3f} | {rows[case]['rtfx']:.0f} | {100 * rows[case]['cost']:+.1f}% | "
                  f"{tokens[case]:.0f} | {100 * wer:.2f} |")
        print()
        report["graphs"][name] = rows
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(recipe_cli.run(main))
