"""CUDA kernels of the decoder (Numba-CUDA) and their launchers.

One step of the search per frame t for a whole batch; each utterance b owns a slice of
every array.  Per frame the launchers run, in order:

    prune_store   one block per utterance: best cost, exact radix select of the
                  max_active/min_active-th costs, Kaldi's cutoff, survivors and their
                  in-frame epsilon ancestors stored as backpointers, and the prefix sum
                  of the survivors' emitting-arc counts (load balancing)
    frame_costs   one thread per utterance: the frame's acoustic cost of each input
                  label, with frame-level token pruning (FLToP) when asked
    expand_min    one thread per arc: the best new cost (atomicMin on its key)
    expand        one thread per arc: new tokens below best + adaptive beam recombined
                  in an open-addressing hash table (atomicCAS insert, atomicMin on the
                  packed (cost, arc id) so that the argmin comes with the min)
    resolve       one thread per hash slot: the frame's token list and backpointers
    closure       one block per utterance: input-epsilon arcs, round by round, until no
                  cost improves

and after the last frame `traceback` walks the backpointers of the best token.

Token lists and hash tables are double-buffered: resolving a new token's predecessor
(arc -> source state -> that state's token) reads the previous frame's table while the
new one fills.  Hash tables and counters that take atomics are 1-D, indexed b * H + slot.
Every kernel returns at once for an utterance that is finished or has overflowed; the
host grows the capacity and decodes an overflowed utterance again.

The per-arc and per-token logic is in `common` and `select`, shared with the CPU twin.
"""
from __future__ import annotations

import numpy as np
from numba import config as numba_config
from numba import cuda, float32, int32, int64, uint32, uint64

from .common import (
    EMPTY_KEY,
    arc_source,
    boost_cost,
    cost_key,
    cutoff_and_adaptive_beam,
    find_segment,
    frame_acoustic_costs,
    hash_slot,
    key_cost,
    pack,
    packed_arc,
    packed_cost,
)
from .select import RADIX_BINS, RADIX_PASSES, matches_prefix, pick_bin, radix_digit, radix_shift

if numba_config.ENABLE_CUDASIM:
    # The simulator runs kernels as Python and hands them wrapped arrays that compiled
    # (njit) helpers cannot take: unwrap them to the NumPy arrays underneath.
    def _unwrap(a):
        a = getattr(a, "_item", a)
        return getattr(a, "_ary", a)

    def _host_callable(helper):
        def call(*args):
            return helper(*(_unwrap(a) for a in args))
        return call

    frame_acoustic_costs = _host_callable(frame_acoustic_costs)
    boost_cost = _host_callable(boost_cost)
    arc_source = _host_callable(arc_source)
    find_segment = _host_callable(find_segment)
    pick_bin = _host_callable(pick_bin)

MAX_BLOCK = 256  # threads per block of the per-utterance kernels (sizes their shared arrays)
ARC_BLOCK = 256  # threads per block of the per-arc kernels
OK, OVERFLOW, EPS_CYCLE, BP_OVERFLOW = 0, 1, 2, 3  # status codes; the first three as in the CPU twin
MAX_KEY = np.uint32(0xFFFFFFFF)
INF_KEY = np.uint32(0xFF800000)  # cost_key(+inf): the empty min
MAX_PACKED = np.uint64(0xFFFFFFFFFFFFFFFF)
NO_SLOT = -1


@cuda.jit(device=True)
def _lookup(ht_key, ht_tok, base, mask, state):
    """Token index of `state` in a hash table, or -1."""
    slot = hash_slot(state, mask)
    for _ in range(mask + 1):
        k = ht_key[base + slot]
        if k == state:
            return ht_tok[base + slot]
        if k == EMPTY_KEY:
            return -1
        slot = (slot + 1) & mask
    return -1


@cuda.jit(device=True)
def _insert(ht_key, ht_count, b, base, mask, capacity, state):
    """Slot of `state`, inserting it if new (atomicCAS); -1 when the table is over capacity."""
    slot = hash_slot(state, mask)
    for _ in range(mask + 1):
        old = cuda.atomic.cas(ht_key, base + slot, EMPTY_KEY, state)
        if old == EMPTY_KEY:
            if cuda.atomic.add(ht_count, b, 1) >= capacity:
                return -1
            return slot
        if old == state:
            return slot
        slot = (slot + 1) & mask
    return -1


