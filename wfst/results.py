"""What a decode returns: one DecodeResult per utterance and the call's DecodeStats.

Both backends hand back a TracedPath per utterance (the best path's arcs and where they
sit in time); `path_result` turns it into words, frames and cost parts, the same way
for both.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from .symbols import column_of_ilabel


@dataclasses.dataclass(frozen=True)
class DecodeResult:
    """The best path of one utterance.  cost = acoustic_cost + graph_cost + boost_cost + rescore_cost."""

    words: tuple[str, ...]
    word_ids: tuple[int, ...]
    word_frames: tuple[int, ...]  # frame at which each word's label was output
    cost: float
    acoustic_cost: float
    graph_cost: float  # arc costs + the final cost (when a final state was reached)
    reached_final: bool
    num_frames: int
    boost_cost: float = 0.0  # word and phrase boosts of the path (-rewards; cost includes it)
    rescore_cost: float = 0.0  # big LM - graph LM scores of the path when rescoring (cost includes it)

    @property
    def text(self) -> str:
        return " ".join(self.words)


EMPTY_RESULT = DecodeResult((), (), (), 0.0, 0.0, 0.0, False, 0)


@dataclasses.dataclass
class DecodeStats:
    """What the last decode() call did."""

    utterances: int = 0
    frames: int = 0
    seconds: float = 0.0
    tokens_per_frame: float = 0.0  # survivors of pruning, averaged over frames
    regrowths: int = 0  # utterances decoded again after a capacity overflow
    fltop_fallbacks: int = 0  # frames that FLToP emptied, expanded again without it
    boost_unknown: tuple = ()  # (utterance, word) boosted but not in the graph's vocabulary
    lm: dict = dataclasses.field(default_factory=dict)  # with rescoring: LM memory and lookups (backend lm_report)
    device_seconds: float = 0.0  # GPU: from each search's first kernel to its last (CUDA events); CPU: 0


class TracedPath(NamedTuple):
    """A backend's best path of one utterance."""

    arcs: np.ndarray  # graph arc ids in path order
    steps: np.ndarray  # the step each arc's token was stored at (an emitting arc on step s read frame s - 1)
    logp: np.ndarray  # log_probs[frame, column] read by each emitting arc (emitting_reads), in order
    reached_final: bool
    survivors: int  # tokens that survived pruning, summed over frames
    fallbacks: int  # frames expanded again without FLToP


def emitting_reads(graph, arcs, steps) -> tuple[np.ndarray, np.ndarray]:
    """(frame, logit column) read by each emitting arc of a path: where to gather logp."""
    ilab = graph.ilabel[np.asarray(arcs, np.int64)]
    emitting = ilab != 0
    return np.asarray(steps, np.int64)[emitting] - 1, column_of_ilabel(ilab[emitting].astype(np.int64))


def path_result(graph, config, path: TracedPath, num_frames: int, boost: dict, phrases, rescorer) -> DecodeResult:
    """Words, frames and cost parts (in float64) of a traced-back path.

    boost: the utterance's word id -> cost map; phrases: its phrase automaton; rescorer:
    the on-the-fly rescoring LMs or None."""
    arcs = np.asarray(path.arcs, np.int64)
    ilab = graph.ilabel[arcs]
    blank = graph.tokens.blank_ilabel
    acoustic = -config.acoustic_scale * np.asarray(path.logp, np.float32).astype(np.float64)
    acoustic_cost = float(acoustic.sum())
    if blank is not None:
        acoustic_cost += config.blank_penalty * int(np.sum(ilab == blank))
    graph_cost = float(graph.weight[arcs].astype(np.float64).sum())
    if path.reached_final:
        last = graph.nextstate[arcs[-1]] if len(arcs) else graph.start
        graph_cost += float(graph.final[last])
    olab = graph.olabel[arcs]
    has_word = olab != 0
    frames = np.maximum(np.asarray(path.steps, np.int64) - 1, 0)
    word_ids = tuple(int(w) for w in olab[has_word])
    words = tuple(graph.words[w] if graph.words is not None else str(w) for w in word_ids)
    boost_cost = float(sum(np.float32(boost.get(w, 0.0)) for w in word_ids)) if boost else 0.0
    if phrases.num_states > 1:
        boost_cost += phrases.path_cost(word_ids, path.reached_final)
    rescore_cost = rescorer.path_cost(word_ids, path.reached_final) if rescorer is not None else 0.0
    return DecodeResult(words, word_ids, tuple(int(f) for f in frames[has_word]),
                        acoustic_cost + graph_cost + boost_cost + rescore_cost, acoustic_cost, graph_cost,
                        bool(path.reached_final), num_frames, boost_cost, rescore_cost)
