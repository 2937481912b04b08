#!/usr/bin/env python3
"""make compare-topologies: normal, compact and minimal TLGs for the character and BPE token sets.

Builds the six graphs of the demo data (each from scratch, with its own cache, so that
build seconds compare), then, for SYNTHETIC emissions (wfst.synthetic) of the demo's
held-out sentences in two profiles, tunes our decoder's LM weight and blank penalty on
dev.txt per graph and decodes test.txt at several beam / max_active settings.  Writes a
results folder (results.md, results.csv, tuning.csv, graphs.csv, wer_vs_rtfx.png,
graph_size.png, run.json, cells/); an interrupted run resumes where it stopped.
All the work is in wfst_bench.compare; this script only finds the commit it runs (git) and
hands it in, so that results.md says which code made the cells.
"""
from __future__ import annotations

import sys
from pathlib import Path

import recipe_cli
from code_state import code_state
from demo_data import HELD_OUT, LM, TOKEN_SETS, build_apart, emission_options, sentences
from wfst.graphs import TOPOLOGIES
from wfst_bench import compare


def main() -> int:
    ap = recipe_cli.parser(__doc__)
    ap.add_argument("--out", help="results folder (default: build/compare-topologies; with --quick: ...-quick)")
    ap.add_argument("--graphs", default="build/compare-topologies/graphs",
                    help="where to build the graphs (skipped when up to date)")
    ap.add_argument("--quick", action="store_true", help="a few sentences, a 2x2 grid, 2 settings: a smoke test")
    ap.add_argument("--profiles", type=recipe_cli.listed(compare.PROFILES), default=",".join(compare.PROFILES),
                    help="emission profiles (demo,peaky)")
    ap.add_argument("--dev-sentences", type=recipe_cli.whole(), help="first N of dev.txt (default: all; --quick: 20)")
    ap.add_argument("--test-sentences", type=recipe_cli.whole(), help="first N of test.txt (default: all; --quick: 20)")
    ap.add_argument("--repeat", type=recipe_cli.whole(), default=2, help="timed passes per test cell (best is kept)")
    ap.add_argument("--seed", type=recipe_cli.whole(0), default=0)
    again = ap.add_mutually_exclusive_group()
    again.add_argument("--force", action="store_true", help="recompute every cell")
    again.add_argument("--retime", action="store_true", help="measure the test cells again (keeps the tuning)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args()
    args.out = args.out or ("build/compare-topologies-quick" if args.quick else "build/compare-topologies")
    recipe_cli.check_folder(ap, "--out", args.out)
    recipe_cli.check_folder(ap, "--graphs", args.graphs)
    out = Path(args.out)
    graphs = Path(args.graphs)
    code = code_state()  # before the run: the code imported now is the code that runs
    n_dev = args.dev_sentences or (20 if args.quick else None)
    n_test = args.test_sentences or (20 if args.quick else None)

    targets = []
    for name, kw in TOKEN_SETS.items():
        for topo in TOPOLOGIES:
            directory = build_apart(graphs / f"{name}_{topo}", topo, graphs / ".cache" / f"{name}_{topo}", **kw)
            targets.append(compare.Target(f"{name}_{topo}", directory, name, topo, LM, **emission_options(name)))
    res = compare.compare_topologies(out, targets, dev_texts=sentences("dev", n_dev),
                                     test_texts=sentences("test", n_test), texts_from=HELD_OUT,
                                     profiles=args.profiles, seed=args.seed, repeat=args.repeat,
                                     quick=args.quick, progress=not args.no_progress, force=args.force,
                                     retime=args.retime, code=code)
    print(res["markdown"])
    print(f"\n{res['ran']} cells run, {res['skipped']} reused; results in {out}/results.md")
    return 0


if __name__ == "__main__":
    sys.exit(recipe_cli.run(main))
