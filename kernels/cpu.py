"""The CPU search: one utterance per call, Numba ``njit(nogil=True)``.

The CPU backend runs utterances on a thread pool (the GIL is released), so a batch is
decoded in parallel over utterances.  Each frame does what the CUDA kernels do, with the
per-arc and per-token logic of `common` and `select`:

1. prune the frame's tokens: cutoff = Kaldi's GetCutoff(best + beam, the max_active-th
   and min_active-th costs by exact radix select); store survivors and their in-frame
   epsilon ancestors as backpointers (prev, arc);
2. ExpandArcs: every surviving token follows its emitting arcs; new tokens below the
   bound set by the best token's arcs + adaptive beam are recombined in an
   open-addressing hash table (groups.HashTable), keeping the smallest (cost, arc id,
   predecessor's ctx).  When FLToP left no finite new cost, the frame is expanded again
   without it, so that token pruning never empties an utterance;
3. non-emitting closure: follow input-epsilon arcs until no cost improves.

What a search uses besides the graph comes as optional arguments, and Numba compiles
one machine code per combination of their types: `boosts` (a dense cost vector per word,
or None) and `context` (groups.Context, or None).  Code under ``if boosts is not None``
is removed at compile time where they are None, so a plain search pays nothing for them.

Capacity overflow makes the call return early with TOKEN_OVERFLOW; the caller grows the
capacity and decodes the utterance again, so no token is ever dropped silently.
"""
from __future__ import annotations

import contextlib
from typing import NamedTuple

import llvmlite.ir as ir
import numpy as np
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.typed import List

from .common import (
    INF,
    beam_bound,
    best_token,
    bits_f32,
    boosted_weight,
    context_arrive,
    context_final,
    context_locate,
    context_step,
    contextual,
    cutoff_and_adaptive_beam,
    died,
    expanded_cost,
    f32_bits,
    final_relative_cost,
    hash_slot,
    in_frame,
    in_frame_prev,
    lm_reach,
    lm_word_reach,
    mark_ancestors,
    order_statistics_needed,
    out_of_reach,
    pack,
    phrase_final,
    token_key,
    trace_length,
    trace_path,
    trailing_blanks,
)
from .constants import (
    BACKPOINTERS_FULL,
    COMMIT_DUE,
    DIED,
    EMPTY_KEY,
    EPS_CYCLE,
    LINK_OVERFLOW,
    LINKS_FULL,
    MAX_BACKPOINTERS,
    MEMORY_OUT,
    NO_ARC,
    NO_CONTEXT,
    NO_TOKEN,
    OK,
    OVERFLOWED,
    OWN_MEMO,
    P_BASE,
    P_FRAMES,
    P_HEAD,
    P_MEET,
    P_SINCE,
    P_STABLE,
    P_STATUS,
    P_WORDS,
    PARTIAL_LOOPS,
    PARTIAL_OK,
    PARTIAL_STALE,
    PMEMO_AT,
    PMEMO_FIELDS,
    PMEMO_HEAD,
    PMEMO_MAX_WORDS,
    PMEMO_SINCE,
    PMEMO_WITNESS,
    PMEMO_WORDS,
    ROWS_AT,
    S_BASE,
    S_CONTEXT,
    S_FALLBACKS,
    S_FRAMES,
    S_LAST_VOICED,
    S_LATTICE,
    S_N,
    S_NEXT_COMMIT,
    S_NS,
    S_PARTIAL,
    S_PMEMO,
    S_ROWS_FROM,
    S_STABLE_AT,
    S_STORED,
    S_SURVIVORS,
    S_TRAIL,
    S_TRAILING,
    SHARED_MEMO,
    STEP_ARCS,
    STEP_BACKOFFS,
    STEP_CLOSURE_ARCS,
    STEP_CLOSURE_LOOKUPS,
    STEP_COUNTERS,
    STEP_LOOKUPS,
    STEP_MISSES,
    TOKEN_OVERFLOW,
    TRAIL_FIELDS,
    hash_slots,
)
from .fltop import fltop_active, frame_acoustic_costs
from .groups import HashTable, Memo, Survivors, Tokens
from .lattice import add_link, close_links, prune_at_frontier, room_for_chunk, store_links, with_room
from .select import RADIX_BINS, select_cost


@njit(nogil=True, cache=True)
def interleave_graph(e_indptr, ne_indptr, ilabel, olabel, weight, nextstate):
    """The CPU layout of a CSR graph: each state's emitting then epsilon arcs side by side,
    one 20-byte record per arc (ilabel, nextstate, weight bits, graph arc id, olabel), so
    that a token touches one or two cache lines of arcs instead of one per array.  In each
    group the arcs without an output word come first: the search finds the word arcs that
    step the contexts by position, without a branch on each arc's label.  Word arcs come
    in order of weight, so that the search can leave a state's word arcs at the first
    whose LM lookup would be out of the beam.

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
                if words == 1 and p - states[s, 2 * group + 1] > 1:  # word arcs by weight, ties by arc id
                    first = states[s, 2 * group + 1]
                    order = np.argsort(weight[arcs[first:p, 3]], kind="mergesort")
                    arcs[first:p] = arcs[first:p][order]
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
    weight w + cost (float32, common.boosted_weight's rounding), restored on exit.  This is
    the whole of TLG o B for a single-state B, in O(arcs of boosted words), and the search
    then pays nothing per arc; `boosts` in the search is the same sum per arc, for
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


class Workspace(NamedTuple):
    """What one search writes besides its backpointers; made once per thread and capacity
    (new_workspace) and reused from utterance to utterance."""

    ht: HashTable
    tl: Tokens
    sv: Survivors
    gid: np.ndarray  # backpointer index of each token of the frame
    mark: np.ndarray  # the token is a survivor or an in-frame ancestor of one
    stack: np.ndarray  # the closure's work list
    hist: np.ndarray  # radix-select histogram
    sg: StateGroups


class StateGroups(NamedTuple):
    """ExpandArcs' survivors grouped by graph state (with a context several survivors share
    a state): an open-addressing map state -> the group's best survivor, and the emitting
    arcs without a word that kept the best survivor within the frame's bound, each with
    what it adds to a token's cost (weight + acoustic cost, the same for every survivor of
    the state), so that the others test an arc with one add before reading it."""

    key: np.ndarray  # int32 (H,): a state, EMPTY_KEY: free
    best: np.ndarray  # int32 (H,): the state's cheapest survivor
    slot: np.ndarray  # int32 (C,): each survivor's slot in the map
    lo: np.ndarray  # int32 (C,): per best survivor, its kept arcs are arcs[lo:hi] (hi -1: not recorded)
    hi: np.ndarray  # int32 (C,)
    least: np.ndarray  # float32 (C,): per best survivor, the least `adds` of its kept arcs
    arcs: np.ndarray  # int32 (KEPT_ARCS_ROOM,): arc positions
    adds: np.ndarray  # float32 (KEPT_ARCS_ROOM,): each kept arc's weight + acoustic cost
    step_token: np.ndarray  # int32 (STEP_ROOM,): word arcs whose context step _expand_arcs deferred: the survivor,
    step_arc: np.ndarray  # int32 (STEP_ROOM,): the arc,
    step_cost: np.ndarray  # float32 (STEP_ROOM,): and the cost before the step (_closure: the token's cost)
    step_stamp: np.ndarray  # int32 (STEP_ROOM,): _closure's: the token's lattice.Links.first then


def new_tokens(capacity: int) -> Tokens:
    """A token list of `capacity` tokens (a workspace's, or a stream's own)."""
    C, i32 = capacity, np.int32
    return Tokens(np.empty(C, i32), np.zeros(C, i32), np.empty(C, np.float32), np.empty(C, i32), np.empty(C, i32),
                  np.empty(C, i32), np.empty(1, i32))


# ExpandArcs' and the closure's room for deferred context steps, and for the arcs a state
# group's best kept: where they fill (the steps done at once, the others following every arc)
# decides the order tokens come in, so their backpointers' numbers and a lattice's states.
# Fixed, not the token capacity's, so that an utterance gets the same lattice whatever capacity
# its decoder has grown to (and a stream the offline one); at least what the default capacity
# of max_active up to 16,384 had (C and 4C), so that they fill no sooner than they did.
STEP_ROOM, KEPT_ARCS_ROOM = 1 << 16, 1 << 18


def new_workspace(capacity: int) -> Workspace:
    """A workspace of `capacity` token slots (the unused GPU-only fields have one entry; the
    hash table's stamp and count serve the CPU's table sizing, _table_for)."""
    C, H, i32 = capacity, hash_slots(capacity), np.int32
    K, S = KEPT_ARCS_ROOM, STEP_ROOM
    ht = HashTable(np.full(H, EMPTY_KEY, np.int64), np.empty(H, np.uint64), np.empty(H, i32), np.empty(H, i32),
                   np.empty(C, i32), np.full(1, H - 1, np.int64))
    tl = new_tokens(C)
    sv = Survivors(np.empty(C, i32), np.empty(C, i32), np.empty(C, np.float32), np.empty(C, i32),
                   np.empty(1, np.int64), np.empty(1, i32))
    sg = StateGroups(np.full(H, EMPTY_KEY, i32), np.empty(H, i32), np.empty(C, i32), np.empty(C, i32),
                     np.empty(C, i32), np.empty(C, np.float32), np.empty(K, i32), np.empty(K, np.float32),
                     np.empty(S, i32), np.empty(S, i32), np.empty(S, np.float32), np.empty(S, i32))
    return Workspace(ht, tl, sv, np.empty(C, i32), np.zeros(C, np.uint8), np.empty(4 * C, i32),
                     np.zeros(RADIX_BINS, np.int64), sg)


def new_memo(size: int) -> Memo:
    """An empty memo of context steps (see _word_step): `size` slots (a power of two) of
    (key, packed step), keys EMPTY_KEY, and its counters at zero."""
    return Memo(np.full((size, 2), EMPTY_KEY, np.int64), np.zeros(STEP_COUNTERS, np.int64))


# ---------------------------------------------------------------------- per arc and per token

@njit(inline="always")
def _arc_weight(arcs, p, boosts):
    """An arc's weight in TLG o B (boosts[w]: word w's cost, 0 at w = 0).  The add is
    unconditional: a test of the arc's label would mispredict on every state's boundary
    between word and other arcs."""
    w = bits_f32(arcs[p, 2])
    if boosts is not None:
        w = boosted_weight(w, boosts[arcs[p, 4]])
    return w


@njit(inline="always")  # call from NRT-free functions only (see _word_step)
def _recombine(state, ctx, cost, prev, arc, pctx, ht, tl, n, context):
    """Insert or improve the token of (state, ctx), keeping the smallest (cost, arc id,
    predecessor's ctx): two predecessors with different contexts can reach one key by
    the same arc at the same cost only through a word arc.  Without a context the key is
    the state alone and every ctx is 0.  Returns (index, n, improved); index -1: the
    token list is full."""
    mask = ht.key.shape[0] - 1
    key = np.int64(state)
    if context is not None:
        key = token_key(state, ctx)
        mask = ht.count[0]  # the slots in use (see _table_for)
    slot = hash_slot(key, mask)
    candidate = pack(cost, arc)
    while True:
        k = ht.key[slot]
        if k == key:
            best = ht.val[slot]
            if candidate < best or (context is not None and candidate == best and pctx < ht.pctx[slot]):
                j = ht.tok[slot]
                ht.val[slot] = candidate
                tl.cost[j] = cost
                tl.prev[j] = prev
                tl.arc[j] = arc
                if context is not None:
                    ht.pctx[slot] = pctx
                return j, n, True
            return ht.tok[slot], n, False
        if k == EMPTY_KEY:
            if n == tl.state.shape[0]:
                return -1, n, False
            if context is not None and 2 * (n + 1) > mask + 1 and mask < ht.key.shape[0] - 1:
                mask = _grow_table(ht, tl, n)  # more than half full: twice the slots (the key is new)
                slot = hash_slot(key, mask)
                while ht.key[slot] != EMPTY_KEY:
                    slot = (slot + 1) & mask
            ht.key[slot] = key
            ht.tok[slot] = n
            ht.val[slot] = candidate
            tl.state[n] = state
            tl.cost[n] = cost
            tl.prev[n] = prev
            tl.arc[n] = arc
            tl.slot[n] = slot
            tl.ctx[n] = ctx  # 0 all along without a context (workspaces are reused)
            if context is not None:
                ht.pctx[slot] = pctx
            return n, n + 1, True
        slot = (slot + 1) & mask


_MIN_SLOTS = 64  # the first frames grow it: a search with a context tests the growth


@njit(inline="always")
def _mask_for(n, slots):
    """The mask of the first slots of a table of `slots` to use for n keys: a power of two
    >= 4 x n (at least _MIN_SLOTS), at most all of them."""
    size = _MIN_SLOTS
    while size < 4 * n and size < slots:
        size *= 2
    return min(size, slots) - 1


@njit(nogil=True, cache=True, _nrt=False)
def _table_for(ht, n):
    """With a context, a frame's tokens are recombined in the first slots of the hash table
    only, sized for the last frame's n tokens (ht.count[0]: their mask) and doubled when
    half full (_grow_table).  A search with a context has few thousand tokens a frame in a
    table sized for its worst frame (2^17 slots on the large rescoring setup), and the
    probes of a table that fits the cache wait less."""
    ht.count[0] = _mask_for(n, ht.key.shape[0])


@njit(nogil=True, cache=True, _nrt=False)
def _grow_table(ht, tl, n):
    """Twice the slots in use for the frame's n tokens: their keys rehashed (a key's best
    (cost, arc) is its token's; its tie-break is held meanwhile in ht.stamp).  Returns the
    new mask."""
    mask = 2 * ht.count[0] + 1
    for j in range(n):
        s = tl.slot[j]
        ht.stamp[j] = ht.pctx[s]
        ht.key[s] = EMPTY_KEY
    for j in range(n):
        key = token_key(tl.state[j], tl.ctx[j])
        slot = hash_slot(key, mask)
        while ht.key[slot] != EMPTY_KEY:
            slot = (slot + 1) & mask
        ht.key[slot] = key
        ht.val[slot] = pack(tl.cost[j], tl.arc[j])
        ht.tok[slot] = j
        ht.pctx[slot] = ht.stamp[j]
        tl.slot[j] = slot
    ht.count[0] = mask
    return mask


@njit(nogil=True, cache=True, _nrt=False)
def _memo_fill(ctx, word, context, memo, slot):
    """Compute the context step of (ctx, word) into the memo's `slot` (see _word_step)."""
    lm_s, ph_s, cost, pos, end = context_locate(context, 0, ctx, word)
    payload = context.lm.payload[0, pos] if pos >= 0 else np.uint64(0)
    delta, nxt = context_arrive(context, 0, word, lm_s, ph_s, cost, pos, end, payload)
    memo.table[slot, 0] = token_key(word, ctx)
    memo.table[slot, 1] = (np.int64(np.uint32(f32_bits(delta))) << np.int64(32)) | np.int64(np.uint32(nxt))
    memo.counts[STEP_MISSES] += 1
    while lm_s != end:
        lm_s = context.lm.backoff[0, lm_s]
        memo.counts[STEP_BACKOFFS] += 1


@intrinsic
def _prefetch_row(typingctx, table, i):
    """Start loading the cache line of table[i, 0] (a 2-D array) for a read soon."""
    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer2(context, builder, data=ary.data, shape=cgutils.unpack_tuple(builder, ary.shape),
                                        strides=cgutils.unpack_tuple(builder, ary.strides), layout=aryty.layout,
                                        inds=[context.cast(builder, args[1], signature.args[1], types.intp),
                                              context.get_constant(types.intp, 0)], wraparound=False)
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])  # a read, kept in every cache level, data
        return context.get_dummy_value()
    return types.void(table, i), codegen


