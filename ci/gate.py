"""The merge gate: does a candidate run break accuracy or regress performance against its baseline?

Exit status (``GateResult.exit_code``):

* 0: every gating case was measured and is well;
* 1: a case fails: an accuracy case over its tolerance, a significant slowdown (unless ``kernelwatch
  ack`` acknowledged it, see :func:`acknowledge`), a case that errored, a case the baseline measured and
  the candidate did not (missing), or a result without a measurement (a perf row with no samples, an
  accuracy row with no trials);
* 2: cannot decide: bad options, no baseline, or nothing comparable measured at all.

Only gating results decide. Exploration results (accuracy rows of kind "explore": fresh seeds, see
``collector.accuracy``) are reported beside the verdict and never change it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from ci.detect import DEFAULT_FDR, DEFAULT_MIN_EFFECT, Comparison, compare_case, regressions
from db.export import export_run
from db.models import Hardware, Run
from db.queries import acks, perf_rows, recent_runs, run_info
from db.schema import RunDocument, hardware_fingerprint, to_data
from kernels.names import KERNEL_IMPL

HISTORY_RUNS = 30
BUDGET_GROWTH_WARNING = 2.0
MIN_EFFECT_RANGE = (0.0, 10.0)  # open interval: 0 would call any noise a regression, 10 = 11x slower
FDR_RANGE = (0.0, 1.0)

FAILING = ("regression", "accuracy", "error", "missing", "unmeasured")
WARNING = ("warning", "noisy")
STATUSES = (*FAILING, *WARNING, "acknowledged", "pass", "new")


class GateUndecided(RuntimeError):
    """The gate cannot decide (exit 2); the message says why."""


@dataclass
class CaseVerdict:
    """The gate's verdict on one case, in plain fields (the dashboard's triage page reads them).

    * ``status``: one of ``STATUSES``. Failing: "regression" (significant slowdown past the minimum
      effect), "accuracy" (error budget over 1, or NaN/Inf where the reference has values), "error" (the
      case raised, hung or crashed), "missing" (the baseline measured it, the candidate did not),
      "unmeasured" (a result row without a measurement). Not failing: "warning" (accuracy budget grew
      past BUDGET_GROWTH_WARNING x, still within tolerance), "noisy" (slower past the minimum effect but
      not distinguishable from this case's between-run noise), "acknowledged" (a regression whose change
      ``kernelwatch ack`` recorded, see :func:`acknowledge`), "pass", "new" (no baseline to compare).
    * ``suite``: "accuracy" or "perf".
    * ``effect``: candidate / baseline median time - 1 (0.087 = 8.7% slower), perf only.
    * ``p_value``: the evidence for a slowdown (max of within-run and between-run p), before FDR control.
    * ``time_ms`` / ``baseline_ms``: the two runs' median times (candidate now, baseline before).
    * ``budget`` / ``baseline_budget``: error budgets (accuracy), 1 = at the tolerance.
    * ``comparison``: the full statistics (``ci.detect.Comparison``) when a perf comparison was made.
    """

    case: str
    kernel: str
    status: str
    message: str = ""
    suite: str = "perf"
    effect: float | None = None
    p_value: float | None = None
    time_ms: float | None = None
    baseline_ms: float | None = None
    budget: float | None = None
    baseline_budget: float | None = None
    comparison: Comparison | None = None

    @property
    def failed(self) -> bool:
        return self.status in FAILING


@dataclass
class GateResult:
    candidate: dict[str, Any]
    baseline: dict[str, Any]
    verdicts: list[CaseVerdict] = field(default_factory=list)
    min_effect: float = DEFAULT_MIN_EFFECT
    fdr: float = DEFAULT_FDR
    undecided: str | None = None  # why nothing could be judged (exit 2), else None
    explored: list[dict[str, Any]] = field(default_factory=list)  # exploration rows: reported, never judged
    notes: list[str] = field(default_factory=list)
    metric: str = "gpu"  # which time is compared: see METRICS

    @property
    def failed(self) -> list[CaseVerdict]:
        return [v for v in self.verdicts if v.failed]

    @property
    def warnings(self) -> list[CaseVerdict]:
        return [v for v in self.verdicts if v.status in WARNING]

    @property
    def verdict(self) -> str:
        return "UNDECIDED" if self.undecided else "FAIL" if self.failed else "PASS"

    @property
    def exit_code(self) -> int:
        if self.undecided:
            return 2
        return 1 if self.failed else 0


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------
def _check_fraction(name: str, value: Any, bounds: tuple[float, float]) -> float:
    lo, hi = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not lo < value < hi:
        raise GateUndecided(f"{name} must be a finite number in ({lo:g}, {hi:g}), got {value!r}")
    return float(value)


def check_values(min_effect: Any, fdr: Any, min_effects: dict[str, Any] | None) -> dict[str, float]:
    """The option values alone: finite, and inside MIN_EFFECT_RANGE / FDR_RANGE (open intervals)."""
    _check_fraction("--min-effect", min_effect, MIN_EFFECT_RANGE)
    _check_fraction("--fdr", fdr, FDR_RANGE)
    return {name: _check_fraction(f"--case-min-effect {name}", value, MIN_EFFECT_RANGE)
            for name, value in (min_effects or {}).items()}


def check_options(candidate: dict[str, Any], min_effect: Any, fdr: Any,
                  min_effects: dict[str, Any] | None) -> dict[str, float]:
    """Validate the gate's options; every name in ``min_effects`` must be a kernel or case of the candidate."""
    out = check_values(min_effect, fdr, min_effects)
    names = {c["key"] for c in candidate["cases"]} | {c["kernel"] for c in candidate["cases"]}
    for name in out:
        if name not in names:
            kernels = ", ".join(sorted({c["kernel"] for c in candidate["cases"]})) or "none"
            raise GateUndecided(f"--case-min-effect {name}: not a kernel or case of the candidate "
                                f"(its kernels: {kernels})")
    return out


