"""CUDA kernels of the search (Numba-CUDA) and their launcher.

One step of the search per frame t for a whole batch; each utterance b owns a row of
every array (groups.py).  Per frame `search` launches, in order:

    prune_store   one block per utterance: best cost, exact radix select of the
                  max_active/min_active-th costs, Kaldi's cutoff, survivors and their
                  in-frame epsilon ancestors stored as backpointers, and the prefix sum
                  of the survivors' emitting-arc counts (load balancing)
    batch_scan    one block: the batch's prefix sum of the utterances' arc counts
    frame_costs   one block per utterance: the frame's acoustic cost of each input
                  label, with frame-level token pruning (FLToP) when asked
    lm_cache_clear  (rescoring only) empties the big LM's arc cache when half full
    expand_min    one thread per arc: the best new cost (atomicMin on its key); when
                  rescoring, it also brings the big-LM arcs the frame needs into the cache
    fltop_redo    (FLToP only) one thread per utterance: a frame whose arcs FLToP left
                  without a finite cost gets its acoustic costs again, unpruned, and
                  expand_min runs again for it
    expand        one thread per arc: new tokens below best + adaptive beam recombined
                  in an open-addressing hash table (atomicCAS insert, atomicMin on the
                  packed (cost, arc id) so that the argmin comes with the min); the
                  thread that inserts a key lists it in the frame's token list
    expand_ties   (contexts only) one thread per word arc: the smallest predecessor
                  context among the arcs that tie for a slot's best (cost, arc id)
    batch_scan    the batch's prefix sum of the new token counts
    resolve       one thread per listed token: its cost, arc and backpointer
    closure       one block per utterance: input-epsilon arcs, round by round, until no
                  cost improves
    tick          advances the frame in device memory (ws.clock), which every kernel
                  reads, so that a frame step can be captured once as a CUDA graph

The per-arc and per-token kernels are flat: one grid strides over the whole batch's arcs
(tokens), each index mapped to its utterance by the batch scan, so that the work spreads
over the GPU whether one utterance or a thousand are still searching.  (A grid of blocks
per utterance left most threads idle: survivors are a few hundred where max_active allows
thousands, and the batch's long tail searches a few utterances at a time.)

and after the last frame `traceback` walks the backpointers of the best token.

Tokens recombine by key `common.token_key(state, ctx)`, as on the CPU.  Recombination
keeps the smallest (cost, arc id, predecessor's ctx); only word arcs can tie on (cost,
arc id) with different predecessors, so the predecessor's ctx is settled by a second
pass over the word arcs (expand_ties, and a pass in each closure round).

Rescoring follows the on-the-fly rescoring paper (sec. 2.1, 2.3): the big LM's offsets,
labels, backoff states and backoff costs are on the GPU, its arc payloads and final
costs stay in pinned host memory that kernels read directly.  A big-LM arc's position is
found on the GPU (common.context_locate); its payload is read from a device arc cache
keyed by position (open addressing, atomicCAS), and the thread that inserts a position
copies the payload from host memory, so each arc crosses the bus once while it stays
cached.  The cache is emptied at a frame start when more than half full; a frame that
fills it marks its utterances LM_OVERFLOW (decoded again with a larger cache).

Token lists and hash tables are double-buffered: resolving a new token's predecessor
(arc -> source state and ctx -> that key's token) reads the previous frame's table while
the new one fills.  Every kernel returns at once for an utterance that is finished or
has overflowed; the host grows the capacity and decodes an overflowed utterance again.

Kernels take their arrays in the named groups of `groups` (only those, so that the
simulator hands the shared `njit` logic plain NumPy arrays).  Device arrays must be
Numba device arrays, never None: a real launch takes nothing else.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import cuda, float32, float64, int32, int64, uint32, uint64

from .common import (
    arc_source,
    beam_bound,
    best_token,
    boost_cost,
    boosted_weight,
    context_arrive,
    context_final,
    context_locate,
    contextual,
    cost_key,
    cutoff_and_adaptive_beam,
    died,
    end_key,
    expanded_cost,
    final_relative_cost,
    find_segment,
    hash_slot,
    in_frame,
    in_frame_prev,
    key_cost,
    key_ctx,
    key_state,
    lm_reach,
    mark_ancestors,
    order_statistics_needed,
    out_of_reach,
    pack,
    packed_arc,
    packed_cost,
    phrase_final,
    token_key,
    trace_length,
    trace_path,
    trailing_blanks,
)
from .constants import (
    BP_OVERFLOW,
    EMPTY_KEY,
    EPS_CYCLE,
    INF_KEY,
    LINK_OVERFLOW,
    LM_ARRIVED,
    LM_CLEARS,
    LM_FETCHES,
    LM_FILL,
    LM_LOOKUPS,
    LM_MISSES,
    LM_OVERFLOW,
    MAX_KEY,
    MAX_PACKED,
    NO_ARC,
    NO_CTX,
    NO_TOKEN,
    OK,
    TOKEN_OVERFLOW,
)
from .fltop import column_cost, fltop_active, fltop_bounds, frame_acoustic_costs
from .select import RADIX_BINS, RADIX_PASSES, matches_prefix, pick_bin, radix_digit, radix_shift

MAX_BLOCK = 256  # threads per block of the per-utterance kernels (sizes their shared arrays)
SCAN_BLOCK = 1024  # threads of batch_scan_kernel's one block (at most)
NO_SLOT = -1
NOT_STORED = MAX_PACKED  # an arc-cache payload not stored yet (its next state would be -1: never real)
# what a word step did with the arc cache
NO_LOOKUP, ARC_HIT, ARC_MISS, ARC_REFETCH, ARC_FULL = 0, 1, 2, 3, 4


# ---------------------------------------------------------------------- hash tables

@cuda.jit(device=True)
def _table(ht):
    """(slots per utterance, mask) of a batch's flat hash table."""
    H = ht.key.shape[0] // ht.count.shape[0]
    return H, H - 1


@cuda.jit(device=True)
def _find_slot(ht, base, mask, key):
    """Slot of `key` in utterance base // H's table, or -1."""
    slot = hash_slot(key, mask)
    for _ in range(mask + 1):
        k = ht.key[base + slot]
        if k == key:
            return slot
        if k == EMPTY_KEY:
            return NO_SLOT
        slot = (slot + 1) & mask
    return NO_SLOT


@cuda.jit(device=True)
def _lookup(ht, base, mask, key):
    """Token index of `key`, or -1."""
    slot = _find_slot(ht, base, mask, key)
    return ht.tok[base + slot] if slot >= 0 else -1


@cuda.jit(device=True)
def _insert(ht, b, base, mask, capacity, key, tl, listed):
    """Slot of `key`, inserting it if new (atomicCAS); -1 when the table is over capacity.
    With `listed`, a new key also gets the next entry of the token list `tl` (its slot and
    ht.tok set; the rest is filled later), so that the list, not the table, is walked."""
    slot = hash_slot(key, mask)
    for _ in range(mask + 1):
        old = cuda.atomic.cas(ht.key, base + slot, int64(EMPTY_KEY), key)
        if old == EMPTY_KEY:
            if cuda.atomic.add(ht.count, b, 1) >= capacity:
                return -1
            if listed:
                j = cuda.atomic.add(tl.n, b, 1)
                ht.tok[base + slot] = j
                tl.slot[b, j] = slot
            return slot
        if old == key:
            return slot
        slot = (slot + 1) & mask
    return -1


@cuda.jit(device=True)
def _arcs_to_expand(b, i, graph, sv, beamed):
    """Survivor i's emitting arcs to expand (beamed: as prune_store_kernel left them in sv.scan)."""
    if beamed:
        return sv.scan[b, i] & int64(0xFFFFFFFF)
    st = sv.state[b, i]
    return graph.e_indptr[st + 1] - graph.e_indptr[st]