@intrinsic
def _keep(typingctx, value):
    """Keep `value` computed: an empty asm statement reads it (warm()'s loads are for their
    effect on the caches, which the compiler would otherwise drop with their unused sum)."""
    def codegen(context, builder, signature, args):
        builder.asm(ir.FunctionType(ir.VoidType(), [ir.IntType(64)]), "", "r", [args[0]], True)
        return context.get_dummy_value()
    return types.void(types.int64), codegen


@njit(nogil=True, cache=True, _nrt=False)
def warm(a, lo, hi):
    """Read one value of each cache line of a[lo:hi] (int32, 16 a line) before a walk follows
    a chain of backpointers through it.  A stream's backpointers were stored calls ago and
    have left the caches since; each load of a walk depends on the last, so each waits a
    whole miss, where the loads of a sweep overlap: a finished stream's path traced ~2.5x
    faster.  (Software prefetches of the lines were mostly dropped: hardly faster.)"""
    total = 0
    for j in range(max(lo, 0), hi, 16):
        total += a[j]
    _keep(total)


@njit(inline="always")
def _memo_slot(key, memo):
    """The memo's slot of a step's key (token_key(word, ctx))."""
    return hash_slot(key, memo.table.shape[0] - 1)


@njit(inline="always")
def _prefetch_step(ctx, word, memo):
    """Start loading the memo's slot of (ctx, word): a search that looks up many steps
    waits on the table's cache misses one after another unless they are under way together."""
    _prefetch_row(memo.table, _memo_slot(token_key(word, ctx), memo))


@njit(inline="always")
def _word_step(cost, ctx, word, context, memo):
    """Cost and context after an arc that outputs `word` (> 0) through the context automata
    (rescoring LM, phrase boosting).  Their steps are memoised per (ctx, word) in a
    direct-mapped table: tokens of one context read the same words frame after frame, and
    only a miss passes the automata in a call.  A slot is one 16-byte record, (key, cost
    bits << 32 | next ctx): a probe touches one cache line.

    Inline helpers taking arrays belong in `_nrt=False` functions only: elsewhere Numba
    reference-counts each array argument on every arc (that tripled ExpandArcs' time)."""
    key = token_key(word, ctx)
    slot = _memo_slot(key, memo)
    if memo.table[slot, 0] != key:
        _memo_fill(ctx, word, context, memo, slot)
    step = memo.table[slot, 1]
    return (np.float32(cost + bits_f32(np.uint32(step >> np.int64(32)))),
            np.int32(np.uint32(step & np.int64(0xFFFFFFFF))))


@njit(nogil=True, cache=True, _nrt=False)
def _group_by_state(sv, ns, sg):
    """Map each survivor's state to the state's cheapest survivor (ties: the first), in sg
    (in its first slots only, sized for ns keys: see _table_for)."""
    mask = _mask_for(ns, sg.key.shape[0])
    for i in range(ns):
        s = sv.state[i]
        slot = hash_slot(s, mask)
        while sg.key[slot] != EMPTY_KEY and sg.key[slot] != s:
            slot = (slot + 1) & mask
        if sg.key[slot] == EMPTY_KEY:
            sg.key[slot] = s
            sg.best[slot] = i
        elif sv.cost[i] < sv.cost[sg.best[slot]]:
            sg.best[slot] = i
        sg.slot[i] = slot


_LOOKED, _SKIP, _CUT = 0, 1, 2


@njit(inline="always")  # in NRT-free functions only (see _word_step)
def _word_arc(c, w, nc, floor, reach, limit, ctx, word, context, memo):
    """A word arc of a token of cost c and context ctx: its weight w, its cost nc before
    the context step, floor the cheapest acoustic cost it could add (0 in the closure).
    Returns (_CUT: this and every later word arc of the state, in order of weight, stays
    above `limit` whatever their steps give back, as their cost is at least
    c + (w - context.spread) + floor; _SKIP: this arc does, by the state's bound or by the
    bound of its word's bucket (common.lm_word_reach); _LOOKED: its step was
    looked up), and the cost and context after the step."""
    step = _word_reach(c, w, nc, floor, reach, limit, ctx, word, context)
    if step != _LOOKED:
        return step, nc, ctx
    nc, nctx = _word_step(nc, ctx, word, context, memo)
    return _LOOKED, nc, nctx


@njit(inline="always")  # in NRT-free functions only (see _word_step)
def _word_reach(c, w, nc, floor, reach, limit, ctx, word, context):
    """_word_arc's verdict without the step: _CUT, _SKIP or _LOOKED (the step is needed)."""
    if out_of_reach(expanded_cost(c, np.float32(w - context.spread), floor), reach, limit):
        return _CUT
    if nc == INF or out_of_reach(nc, reach, limit) or out_of_reach(nc, lm_word_reach(context, 0, ctx, word), limit):
        return _SKIP
    return _LOOKED


@njit(nogil=True, cache=True, _nrt=False)
def _expand_arcs(sv, ns, ac, adaptive_beam, context_beam, graph, boosts, context, memo, ht, tl, sg, lat):
    """ExpandArcs: the survivors' emitting arcs (ac: acoustic cost by input label).  The
    best new cost + adaptive_beam bounds the frame; new tokens below it are recombined into
    the emptied token list.  Returns (n, the best new cost (+inf: no arc has a finite
    cost), overflow).

    With a context, survivors that share a graph state differ only in their contexts, and
    an arc without a word costs each of them its cost + the same amount: the cheapest of
    them (the group's best) follows every arc, the others only the arcs without a word
    that kept the best within the bound (never the best new cost), and their word arcs.
    Those more than context_beam dearer than their group's best are not expanded.
    A word arc's context step (an LM lookup) is skipped when the arc stays out of the beam
    whatever the step gives back (common.out_of_reach), and a state's word arcs, in order
    of weight, are left at the first whose cheapest possible cost is out of reach
    (_word_arc).  In the second pass the steps are deferred (sg.step_*) and their memo
    slots prefetched, then done together (_expand_steps): a probe of the memo is a cache
    miss that the pass would otherwise wait on arc after arc.  Recombination keeps the
    smallest (cost, arc, predecessor's ctx), so the order tokens come in changes nothing."""
    states, arcs = graph.states, graph.arcs
    floor = INF  # the frame's cheapest acoustic cost
    for il in range(1, ac.shape[0]):
        floor = min(floor, ac[il])
    if context is not None:
        _group_by_state(sv, ns, sg)
    min_new = INF
    reach = np.float32(0.0)
    word_arcs = 0
    lookups = 0
    for i in range(ns):
        c = sv.cost[i]
        s = sv.state[i]
        first = states[s, 0]
        if context is not None:
            g = sg.best[sg.slot[i]]
            if c > sv.cost[g] + context_beam:
                continue
            reach = lm_reach(context, 0, sv.ctx[i])
            word_arcs += states[s, 2] - states[s, 1]
            if g != i:
                first = states[s, 1]  # the best's arcs without a word cost no more than this one's
        for p in range(first, states[s, 2]):
            w = _arc_weight(arcs, p, boosts)
            nc = expanded_cost(c, w, ac[arcs[p, 0]])
            if context is not None and p >= states[s, 1]:
                step, nc, _ = _word_arc(c, w, nc, floor, reach, min_new, sv.ctx[i], arcs[p, 4], context, memo)
                if step == _CUT:
                    break
                if step == _SKIP:
                    continue
                lookups += 1
            if nc < min_new:
                min_new = nc
    bound = beam_bound(min_new, adaptive_beam)
    n = 0
    kept = 0  # arcs recorded in sg.arcs
    deferred = 0  # word arcs in sg.step_*
    for sweep in range(2 if context is not None else 1):  # with a context: the groups' best first
        for i in range(ns):
            c = sv.cost[i]
            ctx = sv.ctx[i]
            s = sv.state[i]
            lo = states[s, 0]
            hi = states[s, 2]
            g = i
            if context is not None:
                g = sg.best[sg.slot[i]]
                if (g == i) != (sweep == 0) or c > sv.cost[g] + context_beam:
                    continue
                reach = lm_reach(context, 0, ctx)
                word_arcs += states[s, 2] - states[s, 1]
                if g == i:
                    sg.lo[i] = kept
                    sg.least[i] = INF
                elif sg.hi[g] >= 0:
                    lo = states[s, 1]
                    # the arcs without a word that kept the best; none if even the cheapest stays above
                    # the bound (rounding is monotone: c + a >= c + least for every kept a)
                    if np.float32(c + sg.least[g]) < bound:
                        for k in range(sg.lo[g], sg.hi[g]):
                            nc = np.float32(c + sg.adds[k])  # = expanded_cost of the arc
                            if nc < bound:
                                p = sg.arcs[k]
                                idx, n, _ = _recombine(arcs[p, 1], ctx, nc, sv.gid[i], arcs[p, 3], ctx, ht, tl, n,
                                                       context)
                                if idx < 0:
                                    return n, min_new, True
                                if lat is not None and not add_link(lat, sv.gid[i], idx, arcs[p, 3],
                                                                    _arc_weight(arcs, p, boosts), ac[arcs[p, 0]]):
                                    return n, min_new, True
            for p in range(lo, hi):
                w = _arc_weight(arcs, p, boosts)
                add = np.float32(w + ac[arcs[p, 0]])
                nc = np.float32(c + add)  # = expanded_cost(c, w, acoustic)
                if context is not None and p >= states[s, 1]:
                    step = _word_reach(c, w, nc, floor, reach, bound, ctx, arcs[p, 4], context)
                    if step == _CUT:
                        break
                    if step == _SKIP:
                        continue
                    lookups += 1
                    if deferred == sg.step_token.shape[0]:
                        n, overflow = _expand_steps(deferred, sv, ac, bound, graph, context, memo, ht, tl, sg, lat,
                                                      n)
                        deferred = 0
                        if overflow:
                            return n, min_new, True
                    sg.step_token[deferred] = i
                    sg.step_arc[deferred] = p
                    sg.step_cost[deferred] = nc
                    deferred += 1
                    _prefetch_step(ctx, arcs[p, 4], memo)
                    continue
                if nc < bound:  # (with a context, the word arcs were deferred above)
                    if context is not None and g == i:
                        if kept < sg.arcs.shape[0]:
                            sg.arcs[kept] = p
                            sg.adds[kept] = add
                            sg.least[i] = min(sg.least[i], add)
                        kept += 1
                    idx, n, _ = _recombine(arcs[p, 1], ctx, nc, sv.gid[i], arcs[p, 3], ctx, ht, tl, n, context)
                    if idx < 0:
                        return n, min_new, True
                    if lat is not None and not add_link(lat, sv.gid[i], idx, arcs[p, 3],
                                                        np.float32(nc - c - ac[arcs[p, 0]]), ac[arcs[p, 0]]):
                        return n, min_new, True
            if context is not None and g == i:
                sg.hi[i] = kept if kept <= sg.arcs.shape[0] else -1  # -1: the others follow every arc
    if context is not None:
        for i in range(ns):
            sg.key[sg.slot[i]] = EMPTY_KEY
        n, overflow = _expand_steps(deferred, sv, ac, bound, graph, context, memo, ht, tl, sg, lat, n)
        if overflow:
            return n, min_new, True
        memo.counts[STEP_ARCS] += word_arcs
        memo.counts[STEP_LOOKUPS] += lookups
    return n, min_new, False


