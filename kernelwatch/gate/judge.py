"""The merge gate: does a candidate run break accuracy or regress performance against its baseline?

Exit status (``GateResult.exit_code``):

* 0: every gating case was measured and is well;
* 1: a case fails: an accuracy case over its tolerance or whose stored budget, ``passed`` or tolerance disagrees
  with its errors, its baseline or its spec (:mod:`kernelwatch.gate.budget`), a significant slowdown (unless
  ``kernelwatch ack`` acknowledged it, see :func:`acknowledge`), a case that errored, a case the baseline measured and
  the candidate did not (missing; a kernel timing is missing whatever reference rows remain), or a result
  without a measurement (a perf row with no samples, an accuracy row with no trials), a slowdown the same-run
  references share past what machines of the model differ by (unmeasured: the machine, not the kernel, is
  broken; the model's machine bounds, :mod:`kernelwatch.gate.machines`), a case whose samples absorbed host delay
  (unreliable: re-measure), or a suspect not yet cleared by a stored confirmation;
* 2: cannot decide: bad options, no baseline, or nothing comparable measured at all.

The baseline of ``--baseline BRANCH`` is assembled per case (:func:`assemble_baseline`: each case's newest
earlier result on the branch and hardware), the rule Triage and Compare use too. The history that judges a
case's noise is the baseline branch's alone (:func:`kernelwatch.store.queries.judging_runs`). A slowdown the runs alone
cannot decide is a *suspect* (:func:`mark_suspects`): it fails until ``kernelwatch confirm`` re-measures both
commits on one device and stores its verdict, which the next gate run applies.

Only gating results decide. Exploration results (accuracy rows of kind "explore": fresh seeds, see
``kernelwatch.collect.accuracy``) are reported beside the verdict and never change it.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from sqlalchemy import Engine

from kernelwatch.gate.budget import disagreements
from kernelwatch.gate.detect import (
    DEFAULT_FDR,
    DEFAULT_MIN_EFFECT,
    Comparison,
    Shift,
    between_machine_ratio,
    compare_case,
    machine_bound,
    machine_sigma,
    regressions,
    run_ratio,
    run_shift,
    segment_start,
)
from kernelwatch.gate.machines import Machine, machine_of
from kernelwatch.gate.statuses import (
    ACCURACY_FAILED,
    ACCURACY_WARNING,
    ACKNOWLEDGED,
    CONFIRMABLE,
    ERROR,
    FAILING,
    MACHINE,
    MISSING,
    NEW,
    NOISY,
    PASS,
    REBASELINED,
    REGRESSION,
    RETIRED,
    STATUSES,
    SUSPECT,
    UNMEASURED,
    UNRELIABLE,
    WARNING,
    counted,
    p_text,
    p_value,
)
from kernelwatch.kernels.names import (
    GRAPH_TIMINGS,
    KERNEL_IMPL,
    NOISE_GEMM,
    NOISE_LABELS,
    TIMING_EVENTS,
    CaseFacts,
    calls_per_sample,
)
from kernelwatch.store.export import export_run
from kernelwatch.store.queries import (
    accuracy_case_runs,
    acks,
    baseline_candidates,
    branch_runs,
    branches_on,
    confirmations,
    judging_runs,
    perf_case_runs,
    perf_rows,
    result_counts,
    run_info,
    runs_by_id_prefix,
)
from kernelwatch.store.schema import (
    Confirmation,
    PerfResult,
    RunDocument,
    hardware_fingerprint,
    is_commit_sha,
    parse_time,
    recorded_facts,
    to_data,
)
from kernelwatch.store.synthetic import SYNTHETIC_BRANCHES

HISTORY_RUNS = 30
BUDGET_GROWTH_WARNING = 2.0
# A same-run reference explains a slowdown when it moved by at least this share of it (in log). On three H200s
# (9b9d362d, benchmarks/cross_machine_aa.py) cuBLAS 4.2-4.7% slower sat beside a planted +10% step the kernel
# showed as +9.3-9.4% (share ~0.5): not the machine; a slowdown the machine gives both has a share near 1.
REFERENCE_SHARE = 0.6
MIN_EFFECT_RANGE = (0.0, 10.0)  # open interval: 0 would call any noise a regression, 10 = 11x slower
FDR_RANGE = (0.0, 1.0)


class GateUndecided(RuntimeError):
    """The gate cannot decide (exit 2); the message says why."""


# suite -> {case key: kernel}
CaseSets = Mapping[str, Mapping[str, str]]


@dataclass(frozen=True)
class SpecCases:
    """What the checked-out tree's specs define (the command line reads them through the kernel registry
    ``collect`` uses; ``gate`` imports no kernel): ``suites``: suite -> {case key: kernel};
    ``unchanged_since(commit)``: the kernels none of whose sources changed between ``commit`` and the tree (empty
    when it cannot tell: nothing is carried over then); ``facts``: case key -> what its spec declares about timing it
    (``kernelwatch.kernels.spec.case_facts``), over what a run recorded (:func:`case_facts_of`)."""

    suites: CaseSets
    unchanged_since: Callable[[str], set[str]] = field(default=lambda commit: set())
    facts: Mapping[str, CaseFacts] = field(default_factory=dict)

    @property
    def kernels(self) -> set[str]:
        return {kernel for cases in self.suites.values() for kernel in cases.values()}


@dataclass(frozen=True)
class Expected:
    """What a candidate must measure: ``cases`` (suite -> {case key: kernel}: every case of the specs within its
    scope), the scope's ``suites`` and ``kernels`` (None: every kernel) and case filter (``match``, ``keys``), and the
    kernels it claims to carry over (``carried``; excused only once checked, :func:`carry_over`)."""

    cases: dict[str, dict[str, str]]
    suites: set[str]
    kernels: set[str] | None
    match: str | None = None
    keys: frozenset[str] = frozenset()
    carried: tuple[str, ...] = ()

    def within(self, suite: str, case: str, kernel: str) -> bool:
        """Whether the candidate's scope covers this case (defined by the specs or not)."""
        return (
            suite in self.suites
            and (self.kernels is None or kernel in self.kernels)
            and (self.match is None or self.match in case)
            and (not self.keys or case in self.keys)
        )


def expected_cases(candidate: RunDocument, specs: SpecCases) -> Expected:
    """The cases the specs define within the candidate's recorded scope (``run.scope``). A run cut short (partial,
    failed) set out to measure everything; a complete run from before the scope was recorded, whatever it has rows
    of (kernels with a case, the accuracy suite with a gating row, the perf suite with any timing: a run that timed
    eager or cuBLAS set out to time the kernel too). The scope can only narrow what the specs ask; what it claims
    to carry over is checked later (:func:`carry_over`)."""
    run, scope = candidate.run, candidate.run.scope
    if run.status != "complete":  # cut short: everything, less what it skipped on purpose as unchanged
        carried = tuple(scope.carried) if scope is not None else ()
        suites, kernels, match, keys = set(specs.suites), None, None, frozenset()
    elif scope is None:
        suites = {"accuracy"} if any(a.kind == "gate" for a in candidate.accuracy) else set()
        if candidate.perf:
            suites.add("perf")
        kernels, match, keys, carried = {c.kernel for c in candidate.cases}, None, frozenset(), ()
    else:
        suites = set(scope.suites)
        kernels = set(scope.kernels) if scope.kernels is not None else None
        match, keys, carried = scope.match, frozenset(scope.cases), tuple(scope.carried)
    out = Expected({}, suites, kernels, match, keys, carried)
    out.cases.update(
        {
            suite: {case: kernel for case, kernel in cases.items() if out.within(suite, case, kernel)}
            for suite, cases in specs.suites.items()
            if suite in suites
        }
    )
    return out


