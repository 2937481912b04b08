#!/usr/bin/env python3
"""make bench-stream: many live streams decoded chunk by chunk, against offline decoding.

For each number of concurrent streams N and chunk length, U = max(N, --utterances)
utterances (64 by default) are decoded as N live streams, as a server keeps them: each
Decoder.advance() call advances every live stream by one chunk; a stream whose audio
ended is finished, and the next utterance's stream joins the next call (--rounds: N
streams start together and the next N once all of them ended).  Opening, advancing and
finishing the streams are timed.  The same U utterances are also decoded offline
(Decoder.decode, batches of N) on the same threads.  Where U = N the streams are one
wave: all open in the first call, and the last calls advance the few longest alone.
Reported: aggregate RTFx of each (the best of --repeat runs, streams and offline taking
turns), the streams' share of the offline throughput, and the latency of one advance()
call (all N streams, one chunk each): p50 / p95 / p99 of the best run.  Each cell
runs both once untimed first, as a server's decoder is warm (a fresh decoder's first 128
streams map their arrays' pages: ~20,000 page faults, ~10% of a run).  Results
of the streams are checked against the offline ones (the same words on every utterance).

Emissions are SYNTHETIC (wfst.synthetic), several seeds where more utterances are
needed; 40 ms a frame.  The setups (--setups):
- char: the demo's character graph, the demo's held-out sentences, demo profile;
- bpe: its BPE graph on the noisy profile (the harder one);
- rescored: the character graph built on a bigram cut from the demo 3-gram, rescored on the
  fly with the 3-gram (as in make bench-rescore; built once into --out);
- large: make bench-rescore's large setup (a BPE graph on a pruned 3-gram of a generated
  12,600-word LM, rescored with its unpruned 4-gram; its 300 test sentences, noisy; beam 17,
  max_active 10000), made once into --large where missing: where users live.
The demo setups decode at beam 16, max_active 7000.  --partials follows each call with
the partial results of its streams (Decoder.partials: a live captioning server's loop),
timed with the call.  --batched gives each call its chunks as one (N, T, V) array and their
lengths, as a batched acoustic model gives them.  --lattice-beam keeps each stream's word
lattice (and each offline decode's), as a server that gives N-best lists or confidences does.
--device cuda runs them on the GPU
(the goal there: 512 streams at 320 ms chunks within 40 ms per call).

--silence MINUTES instead times one stream of the first setup through a sentence, then
MINUTES of blank-dominated noise (where its paths never meet, so it commits nothing) in
chunks of the first --chunk-ms: the time of an advance() alone and of one followed by a
partial(), every 8,000 frames, the backpointers the stream holds and the log-probs it keeps.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import recipe_cli
from demo_data import LM, PROFILES, TOKEN_SETS, emission_options, sentences
from tqdm import tqdm
from wfst.graphs import compile_graph
from wfst_bench.machine import machine

import wfst
from wfst import synthetic
from wfst.lm import truncate_arpa
from wfst.scoring import FRAME_SECONDS, rtfx

SETUPS = ("char", "bpe", "rescored", "large")
DEMO_SEARCH = dict(beam=16.0, max_active=7000)


def load(setup: str, args):
    """A setup: (its label, graph, texts, token set, emission profile, rescoring LM or None,
    beam and max_active)."""
    if setup in ("char", "bpe"):
        name = f"{setup}_compact"
        return name, wfst.load_graph(Path(args.graphs) / name), sentences("test"), setup, \
            "demo" if setup == "char" else "noisy", None, DEMO_SEARCH
    if setup == "rescored":  # the character graph on the demo LM's bigram (built once)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        bigram = truncate_arpa(LM, out / "lm_2gram.arpa", 2)
        g = wfst.load_graph(compile_graph(out / "char_compact_2gram", lm=bigram, topology="compact",
                                          cache_dir=out / ".cache", **TOKEN_SETS["char"]).directory)
        return "char_compact_2gram + 3-gram", g, sentences("test"), "char", "demo", LM, DEMO_SEARCH
    from bench_rescore import LARGE, large_setup  # (made once, where make bench-rescore makes it)

    (g,), big_lm, texts = large_setup(Path(args.large), graphs=("small",))
    return "large: bpe_compact_small + 4-gram", g, texts, "bpe", "noisy", big_lm, LARGE


def model_batch(chunks: list, step: int):
    """The call's chunks as a batched acoustic model gives them: one (N, step, V) array and
    the frames of each (None: all step)."""
    frames = list(map(len, chunks))
    if min(frames) == step:
        return np.stack(chunks), None
    batch = np.zeros((len(chunks), step, chunks[0].shape[1]), np.float32)
    for k, chunk in enumerate(chunks):
        batch[k, :len(chunk)] = chunk
    return batch, np.array(frames)


def stream_loop(dec, x, lengths, n: int, step: int, partials: bool = False, rounds: bool = False,
                batched: bool = False):
    """Decode all utterances as n concurrent streams, one Decoder.advance() call per chunk
    of every live stream; (results, seconds in stream/advance/partials/finish, latency of
    each advance call).  As a server does, a stream whose audio ended is finished after the
    call and the next utterance's stream joins the next one, so that n streams stay live
    until the utterances run out.  rounds: n streams start together, and the next n only
    once all of them ended (each round's last calls advance fewer streams than there are
    threads).  partials: each call is followed by the partial results of its streams
    (Decoder.partials), timed with it (a live captioning server's loop).  The utterances
    are cut into their chunks before the clock starts, as a server receives them: the
    loop's own work is a server's (streams in and out, each call's next chunks).  batched: each
    call's chunks come as one (N, T, V) array with their lengths, as a batched acoustic model
    gives them (made off the clock: the model's work)."""
    cut = [[x[u, i:min(i + step, T)] for i in range(0, T, step)] or [x[u, :0]] for u, T in enumerate(map(int, lengths))]
    results, seconds, latencies = [None] * len(cut), 0.0, []
    live, nxt, calls = [], 0, 0  # live: (utterance, its stream, its chunks to come)
    ending = {}  # call -> the live streams fed their last chunk in it
    streams = feeds = None  # of the live streams, made again when they change
    while live or nxt < len(cut):
        start = time.perf_counter()
        if not (rounds and live) and len(live) < n and nxt < len(cut):
            while len(live) < n and nxt < len(cut):
                item = (nxt, dec.stream(), iter(cut[nxt]))
                live.append(item)
                ending.setdefault(calls + len(cut[nxt]) - 1, []).append(item)
                nxt += 1
            streams = None
        if streams is None:
            streams, feeds = [s for _, s, _ in live], [chunks for _, _, chunks in live]
        chunks, frames = list(map(next, feeds)), None
        if batched:
            pause = time.perf_counter()
            chunks, frames = model_batch(chunks, step)
            start += time.perf_counter() - pause
        call = time.perf_counter()
        dec.advance(streams, chunks, frames)
        if partials:
            dec.partials(streams)
        latencies.append(time.perf_counter() - call)
        ended = ending.pop(calls, None)
        calls += 1
        if ended:
            for (u, _, _), r in zip(ended, dec.finish([s for _, s, _ in ended])):
                results[u] = r
            gone = {u for u, _, _ in ended}
            live, streams = [item for item in live if item[0] not in gone], None
        seconds += time.perf_counter() - start
    return results, seconds, latencies


def offline(dec, x, lengths, n: int):
    results, seconds = [], 0.0
    for lo in range(0, len(lengths), n):
        start = time.perf_counter()
        results += dec.decode(x[lo:lo + n], lengths[lo:lo + n])
        seconds += time.perf_counter() - start
    return results, seconds


def silence(args, step: int) -> None:
    """--silence: one stream through a sentence then args.silence minutes of blank-dominated
    noise, in chunks of `step` frames, advanced alone and with a partial() after each."""
    label, g, texts, token_set, profile, rescore_lm, search = load(args.setups[0], args)
    x, lengths = synthetic.from_texts(texts[:1], g.tokens, **emission_options(token_set), **PROFILES[profile])
    rng = np.random.default_rng(0)
    quiet = rng.normal(0.0, 1.0, (int(args.silence * 60 / FRAME_SECONDS), g.tokens.num_columns)).astype(np.float32)
    quiet[:, g.tokens.blank] += 14.0
    quiet -= np.logaddexp.reduce(quiet, axis=1, keepdims=True)
    frames = np.concatenate([x[0, :lengths[0]], quiet])
    every = 8000
    print(f"{label}, {profile} sentence then {args.silence:g} min of noise, chunks of {step} frames\n")
    print("| frames | advance() ms | advance() + partial() ms | backpointers held | log-probs kept |")
    print("|---:|---:|---:|---:|---:|")
    dec = wfst.Decoder(g, **search, num_threads=args.threads, device=args.device, rescore_lm=rescore_lm)
    alone, asked = dec.stream(), dec.stream()
    times = {alone: [], asked: []}
    for t in tqdm(range(0, len(frames), step), desc="silence", unit="chunk", file=sys.stderr):
        for s in (alone, asked):
            start = time.perf_counter()
            dec.advance([s], [frames[t:t + step]])
            if s is asked:
                s.partial()
            times[s].append(time.perf_counter() - start)
        if (t + step) // every > t // every:
            last = every // step
            st = alone._state
            reads = st.kept_reads()  # rows from rows_from on; the blank's column and a read a backpointer before
            kept = 4 * ((st.frames - reads.rows_from) * g.tokens.num_columns + reads.rows_from - st.base
                        + min(len(reads.reads), st.stored))
            print(f"| {t + step:,} | {1000 * np.mean(times[alone][-last:]):.2f} | "
                  f"{1000 * np.mean(times[asked][-last:]):.2f} | {alone._state.stored:,} | {kept / 2**20:.1f} MiB |",
                  flush=True)
    dec.finish([alone, asked])


def main() -> int:
    ap = recipe_cli.parser(__doc__)
    ap.add_argument("--graphs", default="build/demo", help="where make demo put the graphs")
    ap.add_argument("--out", default="build/stream", help="where the rescored setup's graph is built")
    ap.add_argument("--large", default="build/rescore/large", help="where the large setup is (made there if not)")
    ap.add_argument("--setups", type=recipe_cli.listed(SETUPS), default=",".join(SETUPS),
                    help=f"the setups to run, comma-separated: {', '.join(SETUPS)}")
    ap.add_argument("--streams", type=recipe_cli.listed(item=recipe_cli.whole()), default="1,16,128,512",
                    help="numbers of concurrent streams")
    ap.add_argument("--chunk-ms", type=recipe_cli.listed(item=recipe_cli.positive), default="160,320,1000",
                    help="chunk lengths (each fed as the nearest whole number of 40 ms frames, at least one)")
    ap.add_argument("--utterances", type=recipe_cli.whole(), default=64,
                    help="utterances per cell, at least N (default: %(default)s); several times N keeps N streams live "
                         "for most of the run, a server's steady state, where N utterances are one wave that drains")
    ap.add_argument("--threads", type=recipe_cli.whole(), default=None, help="CPU threads (default: all cores)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--repeat", type=recipe_cli.whole(), default=2, help="best of this many runs per cell")
    ap.add_argument("--partials", action="store_true",
                    help="follow each advance() call with the partial results of its streams, timed with it")
    ap.add_argument("--rounds", action="store_true",
                    help="open the streams in rounds of N (the next N once all N ended) instead of keeping N live")
    ap.add_argument("--batched", action="store_true",
                    help="give each advance() call its chunks as one (N, T, V) array and their lengths, as a batched "
                         "acoustic model gives them (default: a list of (T_i, V) arrays)")
    ap.add_argument("--lattice-beam", type=recipe_cli.positive, default=None,
                    help="keep word lattices within this beam, streamed and offline (default: none)")
    ap.add_argument("--silence", type=recipe_cli.positive, default=None, metavar="MINUTES",
                    help="time one stream through this many minutes of silence instead (see above)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    recipe_cli.check_json(ap, args.json)
    recipe_cli.check_folder(ap, "--out", args.out)
    counts, chunks_ms = args.streams, args.chunk_ms
    steps = [max(1, int(ms / 1000 / FRAME_SECONDS + 0.5)) for ms in chunks_ms]  # each chunk fed, in whole frames
    for i, step in enumerate(steps):
        if step in steps[:i]:  # (the same cell twice, both labelled with the frames' ms)
            ap.error(f"argument --chunk-ms: {chunks_ms[steps.index(step)]:g} and {chunks_ms[i]:g} are both fed as "
                     f"{step} frames of {1000 * FRAME_SECONDS:g} ms")
    # (the graphs last, so that a bad option is named on a checkout without them)
    recipe_cli.check_graphs(ap, args.graphs, [f"{s}_compact" for s in args.setups if s in ("char", "bpe")])
    feed = args.partials, args.rounds, args.batched  # how stream_loop runs
    m = machine()
    where = (f"CPU backend, {args.threads or 'all'} threads; {m['cpu']}" if args.device == "cpu" else
             f"CUDA backend; {m.get('gpu') or 'GPU'}")
    print(f"Streams on SYNTHETIC emissions; {where}\n")
    if args.silence:
        silence(args, steps[0])
        return 0
    rows = []
    for setup in args.setups:
        label, g, texts, token_set, profile, rescore_lm, search = load(setup, args)
        need = max(max(counts), args.utterances)
        seeds = -(-need // len(texts))
        x_all, lengths_all = synthetic.from_texts_seeds(texts, g.tokens, seeds, **emission_options(token_set),
                                                        **PROFILES[profile])
        dec = wfst.Decoder(g, **search, num_threads=args.threads, device=args.device, rescore_lm=rescore_lm,
                           lattice_beam=args.lattice_beam)
        dec.decode(x_all[:2], lengths_all[:2])  # compile
        stream_loop(dec, x_all[:2], lengths_all[:2], 2, 8, batched=args.batched)
        for n in tqdm(counts, desc=f"{setup} ({profile})", unit="N", file=sys.stderr):
            U = max(n, args.utterances)
            x, lengths = x_all[:U], lengths_all[:U]
            audio = int(lengths.sum())
            for step in steps:
                chunk_ms = step * FRAME_SECONDS * 1000
                off_seconds = seconds = np.inf
                offline(dec, x, lengths, n)  # untimed: a server's decoder is warm (its streams' arrays
                stream_loop(dec, x, lengths, n, step, *feed)  # made, its pages mapped)
                for _ in range(args.repeat):
                    want, took = offline(dec, x, lengths, n)
                    off_seconds = min(off_seconds, took)
                    found, took, latencies = stream_loop(dec, x, lengths, n, step, *feed)
                    if took < seconds:
                        got, seconds, lat = found, took, latencies
                same = sum(a.words == b.words for a, b in zip(got, want))
                p50, p95, p99 = (1000 * float(np.percentile(lat, q)) for q in (50, 95, 99))
                rows.append(dict(graph=label, emissions=profile, streams=n, chunk_ms=chunk_ms, utterances=U,
                                 frames=audio, stream_seconds=seconds, offline_seconds=off_seconds,
                                 stream_rtfx=rtfx(audio, seconds), offline_rtfx=rtfx(audio, off_seconds),
                                 share=off_seconds / seconds, p50_ms=p50, p95_ms=p95, p99_ms=p99,
                                 same_words=same, partials=args.partials, batched=args.batched,
                                 lattice_beam=args.lattice_beam))
    if args.batched:
        print("Each advance() call is given its chunks as one (N, T, V) array and their lengths.\n")
    if args.lattice_beam:
        print(f"Streams and offline decodes keep their word lattices (lattice_beam {args.lattice_beam:g}).\n")
    if args.partials:
        print("Each advance() call is followed by the partial results of its streams (Decoder.partials), "
              "timed with it.\n")
    print("| graph | emissions | streams | chunk | RTFx streams | RTFx offline | streams / offline | "
          "advance() p50 / p95 / p99 ms | same words |")
    print("|---|---|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        print(f"| {r['graph']} | {r['emissions']} | {r['streams']} | {r['chunk_ms']:g} ms | {r['stream_rtfx']:,.0f} | "
              f"{r['offline_rtfx']:,.0f} | {100 * r['share']:.0f}% | {r['p50_ms']:.1f} / {r['p95_ms']:.1f} / "
              f"{r['p99_ms']:.1f} | {r['same_words']}/{r['utterances']} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(dict(machine=m, device=args.device, rows=rows), indent=1))
    bad = [r for r in rows if r["same_words"] != r["utterances"]]
    if bad:
        print(f"\n{len(bad)} rows where streams and offline decoding disagree", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(recipe_cli.run(main))
