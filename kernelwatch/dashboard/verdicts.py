"""Triage: one hardware's newest run against its baseline, one row per case, by the gate's own verdicts.

``kernelwatch.gate.judge.decide`` judges the candidate (samples, the case's history on this hardware, FDR control,
acknowledged changes, improvements); ``kernelwatch.gate.reports.label`` names each verdict. This module only turns them
into rows a reviewer reads: what, how much (with its interval), how sure, the time or error budget now and
before, the GPU of each side, the last runs, and the commands to reproduce and bisect. Every page that
shows a verdict (Triage, Overview, the case page, Compare) reads it from here. No Streamlit here: the pages
cache it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Engine

from kernelwatch.dashboard.data import device_label, software_changes, triage_runs
from kernelwatch.gate.bisect import bisect_command, rerun_command
from kernelwatch.gate.detect import DEFAULT_MIN_EFFECT, effect_interval
from kernelwatch.gate.judge import (
    Baseline,
    CaseVerdict,
    GateResult,
    GateUndecided,
    baseline_document,
    decide,
    default_baseline,
)
from kernelwatch.gate.reports import label, severity
from kernelwatch.gate.statuses import (
    ACCURACY_FAILED,
    ACCURACY_WARNING,
    ERROR,
    FASTER,
    FASTER_NOISY,
    MISSING,
    NEW,
    NOISY,
    PASS,
    REGRESSION,
    SEVERITY,
    SUSPECT,
    UNMEASURED,
    UNRELIABLE,
    label_of,
)
from kernelwatch.gate.statuses import RESOLVED as _RESOLVED
from kernelwatch.kernels.names import KERNEL_IMPL
from kernelwatch.store import queries
from kernelwatch.store.export import export_run
from kernelwatch.store.schema import RunDocument, to_data

SPARK_RUNS = 30
RESOLVED = label_of(_RESOLVED)  # a slowdown a newer run of the same hardware no longer shows
SLOWER = label_of(REGRESSION)
NOT_MEASURED = "errored / not measured"  # Overview's column of the cases without a measurement
# What Overview counts per kernel (each a set of labels), in its column order.
SUMMARY = {
    SLOWER: (SLOWER,),
    label_of(FASTER): (label_of(FASTER),),
    "within noise": (label_of(NOISY), label_of(FASTER_NOISY)),
    label_of(ACCURACY_FAILED): (label_of(ACCURACY_FAILED),),
    label_of(ACCURACY_WARNING): (label_of(ACCURACY_WARNING),),
    NOT_MEASURED: tuple(label_of(s) for s in (ERROR, MISSING, UNMEASURED, UNRELIABLE)),
    label_of(PASS): (label_of(PASS),),
    label_of(NEW): (label_of(NEW),),
}
ACCURACY_LABELS = (label_of(ACCURACY_FAILED), label_of(ACCURACY_WARNING))


@dataclass
class Triage:
    candidate: dict[str, Any]
    baseline: dict[str, Any] | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    undecided: str | None = None  # why the gate could not compare (no baseline, ...)
    software: list[str] = field(default_factory=list)  # software changes since the baseline
    failed: int = 0
    hardware: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def baseline_for(eng: Engine, doc: RunDocument, branch: str) -> Baseline | None:
    """The default baseline, by the gate's rule (``kernelwatch.gate.judge.baseline_branch``): assembled per case from
    ``branch``'s earlier runs (a SYNTHETIC run's: its own branch's), never another branch's."""
    return default_baseline(eng, doc, branch)


def triage(eng: Engine, candidate_id: str, baseline_id: str | None, branch: str = "main") -> Triage:
    """Judge run ``candidate_id`` against ``baseline_id`` (None: :func:`baseline_for`)."""
    cand = queries.run_info(eng, candidate_id)
    if cand is None:
        raise LookupError(f"no run {candidate_id}")
    document = export_run(eng, candidate_id)
    assembled = None if baseline_id else baseline_for(eng, document, branch)
    base = queries.run_info(eng, baseline_id) if baseline_id else assembled and assembled.run
    out = Triage(candidate=cand, baseline=base, hardware=cand["hardware"])
    result, base_doc = None, None
    if base is None:
        try:  # the gate's own words for why it cannot decide
            decide(eng, document, branch)
        except GateUndecided as exc:
            out.undecided = str(exc)
        else:
            raise AssertionError(f"the gate found a baseline of {branch} for run {candidate_id}; Triage did not")
    else:
        out.software = software_changes(base, cand)
        try:
            result = decide(eng, document, assembled or base["id"])
        except GateUndecided as exc:
            out.undecided = str(exc)
        else:
            out.undecided = getattr(result, "undecided", None)
            out.failed = len(result.failed)
            base_doc = baseline_document(eng, assembled) if assembled else export_run(eng, base["id"])
    out.rows = _rows(eng, cand, base, document, base_doc, result)
    _mark_resolved(eng, cand, out.rows)
    return out


def _gpu(perf: Any | None, device_name: str) -> str | None:
    """The model and physical device of one perf row (:func:`~kernelwatch.dashboard.data.device_label`)."""
    return None if perf is None else device_label(device_name, perf.device_uuid, perf.device)


def _rows(
    eng: Engine,
    cand: dict[str, Any],
    base: dict[str, Any] | None,
    document: RunDocument,
    base_doc: RunDocument | None,
    result: GateResult | None,
) -> list[dict]:
    doc = to_data(document)
    kernel_of = {c["key"]: c["kernel"] for c in doc["cases"]}
    perf = {p.case: p for p in document.perf if p.implementation == KERNEL_IMPL}
    before_perf = {p.case: p for p in base_doc.perf if p.implementation == KERNEL_IMPL} if base_doc else {}
    acc = {a["case"]: a for a in doc["accuracy"] if a.get("kind", "gate") == "gate"}
    by_case: dict[str, list[CaseVerdict]] = {}
    for v in result.verdicts if result else []:
        by_case.setdefault(v.case, []).append(v)
        kernel_of.setdefault(v.case, v.kernel)
    spark = _sparklines(eng, cand)
    rows = []
    for case in sorted(set(perf) | set(acc) | set(by_case)):
        vs = by_case.get(case, [])
        if vs:
            worst = min(vs, key=lambda v: severity(label(v, result)))
            verdict = label(worst, result)
            message = "; ".join(v.message for v in vs if v.message)
        else:  # no baseline to judge against: the candidate's own results are all there is
            a, p = acc.get(case), perf.get(case)
            if (a and a["error"] and a["error_budget"] is None) or (p and p.error):
                verdict = label_of(ERROR)
            elif a and not a["passed"]:
                verdict = label_of(ACCURACY_FAILED)
            else:
                verdict = label_of(NEW)
            message = (a or {}).get("error") or (p.error if p else None) or ""
        comparison = next((v.comparison for v in vs if v.comparison is not None), None)
        effect = p_value = interval = None
        now_p, before_p = perf.get(case), before_perf.get(case)
        if comparison is not None:
            effect, p_value = comparison.effect, comparison.p
            swapped = result.faster_tests.get(case)
            if swapped is not None:  # past the minimum effect faster: the evidence is the swapped test's
                p_value = swapped.p
            if now_p is not None and before_p is not None:
                interval = effect_interval(
                    before_p.samples_ms, now_p.samples_ms, math.hypot(comparison.sigma, comparison.machine_sigma)
                )
        accuracy = next((v for v in vs if v.suite == "accuracy"), None)
        budget = acc.get(case, {}).get("error_budget")
        before_budget = accuracy.baseline_budget if accuracy is not None else None
        if comparison is None and budget and before_budget:
            effect = budget / before_budget - 1  # an accuracy row's change is its error budget's
        now = now_p.median_ms if now_p is not None else None
        before = next((v.baseline_ms for v in vs if getattr(v, "baseline_ms", None)), None)
        if before is None and comparison is not None and now:
            before = now / comparison.ratio
        suite = "accuracy" if verdict in ACCURACY_LABELS or (case not in perf and case in acc) else "perf"
        rows.append(
            {
                "verdict": verdict,
                "gate": verdict,  # the gate's own word; "verdict" may refine it (slower (resolved))
                "kernel": kernel_of[case],
                "case": case,
                "effect %": None if effect is None else 100 * effect,
                "p": p_value,
                "interval %": None if interval is None else [100 * interval[0], 100 * interval[1]],
                "now us": None if now is None else now * 1e3,
                "before us": None if before is None else before * 1e3,
                "budget": budget,
                "before budget": before_budget,
                "budget change": None
                if budget is None or before_budget is None
                else f"{before_budget:.3g} → {budget:.3g}",
                "trend us": spark.get(case, []),
                "GPU": _gpu(now_p, document.hardware.device_name),
                "before GPU": _gpu(before_p, base_doc.hardware.device_name if base_doc else ""),
                "reproduce": rerun_command(cand["commit"], case, suite, doc["hardware"]["vendor"]),
                "bisect": bisect_command(case, cand["fingerprint"][:12]),
                "details": message,
                "resolved": None,
            }
        )
    rows.sort(key=_order)
    return rows


def _order(row: dict[str, Any]) -> tuple:
    return (
        SEVERITY.index(row["verdict"]) if row["verdict"] in SEVERITY else len(SEVERITY),
        -abs(row["effect %"] or 0),
        row["case"],
    )


def _mark_resolved(eng: Engine, cand: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """A slowdown (slower, or a suspect sent to confirm) whose case the newest run on this hardware measured back
    within the minimum effect of the baseline's time (a revert, a fix) is "slower (resolved)", its details
    naming the run from which every measurement stayed back."""
    slowdowns = (SLOWER, label_of(SUSPECT))
    slow = {r["case"]: r for r in rows if r["verdict"] in slowdowns and r["before us"]}
    if not slow:
        return
    runs = queries.recent_runs(eng, cand["fingerprint"], SPARK_RUNS + 20)
    ids = [r["id"] for r in runs]
    if cand["id"] not in ids:
        return
    newer = runs[ids.index(cand["id"]) + 1 :]
    if not newer:
        return
    order = {r["id"]: i for i, r in enumerate(newer)}
    measured: dict[str, list[dict]] = {}
    for p in queries.perf_rows(eng, list(order), implementations=(KERNEL_IMPL,), with_params=False):
        if p["case"] in slow and p["median_ms"]:
            measured.setdefault(p["case"], []).append(p)
    run_of = {r["id"]: r for r in newer}
    for case, points in measured.items():
        row = slow[case]
        points.sort(key=lambda p: order[p["run_id"]])
        back = [p["median_ms"] * 1e3 / row["before us"] - 1 <= DEFAULT_MIN_EFFECT for p in points]
        if not back[-1]:
            continue
        first = len(back) - 1  # the run from which every newer measurement stayed back: where it was resolved
        while first > 0 and back[first - 1]:
            first -= 1
        p = points[first]
        change = p["median_ms"] * 1e3 / row["before us"] - 1
        run = run_of[p["run_id"]]
        row["verdict"] = RESOLVED
        row["resolved"] = f"{run['commit'][:8]} (run {run['id'][:8]})"
        row["details"] = (
            f"resolved: the newer run {run['id'][:8]} (commit {run['commit'][:8]}) measured "
            f"{p['median_ms'] * 1e3:.4g} us, {change:+.1%} from the baseline, and every run since stayed back; "
            + row["details"]
        )
    rows.sort(key=_order)


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


# ---------------------------------------------------------------------------------------------
# What Triage shows for one hardware (and kernel), and what Overview sums from it
# ---------------------------------------------------------------------------------------------
Judge = Callable[[str, str | None], dict]  # (candidate run id, baseline id or None) -> Triage.as_dict()


def sections(eng: Engine, fingerprint: str, kernel: str | None, judge: Judge) -> list[tuple[str, dict]]:
    """[(role, judged triage as a dict)] for Triage's default view of one hardware: its newest run with kernel
    timings and its newest with accuracy (of ``kernel`` when one is picked), each against its baseline; the
    rows are those of ``kernel`` when one is picked."""
    out = []
    for role, run in triage_runs(eng, fingerprint, kernel):
        judged = dict(judge(run["id"], None))
        if kernel:
            judged["rows"] = [r for r in judged["rows"] if r["kernel"] == kernel]
        out.append((role, judged))
    return out


def counts(rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(verdict, cases), most severe first: the line above each Triage table."""
    found = Counter(r["verdict"] for r in rows)
    return sorted(found.items(), key=lambda kv: (SEVERITY.index(kv[0]) if kv[0] in SEVERITY else len(SEVERITY), kv[0]))


def kernel_summary(eng: Engine, fingerprint: str, kernel: str, judge: Judge) -> dict[str, Any]:
    """Overview's verdict columns of one kernel on one hardware: Triage's rows for that hardware and kernel,
    summed over its sections (a case in both the perf and the accuracy section counts in each), by SUMMARY."""
    found: Counter = Counter()
    runs = []
    for role, judged in sections(eng, fingerprint, kernel, judge):
        found.update(dict(counts(judged["rows"])))
        runs.append((role, judged["candidate"]))
    out: dict[str, Any] = {name: sum(found.get(v, 0) for v in labels) for name, labels in SUMMARY.items()}
    out["resolved"] = found.get(RESOLVED, 0)
    out["verdicts"] = dict(found)
    out["runs"] = runs
    return out
