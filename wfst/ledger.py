"""A stream's host-side bookkeeping, the same on both backends.

A stream's search state is the tokens of its last frame and the backpointers stored since
its committed prefix; the backend keeps those (CPU arrays, or a lane of the GPU's stream
workspace).  The Ledger keeps the rest: frames decoded, where the kept backpointers and
log-probs start (`base`), the committed prefix, and what the endpoint rules read.  Partial
results and commits work on host arrays of the search state (the CPU's own, or a GPU
lane's copied back): the same code for both.
"""
from __future__ import annotations

import numpy as np

from wfst.kernels import constants as C

from .errors import WfstError
from .results import PathPart, blank_label

COMMIT_AT = 1 << 16  # backpointers at which a stream first tries to commit its path (then at each doubling)


class MeetingScratch:
    """kernels.cpu.meeting_point's scratch for partial results and commits: two arrays of -1
    at least as long as the backpointers asked for (the kernel leaves them so), grown by
    doubling (fresh arrays of every backpointer cost more than the walks: page faults).
    One per thread that walks (the decoder's lock keeps a thread's walks apart)."""

    def __init__(self):
        self.depth = self.meet = np.full(0, -1, np.int32)

    def at_least(self, stored: int) -> tuple[np.ndarray, np.ndarray]:
        if len(self.depth) < stored:
            size = max(stored, 2 * len(self.depth))
            self.depth, self.meet = np.full(size, -1, np.int32), np.full(size, -1, np.int32)
        return self.depth, self.meet


