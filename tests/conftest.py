"""Shared fixtures: databases (SQLite file and a real PostgreSQL), artifacts, the CLI."""

from __future__ import annotations

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
