# edgeship: `make target=host` builds the demo model for a target; `make test` runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
target ?= host
MODEL  ?=
DEVICES ?=
DEVICE ?=

.DEFAULT_GOAL := build
WEB    := web/node_modules/.installed
.PHONY: build setup setup-arm test-deps lint docs test test-slow test-all matrix bench bench-trained bench-team bench-quick bench-quant bench-cpu-kinds bench-ceiling bench-profile bench-web-settings bench-web-ceiling zoo clean

# The sentinel is rebuilt when .venv is missing or pyproject.toml changed. torch comes first, on its
# own, so a newcomer sees why the first run takes minutes. --no-compile: Python writes the bytecode of
# what is imported when it is first imported (uv's default too); pip compiling all 26,000 files of the
# venv up front took 84 s of a 194 s setup on a 2-core machine, first imports then cost about 10 s more.
# Where PYTHONDONTWRITEBYTECODE is set, Python never writes it: every process would compile torch from
# source again (import torch 5 s instead of 2 s, in each of the suite's ~450 Python processes), so pip
# compiles up front there.
# The same holds for edgeship's own source (an editable install: the checkout is what is imported):
# with PYTHONDONTWRITEBYTECODE set, each of the suite's Python processes compiled about 150 of its
# modules again (0.2 s of CPU each). BYTECODE compiles what changed since the last run (1 s when
# nothing did), before each command that starts such processes.
BYTECODE = $(if $(PYTHONDONTWRITEBYTECODE),@$(BIN)/python -m compileall -q -j 0 edgeship tests benchmarks >/dev/null,)
TORCH_PINS := $(shell grep -oE '"torch(vision)?==[0-9.]+' pyproject.toml | tr -d '"')
PIP_INSTALL := $(BIN)/python -m pip install --quiet $(if $(PYTHONDONTWRITEBYTECODE),,--no-compile)
$(VENV)/.installed: pyproject.toml
	@echo "edgeship: one-time setup of $(VENV) (about 7 GB, a few minutes; later runs skip it)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "  installing $(TORCH_PINS) (large, once)"; start=$$(date +%s); \
		$(PIP_INSTALL) $(TORCH_PINS) && echo "  ... done in $$(( $$(date +%s) - start )) s"
	@echo "  installing edgeship with every runtime (ExecuTorch, ONNX Runtime, OpenVINO, NNCF, Core ML tools), the test and docs tools"; start=$$(date +%s); \
		$(PIP_INSTALL) -e '.[all,test,team,trained,docs]' && echo "  ... done in $$(( $$(date +%s) - start )) s"
	@touch $@

# onnxruntime-web (pinned in web/package-lock.json) for the browser device and web bundles. Without
# npm the browser's rows say so (Debian: apt-get install npm).
$(WEB): web/package.json web/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		echo "  installing onnxruntime-web (npm ci in web/)"; \
		cd web && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error && touch node_modules/.installed; \
	else echo "npm not found: onnxruntime-web not installed (apt-get install npm); browser rows will say so"; fi

setup: $(VENV)/.installed $(WEB)

# The emulated Arm device (arm64-emulated): an aarch64 Python 3.11 with ONNX Runtime, ExecuTorch and
# torch, run by qemu-user (~1 minute, 0.9 GB under ~/.cache/edgeship, made once; pins in
# edgeship/devices/armroot.py). Needs Debian's mmdebstrap and qemu-user.
# Everything the whole test suite uses (`make test` says what it could not run without it): Debian
# packages (scripts/system-packages.sh: apt-get as root or through sudo), the venv, onnxruntime-web
# and the emulated Arm root. .ci/run starts with it.
test-deps:
	scripts/system-packages.sh
	$(MAKE) setup setup-arm

setup-arm: $(VENV)/.installed
	@command -v mmdebstrap >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1 || \
		{ echo "setup-arm needs mmdebstrap and qemu-user: apt-get install mmdebstrap qemu-user"; exit 1; }
	$(BIN)/edgeship devices setup arm64-emulated

build: $(VENV)/.installed $(WEB)
	$(BYTECODE)
	$(BIN)/edgeship build --target $(target) $(if $(MODEL),--model $(MODEL)) \
		$(if $(DEVICES),--devices $(DEVICES)) $(foreach d,$(DEVICE),--device $(d))

lint: $(VENV)/.installed
	$(BIN)/ruff check edgeship tests benchmarks docs/hooks

# The documentation site (mkdocs.yml, docs/) into site/: strict, so a broken link, anchor, page left out of
# the nav or API reference fails it. docs/benchmarks.md is generated from benchmarks/results/*.json.
docs: $(VENV)/.installed
	$(BIN)/mkdocs build --strict --site-dir site

