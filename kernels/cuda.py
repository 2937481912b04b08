"""CUDA kernels of the decoder (Numba-CUDA) and their launchers.

One step of the search per frame t for a whole batch; each utterance b owns a slice of
every array.  Per frame the launchers run, in order:

    prune_store   one block per utterance: best cost, exact radix select of the
                  max_active/min_active-th costs, Kaldi's cutoff, survivors and their
                  in-frame epsilon ancestors stored as backpointers, and the prefix sum
                  of the survivors' emitting-arc counts (load balancing)
    frame_costs   one thread per utterance: the frame's acoustic cost of each input
                  label, with frame-level token pruning (FLToP) when asked
    lm_cache_clear  (rescoring only) empties the big LM's arc cache when half full
    expand_min    one thread per arc: the best new cost (atomicMin on its key); when
                  rescoring, it also brings the big-LM arcs the frame needs into the cache
    expand        one thread per arc: new tokens below best + adaptive beam recombined
                  in an open-addressing hash table (atomicCAS insert, atomicMin on the
                  packed (cost, arc id) so that the argmin comes with the min)
    expand_ties   (contexts only) one thread per word arc: the smallest predecessor
                  context among the arcs that tie for a slot's best (cost, arc id)
    resolve       one thread per hash slot: the frame's token list and backpointers
    closure       one block per utterance: input-epsilon arcs, round by round, until no
                  cost improves

and after the last frame `traceback` walks the backpointers of the best token.

Tokens recombine by key `common.token_key(state, ctx)`: the graph state and the context
(LM state x phrase-automaton state, 0 when neither is used), as on the CPU.  Recombination
keeps the smallest (cost, arc id, predecessor's ctx); only word arcs can tie on (cost,
arc id) with different predecessors, so the predecessor's ctx is settled by a second
pass over the word arcs (expand_ties, and a pass in each closure round).

Contexts (`context` argument, built by wfst/cuda_backend.py) follow the on-the-fly
rescoring paper (sec. 2.1, 2.3): the big LM's offsets, labels, backoff states and backoff
costs are on the GPU, its arc payloads (weight, next state) and final costs stay in
pinned host memory that kernels read directly.  A big-LM arc's position is found on the
GPU (binary search, following backoff states); its payload is read from a device arc
cache keyed by position (open addressing, atomicCAS), and the thread that inserts a
position copies the payload from host memory, so each arc crosses the bus once while it
stays cached.  The cache is emptied at a frame start when more than half full; a frame
that fills it marks its utterances LM_OVERFLOW (decoded again with a larger cache).

Token lists and hash tables are double-buffered: resolving a new token's predecessor
(arc -> source state and ctx -> that key's token) reads the previous frame's table while
the new one fills.  Hash tables and counters that take atomics are 1-D, indexed
b * H + slot.  Every kernel returns at once for an utterance that is finished or has
overflowed; the host grows the capacity and decodes an overflowed utterance again.

The per-arc and per-token logic is in `common` and `select`, shared with the CPU twin.
"""
from __future__ import annotations

import numpy as np
from numba import config as numba_config
from numba import cuda, float32, int32, int64, uint32, uint64

from .common import (
    EMPTY_KEY,
    arc_source,
    backoff_locate,
    backoff_lookup,
    bits_f32,
    boost_cost,
    cost_key,
    cutoff_and_adaptive_beam,
    find_segment,
    frame_acoustic_costs,
    hash_slot,
    key_cost,
    key_ctx,
    key_state,
    pack,
    packed_arc,
    packed_cost,
    token_key,
)
from .select import RADIX_BINS, RADIX_PASSES, matches_prefix, pick_bin, radix_digit, radix_shift

