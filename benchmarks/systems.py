"""The decoders, one adapter each, as ``wfst-bench`` and the comparison experiments run them.

A :class:`System` is one decoder with its settings: :meth:`System.setup` loads what it needs
for a graph (a :class:`Target`) or raises :class:`PeerUnavailable` saying why it cannot run
here; :meth:`System.decode` decodes an :class:`EmissionSet` with a dict of settings and
returns a :class:`DecodeRun` (words, decoding seconds, tokens per frame, peak memory).

* :class:`GreedySystem` — best-path CTC, no LM.
* :class:`OursSystem` — our decoder: CPU with N threads (``threads=None``: all cores) or CUDA.
* :class:`KaldiSystem` — Kaldi's FasterDecoder (:mod:`wfst_bench.kaldi`) on the same TLG.
* :class:`FlashlightSystem`, :class:`PyctcdecodeSystem` — the peers of :mod:`wfst_bench.peers`.

``timed=True`` is a measured cell: the graph or LM is loaded inside the memory measurement,
the kernels are compiled outside the timing, the seconds are the best of `repeat` passes
of the decode calls only.  ``timed=False`` (tuning on dev) needs only the words: loaded
data is reused and our CPU decoder uses every core.

The tuning side (a grid of LM weight and insertion values, the tuning setting, the test
settings) is used by :func:`wfst_bench.compare.run_experiment`; ``wfst-bench`` runs each
system once at its one setting.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import wfst
from wfst.config import usable_cores
from wfst.files import sha256_file
from wfst.memory import PeakMemory, rss_mb
from wfst.synthetic import detokenize, greedy_ctc

from .machine import gpu_name, versions
from .peers import (
    PYCTCDECODE_VENV,
    DecodeRun,
    FlashlightDecoder,
    FlashlightLexiconFree,
    FlashlightSettings,
    PeerUnavailable,
    PyctcdecodeDecoder,
    PyctcdecodeSettings,
    graph_lexicon,
    pyctcdecode_labels,
    pyctcdecode_python,
    save_frames_npz,
)

FST_NAME = "TLG.fst"  # a graph directory's OpenFST graph


# --------------------------------------------------------------------------- inputs

@dataclasses.dataclass(frozen=True)
class Target:
    """A graph to decode with, and how its token set spells text."""

    name: str  # e.g. "char_compact"
    graph_dir: Path
    token_set: str = ""  # "char" or "bpe"
    topology: str = ""
    arpa: Path | None = None  # the LM the graph was built from (peers read it directly)
    spm: Path | None = None
    word_boundary: str | None = None
    token_lm: Path | None = None  # a token-level ARPA of the same text, for the lexicon-free decoders


@dataclasses.dataclass(eq=False)
class EmissionSet:
    """Emissions of one split's sentences (SYNTHETIC in the experiments) for one token set and profile."""

    split: str
    profile: str
    texts: list[str]
    log_probs: np.ndarray
    lengths: np.ndarray
    digest: str
    in_vocabulary: np.ndarray | None = None  # per utterance: every word is in the graph's vocabulary
    npz: Path | None = None

    @classmethod
    def of(cls, split: str, profile: str, texts: Sequence[str], log_probs: np.ndarray, lengths: np.ndarray,
           in_vocabulary: np.ndarray | None = None) -> EmissionSet:
        """An emission set with its digest (of the log-probabilities and lengths)."""
        h = hashlib.sha256()
        h.update(np.ascontiguousarray(log_probs))  # the arrays' bytes, without a copy
        h.update(np.ascontiguousarray(lengths))
        return cls(split, profile, list(texts), log_probs, lengths, h.hexdigest()[:20], in_vocabulary)

    @property
    def frames(self) -> int:
        return int(np.sum(self.lengths))


def write_emissions_npz(em: EmissionSet, folder: Path) -> Path:
    """The emissions as an .npz for a decoder in another process (:func:`wfst_bench.peers.save_frames_npz`),
    written once."""
    path = Path(folder) / f"{em.split}_{em.profile}_{em.digest}.npz"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        save_frames_npz(path, em.log_probs, em.lengths)
    em.npz = path
    return path


class _Peak(PeakMemory):
    """PeakMemory (peak above the start, ``mb``) that also keeps the process's whole peak (``process_mb``)."""

    def __exit__(self, *exc):
        self.process_mb = rss_mb("VmHWM:")
        return super().__exit__(*exc)


