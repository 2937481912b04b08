"""Generated n-gram LMs for benchmarks at sizes the demo corpus cannot reach.

`english_words` gives a real vocabulary and its unigram frequencies (`wordfreq`, in the
`bench` extra).  `generate_lm` makes, seeded, a proper backoff n-gram LM over it: every
history's explicit probabilities and backoff weight sum to one over the vocabulary (exact
ARPA semantics), the n-grams are closed under the suffixes and prefixes that ARPA files
made by an estimator have (each (a, b, c) comes with (a, b) and (b, c)), and a word's
probability in a context is its lower-order one sharpened by e^U(1, 3.5), as a smoothed
estimate from text is.  `prune` cuts it to a smaller LM of lower order by keeping the most
probable n-grams (by the probability of the whole n-gram, as count cut-offs keep the
frequent ones) and renormalising, so that every history of the small LM is one of the big
LM's.  `sample` draws sentences from an LM, so that the big LM is the true model of the
test sentences and rescoring with it has something to recover.
"""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np

BITS = 15  # bits per word id in an n-gram key: vocabularies below 32,768 words, 4-grams in 60 bits
LN10 = math.log(10.0)
_SPELLABLE = re.compile(r"[a-z']+")


def _keys(grams: np.ndarray) -> np.ndarray:
    """One int64 key per n-gram (rows of word ids)."""
    key = np.zeros(len(grams), np.int64)
    for j in range(grams.shape[1]):
        key = (key << BITS) | grams[:, j].astype(np.int64)
    return key