if numba_config.ENABLE_CUDASIM:
    # The simulator runs kernels as Python and hands them wrapped arrays that compiled
    # (njit) helpers cannot take: unwrap them to the NumPy arrays underneath.  (Arrays
    # inside tuple arguments reach kernels unwrapped.)
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
# status codes; the first three as in the CPU twin
OK, OVERFLOW, EPS_CYCLE, BP_OVERFLOW, LM_OVERFLOW = 0, 1, 2, 3, 4
MAX_KEY = np.uint32(0xFFFFFFFF)
INF_KEY = np.uint32(0xFF800000)  # cost_key(+inf): the empty min
MAX_PACKED = np.uint64(0xFFFFFFFFFFFFFFFF)
NO_SLOT = -1
NO_CTX = np.int32(0x7FFFFFFF)  # a slot's predecessor ctx before any word arc set it

# the big LM's arc cache: (keys int64 (H,), payloads uint64 (H,), counters int64 (LM_COUNTERS,))
NO_ARC = MAX_PACKED  # payload not stored yet (its next state would be -1: never a real arc)
LM_FILL, LM_ARRIVED, LM_LOOKUPS, LM_MISSES, LM_FETCHES, LM_CLEARS = 0, 1, 2, 3, 4, 5
LM_COUNTERS = 8
# what a word step did with the cache
NO_LOOKUP, ARC_HIT, ARC_MISS, ARC_REFETCH, ARC_FULL = 0, 1, 2, 3, 4


@cuda.jit(device=True)
def _lookup(ht_key, ht_tok, base, mask, key):
    """Token index of `key` in a hash table, or -1."""
    slot = _find_slot(ht_key, base, mask, key)
    return ht_tok[base + slot] if slot >= 0 else -1


@cuda.jit(device=True)
def _find_slot(ht_key, base, mask, key):
    """Slot of `key` in a hash table, or -1."""
    slot = hash_slot(key, mask)
    for _ in range(mask + 1):
        k = ht_key[base + slot]
        if k == key:
            return slot
        if k == EMPTY_KEY:
            return NO_SLOT
        slot = (slot + 1) & mask
    return NO_SLOT


@cuda.jit(device=True)
def _insert(ht_key, ht_count, b, base, mask, capacity, key):
    """Slot of `key`, inserting it if new (atomicCAS); -1 when the table is over capacity."""
    slot = hash_slot(key, mask)
    for _ in range(mask + 1):
        old = cuda.atomic.cas(ht_key, base + slot, int64(EMPTY_KEY), key)
        if old == EMPTY_KEY:
            if cuda.atomic.add(ht_count, b, 1) >= capacity:
                return -1
            return slot
        if old == key:
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


# ---------------------------------------------------------------------- contexts

@cuda.jit(device=True)
def _contextual(b, context):
    """Whether utterance b's tokens carry a context (cpu decode_one's `contextual`)."""
    return context[6] or context[0][b] > 1


@cuda.jit(device=True)
def _cached_arc(cache, payload, pos):
    """(payload, event) of the big-LM arc at `pos`: weight bits << 32 | next state, through
    the arc cache (the paper's Algorithms 1-2 keyed by arc position).  The thread whose
    atomicCAS inserts `pos` copies the payload from pinned host memory (ARC_MISS); a thread
    that finds it not stored yet (NO_ARC: its inserter, maybe in another block, is still
    reading) copies it too (ARC_REFETCH), so no thread ever waits.  ARC_FULL: the frame
    needs more slots than the cache allows (3/4 of them, which keeps probing short)."""
    keys, vals, counts = cache
    size = keys.shape[0]
    mask = size - 1
    slot = hash_slot(pos, mask)
    for _ in range(size):
        old = cuda.atomic.cas(keys, slot, int64(EMPTY_KEY), pos)
        if old == EMPTY_KEY:
            if cuda.atomic.add(counts, LM_FILL, 1) >= size - (size >> 2):
                return NO_ARC, ARC_FULL
            arc = payload[pos]
            vals[slot] = arc
            return arc, ARC_MISS
        if old == pos:
            arc = vals[slot]
            if arc != NO_ARC:
                return arc, ARC_HIT
            arc = payload[pos]
            vals[slot] = arc  # the same value its inserter stores
            return arc, ARC_REFETCH
        slot = (slot + 1) & mask
    return NO_ARC, ARC_FULL


