"""Writing a stored run back out as a ``kernelwatch.run/1`` artifact."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import Engine, select, union
from sqlalchemy.orm import Session

from db import stored
from db.models import AccuracyResult, Case, Hardware, PerfResult, ProfilerMetric, Run
from db.queries import confirmations
from db.schema import SCHEMA, RunDocument, format_time, is_commit_sha, validate

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


def _ft(value) -> str | None:
    return None if value is None else format_time(value)


def export_run(engine: Engine, run_id: str) -> RunDocument:
    """The run as a validated artifact document."""
    with Session(engine) as conn:
        row = next(iter(stored.entities(conn, select(Run, Hardware).join(Hardware).where(Run.id == run_id))), None)
        if row is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        run, hw = row
        cases = {
            c["id"]: {k: c[k] for k in ("key", "kernel", "variant", "dtype", "params", "ceiling")}
            for c in stored.rows(
                conn,
                select(Case.id, Case.key, Case.kernel, Case.variant, Case.dtype, Case.params, Case.ceiling).where(
                    Case.id.in_(
                        union(
                            select(AccuracyResult.case_id).where(AccuracyResult.run_id == run_id),
                            select(PerfResult.case_id).where(PerfResult.run_id == run_id),
                            select(ProfilerMetric.case_id).where(ProfilerMetric.run_id == run_id),
                        )
                    )
                ),
            )
        }

        def section(model: type, drop: tuple[str, ...]) -> list[dict[str, Any]]:
            cols = [c for c in model.__table__.columns if c.name not in drop or c.name == "run_id"]  # names damage
            out = []
            for r in stored.rows(conn, select(*cols).where(model.run_id == run_id)):
                item = {k: v for k, v in r.items() if k != "case_id" and k not in drop}
                item["case"] = cases[r["case_id"]]["key"]
                out.append(item)
            return out

        internal = ("id", "run_id", "hardware_id")
        accuracy = section(AccuracyResult, internal)
        perf = section(PerfResult, (*internal, "n_samples"))
        for p in perf:
            p["call_samples_ms"] = p["call_samples_ms"] or []
        profiler = section(ProfilerMetric, internal)

    doc = {
        "schema": SCHEMA,
        "run": {
            "id": run.id,
            "commit": {
                "sha": run.commit_sha,
                "branch": run.branch,
                "time": _ft(run.commit_time),
                "subject": run.commit_subject,
                "dirty": run.dirty,
            },
            "trigger": run.trigger,
            "ci_job": run.ci_job,
            "device": run.device,
            "command": run.command,
            "versions": run.versions,
            "started_at": _ft(run.started_at),
            "finished_at": _ft(run.finished_at),
            "status": run.status,
            "synthetic": run.synthetic,
            "notes": run.notes,
            "phases_s": run.phases_s,
        },
        "hardware": {
            "vendor": hw.vendor,
            "device_name": hw.device_name,
            "device_count": run.device_count,
            "compute_units": hw.compute_units,
            "memory_bytes": hw.memory_bytes,
            "driver": run.driver,
            "toolkit": run.toolkit,
            "peak_gbps": run.peak_gbps,
            "peak_read_gbps": run.peak_read_gbps,
            "peak_gbps_datasheet": run.peak_gbps_datasheet,
            "peak_tflops": run.peak_tflops,
            "peak_tflops_datasheet": run.peak_tflops_datasheet,
        },
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
