"""What a decode returns: one DecodeResult per utterance and the call's DecodeStats.

Both backends hand back a TracedPath per utterance (the best path's arcs and where they
sit in time); `path_result` turns it into words, frames and cost parts, the same way
for both.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from typing import NamedTuple

import numpy as np

from .errors import user_stacklevel
from .symbols import column_of_ilabel


@dataclasses.dataclass(frozen=True)
class DecodeResult:
    """The best path of one utterance.  cost = acoustic_cost + graph_cost + boost_cost + rescore_cost.
    Where no path reads every frame (every token died: the graph can follow none of a
    frame's columns with a finite log-prob), the search ended at the last frame a token
    lived through: the words are those of its best path up to there, acoustic_cost and cost
    are +inf, reached_final is False and there is no lattice (offline and streamed alike)."""

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
    # with a lattice_beam: the word lattice (wfst.lattice.Lattice) and, when asked, the N-best list
    lattice: object = dataclasses.field(default=None, compare=False, repr=False)
    nbest: tuple = dataclasses.field(default=(), compare=False, repr=False)
    # the token each frame of the best path reads (input labels), for word_times
    frame_tokens: np.ndarray | None = dataclasses.field(default=None, compare=False, repr=False)
    graph: object = dataclasses.field(default=None, compare=False, repr=False)  # the Graph decoded with
    _computed: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @property
    def text(self) -> str:
        return " ".join(self.words)

    @property
    def word_times(self) -> tuple[tuple[int, int], ...]:
        """(start, end) frame of each word, both inclusive: from the first frame of the word's
        first token to the last frame of its last (blank and word-boundary frames around it
        are not part of it).  Seconds: start * frame_shift, (end + 1) * frame_shift.  Computed
        on first use by aligning the path's frames with the graph's lexicon (wfst.align);
        CtcBeamDecoder's come with the result."""
        if not self.words:
            return ()
        if "word_times" in self._computed:  # (CtcBeamDecoder's: from its own traceback)
            return self._computed["word_times"]
        from .errors import OptionError

        if self.frame_tokens is None:
            raise OptionError("word times come from the path's frames, which this result was made without "
                              "(results of Decoder.decode, Decoder.finish and CtcBeamDecoder have them)")
        if self.graph is None:
            raise OptionError("word times come from the graph, which a pickled result leaves behind; this one's "
                              "graph could not give them (no lexicon.txt and T.fst)")
        from .align import word_aligner

        if "word_times" not in self._computed:
            self._computed["word_times"] = word_aligner(self.graph).word_times(self.frame_tokens, self.word_ids,
                                                                               self.reached_final)
        return self._computed["word_times"]

    def __getstate__(self) -> dict:
        """Pickled without the graph (tens of MB, which only word times read): they are
        worked out first, where the graph can give them.  (A lattice keeps its graph: its
        N-best lists and oracle need it.)"""
        state = dict(self.__dict__)
        if self.graph is not None:
            from .errors import WfstError

            if self.frame_tokens is not None and self.words:
                try:
                    self.word_times
                except WfstError:  # a graph without a lexicon: unpickled, word_times says so
                    pass
            state["graph"] = None
            state["_computed"] = dict(self._computed)
        return state

    @property
    def word_confidences(self) -> tuple[float, ...]:
        """Each word's posterior in the lattice (Lattice.word_confidences)."""
        if self.num_frames == 0:  # no frames: no words, no lattice needed
            return ()
        return self._lattice("word_confidences").word_confidences(self)

    @property
    def confidence(self) -> float:
        """The posterior of the whole word sequence in the lattice (Lattice.sequence_posterior)."""
        if self.num_frames == 0:  # the only word sequence of no frames
            return 1.0
        return self._lattice("confidence").sequence_posterior(self.word_ids)

    def _lattice(self, what: str):
        if self.lattice is None:
            from .errors import OptionError

            if self.acoustic_cost == math.inf:
                raise OptionError(f"{what}: read in the word lattice, and this search keeps none: every token "
                                  f"died at a frame (no path reads all {self.num_frames} frames; with "
                                  f"lattice_beam set the others get one)")
            raise OptionError(f"{what}: read in the word lattice, which this result has not: decode with "
                              f"lattice_beam set (e.g. Decoder(..., lattice_beam=8.0))")
        return self.lattice


@dataclasses.dataclass
class DecodeStats:
    """What the last decode() call did (or advance(), finish(): their streams and frames); empty
    after a call that raised.  One per Decoder: a thread reads its own call's before it makes
    another call on that decoder, and while no other thread makes one."""

    utterances: int = 0
    frames: int = 0
    seconds: float = 0.0
    tokens_per_frame: float = 0.0  # survivors of pruning, averaged over frames
    regrowths: int = 0  # utterances decoded again after a capacity overflow
    fltop_fallbacks: int = 0  # frames that FLToP emptied, expanded again without it
    boost_unknown: tuple = ()  # (utterance, word) boosted but not in the graph's vocabulary
    lm: dict = dataclasses.field(default_factory=dict)  # with rescoring: LM memory and lookups (backend lm_report)
    device_seconds: float = 0.0  # GPU: from each search's first kernel to its last (CUDA events); CPU: 0
    no_path: tuple = ()  # utterances in which every token died (cost +inf; see DecodeResult)


def no_path(results, what: str, emissions=None) -> tuple[int, ...]:
    """The indices of results in which every token died, with a warning that names them;
    emissions: the batch's (B, T, V) log-probs, to look for frames no log-softmax gives."""
    dead = tuple(i for i, r in enumerate(results) if r.num_frames and r.acoustic_cost == float("inf"))
    if dead:
        warnings.warn(f"{len(dead)} {what}(s) have no path through all their frames ({what} "
                      f"{', '.join(map(str, dead[:5]))}{', ...' if len(dead) > 5 else ''}): every token died at a "
                      f"frame where none of the tokens that survived pruning has an arc whose column has a finite "
                      f"log-prob (masked emissions, or a max_active or beam too small to keep a token that can go "
                      f"on); their results have cost inf and no words from there on"
                      + (_low_frame(emissions, dead[0], results[dead[0]].num_frames) if emissions is not None else ""),
                      stacklevel=user_stacklevel())
    return dead


def _low_frame(emissions, b: int, frames: int) -> str:
    """Why utterance b may have died, if a frame of it is no log-softmax row: its largest
    value far below -log V (e.g. padding of -1e8 decoded as frames: float32 costs that
    large step by more than the beam)."""
    from .inputs import host_array

    top = host_array(emissions[b, :frames]).max(axis=1)
    floor = -math.log(emissions.shape[2]) - 1.0  # a log-softmax row's largest value is at least -log V
    low = np.flatnonzero(np.isfinite(top) & (top < floor))
    if not low.size:
        return ""
    t = int(low[0])
    return (f". Utterance {b}'s frame {t} has its largest log-prob {float(top[t]):.4g}, below -log V - 1 = "
            f"{floor:.3g}, which no log-softmax gives: padding decoded as frames (give lengths), or scores of "
            f"another scale?")


class TracedPath(NamedTuple):
    """A backend's best path of one utterance."""

    arcs: np.ndarray  # graph arc ids in path order
    steps: np.ndarray  # the step each arc's token was stored at (an emitting arc on step s read frame s - 1)
    logp: np.ndarray  # log_probs[frame, column] read by each emitting arc (emitting_reads), in order
    reached_final: bool
    survivors: int  # tokens that survived pruning, summed over frames
    fallbacks: int  # frames expanded again without FLToP
    lattice: object = None  # wfst.lattice.RawLattice when lattices are kept
    part: PathPart | None = None  # the path summed already (PathPart.of_sums), where the backend did it


def emitting_reads(graph, arcs, steps) -> tuple[np.ndarray, np.ndarray]:
    """(frame, logit column) read by each emitting arc of a path: where to gather logp."""
    ilab = graph.ilabel[np.asarray(arcs, np.int64)]
    emitting = ilab != 0
    return np.asarray(steps, np.int64)[emitting] - 1, column_of_ilabel(ilab[emitting].astype(np.int64))


@dataclasses.dataclass
class PathPart:
    """What a stretch of a path adds to its result, in float64: a stream's path is its
    committed prefix (whose backpointers and log-probs were released) and the rest."""

    logp: float = 0.0  # sum of log_probs read by its emitting arcs
    blanks: int = 0  # its emitting arcs that read blank
    weights: float = 0.0  # its arc weights
    word_ids: tuple = ()
    word_frames: tuple = ()
    last_voiced: int = -1  # the last frame a non-blank emitting arc read (-1: none)
    last_frame: int = -1  # the last frame an emitting arc read
    end_state: int = -1  # the graph state its last arc leads to (-1: no arcs)
    # the input label of its emitting arcs (for word times; a stream's prefix keeps them as
    # uint16 where the labels fit: 2 bytes a frame); None: left out (a partial result's)
    frame_tokens: np.ndarray | None = dataclasses.field(default_factory=lambda: np.empty(0, np.uint16))

    @classmethod
    def of_sums(cls, sums: tuple) -> PathPart:
        """The PathPart of kernels.cpu.path_sums' tuple."""
        logp, blanks, weights, word_ids, word_frames, last_voiced, last_frame, end_state, tokens = sums
        return cls(logp, blanks, weights, tuple(word_ids.tolist()), tuple(word_frames.tolist()), int(last_voiced),
                   int(last_frame), int(end_state), tokens)

    def __add__(self, later: PathPart) -> PathPart:
        """A stream's path: its committed prefix, then the rest."""
        tokens = None
        if self.frame_tokens is not None and later.frame_tokens is not None:
            tokens = np.concatenate((self.frame_tokens, later.frame_tokens))
        return PathPart(self.logp + later.logp, self.blanks + later.blanks, self.weights + later.weights,
                        self.word_ids + later.word_ids, self.word_frames + later.word_frames,
                        max(self.last_voiced, later.last_voiced), max(self.last_frame, later.last_frame),
                        later.end_state if later.end_state >= 0 else self.end_state, tokens)


def blank_label(graph) -> int:
    """The graph's blank input label as the kernels take it (-1: its tokens have no blank)."""
    blank = graph.tokens.blank_ilabel
    return -1 if blank is None else int(blank)


def path_part(graph, arcs, steps, logp) -> PathPart:
    """The PathPart of path arcs (graph arc ids), the steps their tokens were stored at and
    the log_probs their emitting arcs read (emitting_reads)."""
    from wfst.kernels.cpu import path_sums

    return PathPart.of_sums(path_sums(graph.ilabel, graph.olabel, graph.weight, graph.nextstate, blank_label(graph),
                                      np.ascontiguousarray(arcs, np.int64), np.ascontiguousarray(steps, np.int64),
                                      np.ascontiguousarray(logp, np.float32)))


def path_result(graph, config, path: TracedPath, num_frames: int, boost: dict, phrases, rescorer,
                prefix: PathPart | None = None) -> DecodeResult:
    """Words, frames and cost parts (in float64) of a traced-back path (after `prefix`, a
    stream's committed part, if any).

    boost: the utterance's word id -> cost map; phrases: its phrase automaton; rescorer:
    the on-the-fly rescoring LMs or None."""
    part = path.part if path.part is not None else path_part(graph, path.arcs, path.steps, path.logp)
    if prefix is not None:
        part = prefix + part
    acoustic_cost = -config.acoustic_scale * part.logp + config.blank_penalty * part.blanks
    return part_result(graph, part, acoustic_cost, path.reached_final, num_frames, boost, phrases, rescorer)


def part_result(graph, part: PathPart, acoustic_cost: float, reached_final: bool, num_frames: int, boost: dict,
                phrases, rescorer) -> DecodeResult:
    """The DecodeResult of a whole path's PathPart and acoustic cost (see path_result)."""
    if part.last_frame < num_frames - 1:  # the search died: no path reads the later frames
        acoustic_cost, reached_final = float("inf"), False
    graph_cost = part.weights
    if reached_final:
        graph_cost += float(graph.final[part.end_state if part.end_state >= 0 else graph.start])
    word_ids = part.word_ids
    words = tuple(map(graph.words.symbols.__getitem__ if graph.words is not None else str, word_ids))
    boost_cost = float(sum(np.float32(boost.get(w, 0.0)) for w in word_ids)) if boost else 0.0
    if phrases.num_states > 1:  # (the end refund whether or not a final state was reached: the search's too)
        boost_cost += phrases.path_cost(word_ids)
    rescore_cost = rescorer.path_cost(word_ids, reached_final) if rescorer is not None else 0.0
    return DecodeResult(words, word_ids, part.word_frames,
                        acoustic_cost + graph_cost + boost_cost + rescore_cost, acoustic_cost, graph_cost,
                        bool(reached_final), num_frames, boost_cost, rescore_cost,
                        frame_tokens=part.frame_tokens, graph=graph)
