#!/usr/bin/env python3
"""make bench-rescore: on-the-fly rescoring with a big LM kept out of the graph.

For the demo's character and BPE compact graphs: a small graph is built on a bigram cut
from the demo 3-gram (wfst.lm.truncate_arpa), then SYNTHETIC emissions (wfst.synthetic)
of the held-out sentences are decoded three ways on one CPU thread: the small graph
alone, the small graph rescored on the fly with the 3-gram (Decoder(rescore_lm=...)),
and the graph built statically on the 3-gram (make demo's).  Prints WER, RTFx, tokens
per frame, the slowdown of rescoring, and how often rescoring finds the static graph's
words; then how the big LM's store splits between what the GPU holds (per-state
offsets, backoff states and costs, sorted labels) and what stays in host memory (arc
costs and next states), as in the on-the-fly rescoring paper.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from demo_data import LM, PROFILES, TOKEN_SETS, emission_options, sentences
from wfst.graphs import compile_graph
from wfst_bench.machine import gpu_name, machine

import wfst
from wfst import synthetic
from wfst.cuda_backend import GPU_LM_FIELDS, gpu_lm_automaton
from wfst.lm import open_lm, truncate_arpa
from wfst.scoring import rtfx, word_errors


def timed(decoder, x, lengths, repeat):
    decoder.decode(x[:1], lengths[:1])  # compile
    best, results = None, None
    for _ in range(repeat):
        results = decoder.decode(x, lengths)
        best = min(best or decoder.stats.seconds, decoder.stats.seconds)
    return results, best, decoder.stats.tokens_per_frame


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", default="build/demo", help="where make demo put the big-LM graphs")
    ap.add_argument("--out", default="build/rescore", help="where the small-LM graphs go")
    ap.add_argument("--repeat", type=int, default=2, help="best of this many timed runs per cell")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    big_lm = LM
    small_lm = truncate_arpa(big_lm, out / "lm_2gram.arpa", 2)
    texts = sentences("test")
    m = machine()
    print(f"On-the-fly rescoring on SYNTHETIC emissions of {len(texts)} held-out sentences; small LM: the "
          f"demo 3-gram cut to 2-grams; big LM: the 3-gram; beam 16, max_active 7000; CPU backend, 1 thread; "
          f"{m['cpu']}\n")
    rows = []
    for token_set, options in TOKEN_SETS.items():
        name = f"{token_set}_compact"
        small_dir = out / f"{name}_2gram"
        compile_graph(small_dir, lm=small_lm, topology="compact", cache_dir=out / ".cache", **options)
        kw = emission_options(token_set)
        small, big = wfst.load_graph(small_dir), wfst.load_graph(Path(args.graphs) / name)
        for setting, noise in PROFILES.items():
            x, lengths = synthetic.from_texts(texts, small.tokens, seed=0, **kw, **noise)
            frames = int(lengths.sum())
            cells = {}
            for label, dec in [("small LM graph", wfst.Decoder(small, num_threads=1)),
                               ("small + rescoring", wfst.Decoder(small, num_threads=1, rescore_lm=big_lm)),
                               ("big LM graph", wfst.Decoder(big, num_threads=1))]:
                results, seconds, tokens = timed(dec, x, lengths, args.repeat)
                cells[label] = (results, seconds, tokens)
            base = cells["small LM graph"][1]
            static = cells["big LM graph"][0]
            for label, (results, seconds, tokens) in cells.items():
                same = sum(a.words == b.words for a, b in zip(results, static))
                rows.append(dict(graph=name, emissions=setting, decoder=label,
                                 wer=word_errors(texts, [r.words for r in results]).rate,
                                 rtfx=rtfx(frames, seconds), tokens_per_frame=tokens,
                                 slowdown=seconds / base, same_words_as_big=same / len(results),
                                 small_states=small.num_states, big_states=big.num_states))
    print("| graph | emissions | decoder | WER % | RTFx | tokens/frame | time vs small graph | "
          "same words as big-LM graph |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['graph']} | {r['emissions']} | {r['decoder']} | {100 * r['wer']:.2f} | {r['rtfx']:.0f} | "
              f"{r['tokens_per_frame']:.0f} | {r['slowdown']:.2f}x | {100 * r['same_words_as_big']:.1f}% |")
    store = open_lm(big_lm)
    total = sum(int(a.nbytes) for a in store.automaton())  # what the CPU backend reads
    on_gpu = gpu_lm_automaton(store)
    device = sum(int(getattr(on_gpu, f).nbytes) for f in GPU_LM_FIELDS)
    print(f"\nBig LM: {store.num_states:,} states, {store.num_arcs:,} arcs, {total / 2**20:.2f} MiB as the CPU "
          f"backend reads it. Held on the GPU by the CUDA backend (int32 offsets, sorted labels as "
          f"{on_gpu.labels.dtype}, backoff states and costs): {device / 2**20:.2f} MiB = "
          f"{100 * device / total:.1f}% of it; in pinned host memory (arc costs, next states, final costs): "
          f"{(total - device) / 2**20:.2f} MiB.")
    print("GPU rows (rescoring speed on the GPU, bytes copied host->device per frame): "
          + (f"see the CUDA benchmark ({gpu_name()})" if gpu_name() else "not measured: no GPU on this machine"))
    if args.json:
        Path(args.json).write_text(json.dumps(dict(machine=m, rows=rows, lm_bytes=total, device_bytes=device),
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
