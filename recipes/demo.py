#!/usr/bin/env python3
"""make demo: build the demo graphs, decode the demo emissions, print hypotheses, WER and RTFx.

Builds TLG for the character and the BPE token sets × the three topologies from the
bundled demo data (recipes/demo/data), prints their sizes and build costs, then decodes
SYNTHETIC CTC emissions of the held-out sentences (wfst.synthetic: made from the text
with a fixed seed, not from audio) with each graph, next to greedy CTC decoding.
"""
from __future__ import annotations

import sys
from pathlib import Path

import recipe_cli
from demo_data import LM, TOKEN_SETS, emission_options, sentences
from wfst.graphs import TOPOLOGIES, compile_graph

import wfst
from wfst import synthetic
from wfst.config import usable_cores
from wfst.scoring import rtfx, word_errors


def main() -> int:
    ap = recipe_cli.parser(__doc__)
    ap.add_argument("--out", default="build/demo", help="where the graph directories go")
    ap.add_argument("--sentences", type=recipe_cli.whole(), default=1000,
                    help="held-out sentences to decode (at most)")
    ap.add_argument("--seed", type=recipe_cli.whole(0), default=0, help="seed of the synthetic emissions")
    ap.add_argument("--graphs-only", action="store_true", help="build the graphs, do not decode")
    ap.add_argument("--beam", type=recipe_cli.positive, default=16.0)
    ap.add_argument("--max-active", type=recipe_cli.whole(), default=7000)
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = ap.parse_args()
    out = Path(args.out)

    results = {}
    for name, kw in TOKEN_SETS.items():
        for topo in TOPOLOGIES:
            results[name, topo] = compile_graph(out / f"{name}_{topo}", lm=LM, topology=topo,
                                                cache_dir=out / ".wfst-cache", force=args.force, **kw)

    print("\nDemo graphs (recipes/demo/data: 3-gram LM from a public-domain text)\n")
    print(f"{'graph':<14}{'N':>5}{'D':>4}{'LG states':>11}{'LG arcs':>10}{'TLG states':>12}"
          f"{'TLG arcs':>11}{'eps arcs':>10}{'MiB':>7}{'build s':>9}")
    for (name, topo), r in results.items():
        i, s = r.info, r.info["sizes"]
        print(f"{name + '_' + topo:<14}{i['num_columns']:>5}{i['num_disambig']:>4}{s['LG']['states']:>11,}"
              f"{s['LG']['arcs']:>10,}{s['TLG']['states']:>12,}{s['TLG']['arcs']:>11,}"
              f"{s['TLG']['epsilon_arcs']:>10,}{i['files']['TLG.fst'] / 2**20:>7.1f}{i['build_seconds']:>9.1f}")

    if args.graphs_only:
        return 0
    texts = sentences("test", args.sentences)
    threads = usable_cores()
    print(f"\nDecoding SYNTHETIC emissions of {len(texts)} held-out sentences (wfst.synthetic, seed "
          f"{args.seed}; 40 ms frames; beam {args.beam}, max_active {args.max_active}, CPU, {threads} threads)\n")
    print(f"{'graph':<14}{'greedy WER':>11}{'WER':>8}{'RTFx':>9}{'frames/s':>10}{'tokens/frame':>14}")
    examples = []
    for (name, topo), r in results.items():
        graph = wfst.load_graph(r.directory)
        kw = emission_options(name)
        x, lengths = synthetic.from_texts(texts, graph.tokens, seed=args.seed, **kw)
        greedy = [synthetic.detokenize(c, graph.tokens, word_boundary=kw.get("word_boundary"))
                  for c in synthetic.greedy_ctc(x, lengths, graph.tokens.blank)]
        decoder = wfst.Decoder(graph, beam=args.beam, max_active=args.max_active)
        decoder.decode(x[:1], lengths[:1])  # compile once, outside the timing
        results_ = decoder.decode(x, lengths)
        s = decoder.stats
        print(f"{name + '_' + topo:<14}{100 * word_errors(texts, greedy).rate:>10.2f}%"
              f"{100 * word_errors(texts, [h.words for h in results_]).rate:>7.2f}%"
              f"{rtfx(s.frames, s.seconds):>9.0f}{s.frames / s.seconds:>10.0f}{s.tokens_per_frame:>14.0f}")
        if (name, topo) == ("char", "compact"):
            examples = [(t, g, h.text) for t, g, h in zip(texts, greedy, results_) if t != g][:3]
            streamed = stream_one(decoder, x[0, :int(lengths[0])], results_[0])
    print("\nchar_compact, e.g.")
    for ref, greedy, hyp in examples:
        print(f"  ref:    {ref}\n  greedy: {greedy}\n  wfst:   {hyp}\n")
    print("The first sentence as a live stream (Decoder.stream/advance/finish, 320 ms chunks): "
          "stable words | the rest")
    for line in streamed:
        print(f"  {line}")
    print()
    print("WER and RTFx above are on synthetic emissions: they show the decoder at work, not a "
          "recogniser's accuracy.")
    return 0


def stream_one(decoder, x, offline) -> list[str]:
    """Decode one utterance as a stream of 320 ms chunks: its partial results as they
    change, then the final one (which must be the offline result)."""
    s, lines = decoder.stream(), []
    for t in range(0, len(x), 8):
        decoder.advance([s], [x[t:t + 8]])
        p = s.partial()
        line = f"{s.frames * 0.04:5.2f} s  {' '.join(p.words[:p.stable])} | {' '.join(p.words[p.stable:])}"
        if not lines or lines[-1].split("  ", 1)[1] != line.split("  ", 1)[1]:
            lines.append(line)
    final = decoder.finish([s])[0]
    assert final.words == offline.words, "a stream must end where the offline decode does"
    return lines[:5] + ["..."] + lines[-1:] + [f"final: {final.text}"]


if __name__ == "__main__":
    sys.exit(recipe_cli.run(main))