@cuda.jit(device=True)
def _context_step(b, ctx, word, context):
    """common.context_step on the GPU, the same float32 operations in the same order:
    (cost, new ctx, cache event).  The big LM's arc comes through the arc cache."""
    num_phrase_states, lm, lm0, maps, phrases, cache, rescoring = context
    P = num_phrase_states[b]
    lm_s = ctx // P
    ph_s = ctx - lm_s * P
    cost = float32(0.0)
    event = NO_LOOKUP
    if rescoring:
        small_of, lm_map, lm0_map = maps
        big, pos, lm_next = backoff_locate(lm[0], lm[1], lm[2], lm[3], lm_s, lm_map[word])
        if pos >= 0:
            arc, event = _cached_arc(cache, lm[4], pos)
            if event == ARC_FULL:
                return cost, ctx, event
            big = float32(big + float32(bits_f32(uint32(arc >> uint64(32)))))
            lm_next = int32(uint32(arc & uint64(0xFFFFFFFF)))
        small, _ = backoff_lookup(lm0[0], lm0[1], lm0[2], lm0[3], lm0[4], lm0[5], small_of[lm_s], lm0_map[word])
        cost = float32(big - small)
        lm_s = lm_next
    if P > 1:
        boost, ph_s = backoff_lookup(phrases[0][b], phrases[1][b], phrases[2][b], phrases[3][b], phrases[4][b],
                                     phrases[5][b], ph_s, word)
        cost = float32(cost + boost)
    return cost, int32(lm_s * P + ph_s), event


@cuda.jit(device=True)
def _context_final(b, ctx, context):
    """common.context_final on the GPU (the big LM's final costs are in host memory)."""
    num_phrase_states, lm, lm0, maps, phrases, cache, rescoring = context
    P = num_phrase_states[b]
    lm_s = ctx // P
    ph_s = ctx - lm_s * P
    cost = float32(0.0)
    if rescoring:
        cost = float32(lm[5][lm_s] - lm0[6][maps[0][lm_s]])
    if P > 1:
        cost = float32(cost + phrases[6][b, ph_s])
    return cost


@cuda.jit(device=True)
def _arc_weight(b, a, weight, olabel, boost):
    """cpu.arc_weight: arc a's weight in TLG o B, the word's boost (looked up in utterance
    b's hash map only for boosted words) added to the graph weight."""
    boost_keys, boost_costs, boost_bits, boosted = boost
    w = weight[a]
    word = olabel[a]
    if boosted and word != 0 and (boost_bits[b, word >> 5] >> uint32(word & 31)) & uint32(1) != 0:
        w = float32(w + boost_cost(boost_keys[b], boost_costs[b], boost_bits[b], word))
    return w


@cuda.jit(device=True)
def _word_step(b, cost, ctx, word, context):
    """cpu._word_step: cost and context after an arc that outputs `word` (0: none) through
    the context automata; and the arc cache's event."""
    if word == 0:
        return cost, ctx, NO_LOOKUP
    if _contextual(b, context):
        delta, ctx, event = _context_step(b, ctx, word, context)
        return float32(cost + delta), ctx, event
    return cost, ctx, NO_LOOKUP


@cuda.jit(device=True)
def _tally(event, lookups, misses, fetches):
    """A thread's own count of big-LM arc lookups (added to the cache's counters once)."""
    if event != NO_LOOKUP:
        lookups += 1
    if event == ARC_MISS:
        misses += 1
    if event == ARC_MISS or event == ARC_REFETCH:
        fetches += 1
    return lookups, misses, fetches


@cuda.jit(device=True)
def _count_lookups(context, lookups, misses, fetches):
    if lookups > 0:
        counts = context[5][2]
        cuda.atomic.add(counts, LM_LOOKUPS, lookups)
        cuda.atomic.add(counts, LM_MISSES, misses)
        cuda.atomic.add(counts, LM_FETCHES, fetches)


