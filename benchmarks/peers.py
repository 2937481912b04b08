"""Other CTC decoders on the same emissions, LM and lexicon: the peers of `make compare-decoders`.

* :class:`FlashlightDecoder` — flashlight-text's ``LexiconDecoder`` (``pip install
  flashlight-text``) with its KenLM wrapper on the same ARPA file, over a trie of the
  graph's own lexicon (:func:`graph_lexicon`), in this process.
* :class:`PyctcdecodeDecoder` — pyctcdecode's beam search with the same ARPA through
  ``kenlm``.  pyctcdecode 0.5.0 pins ``numpy<2``, so it runs in a virtual environment of
  its own, which ``make pyctcdecode-venv`` makes (``make compare-decoders`` runs it first;
  nothing here installs anything: :func:`pyctcdecode_python` only finds it), and decodes
  in a child process (``pyctcdecode_worker.py`` beside this file, which imports nothing
  from ``wfst``); emissions travel as an ``.npz`` file.
* Kaldi's FasterDecoder is in :mod:`wfst_bench.kaldi`.

A peer that cannot be installed or run raises :class:`PeerUnavailable` with the reason, so
that tables can say why its row is empty instead of leaving it out.

Scales, so that settings can be matched (costs here are natural logs): our decoder's path
cost is ``acoustic_scale · (−log p) + LM cost``, i.e. an LM weight of ``1 / acoustic_scale``
against the acoustic log-probabilities.  KenLM returns log10 scores, which flashlight
multiplies by ``lm_weight`` as they are, so the same LM weight is
``lm_weight = ln(10) / acoustic_scale``; pyctcdecode converts log10 to natural logs itself,
so there ``alpha = 1 / acoustic_scale``.  :func:`lm_weight_for` gives each decoder's value.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from wfst import TokenTable, WfstError
from wfst.files import atomic_path
from wfst.synthetic import detokenize, tokenize

_WORKER = Path(__file__).resolve().parent / "pyctcdecode_worker.py"
_WORD_SPECIALS = {"<eps>", "#0", "<s>", "</s>"}  # words.txt's entries that are not words
# The venv `make pyctcdecode-venv` makes, and the file it writes there once pip has installed
# benchmarks/pyctcdecode-requirements.txt (a copy of it).
PYCTCDECODE_VENV = Path("build/peers/pyctcdecode-venv")
VENV_MARKER = ".wfst-requirements"


class PeerUnavailable(WfstError, RuntimeError):
    """A peer decoder that cannot be installed or run here; the message says why."""


def lm_weight_for(decoder: str, weight: float) -> float:
    """The setting that gives `weight` (LM weight against natural-log acoustic scores) in
    each decoder: ``acoustic_scale`` for ours and Kaldi, ``lm_weight`` for flashlight,
    ``alpha`` for pyctcdecode."""
    if decoder in ("ours", "kaldi"):
        return 1.0 / weight
    if decoder == "flashlight":
        return math.log(10.0) * weight
    if decoder == "pyctcdecode":
        return weight
    raise ValueError(f"unknown decoder {decoder!r}")


@dataclasses.dataclass
class DecodeRun:
    """What one decoder made of one batch: words per utterance and the decoding seconds."""

    hyps: list[list[str]]
    seconds: float
    tokens_per_frame: float | None = None
    peak_mb: float | None = None  # peak resident memory above what the process held before (CUDA: GPU pool)
    process_peak_mb: float | None = None  # the process's whole peak resident memory meanwhile (VmHWM)
    gave_up: int = 0  # utterances it found no path for (Kaldi: "Did not successfully decode"), scored as empty


# --------------------------------------------------------------------------- lexicon

def graph_lexicon(words: Sequence[str], tokens: TokenTable, *, spm=None,
                  word_boundary: str | None = None) -> dict[str, list[int]]:
    """Each word spelled in logit columns the way the graph compiler spells it.

    Per character (the word-boundary unit is not part of a spelling) or, with `spm`, in the
    word's sentencepiece pieces (``wfst.graphs.lexicon``; :func:`wfst.synthetic.tokenize`
    spells a text the same way).  Specials (``<eps>``, ``#0``, ``<s>``, ``</s>``) and words
    with a symbol outside the token set are left out, as the compiler leaves them out.
    """
    out = {}
    for w in words:
        if not w or w in _WORD_SPECIALS or w.startswith("#"):
            continue
        try:
            spelled = tokenize(w, tokens, spm=spm, word_boundary=word_boundary)
        except ValueError:
            continue
        if spelled:
            out[w] = spelled
    return out


# --------------------------------------------------------------------------- flashlight

@dataclasses.dataclass(frozen=True)
class FlashlightSettings:
    lm_weight: float = 2.0
    word_score: float = 0.0
    beam_size: int = 50  # hypotheses kept per frame
    beam_size_token: int | None = None  # tokens tried per frame (the frame's best); None: all
    beam_threshold: float = 25.0  # keep hypotheses within this score of the best
    sil_score: float = 0.0
    unk_score: float = -math.inf  # -inf: no out-of-lexicon words, like a TLG


def _flashlight():
    """flashlight-text's decoder module, its KenLM wrapper and its Dictionary, or PeerUnavailable."""
    try:
        from flashlight.lib.text import decoder as fld
        from flashlight.lib.text.dictionary import Dictionary
    except ImportError as e:
        raise PeerUnavailable(f"flashlight-text is not installed (pip install flashlight-text): {e}") from None
    try:
        from flashlight.lib.text.decoder.kenlm import KenLM
    except ImportError:  # older flashlight-text: KenLM sits in the decoder module
        KenLM = fld.KenLM
    return fld, KenLM, Dictionary


def _decode_each(dec, log_probs: np.ndarray, lengths: Sequence[int], num_columns: int):
    """A flashlight decoder over each utterance: (its best result or None, per utterance; the
    decoding seconds)."""
    best, seconds = [], 0.0
    for b, T in enumerate(lengths):
        T = int(T)
        x = np.ascontiguousarray(log_probs[b, :T], dtype=np.float32)
        start = time.perf_counter()
        results = dec.decode(x.ctypes.data, T, num_columns) if T else []
        seconds += time.perf_counter() - start
        best.append(results[0] if results else None)
    return best, seconds


class FlashlightDecoder:
    """flashlight-text's LexiconDecoder (CTC criterion, Viterbi: no log-add) with KenLM.

    `lexicon` maps words to spellings in logit columns (:func:`graph_lexicon`).  The trie is
    built as torchaudio's ``ctc_decoder`` builds it: each spelling weighted by the word's
    unigram score from the sentence start, smeared with MAX (the LM look-ahead).  `silence`
    is the column of the word-boundary unit (characters, e.g. ``|``); a token set without
    one (BPE) passes the blank, as is usual for flashlight with such models.
    """

    def __init__(self, arpa: str | os.PathLike, lexicon: dict[str, Sequence[int]], num_columns: int, blank: int,
                 silence: int | None = None):
        fld, KenLM, Dictionary = _flashlight()
        if not lexicon:
            raise ValueError("empty lexicon")
        self._fld = fld
        self.num_columns, self.blank = int(num_columns), int(blank)
        self.silence = self.blank if silence is None else int(silence)
        self.words = Dictionary()
        for w in lexicon:
            self.words.add_entry(w)
        self.words.add_entry("<unk>")
        self.unk = self.words.get_index("<unk>")
        try:
            self.lm = KenLM(os.fspath(arpa), self.words)
        except RuntimeError as e:
            raise PeerUnavailable(f"flashlight's KenLM cannot load {arpa}: {e}") from None
        self.trie = fld.Trie(self.num_columns, self.silence)
        start = self.lm.start(False)
        for w, spelling in lexicon.items():
            idx = self.words.get_index(w)
            _, score = self.lm.score(start, idx)
            self.trie.insert([int(c) for c in spelling], idx, score)
        self.trie.smear(fld.SmearingMode.MAX)

    def decode(self, log_probs: np.ndarray, lengths: Sequence[int], settings: FlashlightSettings) -> DecodeRun:
        fld = self._fld
        V = self.num_columns
        opts = fld.LexiconDecoderOptions(
            beam_size=int(settings.beam_size), beam_size_token=int(settings.beam_size_token or V),
            beam_threshold=float(settings.beam_threshold), lm_weight=float(settings.lm_weight),
            word_score=float(settings.word_score), unk_score=float(settings.unk_score),
            sil_score=float(settings.sil_score), log_add=False, criterion_type=fld.CriterionType.CTC)
        dec = fld.LexiconDecoder(opts, self.trie, self.lm, self.silence, self.blank, self.unk, [], False)
        log_probs = np.asarray(log_probs)
        if log_probs.ndim != 3 or log_probs.shape[2] != V:
            raise ValueError(f"log_probs must be (B, T, {V}), got {log_probs.shape}")
        best, seconds = _decode_each(dec, log_probs, lengths, V)
        hyps = [[self.words.get_entry(i) for i in (r.words if r else []) if i >= 0 and i != self.unk] for r in best]
        return DecodeRun(hyps, seconds)


class FlashlightLexiconFree:
    """flashlight-text's LexiconFreeDecoder (CTC criterion, Viterbi: no log-add) with a
    token-level KenLM: the lexicon-free peer of wfst.CtcBeamDecoder.  Its LM weight
    multiplies log10 scores (lm_weight_for converts); it has no per-token bonus, only
    `sil_score` on its `silence` token.  Its search starts as if the last frame
    had read `silence`, so a word-boundary `|` as silence would make leading `|` frames
    free; the default, the blank, starts it where wfst's search starts."""

    def __init__(self, arpa: str | os.PathLike, tokens: TokenTable, silence: int | None = None):
        fld, KenLM, Dictionary = _flashlight()
        self._fld, self.tokens = fld, tokens
        self.silence = tokens.blank if silence is None else int(silence)
        symbols = Dictionary()
        for s in tokens.symbols:
            symbols.add_entry(s)
        try:
            self.lm = KenLM(os.fspath(arpa), symbols)
        except RuntimeError as e:
            raise PeerUnavailable(f"flashlight's KenLM cannot load {arpa}: {e}") from None

    def decode(self, log_probs: np.ndarray, lengths: Sequence[int], *, beam_size: int, lm_weight: float,
               beam_threshold: float, sil_score: float = 0.0, word_boundary: str | None = None) -> DecodeRun:
        fld, V = self._fld, self.tokens.num_columns
        opts = fld.LexiconFreeDecoderOptions(beam_size=int(beam_size), beam_size_token=V,
                                             beam_threshold=float(beam_threshold),
                                             lm_weight=lm_weight_for("flashlight", lm_weight),
                                             sil_score=float(sil_score),
                                             log_add=False, criterion_type=fld.CriterionType.CTC)
        dec = fld.LexiconFreeDecoder(opts, self.lm, self.silence, self.tokens.blank, [])
        best, seconds = _decode_each(dec, log_probs, lengths, V)
        hyps = []
        for r in best:
            collapsed = [k for k, _ in itertools.groupby(r.tokens if r else []) if k >= 0 and k != self.tokens.blank]
            hyps.append(detokenize(collapsed, self.tokens, word_boundary=word_boundary).split())
        return DecodeRun(hyps, seconds)


# --------------------------------------------------------------------------- pyctcdecode

def pyctcdecode_labels(tokens: TokenTable, word_boundary: str | None = None) -> list[str]:
    """pyctcdecode's alphabet for a token table: the blank is ``""``, a character set's
    word-boundary unit is ``" "``; sentencepiece pieces stay as they are (pyctcdecode sees
    their ``▁`` and decodes BPE-style)."""
    if tokens.blank is None:
        raise ValueError("the token table has no blank")
    labels = []
    for c, s in enumerate(tokens.symbols):
        if c == tokens.blank:
            labels.append("")
        elif word_boundary is not None and s == word_boundary:
            labels.append(" ")
        else:
            labels.append(s)
    return labels


def save_frames_npz(path: str | os.PathLike, log_probs: np.ndarray, lengths: Sequence[int]) -> None:
    """Emissions for a decoder in another process: ``frames`` (each utterance's frames one
    after another, no padding: float32 (ΣT, V)) and ``lengths``, written atomically."""
    lengths = np.asarray(lengths, dtype=np.int32)
    frames = np.concatenate([np.asarray(log_probs[b, :int(n)], dtype=np.float32) for b, n in enumerate(lengths)])
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, frames=frames, lengths=lengths)


