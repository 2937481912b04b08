#!/usr/bin/env python3
"""make bench-rescore: on-the-fly rescoring with a big LM kept out of the graph.

Two setups, each decoded five ways on one CPU thread: the small-LM graph alone, the small
graph rescored on the fly with the big LM (Decoder(rescore_lm=...)), the same with
context_beam=4 (of the tokens at one graph state, which differ in their big-LM history, only
those within 4 of the cheapest are expanded), the small graph's word lattices (lattice_beam
8) rescored with the big LM after the search (rescore_mode="lattice"), and the graph built
statically on the big LM.
Emissions are SYNTHETIC (wfst.synthetic) of held-out sentences.

- demo: the demo's character and BPE compact graphs on a bigram cut from the demo 3-gram
  (wfst.lm.truncate_arpa), rescored with the 3-gram; beam 16, max_active 7000.
- large: a GENERATED English LM (recipes/generated_lm.py): the 12,600 most frequent words of
  `wordfreq`, an unpruned 4-gram (150k bigrams, 394k trigrams, 553k 4-grams) rescoring a
  BPE compact graph built on a 3-gram pruned from it (60k bigrams, 90k trigrams); 300 test
  sentences sampled from the 4-gram; noisy emissions, beam 17, max_active 10000.
- wide (not run by default: --setups wide): the large setup's graphs and LMs at a wide beam,
  22 / max_active 30000, on its first 40 sentences, every 4th with an out-of-vocabulary
  word (OOV, spelled in BPE pieces) in its middle: where the exact search's token split
  grows. --beam and --max-active change any setup's.

With --gpu-batch B, two more rows per setup: rescoring on the GPU (device="cuda") in batches
of B utterances, exact and with context_beam=4, each against our CPU backend's row of the
same search on one thread: its speed and whether it finds the same results.

Prints WER, RTFx, tokens per frame, the time of rescoring against the small graph, and how
often rescoring finds the static graph's words (where not, which of the two word strings
the big LM itself, with the path's acoustic cost, prefers); then where rescoring's time
goes (the CPU search's counters, DecodeStats.lm) and the memory of the big LM: in host
memory against its ARPA file, and how it splits between what the GPU holds and what stays
in host memory, as in the on-the-fly rescoring paper.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import generated_lm
import numpy as np
import recipe_cli
from demo_data import LM, PROFILES, TOKEN_SETS, emission_options, sentences
from wfst.graphs import compile_graph
from wfst_bench.machine import gpu_name, machine

import wfst
from wfst import synthetic
from wfst.cuda_backend import GPU_LM_FIELDS, gpu_lm_automaton
from wfst.lm import open_lm, truncate_arpa
from wfst.scoring import rtfx, word_errors

DEMO = dict(beam=16.0, max_active=7000)
LARGE = dict(beam=17.0, max_active=10000)
LARGE_WORDS, LARGE_SENTENCES = 12600, 300
LARGE_COUNTS = [150_000, 394_000, 553_000]  # the 4-gram's 2-, 3- and 4-grams
LARGE_PRUNED = [60_000, 90_000]  # the graph's 3-gram: 2- and 3-grams
WIDE = dict(beam=22.0, max_active=30000)
WIDE_SENTENCES, OOV, OOV_EVERY = 40, "zorblax", 4
CONTEXT_BEAM = 4.0  # the third row's: tokens expanded within it of their graph state's cheapest
BEAMED_ROW = f"small + rescoring, context_beam {CONTEXT_BEAM:g}"
LATTICE_BEAM = 8.0  # the lattice row's: Kaldi's usual lattice beam
LATTICE_ROW = f"small + lattice rescoring, lattice_beam {LATTICE_BEAM:g}"
GPU_ROW = "small + rescoring, GPU"
GPU_BEAMED_ROW = f"{BEAMED_ROW}, GPU"
CPU_OF = {GPU_BEAMED_ROW: BEAMED_ROW}  # the CPU row each row is measured against (else exact rescoring's)


def timed(decoder, x, lengths, repeat, batch=None):
    """(results, best seconds of `repeat` runs, tokens per frame, LM counters of the best run;
    batched: of its last call).  With a batch (the GPU), utterances go in batches of similar
    lengths, as an offline job would give them, timed by the wall clock around the calls;
    results in the input order."""
    decoder.decode(x[:1], lengths[:1])  # compile
    order = np.argsort(lengths, kind="stable") if batch else np.arange(len(lengths))
    size = batch or len(lengths)
    best, results, lm = None, None, {}
    for _ in range(repeat):
        out, seconds, tokens = [None] * len(lengths), 0.0, 0.0
        for i in range(0, len(lengths), size):
            part = order[i:i + size]
            t0 = time.perf_counter()
            got = decoder.decode(x[part], lengths[part])
            seconds += time.perf_counter() - t0 if batch else decoder.stats.seconds
            tokens += decoder.stats.tokens_per_frame * float(lengths[part].sum())
            for j, r in zip(part, got):
                out[j] = r
        if best is None or seconds < best:
            best, results, lm, per_frame = seconds, out, decoder.stats.lm, tokens / max(float(lengths.sum()), 1.0)
    return results, best, per_frame, lm


def large_setup(out: Path, graphs=("small", "big")):
    """The large setup's LMs and test sentences (made once, seeded), and its graphs: (the
    graphs named, in order: the small LM's and the big LM's), the big LM's ARPA, the texts."""
    out.mkdir(parents=True, exist_ok=True)
    big, small, test = out / "big_4gram.arpa", out / "small_3gram.arpa", out / "test.txt"
    if not (big.exists() and small.exists() and test.exists()):
        print("generating the large setup's LMs (a few minutes, once)", flush=True)
        words, freq = generated_lm.english_words(LARGE_WORDS)
        lm = generated_lm.generate_lm(words, freq, LARGE_COUNTS, seed=0)
        generated_lm.prune(lm, 3, LARGE_PRUNED).write_arpa(small)
        test.write_text("\n".join(generated_lm.sample(lm, LARGE_SENTENCES, seed=1)) + "\n")
        lm.write_arpa(big)
    built = []
    for name in graphs:
        r = compile_graph(out / f"bpe_compact_{name}", lm={"small": small, "big": big}[name], topology="compact",
                          cache_dir=out / ".cache", **TOKEN_SETS["bpe"])
        built.append(wfst.load_graph(r.directory))
    return built, big, test.read_text().splitlines()


