"""Per-utterance word and phrase boosting: a reward (natural log, > 0 makes it more
likely) for words or multi-word phrases of the graph's vocabulary.

Single words: decoding with a boost map equals decoding TLG ∘ B, where B is a one-state
acceptor with a loop for every word, of cost -reward for the boosted ones and 0 for the
rest (the riva decoder paper, sec. 3.2).  Nothing is composed: the GPU looks the word up
in a small hash map per utterance at word arcs; the CPU adds a dense cost vector's entry
at every arc, or, when the whole batch boosts one map, puts its costs into the word arcs'
weights for the batch (for a one-state B that is all the composition does).  Either way
the cost joins the arc's weight as OpenFST's composition rounds it.

Phrases ("new york": 3.0, keys with several words): B is a word-level Aho-Corasick
automaton with failure arcs, walked on the fly as an extra state per token (like
icefall's ContextGraph and NeMo's GPU phrase boosting).  Each complete occurrence of a
phrase earns its reward once.  To keep a partly matched phrase inside the beam, each
matched word also earns an advance of the reward (potential φ), refunded on the failure
arc when the match breaks off and at the end of the utterance when it is still open, so
a partial match earns nothing in the end and complete paths score exactly as TLG ∘ B.

Words or phrases not in the vocabulary are reported, never silently dropped.
"""
from __future__ import annotations

import dataclasses
import decimal
import math
import numbers
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from wfst.kernels.common import hash_slot
from wfst.kernels.constants import EMPTY_KEY

from .config import MAX_REWARD
from .errors import BoostError, user_stacklevel
from .files import split_fields

if TYPE_CHECKING:
    from .graph import Graph