def pyctcdecode_python(venv: str | os.PathLike = PYCTCDECODE_VENV) -> Path:
    """The Python of pyctcdecode's venv at `venv`, made by ``make pyctcdecode-venv``.

    Raises :class:`PeerUnavailable`, naming that make target, when it is missing or was
    left half made (pip did not finish: no marker file)."""
    venv = Path(venv)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if not python.is_file() or not (venv / VENV_MARKER).is_file():
        if venv.exists() and not (venv / ".wfst-made").is_file() and venv != PYCTCDECODE_VENV:
            # another venv (the project's own, say): `make pyctcdecode-venv` would clear it
            raise PeerUnavailable(f"{venv} is not a pyctcdecode venv made by `make pyctcdecode-venv`; give --venv "
                                  f"one, or a new path for `make pyctcdecode-venv PYCTCDECODE_VENV=...` to make")
        raise PeerUnavailable(f"pyctcdecode's venv {venv} is missing or incomplete: `make pyctcdecode-venv"
                              + ("" if venv == PYCTCDECODE_VENV else f" PYCTCDECODE_VENV={venv}")
                              + "` makes it (make compare-decoders runs that first)")
    return python


@dataclasses.dataclass(frozen=True)
class PyctcdecodeSettings:
    alpha: float = 0.5  # LM weight (pyctcdecode's default)
    beta: float = 1.5  # word insertion bonus
    beam_width: int = 100
    beam_prune_logp: float = -10.0
    token_min_logp: float = -5.0
    unk_score_offset: float = -10.0


