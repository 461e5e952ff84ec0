"""Writing a stored run back out as a ``kernelwatch.run/1`` artifact."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import Engine, select, union
from sqlalchemy.orm import Session

from kernelwatch.store import schema, stored
from kernelwatch.store.models import Case, Hardware, Run
from kernelwatch.store.queries import confirmations
from kernelwatch.store.rows import CASE_FIELDS, RESULTS, hardware_record, result_columns, result_fields, run_record
from kernelwatch.store.schema import SCHEMA, RunDocument, is_commit_sha, validate

_ID_PREFIX = re.compile(r"[0-9a-f-]{1,36}")


class RunNotFound(LookupError):
    pass


def find_run_id(engine: Engine, prefix: str) -> str:
    """A full run id from a unique prefix (as git does with shas), in any case.

    Only hex digits and dashes are looked up: SQLite's LIKE ignores case and PostgreSQL's does not,
    and ``%`` or ``_`` would be wildcards; ids are stored in lower case, so lowering the prefix gives
    the same answer on both.
    """
    if not _ID_PREFIX.fullmatch(prefix.lower()):
        raise RunNotFound(f"no run with id {prefix!r}")
    prefix = prefix.lower()
    with Session(engine) as conn:
        ids = conn.execute(select(Run.id).where(Run.id.like(f"{prefix}%")).limit(2)).scalars().all()
    if not ids:
        raise RunNotFound(f"no run with id {prefix!r}")
    if len(ids) > 1:
        raise RunNotFound(f"run id prefix {prefix!r} is ambiguous")
    return ids[0]


def export_run(engine: Engine, run_id: str) -> RunDocument:
    """The run as a validated artifact document."""
    with Session(engine) as conn:
        row = next(iter(stored.entities(conn, select(Run, Hardware).join(Hardware).where(Run.id == run_id))), None)
        if row is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        run, hw = row
        used = union(*(select(table.case_id).where(table.run_id == run_id) for table in RESULTS.values()))
        cases = {
            c["id"]: {name: c[name] for name in CASE_FIELDS}
            for c in stored.rows(
                conn, select(Case.id, *(getattr(Case, name) for name in CASE_FIELDS)).where(Case.id.in_(used))
            )
        }

        def section(record: type[schema.Record]) -> list[dict[str, Any]]:
            table = RESULTS[record]
            # run_id too: a damaged value is named with its run (kernelwatch.store.stored)
            cols = [table.run_id, table.case_id, *result_columns(record)]
            out = []
            for r in stored.rows(conn, select(*cols).where(table.run_id == run_id)):
                item = {name: r[name] for name in result_fields(record)}
                item["case"] = cases[r["case_id"]]["key"]
                out.append(item)
            return out

        accuracy = section(schema.AccuracyResult)
        perf = section(schema.PerfResult)
        for p in perf:
            p["call_samples_ms"] = p["call_samples_ms"] or []
            p["host_probe_samples_us"] = p["host_probe_samples_us"] or []
        profiler = section(schema.ProfilerMetric)

    doc = {
        "schema": SCHEMA,
        "run": run_record(run),
        "hardware": hardware_record(run, hw),
        "cases": list(cases.values()),
        "accuracy": accuracy,
        "perf": perf,
        "profiler": profiler,
        "confirmations": (
            confirmations(engine, hw.fingerprint, candidate_commit=run.commit_sha)
            if is_commit_sha(run.commit_sha)
            else []
        ),
    }
    return validate(doc)
