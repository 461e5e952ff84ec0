"""The merge gate: does a candidate run break accuracy or regress performance against its baseline?

Exit status (``GateResult.exit_code``):

* 0: every gating case was measured and is well;
* 1: a case fails: an accuracy case over its tolerance or whose stored budget, ``passed`` or tolerance disagrees
  with its errors, its baseline or its spec (:mod:`kernelwatch.gate.budget`), a significant slowdown (unless
  ``kernelwatch ack`` acknowledged it, see :func:`kernelwatch.gate.rules.acknowledged`), a case that errored, a
  case the baseline measured and the candidate did not (missing; a kernel timing is missing whatever reference rows
  remain), or a result without a measurement (a perf row with no samples, an accuracy row with no trials), a
  slowdown the same-run
  references share past what machines of the model differ by (unmeasured: the machine, not the kernel, is
  broken; the model's machine bounds, :mod:`kernelwatch.gate.machines`), a case whose samples absorbed host delay
  (unreliable: re-measure), or a suspect not yet cleared by a stored confirmation;
* 2: cannot decide: bad options, no baseline, or nothing comparable measured at all.

The baseline of ``--baseline BRANCH`` is assembled per case (:func:`assemble_baseline`: each case's newest
earlier result on the branch and hardware), the rule Triage and Compare use too. The history that judges a
case's noise is the baseline branch's alone (:func:`kernelwatch.store.queries.judging_runs`). A slowdown the runs
alone cannot decide is a *suspect* (:func:`kernelwatch.gate.rules.undecided_by_the_runs`): it fails until
``kernelwatch confirm`` re-measures both commits on one device and stores its verdict, which the next gate run applies.

Only gating results decide. Exploration results (accuracy rows of kind "explore": fresh seeds, see
``kernelwatch.collect.accuracy``) are reported beside the verdict and never change it.

The gate is two parts: :func:`kernelwatch.gate.gather.gather` reads everything from the store once into plain data,
and :func:`judge`, a pure function of it, applies the rules of :mod:`kernelwatch.gate.rules` (:data:`RULES`: every
rule that can change a case's status, in order). :func:`decide` is the two. The modules: ``result`` (the verdicts
and options), ``baseline`` (the baseline rule), ``gather``, ``scope`` (missing, carried over, retired), ``rules``,
``perf`` (the perf comparisons), ``suspects`` (confirmations, acknowledgements); their public names are here too.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Engine

from kernelwatch.gate.baseline import (  # noqa: F401 - the gate's public names
    BASE_BRANCH,
    Baseline,
    assemble_baseline,
    baseline_branch,
    baseline_document,
    baseline_run,
    choose_baseline,
    default_baseline,
    eligible_baselines,
)
from kernelwatch.gate.budget import disagreements
from kernelwatch.gate.detect import DEFAULT_FDR, DEFAULT_MIN_EFFECT
from kernelwatch.gate.gather import HISTORY_RUNS, METRICS, Gathered, case_facts_of, gather  # noqa: F401
from kernelwatch.gate.perf import judge_perf, speedup_tests, speedups
from kernelwatch.gate.result import (  # noqa: F401
    BUDGET_GROWTH_WARNING,
    FDR_RANGE,
    MIN_EFFECT_RANGE,
    CaseVerdict,
    Expected,
    GateResult,
    GateUndecided,
    SpecCases,
    check_options,
    check_values,
    expected_cases,
)
from kernelwatch.gate.rules import (  # noqa: F401
    ACCURACY_RULES,
    INPUT_RULES,
    PERF_RULES,
    REFERENCE_SHARE,
    RULES,
    RUN_RULES,
    AccuracyFacts,
    Judged,
    PerfFacts,
    PerfInput,
    RunFacts,
    baseline_unsampled,
    contaminated,
    errored,
    first_answer,
    no_baseline,
    no_samples,
    past_machine_bound,
    shared_with_reference,
    slower_beyond_chance,
    timing_changed,
    unchanged,
    within_noise,
)
from kernelwatch.gate.scope import _missing, _reference_rows, carry_over, retire
from kernelwatch.gate.statuses import (  # noqa: F401 - as the gate's callers have read them
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
from kernelwatch.gate.suspects import (  # noqa: F401
    CONFIRMED,
    UNDECIDED,
    UNLIKE_FRACTION,
    applicable_confirmations,
    covering_acks,
    host_readings,
    host_timed_cases,
    unlike,
)
from kernelwatch.kernels.names import KERNEL_IMPL, CaseFacts
from kernelwatch.store.schema import RunDocument, hardware_fingerprint, to_data


def judge(
    g: Gathered,
    min_effect: float = DEFAULT_MIN_EFFECT,
    fdr: float = DEFAULT_FDR,
    min_effects: dict[str, float] | None = None,
    tolerances: Mapping[str, tuple[float, float]] | None = None,
    specs: SpecCases | None = None,
    expected: Expected | None = None,
) -> GateResult:
    """The verdict on ``g.candidate`` from what :func:`gather` read, touching no database: every case through
    :data:`RULES` in order (see :func:`decide` for the arguments; ``min_effects`` already checked)."""
    candidate, assembled = g.candidate, g.assembled
    data = to_data(candidate)
    cand_run = data["run"]
    result = GateResult(
        candidate=cand_run,
        baseline=assembled.ref,
        min_effect=float(min_effect),
        fdr=float(fdr),
        metric=g.metric,
        assembled=assembled,
    )
    result.hardware = {
        "device_name": candidate.hardware.device_name,
        "fingerprint": hardware_fingerprint(data["hardware"]),
        "device_count": candidate.hardware.device_count,
    }
    result.explored = [data["accuracy"][i] for i, a in enumerate(candidate.accuracy) if a.kind != "gate"]
    kernel_of = {c.key: c.kernel for c in candidate.cases}
    if assembled.rule:
        result.notes.append(assembled.rule)
    if assembled.run_of:
        result.notes.append(assembled.describe())
    base, expected = carry_over(result, candidate, g.base, expected, specs, assembled)
    retired = retire(result, candidate, base, expected, specs)

    measured = _judge_accuracy(result, candidate, base, kernel_of, tolerances)
    facts = case_facts_of(candidate, specs)
    compared, broken = judge_perf(result, g, base, kernel_of, facts, min_effects or {})
    measured += compared
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
        errored_n = sum(v.status == ERROR for v in result.verdicts)
        result.undecided = (
            f"nothing comparable was measured: the candidate ({cand_run['status']} run) has "
            f"{errored_n} errored and {len(missing)} missing cases and no result to compare with "
            f"baseline run {assembled.ref['id']}"
        )
    _run_rules(result, g, base, broken, facts)
    result.faster_tests = speedup_tests(g, result)
    result.faster = set(speedups(result, result.faster_tests))
    return result


def _judge_accuracy(
    result: GateResult,
    candidate: RunDocument,
    base: RunDocument,
    kernel_of: dict[str, str],
    tolerances: Mapping[str, tuple[float, float]] | None = None,
) -> int:
    """Every gating accuracy row by ACCURACY_RULES, from what was measured (the error budget, the errors it comes
    from, checked against the baseline's and the spec's tolerance by :func:`kernelwatch.gate.budget.disagreements`,
    and the NaN/Inf mismatches); returns how many rows were measured."""
    base_acc = {a.case: a for a in base.accuracy if a.kind == "gate"}
    measured = 0
    for a in candidate.accuracy:
        if a.kind != "gate":
            continue
        before = base_acc[a.case].error_budget if a.case in base_acc else None
        named = disagreements(a, base_acc.get(a.case), (tolerances or {}).get(a.case))
        over = a.error_budget is not None and a.error_budget > 1
        if a.passed and (over or a.nan_mismatches) and not any("passed" in n for n in named):
            named.append("the stored 'passed: true' disagrees with the measurement")
        judged = first_answer(ACCURACY_RULES, AccuracyFacts(a, before, named))
        v = CaseVerdict(
            a.case,
            kernel_of[a.case],
            judged.status,
            judged.message,
            suite="accuracy",
            budget=a.error_budget,
            baseline_budget=before,
        )
        measured += v.status not in (ERROR, UNMEASURED)
        result.verdicts.append(v)
    return measured


def _run_rules(
    result: GateResult, g: Gathered, base: RunDocument, broken: str | None, facts: Mapping[str, CaseFacts]
) -> None:
    """RUN_RULES over every case in turn, with what they know of the run (:class:`~kernelwatch.gate.rules.RunFacts`)
    and of its cases (``facts``: :func:`case_facts_of`), and the notes that count what they did."""
    candidate, assembled = g.candidate, g.assembled
    mine = {p.case: p for p in candidate.perf if p.implementation == KERNEL_IMPL}
    theirs = {p.case: p for p in base.perf if p.implementation == KERNEL_IMPL}
    compared = [v for v in result.verdicts if v.suite == "perf" and v.comparison is not None]
    times = {}
    for source in assembled.sources:
        info = g.infos[source["id"]]
        times[source["commit"]] = info.get("commit_time") or info.get("started")
    gpu = result.metric == "gpu"
    cases = {v.case for v in compared}
    chosen = (
        applicable_confirmations(
            result, candidate, assembled, [c for c in g.confirmations if c["case"] in cases], times
        )
        if gpu
        else {}
    )
    since = g.infos.get(assembled.run["id"], {})
    hosts = frozenset(host_timed_cases([v.case for v in compared], mine, theirs, facts))
    run = RunFacts(
        result.metric,
        broken,
        {v.case: unlike(mine[v.case], theirs[v.case]) for v in compared},
        chosen,
        covering_acks(g.acks, candidate, since.get("commit_time") or since.get("started") or ""),
        hosts,
        host_readings(hosts, mine, theirs, facts),
    )
    suspects = applied = 0
    for v in result.verdicts:
        for rule in RUN_RULES:
            judged = rule(v, run)
            if judged is None:
                continue
            suspects += rule.__name__ == "undecided_by_the_runs"
            applied += rule.__name__ == "confirmed"
            v.status, v.message = judged.status, judged.message
    if suspects:
        result.notes.append(
            f"{suspects} suspect{'s' if suspects != 1 else ''}: slower past the minimum effect, or timed with "
            "two hosts' paths, where the runs alone cannot decide; `kernelwatch confirm` re-measures them on "
            "one device and stores its verdict, which the next gate run uses"
        )
    if applied:
        result.notes.append(
            f"{applied} case{'s' if applied != 1 else ''} decided by a stored confirmation "
            f"(paired re-measurement of {candidate.run.commit.sha[:12]} against its baseline on one device)"
        )


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
    """Judge a candidate run document (``kernelwatch.run/1``) against its baseline: :func:`gather`, then
    :func:`judge`.

    ``tolerances``: the kernels' specs' (rtol, atol) per accuracy case key (the command line passes them; ``ci``
    imports no kernel): a row stored with a looser one fails.
    ``specs``: the cases the checked-out specs define and their facts (the command line passes them): every one of
    them within the candidate's scope that the baseline measured is expected of it (:func:`expected_cases`), and a
    baseline case they no longer define is retired (:func:`retire`). Without them, what the candidate has rows of
    is its scope, and what it recorded of its cases their facts.

    Raises GateUndecided for bad options and an unresolvable baseline. A result whose ``undecided`` is
    set (exit 2) still lists what errored or is missing.
    """
    if not isinstance(candidate, RunDocument):
        raise TypeError(f"decide takes a RunDocument, got {type(candidate).__name__}")
    min_effects = check_options(candidate, min_effect, fdr, min_effects)
    expected = expected_cases(candidate, specs) if specs is not None else None
    g = gather(engine, candidate, baseline_spec, metric, expected)
    return judge(g, min_effect, fdr, min_effects, tolerances, specs, expected)
