"""Who may write the baseline's history.

A baseline branch's runs (``main`` unless ``KERNELWATCH_BASELINE_BRANCHES`` names others, comma-separated) are what
every candidate is judged against, so they come only from the triggers that make them: the nightly, or a person
(``manual``: whoever holds the database's writer credentials). A pull request's run (trigger ``pr``) of such a
branch is refused by ``kernelwatch ingest`` and ``collect --db`` (:func:`check_writers`). The trigger is written by
the run itself, so this check only stops mistakes; the boundary is the credentials: on PostgreSQL a pull request's
role whose row-level security policy lets it store runs of other branches only (``ci/workflows/postgres-roles.sql``),
on SQLite a pull request job that never holds the shared file (``ci/workflows/pull-request.yml``).
"""

from __future__ import annotations

import os

from kernelwatch.store.ingest import IngestError
from kernelwatch.store.schema import RunDocument

BASELINE_BRANCHES_ENV = "KERNELWATCH_BASELINE_BRANCHES"
DEFAULT_BASELINE_BRANCHES = ("main",)
BASELINE_TRIGGERS = ("nightly", "manual")  # who may write a baseline branch's history


def baseline_branches() -> tuple[str, ...]:
    """The branches whose history judges candidates (``KERNELWATCH_BASELINE_BRANCHES``, default main)."""
    given = os.environ.get(BASELINE_BRANCHES_ENV)
    if given is None:
        return DEFAULT_BASELINE_BRANCHES
    return tuple(b.strip() for b in given.split(",") if b.strip())


def check_writers(docs: list[tuple[str, RunDocument]]) -> None:
    """Refuse, before anything is written, a run of a baseline branch from a trigger that may not write it."""
    protected = baseline_branches()
    for source, doc in docs:
        run = doc.run
        if run.commit.branch in protected and run.trigger not in BASELINE_TRIGGERS:
            raise IngestError(
                f"{source}: run {run.id} is a {run.trigger} run of baseline branch {run.commit.branch!r}: only "
                f"{' or '.join(BASELINE_TRIGGERS)} runs may write a baseline branch's history (nothing stored)"
            )
