"""Install the `wfst` package; `wfst.graphs` and `wfst.kernels` live in top-level folders, and the
benchmarks and comparison experiments are the package `wfst_bench` in `benchmarks/`."""
from setuptools import setup

# What the benchmarks and experiments (wfst_bench) need and the runtime does not.
BENCH = [
    "matplotlib>=3.5",  # plots of make compare-topologies / compare-decoders
    "kaldi-decoder", "kaldifst",  # Kaldi's FasterDecoder, the reference decoder
    "flashlight-text",  # a peer decoder of make compare-decoders
    "wordfreq",  # English words and their frequencies for the generated LMs (recipes/generated_lm.py)
]

# numba-cuda 0.30 calls np.row_stack, which NumPy 2.5 removed: its kernels do not compile there.
CUDA = ["numba-cuda>=0.20", "numpy<2.5"]

setup(
    name="wfst-ctc",
    version="0.1.0",
    description="WFST graph compilation and GPU decoding for CTC speech recognition",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=["wfst", "wfst.graphs", "wfst.kernels", "wfst_bench"],
    package_dir={"wfst": "wfst", "wfst.graphs": "graphs", "wfst.kernels": "kernels", "wfst_bench": "benchmarks"},
    install_requires=[
        "numpy>=1.24",
        "pynini>=2.1.6",  # brings pywrapfst (OpenFST)
        "kaldilm>=1.15",  # Kaldi's arpa2fst
        "sentencepiece>=0.1.99",
        "tqdm>=4.60",
        "numba>=0.60",  # the CPU backend
        "kaldialign>=0.9",  # WER in wfst-decode and the benchmarks
    ],
    extras_require={
        # device="cuda": Numba-CUDA kernels on CuPy arrays; pick the CuPy wheel of your driver's CUDA
        # (nvidia-smi's "CUDA Version"); "cuda" is cuda12
        "cuda12": CUDA + ["cupy-cuda12x"],
        "cuda13": CUDA + ["cupy-cuda13x"],
        "cuda": CUDA + ["cupy-cuda12x"],
        # make gpu-check (recipes/gpu_check.py): the CUDA tests, Kaldi's FasterDecoder for the ratio
        "gpu-check": CUDA + ["pytest>=7", "kaldi-decoder", "kaldifst"],
        # make bench-* / compare-*: see BENCH
        "bench": BENCH,
        # tests: references (kenlm, Kaldi's FasterDecoder), the CUDA simulator, NVRTC to compile
        # the kernels to PTX on a machine without a GPU, what wfst_bench needs (its tests), the linter
        "test": ["pytest>=7", "hypothesis>=6", "kenlm", "numba-cuda>=0.20", "nvidia-cuda-nvrtc-cu12", "ruff>=0.4",
                 *BENCH],
    },
    entry_points={
        "console_scripts": [
            "wfst-make-graph=wfst.graphs.cli:main",
            "wfst-decode=wfst.cli:decode_main",
            "wfst-bench=wfst_bench.cli:main",
        ],
    },
)