# ---------------------------------------------------------------------------------------------
# Baseline
# ---------------------------------------------------------------------------------------------
def _hardware_names(s: Session, ids: set[int]) -> dict[int, str]:
    rows = s.execute(select(Hardware.id, Hardware.device_name, Hardware.fingerprint).where(Hardware.id.in_(ids)))
    return {i: f"{name} ({fp[:8]})" for i, name, fp in rows}


def baseline_run(engine: Engine, spec: str, fingerprint: str, exclude: str,
                 device_name: str = "this hardware") -> dict[str, Any]:
    """Resolve ``--baseline``: a run id, a unique run-id prefix, or a branch (its newest complete run on this
    hardware). Never the candidate (``exclude``). Errors say what was searched and what exists."""
    spec = spec.strip()
    if not spec:
        raise GateUndecided("--baseline is empty: give a branch, a run id or a unique run-id prefix")
    with Session(engine) as s:
        hw_id = s.execute(select(Hardware.id).where(Hardware.fingerprint == fingerprint)).scalar_one_or_none()
        by_id = s.execute(select(Run).where(Run.id.startswith(spec, autoescape=True)).limit(3)).scalars().all()
        exact = [r for r in by_id if r.id == spec]
        by_id = exact or by_id
        branch_runs = s.execute(
            select(Run.id, Run.hardware_id, Run.status, Run.started_at).where(Run.branch == spec)
            .order_by(Run.started_at.desc())).all()
        if by_id and branch_runs and not exact:
            raise GateUndecided(f"--baseline {spec!r} is both a branch ({len(branch_runs)} runs) and a run-id prefix "
                                "of run " + ", ".join(r.id[:12] for r in by_id) + ": give the full run id")
        if by_id and not branch_runs or exact:
            if len(by_id) > 1:
                raise GateUndecided(f"--baseline {spec!r} is an ambiguous run-id prefix: it matches "
                                    + ", ".join(r.id[:12] for r in by_id[:2]) + " and more: give more characters")
            run = by_id[0]
            if run.id == exclude:
                raise GateUndecided(f"--baseline {spec!r} is the candidate run itself ({run.id[:12]})")
            if run.hardware_id != hw_id:
                other = _hardware_names(s, {run.hardware_id}).get(run.hardware_id, "unknown")
                raise GateUndecided(f"baseline run {run.id[:12]} was measured on {other}, the candidate on "
                                    f"{device_name} ({fingerprint[:8]})")
            if run.status not in ("complete", "partial"):
                raise GateUndecided(f"baseline run {run.id[:12]} is {run.status}: it has nothing to compare with")
            return {"id": run.id, "commit": run.commit_sha, "branch": run.branch, "status": run.status}
        if not branch_runs:
            known = s.execute(select(Run.branch, func.count()).where(Run.hardware_id == hw_id)
                              .group_by(Run.branch).order_by(Run.branch)).all() if hw_id is not None else []
            listing = ", ".join(f"{b} ({n})" for b, n in known[:10]) or "none"
            raise GateUndecided(f"--baseline {spec!r} is neither a run id, a run-id prefix nor a branch with runs; "
                                f"branches with runs on {device_name}: {listing}")
        here = [r for r in branch_runs if r.hardware_id == hw_id]
        usable = [r for r in here if r.status == "complete" and r.id != exclude]
        if usable:
            run = s.get(Run, usable[0].id)
            return {"id": run.id, "commit": run.commit_sha, "branch": run.branch, "status": run.status}
        if not here:
            elsewhere = _hardware_names(s, {r.hardware_id for r in branch_runs})
            raise GateUndecided(f"no run of branch {spec!r} on {device_name} ({fingerprint[:8]}); it has "
                                f"{len(branch_runs)} on other hardware: {', '.join(sorted(elsewhere.values()))}. "
                                "Run the collector on the baseline branch here first")
        parts = [f"{len(here)} run{'s' if len(here) != 1 else ''} of {spec} on {device_name}"]
        if here[0].id == exclude:
            parts.append("the newest is the candidate")
        states = sorted({r.status for r in here if r.id != exclude})
        if states:
            parts.append("the others are " + "/".join(states) if len(here) > 1 else f"it is {states[0]}")
        raise GateUndecided(f"no complete run of branch {spec!r} to compare with: " + "; ".join(parts))


