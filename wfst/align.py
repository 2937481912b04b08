"""Word times: where each word of a decoded path starts and ends, in frames.

A path through TLG reads one token per frame, but the words it outputs are not where
their tokens are: determinizing L ∘ G delays a word label until the word is certain,
which can be after its last token (``the`` or ``then``?).  So the frames are aligned
again, in OpenFST, with the graph's own topology and lexicon:

    frames  ∘  T  ∘  (the path's words spelled with the lexicon)

T turns the frame tokens into a token sequence (its repeat and blank rules are the
graph's); the second FST spells the path's words in order, with the word-boundary unit
between them where the graph has one.  Its word labels sit on each spelling's first
token, which T outputs on that token's first frame: that frame is where the word
starts.  A word ends at the last frame before the next word's start that reads one of
its tokens: blank and word-boundary frames after it are not part of it.

The graph directory keeps what this needs: ``lexicon.txt`` (the spellings, without
disambiguation symbols), ``T.fst`` (T without disambiguation loops) and, in graph.json,
the word-boundary unit.
"""
from __future__ import annotations

import collections
import json
import weakref

import numpy as np

from .errors import GraphFormatError, InputFileError
from .files import read_lines, split_fields
from .graph import INFO_NAME, LEXICON_NAME, TOPOLOGY_NAME, read_fst
from .symbols import ilabel_of_column

_ALIGNERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def word_aligner(graph) -> WordAligner:
    """The WordAligner of a graph loaded from a graph directory (built once per graph)."""
    aligner = _ALIGNERS.get(graph)
    if aligner is None:
        aligner = _ALIGNERS[graph] = WordAligner.of_graph(graph)
    return aligner