@njit(nogil=True, cache=True, _nrt=False)
def _expand_steps(count, sv, ac, bound, graph, context, memo, ht, tl, sg, lat, n):
    """The context steps of the first `count` word arcs that _expand_arcs deferred (their
    memo slots were prefetched meanwhile) and the tokens they lead to below `bound`.
    Returns (n, overflow)."""
    arcs = graph.arcs
    for k in range(count):
        i = sg.step_token[k]
        p = sg.step_arc[k]
        ctx = sv.ctx[i]
        nc, nctx = _word_step(sg.step_cost[k], ctx, arcs[p, 4], context, memo)
        if nc < bound:
            idx, n, _ = _recombine(arcs[p, 1], nctx, nc, sv.gid[i], arcs[p, 3], ctx, ht, tl, n, context)
            if idx < 0:
                return n, True
            if lat is not None and not add_link(lat, sv.gid[i], idx, arcs[p, 3],
                                                np.float32(nc - sv.cost[i] - ac[arcs[p, 0]]), ac[arcs[p, 0]]):
                return n, True
    return n, False


@njit(nogil=True, cache=True, _nrt=False)
def _closure(cutoff, n, graph, boosts, context, memo, ht, tl, stack, lat, sg):
    """Non-emitting closure of the frame's tokens; returns (n, overflow).  Word arcs are
    skipped and left as in _expand_arcs, and their context steps deferred as there
    (sg.step_*, their memo slots prefetched): done when the work list runs out or their
    buffer is full (_closure_steps).  A token improved meanwhile is expanded again and
    defers its own steps: its earlier ones are dropped (step_cost holds the token's cost
    when it deferred them, step_stamp its lattice links' start), so that the closure keeps
    the same tokens and links as with each step done at once."""
    states, arcs = graph.states, graph.arcs
    word_arcs = 0
    lookups = 0
    top = 0
    deferred = 0
    for j in range(n):
        stack[top] = j
        top += 1
    while top > 0 or deferred > 0:
        if context is not None and top == 0:  # (without a context nothing is deferred)
            n, top, overflow = _closure_steps(deferred, cutoff, graph, boosts, context, memo, ht, tl, stack, top,
                                              lat, sg, n)
            deferred = 0
            if overflow:
                return n, True
            continue
        top -= 1
        j = stack[top]
        c = tl.cost[j]
        if c > cutoff:
            continue
        s = tl.state[j]
        ctx = tl.ctx[j]
        reach = np.float32(0.0)
        if context is not None:
            reach = lm_reach(context, 0, ctx)
            word_arcs += states[s + 1, 0] - states[s, 3]
        if lat is not None:
            if context is not None and lat.first[j] == lat.count[0]:
                # j queued twice, its first expansion's links all deferred: those steps carry
                # this stamp too, and would each add their link twice; a link of j's that
                # store_links drops (one before its first) moves the stamp on
                if not add_link(lat, in_frame_prev(j), j, 0, np.float32(0.0), np.float32(0.0)):
                    return n, True
            lat.first[j] = lat.count[0]  # the links of an earlier expansion of j are dropped
        for p in range(states[s, 2], states[s + 1, 0]):
            w = _arc_weight(arcs, p, boosts)
            nc = np.float32(c + w)
            if context is not None and p >= states[s, 3]:
                step = _word_reach(c, w, nc, np.float32(0.0), reach, cutoff, ctx, arcs[p, 4], context)
                if step == _CUT:
                    break
                if step == _SKIP:
                    continue
                lookups += 1
                if deferred == sg.step_token.shape[0]:
                    n, top, overflow = _closure_steps(deferred, cutoff, graph, boosts, context, memo, ht, tl, stack,
                                                      top, lat, sg, n)
                    deferred = 0
                    if overflow:
                        return n, True
                sg.step_token[deferred] = j
                sg.step_arc[deferred] = p
                sg.step_cost[deferred] = c
                if lat is not None:
                    sg.step_stamp[deferred] = lat.first[j]
                deferred += 1
                _prefetch_step(ctx, arcs[p, 4], memo)
                continue
            if nc > cutoff:
                continue
            idx, n, improved = _recombine(arcs[p, 1], ctx, nc, in_frame_prev(j), arcs[p, 3], ctx, ht, tl, n,
                                          context)
            if idx < 0:
                return n, True
            if lat is not None and not add_link(lat, in_frame_prev(j), idx, arcs[p, 3], np.float32(nc - c),
                                                np.float32(0.0)):
                return n, True
            if improved:
                if top == stack.shape[0]:
                    return n, True
                stack[top] = idx
                top += 1
    if context is not None:
        memo.counts[STEP_CLOSURE_ARCS] += word_arcs
        memo.counts[STEP_CLOSURE_LOOKUPS] += lookups
    return n, False


@njit(nogil=True, cache=True, _nrt=False)
def _closure_steps(count, cutoff, graph, boosts, context, memo, ht, tl, stack, top, lat, sg, n):
    """The context steps of the first `count` word arcs that _closure deferred, but those of
    a token improved since it deferred them (its cost changed, or with a lattice its links
    were started again: it was expanded again, or will be); the tokens they lead to at most
    `cutoff`, pushed on the work list when improved.  Returns (n, top, overflow)."""
    arcs = graph.arcs
    for k in range(count):
        j = sg.step_token[k]
        c = sg.step_cost[k]
        if tl.cost[j] != c or (lat is not None and lat.first[j] != sg.step_stamp[k]):
            continue
        p = sg.step_arc[k]
        ctx = tl.ctx[j]
        nc, nctx = _word_step(np.float32(c + _arc_weight(arcs, p, boosts)), ctx, arcs[p, 4], context, memo)
        if nc > cutoff:
            continue
        idx, n, improved = _recombine(arcs[p, 1], nctx, nc, in_frame_prev(j), arcs[p, 3], ctx, ht, tl, n, context)
        if idx < 0:
            return n, top, True
        if lat is not None and not add_link(lat, in_frame_prev(j), idx, arcs[p, 3], np.float32(nc - c),
                                            np.float32(0.0)):
            return n, top, True
        if improved:
            if top == stack.shape[0]:
                return n, top, True
            stack[top] = idx
            top += 1
    return n, top, False


@njit(nogil=True, cache=True, _nrt=False)
def _best_token(tl, n, final, context, with_final):
    """Index of the token with the smallest (cost [+ final costs], state, ctx), or -1 if none is finite."""
    return best_token(tl.cost, tl.state, tl.ctx, n, final, context, 0, with_final)


@njit(nogil=True, cache=True, _nrt=False)
def _cutoff(tl, n, settings, hist):
    """(cutoff, adaptive beam) of a frame's n tokens: Kaldi's GetCutoff with exact order statistics."""
    best = INF
    for j in range(n):
        if tl.cost[j] < best:
            best = tl.cost[j]
    beam_cutoff = np.float32(best + settings.beam)
    below = 0
    at_most = 0
    for j in range(n):
        below += tl.cost[j] < beam_cutoff
        at_most += tl.cost[j] <= beam_cutoff
    need_max, need_min = order_statistics_needed(n, below, at_most, settings)
    kth_max = select_cost(tl.cost, n, settings.max_active, hist) if need_max else INF
    kth_min = INF if n <= settings.min_active else best
    if need_min:
        kth_min = select_cost(tl.cost, n, settings.min_active, hist)
    return cutoff_and_adaptive_beam(best, kth_max, kth_min, settings.beam, settings.beam_delta)


# ---------------------------------------------------------------------- the search
#
# A search is begin(), frames() over the frames (in one call, or chunk by chunk for a stream:
# the tokens of the last frame stay in the stream's token list between calls), then finish().
# Backpointers (prev, arc) grow in a Trace; a stream's Trace lives as long as the stream.


class Trace(NamedTuple):
    """Backpointers of a search: (prev, arc) per stored token, and where each step's start
    (step t = after t frames; steps[t]: the first backpointer stored at step t)."""

    prev: np.ndarray  # int32
    arc: np.ndarray  # int32
    steps: np.ndarray  # int64 (frames + 2,)
    survivors: np.ndarray  # int32 (frames,): tokens that survived pruning, per frame
    room: int  # the backpointers prev and arc may hold, old and grown arrays together (_store)


@njit(nogil=True, cache=True)
def log_probs_in_range(x, top):
    """Whether every value v of x (T, V) has -inf < v <= top (NaN has not): the usual
    chunk, read in one pass (NumPy's min and max take two, at µs each on a stream's chunk
    of a few frames).  A frame's values are counted, not tested one by one, so that the
    loop vectorises (stopping at the first fault made it 3-5x slower than NumPy's at
    V = 500-5000)."""
    for t in range(x.shape[0]):
        row = x[t]
        fine = 0
        for j in range(row.shape[0]):
            v = row[j]
            fine += (v > -np.inf) & (v <= top)
        if fine != row.shape[0]:
            return False
    return True


@njit(nogil=True, cache=True)
def end_to_end(x, lengths):
    """The chunks of x (N, T, V), chunk k its first lengths[k] frames, end to end in a new
    (sum of lengths, V) array: one pass, where NumPy's boolean mask over (N, T) costs
    tens of µs a call of a hundred streams."""
    out = np.empty((lengths.sum(), x.shape[2]), x.dtype)
    p = 0
    for k in range(x.shape[0]):
        n = lengths[k]
        out[p:p + n] = x[k, :n]
        p += n
    return out


def new_trace(frames: int, capacity: int) -> Trace:
    size = max(capacity, 1024)
    return Trace(np.empty(size, np.int32), np.empty(size, np.int32), np.zeros(frames + 2, np.int64),
                 np.zeros(frames, np.int32), MAX_BACKPOINTERS)


@njit(nogil=True, cache=True)
def begin(graph, boosts, context, memo, ws, lat):
    """The start token and its epsilon closure, in ws.tl.  Returns (n, overflow).
    lat: the search's lattice.Links, or None.  ws's hash tables must be empty: a search
    empties them as it goes, but one that overflowed leaves keys behind, and the caller
    empties them (clearing whole tables here would cost more than a short utterance does
    at a wide max_active)."""
    if lat is not None:
        lat.count[:] = 0
    start_ctx = np.int32(0)
    if context is not None:
        start_ctx = context.start[0]
    _table_for(ws.ht, 0)
    _, n, _ = _recombine(graph.start, start_ctx, np.float32(0.0), NO_TOKEN, NO_ARC, start_ctx, ws.ht, ws.tl, 0,
                         context)
    return _closure(np.float32(np.finfo(np.float32).max), n, graph, boosts, context, memo, ws.ht, ws.tl, ws.stack,
                    lat, ws.sg)


@njit(nogil=True, cache=True)
def context_path_cost(context, word_ids, final):
    """The context's cost of a word sequence (row 0, from its start), word by word as the
    search adds it, and its final cost where `final` (non-zero): lm.Rescorer.path_cost, one
    call for a result (a step from Python cost a dispatch and the typing of the Context)."""
    ctx = context.start[0]
    total = 0.0
    for w in word_ids:
        cost, ctx = context_step(context, 0, ctx, w)
        total += np.float64(cost)
    if final:
        total += np.float64(context_final(context, 0, ctx))
    return total


@njit(nogil=True, cache=True)
def begin_slot(graph, ws, memo, table, i):
    """begin() of stream slot i of the StreamTable, in its own token list (ws: a workspace
    for the rest): its word costs, its context table.contexts[i] and the memo of its
    context steps (`memo`, the thread's of the rescoring LM's steps, or table.memos[i],
    its own) as its numbers say; the hash table emptied after it unless it overflowed.
    Returns (n, overflow).  (The stream's objects are read here, not passed: a Context
    passed from Python is an argument the dispatcher types, ~60 µs a stream.)"""
    s = table.slots[i]
    w = Workspace(ws.ht, s.tl, ws.sv, ws.gid, ws.mark, ws.stack, ws.hist, ws.sg)
    kind = table.numbers[i, S_CONTEXT]
    if kind == NO_CONTEXT:
        if len(s.word_costs):
            n, overflow = begin(graph, s.word_costs, None, None, w, None)
        else:
            n, overflow = begin(graph, None, None, None, w, None)
    else:
        m = memo if kind == SHARED_MEMO else table.memos[i]
        if len(s.word_costs):
            n, overflow = begin(graph, s.word_costs, table.contexts[i], m, w, None)
        else:
            n, overflow = begin(graph, None, table.contexts[i], m, w, None)
    if not overflow:
        release(w, n)
    return n, overflow


@njit(inline="always", cache=True)
def _backpointer_room(prev, arc, stored, more, room):
    """prev and arc with room for `more` backpointers after `stored` (grown when full), and
    False when growing them would hold more than `room`, the old arrays and the new together."""
    if stored + more <= prev.shape[0]:
        return prev, arc, True
    size = min(max(2 * prev.shape[0], stored + more), room - prev.shape[0])
    if size < stored + more:
        return prev, arc, False
    grown_prev = np.empty(size, np.int32)
    grown_arc = np.empty(size, np.int32)
    grown_prev[:stored] = prev[:stored]
    grown_arc[:stored] = arc[:stored]
    return grown_prev, grown_arc, True


