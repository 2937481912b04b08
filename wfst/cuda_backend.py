"""device="cuda": the graph on the GPU and the per-frame launch sequence of kernels/cuda.py.

Arrays are CuPy arrays on a real GPU.  Under NUMBA_ENABLE_CUDASIM=1 (CI has no GPU) the
same kernels run in Numba's simulator on NumPy arrays: `xp` below is the only switch.
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
        if decoder.rescorer is not None or any(a.num_states > 1 for a in decoder._boost.phrases):
            raise WfstError("phrase boosting and LM rescoring run on device='cpu' only so far")
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
                if any(status[todo.index(b)] == K.BP_OVERFLOW for b in again):
                    self.bp_per_frame *= 2
                else:
                    decoder._capacity *= 2
            todo = again
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
            return dict(key=full(B * H, K.EMPTY_KEY, i32), val=full(B * H, K.MAX_PACKED, np.uint64),
                        tok=full(B * H, -1, i32), stamp=zeros(B * H, i32), count=zeros(B, i32),
                        state=zeros((B, C), i32), cost=zeros((B, C), np.float32),
                        prev=zeros((B, C), i32), arc=zeros((B, C), i32), slot=zeros((B, C), i32),
                        n=zeros(B, i32))

        bufs = (buffer(), buffer())
        lengths_d = on_device(xp.asarray(lengths.astype(i64)))
        status = zeros(B, i32)
        gid = zeros((B, C), i32)
        mark = zeros((B, C), np.uint8)
        sv_state, sv_cost, sv_gid = zeros((B, C), i32), zeros((B, C), np.float32), zeros((B, C), i32)
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
        boost = decoder._boost
        boosted = bool(boost.active)
        boost_keys = on_device(xp.asarray(np.ascontiguousarray(boost.keys[utterances])))
        boost_costs = on_device(xp.asarray(np.ascontiguousarray(boost.costs[utterances])))
        boost_bits = on_device(xp.asarray(np.ascontiguousarray(boost.bits[utterances])))
        top_n, log_rel = c.fltop(V)
        blank = decoder._blank_ilabel
        scale, penalty = np.float32(c.acoustic_scale), np.float32(c.blank_penalty)
        per_utt, per_arc = (B, self.block), ((self.arc_blocks, B), K.ARC_BLOCK if not SIMULATOR else self.block)

        xd = on_device(x)
        b0 = bufs[0]
        K.init_kernel[(B + 31) // 32, 32](g.start, b0["key"], b0["val"], b0["tok"], b0["count"], H,
                                          b0["state"], b0["cost"], b0["prev"], b0["arc"], b0["slot"], b0["n"])
        bw = (boost_keys, boost_costs, boost_bits, boosted)
        self._closure(K, per_utt, 0, lengths_d, status, min_key, adaptive_beam, True, b0, H, C, work, work2, bw)
        for t in range(T + 1):
            cur, nxt = bufs[t % 2], bufs[(t + 1) % 2]
            K.prune_store_kernel[per_utt](
                t, lengths_d, status, self.final, self.e_indptr,
                cur["state"], cur["cost"], cur["prev"], cur["arc"], cur["n"],
                nxt["state"], nxt["slot"], nxt["n"], nxt["key"], nxt["val"], nxt["tok"], nxt["count"],
                nxt["stamp"], H, gid, mark, sv_state, sv_cost, sv_gid, sv_scan, sv_n,
                bp_prev, bp_arc, bp_n, P, step_start, keep, reached_final, adaptive_beam,
                min_key, survivors, c.beam, c.max_active, c.min_active, c.beam_delta)
            if t == T:
                break
            K.frame_costs_kernel[(B + 31) // 32, 32](t, lengths_d, status, xd, ac, scale, blank, penalty,
                                                      top_n, log_rel)
            K.expand_min_kernel[per_arc](t, lengths_d, status, ac, self.e_indptr, self.ilabel, self.olabel,
                                         self.weight, sv_state, sv_cost, sv_scan, sv_n, min_key, *bw)
            K.expand_kernel[per_arc](t, lengths_d, status, ac, self.e_indptr, self.ilabel, self.olabel, self.weight,
                                     self.nextstate, sv_state, sv_cost, sv_scan, sv_n, min_key, adaptive_beam,
                                     nxt["key"], nxt["val"], nxt["count"], H, C, *bw)
            K.resolve_kernel[per_arc](t, lengths_d, status, self.e_indptr, S, cur["key"], cur["tok"], gid,
                                      nxt["key"], nxt["val"], nxt["tok"], H, nxt["state"], nxt["cost"],
                                      nxt["prev"], nxt["arc"], nxt["slot"], nxt["n"])
            self._closure(K, per_utt, t, lengths_d, status, min_key, adaptive_beam, False, nxt, H, C, work, work2,
                          bw)
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
                 boost):
        K.closure_kernel[per_utt](t, lengths_d, status, self.ne_indptr, self.graph.num_states, self.olabel,
                                  self.weight, self.nextstate, min_key, adaptive_beam, initial, *boost,
                                  buf["key"], buf["val"], buf["tok"], buf["count"], buf["stamp"], H, C,
                                  buf["state"], buf["cost"], buf["prev"], buf["arc"], buf["slot"], buf["n"],
                                  work, work2)


def _to_host(a) -> np.ndarray:
    if hasattr(a, "copy_to_host"):  # a Numba device array
        return a.copy_to_host()
    return a.get() if hasattr(a, "get") else np.asarray(a)