# ---------------------------------------------------------------------- block-wide helpers

@cuda.jit(device=True)
def _block_select(costs, n, k, hist, sh_u32, sh_i64):
    """Cost of rank k among costs[:n]: radix select by the whole block."""
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
            key = cost_key(costs[j])
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
    """counts[:nthreads] (one per thread, in shared memory) becomes its exclusive prefix
    sums, the total goes to sh_i64[slot]: Hillis-Steele, log2(nthreads) rounds of the
    whole block; one thread's loop for a block of at most a warp (the simulator's small
    blocks, where every barrier is slow).  Every thread of the block calls it."""
    tid = cuda.threadIdx.x
    if nthreads <= 32:
        if tid == 0:
            total = int64(0)
            for i in range(nthreads):
                c = counts[i]
                counts[i] = total
                total += c
            sh_i64[slot] = total
        cuda.syncthreads()
        return
    own = counts[tid]
    d = 1
    while d < nthreads:
        cuda.syncthreads()
        add = counts[tid - d] if tid >= d else int64(0)
        cuda.syncthreads()
        counts[tid] += add
        d *= 2
    cuda.syncthreads()
    inclusive = counts[tid]
    if tid == nthreads - 1:
        sh_i64[slot] = inclusive
    cuda.syncthreads()
    counts[tid] = inclusive - own
    cuda.syncthreads()


@cuda.jit(device=True)
def _active(t, u, b):
    """Whether utterance b searches frame step t: its steps are first .. lengths - 1 (a
    stream's lane takes part in its launch's steps from the token buffer it stands in)."""
    return u.first[b] <= t and t < u.lengths[b] and u.status[b] == OK


@cuda.jit(device=True)
def _flat(starts, k):
    """(utterance b, index within b) of the batch-wide index k, `starts` the batch's prefix
    sums (batch_scan_kernel): the flat kernels spread a batch's arcs or tokens over one grid,
    however unevenly the utterances hold them."""
    b = find_segment(starts, starts.shape[0] - 1, k)
    return b, k - starts[b]


# ---------------------------------------------------------------------- arcs and contexts

@cuda.jit(device=True)
def _arc_weight(b, a, graph, boosts):
    """Arc a's weight in TLG o B, B utterance b's word boosts (a hash map, looked up only
    for boosted words: boost_cost tests the word's bit first)."""
    w = graph.weight[a]
    word = graph.olabel[a]
    if boosts.active and word != 0:
        w = boosted_weight(w, boost_cost(boosts.keys[b], boosts.costs[b], boosts.bits[b], word))
    return w


@cuda.jit(device=True)
def _cached_arc(cache, payload, pos):
    """(payload, event) of the big-LM arc at `pos`, through the arc cache.  The thread whose
    atomicCAS inserts `pos` copies the payload from pinned host memory (ARC_MISS); a thread
    that finds it not stored yet (its inserter, maybe in another block, is still reading)
    copies it too (ARC_REFETCH), so no thread ever waits.  ARC_FULL: the frame needs more
    slots than the cache allows (3/4 of them, which keeps probing short)."""
    size = cache.keys.shape[0]
    mask = size - 1
    slot = hash_slot(pos, mask)
    for _ in range(size):
        old = cuda.atomic.cas(cache.keys, slot, int64(EMPTY_KEY), pos)
        if old == EMPTY_KEY:
            if cuda.atomic.add(cache.counts, LM_FILL, 1) >= size - (size >> 2):
                return NOT_STORED, ARC_FULL
            arc = payload[0, pos]
            cache.vals[slot] = arc
            return arc, ARC_MISS
        if old == pos:
            arc = cache.vals[slot]
            if arc != NOT_STORED:
                return arc, ARC_HIT
            arc = payload[0, pos]
            cache.vals[slot] = arc  # the same value its inserter stores
            return arc, ARC_REFETCH
        slot = (slot + 1) & mask
    return NOT_STORED, ARC_FULL


@cuda.jit(device=True)
def _word_step(b, cost, ctx, word, context, cache, limit):
    """Cost and context after an arc that outputs `word` (0: none): common.context_step,
    the big LM's arc fetched through the arc cache; and the cache's event.  A step that
    leaves the cost above `limit` whatever the big LM gives back (common.lm_reach, the
    CPU's bound) is not looked up: +inf, as the caller would drop the arc anyway."""
    if word == 0 or not contextual(context, b):
        return cost, ctx, NO_LOOKUP
    if out_of_reach(cost, lm_reach(context, b, ctx), limit):
        return float32(np.inf), ctx, NO_LOOKUP
    lm_s, ph_s, big, pos, end = context_locate(context, b, ctx, word)
    payload = uint64(0)
    event = NO_LOOKUP
    if pos >= 0:
        payload, event = _cached_arc(cache, context.lm.payload, pos)
        if event == ARC_FULL:
            return cost, ctx, event
    delta, ctx = context_arrive(context, b, word, lm_s, ph_s, big, pos, end, payload)
    return float32(cost + delta), ctx, event


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
def _count_lookups(cache, lookups, misses, fetches):
    if lookups > 0:
        cuda.atomic.add(cache.counts, LM_LOOKUPS, lookups)
        cuda.atomic.add(cache.counts, LM_MISSES, misses)
        cuda.atomic.add(cache.counts, LM_FETCHES, fetches)


@cuda.jit(device=True)
def _expanded_arc(b, k, graph, sv, ac, boosts, context, cache, limit):
    """The k-th arc of utterance b's survivors (load balancing: which survivor i, which of
    its arcs a) and the cost and context of the token it makes: (a, i, cost, ctx, event);
    +inf for a word arc that stays above `limit` (_word_step)."""
    i = find_segment(sv.scan[b], sv.n[b], k)
    a = graph.e_indptr[sv.state[b, i]] + (k - sv.scan[b, i])
    nc = expanded_cost(sv.cost[b, i], _arc_weight(b, a, graph, boosts), ac[b, graph.ilabel[a]])
    ctx = sv.ctx[b, i]
    event = NO_LOOKUP
    if nc < np.inf:  # as on the CPU, arcs pruned by FLToP take no word step
        nc, ctx, event = _word_step(b, nc, ctx, graph.olabel[a], context, cache, limit)
    return a, i, nc, ctx, event


# ---------------------------------------------------------------------- kernels

@cuda.jit
def lm_cache_clear_kernel(cache):
    """At a frame start: empty the big LM's arc cache when it is more than half full.  One
    launch: every block reads the fill count first, the last block to finish resets it."""
    size = cache.keys.shape[0]
    clear = cache.counts[LM_FILL] > size >> 1
    if clear:
        for i in range(cuda.grid(1), size, cuda.gridsize(1)):
            cache.keys[i] = EMPTY_KEY
            cache.vals[i] = NOT_STORED
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        cuda.threadfence()
        if cuda.atomic.add(cache.counts, LM_ARRIVED, 1) == cuda.gridDim.x - 1:
            cache.counts[LM_ARRIVED] = 0
            if clear:
                cache.counts[LM_FILL] = 0
                cache.counts[LM_CLEARS] += 1


