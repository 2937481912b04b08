"""Lexicon-free CTC beam search on the CPU (FlexCTC / NeMo's beam_batch, Flashlight's
lexicon-free decoder): one utterance per call, Numba ``njit(nogil=True)``.

A hypothesis is (collapsed token prefix, the label of its last frame): the prefix is
known by a 64-bit rolling hash and, for the output, by backpointers; the last label
(blank or the prefix's last token) decides whether a token is a repeat.  Each frame
scores beam x V candidates: a blank or a repeat keeps the prefix; any other token extends
it and pays lm_weight x the token LM's cost, minus the insertion bonus, plus the phrase
boost.  Candidates equal in (prefix, last label) are recombined by their minimum cost
(Viterbi: the LM and phrase states are functions of the prefix, so recombination is exact
up to a hash collision).  Those more than `threshold` above the frame's best are dropped
and the best `beam_size` kept, ties broken by the order candidates were made in.  At the
end each hypothesis pays lm_weight x the LM's end-of-sentence cost and the refund of its
open phrase match.

Costs are negated natural logs (lower is better), as everywhere in wfst.  The token LM
and the phrase automaton are groups.Automata walked with common.automaton_step; the LM's
costs for every token of a state (an NGPU-LM style dense row) are kept in a small cache
of rows keyed by LM state, so that a state's backoff chain is resolved once per frame
at most, not once per candidate; the phrase automaton's steps likewise.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from .common import INF, automaton_step, hash_slot, pack, packed_cost, payload_next, payload_weight
from .constants import EMPTY_KEY


class BeamSettings(NamedTuple):
    beam_size: np.int64
    threshold: np.float32  # drop candidates more than this above the frame's best
    blank: np.int64  # the blank's column
    lm_weight: np.float32
    insertion: np.float32  # bonus (cost subtracted) per token emitted


class TokenLmArrays(NamedTuple):
    """The token LM as the search reads it."""

    automata: object  # groups.Automata, one row; final = cost of </s>
    label: np.ndarray  # int32 (V,): LM word id of each column (-1: the blank)
    start: np.int32  # the state of <s>


class BeamWork(NamedTuple):
    """Scratch of one search, reused from utterance to utterance (new_beam_work)."""

    cand_key: np.ndarray  # int64 (H,) candidate table: (prefix hash, last label) -> slot
    cand_hash: np.ndarray  # uint64 (H,)
    cand_packed: np.ndarray  # uint64 (H,): pack(cost, order made); order = hypothesis x V + column
    cand_from: np.ndarray  # int32 (H,): parent hypothesis
    cand_label: np.ndarray  # int32 (H,): the label read (+ V when it extends the prefix)
    cand_pos: np.ndarray  # int32 (H,): the slot's place in the heap (-1: not there)
    cand_slots: np.ndarray  # int32 (H,): slots in use
    heap_key: np.ndarray  # uint64 (K,): max-heap of pack(cost, order) of the best K distinct candidates
    heap_slot: np.ndarray  # int32 (K,)
    columns: np.ndarray  # int64 (V,): the frame's columns by acoustic cost, as far as the search asked
    column_heap: np.ndarray  # int64 (V,): min-heap by acoustic cost of the columns not in `columns` yet
    word_cost: np.ndarray  # float32 (W,): lm_row's scratch by LM word id
    word_next: np.ndarray  # int32 (W,)
    word_seen: np.ndarray  # int32 (W,): the row being made that set the word (its state + 1)
    row_state: np.ndarray  # int32 (R,): LM state of each cached row (-1: none)
    row_cost: np.ndarray  # float32 (R, V)
    row_next: np.ndarray  # int32 (R, V)
    row_min: np.ndarray  # float32 (R,): the least cost of a token in the row
    pb_state: np.ndarray  # int32 (R,): the same cache for the phrase automaton's states (emptied each search)
    pb_cost: np.ndarray  # float32 (R, V)
    pb_next: np.ndarray  # int32 (R, V)
    pb_min: np.ndarray  # float32 (R,)


def table_size(beam_size: int, num_columns: int) -> int:
    """Slots of a frame's candidate table: a power of two at least twice the candidates."""
    return 1 << max(2 * beam_size * num_columns - 1, 1).bit_length()


