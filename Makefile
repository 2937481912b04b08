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
	$(if $(BLANK),--blank '$(BLANK)') $(if $(EPSILON_FREE),--epsilon-free)

.PHONY: demo test graph bench-graph bench-decode bench-fltop bench-boost bench-rescore install install-test clean

$(VENV)/.installed: setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

# On a machine with an NVIDIA GPU the tests run the CUDA kernels for real: add CuPy.
, := ,
TEST_EXTRAS := $(if $(wildcard /dev/nvidia0),test$(,)cuda,test)
$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[$(TEST_EXTRAS)]'
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

demo: install
	$(PY) recipes/demo.py

graph: install
	$(VENV)/bin/wfst-make-graph $(GRAPH_ARGS)

test: install-test
	$(VENV)/bin/pytest

bench-graph: install
	$(PY) recipes/bench_graph.py

# Decoders side by side on synthetic emissions of the demo's held-out sentences (needs the
# demo graphs: make demo).  Kaldi's FasterDecoder comes with the test extras.
BENCH_SEEDS ?= 4
bench-decode: install-test
	$(PY) recipes/demo.py --graphs-only > /dev/null
	mkdir -p build/bench
	$(VENV)/bin/wfst-bench --graph build/demo/char_compact --texts $(DEMO)/test.txt --word-boundary '|' \
		--seeds $(BENCH_SEEDS) --json build/bench/char_compact.json
	$(VENV)/bin/wfst-bench --graph build/demo/bpe_compact --texts $(DEMO)/test.txt --spm $(DEMO)/bpe.model \
		--seeds $(BENCH_SEEDS) --json build/bench/bpe_compact.json

# Frame-level token pruning (FLToP): top-N x relative threshold on the demo (needs make demo's graphs).
bench-fltop: install
	$(PY) recipes/demo.py --graphs-only > /dev/null
	$(PY) recipes/bench_fltop.py

# Word boosting: what 1 and 1,000 boosted words cost in speed (needs make demo's graphs).
bench-boost: install
	$(PY) recipes/demo.py --graphs-only > /dev/null
	$(PY) recipes/bench_boost.py --json build/bench/boost.json

# On-the-fly rescoring: a bigram-LM graph rescored with the demo 3-gram, against the 3-gram graph.
bench-rescore: install
	$(PY) recipes/demo.py --graphs-only > /dev/null
	$(PY) recipes/bench_rescore.py --json build/rescore/bench.json

clean:
	rm -rf build .wfst-cache

# Comparison experiments (SYNTHETIC emissions of the demo's held-out sentences; LM weights tuned
# on dev.txt, figures on test.txt).  Results, tables and plots in build/compare-*/; a run resumes
# where it stopped.  COMPARE_ARGS=--quick for a smoke test of a minute or two.
.PHONY: compare-topologies compare-decoders
COMPARE_ARGS ?=
compare-topologies: install
	$(PY) recipes/compare_topologies.py $(COMPARE_ARGS)

# pyctcdecode pins numpy<2: the recipe makes it a venv of its own in build/peers/.
compare-decoders: install-test
	$(PY) recipes/compare_decoders.py $(COMPARE_ARGS)
