"""What the candidate owes: the baseline's cases it did not measure (missing), those it carries over unchanged
(``collect --changed-since``), and those the specs no longer define (retired)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from kernelwatch.gate.baseline import Baseline
from kernelwatch.gate.result import CaseVerdict, Expected, GateResult, SpecCases
from kernelwatch.gate.statuses import (
    RETIRED,
)
from kernelwatch.kernels.names import (
    KERNEL_IMPL,
)
from kernelwatch.store.schema import (
    RunDocument,
    is_commit_sha,
)


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
