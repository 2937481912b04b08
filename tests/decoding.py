"""Shared fixtures-by-code for the decoder tests: random graphs, emissions, the tiny TLG."""
from __future__ import annotations

import numpy as np
import pywrapfst as fst

from wfst import synthetic
from wfst.graph import graph_from_fst
from wfst.symbols import TokenTable, WordTable


def random_tlg(seed: int, num_states: int = 12, num_columns: int = 4, num_words: int = 5,
               arcs_per_state: int = 3, eps_per_state: int = 1, negative: bool = True):
    """A random CTC-like graph: emitting arcs anywhere, input-epsilon arcs only to
    higher-numbered states (no epsilon cycles, as in a G with backoffs), some words on
    epsilon arcs, negative costs allowed.  Returns (pywrapfst fst, Graph)."""
    rng = np.random.default_rng(seed)
    f = fst.VectorFst()
    for _ in range(num_states):
        f.add_state()
    f.set_start(0)
    low = -0.5 if negative else 0.0
    w = lambda: fst.Weight(f.weight_type(), float(np.float32(rng.uniform(low, 3.0))))  # noqa: E731
    for s in range(num_states):
        for _ in range(rng.integers(1, arcs_per_state + 1)):
            il = int(rng.integers(1, num_columns + 1))
            ol = int(rng.integers(0, num_words + 1)) if rng.random() < 0.4 else 0
            f.add_arc(s, fst.Arc(il, ol, w(), int(rng.integers(0, num_states))))
        for _ in range(rng.integers(0, eps_per_state + 1)):
            if s + 1 < num_states:
                ol = int(rng.integers(1, num_words + 1)) if rng.random() < 0.3 else 0
                f.add_arc(s, fst.Arc(0, ol, w(), int(rng.integers(s + 1, num_states))))
        if rng.random() < 0.4:
            f.set_final(s, w())
    f.set_final(num_states - 1, w())
    tokens = TokenTable(tuple(["<blk>"] + [f"t{i}" for i in range(1, num_columns)]), blank=0)
    f.arcsort("ilabel")
    return f, graph_from_fst(f, tokens)


def tied_tlg():
    """Two words spelled alike ("x", "y": the token t1 and any blanks and t1s after it):
    every frame's best cost is held by two tokens, so max_active=1 binds on a tie.
    Returns (pywrapfst fst, Graph)."""
    f = fst.VectorFst()
    for _ in range(3):
        f.add_state()
    f.set_start(0)
    w = lambda c: fst.Weight(f.weight_type(), c)  # noqa: E731
    for s in (1, 2):
        f.add_arc(0, fst.Arc(2, s, w(0.5), s))
        f.add_arc(s, fst.Arc(1, 0, w(0.0), s))
        f.add_arc(s, fst.Arc(2, 0, w(0.0), s))
        f.set_final(s, w(0.0))
    f.arcsort("ilabel")
    return f, graph_from_fst(f, TokenTable(("<blk>", "t1"), blank=0), WordTable.from_words(["x", "y"]))


def random_log_probs(seed: int, batch: int, frames: int, columns: int, sharpness: float = 2.0) -> np.ndarray:
    """Random log-softmax rows (float32)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, frames, columns)) * sharpness
    x = x - np.log(np.exp(x).sum(-1, keepdims=True))
    return x.astype(np.float32)


def top_k_only(log_probs: np.ndarray, k: int) -> np.ndarray:
    """Keep the k best columns of each frame (others -inf: probability zero), so that
    OpenFST's exact composition with a large graph stays small."""
    kth = np.sort(log_probs, axis=-1)[..., -k][..., None]
    return np.where(log_probs >= kth, log_probs, -np.inf).astype(np.float32)


def demo_emissions(demo, graph, kw, count, seed=1):
    """Synthetic emissions of held-out sentences whose words are all in the vocabulary."""
    vocab = graph.words.ids()
    lines = [ln for ln in (demo / "test.txt").read_text().splitlines() if ln.strip()]
    texts = [t for t in lines if all(w in vocab for w in t.split())][:count]
    x, lengths = synthetic.from_texts(texts, graph.tokens, spm=kw.get("spm"),
                                      word_boundary=kw.get("word_boundary"), seed=seed)
    return texts, x, lengths


def dying(g, x, lengths, starts):
    """x with utterance b's frames from starts[b] on masked to one random letter each, blank
    impossible: a spelling no word has, where every token dies part-way."""
    x = x.copy()
    rng = np.random.default_rng(5)
    letters = [c for c in range(g.tokens.num_columns) if c != g.tokens.blank]
    for b, t0 in enumerate(starts):
        T = int(lengths[b])
        x[b, t0:T] = -np.inf
        x[b, np.arange(t0, T), rng.choice(letters, T - t0)] = 0.0
    return x


def one_array(chunks: list, T: int):
    """The chunks as one (N, T, V) array, as a batched model gives them, and their lengths
    (None where every chunk has T frames); NaN past each chunk's length (never read)."""
    batch = np.full((len(chunks), T, chunks[0].shape[1]), np.nan, np.float32)
    for k, chunk in enumerate(chunks):
        batch[k, :len(chunk)] = chunk
    lengths = [len(chunk) for chunk in chunks]
    return batch, None if min(lengths) == T else np.array(lengths)