@cuda.jit(device=True)
def _block_select(costs, b, n, k, hist, sh_u32, sh_i64):
    """Cost of rank k among costs[b, :n]: radix select by the whole block."""
    tid = cuda.threadIdx.x
    nthreads = cuda.blockDim.x
    if tid == 0:
        sh_u32[1] = uint32(0)
        sh_i64[0] = k
    cuda.syncthreads()
    for p in range(RADIX_PASSES):
        shift = radix_shift(p)
        for i in range(tid, RADIX_BINS, nthreads):
            hist[i] = 0
        cuda.syncthreads()
        prefix = sh_u32[1]
        for j in range(tid, n, nthreads):
            key = cost_key(costs[b, j])
            if matches_prefix(key, prefix, p):
                cuda.atomic.add(hist, radix_digit(key, shift), 1)
        cuda.syncthreads()
        if tid == 0:
            bin_, rank = pick_bin(hist, sh_i64[0])
            sh_i64[0] = rank
            sh_u32[1] = prefix | (uint32(bin_) << shift)
        cuda.syncthreads()
    return key_cost(sh_u32[1])


@cuda.jit(device=True)
def _block_exclusive_scan(counts, nthreads, sh_i64, slot):
    """Thread 0 turns counts[:nthreads] into exclusive prefix sums; the total goes to sh_i64[slot]."""
    if cuda.threadIdx.x == 0:
        total = int64(0)
        for i in range(nthreads):
            c = counts[i]
            counts[i] = total
            total += c
        sh_i64[slot] = total
    cuda.syncthreads()


