"""Child process of wfst_bench.peers.PyctcdecodeDecoder, run by the Python of pyctcdecode's own venv.

    python pyctcdecode_worker.py job.json

Imports only the standard library, NumPy and pyctcdecode (never `wfst` or `wfst_bench`: the
venv has numpy<2 and neither package).  The job names an ``.npz`` with ``frames`` (every
utterance's frames one after another, (ΣT, V) log-probabilities) and ``lengths``,
pyctcdecode's labels, the ARPA file, a unigram file and the settings; the result (JSON)
holds one hypothesis per utterance, the decoding seconds (best of ``repeat`` passes,
``decode()`` calls only) and the peak memory above what the process held before the LM
was loaded.
"""
import json
import logging
import sys
import time


def _rss(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def main(job_path):
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    from importlib import metadata

    versions = {p: metadata.version(p) for p in ("pyctcdecode", "kenlm", "numpy")}
    if job.get("version_only"):
        result = {"versions": versions}
    else:
        import numpy as np

        logging.getLogger("pyctcdecode").setLevel(logging.ERROR)
        with np.load(job["emissions"]) as z:
            frames, lengths = z["frames"], z["lengths"]
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        with open(job["unigrams"], encoding="utf-8") as f:
            unigrams = [w.strip() for w in f if w.strip()]
        s = job["settings"]
        start_rss = _rss("VmRSS:")
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        from pyctcdecode import build_ctcdecoder

        decoder = build_ctcdecoder(job["labels"], job["arpa"], unigrams=unigrams, alpha=float(s["alpha"]),
                                   beta=float(s["beta"]), unk_score_offset=float(s["unk_score_offset"]))
        best = None
        for _ in range(max(1, int(job.get("repeat", 1)))):
            hyps, seconds = [], 0.0
            for b in range(len(lengths)):
                x = frames[starts[b]:starts[b] + int(lengths[b])]
                t0 = time.perf_counter()
                text = decoder.decode(x, beam_width=int(s["beam_width"]), beam_prune_logp=float(s["beam_prune_logp"]),
                                      token_min_logp=float(s["token_min_logp"])) if len(x) else ""
                seconds += time.perf_counter() - t0
                hyps.append(text)
            best = seconds if best is None else min(best, seconds)
        peak = _rss("VmHWM:")
        result = {"versions": versions, "hyps": hyps, "seconds": best,
                  "peak_mb": None if peak is None or start_rss is None else max(peak - start_rss, 0.0)}
    with open(job["output"], "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
