# clforge: every target sets up its own virtual environment first.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
OPENCL := $(VENV)/.opencl

.PHONY: setup generate check lint test demo bench clean

$(INSTALLED): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

# An OpenCL device that can build kernels. PoCL 3.0 from PyPI cannot build for CPUs newer than
# its LLVM 14 (Zen 4/5, ...); there, fall back to Debian's PoCL 3.1 when apt-get is available.
$(OPENCL): $(INSTALLED)
	@$(BIN)/clforge devices --check || { \
	  echo "clforge: no OpenCL device builds kernels; installing Debian's PoCL (pocl-opencl-icd)"; \
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

# NumPy is timed with the machine's OpenBLAS settings lifted (they slow current NumPy down)
bench: $(OPENCL)
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(BIN)/clforge bench

demo: $(OPENCL)
	$(BIN)/clforge generate
	$(BIN)/clforge demo

test: $(OPENCL)
	$(BIN)/clforge generate --check
	$(BIN)/clforge lint
	$(BIN)/clforge schema --check
	$(BIN)/ruff check generator tests
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
