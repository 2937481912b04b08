#!/usr/bin/env python3
"""make demo: build the demo graphs and show that they work.

Builds TLG for the character and the BPE token sets × the three topologies from the
bundled demo data (recipes/demo/data), prints their sizes and build costs, then checks
each graph the way a decoder will be checked: for held-out sentences, a CTC alignment
of the sentence's tokens must come out of TLG's best path (OpenFST) as the sentence.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import sentencepiece as spm
from wfst.graphs import TOPOLOGIES, compile_graph
from wfst.graphs.paths import best_path, ctc_alignment

import wfst
from wfst.graph import read_fst

DATA = Path(__file__).resolve().parent / "demo" / "data"
TOKEN_SETS = {
    "char": dict(tokens=DATA / "chars_tokens.txt", word_boundary="|"),
    "bpe": dict(tokens=DATA / "bpe_tokens.txt", spm=DATA / "bpe.model"),
}


def spell(name: str, sentence: list[str], graph: wfst.Graph, sp) -> list[int]:
    column = {s: c for c, s in enumerate(graph.tokens.symbols)}
    if name == "char":
        return [column[ch] for ch in "|".join(sentence)]
    return [column[p] for w in sentence for p in sp.encode(w, out_type=str)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="build/demo", help="where the graph directories go")
    ap.add_argument("--sentences", type=int, default=20, help="held-out sentences to check per graph")
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = ap.parse_args()
    out = Path(args.out)

    results = {}
    for name, kw in TOKEN_SETS.items():
        for topo in TOPOLOGIES:
            results[name, topo] = compile_graph(out / f"{name}_{topo}", lm=DATA / "lm.arpa", topology=topo,
                                                cache_dir=out / ".wfst-cache", force=args.force, **kw)

    print("\nDemo graphs (recipes/demo/data: 3-gram LM from a public-domain text)\n")
    print(f"{'graph':<14}{'N':>5}{'D':>4}{'LG states':>11}{'LG arcs':>10}{'TLG states':>12}"
          f"{'TLG arcs':>11}{'eps arcs':>10}{'MiB':>7}{'build s':>9}")
    for (name, topo), r in results.items():
        i, s = r.info, r.info["sizes"]
        print(f"{name + '_' + topo:<14}{i['num_columns']:>5}{i['num_disambig']:>4}{s['LG']['states']:>11,}"
              f"{s['LG']['arcs']:>10,}{s['TLG']['states']:>12,}{s['TLG']['arcs']:>11,}"
              f"{s['TLG']['epsilon_arcs']:>10,}{i['files']['TLG.fst'] / 2**20:>7.1f}{i['build_seconds']:>9.1f}")

    sp = spm.SentencePieceProcessor(model_file=str(DATA / "bpe.model"))
    lines = [ln.split() for ln in (DATA / "test.txt").read_text(encoding="utf-8").splitlines() if ln.strip()]
    print(f"\nBest path of TLG for a CTC alignment of {args.sentences} held-out sentences "
          "(OpenFST shortest path; sentences with out-of-vocabulary words skipped)")
    failures, example = 0, None
    for (name, topo), r in results.items():
        graph = wfst.load_graph(r.directory)
        ids = graph.words.ids()
        sentences = [s for s in lines if all(w in ids for w in s)][: args.sentences]
        tlg = read_fst(r.directory / "TLG.fst")
        ok = 0
        for sentence in sentences:
            frames = ctc_alignment(spell(name, sentence, graph, sp), graph.tokens.blank, topo)
            words, cost = best_path(tlg, frames)
            hyp = [graph.words[w] for w in words] if words is not None else None
            ok += hyp == sentence
            example = example or (f"{name}_{topo}", sentence, hyp, cost, len(frames))
        failures += ok != len(sentences)
        print(f"  {name + '_' + topo:<14} {ok}/{len(sentences)} recovered")
    graph_name, sentence, hyp, cost, frames = example
    print(f"\n  e.g. {' '.join(sentence)!r}\n    -> {' '.join(hyp or [])!r}\n"
          f"    ({graph_name}: {frames} frames, graph cost {cost:.2f})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
