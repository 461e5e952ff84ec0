"""Loading run artifacts into the database, all or nothing, idempotently."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from db.artifact import ArtifactError, content_hash, hardware_fingerprint, load_artifact, parse_time
from db.models import AccuracyResult, Case, Hardware, PerfResult, ProfilerMetric, Run


class IngestError(ValueError):
    """An artifact that is valid on its own but conflicts with what the database holds."""


@dataclass(frozen=True)
class IngestOutcome:
    run_id: str
    source: str
    status: str  # "ingested" or "unchanged"
    results: int


def _insert_ignore(conn: Connection, model: type, rows: list[dict[str, Any]], conflict: list[str]) -> None:
    if not rows:
        return
    dialect = sqlite if conn.dialect.name == "sqlite" else postgresql
    conn.execute(dialect.insert(model).on_conflict_do_nothing(index_elements=conflict), rows)


def _hardware_id(conn: Connection, hw: dict[str, Any]) -> int:
    fp = hardware_fingerprint(hw)
    _insert_ignore(conn, Hardware, [{**hw, "fingerprint": fp}], ["fingerprint"])
    return conn.execute(select(Hardware.id).where(Hardware.fingerprint == fp)).scalar_one()


def _case_ids(conn: Connection, cases: list[dict[str, Any]]) -> dict[str, int]:
    _insert_ignore(conn, Case, cases, ["key"])
    keys = [c["key"] for c in cases]
    ids: dict[str, int] = {}
    for start in range(0, len(keys), 500):
        chunk = keys[start : start + 500]
        ids.update(conn.execute(select(Case.key, Case.id).where(Case.key.in_(chunk))).all())
    return ids


def _t(value: str | None):
    return None if value is None else parse_time(value)


def write_run(conn: Connection, doc: dict[str, Any], source: str = "<artifact>") -> IngestOutcome:
    """Write one validated document inside the caller's transaction."""
    run = doc["run"]
    digest = content_hash(doc)
    n_results = len(doc["accuracy"]) + len(doc["perf"]) + len(doc["profiler"])
    existing = conn.execute(select(Run.content_hash).where(Run.id == run["id"])).scalar_one_or_none()
    if existing is not None:
        if existing != digest:
            raise IngestError(f"{source}: run.id: run {run['id']} already exists with different content")
        return IngestOutcome(run["id"], source, "unchanged", n_results)

    hw = doc["hardware"]
    hw_id = _hardware_id(conn, hw)
    commit = run["commit"]
    conn.execute(
        Run.__table__.insert().values(
            id=run["id"],
            hardware_id=hw_id,
            commit_sha=commit["sha"],
            branch=commit["branch"],
            commit_time=_t(commit["time"]),
            commit_subject=commit["subject"],
            dirty=commit["dirty"],
            trigger=run["trigger"],
            ci_job=run["ci_job"],
            device=run["device"],
            command=run["command"],
            versions=run["versions"],
            started_at=_t(run["started_at"]),
            finished_at=_t(run["finished_at"]),
            status=run["status"],
            synthetic=run["synthetic"],
            notes=run["notes"],
            peak_gbps=hw["peak_gbps"],
            peak_tflops=hw["peak_tflops"],
            content_hash=digest,
        )
    )
    ids = _case_ids(conn, doc["cases"])
    common = {"run_id": run["id"], "hardware_id": hw_id}

    def rows(section: str) -> list[dict[str, Any]]:
        out = []
        for item in doc[section]:
            row = {k: v for k, v in item.items() if k != "case"}
            out.append({**row, **common, "case_id": ids[item["case"]]})
        return out

    acc = rows("accuracy")
    perf = rows("perf")
    for row in perf:
        row["n_samples"] = len(row["samples_ms"])
    prof = rows("profiler")
    for model, batch in ((AccuracyResult, acc), (PerfResult, perf), (ProfilerMetric, prof)):
        if batch:
            conn.execute(model.__table__.insert(), batch)
    return IngestOutcome(run["id"], source, "ingested", n_results)


def ingest_documents(engine: Engine, docs: Iterable[tuple[str, dict[str, Any]]]) -> list[IngestOutcome]:
    """Write validated documents, one transaction per run."""
    outcomes = []
    for source, doc in docs:
        try:
            with engine.begin() as conn:
                outcomes.append(write_run(conn, doc, source))
        except IntegrityError:
            # Another process wrote the same run id between our check and our insert: judge again.
            with engine.begin() as conn:
                outcomes.append(write_run(conn, doc, source))
    return outcomes


def ingest_files(engine: Engine, paths: Iterable[str | Path]) -> list[IngestOutcome]:
    """Validate every file completely first, then write each run in its own transaction."""
    docs = [(str(p), load_artifact(p)) for p in paths]
    seen: dict[str, str] = {}
    for source, doc in docs:
        rid = doc["run"]["id"]
        if rid in seen and content_hash(doc) != content_hash(dict(docs)[seen[rid]]):
            raise ArtifactError(f"{source}: run.id: {rid} also appears, with different content, in {seen[rid]}")
        seen.setdefault(rid, source)
    return ingest_documents(engine, docs)