# --------------------------------------------------------------------------- systems

class System:
    """A decoder with a tuning grid (dev), a tuning setting and test settings.

    Subclasses implement :meth:`setup` (may raise :class:`PeerUnavailable`) and
    :meth:`decode`.  `tuned_like` names another system whose tuned values this one
    reuses (the same decoder with more threads, say) instead of tuning again."""

    family = ""

    def __init__(self, key: str, label: str, *, grid: dict[str, Sequence] | None = None,
                 grid_kind: dict[str, str] | None = None, max_extend: int = 3,
                 tune_point: dict | None = None, points: Sequence[dict] = ({},), tuned_like: str | None = None,
                 fixed: dict | None = None):
        self.key, self.label = key, label
        self.grid = dict(grid or {})
        # How a grid dimension grows when the best value is on its edge: "geometric" (weights,
        # scales) or "arithmetic" (insertion scores); at most `max_extend` steps a side.
        self.grid_kind = dict(grid_kind or {})
        self.max_extend = max_extend
        self.tune_point = dict(tune_point or (points[0] if points else {}))
        self.points = [dict(p) for p in points]
        self.tuned_like = tuned_like
        self.fixed = dict(fixed or {})

    def grid_points(self, grid: dict[str, Sequence] | None = None) -> list[dict]:
        grid = self.grid if grid is None else grid
        names = list(grid)
        combos = [{}]
        for n in names:
            combos = [{**c, n: v} for c in combos for v in grid[n]]
        return combos if names else []

    def setup(self, target: Target, workdir: Path | None) -> None:
        """Load what the system needs for `target`; raise PeerUnavailable if it cannot run.
        `workdir`: a scratch folder it may write files in, removed after the run (None: a
        temporary folder of its own)."""

    def identity(self) -> dict:
        """What, besides the settings, decides this system's output (versions)."""
        return {"family": self.family, "fixed": self.fixed}

    def decode(self, em: EmissionSet, params: dict, *, timed: bool, repeat: int = 1) -> DecodeRun:
        raise NotImplementedError

    def teardown(self) -> None:
        pass


class GreedySystem(System):
    """Best-path CTC: per-frame argmax, repeats merged, blanks dropped (no LM)."""

    family = "greedy"

    def setup(self, target, workdir):
        self.tokens = wfst.load_graph(target.graph_dir).tokens
        self.word_boundary = target.word_boundary

    def decode(self, em, params, *, timed, repeat=1):
        best = None
        with _Peak() as mem:
            for _ in range(max(1, repeat)):
                start = time.perf_counter()
                seqs = greedy_ctc(em.log_probs, em.lengths, self.tokens.blank)
                seconds = time.perf_counter() - start
                best = seconds if best is None else min(best, seconds)
        hyps = [detokenize(s, self.tokens, word_boundary=self.word_boundary).split() for s in seqs]
        return DecodeRun(hyps, best, None, mem.mb, mem.process_mb)


# Our decoder's settings that a system's fixed values and parameters may set.
_DECODER_OPTIONS = ("beam", "max_active", "min_active", "beam_delta", "acoustic_scale", "blank_penalty",
                    "token_top_n", "token_rel_threshold")


