"""The lexicon-free CTC beam search (kernels.beam) on the GPU, for a batch of utterances.

One kernel per frame step, one block per utterance, the frame read from device memory
(`clock`, advanced by tick_kernel) so that a step is the same launches every frame and
can be captured once as a CUDA graph.  A block scores its hypotheses' beam x V
candidates, as beam.search does, but all of them (no early exit: a GPU thread per
candidate is cheaper than the CPU's sorted columns):

    1. every candidate's cost (the token LM's backoff resolved per candidate, as
       NGPU-LM's advance does for a whole vocabulary), and the frame's best
    2. candidates within beam_threshold of the best recombine by (prefix hash, last
       label) in an open-addressing table: atomicCAS inserts the key, atomicMin keeps
       the smallest pack(cost, candidate index), which is the CPU's choice of argmin
    3. each key's winner is listed; radix select (8 passes over the 64-bit packed
       values) finds the beam_size-th smallest, and the winners up to it are ranked
       (a count of the smaller ones: at most beam_size of them) into the next beam
    4. the winners empty their table slots for the next frame

The result is the CPU's exactly: the same candidates and costs in the same float32
operations, the same recombination and the same order.  The end-of-sentence costs and
the order of the last beam are added on the host (beam.close_beam), where the
backpointers are traced.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import config, cuda, float32, int32, int64, uint64

from .beam import _extend, _key, table_size
from .common import INF, automaton_arrive, automaton_locate, automaton_step, hash_slot, pack, packed_arc, packed_cost
from .constants import EMPTY_KEY, MAX_PACKED
from .select import RADIX_BINS, pick_bin

if config.ENABLE_CUDASIM:
    @cuda.jit(device=True)
    def _product(a, b):
        return float32(a * b)
else:
    from numba.cuda import libdevice

    @cuda.jit(device=True)
    def _product(a, b):
        """a x b rounded on its own: NVVM would fuse it with the sum it feeds into an FMA,
        whose single rounding the CPU's float32 operations do not make."""
        return libdevice.fmul_rn(a, b)


class BeamBuffers(NamedTuple):
    """The hypotheses of two consecutive frames (kernels.beam.Beam's fields), (2, B, K)
    each: the frame step t reads buffer t % 2 and writes the other."""

    cost: np.ndarray
    last: np.ndarray
    hash: np.ndarray
    lm: np.ndarray
    pb: np.ndarray
    acoustic: np.ndarray
    lm_cost: np.ndarray
    boost: np.ndarray
    count: np.ndarray  # int32 (2, B): live hypotheses


class BeamBatchWork(NamedTuple):
    """A batch's search: its lengths and phrase rows, backpointers and scratch."""

    lengths: np.ndarray  # int32 (B,)
    pb_row: np.ndarray  # int32 (B,): the utterance's row of the phrase automata (-1: no phrases)
    parents: np.ndarray  # int32 (B, T, K)
    labels: np.ndarray  # int32 (B, T, K): the token emitted, or -2 - the column read (beam.search's)
    cand_cost: np.ndarray  # float32 (B, K * V): candidate k * V + v's cost
    cand_slot: np.ndarray  # int32 (B, K * V): its key's table slot (those within the threshold)
    table_key: np.ndarray  # int64 (B * H): (prefix hash, last label) keys, EMPTY_KEY when free
    table_packed: np.ndarray  # uint64 (B * H): the smallest pack(cost, candidate) of each key
    win_packed: np.ndarray  # uint64 (B, K * V): the listed winners
    win_slot: np.ndarray  # int32 (B, K * V): their table slots
    kept: np.ndarray  # uint64 (B, K): the winners kept, in no order


def new_buffers(xp, B: int, K: int) -> BeamBuffers:
    def z(dtype):
        return xp.zeros((2, B, K), dtype)

    return BeamBuffers(z(np.float32), z(np.int32), z(np.uint64), z(np.int32), z(np.int32), z(np.float32),
                       z(np.float32), z(np.float32), xp.zeros((2, B), np.int32))


def new_work(xp, lengths: np.ndarray, pb_row: np.ndarray, T: int, K: int, V: int) -> BeamBatchWork:
    B = len(lengths)
    H = table_size(K, V)
    return BeamBatchWork(xp.asarray(lengths.astype(np.int32)), xp.asarray(pb_row.astype(np.int32)),
                         xp.zeros((B, max(T, 1), K), np.int32), xp.full((B, max(T, 1), K), -1, np.int32),
                         xp.zeros((B, K * V), np.float32), xp.zeros((B, K * V), np.int32),
                         xp.full(B * H, EMPTY_KEY, np.int64),
                         xp.full(B * H, MAX_PACKED, np.uint64), xp.zeros((B, K * V), np.uint64),
                         xp.zeros((B, K * V), np.int32), xp.zeros((B, K), np.uint64))


