"""The gate's rules, in one place: small functions of one case's facts, each answering with a status and why, or
nothing. :data:`RULES` lists them all in the order they apply."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelwatch.gate import suspects
from kernelwatch.gate.detect import (
    Comparison,
    Shift,
)
from kernelwatch.gate.result import BUDGET_GROWTH_WARNING, CaseVerdict
from kernelwatch.gate.statuses import (
    ACCURACY_FAILED,
    ACCURACY_WARNING,
    ACKNOWLEDGED,
    CONFIRMABLE,
    ERROR,
    MACHINE,
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
    counted,
    p_text,
    p_value,
)
from kernelwatch.gate.suspects import UNDECIDED
from kernelwatch.kernels.names import (
    NOISE_LABELS,
    TIMING_EVENTS,
    calls_per_sample,
)
from kernelwatch.store.schema import (
    AccuracyResult,
    Confirmation,
    PerfResult,
)

# A same-run reference explains a slowdown when it moved by at least this share of it (in log). On three H200s
# (9b9d362d, benchmarks/cross_machine_aa.py) cuBLAS 4.2-4.7% slower sat beside a planted +10% step the kernel
# showed as +9.3-9.4% (share ~0.5): not the machine; a slowdown the machine gives both has a share near 1.
REFERENCE_SHARE = 0.6


# ---------------------------------------------------------------------------------------------
# Accuracy: the first rule that answers a gating accuracy row decides it
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AccuracyFacts:
    """One gating accuracy row: the candidate's ``row``, the baseline's error budget (``before``, None: none) and
    what disagrees with the measurement, the baseline or the spec (``named``,
    :func:`kernelwatch.gate.budget.disagreements`, and a stored ``passed`` the errors contradict)."""

    row: AccuracyResult
    before: float | None
    named: list[str]

    @property
    def over(self) -> bool:
        return self.row.error_budget is not None and self.row.error_budget > 1


def accuracy_errored(x: AccuracyFacts) -> Judged | None:
    """The case raised before anything was measured: error."""
    a = x.row
    return Judged(ERROR, a.error) if a.error and a.error_budget is None and not a.nan_mismatches else None


def accuracy_unmeasured(x: AccuracyFacts) -> Judged | None:
    """No trials, or no budget and no NaN/Inf mismatch: unmeasured."""
    a = x.row
    if a.trials == 0 or (a.error_budget is None and not a.nan_mismatches):
        return Judged(UNMEASURED, "no accuracy measurement (no trials or no error budget)")
    return None


def accuracy_failed(x: AccuracyFacts) -> Judged | None:
    """Over its tolerance, NaN/Inf where the reference has values, marked failed, or a stored field that disagrees
    with the measurement: accuracy (the stored ``passed`` can only make a case fail, never pass)."""
    a = x.row
    if not (a.nan_mismatches or x.over or not a.passed or x.named):
        return None
    why = [f"error budget {a.error_budget:.3g} > 1"] if x.over else []
    if a.nan_mismatches:
        why.append(f"{a.nan_mismatches} NaN/Inf mismatches with the reference")
    why += x.named
    return Judged(ACCURACY_FAILED, "; ".join(why) if why else (a.error or "marked failed by the collector"))


def budget_grew(x: AccuracyFacts) -> Judged | None:
    """Within tolerance, but the budget grew past BUDGET_GROWTH_WARNING x the baseline's: warning."""
    a = x.row
    if not (x.before and a.error_budget > BUDGET_GROWTH_WARNING * x.before):
        return None
    return Judged(
        ACCURACY_WARNING,
        f"error budget grew {a.error_budget / x.before:.1f}x ({x.before:.3g} -> {a.error_budget:.3g}), still within "
        "tolerance",
    )


def within_tolerance(x: AccuracyFacts) -> Judged:
    """Anything else: pass."""
    return Judged(PASS, f"error budget {x.row.error_budget:.3g}")


ACCURACY_RULES = (accuracy_errored, accuracy_unmeasured, accuracy_failed, budget_grew, within_tolerance)


# ---------------------------------------------------------------------------------------------
# Whether a kernel-timed case can be compared, then the compared case's verdict (first answer wins)
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


# ---------------------------------------------------------------------------------------------
# What the run as a whole and the store say: rules over a judged case, each in turn (any may change it)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunFacts:
    """What the rules after a case's own know of the run (the judge works them out once, before them):

    * ``metric``: the compared time (suspects and confirmations are GPU time's);
    * ``broken``: why the whole run is unmeasured (the machine ran slower than any of its model), else None;
    * ``unlike``: per compared case, how its two timings were not measured alike
      (:func:`kernelwatch.gate.suspects.unlike`);
    * ``confirmed``: per case, the stored confirmation that decides it
      (:func:`kernelwatch.gate.suspects.applicable_confirmations`);
    * ``acknowledged``: per case, the acknowledgement (``kernelwatch ack``) that covers the candidate's change;
    * ``host_timed``: compared cases whose two timings include two hosts' paths
      (:func:`kernelwatch.gate.suspects.host_timed_across_gpus`): the runs cannot judge them at any effect;
    * ``host_readings``: per host-timed case, what the two runs' host probes say of it
      (:func:`kernelwatch.gate.suspects.host_reading`): told with the suspect, deciding nothing yet.
    """

    metric: str
    broken: str | None = None
    unlike: Mapping[str, list[str]] = field(default_factory=dict)
    confirmed: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    acknowledged: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    host_timed: frozenset[str] = frozenset()
    host_readings: Mapping[str, suspects.HostReading] = field(default_factory=dict)