class OursSystem(System):
    """Our decoder, CPU (``threads`` threads; None: all cores) or CUDA, in batches of `batch_size`."""

    family = "ours"

    def __init__(self, key, label, *, device: str = "cpu", threads: int | None = 1, batch_size: int = 64, **kw):
        super().__init__(key, label, **kw)
        self.device, self.threads, self.batch_size = device, threads, batch_size
        # the thread count used, not None: a cell of all cores is measured again on a machine (or
        # under a taskset) of another count, not reused under its label
        self.fixed.update(device=device, batch_size=batch_size,
                          **({"threads": threads or usable_cores()} if device == "cpu" else {}))

    def setup(self, target, workdir):
        if self.device == "cuda":
            self.gpu = gpu_name()
            if self.gpu is None:
                raise PeerUnavailable("no GPU on this machine")
            try:
                import cupy  # noqa: F401
            except ImportError as e:
                raise PeerUnavailable(f"CuPy is not installed (pip install '.[cuda]'): {e}") from None
        self.graph_dir = target.graph_dir
        self.fixed["graph"] = wfst.load_graph(target.graph_dir).info.get("fingerprint")
        self.graph = None  # loaded by the first untimed cell and kept; timed cells load their own

    def identity(self):
        return {**super().identity(), **versions("wfst-ctc", "numba")}

    def _decoder(self, graph, params, threads):
        opts = {k: v for k, v in {**self.fixed, **params}.items() if k in _DECODER_OPTIONS}
        if self.device == "cpu":
            opts["num_threads"] = threads
        return wfst.Decoder(graph, device=self.device, **opts)

    def decode(self, em, params, *, timed, repeat=1):
        x, n = em.log_probs, em.lengths
        chunks = [(lo, min(lo + self.batch_size, len(n))) for lo in range(0, len(n), self.batch_size)]
        if self.device == "cuda":
            import cupy

            batches = [(cupy.asarray(x[lo:hi]), n[lo:hi]) for lo, hi in chunks]
            cupy.cuda.Device().synchronize()
        else:
            batches = [(np.ascontiguousarray(x[lo:hi]), n[lo:hi]) for lo, hi in chunks]
        # Timed cells load the graph inside the memory measurement, so that it counts.
        with _Peak() as mem:
            if timed:
                graph = wfst.load_graph(self.graph_dir)
            else:
                if self.graph is None:
                    self.graph = wfst.load_graph(self.graph_dir)
                graph = self.graph
            # Untimed (tuning) cells only need the words: they use every core.
            dec = self._decoder(graph, params, self.threads if timed else None)
            dec.decode(batches[0][0][:1], batches[0][1][:1])  # compile / warm up outside the timing
            best = None
            for _ in range(max(1, repeat)):
                results, seconds, token_frames = [], 0.0, 0.0
                for xb, nb in batches:
                    results += dec.decode(xb, nb)
                    seconds += dec.stats.seconds
                    token_frames += dec.stats.tokens_per_frame * dec.stats.frames
                best = seconds if best is None else min(best, seconds)
            del dec, graph
        peak = mem.mb
        if self.device == "cuda":
            import cupy

            peak = cupy.get_default_memory_pool().total_bytes() / 2**20
        return DecodeRun([list(r.words) for r in results], best, token_frames / max(em.frames, 1), peak,
                         mem.process_mb)

    def teardown(self):
        self.graph = None


class KaldiSystem(System):
    """Kaldi's FasterDecoder (``kaldi-decoder``) on the same TLG, one utterance at a time.
    Settings it is not given are our decoder's defaults (:class:`wfst.DecoderConfig`)."""

    family = "kaldi"

    def setup(self, target, workdir):
        try:
            import kaldi_decoder  # noqa: F401
            import kaldifst  # noqa: F401
        except ImportError as e:
            raise PeerUnavailable(f"kaldi-decoder is not installed (pip install kaldi-decoder kaldifst): {e}") from None
        g = wfst.load_graph(target.graph_dir)
        self.words, self.blank = g.words, g.tokens.blank
        self.fst = Path(target.graph_dir) / FST_NAME
        self.fixed["graph"] = g.info.get("fingerprint")
        self._cache = {}

    def identity(self):
        return {**super().identity(), **versions("kaldi-decoder", "kaldifst")}

    def _make(self, p):
        from .kaldi import KaldiFasterDecoder

        return KaldiFasterDecoder(self.fst, beam=p["beam"], max_active=p["max_active"], min_active=p["min_active"],
                                  beam_delta=p["beam_delta"], acoustic_scale=p["acoustic_scale"],
                                  blank_penalty=p["blank_penalty"], blank_column=self.blank)

    def decode(self, em, params, *, timed, repeat=1):
        d = wfst.DecoderConfig()
        p = {**{k: getattr(d, k) for k in ("beam", "max_active", "min_active", "beam_delta", "acoustic_scale",
                                           "blank_penalty")}, **self.fixed, **params}
        with _Peak() as mem:
            if timed:
                kd = self._make(p)
            else:  # tuning: keep the FST loaded per beam setting, change the scales
                k = (p["beam"], p["max_active"], p["min_active"], p["beam_delta"])
                kd = self._cache.get(k) or self._cache.setdefault(k, self._make(p))
                kd.acoustic_scale, kd.blank_penalty = p["acoustic_scale"], p["blank_penalty"]
            best = None
            for _ in range(max(1, repeat)):
                before = kd.seconds
                out = kd.decode(em.log_probs, em.lengths)
                seconds = kd.seconds - before
                best = seconds if best is None else min(best, seconds)
            del kd
        return DecodeRun([[self.words[w] for w in r.word_ids] for r in out], best, None, mem.mb, mem.process_mb,
                         sum(r.cost == float("inf") and not r.word_ids for r in out))

    def teardown(self):
        self._cache = {}