def with_oov(texts):
    """Every OOV_EVERY-th text (the first included) with the word OOV in its middle."""
    out = []
    for i, text in enumerate(texts):
        words = text.split()
        if i % OOV_EVERY == 0:
            words.insert(len(words) // 2, OOV)
        out.append(" ".join(words))
    return out


def compare(setup, name, small, big, big_lm, texts, token_set, emissions, config, repeat, gpu_batch=0):
    """Rows of the five decoders on one graph pair and emission profile; with a gpu_batch, two
    more: rescoring on the GPU in batches of that many utterances (exact, and with the context beam)."""
    x, lengths = synthetic.from_texts(texts, small.tokens, seed=0, **emission_options(token_set),
                                      **PROFILES[emissions])
    frames = int(lengths.sum())
    cells = {label: timed(wfst.Decoder(g, num_threads=1, **config, **kw), x, lengths, repeat)
             for label, g, kw in [("small LM graph", small, {}), ("small + rescoring", small, dict(rescore_lm=big_lm)),
                                  (BEAMED_ROW, small, dict(rescore_lm=big_lm, context_beam=CONTEXT_BEAM)),
                                  (LATTICE_ROW, small, dict(rescore_lm=big_lm, rescore_mode="lattice",
                                                            lattice_beam=LATTICE_BEAM)),
                                  ("big LM graph", big, {})]}
    if gpu_batch:
        for label, kw in ((GPU_ROW, {}), (GPU_BEAMED_ROW, dict(context_beam=CONTEXT_BEAM))):
            cells[label] = timed(wfst.Decoder(small, device="cuda", rescore_lm=big_lm, **config, **kw), x, lengths,
                                 repeat, gpu_batch)
    base = cells["small LM graph"][1]
    static = cells["big LM graph"][0]
    store = open_lm(big_lm)
    rows = []
    for label, (results, seconds, tokens, lm) in cells.items():
        cpu = cells[CPU_OF.get(label, "small + rescoring")]
        differ = [(a, b) for a, b in zip(results, static) if a.words != b.words]
        # which words the big LM itself prefers, each with its path's acoustic cost
        own = sum(a.acoustic_cost + store.score(a.words) < b.acoustic_cost + store.score(b.words) - 1e-4
                  for a, b in differ)
        rows.append(dict(setup=setup, graph=name, emissions=emissions, decoder=label, **config,
                         wer=word_errors(texts, [r.words for r in results]).rate, rtfx=rtfx(frames, seconds),
                         seconds=seconds, tokens_per_frame=tokens, slowdown=seconds / base,
                         same_words_as_big=1 - len(differ) / len(results), differ=len(differ),
                         vs_cpu_rescoring=cpu[1] / seconds,
                         same_as_cpu_rescoring=sum(a == b for a, b in zip(results, cpu[0])) / len(results),
                         same_words_as_cpu_rescoring=sum(a.words == b.words for a, b in zip(results, cpu[0]))
                         / len(results),
                         same_cost_as_cpu_rescoring=sum(a.words == b.words and abs(a.cost - b.cost) <= 1e-4
                                                        for a, b in zip(results, cpu[0])) / len(results),
                         differ_big_lm_prefers_these=int(own), frames=frames, lm=lm,
                         small_states=small.num_states, big_states=big.num_states))
    return rows


def print_tables(rows):
    print("| setup | graph | emissions | decoder | WER % | RTFx | tokens/frame | time vs small graph | "
          "same words as big-LM graph |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['setup']} | {r['graph']} | {r['emissions']} | {r['decoder']} | {100 * r['wer']:.2f} | "
              f"{r['rtfx']:.{0 if r['rtfx'] >= 100 else 1}f} | {r['tokens_per_frame']:.0f} | {r['slowdown']:.2f}x | "
              f"{100 * r['same_words_as_big']:.1f}% |")
    for r in rows:
        if r["decoder"] == BEAMED_ROW:
            print(f"  {r['setup']} {r['graph']} {r['emissions']}: with context_beam {CONTEXT_BEAM:g}, rescoring finds "
                  f"the exact search's results (words, frames, costs) on {100 * r['same_as_cpu_rescoring']:.1f}% of "
                  f"the utterances, {r['vs_cpu_rescoring']:.2f}x as fast")
        if r["decoder"] == LATTICE_ROW:
            print(f"  {r['setup']} {r['graph']} {r['emissions']}: rescoring the lattices finds the exact on-the-fly "
                  f"search's words on {100 * r['same_words_as_cpu_rescoring']:.1f}% of the utterances, with its cost "
                  f"(to 1e-4) on {100 * r['same_cost_as_cpu_rescoring']:.1f}% and its word frames too on "
                  f"{100 * r['same_as_cpu_rescoring']:.1f}% (paths of equal cost differ in where a word's label "
                  f"sits), {r['vs_cpu_rescoring']:.2f}x as fast")
        if r["decoder"] in (GPU_ROW, GPU_BEAMED_ROW):
            search = f"with context_beam {CONTEXT_BEAM:g}" if r["decoder"] == GPU_BEAMED_ROW else "exact"
            print(f"  {r['setup']} {r['graph']} {r['emissions']}: rescoring on the GPU ({search}) runs "
                  f"{r['vs_cpu_rescoring']:.1f}x our CPU backend's on one thread; the same results (words, frames, "
                  f"costs) on {100 * r['same_as_cpu_rescoring']:.1f}% of the utterances")
    print("\nWhere rescoring and the static big-LM graph disagree: for how many utterances the big LM "
          "itself (its sentence score + the path's acoustic cost) prefers rescoring's words")
    for r in rows:
        if r["decoder"] == "small + rescoring" and r["differ"]:
            print(f"  {r['setup']} {r['graph']} {r['emissions']}: {r['differ_big_lm_prefers_these']} of {r['differ']}")
    print("\nWhere rescoring's time goes (per frame; word arcs: of the survivors; lookups: context steps "
          "looked up, the rest out of reach of the beam; misses: computed in the LMs)")
    print("| setup | graph | emissions | word arcs | lookups | closure word arcs | closure lookups | "
          "memo hits % | misses | backoffs per miss |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        lm, f = r["lm"], r["frames"]
        if r["decoder"] != "small + rescoring" or not lm:
            continue
        looked = lm["lookups"] + lm["closure_lookups"]
        print(f"| {r['setup']} | {r['graph']} | {r['emissions']} | {lm['word_arcs'] / f:.0f} | "
              f"{lm['lookups'] / f:.0f} | {lm['closure_word_arcs'] / f:.0f} | {lm['closure_lookups'] / f:.0f} | "
              f"{100 * lm['hits'] / max(looked, 1):.1f} | {lm['misses'] / f:.0f} | "
              f"{lm['backoffs'] / max(lm['misses'], 1):.2f} |")


def memory(setup, big_lm, rescore_row):
    store = open_lm(big_lm)
    total = sum(int(a.nbytes) for a in store.automaton())  # what the CPU backend reads
    on_gpu = gpu_lm_automaton(store)
    device = sum(int(getattr(on_gpu, f).nbytes) for f in GPU_LM_FIELDS)
    arpa = int(store.source.get("bytes", 0))
    lm = rescore_row["lm"]
    print(f"\n{setup}: big LM {store.num_states:,} states, {store.num_arcs:,} arcs; ARPA file {arpa / 2**20:.1f} MiB. "
          f"Host memory of the CPU search: {lm['lm_bytes'] / 2**20:.1f} MiB for both LMs, their maps and bounds "
          f"({lm['lm_bytes'] / max(arpa, 1):.2f}x the ARPA file) + a {lm['memo_bytes'] / 2**20:.0f} MiB memo of "
          f"steps per thread. On the GPU the CUDA backend holds {device / 2**20:.2f} MiB of the big LM (int32 "
          f"offsets, sorted labels as {on_gpu.labels.dtype}, backoff states and costs) = {100 * device / total:.1f}% "
          f"of it; arc costs, next states and final costs stay in pinned host memory "
          f"({(total - device) / 2**20:.2f} MiB).")
    return dict(setup=setup, lm=str(big_lm), arpa_bytes=arpa, host_bytes=lm["lm_bytes"],
                memo_bytes=lm["memo_bytes"], gpu_bytes=device, lm_arrays_bytes=total)


def main() -> int:
    ap = recipe_cli.parser(__doc__)
    ap.add_argument("--graphs", default="build/demo", help="where make demo put the big-LM graphs")
    ap.add_argument("--out", default="build/rescore", help="where the small-LM graphs and the large setup go")
    ap.add_argument("--repeat", type=recipe_cli.whole(), default=2, help="best of this many timed runs per cell")
    ap.add_argument("--setups", type=recipe_cli.listed(("demo", "large", "wide")), default="demo,large",
                    help="which setups to run (comma-separated)")
    ap.add_argument("--beam", type=recipe_cli.positive, help="every setup's beam (default: its own)")
    ap.add_argument("--max-active", type=recipe_cli.whole(), help="every setup's max_active (default: its own)")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--gpu-batch", type=recipe_cli.whole(0), default=0, metavar="B",
                    help="also rescore on the GPU (device='cuda') in batches of B utterances (0: not)")
    args = ap.parse_args()
    recipe_cli.check_json(ap, args.json)
    recipe_cli.check_folder(ap, "--out", args.out)
    setups = args.setups
    if "demo" in setups:
        recipe_cli.check_graphs(ap, args.graphs, [f"{token_set}_compact" for token_set in TOKEN_SETS])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    given = {k: v for k, v in (("beam", args.beam), ("max_active", args.max_active)) if v is not None}
    m = machine()
    print(f"On-the-fly rescoring on SYNTHETIC emissions, CPU backend, 1 thread; {m['cpu']}\n")
    rows, mem, lms = [], [], {"demo": LM}  # each setup's big LM
    if "demo" in setups:
        small_lm = truncate_arpa(LM, out / "lm_2gram.arpa", 2)
        texts = sentences("test")
        for token_set, options in TOKEN_SETS.items():
            name = f"{token_set}_compact"
            r = compile_graph(out / f"{name}_2gram", lm=small_lm, topology="compact", cache_dir=out / ".cache",
                              **options)
            small, big = wfst.load_graph(r.directory), wfst.load_graph(Path(args.graphs) / name)
            for emissions in PROFILES:
                rows += compare("demo", name, small, big, LM, texts, token_set, emissions, {**DEMO, **given},
                                args.repeat, args.gpu_batch)
    if "large" in setups or "wide" in setups:
        (small, big), big_lm, texts = large_setup(out / "large")
        lms["large"] = lms["wide"] = big_lm
        for setup in ("large", "wide"):
            if setup in setups:
                config, chosen = (LARGE, texts) if setup == "large" else (WIDE, with_oov(texts[:WIDE_SENTENCES]))
                rows += compare(setup, "bpe_compact", small, big, big_lm, chosen, "bpe", "noisy",
                                {**config, **given}, args.repeat, args.gpu_batch)
    print_tables(rows)
    for r in rows:  # each big LM's memory, once
        if r["decoder"] == "small + rescoring" and str(lms[r["setup"]]) not in [done["lm"] for done in mem]:
            mem.append(memory(r["setup"], lms[r["setup"]], r))
    if args.gpu_batch:
        print(f"GPU rows: {gpu_name()}, batches of {args.gpu_batch} utterances of similar lengths")
    else:
        print("GPU rows: not asked (--gpu-batch 64 adds them on a machine with a GPU"
              + (f": {gpu_name()})" if gpu_name() else "; this one has none)"))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dict(machine=m, rows=rows, memory=mem), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(recipe_cli.run(main))