def new_beam_work(beam_size: int, num_columns: int, lm_words: int = 1, rows: int = 256) -> BeamWork:
    H = table_size(beam_size, num_columns)
    return BeamWork(np.full(H, EMPTY_KEY, np.int64), np.zeros(H, np.uint64), np.zeros(H, np.uint64),
                    np.zeros(H, np.int32), np.zeros(H, np.int32), np.full(H, -1, np.int32), np.zeros(H, np.int32),
                    np.zeros(beam_size, np.uint64), np.zeros(beam_size, np.int32), np.zeros(num_columns, np.int64),
                    np.zeros(num_columns, np.int64),
                    np.zeros(lm_words, np.float32), np.zeros(lm_words, np.int32), np.zeros(lm_words, np.int32),
                    np.full(rows, -1, np.int32), np.zeros((rows, num_columns), np.float32),
                    np.zeros((rows, num_columns), np.int32), np.zeros(rows, np.float32), np.full(rows, -1, np.int32),
                    np.zeros((rows, num_columns), np.float32), np.zeros((rows, num_columns), np.int32),
                    np.zeros(rows, np.float32))


_PRIME = np.uint64(1099511628211)


@njit(inline="always")
def _extend(h, label):
    """The rolling hash of a prefix extended by `label` (FNV-style, odd multiplier)."""
    return (h ^ np.uint64(label + 1)) * _PRIME + np.uint64(0x9E3779B97F4A7C15)


_LABEL_MIX = np.uint64(0xD6E8FEB86659FD93)  # odd: label -> label * it is one-to-one on the low 63 bits


@njit(inline="always")
def _key(h, label):
    """One int64 key of (prefix hash, last label); never EMPTY_KEY.  For one prefix every
    label gives its own key, whatever the vocabulary (a shift of the label lost its high
    bits, and a token 32,768 columns from the blank took the blank's key)."""
    k = np.int64((h ^ (np.uint64(label + 1) * _LABEL_MIX)) & np.uint64(0x7FFFFFFFFFFFFFFF))
    return k if k != EMPTY_KEY else np.int64(0)


@njit(nogil=True, cache=True)
def lm_row(lm, state, work):
    """The cached row of the LM's costs and next states for every column from `state`
    (NGPU-LM's dense advance): the backoff chain is walked once from `state` to the root,
    each word taking its cost at the deepest state that has it (exact backoff semantics)."""
    R = work.row_state.shape[0]
    r = np.int64(hash_slot(np.int64(state), R - 1))
    if work.row_state[r] != state:
        a = lm.automata
        tag = state + 1  # a state's row sets the same costs each time it is made: a stale tag is harmless
        acc = np.float32(0.0)
        q = state
        while q >= 0:
            for pos in range(a.offsets[0, q], a.offsets[0, q + 1]):
                w = a.labels[0, pos]
                if work.word_seen[w] != tag:
                    work.word_seen[w] = tag
                    work.word_cost[w] = np.float32(acc + payload_weight(a.payload[0, pos]))
                    work.word_next[w] = payload_next(a.payload[0, pos])
            acc = np.float32(acc + a.bo_weight[0, q])
            q = a.backoff[0, q]
        least = INF
        for c in range(lm.label.shape[0]):
            w = lm.label[c]
            if w < 0 or work.word_seen[w] != tag:  # the blank (or a word of no state: cannot be read)
                work.row_cost[r, c] = 0.0 if w < 0 else INF
                work.row_next[r, c] = state
            else:
                work.row_cost[r, c] = work.word_cost[w]
                work.row_next[r, c] = work.word_next[w]
                least = min(least, work.word_cost[w])
        work.row_min[r] = least
        work.row_state[r] = state
    return r


@njit(inline="always")
def _sift_column(ac, heap, i, size):
    """Move heap[i] down the min-heap of columns (by acoustic cost ac) to its place."""
    v = heap[i]
    key = ac[v]
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and ac[heap[c + 1]] < ac[heap[c]]:
            c += 1
        if ac[heap[c]] >= key:
            break
        heap[i] = heap[c]
        i = c
    heap[i] = v


