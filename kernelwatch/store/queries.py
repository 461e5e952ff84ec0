"""The read queries the CLI, the dashboard and the gate use. Nothing else writes SQL for reading.

Every function takes an Engine and plain values, binds them as parameters and returns plain
dicts, so callers (Streamlit pages, the gate) never see SQLAlchemy objects.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Engine, func, or_, select, union
from sqlalchemy.orm import Session

from kernelwatch.kernels.names import KERNEL_IMPL
from kernelwatch.store import schema, stored
from kernelwatch.store.models import AccuracyResult, Ack, Case, Confirmation, Hardware, PerfResult, ProfilerMetric, Run
from kernelwatch.store.rows import RUN_HARDWARE, result_columns
from kernelwatch.store.schema import format_time

# selected only where a query is asked for them
SAMPLE_LISTS = ("samples_ms", "call_samples_ms", "host_probe_samples_us")
RESULT_FIELDS = (
    "kernel", "variant", "case", "dtype", "params", "implementation", "median_ms", "p20_ms", "p80_ms",
    "gbps", "tflops", "pct_peak", "speedup_vs_eager", "target", "target_met", "error_budget", "passed", "error",
)  # fmt: skip


def _iso(value) -> str | None:
    return None if value is None else format_time(value)


def _run_dict(run: Run, hw: Hardware) -> dict[str, Any]:
    return {
        "id": run.id,
        "commit": run.commit_sha,
        "branch": run.branch,
        "commit_time": _iso(run.commit_time),
        "subject": run.commit_subject,
        "dirty": run.dirty,
        "hardware": hw.device_name,
        "fingerprint": hw.fingerprint,
        "vendor": hw.vendor,
        "device": run.device,
        "trigger": run.trigger,
        "status": run.status,
        "synthetic": run.synthetic,
        "started": _iso(run.started_at),
        "finished": _iso(run.finished_at),
        **{name: getattr(run, name) for name in RUN_HARDWARE},  # the run's hardware context: ceilings, driver...
        "versions": run.versions,
        "command": run.command,
    }


def match_hardware(engine: Engine, hardware: str, rows: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The hardware ``--hardware`` names, by one rule for every command (runs, bisect, ack, gate): those
    whose fingerprint starts with it or whose device name is it (case-insensitive), else those whose device
    name contains it. ``rows``: the hardware rows to match (default: the database's, :func:`list_hardware`)."""
    text = (hardware or "").strip().lower()
    if not text:
        return []
    rows = list_hardware(engine) if rows is None else rows
    exact = [h for h in rows if h["fingerprint"].startswith(text) or h["device_name"].lower() == text]
    return sorted(exact or [h for h in rows if text in h["device_name"].lower()], key=lambda h: h["device_name"])