@njit(nogil=True, cache=True)
def _store(ws, n, keep, cutoff, last, prev, arc, stored, lat, room, ilabel, blank):
    """Store the frame's survivors (cost below cutoff; on the last step token `keep` alone)
    and their in-frame ancestors as backpointers from `stored` on, the survivors in ws.sv,
    and empty the hash table; with a lattice (lat: lattice.Links) their costs in lat.alpha.
    Returns (prev, arc, stored, survivors): the arrays grown when full; survivors -1 (and
    nothing stored) when growing them would hold more than `room` backpointers, the old
    arrays and the new together.

    Runs of blanks fold (not on the last step, nor with a lattice, whose links name each
    frame's backpointers): a token that took again the blank self-loop its backpointer took
    shares that backpointer, and the frames between a backpointer and its successor on a
    path tell how often the loop read (unfold_runs).  In a silence every token's path is
    such a run: stored a frame each, they grew a stream's memory while its paths disagreed
    on the last words and could not be committed."""
    ht, tl, sv, gid, mark = ws.ht, ws.tl, ws.sv, ws.gid, ws.mark
    mark[:n] = 0
    for j in range(n):
        if (last and j == keep) or (not last and tl.cost[j] < cutoff):
            mark_ancestors(j, tl.prev, mark)
    prev, arc, fits = _backpointer_room(prev, arc, stored, n, room)
    if not fits:
        return prev, arc, stored, -1
    fold = lat is None and not last
    new = stored  # backpointers from here on are the frame's own
    for j in range(n):
        if mark[j]:
            p = tl.prev[j]
            if fold and p >= 0 and tl.arc[j] == arc[p] and ilabel[arc[p]] == blank:
                gid[j] = p
                continue
            gid[j] = stored
            if lat is not None and stored < lat.alpha.shape[0]:  # store_links reports the overflow
                lat.alpha[stored] = tl.cost[j]
                lat.extra[stored] = np.nan
            stored += 1
    ns = 0
    for j in range(n):
        if mark[j]:
            if gid[j] >= new:
                p = tl.prev[j]
                prev[gid[j]] = gid[in_frame(p)] if p <= -2 else p
                arc[gid[j]] = tl.arc[j]
            if not last and tl.cost[j] < cutoff:
                sv.state[ns] = tl.state[j]
                sv.ctx[ns] = tl.ctx[j]
                sv.cost[ns] = tl.cost[j]
                sv.gid[ns] = gid[j]
                ns += 1
        ht.key[tl.slot[j]] = EMPTY_KEY
    _table_for(ht, n)
    return prev, arc, stored, ns


@njit(nogil=True, cache=True)
def _unfold_survivors(sv, ns, prev, arc, stored, start, room):
    """Store the backpointer that each of the frame's ns survivors (sv) folded into an
    earlier one (_store; its backpointer below `start`, the frame's first): the search died
    at this frame, and the path that ends at a ghost must end at its own step.  Returns
    (prev, arc, stored, whether they fit in `room`)."""
    prev, arc, fits = _backpointer_room(prev, arc, stored, ns, room)
    if not fits:
        return prev, arc, stored, False
    for j in range(ns):
        g = sv.gid[j]
        if g < start:
            prev[stored] = g
            arc[stored] = arc[g]
            sv.gid[j] = stored
            stored += 1
    return prev, arc, stored, True


@njit(nogil=True, cache=True)
def _ghosts(ws, ns):
    """The frame's ns survivors (ws.sv) as ghosts in ws.tl, where they led to no token:
    the search ends with them (common.died).  Returns their count."""
    tl, sv = ws.tl, ws.sv
    for j in range(ns):
        tl.state[j] = sv.state[j]
        tl.ctx[j] = sv.ctx[j]
        tl.cost[j] = sv.cost[j]
        tl.prev[j] = sv.gid[j]
        tl.arc[j] = NO_ARC
        tl.slot[j] = 0  # in no hash table: emptying slot 0 of an empty table is harmless
    return ns


@njit(nogil=True, cache=True)
def frames(graph, boosts, context, memo, log_probs, num_frames, settings, ws, n, ns, resume_beam, trace, first, stored,
           lat):
    """Frames 0 .. num_frames - 1 of log_probs: prune the n tokens in ws.tl, store the
    survivors as backpointers (from `stored` on, step first + t in trace.steps), expand
    them and close over epsilon arcs.  resume_beam >= 0: frame 0 was pruned already (with
    this adaptive beam), its ns survivors are in ws.sv: a stream whose frame overflowed
    goes on from there in a larger workspace (< 0: not so).

    Returns (status, frames done, n, ns, adaptive beam, prev, arc, stored, FLToP
    fallbacks): status OK, or TOKEN_OVERFLOW (LINK_OVERFLOW: lat's links) at frame `frames
    done`, whose ns survivors are in ws.sv; prev and arc are trace's arrays, grown when full,
    up to trace.room backpointers (_store), past which MEMORY_OUT at frame `frames done`.

    lat: the search's lattice.Links (its links are stored with the backpointers and pruned
    every lat.interval steps), or None."""
    ht, tl, sv, sg = ws.ht, ws.tl, ws.sv, ws.sg
    num_columns = log_probs.shape[1]
    ac = np.zeros(num_columns + 1, np.float32)  # acoustic cost by input label
    pruning = fltop_active(settings, num_columns)
    fallbacks = 0
    prev, arc = trace.prev, trace.arc
    for t in range(num_frames):
        resumed = resume_beam >= 0 and t == 0  # (then tl holds no tokens yet)
        if not resumed and died(n, tl.prev, tl.arc):  # the search died: it reads no more frames
            trace.steps[first + t:first + num_frames] = stored
            trace.survivors[first + t:first + num_frames] = 0
            break
        fell_back = 0
        cutoff = INF
        adaptive_beam = settings.beam
        if resumed:
            adaptive_beam = resume_beam
            if lat is not None:  # the links of the frame's first try go
                lat.count[0] = lat.count[1]
        else:
            if n > 0:
                cutoff, adaptive_beam = _cutoff(tl, n, settings, ws.hist)
            trace.steps[first + t] = stored
            prev, arc, stored, ns = _store(ws, n, -1, cutoff, False, prev, arc, stored, lat, trace.room,
                                           graph.ilabel, settings.blank_ilabel)
            if ns < 0:
                return MEMORY_OUT, t, n, 0, adaptive_beam, prev, arc, stored, fallbacks
            trace.survivors[first + t] = ns
            if lat is not None:
                if not store_links(lat, ws.mark, ws.gid, n, first + t, stored):
                    return LINK_OVERFLOW, t, n, ns, adaptive_beam, prev, arc, stored, fallbacks
                if first + t > 0 and (first + t) % lat.interval == 0:
                    prune_at_frontier(lat, trace.steps, first + t, stored)
        # ExpandArcs (again without FLToP if it left no arc a finite cost), then the closure
        frame_acoustic_costs(log_probs, t, settings, pruning, ac, ws.hist)
        n, best, overflow = _expand_arcs(sv, ns, ac, adaptive_beam, settings.context_beam, graph, boosts, context,
                                         memo, ht, tl, sg, lat)
        if pruning and ns > 0 and not overflow and best == INF:
            fell_back = 1
            if lat is not None:
                lat.count[0] = lat.count[1]
            frame_acoustic_costs(log_probs, t, settings, False, ac, ws.hist)
            n, best, overflow = _expand_arcs(sv, ns, ac, adaptive_beam, settings.context_beam, graph, boosts,
                                             context, memo, ht, tl, sg, lat)
        if not overflow:
            n, overflow = _closure(np.float32(best + adaptive_beam), n, graph, boosts, context, memo, ht, tl,
                                   ws.stack, lat, sg)
        if overflow:  # the frame is done again from its survivors: its fallback is not counted
            status = TOKEN_OVERFLOW
            if lat is not None and lat.count[0] == lat.src.shape[0]:
                status = LINK_OVERFLOW
            return status, t, n, ns, adaptive_beam, prev, arc, stored, fallbacks
        fallbacks += fell_back
        if n == 0:
            prev, arc, stored, fits = _unfold_survivors(sv, ns, prev, arc, stored, trace.steps[first + t], trace.room)
            if not fits:
                return MEMORY_OUT, t, n, 0, adaptive_beam, prev, arc, stored, fallbacks
            n = _ghosts(ws, ns)
    return OK, num_frames, n, ns, np.float32(settings.beam), prev, arc, stored, fallbacks


@njit(nogil=True, cache=True)
def _last_keep(tl, n, final, context):
    """The token the search ends with: the best with its final cost where one is final,
    else the best without.  Returns (its index or -1, reached_final)."""
    keep = _best_token(tl, n, final, context, True)
    if keep >= 0:
        return keep, True
    return _best_token(tl, n, final, context, False), False


@njit(nogil=True, cache=True)
def _traced(prev, arc, g, stored):
    """(status, path arcs, their backpointers, the chain's first backpointer or NO_TOKEN: its
    lead, for unfolded_path) of the chain ending at backpointer g: EPS_CYCLE when the
    backpointers loop."""
    length = trace_length(prev, g, stored)
    if length < 0:
        return EPS_CYCLE, np.empty(0, np.int32), np.empty(0, np.int32), NO_TOKEN
    path_arcs = np.empty(length - 1, np.int32)  # the start token has no arc
    path_gids = np.empty(length - 1, np.int32)
    trace_path(prev, arc, g, length, path_arcs, path_gids)
    lead = prev[path_gids[0]] if length > 1 else NO_TOKEN
    return OK, path_arcs, path_gids, lead


@njit(nogil=True, cache=True)
def finish(graph, context, ws, n, trace, first, stored):
    """The last step: keep the best token (with its final cost where one is final, else
    without), store it and trace its path back.  first: its step in trace.steps.

    Returns (status, path arcs, path backpointers, reached_final, the path's lead: _traced):
    status OK or EPS_CYCLE (a zero-cost epsilon cycle in the graph made the backpointers
    loop); no arcs when the search has no token."""
    empty = np.empty(0, np.int32)
    tl = ws.tl
    if died(n, tl.prev, tl.arc):  # the search died: the path of its best survivor
        trace.steps[first] = trace.steps[first + 1] = stored
        keep = _best_token(tl, n, graph.final, context, False)
        status, path_arcs, path_gids, lead = _traced(trace.prev, trace.arc, tl.prev[keep], stored)
        return status, path_arcs, path_gids, False, lead
    keep, reached_final = _last_keep(tl, n, graph.final, context)
    trace.steps[first] = stored
    prev, arc, stored, _ = _store(ws, n, keep, INF, True, trace.prev, trace.arc, stored, None, MAX_BACKPOINTERS,
                                  trace.arc[:0], -1)  # (the last step folds nothing: no labels read)
    trace.steps[first + 1] = stored
    if keep < 0:
        return OK, empty, empty, False, NO_TOKEN
    status, path_arcs, path_gids, lead = _traced(prev, arc, ws.gid[keep], stored)
    return status, path_arcs, path_gids, reached_final and status == OK, lead


@njit(nogil=True, cache=True)
def search(graph, boosts, context, memo, log_probs, num_frames, settings, ws, lat, room):
    """Viterbi beam search of one utterance: log_probs (T, V), its first num_frames frames.

    graph: groups.InterleavedGraph; settings: groups.Settings; ws: a Workspace, whose
    capacity bounds the tokens of a frame (its hash tables empty, as every search leaves
    them but one that overflowed).  boosts: each output label's word cost
    (-reward; 0 for words not boosted and at label 0), or None.  context: groups.Context
    of this utterance (row 0), or None; memo: its memo of context steps (new_memo).
    lat: lattice.Links to keep the utterance's lattice in (its block must hold
    num_frames + 2 steps), or None for the best path alone.  room: the backpointers the
    search may hold (_store).

    Returns (status, path arcs, path steps, reached_final, survivors per frame, FLToP
    fallbacks, step starts, final tokens, final costs, lat as the search grew it): status
    OK, TOKEN_OVERFLOW (grow the capacity and decode again), LINK_OVERFLOW (the start's
    closure filled lat: grow it), MEMORY_OUT (more than room backpointers, the links' growth
    counted: the step starts are those of the frames done and of the one that did not
    fit) or EPS_CYCLE (a zero-cost epsilon cycle in the graph made the backpointers loop);
    the graph arc ids of the best path in order and the step each arc's token was stored
    at (step t = after t frames: an emitting arc on step t consumed frame t - 1); the
    frames that FLToP emptied and were expanded again without it.  With a lattice: the
    first backpointer stored at each step, the lattice's final tokens (backpointers) and
    their final costs; its links are the returned lat's first lat.count[0].
    """
    empty = np.empty(0, np.int32)
    no_costs = np.empty(0, np.float32)
    no_steps = np.zeros(1, np.int64)
    C = ws.tl.state.shape[0]
    trace = Trace(np.empty(max(C, 1024), np.int32), np.empty(max(C, 1024), np.int32),
                  np.zeros(num_frames + 2, np.int64), np.zeros(num_frames, np.int32), room)
    n, overflow = begin(graph, boosts, context, memo, ws, lat)
    if overflow:
        status = TOKEN_OVERFLOW
        if lat is not None:
            if lat.count[0] == lat.src.shape[0]:
                status = LINK_OVERFLOW
        return status, empty, empty, False, trace.survivors, 0, no_steps, empty, no_costs, lat
    grown = lat  # (lat itself is not assigned again: Numba prunes its None branches only then)
    if lat is None:
        status, done, n, _, _, prev, arc, stored, fallbacks = frames(graph, boosts, context, memo, log_probs,
                                                                     num_frames, settings, ws, n, 0, np.float32(-1.0),
                                                                     trace, 0, 0, None)
    else:
        status, done, n, prev, arc, stored, fallbacks, grown = _lattice_frames(
            graph, boosts, context, memo, log_probs, num_frames, settings, ws, n, trace, lat)
    if status == MEMORY_OUT:
        return status, empty, empty, False, trace.survivors, fallbacks, trace.steps[:done + 1], empty, no_costs, grown
    if status != OK:
        return status, empty, empty, False, trace.survivors, fallbacks, no_steps, empty, no_costs, grown
    trace = Trace(prev, arc, trace.steps, trace.survivors, trace.room)
    if lat is None:
        status, path_arcs, path_gids, reached_final, lead = finish(graph, context, ws, n, trace, num_frames, stored)
        final_gids, final_costs = empty, no_costs
    else:
        status, path_arcs, path_gids, reached_final, final_gids, final_costs = finish_lattice(
            graph, context, ws, n, trace, num_frames, stored, grown)
    if lat is not None:
        lead = NO_TOKEN  # (a lattice's search folds no run)
    path_arcs, path_steps, _ = unfolded_path(graph.ilabel, path_arcs, path_gids, lead, trace.arc, trace.steps, 0,
                                             0)  # (every arc of the path is stored)
    return (status, path_arcs, path_steps, reached_final, trace.survivors, fallbacks, trace.steps, final_gids,
            final_costs, grown)