@cuda.jit
def init_kernel(u, graph, context, ht, tl):
    """The start token of every opening utterance, before the initial closure."""
    b = cuda.grid(1)
    if b < tl.n.shape[0] and u.opening[b]:
        H, mask = _table(ht)
        start_ctx = context.start[b]
        key = token_key(graph.start, start_ctx)
        slot = hash_slot(key, mask)
        ht.key[b * H + slot] = key
        ht.val[b * H + slot] = pack(float32(0.0), NO_ARC)
        ht.tok[b * H + slot] = 0
        ht.pctx[b * H + slot] = start_ctx
        ht.count[b] = 1
        tl.state[b, 0] = graph.start
        tl.ctx[b, 0] = start_ctx
        tl.cost[b, 0] = float32(0.0)
        tl.prev[b, 0] = NO_TOKEN
        tl.arc[b, 0] = NO_ARC
        tl.slot[b, 0] = slot
        tl.n[b] = 1


@cuda.jit
def prune_store_kernel(clock, u, settings, graph, context, cur, nxt, nxt_ht, sv, bp, keep_all, fold):
    """One block per utterance: prune the frame's tokens `cur`, store the survivors and
    their in-frame ancestors as backpointers, list the survivors with the prefix sum of
    their arc counts, and empty the table `nxt_ht` that the next frame's tokens go to.
    On the last step (t == length) keep the single best token instead (with keep_all, as a
    lattice needs: every token, the best one still u.keep).  Ghosts (common.died: the
    search died) are neither pruned nor stored; on the last step u.keep is the best one's
    backpointer.  fold: runs of blanks fold, as the CPU's streams fold them
    (kernels.cpu._store: a token that took again the blank self-loop its backpointer took
    shares that backpointer), for streams, whose paths the host reads (the traceback
    kernel reads one backpointer a frame); room is left for each folded token, which a
    frame where the search dies stores after all (_ghosts)."""
    t = clock[0]
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nthreads = cuda.blockDim.x
    last = t == u.lengths[b] and u.closing[b]
    if (t >= u.lengths[b] and not last) or t < u.first[b] or u.status[b] != OK:
        return
    n = cur.n[b]
    dead = died(n, cur.prev[b], cur.arc[b])
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
            cost, state, ctx = cur.cost[b, j], cur.state[b, j], cur.ctx[b, j]
            cuda.atomic.min(sh_u64, 0, end_key(cost, state, ctx, graph.final, context, b, True))
            cuda.atomic.min(sh_u64, 1, end_key(cost, state, ctx, graph.final, context, b, False))
        else:
            cuda.atomic.min(sh_u32, 0, cost_key(cur.cost[b, j]))
    cuda.syncthreads()
    if last:
        with_final = sh_u64[0] != MAX_PACKED and not dead
        target = sh_u64[0] if with_final else sh_u64[1]
        # tokens of one state tie on (cost, state): the smallest ctx wins
        for j in range(tid, n, nthreads):
            if target != MAX_PACKED and end_key(cur.cost[b, j], cur.state[b, j], cur.ctx[b, j], graph.final,
                                                context, b, with_final) == target:
                cuda.atomic.min(sh_i32, 0, cur.ctx[b, j])
        cuda.syncthreads()
        for j in range(tid, n, nthreads):
            if target != MAX_PACKED and cur.state[b, j] == packed_arc(target) and cur.ctx[b, j] == sh_i32[0]:
                sh_i64[3] = j
        if tid == 0:
            u.reached_final[b] = with_final
    elif n > 0 and not dead:
        best = key_cost(sh_u32[0])
        beam_cutoff = float32(best + settings.beam)
        if tid == 0:
            sh_i64[1] = 0
            sh_i64[2] = 0
        cuda.syncthreads()
        below = at_most = int64(0)
        for j in range(tid, n, nthreads):
            below += cur.cost[b, j] < beam_cutoff
            at_most += cur.cost[b, j] <= beam_cutoff
        cuda.atomic.add(sh_i64, 1, below)
        cuda.atomic.add(sh_i64, 2, at_most)
        cuda.syncthreads()
        need_max, need_min = order_statistics_needed(n, sh_i64[1], sh_i64[2], settings)
        kth_max = float32(np.inf)
        if need_max:
            kth_max = _block_select(cur.cost[b], n, settings.max_active, hist, sh_u32, sh_i64)
        kth_min = float32(np.inf) if n <= settings.min_active else best
        if need_min:
            kth_min = _block_select(cur.cost[b], n, settings.min_active, hist, sh_u32, sh_i64)
        if tid == 0:
            cutoff, ab = cutoff_and_adaptive_beam(best, kth_max, kth_min, settings.beam, settings.beam_delta)
            sh_f32[0] = cutoff
            sh_f32[1] = ab
            u.adaptive_beam[b] = ab
    else:
        if tid == 0:
            sh_f32[0] = float32(-np.inf)  # nothing survives
            u.adaptive_beam[b] = settings.beam
    cuda.syncthreads()
    cutoff = sh_f32[0]
    keep_j = sh_i64[3]

    # ---- mark survivors and their in-frame epsilon ancestors
    mark = bp.mark[b]
    for j in range(tid, n, nthreads):
        mark[j] = 0
    if tid == 0:
        sh_i64[2] = 0  # (read last by the pruning above, before its last syncthreads)
    cuda.syncthreads()
    for j in range(tid, n, nthreads):
        if (last and not dead and (j == keep_j or keep_all)) or (not last and cur.cost[b, j] < cutoff):
            mark_ancestors(j, cur.prev[b], mark)
    cuda.syncthreads()

    # ---- store them as backpointers, in frame-list order, and list the survivors
    chunk = (n + nthreads - 1) // nthreads
    lo = min(tid * chunk, n)
    hi = min(lo + chunk, n)
    folds = fold and not last
    marked = 0
    survived = 0
    folded = 0
    for j in range(lo, hi):
        if mark[j]:
            if folds and _folds(cur, bp, b, j, graph.ilabel, settings.blank_ilabel):
                mark[j] = 2  # (read below by this thread: the fold is tested once)
                folded += 1
            else:
                marked += 1
            if not last and cur.cost[b, j] < cutoff:
                survived += 1
    counts[tid] = marked
    counts2[tid] = survived
    if folded:
        cuda.atomic.add(sh_i64, 2, folded)
    cuda.syncthreads()
    _block_exclusive_scan(counts, nthreads, sh_i64, 0)
    _block_exclusive_scan(counts2, nthreads, sh_i64, 1)
    start = bp.n[b]
    if start + sh_i64[0] + sh_i64[2] > bp.prev.shape[1]:
        if tid == 0:
            u.status[b] = BP_OVERFLOW
        return
    g = start + counts[tid]
    for j in range(lo, hi):
        if mark[j]:
            if mark[j] == 2:  # (folded)
                bp.gid[b, j] = cur.prev[b, j]
            else:
                bp.gid[b, j] = g
                g += 1
    cuda.syncthreads()
    s = counts2[tid]
    for j in range(lo, hi):
        if mark[j]:
            g = bp.gid[b, j]
            if g >= start:  # (not folded)
                p = cur.prev[b, j]
                bp.prev[b, g] = bp.gid[b, in_frame(p)] if p <= -2 else p
                bp.arc[b, g] = cur.arc[b, j]
            if not last and cur.cost[b, j] < cutoff:
                sv.state[b, s] = cur.state[b, j]
                sv.ctx[b, s] = cur.ctx[b, j]
                sv.cost[b, s] = cur.cost[b, j]
                sv.gid[b, s] = g
                s += 1
    ns = sh_i64[1]
    if tid == 0:
        step = u.steps[b]
        bp.step_start[b, step] = start
        u.steps[b] = step + 1
        bp.n[b] = start + sh_i64[0]
        sv.n[b] = ns
        u.min_key[b] = INF_KEY
        if not last:
            u.survivors[b] += ns
        if last:
            bp.step_start[b, step + 1] = start + sh_i64[0]
            u.keep[b] = -1
            if keep_j >= 0:
                u.keep[b] = cur.prev[b, keep_j] if dead else bp.gid[b, keep_j]
    if last:
        return

    # ---- clear the other buffer's hash table: this frame's new tokens go there
    H, mask = _table(nxt_ht)
    base = b * H
    for j in range(tid, nxt.n[b], nthreads):
        slot = nxt.slot[b, j]
        nxt_ht.key[base + slot] = EMPTY_KEY
        nxt_ht.val[base + slot] = MAX_PACKED
        nxt_ht.tok[base + slot] = -1
        nxt_ht.pctx[base + slot] = NO_CTX
        nxt_ht.stamp[base + slot] = 0
    cuda.syncthreads()
    if tid == 0:
        nxt.n[b] = 0
        nxt_ht.count[b] = 0

    # ---- with a context beam, as the CPU's ExpandArcs: a survivor more than it dearer than its
    # graph state's cheapest expands no arc.  The states' least costs go in the emptied table,
    # each survivor's (slot << 32 | arcs to expand) in sv.scan until the prefix sum
    beamed = settings.context_beam < np.inf and contextual(context, b)
    if beamed:
        for i in range(tid, ns, nthreads):
            slot = _insert(nxt_ht, b, base, mask, H, token_key(sv.state[b, i], 0), nxt, False)
            cuda.atomic.min(nxt_ht.val, base + slot, uint64(cost_key(sv.cost[b, i])))
        cuda.syncthreads()
        for i in range(tid, ns, nthreads):
            st = sv.state[b, i]
            slot = _find_slot(nxt_ht, base, mask, token_key(st, 0))
            arcs = graph.e_indptr[st + 1] - graph.e_indptr[st]
            if sv.cost[b, i] > float32(key_cost(uint32(nxt_ht.val[base + slot])) + settings.context_beam):
                arcs = 0
            sv.scan[b, i] = (int64(slot) << 32) | arcs
        cuda.syncthreads()
        for i in range(tid, ns, nthreads):  # (no lookups meanwhile: emptying slots would cut their probes)
            slot = sv.scan[b, i] >> 32
            nxt_ht.key[base + slot] = EMPTY_KEY
            nxt_ht.val[base + slot] = MAX_PACKED
        if tid == 0:
            nxt_ht.count[b] = 0
        cuda.syncthreads()

    # ---- prefix sum of the survivors' emitting-arc counts
    chunk = (ns + nthreads - 1) // nthreads
    lo = min(tid * chunk, ns)
    hi = min(lo + chunk, ns)
    arcs = int64(0)
    for i in range(lo, hi):
        arcs += _arcs_to_expand(b, i, graph, sv, beamed)
    counts[tid] = arcs
    cuda.syncthreads()
    _block_exclusive_scan(counts, nthreads, sh_i64, 2)
    offset = counts[tid]
    for i in range(lo, hi):
        arcs = _arcs_to_expand(b, i, graph, sv, beamed)
        sv.scan[b, i] = offset
        offset += arcs
    if tid == 0:
        sv.scan[b, ns] = sh_i64[2]
        u.arcs[b] = sh_i64[2]