class FlashlightSystem(System):
    """flashlight-text's LexiconDecoder + KenLM on the ARPA, over the graph's lexicon."""

    family = "flashlight"

    def setup(self, target, workdir):
        try:
            import flashlight.lib.text.decoder  # noqa: F401
        except ImportError as e:
            raise PeerUnavailable(f"flashlight-text is not installed (pip install flashlight-text): {e}") from None
        if target.arpa is None:
            raise PeerUnavailable(f"no ARPA file given for {target.name}")
        g = wfst.load_graph(target.graph_dir)
        self.lexicon = graph_lexicon(g.words.symbols, g.tokens, spm=target.spm, word_boundary=target.word_boundary)
        self.args = (target.arpa, self.lexicon, g.tokens.num_columns, g.tokens.blank,
                     g.tokens.symbols.index(target.word_boundary) if target.word_boundary else None)
        self.fixed["lexicon_words"] = len(self.lexicon)
        self.fixed["lm"] = sha256_file(target.arpa)[:20]
        self.decoder = FlashlightDecoder(*self.args)

    def identity(self):
        return {**super().identity(), **versions("flashlight-text")}

    def decode(self, em, params, *, timed, repeat=1):
        s = FlashlightSettings(**{k: v for k, v in {**self.fixed, **params}.items()
                                  if k in {f.name for f in dataclasses.fields(FlashlightSettings)}})
        with _Peak() as mem:
            dec = FlashlightDecoder(*self.args) if timed else self.decoder
            best = None
            for _ in range(max(1, repeat)):
                run = dec.decode(em.log_probs, em.lengths, s)
                best = run.seconds if best is None else min(best, run.seconds)
            del dec
        return DecodeRun(run.hyps, best, None, mem.mb, mem.process_mb)

    def teardown(self):
        self.decoder = None


class BeamSearchSystem(System):
    """Our lexicon-free CTC beam search (wfst.CtcBeamDecoder) with the target's token LM, on one
    CPU thread or on the GPU (batches of `batch_size`)."""

    family = "ours-beam"

    def __init__(self, key, label, *, device: str = "cpu", batch_size: int = 64, **kw):
        super().__init__(key, label, **kw)
        self.device, self.batch_size = device, batch_size
        self.fixed.update(device=device, **({"batch_size": batch_size} if device == "cuda" else {}))

    def setup(self, target, workdir):
        if self.device == "cuda":
            if gpu_name() is None:
                raise PeerUnavailable("no GPU on this machine")
            try:
                import cupy  # noqa: F401
            except ImportError as e:
                raise PeerUnavailable(f"CuPy is not installed (pip install '.[cuda]'): {e}") from None
        if target.token_lm is None:
            raise PeerUnavailable(f"no token LM given for {target.name}")
        self.tokens = wfst.load_graph(target.graph_dir).tokens
        self.spelling = dict(spm=target.spm, word_boundary=target.word_boundary)
        self.token_lm = target.token_lm
        self.fixed["token_lm"] = sha256_file(target.token_lm)[:20]

    def identity(self):
        return {**super().identity(), **versions("wfst-ctc", "numba")}

    def decode(self, em, params, *, timed, repeat=1):
        p = {**self.fixed, **params}
        x, n = em.log_probs, em.lengths
        step = self.batch_size if self.device == "cuda" else len(n)
        batches = [(x[lo:lo + step], n[lo:lo + step]) for lo in range(0, len(n), max(step, 1))]
        if self.device == "cuda":
            import cupy

            batches = [(cupy.asarray(xb), nb) for xb, nb in batches]
        with _Peak() as mem:
            dec = wfst.CtcBeamDecoder(self.tokens, self.token_lm, beam_size=int(p["beam_size"]),
                                      lm_weight=p["lm_weight"], token_insertion=p["token_insertion"],
                                      beam_threshold=p["beam_threshold"], num_threads=1, device=self.device,
                                      **self.spelling)
            dec.decode(batches[0][0][:1], batches[0][1][:1])  # compile / warm up outside the timing
            best = None
            for _ in range(max(1, repeat)):
                out, seconds = [], 0.0
                for xb, nb in batches:
                    start = time.perf_counter()
                    out += dec.decode(xb, nb)
                    seconds += time.perf_counter() - start
                best = seconds if best is None else min(best, seconds)
        peak = mem.mb
        if self.device == "cuda":
            import cupy

            peak = cupy.get_default_memory_pool().total_bytes() / 2**20
        return DecodeRun([list(r.words) for r in out], best, None, peak, mem.process_mb)


