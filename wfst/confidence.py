"""Word confidences that mean what they say: lattice posteriors calibrated on a
development set, and the figures that judge them.

A word's lattice posterior ranks right words above wrong ones, but is no probability of
being right: on clean emissions competing segmentations make right words look doubtful,
on noisy ones the acoustic scale makes wrong words look sure.  Deployed recognisers map
posteriors through a calibration fitted on held-out data; this is Platt scaling, the
logistic fit of correctness on the posterior's log-odds:

    calibrated = sigmoid(slope * logit(posterior) + offset)

Monotone, so the ranking (and any threshold's choice of words) is kept; slope 1 and
offset 0 change nothing.  Fit it with `Calibration.fit(results, references)` on a dev
split, save it as JSON, and give it to the Decoder (`confidence_calibration=`, or
`wfst-decode --confidence-calibration FILE`): `r.word_confidences` and CTM lines are then
calibrated (`r.confidence`, the posterior of the whole word sequence, is not).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence

import numpy as np

from .errors import InputFileError, OptionError
from .files import check_path, read_lines, split_fields, write_text_atomic

_FORMAT = 1  # of the saved JSON
EPSILON = 1e-6  # posteriors are clipped to [EPSILON, 1 - EPSILON] before their log-odds


def _logit(p) -> np.ndarray:
    p = np.clip(np.asarray(p, np.float64), EPSILON, 1 - EPSILON)
    return np.log(p) - np.log1p(-p)


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Platt scaling of word posteriors (see the module's doc)."""

    slope: float = 1.0
    offset: float = 0.0

    def __post_init__(self):
        for name in ("slope", "offset"):
            value = getattr(self, name)
            if (not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, (bool, np.bool_))
                    or not math.isfinite(value)):
                raise OptionError(f"Calibration {name}={value!r}: must be a finite number")
            object.__setattr__(self, name, float(value))  # (a NumPy scalar's: its repr and JSON are a float's)
        if self.slope < 0:  # it would rank the words the lattice is surest of last
            raise OptionError(f"Calibration slope={self.slope!r}: must be >= 0 (a calibration keeps the ranking)")

    def __call__(self, posteriors) -> np.ndarray:
        return 0.5 * (1.0 + np.tanh(0.5 * (self.slope * _logit(posteriors) + self.offset)))

    @classmethod
    def fit(cls, results, references, l2: float = 1e-3) -> Calibration:
        """The fit on decoded results (each with a lattice) and their reference texts
        (strings of words): Newton's method on the logistic log-likelihood, with a small
        L2 penalty that keeps it finite when the data separate."""
        return cls.fit_posteriors(*word_correctness(results, references), l2=l2)

    @classmethod
    def fit_posteriors(cls, posteriors, correct, l2: float = 1e-3) -> Calibration:
        """The fit on word posteriors and whether each word is right (fit's core)."""
        if not (isinstance(l2, (int, float, np.integer, np.floating)) and not isinstance(l2, bool)
                and math.isfinite(l2) and l2 > 0):  # (0: a singular matrix when the data separate)
            raise OptionError(f"Calibration.fit: l2={l2!r} must be a finite number > 0")
        labels = np.asarray(correct)
        if labels.size == 0:
            raise OptionError("Calibration.fit: no words to fit on (the results hold no hypothesis words)")
        if labels.dtype.kind not in "biu" or not np.isin(labels, (0, 1)).all():  # "no" would read as True
            raise OptionError(f"Calibration.fit: labels must be bools (or 0 and 1), got {labels.dtype} values")
        posteriors = np.asarray(posteriors, np.float64)
        if len(labels) == 0 or labels.shape != posteriors.shape or labels.ndim != 1:
            raise OptionError(f"Calibration.fit: {len(posteriors)} posteriors and {len(labels)} labels; "
                              f"needs as many, and at least one")
        if not ((posteriors >= 0) & (posteriors <= 1)).all():
            raise OptionError("Calibration.fit: posteriors must be probabilities in [0, 1]")
        x, y = _logit(posteriors), labels.astype(np.float64)
        if y.min() == y.max():  # (the fit would blame a ranking that the data do not have)
            raise OptionError(f"Calibration.fit: all {len(y)} words are {'right' if y[0] else 'wrong'}: nothing "
                              f"tells right words from wrong ones (fit on results with both)")
        if np.ptp(x) < 1e-9:  # every posterior alike: no slope to find, each maps to the share right
            share = (y.sum() + 0.5) / (len(y) + 1.0)
            return cls(0.0, float(np.log(share / (1.0 - share))))

        def loss(w):  # the negative log-likelihood, penalized
            z = w[0] * x + w[1]
            return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * l2 * np.dot(w, w))

        w = np.array([1.0, 0.0])  # the identity
        for _ in range(100):  # Newton's method, halving a step that does not lower the loss
            p = 0.5 * (1.0 + np.tanh(0.5 * (w[0] * x + w[1])))  # sigmoid, without overflow
            grad = np.array([np.dot(p - y, x), np.sum(p - y)]) + l2 * w
            h = p * (1 - p)
            hess = np.array([[np.dot(h, x * x), np.dot(h, x)], [np.dot(h, x), np.sum(h)]]) + l2 * np.eye(2)
            step = np.linalg.solve(hess, grad)
            t, now = 1.0, loss(w)
            while loss(w - t * step) > now - 1e-4 * t * np.dot(grad, step) and t > 1e-10:
                t *= 0.5
            w = w - t * step
            if np.abs(t * step).max() < 1e-9:
                break
        if w[0] < 0:
            raise OptionError(f"Calibration.fit: the data rank wrong words above right ones (fitted slope "
                              f"{w[0]:.3g} on {len(y)} words, {int(y.sum())} right): too few words to fit on, or "
                              f"labels or references not those of these results")
        return cls(float(w[0]), float(w[1]))

    def save(self, path: str | os.PathLike) -> None:
        text = json.dumps({"format": _FORMAT, **dataclasses.asdict(self)}, indent=2) + "\n"
        write_text_atomic(check_path(path, "calibration file"), text)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Calibration:
        text = "\n".join(read_lines(path, "confidence calibration"))
        why = "not a saved Calibration (JSON with slope and offset)"
        twice = []  # keys an object gives twice (json.loads takes the last)
        try:
            data = json.loads(text, object_pairs_hook=lambda pairs: _keys_once(pairs, twice))
        except ValueError as e:
            raise InputFileError(path, None, f"{why}: {e}") from None
        if twice:
            raise InputFileError(path, None, f"{why}: the key {twice[0]!r} twice")
        if not isinstance(data, dict):
            raise InputFileError(path, None, f"{why}: it holds {text.strip()[:40]!r}, not a JSON object")
        try:
            version = data.get("format", _FORMAT)
            slope, offset = (float(v) if type(v) is int else v for v in (data["slope"], data["offset"]))
        except (KeyError, OverflowError) as e:  # (strings and bools stay,
            # for Calibration to refuse: save writes numbers)
            raise InputFileError(path, None, f"{why}: {e}") from None
        odd = sorted(set(data) - {"format", "slope", "offset"})
        if odd:  # (a file of something else that happens to hold the two keys)
            raise InputFileError(path, None, f"{why}: unknown keys {odd}")
        if type(version) is not int or version != _FORMAT:  # (true == 1)
            raise InputFileError(path, None, f"{why}: format {version!r}, this version reads format {_FORMAT}")
        try:
            return cls(slope, offset)
        except OptionError as e:
            raise InputFileError(path, None, str(e)) from None


