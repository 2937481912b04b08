"""The numbers both backends agree on: sentinels, status codes and workspace sizing.

Plain Python and NumPy (no Numba), so that the runtime can size and check a search
without compiling anything.  Kernels read these as compile-time constants.
"""
from __future__ import annotations

import numpy as np

# ---- sentinels
EMPTY_KEY = -1  # a hash-table slot that holds no key
NO_TOKEN = -1  # the backpointer of the start token (it has no predecessor)
NO_ARC = -1  # the start token's arc
NO_CTX = np.int32(0x7FFFFFFF)  # a slot's predecessor context before any word arc set it
MAX_KEY = np.uint32(0xFFFFFFFF)  # above every cost key: the empty minimum of cost keys
INF_KEY = np.uint32(0xFF800000)  # common.cost_key(+inf)
MAX_PACKED = np.uint64(0xFFFFFFFFFFFFFFFF)  # above every packed (cost, id): the empty minimum

# ---- what a search of one utterance ended with
OK = 0
TOKEN_OVERFLOW = 1  # more tokens in a frame than token slots: grow the token capacity
EPS_CYCLE = 2  # a zero-cost epsilon cycle made the backpointers loop: the graph is at fault
BP_OVERFLOW = 3  # (GPU) more backpointers than the per-frame budget allows: grow it
LM_OVERFLOW = 4  # (GPU) a frame needs more big-LM arc-cache slots than there are: grow the cache
LINK_OVERFLOW = 5  # (CPU lattices) more lattice links or stored tokens than the links buffer holds: grow it
MEMORY_OUT = 6  # (CPU) the backpointers outgrew the room the search was given: search alone, or refuse
MAX_BACKPOINTERS = 2**31 - 1  # backpointer ids are int32

# ---- the big LM's arc cache (GPU): counters, by index
LM_FILL, LM_ARRIVED, LM_LOOKUPS, LM_MISSES, LM_FETCHES, LM_CLEARS = range(6)
LM_COUNTERS = 8

# ---- the CPU's memo of context steps: counters, by index.  The word arcs of the tokens that
# ExpandArcs (both passes) and the closure expanded and the context steps they looked up
# (the others were out of reach of the beam), memo misses among the lookups, and the
# backoff arcs the misses followed in the big LM.
STEP_ARCS, STEP_LOOKUPS, STEP_CLOSURE_ARCS, STEP_CLOSURE_LOOKUPS, STEP_MISSES, STEP_BACKOFFS = range(6)
STEP_COUNTERS = 8


def hash_slots(capacity: int) -> int:
    """Slots of a token hash table: the power of two >= 2 x the token capacity (half full at
    worst, so that linear probes stay short)."""
    return 1 << max(2 * capacity - 1, 1).bit_length()


def default_token_capacity(max_active: int) -> int:
    """Token slots per utterance and frame when not given: a frame's tokens before pruning
    are a few times max_active (the survivors' arcs and their epsilon closure).  Up to
    65,536: where max_active does not bind (10^6), the beam does, far below that; the hash
    table of a few million slots would cost cache misses on every token (a wide char decode
    of the demo 1.6x slower), and a frame that needs more grows the capacity as any other."""
    return max(1024, 4 * min(max_active, 16384))


