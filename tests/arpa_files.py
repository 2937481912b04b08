"""ARPA files made by code for the tests."""
from __future__ import annotations

import random


def random_arpa(path, symbols, order, seed, density=0.5, orphan_backoffs=0.0):
    """A random ARPA LM over `symbols` (log10 probabilities and backoffs drawn at random, not
    normalised: kenlm scores by the file as it is).  Its n-grams are closed under prefixes and
    suffixes and only contexts have backoffs, as an estimator's are, unless orphan_backoffs
    (the share of the other n-grams below the top order, <s> included, given one too, as
    pruned LMs keep them); <s> only starts and </s> only ends an n-gram."""
    rng = random.Random(seed)
    vocab = ["<unk>", "<s>", "</s>", *symbols]
    grams = {1: {(w,) for w in vocab}}
    for n in range(2, order + 1):
        grams[n] = set()
        for lower in sorted(grams[n - 1]):
            for w in vocab:
                g = (*lower, w)
                if (w == "<s>" or "</s>" in g[:-1] or "<s>" in g[1:] or g[1:] not in grams[n - 1]
                        or rng.random() > density):
                    continue
                grams[n].add(g)
    lines = ["", "\\data\\"] + [f"ngram {n}={len(grams[n])}" for n in grams] + [""]
    for n in grams:
        lines.append(f"\\{n}-grams:")
        for g in sorted(grams[n]):
            logp = -99.0 if g == ("<s>",) else -rng.uniform(0.1, 2.5)
            has_bo = n < order and (any(h[:-1] == g for h in grams[n + 1])  # a context, as lmplz writes them
                                    or (g[-1] != "</s>" and rng.random() < orphan_backoffs))
            bo = f"\t{-rng.uniform(0.0, 1.0):.4f}" if has_bo else ""
            lines.append(f"{logp:.4f}\t{' '.join(g)}{bo}")
        lines.append("")
    lines.append("\\end\\")
    path.write_text("\n".join(lines) + "\n")
    return path
