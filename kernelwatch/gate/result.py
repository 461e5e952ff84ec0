"""What the gate decides and what it is given: the verdict of a case and of a run, the cases the specs expect,
and the options' bounds."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernelwatch.gate.detect import (
    DEFAULT_FDR,
    DEFAULT_MIN_EFFECT,
    Comparison,
)
from kernelwatch.gate.statuses import (
    FAILING,
    WARNING,
)
from kernelwatch.kernels.names import (
    CaseFacts,
)
from kernelwatch.store.schema import (
    RunDocument,
)

BUDGET_GROWTH_WARNING = 2.0
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


def _run_ref(run: dict[str, Any]) -> dict[str, Any]:
    return {"id": run["id"], "commit": run["commit"], "branch": run["branch"], "status": run["status"]}


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