def find_hardware(engine: Engine, hardware: str, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The one hardware :func:`match_hardware` names; LookupError (one line: what matched, what exists) else."""
    if not (hardware or "").strip():
        raise LookupError("--hardware must not be empty")
    rows = list_hardware(engine) if rows is None else rows
    matches = match_hardware(engine, hardware, rows)
    if len(matches) != 1:
        names = "; ".join(f"{h['device_name']} ({h['fingerprint'][:8]})" for h in matches[:6]) or "none"
        known = "; ".join(f"{h['device_name']} ({h['fingerprint'][:8]})" for h in rows[:6])
        raise LookupError(
            f"--hardware {hardware[:60]!r} must match exactly one hardware: it matches "
            f"{len(matches)} ({names})" + ("" if matches else f"; known: {known or 'none'}")
        )
    return matches[0]


def list_runs(engine: Engine, hardware: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """Runs, newest first; with ``hardware``, only runs on the hardware :func:`match_hardware` names."""
    stmt = select(Run, Hardware).join(Hardware)
    if hardware:
        stmt = stmt.where(Hardware.id.in_([h["id"] for h in match_hardware(engine, hardware)]))
    stmt = stmt.order_by(Run.started_at.desc(), Run.id).limit(limit)
    with Session(engine) as conn:
        return [_run_dict(r, h) for r, h in stored.entities(conn, stmt)]


def list_hardware(engine: Engine) -> list[dict[str, Any]]:
    cols = [c for c in Hardware.__table__.columns]
    with Session(engine) as conn:
        return stored.rows(conn, select(*cols).order_by(Hardware.device_name))


def latest_complete_runs(engine: Engine, include_synthetic: bool = True) -> list[dict[str, Any]]:
    """The newest complete run of every hardware fingerprint (one index probe per hardware)."""
    out = []
    with Session(engine) as conn:
        for hw in stored.scalars(conn, select(Hardware)):
            stmt = select(Run).where(Run.hardware_id == hw.id, Run.status == "complete")
            if not include_synthetic:
                stmt = stmt.where(Run.synthetic.is_(False))
            run = next(iter(stored.scalars(conn, stmt.order_by(Run.started_at.desc()).limit(1))), None)
            if run is not None:
                out.append(_run_dict(run, hw))
    return sorted(out, key=lambda r: r["hardware"])


def run_results(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    """One flat record per case x implementation (accuracy-only cases as implementation 'triton')."""
    with Session(engine) as conn:
        acc = {
            r.case_id: r for r in stored.scalars(conn, select(AccuracyResult).where(AccuracyResult.run_id == run_id))
        }
        perf = stored.scalars(conn, select(PerfResult).where(PerfResult.run_id == run_id))
        case_ids = set(acc) | {p.case_id for p in perf}
        cases = {c.id: c for c in stored.scalars(conn, select(Case).where(Case.id.in_(case_ids)))}

    def record(case: Case, impl: str, p: PerfResult | None, a: AccuracyResult | None) -> dict[str, Any]:
        errors = [e for e in ((a.error if a else None), (p.error if p else None)) if e]
        return {
            "kernel": case.kernel,
            "variant": case.variant,
            "case": case.key,
            "dtype": case.dtype,
            "params": case.params,
            "implementation": impl,
            "median_ms": p.median_ms if p else None,
            "p20_ms": p.p20_ms if p else None,
            "p80_ms": p.p80_ms if p else None,
            "gbps": p.gbps if p else None,
            "tflops": p.tflops if p else None,
            "pct_peak": p.pct_peak if p else None,
            "speedup_vs_eager": p.speedup_vs_eager if p else None,
            "target": p.target if p else None,
            "target_met": p.target_met if p else None,
            "error_budget": a.error_budget if a else None,
            "passed": a.passed if a else None,
            "error": "; ".join(errors) or None,
        }

    out = []
    with_perf_kernel = set()
    for p in perf:
        a = acc.get(p.case_id) if p.implementation == KERNEL_IMPL else None
        if p.implementation == KERNEL_IMPL:
            with_perf_kernel.add(p.case_id)
        out.append(record(cases[p.case_id], p.implementation, p, a))
    for cid, a in acc.items():
        if cid not in with_perf_kernel:
            out.append(record(cases[cid], KERNEL_IMPL, None, a))
    out.sort(key=lambda r: (r["kernel"], r["variant"], r["case"], r["implementation"]))
    return out


def _commit_order():
    return (func.coalesce(Run.commit_time, Run.started_at), Run.started_at)


def case_history(
    engine: Engine,
    case_key: str,
    fingerprint: str,
    implementation: str = KERNEL_IMPL,
    statuses: tuple[str, ...] = ("complete", "partial"),
) -> list[dict[str, Any]]:
    """Perf of one case on one hardware in commit order, samples included."""
    stmt = (
        select(
            Run.id, Run.commit_sha, Run.commit_subject, Run.commit_time, Run.started_at, Run.synthetic,
            PerfResult.median_ms, PerfResult.p20_ms, PerfResult.p80_ms, PerfResult.min_ms, PerfResult.samples_ms,
            PerfResult.speedup_vs_eager, PerfResult.gbps, PerfResult.pct_peak, PerfResult.timing,
        )
        .select_from(PerfResult)
        .join(Run, Run.id == PerfResult.run_id)
        .where(
            PerfResult.case_id == select(Case.id).where(Case.key == case_key).scalar_subquery(),
            PerfResult.hardware_id == select(Hardware.id).where(Hardware.fingerprint == fingerprint).scalar_subquery(),
            PerfResult.implementation == implementation,
            Run.status.in_(statuses),
        )
        .order_by(*_commit_order())
    )  # fmt: skip
    with Session(engine) as conn:
        rows = stored.rows(conn, stmt)
    return [{**r, "commit_time": _iso(r["commit_time"]), "started_at": _iso(r["started_at"])} for r in rows]


# ---------------------------------------------------------------------------------------------
# Dashboard and gate queries
# ---------------------------------------------------------------------------------------------
def kernel_names(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return [k for (k,) in conn.execute(select(Case.kernel).distinct().order_by(Case.kernel))]


def recent_runs(engine: Engine, fingerprint: str, last: int, kernel: str | None = None) -> list[dict[str, Any]]:
    """The last ``last`` complete or partial runs on one hardware, oldest first (commit order).

    With ``kernel``, only runs that measured that kernel (runs may cover a subset of kernels).
    """
    stmt = (
        select(Run, Hardware)
        .join(Hardware)
        .where(Hardware.fingerprint == fingerprint, Run.status.in_(("complete", "partial")))
    )
    if kernel:
        has_kernel = (
            select(PerfResult.id)
            .join(Case, Case.id == PerfResult.case_id)
            .where(PerfResult.run_id == Run.id, Case.kernel == kernel)
            .exists()
        )
        has_acc = (
            select(AccuracyResult.id)
            .join(Case, Case.id == AccuracyResult.case_id)
            .where(AccuracyResult.run_id == Run.id, Case.kernel == kernel)
            .exists()
        )
        stmt = stmt.where(or_(has_kernel, has_acc))
    stmt = stmt.order_by(*(c.desc() for c in _commit_order())).limit(last)
    with Session(engine) as conn:
        rows = [_run_dict(r, h) for r, h in stored.entities(conn, stmt)]
    return rows[::-1]


def perf_rows(
    engine: Engine,
    run_ids: list[str],
    kernel: str | None = None,
    implementations: tuple[str, ...] = (),
    with_samples: bool = False,
    with_params: bool = True,
) -> list[dict[str, Any]]:
    """Perf results of some runs (one index probe per run), with their case's fields."""
    if not run_ids:
        return []
    cols = [
        PerfResult.run_id,
        *result_columns(schema.PerfResult, SAMPLE_LISTS),
        Case.key.label("case"),
        Case.kernel,
        Case.variant,
        Case.dtype,
    ]
    if with_params:
        cols += [Case.params, Case.ceiling]
    if with_samples:
        cols.append(PerfResult.samples_ms)
    stmt = select(*cols).join(Case, Case.id == PerfResult.case_id).where(PerfResult.run_id.in_(run_ids))
    if kernel:
        stmt = stmt.where(Case.kernel == kernel)
    if implementations:
        stmt = stmt.where(PerfResult.implementation.in_(implementations))
    with engine.connect() as conn:
        return stored.rows(conn, stmt)


def accuracy_rows(engine: Engine, run_ids: list[str], kernel: str | None = None) -> list[dict[str, Any]]:
    if not run_ids:
        return []
    stmt = (
        select(AccuracyResult.run_id, *result_columns(schema.AccuracyResult), Case.key.label("case"), Case.kernel,
               Case.variant, Case.dtype)
        .join(Case, Case.id == AccuracyResult.case_id)
        .where(AccuracyResult.run_id.in_(run_ids))
    )  # fmt: skip
    if kernel:
        stmt = stmt.where(Case.kernel == kernel)
    with engine.connect() as conn:
        return stored.rows(conn, stmt)


def profiler_rows(engine: Engine, run_ids: list[str], kernel: str | None = None) -> list[dict[str, Any]]:
    if not run_ids:
        return []
    stmt = (
        select(ProfilerMetric.run_id, ProfilerMetric.source, ProfilerMetric.name, ProfilerMetric.value,
               ProfilerMetric.unit, ProfilerMetric.ideal, ProfilerMetric.meets_ideal, ProfilerMetric.error,
               ProfilerMetric.launch, Case.key.label("case"), Case.kernel)
        .join(Case, Case.id == ProfilerMetric.case_id)
        .where(ProfilerMetric.run_id.in_(run_ids))
    )  # fmt: skip
    if kernel:
        stmt = stmt.where(Case.kernel == kernel)
    with engine.connect() as conn:
        return stored.rows(conn, stmt)


# ---------------------------------------------------------------------------------------------
# Triage, case page, accuracy across hardware, acknowledged changes
# ---------------------------------------------------------------------------------------------
def latest_runs(engine: Engine, statuses: tuple[str, ...] = ("complete", "partial")) -> list[dict[str, Any]]:
    """The newest run of every hardware among ``statuses`` (a partial nightly is triaged too)."""
    out = []
    with Session(engine) as conn:
        for hw in stored.scalars(conn, select(Hardware)):
            stmt = (
                select(Run)
                .where(Run.hardware_id == hw.id, Run.status.in_(statuses))
                .order_by(Run.started_at.desc())
                .limit(1)
            )
            run = next(iter(stored.scalars(conn, stmt)), None)
            if run is not None:
                out.append(_run_dict(run, hw))
    return sorted(out, key=lambda r: r["hardware"])


def run_info(engine: Engine, run_id: str) -> dict[str, Any] | None:
    with Session(engine) as conn:
        row = next(iter(stored.entities(conn, select(Run, Hardware).join(Hardware).where(Run.id == run_id))), None)
    return None if row is None else _run_dict(*row)


def case_info(engine: Engine, key: str) -> dict[str, Any] | None:
    with engine.connect() as conn:
        row = next(
            iter(
                stored.rows(
                    conn,
                    select(Case.key, Case.kernel, Case.variant, Case.dtype, Case.params, Case.ceiling).where(
                        Case.key == key
                    ),
                )
            ),
            None,
        )
    return None if row is None else dict(row)


def cases_without_ceiling(engine: Engine) -> list[dict[str, Any]]:
    """Cases stored with no ceiling (only runs from before it was recorded measured them)."""
    with engine.connect() as conn:
        return stored.rows(
            conn, select(Case.key, Case.kernel, Case.variant, Case.dtype, Case.params).where(Case.ceiling.is_(None))
        )


def case_keys(engine: Engine, kernel: str) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(select(Case.key).where(Case.kernel == kernel).order_by(Case.key)).scalars())


