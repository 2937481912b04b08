"""Building an LM store from ARPA text (wfst.lm.read_arpa) in time and memory that scale
to LMs of a hundred million n-grams: n-gram lines parsed a block of text at a time, the
CSR automaton assembled from arrays through one hash table of the n-gram trie, the maps
between two stores' states (wfst.lm.Rescorer) and a store file's checks.

The trie: every n-gram is a node; node 0 is the empty history, node 1 + w the unigram of
word w, and the k-grams of order k follow, ranked by their key, parent node x V + last
word.  Ranking by that key sorts each order's n-grams as word-id tuples, so a history's
state id (its rank among the histories of its length) and the arcs' CSR order come out of
the ranks.  A line this parser does not read exactly as Python's float() and
wfst.arpa.parse_ngram do (an unusual number, anything faulty) is handed back to the
caller to parse in Python, which also words the errors.
"""
import math

import numpy as np
from numba import njit

from .common import hash_slot

# a line's outcome: stored; a word not in the unigrams; for Python; blank
LINE_OK, LINE_UNKNOWN, LINE_SLOW, LINE_BLANK = 0, 1, 2, 3
MAX_LOG10 = 1e4  # wfst.arpa.MAX_LOG10 (a larger value is a fault that Python words)
LN10 = math.log(10.0)
_POW10 = np.array([10.0 ** i for i in range(23)])  # exact in float64
_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)


@njit(cache=True, nogil=True)
def _number(buf, lo, hi, pow10):
    """(value, ok) of the ASCII decimal buf[lo:hi] as Python's float() reads it, for plain
    decimals of at most 15 significant digits and a power of ten within 22: one correctly
    rounded multiply or divide of two exact doubles (Clinger's fast path), so the same
    double.  ok is False for anything else (more digits, inf, nan, underscores, faults)."""
    i = lo
    neg = False
    if i < hi and (buf[i] == 45 or buf[i] == 43):  # - +
        neg = buf[i] == 45
        i += 1
    m = np.int64(0)
    digits = 0  # significant digits in m
    seen = 0  # digits of the mantissa
    frac = 0  # of them after the point
    point = False
    while i < hi:
        c = buf[i]
        if 48 <= c <= 57:
            if digits > 0 or c != 48:
                digits += 1
                m = m * 10 + (c - 48)
            seen += 1
            if point:
                frac += 1
        elif c == 46 and not point:  # .
            point = True
        else:
            break
        i += 1
    if seen == 0 or digits > 15:
        return 0.0, False
    e = 0
    if i < hi and (buf[i] == 101 or buf[i] == 69):  # e E
        i += 1
        negative_e = False
        if i < hi and (buf[i] == 45 or buf[i] == 43):
            negative_e = buf[i] == 45
            i += 1
        e_digits = 0
        while i < hi and 48 <= buf[i] <= 57 and e_digits < 5:
            e = e * 10 + (buf[i] - 48)
            e_digits += 1
            i += 1
        if e_digits == 0:
            return 0.0, False
        if negative_e:
            e = -e
    if i != hi:
        return 0.0, False
    e -= frac
    v = 0.0
    if m != 0:
        if e > 22 or e < -22:
            return 0.0, False
        v = float(m)  # exact: m < 10^15 < 2^53
        v = v * pow10[e] if e >= 0 else v / pow10[-e]
    return (-v if neg else v), True


@njit(cache=True, nogil=True)
def _bytes_hash(buf, lo, hi):
    h = _FNV_OFFSET
    for i in range(lo, hi):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    return np.int64(h & np.uint64(0x7FFFFFFFFFFFFFFF))


@njit(cache=True, nogil=True)
def vocabulary_table(text, offsets):
    """An open-addressing table of the words text[offsets[w]:offsets[w + 1]] (UTF-8) -> w."""
    V = offsets.shape[0] - 1
    size = 16
    while size < 2 * V:
        size *= 2
    table = np.full(size, -1, np.int32)
    for w in range(V):
        slot = hash_slot(_bytes_hash(text, offsets[w], offsets[w + 1]), size - 1)
        while table[slot] >= 0:
            slot = (slot + 1) & (size - 1)
        table[slot] = w
    return table


