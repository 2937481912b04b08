"""CtcBeamDecoder(device="cuda"): the token LM on the GPU and a batch's search there
(kernels.beam_cuda), its frame step replayed as a CUDA graph.  Under the simulator
(NUMBA_ENABLE_CUDASIM=1) the same kernels run on NumPy arrays, every launch made.

The search's last beams and backpointers come back to the host, where the
end-of-sentence costs are added and the hypotheses traced as on the CPU.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from wfst.kernels.groups import Automata

from .cuda_arrays import SIMULATOR, SearchStream, array_module, on_device, to_host
from .errors import OptionError

MAX_BATCH = 256  # utterances per search: the scratch is (batch, beam_size x V) candidates and their table


def _no_automaton() -> Automata:
    """One state, no arcs: stands in for a missing LM or phrase set (a launch takes no None)."""
    return Automata(np.zeros((1, 2), np.int64), np.zeros((1, 1), np.int32), np.full((1, 1), -1, np.int32),
                    np.zeros((1, 1), np.float32), np.zeros((1, 1), np.uint64), np.zeros((1, 1), np.float32))


class CudaBeamSearch:
    """The device's copy of the token LM (TokenLmArrays, or None) and the searches."""

    def __init__(self, lm, num_columns: int, *, block: int | None = None, cuda_graphs: bool = True):
        from wfst.kernels.beam import TokenLmArrays

        if not cuda.is_available():
            raise OptionError("device='cuda' but Numba finds no usable CUDA GPU (numba.cuda.is_available() is "
                              "False); decode with device='cpu'")
        self.xp = array_module()
        self.use_lm = lm is not None
        if lm is None:
            lm = TokenLmArrays(_no_automaton(), np.full(num_columns, -1, np.int32), np.int32(0))
        self.lm = TokenLmArrays(self._automaton(lm.automata), self.to_device(lm.label), np.int32(lm.start))
        self.block = block or (4 if SIMULATOR else 128)
        self.cuda_graphs = cuda_graphs and not SIMULATOR
        self._runner = SearchStream()
        self.device_seconds = 0.0  # the last search's GPU time (CUDA events)

    def to_device(self, a):
        return on_device(self.xp.asarray(np.ascontiguousarray(a)))

    def _automaton(self, a: Automata) -> Automata:
        return Automata(*(self.to_device(x) for x in a))

    def to_batch(self, log_probs):
        from .cuda_backend import device_input

        return device_input(log_probs)

    def input_faults(self, x, lengths):
        from .inputs import input_faults

        return input_faults(self.xp, x, lengths)

    def search(self, x, lengths: np.ndarray, settings, phrases, rows: np.ndarray):
        """The last beams of a batch: for each utterance (kernels.beam.Beam of host arrays,
        live hypotheses, parents (T, K), labels (T, K)).  x: (B, T, V) on the device;
        phrases: groups.Automata (host) of the batch's phrase sets, or None; rows: each
        utterance's row of them (-1: none)."""
        from wfst.kernels import beam_cuda as K
        from wfst.kernels.beam import Beam

        xp = self.xp
        B, V = x.shape[0], x.shape[2]
        beam_size = int(settings.beam_size)
        pb = self._automaton(phrases if phrases is not None else _no_automaton())
        out = []
        before = self._runner.seconds
        for lo in range(0, B, MAX_BATCH):
            hi = min(B, lo + MAX_BATCH)
            T = int(lengths[lo:hi].max(initial=0))
            beams = K.new_buffers(xp, hi - lo, beam_size)
            work = K.new_work(xp, lengths[lo:hi], rows[lo:hi], T, beam_size, V)
            clock = xp.zeros(1, np.int32)
            views = (on_device(clock), _views(beams), _views(work))
            launch = K.BeamLaunch(hi - lo, self.block)

            def run(stream, capture, sub=x[lo:hi]):
                K.search(launch, *views, settings, self.lm, self.use_lm, pb, on_device(sub), T, stream, capture)

            self._run(run)
            beams = type(beams)(*(to_host(a) for a in beams))
            parents, labels = to_host(work.parents), to_host(work.labels)
            for b in range(hi - lo):
                last = int(lengths[lo + b]) % 2
                out.append((Beam(*(a[last, b] for a in beams[:-1])), int(beams.count[last, b]), parents[b],
                            labels[b]))
        self.device_seconds = self._runner.seconds - before  # this call's GPU time
        return out

    def _run(self, search):
        """search(stream, capture) on the decoder's own stream, and wait for it."""
        self._runner.run(search, self.cuda_graphs)

def _views(group):
    return type(group)(*(on_device(a) for a in group))