def case_hardware(engine: Engine, key: str) -> list[str]:
    """Fingerprints of the hardware that measured a case (perf or accuracy)."""
    case_id = select(Case.id).where(Case.key == key).scalar_subquery()
    stmt = union(
        select(PerfResult.hardware_id).where(PerfResult.case_id == case_id),
        select(AccuracyResult.hardware_id).where(AccuracyResult.case_id == case_id),
    ).subquery()
    with engine.connect() as conn:
        return list(
            conn.execute(
                select(Hardware.fingerprint).where(Hardware.id.in_(select(stmt.c[0]))).order_by(Hardware.device_name)
            ).scalars()
        )


def _run_columns() -> list:
    return [
        Run.id.label("run_id"),
        Run.commit_sha.label("commit"),
        Run.commit_subject.label("subject"),
        Run.commit_time,
        Run.started_at.label("started"),
        Run.synthetic,
        Run.status,
        Run.device.label("run_device"),
        Run.peak_gbps,
        Run.peak_read_gbps,
        Run.peak_tflops,
    ]


def _iso_rows(rows) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        d = dict(r)
        for k in ("commit_time", "started", "created_at"):
            if k in d:
                d[k] = _iso(d[k])
        out.append(d)
    return out


def case_perf(engine: Engine, key: str, fingerprint: str, last: int = 50) -> list[dict[str, Any]]:
    """Every implementation's timing of one case in the last ``last`` runs of one hardware that timed it,
    oldest first (commit order), with each run's ceilings."""
    case_id = select(Case.id).where(Case.key == key).scalar_subquery()
    hw_id = select(Hardware.id).where(Hardware.fingerprint == fingerprint).scalar_subquery()
    runs = (
        select(PerfResult.run_id)
        .join(Run, Run.id == PerfResult.run_id)
        .where(
            PerfResult.case_id == case_id,
            PerfResult.hardware_id == hw_id,
            PerfResult.implementation == KERNEL_IMPL,
            Run.status.in_(("complete", "partial")),
        )
        .order_by(*(c.desc() for c in _commit_order()))
        .limit(last)
    )
    stmt = (
        select(
            *_run_columns(),
            *result_columns(schema.PerfResult, SAMPLE_LISTS),
        )
        .join(Run, Run.id == PerfResult.run_id)
        .where(PerfResult.case_id == case_id, PerfResult.run_id.in_(runs))
        .order_by(*_commit_order(), PerfResult.implementation)
    )
    with engine.connect() as conn:
        return _iso_rows(stored.rows(conn, stmt))


