"""device="cuda": the graph on the GPU, and a batch's workspace for kernels.cuda.search.

Arrays are CuPy arrays on a real GPU, handed to kernels as Numba device-array views.
Under NUMBA_ENABLE_CUDASIM=1 (CI has no GPU) the same kernels run in Numba's simulator
on NumPy arrays: `xp` and `on_device` below are the only switches.

Rescoring splits the big LM as the on-the-fly rescoring paper does: the arrays the search
reads (offsets, labels, backoff states and costs) and an arc cache on the GPU, arc
payloads and final costs in pinned host memory that kernels read directly.  `lm_report`
says what a decode call held and moved.
"""
from __future__ import annotations

import numpy as np
from numba import config as numba_config
from numba import cuda

from wfst.kernels import constants as C
from wfst.kernels.groups import (
    Acoustics,
    ArcCache,
    Automata,
    Backpointers,
    Context,
    CsrGraph,
    HashTable,
    Survivors,
    Tokens,
    Utterances,
    WordBoosts,
)

from . import contexts
from .batch import BatchPlan, Outcome
from .cuda_arrays import SIMULATOR, SearchStream, array_module, device_views, on_device
from .cuda_arrays import to_host as _to_host
from .cuda_lattice import LatticeChunks, device_links
from .errors import DecodeInputError, OptionError
from .inputs import host_array, input_faults, is_torch
from .results import TracedPath, emitting_reads

numba_config.CUDA_LOW_OCCUPANCY_WARNINGS = False  # a batch of one is one block per kernel: expected, not news
GPU_LM_FIELDS = ("offsets", "labels", "backoff", "bo_weight")  # what of a big LM the GPU holds


def on_gpu(x) -> bool:
    """Whether x is GPU data: a CuPy array, a torch CUDA tensor, or a DLPack CUDA array."""
    if is_torch(x):
        return x.is_cuda
    return type(x).__module__.split(".")[0] == "cupy" or (
        hasattr(x, "__dlpack__") and getattr(x, "__dlpack_device__", lambda: (1,))()[0] == 2)


def device_input(x, what: str = "log_probs"):
    """log_probs as a C-contiguous device array: torch CUDA tensors and CuPy arrays without a copy."""
    xp = array_module()
    if SIMULATOR:
        return xp.asarray(host_array(x, what))
    if is_torch(x) and x.is_cuda:
        if str(x.dtype) != "torch.float32":  # (CuPy's DLPack reader has no bfloat16: its error would be raw)
            raise DecodeInputError(f"{what} must be float32 log-posteriors; got "
                                   f"{str(x.dtype).removeprefix('torch.')} (convert with .float())")
        return xp.ascontiguousarray(xp.from_dlpack(x.detach().resolve_neg().resolve_conj()))
    if type(x).__module__.split(".")[0] == "cupy" or hasattr(x, "__cuda_array_interface__"):  # (Numba's too)
        return xp.ascontiguousarray(xp.asarray(x))
    if on_gpu(x):  # (DLPack)
        return xp.ascontiguousarray(xp.from_dlpack(x))
    return xp.asarray(host_array(x, what))  # (host input checked as the simulator's is: None or a ragged list
    # raised CuPy's own ValueError on a GPU)


def gpu_lm_automaton(store) -> Automata:
    """A big LM's automaton with the types the GPU holds it in: offsets int32 (when they fit)
    and labels uint16 below 65,536 words (word ids are only ever compared)."""
    return contexts.lm_automaton(store, offsets_dtype=np.int32 if store.num_arcs < 2**31 else np.int64,
                                 labels_dtype=np.uint16 if len(store.words) <= 2**16 else np.int32)


def _sm_count() -> int:
    """Streaming multiprocessors of the current GPU."""
    return cuda.get_current_device().MULTIPROCESSOR_COUNT


