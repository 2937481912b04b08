#!/usr/bin/env python3
"""make bench-lattice: word lattices on the demo against the best-path search and Kaldi.

Decodes SYNTHETIC emissions (wfst.synthetic) of the demo's held-out sentences with the
demo's compact graphs (built by make demo) on one CPU thread, in two profiles: `demo`
(make demo's emissions) and `noisy` (more confusions and noise, and a made-up word the
graph cannot output in half the sentences).  For each: the best-path decode, the same
with lattice_beam (generation only: the time decode() takes), N-best extraction (N = 10)
and word confidences timed apart, Kaldi's LatticeSimpleDecoder (raw lattice) at the same
beam and lattice beam, 1-best and oracle WER, lattice size, and a calibration table of the
word confidences with their normalized cross entropy (NCE), as lattice posteriors and
calibrated (wfst.confidence.Calibration, Platt scaling fitted on as many dev sentences
of the same profile).

Kaldi's LatticeSimpleDecoder has no max_active: the Kaldi rows run both decoders at
max_active 10^6 (not binding); the best-path rows use the demo's 16 / 7,000.
"""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import recipe_cli
from demo_data import PROFILES, emission_options, sentences, with_unknown_words
from wfst_bench.kaldi import KaldiLatticeDecoder
from wfst_bench.machine import machine

import wfst
from wfst import synthetic
from wfst.confidence import Calibration, normalized_cross_entropy, word_correctness
from wfst.scoring import word_errors

BINS = (0.0, 0.5, 0.8, 0.9, 0.95, 0.99, 1.0001)


def timed(fn, repeat: int):
    best, out = math.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def calibration(texts, results, fitted=None) -> tuple[list[dict], float]:
    """Confidence bins against the share of correct words (a word is correct when the
    reference holds it at the aligned place), and the NCE of the confidences: the lattice
    posteriors, or mapped by the calibration `fitted`."""
    posteriors, correct = word_correctness(results, texts)
    conf = fitted(posteriors) if fitted is not None else posteriors
    table = []
    for lo, hi in zip(BINS[:-1], BINS[1:]):
        sel = (conf >= lo) & (conf < hi)
        table.append(dict(bin=f"[{lo:.2f}, {min(hi, 1):.2f}{']' if hi > 1 else ')'}", words=int(sel.sum()),
                          mean_confidence=float(conf[sel].mean()) if sel.any() else None,
                          correct=float(correct[sel].mean()) if sel.any() else None))
    return table, normalized_cross_entropy(conf, correct)


def run(graphs, name, profile, texts, x, lengths, repeat, lattice_beam, count, token_set, options):
    g = wfst.load_graph(graphs / name)
    row = dict(graph=name, profile=profile, utterances=len(texts), frames=int(lengths.sum()))
    plain = wfst.Decoder(g, beam=16.0, max_active=7000, num_threads=1)
    lat = wfst.Decoder(g, beam=16.0, max_active=7000, num_threads=1, lattice_beam=lattice_beam)
    plain.decode(x[:1], lengths[:1])
    lat.decode(x[:1], lengths[:1], nbest=2)  # compile outside the timing
    row["best_path_s"], best = timed(lambda: plain.decode(x, lengths), repeat)
    row["lattice_s"], results = timed(lambda: lat.decode(x, lengths), repeat)
    row["lattice_vs_best_path"] = row["lattice_s"] / row["best_path_s"]
    start = time.perf_counter()
    for r in results:
        r.lattice.nbest(10)
    row["nbest10_s"] = time.perf_counter() - start
    start = time.perf_counter()
    for r in results:
        r.word_confidences  # noqa: B018
    row["confidences_s"] = time.perf_counter() - start
    row["states_per_utt"] = float(np.mean([r.lattice.num_states for r in results]))
    row["arcs_per_frame"] = sum(r.lattice.num_arcs for r in results) / row["frames"]
    row["wer"] = 100.0 * word_errors(texts, [r.words for r in best]).rate
    oracle = sum(r.lattice.oracle(t)[0] for t, r in zip(texts, results))
    row["oracle_wer"] = 100.0 * oracle / sum(len(t.split()) for t in texts)
    row["calibration"], row["nce"] = calibration(texts, results)
    # Platt scaling fitted on the dev split's sentences (same profile), applied to these
    dev_texts = sentences("dev", len(texts))
    if profile == "noisy":
        dev_texts = with_unknown_words(dev_texts)
    xd, ld = synthetic.from_texts(dev_texts, g.tokens, seed=2, **emission_options(token_set), **options)
    fitted = Calibration.fit(lat.decode(xd, ld), dev_texts)
    row["calibration_fit"] = dict(slope=fitted.slope, offset=fitted.offset, dev_utterances=len(dev_texts))
    row["calibrated"], row["nce_calibrated"] = calibration(texts, results, fitted)
    # against Kaldi's LatticeSimpleDecoder: max_active not binding on either side
    k = slice(0, count)
    wide = wfst.Decoder(g, beam=16.0, max_active=10**6, min_active=0, num_threads=1, lattice_beam=lattice_beam)
    wide.decode(x[:1], lengths[:1])
    row["wide_lattice_s"], _ = timed(lambda: wide.decode(x[k], lengths[k]), repeat)
    kaldi = KaldiLatticeDecoder(graphs / name / "TLG.fst", beam=16.0, lattice_beam=lattice_beam)
    kaldi.lattices(x[:1], lengths[:1])  # (warm, as ours is: the best of `repeat` runs each)
    runs = []
    for _ in range(repeat):
        kaldi.seconds = 0.0
        kaldi.lattices(x[k], lengths[k])
        runs.append(kaldi.seconds)
    row["kaldi_utterances"] = len(lengths[k])
    row["kaldi_lattice_s"] = min(runs)
    row["kaldi_vs_ours"] = row["kaldi_lattice_s"] / row["wide_lattice_s"]
    return row