@cuda.jit
def lm_cache_clear_kernel(cache):
    """At a frame start: empty the big LM's arc cache when it is more than half full.  One
    launch: every block reads the fill count first, the last block to finish resets it."""
    keys, vals, counts = cache
    size = keys.shape[0]
    clear = counts[LM_FILL] > size >> 1
    if clear:
        for i in range(cuda.grid(1), size, cuda.gridsize(1)):
            keys[i] = EMPTY_KEY
            vals[i] = NO_ARC
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        cuda.threadfence()
        if cuda.atomic.add(counts, LM_ARRIVED, 1) == cuda.gridDim.x - 1:
            counts[LM_ARRIVED] = 0
            if clear:
                counts[LM_FILL] = 0
                counts[LM_CLEARS] += 1


# ---------------------------------------------------------------------- the search

@cuda.jit(device=True)
def _end_key(b, j, with_final, final, tl_state, tl_ctx, tl_cost, context, contextual):
    """pack(cost [+ final costs], state) of token j on the last step (cpu._best_token), or
    MAX_PACKED when that cost is not finite."""
    c = tl_cost[b, j]
    st = tl_state[b, j]
    if with_final:
        f = final[st]
        if contextual:
            f = float32(f + _context_final(b, tl_ctx[b, j], context))
        c = float32(c + f)
    if c < np.inf:
        return pack(c, st)
    return MAX_PACKED


@cuda.jit
def prune_store_kernel(t, lengths, status, final, e_indptr,
                       tl_state, tl_ctx, tl_cost, tl_prev, tl_arc, tl_n,
                       nx_slot, nx_n, nx_key, nx_val, nx_tok, nx_pctx, nx_count, nx_stamp, H,
                       gid, mark, sv_state, sv_ctx, sv_cost, sv_gid, sv_scan, sv_n,
                       bp_prev, bp_arc, bp_n, bp_capacity, step_start, keep, reached_final, adaptive_beam,
                       min_key, survivors, beam, max_active, min_active, beam_delta, context):
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nthreads = cuda.blockDim.x
    if t > lengths[b] or status[b] != OK:
        return
    last = t == lengths[b]
    n = tl_n[b]
    contextual = _contextual(b, context)
    hist = cuda.shared.array(RADIX_BINS, int32)
    counts = cuda.shared.array(MAX_BLOCK, int64)
    counts2 = cuda.shared.array(MAX_BLOCK, int64)
    sh_u32 = cuda.shared.array(2, uint32)
    sh_u64 = cuda.shared.array(2, uint64)
    sh_i64 = cuda.shared.array(4, int64)
    sh_i32 = cuda.shared.array(1, int32)
    sh_f32 = cuda.shared.array(2, float32)

    # ---- best cost (or, on the last step, the best final token by (cost, state, ctx))
    if tid == 0:
        sh_u32[0] = MAX_KEY
        sh_u64[0] = MAX_PACKED
        sh_u64[1] = MAX_PACKED
        sh_i64[3] = -1
        sh_i32[0] = NO_CTX
    cuda.syncthreads()
    for j in range(tid, n, nthreads):
        if last:
            cuda.atomic.min(sh_u64, 0, _end_key(b, j, True, final, tl_state, tl_ctx, tl_cost, context, contextual))
            cuda.atomic.min(sh_u64, 1, _end_key(b, j, False, final, tl_state, tl_ctx, tl_cost, context, contextual))
        else:
            cuda.atomic.min(sh_u32, 0, cost_key(tl_cost[b, j]))
    cuda.syncthreads()
    if last:
        with_final = sh_u64[0] != MAX_PACKED
        target = sh_u64[0] if with_final else sh_u64[1]
        # tokens of one state tie on (cost, state): the smallest ctx wins
        for j in range(tid, n, nthreads):
            if target != MAX_PACKED and _end_key(b, j, with_final, final, tl_state, tl_ctx, tl_cost, context,
                                                 contextual) == target:
                cuda.atomic.min(sh_i32, 0, tl_ctx[b, j])
        cuda.syncthreads()
        for j in range(tid, n, nthreads):
            if target != MAX_PACKED and tl_state[b, j] == packed_arc(target) and tl_ctx[b, j] == sh_i32[0]:
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
                sv_ctx[b, s] = tl_ctx[b, j]
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
        nx_pctx[base + slot] = NO_CTX
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
def _expanded_arc(b, k, scan, ns, e_indptr, sv_state, sv_ctx, sv_cost, ac, ilabel, olabel, weight, boost, context):
    """The k-th arc of utterance b's survivors (load balancing: which survivor i, which of
    its arcs a) and the cost and context of the token it makes: (a, i, cost, ctx, event)."""
    i = find_segment(scan, ns, k)
    a = e_indptr[sv_state[b, i]] + (k - scan[i])
    nc = float32(sv_cost[b, i] + float32(_arc_weight(b, a, weight, olabel, boost) + ac[b, ilabel[a]]))
    ctx = sv_ctx[b, i]
    event = NO_LOOKUP
    if nc < np.inf:  # as on the CPU, arcs pruned by FLToP take no word step
        nc, ctx, event = _word_step(b, nc, ctx, olabel[a], context)
    return a, i, nc, ctx, event