@njit(cache=True, nogil=True)
def _word_id(buf, lo, hi, text, offsets, table):
    mask = table.shape[0] - 1
    slot = hash_slot(_bytes_hash(buf, lo, hi), mask)
    while True:
        w = table[slot]
        if w < 0:
            return -1
        if _same(buf, lo, hi, text, offsets[w], offsets[w + 1]):
            return w
        slot = (slot + 1) & mask


@njit(cache=True, nogil=True)
def _same(a, lo, hi, b, lo2, hi2):
    """Whether a[lo:hi] and b[lo2:hi2] hold the same bytes."""
    if hi - lo != hi2 - lo2:
        return False
    for i in range(hi - lo):
        if a[lo + i] != b[lo2 + i]:
            return False
    return True


@njit(cache=True, nogil=True)
def parse_lines(buf, first, k, top, text, offsets, table, ids, costs, bos, lines, at, outcome):
    """Parse a block of k-gram lines (UTF-8, each line ending in a newline, blank lines
    among them; `first`: the first's line number) into rows at, at + 1, ... of ids (word
    ids), costs and bos (-log10 value x ln 10 as float32, an absent backoff 0 giving -0.0
    as Python's does) and lines; outcome[j]: line j's LINE_*.  Returns the next free row."""
    n = buf.shape[0]
    start = 0
    j = 0
    # the previous line's words (where in buf, their ids): ARPA writers group the n-grams of a
    # history, so most words are the previous line's at the same place, and a compare of bytes
    # in cache saves the table's probe and its cache misses
    prev_lo = np.zeros(k, np.int64)
    prev_hi = np.zeros(k, np.int64)
    prev_id = np.full(k, -1, np.int64)
    while start < n:
        end = start
        while buf[end] != 10:
            end += 1
        p = start
        while p < end and (buf[p] == 32 or buf[p] == 9):
            p += 1
        if p == end:
            outcome[j] = LINE_BLANK
            start = end + 1
            j += 1
            continue
        outcome[j] = LINE_SLOW
        fields = 0
        logp = 0.0
        bo = 0.0
        ok = True
        unknown = False
        while p < end and ok:
            q = p
            while q < end and buf[q] != 32 and buf[q] != 9:
                q += 1
            if fields == 0:
                logp, ok = _number(buf, p, q, _POW10)
            elif fields <= k:
                f = fields - 1
                w = prev_id[f]
                if w < 0 or not _same(buf, p, q, buf, prev_lo[f], prev_hi[f]):
                    w = _word_id(buf, p, q, text, offsets, table)
                    prev_lo[f], prev_hi[f], prev_id[f] = p, q, w
                if w < 0:
                    unknown = True
                else:
                    ids[at, fields - 1] = w
            elif fields == k + 1 and not top:
                bo, ok = _number(buf, p, q, _POW10)
            else:
                ok = False
            fields += 1
            p = q
            while p < end and (buf[p] == 32 or buf[p] == 9):
                p += 1
        if ok and fields >= k + 1 and logp <= 0.0 and -logp <= MAX_LOG10 and abs(bo) <= MAX_LOG10:
            if unknown:
                outcome[j] = LINE_UNKNOWN
            else:
                outcome[j] = LINE_OK
                costs[at] = np.float32(-logp * LN10)
                bos[at] = np.float32(-bo * LN10)
                lines[at] = first + j
                at += 1
        start = end + 1
        j += 1
    return at


# ---------------------------------------------------------------------- the trie

@njit(cache=True, nogil=True)
def _find(keys, values, key):
    """The node of `key` in the trie's table, or -1."""
    mask = keys.shape[0] - 1
    slot = hash_slot(key, mask)
    while True:
        k = keys[slot]
        if k == key:
            return values[slot]
        if k == -1:
            return -1
        slot = (slot + 1) & mask


