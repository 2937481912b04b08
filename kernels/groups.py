"""The arrays of a search, bundled in named groups that both backends pass to their kernels.

Kaldi's CUDA decoder groups its device arrays the same way (token list, hash table,
survivors, backpointers, LM); here each group is a NamedTuple, which Numba passes to
``njit`` functions and ``cuda.jit`` kernels alike, with one field order for both
backends.  On the GPU a group's arrays have a leading batch axis (one row per utterance;
hash tables are flat, ``b * H + slot``, because atomics take 1-D arrays); on the CPU,
which searches one utterance per call, they have none.  Fields that one backend does
without are said so; the kernels never read them there.

Plain Python (no Numba): the runtime builds groups without compiling anything.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Settings(NamedTuple):
    """DecoderConfig as the kernels read it (one per decode call)."""

    beam: np.float32
    max_active: np.int64
    min_active: np.int64
    beam_delta: np.float32
    acoustic_scale: np.float32
    blank_ilabel: np.int64  # the blank's input label, -1 when the graph has none
    blank_penalty: np.float32
    top_n: np.int64  # FLToP: columns kept per frame (V: all)
    log_rel: np.float32  # FLToP: log R, columns kept within it of the best (-inf: all)
    context_beam: np.float32  # survivors expanded within it of their graph state's cheapest (+inf: all)


class CsrGraph(NamedTuple):
    """The graph as wfst.Graph holds it: emitting arcs of state s at e_indptr[s:s+2], input-epsilon
    arcs at ne_indptr[s:s+2] (the GPU's layout)."""

    e_indptr: np.ndarray
    ne_indptr: np.ndarray
    ilabel: np.ndarray
    olabel: np.ndarray
    weight: np.ndarray
    nextstate: np.ndarray
    final: np.ndarray
    start: np.int64
    num_states: np.int64


class InterleavedGraph(NamedTuple):
    """The CPU's layout of the graph (cpu.interleave_graph): a state's arcs side by side, one
    record per arc."""

    states: np.ndarray  # (S + 1, 4): first arc, first emitting word arc, first epsilon arc, first epsilon word arc
    arcs: np.ndarray  # (E, 5): ilabel, nextstate, weight bits, graph arc id, olabel
    final: np.ndarray
    start: np.int64
    ilabel: np.ndarray  # input label by graph arc id (what the arc ids on a traced path read)
    olabel: np.ndarray  # int32 output label by graph arc id (the words of a path's arc ids)


class Tokens(NamedTuple):
    """A frame's token list: token j of utterance b is (state, ctx, cost, prev, arc, slot)[b, j]."""

    state: np.ndarray  # graph state
    ctx: np.ndarray  # context state (LM state x phrase state; 0 without contexts)
    cost: np.ndarray  # float32 path cost
    prev: np.ndarray  # predecessor: a backpointer (>= 0), NO_TOKEN, or common.in_frame_prev(j): token j of this frame
    arc: np.ndarray  # the arc that made the token (graph arc id)
    slot: np.ndarray  # its hash-table slot (to clear the table cheaply)
    n: np.ndarray  # (B,) tokens per utterance (GPU; the CPU keeps the count in a local)


class HashTable(NamedTuple):
    """Recombination: one open-addressing table per utterance, keyed by common.token_key."""

    key: np.ndarray  # int64 token key, EMPTY_KEY when free
    val: np.ndarray  # uint64 best common.pack(cost, arc id) reaching the key
    tok: np.ndarray  # int32 the key's token index (-1: not listed yet)
    pctx: np.ndarray  # int32 predecessor's ctx of the best (the last tie-break)
    stamp: np.ndarray  # int32 closure round that last queued the slot (GPU); CPU: tie-breaks while the table grows
    count: np.ndarray  # (B,) keys inserted, to detect overflow (GPU); CPU: (1,) the mask of the slots in use


class Survivors(NamedTuple):
    """The tokens that survived pruning, which ExpandArcs expands."""

    state: np.ndarray
    ctx: np.ndarray
    cost: np.ndarray
    gid: np.ndarray  # their backpointer index
    scan: np.ndarray  # (GPU) exclusive prefix sum of their emitting-arc counts: one thread per arc
    n: np.ndarray  # (B,) survivors per utterance (GPU)


class Backpointers(NamedTuple):
    """(prev, arc) of every stored token of every frame, and where each frame starts."""

    prev: np.ndarray  # backpointer index of the predecessor, NO_TOKEN for the start token
    arc: np.ndarray
    n: np.ndarray  # (B,) stored so far (GPU)
    step_start: np.ndarray  # first backpointer of each step (step t: after t frames)
    gid: np.ndarray  # backpointer index of each token of the current frame
    mark: np.ndarray  # uint8: the token is a survivor or an in-frame ancestor of one (2: folded, prune_store_kernel)


class Automata(NamedTuple):
    """Deterministic automata with backoff (failure) arcs in CSR form, one per row: an n-gram
    LM (one row) or the batch's phrase-boosting automata (a row per utterance).  State s of
    row r has its arcs' labels sorted in labels[r, offsets[r, s]:offsets[r, s + 1]];
    a label missing there is looked for again at backoff[r, s] after paying bo_weight[r, s]
    (common.automaton_locate)."""

    offsets: np.ndarray
    labels: np.ndarray
    backoff: np.ndarray  # -1: no backoff (the root)
    bo_weight: np.ndarray
    payload: np.ndarray  # uint64 per arc: weight bits << 32 | next state (one read per arc)
    final: np.ndarray  # float32 per state


class Context(NamedTuple):
    """What tokens carry besides their graph state: the state of an on-the-fly rescoring LM
    and of a phrase-boosting automaton, ctx = lm_state * phrase_states[row] + phrase_state.

    Rescoring (Kaldi's biglm): a word arc adds big-LM cost - graph-LM cost; the graph LM's
    state is small_of[the big LM's state].  Phrases: the utterance's Aho-Corasick automaton
    (row `row` of `phrases`; one state, i.e. none, when phrase_states[row] == 1)."""

    rescoring: bool
    phrase_states: np.ndarray  # int32 (rows,): states of each row's phrase automaton
    lm: Automata  # the big LM, one row (on the GPU its payload and final costs are in host memory)
    lm0: Automata  # the graph's own LM, one row
    small_of: np.ndarray  # int32 big-LM state -> graph-LM state
    lm_map: np.ndarray  # int32 graph word id -> big-LM word id
    lm0_map: np.ndarray  # int32 graph word id -> graph-LM word id
    phrases: Automata  # one row per utterance
    start: np.ndarray  # int32 (rows,): the context of each row's start token
    gain: np.ndarray  # float32 per big-LM state: common.lm_gain_bounds (+inf: no bound; one entry without rescoring)
    spread: float  # how far single-word boosts may put a word arc's weight below an earlier arc's in its
                   # state's order of unboosted weights (cpu.interleave_graph): a reward plus a penalty
    buckets: np.ndarray  # uint8 (states, common.GAIN_BUCKETS): `gain` per bucket of words, coded (CPU only)


class WordBoosts(NamedTuple):
    """The GPU's single-word boosts: each utterance's map word id -> cost as a row of an
    open-addressing table, and a bit per word (set: boosted) so that most words need no probe."""

    keys: np.ndarray  # int32 (B, H), EMPTY_KEY: free
    costs: np.ndarray  # float32 (B, H)
    bits: np.ndarray  # uint32 (B, ceil(words / 32))
    active: bool  # some utterance boosts a word


class Memo(NamedTuple):
    """The CPU's memo of context steps (cpu._word_step) and what the search did with them."""

    table: np.ndarray  # int64 (slots, 2): (key, cost bits << 32 | next ctx), key EMPTY_KEY: free
    counts: np.ndarray  # int64 (STEP_COUNTERS,): constants.STEP_ARCS, ...


class ArcCache(NamedTuple):
    """The GPU's cache of big-LM arcs (the on-the-fly rescoring paper's Algorithms 1-2):
    payloads fetched from host memory, keyed by arc position."""

    keys: np.ndarray  # int64 arc position, EMPTY_KEY: free
    vals: np.ndarray  # uint64 payload, MAX_PACKED until stored
    counts: np.ndarray  # int64 (LM_COUNTERS,): constants.LM_FILL, ...


class Utterances(NamedTuple):
    """Per-utterance state of a GPU batch."""

    lengths: np.ndarray  # int64 frames
    status: np.ndarray  # int32 constants.OK, TOKEN_OVERFLOW, ...
    adaptive_beam: np.ndarray  # float32 this frame's beam (Kaldi's adaptive beam)
    min_key: np.ndarray  # uint32 cost key of the best new token this frame
    keep: np.ndarray  # int64 backpointer of the best token at the end (-1: none)
    reached_final: np.ndarray  # uint8
    survivors: np.ndarray  # int64 survivors summed over frames (for stats)
    fallbacks: np.ndarray  # int32 frames that FLToP emptied and were expanded again unpruned
    redo: np.ndarray  # uint8 this frame is expanded again without FLToP
    arcs: np.ndarray  # int32 emitting arcs of this frame's survivors
    arc_start: np.ndarray  # int64 (B + 1,) the batch's prefix sums of arcs (utterances still searching)
    token_start: np.ndarray  # int64 (B + 1,) and of the new frame's listed tokens
    first: np.ndarray  # int64 the first frame step of this launch the utterance takes part in (0 but for streams)
    steps: np.ndarray  # int64 steps stored in the backpointers so far (bp.step_start's next row)
    opening: np.ndarray  # uint8 init and the initial closure start this utterance's search
    closing: np.ndarray  # uint8 step `lengths` is the search's last (keep the best token); a stream's lanes: 0


class StoredLinks(NamedTuple):
    """(GPU lattices) Links renumbered into backpointers, with their reduced costs (as
    kernels.lattice.store_links leaves them on the CPU), in two halves: the steps of chunk
    k (`interval` steps each) go to half k % 2, which the host copies while the search
    fills the other.  Arrays (2, B, ...)."""

    src: np.ndarray  # int32 (2, B, S) source backpointer
    dst: np.ndarray  # int32 (2, B, S) destination backpointer
    arc: np.ndarray  # int32 (2, B, S) graph arc id
    graph: np.ndarray  # float32 (2, B, S)
    acoustic: np.ndarray  # float32 (2, B, S)
    reduced: np.ndarray  # float32 (2, B, S)
    count: np.ndarray  # int64 (2, B): links held in each half
    block: np.ndarray  # int64 (2, B, interval + 1): first link of each step of the chunk (and the end)
    steps: np.ndarray  # int64 (2, B, interval + 1): first backpointer of each step of the chunk (and the end)


class DeviceLinks(NamedTuple):
    """(GPU lattices) A frame's links as its tokens settle, in the frame's own numbering (a
    survivor's backpointer or common.in_frame_prev(j) as source, a token index as
    destination), stored at the next step's pruning; what that needs besides."""

    src: np.ndarray  # int32 (B, R)
    dst: np.ndarray  # int32 (B, R)
    arc: np.ndarray  # int32 (B, R)
    graph: np.ndarray  # float32 (B, R): the link's cost but the acoustic one
    acoustic: np.ndarray  # float32 (B, R)
    n: np.ndarray  # int32 (B,): the frame's links listed
    stored: StoredLinks
    alpha: np.ndarray  # float32 (B, P): forward cost of each stored token, by backpointer
    final_alpha: np.ndarray  # float32 (B, C): of the last step's tokens, by backpointer - the step's first
    final_cost: np.ndarray  # float32 (B, C): and their final costs (0 when no final state was reached)
    beam: np.float32
    interval: np.int64


class Acoustics(NamedTuple):
    """The batch's log-probabilities and the current frame's cost of each input label."""

    log_probs: np.ndarray  # float32 (B, T, V)
    costs: np.ndarray  # float32 (B, V + 1): cost of consuming the frame with input label il


def settings_of(config, blank_ilabel: int, num_columns: int) -> Settings:
    """The kernels' Settings of a wfst.DecoderConfig."""
    top_n, log_rel = config.fltop(num_columns)
    f32 = np.float32
    return Settings(f32(config.beam), np.int64(config.max_active), np.int64(config.min_active), f32(config.beam_delta),
                    f32(config.acoustic_scale), np.int64(blank_ilabel), f32(config.blank_penalty), np.int64(top_n),
                    f32(log_rel), f32(np.inf if config.context_beam is None else config.context_beam))
