"""The baseline rule, one for the gate, Triage, Compare, the case page and confirm: a baseline assembled per case
from a branch's earlier runs on the candidate's hardware, or one named run."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Engine

from kernelwatch.gate.result import Baseline, Expected, GateUndecided, _run_ref
from kernelwatch.kernels.names import (
    KERNEL_IMPL,
)
from kernelwatch.store.export import export_run
from kernelwatch.store.queries import (
    accuracy_case_runs,
    baseline_candidates,
    branch_runs,
    branches_on,
    perf_case_runs,
    result_counts,
    runs_by_id_prefix,
)
from kernelwatch.store.schema import (
    RunDocument,
    hardware_fingerprint,
    parse_time,
    to_data,
)
from kernelwatch.store.synthetic import SYNTHETIC_BRANCHES


# ---------------------------------------------------------------------------------------------
# Baseline: one rule for the gate, the dashboard's Triage and Compare
# ---------------------------------------------------------------------------------------------
def _times(candidate: RunDocument) -> tuple[dt.datetime, dt.datetime]:
    started = parse_time(candidate.run.started_at)
    when = parse_time(candidate.run.commit.time) if candidate.run.commit.time else started
    return when, started


def _gating_keys(candidate: RunDocument, expected: Expected | None = None) -> tuple[list[str], list[str]]:
    """(kernel-timed perf cases, gating accuracy cases) of the candidate, and those ``expected`` of it."""
    want = expected.cases if expected is not None else {}
    perf = sorted({p.case for p in candidate.perf if p.implementation == KERNEL_IMPL} | set(want.get("perf", ())))
    acc = sorted({a.case for a in candidate.accuracy if a.kind == "gate"} | set(want.get("accuracy", ())))
    return perf, acc


def eligible_baselines(
    engine: Engine,
    candidate: RunDocument,
    branch: str | None,
    now: dt.datetime | None = None,
    expected: Expected | None = None,
) -> list[dict[str, Any]]:
    """The runs a baseline is assembled from, newest first (commit order): complete runs on the candidate's
    hardware (of ``branch``; any branch when None), not the candidate, not after it in commit order nor
    started after it, not dated after ``now``, holding at least one result; those that share no case with a
    candidate that has results (or with what is ``expected`` of it) are left out."""
    perf, acc = _gating_keys(candidate, expected)
    rows = baseline_candidates(
        engine,
        hardware_fingerprint(to_data(candidate)["hardware"]),
        perf,
        acc,
        _times(candidate),
        now or dt.datetime.now(dt.timezone.utc),
        branch,
        candidate.run.id,
    )
    if perf or acc:  # a candidate with no result at all (a failed run) is compared with the newest
        rows = [r for r in rows if r["perf_shared"] + r["acc_shared"] > 0]
    return rows


def assemble_baseline(
    engine: Engine,
    candidate: RunDocument,
    branch: str | None,
    now: dt.datetime | None = None,
    expected: Expected | None = None,
) -> Baseline | None:
    """The baseline rule, one for ``gate --baseline BRANCH``, Triage and Compare: for each of the candidate's
    kernel-timed and gating accuracy cases, the newest earlier result among :func:`eligible_baselines` (so a
    history cut into partial nights is judged, never refused). None when no eligible run holds any of them
    (a candidate with no result at all gets the newest eligible run: what it should have measured is its
    baseline's cases). With ``expected`` (:func:`expected_cases`), every case expected of the candidate gets its
    baseline too, measured or not: what it failed to measure is missing."""
    rows = eligible_baselines(engine, candidate, branch, now, expected)
    if not rows:
        return None
    perf, acc = _gating_keys(candidate, expected)
    ids = [r["id"] for r in rows]
    have_perf = perf_case_runs(engine, ids, perf)
    have_acc = accuracy_case_runs(engine, ids, acc)
    run_of: dict[str, str] = {}
    supplied: dict[str, dict[str, int]] = {}
    for suite, keys, have in (("perf", perf, have_perf), ("accuracy", acc, have_acc)):
        for key in keys:
            rid = next((i for i in ids if key in have.get(i, ())), None)  # rows are newest first
            if rid is not None:
                run_of.setdefault(key, rid)
                counts = supplied.setdefault(rid, {"perf": 0, "accuracy": 0})
                counts[suite] += 1
    if not supplied:
        supplied = {ids[0]: {"perf": 0, "accuracy": 0}}
    order = {rid: i for i, rid in enumerate(ids)}
    by_id = {r["id"]: r for r in rows}
    ranked = sorted(supplied, key=lambda rid: (-sum(supplied[rid].values()), order[rid]))
    sources = [{**_run_ref(by_id[rid]), **supplied[rid]} for rid in ranked]
    return Baseline(run=by_id[ranked[0]], sources=sources, run_of=run_of)


def baseline_document(engine: Engine, baseline: Baseline) -> RunDocument:
    """The results ``baseline`` names as one document: the main run's, each case another run supplied taken
    (all its implementations) from that run instead."""
    if baseline.document is not None:
        return baseline.document
    main = export_run(engine, baseline.run["id"])
    others = {s["id"] for s in baseline.sources if s["id"] != baseline.run["id"]}
    if not others:
        baseline.document = main
        return main
    docs = {rid: export_run(engine, rid) for rid in others}
    moved = {case for case, rid in baseline.run_of.items() if rid in others}
    data = to_data(main)
    data["perf"] = [p for p in data["perf"] if p["case"] not in moved]
    data["accuracy"] = [a for a in data["accuracy"] if a["case"] not in moved or a["kind"] != "gate"]
    cases = {c["key"]: c for c in data["cases"]}
    for rid, doc in docs.items():
        mine = {case for case in moved if baseline.run_of[case] == rid}
        theirs = to_data(doc)
        data["perf"] += [p for p in theirs["perf"] if p["case"] in mine]
        data["accuracy"] += [a for a in theirs["accuracy"] if a["case"] in mine and a["kind"] == "gate"]
        cases.update({c["key"]: c for c in theirs["cases"] if c["key"] in mine})
    data["cases"], data["profiler"] = list(cases.values()), []
    baseline.document = RunDocument.model_validate(data)
    return baseline.document


def choose_baseline(
    engine: Engine, candidate: RunDocument, branch: str | None, now: dt.datetime | None = None
) -> dict[str, Any] | None:
    """The run that supplies the most cases of :func:`assemble_baseline`'s baseline (None: there is none)."""
    found = assemble_baseline(engine, candidate, branch, now)
    return found.run if found else None


BASE_BRANCH = "main"  # the configured baseline branch: the workflows' `--baseline main`, the dashboard's default


def baseline_branch(candidate: RunDocument, configured: str = BASE_BRANCH) -> str:
    """The baseline rule, stated once (the gate, Triage, Overview, Compare, the case page and confirm read it
    here): a run of branch B is judged against the runs of the ``configured`` branch, which for a run of that
    branch means its own earlier runs only (:func:`assemble_baseline` never takes the candidate or a later run),
    never a side branch's. A SYNTHETIC run declares its own branch as its baseline (its notes say so,
    :mod:`kernelwatch.store.synthetic`) unless the configured one is generated too: generated history is judged
    against the earlier runs it was generated with, never against measurements."""
    if candidate.run.synthetic and not configured.startswith(SYNTHETIC_BRANCHES):
        return candidate.run.commit.branch
    return configured


def default_baseline(engine: Engine, candidate: RunDocument, branch: str = BASE_BRANCH) -> Baseline | None:
    """The dashboard's baseline of a run: :func:`assemble_baseline` from :func:`baseline_branch` (None: that branch
    has no earlier run on the candidate's hardware sharing a case with it; the gate then cannot decide either)."""
    return assemble_baseline(engine, candidate, baseline_branch(candidate, branch))


def _describe(run: dict[str, Any]) -> str:
    return (
        f"run {run['id']} (commit {run['commit'][:12]}, {run['status']}, started {run['started']}, "
        f"{run.get('results', 0)} results)"
    )


def baseline_run(
    engine: Engine, spec: str | Baseline, candidate: RunDocument, expected: Expected | None = None
) -> Baseline:
    """Resolve ``--baseline``: a run id, a unique run-id prefix (that run alone), or a branch
    (:func:`assemble_baseline`). Never the candidate. Errors say what was searched and what exists, with
    whole run ids. An assembled :class:`Baseline` is taken as it is (Triage's)."""
    if isinstance(spec, Baseline):
        return spec
    spec = spec.strip()
    exclude = candidate.run.id
    fingerprint = hardware_fingerprint(to_data(candidate)["hardware"])
    device_name = candidate.hardware.device_name or "this hardware"
    if not spec:
        raise GateUndecided("--baseline is empty: give a branch, a run id or a unique run-id prefix")
    # Run ids are stored in lower case; LIKE ignores case on SQLite, not on PostgreSQL: match the lowered spec.
    by_id = runs_by_id_prefix(engine, spec.lower())
    exact = [r for r in by_id if r["id"] == spec.lower()]
    by_id = exact or by_id
    branch = branch_runs(engine, spec)
    if by_id and branch and not exact:
        raise GateUndecided(
            f"--baseline {spec!r} is both a branch ({len(branch)} runs) and a run-id prefix "
            "of run " + ", ".join(r["id"] for r in by_id) + ": give the full run id"
        )
    if by_id and not branch or exact:
        if len(by_id) > 1:
            raise GateUndecided(
                f"--baseline {spec!r} is an ambiguous run-id prefix: it matches "
                + ", ".join(r["id"] for r in by_id[:2])
                + " and more: give more characters"
            )
        run = by_id[0]
        if run["id"] == exclude:
            raise GateUndecided(f"--baseline {spec!r} is the candidate run itself ({run['id']})")
        if run["fingerprint"] != fingerprint:
            raise GateUndecided(
                f"baseline run {run['id']} was measured on {run['hardware']} "
                f"({run['fingerprint'][:8]}), the candidate on {device_name} ({fingerprint[:8]})"
            )
        if run["status"] not in ("complete", "partial"):
            raise GateUndecided(f"baseline run {run['id']} is {run['status']}: it has nothing to compare with")
        if not result_counts(engine, [run["id"]]):
            raise GateUndecided(f"baseline run {run['id']} ({run['status']}) holds no results: nothing to compare with")
        perf, acc = _gating_keys(candidate, expected)
        source = {
            **_run_ref(run),
            "perf": len(perf_case_runs(engine, [run["id"]], perf).get(run["id"], ())),
            "accuracy": len(accuracy_case_runs(engine, [run["id"]], acc).get(run["id"], ())),
        }
        return Baseline(run=run, sources=[source], run_of={})
    if not branch:
        listing = ", ".join(f"{b} ({n})" for b, n in branches_on(engine, fingerprint)[:10]) or "none"
        raise GateUndecided(
            f"--baseline {spec!r} is neither a run id, a run-id prefix nor a branch with runs; "
            f"branches with runs on {device_name}: {listing}"
        )
    declared = baseline_branch(candidate, spec)
    if declared != spec:
        found = assemble_baseline(engine, candidate, declared, expected=expected)
        if found is None:
            raise GateUndecided(
                f"the candidate is SYNTHETIC: it is judged only against earlier runs of its own branch {declared!r}, "
                f"and none on {device_name} shares a case with it"
            )
        found.rule = f"the candidate is SYNTHETIC: judged against the earlier runs of its own branch {declared}"
        return found
    found = assemble_baseline(engine, candidate, spec, expected=expected)
    if found is not None:
        return found
    here = [r for r in branch if r["fingerprint"] == fingerprint]
    if not here:
        elsewhere = sorted({f"{r['hardware']} ({r['fingerprint'][:8]})" for r in branch})
        raise GateUndecided(
            f"no run of branch {spec!r} on {device_name} ({fingerprint[:8]}); it has "
            f"{len(branch)} on other hardware: {', '.join(elsewhere)}. "
            "Run the collector on the baseline branch here first"
        )
    parts = [
        f"searched the complete runs of {spec} on {device_name} up to the candidate (started "
        f"{candidate.run.started_at}) that hold results and share a case with it; "
        f"{len(here)} run{'s' if len(here) != 1 else ''} of {spec} on {device_name}"
    ]
    if here[0]["id"] == exclude:
        parts.append("the newest is the candidate")
    others = [r for r in here if r["id"] != exclude]
    states = sorted({r["status"] for r in others})
    if states:
        parts.append("the others are " + "/".join(states) if len(here) > 1 else f"it is {states[0]}")
    if others:
        newest = {**others[0], "results": result_counts(engine, [others[0]["id"]]).get(others[0]["id"], 0)}
        parts.append("newest: " + _describe(newest))
    raise GateUndecided(f"no complete run of branch {spec!r} to compare with: " + "; ".join(parts))