def case_accuracy(engine: Engine, key: str, fingerprint: str, last: int = 50) -> list[dict[str, Any]]:
    """Gating accuracy of one case on one hardware, the last ``last`` runs, oldest first."""
    case_id = select(Case.id).where(Case.key == key).scalar_subquery()
    hw_id = select(Hardware.id).where(Hardware.fingerprint == fingerprint).scalar_subquery()
    stmt = (
        select(
            *_run_columns(),
            AccuracyResult.error_budget,
            AccuracyResult.max_abs_err,
            AccuracyResult.max_rel_err,
            AccuracyResult.nan_mismatches,
            AccuracyResult.passed,
            AccuracyResult.error,
        )
        .join(Run, Run.id == AccuracyResult.run_id)
        .where(AccuracyResult.case_id == case_id, AccuracyResult.hardware_id == hw_id, AccuracyResult.kind == "gate")
        .order_by(*(c.desc() for c in _commit_order()))
        .limit(last)
    )
    with engine.connect() as conn:
        return _iso_rows(stored.rows(conn, stmt))[::-1]


def case_profiler(engine: Engine, key: str, fingerprint: str) -> list[dict[str, Any]]:
    """Profiler counters of one case on one hardware, oldest run first."""
    case_id = select(Case.id).where(Case.key == key).scalar_subquery()
    hw_id = select(Hardware.id).where(Hardware.fingerprint == fingerprint).scalar_subquery()
    stmt = (
        select(
            *_run_columns(),
            ProfilerMetric.source,
            ProfilerMetric.name,
            ProfilerMetric.value,
            ProfilerMetric.unit,
            ProfilerMetric.ideal,
            ProfilerMetric.meets_ideal,
            ProfilerMetric.error,
            ProfilerMetric.launch,
        )
        .join(Run, Run.id == ProfilerMetric.run_id)
        .where(ProfilerMetric.case_id == case_id, ProfilerMetric.hardware_id == hw_id)
        .order_by(*_commit_order(), ProfilerMetric.name)
    )
    with engine.connect() as conn:
        return _iso_rows(stored.rows(conn, stmt))


