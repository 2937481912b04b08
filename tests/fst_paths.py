"""Reference paths through a TLG with OpenFST: what a decoder must agree with.

An alignment is one logit column per frame.  ``best_path(tlg, frames)`` is the
shortest path of (frames as a linear FSA) ∘ TLG, computed by OpenFST.
"""
from __future__ import annotations

import pywrapfst as fst

from wfst.align import linear_acceptor
from wfst.symbols import ilabel_of_column


def linear_fsa(labels) -> fst.VectorFst:
    return linear_acceptor(labels)


def ctc_alignment(token_columns, blank: int, topology: str, frames_per_token: int = 2) -> list[int]:
    """A plausible CTC alignment of a token sequence: each token held for some frames,
    blanks between tokens.  `minimal` outputs every non-blank frame, so one frame each."""
    frames = [blank]
    for c in token_columns:
        frames += [c] * (1 if topology == "minimal" else frames_per_token) + [blank]
    return frames


def best_path(tlg, frames) -> tuple[list[int] | None, float | None]:
    """Word ids and graph cost of the best path of TLG that reads `frames`, or (None, None)."""
    return _shortest_path(linear_fsa([ilabel_of_column(c) for c in frames]), tlg)


def _shortest_path(acceptor, tlg) -> tuple[list[int] | None, float | None]:
    """Word ids and cost of OpenFST's shortest path of acceptor ∘ TLG, or (None, None)."""
    best = fst.shortestpath(fst.compose(acceptor, tlg))
    if best.start() < 0:
        return None, None
    zero = fst.Weight.zero(best.weight_type())
    words, cost, s = [], 0.0, best.start()
    while best.final(s) == zero:
        (arc,) = list(best.arcs(s))
        cost += float(arc.weight)
        if arc.olabel:
            words.append(arc.olabel)
        s = arc.nextstate
    return words, cost + float(best.final(s))


def emission_fsa(log_probs, acoustic_scale: float = 1.0) -> fst.VectorFst:
    """A (T, V) matrix of log-posteriors as an acceptor: frame t reads column c at cost
    -acoustic_scale * logp[t, c] (input label c + 1, as in TLG); logp = -inf gives no arc."""
    f = fst.VectorFst()
    states = [f.add_state() for _ in range(len(log_probs) + 1)]
    f.set_start(states[0])
    for t, row in enumerate(log_probs):
        for c, lp in enumerate(row):
            if lp == float("-inf"):
                continue
            lab = ilabel_of_column(c)
            f.add_arc(states[t], fst.Arc(lab, lab, fst.Weight(f.weight_type(), -acoustic_scale * float(lp)),
                                         states[t + 1]))
    f.set_final(states[-1])
    return f


def shortest_decode(tlg, log_probs, acoustic_scale: float = 1.0) -> tuple[list[int] | None, float | None]:
    """Word ids and total cost of OpenFST's shortest path of (emissions ∘ TLG): exact decoding."""
    return _shortest_path(emission_fsa(log_probs, acoustic_scale), tlg)
