"""The search settings of a Decoder, validated once."""
from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from .errors import OptionError

MIN_LATTICE_BEAM = 0.1
MIN_ACTIVE = 20  # min_active's default where max_active allows it (Kaldi FasterDecoder's default)


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity: taskset, a container's cpuset), not
    the machine's: threads beyond them only take turns."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (no affinity on this platform)
        return os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    """Search settings, validated once.  Tuning: raise `beam` or `max_active` when the
    best path gets pruned (WER drops as they grow), lower them for speed."""

    beam: float = 16.0  # keep tokens within `beam` of the frame's best cost
    max_active: int = 7000  # and at most this many per frame (exact, by radix select)
    min_active: int | None = None  # but at least this many, beam or not (None: MIN_ACTIVE, or max_active if fewer)
    beam_delta: float = 0.5  # slack added to the adaptive beam when max/min_active bind (Kaldi)
    acoustic_scale: float = 1.0  # multiplies -logp
    blank_penalty: float = 0.0  # cost added on every frame that emits blank (> 0: fewer blanks)
    token_top_n: int | None = None  # FLToP: expand only the frame's top-N columns (None: all)
    token_rel_threshold: float = 0.0  # FLToP: and only those with p >= R * the frame's best p
    token_capacity: int | None = None  # tokens per frame per utterance; grows on overflow
    num_threads: int | None = None  # CPU threads, one utterance each; default: all cores
    cuda_graphs: bool = True  # device="cuda": replay each frame step as a CUDA graph (False: launch each kernel)
    # with rescore_lm or phrases, tokens that share a graph state differ only in their context
    # (the big LM's history, a phrase's progress): expand only those within context_beam of
    # the state's cheapest (None: all of them, the exact search; 4 kept every result of the
    # rescoring benchmark's large setup and ran ~30% faster)
    context_beam: float | None = None
    lattice_beam: float | None = None  # keep a word lattice of the paths within it of the best (None: best path only)
    # with a lattice: frames between prunings of its links (Kaldi's prune-interval, 25 there;
    # here 100 frames of raw links are ~20k links on the char demo, 100k on BPE (0.5 / 2.4 MB),
    # and each pruning walks back ~1.8 intervals: 25 -> 50 -> 100 saved 10% and then 4%)
    prune_interval: int = 100
    # with a lattice: word confidences mapped by a calibration fitted on a dev set
    # (wfst.confidence.Calibration, or the path of its JSON file; None: lattice posteriors as they are)
    confidence_calibration: object = None
    # whether min_active was given, not its default (which with_options takes anew for a new max_active)
    _min_active_given: bool = dataclasses.field(default=True, init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_min_active_given", self.min_active is not None)
        for f in dataclasses.fields(self):  # NumPy scalars as Python numbers (an int8 min_active overflowed)
            value = getattr(self, f.name)
            if isinstance(value, (np.integer, np.floating)):
                object.__setattr__(self, f.name, value.item())

        def check(ok, name, what):
            if not ok:
                value = getattr(self, name)
                if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**31:
                    what = "below 2**31 (the kernels count in int32)"
                raise OptionError(f"DecoderConfig.{name}={value!r}: must be {what}")

        check(_positive32(self.beam), "beam", "a finite number > 0 in float32's range")
        check(_int(self.max_active) and self.max_active >= 1, "max_active", "an integer >= 1")
        if self.min_active is None:  # (so that max_active=10 alone is not refused for a min_active no one gave)
            object.__setattr__(self, "min_active", min(MIN_ACTIVE, self.max_active))
        check(_int(self.min_active) and 0 <= self.min_active <= self.max_active, "min_active",
              f"an integer in [0, max_active={self.max_active}]")
        check(_finite32(self.beam_delta) and self.beam_delta >= 0, "beam_delta",
              "a finite number >= 0 in float32's range")
        check(_positive32(self.acoustic_scale), "acoustic_scale",
              "a finite number > 0 in float32's range")  # (1e-300 was 0 there: the emissions ignored)
        check(_finite(self.blank_penalty) and abs(self.blank_penalty) <= MAX_REWARD, "blank_penalty",
              f"a finite number of at most {MAX_REWARD:g} in size (-1e38 overflowed every path's cost)")
        check(self.token_top_n is None or (_int(self.token_top_n) and self.token_top_n >= 1),
              "token_top_n", "None (all columns) or an integer >= 1")
        check(_finite(self.token_rel_threshold) and 0 <= self.token_rel_threshold <= 1, "token_rel_threshold",
              "a number in [0, 1]")
        check(self.token_capacity is None or (_int(self.token_capacity) and self.token_capacity >= 1),
              "token_capacity", "None or an integer >= 1")
        check(self.num_threads is None or (_int(self.num_threads) and self.num_threads >= 1),
              "num_threads", "None or an integer >= 1")
        check(isinstance(self.cuda_graphs, bool), "cuda_graphs", "True or False")
        check(self.lattice_beam is None or (_finite32(self.lattice_beam) and self.lattice_beam >= MIN_LATTICE_BEAM),
              "lattice_beam", f"None (no lattice) or a finite number >= {MIN_LATTICE_BEAM} (float32 path costs "
              f"round by more than a smaller beam on long utterances: it could prune the best path itself)")
        check(self.context_beam is None or (_finite32(self.context_beam) and self.context_beam >= 0), "context_beam",
              "None (every context expanded) or a finite number >= 0 in float32's range")
        check(_int(self.prune_interval) and self.prune_interval >= 1, "prune_interval", "an integer >= 1")
        calibration = self.confidence_calibration
        if calibration is not None:
            from .confidence import Calibration

            if isinstance(calibration, (str, os.PathLike)):
                object.__setattr__(self, "confidence_calibration", Calibration.load(calibration))
            check(isinstance(self.confidence_calibration, Calibration), "confidence_calibration",
                  "None, a wfst.confidence.Calibration or the path of one saved as JSON")
            if self.lattice_beam is None:  # (it would map nothing, silently)
                raise OptionError("DecoderConfig.confidence_calibration maps the lattice's word confidences: set "
                                  "lattice_beam too (e.g. 8.0)")

    def with_options(self, **options) -> DecoderConfig:
        """This config with the fields `options` names changed (Decoder(graph, config, beam=...)):
        a min_active left to its default takes the default of the new max_active (dataclasses'
        replace carried the old one over as if it had been given)."""
        if not self._min_active_given and "min_active" not in options:
            options["min_active"] = None
        return dataclasses.replace(self, **options)

    def fltop(self, num_columns: int) -> tuple[int, float]:
        """(top_n, log R) as the kernels take them; (V, -inf) when pruning is off."""
        top_n = num_columns if self.token_top_n is None else min(self.token_top_n, num_columns)
        log_rel = math.log(self.token_rel_threshold) if self.token_rel_threshold > 0 else -math.inf
        return top_n, log_rel


def _number(x) -> bool:
    """Python's or NumPy's ints and floats, not bools."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _finite(x) -> bool:
    return _number(x) and math.isfinite(x)


def _finite32(x) -> bool:
    """Finite as the float32 the search keeps it in (1e39 would be +inf there)."""
    return _number(x) and abs(x) <= FLOAT32_MAX


FLOAT32_MAX = float(np.finfo(np.float32).max)  # (NaN is not below it)
MAX_REWARD = 1e4  # nats: beyond it float32 costs near -reward are too coarse for a beam (their step grows with it)


def _positive32(x) -> bool:
    """Finite and > 0 as the float32 the search keeps it in (1e-300 would be 0 there)."""
    return _finite32(x) and np.float32(x) > 0


def _int(x) -> bool:
    """An int the kernels can hold (int32: 2**63 raised OverflowError deep in the backend)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and -2**31 < x < 2**31
PHRASE_REWARD = 3.0  # nats: a boosted word or phrase's reward where none is given (--phrases lines, the beam search)
