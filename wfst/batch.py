"""A batch on its way through a backend: the per-batch plan and the search's capacities.

The Decoder validates a batch once and hands the backend a BatchPlan; the backend runs
one pass of the search over some of its utterances and says, per utterance, how it
ended.  Capacity growth after an overflow happens in one place, Capacity.grown.
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np

from wfst.kernels.constants import BP_OVERFLOW, LINK_OVERFLOW, LM_OVERFLOW, TOKEN_OVERFLOW, backpointers_per_frame
from wfst.kernels.groups import Settings

from .results import TracedPath


@dataclasses.dataclass(frozen=True)
class Capacity:
    """How much room a search has; every field doubles when a search overflows it."""

    tokens: int  # token slots per utterance and frame
    backpointers: int  # backpointer slots per frame (GPU; the CPU grows its own)
    lm_cache: int | None = None  # big-LM arc-cache slots (GPU); None: sized from the LM
    links: int = 0  # lattice links and stored tokens per utterance (lattices; 0: LINKS_PER_TOKEN x tokens)

    @classmethod
    def initial(cls, tokens: int, max_active: int, min_active: int) -> Capacity:
        return cls(tokens, backpointers_per_frame(tokens, max_active, min_active))

    @property
    def lattice_links(self) -> int:
        return self.links or LINKS_PER_TOKEN * self.tokens

    def grown(self, statuses) -> Capacity:
        """The capacity after a pass whose utterances ended with these statuses."""
        statuses = set(statuses)
        return Capacity(self.tokens * (2 if TOKEN_OVERFLOW in statuses else 1),
                        self.backpointers * (2 if BP_OVERFLOW in statuses else 1),
                        self.lm_cache * 2 if LM_OVERFLOW in statuses and self.lm_cache else self.lm_cache,
                        self.lattice_links * 2 if LINK_OVERFLOW in statuses else self.links)


# A lattice's links buffer holds the raw links of the frames since the last pruning, the
# pruned lattice before them and every stored token's forward cost: 16 per token slot
# (448k links, 12 MiB, at max_active 7,000) held the demo's longest utterances at beam 16.
LINKS_PER_TOKEN = 16


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """What a backend needs to search a batch, validated."""

    log_probs: Any  # (B, T, V) float32, in the backend's memory (NumPy, or device arrays)
    lengths: np.ndarray  # int64 (B,)
    boosts: Any  # wfst.boost.BoostTables: per utterance its word map and phrase automaton
    rescorer: Any  # wfst.lm.Rescorer or None
    settings: Settings
    capacity: Capacity
    lattice: tuple | None = None  # (lattice beam, prune interval) when lattices are kept, else None


class Outcome(NamedTuple):
    """How one utterance's search ended: kernels.constants.OK with its path, or why not."""

    status: int
    path: TracedPath | None = None
    frame: int = 0  # MEMORY_OUT: the frame whose backpointers did not fit
    stored: int = 0  # MEMORY_OUT: the backpointers stored before it
