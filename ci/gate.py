"""The merge gate: does a candidate run break accuracy or regress performance against its baseline?

Exit status: 0 all well, 1 an accuracy case fails or a case regresses significantly (or a case
errored), 2 cannot decide (no baseline on this hardware, bad input).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from ci.detect import DEFAULT_FDR, DEFAULT_MIN_EFFECT, Comparison, benjamini_hochberg, compare_case
from db.export import export_run
from db.models import Hardware, Run
from db.queries import acks, perf_rows, recent_runs, run_info
from db.schema import RunDocument, hardware_fingerprint, to_data

HISTORY_RUNS = 30
BUDGET_GROWTH_WARNING = 2.0


class GateUndecided(RuntimeError):
    """The gate cannot decide (exit 2); the message says why."""


@dataclass
class CaseVerdict:
    case: str
    kernel: str
    status: str  # "pass", "regression", "accuracy", "error", "warning", "new"
    message: str = ""
    comparison: Comparison | None = None
    budget: float | None = None
    baseline_budget: float | None = None


@dataclass
class GateResult:
    candidate: dict[str, Any]
    baseline: dict[str, Any]
    verdicts: list[CaseVerdict] = field(default_factory=list)
    min_effect: float = DEFAULT_MIN_EFFECT
    fdr: float = DEFAULT_FDR

    @property
    def failed(self) -> list[CaseVerdict]:
        return [v for v in self.verdicts if v.status in ("regression", "accuracy", "error")]

    @property
    def warnings(self) -> list[CaseVerdict]:
        return [v for v in self.verdicts if v.status == "warning"]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


def baseline_run(engine: Engine, spec: str, fingerprint: str, exclude: str) -> dict[str, Any]:
    """A run id (prefix) or a branch name: the newest complete run of that branch on this hardware."""
    with Session(engine) as s:
        hw_id = s.execute(select(Hardware.id).where(Hardware.fingerprint == fingerprint)).scalar_one_or_none()
        by_id = s.execute(select(Run).where(Run.id.startswith(spec), Run.id != exclude).limit(2)).scalars().all()
        if len(by_id) == 1:
            run = by_id[0]
            if run.hardware_id != hw_id:
                raise GateUndecided(f"baseline run {run.id} was measured on other hardware than the candidate")
        else:
            if hw_id is None:
                raise GateUndecided(f"no run of any branch on this hardware ({fingerprint}) to compare with")
            run = s.execute(
                select(Run).where(Run.branch == spec, Run.hardware_id == hw_id, Run.status == "complete",
                                  Run.id != exclude).order_by(Run.started_at.desc()).limit(1)
            ).scalar_one_or_none()
            if run is None:
                raise GateUndecided(f"no complete run of branch {spec!r} on this hardware ({fingerprint}); "
                                    "run the collector on the baseline branch here first")
        return {"id": run.id, "commit": run.commit_sha, "branch": run.branch}


def _histories(engine: Engine, fingerprint: str, exclude: str) -> dict[str, list[float]]:
    """Per case, the kernel's medians over the last HISTORY_RUNS runs on this hardware (one query)."""
    runs = [r for r in recent_runs(engine, fingerprint, HISTORY_RUNS + 1) if r["id"] != exclude][-HISTORY_RUNS:]
    order = {r["id"]: i for i, r in enumerate(runs)}
    rows = perf_rows(engine, list(order), implementations=("triton",), with_params=False)
    out: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r["median_ms"]:
            out.setdefault(r["case"], []).append((order[r["run_id"]], r["median_ms"]))
    return {case: [m for _, m in sorted(points)] for case, points in out.items()}