@cuda.jit
def batch_scan_kernel(clock, u, counts, starts):
    """One block: starts[b] = the sum of counts[:b] over the utterances still searching the
    frame, starts[B] the total, which the flat kernels spread over their grid."""
    t = clock[0]
    B = u.lengths.shape[0]
    tid = cuda.threadIdx.x
    nthreads = cuda.blockDim.x
    sums = cuda.shared.array(SCAN_BLOCK, int64)
    sh_i64 = cuda.shared.array(1, int64)
    chunk = (B + nthreads - 1) // nthreads
    lo = min(tid * chunk, B)
    hi = min(lo + chunk, B)
    own = int64(0)
    for b in range(lo, hi):
        if _active(t, u, b):
            own += counts[b]
    sums[tid] = own
    cuda.syncthreads()
    _block_exclusive_scan(sums, nthreads, sh_i64, 0)
    offset = sums[tid]
    for b in range(lo, hi):
        starts[b] = offset
        if _active(t, u, b):
            offset += counts[b]
    if tid == 0:
        starts[B] = sh_i64[0]


@cuda.jit
def frame_costs_kernel(clock, u, settings, acoustics, prune):
    """One block per utterance: the frame's acoustic cost by input label (FLToP applied with
    `prune`: its bounds by one thread, the columns by all)."""
    t = clock[0]
    b = cuda.blockIdx.x
    if not _active(t, u, b):
        return
    bounds = cuda.shared.array(2, float64)
    hist = cuda.shared.array(RADIX_BINS, int32)
    log_probs = acoustics.log_probs[b]
    if cuda.threadIdx.x == 0:
        floor, kth = fltop_bounds(log_probs, t, settings, prune, hist)
        bounds[0] = floor
        bounds[1] = kth
    cuda.syncthreads()
    floor, kth = bounds[0], bounds[1]
    for il in range(cuda.threadIdx.x + 1, log_probs.shape[1] + 1, cuda.blockDim.x):
        acoustics.costs[b, il] = column_cost(log_probs, t, il, settings, floor, kth)


@cuda.jit
def fltop_redo_kernel(clock, u, settings, sv, acoustics):
    """One thread per utterance, after expand_min: where FLToP left no arc of the frame a
    finite cost, the frame's acoustic costs again without it, and redo[b] set so that
    expand_min runs again for the utterance (the CPU search's fallback; counted once the
    frame's closure is done without an overflow, which searches the frame again)."""
    t = clock[0]
    b = cuda.grid(1)
    if b >= u.lengths.shape[0]:
        return
    u.redo[b] = 0
    if _active(t, u, b) and sv.n[b] > 0 and u.min_key[b] == INF_KEY and fltop_active(
            settings, acoustics.log_probs.shape[2]):
        frame_acoustic_costs(acoustics.log_probs[b], t, settings, False, acoustics.costs[b],
                             cuda.local.array(RADIX_BINS, int32))  # (no pruning: no selection)
        u.redo[b] = 1


@cuda.jit
def expand_min_kernel(clock, u, graph, sv, acoustics, boosts, context, cache, redo_only):
    """The best new cost; when rescoring, the first walk over the frame's word arcs, which
    brings the big-LM arcs they read into the arc cache (expand and expand_ties hit).
    With redo_only, only the utterances that fltop_redo marked."""
    t = clock[0]
    lookups = misses = fetches = int64(0)
    for k in range(cuda.grid(1), u.arc_start[-1], cuda.gridsize(1)):
        b, kb = _flat(u.arc_start, k)
        if not _active(t, u, b) or (redo_only and u.redo[b] == 0):
            continue
        # a word arc above the best so far cannot be the best (a stale read is higher: still safe)
        a, i, nc, ctx, event = _expanded_arc(b, kb, graph, sv, acoustics.costs, boosts, context, cache,
                                             key_cost(u.min_key[b]))
        if event == ARC_FULL:
            u.status[b] = LM_OVERFLOW
            continue
        lookups, misses, fetches = _tally(event, lookups, misses, fetches)
        key = cost_key(nc)
        if key < u.min_key[b]:  # (a stale read only costs an atomic)
            cuda.atomic.min(u.min_key, b, key)
    _count_lookups(cache, lookups, misses, fetches)