# frames between a lattice search's checks of its room: room for 16 frames' tokens at most (15
# and the step after) is what the default links buffer holds (batch.LINKS_PER_TOKEN)
_LATTICE_PIECE = 15


@njit(inline="always", cache=True)
def _lattice_bytes(lat):
    return 4 * (6 * len(lat.src) + 3 * len(lat.alpha))


@njit(nogil=True, cache=True)
def _lattice_frames(graph, boosts, context, memo, log_probs, num_frames, settings, ws, n, trace, lat):
    """frames() of an utterance that keeps its lattice in `lat`, grown as it fills, as a
    stream's is: in pieces of _LATTICE_PIECE frames, each given room first for what storing
    its frames can add (lattice.room_for_chunk), and a frame whose links filled the buffer
    goes on from its survivors with twice the links (the utterance decoded again with a
    larger buffer cost a 10-minute utterance 5 passes, 3x the plain decode).  What the
    links grow past their first size counts against trace.room with the backpointers.
    Returns (status, frames done, n, prev, arc, stored, FLToP fallbacks, lat): status OK,
    TOKEN_OVERFLOW or MEMORY_OUT (the links or backpointers outgrew the room)."""
    tokens = ws.tl.state.shape[0]
    first_bytes = _lattice_bytes(lat)
    done, ns, stored, fallbacks = 0, 0, 0, 0
    resume_beam = np.float32(-1.0)
    prev, arc = trace.prev, trace.arc
    while done < num_frames:
        piece = min(_LATTICE_PIECE, num_frames - done)
        lat, _ = room_for_chunk(lat, stored, tokens, done, piece)
        if stored + (_lattice_bytes(lat) - first_bytes) // 8 > trace.room:
            trace.steps[done] = stored
            return MEMORY_OUT, done, n, prev, arc, stored, fallbacks, lat
        status, k, n, ns, beam, prev, arc, stored, fell_back = frames(
            graph, boosts, context, memo, log_probs[done:done + piece], piece, settings, ws, n, ns, resume_beam,
            Trace(prev, arc, trace.steps, trace.survivors, trace.room), done, stored, lat)
        done += k
        fallbacks += fell_back
        resume_beam = np.float32(-1.0)
        if status == LINK_OVERFLOW:
            lat = with_room(lat, 2 * len(lat.src), 0, 0, 0)
            ws.ht.key[:] = EMPTY_KEY  # (the frame's expansion left keys behind)
            ws.sg.key[:] = EMPTY_KEY
            resume_beam = beam
        elif status != OK:
            return status, done, n, prev, arc, stored, fallbacks, lat
    return OK, done, n, prev, arc, stored, fallbacks, lat


# ---------------------------------------------------------------------- lattices


@njit(nogil=True, cache=True)
def finish_lattice(graph, context, ws, n, trace, first, stored, lat):
    """finish() of a search that keeps a lattice: every token of the last step is stored;
    their extra costs are their costs with final costs (without, when no final state was
    reached) above the best one's, and the links are pruned a last time.

    Returns finish()'s tuple + (the backpointers of the lattice's final tokens, their final
    costs); status LINK_OVERFLOW when the links buffer is full."""
    empty = np.empty(0, np.int32)
    no_costs = np.empty(0, np.float32)
    tl = ws.tl
    if died(n, tl.prev, tl.arc):  # the search died: its best path, no lattice
        status, path_arcs, path_gids, _, _ = finish(graph, context, ws, n, trace, first, stored)
        return status, path_arcs, path_gids, False, empty, no_costs
    keep, reached_final = _last_keep(tl, n, graph.final, context)
    trace.steps[first] = stored
    before = stored
    prev, arc, stored, _ = _store(ws, n, -1, INF, False, trace.prev, trace.arc, stored, lat, MAX_BACKPOINTERS,
                                  graph.ilabel, -1)
    trace.steps[first + 1] = stored
    if keep < 0:
        return OK, empty, empty, False, empty, no_costs
    if not store_links(lat, ws.mark, ws.gid, n, first, stored):
        return LINK_OVERFLOW, empty, empty, False, empty, no_costs
    final_cost = np.zeros(stored - before, np.float32)
    for j in range(n):
        if ws.mark[j]:
            if reached_final:
                f = graph.final[tl.state[j]]
                if context is not None and f < INF and contextual(context, 0):
                    f = np.float32(f + context_final(context, 0, tl.ctx[j]))
            else:  # (the search ended where it could: a phrase matched in part still earns nothing)
                f = np.float32(0.0) if context is None else phrase_final(context, 0, tl.ctx[j])
            final_cost[ws.gid[j] - before] = f
    final_gids, final_costs = close_links(lat, trace.steps, first, lat.alpha[before:stored], final_cost, ws.gid[keep])
    status, path_arcs, path_gids, _ = _traced(prev, arc, ws.gid[keep], stored)
    if status != OK:
        return status, empty, empty, False, empty, no_costs
    return OK, path_arcs, path_gids, reached_final, final_gids, final_costs


# ---------------------------------------------------------------------- streams

@njit(nogil=True, cache=True, _nrt=False)
def release(ws, n):
    """Empty the hash-table slots of the frame's n tokens: a stream leaves the workspace's
    table as it found it (the next frame's pruning empties them anyway)."""
    for j in range(n):
        ws.ht.key[ws.tl.slot[j]] = EMPTY_KEY


@njit(nogil=True, cache=True)
def partial_path(tl, n, final, context, prev, arc, stored, since):
    """The path of the frame's best token after backpointer `since` (final costs left out,
    as for a partial result; since: a backpointer on that path, or -1: from the start):
    (graph arc ids in path order, each arc's backpointer or -1 for the frame's own in-frame
    arcs, the stored backpointer the in-frame arcs start from, PARTIAL_OK, PARTIAL_LOOPS
    when the path loops (an epsilon cycle) or PARTIAL_STALE when `since` is not on it).
    No arcs when there is no token."""
    arcs = np.empty(0, np.int32)
    gids = np.empty(0, np.int32)
    keep = _best_token(tl, n, final, context, False)
    if keep < 0:
        return arcs, gids, -1, PARTIAL_OK
    in_frame_arcs = 0
    k = keep
    for step in range(n + 1):  # the frame's own epsilon chain back to a stored token
        if step == n:
            return arcs, gids, -1, PARTIAL_LOOPS
        if tl.arc[k] != NO_ARC:
            in_frame_arcs += 1
        p = tl.prev[k]
        if p > -2:
            break
        k = in_frame(p)
    g = tl.prev[k]
    length = 0  # the stored backpointers after `since`
    h = g
    while h >= 0 and h != since:
        length += 1
        if length > stored:
            return arcs, gids, -1, PARTIAL_LOOPS
        h = prev[h]
    if h != since:
        return arcs, gids, -1, PARTIAL_STALE
    if since < 0 and length > 0:
        length -= 1  # the start's backpointer has no arc
    arcs = np.empty(length + in_frame_arcs, np.int32)
    gids = np.full(length + in_frame_arcs, -1, np.int32)
    h = g
    for i in range(length - 1, -1, -1):
        arcs[i] = arc[h]
        gids[i] = h
        h = prev[h]
    i = length + in_frame_arcs
    k = keep
    while True:
        if tl.arc[k] != NO_ARC:
            i -= 1
            arcs[i] = tl.arc[k]
        p = tl.prev[k]
        if p > -2:
            break
        k = in_frame(p)
    return arcs, gids, g, PARTIAL_OK


@njit(inline="always", cache=True)
def _stored_of(tl, k, n):
    """The backpointer token k's in-frame chain starts from, or -2 when the chain loops."""
    for _ in range(n + 1):
        if tl.prev[k] > -2:
            return tl.prev[k]
        k = in_frame(tl.prev[k])
    return -2


@njit(nogil=True, cache=True)
def common_ancestor(tl, n, prev, stored):
    """The last backpointer shared by the paths of all the frame's tokens (their words up
    to it can no longer change), or -1 when they share none but the start (or a path loops:
    an epsilon cycle, which finish reports)."""
    g = _stored_of(tl, 0, n) if n > 0 else -1
    return meeting_point(tl, n, prev, stored, np.full(stored, -1, np.int32), np.full(stored, -1, np.int32), g, -1,
                         0)[0]


@njit(nogil=True, cache=True)
def commit_path(tl, n, prev, arc, stored, depth, meet, since):
    """Where a stream can commit: common_ancestor() found in meeting_point's scratch (depth,
    meet) and from `since`, a backpointer the paths of all the frame's tokens pass (-1: the
    start), and the path's arcs up to it with their backpointers.  Returns (the meeting
    point, or -1 when the paths share none but the start or one loops; arcs; backpointers;
    the one before them: _traced's lead),
    the arcs empty unless the meeting point is past the start."""
    warm(prev, since, stored)
    g = _stored_of(tl, 0, n) if n > 0 else -1
    m = meeting_point(tl, n, prev, stored, depth, meet, g, since, 0)[0]
    if m <= 0:
        return m, np.empty(0, np.int32), np.empty(0, np.int32), NO_TOKEN
    status, arcs, gids, lead = _traced(prev, arc, m, stored)
    if status != OK:
        return -1, arcs, gids, NO_TOKEN
    return m, arcs, gids, lead


@njit(nogil=True, cache=True)
def commit_stream(tl, n, trace, stored, depth, meet, since, kept, base, reads, ilabel, olabel, weight, nextstate,
                  blank):
    """ledger.Ledger.commit_arrays' work in one compiled call (a commit runs on one core while
    the others wait; in NumPy and three calls it took ~250 µs): commit_path (from `since`,
    or from the start where the paths do not pass it), and where that releases at least
    half of the `stored` backpointers, the path up to the meeting point summed (path_reads
    of what the stream keeps of its `kept` frames' log-probs, reads: a KeptReads; then
    path_sums; blank: the blank's input label or -1) and the backpointers before it
    dropped, in place: trace.prev / arc (and reads.reads, where it holds them) from 0 hold
    the live ones, trace.steps from 0 the steps from the meeting point's on, tl.prev (of n
    tokens) points into them.  Returns (k, the
    backpointers kept, path_sums' tuple): k the steps dropped (trace.survivors is the
    caller's to move), -1 when nothing was committed."""
    m, arcs, gids, lead = commit_path(tl, n, trace.prev, trace.arc, stored, depth, meet, since)
    if m < 0 <= since:  # (not expected: every later path passes a partial's meeting point)
        m, arcs, gids, lead = commit_path(tl, n, trace.prev, trace.arc, stored, depth, meet, -1)
    steps = trace.steps
    k = np.searchsorted(steps[:kept], m, side="right") - 1 if m > 0 else -1
    if k < 0 or steps[k] < stored // 2:
        return -1, stored, path_sums(ilabel, olabel, weight, nextstate, blank, arcs[:0], gids[:0],
                                     np.empty(0, np.float32))
    arcs, at, read = path_reads(ilabel, arcs, gids, lead, trace.arc, steps[:kept], base, base + kept, reads, blank)
    sums = path_sums(ilabel, olabel, weight, nextstate, blank, arcs, at, read)
    cut = steps[k]
    live = stored - cut
    prev, arc, own = trace.prev, trace.arc, reads.reads
    for j in range(live):  # (forward: each read is at or past its write)
        p = prev[cut + j] - cut
        prev[j] = p if p >= 0 else NO_TOKEN
        arc[j] = arc[cut + j]
        if cut + j < len(own):
            own[j] = own[cut + j]
    prev[m - cut] = NO_TOKEN  # the meeting point is the new start
    left = min(kept - k + 2, len(steps) - k)
    for j in range(left):
        steps[j] = steps[k + j] - cut
    steps[0] = 0
    for j in range(n):  # the frame's tokens point at backpointers too
        if tl.prev[j] >= 0:
            tl.prev[j] -= cut
    return k, live, sums


@njit(nogil=True, cache=True)
def compact_stream(tl, n, trace, stored, count, reads):
    """Drop the backpointers that no path of the frame's n tokens passes, in place: the
    rest keep their order from trace.prev / arc[0] on (and from reads[0] on, those reads
    holds: KeptReads.reads), trace.steps (its first `count` + 2, or as many as it has)
    start where they did, tl.prev points at them.  What a stream
    does where a commit found its paths not meeting: in a silence after speech whose paths
    disagree on the last words, each frame's tokens that tried a word and were pruned left
    backpointers that only a commit dropped.  Returns the backpointers kept."""
    if stored == 0:
        return 0
    prev, arc, steps = trace.prev, trace.arc, trace.steps
    renumbered = np.full(stored, -1, np.int32)
    for j in range(n):
        g = _stored_of(tl, j, n)
        for _ in range(stored):  # (a longer walk loops: an epsilon cycle, which finish reports)
            if g < 0 or renumbered[g] >= 0:
                break
            renumbered[g] = 0
            g = prev[g]
    live = 0
    for g in range(stored):
        if renumbered[g] >= 0:
            renumbered[g] = live
            live += 1
    for g in range(stored):  # (forward: each backpointer moves down, its predecessor was moved before it)
        h = renumbered[g]
        if h >= 0:
            p = prev[g]
            prev[h] = renumbered[p] if p >= 0 else p
            arc[h] = arc[g]
            if g < len(reads):
                reads[h] = reads[g]
    g, kept = 0, 0
    for t in range(min(count + 2, len(steps))):  # each step starts at the first backpointer kept from its start on
        while g < min(steps[t], stored):
            kept += renumbered[g] >= 0
            g += 1
        steps[t] = kept
    for j in range(n):
        if tl.prev[j] >= 0:
            tl.prev[j] = renumbered[tl.prev[j]]
    return live


