"""``wfst-make-graph``: compile a TLG graph directory from tokens, a lexicon and an ARPA LM.

A bad option or a bad input is one line on stderr (``wfst-make-graph: error: ...``) and
exit status 2; a traceback means a bug.
"""
from __future__ import annotations

import argparse
import sys

from wfst.cli import CliParser, command, fail
from wfst.errors import WfstError

from .compile import compile_graph
from .topology import TOPOLOGIES

PROG = "wfst-make-graph"


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(
        prog=PROG,
        description="Build TLG = T ∘ min(det(L ∘ G)) for a CTC model and write a graph directory "
                    "(TLG.fst, tokens.txt, words.txt, lexicon.txt, T.fst, graph.json, TLG.csr.npz). Rebuilds only when "
                    "stale.")
    p.add_argument("--tokens", required=True, help="the model's tokens (symbol [column] per line) with a blank")
    p.add_argument("--lm", required=True, help="ARPA language model (.arpa or .arpa.gz), any order")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--lexicon", help="lexicon file: 'word tok1 tok2 ...' per line")
    src.add_argument("--words", help="word list to spell (default: the LM's unigrams)")
    p.add_argument("--spm", help="sentencepiece model to spell words with (BPE); default: per character")
    p.add_argument("--word-boundary", metavar="UNIT",
                   help="word-boundary token (e.g. '|'), a separator between words")
    p.add_argument("--blank", help="blank symbol, if not <blk>, <blank> or <b>")
    p.add_argument("--topo", default="compact", choices=TOPOLOGIES, help="CTC topology (default: compact)")
    p.add_argument("--epsilon-free", action="store_true",
                   help="remove TLG's eps:eps arcs (backoff arcs, compact's arcs back to the blank state); "
                        "epsilon-input arcs that carry a word stay")
    p.add_argument("--out", required=True, help="graph directory to write")
    p.add_argument("--cache-dir", help="cache of min(det(L ∘ G)) (default: .wfst-cache beside --out)")
    p.add_argument("--force", action="store_true",
                   help="rebuild even if up to date, min(det(L ∘ G)) too (not read from the cache)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress output (warnings and the one-line summary still print)")
    return p


@command(PROG)
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    conflict = None
    if args.spm and args.lexicon:
        conflict = "--spm spells a word list; it cannot be used with --lexicon"
    elif args.spm and args.word_boundary is not None:
        conflict = (f"--word-boundary {args.word_boundary!r} is for per-character spelling; it cannot be used "
                    f"with --spm (sentencepiece pieces mark word starts themselves)")
    if conflict:
        print(f"{PROG}: error: {conflict}", file=sys.stderr)
        return 2
    try:
        result = compile_graph(
            args.out, tokens=args.tokens, lm=args.lm, lexicon=args.lexicon, words=args.words,
            spm=args.spm, word_boundary=args.word_boundary, blank=args.blank, topology=args.topo,
            epsilon_free=args.epsilon_free, cache_dir=args.cache_dir, force=args.force,
            progress=not args.quiet)
    except (WfstError, ValueError, OSError) as e:
        return fail(PROG, e)
    print(result.summary())  # the command's result, on stdout whether built or up to date (progress: stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