class WordAligner:
    """Word (start, end) frames of paths through one graph (see the module's doc)."""

    def __init__(self, topology, tokens, words, spellings, separator: str | None):
        """topology: T (pywrapfst, no disambiguation loops); spellings: (word, tokens) pairs."""
        import pywrapfst as fst

        self._T = topology.copy().arcsort("ilabel")
        self._T_open = self._T.copy()  # every state final: for paths that reached no final state
        one = fst.Weight.one(self._T.weight_type())
        for s in self._T_open.states():
            self._T_open.set_final(s, one)
        ilabels = tokens.ilabels()
        word_ids = words.ids()
        self._words = words.symbols  # (for messages)
        self._spellings: dict[int, list[tuple[int, ...]]] = collections.defaultdict(list)
        for word, pron in spellings:
            if word in word_ids:
                self._spellings[word_ids[word]].append(tuple(ilabels[t] for t in pron))
        self._separator = ilabels[separator] if separator is not None else None
        self._blank = tokens.blank_ilabel
        self._all_tokens = [ilabel_of_column(c) for c in range(tokens.num_columns) if c != tokens.blank]

    @classmethod
    def of_graph(cls, graph) -> WordAligner:
        directory = graph.directory
        why = None
        if directory is None:
            why = "it was not loaded from a graph directory"
        elif graph.info.get("fingerprint") and _fingerprint(directory) != graph.info["fingerprint"]:
            raise GraphFormatError(f"word times read the graph's lexicon and topology from {directory}, which was "
                                   f"built again or removed since the graph was loaded: its files are not this "
                                   f"graph's; load the graph again")
        elif missing := [name for name in (LEXICON_NAME, TOPOLOGY_NAME) if not (directory / name).is_file()]:
            why = (f"{directory} has no {' and no '.join(missing)} (a graph built before word times, or not by "
                   f"wfst-make-graph)")
        elif graph.words is None:
            why = f"{directory} has no words.txt"
        if why is not None:
            raise GraphFormatError(f"word times need the graph's lexicon and topology, but {why}; "
                                   f"build the graph again with wfst-make-graph (make graph)")
        separator = graph.info.get("word_boundary")
        known = set(graph.tokens.symbols)
        spellings = []
        for no, line in enumerate(read_lines(directory / LEXICON_NAME, "lexicon"), start=1):
            fields = split_fields(line)
            if len(fields) < 2 or not known.issuperset(fields[1:]):
                raise InputFileError(directory / LEXICON_NAME, no, f"not a spelling in the graph's tokens: {line!r}")
            spellings.append((fields[0], fields[1:]))
        return cls(read_fst(directory / TOPOLOGY_NAME), graph.tokens, graph.words, spellings, separator)

    def word_times(self, frame_tokens, word_ids, complete: bool = True) -> tuple[tuple[int, int], ...]:
        """(start, end) frame of each word, both inclusive.

        frame_tokens: the token (input label) each frame of the path reads; word_ids: the
        words the path outputs; complete: the path ended in a final state (else its last
        word may be cut short, and tokens after its last word belong to a word not output
        yet)."""
        import pywrapfst as fst

        frame_tokens = np.asarray(frame_tokens, np.int64)
        word_ids = [int(w) for w in word_ids]
        if not word_ids:
            return ()
        frames = linear_acceptor(frame_tokens.tolist())
        spelled = self._spell(word_ids, complete)
        best = fst.shortestpath(fst.compose(fst.compose(frames, self._T if complete else self._T_open)
                                            .arcsort("olabel"), spelled))
        if best.start() == -1:
            named = " ".join(self._words[w] if 0 <= w < len(self._words) else str(w) for w in word_ids)
            raise GraphFormatError(f"the path's frames do not spell its words {named!r} with the graph's "
                                   f"lexicon and topology: {LEXICON_NAME} does not belong to this graph")
        bounds = _label_frames(best, len(word_ids) + 1, len(frame_tokens))  # + where the unlisted rest starts
        voiced = (frame_tokens != self._blank) & (frame_tokens != (self._separator or -1))
        times = []
        for k in range(len(word_ids)):
            inside = np.flatnonzero(voiced[bounds[k]:bounds[k + 1]])
            times.append((bounds[k], bounds[k] + int(inside[-1]) if len(inside) else bounds[k]))
        return tuple(times)

    def _spell(self, word_ids: list[int], complete: bool):
        """The words in order, each by any of its spellings; the output label of a
        spelling's first arc is the word's position + 1."""
        import pywrapfst as fst

        f = fst.VectorFst()
        one = fst.Weight.one(f.weight_type())
        sep = self._separator

        def arc(src, ilab, olab, dst, weight=one):
            f.add_arc(src, fst.Arc(ilab, olab, weight, dst))

        home = f.add_state()
        f.set_start(home)
        if sep is not None:
            arc(home, sep, 0, home)  # optional before the first word
        for k, w in enumerate(word_ids):
            if w not in self._spellings:
                raise GraphFormatError(f"word id {w} has no spelling in the graph's {LEXICON_NAME}")
            end = f.add_state()
            for pron in self._spellings[w]:
                src = home
                for i, lab in enumerate(pron):
                    dst = end if i == len(pron) - 1 else f.add_state()
                    arc(src, lab, k + 1 if i == 0 else 0, dst)
                    if not complete:
                        f.set_final(dst, one)  # cut short inside the word
                    src = dst
            home = end
            if sep is not None:  # required between words, optional after the last
                after = f.add_state()
                arc(end, sep, 0, after)
                arc(after, sep, 0, after)
                if k < len(word_ids) - 1:
                    home = after
                else:
                    f.set_final(after, one)
        f.set_final(home, one)
        if not complete:  # tokens of a word the path has not output yet, at a cost so that
            rest = f.add_state()  # the listed words take every frame they can
            f.set_final(rest, one)
            penalty = fst.Weight(f.weight_type(), 1.0)
            for s in [home] + ([after] if sep is not None else []):
                for lab in self._all_tokens:
                    arc(s, lab, len(word_ids) + 1, rest, penalty)
            for lab in self._all_tokens:
                arc(rest, lab, 0, rest, penalty)
        return f.arcsort("ilabel")


def linear_acceptor(labels, semiring: str = "tropical"):
    """A linear acceptor of a label sequence (words, or a path's frame tokens)."""
    import pywrapfst as fst

    f = fst.VectorFst("standard" if semiring == "tropical" else semiring)  # ("log" or "log64")
    one = fst.Weight.one(f.weight_type())
    s = f.add_state()
    f.set_start(s)
    for w in labels:
        t = f.add_state()
        f.add_arc(s, fst.Arc(w, w, one, t))
        s = t
    f.set_final(s)
    return f


def path_arcs(path):
    """The arcs of a single-path FST (a shortest path's), in order."""
    s = path.start()
    while True:
        arcs = list(path.arcs(s))
        if not arcs:
            return
        yield arcs[0]
        s = arcs[0].nextstate


def _label_frames(path, n: int, default: int) -> list[int]:
    """The frame of each output label 1..n on a single-path FST (shortestpath's), `default`
    for a label it does not output."""
    starts = [default] * n
    frame = 0
    for a in path_arcs(path):
        if a.olabel:
            starts[a.olabel - 1] = frame
        if a.ilabel:
            frame += 1
    return starts


def _fingerprint(directory) -> str | None:
    """The build fingerprint a graph directory's graph.json holds now (None: none readable)."""
    try:
        return json.loads((directory / INFO_NAME).read_text()).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return None
