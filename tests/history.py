"""The shipped history (ci/history), read and validated once per test process: the fixtures that build databases
from it (test_dashboard.py, test_no_silent_pass.py, test_verdict_agreement.py) and the tests that pick runs out of
it only read the documents, and reading every file takes about 2 s each time."""

from __future__ import annotations

import functools
from pathlib import Path

from kernelwatch.store.artifact import load_artifact
from kernelwatch.store.schema import RunDocument

HISTORY = Path(__file__).resolve().parents[1] / "ci" / "history"


@functools.cache
def history_runs() -> tuple[tuple[str, RunDocument], ...]:
    """(path, document) of every run in ci/history, in file-name order (as `ingest ci/history/*.json.gz` reads)."""
    return tuple((str(p), load_artifact(p)) for p in sorted(HISTORY.glob("*.json.gz")))