@njit(nogil=True, cache=True)
def meeting_point(tl, n, prev, stored, depth, meet, g, since, floor):
    """The last backpointer shared by the paths of all the frame's n tokens, found from the
    chain of backpointer g (one of theirs) back to `since`, a backpointer all their paths
    pass (-1: the start): -1 when they share none but the start, or a walk never reaches
    that chain (a loop, or `since` not shared).  floor: the caller asks no more than
    whether it lies `floor` nodes past the chain's first (since, or the start) or later;
    once that is ruled out the tokens left are not walked, and the chain's first is the
    answer.  depth, meet: scratch of at least `stored` entries, all -1, as it leaves them
    (a stream's partial result, asked after every chunk, then costs the paths it walks,
    not two fresh arrays of every backpointer).  Returns (that backpointer, the witness):
    the witness is where the path of a token that met the chain before `floor` begins (it
    ruled the later nodes out), or -1."""
    chain = 0  # the chain's backpointers, `since` included
    h = g
    while h >= 0 and h != since:
        chain += 1
        if chain > stored:
            return -1, -1
        h = prev[h]
    if h != since:
        return -1, -1
    if since >= 0:
        chain += 1
    if chain == 0:
        return -1, -1
    h = g
    for d in range(chain - 1, -1, -1):  # each node with its depth from the chain's start
        depth[h] = d
        if d > 0:
            h = prev[h]
    bottom = h  # the chain's first node
    # every token walks up to a node whose shallowest meeting depth is known
    lowest = chain - 1
    whole = True
    done = 0  # the tokens whose walks marked `meet`
    witness = -1
    for j in range(n):
        if lowest < floor:
            break
        h = _stored_of(tl, j, n)
        if h < 0:
            whole = False
            break
        first = h
        steps = 0
        while depth[h] < 0 and meet[h] < 0:
            h = prev[h]
            steps += 1
            if h < 0 or steps > stored:
                whole = False
                break
        if not whole:
            break
        m = depth[h] if depth[h] >= 0 else meet[h]
        lowest = min(lowest, m)
        if m < floor and witness < 0:
            witness = first
        h = first
        while depth[h] < 0 and meet[h] < 0:  # remember the meeting depth along the walk
            meet[h] = m
            h = prev[h]
        done = j + 1
    result = -1
    if whole and lowest < floor:
        result = bottom
    elif whole:
        h = g
        for _ in range(chain - 1 - lowest):
            h = prev[h]
        result = h
    # the scratch as it was: what the walks marked lies on their paths from their tokens
    h = g
    for _ in range(chain):
        depth[h] = -1
        h = prev[h]
    for j in range(done):
        h = _stored_of(tl, j, n)
        while h >= 0 and meet[h] >= 0:
            meet[h] = -1
            h = prev[h]
    return result, witness


@njit(nogil=True, cache=True)
def _partial_from_memo(tl, n, final, olabel, prev, arc, stored, since, memo):
    """Whether the memo (constants.PMEMO_*) holds this frame's partial after `since`: the
    best path (final costs left out) passes the backpointer where the last walk's began,
    with no word after it, and a token's path passes the witness and not that backpointer,
    so that it meets the best path where it met the last one, before the first word after
    since.  Then the words are the memo's, none of them stable, and the memo's best path
    begins where this walk's did.  Walks the tokens' paths back to the last walk's frame
    only: in a silence after speech whose paths disagree on the last words, a walk back to
    where they met walked every token's path through the whole silence."""
    at, witness = memo[PMEMO_AT], memo[PMEMO_WITNESS]
    if at < 0 or memo[PMEMO_SINCE] != since:
        return False
    keep = _best_token(tl, n, final, None, False)
    if keep < 0:
        return False
    k = keep
    for step in range(n + 1):  # the frame's own epsilon chain back to a stored token
        if step == n:
            return False
        if tl.arc[k] != NO_ARC and olabel[tl.arc[k]] != 0:
            return False
        p = tl.prev[k]
        if p > -2:
            break
        k = in_frame(p)
    g = h = tl.prev[k]
    for _ in range(stored + 1):
        if h < 0 or h == since or h == witness:
            return False
        if h == at:
            break
        if arc[h] != NO_ARC and olabel[arc[h]] != 0:
            return False
        h = prev[h]
    if h != at:
        return False
    if witness < 0:  # (no word after since: none can be stable)
        memo[PMEMO_AT] = g
        return True
    for j in range(n):  # (backpointers number up along a path: a walk stops at the witness's number)
        h = _stored_of(tl, j, n)
        for _ in range(stored + 1):
            if h <= witness or h == at:
                break
            h = prev[h]
        if h == witness:
            memo[PMEMO_AT] = g
            return True
    return False


@njit(nogil=True, cache=True)
def partial_words(tl, n, final, olabel, prev, arc, stored, steps, base, frames, since, scratch_depth, scratch_meet,
                  memo):
    """A partial result's words after backpointer `since` in one call.  since: the last
    partial's meeting point (the paths of all later tokens pass it, and the caller holds the
    words up to it), or -1: the commit point; the walks stop there, so that a partial costs
    the path since the last one, not since the commit.  Returns (the word ids of the frame's
    best path after since, final costs left out; each word's frame: the step its token was
    stored at - 1, the last step's for the frame's own arcs; how many of the words are
    stable, that is up to the backpointer all the frame's tokens share; that backpointer, or
    -1 when none but `since` is known; partial_path's status).  steps: the trace's first
    backpointer of each step from `base` (the commit point) on; frames: the steps decoded;
    scratch_*: meeting_point's scratch; memo: the stream's constants.PMEMO_*, read and
    written (_partial_from_memo)."""
    if _partial_from_memo(tl, n, final, olabel, prev, arc, stored, since, memo):
        c = memo[PMEMO_WORDS]
        return (memo[PMEMO_HEAD:PMEMO_HEAD + c].astype(np.int32),
                memo[PMEMO_HEAD + PMEMO_MAX_WORDS:PMEMO_HEAD + PMEMO_MAX_WORDS + c].astype(np.int32), 0, -1, PARTIAL_OK)
    memo[PMEMO_AT] = -1
    warm(prev, since, stored)
    arcs, gids, g, status = partial_path(tl, n, final, None, prev, arc, stored, since)
    words = 0
    for a in arcs:
        if olabel[a] != 0:
            words += 1
    word_ids = np.empty(words, np.int32)
    word_frames = np.empty(words, np.int32)
    if status != PARTIAL_OK:
        return word_ids, word_frames, 0, -1, status
    floor = 0  # the depth (since's 0) of the first stored arc with a word: a meeting point before it adds none
    while floor < len(arcs) and gids[floor] >= 0 and olabel[arcs[floor]] == 0:
        floor += 1
    floor += 1
    meet, witness = meeting_point(tl, n, prev, stored, scratch_depth, scratch_meet, g, since, floor) if g >= 0 \
        else (-1, -1)
    if meet < 0 and since >= 0:
        return word_ids, word_frames, 0, -1, PARTIAL_STALE  # (a token's path misses `since`)
    found = meet
    stable = 0
    w = 0
    settled = True  # every word on a stored arc: its frame final
    for i in range(len(arcs)):
        a = arcs[i]
        if olabel[a] != 0:
            h = gids[i]  # (the step it was stored at, as Ledger.steps_of finds it)
            settled = settled and h >= 0
            at = base + np.searchsorted(steps[:frames - base], h, side="right") - 1 if h >= 0 else frames
            word_ids[w] = olabel[a]
            word_frames[w] = max(at - 1, 0)
            w += 1
        if found >= 0 and gids[i] == found:
            stable = w
            found = -2  # (its first arc only)
    if meet >= 0 and (witness >= 0 or words == 0) and words <= PMEMO_MAX_WORDS and settled:
        # (none stable: the next walk may stop where this one's best path began)
        memo[PMEMO_AT], memo[PMEMO_SINCE], memo[PMEMO_WORDS] = g, since, words
        memo[PMEMO_WITNESS] = witness if words > 0 else -1  # (with no word, the best token's own may be it)
        memo[PMEMO_HEAD:PMEMO_HEAD + words] = word_ids
        memo[PMEMO_HEAD + PMEMO_MAX_WORDS:PMEMO_HEAD + PMEMO_MAX_WORDS + words] = word_frames
    return word_ids, word_frames, stable, meet, PARTIAL_OK


@njit(nogil=True, cache=True)
def slot_partial_words(slots, i, numbers, final, olabel, since, scratch_depth, scratch_meet):
    """partial_words of stream slot i (StreamTable's slots and numbers)."""
    s = slots[i]
    v = numbers[i]
    return partial_words(s.tl, v[S_N], final, olabel, s.trace.prev, s.trace.arc, v[S_STORED], s.trace.steps,
                         v[S_BASE], v[S_FRAMES], since, scratch_depth, scratch_meet,
                         v[S_PMEMO:S_PMEMO + PMEMO_FIELDS])


@njit(nogil=True, cache=True)
def walk_partial(slots, i, numbers, final, olabel, scratch_depth, scratch_meet, rows):
    """slot_partial_words of stream slot i after its S_STABLE_AT, into rows[i] (constants.P_*:
    what was found, and the stream's numbers it was found at)."""
    s = slots[i]
    v = numbers[i]
    word_ids, word_frames, stable, meet, status = partial_words(
        s.tl, v[S_N], final, olabel, s.trace.prev, s.trace.arc, v[S_STORED], s.trace.steps, v[S_BASE], v[S_FRAMES],
        v[S_STABLE_AT], scratch_depth, scratch_meet, v[S_PMEMO:S_PMEMO + PMEMO_FIELDS])
    row = rows[i]
    width = (len(row) - P_HEAD) // 2
    c = len(word_ids)
    if c <= width:
        row[P_HEAD:P_HEAD + c] = word_ids
        row[P_HEAD + width:P_HEAD + width + c] = word_frames
    else:
        c = -1
    row[P_WORDS] = c
    row[P_STABLE] = stable
    row[P_MEET] = meet
    row[P_STATUS] = status
    row[P_FRAMES] = v[S_FRAMES]
    row[P_BASE] = v[S_BASE]
    row[P_SINCE] = v[S_STABLE_AT]


@njit(nogil=True, cache=True)
def advance_stream(graph, boosts, context, memo, log_probs, num_frames, settings, ws, n, ns, resume_beam, trace,
                   first, stored, lat):
    """A stream's chunk in one call: frames(), then (when they all went through) the hash
    table emptied for the next stream and what the endpoint rules read.  resume_beam: as
    frames() takes it; lat: the stream's lattice.Links (its steps are frames since the
    start: it commits nothing), or None.  Returns frames()'s tuple + (survivors of the
    frames done, the best token without final costs, the final relative cost, whether the
    search died: its tokens are ghosts, and the frames after their paths count as trailing
    blanks); common.trailing_blanks reads the rest."""
    status, done, n, ns, beam, prev, arc, stored, fallbacks = frames(
        graph, boosts, context, memo, log_probs, num_frames, settings, ws, n, ns, resume_beam, trace, first, stored,
        lat)
    survivors = 0
    for t in range(first, first + done):  # an overflowed frame counts when redone
        survivors += trace.survivors[t]
    keep, relative, dead = -1, INF, False
    if status == OK:
        release(ws, n)
        tl = ws.tl
        keep = _best_token(tl, n, graph.final, context, False)
        relative = final_relative_cost(tl.cost, tl.state, tl.ctx, n, graph.final, context, 0)
        dead = died(n, tl.prev, tl.arc)
    return status, done, n, ns, beam, prev, arc, stored, fallbacks, survivors, keep, relative, dead


class StreamSlot(NamedTuple):
    """A stream's own arrays, which the search of its chunks reads and writes: the tokens
    of its last frame, its backpointers, its word costs (empty: no boost) and what its
    paths after the commit point read (KeptReads' arrays; the frame of logp's first row is
    its number S_ROWS_FROM).  The CPU backend keeps every live stream's slot in one typed
    list, and its numbers in one array (a row of STREAM_FIELDS per slot), so that one call
    searches a thread's share of the streams."""

    tl: Tokens
    trace: Trace
    word_costs: np.ndarray  # float32
    logp: np.ndarray  # float32 (frames kept, V)
    blanks: np.ndarray  # float32
    reads: np.ndarray  # float32


class KeptReads(NamedTuple):
    """What a stream keeps of its log-probs from its commit point (`base`) on, for the reads
    of its paths: the rows of the frames from `rows_from` on (logp[r]: frame rows_from + r),
    and, for the frames before (base <= frame < rows_from), the blank's log-prob (blanks[f -
    base]: a folded run of blanks reads it once a frame) and the log-prob each backpointer's
    arc read there (reads[g]).  In a silence that never commits the search drops the rows
    (drop_rows), which keeps 4 bytes a frame and a backpointer instead of V * 4 a frame.
    Streams with a lattice and the GPU's keep every row (rows_from = base)."""

    logp: np.ndarray  # float32 (frames, V)
    rows_from: int
    blanks: np.ndarray  # float32
    reads: np.ndarray  # float32


class StreamTable(NamedTuple):
    """Every live stream of a CPU backend, as advance_streams reads them: slot i's arrays
    (a typed list of StreamSlot), its context, its own memo and its lattice's links (typed
    lists: of groups.Context, groups.Memo and lattice.Links; where it has none, a
    placeholder), its numbers (numbers[i], fields constants.S_*) and its final relative cost
    (relative[i]); `steps`: the backend's counters of context steps (constants.STEP_*),
    which the searches add to."""

    slots: object
    contexts: object
    memos: object
    links: object
    numbers: np.ndarray  # int64 (slots, STREAM_FIELDS)
    relative: np.ndarray  # float64 (slots,)
    steps: np.ndarray  # int64 (STEP_COUNTERS,)


