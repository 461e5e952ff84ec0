"""Loading run artifacts into the database: all or nothing, idempotently.

Every document is validated completely (``kernelwatch.store.schema``) before anything is written, and all the
documents of one call are written in one transaction: either every run is stored or none is.
Re-ingesting a run already stored changes nothing; the same run id with other content is refused.

Concurrent writers (many CI runners ingesting into one PostgreSQL, overlapping files): each transaction
first takes one transaction-scoped advisory lock (:data:`_PG_INGEST_LOCK`), so ingests into one database
run one after another. Without it, two transactions inserting the same hardware and case rows (``ON
CONFLICT DO NOTHING`` waits for the other's row) in different orders deadlocked, and two inserting the
same run both passed the "already stored?" check and one failed on ``run_pkey``: measured, 27 of 48
processes of 8 parallel ingests failed and stored nothing. An ingest is short (validation happens
before, outside the lock), so the queue costs little. SQLite serialises writers itself (``BEGIN
IMMEDIATE``). The hardware and case rows are still inserted in a stable order (sorted), and an integrity
error or deadlock met all the same (a writer of another KernelWatch, or one without this lock) is retried.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, delete, or_, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from kernelwatch.store import schema
from kernelwatch.store.engine import DatabaseError
from kernelwatch.store.journal import load_run
from kernelwatch.store.models import AccuracyResult, Case, Confirmation, Hardware, PerfResult, ProfilerMetric, Run
from kernelwatch.store.rows import run_row
from kernelwatch.store.schema import (
    IDENTITY,
    ArtifactError,
    RunDocument,
    content_hash,
    hardware_fingerprint,
    parse_time,
    printable,
)

_PG_INGEST_LOCK = 0x4B57_0002  # "KW" + 2: the advisory lock every ingest transaction takes (0x4B570001 migrates)
_RETRIES = 5
_RETRY_SQLSTATES = ("40P01", "40001")  # deadlock detected, serialization failure


class IngestError(ValueError):
    """An artifact that is valid on its own but conflicts with what the database holds."""


# What ingest did with a run: stored it, rebuilt a SYNTHETIC one with other content (write_run), found it stored.
OUTCOMES = ("ingested", "replaced", "unchanged")


@dataclass(frozen=True)
class IngestOutcome:
    run_id: str
    source: str
    status: str  # one of OUTCOMES
    results: int
    confirmations_ignored: int = 0  # an artifact's confirmations are never stored: only confirm stores them


def _insert_ignore(conn: Connection, model: type, rows: list[dict[str, Any]], conflict: list[str]) -> None:
    if not rows:
        return
    dialect = sqlite if conn.dialect.name == "sqlite" else postgresql
    conn.execute(dialect.insert(model).on_conflict_do_nothing(index_elements=conflict), rows)


def _hardware_id(conn: Connection, doc: RunDocument) -> int:
    return _hardware_row(conn, doc.hardware)


def _hardware_row(conn: Connection, hw: schema.Hardware) -> int:
    fp = hardware_fingerprint(hw)
    row = {k: getattr(hw, k) for k in IDENTITY}
    row.update(
        fingerprint=fp, peak_gbps_datasheet=hw.peak_gbps_datasheet, peak_tflops_datasheet=hw.peak_tflops_datasheet
    )
    _insert_ignore(conn, Hardware, [row], ["fingerprint"])
    return conn.execute(select(Hardware.id).where(Hardware.fingerprint == fp)).scalar_one()


def _case_ids(conn: Connection, doc: RunDocument, source: str) -> dict[str, int]:
    """Ids of the run's cases, inserting new ones. A key already stored with another kernel, variant, dtype
    or params is refused: every run of a key must describe the same point, or its history mixes two."""
    given = {c.key: c.model_dump() for c in sorted(doc.cases, key=lambda c: c.key)}
    _insert_ignore(conn, Case, list(given.values()), ["key"])
    keys = list(given)
    ids: dict[str, int] = {}
    fields = ("kernel", "variant", "dtype", "params")
    for start in range(0, len(keys), 500):
        chunk = keys[start : start + 500]
        for row in conn.execute(
            select(Case.key, Case.id, *(getattr(Case, f) for f in fields)).where(Case.key.in_(chunk))
        ).all():
            ids[row.key] = row.id
            for name in fields:
                if not _same(getattr(row, name), given[row.key][name]):
                    raise IngestError(
                        f"{source}: cases: case {row.key!r} is stored with {name} "
                        f"{getattr(row, name)!r}; this run gives {given[row.key][name]!r}"
                    )
    # A case's ceiling comes from its kernel's spec: a run that states it sets it (runs from before it was
    # recorded leave it as it is).
    stated: dict[str, list[str]] = {}
    for key, case in given.items():
        if case["ceiling"] is not None:
            stated.setdefault(case["ceiling"], []).append(key)
    for ceiling, keys_of in stated.items():
        for start in range(0, len(keys_of), 500):
            conn.execute(
                update(Case)
                .where(Case.key.in_(keys_of[start : start + 500]), or_(Case.ceiling.is_(None), Case.ceiling != ceiling))
                .values(ceiling=ceiling)
            )
    # So do its facts (kernelwatch.kernels.names.CaseFacts): the newest statement stands.
    facts: dict[str, list[str]] = {}
    for key, case in given.items():
        if case["facts"] is not None:
            facts.setdefault(json.dumps(case["facts"], sort_keys=True), []).append(key)
    for value, keys_of in facts.items():
        for start in range(0, len(keys_of), 500):
            conn.execute(update(Case).where(Case.key.in_(keys_of[start : start + 500])).values(facts=json.loads(value)))
    return ids


def set_ceilings(engine: Engine, ceilings: dict[str, str]) -> None:
    """Set the ceiling of cases by key, in one transaction (what their kernels' specs say)."""
    by_value: dict[str, list[str]] = {}
    for key, ceiling in ceilings.items():
        by_value.setdefault(ceiling, []).append(key)
    with engine.begin() as conn:
        for ceiling, keys in by_value.items():
            for start in range(0, len(keys), 500):
                conn.execute(update(Case).where(Case.key.in_(keys[start : start + 500])).values(ceiling=ceiling))


def _same(stored: Any, given: Any) -> bool:
    """Equal as JSON, types included: ``[1048576.0]`` is not ``[1048576]`` (Python's ``==`` says it is), and the
    case row keeps the first run's form, so accepting the other would make that run's export differ from it."""
    return json.dumps(stored, sort_keys=True) == json.dumps(given, sort_keys=True)


def write_run(
    conn: Connection,
    doc: RunDocument,
    source: str = "<artifact>",
    replace_synthetic: bool = False,
    digest: str | None = None,
) -> IngestOutcome:
    """Write one validated document inside the caller's transaction. With ``replace_synthetic``, a stored
    SYNTHETIC run of the same id and other content is deleted and written again (a demo rebuilt over changed
    history); a real run is never replaced. ``digest``: the document's :func:`content_hash` where the caller has
    it already (a whole run's canonical JSON, hashed once per ingest)."""
    run = doc.run
    digest = digest or content_hash(doc)
    n_results = len(doc.accuracy) + len(doc.perf) + len(doc.profiler)
    stored = conn.execute(select(Run.content_hash, Run.synthetic).where(Run.id == run.id)).one_or_none()
    status = "ingested"
    if stored is not None:
        existing, synthetic = stored
        if existing == digest:
            return IngestOutcome(run.id, source, "unchanged", n_results, len(doc.confirmations))
        if not (replace_synthetic and synthetic and run.synthetic):
            raise IngestError(f"{source}: run.id: run {run.id} already exists with different content")
        for model in (AccuracyResult, PerfResult, ProfilerMetric, Run):
            conn.execute(delete(model).where((model.id if model is Run else model.run_id) == run.id))
        status = "replaced"

    hw_id = _hardware_id(conn, doc)
    conn.execute(Run.__table__.insert().values(**run_row(run, doc.hardware), hardware_id=hw_id, content_hash=digest))
    ids = _case_ids(conn, doc, source)
    common = {"run_id": run.id, "hardware_id": hw_id}

    def rows(section: str) -> list[dict[str, Any]]:
        return [
            {**item.model_dump(exclude={"case"}), **common, "case_id": ids[item.case]} for item in getattr(doc, section)
        ]

    perf = rows("perf")
    for row in perf:
        row["n_samples"] = len(row["samples_ms"])
    for model, batch in ((AccuracyResult, rows("accuracy")), (PerfResult, perf), (ProfilerMetric, rows("profiler"))):
        if batch:
            conn.execute(model.__table__.insert(), batch)
    return IngestOutcome(run.id, source, status, n_results, len(doc.confirmations))


def _write_confirmations(conn: Connection, hw_id: int, items: list[schema.Confirmation]) -> None:
    """Confirmations not stored yet (one is stored once: same hardware, case, commits and time)."""
    rows = [
        {
            **c.model_dump(exclude={"case", "confirmed_at"}),
            "case_key": c.case,
            "hardware_id": hw_id,
            "confirmed_at": parse_time(c.confirmed_at),
        }
        for c in items
    ]
    _insert_ignore(
        conn, Confirmation, rows, ["hardware_id", "case_key", "baseline_commit", "candidate_commit", "confirmed_at"]
    )


def store_confirmations(engine: Engine, hardware: schema.Hardware, items: list[schema.Confirmation]) -> int:
    """Store ``kernelwatch confirm``'s verdicts, measured on ``hardware``, in one transaction; returns how many."""
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_INGEST_LOCK})
            _write_confirmations(conn, _hardware_row(conn, hardware), items)
    except SQLAlchemyError as exc:
        cause = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        first = cause[0] if cause else type(exc).__name__
        raise DatabaseError(printable(f"confirmations not stored: {first}")) from None
    return len(items)