def _keys_once(pairs: list, twice: list) -> dict:
    """json.loads' object_pairs_hook: the object, its keys given twice noted in `twice`."""
    data = dict(pairs)
    if len(data) != len(pairs):
        twice.append(next(k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i])))
    return data


def word_correctness(results, references) -> tuple[np.ndarray, np.ndarray]:
    """Each hypothesis word's lattice posterior (uncalibrated) and whether it is right: the
    reference (a string or a word sequence) holds it at the place the edit-distance
    alignment gives."""
    import kaldialign

    results, references = list(results), list(references)
    if len(results) != len(references):
        raise OptionError(f"{len(results)} results but {len(references)} references")
    posteriors, correct = [], []
    for i, (r, ref) in enumerate(zip(results, references)):
        if not (isinstance(ref, str) or (isinstance(ref, Sequence) and all(isinstance(w, str) for w in ref))):
            raise OptionError(f"reference {i}: must be a string or a sequence of words (str), got "
                              f"{type(ref).__name__}")
        if r.lattice is None and r.acoustic_cost == np.inf:
            continue  # the search died: no lattice, no posteriors (DecodeResult)
        if r.lattice is None:
            raise OptionError("confidences need a lattice: decode with lattice_beam set")
        ali = kaldialign.align(split_fields(ref) if isinstance(ref, str) else list(ref), list(r.words), "*")
        correct += [a == b for a, b in ali if b != "*"]
        posteriors += list(r.lattice.word_confidences(r, calibrated=False))
    return np.array(posteriors, np.float64), np.array(correct, bool)


def normalized_cross_entropy(confidences, correct) -> float:
    """NCE: 1 is perfect, 0 no better than the share of right words as a constant, below 0
    worse (NaN when every word is right, or none)."""
    c = np.clip(np.asarray(confidences, np.float64), EPSILON, 1 - EPSILON)
    y = np.asarray(correct, bool)
    p = y.mean() if len(y) else 0.0
    if not 0 < p < 1:
        return float("nan")
    h_max = -(p * math.log2(p) + (1 - p) * math.log2(1 - p))
    h = -np.mean(np.where(y, np.log2(c), np.log2(1 - c)))
    return float((h_max - h) / h_max)