def main(argv=None) -> int:
    ap = recipe_cli.parser(__doc__)
    ap.add_argument("--utterances", type=recipe_cli.whole(), default=100)
    ap.add_argument("--kaldi-utterances", type=recipe_cli.whole(), default=40, help="of them, decoded by Kaldi too")
    ap.add_argument("--lattice-beam", type=recipe_cli.positive, default=8.0)
    ap.add_argument("--repeat", type=recipe_cli.whole(), default=3)
    ap.add_argument("--graphs", default="build/demo", help="where make demo put the graphs")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    recipe_cli.check_json(ap, args.json)
    recipe_cli.check_graphs(ap, args.graphs, ("char_compact", "bpe_compact"))
    print("SYNTHETIC emissions of the demo's held-out sentences; one CPU thread", flush=True)
    rows = []
    for name, token_set in (("char_compact", "char"), ("bpe_compact", "bpe")):
        g = wfst.load_graph(Path(args.graphs) / name)
        for profile, options in PROFILES.items():
            texts = sentences("test", args.utterances)
            if profile == "noisy":
                texts = with_unknown_words(texts)
            x, lengths = synthetic.from_texts(texts, g.tokens, seed=1, **emission_options(token_set), **options)
            row = run(Path(args.graphs), name, profile, texts, x, lengths, args.repeat, args.lattice_beam,
                      args.kaldi_utterances, token_set, options)
            rows.append(row)
            print(f"{name:13s} {profile:6s} best path {row['best_path_s']:.3f}s  lattice {row['lattice_s']:.3f}s "
                  f"({row['lattice_vs_best_path']:.2f}x)  N-best(10) {row['nbest10_s']:.3f}s  confidences "
                  f"{row['confidences_s']:.3f}s  | {row['kaldi_utterances']} utterances: Kaldi LatticeSimpleDecoder "
                  f"{row['kaldi_lattice_s']:.3f}s vs ours "
                  f"{row['wide_lattice_s']:.3f}s ({row['kaldi_vs_ours']:.1f}x)  | WER {row['wer']:.2f} oracle "
                  f"{row['oracle_wer']:.2f}  NCE {row['nce']:.3f} (calibrated on dev: {row['nce_calibrated']:.3f})  "
                  f"{row['states_per_utt']:.0f} states/utt, "
                  f"{row['arcs_per_frame']:.1f} arcs/frame", flush=True)
            for what in ("calibration", "calibrated"):
                for b in row[what]:
                    if b["words"]:
                        print(f"    {what:11s} confidence {b['bin']:14s} {b['words']:6d} words, mean "
                              f"{b['mean_confidence']:.3f}, correct {b['correct']:.3f}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(dict(machine=machine(), rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(recipe_cli.run(main))
