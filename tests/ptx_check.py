"""Compile every CUDA kernel to PTX for sm_90 (H100) with the exact argument types the
launcher passes, on a machine without a GPU.  The simulator runs kernels as Python and
never type-checks them; this does.  Run by tests/test_cuda.py in a child process
(NUMBA_ENABLE_CUDASIM must be off); prints one line per kernel.
"""
import sys
import types

import numba.cuda.dispatcher as dispatcher
import numpy as np

# Device functions (and the njit helpers the kernels call) ask the current device for its
# compute capability; there is none here, so name the target: sm_90.
dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))

from numba import cuda, typeof  # noqa: E402
from wfst.kernels import cuda as K  # noqa: E402

import wfst  # noqa: E402
import wfst.cuda_backend as backend  # noqa: E402
from wfst.decoder import Decoder  # noqa: E402

KERNELS = ["init_kernel", "prune_store_kernel", "frame_costs_kernel", "lm_cache_clear_kernel", "expand_min_kernel",
           "expand_kernel", "expand_ties_kernel", "resolve_kernel", "closure_kernel", "traceback_kernel"]
compiled = {}


class CompileOnLaunch:
    """Stands in for a kernel: a launch compiles it for the launch's argument types."""

    def __init__(self, name):
        self.name, self.kernel = name, getattr(K, name)

    def __getitem__(self, launch_config):
        return self

    def __call__(self, *args):
        if self.name not in compiled:
            ptx, _ = cuda.compile_ptx(self.kernel.py_func, tuple(typeof(a) for a in args), cc=(9, 0))
            compiled[self.name] = len(ptx)


def main(graph_dir: str) -> int:
    for name in KERNELS:
        setattr(K, name, CompileOnLaunch(name))
    g = wfst.load_graph(graph_dir)
    # rescoring (the graph's own LM as the big LM) and phrase boosting: every kernel runs,
    # with the context arrays the launcher makes for them
    lm = g.info["inputs"]["lm"]["path"]
    dec = Decoder(g, beam=10.0, max_active=50, rescore_lm=lm, graph_lm=lm)
    backend.on_device = lambda a: a  # host arrays stand in for device arrays: only their types matter
    backend._pinned_empty = np.empty  # likewise for the pinned host memory that kernels read
    cb = object.__new__(backend.CudaBackend)
    cb.xp, cb.graph, cb.bp_per_frame, cb.block, cb.arc_blocks = np, g, None, 256, 64
    cb.lm_cache_slots, cb._lm, cb._no_lm, cb.lm_stats = None, None, None, {}
    for name in ("e_indptr", "ne_indptr", "ilabel", "olabel", "weight", "nextstate", "final"):
        setattr(cb, name, getattr(g, name))
    x = np.full((2, 4, g.tokens.num_columns), -np.log(g.tokens.num_columns), np.float32)
    from wfst.boost import boost_tables

    words = [w for w in g.words.symbols[1:] if w.isalnum()]
    dec._boost = boost_tables({words[0]: 1.0, f"{words[0]} {words[1]}": 1.0}, 2, g.words, 10.0)
    cb._run(dec, x, np.array([4, 3]), [0, 1])
    for name in KERNELS:
        print(f"{name}: {compiled.get(name, 0)} bytes of PTX for sm_90")
    return 0 if set(compiled) == set(KERNELS) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
