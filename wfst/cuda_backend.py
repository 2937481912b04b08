"""device="cuda": the graph on the GPU and the per-frame launch sequence of kernels/cuda.py.

Arrays are CuPy arrays on a real GPU.  Under NUMBA_ENABLE_CUDASIM=1 (CI has no GPU) the
same kernels run in Numba's simulator on NumPy arrays: `xp` below is the only switch.

Phrase boosting and rescoring give the kernels a `context` tuple: the batch's phrase
automata padded into (B, ...) arrays, and for rescoring the big LM split as the
on-the-fly rescoring paper does (search arrays and an arc cache on the GPU, arc payloads
and final costs in pinned host memory, see `CudaBackend._lm_arrays`); `lm_stats` says
what the last decode() call held and moved.
"""
from __future__ import annotations

import numpy as np
from numba import config as numba_config
from numba import cuda

from .errors import WfstError
from .graph import Graph

SIMULATOR = bool(numba_config.ENABLE_CUDASIM)


def array_module():
    if SIMULATOR:
        return np
    import cupy

    return cupy


def on_device(a):
    """A Numba device-array view of a CuPy array (no copy): kernel launches take these with
    far less per-argument work than objects exporting __cuda_array_interface__."""
    return a if SIMULATOR else cuda.as_cuda_array(a)


def device_input(x):
    """log_probs as a C-contiguous device array: torch CUDA tensors and CuPy arrays without a copy."""
    xp = array_module()
    if SIMULATOR:
        from .decoder import host_array
        return host_array(x)
    module = type(x).__module__.split(".")[0]
    if module == "torch":
        x = x.detach()
        if x.is_cuda:
            return xp.ascontiguousarray(xp.from_dlpack(x))
        x = x.numpy()
    elif module != "cupy" and hasattr(x, "__dlpack__") and getattr(x, "__dlpack_device__", lambda: (1,))()[0] == 2:
        x = xp.from_dlpack(x)
    return xp.ascontiguousarray(xp.asarray(x))