@cuda.jit(device=True)
def _lm_cost(lm, state, v):
    """(cost, next state) of column v in LM state `state`: kernels.beam.lm_row's entry."""
    cost, pos, s = automaton_locate(lm.automata, 0, state, lm.label[v])
    if pos < 0:
        return INF, state
    return automaton_arrive(cost, pos, s, lm.automata.payload[0, pos])


@cuda.jit(device=True)
def _extends(beams, cur, b, k, v, blank):
    """Whether hypothesis k reading column v extends its prefix (not a blank, not a repeat)."""
    return not (v == blank or v == beams.last[cur, b, k])


@cuda.jit(device=True)
def _candidate(beams, cur, b, k, v, a, settings, lm, use_lm, pb, row):
    """Cost of hypothesis k reading column v (acoustic cost a), in beam.search's float32
    operations."""
    c = float32(beams.cost[cur, b, k] + a)
    if not _extends(beams, cur, b, k, v, settings.blank):
        return c
    if use_lm:
        c = float32(c + _product(settings.lm_weight, _lm_cost(lm, beams.lm[cur, b, k], v)[0]))
    c = float32(c - settings.insertion)
    if row >= 0:
        c = float32(c + automaton_step(pb, row, beams.pb[cur, b, k], v)[0])
    return c


@cuda.jit(device=True)
def _insert(table_key, base, mask, key):
    """The slot of `key` in the table at `base`, inserted (atomicCAS) if new."""
    slot = hash_slot(key, mask)
    while True:
        old = cuda.atomic.cas(table_key, base + slot, int64(EMPTY_KEY), key)
        if old == key or old == EMPTY_KEY:
            return slot
        slot = (slot + 1) & mask


@cuda.jit(device=True)
def _candidate_slot(beams, cur, b, i, V, blank, table_key, base, mask):
    """The table slot of candidate i's key (its prefix hash, its last label), inserted if new."""
    k = i // V
    v = i - k * V
    h = beams.hash[cur, b, k]
    if _extends(beams, cur, b, k, v, blank):
        h = uint64(_extend(h, v))  # (the simulator's njit call returns a Python int)
    return _insert(table_key, base, mask, _key(h, v))


@cuda.jit(device=True)
def _block_select_packed(keys, b, n, k, hist, sh_u64, sh_i64):
    """The rank-k (0-based) value of keys[b, :n] (distinct uint64): radix select, 8-bit
    digits from the top, by the whole block."""
    tid = cuda.threadIdx.x
    nthreads = cuda.blockDim.x
    if tid == 0:
        sh_u64[0] = uint64(0)
        sh_i64[0] = k
    cuda.syncthreads()
    for p in range(8):
        shift = uint64(56 - 8 * p)
        for i in range(tid, RADIX_BINS, nthreads):
            hist[i] = 0
        cuda.syncthreads()
        prefix = sh_u64[0]
        for j in range(tid, n, nthreads):
            key = keys[b, j]
            if p == 0 or (key >> (shift + uint64(8))) == (prefix >> (shift + uint64(8))):
                cuda.atomic.add(hist, int64((key >> shift) & uint64(RADIX_BINS - 1)), 1)
        cuda.syncthreads()
        if tid == 0:
            bin_, rank = pick_bin(hist, sh_i64[0])
            sh_i64[0] = rank
            sh_u64[0] = prefix | (uint64(bin_) << shift)
        cuda.syncthreads()
    return sh_u64[0]


@cuda.jit
def beam_init_kernel(clock, beams, settings, lm):
    """Each utterance's start: one hypothesis, the empty prefix after a blank, in buffer 0;
    the clock at frame 0."""
    b = cuda.grid(1)
    if b == 0:
        clock[0] = 0
    if b < beams.count.shape[1]:
        beams.count[0, b] = 1
        beams.cost[0, b, 0] = 0.0
        beams.last[0, b, 0] = settings.blank
        beams.hash[0, b, 0] = uint64(0)
        beams.lm[0, b, 0] = lm.start
        beams.pb[0, b, 0] = 0
        beams.acoustic[0, b, 0] = 0.0
        beams.lm_cost[0, b, 0] = 0.0
        beams.boost[0, b, 0] = 0.0