class PyctcdecodeDecoder:
    """pyctcdecode 0.5.0 with KenLM on an ARPA file, in its own venv (or with `python`), in a child process.

    `unigrams` are the words pyctcdecode knows (the graph's vocabulary); others get its
    ``unk_score_offset``.  Each :meth:`decode` starts one child that loads the LM, decodes
    every utterance (timed around ``decode()`` only) and reports words, seconds and its
    peak memory above what it held before loading the LM."""

    def __init__(self, venv: str | os.PathLike, arpa: str | os.PathLike, labels: Sequence[str],
                 unigrams: Sequence[str], *, python: str | os.PathLike | None = None, workdir=None):
        self.python = Path(python) if python else pyctcdecode_python(venv)
        self.arpa = os.fspath(Path(arpa).resolve())
        self.labels = list(labels)
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="wfst-pyctcdecode-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.unigrams_path = self.workdir / "unigrams.txt"
        self.unigrams_path.write_text("".join(f"{w}\n" for w in unigrams), encoding="utf-8")
        self.version = self._run_worker({"version_only": True})["versions"]

    def _run_worker(self, job: dict) -> dict:
        job_path = self.workdir / "job.json"
        out_path = self.workdir / "result.json"
        out_path.unlink(missing_ok=True)
        job_path.write_text(json.dumps({**job, "output": os.fspath(out_path)}))
        try:
            p = subprocess.run([os.fspath(self.python), os.fspath(_WORKER), os.fspath(job_path)],
                               capture_output=True, text=True)
        except OSError as e:
            raise PeerUnavailable(f"cannot run {self.python}: {e}") from None
        if p.returncode != 0 or not out_path.is_file():
            tail = " ".join(p.stderr.strip().splitlines()[-3:])
            raise PeerUnavailable(f"pyctcdecode worker failed (exit {p.returncode}): {tail}")
        return json.loads(out_path.read_text(encoding="utf-8"))

    def decode(self, emissions_npz: str | os.PathLike, settings: PyctcdecodeSettings, repeat: int = 1) -> DecodeRun:
        """Decode the emissions of an ``.npz`` file written by :func:`save_frames_npz`; seconds
        are the best of `repeat` passes."""
        out = self._run_worker({"emissions": os.fspath(Path(emissions_npz).resolve()), "labels": self.labels,
                                "arpa": self.arpa, "unigrams": os.fspath(self.unigrams_path),
                                "settings": dataclasses.asdict(settings), "repeat": int(repeat)})
        return DecodeRun([h.split() for h in out["hyps"]], out["seconds"], None, out.get("peak_mb"))