class CudaBackend:
    """The graph's CSR arrays on the device, and decoding of batches."""

    memory = "GPU"

    def __init__(self, graph, *, block: int | None = None, flat_blocks: int | None = None, cuda_graphs: bool = True):
        if not cuda.is_available():
            raise OptionError("device='cuda' but Numba finds no usable CUDA GPU (numba.cuda.is_available() is "
                              "False); decode with device='cpu'")
        self.xp = array_module()
        self.graph = graph
        dev = self.to_device
        self.csr = CsrGraph(dev(graph.e_indptr), dev(graph.ne_indptr), dev(graph.ilabel), dev(graph.olabel),
                            dev(graph.weight), dev(graph.nextstate), dev(graph.final), np.int64(graph.start),
                            np.int64(graph.num_states))
        # launch shapes: small under the simulator, which runs every thread in Python
        self.block = block or (4 if SIMULATOR else 256)
        # the flat kernels' grid: a few resident blocks per SM, striding over the batch's arcs
        self.flat_blocks = flat_blocks or (2 if SIMULATOR else 4 * _sm_count())
        self._lm = None  # (rescorer, its device Context parts, sizes), made on first use
        self._no_lm = None
        self._cache = None  # the big LM's arc cache (ArcCache), kept from call to call
        self._bound = None  # the last search's arrays and CUDA graphs, reused by a search like it (_bind)
        self._lanes = None  # the streams' workspace (wfst.cuda_streams), made on the first stream
        # the search's stream, and whether frame steps are replayed as CUDA graphs (never in the simulator)
        self._runner = SearchStream()
        self.cuda_graphs = cuda_graphs and not SIMULATOR

    def to_device(self, a):
        return on_device(self.xp.asarray(np.ascontiguousarray(a)))

    # ------------------------------------------------------------------ the Backend interface

    def to_batch(self, log_probs):
        return device_input(log_probs)

    joins_chunks = False  # (advance() copies each chunk into its launch's rows: joining them first would copy twice)

    def to_chunk(self, chunk, what: str = "a chunk"):
        """A stream's chunk where it is: GPU data as a device array (no copy), host data as
        NumPy (a call moves its streams' chunks to the device together: one copy, not one
        per stream)."""
        return device_input(chunk, what) if on_gpu(chunk) else host_array(chunk, what)

    def input_faults(self, x, lengths):
        return input_faults(self.xp, x, lengths)

    def stream_bytes(self, capacity, config) -> int:
        """About what a stream opened now takes: its lane's share of the lanes' search arrays."""
        return C.workspace_bytes(capacity.tokens, capacity.backpointers, 1, 0)

    def free_bytes(self) -> int | None:
        if SIMULATOR:
            return None
        free, _ = self.xp.cuda.runtime.memGetInfo()
        # CuPy's cached blocks are free too, and so is the last search's workspace, kept for reuse
        return int(free) + int(self.xp.get_default_memory_pool().free_bytes()) + self._bound_bytes()

    def concurrent(self, batch: int) -> int:
        return batch

    def search_bytes(self, capacity, frames: int, lattice_links: int) -> int:
        """What one utterance's search of `frames` frames needs: its share of the batch's
        workspace, backpointers included (a frame that needs more than its budget grows it,
        BP_OVERFLOW)."""
        return C.workspace_bytes(capacity.tokens, capacity.backpointers, frames, lattice_links)

    def search(self, plan: BatchPlan, utterances: list[int], room: int | None = None) -> list[Outcome]:
        """One pass of the search over these utterances at plan.capacity (the workspace's
        size is fixed beforehand: search_bytes; `room` is the CPU's)."""
        from wfst.kernels import cuda as K

        xp, g = self.xp, self.graph
        x = plan.log_probs
        sub = x if len(utterances) == x.shape[0] else xp.ascontiguousarray(x[xp.asarray(utterances)])
        lengths = plan.lengths[utterances]
        B, V = sub.shape[0], sub.shape[2]
        T = int(lengths.max())  # a batch padded wider than its longest utterance searches no padding
        capacity = plan.capacity.tokens
        launch = K.Launch(B, self.block, self.flat_blocks, self.block if SIMULATOR else 256,
                          self.block if SIMULATOR else K.SCAN_BLOCK, 1 if SIMULATOR else 64)
        bound = self._bind(plan, utterances, launch, V, T)
        ws, boosts, context, with_contexts = bound.ws, bound.boosts, bound.context, bound.with_contexts
        bound.log_probs[:, :T] = sub[:, :T]
        acoustics = Acoustics(on_device(bound.log_probs), bound.costs)
        chunks = None
        if plan.lattice is not None:
            chunks = LatticeChunks(bound.lat, ws.u, lengths, plan.capacity.lattice_links, capacity)

        def search(stream, capture):
            lattice = None
            if chunks is not None:
                chunks.search_stream = self._runner.stream
                lattice = (bound.lat, chunks.chunk)
            return K.search(launch, ws, plan.settings, self.csr, acoustics, boosts, context, bound.cache, capacity, T,
                            with_contexts, stream, capture, bound.graphs, lattice)

        bound.graphs = self._run(search)
        lattices = chunks.lattices() if chunks is not None else [None] * B

        status, length = _to_host(ws.u.status), _to_host(ws.paths.length)
        reached, survivors, fallbacks = _to_host(ws.u.reached_final), _to_host(ws.u.survivors), _to_host(
            ws.u.fallbacks)
        arcs, gids, starts = _to_host(ws.paths.arcs), _to_host(ws.paths.gids), _to_host(ws.bp.step_start)
        traced, wanted = [], []
        for i in range(B):
            n = int(length[i]) if status[i] == C.OK else 0
            path_arcs, path_gids = arcs[i, :n], gids[i, :n]
            if n < 0:  # more arcs than the path buffer holds (long epsilon chains): traced here
                path_arcs, path_gids = self._trace_on_host(ws, i)
            steps = np.searchsorted(starts[i, :int(lengths[i]) + 2], path_gids, side="right") - 1
            traced.append((path_arcs, steps))
            frames, columns = emitting_reads(g, path_arcs, steps)
            wanted.append((np.full(len(frames), i), frames, columns))
        # the logp of every emitting arc on the best paths, gathered in one small copy
        bi, fi, ci = (np.concatenate(a).astype(np.int64) for a in zip(*wanted))
        logp = _to_host(sub[xp.asarray(bi), xp.asarray(fi), xp.asarray(ci)]) if len(bi) else np.zeros(0, np.float32)
        outcomes, at = [], 0
        for i, (path_arcs, steps) in enumerate(traced):
            k = len(wanted[i][1])
            if status[i] == C.OK:
                outcomes.append(Outcome(C.OK, TracedPath(path_arcs, steps, logp[at:at + k], bool(reached[i]),
                                                         int(survivors[i]), int(fallbacks[i]), lattices[i])))
            else:
                outcomes.append(Outcome(int(status[i])))
            at += k
        return outcomes

    @staticmethod
    def _trace_on_host(ws, i: int):
        """(arcs, backpointers) of utterance i's best path, traced from its backpointers on
        the host (kernels.cpu's traceback)."""
        from wfst.kernels import cpu

        stored = int(_to_host(ws.bp.n[i:i + 1])[0])
        keep = int(_to_host(ws.u.keep[i:i + 1])[0])
        _, path_arcs, path_gids, _ = cpu._traced(_to_host(ws.bp.prev[i, :stored]), _to_host(ws.bp.arc[i, :stored]),
                                              np.int32(keep), stored)
        return path_arcs, path_gids

    # ------------------------------------------------------------------ streams (wfst.cuda_streams)

    def open_stream(self, boosts, rescorer, settings, capacity):
        """A stream's lane, its start token and the start's epsilon closure."""
        from .cuda_streams import StreamLanes

        if self._lanes is None:
            self._lanes = StreamLanes(self, settings, rescorer, capacity)
        return self._lanes.open(boosts)

    def advance(self, states: list, chunks: list) -> int:
        if not states:  # (no stream opened yet: no lanes)
            return 0
        return self._lanes.advance(states, chunks)

    def stream_partials(self, states):
        return self._lanes.partials(states)

    def finish_stream(self, state):
        return self._lanes.finish(state)

    @property
    def device_seconds(self) -> float:
        """GPU time summed over searches: first kernel to last (CUDA events)."""
        return self._runner.seconds

    def _run(self, search):
        """search(stream, capture) on the search's own stream; what it returns (the frame
        steps' CUDA graphs)."""
        return self._runner.run(search, self.cuda_graphs)

    # ------------------------------------------------------------------ workspace

    def _bind(self, plan: BatchPlan, utterances: list[int], launch, V: int, T: int) -> "_Bound":
        """The device arrays a search of these utterances runs on, holding this call's
        lengths, boosts and phrase automata.  The last call's are reused when the search is
        the same but for those values (same shapes, settings, LM and capacities, and at
        least T frames of room): its workspace is reset and its frame steps' CUDA graphs,
        which hold the arrays' addresses, are replayed instead of captured again."""
        rescorer = plan.rescorer
        lengths = plan.lengths[utterances].astype(np.int64)
        keys, costs, bits = plan.boosts.hash_maps(utterances)
        host = contexts.context(None, [plan.boosts.phrases[b] for b in utterances])  # the phrase rows and sizes
        sizes = host.phrase_states
        start = (sizes * (rescorer.big.start if rescorer is not None else 0)).astype(np.int32)
        uploads = (lengths, keys, costs, bits, sizes, start, *host.phrases)
        lm = self._lm_parts(rescorer)
        cache = self._arc_cache(plan.capacity.lm_cache if plan.rescorer is not None else 1)
        B = len(utterances)
        with_contexts = rescorer is not None or bool((sizes > 1).any())
        boosting = bool((keys >= 0).any())
        key = (launch, V, plan.capacity.tokens, plan.capacity.backpointers, tuple(plan.settings), with_contexts,
               boosting, id(lm), id(cache), plan.lattice, plan.capacity.lattice_links if plan.lattice else 0,
               tuple((a.shape, a.dtype.str) for a in uploads))
        bound = self._bound
        if bound is not None and bound.key == key and bound.frames >= T:
            for a, value in bound.fills:
                a.fill(value)
        else:
            self._bound = bound = None  # its memory goes back first
            frames = T if SIMULATOR else -(-T // 128) * 128  # room for the next batches' lengths
            fills = []
            ws = self._workspace(B, frames, plan.capacity.tokens, plan.capacity.backpointers, fills)
            lat = None
            if plan.lattice is not None:
                lat = device_views(device_links(self.xp, B, plan.capacity.lattice_links, ws.bp.prev.shape[1],
                                                plan.capacity.tokens, *plan.lattice, fills))
            dev = [self.xp.empty(a.shape, a.dtype) for a in uploads]
            _, d_keys, d_costs, d_bits, d_sizes, d_start, *d_phrases = (on_device(a) for a in dev)
            ws = ws._replace(u=ws.u._replace(lengths=on_device(dev[0])))
            boosts = WordBoosts(d_keys, d_costs, d_bits, boosting)
            # spread 0: only the CPU's arc order reads it, and a captured step would hold its value
            context = Context(rescorer is not None, d_sizes, *lm[:2], *lm[2:5], Automata(*d_phrases), d_start, lm[5],
                              np.float32(0.0), self.to_device(contexts.no_buckets()))
            bound = _Bound(key, frames, ws, fills, dev, boosts, context, with_contexts, cache,
                           self.xp.empty((B, frames, V), np.float32), self._zeros((B, V + 1), np.float32), lat)
            self._bound = bound
        for d, h in zip(bound.uploads, uploads):
            d[...] = self.xp.asarray(h)
        return bound

    def _bound_bytes(self) -> int:
        """Device memory held for reuse by the last search's arrays (given back when a search
        needs others)."""
        b = self._bound
        if b is None:
            return 0
        return int(sum(a.nbytes for a, _ in b.fills) + sum(a.nbytes for a in b.uploads) + b.log_probs.nbytes)

    def _zeros(self, shape, dtype):
        return on_device(self.xp.zeros(shape, dtype))

    def _full(self, shape, value, dtype):
        return on_device(self.xp.full(shape, value, dtype))

    def _workspace(self, B: int, T: int, capacity: int, bp_per_frame: int, fills: list):
        """A search's workspace for B utterances of up to T frames, as device views;
        `fills` gets each array with the value that resets it."""
        return device_views(self.workspace_arrays(B, T + 2, (T + 1) * bp_per_frame, capacity, fills))

    def workspace_arrays(self, B: int, step_rows: int, backpointers: int, capacity: int, fills: list | None = None,
                         traceback: bool = True):
        """The arrays (of self.xp) of a workspace for B utterances: `step_rows` rows of
        bp.step_start, `backpointers` backpointer slots and `capacity` token slots each;
        traceback: room for the traceback kernel's paths (streams trace theirs on the host)."""
        from wfst.kernels import cuda as K

        H = C.hash_slots(capacity)
        i32, i64 = np.int32, np.int64
        fills = [] if fills is None else fills

        def full(shape, value, dtype):
            a = self.xp.full(shape, value, dtype)
            fills.append((a, value))
            return a

        def zeros(shape, dtype):
            return full(shape, 0, dtype)

        def tokens():
            return Tokens(*(zeros((B, capacity), d) for d in (i32, i32, np.float32, i32, i32, i32)), zeros(B, i32))

        def table():
            return HashTable(full(B * H, C.EMPTY_KEY, i64), full(B * H, C.MAX_PACKED, np.uint64),
                             full(B * H, -1, i32), full(B * H, C.NO_CTX, i32), zeros(B * H, i32), zeros(B, i32))

        P = backpointers
        L = 2 * step_rows + 64 if traceback else 1
        u = Utterances(None, zeros(B, i32), zeros(B, np.float32), full(B, C.INF_KEY, np.uint32), full(B, -1, i64),
                       zeros(B, np.uint8), zeros(B, i64), zeros(B, i32), zeros(B, np.uint8), zeros(B, i32),
                       zeros(B + 1, i64), zeros(B + 1, i64), zeros(B, i64), zeros(B, i64), full(B, 1, np.uint8),
                       full(B, 1, np.uint8))
        sv = Survivors(zeros((B, capacity), i32), zeros((B, capacity), i32), zeros((B, capacity), np.float32),
                       zeros((B, capacity), i32), zeros((B, capacity + 1), i64), zeros(B, i32))
        bp = Backpointers(zeros((B, P), i32), zeros((B, P), i32), zeros(B, i64), zeros((B, step_rows), i64),
                          zeros((B, capacity), i32), zeros((B, capacity), np.uint8))
        return K.Workspace(u, (tokens(), tokens()), (table(), table()), sv, bp,
                           (zeros((B, capacity), i32), zeros((B, capacity), i32)),
                           K.Paths(zeros((B, L), i32), zeros((B, L), i32), zeros(B, i32)), zeros(1, i32))

    # ------------------------------------------------------------------ contexts

    def _lm_parts(self, rescorer):
        """(big LM, graph LM, small_of, lm_map, lm0_map, gain bounds) on the device, made once per rescorer;
        stand-ins of the same types without rescoring, so that kernels compile once."""
        dev = self.to_device
        if rescorer is None:
            if self._no_lm is None:
                none = contexts.no_lm()
                big = Automata(dev(none.offsets.astype(np.int32)), dev(none.labels.astype(np.uint16)),
                               dev(none.backoff), dev(none.bo_weight), _pinned(none.payload), _pinned(none.final))
                zero = dev(np.zeros(1, np.int32))
                self._no_lm = (big, Automata(*(dev(a) for a in none)), zero, zero, zero, dev(np.zeros(1, np.float32)))
            return self._no_lm
        if self._lm is None or self._lm[0] is not rescorer:
            host = gpu_lm_automaton(rescorer.big)
            big = Automata(*(dev(getattr(host, f)) for f in GPU_LM_FIELDS), _pinned(host.payload), _pinned(host.final))
            small = rescorer.automata()[1]
            parts = (big, Automata(*(dev(a) for a in small)), dev(rescorer.small_of), dev(rescorer.lm_map),
                     dev(rescorer.lm0_map), dev(rescorer.gain))
            search = sum(int(getattr(host, f).nbytes) for f in GPU_LM_FIELDS)
            lm_bytes = sum(int(a.nbytes) for a in rescorer.automata()[0])
            sizes = dict(lm_bytes=lm_bytes, gpu_search_bytes=search, gpu_share=search / lm_bytes if lm_bytes else 0.0,
                         pinned_bytes=int(host.payload.nbytes + host.final.nbytes),
                         small_lm_gpu_bytes=sum(int(a.nbytes) for a in (*small, rescorer.small_of, rescorer.lm_map,
                                                                         rescorer.lm0_map)))
            self._lm = (rescorer, parts, sizes)
            self._cache = None
        return self._lm[1]

    def _arc_cache(self, slots: int) -> ArcCache:
        """The big LM's arc cache at `slots` slots (1: a stand-in without rescoring); a grown
        capacity gets a new, empty cache and the counters carry on."""
        if self._cache is None or self._cache.keys.shape[0] != slots:
            counts = np.zeros(C.LM_COUNTERS, np.int64) if self._cache is None else _to_host(self._cache.counts).copy()
            counts[C.LM_FILL] = counts[C.LM_ARRIVED] = 0
            self._cache = ArcCache(self._full(slots, C.EMPTY_KEY, np.int64), self._full(slots, C.MAX_PACKED, np.uint64),
                                   self.to_device(counts))
        return self._cache

    def counters(self):
        """The arc cache's counters now (constants.LM_FILL, ...), or None before any rescoring."""
        return None if self._cache is None or self._lm is None else _to_host(self._cache.counts).copy()

    def lm_report(self, before, frames: int, rescorer=None) -> dict:
        """What a decode() call did with the big LM ({} without rescoring):

        gpu_bytes            the big LM on the GPU: offsets, labels, backoff states and costs, arc cache
        lm_bytes             the whole big LM as the CPU backend reads it (all its arrays)
        gpu_share            the GPU's search arrays (arc cache aside) / lm_bytes: the paper's
                             "GPU memory for the LM" share
        pinned_bytes         the big LM in pinned host memory: arc payloads and final costs
        small_lm_gpu_bytes   the graph's LM and the word and state maps, on the GPU
        cache_slots          the arc cache's size (it grows when a frame fills it)
        lookups              big-LM arcs read by word steps: expand_min's (the arcs that could
                             give the frame's best cost), expand's that expand_min left unread,
                             the closure's; re-reads by expand, expand_ties and the closure's
                             tie pass not counted.  Word arcs out of reach of the beam whatever
                             the big LM gives back read nothing (the gain bound, as on the CPU)
        hits, misses         lookups served by the cache / that inserted their arc into it
        fetches              arcs read from host memory: misses, and reads by threads that
                             found an arc inserted but not yet stored by another thread
        fetched_bytes        8 per fetch, host -> device; fetched_bytes_per_frame = that / frames
        clears               times the cache was emptied at a frame start (more than half full)
        frames               the call's frames (sum of lengths)

        Decoding again after an overflow counts again."""
        now = self.counters()
        if now is None:
            return {}
        counts = now - (before if before is not None else 0)
        fetched = int(counts[C.LM_FETCHES]) * 8
        sizes = self._lm[2]
        cache = sum(int(a.nbytes) for a in self._cache)
        return dict(lm_bytes=sizes["lm_bytes"], gpu_bytes=sizes["gpu_search_bytes"] + cache,
                    gpu_share=sizes["gpu_share"], pinned_bytes=sizes["pinned_bytes"],
                    small_lm_gpu_bytes=sizes["small_lm_gpu_bytes"], cache_slots=int(self._cache.keys.shape[0]),
                    lookups=int(counts[C.LM_LOOKUPS]), hits=int(counts[C.LM_LOOKUPS] - counts[C.LM_FETCHES]),
                    misses=int(counts[C.LM_MISSES]), fetches=int(counts[C.LM_FETCHES]), fetched_bytes=fetched,
                    fetched_bytes_per_frame=fetched / frames if frames else 0.0, clears=int(counts[C.LM_CLEARS]),
                    frames=frames)


class _Bound:
    """The arrays a search runs on (CudaBackend._bind), its key, and its frame steps' CUDA
    graphs once captured."""

    def __init__(self, key, frames, ws, fills, uploads, boosts, context, with_contexts, cache, log_probs, costs, lat):
        self.key, self.frames, self.ws, self.fills, self.uploads = key, frames, ws, fills, uploads
        self.boosts, self.context, self.with_contexts, self.cache = boosts, context, with_contexts, cache
        self.log_probs, self.costs = log_probs, costs
        self.lat = lat  # the lattice's links (groups.DeviceLinks, device views), or None
        self.graphs = None


def _pinned(a: np.ndarray):
    """A copy of `a` in page-locked host memory mapped into the GPU's address space: kernels
    read it over the bus, nothing of it is copied to the GPU ahead (plain NumPy in the simulator)."""
    out = np.empty(a.shape, a.dtype) if SIMULATOR else cuda.mapped_array(a.shape, a.dtype)
    out[...] = a
    return out
