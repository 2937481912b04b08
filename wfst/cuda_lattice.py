"""device="cuda" lattices: the links that kernels.cuda's lattice kernels store on the GPU,
taken to the host chunk by chunk and pruned there, as the CPU backend prunes its own.

The search stores the links of chunk k (prune_interval steps) in half k % 2 of
groups.StoredLinks.  At the end of chunk k its half is copied to pinned host memory on a
side stream, queued after the chunk's kernels, while the GPU goes on with chunk k + 1 in
the other half; chunk k + 2, which writes the half again, waits for that copy on the
GPU, not on the host.  The host meanwhile prunes chunk k - 1 (kernels.lattice:
take_chunk, then PruneForwardLinks at the frontier), so the links held on the host stay
near the size of the final lattice; at the end the last chunks and the last step's final
costs come over and the lattice is pruned a last time (close_links).  In the simulator
the copies are plain NumPy copies.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from wfst.kernels import lattice as kl
from wfst.kernels.constants import OK
from wfst.kernels.groups import DeviceLinks, StoredLinks

from .cuda_arrays import SIMULATOR, to_host
from .lattice import RawLattice

HALF_FIELDS = StoredLinks._fields


def device_links(xp, B: int, links: int, backpointers: int, tokens: int, beam: float, interval: int, fills: list):
    """The device arrays of a batch's lattice links (xp arrays; `fills` gets each with the
    value that resets it): `links` stored links per utterance and half, a quarter of that
    listed per frame."""
    i32, i64, f32 = np.int32, np.int64, np.float32

    def zeros(shape, dtype):
        a = xp.zeros(shape, dtype)
        fills.append((a, 0))
        return a

    R, S = max(links // 4, 16), links
    half = StoredLinks(*(zeros((2, B, S), d) for d in (i32, i32, i32, f32, f32, f32)), zeros((2, B), i64),
                       zeros((2, B, interval + 1), i64), zeros((2, B, interval + 1), i64))
    return DeviceLinks(*(zeros((B, R), d) for d in (i32, i32, i32, f32, f32)), zeros(B, i32), half,
                       zeros((B, backpointers), f32), zeros((B, tokens), f32), zeros((B, tokens), f32),
                       np.float32(beam), np.int64(interval))


class LatticeChunks:
    """The host side of one search's lattices: chunk(k) is what kernels.cuda.search calls
    at the end of each chunk (k = -1: at the end); lattices() then gives each utterance's
    RawLattice (None for those whose search did not end OK)."""

    def __init__(self, lat: DeviceLinks, u, lengths: np.ndarray, links: int, tokens: int, search_stream=None):
        """lat, u: the search's DeviceLinks and Utterances as kernels take them (device views);
        search_stream: the CuPy stream the search runs on (None in the simulator)."""
        self.lat, self.lengths = lat, [int(n) for n in lengths]
        self.status, self.keep, self.reached = u.status, u.keep, u.reached_final
        self.interval = int(lat.interval)
        B = len(self.lengths)
        self.host = [kl.new_links(links, tokens, float(lat.beam), self.interval)._replace(
            block=np.zeros(n + 2, np.int64)) for n in self.lengths]
        for h in self.host:
            h.count[:] = 0
        self.steps = [np.zeros(n + 2, np.int64) for n in self.lengths]
        self.failed = np.zeros(B, bool)
        self.taken = 0  # chunks taken to the host so far
        self.queued = 0  # chunks whose copy is queued
        self.search_stream = search_stream
        self.copies = [None, None]  # what the host reads of each half: its fields and the statuses
        self.done = [None, None]  # the events that end each half's last copy
        if not SIMULATOR:
            import cupy

            self.copy_stream = cupy.cuda.Stream(non_blocking=True)
            self.copies = [[cuda.pinned_array(a.shape[1:], a.dtype) for a in lat.stored] + [
                cuda.pinned_array(self.status.shape, self.status.dtype)] for _ in range(2)]

    # ---------------------------------------------------------------- during the search

    def chunk(self, k: int) -> None:
        last = max(self.lengths) // self.interval if k < 0 else k
        while self.queued <= last:
            self._queue(self.queued)
            self.queued += 1
            if self.queued - self.taken > 1:
                self._take(self.taken)  # the chunk before: its copy is done or nearly so
                self.taken += 1
        if k < 0:
            while self.taken < self.queued:
                self._take(self.taken)
                self.taken += 1

    def _queue(self, k: int) -> None:
        """The copy of chunk k's half (and of the statuses now) to the host."""
        h = k % 2
        fields = [a[h] for a in self.lat.stored] + [self.status]
        if SIMULATOR:
            self.copies[h] = [np.array(a) for a in fields]
            return
        s = self.copy_stream
        s.wait_event(self.search_stream.record())
        queue = cuda.external_stream(s.ptr)
        for out, a in zip(self.copies[h], fields):
            a.copy_to_host(out, stream=queue)
        self.done[h] = s.record()
        other = self.done[1 - h]
        if other is not None:  # chunk k + 1 overwrites the other half: after its copy, on the GPU
            self.search_stream.wait_event(other)

    def _take(self, k: int) -> None:
        """Chunk k's links into each utterance's host links, pruned at the frontier."""
        h = k % 2
        if not SIMULATOR:
            self.done[h].synchronize()
        *half, status = self.copies[h]
        half = StoredLinks(*half)
        first = k * self.interval
        for b, length in enumerate(self.lengths):
            self.failed[b] |= status[b] != OK
            if first > length or self.failed[b]:
                continue
            last = min(first + self.interval - 1, length)
            args = (self.steps[b], first, last, *(a[b] for a in half[:6]), half.count[b], half.block[b],
                    half.steps[b])
            while not kl.take_chunk(self.host[b], *args):
                self.host[b] = _grown(self.host[b], 2 * len(self.host[b].src))
            if last < length:
                kl.prune_at_frontier(self.host[b], self.steps[b], last, self.steps[b][last + 1])

    # ---------------------------------------------------------------- at the end

    def lattices(self) -> list:
        """Each utterance's RawLattice after the search (call after chunk(-1))."""
        status, keep, reached = to_host(self.status), to_host(self.keep), to_host(self.reached)
        alpha, cost = to_host(self.lat.final_alpha), to_host(self.lat.final_cost)
        out = []
        for b, length in enumerate(self.lengths):
            if status[b] != OK or self.failed[b]:
                out.append(None)
                continue
            host, steps = self.host[b], self.steps[b]
            if keep[b] < 0:  # no token survived: no final state (as on the CPU)
                out.append(RawLattice.of(host, steps, np.zeros(0, np.int32), np.zeros(0, np.float32), False))
                continue
            gids, costs = kl.close_links(host, steps, length, alpha[b], cost[b], np.int64(keep[b]))
            out.append(RawLattice.of(host, steps, gids, costs, bool(reached[b])))
        return out


def _grown(lat, size: int):
    """`lat` (kernels.lattice.Links) with room for `size` links and tokens, what it held kept."""
    bigger = kl.new_links(size, len(lat.first), float(lat.beam), int(lat.interval))._replace(block=lat.block,
                                                                                           count=lat.count)
    for name in ("src", "dst", "arc", "graph", "acoustic", "reduced", "alpha", "extra", "fresh"):
        getattr(bigger, name)[:len(getattr(lat, name))] = getattr(lat, name)
    return bigger