# Typed lists made, grown, read or written from Python compile their methods (Numba's, not
# cached) in every process: ~0.3 s per method and item type, ~3 s before a process's first
# streams ran.  These do the same in compiled code that Numba caches.

@njit(cache=True)
def typed_list(first):
    """A new typed list holding `first`."""
    items = List()
    items.append(first)
    return items


@njit(cache=True)
def list_put(items, i, item):
    """items[i] = item, or item appended where i == len(items)."""
    if i == len(items):
        items.append(item)
    else:
        items[i] = item


@njit(cache=True)
def list_get(items, i):
    return items[i]


@njit(nogil=True, cache=True)
def append_chunk(slots, i, x, numbers):
    """Stream slots[i] takes chunk x into its log-probs, and room in its trace.steps and
    trace.survivors for x's frames and the last step; arrays too small are replaced by
    larger ones (twice the size at least).  Returns the slot."""
    s = slots[i]
    kept = numbers[i, S_FRAMES] - numbers[i, S_ROWS_FROM]  # (rows; the steps from base on are `first`)
    first = numbers[i, S_FRAMES] - numbers[i, S_BASE]
    T = x.shape[0]
    logp, trace = s.logp, s.trace
    grown = False
    if kept + T > logp.shape[0] or logp.shape[0] == 0:
        logp = np.empty((max(kept + T, 2 * logp.shape[0]), s.logp.shape[1]), np.float32)
        logp[:kept] = s.logp[:kept]
        grown = True
    logp[kept:kept + T] = x
    need = first + T + 2
    if need > min(len(trace.steps), len(trace.survivors)):
        size = max(need, 2 * len(trace.steps))
        steps, survivors = np.zeros(size, np.int64), np.zeros(size, np.int32)
        steps[:len(trace.steps)] = trace.steps
        survivors[:len(trace.survivors)] = trace.survivors
        trace = Trace(trace.prev, trace.arc, steps, survivors, trace.room)
        grown = True
    if grown:
        s = StreamSlot(s.tl, trace, s.word_costs, logp, s.blanks, s.reads)
        slots[i] = s
    return s


@njit(nogil=True, cache=True)
def finish_slot(graph, weight, nextstate, contexts, ws, slots, i, numbers, blank):
    """finish() of stream slots[i] (its numbers numbers[i], its context contexts[i] where
    it has one), room for the last step made first, and its path summed (path_sums: weight
    and nextstate by graph arc id, as the graph's; blank: the blank's input label or -1):
    one compiled call where a finish runs on one core while the others wait.  Returns
    (status, reached_final, the stream's StreamSlot, path arcs, the step each arc's token
    was stored at, the log-probs its emitting arcs read (results.TracedPath's), then
    path_sums' tuple); when it is OK, the slot holds empty arrays instead (the caller may
    reuse the stream's for another).  (The context is read from the backend's typed list,
    the same object every call: passed itself, each stream's Context was a new argument
    the dispatcher typed, ~0.8 ms a finish with rescoring.)"""
    if numbers[i, S_CONTEXT] == NO_CONTEXT:
        status, arcs, at, read, reached_final, _, _, s = _finish_slot(graph, None, ws, slots, i, numbers, None, blank)
    else:
        status, arcs, at, read, reached_final, _, _, s = _finish_slot(graph, contexts[i], ws, slots, i, numbers,
                                                                      None, blank)
    return (status, reached_final, s, arcs, at, read) + path_sums(graph.ilabel, graph.olabel, weight, nextstate,
                                                                  blank, arcs, at, read)


@njit(nogil=True, cache=True)
def finish_slot_lattice(graph, contexts, ws, slots, i, numbers, lat, blank):
    """finish_slot() of a stream that keeps a lattice (lat: its lattice.Links, with room
    for the last step's tokens): finish_lattice()'s tuple, its final states included."""
    if numbers[i, S_CONTEXT] == NO_CONTEXT:
        return _finish_slot(graph, None, ws, slots, i, numbers, lat, blank)
    return _finish_slot(graph, contexts[i], ws, slots, i, numbers, lat, blank)


@njit(nogil=True, cache=True)
def _finish_slot(graph, context, ws, slots, i, numbers, lat, blank):
    s = append_chunk(slots, i, slots[i].logp[:0], numbers)
    v = numbers[i]
    warm(s.trace.prev, 0, v[S_STORED])
    w = Workspace(ws.ht, s.tl, ws.sv, ws.gid, ws.mark, ws.stack, ws.hist, ws.sg)
    final_gids, final_costs = np.empty(0, np.int32), np.empty(0, np.float32)
    if lat is None:
        status, arcs, gids, reached_final, lead = finish(graph, context, w, v[S_N], s.trace, v[S_FRAMES] - v[S_BASE],
                                                   v[S_STORED])
    else:
        status, arcs, gids, reached_final, final_gids, final_costs = finish_lattice(
            graph, context, w, v[S_N], s.trace, v[S_FRAMES] - v[S_BASE], v[S_STORED], lat)
    at, read = np.empty(0, np.int32), np.empty(0, np.float32)
    if status == OK:
        i32 = np.int32
        none = np.empty(0, i32)
        f32 = np.empty(0, np.float32)
        slots[i] = StreamSlot(Tokens(none, none, f32, none, none, none, none),
                              Trace(none, none, np.empty(0, np.int64), none, MAX_BACKPOINTERS), f32,
                              np.empty((0, s.logp.shape[1]), np.float32), f32, f32)
        arcs, at, read = path_reads(graph.ilabel, arcs, gids, lead, s.trace.arc,
                                    s.trace.steps[:v[S_FRAMES] - v[S_BASE] + 2], v[S_BASE], v[S_FRAMES],
                                    KeptReads(s.logp, v[S_ROWS_FROM], s.blanks, s.reads), blank)
    return status, arcs, at, read, reached_final, final_gids, final_costs, s


@njit(nogil=True, cache=True)
def path_sums(ilabel, olabel, weight, nextstate, blank, arcs, steps, logp):
    """What a stretch of path adds to its result (results.PathPart's fields), in one pass
    over its arcs (graph arc ids), the steps their tokens were stored at and the log-probs
    its emitting arcs read: (sum of logp in float64, arcs reading `blank` (-1: none), sum of
    weights in float64, word ids, their frames, last frame read by a non-blank, last frame
    read, the state the last arc leads to (-1: no arcs), the emitting arcs' input labels).
    Every result and every commit of a stream's path reads one: NumPy's ~15 operations on
    small arrays took 30 µs for 500 arcs, this 8 µs with its call."""
    total = 0.0
    for r in range(len(logp)):
        total += np.float64(logp[r])
    blanks, weights, words, emitting = 0, 0.0, 0, 0
    for j in range(len(arcs)):
        a = arcs[j]
        blanks += ilabel[a] == blank
        weights += np.float64(weight[a])
        words += olabel[a] != 0
        emitting += ilabel[a] != 0
    word_ids = np.empty(words, np.int64)
    word_frames = np.empty(words, np.int64)
    tokens = np.empty(emitting, ilabel.dtype)
    last_voiced, last_frame, w, e = -1, -1, 0, 0
    for j in range(len(arcs)):
        a = arcs[j]
        if olabel[a] != 0:
            word_ids[w] = olabel[a]
            word_frames[w] = max(steps[j] - 1, 0)
            w += 1
        if ilabel[a] != 0:
            tokens[e] = ilabel[a]
            e += 1
            last_frame = steps[j] - 1
            if ilabel[a] != blank:
                last_voiced = steps[j] - 1
    end_state = nextstate[arcs[len(arcs) - 1]] if len(arcs) else -1
    return total, blanks, weights, word_ids, word_frames, last_voiced, last_frame, end_state, tokens


@njit(nogil=True, cache=True)
def steps_of(gids, steps, base, current):
    """The step each backpointer of gids was stored at: base + the last t with steps[t] <=
    gids[j] (np.searchsorted's side="right", minus 1), `current` where gids[j] is -1 (a
    token of the frame, not stored yet).  A path's backpointers ascend, so one walk along
    steps finds them all (a binary search each took ~1/3 of a stream's finish)."""
    at = np.empty(len(gids), np.int32)
    t = 0
    for j in range(len(gids)):
        g = gids[j]
        if g < 0:
            at[j] = current
            continue
        if g < steps[t]:  # (not in a path's order: searched)
            t = max(np.searchsorted(steps, g, side="right") - 1, 0)
        while t + 1 < len(steps) and steps[t + 1] <= g:
            t += 1
        at[j] = base + t - (g < steps[0])
    return at


@njit(nogil=True, cache=True)
def unfold_runs(ilabel, arcs, at, lead_arc, lead_step):
    """A path's arcs and the steps their tokens were stored at (at), with the runs of blanks
    that _store folded put back: where an arc's token was stored more steps after its
    predecessor's than it read frames (one where it emits, else none), the predecessor's
    arc (a blank self-loop) read each frame between, one a step.  lead_arc, lead_step: the
    arc and step of the backpointer before arcs[0] (NO_ARC: the start, which has none).
    Returns (arcs, at, src: the index in arcs of each, -1 for a read of a run).  A path
    with no runs comes back as it was (the GPU's never folds)."""
    extra = 0
    pa, ps = lead_arc, lead_step
    for j in range(len(arcs)):
        if pa != NO_ARC:
            extra += max(at[j] - ps - (ilabel[arcs[j]] != 0), 0)
        pa, ps = arcs[j], at[j]
    if extra == 0:
        return arcs, at, np.arange(len(arcs)).astype(np.int32)
    out_arcs = np.empty(len(arcs) + extra, arcs.dtype)
    out_at = np.empty(len(arcs) + extra, at.dtype)
    src = np.full(len(arcs) + extra, -1, np.int32)
    e = 0
    pa, ps = lead_arc, lead_step
    for j in range(len(arcs)):
        if pa != NO_ARC:
            for r in range(at[j] - ps - (ilabel[arcs[j]] != 0)):
                out_arcs[e] = pa
                out_at[e] = ps + 1 + r
                e += 1
        out_arcs[e] = arcs[j]
        out_at[e] = at[j]
        src[e] = j
        e += 1
        pa, ps = arcs[j], at[j]
    return out_arcs, out_at, src


@njit(nogil=True, cache=True)
def unfolded_path(ilabel, arcs, gids, lead, arc, steps, base, current):
    """A traced path (arcs, their backpointers gids, -1 for a token of the frame not stored
    yet: step `current`; lead: the backpointer before gids[0], or NO_TOKEN; arc: the
    trace's arcs, steps: its steps from base on) with its folded runs put back
    (unfold_runs): (arcs, the step each arc's token was stored at, the index in gids of
    each, -1 for a read of a run)."""
    at = steps_of(gids, steps, base, current)
    if len(arcs) == 0:
        return arcs, at, np.empty(0, np.int32)
    if lead < 0:
        return unfold_runs(ilabel, arcs, at, NO_ARC, 0)
    lead_step = steps_of(np.full(1, lead, np.int32), steps, base, current)[0]
    return unfold_runs(ilabel, arcs, at, arc[lead], lead_step)


@njit(nogil=True, cache=True)
def path_reads(ilabel, arcs, gids, lead, arc, steps, base, current, kept, blank):
    """Of a stream's path after its commit point (arcs, their backpointers gids, the one
    before them `lead`; arc: the trace's arcs; steps: its steps from base on):
    unfolded_path's arcs and steps
    (`current` where gids is -1: a token of the frame not stored yet), and the log-prob each
    emitting arc read (an arc stored at step t read frame t - 1, column ilabel - 1, as
    KeptReads `kept` keeps it; blank: the blank's input label, -1 where there is none):
    results.TracedPath's arcs, steps and logp, on both backends, and a commit's."""
    arcs, at, src = unfolded_path(ilabel, arcs, gids, lead, arc, steps, base, current)
    emitting = 0
    for j in range(len(arcs)):
        emitting += ilabel[arcs[j]] != 0
    read = np.empty(emitting, np.float32)
    e = 0
    for j in range(len(arcs)):
        label = ilabel[arcs[j]]
        if label == 0:
            continue
        frame = at[j] - 1
        if frame >= kept.rows_from:
            read[e] = kept.logp[frame - kept.rows_from, label - 1]
        elif label == blank:  # (a run's reads have no backpointer of their own)
            read[e] = kept.blanks[frame - base]
        else:
            read[e] = kept.reads[gids[src[j]]]
        e += 1
    return arcs, at, read


@njit(nogil=True, cache=True)
def drop_rows(trace, kept, base, frames, stored, ilabel, blank):
    """A stream's KeptReads without the rows before its last frame's (the frame's tokens,
    not stored yet, read that one), where at least ROWS_AT of them cost more than what
    replaces them: the reads of the backpointers whose arcs read those frames, and the
    blank's log-prob of each frame (frames: decoded; trace.steps from base on; `stored`
    backpointers; blank: the blank's input label or -1).  In a silence whose paths never
    meet nothing is committed, and the rows (V * 4 bytes a frame) were most of what a
    stream held; in speech the commits drop them, and with a small V (or many backpointers
    a frame) rows are the cheaper.  Each backpointer's read is found once.  Returns the new
    KeptReads (its arrays grown where too small, else the same, written in place), or
    `kept` where nothing is dropped."""
    start, logp, rows_from = frames - 1, kept.logp, kept.rows_from
    if start - rows_from < ROWS_AT:
        return kept
    steps = trace.steps[:frames - base]
    first = min(steps[rows_from + 1 - base], stored)  # the first backpointer reading a row (stored after rows_from)
    if (start - rows_from) * logp.shape[1] < stored - first:
        return kept
    reads = kept.reads
    if len(reads) < stored:
        reads = np.zeros(max(stored, 2 * len(reads)), np.float32)
        reads[:len(kept.reads)] = kept.reads
    at = steps_of(np.arange(first, stored).astype(np.int32), steps, base, frames)
    for g in range(first, stored):
        label, frame = ilabel[trace.arc[g]], at[g - first] - 1
        if label != 0:
            reads[g] = logp[frame - rows_from, label - 1]
    blanks = kept.blanks
    if len(blanks) < start - base:
        blanks = np.zeros(max(start - base, 2 * len(blanks)), np.float32)
        blanks[:len(kept.blanks)] = kept.blanks
    if blank > 0:
        for f in range(rows_from, start):
            blanks[f - base] = logp[f - rows_from, blank - 1]
    logp[:frames - start] = logp[start - rows_from:frames - rows_from]
    return KeptReads(logp, start, blanks, reads)