@njit(inline="always")
def _next_column(ac, columns, heap, size):
    """Pop the cheapest column left into columns[V - size]; returns the heap's new size."""
    columns[ac.shape[0] - size] = heap[0]
    size -= 1
    if size > 0:
        heap[0] = heap[size]
        _sift_column(ac, heap, 0, size)
    return size


@njit(nogil=True, cache=True)
def phrase_row(pb, pb_row, state, blank, work):
    """The cached row of the phrase automaton's (cost, next state) for every column from
    `state` (failure arcs resolved once per state, not once per candidate)."""
    R = work.pb_state.shape[0]
    r = np.int64(hash_slot(np.int64(state), R - 1))
    if work.pb_state[r] != state:
        least = INF
        for c in range(work.pb_cost.shape[1]):
            cost, s = automaton_step(pb, pb_row, state, c)
            work.pb_cost[r, c] = cost
            work.pb_next[r, c] = s
            if c != blank:
                least = min(least, cost)
        work.pb_min[r] = least
        work.pb_state[r] = state
    return r


@njit(inline="always")
def _insert(work, n, key, h, packed, parent, label):
    """Put a candidate (packed: pack(cost, order made)) in the table, keeping the smaller
    packed value of equal keys, so that the result does not depend on the order candidates
    come in.  Returns (slots used, its slot, whether the slot's value is new or lower)."""
    mask = work.cand_key.shape[0] - 1
    slot = hash_slot(key, mask)
    while True:
        k = work.cand_key[slot]
        if k == EMPTY_KEY:
            work.cand_key[slot] = key
            work.cand_hash[slot] = h
            work.cand_packed[slot] = packed
            work.cand_from[slot] = parent
            work.cand_label[slot] = label
            work.cand_slots[n] = slot
            return n + 1, slot, True
        if k == key:
            if packed < work.cand_packed[slot]:
                work.cand_packed[slot] = packed
                work.cand_from[slot] = parent
                work.cand_label[slot] = label
                return n, slot, True
            return n, slot, False
        slot = (slot + 1) & mask


@njit(inline="always")
def _heap_place(work, i, key, slot):
    work.heap_key[i] = key
    work.heap_slot[i] = slot
    work.cand_pos[slot] = i


@njit(nogil=True, cache=True)
def _sift_down(work, i, size):
    """Move entry i of the max-heap down to its place."""
    key, slot = work.heap_key[i], work.heap_slot[i]
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and work.heap_key[c + 1] > work.heap_key[c]:
            c += 1
        if work.heap_key[c] <= key:
            break
        _heap_place(work, i, work.heap_key[c], work.heap_slot[c])
        i = c
    _heap_place(work, i, key, slot)