@dataclass
class CaseVerdict:
    """The gate's verdict on one case, in plain fields (the dashboard's triage page reads them).

    * ``status``: one of ``kernelwatch.gate.statuses.STATUSES`` (the table of what each does and how it is named).
    Failing:
      "regression" (significant slowdown past the minimum effect), "accuracy" (error budget over 1, or NaN/Inf
      where the reference has values), "error" (the case raised, hung or crashed), "missing" (the baseline
      measured it, the candidate did not),
      "unmeasured" (a result row without a measurement, or timed on a machine slower than any of its model
      in the history: its same-run references moved past ``kernelwatch.gate.detect.MACHINE_BOUND``), "unreliable" (the
      samples absorbed host delay: the median moved, the lower quantiles did not, see
      ``kernelwatch.gate.detect.contamination``; re-measure),
      "suspect" (slower past the minimum effect where the runs alone cannot decide: see :func:`mark_suspects`;
      ``kernelwatch confirm`` re-measures it on one device, and its stored verdict decides).
      Not failing: "warning" (accuracy budget grew
      past BUDGET_GROWTH_WARNING x, still within tolerance), "noisy" (slower past the minimum effect but
      not distinguishable from this case's between-run noise), "machine" (slower, and its same-run
      reference is slower with it, within what machines of the model differ by: the machine, not the kernel),
      "acknowledged" (a regression whose change
      ``kernelwatch ack`` recorded, see :func:`acknowledge`), "pass", "new" (no baseline to compare).
    * ``suite``: "accuracy" or "perf".
    * ``effect``: candidate / baseline median time - 1 (0.087 = 8.7% slower), perf only.
    * ``p_value``: the evidence for a slowdown (max of within-run and between-run p), before FDR control.
    * ``time_ms`` / ``baseline_ms``: the two runs' median times (candidate now, baseline before).
    * ``budget`` / ``baseline_budget``: error budgets (accuracy), 1 = at the tolerance.
    * ``comparison``: the full statistics (``kernelwatch.gate.detect.Comparison``) when a perf comparison was made.
    * ``reference`` / ``reference_ratio``: the same-run reference (an implementation, or a measured ceiling)
      and its candidate / baseline time ratio; the kernel's change relative to it is ratio / reference_ratio.
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
    reference: str | None = None
    reference_ratio: float | None = None

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
    assembled: Baseline | None = None  # the baseline's runs, per case (see assemble_baseline)
    # improvements (:func:`speedups`): the swapped test of every case past the minimum effect faster, and the
    # cases whose swapped test survives FDR control; filled by :func:`decide`, read by the reports and pages
    faster_tests: dict[str, Comparison] = field(default_factory=dict)
    faster: set[str] = field(default_factory=set)
    hardware: dict[str, Any] = field(default_factory=dict)  # the candidate's: device_name, fingerprint, device_count
    carried: list[str] = field(default_factory=list)  # kernels the candidate skipped as unchanged: see carry_over
    retired: list[str] = field(default_factory=list)  # baseline cases the candidate's specs dropped: see retire

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
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not lo < value < hi
    ):
        raise GateUndecided(f"{name} must be a finite number in ({lo:g}, {hi:g}), got {value!r}")
    return float(value)


def check_values(min_effect: Any, fdr: Any, min_effects: dict[str, Any] | None) -> dict[str, float]:
    """The option values alone: finite, and inside MIN_EFFECT_RANGE / FDR_RANGE (open intervals)."""
    _check_fraction("--min-effect", min_effect, MIN_EFFECT_RANGE)
    _check_fraction("--fdr", fdr, FDR_RANGE)
    return {
        name: _check_fraction(f"--case-min-effect {name}", value, MIN_EFFECT_RANGE)
        for name, value in (min_effects or {}).items()
    }


def check_options(
    candidate: RunDocument, min_effect: Any, fdr: Any, min_effects: dict[str, Any] | None
) -> dict[str, float]:
    """Validate the gate's options; every name in ``min_effects`` must be a kernel or case of the candidate."""
    out = check_values(min_effect, fdr, min_effects)
    names = {c.key for c in candidate.cases} | {c.kernel for c in candidate.cases}
    for name in out:
        if name not in names:
            kernels = ", ".join(sorted({c.kernel for c in candidate.cases})) or "none"
            raise GateUndecided(
                f"--case-min-effect {name}: not a kernel or case of the candidate (its kernels: {kernels})"
            )
    return out


# ---------------------------------------------------------------------------------------------
# Baseline: one rule for the gate, the dashboard's Triage and Compare
# ---------------------------------------------------------------------------------------------
def _times(candidate: RunDocument) -> tuple[dt.datetime, dt.datetime]:
    started = parse_time(candidate.run.started_at)
    when = parse_time(candidate.run.commit.time) if candidate.run.commit.time else started
    return when, started


def _run_ref(run: dict[str, Any]) -> dict[str, Any]:
    return {"id": run["id"], "commit": run["commit"], "branch": run["branch"], "status": run["status"]}


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


@dataclass
class Baseline:
    """A baseline assembled per case (:func:`assemble_baseline`), or one named run.

    * ``run``: the run that supplied the most cases (the report's "baseline run"; what the candidate lacks of
      it is "missing");
    * ``sources``: every run that supplied a case, most cases first: its reference (id, commit, branch,
      status) with ``perf`` and ``accuracy``, how many of the candidate's cases it supplied;
    * ``run_of``: case key -> id of the run that supplied it (perf and gating accuracy alike; a named run
      supplies every case: empty);
    * ``document``: one run document of those results (``run`` and ``hardware`` of ``run``), what the rules
      judge against; built on demand (:func:`baseline_document`).
    """

    run: dict[str, Any]
    sources: list[dict[str, Any]]
    run_of: dict[str, str]
    document: RunDocument | None = None
    rule: str = ""  # why the baseline branch is not the one asked for (baseline_branch), else ""

    @property
    def ref(self) -> dict[str, Any]:
        return {**_run_ref(self.run), "sources": self.sources}

    def commit_of(self, case: str) -> str | None:
        """The commit of the run that supplied ``case`` (None: no run did)."""
        commits = {s["id"]: s["commit"] for s in self.sources}
        return commits.get(self.run_of.get(case, self.run["id"]))

    def describe(self) -> str:
        """The report's line: which runs supplied the baseline, how many cases each."""
        parts = [
            f"run {s['id'][:8]} (commit {s['commit'][:12]}): {s['perf']} perf + {s['accuracy']} accuracy"
            for s in self.sources
        ]
        return (
            f"baseline assembled per case from {len(self.sources)} run{'s' if len(self.sources) != 1 else ''} "
            f"(each case's newest earlier result): " + "; ".join(parts)
        )


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


# What ``--metric`` compares: (per-run summary column, its samples). gpu: GPU time with the L2 flushed, one
# sample per repetition; call: wall time per call with calls issued back to back (host + device), one
# sample per batch (the collector's cost per call).
METRICS = {"gpu": ("median_ms", "samples_ms"), "call": ("call_ms", "call_samples_ms")}


def case_facts_of(candidate: RunDocument, specs: SpecCases | None) -> dict[str, CaseFacts]:
    """Per case of the candidate, its facts (noise class, launch-bound, references: ``CaseFacts``): the checked-out
    specs' where they define the case, else what the run recorded (or, from before it did, its rows imply:
    ``kernelwatch.store.schema.recorded_facts``)."""
    return {**recorded_facts(candidate), **(specs.facts if specs else {})}


