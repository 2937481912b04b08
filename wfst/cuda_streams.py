"""device="cuda" streams: lanes of one workspace whose search state lives from call to call.

Each open stream owns a lane: a row of every workspace array (token buffers, hash tables,
backpointers) and of the word-boost and phrase tables.  advance() copies the streams'
chunks into a launch buffer, all in one transfer, and runs frame steps (kernels.cuda.Steps)
over the workspace.
A lane's tokens stand in token buffer frames % 2, so it takes part in the launch's steps
first = that buffer .. first + its chunk's frames - 1 (u.first, u.lengths): every lane
alternates buffers as an offline search does, at most one step late.  Lanes not advanced
sit the launch out (first 1, lengths -1); the kernels return at once for them.

What is rare or once per stream runs on the host on copies of a lane, with the CPU
backend's code (wfst.ledger): partial results, commits of the stable prefix (which
release backpointers and frames, so a lane's state stays bounded) and the last step.  A
lane whose frame overflows its token capacity, backpointers or the big LM's arc cache is
rolled back to that frame's tokens, the workspace grows (its lanes' tokens re-entered
into larger tables: kernels.cuda.adopt_kernel) and the frame goes on from there.
"""
from __future__ import annotations

import weakref
from typing import NamedTuple

import numpy as np

from wfst.kernels import constants as C
from wfst.kernels.groups import Acoustics, Automata, Context, Tokens, WordBoosts

from . import contexts
from .boost import BoostTables
from .cuda_arrays import SIMULATOR, device_views, on_device, to_host
from .ledger import Ledger, MeetingScratch
from .results import TracedPath, blank_label

_FIRST_LANES = 4
_FIRST_STEP_ROWS = 130  # bp.step_start rows per lane: frames since the commit point + 2


_DROP_ROWS_AT = 256  # rows of log-probs a stream holds before its lane is read to drop them (CudaStream.drop_rows)


def _read(a) -> np.ndarray:
    """A host copy of a device array (in the simulator, of the array itself)."""
    return np.array(to_host(a))


class _LaneCopy(NamedTuple):
    """Lanes' arrays copied to the host (StreamLanes._host_copy): row i is the i-th stream's."""

    stored: np.ndarray  # backpointers stored
    bp: tuple  # bp.prev, bp.arc, bp.step_start
    tokens: list  # per token buffer in use: (buffer, the streams' indices, their token counts, tok[:6])


class _Finals(NamedTuple):
    """What kernels.cpu.finish reads of a graph."""

    final: np.ndarray


