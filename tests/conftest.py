"""Shared fixtures: databases (SQLite file and a real PostgreSQL), artifacts, the CLI."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# Kernels run on the CPU through Triton's interpreter in every test. Triton fixes the mode when a kernel
# module is first imported, and test_collector.py (collected first) imports kernels through the collector,
# so it is set here, before any test module; tests that compile for real drop it in a subprocess.
os.environ.setdefault("TRITON_INTERPRET", "1")
# `make test` runs the tests in parallel (pytest-xdist, one process per core): each process's math libraries get
# its share of the cores (before torch or numpy is imported), else OpenMP and OpenBLAS threads of every process
# spin on every core and interpreted matmuls run several times slower.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _threads = str(max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, _threads)

from tests.pgserver import admin_url, create_database, drop_database  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_collection_finish(session) -> None:
    """Collection imported torch, Triton, Streamlit and every test module: some 400,000 objects that live until
    the end. Frozen, the collector's full passes skip them: a test's ``gc.collect()`` (test_bad_artifacts.py's
    checksum runs two per case) took 0.3-0.6 s on that heap, about 60 s of the fast lane, and takes 0.02 s."""
    gc.collect()
    gc.freeze()


def pytest_unconfigure(config) -> None:
    gc.unfreeze()  # at exit nanobind (Triton's bindings) reports every object still frozen as leaked


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[str]:
    url, server, why = admin_url()
    if url is None:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required in CI: {why}")
        pytest.skip(why)
    try:
        yield url
    finally:
        if server is not None:
            server.stop()


@pytest.fixture
def pg_url(pg_admin: str) -> Iterator[str]:
    url, name = create_database(pg_admin, "kw_test")
    try:
        yield url
    finally:
        drop_database(pg_admin, name)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'kw.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def cli() -> CliRunner:
    return CliRunner()


@pytest.fixture
def make_doc():
    """A valid synthetic run document; keyword arguments go to SyntheticHistory."""
    from kernelwatch.store.schema import to_data
    from kernelwatch.store.synthetic import SyntheticHistory

    def make(index: int = 0, **kwargs) -> dict:
        history = SyntheticHistory(runs=index + 1, **kwargs)
        docs = list(history.documents())
        return to_data(docs[index * history.hardware])

    return make


# ---------------------------------------------------------------------------------------------
# The fast lane (`make test-fast`: -m "not slow and not browser and not postgres and not interpreter and not
# subprocess"): markers given here, by file and by what a test uses, so no test file needs an edit.
# ---------------------------------------------------------------------------------------------
# Files whose tests run Triton kernels through the CPU interpreter (every kernel's accuracy and launch plans).
INTERPRETER_FILES = {
    "test_mse_loss.py",
    "test_scaled_masked_softmax.py",
    "test_fused_layernorm_matmul.py",
    "test_fused_rmsnorm_matmul.py",
    "test_launch_plans.py",
    "test_interpreter.py",
    "test_fastlaunch.py",
    "test_peers.py",
    "test_gpu_dev.py",
    "test_kernel_contract.py",
    "test_team_kernels.py",
    "test_weight_slots.py",
}
BROWSER_FILES = {"test_dashboard_browser.py", "test_chart_layout.py"}
# What starts another process: a command's subprocess, a collector's device workers (collect, confirm), git, a
# multiprocessing pool or process (precompile's compiling processes, test_db's concurrent writers).
_SPAWNS = (
    "subprocess",
    "sys.executable",
    "Popen",
    '"collect"',
    '"confirm"',
    "PLANTED",
    "TIMED",
    "run_collection",
    "get_context(",
    "ProcessPoolExecutor",
    "precompile(items",
)


def _source(obj) -> str:
    import inspect

    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def _spawns(item) -> bool:
    """The test, a fixture it uses or a helper of its module it calls (one level down) starts a process."""
    import re

    module = getattr(item, "module", None)
    texts = [_source(getattr(item, "function", None))]
    for defs in item._fixtureinfo.name2fixturedefs.values():
        texts += [_source(d.func) for d in defs if getattr(d.func, "__module__", "").startswith("tests")]
    helpers = set(re.findall(r"\b(_\w+)\(", " ".join(texts)))
    texts += [_source(getattr(module, name, None)) for name in helpers if callable(getattr(module, name, None))]
    return any(token in text for text in texts for token in _SPAWNS)


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        name = item.path.name
        if name in INTERPRETER_FILES:
            item.add_marker(pytest.mark.interpreter)
        if name in BROWSER_FILES:
            item.add_marker(pytest.mark.browser)
        if {"pg_url", "pg_admin"} & set(item.fixturenames):
            item.add_marker(pytest.mark.postgres)
        if _spawns(item):
            item.add_marker(pytest.mark.subprocess)


@pytest.fixture(autouse=True)
def _the_real_main_module(monkeypatch) -> None:
    """Streamlit's AppTest installs the page script it runs as ``__main__`` and leaves it there; a multiprocessing
    "spawn" child started by a later test in the same worker then re-runs that page as its main module, fails, and
    leaves its parent blocked writing to it (two CI runs hung 900 s that way). Every test gets the real one back."""
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