def _histories(
    engine: Engine, candidate: RunDocument, branch: str, column: str = "median_ms", now: dt.datetime | None = None
) -> tuple[dict[str, list[tuple[float, str | None]]], int]:
    """(per case, (the kernel's median, its GPU UUID) in commit order; how many runs were read): the history
    that judges the candidate, from :func:`kernelwatch.store.queries.judging_runs` (the last HISTORY_RUNS complete runs
    of ``branch`` on the candidate's hardware, no PR push, none after the candidate or ``now``; one query).
    A case's history holds only timings taken like the candidate's, one call or a batch of many per sample
    (:func:`calls_per_sample`): a launch-bound MSELoss reads 5.8 us one way and 1.95 us the other, and a history
    holding both would make its noise look like 50%."""
    fingerprint = hardware_fingerprint(to_data(candidate)["hardware"])
    method = {p.case: calls_per_sample(p.timing) for p in candidate.perf if p.implementation == KERNEL_IMPL}
    runs = judging_runs(
        engine,
        fingerprint,
        branch,
        _times(candidate),
        now or dt.datetime.now(dt.timezone.utc),
        candidate.run.id,
        HISTORY_RUNS,
    )
    order = {r["id"]: i for i, r in enumerate(runs)}
    rows = perf_rows(engine, list(order), implementations=(KERNEL_IMPL,), with_params=False)
    out: dict[str, list[tuple[int, float, str | None]]] = {}
    for r in rows:
        if r[column] and calls_per_sample(r["timing"]) == method.get(r["case"]):
            out.setdefault(r["case"], []).append((order[r["run_id"]], r[column], r["device_uuid"]))
    return {case: [(m, u) for _, m, u in sorted(points)] for case, points in out.items()}, len(runs)


# ---------------------------------------------------------------------------------------------
# Judging
# ---------------------------------------------------------------------------------------------
def _scope(candidate: RunDocument) -> tuple[set[str], set[str]]:
    """(kernels, suites) the candidate set out to measure, when no specs are given (a library caller): a complete
    run, whatever it has rows of; a partial or failed one was cut short, so everything the baseline has is
    expected of it."""
    if candidate.run.status != "complete":
        return set(), set()
    kernels = {c.kernel for c in candidate.cases}
    suites = {"accuracy"} if any(a.kind == "gate" for a in candidate.accuracy) else set()
    if candidate.perf:  # any implementation: a run that timed eager or cuBLAS set out to time the kernel too
        suites.add("perf")
    return kernels, suites


def _baseline_rows(base: RunDocument) -> list[tuple[str, str, str]]:
    """(suite, case, kernel) of the baseline's gating accuracy rows and kernel timings."""
    kernel_of = {c.key: c.kernel for c in base.cases}
    rows = [("accuracy", a.case, kernel_of[a.case]) for a in base.accuracy if a.kind == "gate"]
    return rows + [("perf", p.case, kernel_of[p.case]) for p in base.perf if p.implementation == KERNEL_IMPL]


def _measured(candidate: RunDocument) -> dict[str, set[str]]:
    return {
        "accuracy": {a.case for a in candidate.accuracy if a.kind == "gate"},
        "perf": {p.case for p in candidate.perf if p.implementation == KERNEL_IMPL},
    }


def _missing(candidate: RunDocument, base: RunDocument, expected: Expected | None = None) -> list[tuple[str, str, str]]:
    """(suite, case, kernel) measured by the baseline and absent from the candidate: with ``expected``, the cases the
    specs define within the candidate's scope; without, within what it has rows of (:func:`_scope`)."""
    have = _measured(candidate)
    out = []
    if expected is not None:
        for suite, case, kernel in _baseline_rows(base):
            if case in expected.cases.get(suite, ()) and case not in have[suite]:
                out.append((suite, case, kernel))
        return out
    kernels, suites = _scope(candidate)
    complete = candidate.run.status == "complete"
    for suite, case, kernel in _baseline_rows(base):
        if complete and (kernel not in kernels or suite not in suites):
            continue
        if case not in have[suite]:
            out.append((suite, case, kernel))
    return out


def carry_over(
    result: GateResult,
    candidate: RunDocument,
    base: RunDocument,
    expected: Expected | None,
    specs: SpecCases | None,
    baseline: Baseline,
) -> tuple[RunDocument, Expected | None]:
    """The baseline, and what is expected of the candidate, less the kernels it skipped because none of their
    sources changed (``collect --changed-since``, its scope's ``carried``): their baseline results stand for this
    commit, so nothing of theirs is expected (never "missing"); they go to ``result.carried`` and a note. The claim
    is the candidate's own: a kernel is carried over only where the tree confirms that none of its sources changed
    since the commit of every baseline run that supplied one of its cases (``SpecCases.unchanged_since``); one
    it cannot confirm stays expected, and a note says why. A kernel the candidate measured anyway is judged as
    usual."""
    if expected is None or specs is None or not expected.carried:
        return base, expected
    measured = {c.kernel for c in candidate.cases}
    claimed = sorted(set(expected.carried) & {c.kernel for c in base.cases} - measured)
    commits: dict[str, set[str]] = {}
    for c in base.cases:
        if c.kernel in claimed:
            commits.setdefault(c.kernel, set()).add(baseline.commit_of(c.key) or baseline.run["commit"])
    unchanged: dict[str, set[str]] = {}
    skipped, refused = [], []
    for kernel in claimed:
        for commit in commits[kernel]:
            if commit not in unchanged:
                unchanged[commit] = specs.unchanged_since(commit) if is_commit_sha(commit) else set()
        (skipped if all(kernel in unchanged[c] for c in commits[kernel]) else refused).append(kernel)
    if refused:
        result.notes.append(
            f"not carried over: {', '.join(refused)}: the candidate says it skipped them as unchanged, but their "
            f"sources in this tree differ from the baseline's commit "
            f"({', '.join(sorted(c[:12] for k in refused for c in commits[k]))}) or git cannot tell: expected"
        )
    if not skipped:
        return base, expected
    result.carried = skipped
    cases = {c.key for c in base.cases if c.kernel in skipped}
    result.notes.append(
        f"carried over from baseline run {base.run.id} (unchanged since the baseline's commit in this tree, "
        f"{len(cases)} cases): {', '.join(skipped)}"
    )
    left = {suite: {k: v for k, v in cs.items() if v not in skipped} for suite, cs in expected.cases.items()}
    return _less(base, accuracy=cases, perf=cases, cases=cases), replace(expected, cases=left)


def _less(base: RunDocument, accuracy: set[str], perf: set[str], cases: set[str] | None = None) -> RunDocument:
    """``base`` without the accuracy rows of ``accuracy``, the perf and profiler rows of ``perf`` and the case
    entries of ``cases``."""
    update = {
        "accuracy": [a for a in base.accuracy if a.case not in accuracy],
        "perf": [p for p in base.perf if p.case not in perf],
        "profiler": [m for m in base.profiler if m.case not in perf],
    }
    if cases:
        update["cases"] = [c for c in base.cases if c.key not in cases]
    return base.model_copy(update=update)


def retire(
    result: GateResult, candidate: RunDocument, base: RunDocument, expected: Expected | None, specs: SpecCases | None
) -> list[CaseVerdict]:
    """The baseline's cases the checked-out specs no longer define (a variant or shape taken out, or a case
    renamed), within the candidate's scope and not measured by it: each is "retired", failing until
    ``kernelwatch ack`` records the change at a commit after the baseline's (:func:`acknowledge`). Only the specs
    retire a case; what the candidate's artifact says never does. Their keys go to ``result.retired``."""
    if expected is None or specs is None:
        return []
    have = _measured(candidate)
    known, defined = specs.kernels, specs.suites
    out = []
    for suite, case, kernel in _baseline_rows(base):
        if case in defined.get(suite, ()) or case in have[suite]:
            continue
        if kernel in known and not expected.within(suite, case, kernel):
            continue
        if kernel not in known and suite not in expected.suites:
            continue
        out.append(
            CaseVerdict(
                case,
                kernel,
                RETIRED,
                f"the baseline measured this {suite} case and the specs of this tree no longer define it (taken "
                "out or renamed): acknowledge the change with `kernelwatch ack` to stop failing",
                suite=suite,
            )
        )
    result.retired = sorted({v.case for v in out})
    if out:
        by_kernel = Counter(v.kernel for v in out)
        result.notes.append(
            f"retired: {len(result.retired)} case{'s' if len(result.retired) != 1 else ''} of the baseline the "
            f"specs of this tree no longer define ({', '.join(f'{k}: {n}' for k, n in sorted(by_kernel.items()))}; "
            f"first: {result.retired[0]}): failing until acknowledged"
        )
    return out


