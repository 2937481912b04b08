"""wfst-bench: decode the same emissions with several decoders and compare WER and speed.

    wfst-bench --graph build/demo/char_compact --texts recipes/demo/data/test.txt \\
               --word-boundary '|' --decoders greedy,cpu1,cpu,kaldi,cuda

Decoders: greedy (best-path CTC, NumPy), cpu1 (our CPU backend, one thread), cpu (all
cores), kaldi (Kaldi's FasterDecoder via kaldi-decoder, one thread, same TLG and beam /
max_active / min_active), cuda (our CUDA backend; skipped with a note where no GPU).
RTFx counts decoding only (emissions already in memory, on the GPU for cuda), at 40 ms
per frame unless --frame-ms says otherwise.  Emissions come from --emissions (.npz) or are SYNTHETIC, made from --texts
(wfst.synthetic); the table says which.  Memory: the process's peak resident memory
while a decoder ran, and what the decoder's own work added to it (cuda: CuPy's memory
pool on the GPU).  Reference words outside the graph's vocabulary are counted: no
decoder can get them right.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

import wfst
from wfst.cli import CliParser, add_frame_ms, as_options, check_frame_ms, command, fail
from wfst.config import MIN_ACTIVE, usable_cores
from wfst.files import read_lines, sha256_file, why_unwritable, write_text_atomic
from wfst.inputs import check_log_probs, input_faults
from wfst.scoring import FRAME_SECONDS, rtfx, word_errors
from wfst.synthetic import from_texts_seeds, load_npz

from .machine import machine
from .peers import PeerUnavailable
from .systems import EmissionSet, GreedySystem, KaldiSystem, OursSystem, System, Target

# name: (label in the table, its system given (name, label, batch size)): the comparison experiments' adapters.
DECODERS: dict[str, tuple[str, Callable[[str, str, int], System]]] = {
    "greedy": ("greedy CTC", lambda key, label, batch: GreedySystem(key, label)),
    "cpu1": ("ours, CPU, 1 thread", lambda key, label, batch: OursSystem(key, label, threads=1, batch_size=batch)),
    "cpu": (f"ours, CPU, {usable_cores()} threads",
            lambda key, label, batch: OursSystem(key, label, threads=None, batch_size=batch)),
    "kaldi": ("Kaldi FasterDecoder (1 thread)", lambda key, label, batch: KaldiSystem(key, label)),
    "cuda": ("ours, CUDA", lambda key, label, batch: OursSystem(key, label, device="cuda", batch_size=batch)),
}


def run(graph_dir, log_probs, lengths, refs, *, decoders: Sequence[str] = tuple(DECODERS),
        settings: dict | None = None, batch_size: int = 64, word_boundary: str | None = None,
        rounds: int = 1, progress: bool = True, frame_seconds: float = FRAME_SECONDS) -> list[dict]:
    """One row per decoder: WER, RTFx, frames/s, tokens/frame, peak memory (or why it was skipped).
    `settings`: beam, max_active, min_active ... (our decoder's defaults where not given).
    With `rounds` > 1 every decoder decodes everything once per round, the decoders taking
    turns, and keeps its fastest round: a machine whose speed drifts over minutes slows
    them alike, so their ratios hold."""
    from tqdm import tqdm

    unknown = [d for d in decoders if d not in DECODERS]
    if unknown:
        raise ValueError(f"unknown decoder {unknown[0]!r}; choose from {', '.join(DECODERS)}")
    target = Target(Path(graph_dir).name, Path(graph_dir), word_boundary=word_boundary)
    em = EmissionSet.of("test", "bench", refs or [], log_probs, lengths)
    rows, systems = {}, {}
    for name in decoders:
        label, make = DECODERS[name]
        system = make(name, label, batch_size)
        try:
            system.setup(target, None)
            systems[name] = system
        except PeerUnavailable as e:
            rows[name] = {"decoder": name, "skipped": str(e)}
    with tqdm(total=rounds * len(systems), desc="decoders", disable=not progress, file=sys.stderr) as bar:
        for _ in range(rounds):
            for name, system in systems.items():
                out = system.decode(em, dict(settings or {}), timed=True)
                bar.update()
                before = rows.get(name)
                own = min((m for m in (out.peak_mb, before and before["own_mb"]) if m is not None), default=None)
                if before is not None and before["seconds"] <= out.seconds:
                    before["own_mb"] = own
                    continue
                rows[name] = {"decoder": name, "wer": _wer(refs, out.hyps), "gave_up": out.gave_up,
                              "seconds": out.seconds, "rtfx": rtfx(em.frames, out.seconds, frame_seconds),
                              "frames_per_second": em.frames / out.seconds, "tokens_per_frame": out.tokens_per_frame,
                              "device": (device := getattr(system, "device", "cpu")),
                              "threads": None if device == "cuda" else getattr(system, "threads", 1) or usable_cores(),
                              "peak_mb": before["peak_mb"] if before else out.process_peak_mb, "own_mb": own}
    for system in systems.values():
        system.teardown()
    return [rows[name] for name in decoders]


def _wer(refs, hyps) -> float | None:
    """The word error rate, None without references or without reference words."""
    errors = word_errors(refs, hyps) if refs is not None else None
    return errors.rate if errors is not None and errors.words else None


def format_table(rows: list[dict], title: str) -> str:
    lines = [title, "", "| decoder | WER % | RTFx | frames/s | tokens/frame | peak MiB ¹ | own MiB ² |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        name = DECODERS[r["decoder"]][0] if r["decoder"] in DECODERS else r["decoder"]
        if "skipped" in r:
            lines.append(f"| {name} | not measured: {r['skipped']} | | | | | |")
            continue
        wer = f"{100 * r['wer']:.2f}" if r["wer"] is not None else "-"
        wer += f" ({r['gave_up']} gave up ³)" if r.get("gave_up") else ""
        tok = f"{r['tokens_per_frame']:.0f}" if r["tokens_per_frame"] is not None else "-"
        peak, own = (f"{r[k]:.0f}" if r[k] is not None else "-" for k in ("peak_mb", "own_mb"))
        own += " (GPU)" if r["device"] == "cuda" and r["own_mb"] is not None else ""
        lines.append(f"| {name} | {wer} | {r['rtfx']:.0f} | {r['frames_per_second']:.0f} | {tok} | {peak} | {own} |")
    lines += ["", "¹ the process's resident peak while the row's decoder ran (its first round), with what earlier "
              "rows left resident",
              "² what the row's own decoding (its graph loaded, its decoder made, warmed up and run) added to the "
              "resident memory at its peak, the least over the rounds; CUDA: CuPy's memory pool on the GPU at its end"]
    if any(r.get("gave_up") for r in rows):
        lines.append("³ utterances the decoder found no path for (Kaldi: \"Did not successfully decode\"), scored as "
                     "empty hypotheses")
    return "\n".join(lines)


def _sha256(spm) -> str:
    try:
        return sha256_file(spm)
    except OSError as e:
        raise wfst.MissingFileError(spm, "sentencepiece model", e.strerror) from None


def _parse(argv) -> argparse.Namespace:
    d = wfst.DecoderConfig()
    ap = CliParser(prog="wfst-bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", required=True, help="graph directory (TLG.fst, tokens.txt, words.txt)")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--emissions", help=".npz with log_probs, lengths (and texts as references)")
    src.add_argument("--texts", help="make SYNTHETIC emissions of these sentences (one per line)")
    ap.add_argument("--spm", help="sentencepiece model of a BPE graph (with --texts)")
    ap.add_argument("--word-boundary", help="word-boundary token of a character graph, e.g. '|'")
    ap.add_argument("--seeds", type=int, default=1, help="synthetic copies of each sentence (seeds 0..N-1)")
    ap.add_argument("--decoders", default=",".join(DECODERS), help=f"comma-separated, of: {', '.join(DECODERS)}")
    ap.add_argument("--beam", type=float, default=d.beam, help="every decoder's beam (default: %(default)g)")
    ap.add_argument("--max-active", type=int, default=d.max_active,
                    help="every decoder's max_active (default: %(default)s)")
    ap.add_argument("--min-active", type=int, default=None,
                    help=f"default: {MIN_ACTIVE}, or --max-active if fewer (with kaldi: below --max-active)")
    ap.add_argument("--batch-size", type=int, default=64,
                    help="utterances per decode() call of ours (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="decode everything this many times, the decoders taking turns; keep each one's fastest")
    add_frame_ms(ap)
    ap.add_argument("--json", help="write the rows and settings here")
    args = ap.parse_args(argv)
    check_frame_ms(ap, args.frame_ms)
    args.decoders = [s.strip() for s in args.decoders.split(",") if s.strip()]
    unknown = [s for s in args.decoders if s not in DECODERS]
    if unknown or not args.decoders:
        what = f"unknown decoder {unknown[0]!r}" if unknown else "none given"
        ap.error(f"argument --decoders: {what}; choose from {', '.join(DECODERS)}")
    twice = [s for i, s in enumerate(args.decoders) if s in args.decoders[:i]]
    if twice:  # (decoded once, its row printed twice: as if two measurements)
        ap.error(f"argument --decoders: {twice[0]!r} given twice")
    if args.seeds < 1:
        ap.error(f"argument --seeds: must be >= 1, got {args.seeds}")
    if args.emissions and (args.seeds != 1 or args.spm is not None):  # (ignored there, and recorded in --json)
        ap.error(f"argument {'--seeds' if args.seeds != 1 else '--spm'}: spells --texts; --emissions are decoded "
                 f"as they are")
    if args.batch_size < 1:
        ap.error(f"argument --batch-size: must be >= 1, got {args.batch_size}")
    if args.rounds < 1:
        ap.error(f"argument --rounds: must be >= 1, got {args.rounds}")
    if args.json and (problem := why_unwritable(args.json)):
        ap.error(f"argument --json: cannot write {args.json}: {problem}")
    kaldi = "kaldi" in args.decoders
    if kaldi and args.min_active is None and args.max_active >= 1:  # (the default, kept below max_active for
        args.min_active = min(MIN_ACTIVE, args.max_active - 1)  # Kaldi, which refuses it equal: every decoder's)
    try:
        args.min_active = wfst.DecoderConfig(beam=args.beam, max_active=args.max_active,
                                             min_active=args.min_active).min_active  # (None: the default's)
    except ValueError as e:  # (said with this command's option names, not DecoderConfig's fields)
        ap.error(as_options(str(e).replace("DecoderConfig.", ""), ["beam", "max_active", "min_active"]))
    if kaldi and args.min_active >= args.max_active:  # (it aborted after the other decoders' work)
        ap.error(f"argument --min-active: Kaldi's decoder needs it below --max-active ({args.min_active} >= "
                 f"{args.max_active})")
    return args


@command("wfst-bench")
def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        graph = wfst.load_graph(args.graph)
        sentencepiece = graph.info.get("lexicon_source") == "sentencepiece"
        if args.emissions:
            em = load_npz(args.emissions)
            log_probs, lengths, refs, synthetic = em.log_probs, em.lengths, em.texts, em.synthetic
            if args.word_boundary is None:  # (greedy CTC splits words there: without it each utterance was
                args.word_boundary = graph.info.get("word_boundary")  # one word, its WER 100%)
            if log_probs.shape[2] != graph.tokens.num_columns:  # (each decoder failed its own way, Kaldi's
                raise wfst.InputFileError(args.emissions, None, f"log_probs have V={log_probs.shape[2]} columns, "
                                          f"the graph's tokens {graph.tokens.num_columns}: another model's "
                                          f"emissions?")  # reading past each row)
            try:  # (a NaN: a traceback after the first decoders' work, or their WER of NaN input, as wfst-decode says)
                check_log_probs(input_faults(np, log_probs, lengths), log_probs, lengths)
            except wfst.DecodeInputError as e:
                raise wfst.InputFileError(args.emissions, None, str(e)) from None
        else:
            texts = [t for t in read_lines(args.texts, "texts file") if t.strip()]
            if not texts:
                raise wfst.InputFileError(args.texts, None, "no sentences in the file")
            if sentencepiece and args.spm is None and args.word_boundary is not None:
                raise wfst.OptionError(f"{args.graph} was built with a sentencepiece model: pass --spm, or leave "
                                       f"--word-boundary out to spell as graph.json says (per character, its "
                                       f"sentences decoded at ~99% WER)")
            built_with = graph.info.get("inputs", {}).get("spm", {})
            if args.spm is not None and built_with.get("sha256") and _sha256(args.spm) != built_with["sha256"]:
                raise wfst.OptionError(f"--spm {args.spm} is not the sentencepiece model {args.graph} was built with "
                                       f"({built_with.get('path')}: another sha256 in graph.json); its pieces would "
                                       f"spell the sentences in other tokens")
            if args.word_boundary is None and args.spm is None:  # spelled as the graph was built
                args.word_boundary = graph.info.get("word_boundary")
                spm = graph.info.get("inputs", {}).get("spm", {}).get("path")
                if sentencepiece and not (spm and Path(spm).is_file()):
                    raise wfst.MissingFileError(spm or "(none recorded)", "the sentencepiece model the graph was "
                                                "built with (graph.json inputs.spm.path); pass --spm")
                args.spm = spm
            log_probs, lengths = from_texts_seeds(texts, graph.tokens, args.seeds, spm=args.spm,
                                                  word_boundary=args.word_boundary)
            refs, synthetic = texts * args.seeds, True
        vocabulary = graph.output_words()
        del graph
        if not np.sum(lengths):
            raise wfst.InputFileError(args.emissions or args.texts, None,
                                      f"no frames to decode ({len(lengths)} utterances)")
    except (wfst.WfstError, ValueError) as e:  # unreadable inputs, text the token set cannot spell
        return fail("wfst-bench", e)
    settings = {"beam": args.beam, "max_active": args.max_active, "min_active": args.min_active}
    rows = run(args.graph, log_probs, lengths, refs, decoders=args.decoders, settings=settings,
               batch_size=args.batch_size, word_boundary=args.word_boundary, rounds=args.rounds,
               frame_seconds=args.frame_ms / 1000)
    frames = int(np.sum(lengths))
    m = machine()
    title = (f"{args.graph}: {len(lengths)} utterances, {frames} frames = {frames * args.frame_ms / 3.6e6:.2f} h "
             f"at {args.frame_ms:g} ms/frame{' of SYNTHETIC emissions' if synthetic else ''}; beam {args.beam}, "
             f"max_active {args.max_active}, min_active {args.min_active}, batch {args.batch_size}, "
             f"best of {args.rounds} round(s); {m['cpu']}, "
             f"{m['cores']} cores" + (f", {m['gpu']}" if m["gpu"] else ", no GPU"))
    ref_words = [w for r in refs or [] for w in r.split()]
    oov = sum(w not in vocabulary for w in ref_words) if vocabulary is not None else None
    if args.json:  # the file first: a reader of stdout that stops early (| head) cut the run before it
        settings.update(batch_size=args.batch_size, rounds=args.rounds, frame_ms=args.frame_ms,
                        decoders=args.decoders, graph=args.graph,
                        emissions=args.emissions, texts=args.texts, seeds=None if args.emissions else args.seeds,
                        spm=args.spm, word_boundary=args.word_boundary, synthetic=synthetic)
        write_text_atomic(args.json, json.dumps({"title": title, "machine": m, "settings": settings, "utterances":
                                                 len(lengths), "frames": frames, "reference_words": len(ref_words),
                                                 "oov_words": oov, "rows": rows}, indent=2))
    print(format_table(rows, title))
    if oov:
        print(f"\n{oov} of the references' {len(ref_words)} words ({100 * oov / len(ref_words):.2f}%) are not in the "
              f"graph's vocabulary: every decoder gets them wrong")
    by = {r["decoder"]: r for r in rows if "skipped" not in r}
    if "cpu1" in by and "kaldi" in by:
        print(f"\nours CPU 1 thread / Kaldi FasterDecoder: {by['cpu1']['rtfx'] / by['kaldi']['rtfx']:.2f}x RTFx")
    if "cuda" in by and "kaldi" in by:
        print(f"ours CUDA / Kaldi FasterDecoder: {by['cuda']['rtfx'] / by['kaldi']['rtfx']:.1f}x RTFx")
    return 0


if __name__ == "__main__":
    sys.exit(main())