@njit(cache=True, nogil=True)
def _insert(keys, values, key, value):
    mask = keys.shape[0] - 1
    slot = hash_slot(key, mask)
    while keys[slot] != -1:
        slot = (slot + 1) & mask
    keys[slot] = key
    values[slot] = value


def new_table(nodes: int):
    """An empty trie table for `nodes` keys (load at most two thirds: the lookups of a build
    mostly find their key, a few probes at that load)."""
    size = 16
    while 2 * size < 3 * nodes:
        size *= 2
    return np.full(size, -1, np.int64), np.full(size, -1, np.int32)


@njit(cache=True, nogil=True)
def _node(ids, r, lo, hi, V, keys, values):
    """The node of the words ids[r, lo:hi] (hi > lo), walked down the trie; -1 where they are
    no n-gram."""
    node = np.int64(1 + ids[r, lo])
    for i in range(lo + 1, hi):
        node = _find(keys, values, node * V + ids[r, i])
        if node < 0:
            break
    return node


@njit(cache=True, nogil=True)
def parents(ids, V, keys, values):
    """The parent node of each k-gram (rows of ids, k >= 2): its first k - 1 words walked
    down the trie; -1 where that history is not an n-gram (an orphan)."""
    n, k = ids.shape
    out = np.empty(n, np.int64)
    for r in range(n):
        out[r] = _node(ids, r, 0, k - 1, V, keys, values)
    return out


@njit(cache=True, nogil=True)
def add_nodes(sorted_keys, base, keys, values):
    """Insert one order's nodes, ranked: sorted_keys[i] becomes node base + i."""
    for i in range(sorted_keys.shape[0]):
        _insert(keys, values, sorted_keys[i], np.int32(base + i))


@njit(cache=True, nogil=True)
def _suffix_state(ids, r, first, V, keys, values, state_of):
    """The state of the longest suffix ids[r, s:] (s >= first) that is a state (0: the root)."""
    k = ids.shape[1]
    for s in range(first, k):
        node = _node(ids, r, s, k, V, keys, values)
        if node >= 0 and state_of[node] >= 0:
            return state_of[node]
    return np.int32(0)


@njit(cache=True, nogil=True)
def order_arcs(ids, first, order, V, keys, values, state_of, nexts, backoff):
    """For one order's n-grams (rows of ids, nodes first, first + 1, ...): the next state of
    each as an arc (its longest suffix, up to order - 1 words, that is a state) into
    nexts[node - 1], and the backoff state of each that is a state (its longest proper
    suffix that is a state) into backoff[state]."""
    k = ids.shape[1]
    for r in range(ids.shape[0]):
        node = first + r
        s = state_of[node]
        if k < order and s >= 0:
            nexts[node - 1] = s
        else:
            nexts[node - 1] = _suffix_state(ids, r, max(1, k - (order - 1)), V, keys, values, state_of)
        if s >= 0:
            backoff[s] = _suffix_state(ids, r, 1, V, keys, values, state_of)


@njit(cache=True, nogil=True)
def final_costs(offsets, labels, weights, backoff, bo_weight, eos):
    """The cost of reading </s> (word eos) in every state, with the backoffs it takes: the
    same sums in the same order as common.automaton_step, so the same float32."""
    out = np.empty(backoff.shape[0], np.float32)
    for s0 in range(backoff.shape[0]):
        cost = np.float32(0.0)
        s = s0
        while True:
            a = _arc(offsets, labels, s, eos)
            if a >= 0:
                cost = np.float32(cost + weights[a])
                break
            if backoff[s] < 0:
                break
            cost = np.float32(cost + bo_weight[s])
            s = backoff[s]
        out[s0] = cost
    return out


# ---------------------------------------------------------------------- a store's histories

@njit(cache=True, nogil=True)
def history_tree(offsets, labels, nexts, depth):
    """(parent, last) of each state of a store: the state of its history less its last word,
    and that word, read from the arcs that lengthen a history by one word; parent -1 where
    none does (the root, or a damaged store)."""
    N = depth.shape[0]
    parent = np.full(N, -1, np.int32)
    last = np.full(N, -1, np.int32)
    for s in range(N):
        for a in range(offsets[s], offsets[s + 1]):
            t = nexts[a]
            if depth[t] == depth[s] + 1:
                parent[t] = s
                last[t] = labels[a]
    return parent, last


