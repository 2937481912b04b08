"""Context automata (on-the-fly rescoring LMs, phrase boosting) as the kernels take them.

A token's context is the state of the big LM and of its utterance's phrase automaton
(kernels.groups.Context).  Both are deterministic automata with backoff arcs; here they
become kernels.groups.Automata rows: an LM is one row, a batch's phrase automata one row
each.  The arithmetic of a context step is kernels.common.context_step, shared by both
backends.
"""
from __future__ import annotations

import numpy as np

from wfst.kernels.common import pack_payloads
from wfst.kernels.groups import Automata, Context


def automata(parts, *, labels_dtype=np.int32, offsets_dtype=np.int64) -> Automata:
    """Rows of backoff automata, padded to the largest; each part is (offsets, labels, weights,
    nexts, backoff, bo_weight, final) of one automaton (an LM store's arrays may be
    memory-mapped and large: the payloads are packed from them in one compiled pass)."""
    R = len(parts)
    N = max(len(p[4]) for p in parts)
    A = max(max(len(p[1]) for p in parts), 1)
    offsets = np.empty((R, N + 1), offsets_dtype)
    labels = np.zeros((R, A), labels_dtype)
    payload = np.zeros((R, A), np.uint64)
    backoff = np.full((R, N), -1, np.int32)
    bo_weight, final = np.zeros((R, N), np.float32), np.zeros((R, N), np.float32)
    for r, (o, lab, w, nxt, bo, bw, fin) in enumerate(parts):
        n, k = len(bo), len(lab)
        offsets[r, :n + 1] = o
        offsets[r, n + 1:] = o[-1]
        labels[r, :k] = lab
        pack_payloads(np.asarray(w, np.float32).view(np.uint32), np.asarray(nxt, np.int32), payload[r, :k])
        backoff[r, :n], bo_weight[r, :n], final[r, :n] = bo, bw, fin
    return Automata(offsets, labels, backoff, bo_weight, payload, final)


def lm_automaton(store, **dtypes) -> Automata:
    """An LmStore as one row, its final costs the cost of reading </s> (backoffs included)."""
    return automata([(store.offsets, store.labels, store.weights, store.nexts, store.backoff, store.bo_weight,
                      store.final)], **dtypes)


def no_lm() -> Automata:
    """A one-state automaton with no arcs: the LMs of a context without rescoring."""
    return automata([(np.zeros(2, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32), np.zeros(0, np.int32),
                      np.full(1, -1, np.int32), np.zeros(1, np.float32), np.zeros(1, np.float32))])


def context(rescorer, phrase_automata, spread: float = 0.0) -> Context:
    """The Context of utterances with these phrase automata (wfst.boost.PhraseAutomaton, one
    row each) and the rescoring LMs of `rescorer` (wfst.lm.Rescorer) or none; spread: how far
    single-word boosts may move a word arc's weight below an earlier one's
    (BoostTables.weight_spread)."""
    phrases = automata([a.automaton() for a in phrase_automata])
    sizes = np.array([a.num_states for a in phrase_automata], np.int32)
    if rescorer is None:
        lm = no_lm()
        zero = np.zeros(1, np.int32)
        return Context(False, sizes, lm, lm, zero, zero, zero, phrases, np.zeros(len(sizes), np.int32),
                       np.zeros(1, np.float32), np.float32(spread), no_buckets())
    big, small = rescorer.automata()
    return Context(True, sizes, big, small, rescorer.small_of, rescorer.lm_map, rescorer.lm0_map, phrases,
                   (sizes * rescorer.big.start).astype(np.int32), rescorer.gain, np.float32(spread),
                   rescorer.buckets)


def no_buckets():
    """Context.buckets where they are not read (no rescoring; the GPU)."""
    from wfst.kernels.common import BUCKET_NONE, GAIN_BUCKETS

    return np.full((1, GAIN_BUCKETS), BUCKET_NONE, np.uint8)
