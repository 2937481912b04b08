#!/usr/bin/env python3
"""make bench-beam-search: the lexicon-free CTC beam search (wfst.CtcBeamDecoder) against
flashlight-text's LexiconFreeDecoder with the same token LM, and against the TLG decoder.

Decodes SYNTHETIC emissions (wfst.synthetic) of the demo's held-out sentences on one CPU
thread, in the `demo` and `noisy` profiles (noisy: more confusion and noise, and a made-up
word in half the sentences), with the demo's token LMs (chars_lm.arpa.gz, a 6-gram;
bpe_lm.arpa.gz, a 4-gram).  Both beam searches run at the same beam size, beam threshold
20 and LM weight (natural-log units; flashlight's is x ln 10), no token bonus (flashlight
has none); the TLG rows decode the demo's compact graph (word 3-gram) at beam 16 / 7,000.
Prints WER and seconds; --json writes the rows.  No weight is tuned here.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import recipe_cli
from demo_data import DATA, PROFILES, TOKEN_LMS, emission_options, sentences, with_unknown_words
from wfst_bench.machine import machine
from wfst_bench.peers import FlashlightLexiconFree

import wfst
from wfst import synthetic
from wfst.scoring import word_errors

SETUPS = (("char", "chars_tokens.txt", "char_compact", dict(word_boundary="|")),
          ("bpe", "bpe_tokens.txt", "bpe_compact", dict(spm=str(DATA / "bpe.model"))))


def main(argv=None) -> int:
    ap = recipe_cli.parser(__doc__)
    ap.add_argument("--utterances", type=recipe_cli.whole(), default=100)
    ap.add_argument("--beam-sizes", type=recipe_cli.whole(), nargs="+", default=[8, 32])
    ap.add_argument("--lm-weights", type=float, nargs="+", default=[0.5, 0.8])
    ap.add_argument("--graphs", default="build/demo", help="where make demo put the graphs")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    recipe_cli.check_json(ap, args.json)
    for option, values in (("--beam-sizes", args.beam_sizes), ("--lm-weights", args.lm_weights)):
        twice = [v for i, v in enumerate(values) if v in values[:i]]
        if twice:
            ap.error(f"argument {option}: {twice[0]:g} given twice")
    odd = [w for w in args.lm_weights if not 0 <= w <= 1e4]  # (CtcBeamDecoder's range; NaN fails both)
    if odd:
        ap.error(f"argument --lm-weights: must be numbers in [0, 10000], got {odd[0]:g}")
    # (the graphs last, so that a bad option is named on a checkout without them)
    recipe_cli.check_graphs(ap, args.graphs, ("char_compact", "bpe_compact"))
    print("SYNTHETIC emissions of the demo's held-out sentences; one CPU thread", flush=True)
    rows = []
    for token_set, table, graph, spelling in SETUPS:
        lm = TOKEN_LMS[token_set]
        tokens = wfst.TokenTable.read(DATA / table)
        flashlight = FlashlightLexiconFree(lm, tokens)
        tlg = wfst.Decoder(wfst.load_graph(Path(args.graphs) / graph), num_threads=1)
        for profile, options in PROFILES.items():
            texts = sentences("test", args.utterances)
            if profile == "noisy":
                texts = with_unknown_words(texts)
            x, lengths = synthetic.from_texts(texts, tokens, seed=1, **emission_options(token_set), **options)
            tlg.decode(x[:1], lengths[:1])
            start = time.perf_counter()
            found = tlg.decode(x, lengths)
            tlg_s = time.perf_counter() - start  # (decoding only, as the beam searches are timed)
            tlg_wer = 100 * word_errors(texts, [r.words for r in found]).rate
            for beam_size in args.beam_sizes:
                for weight in args.lm_weights:
                    ours = wfst.CtcBeamDecoder(tokens, lm, beam_size=beam_size, lm_weight=weight,
                                               token_insertion=0.0, beam_threshold=20.0, num_threads=1, **spelling)
                    ours.decode(x[:1], lengths[:1])
                    start = time.perf_counter()
                    hyps = [r.words for r in ours.decode(x, lengths)]
                    ours_s = time.perf_counter() - start
                    run = flashlight.decode(x, lengths, beam_size=beam_size, lm_weight=weight, beam_threshold=20.0,
                                            word_boundary=spelling.get("word_boundary"))
                    row = dict(tokens=token_set, profile=profile, frames=int(lengths.sum()), beam_size=beam_size,
                               lm_weight=weight, ours_wer=100 * word_errors(texts, hyps).rate, ours_s=ours_s,
                               flashlight_wer=100 * word_errors(texts, run.hyps).rate, flashlight_s=run.seconds,
                               tlg_wer=tlg_wer, tlg_s=tlg_s)
                    rows.append(row)
                    print(f"{token_set:4s} {profile:5s} beam {beam_size:3d} lm_weight {weight:.2f}: ours WER "
                          f"{row['ours_wer']:5.2f}% {ours_s:6.2f} s | flashlight lexicon-free WER "
                          f"{row['flashlight_wer']:5.2f}% {run.seconds:6.2f} s ({run.seconds / ours_s:4.1f}x) | "
                          f"TLG WER {tlg_wer:5.2f}% {tlg_s:5.2f} s | {row['frames']} frames", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dict(machine=machine(), rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(recipe_cli.run(main))
