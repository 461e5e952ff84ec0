# Two commands do everything on a fresh Linux machine with Python 3.10+ and pip:
#   make demo   install, collect a CPU accuracy run, load the shipped GPU history, open the dashboard
#   make test   install, lint, run the whole test suite
#   make compile-check   compile every kernel launch for A100, H100/H200 (Triton) and Ascend 910B (triton-ascend)
PYTHON ?= python3
VENV ?= .venv
# The CPU build of PyTorch: a bare `torch` requirement would pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
# triton-ascend installs a `triton` package of its own: it lives in a second environment, never in .venv.
# Pinned with the CANN 8.5.0 / torch_npu 2.7.1 it documents (pyproject's npu extra); pybind11 is imported by
# its backend but not declared by its wheel.
ASCEND_VENV ?= .venv-ascend
TRITON_ASCEND_SPEC ?= triton-ascend==3.2.0
COMPILE_REPORT ?= test-artifacts/compile-check.md
DB ?= kernelwatch.db
PORT ?= 8501
BIN := $(VENV)/bin

.PHONY: demo test install lint bench clean compile-check

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test,postgres,eval,triton]"
	touch $@

$(ASCEND_VENV)/.installed: Makefile
	$(PYTHON) -m venv $(ASCEND_VENV)
	$(ASCEND_VENV)/bin/python -m pip install -q --upgrade pip
	$(ASCEND_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)" numpy
	$(ASCEND_VENV)/bin/python -m pip install -q "$(TRITON_ASCEND_SPEC)" "pybind11>=2.10"
	$(ASCEND_VENV)/bin/python -c "import triton.backends.ascend.compiler"
	touch $@

compile-check: install $(ASCEND_VENV)/.installed
	@mkdir -p $(dir $(COMPILE_REPORT))
	$(BIN)/python -m collector.compile_check --ascend-python $(ASCEND_VENV)/bin/python --report $(COMPILE_REPORT)

demo: install
	$(BIN)/kernelwatch ingest --db $(DB) ci/history/*.json.gz
	$(BIN)/kernelwatch collect --db $(DB) --device cpu --suite accuracy --devices all
	$(BIN)/kernelwatch dashboard --db $(DB) --port $(PORT)

lint: install
	$(BIN)/ruff check .

test: install lint
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python benchmarks/db_bench.py

clean:
	rm -rf $(VENV) $(ASCEND_VENV) *.egg-info .pytest_cache .ruff_cache
