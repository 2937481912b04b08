# Two commands do everything on a fresh clone:  make demo  and  make test.
# Each creates .venv and installs what it needs first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
DEMO   := recipes/demo/data

# make graph: the demo's character graph unless told otherwise.
TOKENS    ?= $(DEMO)/chars_tokens.txt
LM        ?= $(DEMO)/lm.arpa
TOPO      ?= compact
GRAPH_DIR ?= build/graphs/graph_$(TOPO)
ifeq ($(TOKENS),$(DEMO)/chars_tokens.txt)
BOUNDARY  ?= |
endif
GRAPH_ARGS = --tokens '$(TOKENS)' --lm '$(LM)' --topo '$(TOPO)' --out '$(GRAPH_DIR)' \
	$(if $(LEXICON),--lexicon '$(LEXICON)') $(if $(WORDS),--words '$(WORDS)') \
	$(if $(SPM),--spm '$(SPM)') $(if $(BOUNDARY),--word-boundary '$(BOUNDARY)') \
	$(if $(BLANK),--blank '$(BLANK)') $(if $(filter-out 0 no false,$(EPSILON_FREE)),--epsilon-free)

.PHONY: demo test gpu-check gpu-kit graph bench-graph bench-decode bench-fltop bench-boost bench-rescore bench-lm-store bench-stream bench-lattice bench-beam-search install install-test \
	install-bench clean

$(VENV)/.installed: setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

# On a machine with an NVIDIA GPU the tests run the CUDA kernels for real: add the CuPy wheel of
# the driver's CUDA (nvidia-smi's "CUDA Version": the cuda12 or cuda13 extra).
, := ,
CUDA_MAJOR := $(shell nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -1)
CUDA_EXTRA := $(if $(wildcard /dev/nvidia0),$(,)cuda$(or $(CUDA_MAJOR),12))
TEST_EXTRAS := test$(CUDA_EXTRA)
$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[$(TEST_EXTRAS)]'
	touch $@

# The benchmarks and experiments (wfst_bench, in benchmarks/): what they need beyond the runtime
# (matplotlib, Kaldi's FasterDecoder, flashlight-text), and CuPy for their CUDA rows on a GPU machine.
BENCH_EXTRAS := bench$(CUDA_EXTRA)
$(VENV)/.installed-bench: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[$(BENCH_EXTRAS)]'
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test
install-bench: $(VENV)/.installed-bench

demo: install
	$(PY) recipes/demo.py

graph: install
	$(VENV)/bin/wfst-make-graph $(GRAPH_ARGS)

# The linter (ruff, configured in pyproject.toml), then the suite.
test: install-test
	$(VENV)/bin/ruff check wfst kernels graphs benchmarks recipes tests
	$(VENV)/bin/pytest

# The CUDA backend on this machine's GPU, verified and measured in one command (recipes/gpu_check.py;
# report in build/gpu-check/).  Its venv (recipes/gpu_env.sh) uses the machine's own CuPy, numba and
# torch as they are; WHEELS=dir installs what is missing from that folder of wheels only (offline).
# SIMULATE=1: the same script in Numba's CUDA simulator on a tiny subset, no GPU needed (CI runs it).
GPU_VENV ?= build/gpu-venv
gpu-check:
ifeq ($(SIMULATE),1)
	$(MAKE) --no-print-directory install-test
	$(PY) recipes/gpu_check.py --simulate
else
	recipes/gpu_env.sh '$(PYTHON)' '$(GPU_VENV)' '$(WHEELS)'
	$(GPU_VENV)/bin/python recipes/gpu_check.py
endif

# What a GPU machine with no package index needs to run gpu-check's sections KIT (default: the
# CUDA tests, then the open goals: streams, on-the-fly rescoring, the large rescoring setup of
# bench-rescore, made first where missing) in .gpu-kit/: the graphs built here, the wheels it
# lacks for its Python KIT_PYTHON, and run.sh to run there (docs/benchmarks.md: "Running
# gpu-check on a lent GPU").
KIT ?= tests,streams,rescoring,rescoring-large
KIT_PYTHON ?= 3.12
gpu-kit: install-test install-bench
	$(PY) recipes/gpu_check.py --kit .gpu-kit --kit-python $(KIT_PYTHON) --only $(KIT)

bench-graph: install
	$(PY) recipes/bench_graph.py

# Decoders side by side on synthetic emissions of the demo's held-out sentences (needs the
# demo graphs: make demo).  Kaldi's FasterDecoder comes with the bench extras.
BENCH_SEEDS ?= 4
BENCH_ROUNDS ?= 3
bench-decode: install-bench
	$(PY) recipes/demo.py --graphs-only > /dev/null
	mkdir -p build/bench
	$(VENV)/bin/wfst-bench --graph build/demo/char_compact --texts $(DEMO)/test.txt --word-boundary '|' \
		--seeds $(BENCH_SEEDS) --rounds $(BENCH_ROUNDS) --json build/bench/char_compact.json
	$(VENV)/bin/wfst-bench --graph build/demo/bpe_compact --texts $(DEMO)/test.txt --spm $(DEMO)/bpe.model \
		--seeds $(BENCH_SEEDS) --rounds $(BENCH_ROUNDS) --json build/bench/bpe_compact.json

