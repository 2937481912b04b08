"""CPU twin of the decoding kernels: one utterance per call, Numba ``njit(nogil=True)``.

The decoder runs utterances on a thread pool (the GIL is released), so a batch is
decoded in parallel over utterances.  Each frame does what the CUDA kernels do, with the
same shared logic from `common` and `select`:

1. prune the frame's tokens: cutoff = Kaldi's GetCutoff(best + beam, the max_active-th
   and min_active-th costs by exact radix select); store survivors and their in-frame
   epsilon ancestors as backpointers (prev, arc);
2. ExpandArcs: every surviving token follows its emitting arcs; new tokens below the
   bound set by the best token's arcs + adaptive beam are recombined by graph state in
   an open-addressing hash table, keeping the smallest (cost, arc id);
3. non-emitting closure: follow input-epsilon arcs until no cost improves.

A token's `prev` is the global backpointer index of its predecessor (>= 0), NO_TOKEN for
the start token, or ``-(j + 2)`` for an epsilon predecessor j in the same frame.
Capacity overflow makes the call return early with `overflow` set; the caller grows the
capacity and decodes the utterance again, so no token is ever dropped silently.
"""
from __future__ import annotations

import contextlib

import numpy as np
from numba import literally, njit

from .common import (
    EMPTY_KEY,
    NO_TOKEN,
    bits_f32,
    context_final,
    context_step,
    cutoff_and_adaptive_beam,
    f32_bits,
    frame_acoustic_costs,
    hash_slot,
    pack,
    token_key,
)
from .select import RADIX_BINS, select_cost

INF = np.float32(np.inf)
OK, OVERFLOW, EPS_CYCLE = 0, 1, 2


@njit(inline="always")
def _in_frame(prev):
    return -(prev + 2)


@njit(nogil=True, cache=True)
def interleave_graph(e_indptr, ne_indptr, ilabel, olabel, weight, nextstate):
    """The CPU layout of a CSR graph: each state's emitting then epsilon arcs side by side,
    one 20-byte record per arc (ilabel, nextstate, weight bits, graph arc id, olabel), so
    that a token touches one or two cache lines of arcs instead of one per array.  In each
    group the arcs without an output word come first: the search finds the word arcs that
    step the contexts by position, without a branch on each arc's label.

    states[s] = (first arc, first emitting word arc, first epsilon arc, first epsilon word
    arc); the state's arcs end at states[s + 1, 0].  Arc order within a state does not
    change results: ties are broken by the graph arc id (column 3).
    """
    S = e_indptr.shape[0] - 1
    E = ilabel.shape[0]
    states = np.empty((S + 1, 4), np.int64)
    arcs = np.empty((E, 5), np.int32)
    p = 0
    for s in range(S):
        for group, (lo, hi) in enumerate(((e_indptr[s], e_indptr[s + 1]), (ne_indptr[s], ne_indptr[s + 1]))):
            for words in range(2):
                states[s, 2 * group + words] = p
                for a in range(lo, hi):
                    if (olabel[a] != 0) == (words == 1):
                        arcs[p, 0] = ilabel[a] if group == 0 else 0
                        arcs[p, 1] = nextstate[a]
                        arcs[p, 2] = f32_bits(weight[a])
                        arcs[p, 3] = a
                        arcs[p, 4] = olabel[a]
                        p += 1
    states[S, :] = p
    return states, arcs


def word_arc_index(arcs):
    """The CPU layout's word arcs grouped by word: (positions, bounds), word w's arcs being
    positions[bounds[w]:bounds[w + 1]] (built once per graph, for `boosted_weights`)."""
    words = arcs[:, 4]
    positions = np.flatnonzero(words).astype(np.int64)
    positions = positions[np.argsort(words[positions], kind="stable")]
    bounds = np.searchsorted(words[positions], np.arange(int(words.max(initial=0)) + 2))
    return positions, bounds


