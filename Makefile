# edgeship: `make target=host` builds the demo model for a target; `make test` runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
target ?= host
MODEL  ?=
DEVICES ?=
DEVICE ?=

.DEFAULT_GOAL := build
.PHONY: build setup lint test test-slow test-all bench bench-quant zoo clean

# The sentinel is rebuilt when .venv is missing or pyproject.toml changed.
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

setup: $(VENV)/.installed

build: $(VENV)/.installed
	$(BIN)/edgeship build --target $(target) $(if $(MODEL),--model $(MODEL)) \
		$(if $(DEVICES),--devices $(DEVICES)) $(foreach d,$(DEVICE),--device $(d))

lint: $(VENV)/.installed
	$(BIN)/ruff check edgeship tests benchmarks

test: $(VENV)/.installed
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: $(VENV)/.installed
	$(BIN)/python -m pytest -q -m slow

test-all: $(VENV)/.installed
	$(BIN)/python -m pytest -q

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/bench.py

bench-quant: $(VENV)/.installed
	$(BIN)/python benchmarks/quantization.py

# Every zoo model (examples/zoo, transformers, detection) for every target; takes hours on 2 cores.
zoo: $(VENV)/.installed
	$(BIN)/python benchmarks/zoo.py

clean:
	rm -rf artifacts/*/ artifacts/.cache