def _find(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Positions of keys in sorted_keys, -1 where absent."""
    pos = np.searchsorted(sorted_keys, keys)
    pos = np.minimum(pos, len(sorted_keys) - 1)
    return np.where(sorted_keys[pos] == keys, pos, -1) if len(sorted_keys) else np.full(len(keys), -1)


@dataclasses.dataclass
class Order:
    """The n-grams of one order, sorted by key: word ids, natural-log probabilities, and the
    natural-log backoff weight of each n-gram used as a history (0 for the others)."""

    grams: np.ndarray  # (N, k) int32
    logp: np.ndarray  # (N,) float64
    bow: np.ndarray  # (N,) float64
    keys: np.ndarray  # (N,) int64, sorted


@dataclasses.dataclass
class Lm:
    """A backoff LM: vocab[0] = <s>, vocab[1] = </s>, vocab[2] = <unk>; orders[k - 1] = k-grams."""

    vocab: list[str]
    orders: list[Order]

    @property
    def counts(self) -> list[int]:
        return [len(o.grams) for o in self.orders]

    def write_arpa(self, path: str | Path) -> Path:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("\\data\\\n" + "".join(f"ngram {k + 1}={n}\n" for k, n in enumerate(self.counts)))
            for k, o in enumerate(self.orders):
                f.write(f"\n\\{k + 1}-grams:\n")
                has_bow = np.zeros(len(o.grams), bool)
                if k + 1 < len(self.orders):
                    nxt = self.orders[k + 1]
                    has_bow[np.unique(_find(o.keys, _keys(nxt.grams[:, :-1])))] = True
                lp = np.where(np.isfinite(o.logp), o.logp / LN10, -99.0)
                bo = o.bow / LN10
                words = [" ".join(self.vocab[i] for i in g) for g in o.grams.tolist()]
                f.write("".join(f"{p:.6f}\t{w}\t{b:.6f}\n" if h else f"{p:.6f}\t{w}\n"
                                for p, w, b, h in zip(lp.tolist(), words, bo.tolist(), has_bow.tolist())))
            f.write("\n\\end\\\n")
        tmp.replace(path)
        return path

    def distribution(self, history: list[int]) -> np.ndarray:
        """p(. | history) over the vocabulary (exact backoff semantics)."""
        p = np.exp(self.orders[0].logp)
        for k in range(1, len(self.orders)):
            if len(history) < k:
                break
            h = np.asarray([history[-k:]], np.int32)
            pos = _find(self.orders[k - 1].keys, _keys(h))[0]
            if pos < 0:
                continue  # not an n-gram: no longer history is one either
            o = self.orders[k]
            lo, hi = np.searchsorted(o.keys, [_keys(h)[0] << BITS, (_keys(h)[0] + 1) << BITS])
            if hi == lo:
                continue
            p = p * math.exp(self.orders[k - 1].bow[pos])
            p[o.grams[lo:hi, -1]] = np.exp(o.logp[lo:hi])
        return p


def _order(grams: np.ndarray) -> Order:
    grams = np.unique(grams, axis=0)
    keys = _keys(grams)
    idx = np.argsort(keys, kind="stable")
    return Order(grams[idx].astype(np.int32), np.zeros(len(grams)), np.zeros(len(grams)), keys[idx])


def _probabilities(lm_orders: list[Order], k: int, rng) -> None:
    """Explicit probabilities of the k-grams (k >= 2) and the backoff weights of their
    histories: each explicit word gets its lower-order probability times a factor of
    e^U(1, 3.5), capped so that a history keeps at least 5% of its mass for backoff."""
    o, lower, hist = lm_orders[k - 1], lm_orders[k - 2], lm_orders[k - 2]
    if k == 2:
        p_low = np.exp(lower.logp[o.grams[:, 1]])  # unigrams are indexed by word id
    else:
        p_low = np.exp(lower.logp[_find(lower.keys, _keys(o.grams[:, 1:]))])
    raw = p_low * np.exp(rng.uniform(1.0, 3.5, len(o.grams)))
    h = _find(hist.keys, _keys(o.grams[:, :-1]))
    mass = np.bincount(h, raw, minlength=len(hist.grams))
    low_mass = np.bincount(h, p_low, minlength=len(hist.grams))
    cap = rng.uniform(0.5, 0.95, len(hist.grams))
    scale = np.where(mass > cap, cap / np.maximum(mass, 1e-300), 1.0)
    p = raw * scale[h]
    o.logp = np.log(p)
    kept = np.bincount(h, p, minlength=len(hist.grams))
    has = np.bincount(h, minlength=len(hist.grams)) > 0
    hist.bow = np.where(has, np.log(np.maximum(1.0 - kept, 1e-12)) - np.log(np.maximum(1.0 - low_mass, 1e-12)), 0.0)


def english_words(n: int) -> tuple[list[str], np.ndarray]:
    """The n most frequent English words of letters and apostrophes, and their frequencies,
    from `wordfreq` (its word lists: Wikipedia, subtitles, news, books, web text)."""
    import wordfreq

    words = [w for w in wordfreq.top_n_list("en", 2 * n) if _SPELLABLE.fullmatch(w)][:n]
    return words, np.array([wordfreq.word_frequency(w, "en") for w in words])


def generate_lm(words: list[str], frequencies: np.ndarray, counts: list[int], seed: int = 0) -> Lm:
    """A backoff LM of order len(counts) + 1 over `words`, whose unigram probabilities are
    proportional to `frequencies`: counts[k] (k+2)-grams."""
    if len(words) + 3 >= 1 << BITS:
        raise ValueError(f"at most {(1 << BITS) - 4} words")
    rng = np.random.default_rng(seed)
    vocab = ["<s>", "</s>", "<unk>"] + list(words)
    V = len(vocab)
    zipf = np.concatenate([[0.0, 0.0, 1e-6], np.asarray(frequencies, np.float64)])
    zipf = 0.94 * zipf / zipf.sum()
    zipf[1] = 0.06  # </s>: sentences of about 16 words
    uni = Order(np.arange(V, dtype=np.int32)[:, None], np.log(np.maximum(zipf, 1e-300)), np.zeros(V),
                np.arange(V, dtype=np.int64))
    uni.logp[0] = -np.inf
    orders = [uni]
    p_hist = zipf.copy()
    p_hist[1] = 0.0
    p_hist[0] = 0.06  # <s> starts every sentence: a frequent history
    p_hist /= p_hist.sum()
    # bigrams: a Zipf history and a Zipf word
    n2 = counts[0]
    pairs = np.empty((0, 2), np.int64)
    while len(pairs) < n2:
        m = int((n2 - len(pairs)) * 1.3) + 100
        new = np.stack([rng.choice(V, m, p=p_hist), rng.choice(V, m, p=np.sqrt(zipf) / np.sqrt(zipf).sum())], axis=1)
        before = len(pairs)
        pairs = np.unique(np.concatenate([pairs, new[new[:, 0] != new[:, 1]]]), axis=0)
        if len(pairs) - before < 0.01 * (n2 - before):
            raise ValueError(f"only {len(pairs)} bigrams can be drawn; ask for fewer")
    orders.append(_order(pairs[rng.permutation(len(pairs))[:n2]]))
    _probabilities(orders, 2, rng)
    # (k)-grams: (a.., b..) where the prefix and the suffix are (k-1)-grams; prefixes drawn by probability
    for k in range(3, len(counts) + 2):
        prev = orders[k - 2]
        want = counts[k - 2]
        first = prev.grams[:, :-1]  # the first k-2 words of each (k-1)-gram
        firsts = _keys(first)
        by_first = np.argsort(firsts, kind="stable")
        sorted_firsts = firsts[by_first]
        # prefixes: half by probability, half uniformly among those that can be continued (a long tail)
        suffix_keys = _keys(prev.grams[:, 1:])
        continuations = np.searchsorted(sorted_firsts, suffix_keys, side="right") - np.searchsorted(sorted_firsts,
                                                                                                    suffix_keys)
        can = (continuations > 0) & (prev.grams[:, -1] != 1)
        weight = np.exp(prev.logp) * (p_hist[prev.grams[:, 0]] if k == 3 else 1.0) * can
        weight = 0.5 * weight / weight.sum() + 0.5 * can / can.sum()
        got = np.empty((0, k), np.int32)
        while len(got) < want:
            picks = rng.choice(len(prev.grams), int((want - len(got)) * 1.5) + 100, p=weight)
            prefix = prev.grams[picks]
            # a continuation: a (k-1)-gram whose first k-2 words are the prefix's last k-2
            suffix_key = _keys(prefix[:, 1:])
            lo = np.searchsorted(sorted_firsts, suffix_key)
            hi = np.searchsorted(sorted_firsts, suffix_key, side="right")
            ok = (hi > lo) & (prefix[:, -1] != 1)
            choice = lo[ok] + (rng.random(ok.sum()) * (hi[ok] - lo[ok])).astype(np.int64)
            new = np.concatenate([prefix[ok], prev.grams[by_first[choice], -1:]], axis=1)
            before = len(got)
            got = np.unique(np.concatenate([got, new]), axis=0)
            if len(got) - before < 0.01 * (want - before):
                raise ValueError(f"only {len(got)} {k}-grams can be made from these {k - 1}-grams; ask for fewer")
        orders.append(_order(got[rng.permutation(len(got))[:want]]))
        _probabilities(orders, k, rng)
    return Lm(vocab, orders)


def prune(lm: Lm, order: int, counts: list[int]) -> Lm:
    """A smaller LM of `order`: the counts[k] most probable (k+2)-grams (whose prefix is kept),
    probabilities kept, backoff weights renormalised."""
    orders = [dataclasses.replace(lm.orders[0], bow=np.zeros(len(lm.orders[0].grams)))]
    joint = np.exp(lm.orders[0].logp)  # p of each whole n-gram of the big LM: p(history) * p(w | history)
    for k in range(2, order + 1):
        o = lm.orders[k - 1]
        joint = joint[_find(lm.orders[k - 2].keys, _keys(o.grams[:, :-1]))] * np.exp(o.logp)
        kept_prefix = _find(orders[k - 2].keys, _keys(o.grams[:, :-1])) >= 0
        kept_suffix = (_find(orders[k - 2].keys, _keys(o.grams[:, 1:])) >= 0) if k > 2 else np.ones(len(o.grams), bool)
        cand = np.flatnonzero(kept_prefix & kept_suffix)
        keep = np.sort(cand[np.argsort(-joint[cand], kind="stable")[:counts[k - 2]]])
        orders.append(Order(o.grams[keep], o.logp[keep], np.zeros(len(keep)), o.keys[keep]))
    small = Lm(lm.vocab, orders)
    for k in range(2, order + 1):  # backoff weights that make every history sum to one again
        o, hist = small.orders[k - 1], small.orders[k - 2]
        if k == 2:
            p_low = np.exp(hist.logp[o.grams[:, 1]])
        else:  # the suffix (k-1)-gram is kept: its explicit probability
            p_low = np.exp(hist.logp[_find(hist.keys, _keys(o.grams[:, 1:]))])
        h = _find(hist.keys, _keys(o.grams[:, :-1]))
        kept = np.bincount(h, np.exp(o.logp), minlength=len(hist.grams))
        low = np.bincount(h, p_low, minlength=len(hist.grams))
        has = np.bincount(h, minlength=len(hist.grams)) > 0
        hist.bow = np.where(has, np.log(np.maximum(1 - kept, 1e-12)) - np.log(np.maximum(1 - low, 1e-12)), 0.0)
    return small


def sample(lm: Lm, n: int, seed: int = 0, max_words: int = 40) -> list[str]:
    """n sentences drawn from the LM (of at least 3 words, at most max_words)."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        history = [0]
        while len(history) <= max_words:
            p = lm.distribution(history[-(len(lm.orders) - 1):])
            w = int(rng.choice(len(p), p=p / p.sum()))
            if w == 1:
                break
            history.append(w)
        words = [lm.vocab[w] for w in history[1:] if w > 2]
        if 3 <= len(words) and len(history) <= max_words:
            out.append(" ".join(words))
    return out
