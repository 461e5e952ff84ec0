# Two commands do everything on a fresh Linux machine with Python 3.10+ and pip:
#   make demo   install what the demo needs, load the shipped GPU history and a SYNTHETIC demo branch,
#               collect a reduced CPU accuracy run, open the dashboard
#   make test   install, lint, run the whole test suite
#   make test-fast   the tests that need no interpreter, process, PostgreSQL or browser
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
# pytest-xdist processes for make test, one per core (0: the tests in one process, in order)
TEST_WORKERS ?= auto
BIN := $(VENV)/bin
# The real H200 run the SYNTHETIC demo branch is derived from (kernelwatch/store/synthetic.py: demo_branch, DEMO_CHANGES).
DEMO_SOURCE ?= ci/history/2026-11-30T2052-cd36845f-h200x2-full-2gpu.json.gz
# A reduced CPU accuracy run: the 134 fp32 cases (tests/test_docs.py counts them); the full 385-case run stays in CI.
DEMO_CPU ?= --match /fp32/

.PHONY: demo test test-fast install install-demo lint bench clean compile-check

install: $(VENV)/.installed
install-demo: $(VENV)/.installed-demo

# Everything the tests need (the eval extra, apache-otava, is benchmarks/detector_eval.py's reference).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test,postgres,eval,triton]"
	touch $@ $(VENV)/.installed-demo

# What the demo runs: the package and Triton's interpreter, nothing for tests or evaluation.
$(VENV)/.installed-demo: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[triton]"
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
	$(BIN)/python -m kernelwatch.collect.compile_check --ascend-python $(ASCEND_VENV)/bin/python --report $(COMPILE_REPORT)

demo: install-demo
	$(BIN)/kernelwatch ingest --db $(DB) ci/history/*.json.gz
	$(BIN)/kernelwatch synth --db $(DB) --demo-from $(DEMO_SOURCE)
	$(BIN)/kernelwatch collect --db $(DB) --device cpu --suite accuracy --devices all $(DEMO_CPU)
	$(BIN)/kernelwatch dashboard --db $(DB) --port $(PORT)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: install lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

# The fast lane: no Triton interpreter, no process started, no PostgreSQL, no browser (the markers are given in
# tests/conftest.py). `make test` (and .ci/run) still runs everything.
FAST_MARKERS ?= not slow and not browser and not postgres and not interpreter and not subprocess
test-fast: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal -m "$(FAST_MARKERS)"

bench: install
	$(BIN)/python benchmarks/db_bench.py

clean:
	rm -rf $(VENV) $(ASCEND_VENV) *.egg-info .pytest_cache .ruff_cache
