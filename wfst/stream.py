"""Streams: live audio decoded chunk by chunk, many streams advanced in one call.

    dec = wfst.Decoder(g, beam=16.0, max_active=7000)
    s = dec.stream(boost={"alice": 2.0})
    dec.advance([s, t], [chunk_s, chunk_t])    # each (T_i, V) float32 log-probs; T_i may be 0
    dec.advance([s, t], x, lengths)            # or one (N, T, V) array, as a batched model gives them
    s.partial().words, s.partial().stable      # best words so far; how many can no longer change
    if s.endpoint: ...                         # an endpoint rule fired (Kaldi's rules)
    result = dec.finish([s])[0]                # the DecodeResult an offline decode gives

A stream keeps its search state between calls: the tokens of its last frame and the
backpointers since the paths of all its tokens last met.  Words before that meeting point
are committed (they are the same on every path that can still win) and their backpointers
and frames are released, so a stream's memory stays bounded by how far back its live paths
disagree, not by its length.

Endpointing follows Kaldi's OnlineEndpointConfig: silence is the blank frames at the end of
the best path, the relative cost is the best cost with final costs minus the best without.
"""
from __future__ import annotations

import dataclasses
import math

from .config import _number
from .errors import OptionError, SearchStateError
from .scoring import FRAME_SECONDS


@dataclasses.dataclass(frozen=True)
class EndpointRule:
    """One of Kaldi's endpoint rules: it fires when the trailing silence (seconds of blank at
    the end of the best path) is at least min_trailing_silence, the final relative cost is at
    most max_relative_cost and the stream is at least min_utterance_length seconds long; with
    must_contain_nonsilence, only once the best path has a non-blank frame."""

    must_contain_nonsilence: bool
    min_trailing_silence: float
    max_relative_cost: float = math.inf
    min_utterance_length: float = 0.0

    def __post_init__(self):
        if not isinstance(self.must_contain_nonsilence, bool):  # a config file's "False" would count as True
            raise OptionError(f"EndpointRule.must_contain_nonsilence={self.must_contain_nonsilence!r}: must be "
                              f"True or False")
        for name in ("min_trailing_silence", "min_utterance_length"):
            v = getattr(self, name)
            if not (_number(v) and v >= 0):  # (NaN fails; inf: the rule never fires, as in Kaldi)
                raise OptionError(f"EndpointRule.{name}={v!r}: must be a number of seconds >= 0 (inf: never)")
            object.__setattr__(self, name, _as_float(v))
        v = self.max_relative_cost
        if not (_number(v) and not math.isnan(_as_float(v))):
            raise OptionError(f"EndpointRule.max_relative_cost={v!r}: must be a number (inf: any cost)")
        object.__setattr__(self, "max_relative_cost", _as_float(v))

    def fires(self, trailing_silence: float, relative_cost: float, length: float) -> bool:
        """Kaldi's RuleActivated, all in seconds except the cost."""
        contains_nonsilence = length > trailing_silence
        return ((contains_nonsilence or not self.must_contain_nonsilence)
                and _at_least(trailing_silence, self.min_trailing_silence)
                and relative_cost <= self.max_relative_cost
                and _at_least(length, self.min_utterance_length))


def _as_float(v) -> float:
    """A number as a float, one beyond floats (10**400) as infinite, as its rule reads it:
    compared with seconds, it raised OverflowError there."""
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _at_least(seconds: float, threshold: float) -> bool:
    """seconds >= threshold, frames x frame_seconds read as the decimal it stands for: 30 x
    0.03 s is 0.8999999999999999 in binary, and a 0.9 s rule fired a frame late."""
    return seconds >= threshold or math.isclose(seconds, threshold, rel_tol=1e-9)


KALDI_RULES = (
    EndpointRule(False, 5.0),  # 5 s of silence, even with nothing decoded
    EndpointRule(True, 0.5, 2.0),  # 0.5 s after a final state with a good relative cost
    EndpointRule(True, 1.0, 8.0),  # 1 s after one with a worse cost
    EndpointRule(True, 2.0),  # 2 s of silence after speech in any case
    EndpointRule(False, 0.0, math.inf, 20.0),  # an utterance of 20 s
)