@cuda.jit
def expand_kernel(clock, u, graph, sv, acoustics, boosts, context, cache, ht, tl, capacity):
    """ExpandArcs: the new tokens below the frame's bound, recombined in `ht`; a new key
    gets its entry in the token list `tl`."""
    t = clock[0]
    H, mask = _table(ht)
    lookups = misses = fetches = int64(0)
    for k in range(cuda.grid(1), u.arc_start[-1], cuda.gridsize(1)):
        b, kb = _flat(u.arc_start, k)
        if not _active(t, u, b):
            continue
        bound = beam_bound(key_cost(u.min_key[b]), u.adaptive_beam[b])
        a, i, nc, ctx, event = _expanded_arc(b, kb, graph, sv, acoustics.costs, boosts, context, cache, bound)
        if event == ARC_FULL:  # expand_min looked up only the arcs that could give the best: this can fill
            u.status[b] = LM_OVERFLOW
            continue
        if event == ARC_MISS or event == ARC_REFETCH:  # a first read of the frame (expand_min's are counted)
            lookups, misses, fetches = _tally(event, lookups, misses, fetches)
        if nc < bound:
            slot = _insert(ht, b, b * H, mask, capacity, token_key(graph.nextstate[a], ctx), tl, True)
            if slot < 0:
                u.status[b] = TOKEN_OVERFLOW
                continue
            cuda.atomic.min(ht.val, b * H + slot, pack(nc, a))
    _count_lookups(cache, lookups, misses, fetches)


@cuda.jit
def expand_ties_kernel(clock, u, graph, sv, acoustics, boosts, context, cache, ht):
    """After expand (contexts only): for each slot won by a word arc, the smallest ctx among
    the survivors whose arc reached it with exactly the winning (cost, arc id)."""
    t = clock[0]
    H, mask = _table(ht)
    for k in range(cuda.grid(1), u.arc_start[-1], cuda.gridsize(1)):
        b, kb = _flat(u.arc_start, k)
        if not _active(t, u, b) or not contextual(context, b):
            continue
        i = find_segment(sv.scan[b], sv.n[b], kb)
        if graph.olabel[graph.e_indptr[sv.state[b, i]] + (kb - sv.scan[b, i])] == 0:
            continue  # a non-word arc keeps its ctx: its predecessor is known
        bound = beam_bound(key_cost(u.min_key[b]), u.adaptive_beam[b])
        a, i, nc, ctx, event = _expanded_arc(b, kb, graph, sv, acoustics.costs, boosts, context, cache, bound)
        if event == ARC_FULL:
            u.status[b] = LM_OVERFLOW
            continue
        if nc < bound:
            base = b * H
            slot = _find_slot(ht, base, mask, token_key(graph.nextstate[a], ctx))
            if slot >= 0 and ht.val[base + slot] == pack(nc, a):
                cuda.atomic.min(ht.pctx, base + slot, sv.ctx[b, i])


@cuda.jit
def resolve_kernel(clock, u, graph, context, cur_ht, bp, ht, tl):
    """The new frame's tokens `tl`, listed by expand, completed from their hash table `ht`:
    one thread per token; its predecessor is found in the previous frame's table `cur_ht`."""
    t = clock[0]
    H, mask = _table(ht)
    for k in range(cuda.grid(1), u.token_start[-1], cuda.gridsize(1)):
        b, j = _flat(u.token_start, k)
        if not _active(t, u, b):
            continue
        base = b * H
        slot = tl.slot[b, j]
        key = ht.key[base + slot]
        packed = ht.val[base + slot]
        a = packed_arc(packed)
        ctx = key_ctx(key)
        # the predecessor's key: the arc's source state and, after a word arc, the ctx it came from
        src_ctx = ht.pctx[base + slot] if contextual(context, b) and graph.olabel[a] != 0 else ctx
        source = _lookup(cur_ht, base, mask, token_key(arc_source(graph.e_indptr, graph.num_states, a), src_ctx))
        tl.state[b, j] = key_state(key)
        tl.ctx[b, j] = ctx
        tl.cost[b, j] = packed_cost(packed)
        tl.prev[b, j] = bp.gid[b, source]
        tl.arc[b, j] = a


@cuda.jit(device=True)
def _folds(cur, bp, b, j, ilabel, blank):
    """Whether token j of utterance b took again the blank self-loop its backpointer took
    (prune_store_kernel folds it into that backpointer)."""
    p = cur.prev[b, j]
    return p >= 0 and cur.arc[b, j] == bp.arc[b, p] and ilabel[bp.arc[b, p]] == blank


@cuda.jit(device=True)
def _ghosts(b, u, cur, sv, tl, bp):
    """Where the frame left utterance b no token: ghosts in tl (common.died), those of
    the frame before (cur) once the search has died, else the frame's survivors (sv).  A
    survivor folded into an earlier backpointer (prune_store_kernel) gets its own at the
    frame's step first, as the CPU's _unfold_survivors does: the path that ends at a ghost
    ends at its step (prune_store_kernel left room for it)."""
    was_dead = died(cur.n[b], cur.prev[b], cur.arc[b])
    m = cur.n[b] if was_dead else sv.n[b]
    if not was_dead and cuda.threadIdx.x == 0:  # (once in a search, at most: one thread)
        start = bp.step_start[b, u.steps[b] - 1]
        g = bp.n[b]
        for j in range(m):
            p = sv.gid[b, j]
            if p < start:
                bp.prev[b, g] = p
                bp.arc[b, g] = bp.arc[b, p]
                sv.gid[b, j] = g
                g += 1
        bp.n[b] = g
    cuda.syncthreads()
    for j in range(cuda.threadIdx.x, m, cuda.blockDim.x):
        if was_dead:
            tl.state[b, j], tl.ctx[b, j], tl.cost[b, j], tl.prev[b, j] = (cur.state[b, j], cur.ctx[b, j],
                                                                          cur.cost[b, j], cur.prev[b, j])
        else:
            tl.state[b, j], tl.ctx[b, j], tl.cost[b, j], tl.prev[b, j] = (sv.state[b, j], sv.ctx[b, j],
                                                                          sv.cost[b, j], sv.gid[b, j])
        tl.arc[b, j] = NO_ARC
        tl.slot[b, j] = 0  # in no hash table: emptying slot 0 of an empty table is harmless
    cuda.syncthreads()  # every thread has read tl.n
    if cuda.threadIdx.x == 0:
        tl.n[b] = m