@cuda.jit
def expand_min_kernel(t, lengths, status, ac, e_indptr, ilabel, olabel, weight,
                      sv_state, sv_ctx, sv_cost, sv_scan, sv_n, min_key, boost, context):
    """The best new cost; when rescoring, the first walk over the frame's word arcs, which
    brings the big-LM arcs they read into the arc cache (expand and expand_ties hit)."""
    b = cuda.blockIdx.y
    if t >= lengths[b] or status[b] != OK:
        return
    ns = sv_n[b]
    total = sv_scan[b, ns]
    scan = sv_scan[b]
    best = MAX_KEY
    lookups = misses = fetches = int64(0)
    for k in range(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, total, cuda.gridDim.x * cuda.blockDim.x):
        a, i, nc, ctx, event = _expanded_arc(b, k, scan, ns, e_indptr, sv_state, sv_ctx, sv_cost, ac, ilabel,
                                             olabel, weight, boost, context)
        if event == ARC_FULL:
            status[b] = LM_OVERFLOW
            break
        lookups, misses, fetches = _tally(event, lookups, misses, fetches)
        key = cost_key(nc)
        if key < best:
            best = key
    if best != MAX_KEY:
        cuda.atomic.min(min_key, b, best)
    _count_lookups(context, lookups, misses, fetches)


@cuda.jit
def expand_kernel(t, lengths, status, ac, e_indptr, ilabel, olabel, weight, nextstate,
                  sv_state, sv_ctx, sv_cost, sv_scan, sv_n, min_key, adaptive_beam,
                  nx_key, nx_val, nx_count, H, capacity, boost, context):
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
        a, i, nc, ctx, event = _expanded_arc(b, k, scan, ns, e_indptr, sv_state, sv_ctx, sv_cost, ac, ilabel,
                                             olabel, weight, boost, context)
        if event == ARC_FULL:  # not expected: expand_min cached every arc this frame reads
            status[b] = LM_OVERFLOW
            return
        if nc < bound:
            slot = _insert(nx_key, nx_count, b, base, mask, capacity, token_key(nextstate[a], ctx))
            if slot < 0:
                status[b] = OVERFLOW
                return
            cuda.atomic.min(nx_val, base + slot, pack(nc, a))


