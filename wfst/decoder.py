"""Batched Viterbi beam search over a CTC decoding graph (TLG) on the CPU or a CUDA GPU.

    g = wfst.load_graph("build/demo/char_compact")
    dec = wfst.Decoder(g, beam=16.0, max_active=7000, device="cpu")
    results = dec.decode(log_probs, lengths)        # (B, T, V) float32 log-posteriors
    results[0].words, results[0].cost, results[0].word_frames

Path cost = sum over frames of -acoustic_scale * logp[t, token] (+ blank_penalty on blank
frames) + the graph's arc and final costs, in natural-log units (DESIGN.md).  The search
is Kaldi's FasterDecoder made batched and order-independent (see kernels/cpu.py); with
a wide beam it finds OpenFST's shortest path of (emissions ∘ TLG).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .errors import WfstError
from .graph import Graph, load_graph
from .memory import available_host_bytes
from .symbols import column_of_ilabel


class DecodeInputError(WfstError, ValueError):
    """log_probs or lengths that cannot be decoded; names the utterance when one is at fault."""


class DecoderMemoryError(WfstError, MemoryError):
    """The search would need more memory than the machine has; says how much and why."""


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    """Search settings, validated once.  Tuning: raise `beam` or `max_active` when the
    best path gets pruned (WER drops as they grow), lower them for speed."""

    beam: float = 16.0  # keep tokens within `beam` of the frame's best cost
    max_active: int = 7000  # and at most this many per frame (exact, by radix select)
    min_active: int = 20  # but at least this many, beam or not (Kaldi's min_active)
    beam_delta: float = 0.5  # slack added to the adaptive beam when max/min_active bind (Kaldi)
    acoustic_scale: float = 1.0  # multiplies -logp
    blank_penalty: float = 0.0  # cost added on every frame that emits blank (> 0: fewer blanks)
    token_top_n: int | None = None  # FLToP: expand only the frame's top-N columns (None: all)
    token_rel_threshold: float = 0.0  # FLToP: and only those with p >= R * the frame's best p
    token_capacity: int | None = None  # tokens per frame per utterance; grows on overflow
    num_threads: int | None = None  # CPU threads, one utterance each; default: all cores

    def __post_init__(self):
        def check(ok, name, what):
            if not ok:
                raise ValueError(f"DecoderConfig.{name}={getattr(self, name)!r}: must be {what}")

        check(_finite(self.beam) and self.beam > 0, "beam", "a finite number > 0")
        check(_int(self.max_active) and self.max_active >= 1, "max_active", "an integer >= 1")
        check(_int(self.min_active) and 0 <= self.min_active <= self.max_active, "min_active",
              f"an integer in [0, max_active={self.max_active}]")
        check(_finite(self.beam_delta) and self.beam_delta >= 0, "beam_delta", "a finite number >= 0")
        check(_finite(self.acoustic_scale) and self.acoustic_scale > 0, "acoustic_scale", "a finite number > 0")
        check(_finite(self.blank_penalty), "blank_penalty", "a finite number")
        check(self.token_top_n is None or (_int(self.token_top_n) and self.token_top_n >= 1),
              "token_top_n", "None (all columns) or an integer >= 1")
        check(_finite(self.token_rel_threshold) and 0 <= self.token_rel_threshold <= 1, "token_rel_threshold",
              "a number in [0, 1]")
        check(self.token_capacity is None or (_int(self.token_capacity) and self.token_capacity >= 1),
              "token_capacity", "None or an integer >= 1")
        check(self.num_threads is None or (_int(self.num_threads) and self.num_threads >= 1),
              "num_threads", "None or an integer >= 1")

    def fltop(self, num_columns: int) -> tuple[int, float]:
        """(top_n, log R) as the kernels take them; (V, -inf) when pruning is off."""
        top_n = num_columns if self.token_top_n is None else min(self.token_top_n, num_columns)
        log_rel = math.log(self.token_rel_threshold) if self.token_rel_threshold > 0 else -math.inf
        return top_n, log_rel

    @property
    def capacity(self) -> int:
        """Token slots per utterance and frame: from max_active unless given."""
        if self.token_capacity is not None:
            return self.token_capacity
        return max(1024, 4 * self.max_active)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


@dataclasses.dataclass(frozen=True)
class DecodeResult:
    """The best path of one utterance.  cost = acoustic_cost + graph_cost + boost_cost + rescore_cost."""

    words: tuple[str, ...]
    word_ids: tuple[int, ...]
    word_frames: tuple[int, ...]  # frame at which each word's label was output
    cost: float
    acoustic_cost: float
    graph_cost: float  # arc costs + the final cost (when a final state was reached)
    reached_final: bool
    num_frames: int
    boost_cost: float = 0.0  # word and phrase boosts of the path (-rewards; cost includes it)
    rescore_cost: float = 0.0  # big LM - graph LM scores of the path when rescoring (cost includes it)

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclasses.dataclass
class DecodeStats:
    """What the last decode() call did."""

    utterances: int = 0
    frames: int = 0
    seconds: float = 0.0
    tokens_per_frame: float = 0.0  # survivors of pruning, averaged over frames
    regrowths: int = 0  # times the token capacity overflowed and an utterance was decoded again
    boost_unknown: tuple = ()  # (utterance, word) boosted but not in the graph's vocabulary
    lm: dict = dataclasses.field(default_factory=dict)  # device="cuda" with rescoring: LM memory and fetches


class Decoder:
    """Decode batches of CTC log-posteriors with one graph and one config.

    `graph` is a Graph or a graph directory; keywords build a DecoderConfig (or pass one,
    with keywords overriding its fields).  device="cpu" runs Numba code on a thread pool,
    one utterance per thread; device="cuda" runs the Numba-CUDA kernels on CuPy arrays.

    rescore_lm: a big LM (ARPA file, prepared once into a store file beside it, or a store
    file from wfst.lm.prepare_lm) that replaces the graph's LM score on the fly at word
    arcs; graph_lm: the LM the graph was built with (default: the ARPA file graph.json
    names, if it is still there and unchanged).
    """

    def __init__(self, graph: Graph | str | os.PathLike, config: DecoderConfig | None = None, *,
                 device: str = "cpu", rescore_lm=None, graph_lm=None, **options):
        if not isinstance(graph, Graph):
            graph = load_graph(graph)
        if config is None:
            config = DecoderConfig(**options)
        elif options:
            config = dataclasses.replace(config, **options)
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device={device!r}: must be 'cpu' or 'cuda'")
        if graph.num_arcs >= 2**31 - 1:
            raise WfstError(f"{graph!r}: more than 2^31 - 1 arcs; arc ids must fit in 31 bits")
        self.graph = graph
        self.config = config
        self.device = device
        self._capacity = config.capacity
        self.stats = DecodeStats()
        blank = graph.tokens.blank_ilabel
        self._blank_ilabel = -1 if blank is None else blank
        if device == "cuda":
            from .cuda_backend import CudaBackend
            self._backend = CudaBackend(graph)
        else:
            self._backend = None
        self._cpu_layout = None
        self._cpu_word_arcs = None
        self._lm_memos = queue.SimpleQueue()  # see _memo
        self._lock = threading.Lock()  # one batch at a time: a batch-wide boost edits the CPU graph's weights
        self._boost = None  # the current batch's boost maps (wfst.boost.BoostTables)
        self.rescorer = _rescorer(graph, rescore_lm, graph_lm) if rescore_lm is not None else None

    def __repr__(self) -> str:
        return f"Decoder({self.graph!r}, {self.config}, device={self.device!r})"

    # ------------------------------------------------------------------ decoding

    def decode(self, log_probs, lengths=None, *, boost=None) -> list[DecodeResult]:
        """Decode a batch: log_probs (B, T, V) float32 natural-log posteriors, lengths (B,).

        boost: word -> reward (natural log; > 0 makes the word more likely) for the whole
        batch, or a list with one such mapping (or None) per utterance.  Boosted words that
        are not in the graph's vocabulary are warned about and listed in stats.boost_unknown.
        """
        with self._lock:
            start = time.perf_counter()
            if self.device == "cuda":
                results, tokens, regrowths = self._backend.decode(self, log_probs, lengths, boost)
            else:
                results, tokens, regrowths = self._decode_cpu(log_probs, lengths, boost)
            frames = sum(r.num_frames for r in results)
            self.stats = DecodeStats(len(results), frames, time.perf_counter() - start,
                                     tokens / frames if frames else 0.0, regrowths, self._boost.unknown,
                                     dict(getattr(self._backend, "lm_stats", None) or {}))
            return results

    def _decode_cpu(self, log_probs, lengths, boost):
        from wfst.kernels import cpu

        x = host_array(log_probs)
        lengths = self.check_input(x, lengths)
        self.prepare_boost(boost, len(lengths))
        valid = np.arange(x.shape[1])[None, :] < lengths[:, None]
        self.check_finite(((np.isnan(x) | np.isposinf(x)).any(axis=2) & valid).any(axis=1))
        self.check_memory(min(len(lengths), os.cpu_count() or 1), x.shape[1], available_host_bytes(), "host")
        g, c = self.graph, self.config
        threads = min(c.num_threads or os.cpu_count() or 1, max(len(lengths), 1))
        num_words = int(g.olabel.max(initial=0)) + 1  # every output label indexes the boost vectors
        word_boosts = [self._boost.word_costs(b, num_words) for b in range(len(lengths))]
        # one map for the whole batch goes into the graph's weights, at no cost per arc
        in_graph = self._boost.batch_wide()
        weights = (cpu.boosted_weights(self._cpu_graph()[1], self._word_arcs(), word_boosts[0]) if in_graph
                   else contextlib.nullcontext())

        def one(b):
            T = int(lengths[b])
            if T == 0:
                return self.empty_result(), 0, 0
            regrowths = 0
            context, start_ctx = self.context(b)
            contextual = bool(context[7] or context[8])
            boosted = self._boost.boosted(b) and not in_graph
            while True:
                states, arcs_ = self._cpu_graph()
                with self._memo(context) as memo:
                    status, arcs, steps, final, per_frame = cpu.decode_one(
                        states, arcs_, word_boosts[b], boosted, context,
                        contextual, memo, start_ctx, g.final, g.start,
                        x[b], T, x.shape[2], c.beam, c.max_active, c.min_active, c.beam_delta,
                        c.acoustic_scale, self._blank_ilabel, c.blank_penalty, *c.fltop(x.shape[2]), self._capacity)
                if status != cpu.OVERFLOW:
                    break
                self._grow(T)
                regrowths += 1
            if status == cpu.EPS_CYCLE:
                raise WfstError(f"utterance {b}: the graph has a zero-cost epsilon cycle; "
                                f"the best path cannot be traced back")
            frames, columns = self.path_frames_columns(arcs, steps)
            result = self.make_result(T, arcs, steps, x[b][frames, columns], final, b)
            return result, int(per_frame.sum()), regrowths

        with weights:
            if threads == 1:
                outs = [one(b) for b in range(len(lengths))]
            else:
                with ThreadPoolExecutor(threads) as pool:
                    outs = list(pool.map(one, range(len(lengths))))
        return [o[0] for o in outs], sum(o[1] for o in outs), sum(o[2] for o in outs)

    @contextlib.contextmanager
    def _memo(self, context):
        """The CPU search's memo of context steps (ctx, word) -> (cost, next ctx), see
        cpu._word_step.  With the rescoring LM alone a step depends on the LM only, so the
        memos are kept from one utterance and call to the next (one per utterance decoded
        at a time); phrase automata are the utterance's own, and their memo starts empty."""
        rescoring, phrasing = context[7], context[8]
        if phrasing or not rescoring:
            yield cpu_memo(1 << 18 if rescoring else 1 << 15) if phrasing else _NO_MEMO
            return
        try:
            memo = self._lm_memos.get_nowait()
        except queue.Empty:
            memo = cpu_memo(1 << 21)  # 32 MiB; on BPE 2^20 was 10% slower, 2^22 5% faster
        try:
            yield memo
        finally:
            self._lm_memos.put(memo)

    def _cpu_graph(self):
        """The graph in the CPU backend's interleaved layout (built once, on first use)."""
        if self._cpu_layout is None:
            from wfst.kernels import cpu

            g = self.graph
            self._cpu_layout = cpu.interleave_graph(g.e_indptr, g.ne_indptr, g.ilabel, g.olabel, g.weight, g.nextstate)
        return self._cpu_layout

    def _word_arcs(self):
        """The CPU layout's word arcs by word (cpu.word_arc_index), built on first use."""
        if self._cpu_word_arcs is None:
            from wfst.kernels import cpu

            self._cpu_word_arcs = cpu.word_arc_index(self._cpu_graph()[1])
        return self._cpu_word_arcs

    def _grow(self, num_frames: int) -> None:
        self._capacity *= 2
        self.check_memory(1, num_frames, available_host_bytes() if self.device == "cpu" else None, self.device)

    # ------------------------------------------------------------------ checks shared by backends

    def check_input(self, x, lengths) -> np.ndarray:
        """Validate shape, dtype and lengths (on any array library); returns lengths as int64 NumPy."""
        V = self.graph.tokens.num_columns
        if getattr(x, "ndim", None) != 3:
            raise DecodeInputError(f"log_probs must have shape (B, T, V); got shape {tuple(x.shape)}"
                                   + (" (add a batch axis for one utterance)" if x.ndim == 2 else ""))
        B, T, V_in = x.shape
        if str(x.dtype) != "float32":
            raise DecodeInputError(f"log_probs must be float32 log-posteriors; got {x.dtype} "
                                   f"(convert with .float() / .astype(np.float32))")
        if V_in != V:
            raise DecodeInputError(f"log_probs has V={V_in} columns but the graph's tokens.txt has "
                                   f"{V} (blank included); is it the graph of this model?")
        if lengths is None:
            return np.full(B, T, np.int64)
        lengths = host_array(lengths)
        if lengths.ndim != 1 or lengths.shape[0] != B:
            raise DecodeInputError(f"lengths must have shape ({B},) to match log_probs; got {lengths.shape}")
        if lengths.dtype.kind not in "iu":
            if lengths.dtype.kind == "f" and np.all(np.floor(lengths) == lengths):
                lengths = lengths.astype(np.int64)
            else:
                raise DecodeInputError(f"lengths must be integers; got {lengths.dtype}")
        lengths = lengths.astype(np.int64)
        bad = np.flatnonzero((lengths < 0) | (lengths > T))
        if bad.size:
            b = int(bad[0])
            raise DecodeInputError(f"utterance {b}: length {int(lengths[b])} outside [0, T={T}]")
        return lengths

    def prepare_boost(self, boost, batch: int) -> None:
        """The batch's boost maps (validated; unknown words reported) for the backends."""
        from .boost import boost_tables

        self._boost = boost_tables(boost, batch, self.graph.words, self.config.beam)
        for b, automaton in enumerate(self._boost.phrases):
            if self.rescorer is not None and self.rescorer.big.num_states * automaton.num_states >= 2**31:
                raise DecodeInputError(f"utterance {b}: {automaton.num_states} phrase-automaton states x "
                                       f"{self.rescorer.big.num_states} LM states do not fit a token's 31-bit "
                                       f"context; boost fewer phrases per utterance")

    def context(self, b: int):
        """Utterance b's context automata as the kernels take them (common.context_step) and
        the start context: (P, lm, lm0, small_of, lm_map, lm0_map, phrases, rescoring, phrasing)."""
        from .boost import NO_PHRASES

        phrases = self._boost.phrases[b]
        P = phrases.num_states
        phrasing = P > 1
        if self.rescorer is None:
            dummy = NO_PHRASES.automaton()
            zero = np.zeros(1, np.int32)
            return (P, dummy, dummy, zero, zero, zero, phrases.automaton(), False, phrasing), 0
        r = self.rescorer
        big, small, small_of, lm_map, lm0_map = r.kernel_args()
        return (P, big, small, small_of, lm_map, lm0_map, phrases.automaton(), True, phrasing), r.big.start * P

    def check_finite(self, bad_rows: np.ndarray) -> None:
        """Raise for the first utterance with NaN or +inf in its frames (bad_rows: bool (B,))."""
        bad = np.flatnonzero(bad_rows)
        if bad.size:
            raise DecodeInputError(f"utterance {int(bad[0])}: log_probs has NaN or +inf within its length "
                                   f"({bad.size} utterance(s) affected)")

    def check_memory(self, batch: int, num_frames: int, available: int | None, where: str) -> None:
        """Refuse a search whose workspace would not fit, with the estimate and what to change."""
        if available is None:
            return
        need = batch * self.workspace_bytes(num_frames)
        if need > available:
            raise DecoderMemoryError(
                f"decoding {batch} utterance(s) of {num_frames} frames needs about {need / 2**30:.2f} GiB of "
                f"{where} memory ({self._capacity} token slots per frame from max_active="
                f"{self.config.max_active}) but {available / 2**30:.2f} GiB is available; "
                f"lower max_active or token_capacity, or decode smaller batches")

    def workspace_bytes(self, num_frames: int) -> int:
        """Per-utterance estimate (the CUDA layout, the larger): two hash tables (28 bytes a
        slot: key, packed value, token, stamp, predecessor context) and token
        lists (double-buffered on the GPU), survivor lists, and backpointers for the survivors."""
        C = self._capacity
        H = 1 << max(C * 2 - 1, 1).bit_length()
        kept = min(C, self.config.max_active + self.config.min_active + 64)
        return 2 * (H * 28 + C * 24) + C * 40 + 8 * (num_frames + 1) * kept

    # ------------------------------------------------------------------ results

    def empty_result(self) -> DecodeResult:
        return DecodeResult((), (), (), 0.0, 0.0, 0.0, False, 0)

    def make_result(self, T: int, arcs: np.ndarray, steps: np.ndarray, acoustic_logp: np.ndarray,
                    reached_final: bool, utterance: int) -> DecodeResult:
        """Words, frames and cost parts (in float64) of a traced-back path.

        arcs: arc ids in order; steps: the step each arc's token was stored at (an emitting
        arc on step s consumed frame s - 1); acoustic_logp: logp of each emitting arc's
        frame and column (see path_frames_columns)."""
        g, c = self.graph, self.config
        arcs = np.asarray(arcs, np.int64)
        ilab = g.ilabel[arcs]
        acoustic = -c.acoustic_scale * np.asarray(acoustic_logp, np.float32).astype(np.float64)
        acoustic_cost = float(acoustic.sum()) + c.blank_penalty * int(np.sum(ilab == self._blank_ilabel))
        graph_cost = float(g.weight[arcs].astype(np.float64).sum())
        if reached_final:
            last = g.nextstate[arcs[-1]] if len(arcs) else g.start
            graph_cost += float(g.final[last])
        olab = g.olabel[arcs]
        has_word = olab != 0
        frames = np.maximum(np.asarray(steps, np.int64) - 1, 0)
        word_ids = tuple(int(w) for w in olab[has_word])
        words = tuple(g.words[w] if g.words is not None else str(w) for w in word_ids)
        boost = self._boost.maps[utterance]
        boost_cost = float(sum(np.float32(boost.get(w, 0.0)) for w in word_ids)) if boost else 0.0
        phrases = self._boost.phrases[utterance]
        if phrases.num_states > 1:
            boost_cost += phrases.path_cost(word_ids, reached_final)
        rescore_cost = self.rescorer.path_cost(word_ids, reached_final) if self.rescorer is not None else 0.0
        return DecodeResult(words, word_ids, tuple(int(f) for f in frames[has_word]),
                            acoustic_cost + graph_cost + boost_cost + rescore_cost, acoustic_cost, graph_cost,
                            bool(reached_final), T, boost_cost, rescore_cost)

    def path_frames_columns(self, arcs: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(frame, logit column) read by each emitting arc of a path: where to gather logp."""
        ilab = self.graph.ilabel[np.asarray(arcs, np.int64)]
        emitting = ilab != 0
        return (np.asarray(steps, np.int64)[emitting] - 1, column_of_ilabel(ilab[emitting].astype(np.int64)))


def _rescorer(graph: Graph, rescore_lm, graph_lm):
    """The Rescorer of a big LM and the graph's own LM (found through graph.json unless given)."""
    from .errors import MissingFileError
    from .lm import Rescorer, _sha256, open_lm

    if graph.words is None:
        raise WfstError(f"{graph!r} has no words.txt: rescoring needs the graph's word symbols")
    if graph_lm is None:
        lm = graph.info.get("inputs", {}).get("lm", {})
        path = lm.get("path")
        if not path or not os.path.isfile(path):
            raise MissingFileError(path or "(none recorded)", "the graph's LM (graph.json inputs.lm.path); pass "
                                   "graph_lm= the ARPA file or LM store the graph was built with")
        if lm.get("sha256") and _sha256(Path(path)) != lm["sha256"]:
            raise WfstError(f"{path} changed since the graph was built (sha256 differs from graph.json); "
                            f"pass graph_lm= the LM the graph was built with")
        graph_lm = path
    return Rescorer(open_lm(rescore_lm), open_lm(graph_lm), graph.words)


# ---------------------------------------------------------------------- array interop

def cpu_memo(size: int) -> np.ndarray:
    """An empty memo of context steps for the CPU search (see cpu._word_step): `size` slots
    of (key, packed step), keys EMPTY_KEY."""
    from wfst.kernels.common import EMPTY_KEY

    return np.full((size, 2), EMPTY_KEY, np.int64)


_NO_MEMO = cpu_memo(1)


def host_array(x) -> np.ndarray:
    """A C-contiguous NumPy view or copy of NumPy / torch / CuPy / DLPack input (GPU data is copied)."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x)
    module = type(x).__module__.split(".")[0]
    if module == "torch":
        return np.ascontiguousarray(x.detach().cpu().numpy())
    if module == "cupy":
        return np.ascontiguousarray(x.get())
    if hasattr(x, "__dlpack__"):
        device_type = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else 1
        if device_type == 1:  # kDLCPU
            return np.ascontiguousarray(np.from_dlpack(x))
        raise DecodeInputError("log_probs lives on a GPU and is neither torch nor CuPy; "
                               "copy it to the host or decode with device='cuda'")
    return np.ascontiguousarray(np.asarray(x))


