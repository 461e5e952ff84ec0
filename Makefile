# Two commands do everything on a fresh Linux machine with Python 3.10+ and pip:
#   make demo   install, collect a CPU accuracy run, load the shipped GPU history, open the dashboard
#   make test   install, lint, run the whole test suite
PYTHON ?= python3
VENV ?= .venv
# The CPU build of PyTorch: a bare `torch` requirement would pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
DB ?= kernelwatch.db
PORT ?= 8501
BIN := $(VENV)/bin

.PHONY: demo test install lint bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test,postgres,eval]"
	touch $@

demo: install
	$(BIN)/kernelwatch ingest --db $(DB) ci/history/*.json
	$(BIN)/kernelwatch collect --db $(DB) --device cpu --suite accuracy --devices all
	$(BIN)/kernelwatch dashboard --db $(DB) --port $(PORT)

lint: install
	$(BIN)/ruff check .

test: install lint
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python benchmarks/db_bench.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache
