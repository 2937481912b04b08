"""Word lattices on the CPU: the links of a search within a lattice beam, as Kaldi's
LatticeFasterDecoder keeps them.

While the search runs, every arc that ExpandArcs or the epsilon closure follows into a
token of the frame is a link (source token, destination token, graph arc, graph cost,
acoustic cost).  A frame's links are written at the end of `Links` in the frame's own
numbering (a survivor's backpointer or an in-frame token as source, a token index as
destination).  When the frame is pruned (cpu._store), `store_links` keeps the links
between tokens that were stored and renumbers them by backpointer; a token that the
closure expanded again (its cost improved) keeps only the links of its last expansion.

Every `interval` frames, and at the end with final costs, `prune_links` runs Kaldi's
PruneForwardLinks backwards over all frames: a token's extra cost is how much worse the
best path through it is than the best path to the frontier (at the end: than the best
complete path).  It only grows as the frontier moves on, so links whose extra cost
exceeds the lattice beam are dropped for good and the rest compacted: the links held stay
near the size of the final lattice plus the raw links of the last `interval` frames.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, types
from numba.typed import Dict

from .common import INF, context_final, context_step, in_frame, phrase_final


class Links(NamedTuple):
    """The links of one search and what pruning them needs (made by new_links, reused
    from utterance to utterance; `block` is the utterance's own)."""

    src: np.ndarray  # int32 (L,): source backpointer (the frame's own: survivor backpointer or in_frame_prev(j))
    dst: np.ndarray  # int32 (L,): destination backpointer (the frame's own: token index)
    arc: np.ndarray  # int32 (L,): graph arc id
    graph: np.ndarray  # float32 (L,): the link's cost but the acoustic one (weight, boost, LM difference)
    acoustic: np.ndarray  # float32 (L,)
    reduced: np.ndarray  # float32 (L,): of a stored link, how much the best path through it is worse
    #                      than the best path into its destination (>= 0; what pruning reads)
    alpha: np.ndarray  # float32 (L,): forward (Viterbi) cost of each stored token, by backpointer
    extra: np.ndarray  # float32 (L,): each stored token's extra cost at the last pruning (NaN: none yet)
    fresh: np.ndarray  # float32 (L,): prune_links' extra costs as it computes them
    first: np.ndarray  # int32 (C,): per token of the frame, the first link of its last closure expansion
    count: np.ndarray  # int64 (2,): links held; the first of them that is the frame's own (not stored yet)
    block: np.ndarray  # int64 (T + 2,): first link of each step (whose destinations were stored at that step)
    beam: np.float32  # the lattice beam
    interval: np.int64  # frames between prunings


def new_links(size: int, tokens: int, beam: float, interval: int) -> Links:
    """Room for `size` links and stored tokens, for frames of up to `tokens` tokens."""
    i32, f32 = np.int32, np.float32
    return Links(*(np.empty(size, i32) for _ in range(3)), *(np.empty(size, f32) for _ in range(6)),
                 np.zeros(tokens, i32),
                 np.zeros(2, np.int64), np.zeros(2, np.int64), f32(beam), np.int64(interval))


def typed(lat: Links) -> Links:
    """lat with its scalars as NumPy's: a Links that compiled code returns holds Python
    numbers, which Numba would type as float64 (another type for a typed list of them, and
    another compiled search, pruning with a float64 beam)."""
    return lat._replace(beam=np.float32(lat.beam), interval=np.int64(lat.interval))


@njit(inline="always")
def _grown(a, need):
    if len(a) >= need:
        return a
    b = np.zeros(max(need, 2 * len(a)), a.dtype)
    b[:len(a)] = a
    return b


@njit(nogil=True, cache=True)
def with_room(lat, links, stored, tokens, steps):
    """`lat` (a stream's, which grows as it goes) with room for at least `links` links,
    `stored` backpointers, `tokens` tokens a frame and `steps` steps: each array too small
    replaced by one twice as large at least, its contents kept (compiled: the streams'
    search grows their lattices itself)."""
    return Links(_grown(lat.src, links), _grown(lat.dst, links), _grown(lat.arc, links), _grown(lat.graph, links),
                 _grown(lat.acoustic, links), _grown(lat.reduced, links), _grown(lat.alpha, stored),
                 _grown(lat.extra, stored), _grown(lat.fresh, stored), _grown(lat.first, tokens), lat.count,
                 _grown(lat.block, steps), lat.beam, lat.interval)


@njit(nogil=True, cache=True)
def room_for_chunk(lat, stored, tokens, first, frames):
    """(lat, False), or (lat grown, True) where it lacks room for what storing `frames`
    frames can add to a stream's lattice: from `stored` backpointers, `tokens` tokens a frame
    at most, steps from `first` on (links grow when they fill: the search says so)."""
    need, steps = stored + (frames + 1) * tokens, first + frames + 2
    if len(lat.alpha) >= need and len(lat.first) >= tokens and len(lat.block) >= steps:
        return lat, False
    return with_room(lat, 0, need, tokens, steps), True


@njit(inline="always")
def add_link(lat, src, dst, arc, graph, acoustic):
    """Append a link of the frame; False when the buffer is full."""
    k = lat.count[0]
    if k == lat.src.shape[0]:
        return False
    lat.src[k] = src
    lat.dst[k] = dst
    lat.arc[k] = arc
    lat.graph[k] = graph
    lat.acoustic[k] = acoustic
    lat.count[0] = k + 1
    return True


@njit(nogil=True, cache=True, _nrt=False)
def store_links(lat, mark, gid, n, step, stored):
    """After cpu._store of step `step` (mark, gid: which of the frame's n tokens were stored,
    and as which backpointer; stored: backpointers now held, their costs in lat.alpha):
    the frame's links between stored tokens, renumbered, with their reduced costs (how much
    the best path through the link is worse than the best path into its destination), but
    those whose reduced cost exceeds the lattice beam: PruneForwardLinks would drop them.
    False when lat.alpha cannot hold the tokens."""
    if stored > lat.alpha.shape[0]:
        return False
    w = lat.count[1]
    lat.block[step] = w
    for k in range(lat.count[1], lat.count[0]):
        s = lat.src[k]
        if s <= -2:
            j = in_frame(s)
            if mark[j] == 0 or k < lat.first[j]:  # not stored, or a link of an expansion redone
                continue
            s = gid[j]
        d = lat.dst[k]
        if mark[d] == 0:
            continue
        d = gid[d]
        r = max(np.float32(lat.alpha[s] + lat.graph[k] + lat.acoustic[k] - lat.alpha[d]), np.float32(0.0))
        if r > lat.beam:
            continue  # pruned whatever comes: a link's extra cost is at least r
        lat.reduced[w] = r
        lat.src[w] = s
        lat.dst[w] = d
        lat.arc[w] = lat.arc[k]
        lat.graph[w] = lat.graph[k]
        lat.acoustic[w] = lat.acoustic[k]
        w += 1
    lat.count[0] = w
    lat.count[1] = w
    lat.block[step + 1] = w
    return True


@njit(inline="always")
def _relax(lat, fresh, lo, hi):
    """fresh[src] = min(fresh[src], fresh[dst] + the link's reduced cost) over links hi-1..lo;
    whether any improved."""
    changed = False
    for k in range(hi - 1, lo - 1, -1):
        d = lat.dst[k]
        if fresh[d] == INF:
            continue
        s = lat.src[k]
        e = np.float32(fresh[d] + lat.reduced[k])
        if e < fresh[s]:
            fresh[s] = e
            changed = True
    return changed


@njit(nogil=True, cache=True, _nrt=False)
def prune_links(lat, steps, last, stored):
    """Kaldi's PruneForwardLinks from step `last` (its tokens' lat.fresh set by the caller)
    backwards: each token's extra cost, then the links whose path is more than the lattice
    beam worse are dropped and the blocks compacted.  As in Kaldi, the pass stops at the
    first step whose tokens' extra costs did not change since the last pruning: the steps
    before it cannot change either, and their links were pruned with the same costs."""
    extra, fresh = lat.extra, lat.fresh
    stop = 0
    for step in range(last, -1, -1):
        lo = lat.block[step]
        hi = lat.block[step + 1]
        own = steps[step]  # sources from here on are tokens of this step: epsilon links
        end = stored if step == last else steps[step + 1]
        if step > 0:
            for g in range(steps[step - 1], own):
                fresh[g] = INF
        # The block holds the links from the last step's tokens (ExpandArcs) and then the
        # epsilon links between this step's tokens (the closure): those first, until no
        # extra cost changes (a link may feed one processed before it), then the others once.
        eps = hi
        while eps > lo and lat.src[eps - 1] >= own:
            eps -= 1
        changed = True
        while changed:
            changed = _relax(lat, fresh, eps, hi)
        _relax(lat, fresh, lo, eps)
        moved = False
        for g in range(own, end):
            if fresh[g] != extra[g]:  # NaN (never pruned) differs from everything
                extra[g] = fresh[g]
                moved = True
        if not moved and step < last:
            stop = step + 1  # this step's links were pruned with these costs already
            break
    w = lat.block[stop]
    for step in range(stop, last + 1):
        lo = lat.block[step]
        hi = lat.block[step + 1]
        lat.block[step] = w
        for k in range(lo, hi):
            d = lat.dst[k]
            if extra[d] == INF or np.float32(extra[d] + lat.reduced[k]) > lat.beam:
                continue
            lat.reduced[w] = lat.reduced[k]
            lat.src[w] = lat.src[k]
            lat.dst[w] = d
            lat.arc[w] = lat.arc[k]
            lat.graph[w] = lat.graph[k]
            lat.acoustic[w] = lat.acoustic[k]
            w += 1
    lat.block[last + 1] = w
    lat.count[0] = w
    lat.count[1] = w


@njit(nogil=True, cache=True, _nrt=False)
def prune_at_frontier(lat, steps, last, stored):
    """The periodic pruning: every token stored at step `last` is on the frontier (extra 0)."""
    for g in range(steps[last], stored):
        lat.fresh[g] = 0.0
    prune_links(lat, steps, last, stored)


@njit(nogil=True, cache=True, _nrt=False)
def take_chunk(lat, steps, first, last, src, dst, arc, graph, acoustic, reduced, n, block, starts):
    """Append the stored links of steps first..last (a chunk of a GPU search, as
    groups.StoredLinks holds them: n links, block and starts by step - first) to `lat`,
    and the steps' first backpointers to `steps`.  False when `lat` cannot hold them."""
    base = lat.count[0]
    if base + n > lat.src.shape[0] or starts[last - first + 1] > lat.extra.shape[0]:
        return False
    for k in range(n):
        lat.src[base + k] = src[k]
        lat.dst[base + k] = dst[k]
        lat.arc[base + k] = arc[k]
        lat.graph[base + k] = graph[k]
        lat.acoustic[base + k] = acoustic[k]
        lat.reduced[base + k] = reduced[k]
    for step in range(first, last + 2):
        lat.block[step] = base + block[step - first]
        steps[step] = starts[step - first]
    for g in range(steps[first], steps[last + 1]):
        lat.extra[g] = np.nan
    lat.count[0] = base + n
    lat.count[1] = base + n
    return True


@njit(nogil=True, cache=True)
def close_links(lat, steps, last, alpha, final_cost, keep):
    """The last pruning, with final costs: the tokens of step `last` (alpha, final_cost: their
    forward and final costs, by backpointer - steps[last]; `keep`: the best's) have extra
    costs their totals above the best's.  Returns the backpointers of those within the
    lattice beam (the lattice's final states) and their final costs."""
    before, stored = steps[last], steps[last + 1]
    best = np.float32(alpha[keep - before] + final_cost[keep - before])
    finals = 0
    for g in range(before, stored):
        total = np.float32(alpha[g - before] + final_cost[g - before])
        lat.fresh[g] = np.float32(total - best) if total < INF else INF
        finals += lat.fresh[g] <= lat.beam
    final_gids = np.empty(finals, np.int32)  # before pruning lowers extra costs through epsilon links
    final_costs = np.empty(finals, np.float32)
    i = 0
    for g in range(before, stored):
        if lat.fresh[g] <= lat.beam:
            final_gids[i] = g
            final_costs[i] = final_cost[g - before]
            i += 1
    prune_links(lat, steps, last, stored)
    return final_gids, final_costs


@njit(nogil=True, cache=True)
def number_states(src, dst, final_gids, step_starts):
    """The states of a lattice held as links between backpointers: the backpointers that a
    link or a final state names, and 0 (the start), numbered in order.  Returns src, dst
    and final_gids renumbered, and each state's step (the last t with step_starts[t] <= it)."""
    top = 0
    for k in range(src.shape[0]):
        top = max(top, src[k], dst[k])
    for g in final_gids:
        top = max(top, g)
    number = np.zeros(top + 1, np.int32)
    number[0] = 1
    for k in range(src.shape[0]):
        number[src[k]] = 1
        number[dst[k]] = 1
    for g in final_gids:
        number[g] = 1
    states = 0
    for g in range(top + 1):
        if number[g]:
            states += 1
    step = np.empty(states, np.int32)
    t = 0
    i = 0
    for g in range(top + 1):
        if number[g]:
            while t + 1 < step_starts.shape[0] and step_starts[t + 1] <= g:
                t += 1
            step[i] = t
            number[g] = i
            i += 1
    new_src = np.empty_like(src)
    new_dst = np.empty_like(dst)
    for k in range(src.shape[0]):
        new_src[k] = number[src[k]]
        new_dst[k] = number[dst[k]]
    finals = np.empty(final_gids.shape[0], np.int32)
    for i in range(final_gids.shape[0]):
        finals[i] = number[final_gids[i]]
    return new_src, new_dst, finals, step


# ---------------------------------------------------------------------- rescoring a lattice

@njit(nogil=True, cache=True)
def topological_order(src, dst, num_states):
    """The states of an arc list (src, dst) in an order where every arc goes forward (Kahn),
    fewer than num_states of them where arcs form a cycle; and the arcs by source state:
    state s's arcs are out_arcs[first[s]:first[s + 1]]."""
    indegree = np.zeros(num_states, np.int64)
    first = np.zeros(num_states + 1, np.int64)
    for k in range(src.shape[0]):
        indegree[dst[k]] += 1
        first[src[k] + 1] += 1
    for s in range(num_states):
        first[s + 1] += first[s]
    out_arcs = np.empty(src.shape[0], np.int64)
    fill = first[:-1].copy()
    for k in range(src.shape[0]):
        out_arcs[fill[src[k]]] = k
        fill[src[k]] += 1
    order = np.empty(num_states, np.int64)
    tail = 0
    for s in range(num_states):
        if indegree[s] == 0:
            order[tail] = s
            tail += 1
    head = 0
    while head < tail:
        s = order[head]
        head += 1
        for p in range(first[s], first[s + 1]):
            d = dst[out_arcs[p]]
            indegree[d] -= 1
            if indegree[d] == 0:
                order[tail] = d
                tail += 1
    return order[:tail], first, out_arcs


@njit(inline="always")
def _longer(a, n):
    """a with room for n items at least (doubled), its contents kept."""
    if n <= a.shape[0]:
        return a
    b = np.empty(max(n, 2 * a.shape[0]), a.dtype)
    b[:a.shape[0]] = a
    return b


@njit(nogil=True, cache=True)
def rescore_lattice(src, dst, word, cost, graph_arc, num_states, final_states, final_costs, with_final, context, beam,
                    expand_beam):
    """A lattice (arcs src -> dst with output words `word` (0: none), costs `cost` and graph
    arcs `graph_arc`, state 0 the start) composed with a context automaton (the rescoring
    LM's difference, as the search adds it at word arcs: common.context_step from the
    context's start, and context_final at final states where `with_final`), then pruned to
    the paths within `beam` of the best.  The composition's states are (lattice state,
    context) pairs, made in topological order of the lattice's states, the Viterbi cost of
    each along: summed in float32 as the search sums a token's cost, a tie going to the
    smaller graph arc as in its recombination, so that paths of equal cost mostly fall as
    they do on the fly.  A state is expanded only if its cost so far plus the lattice's best
    cost to the end from its lattice state (before rescoring) is within `expand_beam` of
    the best such estimate so far (a pruned composition, as Kaldi's lattice-lmrescore-pruned:
    the full one grows with the paths' histories, 37 s instead of 0.3 s for 20 utterances at
    lattice beam 12); a path whose rescoring lowers its rest by more than that margin
    beyond the others' can be lost so.  The costs to the end, and the final pruning, are float64.

    Returns (status: 0, or 1 where the lattice's arcs form a cycle; for each state kept,
    its lattice state (state 0 the start); for each arc kept, its source, destination,
    lattice arc and context cost (float32); the final states kept and their final costs,
    the lattice's + the context's (float32); the kept arcs of the best path, in order; its
    total cost; how many states the composition made)."""
    i64, f32 = np.int64, np.float32
    order, first, out_arcs = topological_order(src, dst, num_states)
    if order.shape[0] < num_states:
        e = np.empty(0, i64)
        return 1, e, e, e, e, np.empty(0, f32), e, np.empty(0, f32), e, INF, 0
    final_cost = np.full(num_states, np.inf)
    for i in range(final_states.shape[0]):
        final_cost[final_states[i]] = min(final_cost[final_states[i]], np.float64(final_costs[i]))
    rest = final_cost.copy()  # each lattice state's best cost to the end, before rescoring
    for r in range(order.shape[0] - 1, -1, -1):
        s = order[r]
        for p in range(first[s], first[s + 1]):
            a = out_arcs[p]
            rest[s] = min(rest[s], np.float64(cost[a]) + rest[dst[a]])
    estimate = rest[0]  # the best estimate of a whole path's cost so far: its cost so far + the rest's
    # the composition's states ("nodes"): lattice state, context, Viterbi cost, best arc in
    cap = max(2 * num_states, 16)
    n_state = np.empty(cap, i64)
    n_ctx = np.empty(cap, np.int32)
    alpha = np.empty(cap, f32)
    best_in = np.empty(cap, i64)
    chain = np.empty(cap, i64)  # the next node of the same lattice state
    out_lo = np.empty(cap, i64)  # a node's arcs are arcs [out_lo, out_hi): made together
    out_hi = np.empty(cap, i64)
    head = np.full(num_states, -1, i64)
    index = Dict.empty(key_type=types.int64, value_type=types.int64)
    acap = max(2 * src.shape[0], 16)
    a_src = np.empty(acap, i64)
    a_dst = np.empty(acap, i64)
    a_arc = np.empty(acap, i64)
    a_cost = np.empty(acap, f32)  # the context's cost of the arc
    n_state[0], n_ctx[0], alpha[0], best_in[0], chain[0] = 0, context.start[0], 0.0, -1, -1
    head[0] = 0
    index[np.int64(0) << 32 | np.int64(np.uint32(context.start[0]))] = 0
    nodes = 1
    arcs = 0
    for s in order:
        k = head[s]
        while k >= 0:
            out_lo[k] = arcs
            out_hi[k] = arcs
            guess = np.float64(alpha[k]) + rest[s]
            estimate = min(estimate, guess)
            if guess > estimate + expand_beam:  # pruned as it is made: left unexpanded
                k = chain[k]
                continue
            ctx = n_ctx[k]
            for p in range(first[s], first[s + 1]):
                a = out_arcs[p]
                step, nctx = f32(0.0), ctx
                if word[a] > 0:
                    step, nctx = context_step(context, 0, ctx, word[a])
                d = dst[a]
                key = np.int64(d) << 32 | np.int64(np.uint32(nctx))
                if key in index:
                    j = index[key]
                else:
                    if nodes == n_state.shape[0]:
                        n_state, n_ctx, alpha = _longer(n_state, nodes + 1), _longer(n_ctx, nodes + 1), _longer(
                            alpha, nodes + 1)
                        best_in, chain = _longer(best_in, nodes + 1), _longer(chain, nodes + 1)
                        out_lo, out_hi = _longer(out_lo, nodes + 1), _longer(out_hi, nodes + 1)
                    j = nodes
                    nodes += 1
                    n_state[j], n_ctx[j], alpha[j], best_in[j] = d, nctx, np.inf, -1
                    chain[j] = head[d]
                    head[d] = j
                    index[key] = j
                if arcs == a_src.shape[0]:
                    a_src, a_dst, a_arc, a_cost = (_longer(a_src, arcs + 1), _longer(a_dst, arcs + 1),
                                                   _longer(a_arc, arcs + 1), _longer(a_cost, arcs + 1))
                a_src[arcs], a_dst[arcs], a_arc[arcs], a_cost[arcs] = k, j, a, step
                c = f32(alpha[k] + cost[a])
                if word[a] > 0:
                    c = f32(c + step)
                if c < alpha[j] or (c == alpha[j] and best_in[j] >= 0 and graph_arc[a] < graph_arc[a_arc[best_in[j]]]):
                    alpha[j] = c
                    best_in[j] = arcs
                arcs += 1
            out_hi[k] = arcs
            k = chain[k]
    # each node's cost to the end (final: the lattice's final cost + the context's), backwards
    end = np.full(nodes, np.inf)
    ctx_final = np.zeros(nodes, f32)
    best, best_node = np.inf, -1
    for r in range(order.shape[0] - 1, -1, -1):
        s = order[r]
        k = head[s]
        while k >= 0:
            if final_cost[s] < np.inf:
                if with_final:
                    ctx_final[k] = context_final(context, 0, n_ctx[k])
                else:  # (a phrase matched in part still earns nothing)
                    ctx_final[k] = phrase_final(context, 0, n_ctx[k])
                end[k] = final_cost[s] + np.float64(ctx_final[k])
                if alpha[k] + end[k] < best:
                    best, best_node = alpha[k] + end[k], k
            for e in range(out_lo[k], out_hi[k]):
                end[k] = min(end[k], np.float64(cost[a_arc[e]]) + np.float64(a_cost[e]) + end[a_dst[e]])
            k = chain[k]
    # keep what lies within the beam of the best, and the best path
    limit = best + beam + 1e-4 * (1.0 + abs(best))
    number = np.full(nodes, -1, i64)
    number[0] = 0
    kept_nodes = 1
    length = 0
    k = best_node
    while k > 0:
        length += 1
        k = a_src[best_in[k]]
    path = np.empty(length, i64)  # the best path's arcs, in order
    k = best_node
    while k > 0:
        length -= 1
        path[length] = best_in[k]
        k = a_src[best_in[k]]
    keep = np.zeros(arcs, np.bool_)
    keep[path] = True  # (within the limit but for rounding: kept whatever it says)
    kept = 0
    for e in range(arcs):
        k, j = a_src[e], a_dst[e]
        if keep[e] or alpha[k] + np.float64(cost[a_arc[e]]) + np.float64(a_cost[e]) + end[j] <= limit:
            keep[e] = True
            kept += 1
            for x in (k, j):
                if number[x] < 0:
                    number[x] = kept_nodes
                    kept_nodes += 1
    state_of = np.empty(kept_nodes, i64)
    for k in range(nodes):
        if number[k] >= 0:
            state_of[number[k]] = n_state[k]
    o_src, o_dst, o_arc, o_cost = np.empty(kept, i64), np.empty(kept, i64), np.empty(kept, i64), np.empty(kept, f32)
    renumber = np.full(arcs, -1, i64)
    i = 0
    for e in range(arcs):
        if keep[e]:
            o_src[i], o_dst[i], o_arc[i], o_cost[i] = number[a_src[e]], number[a_dst[e]], a_arc[e], a_cost[e]
            renumber[e] = i
            i += 1
    finals = 0
    for k in range(nodes):
        finals += number[k] >= 0 and alpha[k] + end[k] <= limit and final_cost[n_state[k]] < np.inf
    f_state, f_cost = np.empty(finals, i64), np.empty(finals, f32)
    i = 0
    for k in range(nodes):
        if number[k] >= 0 and alpha[k] + end[k] <= limit and final_cost[n_state[k]] < np.inf:
            f_state[i], f_cost[i] = number[k], f32(final_cost[n_state[k]] + np.float64(ctx_final[k]))
            i += 1
    return 0, state_of, o_src, o_dst, o_arc, o_cost, f_state, f_cost, renumber[path], best, nodes