def broken_machine(v: CaseVerdict, run: RunFacts) -> Judged | None:
    """The run's machine is broken (``RunFacts.broken``): a compared case that passed, was noisy or the machine's
    is unmeasured; a regression stays one."""
    if run.broken is None or v.comparison is None or v.status not in (PASS, NOISY, MACHINE):
        return None
    return Judged(UNMEASURED, f"{run.broken}; this case: {v.message}")


def undecided_by_the_runs(v: CaseVerdict, run: RunFacts) -> Judged | None:
    """A perf case slower by at least its minimum effect that the two runs cannot decide is a suspect (failing):
    candidate and baseline measured on different GPUs or by different timing methods (then
    :data:`kernelwatch.gate.suspects.UNLIKE_FRACTION` of the minimum effect suffices, a passing case too: the
    candidate's machine may be faster and hide part of a change), or a slowdown the statistics called noisy or the
    machine's. A same-device regression keeps its verdict. A case timed with two hosts' paths
    (``RunFacts.host_timed``) is a suspect at any effect, faster too. GPU time only: confirm re-measures GPU
    time."""
    c = v.comparison
    if run.metric != "gpu" or v.suite != "perf" or c is None or v.status not in (PASS, REGRESSION, *UNDECIDED):
        return None
    unlike = run.unlike.get(v.case, [])
    reach = c.min_effect * (suspects.UNLIKE_FRACTION if unlike else 1.0)
    hosts = v.case in run.host_timed
    if not hosts and (c.effect < reach or (v.status == PASS and not unlike)):
        return None
    reading = run.host_readings.get(v.case) if hosts else None
    host_why = [suspects.HOST_TIMED] if hosts else []
    if reading is not None:
        host_why.append(reading.describe())
    why = suspects.suspect_reasons(v, unlike) + host_why
    if not why:
        return None
    if c.effect >= c.min_effect:
        read = f"{c.effect:+.1%} slower, at least the minimum effect {c.min_effect:.0%}"
    elif c.effect >= reach:
        read = (
            f"{c.effect:+.1%} slower, under the minimum effect {c.min_effect:.0%} but past {reach:.1%}, where a "
            "machine's own difference may hide part of a change"
        )
    else:
        read = f"{c.effect:+.1%} in time as the runs read it"
    return Judged(
        SUSPECT,
        f"{read}, and the runs alone cannot decide: {'; '.join(why)}. Re-measure both commits on one device "
        f"(kernelwatch confirm) [the statistics: {v.status}: {v.message}]",
    )


def confirmed(v: CaseVerdict, run: RunFacts) -> Judged | None:
    """A stored confirmation decides a confirmable perf case: SAME, NOT_SLOWER or FASTER clears it, SLOWER is a
    regression, UNKNOWN keeps it a suspect (:data:`kernelwatch.gate.suspects.CONFIRMED`)."""
    row = run.confirmed.get(v.case)
    if v.suite != "perf" or row is None or v.status not in CONFIRMABLE:
        return None
    status = suspects.CONFIRMED[row["verdict"]][1]
    said = {PASS: ": cleared", SUSPECT: ": still undecided"}.get(status, "")
    return Judged(status, f"{Confirmation.model_validate(row).describe()}{said} [the runs: {v.status}: {v.message}]")


def acknowledged(v: CaseVerdict, run: RunFacts) -> Judged | None:
    """A regression, suspect or retired case whose change ``kernelwatch ack`` recorded on this hardware at a commit
    after the baseline's and up to the candidate's: acknowledged (reported, not failing)."""
    a = run.acknowledged.get(v.case)
    if a is None or v.status not in (REGRESSION, SUSPECT, RETIRED):
        return None
    who = f" by {a['author']}" if a["author"] else ""
    return Judged(ACKNOWLEDGED, f"{v.message}; acknowledged at {a['commit'][:12]}{who}: {a['reason']}")


RUN_RULES = (broken_machine, undecided_by_the_runs, confirmed, acknowledged)

# Every rule that can change a case's status, in the order the judge applies them (kernelwatch.gate.judge.judge):
# a gating accuracy row takes the first answer of ACCURACY_RULES; a kernel timing the first of INPUT_RULES, else,
# compared, the first of PERF_RULES; then every case (retired and missing ones too) passes through RUN_RULES in
# turn, each seeing the status the ones before left.
RULES = (*ACCURACY_RULES, *INPUT_RULES, *PERF_RULES, *RUN_RULES)
