"""Word lattices: what a decode with a lattice beam keeps besides the best path.

A Lattice's states are tokens of the search (state 0 the start token), each at the step
(frames consumed) it was stored at; its arcs are the graph arcs that the search followed
between them, kept while some path through them was within `lattice_beam` of the best
(Kaldi's LatticeFasterDecoder; kernels.lattice).  An arc reads a token (its input label,
0 for an epsilon arc), may output a word, and keeps two costs apart:

    acoustic_cost   -acoustic_scale * logp (+ blank_penalty), the frame's part
    graph_cost      the rest: the graph arc's weight, and with boosting or on-the-fly
                    rescoring the boost and the big-LM difference of a word arc

Final states carry the graph's final cost (with rescoring: and the big LM's difference;
with phrases: the refund of one matched in part), or, when no final state was reached
(the best path then ends where it can), that refund alone.  The total
cost of a path is the sum of both parts over its arcs plus the final cost, the cost its
DecodeResult would have.

The FST operations (N-best, posteriors, the oracle) run in OpenFST through pywrapfst, on
the lattice with one weight per arc (graph + acoustic cost, tropical or log semiring).
"""
from __future__ import annotations

import dataclasses
import io
import math
import operator
import os
from typing import NamedTuple

import numpy as np

from .align import linear_acceptor, path_arcs
from .config import _number
from .errors import OptionError, WfstError
from .files import split_fields, write_text_atomic
from .results import DecodeResult, PathPart, part_result, path_part

# How far beyond the lattice beam the rescoring composition expands its states (nats): its
# estimate of a path's cost ignores what the big LM does to the path's rest.  At 2 as many of
# the rescoring benchmark's 1,428 demo and large utterances had the exact search's words as with
# the full composition; at 0, 3 fewer.
COMPOSE_MARGIN = 2.0
# Where that pruning leaves no path (the big LM makes every path dearer than the estimate by more
# than the margin), the composition is made again with 4 x the margin, up to this, then whole.
MAX_COMPOSE_MARGIN = 256.0
# Posteriors are summed in OpenFST's log semiring in float64: in float32 ("log") a 3-minute
# utterance's frames held 0.993-1.0002 of the probability, its word confidences off by up to 0.007.
POSTERIOR_ARCS = "log64"


class RawLattice(NamedTuple):
    """A lattice as the search leaves it, renumbered: arcs between states 0..S-1, state 0
    the start."""

    src: np.ndarray  # int32 (A,)
    dst: np.ndarray  # int32 (A,)
    arc: np.ndarray  # int32 (A,): graph arc id
    graph_cost: np.ndarray  # float32 (A,)
    acoustic_cost: np.ndarray  # float32 (A,)
    step: np.ndarray  # int32 (S,): frames consumed when the state's token was reached
    final_states: np.ndarray  # int32
    final_costs: np.ndarray  # float32
    reached_final: bool  # the final states are final in the graph (else: where the search ended)

    @classmethod
    def of(cls, links, step_starts, final_gids, final_costs, reached_final) -> RawLattice:
        """The lattice held in kernels.lattice.Links `links` after a search: links between
        backpointers, step_starts[t] the first backpointer stored at step t."""
        from wfst.kernels.lattice import number_states

        n = int(links.count[0])
        src, dst, finals, step = number_states(links.src[:n], links.dst[:n], np.asarray(final_gids, np.int32),
                                               np.asarray(step_starts))
        return cls(src, dst, links.arc[:n].copy(), links.graph[:n].copy(), links.acoustic[:n].copy(), step, finals,
                   np.asarray(final_costs, np.float32), bool(reached_final))


@dataclasses.dataclass(frozen=True)
class PathScorer:
    """What turns a lattice path into a DecodeResult as the decoder scores its best path."""

    graph: object
    config: object
    num_frames: int
    boost: dict
    phrases: object
    rescorer: object