class CudaBackend:
    """The graph's CSR arrays on the device, and decoding of batches."""

    def __init__(self, graph: Graph):
        if not cuda.is_available():
            raise WfstError("device='cuda' but Numba finds no usable CUDA GPU (numba.cuda.is_available() is "
                            "False); decode with device='cpu'")
        xp = array_module()
        self.xp = xp
        self.graph = graph
        self.e_indptr = on_device(xp.asarray(graph.e_indptr))
        self.ne_indptr = on_device(xp.asarray(graph.ne_indptr))
        self.ilabel = on_device(xp.asarray(graph.ilabel))
        self.olabel = on_device(xp.asarray(graph.olabel))
        self.weight = on_device(xp.asarray(graph.weight))
        self.nextstate = on_device(xp.asarray(graph.nextstate))
        self.final = on_device(xp.asarray(graph.final))
        self.bp_per_frame = None  # backpointer slots per frame; grows on overflow
        # launch shapes: small under the simulator, which runs every thread in Python
        self.block = 4 if SIMULATOR else 256
        self.arc_blocks = 1 if SIMULATOR else 64
        self.lm_cache_slots = None  # the big LM's arc-cache slots (a power of two); None: sized from the LM
        self._lm = None  # (rescorer, its arrays as the kernels take them), made on first use
        self._no_lm = None
        self.lm_stats: dict = {}  # what the last decode() did with the big LM (keys: see _lm_stats)

    def free_bytes(self) -> int | None:
        if SIMULATOR:
            return None
        free, _ = self.xp.cuda.runtime.memGetInfo()
        return int(free)

    def decode(self, decoder, log_probs, lengths, boost=None):
        from wfst.kernels import cuda as K

        xp = self.xp
        x = device_input(log_probs)
        lengths = decoder.check_input(x, lengths)
        decoder.prepare_boost(boost, len(lengths))
        lm_before = self._lm_counters(decoder)
        B, T, _ = x.shape
        valid = xp.asarray(np.arange(T)[None, :] < lengths[:, None])
        bad = ((xp.isnan(x) | xp.isposinf(x)).any(axis=2) & valid).any(axis=1)
        decoder.check_finite(np.asarray(bad.get() if hasattr(bad, "get") else bad))
        results: list = [None] * B
        todo = [b for b in range(B) if lengths[b] > 0]
        for b in range(B):
            if lengths[b] == 0:
                results[b] = decoder.empty_result()
        tokens = regrowths = 0
        while todo:
            decoder.check_memory(len(todo), T, self.free_bytes(), "GPU")
            sub = xp.ascontiguousarray(x[xp.asarray(todo)]) if len(todo) < B else x
            status, paths, survivors = self._run(decoder, sub, lengths[todo], todo)
            again = []
            for i, b in enumerate(todo):
                if status[i] == K.EPS_CYCLE:
                    raise WfstError(f"utterance {b}: the graph has a zero-cost epsilon cycle; "
                                    f"the best path cannot be traced back")
                if status[i] == K.OK:
                    results[b] = paths[i]
                    tokens += int(survivors[i])
                else:
                    again.append(b)
            if again:
                regrowths += len(again)
                failed = {int(status[todo.index(b)]) for b in again}
                if K.BP_OVERFLOW in failed:
                    self.bp_per_frame *= 2
                if K.LM_OVERFLOW in failed:
                    self._grow_lm_cache()
                if K.OVERFLOW in failed:
                    decoder._capacity *= 2
            todo = again
        self.lm_stats = self._lm_stats(decoder, lm_before, int(lengths.sum()))
        return results, tokens, regrowths

    def _run(self, decoder, x, lengths: np.ndarray, utterances: list[int]):
        """One pass over a batch at the decoder's current capacity; returns (status, results, survivors)."""
        from wfst.kernels import cuda as K

        xp, g, c = self.xp, self.graph, decoder.config
        B, T, V = x.shape
        C = decoder._capacity
        H = 1 << max(2 * C - 1, 1).bit_length()
        if self.bp_per_frame is None:
            self.bp_per_frame = min(C, c.max_active + c.min_active + 64)
        P = (T + 1) * self.bp_per_frame
        S = g.num_states
        i32, i64 = np.int32, np.int64

        def zeros(shape, dtype):
            return on_device(xp.zeros(shape, dtype))

        def full(shape, value, dtype):
            return on_device(xp.full(shape, value, dtype))

        def buffer():
            return dict(key=full(B * H, K.EMPTY_KEY, i64), val=full(B * H, K.MAX_PACKED, np.uint64),
                        tok=full(B * H, -1, i32), pctx=full(B * H, K.NO_CTX, i32), stamp=zeros(B * H, i32),
                        count=zeros(B, i32), state=zeros((B, C), i32), ctx=zeros((B, C), i32),
                        cost=zeros((B, C), np.float32), prev=zeros((B, C), i32), arc=zeros((B, C), i32),
                        slot=zeros((B, C), i32), n=zeros(B, i32))

        bufs = (buffer(), buffer())
        lengths_d = on_device(xp.asarray(lengths.astype(i64)))
        status = zeros(B, i32)
        gid = zeros((B, C), i32)
        mark = zeros((B, C), np.uint8)
        sv_state, sv_ctx, sv_cost, sv_gid = zeros((B, C), i32), zeros((B, C), i32), zeros((B, C), np.float32), \
            zeros((B, C), i32)
        sv_scan, sv_n = zeros((B, C + 1), i64), zeros(B, i32)
        bp_prev, bp_arc, bp_n = zeros((B, P), i32), zeros((B, P), i32), zeros(B, i64)
        step_start = zeros((B, T + 2), i64)
        keep, reached_final = full(B, -1, i64), zeros(B, np.uint8)
        adaptive_beam, min_key = zeros(B, np.float32), full(B, K.INF_KEY, np.uint32)
        survivors = zeros(B, i64)
        work, work2 = zeros((B, C), i32), zeros((B, C), i32)
        L = 2 * (T + 1) + 64
        path_arcs, path_gids, path_len = zeros((B, L), i32), zeros((B, L), i32), zeros(B, i32)
        ac = zeros((B, V + 1), np.float32)  # the frame's acoustic cost by input label
        keys, costs, bits = decoder._boost.hash_maps(utterances)
        bw = (on_device(xp.asarray(keys)), on_device(xp.asarray(costs)), on_device(xp.asarray(bits)),
              bool((keys >= 0).any()))
        context, start_ctx, contextual = self._context(decoder, utterances)
        rescoring = context[6]
        top_n, log_rel = c.fltop(V)
        blank = decoder._blank_ilabel
        scale, penalty = np.float32(c.acoustic_scale), np.float32(c.blank_penalty)
        per_utt, per_arc = (B, self.block), ((self.arc_blocks, B), K.ARC_BLOCK if not SIMULATOR else self.block)
        cache_clear = (1 if SIMULATOR else 64, self.block)

        xd = on_device(x)
        b0 = bufs[0]
        K.init_kernel[(B + 31) // 32, 32](g.start, start_ctx, b0["key"], b0["val"], b0["tok"], b0["pctx"],
                                          b0["count"], H, b0["state"], b0["ctx"], b0["cost"], b0["prev"], b0["arc"],
                                          b0["slot"], b0["n"])
        if rescoring:
            K.lm_cache_clear_kernel[cache_clear](context[5])
        self._closure(K, per_utt, 0, lengths_d, status, min_key, adaptive_beam, True, b0, H, C, work, work2, bw,
                      context)
        for t in range(T + 1):
            cur, nxt = bufs[t % 2], bufs[(t + 1) % 2]
            K.prune_store_kernel[per_utt](
                t, lengths_d, status, self.final, self.e_indptr,
                cur["state"], cur["ctx"], cur["cost"], cur["prev"], cur["arc"], cur["n"],
                nxt["slot"], nxt["n"], nxt["key"], nxt["val"], nxt["tok"], nxt["pctx"], nxt["count"],
                nxt["stamp"], H, gid, mark, sv_state, sv_ctx, sv_cost, sv_gid, sv_scan, sv_n,
                bp_prev, bp_arc, bp_n, P, step_start, keep, reached_final, adaptive_beam,
                min_key, survivors, c.beam, c.max_active, c.min_active, c.beam_delta, context)
            if t == T:
                break
            K.frame_costs_kernel[(B + 31) // 32, 32](t, lengths_d, status, xd, ac, scale, blank, penalty,
                                                      top_n, log_rel)
            if rescoring:
                K.lm_cache_clear_kernel[cache_clear](context[5])
            arcs = (ac, self.e_indptr, self.ilabel, self.olabel, self.weight)
            survivors_ = (sv_state, sv_ctx, sv_cost, sv_scan, sv_n, min_key)
            K.expand_min_kernel[per_arc](t, lengths_d, status, *arcs, *survivors_, bw, context)
            K.expand_kernel[per_arc](t, lengths_d, status, *arcs, self.nextstate, *survivors_, adaptive_beam,
                                     nxt["key"], nxt["val"], nxt["count"], H, C, bw, context)
            if contextual:
                K.expand_ties_kernel[per_arc](t, lengths_d, status, *arcs, self.nextstate, *survivors_,
                                              adaptive_beam, nxt["key"], nxt["val"], nxt["pctx"], H, bw, context)
            K.resolve_kernel[per_arc](t, lengths_d, status, self.e_indptr, S, self.olabel, context,
                                      cur["key"], cur["tok"], gid, nxt["key"], nxt["val"], nxt["tok"], nxt["pctx"], H,
                                      nxt["state"], nxt["ctx"], nxt["cost"], nxt["prev"], nxt["arc"], nxt["slot"],
                                      nxt["n"])
            self._closure(K, per_utt, t, lengths_d, status, min_key, adaptive_beam, False, nxt, H, C, work, work2,
                          bw, context)
        K.traceback_kernel[(B + 31) // 32, 32](status, keep, bp_prev, bp_arc, bp_n, path_arcs, path_gids, path_len)

        host = _to_host
        status_h, len_h, final_h = host(status), host(path_len), host(reached_final)
        arcs_h, gids_h, starts_h = host(path_arcs), host(path_gids), host(step_start)
        paths, wanted = [], []
        for b in range(B):
            n = int(len_h[b]) if status_h[b] == K.OK else 0
            steps = np.searchsorted(starts_h[b, : int(lengths[b]) + 2], gids_h[b, :n], side="right") - 1
            paths.append((arcs_h[b, :n], steps))
            frames, columns = decoder.path_frames_columns(arcs_h[b, :n], steps)
            wanted.append((np.full(len(frames), b), frames, columns))
        # gather the logp of every emitting arc on the best paths, in one small copy
        bi, fi, ci = (np.concatenate(a).astype(np.int64) for a in zip(*wanted))
        gathered = host(x[xp.asarray(bi), xp.asarray(fi), xp.asarray(ci)]) if len(bi) else np.zeros(0, np.float32)
        results, at = [], 0
        for b, (arcs, steps) in enumerate(paths):
            k = len(wanted[b][1])
            results.append(decoder.make_result(int(lengths[b]), arcs, steps, gathered[at:at + k], bool(final_h[b]),
                                               utterances[b]) if status_h[b] == K.OK else None)
            at += k
        return status_h, results, host(survivors)

    def _closure(self, K, per_utt, t, lengths_d, status, min_key, adaptive_beam, initial, buf, H, C, work, work2,
                 boost, context):
        K.closure_kernel[per_utt](t, lengths_d, status, self.ne_indptr, self.graph.num_states, self.olabel,
                                  self.weight, self.nextstate, min_key, adaptive_beam, initial, boost, context,
                                  buf["key"], buf["val"], buf["tok"], buf["pctx"], buf["count"], buf["stamp"], H, C,
                                  buf["state"], buf["ctx"], buf["cost"], buf["prev"], buf["arc"], buf["slot"],
                                  buf["n"], work, work2)

    # ------------------------------------------------------------------ contexts

    def _context(self, decoder, utterances: list[int]):
        """The kernels' `context` tuple for these utterances (kernels/cuda.py), their start
        contexts on the device, and whether any token carries a context:
        (phrase-automaton sizes, big LM, small LM, maps, phrase automata, arc cache, rescoring)."""
        xp = self.xp
        automata = [decoder._boost.phrases[b] for b in utterances]
        sizes = np.array([a.num_states for a in automata], np.int32)
        rescoring = decoder.rescorer is not None
        lm, lm0, maps, cache = self._lm_arrays(decoder.rescorer)
        start = sizes.astype(np.int64) * (decoder.rescorer.big.start if rescoring else 0)
        phrases = tuple(on_device(xp.asarray(a)) for a in _padded_automata(automata))
        context = (on_device(xp.asarray(sizes)), lm, lm0, maps, phrases, cache, rescoring)
        return context, on_device(xp.asarray(start.astype(np.int32))), rescoring or bool((sizes > 1).any())

    def _lm_arrays(self, rescorer):
        """(big LM, small LM, maps, arc cache) as the kernels take them, made once per rescorer.

        On the GPU: the big LM's offsets, labels, backoff states and backoff costs, the arc
        cache, and the whole small LM with the word and state maps.  In pinned host memory
        that kernels read directly: the big LM's arc payloads (weight bits << 32 | next
        state, one 8-byte read per arc) and its final costs."""
        if rescorer is None:
            if self._no_lm is None:  # stand-ins of the usual types: the kernels compile once
                self._no_lm = self._lm_tuples(np.zeros(2, np.int32), np.zeros(1, np.uint16), np.full(1, -1, np.int32),
                                              np.zeros(1, np.float32), _pinned(np.zeros(1, np.uint64)),
                                              _pinned(np.zeros(1, np.float32)),
                                              tuple(np.zeros(1, d) for d in (np.int64, np.int32, np.float32,
                                                                              np.int32, np.int32, np.float32,
                                                                              np.float32)),
                                              (np.zeros(1, np.int32),) * 3, 1, 0)[0]
            return self._no_lm
        if self._lm is None or self._lm[0] is not rescorer:
            big, small, small_of, lm_map, lm0_map = rescorer.kernel_args()
            slots = self.lm_cache_slots or _cache_slots(rescorer.big.num_arcs)
            self._lm = (rescorer, *self._lm_tuples(*lm_device_arrays(rescorer.big),
                                                   _pinned_payload(big[2], big[3]), _pinned(big[6]), small,
                                                   (small_of, lm_map, lm0_map), slots,
                                                   sum(int(a.nbytes) for a in big)))
            self.lm_cache_slots = slots
        return self._lm[1]

    def _lm_tuples(self, offsets, labels, backoff, bo_weight, payload, final, small, maps, slots, lm_bytes):
        """((lm, lm0, maps, cache), byte counts): device copies of the arrays (payload and final
        are pinned host arrays already); lm_bytes: the whole big LM as the CPU reads it."""
        xp = self.xp

        def dev(a):
            return on_device(xp.asarray(np.ascontiguousarray(a)))

        lm = (dev(offsets), dev(labels), dev(backoff), dev(bo_weight), payload, final)
        lm0 = tuple(dev(a) for a in small)
        maps = tuple(dev(a) for a in maps)
        cache = self._new_cache(slots)
        search = sum(int(a.nbytes) for a in lm[:4])
        sizes = dict(gpu_bytes=search + sum(int(a.nbytes) for a in cache), lm_bytes=lm_bytes,
                     gpu_share=search / lm_bytes if lm_bytes else 0.0, pinned_bytes=int(payload.nbytes + final.nbytes),
                     small_lm_gpu_bytes=sum(int(a.nbytes) for a in (*lm0, *maps)))
        return (lm, lm0, maps, cache), sizes

    def _new_cache(self, slots: int, counts=None):
        """An empty arc cache: keys (arc positions), payloads, counters (K.LM_FILL, ...)."""
        from wfst.kernels import cuda as K

        xp = self.xp
        counts = np.zeros(K.LM_COUNTERS, np.int64) if counts is None else counts
        return (on_device(xp.full(slots, K.EMPTY_KEY, np.int64)), on_device(xp.full(slots, K.NO_ARC, np.uint64)),
                on_device(xp.asarray(counts)))

    def _grow_lm_cache(self) -> None:
        """A frame needed more arc-cache slots than there are: twice as many, empty; the
        counters carry on."""
        from wfst.kernels import cuda as K

        rescorer, (lm, lm0, maps, cache), sizes = self._lm
        counts = _to_host(cache[2]).copy()
        counts[K.LM_FILL] = counts[K.LM_ARRIVED] = 0
        self.lm_cache_slots *= 2
        cache = self._new_cache(self.lm_cache_slots, counts)
        sizes = dict(sizes, gpu_bytes=sum(int(a.nbytes) for a in (*lm[:4], *cache)))
        self._lm = (rescorer, (lm, lm0, maps, cache), sizes)

    def _lm_counters(self, decoder):
        """The arc cache's counters (K.LM_FILL, ...) before a decode() call; None without rescoring."""
        if decoder.rescorer is None:
            return None
        self._lm_arrays(decoder.rescorer)
        return _to_host(self._lm[1][3][2]).copy()

    def _lm_stats(self, decoder, before, frames: int) -> dict:
        """What a decode() call did with the big LM ({} without rescoring):

        gpu_bytes            the big LM on the GPU: offsets, labels, backoff states and costs, arc cache
        lm_bytes             the whole big LM as the CPU backend reads it (all its arrays)
        gpu_share            the GPU's search arrays (arc cache aside) / lm_bytes: the paper's
                             "GPU memory for the LM" share
        pinned_bytes         the big LM in pinned host memory: arc payloads and final costs
        small_lm_gpu_bytes   the graph's LM and the word and state maps, on the GPU
        cache_slots          the arc cache's size (it grows when a frame fills it)
        lookups              big-LM arcs read by word steps (first reads in a frame; re-reads
                             by expand, expand_ties and the closure's tie pass not counted)
        hits, misses         lookups served by the cache / that inserted their arc into it
        fetches              arcs read from host memory: misses, and reads by threads that
                             found an arc inserted but not yet stored by another thread
        fetched_bytes        8 per fetch, host -> device; fetched_bytes_per_frame = that / frames
        clears               times the cache was emptied at a frame start (more than half full)
        frames               the call's frames (sum of lengths)

        Decoding again after an overflow counts again."""
        from wfst.kernels import cuda as K

        if before is None:
            return {}
        counts = _to_host(self._lm[1][3][2]) - before
        fetched = int(counts[K.LM_FETCHES]) * 8
        return dict(self._lm[2], cache_slots=self.lm_cache_slots, lookups=int(counts[K.LM_LOOKUPS]),
                    hits=int(counts[K.LM_LOOKUPS] - counts[K.LM_FETCHES]), misses=int(counts[K.LM_MISSES]),
                    fetches=int(counts[K.LM_FETCHES]), fetched_bytes=fetched,
                    fetched_bytes_per_frame=fetched / frames if frames else 0.0, clears=int(counts[K.LM_CLEARS]),
                    frames=frames)


def lm_device_arrays(store) -> tuple:
    """What the GPU holds of a big LM (an LmStore) for the search, the on-the-fly rescoring
    paper's split: offsets as int32, the sorted labels (word ids, only ever compared) as
    uint16 below 65,536 words, backoff states and costs.  Arc costs, next states and final
    costs stay in pinned host memory."""
    offsets = store.offsets.astype(np.int32) if store.offsets[-1] < 2**31 else store.offsets
    labels = store.labels.astype(np.uint16) if len(store.words) <= 2**16 else store.labels
    return offsets, labels, store.backoff, store.bo_weight


def _cache_slots(num_arcs: int, cap: int = 1 << 22) -> int:
    """Arc-cache slots: the next power of two >= 2 x the big LM's arcs (at most 2 x cap)."""
    return 1 << max(2 * min(max(num_arcs, 1), cap) - 1, 1).bit_length()


def _pinned(a: np.ndarray):
    """A copy of `a` in page-locked host memory mapped into the GPU's address space: kernels
    read it over the bus, nothing of it is copied to the GPU ahead (plain NumPy in the simulator)."""
    out = _pinned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def _pinned_empty(shape, dtype):
    return np.empty(shape, dtype) if SIMULATOR else cuda.mapped_array(shape, dtype)


def _pinned_payload(weights: np.ndarray, nexts: np.ndarray, chunk: int = 1 << 24):
    """The big LM's arc payloads in pinned memory, one uint64 per arc: weight bits << 32 |
    next state (an arc is one 8-byte read).  Filled by chunks: the store's arrays may be
    memory-mapped and large."""
    out = _pinned_empty(max(len(weights), 1), np.uint64)
    for lo in range(0, len(weights), chunk):
        w = np.asarray(weights[lo:lo + chunk], np.float32).view(np.uint32).astype(np.uint64)
        out[lo:lo + len(w)] = (w << np.uint64(32)) | np.asarray(nexts[lo:lo + chunk]).astype(np.uint32)
    return out


def _padded_automata(automata) -> tuple:
    """Each utterance's phrase automaton (offsets, labels, weights, nexts, backoff, bo_weight,
    final) padded into (B, ...) arrays, one row per utterance (as BoostTables.hash_maps)."""
    B = len(automata)
    N = max(a.num_states for a in automata)
    A = max(max(len(a.labels) for a in automata), 1)
    offsets = np.empty((B, N + 1), np.int64)
    labels, nexts = np.zeros((B, A), np.int32), np.zeros((B, A), np.int32)
    weights = np.zeros((B, A), np.float32)
    backoff = np.full((B, N), -1, np.int32)
    bo_weight, final = np.zeros((B, N), np.float32), np.zeros((B, N), np.float32)
    for b, a in enumerate(automata):
        n, k = a.num_states, len(a.labels)
        offsets[b, :n + 1] = a.offsets
        offsets[b, n + 1:] = a.offsets[-1]
        labels[b, :k], weights[b, :k], nexts[b, :k] = a.labels, a.weights, a.nexts
        backoff[b, :n], bo_weight[b, :n], final[b, :n] = a.backoff, a.bo_weight, a.final
    return offsets, labels, weights, nexts, backoff, bo_weight, final


def _to_host(a) -> np.ndarray:
    if hasattr(a, "copy_to_host"):  # a Numba device array
        return a.copy_to_host()
    return a.get() if hasattr(a, "get") else np.asarray(a)