def profiler_kernels(engine: Engine, fingerprint: str) -> list[str]:
    """Kernels with at least one profiler counter value on this hardware."""
    hw_id = select(Hardware.id).where(Hardware.fingerprint == fingerprint).scalar_subquery()
    stmt = (
        select(Case.kernel)
        .join(ProfilerMetric, ProfilerMetric.case_id == Case.id)
        .where(ProfilerMetric.hardware_id == hw_id, ProfilerMetric.value.is_not(None))
        .distinct()
        .order_by(Case.kernel)
    )
    with engine.connect() as conn:
        return list(conn.execute(stmt).scalars())


def latest_accuracy_runs(engine: Engine) -> list[dict[str, Any]]:
    """Per hardware and kernel, the newest run (complete or partial) with gating accuracy results of that
    kernel: a newer perf-only run does not hide a hardware's accuracy."""
    out = []
    with Session(engine) as conn:
        kernels = list(conn.execute(select(Case.kernel).distinct()).scalars())
        for hw in stored.scalars(conn, select(Hardware)):
            for kernel in kernels:
                has = (
                    select(AccuracyResult.id)
                    .join(Case, Case.id == AccuracyResult.case_id)
                    .where(AccuracyResult.run_id == Run.id, AccuracyResult.kind == "gate", Case.kernel == kernel)
                    .exists()
                )
                run = next(
                    iter(
                        stored.scalars(
                            conn,
                            select(Run)
                            .where(Run.hardware_id == hw.id, Run.status.in_(("complete", "partial")), has)
                            .order_by(Run.started_at.desc())
                            .limit(1),
                        )
                    ),
                    None,
                )
                if run is not None:
                    out.append({**_run_dict(run, hw), "kernel": kernel})
    return sorted(out, key=lambda r: (r["hardware"], r["kernel"]))


def acks(engine: Engine, fingerprint: str | None = None, case: str | None = None) -> list[dict[str, Any]]:
    """Acknowledged changes, oldest first, each with the commit time of its commit where a run knows it."""
    commit_time = (
        select(func.min(func.coalesce(Run.commit_time, Run.started_at)))
        .where(Run.commit_sha == Ack.commit_sha)
        .scalar_subquery()
    )
    stmt = (
        select(
            Ack.id,
            Case.key.label("case"),
            Case.kernel,
            Hardware.fingerprint,
            Hardware.device_name.label("hardware"),
            Ack.commit_sha.label("commit"),
            Ack.reason,
            Ack.author,
            Ack.created_at,
            commit_time.label("commit_time"),
        )
        .join(Case, Case.id == Ack.case_id)
        .join(Hardware, Hardware.id == Ack.hardware_id)
        .order_by(Ack.created_at, Ack.id)
    )
    if fingerprint:
        stmt = stmt.where(Hardware.fingerprint == fingerprint)
    if case:
        stmt = stmt.where(Case.key == case)
    with engine.connect() as conn:
        return _iso_rows(stored.rows(conn, stmt))


# ---------------------------------------------------------------------------------------------
# Baselines (the rule is kernelwatch.gate.judge.choose_baseline; these are its reads)
# ---------------------------------------------------------------------------------------------
BASELINE_LOOKBACK = 200  # eligible runs considered, newest first


