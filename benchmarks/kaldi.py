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
    alignment: tuple[int, ...] = ()  # the token (input label) each frame of the best path reads


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
            _, ilabels, olabels, weight = self._kf.get_linear_symbol_sequence(best)
            out.append(KaldiResult(tuple(int(o) for o in olabels if o), float(weight.value1 + weight.value2),
                                   bool(self.decoder.reached_final()), tuple(int(i) for i in ilabels if i)))
        return out


class KaldiLatticeDecoder:
    """kaldi_decoder.LatticeSimpleDecoder over a TLG.fst: its raw lattice per utterance, and
    the N best distinct word sequences of it (OpenFST's determinize and n-shortest paths on
    the lattice's word acceptor, graph + acoustic cost in full float32 precision, read
    from the lattice's arcs rather than from Kaldi's 6-digit text format).  It has no
    max_active: compare at a beam where max_active does not bind."""

    def __init__(self, tlg_path: str | os.PathLike, *, beam: float, lattice_beam: float, prune_interval: int = 25):
        try:
            import kaldi_decoder
            import kaldifst
        except ImportError as e:
            raise PeerUnavailable(f"kaldi-decoder is not installed (pip install kaldi-decoder kaldifst): {e}") from None
        self._kd = kaldi_decoder
        self.fst = kaldifst.StdVectorFst.read(os.fspath(tlg_path))  # the decoder does not own its graph
        cfg = kaldi_decoder.LatticeSimpleDecoderConfig()
        cfg.beam, cfg.lattice_beam, cfg.prune_interval = beam, lattice_beam, prune_interval
        self.decoder = kaldi_decoder.LatticeSimpleDecoder(self.fst, cfg)
        self.seconds = 0.0  # decoding and raw-lattice time, summed over calls

    def lattices(self, log_probs: np.ndarray, lengths) -> list:
        """Each utterance's raw lattice (kaldifst.Lattice), or None where decoding failed."""
        out = []
        for b, T in enumerate(lengths):
            m = np.ascontiguousarray(np.asarray(log_probs[b, : int(T)], np.float32))
            decodable = self._kd.DecodableCtc(m)  # kept alive while the decoder reads it
            start = time.perf_counter()
            self.decoder.decode(decodable)
            ok, lattice = self.decoder.get_raw_lattice()
            self.seconds += time.perf_counter() - start
            out.append(lattice if ok else None)
        return out

    @staticmethod
    def nbest(lattice, n: int) -> list[tuple[tuple[int, ...], float]]:
        """The n best distinct word sequences of a raw lattice with their costs, best first."""
        import kaldifst.lib._kaldifst as kf
        import pywrapfst as fst

        f = fst.VectorFst()
        f.add_states(lattice.num_states)
        f.set_start(lattice.start)
        for s in range(lattice.num_states):
            arcs = kf._ArcIteratorLattice(lattice, s)
            while not arcs.done:
                a = arcs.value
                w = float(np.float64(a.weight.value1) + np.float64(a.weight.value2))
                f.add_arc(s, fst.Arc(a.olabel, a.olabel, fst.Weight(f.weight_type(), w), a.nextstate))
                arcs.next()
            final = lattice.final(s)
            if np.isfinite(final.value1):
                f.set_final(s, fst.Weight(f.weight_type(), float(np.float64(final.value1) + final.value2)))
        f.rmepsilon()
        best = fst.shortestpath(fst.determinize(f), nshortest=n)
        paths = []

        def walk(s, words, cost):
            if float(best.final(s)) != float("inf"):
                paths.append((tuple(words), cost + float(best.final(s))))
            for a in best.arcs(s):
                walk(a.nextstate, words + ([a.olabel] if a.olabel else []), cost + float(a.weight))

        if best.start() >= 0:
            walk(best.start(), [], 0.0)
        return sorted(paths, key=lambda p: p[1])