@cuda.jit
def closure_kernel(clock, u, graph, boosts, context, cache, ht, tl, work, initial, capacity, cur, sv, bp):
    """Input-epsilon closure of one utterance's frame tokens (Bellman-Ford rounds in a block).
    work: two (B, capacity) int32 lists, this round's tokens and the next round's slots.
    Where the frame left no token, the search ends: ghosts (_ghosts) from the frame's tokens
    `cur` or survivors `sv`."""
    t = clock[0]
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nthreads = cuda.blockDim.x
    if (initial and not u.opening[b]) or (not initial and not _active(t, u, b)) or u.status[b] != OK:
        return
    if initial:
        cutoff = float32(np.finfo(np.float32).max)
    else:
        cutoff = float32(key_cost(u.min_key[b]) + u.adaptive_beam[b])
    with_ctx = contextual(context, b)
    H, mask = _table(ht)
    base = b * H
    todo, queued = work[0][b], work[1][b]
    sh = cuda.shared.array(3, int64)  # work size, next work size, overflow status
    n0 = tl.n[b]
    if n0 == 0 and not initial:
        _ghosts(b, u, cur, sv, tl, bp)
        if tid == 0:
            u.fallbacks[b] += u.redo[b]
        return
    for j in range(tid, n0, nthreads):
        todo[j] = j
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
            j = todo[w]
            c = tl.cost[b, j]
            if c > cutoff:
                continue
            s = tl.state[b, j]
            ctx = tl.ctx[b, j]
            for a in range(graph.ne_indptr[s], graph.ne_indptr[s + 1]):
                nc, nctx, event = _word_step(b, float32(c + _arc_weight(b, a, graph, boosts)), ctx, graph.olabel[a],
                                             context, cache, cutoff)
                if event == ARC_FULL:
                    sh[2] = LM_OVERFLOW
                    break
                lookups, misses, fetches = _tally(event, lookups, misses, fetches)
                if nc > cutoff:
                    continue
                slot = _insert(ht, b, base, mask, capacity, token_key(graph.nextstate[a], nctx), tl, False)
                if slot < 0:
                    sh[2] = TOKEN_OVERFLOW
                    break
                candidate = pack(nc, a)
                if candidate < cuda.atomic.min(ht.val, base + slot, candidate):
                    if cuda.atomic.max(ht.stamp, base + slot, rounds) < rounds:
                        queued[cuda.atomic.add(sh, 1, 1)] = slot
        cuda.syncthreads()
        if sh[2] != OK:
            if tid == 0:
                u.status[b] = sh[2]
            return
        if with_ctx:
            # a slot whose best (cost, arc id) improved settles its predecessor ctx again,
            # among this round's word arcs that reach it with exactly that (cost, arc id)
            for w in range(tid, sh[1], nthreads):
                ht.pctx[base + queued[w]] = NO_CTX
            cuda.syncthreads()
            for w in range(tid, sh[0], nthreads):
                j = todo[w]
                c = tl.cost[b, j]
                if c > cutoff:
                    continue
                s = tl.state[b, j]
                ctx = tl.ctx[b, j]
                for a in range(graph.ne_indptr[s], graph.ne_indptr[s + 1]):
                    if graph.olabel[a] == 0:
                        continue
                    nc, nctx, event = _word_step(b, float32(c + _arc_weight(b, a, graph, boosts)), ctx,
                                                 graph.olabel[a], context, cache, cutoff)
                    if nc > cutoff:
                        continue
                    slot = _find_slot(ht, base, mask, token_key(graph.nextstate[a], nctx))
                    if slot >= 0 and ht.val[base + slot] == pack(nc, a) and ctx < cuda.atomic.min(
                            ht.pctx, base + slot, ctx):
                        # also a tie with an earlier round's winner: its backpointer changes
                        if cuda.atomic.max(ht.stamp, base + slot, rounds) < rounds:
                            queued[cuda.atomic.add(sh, 1, 1)] = slot
            cuda.syncthreads()
        # phase B: write the improved tokens (new keys get a frame-list entry)
        for w in range(tid, sh[1], nthreads):
            slot = queued[w]
            j = ht.tok[base + slot]
            if j < 0:
                key = ht.key[base + slot]
                j = cuda.atomic.add(tl.n, b, 1)
                ht.tok[base + slot] = j
                tl.state[b, j] = key_state(key)
                tl.ctx[b, j] = key_ctx(key)
                tl.slot[b, j] = slot
            packed = ht.val[base + slot]
            a = packed_arc(packed)
            src_ctx = ht.pctx[base + slot] if with_ctx and graph.olabel[a] != 0 else tl.ctx[b, j]
            source = _lookup(ht, base, mask, token_key(arc_source(graph.ne_indptr, graph.num_states, a), src_ctx))
            tl.cost[b, j] = packed_cost(packed)
            tl.prev[b, j] = in_frame_prev(source)
            tl.arc[b, j] = a
            todo[w] = j
        cuda.syncthreads()
        if tid == 0:
            sh[0] = sh[1]
            sh[1] = 0
        cuda.syncthreads()
    _count_lookups(cache, lookups, misses, fetches)
    if tid == 0 and not initial:  # the frame is done: its FLToP fallback counts (fltop_redo_kernel)
        u.fallbacks[b] += u.redo[b]


@cuda.jit
def traceback_kernel(u, bp, paths):
    """One thread per utterance: the arcs of the kept token's backpointer chain, in order;
    length -1 where they are more than paths can hold (epsilon arcs without end: the host
    traces that chain from the backpointers)."""
    b = cuda.grid(1)
    if b >= u.keep.shape[0] or u.status[b] != OK:
        return
    g = u.keep[b]
    length = trace_length(bp.prev[b], g, bp.n[b])
    if length < 0:
        u.status[b] = EPS_CYCLE
        return
    if length - 1 > paths.arcs.shape[1]:
        paths.length[b] = -1
        return
    trace_path(bp.prev[b], bp.arc[b], g, length, paths.arcs[b], paths.gids[b])
    paths.length[b] = max(length - 1, 0)


# ---------------------------------------------------------------------- lattices

@cuda.jit(device=True)
def _add_link(lat, b, src, dst, a, graph_cost, acoustic):
    """List a link of utterance b's frame; False when its row is full."""
    k = cuda.atomic.add(lat.n, b, 1)
    if k >= lat.src.shape[1]:
        return False
    lat.src[b, k] = src
    lat.dst[b, k] = dst
    lat.arc[b, k] = a
    lat.graph[b, k] = graph_cost
    lat.acoustic[b, k] = acoustic
    return True


@cuda.jit
def lattice_arcs_kernel(clock, u, graph, sv, acoustics, boosts, context, cache, ht, lat):
    """After the closure: a link for each survivor's emitting arc below the frame's bound
    (the arcs that expand followed), to the token it reached.  The CPU records the same
    links as ExpandArcs follows them."""
    t = clock[0]
    H, mask = _table(ht)
    for k in range(cuda.grid(1), u.arc_start[-1], cuda.gridsize(1)):
        b, kb = _flat(u.arc_start, k)
        if not _active(t, u, b):
            continue
        bound = beam_bound(key_cost(u.min_key[b]), u.adaptive_beam[b])
        a, i, nc, ctx, event = _expanded_arc(b, kb, graph, sv, acoustics.costs, boosts, context, cache, bound)
        if event == ARC_FULL:
            u.status[b] = LM_OVERFLOW
            continue
        if nc < bound:
            j = _lookup(ht, b * H, mask, token_key(graph.nextstate[a], ctx))
            ac = acoustics.costs[b, graph.ilabel[a]]
            if j >= 0 and not _add_link(lat, b, sv.gid[b, i], j, a, float32(float32(nc - sv.cost[b, i]) - ac), ac):
                u.status[b] = LINK_OVERFLOW


@cuda.jit
def lattice_epsilons_kernel(clock, u, graph, boosts, context, cache, ht, tl, lat, initial):
    """After the closure, one block per utterance: a link for each input-epsilon arc that
    the closure follows from the frame's tokens at their final costs (the CPU keeps the
    links of each token's last expansion: the same ones)."""
    t = clock[0]
    b = cuda.blockIdx.x
    if (initial and not u.opening[b]) or (not initial and not _active(t, u, b)) or u.status[b] != OK:
        return
    if died(tl.n[b], tl.prev[b], tl.arc[b]):
        return  # the search died: ghosts follow no arc
    if initial:
        cutoff = float32(np.finfo(np.float32).max)
    else:
        cutoff = float32(key_cost(u.min_key[b]) + u.adaptive_beam[b])
    H, mask = _table(ht)
    for j in range(cuda.threadIdx.x, tl.n[b], cuda.blockDim.x):
        c = tl.cost[b, j]
        if c > cutoff:
            continue
        s = tl.state[b, j]
        for a in range(graph.ne_indptr[s], graph.ne_indptr[s + 1]):
            nc, nctx, event = _word_step(b, float32(c + _arc_weight(b, a, graph, boosts)), tl.ctx[b, j],
                                         graph.olabel[a], context, cache, cutoff)
            if event == ARC_FULL:
                u.status[b] = LM_OVERFLOW
                return
            if nc > cutoff:
                continue
            d = _lookup(ht, b * H, mask, token_key(graph.nextstate[a], nctx))
            if d >= 0 and not _add_link(lat, b, in_frame_prev(j), d, a, float32(nc - c), float32(0.0)):
                u.status[b] = LINK_OVERFLOW
                return