@njit(nogil=True, cache=True)
def append_chunks(slots, which, chunks, offsets, numbers):
    """append_chunk for several streams: stream k is slots[which[k]], its chunk
    chunks[offsets[k]:offsets[k + 1]]."""
    for k in range(len(which)):
        append_chunk(slots, which[k], chunks[offsets[k]:offsets[k + 1]], numbers)


@intrinsic
def _cycles(typingctx):
    """The processor's cycle counter (llvm.readcyclecounter): how long a thread of a parallel
    region worked and how long the region took, for a few cycles each."""
    def codegen(context, builder, signature, args):
        read = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []),
                                              "llvm.readcyclecounter")
        return builder.call(read, [])
    return types.int64(), codegen


@intrinsic
def _fetch_add(typingctx, counter, i, value):
    """counter[i] += value as one atomic step; returns the value before (threads that share
    a counter each take a different one)."""
    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer2(context, builder, data=ary.data, shape=cgutils.unpack_tuple(builder, ary.shape),
                                        strides=cgutils.unpack_tuple(builder, ary.strides), layout=aryty.layout,
                                        inds=[context.cast(builder, args[1], signature.args[1], types.intp)],
                                        wraparound=False)
        return builder.atomic_rmw("add", ptr, context.cast(builder, args[2], signature.args[2], aryty.dtype),
                                  "seq_cst")
    return counter.dtype(counter, i, value), codegen


@njit(nogil=True, cache=True)
def _slot_chunk(graph, settings, contexts, i, memo, v, s, x, w, lat):
    """advance_stream of chunk x of stream slot i (v: its numbers; s: its StreamSlot; w: the
    workspace on its token list; lat: its links or None); contexts: the StreamTable's where
    the stream has one (its steps in `memo`), else None."""
    no_beam = np.float32(-1.0)
    first = v[S_FRAMES] - v[S_BASE]
    if contexts is None:
        if len(s.word_costs):
            return advance_stream(graph, s.word_costs, None, None, x, len(x), settings, w, v[S_N], v[S_NS], no_beam,
                                  s.trace, first, v[S_STORED], lat)
        return advance_stream(graph, None, None, None, x, len(x), settings, w, v[S_N], v[S_NS], no_beam, s.trace,
                              first, v[S_STORED], lat)
    if len(s.word_costs):
        return advance_stream(graph, s.word_costs, contexts[i], memo, x, len(x), settings, w, v[S_N], v[S_NS],
                              no_beam, s.trace, first, v[S_STORED], lat)
    return advance_stream(graph, None, contexts[i], memo, x, len(x), settings, w, v[S_N], v[S_NS], no_beam, s.trace,
                          first, v[S_STORED], lat)


@njit(nogil=True, cache=True)
def advance_streams(graph, settings, ws, memo, table, which, chunks, offsets, order, flags, counts, depth, meet,
                    rows):
    """advance_stream for several streams in one call: stream k is slot i = which[k] of the
    StreamTable (its numbers read and updated), its chunk chunks[offsets[k]:offsets[k + 1]]
    (appended to its log-probs first).  A stream with a context (numbers' S_CONTEXT)
    searches with table.contexts[i] and a memo of its steps: `memo` (this call's, for the
    rescoring LM's steps, which all its streams share) or its own, table.memos[i]
    (phrases).  The call takes the streams in `order`, the next one by an atomic increment
    of counts[0], until none is left: threads calling it at once on the same arguments
    (each with its own workspace and memo) share the streams as they come free, so none
    waits while another has several left.  counts[1] sums the streams' survivors of pruning
    over their frames, counts[2] counts the streams flagged, and table.steps adds up what the
    memos' counters (constants.STEP_*) gained (in place: a rescored stream's call is ~200 µs,
    and adding them up in Python after it took ~9 µs of cold NumPy calls).

    Writes the final relative cost of stream slot i at table.relative[i], and flags[k]: the
    bits COMMIT_DUE (its backpointers reached S_NEXT_COMMIT) and DIED (every token died:
    common.died), or OVERFLOWED (a frame overflowed: its survivors are in ws.sv).  Returns
    (k of the stream that overflowed, -1 if none; the chunk's frames done before it; the
    frame's adaptive beam): the call stops there for the caller to go on from its survivors
    in a larger workspace.

    A stream whose numbers ask for its partial (S_PARTIAL: one was asked after its last
    chunk) gets it walked here, into rows (walk_partial, with the scratch depth and meet; not
    where its backpointers outgrew them, nor where it is due a commit or died): its memory
    is warm now, a call later it is not."""
    slots, numbers, relative = table.slots, table.numbers, table.relative
    before = np.empty(STEP_COUNTERS, np.int64)
    while True:
        taken = _fetch_add(counts, 0, 1)
        if taken >= len(order):
            return -1, 0, np.float32(0.0)
        k = order[taken]
        i = which[k]
        x = chunks[offsets[k]:offsets[k + 1]]
        s = append_chunk(slots, i, x, numbers)
        v = numbers[i]
        w = Workspace(ws.ht, s.tl, ws.sv, ws.gid, ws.mark, ws.stack, ws.hist, ws.sg)
        first = v[S_FRAMES] - v[S_BASE]
        m = table.memos[i] if v[S_CONTEXT] == OWN_MEMO else memo  # (read with a context only)
        if v[S_CONTEXT] != NO_CONTEXT:
            before[:] = m.counts
        if v[S_LATTICE]:  # room for what storing the chunk's frames can add (links grow on overflow)
            lat, grown = room_for_chunk(table.links[i], v[S_STORED], len(s.tl.cost), first, len(x))
            if grown:
                table.links[i] = lat
            if v[S_CONTEXT] == NO_CONTEXT:
                r = _slot_chunk(graph, settings, None, i, m, v, s, x, w, lat)
            else:
                r = _slot_chunk(graph, settings, table.contexts, i, m, v, s, x, w, lat)
        elif v[S_CONTEXT] == NO_CONTEXT:
            r = _slot_chunk(graph, settings, None, i, m, v, s, x, w, None)
        else:
            r = _slot_chunk(graph, settings, table.contexts, i, m, v, s, x, w, None)
        if v[S_CONTEXT] != NO_CONTEXT:
            for c in range(STEP_COUNTERS):
                _fetch_add(table.steps, c, m.counts[c] - before[c])
        status, done, n, ns, beam, prev, arc, stored, fallbacks, survivors, keep, rel, dead = r
        if len(prev) != len(s.trace.prev):  # the backpointers grew
            slots[i] = StreamSlot(s.tl, Trace(prev, arc, s.trace.steps, s.trace.survivors, s.trace.room), s.word_costs,
                                  s.logp, s.blanks, s.reads)
        v[S_N] = n
        v[S_NS] = ns
        v[S_STORED] = stored
        v[S_FRAMES] += done
        v[S_FALLBACKS] += fallbacks
        v[S_SURVIVORS] += survivors
        _fetch_add(counts, 1, survivors)
        if status != OK:
            flags[k] = (OVERFLOWED | (LINKS_FULL if status == LINK_OVERFLOW else 0)
                        | (BACKPOINTERS_FULL if status == MEMORY_OUT else 0))
            return k, done, beam
        # the endpoint rules' readings; blanks back to the commit point: the prefix's last speech decides
        trailing, voiced = trailing_blanks(keep, s.tl.prev, s.tl.arc, prev, arc, s.trace.steps, v[S_FRAMES] - v[S_BASE],
                                             graph.ilabel, settings.blank_ilabel, v[S_TRAIL:S_TRAIL + TRAIL_FIELDS])
        v[S_TRAILING] = trailing if voiced else v[S_FRAMES] - 1 - v[S_LAST_VOICED]
        relative[i] = rel
        if not v[S_LATTICE] and not dead:  # (a lattice's links name every backpointer's frame)
            s = slots[i]
            kept = drop_rows(s.trace, KeptReads(s.logp, v[S_ROWS_FROM], s.blanks, s.reads), v[S_BASE], v[S_FRAMES],
                             stored, graph.ilabel, settings.blank_ilabel)
            if kept.rows_from != v[S_ROWS_FROM]:
                v[S_ROWS_FROM] = kept.rows_from
                slots[i] = StreamSlot(s.tl, s.trace, s.word_costs, kept.logp, kept.blanks, kept.reads)
        flags[k] = (COMMIT_DUE if stored >= v[S_NEXT_COMMIT] else 0) | (DIED if dead else 0)
        if flags[k]:
            _fetch_add(counts, 2, 1)
        elif v[S_PARTIAL] and stored <= len(depth):
            v[S_PARTIAL] = 0
            walk_partial(slots, i, numbers, graph.final, graph.olabel, depth, meet, rows)


@njit(nogil=True, cache=True)
def add_steps(steps, gained):
    """steps += gained, each counter in one atomic step (as the searches add to them)."""
    for c in range(len(gained)):
        _fetch_add(steps, c, gained[c])


@njit(nogil=True, cache=True)
def work_order(numbers, which, offsets, order):
    """order: the streams of an advance_streams call (as `which` and `offsets` give them) by
    their work, dearest first (tokens times frames, roughly; ties in the given order): the
    last streams taken are the cheapest, so the threads finish together."""
    work = np.empty(len(which), np.int64)
    for k in range(len(which)):
        work[k] = -(numbers[which[k], S_N] + 64) * (offsets[k + 1] - offsets[k])
    order[:] = np.argsort(work, kind="mergesort")


@njit(parallel=True, nogil=True, cache=True)
def advance_streams_parallel(graph, settings, spaces, lm_memos, table, which, chunks, offsets, order, flags, counts,
                             stops, beams, scratch, rows):
    """advance_streams on len(spaces) threads of Numba's pool at once, thread t with workspace
    spaces[t] and memo lm_memos[t]: one parallel region per call, where a pool of Python
    threads costs tens of µs to hand over (a stream's chunk searches in tens of µs).  The
    first call of a group (counts[0] 0) puts its streams in work_order.  Thread t's return
    is in stops[t] (the stream that overflowed or -1, the frames done before it, the cycles
    it worked) and beams[t]; its partial walks' scratch is scratch[:, t] (depth, meet).  Returns
    (whether any thread stopped at an overflow, the share of the region's time its threads
    sat idle: cpu_backend.PoolGuard judges it)."""
    start = _cycles()
    threads = len(spaces)
    if counts[0] == 0:
        work_order(table.numbers, which, offsets, order)
    for u in prange(threads):
        t = np.int64(u)  # prange counts in uint64
        began = _cycles()
        k, done, beam = advance_streams(graph, settings, spaces[t], lm_memos[t], table, which, chunks, offsets, order,
                                        flags, counts, scratch[0, t], scratch[1, t], rows)
        stops[t, 0] = k
        stops[t, 1] = done
        stops[t, 2] = _cycles() - began
        beams[t] = beam
    return stops[:, 0].max() >= 0, 1.0 - stops[:, 2].sum() / max(threads * (_cycles() - start), 1)


@njit(parallel=True, nogil=True, cache=True)
def slots_partial_words(slots, which, numbers, final, olabel, scratch, rows, taken):
    """walk_partial of stream slots which[k] on the threads of Numba's pool at once, task t
    of scratch.shape[1] with meeting_point's scratch scratch[0, t] and scratch[1, t] (rows
    of -1 at least as long as every stream's backpointers; left so), each taking the next
    stream by an atomic increment of taken[0]: a partial costs ~10-20 µs, most of it walks
    through memory the stream last touched a call ago."""
    for u in prange(scratch.shape[1]):
        t = np.int64(u)  # prange counts in uint64
        while True:
            k = _fetch_add(taken, 0, 1)
            if k >= len(which):
                break
            walk_partial(slots, which[k], numbers, final, olabel, scratch[0, t], scratch[1, t], rows)


@njit(nogil=True, cache=True)
def epsilon_cycle_state(ne_indptr, nextstate, num_states):
    """A state on a cycle of non-emitting arcs, or -1 if they form none (a depth-first
    search, without recursion: a chain of millions of epsilon arcs is no deeper a stack)."""
    NEW, OPEN, DONE = 0, 1, 2
    color = np.zeros(num_states, np.int8)
    states = np.empty(num_states, np.int32)
    next_arc = np.empty(num_states, np.int64)
    for root in range(num_states):
        if color[root] != NEW or ne_indptr[root] == ne_indptr[root + 1]:
            continue
        top = 0
        states[0] = root
        next_arc[0] = ne_indptr[root]
        color[root] = OPEN
        while top >= 0:
            s = states[top]
            a = next_arc[top]
            if a == ne_indptr[s + 1]:
                color[s] = DONE
                top -= 1
                continue
            next_arc[top] = a + 1
            d = nextstate[a]
            if color[d] == OPEN:
                return d
            if color[d] == NEW:
                color[d] = OPEN
                top += 1
                states[top] = d
                next_arc[top] = ne_indptr[d]
    return -1
