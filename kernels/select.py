"""Exact k-th smallest cost by radix select on the order-preserving uint32 cost keys.

Four passes of an 8-bit histogram over the keys that still share the chosen prefix; no
sort, O(n) per pass.  `radix_digit` and `pick_bin` are the logic both backends share:
the CPU twin below runs the passes in a loop, the CUDA kernel builds each histogram in
shared memory with one block per utterance.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import cost_key, key_cost

RADIX_BITS = 8
RADIX_BINS = 1 << RADIX_BITS
RADIX_PASSES = 32 // RADIX_BITS


@njit(inline="always", cache=True)
def radix_shift(pass_index):
    return np.uint32(32 - RADIX_BITS * (pass_index + 1))


@njit(inline="always", cache=True)
def radix_digit(key, shift):
    return np.int64((key >> shift) & np.uint32(RADIX_BINS - 1))


@njit(inline="always", cache=True)
def matches_prefix(key, prefix, pass_index):
    """Whether `key` agrees with `prefix` on the digits chosen in passes before `pass_index`."""
    if pass_index == 0:
        return True
    keep = np.uint32(32 - RADIX_BITS * pass_index)
    return (key >> keep) == (prefix >> keep)


@njit(inline="always", cache=True)
def pick_bin(hist, k):
    """The bin holding rank k (0-based) of the histogram, and the rank within that bin."""
    for b in range(RADIX_BINS):
        if k < hist[b]:
            return b, k
        k -= hist[b]
    return RADIX_BINS - 1, k  # not reached when k < sum(hist)


@njit(inline="always", cache=True)
def _select(values, n, k, hist, sign):
    """Rank k (0-based) of sign * values[:n], smallest first (k < n); hist: RADIX_BINS counts."""
    prefix = np.uint32(0)
    for p in range(RADIX_PASSES):
        shift = radix_shift(p)
        for b in range(RADIX_BINS):
            hist[b] = 0
        for i in range(n):
            key = cost_key(sign * values[i])
            if matches_prefix(key, prefix, p):
                hist[radix_digit(key, shift)] += 1
        b, k = pick_bin(hist, k)
        prefix |= np.uint32(b) << shift
    return key_cost(prefix)


@njit(nogil=True, cache=True)
def select_cost(costs, n, k, hist):
    """Cost of rank k (0-based) among costs[:n] (k < n), as Kaldi's nth_element would give."""
    return _select(costs, n, k, hist, np.float32(1.0))


@njit(cache=True)
def select_largest(values, k, hist):
    """The value of rank k (0-based) of float32 values, largest first (k < len(values)): a
    plain function, which the CUDA kernels call from one thread too."""
    return -_select(values, len(values), k, hist, np.float32(-1.0))