def backpointers_per_frame(capacity: int, max_active: int, min_active: int) -> int:
    """Backpointer slots the GPU reserves per frame, on average over an utterance (one pool
    of (frames + 1) x this per utterance): the survivors and their in-frame epsilon
    ancestors.  Far fewer than max_active survive most frames (129 and 601 on average on the
    demo's character and BPE graphs at beam 16 / 7,000), so a quarter of max_active is
    reserved; an utterance that fills its pool marks BP_OVERFLOW, is decoded again, and the
    budget doubles for the rest of the decoder's life."""
    return min(capacity, max(1024, max_active // 4) + min_active + 64)


def lm_cache_slots(num_arcs: int, cap: int = 1 << 22) -> int:
    """The GPU's big-LM arc cache: the power of two >= 2 x the big LM's arcs, at most 2 x cap."""
    return 1 << max(2 * min(max(num_arcs, 1), cap) - 1, 1).bit_length()


HASH_SLOT_BYTES = 28  # key 8, packed (cost, arc) 8, token 4, stamp 4, predecessor ctx 4
TOKEN_BYTES = 24  # state, ctx, cost, prev, arc, slot: 4 bytes each
SURVIVOR_BYTES = 40  # state, ctx, cost, gid (4 each), scan (8), mark, gid and two work lists
CPU_LINK_BYTES = 36  # a CPU lattice's room per link and stored token (kernels.lattice.Links: 9 arrays of 4 bytes)


def cpu_stream_bytes(capacity: int, lattice_links: int = 0) -> int:
    """Memory a CPU stream's own arrays take when it opens: its token list, a frame of
    backpointers and, where it keeps a lattice, its links buffer (the workspaces its chunks
    are searched in are its thread's, shared by all the streams)."""
    return capacity * TOKEN_BYTES + 8 * capacity + lattice_links * CPU_LINK_BYTES


def workspace_bytes(capacity: int, backpointers: int, num_frames: int, lattice_links: int = 0) -> int:
    """Memory one utterance's search needs on the GPU: two hash tables and token lists
    (double-buffered), the survivors and their scratch, and `backpointers` slots per frame
    (Capacity.backpointers); with `lattice_links` (a lattice is kept), the GPU's links
    (groups.DeviceLinks): a frame's listed links, two halves of stored ones, a forward cost
    per backpointer and the last step's costs."""
    lattice = 0
    if lattice_links:
        lattice = (20 * (lattice_links // 4) + 2 * 24 * lattice_links + 4 * (num_frames + 1) * backpointers
                   + 8 * capacity)
    return (2 * (hash_slots(capacity) * HASH_SLOT_BYTES + capacity * TOKEN_BYTES) + capacity * SURVIVOR_BYTES
            + 8 * (num_frames + 1) * backpointers + lattice)


def cpu_search_bytes(capacity: int, lattice_links: int = 0) -> int:
    """Memory one utterance's search needs on the CPU besides its backpointers: its thread's
    workspace (a hash table and a state-group map, a token list, the survivors and their
    scratch) and, where it keeps a lattice, its links.  The backpointers grow with what
    survives each frame, which no estimate knows beforehand (a few hundred a frame on clean
    speech, max_active on noise): the search checks them against the room it was given as
    they grow (MEMORY_OUT)."""
    return (2 * hash_slots(capacity) * HASH_SLOT_BYTES + capacity * (TOKEN_BYTES + SURVIVOR_BYTES + 16)
            + lattice_links * CPU_LINK_BYTES)


def backpointer_room(room_bytes: int | None) -> int:
    """The backpointers (8 bytes each: prev and arc) a CPU search may hold in `room_bytes`
    (None: no limit), counting the old and the new arrays both held while they grow."""
    return MAX_BACKPOINTERS if room_bytes is None else int(min(max(room_bytes // 8, 0), MAX_BACKPOINTERS))


# a CPU stream's numbers: its row of the backend's int64 array (kernels.cpu.advance_streams;
# S_LATTICE: 1 where it keeps a lattice, its links in the table's typed list; S_ROWS_FROM: the
# first frame whose row of log-probs it keeps, kernels.cpu.KeptReads)
(S_N, S_NS, S_STORED, S_FRAMES, S_BASE, S_FALLBACKS, S_SURVIVORS, S_TRAILING, S_LAST_VOICED,
 S_NEXT_COMMIT, S_CONTEXT, S_STABLE_AT, S_PARTIAL, S_LATTICE, S_ROWS_FROM, S_TRAIL) = range(16)
# frames of log-probs a CPU stream keeps at least before it may drop their rows (kernels.cpu.drop_rows)
ROWS_AT = 64
# the memo of a stream's last walk back for its trailing blanks (kernels.common.trailing_blanks):
# its first stored backpointer (-1: none), the blanks from it back, 1 where speech came before
# them; in a CPU stream's numbers from S_TRAIL on
TRAIL_AT, TRAIL_BLANKS, TRAIL_VOICED = range(3)
TRAIL_FIELDS = 3
# the memo of a stream's last partial walk whose paths met before its first word after the
# meeting point (kernels.cpu.partial_words): the backpointer its best path began at (-1: none),
# the meeting point it ran back to, a backpointer on the path of a token that met no later
# (the witness), the words after the meeting point (at most PMEMO_MAX_WORDS), then their ids,
# then their frames; in a CPU stream's numbers from S_PMEMO on
PMEMO_AT, PMEMO_SINCE, PMEMO_WITNESS, PMEMO_WORDS, PMEMO_HEAD = range(5)
PMEMO_MAX_WORDS = 6
PMEMO_FIELDS = PMEMO_HEAD + 2 * PMEMO_MAX_WORDS
S_PMEMO = S_TRAIL + TRAIL_FIELDS
STREAM_FIELDS = S_PMEMO + PMEMO_FIELDS
# a CPU stream's partial result as kernels.cpu.walk_partial finds it, its row of the backend's
# int32 array: the words found (-1: more than the row holds), how many are stable, the meeting
# point, the status, and the stream's S_FRAMES, S_BASE and S_STABLE_AT it was found at (the row
# is the stream's partial while they hold); then the word ids, then their frames (half each)
P_WORDS, P_STABLE, P_MEET, P_STATUS, P_FRAMES, P_BASE, P_SINCE, P_HEAD = range(8)
# a stream's S_CONTEXT: none, a context whose steps go in its thread's memo (the rescoring LM's
# alone: they depend on the LM only), or one with its own memo (phrases)
NO_CONTEXT, SHARED_MEMO, OWN_MEMO = 0, 1, 2
# advance_streams' counts: streams taken, survivors, streams flagged COMMIT_DUE or DIED
GROUP_COUNTS = 3
# advance_streams' flags per stream: bits (LINKS_FULL: with OVERFLOWED, the lattice's links filled, not
# the tokens)
COMMIT_DUE, OVERFLOWED, DIED, LINKS_FULL, BACKPOINTERS_FULL = 1, 2, 4, 8, 16  # (BACKPOINTERS_FULL: MEMORY_OUT)
# a partial result's path (kernels.cpu.partial_path): found; looping (an epsilon cycle); or the
# backpointer it was asked to start after is not on it (the caller asks again from the start)
PARTIAL_OK, PARTIAL_LOOPS, PARTIAL_STALE = 0, 1, 2