def _reference_rows(candidate: RunDocument) -> dict[str, list[str]]:
    """Per case, the implementations other than the kernel that the candidate timed."""
    out: dict[str, list[str]] = {}
    for p in candidate.perf:
        if p.implementation != KERNEL_IMPL:
            out.setdefault(p.case, []).append(p.implementation)
    return out


def _judge_accuracy(
    result: GateResult,
    candidate: RunDocument,
    base: RunDocument,
    kernel_of: dict[str, str],
    tolerances: Mapping[str, tuple[float, float]] | None = None,
) -> int:
    """Accuracy verdicts from what was measured (the error budget, the errors it comes from, checked against the
    baseline's and the spec's tolerance by :func:`kernelwatch.gate.budget.disagreements`, and the NaN/Inf mismatches;
    the stored ``passed`` flag can only make a case fail, never pass); returns how many rows were measured."""
    base_acc = {a.case: a for a in base.accuracy if a.kind == "gate"}
    measured = 0
    for a in candidate.accuracy:
        if a.kind != "gate":
            continue
        before = base_acc[a.case].error_budget if a.case in base_acc else None
        v = CaseVerdict(
            a.case, kernel_of[a.case], PASS, suite="accuracy", budget=a.error_budget, baseline_budget=before
        )
        unmeasured = a.trials == 0 or (a.error_budget is None and not a.nan_mismatches)
        over = a.error_budget is not None and a.error_budget > 1
        named = disagreements(a, base_acc.get(a.case), (tolerances or {}).get(a.case))
        if a.passed and (over or a.nan_mismatches) and not any("passed" in n for n in named):
            named.append("the stored 'passed: true' disagrees with the measurement")
        if a.error and a.error_budget is None and not a.nan_mismatches:
            v.status, v.message = ERROR, a.error
        elif unmeasured:
            v.status, v.message = UNMEASURED, "no accuracy measurement (no trials or no error budget)"
        elif a.nan_mismatches or over or not a.passed or named:
            v.status = ACCURACY_FAILED
            why = [f"error budget {a.error_budget:.3g} > 1"] if over else []
            if a.nan_mismatches:
                why.append(f"{a.nan_mismatches} NaN/Inf mismatches with the reference")
            why += named
            v.message = "; ".join(why) if why else (a.error or "marked failed by the collector")
        elif before and a.error_budget > BUDGET_GROWTH_WARNING * before:
            v.status = ACCURACY_WARNING
            v.message = (
                f"error budget grew {a.error_budget / before:.1f}x ({before:.3g} -> "
                f"{a.error_budget:.3g}), still within tolerance"
            )
        else:
            v.message = f"error budget {a.error_budget:.3g}"
        measured += v.status not in (ERROR, UNMEASURED)
        result.verdicts.append(v)
    return measured


def _short_uuid(uuid: str | None) -> str:
    """``GPU-cadb0535`` of ``GPU-cadb0535-5296-...``: the prefix and the first whole group."""
    if not uuid:
        return "unknown GPU"
    parts = uuid.split("-")
    return "-".join(parts[:2]) if len(parts) > 2 else uuid


def _reference(
    candidate: RunDocument, base: RunDocument, case: str, column: str, facts: CaseFacts
) -> tuple[str, float] | None:
    """(what, candidate / baseline time ratio it implies) for the case's same-run reference: the first of its
    facts' references both runs timed, else the runs' measured ceiling for the case's noise class (matmul
    throughput for GEMM, bandwidth for the others)."""
    refs = facts.reference_names

    def timed(doc: RunDocument) -> dict[str, float]:
        return {
            p.implementation: getattr(p, column)
            for p in doc.perf
            if p.case == case and p.implementation in refs and getattr(p, column)
        }

    mine, theirs = timed(candidate), timed(base)
    for impl in refs:
        if impl in mine and impl in theirs:
            return impl, mine[impl] / theirs[impl]
    gemm = facts.noise == NOISE_GEMM
    ceiling = "peak_tflops" if gemm else "peak_gbps"
    now, before = getattr(candidate.hardware, ceiling), getattr(base.hardware, ceiling)
    if now and before:
        return f"the measured {'matmul' if gemm else 'bandwidth'} ceiling", before / now
    return None


def _gpu_groups(history: list[tuple[float, str | None]]) -> dict[str, list[float]]:
    """Per GPU UUID, a case's per-run times in its history's last segment (runs before a step measured other
    code: GPUs compared across it differ by the step, not by the machine)."""
    groups: dict[str, list[float]] = {}
    for m, uuid in history[segment_start([m for m, _ in history]) :]:
        if uuid:
            groups.setdefault(uuid, []).append(m)
    return groups


@dataclass(frozen=True)
class MachineBound:
    """How much slower a machine of this model may run than another: per bound class (``CaseFacts.bound_class``)
    for one case, and for a whole run; the history's estimates where they are larger than the model's figures
    (:mod:`kernelwatch.gate.machines`)."""

    per_class: dict[str, tuple[float, str]]
    run: float
    run_source: str


def _machine_bounds(
    compared: list[tuple[CaseVerdict, Comparison, str]],
    gpu_groups: dict[str, dict[str, list[float]]],
    facts: Mapping[str, CaseFacts],
    model: Machine,
) -> MachineBound:
    estimates: dict[str, float] = {}
    for v, _, _ in compared:
        ratio = between_machine_ratio(gpu_groups[v.case])
        klass = facts[v.case].bound_class
        if ratio is not None:
            estimates[klass] = max(ratio, estimates.get(klass, ratio))
    per_class = {klass: machine_bound(estimates.get(klass), klass, model) for klass in model.bound}
    whole = run_ratio([gpu_groups[v.case] for v, _, _ in compared])
    if whole is not None and whole > model.run_bound:
        return MachineBound(per_class, whole, "the largest whole-run ratio between two GPUs in the history")
    if model.measured:
        return MachineBound(per_class, model.run_bound, f"the largest measured between two {model.short} runs")
    return MachineBound(per_class, model.run_bound, f"the default ({model.source})")


def _model(candidate: RunDocument) -> str:
    return candidate.hardware.device_name or "machine of this model"


def _broken_machine(
    shift: Shift | None,
    compared: list[tuple[CaseVerdict, Comparison, str]],
    bound: MachineBound,
    candidate: RunDocument,
) -> str | None:
    """Why the whole run is unmeasured, or None: a run-wide shift of the kernels past the whole-run bound that the
    same-run references share (their median change past it too): the machine ran slower than any of its model in
    the history, or the timer broke; nothing it measured can be compared."""
    refs = [v.reference_ratio for v, _, _ in compared if v.reference_ratio]
    if shift is None or shift.ratio <= bound.run or not refs or float(np.median(refs)) <= bound.run:
        return None
    return (
        f"this machine ran {float(np.median(refs)):.3g}x slower than the baseline's (its same-run references, "
        f"median of {len(refs)} cases; the kernels {shift.ratio:.3g}x), past the {bound.run:.3g}x any two "
        f"{_model(candidate)}s in the history differed by over a run ({bound.run_source}): "
        "re-run on a healthy runner"
    )


# ---------------------------------------------------------------------------------------------
# The perf rules: ordered lists of small functions of one case's facts; the first that answers wins
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Judged:
    """A rule's answer: the case's status (a row of ``kernelwatch.gate.statuses``) and the message that says why."""

    status: str
    message: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"{self.status!r} is no status of kernelwatch.gate.statuses")


@dataclass(frozen=True)
class PerfInput:
    """One kernel-timed case before any comparison: the candidate's row, the baseline's (None: none) and each
    one's positive samples of the compared metric."""

    error: str | None
    samples: list[float]
    baseline: PerfResult | None
    baseline_samples: list[float]
    timing: str | None = None