@contextlib.contextmanager
def boosted_weights(arcs, index, word_costs):
    """B applied to the graph in place while the block runs: each arc of a boosted word gets
    weight w + cost (float32, as composing TLG o B rounds it), restored on exit.  This is
    the whole of TLG o B for a single-state B, in O(arcs of boosted words), and the search
    then pays nothing per arc; `arc_weight` with word_costs is the same sum per arc, for
    batches whose utterances boost different words."""
    positions, bounds = index
    words = np.flatnonzero(word_costs[:len(bounds) - 1])
    boosted = np.concatenate([positions[bounds[w]:bounds[w + 1]] for w in words]) if len(words) else positions[:0]
    saved = arcs[boosted, 2]
    arcs[boosted, 2] = (saved.view(np.float32) + word_costs[arcs[boosted, 4]]).view(np.int32)
    try:
        yield
    finally:
        arcs[boosted, 2] = saved


@njit(inline="always")
def arc_weight(arcs, p, word_boosts, boosted):
    """An arc's weight in TLG o B, B the utterance's single-state word-boost acceptor: the
    graph weight plus the arc's word cost, rounded as OpenFST composes them (so that both
    forms of B, this and `boosted_weights`, decode bit for bit like the composed graph).
    The add is unconditional, word_boosts[0] = 0 for arcs without a word: a test of the
    arc's label would mispredict on every state's boundary between word and other arcs."""
    w = bits_f32(arcs[p, 2])
    if boosted:
        w = np.float32(w + word_boosts[arcs[p, 4]])
    return w


@njit(inline="always")  # call from NRT-free functions only (see _word_step)
def _recombine(state, ctx, cost, prev, arc, pctx, ht_key, ht_tok, tl_state, tl_ctx, tl_cost, tl_prev, tl_arc,
               tl_best, tl_pctx, tl_slot, n, contextual):
    """Insert or improve the token of (state, ctx); ht_key[slot] = its key, ht_tok[slot] its index.

    Recombination keeps the smallest (cost, arc id, predecessor's ctx): tl_best holds the
    packed (cost, arc id), tl_pctx the predecessor's context (two predecessors with
    different contexts can reach one key by the same arc at the same cost only through
    a word arc).  Without contexts (`contextual` False) the key is the state alone and
    tl_ctx stays 0.  Returns (index, n, improved); index -1: the capacity is exhausted.
    """
    mask = ht_key.shape[0] - 1
    key = token_key(state, ctx) if contextual else np.int64(state)
    slot = hash_slot(key, mask)
    candidate = pack(cost, arc)
    while True:
        k = ht_key[slot]
        if k == key:
            j = ht_tok[slot]
            if candidate < tl_best[j] or (contextual and candidate == tl_best[j] and pctx < tl_pctx[j]):
                tl_best[j] = candidate
                tl_cost[j] = cost
                tl_prev[j] = prev
                tl_arc[j] = arc
                if contextual:
                    tl_pctx[j] = pctx
                return j, n, True
            return j, n, False
        if k == EMPTY_KEY:
            if n == tl_state.shape[0]:
                return -1, n, False
            ht_key[slot] = key
            ht_tok[slot] = n
            tl_state[n] = state
            tl_cost[n] = cost
            tl_prev[n] = prev
            tl_arc[n] = arc
            tl_best[n] = candidate
            if contextual:
                tl_ctx[n] = ctx
                tl_pctx[n] = pctx
            tl_slot[n] = slot
            return n, n + 1, True
        slot = (slot + 1) & mask


@njit(nogil=True, cache=True, _nrt=False)
def _memo_fill(ctx, word, context, memo, slot):
    """Compute the context step of (ctx, word) into the memo's `slot` (see _word_step)."""
    P, lm, lm0, small_of, lm_map, lm0_map, phrases, rescoring, phrasing = context
    delta, nxt = context_step(ctx, word, P, lm, lm0, small_of, lm_map, lm0_map, phrases, rescoring, phrasing)
    memo[slot, 0] = token_key(word, ctx)
    memo[slot, 1] = (np.int64(np.uint32(f32_bits(delta))) << np.int64(32)) | np.int64(np.uint32(nxt))


@njit(inline="always")
def _word_step(cost, ctx, word, context, memo):
    """Cost and context after an arc that outputs `word` (> 0) through the context automata
    (rescoring LM, phrase boosting).  Their steps are memoised per (ctx, word) in a
    direct-mapped table: tokens of one context read the same words frame after frame, and
    only a miss passes the automata (a large tuple) in a call.  A slot is one 16-byte
    record, (key, cost bits << 32 | next ctx): a probe touches one cache line.

    Inline helpers taking arrays belong in `_nrt=False` functions only: elsewhere Numba
    reference-counts each array argument on every arc (that tripled ExpandArcs' time)."""
    key = token_key(word, ctx)
    slot = hash_slot(key, memo.shape[0] - 1)
    if memo[slot, 0] != key:
        _memo_fill(ctx, word, context, memo, slot)
    step = memo[slot, 1]
    return (np.float32(cost + bits_f32(np.uint32(step >> np.int64(32)))),
            np.int32(np.uint32(step & np.int64(0xFFFFFFFF))))


@njit(nogil=True, cache=True, _nrt=False)
def _final_cost(state, ctx, final, context, contextual):
    f = final[state]
    if contextual:
        P, lm, lm0, small_of, lm_map, lm0_map, phrases, rescoring, phrasing = context
        f = np.float32(f + context_final(ctx, P, lm, lm0, small_of, phrases, rescoring, phrasing))
    return f


@njit(nogil=True, cache=True, _nrt=False)
def _expand_arcs(ns, sv_state, sv_ctx, sv_cost, sv_gid, ac, adaptive_beam, states, arcs, word_boosts, boosted,
                 context, contextual, memo, ht_key, ht_tok, tl_state,
                 tl_ctx, tl_cost, tl_prev, tl_arc, tl_best, tl_pctx, tl_slot):
    """ExpandArcs: the survivors' emitting arcs (ac: acoustic cost by input label).  The
    best new cost + adaptive_beam bounds the frame; new tokens below it are recombined into
    the emptied token list.  Returns (n, bound, overflow)."""
    literally(boosted)
    literally(contextual)
    min_new = INF
    for i in range(ns):
        c = sv_cost[i]
        s = sv_state[i]
        for p in range(states[s, 0], states[s, 2]):
            nc = np.float32(c + np.float32(arc_weight(arcs, p, word_boosts, boosted) + ac[arcs[p, 0]]))
            if contextual and nc < INF and p >= states[s, 1]:
                nc, _ = _word_step(nc, sv_ctx[i], arcs[p, 4], context, memo)
            if nc < min_new:
                min_new = nc
    bound = np.float32(min_new + adaptive_beam)
    n = 0
    for i in range(ns):
        c = sv_cost[i]
        ctx = sv_ctx[i]
        s = sv_state[i]
        for p in range(states[s, 0], states[s, 2]):
            nc = np.float32(c + np.float32(arc_weight(arcs, p, word_boosts, boosted) + ac[arcs[p, 0]]))
            nctx = ctx
            if contextual and nc < INF and p >= states[s, 1]:
                nc, nctx = _word_step(nc, ctx, arcs[p, 4], context, memo)
            if nc < bound:
                idx, n, _ = _recombine(arcs[p, 1], nctx, nc, sv_gid[i], arcs[p, 3], ctx, ht_key, ht_tok, tl_state,
                                       tl_ctx, tl_cost, tl_prev, tl_arc, tl_best, tl_pctx, tl_slot, n, contextual)
                if idx < 0:
                    return n, bound, True
    return n, bound, False