# What ``--metric`` compares: (per-run summary column, its samples). gpu: GPU time with the L2 flushed, one
# sample per repetition; call: wall time per call with calls issued back to back (host + device), one
# sample per batch (the collector's cost per call).
METRICS = {"gpu": ("median_ms", "samples_ms"), "call": ("call_ms", "call_samples_ms")}


def _histories(engine: Engine, fingerprint: str, exclude: str, column: str = "median_ms") -> dict[str, list[float]]:
    """Per case, the kernel's medians over the last HISTORY_RUNS runs on this hardware (one query)."""
    runs = [r for r in recent_runs(engine, fingerprint, HISTORY_RUNS + 1) if r["id"] != exclude][-HISTORY_RUNS:]
    order = {r["id"]: i for i, r in enumerate(runs)}
    rows = perf_rows(engine, list(order), implementations=(KERNEL_IMPL,), with_params=False)
    out: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r[column]:
            out.setdefault(r["case"], []).append((order[r["run_id"]], r[column]))
    return {case: [m for _, m in sorted(points)] for case, points in out.items()}


# ---------------------------------------------------------------------------------------------
# Judging
# ---------------------------------------------------------------------------------------------
def _gating(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [a for a in rows if a.get("kind", "gate") == "gate"]


def _scope(candidate: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(kernels, suites) the candidate set out to measure. A complete run measured what it meant to (a
    ``--kernels`` or CPU run covers less than the baseline on purpose); a partial or failed run was cut
    short, so everything the baseline has is expected of it."""
    if candidate["run"]["status"] != "complete":
        return set(), set()
    kernels = {c["kernel"] for c in candidate["cases"]}
    suites = {"accuracy"} if _gating(candidate["accuracy"]) else set()
    if any(p["implementation"] == KERNEL_IMPL for p in candidate["perf"]):
        suites.add("perf")
    return kernels, suites


def _missing(candidate: dict[str, Any], base: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(suite, case, kernel) measured by the baseline and absent from the candidate, within its scope."""
    kernels, suites = _scope(candidate)
    complete = candidate["run"]["status"] == "complete"
    kernel_of = {c["key"]: c["kernel"] for c in base["cases"]}
    have_acc = {a["case"] for a in candidate["accuracy"] if a.get("kind", "gate") == "gate"}
    have_perf = {p["case"] for p in candidate["perf"] if p["implementation"] == KERNEL_IMPL}
    out = []
    for suite, rows, have in (("accuracy", _gating(base["accuracy"]), have_acc),
                              ("perf", [p for p in base["perf"] if p["implementation"] == KERNEL_IMPL], have_perf)):
        for r in rows:
            kernel = kernel_of[r["case"]]
            if complete and (kernel not in kernels or suite not in suites):
                continue
            if r["case"] not in have:
                out.append((suite, r["case"], kernel))
    return out


def _judge_accuracy(result: GateResult, candidate: dict[str, Any], base: dict[str, Any],
                    kernel_of: dict[str, str]) -> int:
    """Accuracy verdicts; returns how many rows were measured (passed or failed on a real measurement)."""
    base_acc = {a["case"]: a for a in _gating(base["accuracy"])}
    measured = 0
    for a in _gating(candidate["accuracy"]):
        kernel = kernel_of[a["case"]]
        before = (base_acc.get(a["case"]) or {}).get("error_budget")
        v = CaseVerdict(a["case"], kernel, "pass", suite="accuracy", budget=a["error_budget"], baseline_budget=before)
        unmeasured = a["trials"] == 0 or (a["error_budget"] is None and not a["nan_mismatches"])
        if a["error"] and a["error_budget"] is None and not a["nan_mismatches"]:
            v.status, v.message = "error", a["error"]
        elif unmeasured:
            v.status, v.message = "unmeasured", "no accuracy measurement (no trials or no error budget)"
        elif not a["passed"]:
            v.status = "accuracy"
            v.message = a["error"] or f"error budget {a['error_budget']:.3g} > 1"
        elif before and a["error_budget"] is not None and a["error_budget"] > BUDGET_GROWTH_WARNING * before:
            v.status = "warning"
            v.message = (f"error budget grew {a['error_budget'] / before:.1f}x ({before:.3g} -> "
                         f"{a['error_budget']:.3g}), still within tolerance")
        else:
            v.message = f"error budget {a['error_budget']:.3g}"
        measured += v.status not in ("error", "unmeasured")
        result.verdicts.append(v)
    return measured


def _judge_perf(result: GateResult, engine: Engine, candidate: dict[str, Any], base: dict[str, Any],
                kernel_of: dict[str, str], fingerprint: str, min_effects: dict[str, float]) -> int:
    """Perf verdicts (FDR-controlled across the compared cases); returns how many cases were compared."""
    base_perf = {p["case"]: p for p in base["perf"] if p["implementation"] == KERNEL_IMPL}
    median, samples = METRICS[result.metric]
    histories = _histories(engine, fingerprint, candidate["run"]["id"], median)
    compared: list[tuple[CaseVerdict, Comparison]] = []
    for p in candidate["perf"]:
        if p["implementation"] != KERNEL_IMPL:
            continue
        kernel = kernel_of[p["case"]]
        b = base_perf.get(p["case"])
        p = {**p, "samples_ms": p.get(samples) or [], "median_ms": p.get(median)}
        if b is not None:
            b = {**b, "samples_ms": b.get(samples) or [], "median_ms": b.get(median)}
        v = CaseVerdict(p["case"], kernel, "new", time_ms=p["median_ms"], baseline_ms=(b or {}).get("median_ms"))
        result.verdicts.append(v)
        if p["error"]:
            v.status, v.message = "error", p["error"]
        elif not [s for s in p["samples_ms"] if s > 0]:
            v.status, v.message = "unmeasured", "no timing samples"
        elif b is None:
            v.message = "no baseline measurement of this case"
        elif not [s for s in b["samples_ms"] if s > 0]:
            v.message = "the baseline has no timing samples of this case" + (f" ({b['error']})" if b["error"] else "")
        else:
            effect = min_effects.get(p["case"], min_effects.get(kernel, result.min_effect))
            c = compare_case(p["case"], b["samples_ms"], p["samples_ms"], histories.get(p["case"], []), effect,
                             heavy_tailed=result.metric == "call")
            v.comparison, v.effect, v.p_value = c, c.effect, c.p
            v.time_ms, v.baseline_ms = c.candidate_ms, c.baseline_ms
            compared.append((v, c))
    found = {id(c) for c in regressions([c for _, c in compared], result.fdr)}
    for v, c in compared:
        evidence = (f"p={c.p:.2g}: within the runs {c.p_within:.2g}, between runs {c.p_between:.2g} "
                    + (f"from {c.history} runs of history" if c.basis == "history"
                       else f"from the noise floor ({c.history} runs of history, fewer than needed)"))
        times = f"{c.baseline_ms * 1e3:.4g} -> {c.candidate_ms * 1e3:.4g} us"
        if id(c) in found:
            v.status = "regression"
            v.message = f"{c.effect:+.1%} slower ({times}; {evidence}; minimum effect {c.min_effect:.0%})"
        elif c.effect > c.min_effect:
            v.status = "noisy"
            if c.p_within >= c.p_between:
                why = "not significant within the runs"
            elif c.p_outlier >= c.p_between:
                why = "launch-bound: one run cannot be told from the 2-6x outlier runs such cases have"
            else:
                why = f"within this case's between-run noise (sd {c.sigma:.1%})"
            v.message = f"{c.effect:+.1%} slower, {why} ({times}; {evidence}); watch its history"
        else:
            v.status, v.message = "pass", f"{c.effect:+.1%} ({times}; p={c.p:.2g})"
    return len(compared)


def decide(engine: Engine, candidate: RunDocument | dict[str, Any], baseline_spec: str,
           min_effect: float = DEFAULT_MIN_EFFECT, fdr: float = DEFAULT_FDR,
           min_effects: dict[str, float] | None = None, metric: str = "gpu") -> GateResult:
    """Judge a candidate run document (``kernelwatch.run/1``) against its baseline.

    Raises GateUndecided for bad options and an unresolvable baseline. A result whose ``undecided`` is
    set (exit 2) still lists what errored or is missing.
    """
    if isinstance(candidate, RunDocument):
        candidate = to_data(candidate)
    min_effects = check_options(candidate, min_effect, fdr, min_effects)
    if metric not in METRICS:
        raise GateUndecided(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    fingerprint = hardware_fingerprint(candidate["hardware"])
    cand_run = candidate["run"]
    base_ref = baseline_run(engine, baseline_spec, fingerprint, cand_run["id"],
                            candidate["hardware"].get("device_name") or "this hardware")
    base = to_data(export_run(engine, base_ref["id"]))
    result = GateResult(candidate=cand_run, baseline=base_ref, min_effect=float(min_effect), fdr=float(fdr),
                        metric=metric)
    result.explored = [a for a in candidate["accuracy"] if a.get("kind", "gate") != "gate"]
    kernel_of = {c["key"]: c["kernel"] for c in candidate["cases"]}

    measured = _judge_accuracy(result, candidate, base, kernel_of)
    measured += _judge_perf(result, engine, candidate, base, kernel_of, fingerprint, min_effects)
    missing = _missing(candidate, base)
    for suite, case, kernel in missing:
        result.verdicts.append(CaseVerdict(case, kernel, "missing", f"the baseline measured this {suite} case; "
                                           f"the candidate ({cand_run['status']} run) did not", suite=suite))
    if cand_run["status"] != "complete":
        result.notes.append(f"the candidate run is {cand_run['status']}"
                            + (f": {cand_run['notes']}" if cand_run.get("notes") else ""))
    if measured == 0:
        errored = sum(v.status == "error" for v in result.verdicts)
        result.undecided = (f"nothing comparable was measured: the candidate ({cand_run['status']} run) has "
                            f"{errored} errored and {len(missing)} missing cases and no result to compare with "
                            f"baseline run {base_ref['id'][:12]}")
    acknowledge(engine, result, fingerprint, candidate)
    return result


# ---------------------------------------------------------------------------------------------
# Acknowledged changes and improvements (read by the reports and the dashboard's triage page)
# ---------------------------------------------------------------------------------------------
ACKNOWLEDGED = "acknowledged"


def acknowledge(engine: Engine, result: GateResult, fingerprint: str, candidate: dict[str, Any]) -> None:
    """Turn a regression into "acknowledged" (reported, not failing) when ``kernelwatch ack`` recorded the
    case's change on this hardware at a commit after the baseline's and up to the candidate's (inclusive).

    Commits are ordered by commit time, as the runs that measured them recorded it; an ack of the
    candidate's own commit counts even when no run of that commit is stored yet.
    """
    regressed = [v for v in result.verdicts if v.status == "regression"]
    if not regressed:
        return
    by_case: dict[str, list[dict[str, Any]]] = {}
    for a in acks(engine, fingerprint):
        by_case.setdefault(a["case"], []).append(a)
    if not by_case:
        return
    sha = candidate["run"]["commit"]["sha"]
    until = candidate["run"]["commit"]["time"] or candidate["run"]["started_at"]
    base = run_info(engine, result.baseline["id"]) or {}
    since = base.get("commit_time") or base.get("started") or ""
    for v in regressed:
        for a in by_case.get(v.case, []):
            own = a["commit"].startswith(sha) or sha.startswith(a["commit"])
            if own or (a["commit_time"] is not None and since < a["commit_time"] <= until):
                v.status = ACKNOWLEDGED
                who = f" by {a['author']}" if a["author"] else ""
                v.message += f"; acknowledged at {a['commit'][:12]}{who}: {a['reason']}"
                break


def speedups(engine: Engine, candidate: RunDocument | dict[str, Any], result: GateResult) -> dict[str, Comparison]:
    """Cases significantly faster than the baseline: the gate's test with the two runs' roles swapped (the
    baseline's samples judged against the candidate's, the same history and minimum effect), Benjamini-Hochberg
    at the gate's FDR over every compared case. ``ratio`` is baseline / candidate time. Informational: it
    never changes a verdict.

    Only cases at least the minimum effect faster are tested; the others enter the FDR control with p = 1,
    which can only make it stricter.
    """
    if isinstance(candidate, RunDocument):
        candidate = to_data(candidate)
    compared = {v.case: v.comparison for v in result.verdicts if v.comparison is not None}
    quick = {case: c for case, c in compared.items() if 1 / c.ratio - 1 > c.min_effect}
    if not quick:
        return {}
    base = to_data(export_run(engine, result.baseline["id"]))
    base_perf = {p["case"]: p for p in base["perf"] if p["implementation"] == KERNEL_IMPL}
    histories = _histories(engine, hardware_fingerprint(candidate["hardware"]), candidate["run"]["id"])
    pairs = [compare_case(p["case"], p["samples_ms"], base_perf[p["case"]]["samples_ms"],
                          histories.get(p["case"], []), quick[p["case"]].min_effect)
             for p in candidate["perf"] if p["implementation"] == KERNEL_IMPL and p["case"] in quick]
    return {c.case: c for c in regressions(pairs, result.fdr, tested=len(compared))}