class CudaStream(Ledger):
    """One stream on the GPU: its lane, and what of the log-probs of frames base.. the host
    work reads (the path's scores at commits and at finish), in host memory: the rows of
    frames rows_from.. (hist) and, before them, the blank's log-prob of each frame and each
    backpointer's read (kernels.cpu.KeptReads, as the CPU's streams keep them)."""

    def __init__(self, lanes: StreamLanes, lane: int, capacity: int, boost_map: dict, phrases):
        self.trail_memo = np.full(C.TRAIL_FIELDS, -1, np.int64)  # (its lane's row of readings_kernel's memo)
        self.partial_memo = np.full(C.PMEMO_FIELDS, -1, np.int64)  # (kernels.cpu.partial_words', on the host)
        super().__init__(capacity)
        self.lane, self.boost_map, self.phrases, self._lanes = lane, boost_map, phrases, lanes
        self.hist = np.empty((0, lanes.V), np.float32)
        self.held = 0  # rows of hist in use: frames rows_from.. up to those of chunks not decoded yet
        self.rows_from = 0
        self.blanks = self.reads = np.empty(0, np.float32)
        self.drop_at = _DROP_ROWS_AT  # rows held (of decoded frames) at which drop_rows is tried

    @property
    def buffer(self) -> int:
        """The token buffer the lane's tokens stand in."""
        return self.frames % 2

    @property
    def stored(self) -> int:
        """The backpointers its lane holds (a read of the device)."""
        return int(_read(self._lanes.ws_x.bp.n[self.lane:self.lane + 1])[0])

    def kept_reads(self):
        from wfst.kernels import cpu

        return cpu.KeptReads(self.hist, self.rows_from, self.blanks, self.reads)

    def append(self, chunk: np.ndarray) -> None:
        """Keep the chunk's log-probs (they follow those of earlier chunks; a call appends
        before it decodes)."""
        kept = self.held
        if kept + len(chunk) > len(self.hist):
            grown = np.empty((max(kept + len(chunk), 2 * len(self.hist)), self.hist.shape[1]), np.float32)
            grown[:kept] = self.hist[:kept]
            self.hist = grown
        self.hist[kept:kept + len(chunk)] = chunk
        self.held += len(chunk)

    def committed(self, base: int) -> None:
        """A commit moved base on from `base`: the log-probs of the frames before it go."""
        gone = self.drop_committed_reads(base, self.held)
        if gone:
            self.held -= gone
            self.rows_from = self.base
            self.drop_at = _DROP_ROWS_AT

    def drop_rows(self, trace, stored: int, ilabel, blank: int) -> None:
        """kernels.cpu.drop_rows on a copy of the lane (trace: its backpointers from the step
        of frame rows_from + 1 on, `stored`): in a silence whose paths never meet nothing is
        committed, and the rows (V * 4 bytes a frame) were what grew.  Where the rows are
        the cheaper, tried again once they doubled."""
        from wfst.kernels import cpu

        decoded = self.frames - self.rows_from
        kept = cpu.drop_rows(trace, self.kept_reads(), self.base, self.frames, stored, ilabel, blank)
        if kept.rows_from == self.rows_from:
            self.drop_at = 2 * decoded
            return
        gone = kept.rows_from - self.rows_from  # (drop_rows moved the decoded rows; those of chunks to come follow)
        self.hist[decoded - gone:self.held - gone] = self.hist[decoded:self.held].copy()
        self.held -= gone
        self.hist, self.rows_from, self.blanks, self.reads = kept.logp, kept.rows_from, kept.blanks, kept.reads
        self.drop_at = _DROP_ROWS_AT


