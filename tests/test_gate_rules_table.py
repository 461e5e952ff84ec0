"""The gate's perf rules one at a time (``kernelwatch.gate.judge.INPUT_RULES``, ``kernelwatch.gate.judge.PERF_RULES``):
each answers its own case and stays silent on the others; the lists' order decides which answers first. End-to-end
behaviour is tests/test_gate.py's and tests/test_gate_rules.py's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kernelwatch.gate import judge as gate
from kernelwatch.gate.detect import Comparison, Contamination, Shift
from kernelwatch.gate.judge import INPUT_RULES, PERF_RULES, Judged, PerfFacts, PerfInput, first_answer
from kernelwatch.gate.statuses import ERROR, MACHINE, NEW, NOISY, PASS, REGRESSION, UNMEASURED, UNRELIABLE
from kernelwatch.store.schema import PerfResult

BASE_MS = 0.1


def _row(error: str | None = None) -> PerfResult:
    unset = ("min_ms", "bytes", "flops", "gbps", "tflops", "pct_peak", "speedup_vs_eager", "target", "target_met")
    return PerfResult.model_validate(
        {
            **dict.fromkeys(unset),
            "case": "k/case",
            "implementation": "triton",
            "median_ms": BASE_MS,
            "p20_ms": BASE_MS,
            "p80_ms": BASE_MS,
            "samples_ms": [BASE_MS] * 5,
            "error": error,
        }
    )


def _input(**kw) -> PerfInput:
    return PerfInput(**{"error": None, "samples": [0.1] * 5, "baseline": _row(), "baseline_samples": [0.1] * 5, **kw})


def _comparison(ratio: float = 1.10, p: float = 1e-4, **kw) -> Comparison:
    fields = {
        "case": "k/case",
        "ratio": ratio,
        "p_within": p,
        "p_between": p,
        "p": p,
        "min_effect": 0.05,
        "history": 12,
        "sigma": 0.01,
        "basis": "history",
        "baseline_ms": BASE_MS,
        "candidate_ms": BASE_MS * ratio,
    }
    return Comparison(**{**fields, **kw})


def _facts(comparison: Comparison | None = None, **kw) -> PerfFacts:
    fields = {
        "comparison": comparison or _comparison(),
        "significant": False,
        "shift": None,
        "reference": None,
        "reference_ratio": None,
        "bound_class": "memory",
        "machine_limit": (1.31, "the largest measured between H200s for memory-bound cases"),
        "model": "NVIDIA H200",
        "branch": "main",
    }
    return PerfFacts(**{**fields, **kw})


def test_the_rules_in_order():
    assert [r.__name__ for r in INPUT_RULES] == [
        "errored",
        "no_samples",
        "no_baseline",
        "baseline_unsampled",
        "timing_changed",
    ]
    assert [r.__name__ for r in PERF_RULES] == [
        "contaminated",
        "past_machine_bound",
        "shared_with_reference",
        "slower_beyond_chance",
        "within_noise",
        "unchanged",
    ]


def test_a_rule_answers_only_with_a_status_of_the_table():
    with pytest.raises(ValueError, match="no status"):
        Judged("slower", "a label is not a status")


# ---------------------------------------------------------------------------------------------
# Before a comparison
# ---------------------------------------------------------------------------------------------
def test_errored():
    assert gate.errored(_input(error="CUDA error: illegal address")) == Judged(ERROR, "CUDA error: illegal address")
    assert gate.errored(_input()) is None


def test_no_samples():
    assert gate.no_samples(_input(samples=[])) == Judged(UNMEASURED, "no timing samples")
    assert gate.no_samples(_input()) is None


def test_no_baseline():
    assert gate.no_baseline(_input(baseline=None, baseline_samples=[])) == Judged(
        NEW, "no baseline measurement of this case"
    )
    assert gate.no_baseline(_input()) is None


def test_baseline_unsampled():
    judged = gate.baseline_unsampled(_input(baseline=_row("timed out"), baseline_samples=[]))
    assert judged == Judged(NEW, "the baseline has no timing samples of this case (timed out)")
    assert gate.baseline_unsampled(_input(baseline_samples=[])).message.endswith("of this case")
    assert gate.baseline_unsampled(_input()) is None
    assert gate.baseline_unsampled(_input(baseline=None, baseline_samples=[])) is None  # no_baseline's


def test_an_errored_case_without_samples_is_an_error():
    assert first_answer(INPUT_RULES, _input(error="boom", samples=[], baseline=None)).status == ERROR
    assert first_answer(INPUT_RULES, _input()) is None  # compared


# ---------------------------------------------------------------------------------------------
# A compared case
# ---------------------------------------------------------------------------------------------
def test_contaminated():
    dirty = Contamination(1.2, BASE_MS, BASE_MS, BASE_MS, BASE_MS)
    judged = gate.contaminated(_facts(_comparison(contaminated=dirty), significant=True))
    assert judged.status == UNRELIABLE and "absorbed host delay" in judged.message and "100 -> 110 us" in judged.message
    assert gate.contaminated(_facts(significant=True)) is None


def test_slower_beyond_chance():
    judged = gate.slower_beyond_chance(_facts(significant=True))
    assert judged.status == REGRESSION
    assert judged.message.startswith("+10.0% slower (100 -> 110 us; p=0.0001") and "minimum effect 5%" in judged.message
    assert gate.slower_beyond_chance(_facts()) is None


def test_slower_as_part_of_a_run_wide_shift():
    shift = Shift(n=20, slower=18, ratio=1.09, p=2e-4)
    judged = gate.slower_beyond_chance(_facts(_comparison(p=0.3), shift=shift))
    assert judged.status == REGRESSION and "part of the run-wide shift (18 of 20 cases slower" in judged.message
    far = _comparison(ratio=1.5, p=0.3)  # far past the shift: judged on its own (insignificant) evidence
    assert gate.slower_beyond_chance(_facts(far, shift=shift)) is None


def test_shared_with_reference():
    shared = {"significant": True, "reference": "eager", "reference_ratio": 1.09}
    judged = gate.shared_with_reference(_facts(**shared))
    assert judged.status == MACHINE and "shared by eager: the machine, not the kernel" in judged.message
    assert "relative to eager in the same runs +0.9%" in judged.message
    assert gate.shared_with_reference(_facts(**{**shared, "reference_ratio": 1.02})) is None  # the kernel's own
    assert gate.shared_with_reference(_facts(**{**shared, "significant": False})) is None  # within chance
    assert gate.shared_with_reference(_facts(significant=True)) is None  # no reference


def test_past_machine_bound():
    broken = {"significant": True, "reference": "eager", "reference_ratio": 1.5, "bound_class": "memory"}
    judged = gate.past_machine_bound(_facts(_comparison(ratio=1.52), **broken))
    assert judged.status == UNMEASURED
    assert "this machine ran 1.5x slower than the baseline's (eager), past the 1.31x any NVIDIA H200" in judged.message
    assert "for memory-bound cases" in judged.message and "re-run on a healthy runner" in judged.message
    assert gate.past_machine_bound(_facts(**{**broken, "reference_ratio": 1.09})) is None  # within the bound
    assert gate.past_machine_bound(_facts(_comparison(ratio=1.52), **{**broken, "significant": False})) is None


def test_within_noise():
    noisy = _comparison(p_within=0.2, p_between=0.01, p=0.2)
    judged = gate.within_noise(_facts(noisy))
    assert judged.status == NOISY and "not significant within the runs" in judged.message
    assert judged.message.endswith("; watch its history")
    history = _comparison(p_within=1e-4, p_between=0.2, p=0.2, exceeded=3)
    assert "runs of its history deviated this much 3 times in 12" in gate.within_noise(_facts(history)).message
    gpus = _comparison(p_within=1e-4, p_between=0.2, p=0.2, basis="floor", machine_sigma=0.03)
    assert "between-run and between-GPU noise (sd 3.2%)" in gate.within_noise(_facts(gpus)).message
    assert gate.within_noise(_facts(_comparison(ratio=1.03, p=0.2))) is None  # within the minimum effect


def test_unchanged():
    judged = gate.unchanged(_facts(_comparison(ratio=0.99, p=0.9), note="baseline from another GPU"))
    assert judged == Judged(PASS, "-1.0% (100 -> 99 us; p=0.9, 12 runs of main); baseline from another GPU")


@pytest.mark.parametrize(
    ("facts", "status"),
    [
        (_facts(_comparison(contaminated=Contamination(1.2, 0.1, 0.1, 0.1, 0.1)), significant=True), UNRELIABLE),
        (_facts(_comparison(ratio=1.52), significant=True, reference="eager", reference_ratio=1.5), UNMEASURED),
        (_facts(significant=True, reference="eager", reference_ratio=1.09), MACHINE),
        (_facts(significant=True, reference="eager", reference_ratio=1.0), REGRESSION),
        (_facts(_comparison(p=0.3)), NOISY),
        (_facts(_comparison(ratio=1.02, p=0.3)), PASS),
    ],
)
def test_the_first_rule_that_answers_wins(facts: PerfFacts, status: str):
    assert first_answer(PERF_RULES, facts).status == status
    later = PERF_RULES[[r(facts) is not None for r in PERF_RULES].index(True) + 1 :]
    assert any(r(facts) is not None for r in later) or status == PASS  # a later rule would have answered too


def test_significance_outranks_the_noise():
    facts = _facts(significant=True)
    assert gate.within_noise(facts) is not None and first_answer(PERF_RULES, facts).status == REGRESSION
    assert first_answer(PERF_RULES, replace(facts, significant=False)).status == NOISY