def decide(engine: Engine, candidate: RunDocument | dict[str, Any], baseline_spec: str,
           min_effect: float = DEFAULT_MIN_EFFECT, fdr: float = DEFAULT_FDR,
           min_effects: dict[str, float] | None = None) -> GateResult:
    """Judge a candidate run document (``kernelwatch.run/1``) against its baseline."""
    if isinstance(candidate, RunDocument):
        candidate = to_data(candidate)
    fingerprint = hardware_fingerprint(candidate["hardware"])
    cand_id = candidate["run"]["id"]
    base_ref = baseline_run(engine, baseline_spec, fingerprint, cand_id)
    base = to_data(export_run(engine, base_ref["id"]))
    result = GateResult(candidate=candidate["run"], baseline=base_ref, min_effect=min_effect, fdr=fdr)
    kernel_of = {c["key"]: c["kernel"] for c in candidate["cases"]}

    base_acc = {a["case"]: a for a in base["accuracy"]}
    for a in candidate["accuracy"]:
        kernel = kernel_of[a["case"]]
        if not a["passed"]:
            reason = a["error"] or f"error budget {a['error_budget']:.3g} > 1"
            result.verdicts.append(CaseVerdict(a["case"], kernel, "accuracy", reason, budget=a["error_budget"]))
            continue
        before = (base_acc.get(a["case"]) or {}).get("error_budget")
        if before and a["error_budget"] is not None and a["error_budget"] > BUDGET_GROWTH_WARNING * before:
            result.verdicts.append(CaseVerdict(
                a["case"], kernel, "warning", f"error budget grew {a['error_budget'] / before:.1f}x "
                f"({before:.3g} -> {a['error_budget']:.3g}), still within tolerance", budget=a["error_budget"],
                baseline_budget=before))

    base_perf = {p["case"]: p for p in base["perf"] if p["implementation"] == "triton"}
    histories = _histories(engine, fingerprint, cand_id)
    comparisons: list[tuple[dict, Comparison]] = []
    for p in candidate["perf"]:
        if p["implementation"] != "triton":
            continue
        kernel = kernel_of[p["case"]]
        if p["error"]:
            result.verdicts.append(CaseVerdict(p["case"], kernel, "error", p["error"]))
            continue
        b = base_perf.get(p["case"])
        if b is None or not b["samples_ms"] or not p["samples_ms"]:
            result.verdicts.append(CaseVerdict(p["case"], kernel, "new", "no baseline measurement"))
            continue
        history = histories.get(p["case"], [])
        effect = (min_effects or {}).get(p["case"], (min_effects or {}).get(kernel, min_effect))
        comparisons.append((p, compare_case(p["case"], b["samples_ms"], p["samples_ms"], history, effect)))
    rejected = benjamini_hochberg([c.p for _, c in comparisons], fdr)
    for (p, c), reject in zip(comparisons, rejected):
        kernel = kernel_of[p["case"]]
        if reject and c.effect > c.min_effect:
            msg = (f"{c.effect:+.1%} slower (p={c.p:.2g} after checking {c.history} runs of history; "
                   f"minimum effect {c.min_effect:.0%})")
            result.verdicts.append(CaseVerdict(p["case"], kernel, "regression", msg, comparison=c))
        else:
            result.verdicts.append(CaseVerdict(p["case"], kernel, "pass", f"{c.effect:+.1%} (p={c.p:.2g})",
                                               comparison=c))
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
    base_perf = {p["case"]: p for p in base["perf"] if p["implementation"] == "triton"}
    histories = _histories(engine, hardware_fingerprint(candidate["hardware"]), candidate["run"]["id"])
    pairs = [compare_case(p["case"], p["samples_ms"], base_perf[p["case"]]["samples_ms"],
                          histories.get(p["case"], []), quick[p["case"]].min_effect)
             for p in candidate["perf"] if p["implementation"] == "triton" and p["case"] in quick]
    pvalues = [c.p for c in pairs] + [1.0] * (len(compared) - len(pairs))
    rejected = benjamini_hochberg(pvalues, result.fdr)
    return {c.case: c for c, reject in zip(pairs, rejected) if reject and c.effect > c.min_effect}
