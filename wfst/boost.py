"""Per-utterance word boosting: a reward (natural log, > 0 makes a word more likely) for
words of the graph's vocabulary, applied at every arc that outputs the word.

Decoding with a boost map equals decoding TLG ∘ B, where B is a one-state acceptor with a
loop for every word, of cost -reward for the boosted ones and 0 for the rest (the riva
decoder paper, sec. 3.2): the decoder looks the word up in a small hash map per
utterance instead of composing.  Words not in the vocabulary are reported, never
silently dropped.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from .errors import WfstError
from .symbols import WordTable


class BoostError(WfstError, ValueError):
    """A boost map that cannot be used (not a mapping, NaN or infinite rewards)."""


@dataclasses.dataclass(frozen=True)
class BoostTables:
    """One open-addressing map word id -> cost per utterance: keys (B, H) int32, costs (B, H) float32."""

    keys: np.ndarray
    costs: np.ndarray
    bits: np.ndarray  # (B, ceil(words / 32)) uint32: bit w set when word w is boosted
    unknown: tuple[tuple[int, str], ...]  # (utterance, word) not in the graph's vocabulary
    maps: tuple[dict, ...]  # per utterance: word id -> cost (-reward)

    @property
    def active(self) -> bool:
        return bool((self.keys >= 0).any())


def boost_tables(boost, batch: int, words: WordTable | None, beam: float) -> BoostTables:
    """Validate `boost` (None, one mapping for the batch, or one mapping or None per
    utterance) and build the per-utterance maps."""
    from wfst.kernels.common import EMPTY_KEY, hash_slot

    if boost is None:
        per_utt: Sequence = [None] * batch
    elif isinstance(boost, Mapping):
        per_utt = [boost] * batch
    elif isinstance(boost, Sequence) and not isinstance(boost, str):
        if len(boost) != batch:
            raise BoostError(f"boost has {len(boost)} entries but the batch has {batch} utterances")
        per_utt = boost
    else:
        raise BoostError(f"boost must be a mapping word -> reward, or one per utterance; got {type(boost).__name__}")
    ids = words.ids() if words is not None else {}
    unknown, maps, built = [], [], {}
    for b, m in enumerate(per_utt):
        if m is None:
            maps.append({})
            continue
        if not isinstance(m, Mapping):
            raise BoostError(f"utterance {b}: boost must be a mapping word -> reward; got {type(m).__name__}")
        if id(m) not in built:  # one mapping shared by many utterances is checked once
            known, missing = {}, []
            for word, reward in m.items():
                if not isinstance(reward, (int, float)) or isinstance(reward, bool) or not math.isfinite(reward):
                    raise BoostError(f"utterance {b}: boost of {word!r} is {reward!r}; it must be a finite number")
                if word not in ids or word in ("<eps>", "#0", "<s>", "</s>"):
                    missing.append(word)
                    continue
                if reward > beam / 2:
                    warnings.warn(f"boost {reward} for {word!r} is more than half the beam ({beam}); it can push "
                                  f"better paths out of the beam", stacklevel=3)
                known[ids[word]] = -float(reward)
            built[id(m)] = (known, missing)
        known, missing = built[id(m)]
        unknown += [(b, w) for w in missing]
        maps.append(known)
    H = 1
    while H < 2 * max((len(m) for m in maps), default=0):
        H *= 2
    keys = np.full((batch, H), EMPTY_KEY, np.int32)
    costs = np.zeros((batch, H), np.float32)
    bits = np.zeros((batch, (len(words or ()) + 31) // 32 or 1), np.uint32)
    rows: dict[int, int] = {}
    for b, m in enumerate(maps):
        if id(m) in rows:  # the same map: copy its row
            r = rows[id(m)]
            keys[b], costs[b], bits[b] = keys[r], costs[r], bits[r]
            continue
        rows[id(m)] = b
        for w, cost in m.items():
            bits[b, w >> 5] |= np.uint32(1 << (w & 31))
            slot = int(hash_slot(w, H - 1))
            while keys[b, slot] != EMPTY_KEY:
                slot = (slot + 1) & (H - 1)
            keys[b, slot] = w
            costs[b, slot] = cost
    if unknown:
        distinct = list(dict.fromkeys(w for _, w in unknown))
        shown = ", ".join(repr(w) for w in distinct[:10])
        warnings.warn(f"{len(distinct)} boosted word(s) are not in the graph's vocabulary and are ignored "
                      f"(listed in Decoder.stats.boost_unknown): {shown}{' ...' if len(distinct) > 10 else ''}",
                      stacklevel=3)
    return BoostTables(keys, costs, bits, tuple(unknown), tuple(maps))