# Frame-level token pruning (FLToP): top-N x relative threshold on the demo (needs make demo's graphs).
bench-fltop: install-bench
	$(PY) recipes/demo.py --graphs-only > /dev/null
	$(PY) recipes/bench_fltop.py --json build/bench/fltop.json

# Word boosting: what 1 and 1,000 boosted words cost in speed (needs make demo's graphs).
bench-boost: install-bench
	$(PY) recipes/demo.py --graphs-only > /dev/null
	$(PY) recipes/bench_boost.py --json build/bench/boost.json

# Many live streams against offline decoding: the demo's character and BPE graphs, the character
# graph rescored on the fly, and bench-rescore's large setup (made once where missing).
bench-stream: install-bench
	$(PY) recipes/demo.py --graphs-only > /dev/null
	$(PY) recipes/bench_stream.py --json build/stream/bench.json

# Word lattices: generation against the best-path search and Kaldi's LatticeSimpleDecoder, N-best,
# confidences (calibration, NCE) and the oracle WER (needs make demo's graphs).
bench-lattice: install-bench
	$(PY) recipes/demo.py --graphs-only > /dev/null
	$(PY) recipes/bench_lattice.py --json build/bench/lattice.json

# The lexicon-free beam search against flashlight-text's LexiconFreeDecoder (same token LM) and
# the TLG decoder (needs make demo's graphs).
bench-beam-search: install-bench
	$(PY) recipes/demo.py --graphs-only > /dev/null
	$(PY) recipes/bench_beam_search.py --json build/bench/beam_search.json

# On-the-fly rescoring against the static big-LM graph: the demo's bigram graphs rescored with its
# 3-gram, and a generated 12.6k-word setup (a pruned 3-gram graph rescored with a 4-gram).
bench-rescore: install-bench
	$(PY) recipes/demo.py --graphs-only > /dev/null
	$(PY) recipes/bench_rescore.py --json build/rescore/bench.json

# The rescoring LM's store made from ARPA files of 1M to 30M n-grams (generated once in
# build/lm-store/) and a Rescorer built on it: seconds and peak memory, each in a fresh process.
bench-lm-store: install-bench
	$(PY) recipes/bench_lm_store.py --json build/lm-store/bench.json

# Numba's on-disk cache keys each function by its own file: after editing kernels/common.py the
# cached code of functions in other files that inline it is stale.  make clean drops it too.
clean:
	rm -rf build .wfst-cache
	find kernels wfst -name '*.nbi' -delete -o -name '*.nbc' -delete

# Comparison experiments (SYNTHETIC emissions of the demo's held-out sentences; LM weights tuned
# on dev.txt, figures on test.txt).  Results, tables and plots in build/compare-*/; a run resumes
# where it stopped.  COMPARE_ARGS=--quick for a smoke test of a minute or two.
.PHONY: compare-topologies compare-decoders pyctcdecode-venv
COMPARE_ARGS ?=
compare-topologies: install-bench
	$(PY) recipes/compare_topologies.py $(COMPARE_ARGS)

# pyctcdecode pins numpy<2: a venv of its own, made here (remade when its requirements change;
# the file copied in last marks it complete).  If it cannot be made, compare-decoders still runs
# and pyctcdecode's rows say why they are empty.
PYCTCDECODE_VENV ?= build/peers/pyctcdecode-venv
PYCTCDECODE_REQS := benchmarks/pyctcdecode-requirements.txt
$(PYCTCDECODE_VENV)/.wfst-requirements: $(PYCTCDECODE_REQS)
	@if [ -e '$(PYCTCDECODE_VENV)' ] && [ ! -e '$(PYCTCDECODE_VENV)/.wfst-made' ] \
	    && [ ! -e '$(PYCTCDECODE_VENV)/.wfst-requirements' ]; then \
	  echo "refusing to clear $(PYCTCDECODE_VENV): this target did not make it (give PYCTCDECODE_VENV a new path)"; \
	  exit 1; fi
	$(PYTHON) -m venv --clear '$(PYCTCDECODE_VENV)'
	touch '$(PYCTCDECODE_VENV)/.wfst-made'
	'$(PYCTCDECODE_VENV)/bin/python' -m pip install --quiet --disable-pip-version-check -r $(PYCTCDECODE_REQS)
	cp $(PYCTCDECODE_REQS) $@
pyctcdecode-venv: $(PYCTCDECODE_VENV)/.wfst-requirements

compare-decoders: install-bench
	-$(MAKE) --no-print-directory pyctcdecode-venv
	$(PY) recipes/compare_decoders.py --venv '$(PYCTCDECODE_VENV)' $(COMPARE_ARGS)