def runs_by_id_prefix(engine: Engine, prefix: str, limit: int = 3) -> list[dict[str, Any]]:
    """Runs whose id is ``prefix`` or starts with it (the exact one first), at most ``limit``."""
    with Session(engine) as conn:
        rows = stored.entities(
            conn,
            select(Run, Hardware)
            .join(Hardware)
            .where(Run.id.startswith(prefix, autoescape=True))
            .order_by(Run.id != prefix, Run.id)
            .limit(limit),
        )
    return [_run_dict(r, h) for r, h in rows]


def branch_runs(engine: Engine, branch: str) -> list[dict[str, Any]]:
    """Every run of ``branch`` (any hardware, any status), newest first."""
    with Session(engine) as conn:
        rows = stored.entities(
            conn,
            select(Run, Hardware).join(Hardware).where(Run.branch == branch).order_by(Run.started_at.desc(), Run.id),
        )
    return [_run_dict(r, h) for r, h in rows]


def branches_on(engine: Engine, fingerprint: str) -> list[tuple[str, int]]:
    """(branch, number of runs) on one hardware, by branch name."""
    stmt = (
        select(Run.branch, func.count())
        .join(Hardware)
        .where(Hardware.fingerprint == fingerprint)
        .group_by(Run.branch)
        .order_by(Run.branch)
    )
    with engine.connect() as conn:
        return [(b, n) for b, n in conn.execute(stmt)]


def result_counts(engine: Engine, run_ids: list[str]) -> dict[str, int]:
    """Per run: its perf rows plus its gating accuracy rows (runs with none are absent)."""
    if not run_ids:
        return {}
    out: dict[str, int] = {}
    perf = select(PerfResult.run_id, func.count()).where(PerfResult.run_id.in_(run_ids)).group_by(PerfResult.run_id)
    acc = (
        select(AccuracyResult.run_id, func.count())
        .where(AccuracyResult.run_id.in_(run_ids), AccuracyResult.kind == "gate")
        .group_by(AccuracyResult.run_id)
    )
    with engine.connect() as conn:
        for stmt in (perf, acc):
            for rid, n in conn.execute(stmt):
                out[rid] = out.get(rid, 0) + n
    return out


def baseline_candidates(
    engine: Engine,
    fingerprint: str,
    perf_cases: list[str],
    acc_cases: list[str],
    not_after: tuple[dt.datetime, dt.datetime],
    now: dt.datetime,
    branch: str | None = None,
    exclude: str | None = None,
    lookback: int = BASELINE_LOOKBACK,
) -> list[dict[str, Any]]:
    """Complete runs on one hardware that could be a candidate's baseline, newest first (commit order), each
    with ``perf_shared`` (its kernel timings of ``perf_cases``), ``acc_shared`` (its gating accuracy rows of
    ``acc_cases``) and ``results`` (all its rows).

    Eligible: status complete, of ``branch`` when given (and then not a pull-request push), not ``exclude``, not
    after the candidate in commit order nor started after it (``not_after`` = (commit time or start, start)),
    nothing dated after ``now``, and at least one result. The newest ``lookback`` of them are returned.
    """
    commit_key = func.coalesce(Run.commit_time, Run.started_at)
    when, started = not_after
    has_results = or_(
        select(PerfResult.id).where(PerfResult.run_id == Run.id).exists(),
        select(AccuracyResult.id).where(AccuracyResult.run_id == Run.id, AccuracyResult.kind == "gate").exists(),
    )
    stmt = (
        select(Run, Hardware)
        .join(Hardware)
        .where(
            Hardware.fingerprint == fingerprint,
            Run.status == "complete",
            commit_key <= when,
            Run.started_at <= started,
            Run.started_at <= now,
            or_(Run.commit_time.is_(None), Run.commit_time <= now),
            has_results,
        )
        .order_by(*(c.desc() for c in _commit_order()), Run.id)
        .limit(lookback)
    )
    if branch is not None:  # a pull request's push is never its branch's baseline (its head may be named main)
        stmt = stmt.where(Run.branch == branch, Run.trigger != "pr")
    if exclude:
        stmt = stmt.where(Run.id != exclude)
    with Session(engine) as conn:
        runs = [_run_dict(r, h) for r, h in stored.entities(conn, stmt)]
    ids = [r["id"] for r in runs]
    counts = result_counts(engine, ids)
    perf_shared = _shared(engine, PerfResult, ids, perf_cases, PerfResult.implementation == KERNEL_IMPL)
    acc_shared = _shared(engine, AccuracyResult, ids, acc_cases, AccuracyResult.kind == "gate")
    return [
        {
            **r,
            "results": counts.get(r["id"], 0),
            "perf_shared": perf_shared.get(r["id"], 0),
            "acc_shared": acc_shared.get(r["id"], 0),
        }
        for r in runs
    ]


