"""Frame-level token pruning (FLToP): which columns of a frame an arc may consume.

Plain ``@numba.njit`` functions that the CPU search and the CUDA kernels share, as in
``common``: both backends prune the same columns bit for bit.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import INF, arc_acoustic_cost
from .select import RADIX_BINS, RADIX_PASSES, select_largest


@njit(cache=True)
def fltop_bounds(log_probs, t, settings, prune, hist):
    """(floor, kth) of frame t: a column keeps a finite cost when its log-probability is at
    least both (column_cost).  Without `prune`, (-inf, -inf): every column does.

    With `prune`, frame-level token pruning (FLToP): only columns among the frame's top_n
    best (ties at the boundary all kept) whose log-probability is within log_rel = log(R)
    of the best get a finite cost.  The blank is exempt from both: it is the column a path
    can always wait on, and pruning it where the graph cannot follow the frame's best
    columns (a word it cannot spell) kills the right path or every path.  Arcs of the other
    columns get +inf and are never expanded.  hist: RADIX_BINS counts (scratch)."""
    V = log_probs.shape[1]
    top_n = settings.top_n if prune else V
    floor = -np.inf
    if prune:
        best = -np.inf
        for c in range(V):
            if log_probs[t, c] > best:
                best = log_probs[t, c]
        floor = best + settings.log_rel
    kth = -np.inf
    if top_n < V:  # the top_n-th largest value, counting ties
        if 2 * top_n * V <= RADIX_PASSES * (V + 2 * RADIX_BINS):  # two reads of the row per value found
            kth = _kth_by_scans(log_probs, t, top_n)
        else:  # a radix select: O(V) however large top_n is
            kth = select_largest(log_probs[t], top_n - 1, hist)
    return floor, kth


@njit(inline="always", cache=True)
def _kth_by_scans(log_probs, t, top_n):
    """The top_n-th largest value of row t, counting ties, one distinct value at a time
    (-inf values stop the count early: every finite column is then within it)."""
    V = log_probs.shape[1]
    kth = np.inf
    remaining = top_n
    while remaining > 0:
        m = -np.inf
        for c in range(V):
            v = log_probs[t, c]
            if v < kth and v > m:
                m = v
        if m == -np.inf:
            break
        for c in range(V):
            if log_probs[t, c] == m:
                remaining -= 1
        kth = m
    return kth


@njit(inline="always", cache=True)
def column_cost(log_probs, t, il, settings, floor, kth):
    """The cost of consuming frame t with input label il (column il - 1), +inf where FLToP's
    bounds (fltop_bounds) prune the column."""
    v = log_probs[t, il - 1]
    if (v >= floor and v >= kth) or il == settings.blank_ilabel:
        return arc_acoustic_cost(log_probs, t, il, settings.acoustic_scale, settings.blank_ilabel,
                                 settings.blank_penalty)
    return INF


@njit(cache=True)
def frame_acoustic_costs(log_probs, t, settings, prune, ac, hist):
    """ac[il] = cost of consuming frame t with input label il, for il = 1..V (ac[0] unused),
    FLToP applied with `prune` (fltop_bounds; hist its scratch)."""
    floor, kth = fltop_bounds(log_probs, t, settings, prune, hist)
    for il in range(1, log_probs.shape[1] + 1):
        ac[il] = column_cost(log_probs, t, il, settings, floor, kth)


@njit(inline="always", cache=True)
def fltop_active(settings, num_columns):
    """Whether FLToP can prune a column at all (else a frame is never expanded twice)."""
    return settings.top_n < num_columns or settings.log_rel > -np.inf