@cuda.jit
def beam_step_kernel(clock, beams, work, settings, lm, use_lm, pb, log_probs):
    """Frame step clock[0] of utterance blockIdx.x (see the module doc)."""
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nthreads = cuda.blockDim.x
    t = clock[0]
    if t >= work.lengths[b]:
        return
    cur = t % 2
    nxt = 1 - cur
    K = settings.beam_size
    V = log_probs.shape[2]
    row = work.pb_row[b]
    n = beams.count[cur, b] * V
    H = work.table_key.shape[0] // work.lengths.shape[0]
    base = b * H
    mask = H - 1
    sh_best = cuda.shared.array(1, float32)
    sh_n = cuda.shared.array(2, int32)  # winners listed, winners kept
    sh_u64 = cuda.shared.array(1, uint64)
    sh_i64 = cuda.shared.array(1, int64)
    hist = cuda.shared.array(RADIX_BINS, int32)
    if tid == 0:
        sh_best[0] = INF
        sh_n[0] = 0
        sh_n[1] = 0
    cuda.syncthreads()
    # 1. every candidate's cost, and the best
    best = INF
    for i in range(tid, n, nthreads):
        k = i // V
        v = i - k * V
        c = _candidate(beams, cur, b, k, v, float32(-log_probs[b, t, v]), settings, lm, use_lm, pb, row)
        work.cand_cost[b, i] = c
        best = min(best, c)
    cuda.atomic.min(sh_best, 0, best)
    cuda.syncthreads()
    limit = float32(sh_best[0] + settings.threshold)
    # 2. recombination: each key's smallest pack(cost, candidate)
    for i in range(tid, n, nthreads):
        c = work.cand_cost[b, i]
        if c <= limit and c < INF:
            slot = _candidate_slot(beams, cur, b, i, V, settings.blank, work.table_key, base, mask)
            work.cand_slot[b, i] = slot
            cuda.atomic.min(work.table_packed, base + slot, pack(c, i))
    cuda.syncthreads()
    # 3. list the winners, select the best K of them
    for i in range(tid, n, nthreads):
        c = work.cand_cost[b, i]
        if c <= limit and c < INF:
            slot = work.cand_slot[b, i]
            packed = pack(c, i)
            if work.table_packed[base + slot] == packed:
                j = cuda.atomic.add(sh_n, 0, 1)
                work.win_packed[b, j] = packed
                work.win_slot[b, j] = slot
    cuda.syncthreads()
    m = sh_n[0]
    kth = MAX_PACKED
    if m > K:
        kth = _block_select_packed(work.win_packed, b, m, K - 1, hist, sh_u64, sh_i64)
    for j in range(tid, m, nthreads):
        packed = work.win_packed[b, j]
        if packed <= kth:
            work.kept[b, cuda.atomic.add(sh_n, 1, 1)] = packed
    cuda.syncthreads()
    kept = sh_n[1]
    # 4. the next beam, best first; the table emptied
    for q in range(tid, kept, nthreads):
        packed = work.kept[b, q]
        j = 0
        for r in range(kept):
            if work.kept[b, r] < packed:
                j += 1
        i = packed_arc(packed)
        k = i // V
        v = i - k * V
        extends = _extends(beams, cur, b, k, v, settings.blank)
        h = beams.hash[cur, b, k]
        beams.cost[nxt, b, j] = packed_cost(packed)
        beams.last[nxt, b, j] = v
        beams.hash[nxt, b, j] = uint64(_extend(h, v)) if extends else h
        beams.acoustic[nxt, b, j] = float32(beams.acoustic[cur, b, k] + float32(-log_probs[b, t, v]))
        beams.lm[nxt, b, j] = beams.lm[cur, b, k]
        beams.pb[nxt, b, j] = beams.pb[cur, b, k]
        beams.lm_cost[nxt, b, j] = beams.lm_cost[cur, b, k]
        beams.boost[nxt, b, j] = beams.boost[cur, b, k]
        work.parents[b, t, j] = k
        work.labels[b, t, j] = -2 - v
        if extends:
            work.labels[b, t, j] = v
            if use_lm:
                cost, state = _lm_cost(lm, beams.lm[cur, b, k], v)
                beams.lm_cost[nxt, b, j] = float32(beams.lm_cost[cur, b, k] + cost)
                beams.lm[nxt, b, j] = state
            if row >= 0:
                cost, state = automaton_step(pb, row, beams.pb[cur, b, k], v)
                beams.boost[nxt, b, j] = float32(beams.boost[cur, b, k] + cost)
                beams.pb[nxt, b, j] = state
    for j in range(tid, m, nthreads):
        slot = work.win_slot[b, j]
        work.table_key[base + slot] = EMPTY_KEY
        work.table_packed[base + slot] = MAX_PACKED
    if tid == 0:
        beams.count[nxt, b] = kept


@cuda.jit
def beam_tick_kernel(clock):
    """The frame step's last kernel: on to the next frame."""
    if cuda.grid(1) == 0:
        clock[0] += 1


class BeamLaunch(NamedTuple):
    batch: int
    block: int  # threads per utterance's block (<= MAX_BLOCK)


def search(launch, clock, beams, work, settings, lm, use_lm, pb, log_probs, num_frames, stream=0, capture=None):
    """Queue the whole search of a batch on `stream`: the start, then num_frames frame
    steps.  `capture`, where given, turns a function that launches a step into a
    replayable CUDA graph, captured once and replayed every frame; without it (the
    simulator) every kernel is launched every frame."""
    B = launch.batch

    def step():
        beam_step_kernel[B, launch.block, stream](clock, beams, work, settings, lm, use_lm, pb, log_probs)
        beam_tick_kernel[1, 1, stream](clock)

    # captured before anything is queued: the GPU waits for no capture
    replay = capture(step) if capture is not None and num_frames > 1 else step
    beam_init_kernel[(B + 31) // 32, 32, stream](clock, beams, settings, lm)
    for _ in range(num_frames):
        replay()
