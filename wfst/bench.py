"""wfst-bench: decode the same emissions with several decoders and compare WER and speed.

    wfst-bench --graph build/demo/char_compact --texts recipes/demo/data/test.txt \\
               --word-boundary '|' --decoders greedy,cpu1,cpu,kaldi,cuda

Decoders: greedy (best-path CTC, NumPy), cpu1 (our CPU backend, one thread), cpu (all
cores), kaldi (Kaldi's FasterDecoder via kaldi-decoder, one thread, same TLG and beam /
max_active / min_active), cuda (our CUDA backend; skipped with a note where no GPU).
RTFx counts decoding only (emissions already in memory, on the GPU for cuda), at 40 ms
per frame.  Emissions come from --emissions (.npz) or are SYNTHETIC, made from --texts
(wfst.synthetic); the table says which.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from .decoder import Decoder, DecoderConfig
from .errors import WfstError
from .graph import FST_NAME, load_graph
from .memory import reset_peak_rss, rss_mb
from .scoring import FRAME_SECONDS, rtfx, word_errors
from .synthetic import detokenize, from_texts, greedy_ctc, load_npz

DECODERS = ("greedy", "cpu1", "cpu", "kaldi", "cuda")


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "gpu": gpu_name()}


def gpu_name() -> str | None:
    try:
        from numba import config, cuda

        if config.ENABLE_CUDASIM or not cuda.is_available():
            return None
        name = cuda.get_current_device().name
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - no driver or no numba-cuda: no GPU to name
        return None


def run(graph_dir, log_probs, lengths, refs, *, decoders=DECODERS, config: DecoderConfig | None = None,
        batch_size: int = 64, word_boundary: str | None = None, progress: bool = True) -> list[dict]:
    """One row per decoder: WER, RTFx, frames/s, tokens/frame, peak memory (or why it was skipped)."""
    from tqdm import tqdm

    config = config or DecoderConfig()
    graph = load_graph(graph_dir)
    frames = int(np.sum(lengths))
    rows = []
    for name in tqdm(decoders, desc="decoders", disable=not progress, file=sys.stderr):
        row = {"decoder": name}
        reset_peak_rss()
        try:
            hyps, seconds, tokens, peak = _run_one(name, graph, graph_dir, log_probs, lengths, config,
                                                   batch_size, word_boundary)
        except _Skip as e:
            rows.append({**row, "skipped": str(e)})
            continue
        row.update(wer=word_errors(refs, hyps).rate if refs is not None else None, seconds=seconds,
                   rtfx=rtfx(frames, seconds), frames_per_second=frames / seconds, tokens_per_frame=tokens,
                   peak_mb=peak)
        rows.append(row)
    return rows


class _Skip(Exception):
    pass


def _run_one(name, graph, graph_dir, log_probs, lengths, config, batch_size, word_boundary):
    B = len(lengths)
    if name == "greedy":
        start = time.perf_counter()
        seqs = greedy_ctc(log_probs, lengths, graph.tokens.blank)
        seconds = time.perf_counter() - start
        hyps = [detokenize(s, graph.tokens, word_boundary=word_boundary).split() for s in seqs]
        return hyps, seconds, None, rss_mb("VmHWM:")
    if name == "kaldi":
        from .kaldi_reference import KaldiFasterDecoder

        try:
            kd = KaldiFasterDecoder(Path(graph_dir) / FST_NAME, beam=config.beam, max_active=config.max_active,
                                    min_active=config.min_active, beam_delta=config.beam_delta,
                                    acoustic_scale=config.acoustic_scale, blank_penalty=config.blank_penalty,
                                    blank_column=graph.tokens.blank)
        except WfstError as e:
            raise _Skip(str(e)) from None
        out = kd.decode(log_probs, lengths)
        words = graph.words
        hyps = [[words[w] for w in r.word_ids] for r in out]
        return hyps, kd.seconds, None, rss_mb("VmHWM:")
    if name in ("cpu", "cpu1"):
        dec = Decoder(graph, config, device="cpu", num_threads=1 if name == "cpu1" else None)
        dec.decode(log_probs[:1], lengths[:1])  # compile outside the timing
        data = [(np.ascontiguousarray(log_probs[lo:lo + batch_size]), lengths[lo:lo + batch_size])
                for lo in range(0, B, batch_size)]
    elif name == "cuda":
        try:
            dec = Decoder(graph, config, device="cuda")
            import cupy
        except (WfstError, ImportError) as e:
            raise _Skip("no CUDA GPU on this machine" if isinstance(e, WfstError) else f"{e}") from None
        dec.decode(cupy.asarray(log_probs[:1]), lengths[:1])
        data = [(cupy.asarray(log_probs[lo:lo + batch_size]), lengths[lo:lo + batch_size])
                for lo in range(0, B, batch_size)]
        cupy.cuda.Device().synchronize()
    else:
        raise ValueError(f"unknown decoder {name!r}; choose from {', '.join(DECODERS)}")
    results, seconds, token_frames = [], 0.0, 0.0
    for x, n in data:
        start = time.perf_counter()
        results += dec.decode(x, n)
        seconds += time.perf_counter() - start
        token_frames += dec.stats.tokens_per_frame * dec.stats.frames
    peak = rss_mb("VmHWM:")
    if name == "cuda":
        import cupy

        peak = cupy.get_default_memory_pool().total_bytes() / 2**20
    return [r.words for r in results], seconds, token_frames / max(int(np.sum(lengths)), 1), peak


def format_table(rows: list[dict], title: str) -> str:
    lines = [title, "", "| decoder | WER % | RTFx | frames/s | tokens/frame | peak memory MB |",
             "|---|---:|---:|---:|---:|---:|"]
    names = {"greedy": "greedy CTC", "cpu1": "ours, CPU, 1 thread", "cpu": f"ours, CPU, {os.cpu_count()} threads",
             "kaldi": "Kaldi FasterDecoder (1 thread)", "cuda": "ours, CUDA"}
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {names.get(r['decoder'], r['decoder'])} | not measured: {r['skipped']} | | | | |")
            continue
        wer = f"{100 * r['wer']:.2f}" if r["wer"] is not None else "-"
        tok = f"{r['tokens_per_frame']:.0f}" if r["tokens_per_frame"] is not None else "-"
        peak = f"{r['peak_mb']:.0f}" if r["peak_mb"] is not None else "-"
        lines.append(f"| {names.get(r['decoder'], r['decoder'])} | {wer} | {r['rtfx']:.0f} | "
                     f"{r['frames_per_second']:.0f} | {tok} | {peak} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    d = DecoderConfig()
    ap = argparse.ArgumentParser(prog="wfst-bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--emissions", help=".npz with log_probs, lengths (and texts as references)")
    src.add_argument("--texts", help="make SYNTHETIC emissions of these sentences (one per line)")
    ap.add_argument("--spm", help="sentencepiece model of a BPE graph (with --texts)")
    ap.add_argument("--word-boundary", help="word-boundary token of a character graph, e.g. '|'")
    ap.add_argument("--seeds", type=int, default=1, help="synthetic copies of each sentence (seeds 0..N-1)")
    ap.add_argument("--decoders", default=",".join(DECODERS))
    ap.add_argument("--beam", type=float, default=d.beam)
    ap.add_argument("--max-active", type=int, default=d.max_active)
    ap.add_argument("--min-active", type=int, default=d.min_active)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--json", help="write the rows and settings here")
    args = ap.parse_args(argv)
    try:
        graph = load_graph(args.graph)
        if args.emissions:
            em = load_npz(args.emissions)
            log_probs, lengths, refs, synthetic = em.log_probs, em.lengths, em.texts, em.synthetic
        else:
            texts = [t for t in Path(args.texts).read_text(encoding="utf-8").splitlines() if t.strip()]
            parts = [from_texts(texts, graph.tokens, spm=args.spm, word_boundary=args.word_boundary, seed=s)
                     for s in range(args.seeds)]
            T = max(p[0].shape[1] for p in parts)
            log_probs = np.concatenate([np.pad(x, ((0, 0), (0, T - x.shape[1]), (0, 0)), constant_values=0.0)
                                        for x, _ in parts])
            lengths = np.concatenate([n for _, n in parts])
            refs, synthetic = texts * args.seeds, True
        config = DecoderConfig(beam=args.beam, max_active=args.max_active, min_active=args.min_active)
        rows = run(args.graph, log_probs, lengths, refs, decoders=args.decoders.split(","), config=config,
                   batch_size=args.batch_size, word_boundary=args.word_boundary)
    except WfstError as e:
        print(f"wfst-bench: error: {e}", file=sys.stderr)
        return 2
    frames = int(np.sum(lengths))
    m = machine()
    title = (f"{args.graph}: {len(lengths)} utterances, {frames} frames = {frames * FRAME_SECONDS / 3600:.2f} h "
             f"at 40 ms/frame{' of SYNTHETIC emissions' if synthetic else ''}; beam {args.beam}, max_active "
             f"{args.max_active}, min_active {args.min_active}, batch {args.batch_size}; {m['cpu']}, "
             f"{m['cores']} cores" + (f", {m['gpu']}" if m["gpu"] else ", no GPU"))
    print(format_table(rows, title))
    by = {r["decoder"]: r for r in rows if "skipped" not in r}
    if "cpu1" in by and "kaldi" in by:
        print(f"\nours CPU 1 thread / Kaldi FasterDecoder: {by['cpu1']['rtfx'] / by['kaldi']['rtfx']:.2f}x RTFx")
    if "cuda" in by and "kaldi" in by:
        print(f"ours CUDA / Kaldi FasterDecoder: {by['cuda']['rtfx'] / by['kaldi']['rtfx']:.1f}x RTFx")
    if args.json:
        Path(args.json).write_text(json.dumps({"title": title, "machine": m, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
