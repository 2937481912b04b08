"""The demo's data (recipes/demo/data) for every recipe: its files, token sets and sentences."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "demo" / "data"
LM = DATA / "lm.arpa"  # the demo 3-gram
TOKEN_SETS = {  # compile_graph's options for each token set
    "char": dict(tokens=DATA / "chars_tokens.txt", word_boundary="|"),
    "bpe": dict(tokens=DATA / "bpe_tokens.txt", spm=DATA / "bpe.model"),
}


TOKEN_LMS = {  # token-level LMs of the same text, for the lexicon-free beam search (make_token_lms.py)
    "char": DATA / "chars_lm.arpa.gz",
    "bpe": DATA / "bpe_lm.arpa.gz",
}


def emission_options(token_set: str) -> dict:
    """wfst.synthetic.from_texts' options for a token set: how its text becomes tokens."""
    return {k: v for k, v in TOKEN_SETS[token_set].items() if k != "tokens"}


# what sentences() reads, as the comparison reports say it (dev, test)
HELD_OUT = ("`dev.txt` of the demo's held-out sentences", "`test.txt` of the demo's held-out sentences")


def sentences(split: str = "test", limit: int | None = None) -> list[str]:
    """The sentences of dev.txt or test.txt (non-empty lines), the first `limit` of them."""
    texts = [t for t in (DATA / f"{split}.txt").read_text(encoding="utf-8").splitlines() if t.strip()]
    return texts[:limit] if limit else texts


# The benchmarks' emission profiles (wfst.synthetic.from_texts options): the demo's, and a
# harder one nearer to where users live, with more confusions and noise.
PROFILES = {"demo": {}, "noisy": dict(confusion=0.15, noise=1.5)}


def with_unknown_words(texts: list[str], share: float = 0.5, seed: int = 0) -> list[str]:
    """The sentences with a made-up word (5-9 random letters, never in the LM) put at a random
    place in `share` of them: speech the graph cannot explain, which a TLG decoder must get
    through without losing the rest of the sentence."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for text in texts:
        words = text.split()
        if rng.random() < share:
            made_up = "".join(rng.choice(list("bcdfghjklmnpqrstvwxz")) if i % 2 else rng.choice(list("aeiouy"))
                              for i in range(int(rng.integers(5, 10))))
            words.insert(int(rng.integers(0, len(words) + 1)), made_up)
        out.append(" ".join(words))
    return out


def build_apart(out: Path, topology: str, cache_dir: Path, lm: Path = LM, **token_set) -> Path:
    """compile_graph of one graph in a fresh process (wfst-make-graph): its graph.json's peak
    memory is then its own build's, not the process's after the graphs built before it.
    token_set: a TOKEN_SETS entry.  Returns the graph directory."""
    options = {"tokens": "--tokens", "word_boundary": "--word-boundary", "spm": "--spm", "lexicon": "--lexicon"}
    argv = [sys.executable, "-m", "wfst.graphs.cli", "--lm", str(lm), "--topo", topology, "--out", str(out),
            "--cache-dir", str(cache_dir)]
    for key, value in token_set.items():
        argv += [options[key], str(value)]
    if subprocess.run(argv).returncode:  # (its progress and its error on this terminal)
        from wfst.errors import GraphBuildError

        raise GraphBuildError(f"building {out} failed (wfst-make-graph said why, above)")
    # The graph's own cache serves only a rebuild of this graph, whose build seconds would then
    # miss the cached stages: dropped, so that every build of it is from scratch.
    shutil.rmtree(cache_dir, ignore_errors=True)
    return out