class Ledger:
    """frames: decoded; base: the first frame whose log-probs are kept (trace.steps[k] is
    step base + k); prefix: the committed path before base."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.frames = 0
        self.base = 0
        self.prefix = PathPart()
        self.survivors = 0  # tokens that survived pruning, summed over frames
        self.fallbacks = 0
        self.trailing, self.relative_cost = 0, float("inf")  # what the endpoint rules read
        self.next_commit = COMMIT_AT  # backpointers at which to try to commit (see commit)
        self.dead = False  # every token died: the search ended (kernels.common.died)
        self.idle = 0  # frames given after that, counted but neither kept nor read
        self._forget_stable()
        self._forget_trail()

    def kept_reads(self):
        """What the paths after the commit point may read of the frames' log-probs, from
        base on (kernels.cpu.KeptReads)."""
        raise NotImplementedError

    def drop_committed_reads(self, base: int, rows: int) -> int:
        """After a commit moved base on from `base`: what is kept of the log-probs of the
        frames before the new base goes (kept_reads' arrays, moved down in place): the
        blanks before the rows where the rows start at or after it, else the rows before it
        (rows: those in use).  Returns the rows dropped; the caller moves rows_from to base
        where there are any."""
        kept = self.kept_reads()
        if kept.rows_from >= self.base:  # (the meeting point's frame had no row: the blanks before it go)
            kept.blanks[:kept.rows_from - self.base] = kept.blanks[self.base - base:kept.rows_from - base]
            return 0
        gone = self.base - kept.rows_from
        kept.logp[:rows - gone] = kept.logp[gone:rows]
        return gone

    def set_endpoint_readings(self, trailing: int, voiced: bool, relative: float) -> None:
        """Blanks that ran back to the commit point: the prefix's last speech decides."""
        self.trailing = int(trailing) if voiced else self.frames - 1 - self.prefix.last_voiced
        self.relative_cost = float(relative)

    def partial(self, n: int, stored: int, scratch: MeetingScratch, words_after):
        """(word ids of the best path so far, their frames, how many of them are stable) of a
        search state with n tokens and `stored` backpointers.  words_after(since, depth,
        meet): kernels.cpu.partial_words of that state.  The stable words after the commit
        point are kept with the backpointer where they end (the last partial's meeting
        point), and the next partial walks the paths back to there only."""
        prefix = self.prefix
        if n == 0:  # no token, no path: the prefix alone
            return prefix.word_ids, prefix.word_frames, len(prefix.word_ids)
        word_ids, word_frames, stable, meet, status = words_after(self._stable_at, *scratch.at_least(stored))
        if status == C.PARTIAL_STALE:  # (not expected: every later path passes a meeting point)
            self._forget_stable()
            word_ids, word_frames, stable, meet, status = words_after(-1, *scratch.at_least(stored))
        if status == C.PARTIAL_LOOPS:
            raise WfstError("a stream's path loops: the graph has an epsilon cycle of zero or negative cost")
        return self.partial_found(word_ids.tolist(), word_frames.tolist(), stable, meet)

    def partial_found(self, word_ids: list, word_frames: list, stable: int, meet: int):
        """partial()'s result from what a walk back to the last meeting point found
        (kernels.cpu.partial_words: its words, their frames, how many are stable, the new
        meeting point), its status PARTIAL_OK and the search's tokens not none."""
        kept = len(self._stable_ids)
        ids, frames = self._stable_ids + tuple(word_ids), self._stable_frames + tuple(word_frames)
        if meet >= 0:
            self._stable_at = meet
            self._stable_ids, self._stable_frames = ids[:kept + stable], frames[:kept + stable]
        prefix = self.prefix
        return prefix.word_ids + ids, prefix.word_frames + frames, len(prefix.word_ids) + kept + stable

    @property
    def stable_at(self) -> int:
        """The backpointer where the stable words kept end (-1: none kept): the next partial
        walks back to it, and reads no backpointer of an earlier step."""
        return self._stable_at

    def _forget_stable(self) -> None:
        """No stable words kept past the commit point (after a commit, whose prefix took them,
        and at the start), nor the memo of the last partial's walk (kernels.cpu.partial_words:
        the backend's int64 array `partial_memo`, constants.PMEMO_*; a commit numbers the
        backpointers anew)."""
        self._stable_at, self._stable_ids, self._stable_frames = -1, (), ()
        self.partial_memo[C.PMEMO_AT] = -1

    def renumbered(self) -> None:
        """The backpointers were numbered anew (a commit, or a compaction that dropped those
        no live path passes): what names them is forgotten (the next partial walks back to
        the commit point again)."""
        self._forget_stable()
        self._forget_trail()

    def compacted(self, live: int) -> None:
        """The backend dropped the backpointers no live path passes (where a commit committed
        nothing), `live` kept: renumbered, and the next commit tried once they doubled."""
        self.renumbered()
        self.next_commit = max(2 * live, COMMIT_AT)

    def _forget_trail(self) -> None:
        """No memo of the walk back for trailing blanks (kernels.common.trailing_blanks: the
        backend's int64 array `trail_memo`, constants.TRAIL_*): at the start, and after a
        commit, which numbers the backpointers anew."""
        self.trail_memo[C.TRAIL_AT] = -1

    def commit_arrays(self, graph, tl, n: int, trace, stored: int, scratch: MeetingScratch):
        """Commit the path up to where the paths of all tokens meet, when that releases at
        least half of the backpointers: its words go to `prefix`, and the backpointers
        before it are dropped, in place: trace.prev / arc from 0 hold the `live` ones,
        trace.steps from 0 the steps from the meeting point's on, tl.prev points into them
        (kernels.cpu.commit_stream).  Tried each time the backpointers doubled, so that its
        cost stays a constant share of the search's.  scratch: meeting_point's (the walks
        start from the last partial's meeting point when there is one).  Returns (k, live):
        the steps dropped (the caller drops as many frames of log-probs and adds k to base)
        and the backpointers kept; None: nothing committed."""
        from wfst.kernels import cpu

        self.next_commit = 2 * stored  # tried again once the backpointers doubled
        kept = self.frames - self.base
        k, live, sums = cpu.commit_stream(tl, n, trace, stored, *scratch.at_least(stored), self._stable_at, kept,
                                          self.base, self.kept_reads(), graph.ilabel, graph.olabel, graph.weight,
                                          graph.nextstate, blank_label(graph))
        if k < 0:
            return None
        prefix = self.prefix + PathPart.of_sums(sums)
        if graph.tokens.num_columns < 1 << 16:  # its frames' tokens (labels <= V), for word times: 2 bytes a frame
            prefix.frame_tokens = prefix.frame_tokens.astype(np.uint16)
        self.prefix = prefix
        self.renumbered()  # (the prefix has the stable words)
        if trace.survivors is not None:
            left = min(kept - k + 2, len(trace.steps) - k)
            trace.survivors[:left] = trace.survivors[k:k + left]
        self.next_commit = max(2 * live, COMMIT_AT)
        self.base += k
        return k, live