class Lattice:
    """The word lattice of one utterance (see the module's doc).  Labels are the graph's:
    input labels are tokens (logit column + 1), output labels word ids (graph.words)."""

    def __init__(self, raw: RawLattice, scorer: PathScorer, best: DecodeResult | None = None):
        """best: the decode's best path, which nbest() lists first, as the decode gave it
        (another word sequence may tie its cost, and another path of its words its cost,
        with its words' frames elsewhere: OpenFST's shortest path breaks ties otherwise
        than the search)."""
        self._raw = raw
        self._scorer = scorer
        self._best = best
        graph = scorer.graph
        self.ilabel = graph.ilabel[raw.arc.astype(np.int64)].astype(np.int32)
        self.olabel = graph.olabel[raw.arc.astype(np.int64)].astype(np.int32)
        self._fsts = {}

    # ---------------------------------------------------------------- what it holds

    @property
    def num_states(self) -> int:
        return len(self._raw.step)

    @property
    def num_arcs(self) -> int:
        return len(self._raw.src)

    @property
    def src(self) -> np.ndarray:
        return self._raw.src

    @property
    def dst(self) -> np.ndarray:
        return self._raw.dst

    @property
    def graph_cost(self) -> np.ndarray:
        return self._raw.graph_cost

    @property
    def acoustic_cost(self) -> np.ndarray:
        return self._raw.acoustic_cost

    @property
    def state_frames(self) -> np.ndarray:
        """Frames consumed at each state."""
        return self._raw.step

    @property
    def finals(self) -> dict[int, float]:
        return {int(s): float(c) for s, c in zip(self._raw.final_states, self._raw.final_costs)}

    def __repr__(self) -> str:
        return f"Lattice({self.num_states} states, {self.num_arcs} arcs, {len(self._raw.final_states)} final)"

    # ---------------------------------------------------------------- as an FST

    def to_fst(self, semiring: str = "tropical"):
        """A pywrapfst VectorFst: token input labels, word output labels, each arc's weight
        its graph + acoustic cost, final weights the final costs.  semiring "log" gives
        the same FST in the log semiring (for posteriors)."""
        if semiring not in ("tropical", "log"):  # anything else read as "log" below
            raise OptionError(f"semiring={semiring!r}: must be 'tropical' or 'log'")
        return self._fst(self.ilabel, semiring).copy()

    def _fst(self, ilabels, semiring: str, key=None):
        """The lattice as an FST with these input labels (cached under `key`)."""
        if key is not None and (key, semiring) in self._fsts:
            return self._fsts[key, semiring]
        import pywrapfst as fst

        raw = self._raw
        weight = raw.graph_cost.astype(np.float64) + raw.acoustic_cost.astype(np.float64)
        out = io.StringIO()
        np.savetxt(out, np.column_stack([raw.src, raw.dst, ilabels, self.olabel]).astype(np.int64), fmt="%d",
                   delimiter=" ", newline="\t")
        rows = out.getvalue().split("\t")[:-1] if self.num_arcs else []
        lines = [f"{r} {w!r}" for r, w in zip(rows, weight.tolist())]
        lines += [f"{s} {c!r}" for s, c in zip(raw.final_states.tolist(), raw.final_costs.astype(np.float64).tolist())]
        arc_type = "standard" if semiring == "tropical" else semiring  # ("log", or "log64" for posteriors)
        if lines:
            compiler = fst.Compiler(arc_type=arc_type, keep_state_numbering=True)  # states stay ours
            compiler.write("\n".join(lines) + "\n")
            f = compiler.compile()
        else:
            f = fst.VectorFst(arc_type)
        if f.num_states() == 0:
            f.add_state()
        f.set_start(0)
        if key is not None:
            self._fsts[key, semiring] = f
        return f

    def write(self, path_or_file, key: str = "utterance") -> None:
        """Kaldi's text lattice format: the key, then ``src dst ilabel olabel graph,acoustic``
        per arc and ``state graph,acoustic`` per final state, then an empty line.  Acoustic
        costs are written unscaled (divided by the decoder's acoustic_scale, blank_penalty
        included), as Kaldi's decoders write lattices: Kaldi's tools take the scale again
        (lattice-best-path --acoustic-scale=...)."""
        if not isinstance(key, str) or not key or len(key.split()) != 1 or key != key.strip():
            raise OptionError(f"lattice key {key!r}: must be one non-empty token without whitespace (Kaldi reads "
                              f"the key up to the first space)")
        raw = self._raw
        lines = [key]
        acoustic = raw.acoustic_cost.astype(np.float64) / self._scorer.config.acoustic_scale
        for s, d, i, o, g, a in zip(raw.src.tolist(), raw.dst.tolist(), self.ilabel.tolist(), self.olabel.tolist(),
                                    raw.graph_cost.tolist(), acoustic.tolist()):
            lines.append(f"{s}\t{d}\t{i}\t{o}\t{g:.6g},{a:.6g}")
        for s, c in zip(raw.final_states.tolist(), raw.final_costs.tolist()):
            lines.append(f"{s}\t{c:.6g},0")
        text = "\n".join(lines) + "\n\n"
        if isinstance(path_or_file, (str, os.PathLike)):
            write_text_atomic(path_or_file, text)
        elif callable(getattr(path_or_file, "write", None)):
            path_or_file.write(text)
        else:
            raise OptionError(f"Lattice.write: give a path or a text file open for writing, not {path_or_file!r}")

    # ---------------------------------------------------------------- posteriors

    def arc_posteriors(self) -> np.ndarray:
        """Each arc's posterior: the share of the lattice's probability (exp(-cost) summed
        over its paths) that passes through the arc (forward-backward in the log semiring)."""
        if "posteriors" not in self._fsts:
            import pywrapfst as fst

            f = self._fst(self.ilabel, POSTERIOR_ARCS, key="plain")
            alpha = _distances(fst.shortestdistance(f), self.num_states)
            beta = _distances(fst.shortestdistance(f, reverse=True), self.num_states)
            raw = self._raw
            cost = alpha[raw.src] + raw.graph_cost.astype(np.float64) + raw.acoustic_cost + beta[raw.dst] - beta[0]
            self._fsts["posteriors"] = np.minimum(np.exp(-cost), 1.0)
        return self._fsts["posteriors"]

    def word_confidences(self, result: DecodeResult, calibrated: bool = True) -> tuple[float, ...]:
        """The posterior of each word of `result` (the lattice's best path, or an entry of its
        N-best list): the posteriors
        of the lattice's arcs that output the same word near the word, summed (at most 1),
        then mapped by the decoder's confidence_calibration where it has one (unless not
        `calibrated`).  The sum is the word's expected count there, which a path that says
        it twice near it counts twice: on such lattices it lies above the probability that
        the word is there.
        A word's label sits anywhere from its first frame into the next word (determinizing
        L ∘ G delays it), and other paths may start the word earlier than the best path, so
        word i owns the frames from halfway back to word i - 1's start (the first word: from
        frame 0) to the next word's end (result.word_times).  On a graph without word times,
        and between two words alike: from halfway between its label frame and word i - 1's to
        halfway to word i + 1's.  Never below the posterior of the whole word sequence."""
        if not isinstance(result, DecodeResult):
            raise OptionError(f"word_confidences: give the DecodeResult of this lattice's best path, not "
                              f"{type(result).__name__}")
        if result.lattice is not self:  # (another utterance's words read in this lattice: (0.0,), silently)
            raise OptionError("word_confidences: the result is not this lattice's (its .lattice is another one); "
                              "give the DecodeResult this lattice came with")
        if not result.word_ids:
            return ()
        post = self.arc_posteriors()
        raw = self._raw
        frames = np.maximum(raw.step[raw.dst].astype(np.int64) - 1, 0)
        lo, hi = _word_windows(result)
        at = np.asarray(result.word_frames, np.int64)
        for i in np.flatnonzero(np.diff(np.asarray(result.word_ids)) == 0).tolist():  # "the the": a path's arcs
            mid = (at[i] + at[i + 1]) // 2  # of the one would count for the other; their windows split at
            hi[i], lo[i + 1] = min(hi[i], mid), max(lo[i + 1], mid + 1)  # the midpoint of the best path's labels
        # at least the whole sequence's posterior: each of its paths has the word (where a path puts
        # it outside the window, the window alone read less than the sentence)
        floor = self.sequence_posterior(result.word_ids)
        confidences = []
        for w, a, b in zip(result.word_ids, lo.tolist(), hi.tolist()):
            near = (self.olabel == w) & (frames >= a) & (frames <= b)
            confidences.append(float(min(max(post[near].sum(), floor), 1.0)))
        calibration = self._scorer.config.confidence_calibration
        if calibrated and calibration is not None:
            return tuple(float(c) for c in calibration(confidences))
        return tuple(confidences)

    def sequence_posterior(self, word_ids) -> float:
        """The share of the lattice's probability on paths that output exactly these words
        (ids, or the words themselves: a result's word_ids or words)."""
        import pywrapfst as fst

        if isinstance(word_ids, str) or not hasattr(word_ids, "__iter__"):
            raise OptionError(f"sequence_posterior: the words must be a sequence of word ids or words, not "
                              f"{word_ids!r}")
        word_ids = list(word_ids)
        if any(isinstance(w, str) for w in word_ids):
            ids = self._scorer.graph.words.ids() if self._scorer.graph.words is not None else {}
            word_ids = [ids.get(w, -1) if isinstance(w, str) else w for w in word_ids]
        if not all(isinstance(w, (int, np.integer)) and not isinstance(w, bool) for w in word_ids):
            raise OptionError(f"sequence_posterior: word ids must be integers, got {word_ids!r}")
        if not len(self._raw.final_states) or min(word_ids, default=1) < 1:  # (a word the graph does not have,
            return 0.0  # or <eps>: no word)
        if ("sorted", POSTERIOR_ARCS) not in self._fsts:
            self._fsts["sorted", POSTERIOR_ARCS] = self._fst(self.ilabel, POSTERIOR_ARCS, key="plain").copy().arcsort(
                "olabel")
        f = self._fsts["sorted", POSTERIOR_ARCS]
        total = _distances(fst.shortestdistance(f, reverse=True), f.num_states())[0]
        paths = fst.compose(f, linear_acceptor(tuple(word_ids), POSTERIOR_ARCS))
        if paths.start() < 0 or paths.num_states() == 0:
            return 0.0
        mass = _distances(fst.shortestdistance(paths, reverse=True), paths.num_states())[paths.start()]
        return float(min(np.exp(total - mass), 1.0))

    # ---------------------------------------------------------------- N-best

    def _words_fst(self, epsilons: bool = False):
        """The word acceptor: the lattice's paths as their words (epsilons: with an epsilon for
        each arc without a word, else without them).  Not determinized: on a lattice where
        words sit on many arcs, each word sequence once is exponentially many states (a
        1,321-arc lattice of 13 frames took more than 4 GB)."""
        key = "words-eps" if epsilons else "words"
        if (key, "tropical") not in self._fsts:
            f = self._fst(np.arange(1, self.num_arcs + 1, dtype=np.int32), "tropical", key="links").copy()
            f.project("output")
            if not epsilons:
                f.rmepsilon()
            self._fsts[key, "tropical"] = f
        return self._fsts[key, "tropical"]

    def nbest(self, n: int) -> list[DecodeResult]:
        """Up to n distinct word sequences, best first, each as the DecodeResult of its best
        path in the lattice (the first is the decode's best path)."""
        import pywrapfst as fst

        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
            raise OptionError(f"nbest={n!r}: must be an integer >= 1")
        if not len(self._raw.final_states):
            return []
        # distinct sequences, from a determinization made as far as the n best need (more: all)
        sequences = _paths(fst.shortestpath(self._words_fst(), nshortest=int(min(n, 2**31 - 1)), unique=True))
        listed = [words for words, _ in sorted(sequences, key=lambda p: p[1])]
        best = self._best.word_ids if self._best is not None else None
        if best is not None and (best in listed or len(listed) == n):  # (absent from a full list: more tie with it)
            listed = [best] + [words for words in listed if words != best][:n - 1]
        results = [dataclasses.replace(self._best, lattice=self, nbest=()) if words == best else
                   self._best_path_result(words) for words in listed]
        # in the order of their costs as reported (summed in float64: OpenFST's order, of float32 sums,
        # differed from it by 1e-7 in places); the first stays the decode's best
        return results[:1] + sorted(results[1:], key=_COST)

    def _best_path_result(self, words: tuple[int, ...]) -> DecodeResult:
        """The DecodeResult of the best lattice path that outputs `words`."""
        import pywrapfst as fst

        links = self._fst(np.arange(1, self.num_arcs + 1, dtype=np.int32), "tropical", key="links")
        if ("links-sorted", "tropical") not in self._fsts:
            self._fsts["links-sorted", "tropical"] = links.copy().arcsort("olabel")
        best = fst.shortestpath(fst.compose(self._fsts["links-sorted", "tropical"], linear_acceptor(words)))
        order = np.asarray(_chain(best), np.int64) - 1  # link indices in path order
        return self._result_of(order)

    def _result_of(self, order: np.ndarray) -> DecodeResult:
        """The DecodeResult of the path made of these lattice arcs."""
        raw, sc = self._raw, self._scorer
        arcs = raw.arc[order]
        steps = raw.step[raw.dst[order]]
        part: PathPart = path_part(sc.graph, arcs, steps, np.zeros(0, np.float32))
        acoustic = float(raw.acoustic_cost[order].astype(np.float64).sum())
        result = part_result(sc.graph, part, acoustic, raw.reached_final, sc.num_frames, sc.boost, sc.phrases,
                             sc.rescorer)
        return dataclasses.replace(result, lattice=self)  # (its confidences are read in this lattice)

    # ---------------------------------------------------------------- rescoring

    def rescored(self, rescorer, beam: float) -> tuple[Lattice, DecodeResult]:
        """This lattice rescored with a bigger LM (lm.Rescorer): each path's graph LM score
        replaced by the big LM's, word by word as on-the-fly rescoring does it, by composing
        the lattice with the LM's states (a state of the result is a state of this lattice
        and a big-LM history, expanded within `beam` + COMPOSE_MARGIN of the best estimate so
        far); pruned again to the paths within `beam` of the new best.
        Returns (the rescored lattice, the DecodeResult of its best path)."""
        from wfst.kernels.lattice import rescore_lattice

        if not _number(beam) or not beam >= 0:
            raise OptionError(f"rescored: beam={beam!r} must be a number >= 0 (the paths kept within it of the best)")
        raw, sc = self._raw, self._scorer
        margin = float(beam) + COMPOSE_MARGIN
        while True:
            status, state_of, src, dst, arc, lm_cost, finals, final_costs, path, best, _ = rescore_lattice(
                raw.src, raw.dst, self.olabel, raw.graph_cost + raw.acoustic_cost, raw.arc, self.num_states,
                raw.final_states, raw.final_costs, raw.reached_final, rescorer.context, float(beam), margin)
            if status or best < math.inf or margin == math.inf or not len(raw.final_states):
                break
            # the big LM made every path dearer than the estimate (the small LM's) by more than the
            # margin, so that the pruning left none: wider, at last the whole composition
            margin = 4 * margin if 4 * margin <= MAX_COMPOSE_MARGIN else math.inf
        if status:
            raise WfstError("the lattice has a cycle: the graph has an epsilon cycle of zero or negative cost")
        new = RawLattice(src.astype(np.int32), dst.astype(np.int32), raw.arc[arc],
                         (raw.graph_cost[arc] + lm_cost).astype(np.float32), raw.acoustic_cost[arc],
                         raw.step[state_of], finals.astype(np.int32), final_costs,
                         raw.reached_final)
        lattice = Lattice(new, dataclasses.replace(sc, rescorer=rescorer))
        lattice._best = lattice._result_of(path)
        return lattice, lattice._best

    # ---------------------------------------------------------------- the oracle

    def oracle(self, reference) -> tuple[int, tuple[str, ...]]:
        """(the fewest word errors of any path of the lattice against `reference` (a string, or
        a sequence of words or word ids), the words of such a path): the lattice's oracle, by edit distance
        over its word acceptor (unknown reference words never match).  Without words.txt words
        are their ids, as in the results ("17")."""
        words = self._scorer.graph.words
        if isinstance(reference, (bytes, bytearray)) or not isinstance(reference, str) and not hasattr(
                reference, "__iter__"):
            raise OptionError(f"oracle: the reference must be a string or a sequence of words, not {reference!r}")
        ref = split_fields(reference) if isinstance(reference, str) else list(reference)
        odd = next((w for w in ref if not isinstance(w, (str, int, np.integer)) or isinstance(w, bool)), None)
        if odd is not None:  # (a float counted as a word error)
            raise OptionError(f"oracle: reference words must be words (str) or word ids (int), got {odd!r}")
        if words is not None:  # (ids taken too, as a result's word_ids)
            ids = words.ids()
            ref_ids = np.array([(int(w) if 0 < w < len(words) else -1) if isinstance(w, (int, np.integer))
                                and not isinstance(w, bool) else ids.get(w, -1) for w in ref], np.int64)
        else:
            ref_ids = np.array([int(w) if str(w).isdecimal() and str(w).isascii() else -1 for w in ref], np.int64)
        if not len(self._raw.final_states):
            return len(ref), ()
        f = self._words_fst(epsilons=True).copy()
        f.topsort()  # the lattice is acyclic: states renumbered in topological order
        S, R = f.num_states(), len(ref)
        _check_oracle_room(S, R)
        steps = np.arange(R + 1, dtype=np.int32)
        # per (state, reference position): the fewest errors, and how it was reached: a deletion
        # (the same state, one position back), an arc that stays (an inserted word or an
        # epsilon) or one that moves (a match or a substitution) from `came` with `word`
        cost = np.full((S, R + 1), np.iinfo(np.int32).max // 2, np.int32)
        how = np.zeros((S, R + 1), np.int8)
        came = np.full((S, R + 1), -1, np.int32)
        word = np.zeros((S, R + 1), np.int32)
        cost[f.start()] = steps
        how[f.start(), 1:] = _DELETED
        for s in range(S):
            row = cost[s]
            # deletions (reference words no lattice word stands for): row[i] = min over j <= i of
            # row[j] + i - j, in one pass; a position they improve came from the one before
            deleted = steps + np.minimum.accumulate(row - steps)
            fewer = deleted < row
            row[fewer] = deleted[fewer]
            how[s][fewer] = _DELETED
            for a in f.arcs(s):
                t, w = a.nextstate, a.olabel
                stay = row + (1 if w else 0)  # an inserted word (or an epsilon)
                better = stay < cost[t]
                cost[t][better], how[t][better], came[t][better], word[t][better] = stay[better], _STAYED, s, w
                if w and R:
                    move = row[:-1] + (ref_ids != w)  # the word matches or substitutes reference word i
                    better = move < cost[t][1:]
                    cost[t][1:][better], how[t][1:][better] = move[better], _MOVED
                    came[t][1:][better], word[t][1:][better] = s, w
        finals = [s for s in range(S) if float(f.final(s)) != float("inf")]
        end = min(finals, key=lambda s: cost[s, R])
        errors = int(cost[end, R])
        path, s, i = [], end, R
        while how[s, i]:
            if how[s, i] != _DELETED and word[s, i]:
                path.append(int(word[s, i]))
            s, i = (s, i - 1) if how[s, i] == _DELETED else (int(came[s, i]), i - (how[s, i] == _MOVED))
        names = tuple(words[w] if words is not None else str(w) for w in reversed(path))
        return errors, names


_COST = operator.attrgetter("cost")
_DELETED, _STAYED, _MOVED = 1, 2, 3  # how an oracle cell was reached (0: the start's, or not at all)
_ORACLE_CELL_BYTES = 13  # its errors, from where (int32 each), how (int8) and the word (int32)


def _check_oracle_room(states: int, reference_words: int) -> None:
    """Refuse an oracle whose table (the word acceptor's states x the reference's positions)
    would not fit in the free host memory, before it is made (a NumPy MemoryError, or the
    machine swapping, after minutes)."""
    from .errors import DecoderMemoryError
    from .memory import USABLE_SHARE, available_host_bytes

    need = states * (reference_words + 1) * _ORACLE_CELL_BYTES
    free = available_host_bytes()
    if free is not None and need > USABLE_SHARE * free:
        raise DecoderMemoryError(f"oracle: the lattice's {states:,} word states x the reference's "
                                 f"{reference_words + 1:,} positions need about {need / 2**30:.1f} GiB of host memory, "
                                 f"{USABLE_SHARE * free / 2**30:.1f} GiB is available; keep a smaller lattice "
                                 f"(lattice_beam) or score shorter utterances")


def _word_windows(result: DecodeResult) -> tuple[np.ndarray, np.ndarray]:
    """The first and last frame (inclusive) where each word's label may sit (word_confidences)."""
    from .errors import GraphFormatError

    try:
        times = np.asarray(result.word_times, np.int64)
        ends = np.concatenate([times[1:, 1], [max(result.num_frames, int(times[-1, 1]))]])
        starts = np.concatenate([[0], (times[:-1, 0] + times[1:, 0]) // 2 + 1])
        return np.minimum(starts, times[:, 0]), ends
    except GraphFormatError:  # no lexicon.txt or T.fst in the graph directory
        at = np.asarray(result.word_frames, np.int64)
        lo = np.concatenate([[0], (at[:-1] + at[1:]) // 2 + 1])
        hi = np.concatenate([(at[:-1] + at[1:]) // 2, [max(result.num_frames, int(at[-1]))]])
        return lo, hi


def _distances(weights, n: int) -> np.ndarray:
    """shortestdistance's weights as float64 costs (+inf where a state is not reached)."""
    d = np.full(n, np.inf)
    values = [float(w) for w in weights]
    d[:len(values)] = values
    return d


def _chain(f) -> list[int]:
    """The input labels along a single-path FST (epsilons left out)."""
    return [a.ilabel for a in path_arcs(f) if a.ilabel]


def _paths(f) -> list[tuple[tuple[int, ...], float]]:
    """Each path of shortestpath(nshortest=n)'s output (paths share only the start):
    (output labels without epsilons, total cost)."""
    out = []
    start = f.start()
    if start < 0:
        return out
    zero = float("inf")
    nodes = [(0, -1)]  # (output label, parent node): the labels so far, shared along a path
    todo = [(start, 0, 0.0)]  # (state, its node, cost so far): a loop, not a recursion (paths of 10^4+ words)
    while todo:
        s, node, cost = todo.pop()
        final = float(f.final(s))
        if final != zero:
            labels, k = [], node
            while k > 0:
                labels.append(nodes[k][0])
                k = nodes[k][1]
            out.append((tuple(reversed(labels)), cost + final))
        for a in reversed(list(f.arcs(s))):  # reversed: popped in the arcs' order
            child = node
            if a.olabel:
                nodes.append((a.olabel, node))
                child = len(nodes) - 1
            todo.append((a.nextstate, child, cost + float(a.weight)))
    return out
