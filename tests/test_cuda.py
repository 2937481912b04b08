"""device="cuda" gives exactly what device="cpu" gives.

Without a GPU (CI) the kernels run in Numba's CUDA simulator (conftest sets
NUMBA_ENABLE_CUDASIM=1), which runs every thread in Python: inputs stay tiny.  With a GPU
the same tests run the real kernels.  test_kernels_compile_for_sm90 compiles every
kernel to PTX for an H100 with the launcher's argument types, which the simulator
never checks.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from decoding import random_log_probs, random_tlg
from wfst.graphs import compile_graph

import wfst
from wfst import synthetic
from wfst.decoder import Decoder

pytest.importorskip("numba.cuda")
SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
if not SIMULATED:  # a GPU is here: its tests must run, not skip
    try:
        import cupy  # noqa: F401
    except ImportError:
        pytest.fail("a GPU is present but CuPy is not installed: pip install '.[cuda]' "
                    "(or set NUMBA_ENABLE_CUDASIM=1 to use the simulator)", pytrace=False)

CONFIGS = {
    "wide": dict(beam=1e4, max_active=10**6, min_active=0, token_capacity=64),
    "max_active binds": dict(beam=1e4, max_active=3, min_active=2),
    "overflow regrows": dict(beam=8.0, max_active=50, min_active=1, token_capacity=3),
    "FLToP": dict(beam=1e4, max_active=10**6, min_active=0, token_capacity=64, token_top_n=2,
                  token_rel_threshold=0.05),
}


def assert_same(graph, x, lengths, boost=None, **config):
    cpu = Decoder(graph, device="cpu", **config)
    gpu = Decoder(graph, device="cuda", **config)
    expected, got = cpu.decode(x, lengths, boost=boost), gpu.decode(x, lengths, boost=boost)
    assert got == expected
    assert gpu.stats.tokens_per_frame == pytest.approx(cpu.stats.tokens_per_frame)
    return gpu


@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
@pytest.mark.parametrize("seed", [0, 1])
def test_random_graphs_cuda_equals_cpu(seed, config):
    _, g = random_tlg(seed, num_states=10)
    x = random_log_probs(seed, batch=3, frames=6, columns=4)
    gpu = assert_same(g, x, np.array([6, 4, 0]), **CONFIGS[config])
    if config == "overflow regrows":
        assert gpu.stats.regrowths > 0


def test_tiny_tlg_with_backoff_epsilons_cuda_equals_cpu(tiny):
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    assert g.num_arcs > g.num_emitting_arcs  # backoff arcs: the closure kernel has work
    x = random_log_probs(5, batch=2, frames=7, columns=5, sharpness=3.0)
    assert_same(g, x, np.array([7, 5]), beam=20.0, max_active=30, min_active=1)


def test_word_boosting_cuda_equals_cpu(tiny):
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    g = wfst.load_graph(r.directory)
    x = random_log_probs(6, batch=3, frames=6, columns=5, sharpness=3.0)
    boost = [{"ab": 3.0, "ba": 1.0}, None, {"cab": 4.0, "a": -2.0}]
    assert_same(g, x, np.array([6, 5, 6]), boost=boost, beam=20.0, max_active=30, min_active=1)


def test_demo_graph_cuda_equals_cpu(demo, tmp_path):
    r = compile_graph(tmp_path / "bpe", tokens=demo / "bpe_tokens.txt", spm=demo / "bpe.model",
                      lm=demo / "lm.arpa", topology="compact", cache_dir=tmp_path / "cache")
    g = wfst.load_graph(r.directory)
    x, lengths = synthetic.from_texts(["it is a truth"], g.tokens, spm=demo / "bpe.model", seed=4)
    gpu = assert_same(g, x, lengths, beam=10.0, max_active=12, min_active=4)
    assert gpu.stats.tokens_per_frame > 4


def test_kernels_compile_for_sm90(tiny):
    """Every kernel type-checks and compiles to PTX for compute capability 9.0."""
    pytest.importorskip("nvidia.cuda_nvrtc", reason="needs NVRTC (pip install nvidia-cuda-nvrtc-cu12)")
    r = compile_graph(tiny / "g", tokens=tiny / "tokens.txt", lm=tiny / "lm.arpa", lexicon=tiny / "lexicon.txt",
                      word_boundary="|", topology="compact")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("ptx_check.py")), str(r.directory)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("bytes of PTX for sm_90") == 8, out.stdout