@cuda.jit
def prune_store_kernel(t, lengths, status, final, e_indptr,
                       tl_state, tl_cost, tl_prev, tl_arc, tl_n,
                       nx_state, nx_slot, nx_n, nx_key, nx_val, nx_tok, nx_count, nx_stamp, H,
                       gid, mark, sv_state, sv_cost, sv_gid, sv_scan, sv_n,
                       bp_prev, bp_arc, bp_n, bp_capacity, step_start, keep, reached_final, adaptive_beam,
                       min_key, survivors, beam, max_active, min_active, beam_delta):
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nthreads = cuda.blockDim.x
    if t > lengths[b] or status[b] != OK:
        return
    last = t == lengths[b]
    n = tl_n[b]
    hist = cuda.shared.array(RADIX_BINS, int32)
    counts = cuda.shared.array(MAX_BLOCK, int64)
    counts2 = cuda.shared.array(MAX_BLOCK, int64)
    sh_u32 = cuda.shared.array(2, uint32)
    sh_u64 = cuda.shared.array(2, uint64)
    sh_i64 = cuda.shared.array(4, int64)
    sh_f32 = cuda.shared.array(2, float32)

    # ---- best cost (or, on the last step, the best final token by (cost, state))
    if tid == 0:
        sh_u32[0] = MAX_KEY
        sh_u64[0] = MAX_PACKED
        sh_u64[1] = MAX_PACKED
        sh_i64[3] = -1
    cuda.syncthreads()
    for j in range(tid, n, nthreads):
        c = tl_cost[b, j]
        if last:
            f = float32(c + final[tl_state[b, j]])
            if f < np.inf:
                cuda.atomic.min(sh_u64, 0, pack(f, tl_state[b, j]))
            if c < np.inf:
                cuda.atomic.min(sh_u64, 1, pack(c, tl_state[b, j]))
        else:
            cuda.atomic.min(sh_u32, 0, cost_key(c))
    cuda.syncthreads()
    if last:
        with_final = sh_u64[0] != MAX_PACKED
        target = sh_u64[0] if with_final else sh_u64[1]
        for j in range(tid, n, nthreads):
            if target != MAX_PACKED and tl_state[b, j] == packed_arc(target):
                sh_i64[3] = j
        if tid == 0:
            reached_final[b] = with_final
    elif n > 0:
        best = key_cost(sh_u32[0])
        kth_max = float32(np.inf)
        kth_min = float32(np.inf)
        if n > max_active:
            kth_max = _block_select(tl_cost, b, n, max_active, hist, sh_u32, sh_i64)
        if n > min_active:
            if min_active == 0:
                kth_min = best
            else:
                kth_min = _block_select(tl_cost, b, n, min_active, hist, sh_u32, sh_i64)
        if tid == 0:
            cutoff, ab = cutoff_and_adaptive_beam(best, kth_max, kth_min, float32(beam), float32(beam_delta))
            sh_f32[0] = cutoff
            sh_f32[1] = ab
            adaptive_beam[b] = ab
    else:
        if tid == 0:
            sh_f32[0] = float32(-np.inf)  # nothing survives
            adaptive_beam[b] = float32(beam)
    cuda.syncthreads()
    cutoff = sh_f32[0]
    keep_j = sh_i64[3]

    # ---- mark survivors and their in-frame epsilon ancestors
    for j in range(tid, n, nthreads):
        mark[b, j] = 0
    cuda.syncthreads()
    for j in range(tid, n, nthreads):
        if (last and j == keep_j) or (not last and tl_cost[b, j] < cutoff):
            k = j
            while k >= 0 and mark[b, k] == 0:
                mark[b, k] = 1
                p = tl_prev[b, k]
                k = -(p + 2) if p <= -2 else -1
    cuda.syncthreads()

    # ---- store them as backpointers, in frame-list order, and list the survivors
    chunk = (n + nthreads - 1) // nthreads
    lo = min(tid * chunk, n)
    hi = min(lo + chunk, n)
    marked = 0
    survived = 0
    for j in range(lo, hi):
        if mark[b, j]:
            marked += 1
            if not last and tl_cost[b, j] < cutoff:
                survived += 1
    counts[tid] = marked
    counts2[tid] = survived
    cuda.syncthreads()
    _block_exclusive_scan(counts, nthreads, sh_i64, 0)
    _block_exclusive_scan(counts2, nthreads, sh_i64, 1)
    start = bp_n[b]
    if start + sh_i64[0] > bp_capacity:
        if tid == 0:
            status[b] = BP_OVERFLOW
        return
    g = start + counts[tid]
    for j in range(lo, hi):
        if mark[b, j]:
            gid[b, j] = g
            g += 1
    cuda.syncthreads()
    s = counts2[tid]
    for j in range(lo, hi):
        if mark[b, j]:
            g = gid[b, j]
            p = tl_prev[b, j]
            bp_prev[b, g] = gid[b, -(p + 2)] if p <= -2 else p
            bp_arc[b, g] = tl_arc[b, j]
            if not last and tl_cost[b, j] < cutoff:
                sv_state[b, s] = tl_state[b, j]
                sv_cost[b, s] = tl_cost[b, j]
                sv_gid[b, s] = g
                s += 1
    ns = sh_i64[1]
    if tid == 0:
        step_start[b, t] = start
        bp_n[b] = start + sh_i64[0]
        sv_n[b] = ns
        min_key[b] = INF_KEY
        if not last:
            survivors[b] += ns
        if last:
            step_start[b, t + 1] = start + sh_i64[0]
            keep[b] = gid[b, keep_j] if keep_j >= 0 else -1
    if last:
        return

    # ---- clear the other buffer's hash table: this frame's new tokens go there
    base = b * H
    for j in range(tid, nx_n[b], nthreads):
        slot = nx_slot[b, j]
        nx_key[base + slot] = EMPTY_KEY
        nx_val[base + slot] = MAX_PACKED
        nx_tok[base + slot] = -1
        nx_stamp[base + slot] = 0
    cuda.syncthreads()
    if tid == 0:
        nx_n[b] = 0
        nx_count[b] = 0

    # ---- prefix sum of the survivors' emitting-arc counts
    chunk = (ns + nthreads - 1) // nthreads
    lo = min(tid * chunk, ns)
    hi = min(lo + chunk, ns)
    arcs = int64(0)
    for i in range(lo, hi):
        st = sv_state[b, i]
        arcs += e_indptr[st + 1] - e_indptr[st]
    counts[tid] = arcs
    cuda.syncthreads()
    _block_exclusive_scan(counts, nthreads, sh_i64, 2)
    offset = counts[tid]
    for i in range(lo, hi):
        sv_scan[b, i] = offset
        st = sv_state[b, i]
        offset += e_indptr[st + 1] - e_indptr[st]
    if tid == 0:
        sv_scan[b, ns] = sh_i64[2]


@cuda.jit
def frame_costs_kernel(t, lengths, status, log_probs, ac, acoustic_scale, blank_ilabel, blank_penalty,
                       top_n, log_rel):
    """One thread per utterance: the frame's acoustic cost by input label (FLToP applied)."""
    b = cuda.grid(1)
    if b >= lengths.shape[0] or t >= lengths[b] or status[b] != OK:
        return
    frame_acoustic_costs(log_probs[b], t, acoustic_scale, blank_ilabel, blank_penalty, top_n, log_rel, ac[b])


