"""Per-arc and per-token logic shared by the CPU search and the CUDA kernels.

Every function here is a plain ``@numba.njit`` function: the CPU backend calls it from
``njit`` code and the CUDA kernels call the very same function from ``@cuda.jit`` code
(Numba compiles it for the GPU target on first use), so both backends compute costs,
keys, tie-breaks and context steps bit for bit alike.  Where the two differ is how they
fetch (a big-LM arc comes from memory on the CPU and through a device cache on the GPU),
never the arithmetic.

Recombination keeps, per token key, the smallest (cost, arc id, predecessor's ctx): a tie
in cost goes to the smaller arc id, which does not depend on the order threads run in, so
the two backends (and two runs of one backend) agree exactly.
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from .constants import EMPTY_KEY, MAX_PACKED, NO_ARC, TRAIL_AT, TRAIL_BLANKS, TRAIL_VOICED

_SIGN = np.uint32(0x80000000)
_LOW32 = np.uint64(0xFFFFFFFF)
INF = np.float32(np.inf)
COARSE_COST = np.float32(2**27)  # float32's step is 16 there: the design doc, "Weights"


@intrinsic
def _f32_as_u32(typingctx, x):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.uint32(types.float32), codegen


@intrinsic
def _u32_as_f32(typingctx, x):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


# ---------------------------------------------------------------------- bits, keys, hashing

@njit(inline="always", cache=True)
def f32_bits(x):
    """The bits of a float32 as int32 (to store a weight in an integer record)."""
    return np.int32(_f32_as_u32(np.float32(x)))


@njit(inline="always", cache=True)
def bits_f32(bits):
    return _u32_as_f32(np.uint32(bits))


@njit(inline="always", cache=True)
def cost_key(cost):
    """Order-preserving map of a float32 cost to uint32 (radix select, packed atomicMin).

    -0.0 maps like +0.0 so that key order equals float order, ties included.
    """
    bits = _f32_as_u32(np.float32(cost))
    if bits == _SIGN:
        bits = np.uint32(0)
    if bits & _SIGN:
        return ~bits
    return bits | _SIGN


@njit(inline="always", cache=True)
def key_cost(key):
    """Inverse of cost_key."""
    key = np.uint32(key)
    if key & _SIGN:
        return _u32_as_f32(key ^ _SIGN)
    return _u32_as_f32(~key)


@njit(inline="always", cache=True)
def pack(cost, arc):
    """(cost, arc id) as one uint64 whose integer order is (cost, arc) order."""
    return (np.uint64(cost_key(cost)) << np.uint64(32)) | np.uint64(np.uint32(arc))


@njit(inline="always", cache=True)
def packed_arc(packed):
    return np.int32(np.uint32(packed & _LOW32))


@njit(inline="always", cache=True)
def packed_cost(packed):
    return key_cost(np.uint32(packed >> np.uint64(32)))


@njit(inline="always", cache=True)
def hash_slot(key, mask):
    """First probe slot of a key (mask = capacity - 1): MurmurHash3's 64-bit finaliser, so
    that keys differing only in their context half (high bits) spread like the rest."""
    k = np.uint64(np.int64(key))
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xFF51AFD7ED558CCD)
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xC4CEB9FE1A85EC53)
    k ^= k >> np.uint64(33)
    return np.int64(k & np.uint64(mask))


@njit(inline="always", cache=True)
def token_key(state, ctx):
    """The recombination key of a token: its graph state and its context state in one
    int64, never EMPTY_KEY."""
    return (np.int64(ctx) << np.int64(32)) | np.int64(state)


@njit(inline="always", cache=True)
def key_state(key):
    return np.int32(key & np.int64(0xFFFFFFFF))


@njit(inline="always", cache=True)
def key_ctx(key):
    return np.int32(key >> np.int64(32))


# ---------------------------------------------------------------------- costs

@njit(inline="always", cache=True)
def arc_acoustic_cost(log_probs, t, ilabel, acoustic_scale, blank_ilabel, blank_penalty):
    """Cost of consuming frame t with an arc of input label `ilabel` (column ilabel - 1)."""
    c = -acoustic_scale * log_probs[t, ilabel - 1]
    if ilabel == blank_ilabel:
        c += blank_penalty
    return np.float32(c)


@njit(inline="always", cache=True)
def expanded_cost(cost, weight, acoustic):
    """A token's cost after an emitting arc: the arc's weight and acoustic cost first."""
    return np.float32(cost + np.float32(weight + acoustic))


@njit(inline="always", cache=True)
def boosted_weight(weight, word_cost):
    """An arc's weight in TLG o B, B a single-state word-boost acceptor: rounded as OpenFST's
    composition rounds it, so that every form of B decodes bit for bit like the composed graph."""
    return np.float32(weight + word_cost)


@njit(cache=True, _nrt=False)  # no reference counting of the arrays on each call
def boost_cost(keys, costs, bits, word):
    """Cost of output word `word` in one utterance's boost map (open addressing; keys -1 =
    empty; capacity a power of two): -reward for a boosted word, else 0.  The map is the
    single-state boost acceptor B of the riva decoder paper, looked up instead of composed.
    `bits` has bit w set for each boosted word w: most words are not, and one bit test
    answers them without probing the map."""
    if (bits[word >> 5] >> np.uint32(word & 31)) & np.uint32(1) == 0:
        return np.float32(0.0)
    mask = keys.shape[0] - 1
    slot = hash_slot(word, mask)
    for _ in range(keys.shape[0]):
        k = keys[slot]
        if k == word:
            return costs[slot]
        if k == EMPTY_KEY:
            return np.float32(0.0)
        slot = (slot + 1) & mask
    return np.float32(0.0)


# ---------------------------------------------------------------------- pruning

@njit(inline="always", cache=True)
def cutoff_and_adaptive_beam(best, kth_max, kth_min, beam, beam_delta):
    """Kaldi FasterDecoder's GetCutoff given the two order statistics.

    kth_max: cost of the token at rank max_active (0-based) or +inf when there are no
    more tokens than that; kth_min: the same at rank min_active.  Tokens whose cost is
    strictly below the returned cutoff survive; adaptive_beam bounds the next frame.

    One departure from Kaldi: where more than max_active tokens tie at the best cost, its
    cutoff (the max_active-th cost, the best) keeps none of them and the search dies; here
    the cutoff is the next float32 above the best, and the tied tokens survive (so too
    where best + beam rounds to the best; past ~2^27 the next frame's bounds round onto its
    best cost all the same, and every token dies: the design doc, "Weights").
    """
    beam_cutoff = np.float32(best + beam)
    if kth_max < beam_cutoff:
        cutoff, adaptive_beam = kth_max, np.float32(kth_max - best + beam_delta)
    elif kth_min > beam_cutoff:
        cutoff, adaptive_beam = kth_min, np.float32(kth_min - best + beam_delta)
    else:
        cutoff, adaptive_beam = beam_cutoff, np.float32(beam)
    if not cutoff > best:
        cutoff = key_cost(cost_key(best) + np.uint32(1))
    return cutoff, adaptive_beam


@njit(inline="always", cache=True)
def beam_bound(best, beam):
    """ExpandArcs' bound, float32(best + beam), or the next float32 above `best` where the sum
    rounds onto it (a beam below the costs' float32 step: `nc < bound` then pruned the best
    arc itself, and every token died, at beam 1e-3 after 20k frames) -- below COARSE_COST:
    past it costs are too coarse to search, and every token dies as the design doc says (its
    warning names the frame no log-softmax gives: padding decoded as frames)."""
    bound = np.float32(best + beam)
    if bound <= best and best < COARSE_COST:
        bound = key_cost(cost_key(best) + np.uint32(1))
    return bound


@njit(inline="always", cache=True)
def order_statistics_needed(n, below, at_most, settings):
    """Which order statistics cutoff_and_adaptive_beam needs, given how many of the n
    tokens cost < best + beam (`below`) and <= best + beam (`at_most`):
    (the max_active-th, the min_active-th).  A statistic not needed cannot change the
    cutoff, so the radix select (four passes over the tokens) runs only when it can:
    the max_active-th is below best + beam only when more than max_active tokens are,
    the min_active-th above it only when at most min_active tokens are not."""
    return n > settings.max_active and below > settings.max_active, (
        n > settings.min_active and settings.min_active > 0 and at_most <= settings.min_active)


@njit(inline="always", cache=True)
def end_key(cost, state, ctx, final, context, row, with_final):
    """The order of tokens on the last step: pack(cost [+ final costs], state), MAX_PACKED
    when that is not finite.  Tokens of one state tie here; the smaller ctx wins."""
    c = cost
    if with_final:
        f = final[state]
        if context is not None and contextual(context, row):
            f = np.float32(f + context_final(context, row, ctx))
        c = np.float32(c + f)
    elif context is not None and c < INF:  # (no final state: a phrase matched in part still earns nothing)
        c = np.float32(c + phrase_final(context, row, ctx))
    if c < INF:
        return pack(c, state)
    return MAX_PACKED


@njit(inline="always", cache=True)
def best_token(cost, state, ctx, n, final, context, row, with_final):
    """Index of the token (of n, row `row`'s context) with the smallest (cost [+ final costs],
    state, ctx), or -1 if none is finite."""
    keep = -1
    best = MAX_PACKED
    best_ctx = 0
    for j in range(n):
        key = end_key(cost[j], state[j], ctx[j], final, context, row, with_final)
        if key != MAX_PACKED and (keep < 0 or key < best or (key == best and ctx[j] < best_ctx)):
            best = key
            best_ctx = ctx[j]
            keep = j
    return keep


@njit(inline="always", cache=True)
def final_relative_cost(cost, state, ctx, n, final, context, row):
    """Kaldi's FinalRelativeCost of a frame's n tokens: the best cost with final costs minus
    the best without (+inf when no token is in a final state)."""
    best = INF
    best_final = INF
    for j in range(n):
        best = min(best, cost[j])
        c = np.float32(cost[j] + final[state[j]])
        if context is not None and c < INF:
            c = np.float32(c + context_final(context, row, ctx[j]))
        best_final = min(best_final, c)
    if best_final == INF:
        return INF
    return np.float32(best_final - best)


@njit(inline="always", cache=True)
def trailing_blanks(keep, tok_prev, tok_arc, bp_prev, bp_arc, steps, count, ilabel, blank, memo):
    """What the endpoint rules read of a stream: the trailing blanks of the path of its token
    keep (tok_prev / tok_arc: its frame's tokens) and whether a non-blank came before them
    (else the count ran to the start, and the caller counts from the last speech it
    committed).  Blanks are counted in frames, by the steps their backpointers were stored at
    (steps: its first `count`, frames since the stream's base; find_segment), as a run of blanks that the
    search folded is one backpointer: the frames after the path's last non-blank.  Where the
    search died, that counts the frames after its path too.  memo (int64, TRAIL_*): the last
    walk's first stored backpointer (-1: none), the blanks from it back and 1 where a
    non-blank came before them; a walk that reaches that backpointer stops there, and the
    memo becomes this walk's.  (In silence the blanks run back to the last speech: walked
    whole at every call, a stream's call took time that grew with its silence.)"""
    if keep < 0:
        return 0, False
    inside = 0
    k = keep
    for _ in range(tok_prev.shape[0]):  # a longer chain loops (an epsilon cycle): finish reports it
        a = tok_arc[k]
        if a != NO_ARC and ilabel[a] != 0:
            if ilabel[a] != blank:
                return inside, True
            inside += 1
        p = tok_prev[k]
        if p > -2:
            break
        k = in_frame(p)
    first = g = tok_prev[k]
    if first < 0:
        return inside, False
    top = find_segment(steps, count, first)
    back = top  # blanks from first back: to the start unless a non-blank comes first
    voiced = False
    for _ in range(bp_prev.shape[0]):
        if g < 0:
            break
        if g == memo[TRAIL_AT]:
            back = top - find_segment(steps, count, g) + memo[TRAIL_BLANKS]
            voiced = memo[TRAIL_VOICED] != 0
            break
        a = bp_arc[g]
        if a != NO_ARC and ilabel[a] != 0 and ilabel[a] != blank:
            back = top - find_segment(steps, count, g)
            voiced = True
            break
        g = bp_prev[g]
    memo[TRAIL_AT] = first
    memo[TRAIL_BLANKS] = back
    memo[TRAIL_VOICED] = 1 if voiced else 0
    return count - top + back, voiced


# ---------------------------------------------------------------------- backpointers

@njit(inline="always", cache=True)
def died(n, prev, arc):
    """Whether a search of n tokens (their prev and arc) has died: where no token outlives
    a frame, the search ends at the frame before, whose survivors stay on as ghosts (no
    arc; prev: the survivor's backpointer) that read no more frames, for partial results
    and the last step to trace back from.  A search's tokens are all ghosts or none."""
    return n > 0 and arc[0] == NO_ARC and prev[0] >= 0


@njit(inline="always", cache=True)
def in_frame_prev(j):
    """A token's `prev` when its predecessor is token j of the same frame (an epsilon arc)."""
    return -(j + 2)


@njit(inline="always", cache=True)
def in_frame(prev):
    """The same-frame predecessor of a token with this `prev`, or -1 when it has none."""
    return -(prev + 2) if prev <= -2 else -1


@njit(inline="always", cache=True)
def mark_ancestors(j, prev, mark):
    """Mark token j and its in-frame epsilon ancestors: they are stored as backpointers.
    Threads that mark the same ancestor concurrently all write 1."""
    k = j
    while k >= 0 and mark[k] == 0:
        mark[k] = 1
        k = in_frame(prev[k])


@njit(inline="always", cache=True)
def trace_length(bp_prev, g, stored):
    """Backpointers on the chain from backpointer g back to the start token (which has no
    arc), or -1 when the chain is longer than all `stored` ones: a cycle."""
    length = 0
    while g >= 0:
        length += 1
        if length > stored:
            return -1
        g = bp_prev[g]
    return length


@njit(inline="always", cache=True)
def trace_path(bp_prev, bp_arc, g, length, arcs, gids):
    """The arcs of the chain ending at backpointer g, in path order, and their backpointers."""
    for i in range(length - 2, -1, -1):
        arcs[i] = bp_arc[g]
        gids[i] = g
        g = bp_prev[g]


# ---------------------------------------------------------------------- load balancing

@njit(inline="always", cache=True)
def find_segment(offsets, n, k):
    """The i with offsets[i] <= k < offsets[i + 1] (offsets non-decreasing, offsets[n] > k).

    Maps a thread's arc index to its token: the load-balancing step of ExpandArcs."""
    lo = 0
    hi = n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if offsets[mid] <= k:
            lo = mid
        else:
            hi = mid
    return lo


@njit(inline="always", cache=True)
def arc_source(indptr, num_states, a):
    """The state whose arc range [indptr[s], indptr[s + 1]) holds arc `a`."""
    return find_segment(indptr, num_states, a)


# ---------------------------------------------------------------------- automata with backoff

@njit(inline="always", cache=True)
def automaton_locate(a, row, state, label):
    """The arc that reads `label` in `state` of automaton `row` of `a` (groups.Automata).
    Returns (backoff costs paid, the arc's position or -1, the state where the search
    ended): -1 when the label is missing all the way to a state with no backoff.  This
    is an n-gram LM's exact backoff semantics and an Aho-Corasick automaton's failure
    transitions alike.  It reads no arc payload: the GPU keeps the big LM's in host memory."""
    cost = np.float32(0.0)
    s = state
    while True:
        lo = a.offsets[row, s]
        end = a.offsets[row, s + 1]
        hi = end
        while lo < hi:  # binary search of the sorted labels
            mid = (lo + hi) // 2
            if a.labels[row, mid] < label:
                lo = mid + 1
            else:
                hi = mid
        if lo < end and a.labels[row, lo] == label:
            return cost, np.int64(lo), np.int32(s)
        b = a.backoff[row, s]
        if b < 0:
            return cost, np.int64(-1), np.int32(s)
        cost = np.float32(cost + a.bo_weight[row, s])
        s = b


@njit(cache=True, nogil=True)
def pack_payloads(weight_bits, nexts, out):
    """out[i]: arc i's payload, its weight's float32 bits (weight_bits, a uint32 view) << 32 |
    its next state, as payload_weight and payload_next read them."""
    for i in range(weight_bits.shape[0]):
        out[i] = (np.uint64(weight_bits[i]) << np.uint64(32)) | np.uint64(np.uint32(nexts[i]))


@njit(inline="always", cache=True)
def payload_weight(payload):
    return bits_f32(np.uint32(payload >> np.uint64(32)))


@njit(inline="always", cache=True)
def payload_next(payload):
    return np.int32(np.uint32(payload & _LOW32))


@njit(inline="always", cache=True)
def automaton_arrive(cost, pos, state, payload):
    """(cost, next state) once the arc at `pos` (its payload) is fetched; a label missing all
    the way (pos -1) costs the backoffs paid and stays in the last state."""
    if pos < 0:
        return cost, state
    return np.float32(cost + payload_weight(payload)), payload_next(payload)


@njit(cache=True, _nrt=False)
def automaton_step(a, row, state, label):
    """(cost, next state) of reading `label` in `state`, the payload read from memory."""
    cost, pos, s = automaton_locate(a, row, state, label)
    payload = a.payload[row, pos] if pos >= 0 else np.uint64(0)
    return automaton_arrive(cost, pos, s, payload)


# ---------------------------------------------------------------------- contexts

GAIN_BUCKETS = 32  # per big-LM state, bounds of the words by id modulo this (lm_gain_bounds); a power of 2
_BUCKET_SCALE = np.float32(8.0)  # a bucket bound is stored in eighths of a nat, rounded up, offset by 128
BUCKET_NONE = 255  # the code of no bound (a bucket with it is never skipped)


@njit(inline="always", cache=True)
def bucket_code(x):
    """The uint8 code of gain bound x, rounded up so that bucket_bound(code) >= x: bounds
    at or below -16 nats read as -16, above 15.75 as none."""
    if not x <= np.float32(BUCKET_NONE - 129) / _BUCKET_SCALE:  # (NaN and +inf too)
        return np.uint8(BUCKET_NONE)
    if x <= np.float32(-128.0) / _BUCKET_SCALE:
        return np.uint8(0)
    return np.uint8(np.int32(np.ceil(x * _BUCKET_SCALE)) + 128)


@njit(inline="always", cache=True)
def bucket_bound(code):
    """The gain bound that uint8 code stands for (+inf: none)."""
    if code == BUCKET_NONE:
        return np.float32(np.inf)
    return np.float32(np.int32(code) - 128) / _BUCKET_SCALE


@njit(cache=True, nogil=True)
def lm_gain_bounds(lo, hi, out, buckets, big, small, small_of, big_depth, small_depth, big_to_small, small_to_big):
    """For each big-LM state b in [lo, hi), an upper bound on what rescoring can give back at
    one word arc: max over words w of graph-LM cost - big-LM cost = small(w | small_of[b]) -
    big(w | b).

    A word explicit at b (or at small_of[b], when it has b's history) gets its exact gain;
    every other word backs off in both LMs, so its gain is the backoff costs' difference
    plus its gain at b's backoff state, which is bounded already (states come by depth).
    At the root the bound is exact over all words.  A search may skip the LM lookups of a
    word arc whose cost before them, minus this bound, is already out of the beam.

    The bound is set by a few words (the n-grams the big LM favours most), so the same
    bound per bucket of words (big word id modulo GAIN_BUCKETS, by the same recursion) is
    tighter for most: on a 12.6k-word 4-gram, ExpandArcs looks up 37% fewer steps with it.
    Stored as uint8 codes (bucket_code), one row of 32 bytes a state (a token's word arcs
    read one cache line).

    big_to_small: big word id -> the small LM's id for it; small_to_big: (offsets, ids), the
    big words each small word stands for (several for a small <unk>).  Writes out[b] (the
    bound, float32) and buckets[b] (bucket codes, uint8 (GAIN_BUCKETS,)), reading those of
    b's backoff state, which must be written already: states of one depth can be done in
    parallel, depth by depth."""
    inv_offsets, inv_ids = small_to_big
    for b in range(lo, hi):
        s = small_of[b]
        bb = big.backoff[0, b]
        same = small_depth[s] == big_depth[b]
        if bb < 0:
            g = -np.inf
            buckets[b] = 0  # (the lowest code: the root has every word explicit, whose gains raise it)
        else:
            d = (small.bo_weight[0, s] if same else np.float32(0.0)) - big.bo_weight[0, b]
            g = out[bb] + d
            for j in range(GAIN_BUCKETS):
                buckets[b, j] = bucket_code(bucket_bound(buckets[bb, j]) + d)
        # the words explicit here and their exact gains
        for a in range(big.offsets[0, b], big.offsets[0, b + 1]):
            w = big.labels[0, a]
            gain = automaton_step(small, 0, s, big_to_small[w])[0] - payload_weight(big.payload[0, a])
            g = _raise(buckets[b], w, gain, g)
        if same:
            for a in range(small.offsets[0, s], small.offsets[0, s + 1]):
                w = small.labels[0, a]
                for i in range(inv_offsets[w], inv_offsets[w + 1]):
                    g = _raise(buckets[b], inv_ids[i],
                               payload_weight(small.payload[0, a]) - automaton_step(big, 0, b, inv_ids[i])[0], g)
        out[b] = g


@njit(inline="always", cache=True)
def _raise(row, w, gain, bound):
    """Word w's exact gain into its bucket of a state's row; returns the state's bound with it."""
    j = w & (GAIN_BUCKETS - 1)
    row[j] = max(row[j], bucket_code(gain))
    return max(bound, gain)


@njit(inline="always", cache=True)
def lm_word_reach(context, row, ctx, word):
    """What the context step of word arc `word` can give back at most: the bound of its
    bucket at the big-LM state (lm_gain_bounds).  Only the CPU reads it (after lm_reach's
    bound has let the arc through)."""
    if not context.rescoring or context.phrase_states[row] > 1:
        return np.float32(np.inf)
    bw = context.lm_map[word]
    return bucket_bound(context.buckets[ctx, bw & (GAIN_BUCKETS - 1)])


@njit(inline="always", cache=True)
def lm_reach(context, row, ctx):
    """The most the context step of any word arc can lower the cost of a token with context
    `ctx` (context.gain of its big-LM state); +inf where no bound is known (phrases)."""
    if not context.rescoring or context.phrase_states[row] > 1:
        return np.float32(np.inf)
    return context.gain[ctx]


@njit(inline="always", cache=True)
def out_of_reach(cost, reach, limit):
    """Whether an arc whose cost before its context step is `cost` stays above `limit` after
    it whatever the step gives back (reach: lm_reach), float32 rounding allowed for."""
    return cost - reach > limit + np.float32(1e-3) + np.float32(1e-6) * abs(limit)


@njit(inline="always", cache=True)
def contextual(context, row):
    """Whether the tokens of utterance `row` carry a context (rescoring or phrases)."""
    return context.rescoring or context.phrase_states[row] > 1


@njit(inline="always", cache=True)
def context_locate(context, row, ctx, word):
    """First half of a context step (context_step): the big-LM arc that reads `word`
    (output word > 0), located without reading its payload.  Returns (lm state, phrase
    state, backoff costs paid, the arc's position or -1, the LM state the search ended in)."""
    P = context.phrase_states[row]
    lm_s = ctx // P
    ph_s = ctx - lm_s * P
    cost = np.float32(0.0)
    pos = np.int64(-1)
    end = np.int32(lm_s)
    if context.rescoring:
        cost, pos, end = automaton_locate(context.lm, 0, lm_s, context.lm_map[word])
    return lm_s, ph_s, cost, pos, end


@njit(inline="always", cache=True)
def context_arrive(context, row, word, lm_s, ph_s, big_cost, pos, end, payload):
    """Second half of a context step, given the big-LM arc's payload: (cost, new ctx).

    Rescoring replaces the graph's LM score by the big LM's (+ big cost - graph-LM cost,
    the graph LM's state being small_of the big LM's); phrase boosting walks the
    utterance's Aho-Corasick automaton."""
    P = context.phrase_states[row]
    cost = np.float32(0.0)
    if context.rescoring:
        big, lm_next = automaton_arrive(big_cost, pos, end, payload)
        small, _ = automaton_step(context.lm0, 0, context.small_of[lm_s], context.lm0_map[word])
        cost = np.float32(big - small)
        lm_s = lm_next
    if P > 1:
        boost, ph_s = automaton_step(context.phrases, row, ph_s, word)
        cost = np.float32(cost + boost)
    return cost, np.int32(lm_s * P + ph_s)


@njit(cache=True, _nrt=False)
def context_step(context, row, ctx, word):
    """The context of a token after output word `word` (> 0): (cost, new ctx), every arc
    read from memory (the CPU; the GPU fetches the big LM's through its arc cache)."""
    lm_s, ph_s, cost, pos, end = context_locate(context, row, ctx, word)
    payload = context.lm.payload[0, pos] if pos >= 0 else np.uint64(0)
    return context_arrive(context, row, word, lm_s, ph_s, cost, pos, end, payload)


@njit(cache=True, _nrt=False)
def context_final(context, row, ctx):
    """The context's final cost: big LM </s> - graph LM </s>, plus the refund of a phrase
    matched only in part."""
    P = context.phrase_states[row]
    lm_s = ctx // P
    ph_s = ctx - lm_s * P
    cost = np.float32(0.0)
    if context.rescoring:
        cost = np.float32(context.lm.final[0, lm_s] - context.lm0.final[0, context.small_of[lm_s]])
    if P > 1:
        cost = np.float32(cost + context.phrases.final[row, ph_s])
    return cost


@njit(inline="always", cache=True)
def phrase_final(context, row, ctx):
    """The refund of a phrase matched only in part (context_final's phrase share), owed at
    the end of every path, final state or not: only whole phrases earn their reward."""
    P = context.phrase_states[row]
    if P > 1:
        return context.phrases.final[row, ctx % P]
    return np.float32(0.0)