@dataclasses.dataclass(frozen=True)
class BoostTables:
    """A batch's boosts: per utterance a map word id -> cost (-reward) and a phrase
    automaton.  Each backend builds its own form of the word maps: the CPU a dense cost
    vector (`word_costs`), the GPU an open-addressing hash map (`hash_maps`)."""

    unknown: tuple[tuple[int, str], ...]  # (utterance, word or phrase) not in the graph's vocabulary
    maps: tuple[dict, ...]  # per utterance: word id -> cost (-reward); utterances given one mapping share it
    phrases: tuple  # per utterance: its phrase automaton (PhraseAutomaton), shared likewise
    num_words: int  # the vocabulary's size (word ids < num_words)
    _dense: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)  # see word_costs

    def hash_maps(self, utterances):
        """The utterances' maps as rows of one open-addressing table (the GPU's form of B):
        keys (n, H) int32 (EMPTY_KEY: free), costs (n, H) float32 and bits (n, ceil(words /
        32)) uint32 with bit w set when word w is boosted (a hash probe only for those)."""
        maps = [self.maps[b] for b in utterances]
        H = 1
        while H < 2 * max((len(m) for m in maps), default=0):
            H *= 2
        keys = np.full((len(maps), H), EMPTY_KEY, np.int32)
        costs = np.zeros((len(maps), H), np.float32)
        bits = np.zeros((len(maps), (self.num_words + 31) // 32 or 1), np.uint32)
        rows: dict[int, int] = {}
        for r, m in enumerate(maps):
            if not m:
                continue
            if id(m) in rows:  # the same map: copy its row
                keys[r], costs[r], bits[r] = keys[rows[id(m)]], costs[rows[id(m)]], bits[rows[id(m)]]
                continue
            rows[id(m)] = r
            ids = np.fromiter(m.keys(), np.int64, len(m))
            _fill_hash_row(keys[r], costs[r], ids, np.fromiter(m.values(), np.float32, len(m)))
            np.bitwise_or.at(bits[r], ids >> 5, (np.uint32(1) << (ids & 31).astype(np.uint32)))
        return keys, costs, bits

    @property
    def weight_spread(self) -> float:
        """How far below an earlier word arc of its state (in the order of unboosted weights)
        a word arc's boosted weight may lie: an utterance's largest reward plus its largest
        penalty, the most over the batch (0 without boosts)."""
        return max([0.0] + [max(0.0, -min(m.values())) + max(0.0, max(m.values())) for m in self.maps if m])

    def boosted(self, b: int) -> bool:
        """Whether utterance b boosts any single word."""
        return bool(self.maps[b])

    def batch_wide(self) -> bool:
        """Whether every utterance boosts the same single words (one mapping for the batch)."""
        return bool(self.maps and self.maps[0]) and all(m is self.maps[0] for m in self.maps)

    def word_costs(self, b: int, num_words: int) -> np.ndarray:
        """Utterance b's map as a dense float32 vector word id -> cost (0: not boosted), the
        CPU backend's form of B: a word arc adds one entry instead of testing the word.
        Utterances sharing a mapping share the vector."""
        m = self.maps[b]
        if id(m) not in self._dense:
            costs = np.zeros(max(num_words, 1), np.float32)
            costs[list(m)] = list(m.values())
            self._dense[id(m)] = costs
        return self._dense[id(m)]


def boost_tables(boost, batch: int, graph: Graph, beam: float, *, stream: bool = False) -> BoostTables:
    """Validate `boost` (None, one mapping for the batch, or one mapping or None per
    utterance) and build the per-utterance maps (stream: of one stream, which messages name).
    A word no arc of `graph` outputs is unknown, as one words.txt lacks."""
    if boost is None:
        per_utt: Sequence = [None] * batch
    elif isinstance(boost, Mapping):
        per_utt = [boost] * batch
    elif isinstance(boost, Sequence) and not isinstance(boost, str):
        if len(boost) != batch:
            raise BoostError(f"boost has {len(boost)} entries but the batch has {batch} utterances")
        per_utt = list(boost)  # (held: the mappings are told apart by id, which a freed one's successor reuses)
    else:
        raise BoostError(f"boost must be a mapping word -> reward, or one per utterance; got {type(boost).__name__}")
    ids = graph.output_word_ids if any(m is not None for m in per_utt) else {}
    unknown, maps, built, automata = [], [], {}, []
    for b, m in enumerate(per_utt):
        if m is None:
            maps.append({})
            automata.append(NO_PHRASES)
            continue
        where = "Decoder.stream()" if stream else f"utterance {b}"
        if not isinstance(m, Mapping):
            raise BoostError(f"{where}: boost must be a mapping word -> reward; got {type(m).__name__}")
        if id(m) not in built and (known := _plain_words(m, ids, beam)) is not None:
            built[id(m)] = (known, [], NO_PHRASES)
        if id(m) not in built:  # one mapping shared by many utterances is checked once
            known, missing, phrases, keys = {}, [], {}, {}
            for word, reward in m.items():
                if not isinstance(word, str):
                    raise BoostError(f"{where}: boost keys must be words or phrases (str); got {word!r}")
                reward = check_reward(reward, f"{where}: boost of {word!r}")
                i = ids.get(word)
                parts = [word] if i is not None else split_fields(word)  # a plain word skips the split
                if not parts:
                    raise BoostError(f"{where}: boost key {word!r} holds no word (a word or a phrase of words "
                                     f"separated by spaces)")
                if any(w not in ids or w in _NOT_WORDS for w in parts):
                    missing.append(word)
                    continue
                key = tuple(ids[w] for w in parts)
                phrases[key] = phrases.get(key, 0.0) + float(reward)
                keys.setdefault(key, []).append(word)
            for key, reward in phrases.items():  # (keys spelled alike, " ab" and "ab", are one: their sum)
                names = " + ".join(map(repr, keys[key]))
                if len(keys[key]) > 1:
                    check_reward(reward, f"{where}: boost of {names}")
                if reward > beam / 2:
                    warnings.warn(f"boost {reward} for {names} is more than half the beam ({beam}); it can push "
                                  f"better paths out of the beam", stacklevel=user_stacklevel())
            known = {key[0]: 0.0 - reward for key, reward in phrases.items() if len(key) == 1}
            phrases = {key: reward for key, reward in phrases.items() if len(key) > 1}
            built[id(m)] = (known, missing, phrase_automaton(phrases))
        known, missing, automaton = built[id(m)]
        unknown += [(b, w) for w in missing]
        maps.append(known)
        automata.append(automaton)
    if unknown:
        distinct = list(dict.fromkeys(w for _, w in unknown))
        shown = ", ".join(repr(w) for w in distinct[:10]) + (" ..." if len(distinct) > 10 else "")
        listed = "Stream.boost_unknown" if stream else "Decoder.stats.boost_unknown"
        warnings.warn(f"{len(distinct)} boosted word(s) or phrase(s) are not in the graph's vocabulary and are ignored "
                      f"(listed in {listed}): {shown}", stacklevel=user_stacklevel())
    return BoostTables(tuple(unknown), tuple(maps), tuple(automata), len(graph.words or ()))


@njit(cache=True)
def _fill_hash_row(keys, costs, ids, values):
    """Insert word ids with their costs into one row of an open-addressing table (linear
    probing from common.hash_slot, as the GPU's lookup probes)."""
    mask = keys.shape[0] - 1
    for i in range(ids.shape[0]):
        slot = hash_slot(ids[i], mask)
        while keys[slot] != EMPTY_KEY:
            slot = (slot + 1) & mask
        keys[slot] = ids[i]
        costs[slot] = values[i]


_NOT_WORDS = ("<eps>", "#0", "<s>", "</s>")


def check_reward(reward, what: str) -> float:
    """A boost reward as a float, or a BoostError naming `what` (a word or phrase and where)."""
    if isinstance(reward, (decimal.Decimal, np.ndarray)) and not isinstance(reward, bool) and np.ndim(reward) == 0:
        try:  # (a Decimal, or NumPy's 0-d array: numbers, which numbers.Real does not know as such)
            reward = float(reward)
        except (TypeError, ValueError):
            pass
    if not isinstance(reward, numbers.Real) or isinstance(reward, bool):
        raise BoostError(f"{what}: reward {reward!r} must be a finite number (an int or a float)")
    try:
        finite = math.isfinite(reward)
    except OverflowError:  # (an int beyond float64's range)
        finite = False
    if not finite:
        shown = f"{reward!r}" if len(repr(reward)) < 20 else f"of {len(str(abs(reward)))} digits"
        raise BoostError(f"{what}: reward {shown} must be a finite number (at most {MAX_REWARD:g} in size)")
    shown = f"{reward:g}" if float(f"{reward:g}") == reward else repr(reward)  # (10000.0001 was "10000")
    if reward > MAX_REWARD:
        raise BoostError(f"{what}: reward {shown} is above {MAX_REWARD:g}: costs are float32, whose step grows with "
                         f"them, and a reward above half the beam already wins over any acoustics")
    if reward < -MAX_REWARD:  # (a penalty: -1e39 overflowed float32)
        raise BoostError(f"{what}: reward {shown} is below -{MAX_REWARD:g}: a penalty of more than half the "
                         f"beam already keeps the word out")
    return float(reward)


def _plain_words(m: Mapping, ids: dict, beam: float) -> dict | None:
    """boost_tables' word map of a mapping whose keys are all words of the vocabulary and
    whose rewards are all finite ints or floats up to beam / 2 (and MAX_REWARD), checked in bulk (per-utterance
    lists of many words); None for any other mapping, which the full check then explains."""
    word_ids = list(map(ids.get, m))
    if None in word_ids or not set(map(type, m.values())) <= {int, float} or any(w in m for w in _NOT_WORDS):
        return None
    try:
        rewards = np.fromiter(m.values(), np.float64, len(m))
    except OverflowError:  # (an int beyond float64's range: check_reward says so)
        return None
    if not (np.isfinite(rewards).all() and (rewards <= min(beam / 2, MAX_REWARD)).all()
            and (rewards >= -MAX_REWARD).all()):
        return None
    return dict(zip(word_ids, (0.0 - rewards).tolist()))


@dataclasses.dataclass(frozen=True)
class PhraseAutomaton:
    """A phrase-boosting automaton in the kernels' backoff-CSR form (see the module doc)."""

    offsets: np.ndarray  # (N + 1,) int64
    labels: np.ndarray  # (A,) int32 word ids, sorted within each state
    weights: np.ndarray  # (A,) float32
    nexts: np.ndarray  # (A,) int32
    backoff: np.ndarray  # (N,) int32 failure state; -1 at the trie's root (not state 0 after a separator)
    bo_weight: np.ndarray  # (N,) float32 refund on the failure arc
    final: np.ndarray  # (N,) float32 refund of an open partial match
    phrases: dict  # word-id tuple -> reward

    @property
    def num_states(self) -> int:
        return len(self.backoff)

    def automaton(self):
        return (self.offsets, self.labels, self.weights, self.nexts, self.backoff, self.bo_weight, self.final)

    def path_cost(self, word_ids) -> float:
        """The boost cost of a word sequence, its end refund included (a phrase matched in part
        earns nothing, whether or not the path ends in a final state)."""
        from wfst.kernels.common import automaton_step

        from .contexts import automata

        a = automata([self.automaton()])
        s, total = 0, 0.0
        for w in word_ids:
            cost, s = automaton_step(a, 0, s, w)
            total += float(cost)
        return total + float(self.final[s])


def phrase_automaton(phrases: dict[tuple[int, ...], float], *, separator: int | None = None,
                     word_starts: np.ndarray | None = None) -> PhraseAutomaton:
    """The Aho-Corasick automaton of label phrases -> reward (labels: word ids, or tokens).

    Trie nodes with children are states (a node without children behaves as its failure
    node, so arcs into it go there).  Reading label w from node u to child v costs
    φ(v') - φ(u) - out(v), where v' is v or its stand-in, out(v) the rewards of all
    phrases ending at v (through failure links: overlapping occurrences all count), and
    φ(u) = -max(0, max over phrases p extending u of reward(p) × |u| / |p|).
    The failure arc from u costs φ(fail(u)) - φ(u), the final cost is -φ(u): the
    advances telescope away on every complete path.

    Whole words of tokens (the lexicon-free decoder), given how words are told apart:
    `separator`, a label between words (characters' `|`; repeats of it count once, and the
    utterance starts and ends as if after and before one), or `word_starts`, the sorted
    labels that begin a word (sentencepiece's "▁" pieces).  A phrase must then start a
    word (with a separator the phrase is read after one: the start state, state 0, is its
    node) and end one: its reward waits at its last node (a state while some phrase ends
    there) until a label that begins the next word is read, or the utterance ends, and a
    phrase followed by any other label (a longer word) earns nothing.  So out(u) is paid
    on u's arcs of those labels, which are all explicit, and in its final cost; the
    advance of p's last label is |p| / (|p| + 1) of the reward.
    """
    start = (separator,) if separator is not None and phrases else ()
    ends = np.array([separator], np.int64) if separator is not None else word_starts
    phrases = {start + tuple(p): r for p, r in phrases.items()}
    lead = len(start)
    children: list[dict] = [{}]
    depth = [0]
    own = [0.0]
    last = [-1]  # the label into each node
    for p, reward in phrases.items():
        if len(p) <= lead:
            raise BoostError("an empty phrase")
        u = 0
        for w in p:
            if w not in children[u]:
                children[u][w] = len(children)
                children.append({})
                depth.append(depth[u] + 1)
                own.append(0.0)
                last.append(w)
            u = children[u][w]
        own[u] += reward
    n = len(children)
    whole = ends is not None
    advance = [0.0] * n  # ρ(u) = -φ(u)
    for p, reward in phrases.items():
        u = 0
        share = len(p) - lead + (1 if whole else 0)
        for w in p if whole else p[:-1]:
            u = children[u][w]
            advance[u] = max(advance[u], reward * (depth[u] - lead) / share)
    fail = [0] * n
    out = list(own)
    order = []
    queue = list(children[0].values())
    while queue:  # breadth first: a node's failure node is shallower
        order += queue
        nxt = []
        for u in queue:
            for w, v in children[u].items():
                f = fail[u]
                while f and w not in children[f]:
                    f = fail[f]
                fail[v] = children[f][w] if u != 0 and w in children[f] else 0
                out[v] += out[fail[v]]
                nxt.append(v)
        queue = nxt
    pending = [whole and out[u] != 0 for u in range(n)]  # (a penalty waits for the word end too)
    stand_in = list(range(n))
    for u in order:
        if not children[u] and not pending[u]:
            stand_in[u] = stand_in[fail[u]]
    first = stand_in[children[0][separator]] if start else 0  # the start: after a separator
    states = [first] + [u for u in range(n) if u != first and (u == 0 or children[u] or pending[u])]
    index = np.full(n, -1, np.int64)
    index[states] = np.arange(len(states))
    phi = np.array([-a for a in advance], np.float64)
    N = len(states)
    offsets = np.zeros(N + 1, np.int64)
    labels, weights, nexts = [], [], []
    backoff = np.full(N, -1, np.int32)
    bo_weight = np.zeros(N, np.float32)
    final = np.zeros(N, np.float32)
    rows: dict[int, np.ndarray] = {}  # node -> its targets (stand-ins) reading each of `ends`

    def row(u):
        if u not in rows:
            r = np.zeros(len(ends), np.int64) if u == 0 else row(fail[u]).copy()
            for w, v in children[u].items():
                k = np.searchsorted(ends, w)
                if k < len(ends) and ends[k] == w:
                    r[k] = stand_in[v]
            rows[u] = r
        return rows[u]

    for i, u in enumerate(states):
        own_labels = sorted(children[u])
        lab = np.array(own_labels, np.int64)
        tgt = np.array([stand_in[children[u][w]] for w in own_labels], np.int64)
        if whole:
            w = phi[tgt] - phi[u]
        else:
            w = phi[tgt] - phi[u] - np.array([out[children[u][x]] for x in own_labels], np.float64)
        if u and separator is not None and last[u] == separator:  # a repeated separator: no change
            at = np.searchsorted(lab, separator)
            lab, w, tgt = np.insert(lab, at, separator), np.insert(w, at, 0.0), np.insert(tgt, at, u)
        if pending[u]:  # every label of `ends` pays out(u): explicit, children among them included
            keep = ~np.isin(lab, ends)
            end_tgt = row(u)
            lab = np.concatenate([lab[keep], ends.astype(np.int64)])
            w = np.concatenate([w[keep], phi[end_tgt] - phi[u] - out[u]])
            tgt = np.concatenate([tgt[keep], end_tgt])
            by = np.argsort(lab, kind="stable")
            lab, w, tgt = lab[by], w[by], tgt[by]
        labels.append(lab)
        weights.append(w)
        nexts.append(index[tgt])
        offsets[i + 1] = offsets[i] + len(lab)
        if u:
            backoff[i] = index[stand_in[fail[u]]]
            bo_weight[i] = phi[stand_in[fail[u]]] - phi[u]
        final[i] = -phi[u] - (out[u] if pending[u] else 0.0)
    return PhraseAutomaton(offsets, np.concatenate(labels).astype(np.int32),
                           np.concatenate(weights).astype(np.float32), np.concatenate(nexts).astype(np.int32),
                           backoff, bo_weight, final, dict(phrases))


NO_PHRASES = phrase_automaton({})