@njit(cache=True, nogil=True)
def _arc(offsets, labels, s, w):
    """The arc of state s that reads w, or -1 (labels sorted within a state)."""
    lo = offsets[s]
    end = offsets[s + 1]
    hi = end
    while lo < hi:
        mid = (lo + hi) // 2
        if labels[mid] < w:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < end and labels[lo] == w else -1


@njit(cache=True, nogil=True)
def suffix_states(by_depth, parent, last, word_map, offsets, labels, nexts, backoff):
    """For each state of one store (parent, last: its history_tree; by_depth: its states,
    shorter histories first), the state of another store (offsets, labels, nexts, backoff)
    whose history is the longest suffix of the state's history that is a state there: the
    other's step from the parent's state by the last word (word_map: word ids of the one ->
    the other's, -1 where it lacks the word), which backs off to the longest suffix that
    has the word and goes to the longest suffix of that + word that is a state."""
    out = np.zeros(by_depth.shape[0], np.int32)
    for s in by_depth:
        p = parent[s]
        if p < 0:
            continue
        w = word_map[last[s]]
        q = out[p]
        a = -1
        while w >= 0:
            a = _arc(offsets, labels, q, w)
            if a >= 0 or backoff[q] < 0:
                break
            q = backoff[q]
        out[s] = nexts[a] if a >= 0 else 0
    return out


@njit(cache=True, nogil=True)
def same_histories(by_depth, parent, last, word_map, offsets, labels, nexts, depth):
    """For each state of one store (as in suffix_states), the state of another store with
    the same history, or -1."""
    out = np.full(by_depth.shape[0], -1, np.int32)
    for s in by_depth:
        p = parent[s]
        if p < 0:
            out[s] = 0 if s == 0 else -1
            continue
        q = out[p]
        w = word_map[last[s]]
        if q >= 0 and w >= 0:
            a = _arc(offsets, labels, q, w)
            if a >= 0 and depth[nexts[a]] == depth[q] + 1:
                out[s] = nexts[a]
    return out


# ---------------------------------------------------------------------- a store file's check

STORE_OK, STORE_OFFSETS, STORE_RANGES, STORE_BACKOFF, STORE_CHAIN, STORE_WEIGHTS, STORE_BO, STORE_FINAL = range(8)


@njit(cache=True, nogil=True)
def store_fault(offsets, labels, nexts, backoff, depth, weights, bo_weight, final, words, start):
    """The first of a store's faults, in this order (STORE_*): offsets that are no CSR index,
    labels or next states out of range, backoff or start states out of range, a backoff
    state whose history is not shorter (a chain that may not end at the root), NaN or
    negative word costs, NaN or infinite backoff costs, NaN final costs; STORE_OK if none.
    One pass over memory-mapped arrays, allocating nothing."""
    N = backoff.shape[0]
    A = labels.shape[0]
    if offsets[0] != 0 or offsets[N] != A:
        return STORE_OFFSETS
    for s in range(N):
        if offsets[s + 1] < offsets[s]:
            return STORE_OFFSETS
    for a in range(A):
        if labels[a] < 0 or labels[a] >= words or nexts[a] < 0 or nexts[a] >= N:
            return STORE_RANGES
    if N and not 0 <= start < N:
        return STORE_BACKOFF
    for s in range(N):
        if backoff[s] < -1 or backoff[s] >= N:
            return STORE_BACKOFF
    for s in range(N):
        b = backoff[s]
        if depth[s] < 0 or (depth[s] != 0 if b < 0 else depth[b] >= depth[s]):
            return STORE_CHAIN
    for a in range(A):
        if not weights[a] >= 0:  # (+inf: a word of probability 0)
            return STORE_WEIGHTS
    for s in range(N):
        if not np.isfinite(bo_weight[s]):
            return STORE_BO
    for s in range(N):
        if np.isnan(final[s]):
            return STORE_FINAL
    return STORE_OK
