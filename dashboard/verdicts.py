"""Triage: one hardware's newest run against its baseline, one row per case, by the gate's own statistics.

``ci.gate.decide`` judges the candidate (samples, the case's history on this hardware, FDR control,
acknowledged changes); ``ci.gate.speedups`` runs the same test the other way round for improvements.
This module turns the verdicts into rows a reviewer reads: what, how much, how sure, the time now and
before, the last runs, and the commands to reproduce and bisect. No Streamlit here: the page caches it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Engine

from ci.bisect import bisect_command, rerun_command
from ci.gate import Baseline, GateUndecided, decide, default_baseline, speedups
from dashboard.data import short_gpu, software_changes
from db import queries
from db.export import export_run
from db.schema import RunDocument, to_data
from kernels.names import KERNEL_IMPL

SPARK_RUNS = 30
# Verdicts, most severe first (the sort order of the triage table).
SEVERITY = ("accuracy failed", "errored", "not measured", "slower", "suspect (confirm)", "accuracy warning",
            "acknowledged", "slower (within noise)", "machine", "new", "faster", "unchanged")
_STATUS = {"accuracy": "accuracy failed", "error": "errored", "missing": "not measured", "unmeasured": "not measured",
           "regression": "slower", "warning": "accuracy warning", "acknowledged": "acknowledged",
           "noisy": "slower (within noise)", "new": "new", "pass": "unchanged", "unreliable": "not measured",
           "machine": "machine", "suspect": "suspect (confirm)"}


@dataclass
class Triage:
    candidate: dict[str, Any]
    baseline: dict[str, Any] | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    undecided: str | None = None  # why the gate could not compare (no baseline, ...)
    software: list[str] = field(default_factory=list)  # software changes since the baseline
    failed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def baseline_for(eng: Engine, doc: RunDocument, branch: str) -> Baseline | None:
    """The default baseline, by the gate's rule (``ci.gate.default_baseline``): assembled per case from
    ``branch`` when the candidate is on another branch and ``branch`` has runs, else from every branch."""
    return default_baseline(eng, doc, branch)


def _verdict(status: str, faster: bool) -> str:
    if status == "pass" and faster:
        return "faster"
    return _STATUS.get(status, status)


def triage(eng: Engine, candidate_id: str, baseline_id: str | None, branch: str = "main") -> Triage:
    """Judge run ``candidate_id`` against ``baseline_id`` (None: :func:`baseline_for`)."""
    cand = queries.run_info(eng, candidate_id)
    if cand is None:
        raise LookupError(f"no run {candidate_id}")
    document = export_run(eng, candidate_id)
    assembled = None if baseline_id else baseline_for(eng, document, branch)
    base = queries.run_info(eng, baseline_id) if baseline_id else assembled and assembled.run
    doc = to_data(document)
    out = Triage(candidate=cand, baseline=base)
    verdicts, faster = [], {}
    if base is None:
        out.undecided = "no earlier run on this hardware shares a case with this one: nothing to compare with"
    else:
        out.software = software_changes(base, cand)
        try:
            result = decide(eng, document, assembled or base["id"])
        except GateUndecided as exc:
            out.undecided = str(exc)
        else:
            out.undecided = getattr(result, "undecided", None)
            verdicts = result.verdicts
            out.failed = len(result.failed)
            if result.verdicts:
                faster = speedups(eng, document, result)
    out.rows = _rows(eng, cand, doc, verdicts, faster)
    return out


def _rows(eng: Engine, cand: dict[str, Any], doc: dict[str, Any], verdicts: list, faster: dict) -> list[dict]:
    kernel_of = {c["key"]: c["kernel"] for c in doc["cases"]}
    perf = {p["case"]: p for p in doc["perf"] if p["implementation"] == KERNEL_IMPL}
    acc = {a["case"]: a for a in doc["accuracy"] if a.get("kind", "gate") == "gate"}
    by_case: dict[str, list] = {}
    for v in verdicts:
        by_case.setdefault(v.case, []).append(v)
        kernel_of.setdefault(v.case, v.kernel)
    spark = _sparklines(eng, cand)
    rows = []
    for case in sorted(set(perf) | set(acc) | set(by_case)):
        vs = by_case.get(case, [])
        if vs:
            worst = min(vs, key=lambda v: SEVERITY.index(_verdict(v.status, case in faster))
                        if _verdict(v.status, case in faster) in SEVERITY else len(SEVERITY))
            verdict = _verdict(worst.status, case in faster)
            message = "; ".join(v.message for v in vs if v.message)
        else:  # no baseline to judge against: the candidate's own results are all there is
            a, p = acc.get(case), perf.get(case)
            if (a and a["error"] and a["error_budget"] is None) or (p and p["error"]):
                verdict = "errored"
            elif a and not a["passed"]:
                verdict = "accuracy failed"
            else:
                verdict = "new"
            message = (a or {}).get("error") or (p or {}).get("error") or ""
        comparison = next((v.comparison for v in vs if v.comparison is not None), None)
        effect = p_value = None
        if case in faster:
            effect, p_value = 1 / faster[case].ratio - 1, faster[case].p
        elif comparison is not None:
            effect, p_value = comparison.effect, comparison.p
        now = perf.get(case, {}).get("median_ms")
        before = next((v.baseline_ms for v in vs if getattr(v, "baseline_ms", None)), None)
        if before is None and comparison is not None and now:
            before = now / comparison.ratio
        budget = acc.get(case, {}).get("error_budget")
        suite = "accuracy" if verdict.startswith("accuracy") or (case not in perf and case in acc) else "perf"
        rows.append({
            "verdict": verdict, "kernel": kernel_of[case], "case": case,
            "effect %": None if effect is None else 100 * effect, "p": p_value,
            "now us": None if now is None else now * 1e3, "before us": None if before is None else before * 1e3,
            "budget": budget, "trend us": spark.get(case, []),
            "GPU": short_gpu(perf.get(case, {}).get("device_uuid")),
            "reproduce": rerun_command(cand["commit"], case, suite, doc["hardware"]["vendor"]),
            "bisect": bisect_command(case, cand["fingerprint"][:12]),
            "details": message,
        })
    rows.sort(key=lambda r: (SEVERITY.index(r["verdict"]) if r["verdict"] in SEVERITY else len(SEVERITY),
                             -abs(r["effect %"] or 0), r["case"]))
    return rows


def _sparklines(eng: Engine, cand: dict[str, Any]) -> dict[str, list[float]]:
    """Per case, the kernel's median (us) in the last SPARK_RUNS runs on this hardware up to the candidate."""
    runs = queries.recent_runs(eng, cand["fingerprint"], SPARK_RUNS + 20)
    ids = [r["id"] for r in runs]
    runs = runs[: ids.index(cand["id"]) + 1] if cand["id"] in ids else runs
    runs = runs[-SPARK_RUNS:]
    order = {r["id"]: i for i, r in enumerate(runs)}
    points: dict[str, list[tuple[int, float]]] = {}
    for r in queries.perf_rows(eng, list(order), implementations=(KERNEL_IMPL,), with_params=False):
        if r["median_ms"]:
            points.setdefault(r["case"], []).append((order[r["run_id"]], r["median_ms"] * 1e3))
    return {case: [v for _, v in sorted(p)] for case, p in points.items()}
