#!/usr/bin/env python3
"""make compare-decoders: greedy, ours (CPU, CUDA), Kaldi, flashlight-text and pyctcdecode side by side,
and the lexicon-free ones: our CTC beam search and flashlight's LexiconFreeDecoder on the demo's token LMs.

Uses the demo's compact graphs (built as make demo builds them; skipped when up to
date), the demo's ARPA and the graphs' lexicons, and SYNTHETIC emissions (wfst.synthetic)
of the demo's held-out sentences in two profiles.  Every decoder's LM weight and word
insertion knob are tuned on dev.txt, then test.txt is decoded at several beam settings.
pyctcdecode runs in its own venv (--venv), which `make pyctcdecode-venv` makes under
build/peers/ (make compare-decoders does that first).  A decoder that cannot be installed or
run gets a row saying why.  Writes a results folder (results.md, results.csv, tuning.csv,
wer_vs_rtfx.png, run.json, cells/); an interrupted run resumes where it stopped.  All the
work is in wfst_bench.compare and wfst_bench.peers; this script only finds the commit it
runs (git) and hands it in, so that results.md says which code made the cells.
"""
from __future__ import annotations

import sys
from pathlib import Path

import recipe_cli
from code_state import code_state
from demo_data import HELD_OUT, LM, TOKEN_LMS, TOKEN_SETS, emission_options, sentences
from wfst.graphs import TOPOLOGIES, compile_graph
from wfst_bench import compare
from wfst_bench.peers import PYCTCDECODE_VENV


def main() -> int:
    ap = recipe_cli.parser(__doc__)
    ap.add_argument("--out", help="results folder (default: build/compare-decoders; with --quick: ...-quick)")
    ap.add_argument("--graphs", default="build/demo", help="where the demo graphs are (built if missing)")
    ap.add_argument("--topology", default="compact", choices=TOPOLOGIES)
    ap.add_argument("--quick", action="store_true", help="a few sentences, a 2x2 grid, 2 settings: a smoke test")
    ap.add_argument("--profiles", type=recipe_cli.listed(compare.PROFILES), default=",".join(compare.PROFILES),
                    help="emission profiles (demo,peaky)")
    ap.add_argument("--decoders", type=recipe_cli.listed(compare.DECODER_KEYS),
                    help=f"comma-separated subset of: {', '.join(compare.DECODER_KEYS)} (one tuned like another "
                         f"brings that one along)")
    ap.add_argument("--dev-sentences", type=recipe_cli.whole(), help="first N of dev.txt (default: all; --quick: 20)")
    ap.add_argument("--test-sentences", type=recipe_cli.whole(), help="first N of test.txt (default: all; --quick: 20)")
    ap.add_argument("--repeat", type=recipe_cli.whole(), default=2, help="timed passes per test cell (best is kept)")
    ap.add_argument("--seed", type=recipe_cli.whole(0), default=0)
    ap.add_argument("--venv", default=str(PYCTCDECODE_VENV),
                    help="pyctcdecode's own venv (make pyctcdecode-venv makes it)")
    again = ap.add_mutually_exclusive_group()
    again.add_argument("--force", action="store_true", help="recompute every cell")
    again.add_argument("--retime", action="store_true", help="measure the test cells again (keeps the tuning)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args()
    args.out = args.out or ("build/compare-decoders-quick" if args.quick else "build/compare-decoders")
    recipe_cli.check_folder(ap, "--out", args.out)
    recipe_cli.check_folder(ap, "--graphs", args.graphs)
    graphs = Path(args.graphs)
    code = code_state()  # before the run: the code imported now is the code that runs
    n_dev = args.dev_sentences or (20 if args.quick else None)
    n_test = args.test_sentences or (20 if args.quick else None)

    targets = []
    for name, kw in TOKEN_SETS.items():
        r = compile_graph(graphs / f"{name}_{args.topology}", lm=LM, topology=args.topology,
                          cache_dir=graphs / ".wfst-cache", **kw)
        targets.append(compare.Target(f"{name}_{args.topology}", r.directory, name, args.topology, LM,
                                      token_lm=TOKEN_LMS[name], **emission_options(name)))
    res = compare.compare_decoders(args.out, targets, dev_texts=sentences("dev", n_dev),
                                   test_texts=sentences("test", n_test), texts_from=HELD_OUT,
                                   profiles=args.profiles, seed=args.seed, repeat=args.repeat,
                                   quick=args.quick, progress=not args.no_progress, force=args.force,
                                   retime=args.retime,
                                   venv=args.venv, include=args.decoders,
                                   code=code)
    print(res["markdown"])
    print(f"\n{res['ran']} cells run, {res['skipped']} reused; results in {args.out}/results.md")
    return 0


if __name__ == "__main__":
    sys.exit(recipe_cli.run(main))
