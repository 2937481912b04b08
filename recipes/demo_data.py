"""The demo's data (recipes/demo/data) for every recipe: its files, token sets and sentences."""
from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "demo" / "data"
LM = DATA / "lm.arpa"  # the demo 3-gram
TOKEN_SETS = {  # compile_graph's options for each token set
    "char": dict(tokens=DATA / "chars_tokens.txt", word_boundary="|"),
    "bpe": dict(tokens=DATA / "bpe_tokens.txt", spm=DATA / "bpe.model"),
}


def emission_options(token_set: str) -> dict:
    """wfst.synthetic.from_texts' options for a token set: how its text becomes tokens."""
    return {k: v for k, v in TOKEN_SETS[token_set].items() if k != "tokens"}


def sentences(split: str = "test", limit: int | None = None) -> list[str]:
    """The sentences of dev.txt or test.txt (non-empty lines), the first `limit` of them."""
    texts = [t for t in (DATA / f"{split}.txt").read_text(encoding="utf-8").splitlines() if t.strip()]
    return texts[:limit] if limit else texts