@cuda.jit(device=True)
def _boosted(cost, word, boost_keys, boost_costs, boost_bits, b):
    if word == 0:
        return cost
    return float32(cost + boost_cost(boost_keys[b], boost_costs[b], boost_bits[b], word))


@cuda.jit(device=True)
def _expanded_arc(b, k, scan, ns, e_indptr, sv_state, sv_cost, ac, ilabel, olabel, weight,
                  boost_keys, boost_costs, boost_bits, boosted):
    """The k-th arc of utterance b's survivors (load balancing: which survivor, which of its
    arcs) and the cost of the token it makes."""
    i = find_segment(scan, ns, k)
    a = e_indptr[sv_state[b, i]] + (k - scan[i])
    nc = float32(sv_cost[b, i] + float32(weight[a] + ac[b, ilabel[a]]))
    if boosted:
        nc = _boosted(nc, olabel[a], boost_keys, boost_costs, boost_bits, b)
    return a, nc


@cuda.jit
def expand_min_kernel(t, lengths, status, ac, e_indptr, ilabel, olabel, weight,
                      sv_state, sv_cost, sv_scan, sv_n, min_key, boost_keys, boost_costs, boost_bits, boosted):
    b = cuda.blockIdx.y
    if t >= lengths[b] or status[b] != OK:
        return
    ns = sv_n[b]
    total = sv_scan[b, ns]
    scan = sv_scan[b]
    best = MAX_KEY
    for k in range(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, total, cuda.gridDim.x * cuda.blockDim.x):
        a, nc = _expanded_arc(b, k, scan, ns, e_indptr, sv_state, sv_cost, ac, ilabel, olabel, weight,
                              boost_keys, boost_costs, boost_bits, boosted)
        key = cost_key(nc)
        if key < best:
            best = key
    if best != MAX_KEY:
        cuda.atomic.min(min_key, b, best)


@cuda.jit
def expand_kernel(t, lengths, status, ac, e_indptr, ilabel, olabel, weight, nextstate,
                  sv_state, sv_cost, sv_scan, sv_n, min_key, adaptive_beam,
                  nx_key, nx_val, nx_count, H, capacity, boost_keys, boost_costs, boost_bits, boosted):
    b = cuda.blockIdx.y
    if t >= lengths[b] or status[b] != OK:
        return
    ns = sv_n[b]
    total = sv_scan[b, ns]
    bound = float32(key_cost(min_key[b]) + adaptive_beam[b])
    scan = sv_scan[b]
    base = b * H
    mask = H - 1
    for k in range(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, total, cuda.gridDim.x * cuda.blockDim.x):
        a, nc = _expanded_arc(b, k, scan, ns, e_indptr, sv_state, sv_cost, ac, ilabel, olabel, weight,
                              boost_keys, boost_costs, boost_bits, boosted)
        if nc < bound:
            slot = _insert(nx_key, nx_count, b, base, mask, capacity, nextstate[a])
            if slot < 0:
                status[b] = OVERFLOW
                return
            cuda.atomic.min(nx_val, base + slot, pack(nc, a))


@cuda.jit
def resolve_kernel(t, lengths, status, e_indptr, num_states,
                   tl_key, tl_tok, gid, nx_key, nx_val, nx_tok, H,
                   nx_state, nx_cost, nx_prev, nx_arc, nx_slot, nx_n):
    """The new frame's token list from its hash table: one thread per slot."""
    b = cuda.blockIdx.y
    if t >= lengths[b] or status[b] != OK:
        return
    base = b * H
    mask = H - 1
    for slot in range(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, H, cuda.gridDim.x * cuda.blockDim.x):
        state = nx_key[base + slot]
        if state != EMPTY_KEY:
            packed = nx_val[base + slot]
            a = packed_arc(packed)
            j = cuda.atomic.add(nx_n, b, 1)
            source = _lookup(tl_key, tl_tok, base, mask, arc_source(e_indptr, num_states, a))
            nx_tok[base + slot] = j
            nx_state[b, j] = state
            nx_cost[b, j] = packed_cost(packed)
            nx_prev[b, j] = gid[b, source]
            nx_arc[b, j] = a
            nx_slot[b, j] = slot