@cuda.jit
def expand_ties_kernel(t, lengths, status, ac, e_indptr, ilabel, olabel, weight, nextstate,
                       sv_state, sv_ctx, sv_cost, sv_scan, sv_n, min_key, adaptive_beam,
                       nx_key, nx_val, nx_pctx, H, boost, context):
    """After expand (contexts only): for each slot won by a word arc, the smallest ctx among
    the survivors whose arc reached it with exactly the winning (cost, arc id)."""
    b = cuda.blockIdx.y
    if t >= lengths[b] or status[b] != OK or not _contextual(b, context):
        return
    ns = sv_n[b]
    total = sv_scan[b, ns]
    bound = float32(key_cost(min_key[b]) + adaptive_beam[b])
    scan = sv_scan[b]
    base = b * H
    mask = H - 1
    for k in range(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, total, cuda.gridDim.x * cuda.blockDim.x):
        i = find_segment(scan, ns, k)
        if olabel[e_indptr[sv_state[b, i]] + (k - scan[i])] == 0:
            continue  # a non-word arc keeps its ctx: its predecessor is known
        a, i, nc, ctx, event = _expanded_arc(b, k, scan, ns, e_indptr, sv_state, sv_ctx, sv_cost, ac, ilabel,
                                             olabel, weight, boost, context)
        if event == ARC_FULL:
            status[b] = LM_OVERFLOW
            return
        if nc < bound:
            slot = _find_slot(nx_key, base, mask, token_key(nextstate[a], ctx))
            if slot >= 0 and nx_val[base + slot] == pack(nc, a):
                cuda.atomic.min(nx_pctx, base + slot, sv_ctx[b, i])


@cuda.jit
def resolve_kernel(t, lengths, status, e_indptr, num_states, olabel, context,
                   tl_key, tl_tok, gid, nx_key, nx_val, nx_tok, nx_pctx, H,
                   nx_state, nx_ctx, nx_cost, nx_prev, nx_arc, nx_slot, nx_n):
    """The new frame's token list from its hash table: one thread per slot."""
    b = cuda.blockIdx.y
    if t >= lengths[b] or status[b] != OK:
        return
    contextual = _contextual(b, context)
    base = b * H
    mask = H - 1
    for slot in range(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x, H, cuda.gridDim.x * cuda.blockDim.x):
        key = nx_key[base + slot]
        if key != EMPTY_KEY:
            packed = nx_val[base + slot]
            a = packed_arc(packed)
            ctx = key_ctx(key)
            # the predecessor's key: the arc's source state and, after a word arc, the ctx it came from
            src_ctx = nx_pctx[base + slot] if contextual and olabel[a] != 0 else ctx
            source = _lookup(tl_key, tl_tok, base, mask, token_key(arc_source(e_indptr, num_states, a), src_ctx))
            j = cuda.atomic.add(nx_n, b, 1)
            nx_tok[base + slot] = j
            nx_state[b, j] = key_state(key)
            nx_ctx[b, j] = ctx
            nx_cost[b, j] = packed_cost(packed)
            nx_prev[b, j] = gid[b, source]
            nx_arc[b, j] = a
            nx_slot[b, j] = slot