@njit(nogil=True, cache=True, _nrt=False)
def _closure(cutoff, n, states, arcs, word_boosts, boosted, context, contextual,
             memo, ht_key, ht_tok, tl_state, tl_ctx, tl_cost, tl_prev, tl_arc, tl_best,
             tl_pctx, tl_slot, stack):
    """Non-emitting closure of the frame's tokens; returns (n, overflow)."""
    literally(boosted)  # compiled per flag value, as _search
    literally(contextual)
    top = 0
    for j in range(n):
        stack[top] = j
        top += 1
    while top > 0:
        top -= 1
        j = stack[top]
        c = tl_cost[j]
        if c > cutoff:
            continue
        s = tl_state[j]
        ctx = tl_ctx[j]
        for p in range(states[s, 2], states[s + 1, 0]):
            nc = np.float32(c + arc_weight(arcs, p, word_boosts, boosted))
            nctx = ctx
            if contextual and p >= states[s, 3]:
                nc, nctx = _word_step(nc, ctx, arcs[p, 4], context, memo)
            if nc > cutoff:
                continue
            idx, n, improved = _recombine(arcs[p, 1], nctx, nc, -(j + 2), arcs[p, 3], ctx, ht_key, ht_tok,
                                          tl_state, tl_ctx, tl_cost, tl_prev, tl_arc, tl_best, tl_pctx, tl_slot, n,
                                          contextual)
            if idx < 0:
                return n, True
            if improved:
                if top == stack.shape[0]:
                    return n, True
                stack[top] = idx
                top += 1
    return n, False


@njit(nogil=True, cache=True)
def _best_token(tl_state, tl_ctx, tl_cost, final, n, with_final, context, contextual):
    """Index of the token with the smallest (cost [+ final costs], state, ctx), or -1 if none is finite."""
    keep = -1
    best = np.uint64(0)
    best_ctx = 0
    for j in range(n):
        c = tl_cost[j]
        if with_final:
            c = np.float32(c + _final_cost(tl_state[j], tl_ctx[j], final, context, contextual))
        if c < INF:
            key = pack(c, tl_state[j])
            if keep < 0 or key < best or (key == best and tl_ctx[j] < best_ctx):
                best = key
                best_ctx = tl_ctx[j]
                keep = j
    return keep


def decode_one(states, arcs, word_boosts, boosted, context, contextual, memo, start_ctx, final,
               start, log_probs, num_frames, num_columns, beam, max_active, min_active, beam_delta,
               acoustic_scale, blank_ilabel, blank_penalty, top_n, log_rel, capacity):
    """Viterbi beam search of one utterance.

    context: (P, lm, lm0, small_of, lm_map, lm0_map, phrases, rescoring, phrasing), the
    automata of `common.context_step`; tokens start in context start_ctx.  `boosted`: the
    utterance boosts single words, word_boosts[w] being word w's cost (-reward; 0 for
    words not boosted, and at w = 0), one entry for every output label of the graph;
    `contextual`: rescoring or phrase boosting.
    Returns (status, path_arcs, path_steps, reached_final, tokens_per_frame): status is
    OK, OVERFLOW (capacity too small: grow and decode again) or EPS_CYCLE (a zero-cost
    epsilon cycle in the graph made the backpointers loop); the arc ids of the best path
    in order, the step each arc's token was stored at (step t = after t frames: an
    emitting arc on step t consumed frame t - 1), and the number of tokens that survived
    pruning on each frame.
    """
    search = _SEARCHES[bool(boosted), bool(contextual)]
    return search((states, arcs, final, start), word_boosts, context, start_ctx,
                  (log_probs, num_frames, num_columns),
                  (beam, max_active, min_active, beam_delta, acoustic_scale, blank_ilabel, blank_penalty, top_n,
                   log_rel, capacity), memo)


# Each combination of the two flags is its own machine code, compiled on first use: as
# run-time flags, the word-step paths halved the speed of a plain search.
@njit(nogil=True, cache=True)
def _search_plain(graph, word_boosts, context, start_ctx, utterance, settings, memo):
    return _search(False, False, graph, word_boosts, context, start_ctx, utterance, settings, memo)


@njit(nogil=True, cache=True)
def _search_boosted(graph, word_boosts, context, start_ctx, utterance, settings, memo):
    return _search(True, False, graph, word_boosts, context, start_ctx, utterance, settings, memo)


