"""Kaldi's FasterDecoder on the same TLG: the reference our decoder is checked and timed against.

Uses PyPI ``kaldi-decoder`` + ``kaldifst`` (the ``bench`` and ``test`` extras).  Its DecodableCtc
reads logp[t, ilabel - 1], the same column convention as ours, and applies no acoustic
scale, so the scale (and blank penalty) are applied to the matrix before it is handed over.
"""
from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

from .peers import PeerUnavailable


@dataclasses.dataclass(frozen=True)
class KaldiResult:
    word_ids: tuple[int, ...]
    cost: float  # graph + acoustic cost of the best path (final cost included when reached)
    reached_final: bool


class KaldiFasterDecoder:
    """kaldi_decoder.FasterDecoder over a TLG.fst, one utterance at a time."""

    def __init__(self, tlg_path: str | os.PathLike, *, beam: float, max_active: int, min_active: int,
                 beam_delta: float = 0.5, acoustic_scale: float = 1.0, blank_penalty: float = 0.0,
                 blank_column: int | None = None):
        try:
            import kaldi_decoder
            import kaldifst
        except ImportError as e:
            raise PeerUnavailable(f"kaldi-decoder is not installed (pip install kaldi-decoder kaldifst): {e}") from None
        self._kd, self._kf = kaldi_decoder, kaldifst
        self.fst = kaldifst.StdVectorFst.read(os.fspath(tlg_path))
        opts = kaldi_decoder.FasterDecoderOptions(beam=beam, max_active=max_active, min_active=min_active,
                                                  beam_delta=beam_delta)
        self.decoder = kaldi_decoder.FasterDecoder(self.fst, opts)
        self.acoustic_scale = acoustic_scale
        self.blank_penalty = blank_penalty
        self.blank_column = blank_column
        self.seconds = 0.0  # decoding time only, summed over calls

    def decode(self, log_probs: np.ndarray, lengths=None) -> list[KaldiResult]:
        log_probs = np.asarray(log_probs, np.float32)
        if lengths is None:
            lengths = [log_probs.shape[1]] * log_probs.shape[0]
        out = []
        for b, T in enumerate(lengths):
            m = np.ascontiguousarray(log_probs[b, : int(T)]) * np.float32(self.acoustic_scale)
            if self.blank_penalty and self.blank_column is not None:
                m[:, self.blank_column] -= np.float32(self.blank_penalty)
            start = time.perf_counter()
            self.decoder.decode(self._kd.DecodableCtc(m))
            ok, best = self.decoder.get_best_path()
            self.seconds += time.perf_counter() - start
            if not ok:
                out.append(KaldiResult((), float("inf"), False))
                continue
            _, _, olabels, weight = self._kf.get_linear_symbol_sequence(best)
            out.append(KaldiResult(tuple(int(o) for o in olabels if o), float(weight.value1 + weight.value2),
                                   bool(self.decoder.reached_final())))
        return out
