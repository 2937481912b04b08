"""Compile every CUDA kernel to PTX for sm_90 (H100) with the exact argument types the
launcher passes, on a machine without a GPU.  The simulator runs kernels as Python and
never type-checks them; this does, for a plain search and for one with every extension
(word and phrase boosts, rescoring, FLToP).  It also checks that no launch passes an
argument a real launch refuses (None, or objects Numba cannot type).

Run by tests/test_cuda.py in a child process (NUMBA_ENABLE_CUDASIM must be off); prints
one line per kernel.
"""
import sys
import types
from pathlib import Path

import numba.cuda.dispatcher as dispatcher
import numpy as np

# Device functions (and the njit helpers the kernels call) ask the current device for its
# compute capability; there is none here, so name the target: sm_90.
dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))

from arpa_files import random_arpa  # noqa: E402
from numba import cuda, typeof  # noqa: E402
from wfst.kernels import beam_cuda as BK  # noqa: E402
from wfst.kernels import cuda as K  # noqa: E402

import wfst  # noqa: E402
import wfst.cuda_arrays as arrays  # noqa: E402
import wfst.cuda_backend as backend  # noqa: E402
import wfst.cuda_lattice as lattice  # noqa: E402

KERNELS = ["init_kernel", "prune_store_kernel", "batch_scan_kernel", "frame_costs_kernel", "lm_cache_clear_kernel",
           "expand_min_kernel", "fltop_redo_kernel", "expand_kernel", "expand_ties_kernel", "resolve_kernel",
           "closure_kernel", "traceback_kernel", "tick_kernel", "readings_kernel", "adopt_kernel",
           "lattice_arcs_kernel", "lattice_epsilons_kernel", "lattice_store_kernel"]
BEAM_KERNELS = ["beam_init_kernel", "beam_step_kernel", "beam_tick_kernel"]  # CtcBeamDecoder's
NO_FMA = {"beam_step_kernel"}  # its costs must round as the CPU's (it ranks candidates by them)
compiled: dict[str, set] = {}
problems: list[str] = []


def leaves(value, where):
    """Every leaf of a (nested) argument, with its place."""
    if isinstance(value, tuple):
        for i, v in enumerate(value):
            yield from leaves(v, f"{where}.{getattr(type(value), '_fields', range(len(value)))[i]}")
    else:
        yield where, value


class CompileOnLaunch:
    """Stands in for a kernel: a launch compiles it for the launch's argument types."""

    def __init__(self, module, name):
        self.name, self.kernel = name, getattr(module, name)

    def __getitem__(self, launch_config):
        return self

    def __call__(self, *args):
        for i, a in enumerate(args):
            for where, leaf in leaves(a, f"argument {i}"):
                if leaf is None or not isinstance(leaf, (np.ndarray, bool, int, float, np.generic)):
                    problems.append(f"{self.name}: {where} is {type(leaf).__name__}, which a real launch refuses")
        signature = tuple(typeof(a) for a in args)
        if signature not in compiled.setdefault(self.name, set()):
            ptx = cuda.compile_ptx(self.kernel.py_func, signature, cc=(9, 0))[0]
            compiled[self.name].add(signature)
            if self.name in NO_FMA and "fma." in ptx:
                problems.append(f"{self.name}: its PTX fuses a product into an FMA, which the CPU's float32 does not")


def main(graph_dir: str) -> int:
    for module, names in ((K, KERNELS), (BK, BEAM_KERNELS)):
        for name in names:
            setattr(module, name, CompileOnLaunch(module, name))
    # host arrays stand in for device arrays and pinned memory: only their types matter
    for module in (arrays, backend):  # cuda_backend holds its own names of the two
        module.on_device = lambda a: a
        module.array_module = lambda: np
    backend._pinned = np.array
    lattice.SIMULATOR = True  # the lattice's links are copied to the host as NumPy arrays
    cuda.is_available = lambda: True
    backend._sm_count = lambda: 132  # an H100's
    backend.CudaBackend.free_bytes = lambda self: None
    backend.CudaBackend._run = lambda self, search: search(0, None)  # no stream, no graph capture
    g = wfst.load_graph(graph_dir)
    lm = g.info["inputs"]["lm"]["path"]
    words = [w for w in g.words.symbols[1:] if w.isalnum()]
    x = np.full((2, 4, g.tokens.num_columns), -np.log(g.tokens.num_columns), np.float32)
    plain = wfst.Decoder(g, device="cuda", beam=10.0, max_active=50)
    plain.decode(x, np.array([4, 3]))
    # rescoring (the graph's own LM as the big LM), word and phrase boosts, FLToP: every kernel runs
    everything = wfst.Decoder(g, device="cuda", beam=10.0, max_active=50, rescore_lm=lm, graph_lm=lm,
                              token_top_n=2, token_rel_threshold=0.01)
    everything.decode(x, np.array([4, 3]), boost={words[0]: 1.0, f"{words[0]} {words[1]}": 1.0})
    # lattices, plain and with everything
    for dec in (plain, everything):
        lat = wfst.Decoder(g, dec.config, device="cuda", lattice_beam=4.0, prune_interval=2,
                           rescore_lm=lm if dec is everything else None, graph_lm=lm if dec is everything else None)
        lat.decode(x, np.array([4, 3]), boost={words[0]: 1.0, f"{words[0]} {words[1]}": 1.0})
    # streams: five open the lanes' workspace grows (its lanes move in: adopt_kernel)
    for dec in (plain, everything):
        streams = [dec.stream(boost={f"{words[0]} {words[1]}": 1.0}) for _ in range(5)]
        dec.advance(streams, [x[0]] * 5)
        streams[0].partial()
        dec.finish(streams)
    # the lexicon-free beam search, with and without its token LM and phrases
    import wfst.cuda_beam as beam_backend

    beam_backend.on_device = lambda a: a
    beam_backend.array_module = lambda: np
    beam_backend.SIMULATOR = True  # the simulator's launch shapes
    beam_backend.CudaBeamSearch._run = lambda self, search: search(0, None)  # no stream, no graph capture
    tokens = [s for s in g.tokens.symbols if s != g.tokens.symbols[g.tokens.blank]]
    token_lm = random_arpa(Path(graph_dir) / "token_lm.arpa", tokens, 3, 0)
    for lm_path, phrases in ((None, None), (token_lm, [f"{words[0]} {words[1]}"])):
        beam = wfst.CtcBeamDecoder(g.tokens, lm_path, beam_size=4, device="cuda", word_boundary="|")
        beam.decode(x, np.array([4, 3]), phrases=phrases)
    for name in KERNELS + BEAM_KERNELS:
        print(f"{name}: {len(compiled.get(name, ()))} signature(s) compiled to PTX for sm_90")
    for p in dict.fromkeys(problems):
        print(p)
    return 0 if set(compiled) == set(KERNELS + BEAM_KERNELS) and not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