@njit(nogil=True, cache=True)
def _search_contextual(graph, word_boosts, context, start_ctx, utterance, settings, memo):
    return _search(False, True, graph, word_boosts, context, start_ctx, utterance, settings, memo)


@njit(nogil=True, cache=True)
def _search_boosted_contextual(graph, word_boosts, context, start_ctx, utterance, settings, memo):
    return _search(True, True, graph, word_boosts, context, start_ctx, utterance, settings, memo)


_SEARCHES = {(False, False): _search_plain, (True, False): _search_boosted, (False, True): _search_contextual,
             (True, True): _search_boosted_contextual}


@njit(nogil=True, cache=True)
def _search(boosted, contextual, graph, word_boosts, context, start_ctx, utterance, settings, memo):
    """decode_one for literal flag values."""
    literally(boosted)
    literally(contextual)
    states, arcs, final, start = graph
    log_probs, num_frames, num_columns = utterance
    beam, max_active, min_active, beam_delta, acoustic_scale, blank_ilabel, blank_penalty, top_n, log_rel, capacity = \
        settings
    C = capacity
    H = 1
    while H < 2 * C:
        H *= 2
    ht_key = np.full(H, EMPTY_KEY, np.int64)
    ht_tok = np.empty(H, np.int32)
    tl_best = np.empty(C, np.uint64)
    tl_state = np.empty(C, np.int32)
    tl_ctx = np.zeros(C, np.int32)  # stays 0 without contexts
    tl_pctx = np.empty(C, np.int32)
    tl_cost = np.empty(C, np.float32)
    tl_prev = np.empty(C, np.int32)
    tl_arc = np.empty(C, np.int32)
    tl_slot = np.empty(C, np.int64)
    sv_state = np.empty(C, np.int32)
    sv_ctx = np.empty(C, np.int32)
    sv_cost = np.empty(C, np.float32)
    sv_gid = np.empty(C, np.int32)
    gid = np.empty(C, np.int32)
    mark = np.zeros(C, np.uint8)
    stack = np.empty(4 * C, np.int32)
    hist = np.zeros(RADIX_BINS, np.int64)
    ac = np.zeros(num_columns + 1, np.float32)  # acoustic cost by input label
    bp_prev = np.empty(max(C, 1024), np.int32)
    bp_arc = np.empty(max(C, 1024), np.int32)
    bp_n = 0
    step_start = np.zeros(num_frames + 2, np.int64)
    tokens_per_frame = np.zeros(num_frames, np.int32)
    empty = np.empty(0, np.int32)
    reached_final = False
    keep = -1

    n = 0
    idx, n, _ = _recombine(start, start_ctx, np.float32(0.0), NO_TOKEN, -1, start_ctx, ht_key, ht_tok,
                           tl_state, tl_ctx, tl_cost, tl_prev, tl_arc, tl_best, tl_pctx, tl_slot, n, contextual)
    n, overflow = _closure(np.float32(np.finfo(np.float32).max), n, states, arcs, word_boosts, boosted, context,
                           contextual, memo, ht_key, ht_tok,
                           tl_state, tl_ctx, tl_cost, tl_prev, tl_arc, tl_best, tl_pctx, tl_slot, stack)
    if overflow:
        return OVERFLOW, empty, empty, False, tokens_per_frame

    for t in range(num_frames + 1):
        last = t == num_frames
        # ---- prune: cutoff, or on the last step the single best (final) token
        cutoff = INF
        adaptive_beam = np.float32(beam)
        keep = -1
        if last:
            keep = _best_token(tl_state, tl_ctx, tl_cost, final, n, True, context, contextual)
            reached_final = keep >= 0
            if not reached_final:
                keep = _best_token(tl_state, tl_ctx, tl_cost, final, n, False, context, contextual)
        elif n > 0:
            best = INF
            for j in range(n):
                if tl_cost[j] < best:
                    best = tl_cost[j]
            kth_max = INF
            kth_min = INF
            if n > max_active:
                kth_max = select_cost(tl_cost, n, max_active, hist)
            if n > min_active:
                if min_active == 0:
                    kth_min = best
                else:
                    kth_min = select_cost(tl_cost, n, min_active, hist)
            cutoff, adaptive_beam = cutoff_and_adaptive_beam(best, kth_max, kth_min, np.float32(beam),
                                                             np.float32(beam_delta))

        # ---- store survivors and their in-frame ancestors as backpointers
        step_start[t] = bp_n
        for j in range(n):
            mark[j] = 0
        for j in range(n):
            if (last and j == keep) or (not last and tl_cost[j] < cutoff):
                k = j
                while k >= 0 and mark[k] == 0:
                    mark[k] = 1
                    p = tl_prev[k]
                    k = _in_frame(p) if p <= -2 else -1
        if bp_n + n > bp_prev.shape[0]:
            size = max(2 * bp_prev.shape[0], bp_n + n)
            grown_prev = np.empty(size, np.int32)
            grown_arc = np.empty(size, np.int32)
            grown_prev[:bp_n] = bp_prev[:bp_n]
            grown_arc[:bp_n] = bp_arc[:bp_n]
            bp_prev = grown_prev
            bp_arc = grown_arc
        for j in range(n):
            if mark[j]:
                gid[j] = bp_n
                bp_n += 1
        ns = 0
        for j in range(n):
            if mark[j]:
                p = tl_prev[j]
                bp_prev[gid[j]] = gid[_in_frame(p)] if p <= -2 else p
                bp_arc[gid[j]] = tl_arc[j]
                if not last and tl_cost[j] < cutoff:
                    sv_state[ns] = tl_state[j]
                    sv_ctx[ns] = tl_ctx[j]
                    sv_cost[ns] = tl_cost[j]
                    sv_gid[ns] = gid[j]
                    ns += 1
            ht_key[tl_slot[j]] = EMPTY_KEY
        if last:
            break
        tokens_per_frame[t] = ns

        # ---- ExpandArcs: the frame's acoustic costs, the bound, then every survivor's arcs
        frame_acoustic_costs(log_probs, t, acoustic_scale, blank_ilabel, blank_penalty, top_n, log_rel, ac)
        n, bound, overflow = _expand_arcs(ns, sv_state, sv_ctx, sv_cost, sv_gid, ac, adaptive_beam, states, arcs,
                                          word_boosts, boosted, context, contextual,
                                          memo, ht_key, ht_tok, tl_state, tl_ctx, tl_cost,
                                          tl_prev, tl_arc, tl_best, tl_pctx, tl_slot)
        if overflow:
            return OVERFLOW, empty, empty, False, tokens_per_frame
        # ---- non-emitting closure
        n, overflow = _closure(bound, n, states, arcs, word_boosts, boosted, context,
                               contextual, memo, ht_key, ht_tok, tl_state, tl_ctx,
                               tl_cost, tl_prev, tl_arc, tl_best, tl_pctx, tl_slot, stack)
        if overflow:
            return OVERFLOW, empty, empty, False, tokens_per_frame

    step_start[num_frames + 1] = bp_n
    if keep < 0:
        return OK, empty, empty, False, tokens_per_frame
    # ---- traceback: walk (prev, arc) from the kept token
    length = 0
    g = gid[keep]
    while g >= 0:
        length += 1
        if length > bp_n:
            return EPS_CYCLE, empty, empty, False, tokens_per_frame
        g = bp_prev[g]
    path_arcs = np.empty(length - 1, np.int32)  # the start token has no arc
    path_steps = np.empty(length - 1, np.int32)
    g = gid[keep]
    for i in range(length - 2, -1, -1):
        path_arcs[i] = bp_arc[g]
        path_steps[i] = np.searchsorted(step_start, g, side="right") - 1
        g = bp_prev[g]
    return OK, path_arcs, path_steps, reached_final, tokens_per_frame
