"""The perf half of the judge: each kernel timing compared with its baseline and judged by the rules, the machine
bounds of the run, and the improvements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from kernelwatch.gate.detect import (
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
from kernelwatch.gate.gather import METRICS, Gathered
from kernelwatch.gate.machines import Machine, machine_of
from kernelwatch.gate.result import CaseVerdict, GateResult
from kernelwatch.gate.rules import INPUT_RULES, PERF_RULES, PerfFacts, PerfInput, first_answer
from kernelwatch.gate.statuses import (
    NEW,
    p_text,
)
from kernelwatch.gate.suspects import short_uuid
from kernelwatch.kernels.names import (
    GRAPH_TIMINGS,
    KERNEL_IMPL,
    NOISE_GEMM,
    CaseFacts,
)
from kernelwatch.store.schema import (
    RunDocument,
)


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


def judge_perf(
    result: GateResult,
    g: Gathered,
    base: RunDocument,
    kernel_of: dict[str, str],
    facts: Mapping[str, CaseFacts],
    min_effects: dict[str, float],
) -> tuple[int, str | None]:
    """Perf verdicts (FDR-controlled across the compared cases) by INPUT_RULES, then PERF_RULES, each case judged
    by its ``facts`` (noise class, launch-bound, same-run references), its history (``g.histories``) and the
    model's figures (:mod:`kernelwatch.gate.machines`); returns how many cases were compared and why the whole run
    is unmeasured (None: it is not), which RUN_RULES apply."""
    candidate = g.candidate
    median, samples = METRICS[result.metric]
    base_perf = {p.case: p for p in base.perf if p.implementation == KERNEL_IMPL}
    model = machine_of(candidate.hardware.device_name)
    if not model.measured:
        result.notes.append(f"machine bounds and noise: {model.describe(candidate.hardware.device_name)}")
    branch = result.baseline["branch"]
    histories, judges = g.histories, g.judges
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
                f"baseline from another GPU ({short_uuid(b.device_uuid)}, candidate on {short_uuid(p.device_uuid)})"
                if b.device_uuid and p.device_uuid
                else f"{'baseline' if not b.device_uuid else 'candidate'} GPU not recorded, counted as another "
                f"GPU ({short_uuid(b.device_uuid or p.device_uuid)})"
            )
            note = f"{where}: between-GPU noise {sigma_m:.1%}, {source}"
            other_gpu.add(short_uuid(b.device_uuid))
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
    return len(compared), broken


# ---------------------------------------------------------------------------------------------
# Improvements (read by the reports and the dashboard's triage page): informational, never a verdict
# ---------------------------------------------------------------------------------------------
def speedup_tests(g: Gathered, result: GateResult) -> dict[str, Comparison]:
    """The gate's test with the two runs' roles swapped (the baseline's samples judged against the candidate's,
    the same history and minimum effect) for every case at least its minimum effect faster; ``ratio`` is
    baseline / candidate time. Before FDR control: :func:`speedups` applies it."""
    compared = {v.case: v.comparison for v in result.verdicts if v.comparison is not None}
    quick = {case: c for case, c in compared.items() if 1 / c.ratio - 1 > c.min_effect}
    if not quick:
        return {}
    candidate, histories = g.candidate, g.histories
    base_perf = {p.case: p for p in g.base.perf if p.implementation == KERNEL_IMPL}
    _, samples = METRICS[result.metric]
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


def speedups(result: GateResult, tests: dict[str, Comparison]) -> dict[str, Comparison]:
    """Cases significantly faster than the baseline: ``tests`` (:func:`speedup_tests`),
    Benjamini-Hochberg at the gate's FDR over every compared case. Informational: it never changes a verdict.

    Only cases at least the minimum effect faster are tested; the others enter the FDR control with p = 1,
    which can only make it stricter.
    """
    pairs = list(tests.values())
    if not pairs:
        return {}
    compared = sum(v.comparison is not None for v in result.verdicts)
    return {c.case: c for c in regressions(pairs, result.fdr, tested=compared)}