def _write_all(
    conn: Connection, docs: list[tuple[str, RunDocument]], digests: list[str], replace_synthetic: bool
) -> list[IngestOutcome]:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_INGEST_LOCK})
    return [write_run(conn, doc, source, replace_synthetic, digest) for (source, doc), digest in zip(docs, digests)]


def _retryable(exc: SQLAlchemyError) -> bool:
    if isinstance(exc, IntegrityError):
        return True  # another writer stored one of these runs between our check and our insert: judge again
    return isinstance(exc, DBAPIError) and getattr(exc.orig, "sqlstate", None) in _RETRY_SQLSTATES


def ingest_documents(
    engine: Engine, docs: Iterable[tuple[str, RunDocument]], replace_synthetic: bool = False
) -> list[IngestOutcome]:
    """Write validated documents, all in one transaction: every run or none (``replace_synthetic``:
    :func:`write_run`).

    The model refuses everything either database would refuse, so a database error here is the
    database's own trouble (gone, full, read-only, locked past the timeout): one line, nothing stored.
    """
    docs = list(docs)
    digests = _no_conflicts_between(docs)
    try:
        for attempt in range(_RETRIES):
            try:
                with engine.begin() as conn:
                    return _write_all(conn, docs, digests, replace_synthetic)
            except SQLAlchemyError as exc:
                if attempt == _RETRIES - 1 or not _retryable(exc):
                    raise
        raise AssertionError("unreachable")
    except SQLAlchemyError as exc:
        cause = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        sources = ", ".join(source for source, _ in docs[:3]) + (", ..." if len(docs) > 3 else "")
        first = cause[0] if cause else type(exc).__name__
        raise DatabaseError(printable(f"nothing stored from {sources}: {first}")) from None


def _no_conflicts_between(docs: list[tuple[str, RunDocument]]) -> list[str]:
    """Each document's content hash; an error where one run id comes with two contents."""
    seen: dict[str, tuple[str, str]] = {}
    digests = []
    for source, doc in docs:
        digest = content_hash(doc)
        first = seen.setdefault(doc.run.id, (source, digest))
        if first[1] != digest:
            raise ArtifactError(f"{source}: run.id: {doc.run.id} also appears, with different content, in {first[0]}")
        digests.append(digest)
    return digests


def load_files(paths: Iterable[str | Path]) -> list[tuple[str, RunDocument]]:
    """Read and validate every file (no database needed): (source, document) pairs, or the first error.

    A file is an artifact, or a collector's journal (``kernelwatch.store.journal``): the run it recovers is loaded.
    """
    return [(printable(str(p)), load_run(p)) for p in paths]


def ingest_files(engine: Engine, paths: Iterable[str | Path]) -> list[IngestOutcome]:
    """Validate every file completely first, then write all of them in one transaction."""
    return ingest_documents(engine, load_files(paths))