class StreamLanes:
    """The streams of one CudaBackend: a workspace of lanes, grown as streams come."""

    def __init__(self, backend, settings, rescorer, capacity):
        self.backend, self.settings, self.rescorer = backend, settings, rescorer
        self.xp = backend.xp
        self.V = backend.graph.tokens.num_columns
        self.capacity = capacity.tokens
        self.bp_per_frame = capacity.backpointers
        self.lm_slots = capacity.lm_cache if rescorer is not None else 1
        self.rows = _FIRST_STEP_ROWS
        self.P = self.rows * self.bp_per_frame  # backpointer slots per lane
        self.lanes: list = []  # per lane: a weak reference to its CudaStream, or None (free)
        self._meeting = MeetingScratch()  # the partial results' and commits' scratch (on the host)
        self.ws_x = self.ws = None
        self._x = None  # the launch buffer (lanes, steps, V)
        self._graphs = None  # (the arrays held, the two frame steps as CUDA graphs): _run_steps
        self._build(_FIRST_LANES, self.capacity, self.rows)

    # ------------------------------------------------------------------ lanes

    @property
    def L(self) -> int:
        return len(self.lanes)

    def _stream(self, lane: int):
        ref = self.lanes[lane]
        return ref() if ref is not None else None

    def _build(self, L: int, capacity: int, rows: int, P: int | None = None) -> None:
        """A workspace of L lanes at this capacity, step rows and backpointer slots (P: as
        before); the lanes in use move in."""
        from wfst.kernels import cuda as K

        xp, old, old_L = self.xp, self.ws_x, self.L
        self._graphs = None  # they hold the old arrays
        P = self.P if P is None else P
        ws = self.backend.workspace_arrays(L, rows, P, capacity, traceback=False)
        ws = ws._replace(u=ws.u._replace(lengths=xp.zeros(L, np.int64)))
        ws.u.opening[...] = 0
        ws.u.closing[...] = 0  # the last step runs on the host (finish)
        if old is not None:
            o_rows, o_P = old.bp.step_start.shape[1], old.bp.prev.shape[1]
            for mine, theirs in ((ws.u.steps, old.u.steps), (ws.u.survivors, old.u.survivors),
                                 (ws.u.fallbacks, old.u.fallbacks), (ws.bp.n, old.bp.n)):
                mine[:old_L] = theirs
            ws.bp.prev[:old_L, :o_P] = old.bp.prev
            ws.bp.arc[:old_L, :o_P] = old.bp.arc
            ws.bp.step_start[:old_L, :o_rows] = old.bp.step_start
            buffer = np.full(L, -1, np.int8)
            for lane in range(old_L):
                s = self._stream(lane)
                if s is not None:
                    buffer[lane] = s.buffer
            views = device_views(old)
            new = device_views(ws)
            K.adopt_kernel[old_L, self.backend.block](on_device(xp.asarray(buffer)), views.tokens[0], views.tokens[1],
                                                    new.tokens[0], new.tokens[1], new.tables[0], new.tables[1],
                                                    capacity)
        self.lanes += [None] * (L - old_L)
        self.ws_x, self.ws = ws, device_views(ws)
        self.capacity, self.rows, self.P = capacity, rows, P
        for s in filter(None, map(self._stream, range(L))):
            s.capacity = capacity
        self._readings = tuple(xp.zeros(L, d) for d in (np.int32, np.uint8, np.float32, np.uint8))
        self._costs = xp.zeros((L, self.V + 1), np.float32)
        self._tables()

    def _tables(self) -> None:
        """The lanes' word boosts and context (phrase automata, the LMs) on the device."""
        from .boost import NO_PHRASES

        streams = [self._stream(lane) for lane in range(self.L)]
        maps = tuple(s.boost_map if s is not None else {} for s in streams)
        phrases = tuple(s.phrases if s is not None else NO_PHRASES for s in streams)
        dev = self.backend.to_device
        keys, costs, bits = BoostTables((), maps, phrases, len(self.backend.graph.words or ())).hash_maps(
            range(self.L))
        self.boosts = WordBoosts(dev(keys), dev(costs), dev(bits), bool((keys >= 0).any()))
        host = contexts.context(None, phrases)
        sizes = host.phrase_states
        start = (sizes * (self.rescorer.big.start if self.rescorer is not None else 0)).astype(np.int32)
        lm = self.backend._lm_parts(self.rescorer)
        self.context = Context(self.rescorer is not None, dev(sizes), *lm[:2], *lm[2:5],
                               Automata(*(dev(a) for a in host.phrases)), dev(start), lm[5], np.float32(0.0),
                               dev(contexts.no_buckets()))
        self.with_contexts = self.rescorer is not None or bool((sizes > 1).any())
        self._boosted = [s is not None and self._boosting(s) for s in streams]

    @staticmethod
    def _boosting(s: CudaStream) -> bool:
        """Whether the stream's row of the boost and phrase tables is not a plain one."""
        return bool(s.boost_map) or s.phrases.num_states > 1

    def _reset(self, lane: int) -> None:
        """An empty lane: no tokens, hash tables, backpointers or counts."""
        ws = self.ws_x
        for buffer in (0, 1):
            self._empty(lane, buffer)
        for a, value in ((ws.bp.n, 0), (ws.u.steps, 0), (ws.u.status, C.OK), (ws.u.survivors, 0),
                         (ws.u.fallbacks, 0), (ws.u.keep, -1), (ws.u.reached_final, 0)):
            a[lane] = value

    def _steps(self, x, stream=0):
        from wfst.kernels import cuda as K

        b = self.backend
        launch = K.Launch(self.L, b.block, b.flat_blocks, b.block if SIMULATOR else 256,
                          b.block if SIMULATOR else K.SCAN_BLOCK, 1 if SIMULATOR else 64)
        return K.Steps(launch, self.ws, self.settings, b.csr, Acoustics(on_device(x), on_device(self._costs)),
                       self.boosts, self.context, b._arc_cache(self.lm_slots), self.capacity, self.with_contexts,
                       stream, fold=True)

    def _run_steps(self, x, S: int) -> None:
        """Frame steps 0 .. S - 1 of the lanes taking part (u.first, u.lengths, the frame in
        ws.clock), on the backend's search stream.  With CUDA graphs the two steps (the
        token buffers alternate) are captured once and replayed for as long as the arrays
        they hold the addresses of are the ones in use: a step of a dozen kernels launched
        one by one costs ~5 ms of Numba's host work (the offline search measured it), a
        replay a few microseconds."""
        # what a step holds; capacity, contexts and cache size change only with one of them
        held = (x, self.ws_x, self._costs, self.boosts, self.context, self.backend._arc_cache(self.lm_slots))

        def search(stream, capture):
            steps = self._steps(x, stream)
            if capture is None:
                for t in range(S):
                    steps.step(t % 2)
                return
            if self._graphs is None or any(a is not b for a, b in zip(self._graphs[0], held)):
                self._graphs = None  # what the old steps hold may go first
                self._graphs = (held, [capture(lambda: steps.step(0)), capture(lambda: steps.step(1))])
            for t in range(S):
                self._graphs[1][t % 2]()

        self.backend._run(search)

    def _launch_buffer(self, steps: int):
        if self._x is None or self._x.shape[0] != self.L or self._x.shape[1] < steps:
            self._x = self.xp.zeros((self.L, max(steps, 8), self.V), np.float32)
        return self._x

    def release(self, lane: int, ref) -> None:
        """Free the lane if it is still the stream's (ref: its weak reference): a lane freed
        by finish() may be another stream's by the time the first is collected."""
        if self.lanes[lane] is ref:
            self.lanes[lane] = None

    # ------------------------------------------------------------------ open, advance

    def open(self, boosts) -> CudaStream:
        """A new stream (boosts: its BoostTables, one row): a free lane with its start token
        and the start's epsilon closure."""
        lane = next((i for i, ref in enumerate(self.lanes) if ref is None), None)
        if lane is None:
            lane = self.L
            self._build(2 * self.L, self.capacity, self.rows)
        s = CudaStream(self, lane, self.capacity, boosts.maps[0], boosts.phrases[0])
        self.lanes[lane] = weakref.ref(s)
        weakref.finalize(s, self.release, lane, self.lanes[lane])  # a stream dropped unfinished
        if self._boosting(s) or self._boosted[lane]:  # (a plain stream in a plain row: the tables hold)
            self._tables()
        while True:
            u = self.ws_x.u  # (a new workspace after _grow)
            self._reset(lane)
            u.opening[lane] = 1
            self._steps(self._launch_buffer(1)).begin()
            u.opening[lane] = 0
            status = int(_read(u.status[lane:lane + 1])[0])
            if status == C.OK:
                return s
            self._grow({status})

    def advance(self, states: list, chunks: list) -> int:
        """Returns the tokens that survived pruning, summed over the chunks' frames.  chunks:
        NumPy or device arrays (Backend.to_chunk); those on the device are read back together,
        and each launch's chunks go to the device together (a CUDA copy costs microseconds of
        host time, so one per stream would cost milliseconds a call with hundreds of streams)."""
        before = sum(s.survivors for s in states)
        chunks = self._on_host(chunks)
        work = [(s, x) for s, x in zip(states, chunks) if len(x)]
        self._make_room(work)
        for s, x in work:
            s.append(x)
        while work:
            work = self._round(work)
        advanced = [s for s, x in zip(states, chunks) if len(x)]
        if not advanced:
            return 0
        ws = self.ws
        buffer = np.full(self.L, -1, np.int8)
        memo = np.full((self.L, C.TRAIL_FIELDS), -1, np.int64)
        for s in advanced:
            buffer[s.lane] = s.buffer
            memo[s.lane] = s.trail_memo
        from wfst.kernels import cuda as K

        out = self._readings
        memo_on_device = self.xp.asarray(memo)
        K.readings_kernel[(self.L + 31) // 32, 32](self.backend.csr, self.settings, self.context, ws.u, ws.tokens[0],
                                                   ws.tokens[1], ws.bp, on_device(self.xp.asarray(buffer)),
                                                   on_device(memo_on_device), *(on_device(a) for a in out))
        trailing, voiced, relative, dead = (_read(a) for a in out)
        memo = _read(memo_on_device)
        survivors, fallbacks = _read(self.ws_x.u.survivors), _read(self.ws_x.u.fallbacks)
        stored = _read(self.ws_x.bp.n)
        for s in advanced:
            b = s.lane
            s.trail_memo[:] = memo[b]
            s.set_endpoint_readings(trailing[b], bool(voiced[b]), relative[b])
            s.dead = bool(dead[b])
            s.survivors, s.fallbacks = int(survivors[b]), int(fallbacks[b])
        self._commit([s for s in advanced if stored[s.lane] >= s.next_commit])
        self._drop_rows([s for s in advanced if not s.dead and s.frames - 1 - s.rows_from >= s.drop_at])
        return sum(s.survivors for s in states) - before

    def _on_host(self, chunks: list) -> list:
        """The chunks as NumPy arrays, those on the device read back in one transfer."""
        on_device = [i for i, x in enumerate(chunks) if not isinstance(x, np.ndarray)]
        if not on_device:
            return chunks
        whole = _read(self.xp.concatenate([chunks[i] for i in on_device]))
        ends = np.cumsum([len(chunks[i]) for i in on_device])[:-1]
        chunks = list(chunks)
        for i, part in zip(on_device, np.split(whole, ends)):
            chunks[i] = part
        return chunks

    def _make_room(self, work) -> None:
        """Step rows and backpointers for each lane's chunk (at bp_per_frame a frame): its
        stable prefix committed when that is not so, the workspace grown when even that is
        not enough.  Rows (a frame's 8 bytes) and backpointer slots grow apart: in a silence
        whose paths disagree on the last words nothing is committed, and backpointers sized
        as rows x bp_per_frame grew every lane's by thousands of slots a frame (one stream
        three minutes into such a silence, at max_active 7,000: 116 MiB for each of the lanes)."""
        u, bp = self.ws_x.u, self.ws_x.bp
        steps, stored = _read(u.steps), _read(bp.n)

        def short_rows(s, T, rows):
            return steps[s.lane] + T + 2 > rows

        def short_slots(s, T, P):
            return stored[s.lane] + (T + 1) * self.bp_per_frame > P

        rows, P = self.rows, self.P
        if any(self._commit([s for s, x in work if short_rows(s, len(x), rows) or short_slots(s, len(x), P)])):
            steps, stored = _read(u.steps), _read(bp.n)
        for s, x in work:
            while short_rows(s, len(x), rows):
                rows *= 2
            while short_slots(s, len(x), P):
                P *= 2
        if (rows, P) != (self.rows, self.P):
            self._build(self.L, self.capacity, rows, P)

    def _round(self, work):
        """One launch of frame steps for these (stream, frames) pairs; returns the pairs
        left by lanes that overflowed (after growing the workspace)."""
        xp, u = self.xp, self.ws_x.u
        S = max(s.buffer + len(x) for s, x in work)
        x_all = self._launch_buffer(S)
        first, lengths = np.ones(self.L, np.int64), np.full(self.L, -1, np.int64)
        rows = np.empty((len(work), S, self.V), np.float32)  # the lanes' rows of x_all, filled here
        for k, (s, x) in enumerate(work):
            p = s.buffer
            rows[k, p:p + len(x)] = x
            first[s.lane], lengths[s.lane] = p, p + len(x)
        x_all[xp.asarray(np.array([s.lane for s, _ in work])), :S] = xp.asarray(rows)  # (one copy, one scatter)
        u.first[...] = xp.asarray(first)
        u.lengths[...] = xp.asarray(lengths)
        self.ws_x.clock[...] = 0
        before = _read(u.steps)
        self._run_steps(x_all, S)
        status, after = _read(u.status), _read(u.steps)
        again, overflows = [], set()
        for s, x in work:
            b = s.lane
            done = int(after[b] - before[b])
            if status[b] in (C.TOKEN_OVERFLOW, C.LM_OVERFLOW):
                # the frame that overflowed was pruned and stored: take that back, and empty
                # the table its new tokens went to; its tokens are as before the frame
                done -= 1
                self._roll_back(b, int(after[b]) - 1, (s.buffer + done + 1) % 2)
            s.frames += done
            if status[b] != C.OK:
                overflows.add(int(status[b]))
                u.status[b] = C.OK
                again.append((s, x[done:]))
        if overflows:
            self._grow(overflows, [s for s, _ in again])
        return again

    def _roll_back(self, lane: int, step: int, spoiled: int) -> None:
        ws = self.ws_x
        ws.u.steps[lane] = step
        ws.bp.n[lane] = ws.bp.step_start[lane, step]
        ws.u.survivors[lane] -= ws.sv.n[lane]
        self._empty(lane, spoiled)

    def _empty(self, lane: int, buffer: int) -> None:
        """The lane's token buffer and hash table `buffer`, empty."""
        ws, H = self.ws_x, C.hash_slots(self.capacity)
        ht = ws.tables[buffer]
        for a, value in zip(ht[:5], (C.EMPTY_KEY, C.MAX_PACKED, -1, C.NO_CTX, 0)):
            a[lane * H:(lane + 1) * H] = value
        ht.count[lane] = 0
        ws.tokens[buffer].n[lane] = 0

    def _grow(self, overflows: set, streams=()) -> None:
        """Grow what overflowed: token capacity, the arc cache, backpointers per frame (unless
        committing the streams' prefixes made room)."""
        capacity, per_frame = self.capacity, self.bp_per_frame
        if C.TOKEN_OVERFLOW in overflows:
            capacity *= 2
        if C.LM_OVERFLOW in overflows:
            self.lm_slots *= 2
        P = self.P
        if C.BP_OVERFLOW in overflows and not any(self._commit(list(streams))):
            self.bp_per_frame *= 2
            P *= 2
        if capacity != self.capacity or per_frame != self.bp_per_frame:
            self._build(self.L, capacity, self.rows, P)

    # ------------------------------------------------------------------ host work on a lane

    def _lane_index(self, streams):
        """Where the streams' lanes are in a workspace array's first axis: a slice for one
        lane, else an index array on the device."""
        lanes = [s.lane for s in streams]
        return slice(lanes[0], lanes[0] + 1) if len(lanes) == 1 else self.xp.asarray(np.array(lanes, np.int64))

    def _host_copy(self, streams, since=None, from_steps=None) -> _LaneCopy:
        """The streams' lanes copied to the host: some twenty transfers for all of them (each
        costs microseconds of host time), each array read up to the longest lane's length.
        since: a backpointer per stream (none -1), whose backpointers are then read from the
        earliest of their steps on only (those before are -1); from_steps: such a step per
        stream (trace.steps' index)."""
        ws = self.ws_x
        at = self._lane_index(streams)
        stored = _read(ws.bp.n[at])
        width = int(stored.max())
        steps = _read(ws.bp.step_start[at, :max(s.frames - s.base for s in streams) + 2])
        first = 0
        if since is not None and min(since) >= 0:
            first = min(int(steps[i, np.searchsorted(steps[i, :s.frames - s.base], g, side="right") - 1])
                        for i, (s, g) in enumerate(zip(streams, since)))
        elif from_steps is not None:
            first = min(int(steps[i, t]) for i, t in enumerate(from_steps))
        bp = []
        for a in (ws.bp.prev, ws.bp.arc):
            read = _read(a[at, first:width])
            if first:
                read = np.concatenate((np.full((len(streams), first), -1, read.dtype), read), axis=1)
            bp.append(read)
        bp = (*bp, steps)
        tokens = []
        for buffer in (0, 1):  # a lane's tokens stand in buffer frames % 2
            mine = [i for i, s in enumerate(streams) if s.buffer == buffer]
            if mine:
                tok = ws.tokens[buffer]
                sub = self._lane_index([streams[i] for i in mine])
                n = _read(tok.n[sub])
                tokens.append((buffer, mine, n, [_read(a[sub, :int(n.max())]) for a in tok[:6]]))
        return _LaneCopy(stored, bp, tokens)

    def _host_states(self, streams, since=None, from_steps=None) -> tuple:
        """(the lanes' host copy, each stream's (tokens, n, cpu.Trace, stored): views of it)."""
        from wfst.kernels import cpu

        copy = self._host_copy(streams, since, from_steps)
        prev, arc, steps = copy.bp
        tokens = [None] * len(streams)
        for _, mine, ns, parts in copy.tokens:
            for j, i in enumerate(mine):
                n = int(ns[j])
                tokens[i] = Tokens(*(a[j, :n] for a in parts), np.array([n], np.int32)), n
        return copy, [(tl, n, cpu.Trace(prev[i, :m], arc[i, :m], steps[i, :s.frames - s.base + 2], None,
                                           C.MAX_BACKPOINTERS), int(m))
                      for i, (s, (tl, n), m) in enumerate(zip(streams, tokens, copy.stored))]

    def _host_state(self, s: CudaStream):
        """(tokens, n, cpu.Trace, stored) of the stream's lane, copied to the host."""
        return self._host_states([s])[1][0]

    def _commit(self, streams: list) -> list:
        """Ledger.commit_arrays on copies of the streams' lanes, written back: whether each
        freed backpointers.  Where a stream commits nothing (its paths do not meet, or not
        late enough), the backpointers that no live path passes are dropped instead, as the
        CPU's streams do (kernels.cpu.compact_stream): with runs of blanks folded
        (prune_store_kernel), what a long silence whose paths disagree on the last words
        keeps is then a backpointer for each live token's run.  A call's commits go
        together, each array read and written once for all their lanes: one commit by
        itself cost some 17 CUDA calls, about 1 ms of host time (on an H200, 73 ms of a call
        in which 69 of 512 streams committed)."""
        from wfst.kernels import cpu

        if not streams:
            return []
        copy, states = self._host_states(streams)
        kept = []  # per stream: None, or (steps kept, backpointers kept)
        for s, (tl, n, trace, stored) in zip(streams, states):
            frames, base = s.frames - s.base, s.base
            done = s.commit_arrays(self.backend.graph, tl, n, trace, stored, self._meeting)  # (in place, on the copy)
            if done is not None:
                kept.append((frames - done[0], done[1]))
                s.committed(base)
                continue
            live = cpu.compact_stream(tl, n, trace, stored, frames, s.reads)  # (in place, on the copy)
            s.compacted(live)
            kept.append((frames, live) if live < stored else None)
        moved = [i for i, d in enumerate(kept) if d is not None]
        if moved:
            self._write_back(streams, copy, moved, kept)
        return [d is not None for d in kept]

    def _drop_rows(self, streams: list) -> None:
        """CudaStream.drop_rows of each stream, on one copy of their lanes read from the step
        of frame rows_from + 1 on (the backpointers whose reads it keeps); nothing is
        written back."""
        if not streams:
            return
        g = self.backend.graph
        _, states = self._host_states(streams, from_steps=[s.rows_from + 1 - s.base for s in streams])
        for s, (_, _, trace, stored) in zip(streams, states):
            s.drop_rows(trace, stored, g.ilabel, blank_label(g))

    def _write_back(self, streams, copy: _LaneCopy, moved: list, kept: list) -> None:
        """The committed lanes' copies back on the device, one scatter an array.  Past a
        lane's own length a copy holds what was read there, so writing it back changes
        nothing."""
        ws, xp = self.ws_x, self.xp
        at = self._lane_index([streams[i] for i in moved])
        steps = np.array([kept[i][0] for i in moved], np.int64)
        live = np.array([kept[i][1] for i in moved], np.int64)
        prev, arc, step_start = copy.bp
        width, left = int(live.max()), int(steps.max()) + 2
        ws.bp.prev[at, :width] = xp.asarray(prev[moved, :width])
        ws.bp.arc[at, :width] = xp.asarray(arc[moved, :width])
        ws.bp.step_start[at, :left] = xp.asarray(step_start[moved, :left])
        ws.bp.n[at] = xp.asarray(live.astype(ws.bp.n.dtype))
        ws.u.steps[at] = xp.asarray(steps.astype(ws.u.steps.dtype))
        token_prev = Tokens._fields.index("prev")
        for buffer, mine, n, parts in copy.tokens:
            moved_here = [j for j, i in enumerate(mine) if kept[i] is not None]
            if moved_here:
                width = int(n[moved_here].max())
                lanes = self._lane_index([streams[mine[j]] for j in moved_here])
                ws.tokens[buffer].prev[lanes, :width] = xp.asarray(parts[token_prev][moved_here, :width])

    def partials(self, streams: list) -> list:
        """Ledger.partial of each stream, on one copy of their lanes that holds the
        backpointers from the step of each one's last meeting point on (its walks go back
        no further): some twenty transfers for all of them."""
        from wfst.kernels import cpu

        if not streams:
            return []
        g, starts = self.backend.graph, [s.stable_at for s in streams]
        _, states = self._host_states(streams, starts)
        found = []
        for s, start, state in zip(streams, starts, states):
            def words_after(since, depth, meet, s=s, start=start, state=state):
                tl, n, trace, stored = state if since == start else self._host_state(s)  # (else: from the start)
                return cpu.partial_words(tl, n, g.final, g.olabel, trace.prev, trace.arc, stored, trace.steps, s.base,
                                         s.frames, since, depth, meet, s.partial_memo)

            found.append(s.partial(state[1], state[3], self._meeting, words_after))
        return found

    def finish(self, s: CudaStream):
        """The last step, on the host (kernels.cpu.finish on the lane's copy): (status,
        TracedPath of the path after the committed prefix, the prefix); the lane is freed."""
        from wfst.kernels import cpu

        g = self.backend.graph
        tl, n, trace, stored = self._host_state(s)
        steps = np.zeros(s.frames - s.base + 2, np.int64)
        steps[:len(trace.steps)] = trace.steps
        trace = trace._replace(steps=steps)
        context = None
        if self.rescorer is not None or s.phrases.num_states > 1:
            context = contexts.context(self.rescorer, [s.phrases])
        ws = cpu.new_workspace(self.capacity)._replace(tl=tl)
        status, arcs, gids, reached_final, lead = cpu.finish(_Finals(g.final), context, ws, n, trace, s.frames - s.base,
                                                       stored)
        self.release(s.lane, self.lanes[s.lane])
        if status != C.OK:
            return status, None, s.prefix
        arcs, at, read = cpu.path_reads(g.ilabel, arcs, gids, lead, trace.arc, trace.steps, s.base, s.frames,
                                        s.kept_reads(), blank_label(g))
        return status, TracedPath(arcs, at, read, bool(reached_final), s.survivors, s.fallbacks), s.prefix