def judging_runs(
    engine: Engine,
    fingerprint: str,
    branch: str,
    not_after: tuple[dt.datetime, dt.datetime],
    now: dt.datetime,
    exclude: str | None,
    last: int,
) -> list[dict[str, Any]]:
    """The runs whose results may judge a candidate (its noise, steps and between-GPU terms), oldest first
    (commit order): the newest ``last`` complete runs of ``branch`` on one hardware that are not pull-request
    pushes (trigger "pr"), not ``exclude``, not after the candidate in commit order nor started after it
    (``not_after`` as in :func:`baseline_candidates`), and dated no later than ``now``.

    The database stores no commit ancestry, so "the baseline's branch and its ancestors" is the runs of that
    branch: a run of another branch, a PR push, a partial run or a clock set ahead never enters."""
    commit_key = func.coalesce(Run.commit_time, Run.started_at)
    when, started = not_after
    stmt = (
        select(Run, Hardware)
        .join(Hardware)
        .where(
            Hardware.fingerprint == fingerprint,
            Run.branch == branch,
            Run.status == "complete",
            Run.trigger != "pr",
            commit_key <= when,
            Run.started_at <= started,
            Run.started_at <= now,
            or_(Run.commit_time.is_(None), Run.commit_time <= now),
        )
        .order_by(*(c.desc() for c in _commit_order()), Run.id)
        .limit(last)
    )
    if exclude:
        stmt = stmt.where(Run.id != exclude)
    with Session(engine) as conn:
        rows = [_run_dict(r, h) for r, h in conn.execute(stmt)]
    return rows[::-1]


def _shared(engine: Engine, table, run_ids: list[str], keys: list[str], where) -> dict[str, int]:
    if not run_ids or not keys:
        return {}
    out: dict[str, int] = {}
    with engine.connect() as conn:
        for i in range(0, len(keys), 500):  # bound parameters stay far below every backend's limit
            stmt = (
                select(table.run_id, func.count())
                .join(Case, Case.id == table.case_id)
                .where(table.run_id.in_(run_ids), Case.key.in_(keys[i : i + 500]), where)
                .group_by(table.run_id)
            )
            for rid, n in conn.execute(stmt):
                out[rid] = out.get(rid, 0) + n
    return out


def perf_case_runs(engine: Engine, run_ids: list[str], case_keys: list[str]) -> dict[str, set[str]]:
    """Per run among ``run_ids``: which of ``case_keys`` it has a kernel timing of (runs with none are absent)."""
    if not run_ids or not case_keys:
        return {}
    out: dict[str, set[str]] = {}
    with engine.connect() as conn:
        for i in range(0, len(case_keys), 500):
            stmt = (
                select(PerfResult.run_id, Case.key)
                .join(Case, Case.id == PerfResult.case_id)
                .where(
                    PerfResult.run_id.in_(run_ids),
                    PerfResult.implementation == KERNEL_IMPL,
                    Case.key.in_(case_keys[i : i + 500]),
                )
            )
            for rid, key in conn.execute(stmt):
                out.setdefault(rid, set()).add(key)
    return out


def accuracy_case_runs(engine: Engine, run_ids: list[str], case_keys: list[str]) -> dict[str, set[str]]:
    """Per run among ``run_ids``: which of ``case_keys`` it has a gating accuracy result of (runs with none are
    absent)."""
    if not run_ids or not case_keys:
        return {}
    out: dict[str, set[str]] = {}
    with engine.connect() as conn:
        for i in range(0, len(case_keys), 500):
            stmt = (
                select(AccuracyResult.run_id, Case.key)
                .join(Case, Case.id == AccuracyResult.case_id)
                .where(
                    AccuracyResult.run_id.in_(run_ids),
                    AccuracyResult.kind == "gate",
                    Case.key.in_(case_keys[i : i + 500]),
                )
            )
            for rid, key in conn.execute(stmt):
                out.setdefault(rid, set()).add(key)
    return out


