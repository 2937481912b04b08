"""Reference paths through a TLG with OpenFST: what a decoder must agree with.

An alignment is one logit column per frame.  ``best_path(tlg, frames)`` is the
shortest path of (frames as a linear FSA) ∘ TLG, computed by OpenFST.
"""
from __future__ import annotations

import pywrapfst as fst

from wfst.symbols import ilabel_of_column


def linear_fsa(labels) -> fst.VectorFst:
    f = fst.VectorFst()
    one = fst.Weight.one(f.weight_type())
    s = f.add_state()
    f.set_start(s)
    for lab in labels:
        n = f.add_state()
        f.add_arc(s, fst.Arc(lab, lab, one, n))
        s = n
    f.set_final(s)
    return f


def ctc_alignment(token_columns, blank: int, topology: str, frames_per_token: int = 2) -> list[int]:
    """A plausible CTC alignment of a token sequence: each token held for some frames,
    blanks between tokens.  `minimal` outputs every non-blank frame, so one frame each."""
    frames = [blank]
    for c in token_columns:
        frames += [c] * (1 if topology == "minimal" else frames_per_token) + [blank]
    return frames


def best_path(tlg, frames) -> tuple[list[int] | None, float | None]:
    """Word ids and graph cost of the best path of TLG that reads `frames`, or (None, None)."""
    A = linear_fsa([ilabel_of_column(c) for c in frames])
    best = fst.shortestpath(fst.compose(A, tlg))
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