def errored(x: PerfInput) -> Judged | None:
    """The case raised, hung or crashed: error."""
    return Judged(ERROR, x.error) if x.error else None


def no_samples(x: PerfInput) -> Judged | None:
    """A row without a measurement: unmeasured."""
    return None if x.samples else Judged(UNMEASURED, "no timing samples")


def no_baseline(x: PerfInput) -> Judged | None:
    """The baseline never timed the case: new."""
    return Judged(NEW, "no baseline measurement of this case") if x.baseline is None else None


def baseline_unsampled(x: PerfInput) -> Judged | None:
    """The baseline's row holds no samples (it errored): new."""
    if x.baseline is None or x.baseline_samples:
        return None
    return Judged(
        NEW, "the baseline has no timing samples of this case" + (f" ({x.baseline.error})" if x.baseline.error else "")
    )


def timing_changed(x: PerfInput) -> Judged | None:
    """Candidate and baseline hold different calls per sample (:func:`calls_per_sample`): what the number means
    changed, not the kernel's speed: re-baselined, never faster or slower."""
    now, then = calls_per_sample(x.timing), calls_per_sample(x.baseline.timing if x.baseline else None)
    if x.baseline is None or now == then:
        return None
    return Judged(
        REBASELINED,
        f"timed with {now} per sample now ({x.timing or TIMING_EVENTS}), with {then} in the baseline "
        f"({x.baseline.timing or TIMING_EVENTS}): a new measurement, not a speed change; the runs after it are "
        "judged against it",
    )


# Whether a case can be compared at all; a case none of them answers is compared, then judged by PERF_RULES.
INPUT_RULES = (errored, no_samples, no_baseline, baseline_unsampled, timing_changed)


@dataclass(frozen=True)
class PerfFacts:
    """What the rules know of one compared case.

    * ``comparison``: its statistics (``kernelwatch.gate.detect.compare_case``);
    * ``significant``: its slowdown survived FDR control among the compared cases;
    * ``shift``: the run-wide shift of the compared kernels (None: none past chance);
    * ``reference`` / ``reference_ratio``: the same-run reference and its candidate / baseline ratio (None: none);
    * ``bound_class`` and ``machine_limit``: the case's class for :class:`MachineBound`
    (``CaseFacts.bound_class``)
      and how much slower a machine of the model may run for it, with where that figure comes from;
    * ``model``: the device's name; ``branch``: the baseline branch (its history judged the noise);
    * ``note``: what else the message says (another GPU, another timing method).
    """

    comparison: Comparison
    significant: bool
    shift: Shift | None
    reference: str | None
    reference_ratio: float | None
    bound_class: str
    machine_limit: tuple[float, str]
    model: str
    branch: str
    note: str = ""

    @property
    def relative(self) -> float | None:
        """The kernel's change relative to its same-run reference (candidate / baseline ratio of the two)."""
        return None if self.reference_ratio is None else self.comparison.ratio / self.reference_ratio

    @property
    def shifted(self) -> bool:
        """Part of a run-wide shift: slower past the minimum effect, and within it of the shift itself (a case far
        beyond the shift is judged on its own evidence: a launch-bound outlier run stays one)."""
        c, shift = self.comparison, self.shift
        return (
            shift is not None
            and c.effect > c.min_effect
            and abs(math.log(c.ratio / shift.ratio)) <= math.log1p(c.min_effect)
        )

    @property
    def slower(self) -> bool:
        """Slower beyond chance: significant, or part of the run-wide shift."""
        return self.significant or self.shifted

    @property
    def explained(self) -> bool:
        """The same-run reference moved with the kernel: its ratio to the reference within the minimum effect AND
        the reference's own change at least REFERENCE_SHARE of the kernel's."""
        c, relative = self.comparison, self.relative
        return (
            relative is not None
            and relative - 1 < c.min_effect
            and math.log(self.reference_ratio) >= REFERENCE_SHARE * math.log(c.ratio)
        )

    @property
    def evidence(self) -> str:
        c = self.comparison
        return f"{p_text(c.p)}: within the runs {p_value(c.p_within)}, between runs {p_value(c.p_between)} " + (
            f"from {counted(c.history, 'run')} of {self.branch}"
            if c.basis == "history"
            else f"from the noise floor ({counted(c.history, 'run')} of {self.branch}, fewer than needed)"
        )

    @property
    def why(self) -> str:
        """Why it is slower beyond chance: its own evidence, or the run-wide shift it is part of."""
        if self.significant:
            return self.evidence
        s = self.shift
        shift = f"{s.slower} of {s.n} cases slower, sign test {p_text(s.p)}"
        return f"part of the run-wide shift ({shift}); {self.evidence}"

    @property
    def times(self) -> str:
        c = self.comparison
        return f"{c.baseline_ms * 1e3:.4g} -> {c.candidate_ms * 1e3:.4g} us"

    @property
    def tail(self) -> str:
        relative = self.relative
        vs_ref = (
            ""
            if relative is None
            else (
                f"; relative to {self.reference} in the same runs {relative - 1:+.1%} "
                f"({self.reference} {self.reference_ratio - 1:+.1%})"
            )
        )
        return vs_ref + (f"; {self.note}" if self.note else "")


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def contaminated(f: PerfFacts) -> Judged | None:
    """The samples absorbed host delay (the median moved, the lower quantiles did not): unreliable."""
    c = f.comparison
    if c.contaminated is None:
        return None
    return Judged(UNRELIABLE, f"{c.contaminated.describe()} ({f.times}){f.tail}")


def past_machine_bound(f: PerfFacts) -> Judged | None:
    """Slower beyond chance and shared by its same-run reference, but the reference moved past what any machine
    of the model ran slower than another for the case's class: the machine is broken, the case unmeasured."""
    if not (f.slower and f.explained):
        return None
    limit, source = f.machine_limit
    ratio = f.reference_ratio or 1.0
    if ratio <= limit:
        return None
    c = f.comparison
    past = (
        f"this machine ran {ratio:.3g}x slower than the baseline's ({f.reference}), past the {limit:.3g}x any "
        f"{f.model} in the history ran slower than another for {NOISE_LABELS[f.bound_class]} cases ({source}): "
        "re-run on a healthy runner"
    )
    return Judged(UNMEASURED, f"{past} ({c.effect:+.1%}, {f.times}; {f.why}){f.tail}")


def shared_with_reference(f: PerfFacts) -> Judged | None:
    """Slower beyond chance, and its same-run reference slower with it: the machine, not the kernel."""
    if not (f.slower and f.explained):
        return None
    return Judged(
        MACHINE,
        f"{f.comparison.effect:+.1%} slower ({f.times}), shared by {f.reference}: the machine, not the "
        f"kernel ({f.why}){f.tail}",
    )


def slower_beyond_chance(f: PerfFacts) -> Judged | None:
    """Significant after FDR control, or part of the run-wide shift: a regression."""
    if not f.slower:
        return None
    c = f.comparison
    return Judged(REGRESSION, f"{c.effect:+.1%} slower ({f.times}; {f.why}; minimum effect {c.min_effect:.0%}){f.tail}")


def within_noise(f: PerfFacts) -> Judged | None:
    """Slower past the minimum effect, but not distinguishable from the case's noise: noisy."""
    c = f.comparison
    if c.effect <= c.min_effect:
        return None
    if c.p_within >= c.p_between:
        why = "not significant within the runs"
    elif c.p_outlier >= c.p_between:
        why = "launch-bound: one run cannot be told from the 2-6x outlier runs such cases have"
    elif c.basis == "history" and c.exceeded:
        why = f"runs of its history deviated this much {c.exceeded} times in {c.history}"
    elif c.machine_sigma:
        sd = math.hypot(c.sigma, c.machine_sigma)
        why = f"within this case's between-run and between-GPU noise (sd {sd:.1%})"
    else:
        why = f"within this case's between-run noise (sd {c.sigma:.1%})"
    return Judged(NOISY, f"{c.effect:+.1%} slower, {why} ({f.times}; {f.evidence}){f.tail}; watch its history")