@dataclasses.dataclass(frozen=True)
class EndpointConfig:
    """Endpoint rules (any one firing is an endpoint) and the audio per frame."""

    rules: tuple = KALDI_RULES
    frame_seconds: float = FRAME_SECONDS

    def __post_init__(self):
        if isinstance(self.rules, EndpointRule) or not hasattr(self.rules, "__iter__"):
            raise OptionError(f"EndpointConfig.rules={self.rules!r}: must be a sequence of EndpointRule objects")
        object.__setattr__(self, "rules", tuple(self.rules))  # a list would make the frozen config unhashable
        if not all(isinstance(r, EndpointRule) for r in self.rules):
            raise OptionError("EndpointConfig.rules: must be EndpointRule objects")
        if not (_number(self.frame_seconds) and math.isfinite(_as_float(self.frame_seconds))
                and self.frame_seconds > 0):
            raise OptionError(f"EndpointConfig.frame_seconds={self.frame_seconds!r}: must be a number > 0")

    def fired(self, trailing_frames: int, relative_cost: float, frames: int) -> int | None:
        """The first rule that fires (its index), or None."""
        for i, rule in enumerate(self.rules):
            if rule.fires(trailing_frames * self.frame_seconds, relative_cost, frames * self.frame_seconds):
                return i
        return None


@dataclasses.dataclass(frozen=True)
class Partial:
    """The best path of a stream so far (final costs left out).  The first `stable` words
    lie on the paths of every surviving token: they are a prefix of the final words (none
    are with rescore_mode="lattice": finish() rescores every path of the lattice)."""

    words: tuple[str, ...]
    word_ids: tuple[int, ...]
    word_frames: tuple[int, ...]
    stable: int
    frames: int  # frames decoded so far

    @property
    def text(self) -> str:
        return " ".join(self.words)


class Stream:
    """A live stream of one Decoder (Decoder.stream()): its search state between calls.

    frames: frames decoded so far; endpoint: whether an endpoint rule fired at the last
    advance (endpoint_rule: which one, an index into the EndpointConfig's rules; none
    before the first frame); finished: Decoder.finish() took its result, and it takes no
    more chunks, and keeps it as `result`; boost_unknown: the boosted words or phrases not in
    the graph's vocabulary (ignored, with a warning)."""

    def __init__(self, decoder, state, boost_map, phrases, endpoint: EndpointConfig, boost_unknown: tuple = ()):
        self._decoder = decoder
        self.boost_unknown = boost_unknown
        self._state = state  # the backend's search state
        self._boost_map, self._phrases = boost_map, phrases
        self._phrased = phrases.num_states > 1  # (read at every advance: its search has a context)
        self.endpoint_config = endpoint
        self.finished = False
        self._final_rule: int | None = None  # endpoint_rule when the stream was finished
        self._lost: str | None = None  # why its search state is gone (an advance() stopped part-way)
        self._result = None  # finish()'s DecodeResult
        self._stable_words: tuple[str, ...] = ()  # the stable words' names, once asked (they never change)

    @property
    def frames(self) -> int:
        return self._state.frames + self._state.idle

    @property
    def endpoint_rule(self) -> int | None:
        """The first endpoint rule that fires on the readings of the last advance (read when
        asked: the readings change only when the stream advances)."""
        if self.finished:
            return self._final_rule
        state = self._state
        if self.frames == 0:
            return None
        return self.endpoint_config.fired(state.trailing + state.idle, state.relative_cost, self.frames)

    @property
    def result(self):
        """The DecodeResult finish() gave (None before): kept, since a finish() that Ctrl-C
        interrupts ends its work, then raises, which loses what it returns."""
        return self._result

    @property
    def endpoint(self) -> bool:
        return self.endpoint_rule is not None

    def partial(self) -> Partial:
        """The best words so far, their frames and how many of them are stable."""
        return self._decoder._partial(self)

    def __reduce__(self):
        raise SearchStateError("a Stream is search state on its Decoder's device and cannot be pickled or copied")

    def __repr__(self) -> str:
        status = "lost" if self._lost else "finished" if self.finished else f"{self.frames} frames"
        return f"<Stream {status}{', endpoint' if self.endpoint else ''}>"
