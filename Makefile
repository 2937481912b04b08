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

.PHONY: demo test graph bench-graph install install-test clean

$(VENV)/.installed: setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[test]'
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

clean:
	rm -rf build .wfst-cache