@cuda.jit
def lattice_store_kernel(clock, u, graph, context, cur, bp, lat):
    """After prune_store, one block per utterance: the stored tokens' forward costs, and the
    frame's links between stored tokens renumbered into backpointers and appended to the
    chunk's half of lat.stored, those whose reduced cost exceeds the lattice beam left out
    (kernels.lattice.store_links on the CPU).  On the last step, the final costs too."""
    t = clock[0]
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nthreads = cuda.blockDim.x
    last = t == u.lengths[b] and u.closing[b]
    if (t >= u.lengths[b] and not last) or t < u.first[b] or u.status[b] != OK:
        return
    st = lat.stored
    step = u.steps[b] - 1
    h = (step // lat.interval) % 2
    r = step % lat.interval
    start = bp.step_start[b, step]
    mark, gid = bp.mark[b], bp.gid[b]
    counts = cuda.shared.array(MAX_BLOCK, int64)
    sh_i64 = cuda.shared.array(1, int64)
    if r == 0 and tid == 0:
        st.count[h, b] = 0  # the host has taken this half's last chunk
    for j in range(tid, cur.n[b], nthreads):
        if mark[j]:
            g = gid[j]
            lat.alpha[b, g] = cur.cost[b, j]
            if last:
                f = float32(0.0)
                if u.reached_final[b]:
                    f = graph.final[cur.state[b, j]]
                    if f < np.inf and contextual(context, b):
                        f = float32(f + context_final(context, b, cur.ctx[b, j]))
                elif context is not None:  # (a phrase matched in part still earns nothing)
                    f = phrase_final(context, b, cur.ctx[b, j])
                lat.final_alpha[b, g - start] = cur.cost[b, j]
                lat.final_cost[b, g - start] = f
    cuda.syncthreads()
    n = min(lat.n[b], lat.src.shape[1])
    chunk = (n + nthreads - 1) // nthreads
    lo = min(tid * chunk, n)
    hi = min(lo + chunk, n)
    kept = int64(0)
    for k in range(lo, hi):
        kept += _stored_link(lat, b, k, mark, gid)[0]
    counts[tid] = kept
    cuda.syncthreads()
    _block_exclusive_scan(counts, nthreads, sh_i64, 0)
    w = st.count[h, b]
    if w + sh_i64[0] > st.src.shape[2]:
        if tid == 0:
            u.status[b] = LINK_OVERFLOW
        return
    w += counts[tid]
    for k in range(lo, hi):
        keep, s, d, red = _stored_link(lat, b, k, mark, gid)
        if keep:
            st.src[h, b, w] = s
            st.dst[h, b, w] = d
            st.arc[h, b, w] = lat.arc[b, k]
            st.graph[h, b, w] = lat.graph[b, k]
            st.acoustic[h, b, w] = lat.acoustic[b, k]
            st.reduced[h, b, w] = red
            w += 1
    cuda.syncthreads()
    if tid == 0:
        st.block[h, b, r] = st.count[h, b]
        st.steps[h, b, r] = start
        st.count[h, b] += sh_i64[0]
        st.block[h, b, r + 1] = st.count[h, b]
        st.steps[h, b, r + 1] = bp.n[b]
        lat.n[b] = 0


@cuda.jit(device=True)
def _stored_link(lat, b, k, mark, gid):
    """(kept, source and destination backpointers, reduced cost) of utterance b's listed link k."""
    s = lat.src[b, k]
    if s <= -2:
        j = in_frame(s)
        if mark[j] == 0:
            return False, 0, 0, float32(0.0)
        s = gid[j]
    d = lat.dst[b, k]
    if mark[d] == 0:
        return False, 0, 0, float32(0.0)
    d = gid[d]
    red = max(float32(float32(float32(lat.alpha[b, s] + lat.graph[b, k]) + lat.acoustic[b, k]) - lat.alpha[b, d]),
              float32(0.0))
    return red <= lat.beam, s, d, red


# ---------------------------------------------------------------------- stream lanes

@cuda.jit
def readings_kernel(graph, settings, context, u, tokens0, tokens1, bp, buffer, memo, trailing, voiced, relative,
                    dead):
    """One thread per lane whose tokens are in token buffer buffer[b] (-1: skip it): what the
    endpoint rules read (the best token's trailing blanks, whether speech came before them,
    Kaldi's final relative cost) and whether the search died (its tokens are ghosts, and
    the frames after their paths count as trailing blanks).  memo[b]: the lane's stream's
    memo of its last walk back (common.trailing_blanks), read and updated."""
    b = cuda.grid(1)
    if b >= buffer.shape[0] or buffer[b] < 0:
        return
    tl = tokens1 if buffer[b] else tokens0
    n = tl.n[b]
    keep = best_token(tl.cost[b], tl.state[b], tl.ctx[b], n, graph.final, context, b, False)
    count, speech = trailing_blanks(keep, tl.prev[b], tl.arc[b], bp.prev[b], bp.arc[b], bp.step_start[b], u.steps[b],
                                    graph.ilabel, settings.blank_ilabel, memo[b])
    trailing[b] = count
    voiced[b] = speech
    ended = died(n, tl.prev[b], tl.arc[b])
    relative[b] = final_relative_cost(tl.cost[b], tl.state[b], tl.ctx[b], n, graph.final, context, b)
    dead[b] = ended


@cuda.jit
def adopt_kernel(buffer, old0, old1, tokens0, tokens1, tables0, tables1, capacity):
    """One block per lane: the tokens of lane b's buffer buffer[b] (-1: none) copied from a
    smaller workspace (`old0`, `old1`) into this one's and entered in that buffer's empty
    hash table, as a frame step leaves them."""
    b = cuda.blockIdx.x
    if b >= buffer.shape[0] or buffer[b] < 0:
        return
    src = old1 if buffer[b] else old0
    tl = tokens1 if buffer[b] else tokens0
    ht = tables1 if buffer[b] else tables0
    H, mask = _table(ht)
    n = src.n[b]
    for j in range(cuda.threadIdx.x, n, cuda.blockDim.x):
        state, ctx = src.state[b, j], src.ctx[b, j]
        slot = _insert(ht, b, b * H, mask, capacity, token_key(state, ctx), tl, False)
        ht.tok[b * H + slot] = j
        ht.val[b * H + slot] = pack(src.cost[b, j], src.arc[b, j])
        tl.state[b, j] = state
        tl.ctx[b, j] = ctx
        tl.cost[b, j] = src.cost[b, j]
        tl.prev[b, j] = src.prev[b, j]
        tl.arc[b, j] = src.arc[b, j]
        tl.slot[b, j] = slot
    if cuda.threadIdx.x == 0:
        tl.n[b] = n


# ---------------------------------------------------------------------- the launcher

class Paths(NamedTuple):
    """The best paths of a batch, written by traceback_kernel."""

    arcs: np.ndarray  # (B, L) graph arc ids
    gids: np.ndarray  # (B, L) their backpointers (the frame each was stored at: bp.step_start)
    length: np.ndarray  # (B,): -1: the path has more than L arcs (traced on the host)


class Workspace(NamedTuple):
    """Everything a batch's search writes (the backend allocates it; see kernels.groups)."""

    u: object  # groups.Utterances
    tokens: tuple  # two groups.Tokens: this frame's and the next's
    tables: tuple  # their two groups.HashTable
    sv: object  # groups.Survivors
    bp: object  # groups.Backpointers
    work: tuple  # two (B, capacity) int32 lists for the closure
    paths: Paths
    clock: np.ndarray  # (1,) int32: the frame that the kernels of a frame step work on


class Launch(NamedTuple):
    """Grid shapes: per utterance (blocks of `block` threads), of the flat kernels (one grid
    over the whole batch's arcs or tokens), of the batch scan and for the arc cache."""

    batch: int
    block: int  # threads per block of the per-utterance kernels (<= MAX_BLOCK)
    flat_blocks: int  # blocks of the flat kernels (expand_min, expand, expand_ties, resolve)
    flat_block: int  # threads per block of the flat kernels
    scan_block: int  # threads of batch_scan_kernel's block (<= SCAN_BLOCK)
    cache_blocks: int


@cuda.jit
def tick_kernel(clock):
    """The frame step's last kernel: on to the next frame."""
    if cuda.grid(1) == 0:
        clock[0] += 1


class Steps:
    """The launches of a search on one workspace, on `stream`: begin (start tokens and their
    closure), one frame step, the last step and the traceback.  `with_contexts`: some
    utterance's tokens carry a context (expand_ties runs).  `lat`: a groups.DeviceLinks
    to keep the lattice's links in, or None."""

    def __init__(self, launch, ws, settings, graph, acoustics, boosts, context, cache, capacity, with_contexts,
                 stream=0, lat=None, fold=False):
        self.launch, self.ws, self.settings, self.graph, self.lat = launch, ws, settings, graph, lat
        self.fold = fold and lat is None  # (prune_store_kernel: streams fold runs of blanks)
        self.acoustics, self.boosts, self.context, self.cache = acoustics, boosts, context, cache
        self.capacity, self.with_contexts, self.stream = capacity, with_contexts, stream
        B = launch.batch
        self.per_utt = (B, launch.block, stream)
        self.flat = (launch.flat_blocks, launch.flat_block, stream)
        self.scan = (1, launch.scan_block, stream)
        self.per_thread = ((B + 31) // 32, 32, stream)
        self.cache_grid = (launch.cache_blocks, launch.block, stream)
        self.rescoring = bool(context.rescoring)
        self.fltop = settings.top_n < acoustics.log_probs.shape[2] or settings.log_rel > -np.inf

    def begin(self):
        """The start token of each opening utterance (u.opening) and its epsilon closure, in
        token buffer 0."""
        ws = self.ws
        init_kernel[self.per_thread](ws.u, self.graph, self.context, ws.tables[0], ws.tokens[0])
        if self.rescoring:
            lm_cache_clear_kernel[self.cache_grid](self.cache)
        closure_kernel[self.per_utt](ws.clock, ws.u, self.graph, self.boosts, self.context, self.cache,
                                     ws.tables[0], ws.tokens[0], ws.work, True, self.capacity, ws.tokens[1], ws.sv,
                                     ws.bp)
        if self.lat is not None:
            lattice_epsilons_kernel[self.per_utt](ws.clock, ws.u, self.graph, self.boosts, self.context, self.cache,
                                                  ws.tables[0], ws.tokens[0], self.lat, True)

    def prune_store(self, cur):
        ws = self.ws
        prune_store_kernel[self.per_utt](ws.clock, ws.u, self.settings, self.graph, self.context, ws.tokens[cur],
                                         ws.tokens[1 - cur], ws.tables[1 - cur], ws.sv, ws.bp, self.lat is not None,
                                         self.fold)
        if self.lat is not None:
            lattice_store_kernel[self.per_utt](ws.clock, ws.u, self.graph, self.context, ws.tokens[cur], ws.bp,
                                               self.lat)

    def step(self, cur):
        """The kernels of frame step ws.clock for the utterances whose tokens are in buffer `cur`."""
        ws, u, clock, sv, graph, settings = self.ws, self.ws.u, self.ws.clock, self.ws.sv, self.graph, self.settings
        acoustics, boosts, context, cache, capacity = self.acoustics, self.boosts, self.context, self.cache, \
            self.capacity
        flat = self.flat
        nxt = 1 - cur
        self.prune_store(cur)
        batch_scan_kernel[self.scan](clock, u, u.arcs, u.arc_start)
        frame_costs_kernel[self.per_utt](clock, u, settings, acoustics, self.fltop)
        if self.rescoring:
            lm_cache_clear_kernel[self.cache_grid](cache)
        expand_min_kernel[flat](clock, u, graph, sv, acoustics, boosts, context, cache, False)
        if self.fltop:
            fltop_redo_kernel[self.per_thread](clock, u, settings, sv, acoustics)
            expand_min_kernel[flat](clock, u, graph, sv, acoustics, boosts, context, cache, True)
        expand_kernel[flat](clock, u, graph, sv, acoustics, boosts, context, cache, ws.tables[nxt], ws.tokens[nxt],
                            capacity)
        if self.with_contexts:
            expand_ties_kernel[flat](clock, u, graph, sv, acoustics, boosts, context, cache, ws.tables[nxt])
        batch_scan_kernel[self.scan](clock, u, ws.tokens[nxt].n, u.token_start)
        resolve_kernel[flat](clock, u, graph, context, ws.tables[cur], ws.bp, ws.tables[nxt], ws.tokens[nxt])
        closure_kernel[self.per_utt](clock, u, graph, boosts, context, cache, ws.tables[nxt], ws.tokens[nxt],
                                     ws.work, False, capacity, ws.tokens[cur], sv, ws.bp)
        if self.lat is not None:
            lattice_arcs_kernel[flat](clock, u, graph, sv, acoustics, boosts, context, cache, ws.tables[nxt], self.lat)
            lattice_epsilons_kernel[self.per_utt](clock, u, graph, boosts, context, cache, ws.tables[nxt],
                                                  ws.tokens[nxt], self.lat, False)
        tick_kernel[1, 1, self.stream](clock)

    def traceback(self):
        traceback_kernel[self.per_thread](self.ws.u, self.ws.bp, self.ws.paths)


def search(launch, ws, settings, graph, acoustics, boosts, context, cache, capacity, num_frames, with_contexts,
           stream=0, capture=None, graphs=None, lattice=None):
    """Launch the whole search of a batch, frame after frame, on `stream` (asynchronously:
    the caller reads ws.u.status and ws.paths back when it needs them).

    Every kernel of a frame step reads the frame from ws.clock, which the step's last
    kernel advances, so a step is the same launches every frame.  `capture`, where given,
    turns a function that launches them into a replayable CUDA graph (a callable): the two
    steps (the token buffers alternate) are captured once and replayed each frame, one
    graph launch instead of half a dozen kernel launches.  Without it every kernel is
    launched every frame (the simulator's path).  `graphs`: the two steps captured by an
    earlier search on the very same arrays and arguments, replayed as they are.
    `lattice`: (groups.DeviceLinks, chunk) to keep the lattice's links, chunk(k) called
    once the steps of chunk k (lat.interval steps each) are stored and once more, with
    k = -1, at the end.  Returns the captured steps (None without `capture`)."""
    lat, chunk = lattice if lattice is not None else (None, None)
    steps = Steps(launch, ws, settings, graph, acoustics, boosts, context, cache, capacity, with_contexts, stream,
                  lat)
    if capture is None:
        graphs = None
    elif graphs is None:  # captured before anything runs: the GPU waits for no capture
        graphs = [capture(lambda: steps.step(0)), capture(lambda: steps.step(1))]
    steps.begin()
    for t in range(num_frames):
        if graphs:
            graphs[t % 2]()
        else:
            steps.step(t % 2)
        if lat is not None and (t + 1) % lat.interval == 0:
            chunk(t // lat.interval)  # frame step t stored step t: the chunk's last
    steps.prune_store(num_frames % 2)  # the last step keeps the best token
    steps.traceback()
    if lat is not None:
        chunk(-1)
    return graphs
