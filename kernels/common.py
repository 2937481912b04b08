"""Per-arc and per-token logic shared by the CPU twin and the CUDA kernels.

Every function here is a plain ``@numba.njit`` function: the CPU backend calls it from
``njit`` code and the CUDA kernels call the very same function from ``@cuda.jit`` code
(Numba compiles it for the GPU target on first use), so both backends compute costs,
keys and tie-breaks bit for bit alike.

Recombination keeps, per graph state, the token with the smallest (cost, arc id): ties in
cost go to the smaller arc id, which does not depend on the order threads run in, so the
two backends (and two runs of one backend) agree exactly.
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np
from numba import njit, types
from numba.extending import intrinsic

EMPTY_KEY = -1  # hash-table slot holding no state
NO_TOKEN = -1  # backpointer of the start token
_SIGN = np.uint32(0x80000000)
_LOW32 = np.uint64(0xFFFFFFFF)


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
    """The recombination key of a token: its graph state and its context state (the LM
    and phrase-automaton state; 0 when neither is used) in one int64, never EMPTY_KEY."""
    return (np.int64(ctx) << np.int64(32)) | np.int64(state)


@njit(inline="always", cache=True)
def key_state(key):
    return np.int32(key & np.int64(0xFFFFFFFF))


@njit(inline="always", cache=True)
def key_ctx(key):
    return np.int32(key >> np.int64(32))


@njit(inline="always", cache=True)
def arc_acoustic_cost(log_probs, t, ilabel, acoustic_scale, blank_ilabel, blank_penalty):
    """Cost of consuming frame t with an arc of input label `ilabel` (column ilabel - 1)."""
    c = -acoustic_scale * log_probs[t, ilabel - 1]
    if ilabel == blank_ilabel:
        c += blank_penalty
    return np.float32(c)


@njit(cache=True)
def frame_acoustic_costs(log_probs, t, acoustic_scale, blank_ilabel, blank_penalty, top_n, log_rel, ac):
    """ac[il] = cost of consuming frame t with input label il, for il = 1..V (ac[0] unused).

    Frame-level token pruning (FLToP): only columns among the frame's `top_n` best (ties at
    the boundary all kept) whose log-probability is within `log_rel` = log(R) of the best
    get a finite cost; the blank is exempt from top_n but not from R.  Arcs of the other
    columns get +inf and are never expanded.  top_n >= V and log_rel = -inf: no pruning.
    """
    V = log_probs.shape[1]
    best = -np.inf
    for c in range(V):
        if log_probs[t, c] > best:
            best = log_probs[t, c]
    floor = best + log_rel
    kth = -np.inf
    if top_n < V:  # the top_n-th largest value, counting ties
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
    for c in range(V):
        v = log_probs[t, c]
        il = c + 1
        if v >= floor and (v >= kth or il == blank_ilabel):
            ac[il] = arc_acoustic_cost(log_probs, t, il, acoustic_scale, blank_ilabel, blank_penalty)
        else:
            ac[il] = np.float32(np.inf)


@njit(inline="always", cache=True)
def better(cost, arc, best_cost, best_arc):
    """True when candidate (cost, arc) beats the kept (best_cost, best_arc): smaller cost, then smaller arc."""
    return pack(cost, arc) < pack(best_cost, best_arc)


@njit(inline="always", cache=True)
def cutoff_and_adaptive_beam(best, kth_max, kth_min, beam, beam_delta):
    """Kaldi FasterDecoder's GetCutoff given the two order statistics.

    kth_max: cost of the token at rank max_active (0-based) or +inf when there are no
    more tokens than that; kth_min: the same at rank min_active.  Tokens whose cost is
    strictly below the returned cutoff survive; adaptive_beam bounds the next frame.
    """
    beam_cutoff = best + beam
    if kth_max < beam_cutoff:
        return kth_max, kth_max - best + beam_delta
    if kth_min > beam_cutoff:
        return kth_min, kth_min - best + beam_delta
    return beam_cutoff, np.float32(beam)


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


@njit(inline="always", cache=True)
def backoff_locate(offsets, labels, backoff, bo_weight, state, label):
    """The arc that reads `label` in state `state` of a deterministic automaton with backoff
    (failure) arcs, in CSR form: each state's labels sorted in labels[offsets[s]:offsets[s + 1]];
    a label missing there is looked for again in backoff[s] after paying bo_weight[s].
    Returns (backoff costs paid, the arc's position or -1, the state where the search
    ended): -1 when the label is missing all the way to a state with no backoff (-1).
    This is an n-gram LM's exact backoff semantics and an Aho-Corasick automaton's failure
    transitions alike.  It reads no arc payload: the CUDA backend keeps those in host memory."""
    cost = np.float32(0.0)
    s = state
    while True:
        lo = offsets[s]
        hi = offsets[s + 1]
        while lo < hi:  # binary search of the sorted labels
            mid = (lo + hi) // 2
            if labels[mid] < label:
                lo = mid + 1
            else:
                hi = mid
        if lo < offsets[s + 1] and labels[lo] == label:
            return cost, np.int64(lo), np.int32(s)
        b = backoff[s]
        if b < 0:
            return cost, np.int64(-1), np.int32(s)
        cost = np.float32(cost + bo_weight[s])
        s = b


@njit(cache=True, _nrt=False)
def backoff_lookup(offsets, labels, weights, nexts, backoff, bo_weight, state, label):
    """(cost, next state) of reading `label` in state `state` (see backoff_locate); a label
    missing all the way costs the backoffs paid and stays in the last state."""
    cost, pos, s = backoff_locate(offsets, labels, backoff, bo_weight, state, label)
    if pos < 0:
        return cost, s
    return np.float32(cost + weights[pos]), np.int32(nexts[pos])


@njit(cache=True, _nrt=False)
def context_step(ctx, word, num_phrase_states, lm, lm0, small_of, lm_map, lm0_map, phrases, rescoring, phrasing):
    """The context of a token after output word `word` (> 0): (cost, new ctx).

    ctx = lm_state * num_phrase_states + phrase_state.  Rescoring replaces the graph's LM
    score by the big LM's (Kaldi's biglm: + big cost - small cost, the small LM's state
    being a function of the big LM's); phrase boosting walks the utterance's Aho-Corasick
    automaton.  lm, lm0 and phrases are (offsets, labels, weights, nexts, backoff,
    bo_weight, final) tuples; lm_map / lm0_map map graph word ids to LM word ids."""
    lm_s = ctx // num_phrase_states
    ph_s = ctx - lm_s * num_phrase_states
    cost = np.float32(0.0)
    if rescoring:
        big, lm_next = backoff_lookup(lm[0], lm[1], lm[2], lm[3], lm[4], lm[5], lm_s, lm_map[word])
        small, _ = backoff_lookup(lm0[0], lm0[1], lm0[2], lm0[3], lm0[4], lm0[5], small_of[lm_s], lm0_map[word])
        cost = np.float32(big - small)
        lm_s = lm_next
    if phrasing:
        boost, ph_s = backoff_lookup(phrases[0], phrases[1], phrases[2], phrases[3], phrases[4], phrases[5],
                                     ph_s, word)
        cost = np.float32(cost + boost)
    return cost, np.int32(lm_s * num_phrase_states + ph_s)


@njit(cache=True, _nrt=False)
def context_final(ctx, num_phrase_states, lm, lm0, small_of, phrases, rescoring, phrasing):
    """The context's final cost: big LM </s> - small LM </s>, plus the refund of a phrase
    matched only in part."""
    lm_s = ctx // num_phrase_states
    ph_s = ctx - lm_s * num_phrase_states
    cost = np.float32(0.0)
    if rescoring:
        cost = np.float32(lm[6][lm_s] - lm0[6][small_of[lm_s]])
    if phrasing:
        cost = np.float32(cost + phrases[6][ph_s])
    return cost