# On every core (pytest-xdist); tests that share a server or time a device carry an xdist_group and
# run on one worker, the longest groups first (tests/scheduling.py FIRST; xdist's own reordering by
# test count would send a long one-test file last). The 15 slowest are listed at the end, then what was
# not run here and why.
# `make test` is the run before each commit; the tests marked `slow` (each about 15 s or more of a
# core: whole builds on the emulated Arm and AVX2 CPUs, the C++ app compiled against LibTorch, the Ray
# cluster, every backend's build against the golden results, the examples, fault tests that run or
# wait on several builds) are left to `make test-slow`, and the closing block counts them. CI
# (.ci/run) runs both; `make test-all` runs everything in one run.
PYTEST_PARALLEL := -n auto --dist loadgroup --no-loadscope-reorder --durations=15
test: $(VENV)/.installed $(WEB)
	$(BYTECODE)
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_PARALLEL)

test-slow: $(VENV)/.installed $(WEB)
	$(BYTECODE)
	$(BIN)/python -m pytest -q -m slow $(PYTEST_PARALLEL)

test-all: $(VENV)/.installed $(WEB)
	$(BYTECODE)
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

# Every model x target x device of a matrix file (default: the demo on host and android):
#   make matrix [MATRIX=file.toml] [OUT=folder] [RAY=auto|ADDRESS]
MATRIX ?= examples/matrix.toml
OUT    ?= artifacts/matrix
matrix: $(VENV)/.installed
	$(BIN)/edgeship matrix $(MATRIX) --out $(OUT) $(if $(RAY),--ray $(RAY))

# The demo, resnet18, mobilenet_v3_large and all-MiniLM-L6-v2 for every profile against eager, the
# peers and the machine's limit (benchmarks/results/latest.json; the two trained models' rows also in
# trained.json): every model's builds and peers, then the timing alone.
bench: $(VENV)/.installed $(WEB)
	$(BIN)/python benchmarks/bench.py

# The two models with trained weights (the demo, all-MiniLM-L6-v2) side by side per backend and
# precision: task metric, size, p50 interleaved (benchmarks/results/trained.json).
bench-trained: $(VENV)/.installed
	$(BIN)/python benchmarks/trained.py

# A team lab's costs: Ray's overhead per build task on the demo matrix, and rows/s into one
# PostgreSQL from concurrent writers (a real server started for it).
bench-team: $(VENV)/.installed
	$(BIN)/python benchmarks/team.py

# Day-to-day: resnet18 on the host profile only, fewer rounds.
bench-quick: $(VENV)/.installed
	$(BIN)/python benchmarks/bench.py --models resnet18 --profiles host --rounds 5 --max-rounds 9 --web ""

bench-quant: $(VENV)/.installed
	$(BIN)/python benchmarks/quantization.py

# Every int8 path's SQNR on each x86 CPU kind: this CPU, an emulated AVX2 CPU without VNNI (qemu-user),
# and this CPU with oneDNN's and FBGEMM's dispatch capped at AVX-512 VNNI, AVX-512 and AVX2.
bench-cpu-kinds: $(VENV)/.installed
	$(BIN)/python benchmarks/cpu_kinds.py

# resnet18's int8 GEMMs at their own shapes: the speed-up over eager no int8 variant can pass here.
bench-ceiling: $(VENV)/.installed
	$(BIN)/python benchmarks/ceiling.py

# Where resnet18's int8 time goes (MODEL=resnet18, the default): OpenVINO's per-node profile and
# ExecuTorch's ETDump (XNNPACK's operators) per layer, beside each layer's GEMM-only time.
bench-profile: $(VENV)/.installed
	$(BIN)/python benchmarks/runtime_profile.py $(if $(MODEL),--model $(MODEL))

# The web profile's int8 form (U8S8/S8S8, per-channel/per-tensor) and fp16, measured in Chromium.
bench-web-settings: $(VENV)/.installed $(WEB)
	$(BIN)/python benchmarks/web_settings.py

# Where the browser's gap to native ONNX Runtime comes from: a square MatMul, resnet18's convolutions
# alone and the whole model, in Chromium and native, same threads.
bench-web-ceiling: $(VENV)/.installed $(WEB)
	$(BIN)/python benchmarks/web_ceiling.py

# Every zoo model (examples/zoo, transformers, detection) for every target; takes hours on 2 cores.
zoo: $(VENV)/.installed
	$(BIN)/python benchmarks/zoo.py

clean:
	rm -rf artifacts/*/ artifacts/.cache