@njit(nogil=True, cache=True)
def _heap_offer(work, size, key, slot):
    """Keep the K smallest keys of distinct slots: `slot`'s key is new or lower.  Returns the size."""
    K = work.heap_key.shape[0]
    i = work.cand_pos[slot]
    if i >= 0:  # lowered in place: down the max-heap
        work.heap_key[i] = key
        _sift_down(work, i, size)
        return size
    if size < K:  # up from the end
        i = size
        while i > 0 and work.heap_key[(i - 1) // 2] < key:
            p = (i - 1) // 2
            _heap_place(work, i, work.heap_key[p], work.heap_slot[p])
            i = p
        _heap_place(work, i, key, slot)
        return size + 1
    if key < work.heap_key[0]:  # replaces the worst
        work.cand_pos[work.heap_slot[0]] = -1
        _heap_place(work, 0, key, slot)
        _sift_down(work, 0, size)
    return size


class Beam(NamedTuple):
    """The hypotheses of a frame (K = beam_size rows; the first `count` live)."""

    cost: np.ndarray  # float32 (K,)
    last: np.ndarray  # int32 (K,): the column of the last frame's label (blank at the start)
    hash: np.ndarray  # uint64 (K,)
    lm: np.ndarray  # int32 (K,): LM state
    pb: np.ndarray  # int32 (K,): phrase automaton state
    acoustic: np.ndarray  # float32 (K,) cost parts: acoustic
    lm_cost: np.ndarray  # float32 (K,): LM costs (unweighted)
    boost: np.ndarray  # float32 (K,): phrase boost costs


@njit(cache=True)
def new_beam(K):
    return Beam(np.zeros(K, np.float32), np.zeros(K, np.int32), np.zeros(K, np.uint64), np.zeros(K, np.int32),
                np.zeros(K, np.int32), np.zeros(K, np.float32), np.zeros(K, np.float32), np.zeros(K, np.float32))


@njit(nogil=True, cache=True)
def search(log_probs, num_frames, settings, lm, pb, pb_row, work, parents, labels):
    """CTC beam search of one utterance: log_probs (T, V), its first num_frames frames.

    lm: TokenLmArrays or None; pb: groups.Automata of phrase boosting (row pb_row) or None;
    work: BeamWork; parents, labels: int32 (num_frames, K) backpointers, filled here
    (labels[t, j]: the token hypothesis j emitted at frame t, or -2 - the column it read
    there when it emitted none: a blank or a repeat).

    Returns the last frame's Beam (its costs with the end-of-sentence LM cost and the
    phrase refund added) and the order of its live hypotheses, best first (hypothesis j
    of the beam is traced from column j of the backpointers)."""
    K = settings.beam_size
    V = log_probs.shape[1]
    blank = settings.blank
    cur, nxt = new_beam(K), new_beam(K)
    count = 1
    cur.last[0] = blank
    cur.hash[0] = np.uint64(0)
    if lm is not None:
        cur.lm[0] = lm.start
    ac = np.empty(V, np.float32)
    work.pb_state[:] = -1  # (another search's phrases)
    for t in range(num_frames):
        for v in range(V):
            ac[v] = -log_probs[t, v]
        # the columns in acoustic order, sorted only as far as some hypothesis reads them (the
        # early exit below leaves most of them unread): a heap, popped on demand
        for v in range(V):
            work.column_heap[v] = v
        for i in range(V // 2 - 1, -1, -1):
            _sift_column(ac, work.column_heap, i, V)
        left = V
        n = 0
        size = 0
        best = INF
        # first the candidates that keep their prefix (the blank, a repeat): no LM step, and in a
        # CTC frame usually the best, so that the beam's bound is tight before extensions are read
        for k in range(count):
            for second in range(2):
                v = np.int64(cur.last[k]) if second else blank
                c = np.float32(cur.cost[k] + ac[v])
                limit = np.float32(best + settings.threshold)
                if size == K:
                    limit = min(limit, packed_cost(work.heap_key[0]))
                if c <= limit and c < INF:  # (a path of probability 0 is none, whatever the beam's best)
                    best = min(best, c)
                    packed = pack(c, k * V + v)
                    n, slot, lower = _insert(work, n, _key(cur.hash[k], v), cur.hash[k], packed, k, v)
                    if lower:
                        size = _heap_offer(work, size, packed, slot)
                if v == cur.last[k]:  # (the blank was the last label)
                    break
        # then the extensions, hypothesis by hypothesis
        for k in range(count):
            base = cur.cost[k]
            # what an extension of k costs beyond its acoustic cost, at least: the bonus and the
            # cheapest LM and phrase steps out of k's states
            extension = -settings.insertion
            r = 0
            if lm is not None:
                r = lm_row(lm, cur.lm[k], work)
                extension = np.float32(extension + settings.lm_weight * work.row_min[r])
            rp = 0
            if pb is not None:
                rp = phrase_row(pb, pb_row, cur.pb[k], blank, work)
                extension = np.float32(extension + work.pb_min[rp])
            for i in range(V):
                if i == V - left:
                    left = _next_column(ac, work.columns, work.column_heap, left)
                v = work.columns[i]
                limit = np.float32(best + settings.threshold)
                if size == K:
                    limit = min(limit, packed_cost(work.heap_key[0]))
                # the columns come by acoustic cost: once even the cheapest extension cannot enter the
                # beam, the rest cannot either (with slack for the float32 rounding of the sums)
                if np.float32(base + ac[v]) + extension > limit + np.float32(1e-3) + np.float32(1e-5) * abs(limit):
                    break
                if v == blank or v == cur.last[k]:  # (offered above)
                    continue
                c = np.float32(base + ac[v])
                if lm is not None:
                    c = np.float32(c + settings.lm_weight * work.row_cost[r, v])
                c = np.float32(c - settings.insertion)
                if pb is not None:
                    c = np.float32(c + work.pb_cost[rp, v])
                if not (c <= limit and c < INF):  # NaN-safe
                    continue
                best = min(best, c)
                packed = pack(c, k * V + v)
                h = _extend(cur.hash[k], v)
                n, slot, lower = _insert(work, n, _key(h, v), h, packed, k, v + V)
                if lower:
                    size = _heap_offer(work, size, packed, slot)
        # the heap holds the best K distinct candidates: those within the threshold, best first
        live = 0
        for i in range(size):
            if packed_cost(work.heap_key[i]) <= best + settings.threshold:
                work.heap_key[live] = work.heap_key[i]
                work.heap_slot[live] = work.heap_slot[i]
                live += 1
        ranked = np.argsort(work.heap_key[:live])
        count = live
        for j in range(count):
            slot = work.heap_slot[ranked[j]]
            k = work.cand_from[slot]
            coded = work.cand_label[slot]
            v = coded - V if coded >= V else coded
            extended = coded >= V
            nxt.cost[j] = packed_cost(work.cand_packed[slot])
            nxt.last[j] = v
            nxt.hash[j] = work.cand_hash[slot]
            nxt.acoustic[j] = np.float32(cur.acoustic[k] + ac[v])
            nxt.lm[j] = cur.lm[k]
            nxt.pb[j] = cur.pb[k]
            nxt.lm_cost[j] = cur.lm_cost[k]
            nxt.boost[j] = cur.boost[k]
            parents[t, j] = k
            labels[t, j] = -2 - v
            if extended:
                labels[t, j] = v
                if lm is not None:
                    r = lm_row(lm, cur.lm[k], work)
                    nxt.lm_cost[j] = np.float32(cur.lm_cost[k] + work.row_cost[r, v])
                    nxt.lm[j] = work.row_next[r, v]
                if pb is not None:
                    rp = phrase_row(pb, pb_row, cur.pb[k], blank, work)
                    nxt.boost[j] = np.float32(cur.boost[k] + work.pb_cost[rp, v])
                    nxt.pb[j] = work.pb_next[rp, v]
        for i in range(n):
            work.cand_key[work.cand_slots[i]] = EMPTY_KEY
            work.cand_pos[work.cand_slots[i]] = -1
        cur, nxt = nxt, cur
    return cur, close_beam(cur, count, settings, lm, pb, pb_row)


@njit(nogil=True, cache=True)
def close_beam(cur, count, settings, lm, pb, pb_row):
    """The end of a search: each of the beam's `count` hypotheses pays the LM's </s> and the
    refund of its open phrase match (in place); returns their order, best first."""
    for k in range(count):
        if lm is not None:
            f = lm.automata.final[0, cur.lm[k]]
            cur.lm_cost[k] = np.float32(cur.lm_cost[k] + f)
            cur.cost[k] = np.float32(cur.cost[k] + settings.lm_weight * f)
        if pb is not None:
            f = pb.final[pb_row, cur.pb[k]]
            cur.boost[k] = np.float32(cur.boost[k] + f)
            cur.cost[k] = np.float32(cur.cost[k] + f)
    keys = np.empty(count, np.uint64)
    for k in range(count):
        keys[k] = pack(cur.cost[k], k)
    return np.argsort(keys).astype(np.int32)


@njit(nogil=True, cache=True)
def trace(parents, labels, num_frames, j, blank):
    """(tokens, the frame each was emitted at, the last frame of its run: its repeats) of
    hypothesis j of the last frame."""
    n = 0
    k = j
    for t in range(num_frames - 1, -1, -1):
        n += labels[t, k] >= 0
        k = parents[t, k]
    tokens = np.empty(n, np.int32)
    frames = np.empty(n, np.int32)
    ends = np.empty(n, np.int32)
    k = j
    after = -1  # the column read at frame t + 1
    end = -1
    for t in range(num_frames - 1, -1, -1):
        label = labels[t, k]
        column = label if label >= 0 else -2 - label
        if column != blank and column != after:  # a run of a token's frames ends at t
            end = t
        if label >= 0:
            n -= 1
            tokens[n] = label
            frames[n] = t
            ends[n] = end
        after = column  # (a token emitted at t + 1 reads another column than t's: never a repeat)
        k = parents[t, k]
    return tokens, frames, ends