def run_contents(engine: Engine, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """What each run holds: its kernels (sorted), how many kernel timings (``perf``: Triton rows), gating
    accuracy results (``accuracy``) and profiler metrics (``profiler``) it has, and per kind the kernels that have
    them (``perf_kernels``...). Runs without results get zeros and no kernels."""
    out = {
        rid: {
            "kernels": set(),
            "perf": 0,
            "accuracy": 0,
            "profiler": 0,
            "perf_kernels": set(),
            "accuracy_kernels": set(),
            "profiler_kernels": set(),
        }
        for rid in run_ids
    }
    if not run_ids:
        return {}
    queries = (
        (
            "perf",
            select(PerfResult.run_id, Case.kernel, func.count())
            .join(Case, Case.id == PerfResult.case_id)
            .where(PerfResult.run_id.in_(run_ids), PerfResult.implementation == KERNEL_IMPL),
        ),
        (
            "accuracy",
            select(AccuracyResult.run_id, Case.kernel, func.count())
            .join(Case, Case.id == AccuracyResult.case_id)
            .where(AccuracyResult.run_id.in_(run_ids), AccuracyResult.kind == "gate"),
        ),
        (
            "profiler",
            select(ProfilerMetric.run_id, Case.kernel, func.count())
            .join(Case, Case.id == ProfilerMetric.case_id)
            .where(ProfilerMetric.run_id.in_(run_ids)),
        ),
    )
    with engine.connect() as conn:
        for name, stmt in queries:
            for rid, kernel, n in conn.execute(stmt.group_by(stmt.selected_columns[0], Case.kernel)):
                out[rid][name] += n
                out[rid]["kernels"].add(kernel)
                out[rid][f"{name}_kernels"].add(kernel)
    return {rid: {**c, **{k: sorted(v) for k, v in c.items() if k.endswith("kernels")}} for rid, c in out.items()}


def contents_text(
    contents: dict[str, Any], device: str | None = None, device_count: int | None = None, names: bool = False
) -> str:
    """One line of what a run holds, e.g. "perf 62 + accuracy 358 · 3 kernels · 2 GPUs" (perf counts kernel
    timings, accuracy gating cases): the words a run picker and ``kernelwatch runs`` use. The device count is
    named for GPUs and NPUs only (on the CPU it is the interpreter workers' host). ``names``: every kernel's
    name instead of their number."""
    suites = [f"{name} {contents[name]}" for name in ("perf", "accuracy", "profiler") if contents.get(name)]
    kernels = contents.get("kernels") or []
    parts = [
        " + ".join(suites) or "no results",
        ", ".join(kernels) if names or len(kernels) == 1 else f"{len(kernels)} kernels" if kernels else "",
    ]
    word = {"cuda": "GPU", "npu": "NPU"}.get(device or "")
    if device_count and word:
        parts.append(f"{device_count} {word}" + ("s" if device_count > 1 else ""))
    return " · ".join(p for p in parts if p)


# ---------------------------------------------------------------------------------------------
# Confirmations (written by kernelwatch confirm, kernelwatch.store.ingest.store_confirmations)
# ---------------------------------------------------------------------------------------------
CONFIRMATION_FIELDS = tuple(name for name in schema.Confirmation.model_fields if name != "case")  # case: case_key


def confirmations(
    engine: Engine, fingerprint: str, cases: list[str] | None = None, candidate_commit: str | None = None
) -> list[dict[str, Any]]:
    """Stored confirmations on one hardware (of ``cases`` when given; of commits ``candidate_commit`` starts or
    is a prefix of, when given), oldest first, as ``kernelwatch.store.schema.Confirmation`` fields (``case`` the
    key)."""
    stmt = (
        select(Confirmation.case_key, *(getattr(Confirmation, f) for f in CONFIRMATION_FIELDS))
        .join(Hardware, Hardware.id == Confirmation.hardware_id)
        .where(Hardware.fingerprint == fingerprint)
        .order_by(Confirmation.confirmed_at, Confirmation.id)
    )
    rows: list[dict[str, Any]] = []
    with engine.connect() as conn:
        chunks = [None] if cases is None else [cases[i : i + 500] for i in range(0, len(cases), 500)]
        for chunk in chunks:
            query = stmt if chunk is None else stmt.where(Confirmation.case_key.in_(chunk))
            for r in conn.execute(query).mappings():
                row = {"case": r["case_key"], **{f: r[f] for f in CONFIRMATION_FIELDS}}
                row["confirmed_at"] = format_time(row["confirmed_at"])
                rows.append(row)
    if candidate_commit is not None:
        rows = [
            r
            for r in rows
            if r["candidate_commit"].startswith(candidate_commit) or candidate_commit.startswith(r["candidate_commit"])
        ]
    return sorted(rows, key=lambda r: r["confirmed_at"])