@cuda.jit
def closure_kernel(t, lengths, status, ne_indptr, num_states, olabel, weight, nextstate,
                   min_key, adaptive_beam, initial, boost_keys, boost_costs, boost_bits, boosted,
                   ht_key, ht_val, ht_tok, ht_count, ht_stamp, H, capacity,
                   tl_state, tl_cost, tl_prev, tl_arc, tl_slot, tl_n, work, work2):
    """Input-epsilon closure of one utterance's frame tokens (Bellman-Ford rounds in a block)."""
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nthreads = cuda.blockDim.x
    if (not initial and t >= lengths[b]) or status[b] != OK:
        return
    if initial:
        cutoff = float32(np.finfo(np.float32).max)
    else:
        cutoff = float32(key_cost(min_key[b]) + adaptive_beam[b])
    base = b * H
    mask = H - 1
    sh = cuda.shared.array(3, int64)  # work size, next work size, overflow
    n0 = tl_n[b]
    for j in range(tid, n0, nthreads):
        work[b, j] = j
    if tid == 0:
        sh[0] = n0
        sh[1] = 0
        sh[2] = 0
    cuda.syncthreads()
    rounds = 0
    while sh[0] > 0:
        rounds += 1
        # phase A: relax the epsilon arcs of this round's tokens
        for w in range(tid, sh[0], nthreads):
            j = work[b, w]
            c = tl_cost[b, j]
            if c > cutoff:
                continue
            s = tl_state[b, j]
            for a in range(ne_indptr[s], ne_indptr[s + 1]):
                nc = float32(c + weight[a])
                if boosted:
                    nc = _boosted(nc, olabel[a], boost_keys, boost_costs, boost_bits, b)
                if nc > cutoff:
                    continue
                slot = _insert(ht_key, ht_count, b, base, mask, capacity, nextstate[a])
                if slot < 0:
                    sh[2] = 1
                    break
                candidate = pack(nc, a)
                if candidate < cuda.atomic.min(ht_val, base + slot, candidate):
                    if cuda.atomic.max(ht_stamp, base + slot, rounds) < rounds:
                        work2[b, cuda.atomic.add(sh, 1, 1)] = slot
        cuda.syncthreads()
        if sh[2] != 0:
            if tid == 0:
                status[b] = OVERFLOW
            return
        # phase B: write the improved tokens (new states get a frame-list entry)
        for w in range(tid, sh[1], nthreads):
            slot = work2[b, w]
            j = ht_tok[base + slot]
            if j < 0:
                j = cuda.atomic.add(tl_n, b, 1)
                ht_tok[base + slot] = j
                tl_state[b, j] = ht_key[base + slot]
                tl_slot[b, j] = slot
            packed = ht_val[base + slot]
            a = packed_arc(packed)
            source = _lookup(ht_key, ht_tok, base, mask, arc_source(ne_indptr, num_states, a))
            tl_cost[b, j] = packed_cost(packed)
            tl_prev[b, j] = -(source + 2)
            tl_arc[b, j] = a
            work[b, w] = j
        cuda.syncthreads()
        if tid == 0:
            sh[0] = sh[1]
            sh[1] = 0
        cuda.syncthreads()


@cuda.jit
def init_kernel(start, ht_key, ht_val, ht_tok, ht_count, H, tl_state, tl_cost, tl_prev, tl_arc, tl_slot, tl_n):
    """The start token of every utterance, before the initial closure."""
    b = cuda.grid(1)
    if b < tl_n.shape[0]:
        slot = hash_slot(start, H - 1)
        ht_key[b * H + slot] = start
        ht_val[b * H + slot] = pack(float32(0.0), -1)
        ht_tok[b * H + slot] = 0
        ht_count[b] = 1
        tl_state[b, 0] = start
        tl_cost[b, 0] = float32(0.0)
        tl_prev[b, 0] = -1
        tl_arc[b, 0] = -1
        tl_slot[b, 0] = slot
        tl_n[b] = 1


@cuda.jit
def traceback_kernel(status, keep, bp_prev, bp_arc, bp_n, path_arcs, path_gids, path_len):
    """One thread per utterance: the arcs of the kept token's backpointer chain, in order."""
    b = cuda.grid(1)
    if b >= keep.shape[0] or status[b] != OK:
        return
    g = keep[b]
    length = 0
    while g >= 0:
        length += 1
        if length > bp_n[b]:
            status[b] = EPS_CYCLE
            return
        g = bp_prev[b, g]
    if length - 1 > path_arcs.shape[1]:
        status[b] = OVERFLOW
        return
    g = keep[b]
    for i in range(length - 2, -1, -1):
        path_arcs[b, i] = bp_arc[b, g]
        path_gids[b, i] = g
        g = bp_prev[b, g]
    path_len[b] = max(length - 1, 0)