class FlashlightLexiconFreeSystem(System):
    """flashlight-text's LexiconFreeDecoder + KenLM on the target's token LM; its silence is
    the word boundary (characters, whose sil_score it tunes) or the blank (BPE)."""

    family = "flashlight-lexicon-free"

    def setup(self, target, workdir):
        if target.token_lm is None:
            raise PeerUnavailable(f"no token LM given for {target.name}")
        tokens = wfst.load_graph(target.graph_dir).tokens
        self.word_boundary = target.word_boundary
        silence = tokens.symbols.index(target.word_boundary) if target.word_boundary else None
        self.fixed["token_lm"] = sha256_file(target.token_lm)[:20]
        self.args = (target.token_lm, tokens, silence)
        self.decoder = FlashlightLexiconFree(*self.args)  # for the untimed (tuning) cells; timed cells load their own

    def identity(self):
        return {**super().identity(), **versions("flashlight-text")}

    def decode(self, em, params, *, timed, repeat=1):
        p = {**self.fixed, **params}
        with _Peak() as mem:  # (a timed cell's LM loaded inside, so that it counts, as the others')
            decoder = FlashlightLexiconFree(*self.args) if timed else self.decoder
            best = None
            for _ in range(max(1, repeat)):
                run = decoder.decode(em.log_probs, em.lengths, beam_size=int(p["beam_size"]),
                                     lm_weight=p["lm_weight"], beam_threshold=p["beam_threshold"],
                                     sil_score=p.get("sil_score", 0.0), word_boundary=self.word_boundary)
                best = run.seconds if best is None else min(best, run.seconds)
        return DecodeRun(run.hyps, best, None, mem.mb, mem.process_mb)

    def teardown(self):
        self.decoder = None


class PyctcdecodeSystem(System):
    """pyctcdecode 0.5.0 + kenlm in its own venv (numpy<2, made by ``make pyctcdecode-venv``), in a child process."""

    family = "pyctcdecode"

    def __init__(self, key, label, *, venv: str | os.PathLike = PYCTCDECODE_VENV, **kw):
        super().__init__(key, label, **kw)
        self.venv = Path(venv)

    def setup(self, target, workdir):
        import tempfile

        if target.arpa is None:
            raise PeerUnavailable(f"no ARPA file given for {target.name}")
        python = pyctcdecode_python(self.venv)
        g = wfst.load_graph(target.graph_dir)
        words = list(graph_lexicon(g.words.symbols, g.tokens, spm=target.spm, word_boundary=target.word_boundary))
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="wfst-bench-"))
        self.decoder = PyctcdecodeDecoder(self.venv, target.arpa, pyctcdecode_labels(g.tokens, target.word_boundary),
                                          words, python=python,
                                          workdir=self.workdir / f"pyctcdecode-{target.name}")
        self.fixed["lm"] = sha256_file(target.arpa)[:20]
        self.fixed["unigrams"] = len(words)
        self.target_name = target.name

    def identity(self):
        return {**super().identity(), **self.decoder.version}

    def decode(self, em, params, *, timed, repeat=1):
        s = PyctcdecodeSettings(**{k: v for k, v in {**self.fixed, **params}.items()
                                   if k in {f.name for f in dataclasses.fields(PyctcdecodeSettings)}})
        npz = em.npz or write_emissions_npz(em, self.workdir / "emissions")
        return self.decoder.decode(npz, s, repeat=repeat)
