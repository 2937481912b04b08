"""Word error rate (kaldialign) and real-time factors, the way every table here reports them."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .errors import OptionError
from .files import split_fields

FRAME_SECONDS = 0.04  # one CTC frame = 40 ms of audio unless told otherwise


@dataclasses.dataclass(frozen=True)
class WordErrors:
    errors: int
    words: int
    substitutions: int = 0
    insertions: int = 0
    deletions: int = 0

    @property
    def rate(self) -> float:
        """errors / reference words; NaN without reference words (a rate of nothing is not 0%)."""
        return self.errors / self.words if self.words else float("nan")

    def __str__(self) -> str:
        rate = f"{100 * self.rate:.2f}%" if self.words else "undefined (the references have no words)"
        return (f"WER {rate} ({self.errors}/{self.words}: {self.substitutions} sub, "
                f"{self.insertions} ins, {self.deletions} del)")


def word_errors(refs: Sequence[Sequence[str] | str], hyps: Sequence[Sequence[str] | str]) -> WordErrors:
    """Edit distance summed over utterances (strings are split into words at ASCII spaces and
    tabs, as the graph's files are: a word may hold U+00A0 or U+3000)."""
    import kaldialign

    if len(refs) != len(hyps):
        raise OptionError(f"{len(refs)} references but {len(hyps)} hypotheses: give one hypothesis per reference")
    total = {"sub": 0, "ins": 0, "del": 0}
    words = 0
    for r, h in zip(refs, hyps):
        r = split_fields(r) if isinstance(r, str) else list(r)
        h = split_fields(h) if isinstance(h, str) else list(h)
        d = kaldialign.edit_distance(r, h)
        for k in total:
            total[k] += d[k]
        words += len(r)
    return WordErrors(sum(total.values()), words, total["sub"], total["ins"], total["del"])


def rtfx(frames: int, seconds: float, frame_seconds: float = FRAME_SECONDS) -> float:
    """Audio seconds decoded per second of decoding."""
    return frames * frame_seconds / seconds if seconds > 0 else float("inf")