def unchanged(f: PerfFacts) -> Judged:
    """Anything else: pass."""
    c = f.comparison
    history = counted(c.history, "run")
    return Judged(PASS, f"{c.effect:+.1%} ({f.times}; {p_text(c.p)}, {history} of {f.branch}){f.tail}")


# The verdict on a compared case, in order; the last always answers.
PERF_RULES = (contaminated, past_machine_bound, shared_with_reference, slower_beyond_chance, within_noise, unchanged)


def first_answer(rules: Sequence[Callable[[Any], Judged | None]], facts: PerfInput | PerfFacts) -> Judged | None:
    """The answer of the first rule of ``rules`` that answers ``facts`` (None: none does)."""
    for rule in rules:
        judged = rule(facts)
        if judged is not None:
            return judged
    return None


def _judge_perf(
    result: GateResult,
    engine: Engine,
    candidate: RunDocument,
    base: RunDocument,
    kernel_of: dict[str, str],
    facts: Mapping[str, CaseFacts],
    min_effects: dict[str, float],
) -> int:
    """Perf verdicts (FDR-controlled across the compared cases) by INPUT_RULES, then PERF_RULES, each case judged
    by its ``facts`` (noise class, launch-bound, same-run references) and the model's figures
    (:mod:`kernelwatch.gate.machines`); returns how many cases were compared."""
    median, samples = METRICS[result.metric]
    base_perf = {p.case: p for p in base.perf if p.implementation == KERNEL_IMPL}
    model = machine_of(candidate.hardware.device_name)
    if not model.measured:
        result.notes.append(f"machine bounds and noise: {model.describe(candidate.hardware.device_name)}")
    branch = result.baseline["branch"]
    histories, judges = _histories(engine, candidate, branch, median)
    result.notes.append(
        f"history: {judges} complete run{'s' if judges != 1 else ''} of {branch} on this hardware "
        "(no other branch, no PR push, none after the candidate or now) judge the noise, steps and "
        "between-GPU terms; each row names how many of them measured its case"
    )
    compared: list[tuple[CaseVerdict, Comparison, str]] = []
    other_gpu: set[str] = set()
    gpu_groups: dict[str, dict[str, list[float]]] = {}  # per case: its history's per-run times per GPU
    for p in candidate.perf:
        if p.implementation != KERNEL_IMPL:
            continue
        kernel = kernel_of[p.case]
        b = base_perf.get(p.case)
        mine = [s for s in getattr(p, samples) if s > 0]
        theirs = [s for s in getattr(b, samples) if s > 0] if b is not None else []
        v = CaseVerdict(
            p.case, kernel, NEW, time_ms=getattr(p, median), baseline_ms=getattr(b, median) if b is not None else None
        )
        result.verdicts.append(v)
        judged = first_answer(INPUT_RULES, PerfInput(p.error, mine, b, theirs, p.timing))
        if judged is not None:
            v.status, v.message = judged.status, judged.message
            continue
        effect = min_effects.get(p.case, min_effects.get(kernel, result.min_effect))
        history = histories.get(p.case, [])
        case = facts[p.case]
        note, sigma_m = "", 0.0
        groups = _gpu_groups(history)
        gpu_groups[p.case] = groups
        if p.device_uuid != b.device_uuid:
            sigma_m, source = machine_sigma(groups, case.noise, model)
            where = (
                f"baseline from another GPU ({_short_uuid(b.device_uuid)}, candidate on {_short_uuid(p.device_uuid)})"
                if b.device_uuid and p.device_uuid
                else f"{'baseline' if not b.device_uuid else 'candidate'} GPU not recorded, counted as another "
                f"GPU ({_short_uuid(b.device_uuid or p.device_uuid)})"
            )
            note = f"{where}: between-GPU noise {sigma_m:.1%}, {source}"
            other_gpu.add(_short_uuid(b.device_uuid))
        c = compare_case(
            p.case,
            theirs,
            mine,
            [m for m, _ in history],
            effect,
            heavy_tailed=result.metric == "call",
            machine=sigma_m,
            launch_bound=case.launch_bound,
            model=model,
        )
        if c.contaminated is not None and p.timing in GRAPH_TIMINGS:
            # replayed from a CUDA graph, a sample holds no host time: a median that moves while p20 stays
            # is the device's own spread (a launch-bound case's), not host delay (3 H200s, 9b9d362d)
            c = replace(c, contaminated=None)
        v.comparison, v.effect, v.p_value = c, c.effect, c.p
        v.time_ms, v.baseline_ms = c.candidate_ms, c.baseline_ms
        ref = _reference(candidate, base, p.case, median, case)
        if ref is not None:
            v.reference, v.reference_ratio = ref
        if result.metric == "gpu" and p.timing != b.timing:
            # graph replay leaves out launch gaps that events around a direct call keep (cuBLAS alone at
            # [1024,8192]->4096 read 90.6 us replayed, 95-98 us with events on earlier H200 runs)
            timed = (
                f"timed by {p.timing or 'events (before timing was recorded)'} now, "
                f"by {b.timing or 'events (before timing was recorded)'} in the baseline"
            )
            note = f"{note}; {timed}" if note else timed
        compared.append((v, c, note))
    found = {id(c) for c in regressions([c for _, c, _ in compared], result.fdr)}
    if other_gpu:
        crossed = sum(bool(note) for _, _, note in compared)
        result.notes.append(
            f"baseline from another GPU ({', '.join(sorted(other_gpu))}) for {crossed} of "
            f"{len(compared)} compared cases: their noise includes a between-GPU term"
        )
    shift = run_shift([c for _, c, _ in compared if c.contaminated is None])
    if shift is not None and shift.p > result.fdr:
        shift = None  # too few cases to tell a shift of the run from chance
    if shift is not None:
        result.notes.append(
            f"run-wide shift: {shift.slower} of {shift.n} compared cases are slower past their "
            f"minimum effect (median {shift.ratio - 1:+.1%}, sign test {p_text(shift.p)}): "
            "judged as one change, not as each case's noise"
        )
    bound = _machine_bounds(compared, gpu_groups, facts, model)
    for v, c, note in compared:
        klass = facts[v.case].bound_class
        judging = PerfFacts(
            c,
            id(c) in found,
            shift,
            v.reference,
            v.reference_ratio,
            klass,
            bound.per_class[klass],
            _model(candidate),
            branch,
            note,
        )
        judged = first_answer(PERF_RULES, judging)
        v.status, v.message = judged.status, judged.message
    broken = _broken_machine(shift, compared, bound, candidate)
    if broken is not None:  # a regression stays one; nothing else this machine measured passes or warns
        result.notes.append(f"the run is unmeasured: {broken}")
        for v, _, _ in compared:
            if v.status in (PASS, NOISY, MACHINE):
                v.status, v.message = UNMEASURED, f"{broken}; this case: {v.message}"
    return len(compared)