@cuda.jit
def closure_kernel(t, lengths, status, ne_indptr, num_states, olabel, weight, nextstate,
                   min_key, adaptive_beam, initial, boost, context,
                   ht_key, ht_val, ht_tok, ht_pctx, ht_count, ht_stamp, H, capacity,
                   tl_state, tl_ctx, tl_cost, tl_prev, tl_arc, tl_slot, tl_n, work, work2):
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
    contextual = _contextual(b, context)
    base = b * H
    mask = H - 1
    sh = cuda.shared.array(3, int64)  # work size, next work size, overflow status
    n0 = tl_n[b]
    for j in range(tid, n0, nthreads):
        work[b, j] = j
    if tid == 0:
        sh[0] = n0
        sh[1] = 0
        sh[2] = OK
    cuda.syncthreads()
    lookups = misses = fetches = int64(0)
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
            ctx = tl_ctx[b, j]
            for a in range(ne_indptr[s], ne_indptr[s + 1]):
                w = _arc_weight(b, a, weight, olabel, boost)
                nc, nctx, event = _word_step(b, float32(c + w), ctx, olabel[a], context)
                if event == ARC_FULL:
                    sh[2] = LM_OVERFLOW
                    break
                lookups, misses, fetches = _tally(event, lookups, misses, fetches)
                if nc > cutoff:
                    continue
                slot = _insert(ht_key, ht_count, b, base, mask, capacity, token_key(nextstate[a], nctx))
                if slot < 0:
                    sh[2] = OVERFLOW
                    break
                candidate = pack(nc, a)
                if candidate < cuda.atomic.min(ht_val, base + slot, candidate):
                    if cuda.atomic.max(ht_stamp, base + slot, rounds) < rounds:
                        work2[b, cuda.atomic.add(sh, 1, 1)] = slot
        cuda.syncthreads()
        if sh[2] != OK:
            if tid == 0:
                status[b] = sh[2]
            return
        if contextual:
            # a slot whose best (cost, arc id) improved settles its predecessor ctx again,
            # among this round's word arcs that reach it with exactly that (cost, arc id)
            for w in range(tid, sh[1], nthreads):
                ht_pctx[base + work2[b, w]] = NO_CTX
            cuda.syncthreads()
            for w in range(tid, sh[0], nthreads):
                j = work[b, w]
                c = tl_cost[b, j]
                if c > cutoff:
                    continue
                s = tl_state[b, j]
                ctx = tl_ctx[b, j]
                for a in range(ne_indptr[s], ne_indptr[s + 1]):
                    if olabel[a] == 0:
                        continue
                    w = _arc_weight(b, a, weight, olabel, boost)
                    nc, nctx, event = _word_step(b, float32(c + w), ctx, olabel[a], context)
                    if nc > cutoff:
                        continue
                    slot = _find_slot(ht_key, base, mask, token_key(nextstate[a], nctx))
                    if slot >= 0 and ht_val[base + slot] == pack(nc, a) and ctx < cuda.atomic.min(
                            ht_pctx, base + slot, ctx):
                        # also a tie with an earlier round's winner: its backpointer changes
                        if cuda.atomic.max(ht_stamp, base + slot, rounds) < rounds:
                            work2[b, cuda.atomic.add(sh, 1, 1)] = slot
            cuda.syncthreads()
        # phase B: write the improved tokens (new keys get a frame-list entry)
        for w in range(tid, sh[1], nthreads):
            slot = work2[b, w]
            j = ht_tok[base + slot]
            if j < 0:
                key = ht_key[base + slot]
                j = cuda.atomic.add(tl_n, b, 1)
                ht_tok[base + slot] = j
                tl_state[b, j] = key_state(key)
                tl_ctx[b, j] = key_ctx(key)
                tl_slot[b, j] = slot
            packed = ht_val[base + slot]
            a = packed_arc(packed)
            src_ctx = ht_pctx[base + slot] if contextual and olabel[a] != 0 else tl_ctx[b, j]
            source = _lookup(ht_key, ht_tok, base, mask, token_key(arc_source(ne_indptr, num_states, a), src_ctx))
            tl_cost[b, j] = packed_cost(packed)
            tl_prev[b, j] = -(source + 2)
            tl_arc[b, j] = a
            work[b, w] = j
        cuda.syncthreads()
        if tid == 0:
            sh[0] = sh[1]
            sh[1] = 0
        cuda.syncthreads()
    _count_lookups(context, lookups, misses, fetches)


@cuda.jit
def init_kernel(start, start_ctx, ht_key, ht_val, ht_tok, ht_pctx, ht_count, H,
                tl_state, tl_ctx, tl_cost, tl_prev, tl_arc, tl_slot, tl_n):
    """The start token of every utterance, before the initial closure."""
    b = cuda.grid(1)
    if b < tl_n.shape[0]:
        key = token_key(start, start_ctx[b])
        slot = hash_slot(key, H - 1)
        ht_key[b * H + slot] = key
        ht_val[b * H + slot] = pack(float32(0.0), -1)
        ht_tok[b * H + slot] = 0
        ht_pctx[b * H + slot] = start_ctx[b]
        ht_count[b] = 1
        tl_state[b, 0] = start
        tl_ctx[b, 0] = start_ctx[b]
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
