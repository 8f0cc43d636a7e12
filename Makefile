# clforge: every target sets up its own virtual environment first.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
OPENCL := $(VENV)/.opencl

# make tune: tune every op on the default device (TUNE_ARGS, e.g. TUNE_ARGS='matmul --budget 300')
TUNE_ARGS ?= --budget 900

.PHONY: setup generate check lint test test-lowest demo bench tune gpu-check-dry gpu-check-sim clean torch-cpu

$(INSTALLED): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	$(MAKE) --no-print-directory torch-cpu
	touch $@

# PyTorch for tests/test_torch.py, only as a CPU wheel already on this machine (pip's
# find-links, e.g. /opt/wheels; TORCH_VERSION picks it): --no-index never reaches PyPI, whose
# plain `torch` is a multi-GB CUDA build. Its small dependencies come from the index after it
# (torch itself then already satisfied). Without such a wheel the torch tests are skipped.
TORCH_VERSION ?= 2.13.0
torch-cpu:
	@$(BIN)/python -c "import torch" 2>/dev/null || \
	  { $(BIN)/python -m pip install -q --no-index --no-deps 'torch==$(TORCH_VERSION)' 2>/dev/null && \
	    $(BIN)/python -m pip install -q 'torch==$(TORCH_VERSION)'; } || \
	  echo "clforge: no local CPU wheel of torch $(TORCH_VERSION); the torch tests will be skipped"

# An OpenCL device that can build kernels for the whole CPU. PoCL 3.0 from PyPI cannot build for
# CPUs newer than its LLVM 14 (Zen 5, ...), or builds AVX2 code for them (Zen 4); there, fall
# back to Debian's PoCL 3.1 when apt-get is available (and keep PyPI's when it is not).
$(OPENCL): $(INSTALLED)
	@$(BIN)/clforge devices --check >/dev/null 2>&1 || { \
	  echo "clforge: no OpenCL device builds kernels here; installing PoCL from PyPI (clforge[pocl])"; \
	  $(BIN)/python -m pip install -q -e '.[test,pocl]'; }
	@$(BIN)/clforge devices --check-full || { \
	  echo "clforge: no OpenCL device builds kernels for this CPU; installing Debian's PoCL (pocl-opencl-icd)"; \
	  command -v apt-get >/dev/null && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pocl-opencl-icd >/dev/null) ; \
	  $(BIN)/clforge devices --check; }
	touch $@

setup: $(OPENCL)

generate: $(INSTALLED)
	$(BIN)/clforge generate

check: $(INSTALLED)
	$(BIN)/clforge generate --check

lint: $(INSTALLED)
	$(BIN)/clforge lint
	$(BIN)/clforge schema --check

# The peers first (pyproject's `bench` extra: ONNX Runtime, CLBlast, matplotlib for the chart);
# if the extra fails as a whole (pyclblast needs libclblast-dev), each is tried on its own, and a
# peer that still fails is reported missing by the bench. NumPy is timed with the machine's
# OpenBLAS settings lifted (they slow current NumPy down). BENCH_ARGS: e.g. --quick, --json.
BENCH_ARGS ?=
# CLBlast (a peer) needs its C library to build pyclblast: Debian's libclblast-dev, installed when
# apt-get is available and it is missing; a machine without it reports CLBlast missing.
bench: $(OPENCL)
	@dpkg -s libclblast-dev >/dev/null 2>&1 || ! command -v apt-get >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclblast-dev >/dev/null) || \
	  echo 'libclblast-dev could not be installed: CLBlast will be reported missing'
	@$(BIN)/pip install -q -e '.[bench]' || { \
	  echo 'some bench peers could not be installed; trying each on its own'; \
	  for req in $$($(BIN)/python -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['bench']))"); do \
	    $(BIN)/pip install -q "$$req" || echo "bench peer $$req could not be installed"; \
	  done; }
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(BIN)/clforge bench $(BENCH_ARGS)

tune: $(OPENCL)
	$(BIN)/clforge tune $(TUNE_ARGS)

demo: $(OPENCL)
	$(BIN)/clforge generate
	$(BIN)/clforge demo

test: $(OPENCL)
	$(BIN)/clforge generate --check
	$(BIN)/clforge lint
	$(BIN)/clforge schema --check
	$(BIN)/ruff check generator tests tools examples
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -n auto --dist worksteal

# The dependencies' lower bounds (pyproject.toml), tested: a second environment with exactly those
# versions (.ci/lowest.txt) runs the core tests on the same OpenCL device. CI runs it after `make test`.
LOWEST := .venv-lowest
LOWEST_TESTS ?= tests/test_dispatch.py tests/test_generate.py tests/test_ops_elementwise.py \
	tests/test_ops_linalg.py tests/test_ops_reduce.py tests/test_recipes.py
test-lowest: $(OPENCL)
	$(PY) -m venv $(LOWEST)
	$(LOWEST)/bin/python -m pip install -q --upgrade pip
	@extras=test; $(BIN)/python -m pip show -q pocl-binary-distribution 2>/dev/null && extras=test,pocl; \
	  echo "$(LOWEST): clforge[$$extras] with .ci/lowest.txt"; \
	  $(LOWEST)/bin/python -m pip install -q -c .ci/lowest.txt -e ".[$$extras]"
	$(LOWEST)/bin/python -c "import jinja2, yaml, pydantic, numpy, pyopencl, tqdm; \
	  print('lowest:', *(f'{m.__name__} {m.__version__}' for m in (jinja2, yaml, pydantic, numpy, tqdm)), 'pyopencl', pyopencl.VERSION_TEXT)"
	$(LOWEST)/bin/python -m pytest -q -p no:cacheprovider -n auto -m "not slow" $(LOWEST_TESTS)

# The GPU check kit (docs/gpu-check.md), tried here so that a lent GPU machine is never
# spent on a typo: build the wheelhouse (.gpu-wheels/, from PyPI), then the run step against the
# local OpenCL device. GPU_CHECK_TESTS is pytest's -k (empty: the whole suite, as on the GPU).
GPU_CHECK_DEVICE ?= pocl
GPU_CHECK_TESTS ?= test_instance_matches_numpy and (relu or softmax)
GPU_CHECK_OPS ?=
gpu-check-dry: $(OPENCL)
	tools/gpu-check prepare --host-python $(BIN)/python
	out=$$(mktemp -d "$${TMPDIR:-/tmp}/gpu-check-dry.XXXXXX") && \
	  tools/gpu-check run --skip-install --skip-driver --python $(BIN)/python \
	    --device-match '$(GPU_CHECK_DEVICE)' --tests '$(GPU_CHECK_TESTS)' --ops '$(GPU_CHECK_OPS)' \
	    --out "$$out" && echo "results in $$out"

# As the GPU machine runs it, offline install included: SIM_PY is a Python of the wheelhouse's
# version (3.12) with NumPy and without pyopencl; the local PoCL stands in for NVIDIA's driver.
SIM_PY ?= python3.12
gpu-check-sim: $(OPENCL)
	tools/gpu-check prepare --host-python $(BIN)/python
	out=$$(mktemp -d "$${TMPDIR:-/tmp}/gpu-check-sim.XXXXXX") && \
	  tools/gpu-check simulate --host-python $(BIN)/python --python '$(SIM_PY)' \
	    --tests '$(GPU_CHECK_TESTS)' --ops '$(GPU_CHECK_OPS)' --out "$$out" && \
	  echo "results in $$out"

clean:
	rm -rf $(VENV) $(LOWEST) .pytest_cache .ruff_cache