def decide(
    engine: Engine,
    candidate: RunDocument,
    baseline_spec: str | Baseline,
    min_effect: float = DEFAULT_MIN_EFFECT,
    fdr: float = DEFAULT_FDR,
    min_effects: dict[str, float] | None = None,
    metric: str = "gpu",
    tolerances: Mapping[str, tuple[float, float]] | None = None,
    specs: SpecCases | None = None,
) -> GateResult:
    """Judge a candidate run document (``kernelwatch.run/1``) against its baseline.

    ``tolerances``: the kernels' specs' (rtol, atol) per accuracy case key (the command line passes them; ``ci``
    imports no kernel): a row stored with a looser one fails.
    ``specs``: the cases the checked-out specs define (the command line passes them): every one of them within the
    candidate's scope that the baseline measured is expected of it (:func:`expected_cases`), and a baseline case
    they no longer define is retired (:func:`retire`). Without them, what the candidate has rows of is its scope.

    Raises GateUndecided for bad options and an unresolvable baseline. A result whose ``undecided`` is
    set (exit 2) still lists what errored or is missing.
    """
    if not isinstance(candidate, RunDocument):
        raise TypeError(f"decide takes a RunDocument, got {type(candidate).__name__}")
    min_effects = check_options(candidate, min_effect, fdr, min_effects)
    if metric not in METRICS:
        raise GateUndecided(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    data = to_data(candidate)
    fingerprint = hardware_fingerprint(data["hardware"])
    expected = expected_cases(candidate, specs) if specs is not None else None
    assembled = baseline_run(engine, baseline_spec, candidate, expected)
    infos = {source["id"]: run_info(engine, source["id"]) or {} for source in assembled.sources}
    base_ref, base = assembled.ref, baseline_document(engine, assembled)
    cand_run = data["run"]
    result = GateResult(
        candidate=cand_run,
        baseline=base_ref,
        min_effect=float(min_effect),
        fdr=float(fdr),
        metric=metric,
        assembled=assembled,
    )
    result.hardware = {
        "device_name": candidate.hardware.device_name,
        "fingerprint": fingerprint,
        "device_count": candidate.hardware.device_count,
    }
    result.explored = [data["accuracy"][i] for i, a in enumerate(candidate.accuracy) if a.kind != "gate"]
    kernel_of = {c.key: c.kernel for c in candidate.cases}
    if assembled.rule:
        result.notes.append(assembled.rule)
    if assembled.run_of:
        result.notes.append(assembled.describe())
    base, expected = carry_over(result, candidate, base, expected, specs, assembled)
    retired = retire(result, candidate, base, expected, specs)

    measured = _judge_accuracy(result, candidate, base, kernel_of, tolerances)
    facts = case_facts_of(candidate, specs)
    measured += _judge_perf(result, engine, candidate, base, kernel_of, facts, min_effects)
    missing = _missing(candidate, base, expected)
    result.verdicts += retired
    references = _reference_rows(candidate)
    for suite, case, kernel in missing:
        timed = (
            f" (it timed {', '.join(references[case])} but not the kernel)"
            if suite == "perf" and case in references
            else ""
        )
        result.verdicts.append(
            CaseVerdict(
                case,
                kernel,
                MISSING,
                f"the baseline measured this {suite} case; the candidate ({cand_run['status']} run) did not{timed}",
                suite=suite,
            )
        )
    if cand_run["status"] != "complete":
        result.notes.append(
            f"the candidate run is {cand_run['status']}" + (f": {cand_run['notes']}" if cand_run.get("notes") else "")
        )
    if measured == 0:
        errored = sum(v.status == ERROR for v in result.verdicts)
        result.undecided = (
            f"nothing comparable was measured: the candidate ({cand_run['status']} run) has "
            f"{errored} errored and {len(missing)} missing cases and no result to compare with "
            f"baseline run {base_ref['id']}"
        )
    times = {}
    for source in assembled.sources:
        info = infos[source["id"]]
        times[source["commit"]] = info.get("commit_time") or info.get("started")
    mark_suspects(result, candidate, base, assembled, stored_confirmations(engine, fingerprint, result), times)
    acknowledge(engine, result, fingerprint, candidate)
    result.faster_tests = speedup_tests(engine, candidate, result)
    result.faster = set(speedups(engine, candidate, result, result.faster_tests))
    return result


# ---------------------------------------------------------------------------------------------
# Suspects: the net (statistics over runs) and the judge (a paired re-measurement on one device)
# ---------------------------------------------------------------------------------------------
UNDECIDED = (NOISY, MACHINE)  # slowdowns past the minimum effect the statistics could not call
# Where candidate and baseline were not measured alike (another GPU, another timing method), a slowdown of at
# least this fraction of the minimum effect is a suspect: a faster machine hides part of a real change. Runs of
# one CUDA code on three H200s (benchmarks/cross_machine_aa.py, docs/design.md): at 1.0, 97.8% of the cases
# planted +10% were sent to confirm and 1.6% of the A/A cases; at 0.8, 98.7% and 2.8%; at 0.6, 99.1% and 4.7%.
UNLIKE_FRACTION = 0.8


def _unlike(cand: Any, base: Any) -> list[str]:
    """How the candidate's and the baseline's timings of one case were not measured alike (empty: alike)."""
    why = []
    if cand.device_uuid != base.device_uuid:
        why.append(
            f"its baseline was measured on another GPU ({_short_uuid(base.device_uuid)}; the candidate on "
            f"{_short_uuid(cand.device_uuid)}), where a machine's own speed moves it"
        )
    now, then = cand.timing or TIMING_EVENTS, base.timing or TIMING_EVENTS  # unrecorded: events, the only method then
    if now != then:
        why.append(
            f"it was timed by {now} now and by {then} in the baseline (the two read a 5 us call up to 12% apart "
            "on one GPU)"
        )
    return why


def _suspect_reasons(v: CaseVerdict, unlike: list[str]) -> list[str]:
    """Why the runs alone cannot decide a slowdown of ``v`` (empty: they can), given how its two timings were
    not measured alike (:func:`_unlike`)."""
    c = v.comparison
    why = list(unlike)
    if v.status in UNDECIDED:
        why.append(f"the statistics called it {v.status}")
    if why and c.launch_bound:  # GPU time only (mark_suspects): the case's facts, not --metric call's tails
        why.append(
            f"it is launch-bound ({c.baseline_ms * 1e3:.3g} us), where whole runs of one commit differ this much"
        )
    return why


def mark_suspects(
    result: GateResult,
    candidate: RunDocument,
    base: RunDocument,
    baseline: Baseline,
    confirmations: list[dict[str, Any]],
    commit_times: Mapping[str, str | None] | None = None,
) -> None:
    """The post-pass over the judged perf cases (after the rules, before acknowledgements).

    A perf case slower by at least its minimum effect becomes "suspect" (failing) when the two runs cannot
    decide it: candidate and baseline measured on different physical GPUs (a "regression" among them: the
    machine may be all of it) or by different timing methods (graph replay against events: the collector
    keeps a graph only when it did the call's work, and that check can fall either way from run to run), or a
    slowdown the statistics called "noisy" (launch-bound outlier runs, the history's noise) or "machine" —
    whatever the history says about its noise. Where the two were not measured alike, a slowdown of
    :data:`UNLIKE_FRACTION` of the minimum effect is enough (a passing one too): the candidate's machine may be
    faster and hide part of a real change. A same-device "regression" has clear statistics (a launch-bound one
    is past what outlier runs do) and keeps its verdict, as does every other case. Contaminated samples are
    already "unreliable" (failing, re-measured by confirm too).

    Then the stored confirmations (``kernelwatch confirm --db``) that :func:`applicable_confirmations` keeps decide
    every confirmable case: SAME, NOT_SLOWER or FASTER clears it (pass), SLOWER is a regression, UNKNOWN keeps it
    suspect.

    GPU time only: confirm re-measures GPU time, so a ``--metric call`` verdict (wall time per call, host
    included) is not one it can judge and keeps the rules' verdict.
    """
    if result.metric != "gpu":
        return
    mine = {p.case: p for p in candidate.perf if p.implementation == KERNEL_IMPL}
    theirs = {p.case: p for p in base.perf if p.implementation == KERNEL_IMPL}
    suspects = 0
    for v in result.verdicts:
        c = v.comparison
        if v.suite != "perf" or c is None or v.status not in (PASS, REGRESSION, *UNDECIDED):
            continue
        unlike = _unlike(mine[v.case], theirs[v.case])
        reach = c.min_effect * (UNLIKE_FRACTION if unlike else 1.0)
        if c.effect < reach or (v.status == PASS and not unlike):
            continue
        why = _suspect_reasons(v, unlike)
        if why:
            was, v.status = v.status, SUSPECT
            past = (
                f"at least the minimum effect {c.min_effect:.0%}"
                if c.effect >= c.min_effect
                else f"under the minimum effect {c.min_effect:.0%} but past {reach:.1%}, where a machine's own "
                "difference may hide part of a change"
            )
            v.message = (
                f"{c.effect:+.1%} slower, {past}, and the runs alone cannot decide: {'; '.join(why)}. Re-measure "
                f"both commits on one device (kernelwatch confirm) [the statistics: {was}: {v.message}]"
            )
            suspects += 1
    chosen = applicable_confirmations(result, candidate, baseline, confirmations, commit_times or {})
    applied = 0
    for v in result.verdicts:
        row = chosen.get(v.case)
        if v.suite != "perf" or row is None or v.status not in CONFIRMABLE:
            continue
        line, was = Confirmation.model_validate(row).describe(), v.status
        v.status = CONFIRMED[row["verdict"]][1]
        said = {PASS: ": cleared", SUSPECT: ": still undecided"}.get(v.status, "")
        v.message = f"{line}{said} [the runs: {was}: {v.message}]"
        applied += 1
    if suspects:
        result.notes.append(
            f"{suspects} suspect{'s' if suspects != 1 else ''}: slower past the minimum effect where "
            "the runs alone cannot decide; `kernelwatch confirm` re-measures them on one device and "
            "stores its verdict, which the next gate run uses"
        )
    if applied:
        result.notes.append(
            f"{applied} case{'s' if applied != 1 else ''} decided by a stored confirmation "
            f"(paired re-measurement of {candidate.run.commit.sha[:12]} against its baseline on one device)"
        )


# A confirmation's verdict: (how cautious it is, 0 most; the status it gives a confirmable case). Between
# confirmations of one case that disagree, the most cautious decides (a later SAME never outvotes a SLOWER).
# A new verdict is one line here.
CONFIRMED = {
    "SLOWER": (0, REGRESSION),
    "UNKNOWN": (1, SUSPECT),
    "SAME": (2, PASS),
    "NOT_SLOWER": (2, PASS),
    "FASTER": (2, PASS),
}
FULL_SHA = 40


def _full_sha(value: Any) -> str | None:
    """``value`` as a whole commit sha (40 hex digits, lower case), else None: a prefix can name two commits."""
    if not isinstance(value, str) or len(value) != FULL_SHA or not is_commit_sha(value):
        return None
    return value.lower()


def applicable_confirmations(
    result: GateResult,
    candidate: RunDocument,
    baseline: Baseline,
    confirmations: list[dict[str, Any]],
    commit_times: Mapping[str, str | None],
) -> dict[str, dict[str, Any]]:
    """Per case, the stored confirmation that decides it: of the candidate's whole commit sha against the whole sha
    of the commit that supplied the case's baseline (no prefixes), on the candidate's hardware (the query's
    fingerprint), re-measured with a minimum effect no larger than the gate's for the case, and confirmed after
    both commits were made (``commit_times``: commit -> its time; the candidate's from its run). Of several, the
    most cautious (:data:`CONFIRMED`), then the newest."""
    sha = _full_sha(candidate.run.commit.sha)
    if sha is None:
        return {}
    effect = {v.case: v.comparison.min_effect for v in result.verdicts if v.comparison is not None}
    made = candidate.run.commit.time or candidate.run.started_at
    chosen: dict[str, dict[str, Any]] = {}
    for row in confirmations:
        base_sha = _full_sha(baseline.commit_of(row["case"]))
        base_time = commit_times.get(baseline.commit_of(row["case"]) or "")
        if (
            base_sha is None
            or _full_sha(row["candidate_commit"]) != sha
            or _full_sha(row["baseline_commit"]) != base_sha
            or row["verdict"] not in CONFIRMED
            or row["min_effect"] is None
            or row["case"] not in effect
            or row["min_effect"] > effect[row["case"]] + 1e-12
            or not base_time
            or parse_time(row["confirmed_at"]) <= max(parse_time(made), parse_time(base_time))
        ):
            continue
        held = chosen.get(row["case"])
        key = (-CONFIRMED[row["verdict"]][0], row["confirmed_at"])
        if held is None or key > (-CONFIRMED[held["verdict"]][0], held["confirmed_at"]):
            chosen[row["case"]] = row
    return chosen


def stored_confirmations(engine: Engine, fingerprint: str, result: GateResult) -> list[dict[str, Any]]:
    """The stored confirmations on this hardware of the cases a confirmation could decide."""
    cases = sorted({v.case for v in result.verdicts if v.suite == "perf" and v.comparison is not None})
    return confirmations(engine, fingerprint, cases)


# ---------------------------------------------------------------------------------------------
# Acknowledged changes and improvements (read by the reports and the dashboard's triage page)
# ---------------------------------------------------------------------------------------------
def acknowledge(engine: Engine, result: GateResult, fingerprint: str, candidate: RunDocument) -> None:
    """Turn a regression into "acknowledged" (reported, not failing) when ``kernelwatch ack`` recorded the
    case's change on this hardware at a commit after the baseline's and up to the candidate's (inclusive).

    Commits are ordered by commit time, as the runs that measured them recorded it; an ack of the
    candidate's own commit counts even when no run of that commit is stored yet.
    """
    regressed = [v for v in result.verdicts if v.status in (REGRESSION, SUSPECT, RETIRED)]
    if not regressed:
        return
    by_case: dict[str, list[dict[str, Any]]] = {}
    for a in acks(engine, fingerprint):
        by_case.setdefault(a["case"], []).append(a)
    if not by_case:
        return
    sha = candidate.run.commit.sha
    until = candidate.run.commit.time or candidate.run.started_at
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


def speedup_tests(engine: Engine, candidate: RunDocument, result: GateResult) -> dict[str, Comparison]:
    """The gate's test with the two runs' roles swapped (the baseline's samples judged against the candidate's,
    the same history and minimum effect) for every case at least its minimum effect faster; ``ratio`` is
    baseline / candidate time. Before FDR control: :func:`speedups` applies it."""
    compared = {v.case: v.comparison for v in result.verdicts if v.comparison is not None}
    quick = {case: c for case, c in compared.items() if 1 / c.ratio - 1 > c.min_effect}
    if not quick:
        return {}
    base = (
        baseline_document(engine, result.assembled) if result.assembled else export_run(engine, result.baseline["id"])
    )
    base_perf = {p.case: p for p in base.perf if p.implementation == KERNEL_IMPL}
    median, samples = METRICS[result.metric]
    histories, _ = _histories(engine, candidate, result.baseline["branch"], median)
    return {
        p.case: compare_case(
            p.case,
            [s for s in getattr(p, samples) if s > 0],
            [s for s in getattr(base_perf[p.case], samples) if s > 0],
            [m for m, _ in histories.get(p.case, [])],
            quick[p.case].min_effect,
            heavy_tailed=result.metric == "call",
            machine=quick[p.case].machine_sigma,
            launch_bound=quick[p.case].launch_bound,
            model=machine_of(candidate.hardware.device_name),
        )
        for p in candidate.perf
        if p.implementation == KERNEL_IMPL and p.case in quick
    }


def speedups(
    engine: Engine, candidate: RunDocument, result: GateResult, tests: dict[str, Comparison] | None = None
) -> dict[str, Comparison]:
    """Cases significantly faster than the baseline: :func:`speedup_tests` (or ``tests``, its result),
    Benjamini-Hochberg at the gate's FDR over every compared case. Informational: it never changes a verdict.

    Only cases at least the minimum effect faster are tested; the others enter the FDR control with p = 1,
    which can only make it stricter.
    """
    pairs = list((speedup_tests(engine, candidate, result) if tests is None else tests).values())
    if not pairs:
        return {}
    compared = sum(v.comparison is not None for v in result.verdicts)
    return {c.case: c for c in regressions(pairs, result.fdr, tested=compared)}
