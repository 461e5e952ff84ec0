"""The statistics of kernelwatch/gate/detect.py, each test naming the defect it catches.

benchmarks/mutation_table.py breaks the code on purpose (dropping FDR control, ignoring the history,
min instead of max p, no outlier clipping, p_within forced to 0, the ratio inverted) and checks that
some test here fails for each.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelwatch.gate.detect import (
    MIN_HISTORY,
    OUTLIER_RATE,
    PRIOR_FACTOR,
    Comparison,
    benjamini_hochberg,
    between_machine_sigma,
    change_points,
    compare_case,
    contamination,
    machine_bound,
    machine_sigma,
    noise_floor,
    outlier_p,
    regressions,
    run_shift,
    segment_start,
)
from kernelwatch.gate.machines import DEFAULT, H200, machine_of
from kernelwatch.kernels.names import NOISE_GEMM, NOISE_LAUNCH, NOISE_MEMORY


def _samples(center_ms: float, cv: float, n: int = 50, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(center_ms * (1 + cv * rng.standard_normal(n)))


# ---------------------------------------------------------------------------------------------
# compare_case
# ---------------------------------------------------------------------------------------------
def test_ratio_is_candidate_over_baseline() -> None:
    """Defect: the ratio inverted (a slowdown read as a speed-up)."""
    c = compare_case("k", _samples(0.2, 0.01), _samples(0.3, 0.01, seed=1))
    assert c.ratio == pytest.approx(1.5, rel=0.01) and c.effect == pytest.approx(0.5, rel=0.03)
    assert c.baseline_ms == pytest.approx(0.2, rel=0.01) and c.candidate_ms == pytest.approx(0.3, rel=0.01)
    assert c.p < 1e-9


def test_a_speed_up_is_never_evidence_of_a_slowdown() -> None:
    c = compare_case("k", _samples(0.3, 0.01), _samples(0.2, 0.01, seed=1))
    assert c.ratio < 1 and c.p > 0.5 and not regressions([c])


def test_the_between_run_noise_vetoes_tight_samples() -> None:
    """Defect: the smaller p-value taken instead of the larger. Two runs of a 25 us case 6% apart with
    tight samples (p_within ~ 1e-17) and no history: the doubled noise floor (4.1%) says p ~ 0.07."""
    c = compare_case("k", _samples(0.025, 0.002), _samples(0.0265, 0.002, seed=1))
    assert c.p_within < 1e-10 and c.basis == "floor"
    assert c.sigma == pytest.approx(noise_floor(0.025, PRIOR_FACTOR), rel=1e-3)
    assert c.p == max(c.p_within, c.p_between) and 0.03 < c.p < 0.2
    assert not regressions([c])


def test_overlapping_samples_veto_a_tight_history() -> None:
    """Defect: p_within forced to 0 (the samples' own evidence ignored). A 0.5 ms case with a tight history
    (between-run sd 0.3%) and two runs whose very noisy samples (CV 40%) differ by 8% in their medians:
    the history alone would call it a regression, the samples do not support it."""
    base = _samples(0.5, 0.4, n=20, seed=3)
    cand = [v * 1.08 for v in _samples(0.5, 0.4, n=20, seed=3)][::-1]
    history = list(0.5 * (1 + 0.003 * np.random.default_rng(4).standard_normal(20)))
    c = compare_case("k", base, cand, history)
    assert c.basis == "history" and c.p_between < 1e-6
    assert c.p_within > 0.1 and c.p == c.p_within
    assert not regressions([c])


def test_history_with_excursions_this_large_explains_a_slowdown() -> None:
    """Defect: the history ignored. A 0.2 ms case whose history has 4 runs in 24 that were 12-20% off;
    a +12% candidate is one more of those, not a regression (with the floor alone it would be z ~ 10)."""
    rng = np.random.default_rng(5)
    history = list(0.2 * (1 + 0.003 * rng.standard_normal(24)))
    for i, f in zip((3, 9, 15, 20), (1.12, 1.2, 1.15, 1.18)):
        history[i] *= f
    c = compare_case("k", _samples(0.2, 0.002), _samples(0.224, 0.002, seed=1), history)
    assert c.history == 24 and c.basis == "history"
    assert c.p_between == pytest.approx((1 + 3) / (24 + 1), abs=0.05)  # 3-4 excursions at least as large
    assert not regressions([c])


def test_a_clean_history_supports_a_real_slowdown() -> None:
    rng = np.random.default_rng(6)
    history = list(0.2 * (1 + 0.003 * rng.standard_normal(24)))
    c = compare_case("k", _samples(0.2, 0.002), _samples(0.22, 0.002, seed=1), history)
    assert c.p < 1e-6 and regressions([c]) == [c]


def test_short_history_falls_back_to_the_floor() -> None:
    c = compare_case("k", _samples(0.2, 0.002), _samples(0.2, 0.002, seed=1), [0.2] * (MIN_HISTORY - 1))
    assert c.basis == "floor" and c.history == MIN_HISTORY - 1


def test_noise_floor_and_outlier_model() -> None:
    assert noise_floor(0.005, model=H200) == pytest.approx(math.hypot(H200.jitter_ms / 0.005, H200.rel_noise))
    assert noise_floor(100.0, model=H200) == pytest.approx(H200.rel_noise, rel=1e-3)
    assert outlier_p(1.5) == outlier_p(2.0) == pytest.approx(OUTLIER_RATE)
    assert outlier_p(6.0) == 0.0 and 0 < outlier_p(3.0) < OUTLIER_RATE
    # a 2.5x outlier run of a case its facts call launch-bound; the same samples of one that is not
    launch = compare_case("k", _samples(0.005, 0.01), _samples(0.0125, 0.01, seed=1), launch_bound=True)
    assert launch.launch_bound and launch.p >= outlier_p(2.5) > 0.05
    other = compare_case("k", _samples(0.005, 0.01), _samples(0.0125, 0.01, seed=1))
    assert not other.launch_bound and other.p < 1e-4  # the floor alone (no history): 2.3e-6
    big = compare_case("k", _samples(0.5, 0.01), _samples(1.25, 0.01, seed=1))
    assert not big.launch_bound and big.p < 1e-9


def test_no_samples_is_an_error() -> None:
    with pytest.raises(ValueError, match="no timing samples"):
        compare_case("k", [], [1.0])


# ---------------------------------------------------------------------------------------------
# False discovery control
# ---------------------------------------------------------------------------------------------
def test_benjamini_hochberg_matches_the_step_up_rule() -> None:
    p = [0.01, 0.04, 0.03, 0.5, 0.002]
    # sorted: 0.002 (<= .01), 0.01 (<= .02), 0.03 (<= .03), 0.04 (> .04? no: 0.04 <= 0.04), 0.5
    assert benjamini_hochberg(p, 0.05) == [True, True, True, False, True]
    assert benjamini_hochberg([], 0.05) == []


def test_many_marginal_p_values_are_not_all_discoveries() -> None:
    """Defect: FDR control dropped (each p compared with q alone). Of 100 cases, 10 have p in 0.01-0.04,
    as many as chance gives under the null; BH rejects none (p_(i) > 0.05 i / 100), a bare p < 0.05 all 10."""
    ps = [0.01 + 0.003 * i for i in range(10)] + [0.5 + 0.005 * i for i in range(90)]
    comps = [Comparison(f"c{i}", 1.2, p, p, p, 0.05, 0) for i, p in enumerate(ps)]
    assert regressions(comps, 0.05) == []
    strong = Comparison("strong", 1.2, 1e-6, 1e-6, 1e-6, 0.05, 0)
    assert regressions([*comps, strong], 0.05) == [strong]


def test_the_minimum_effect_applies_after_fdr() -> None:
    small = Comparison("small", 1.03, 1e-9, 1e-9, 1e-9, 0.05, 0)
    assert regressions([small]) == []


# ---------------------------------------------------------------------------------------------
# change_points
# ---------------------------------------------------------------------------------------------
def _series(n: int, step_at: int | None, step: float, noise: float, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    x = 0.1 * (1 + noise * rng.standard_normal(n))
    if step_at is not None:
        x[step_at:] *= 1 + step
    return list(x)


def test_a_clear_step_is_found_where_it_is() -> None:
    found = change_points(_series(40, 22, 0.10, 0.005, 1))
    assert [c.index for c in found] == [22] and found[0].change == pytest.approx(0.10, abs=0.01)


def test_flat_noise_has_no_change_point() -> None:
    for seed in range(20):
        assert change_points(_series(60, None, 0.0, 0.01, seed)) == []


def test_outlier_runs_neither_hide_nor_fake_a_step() -> None:
    """Defect: no outlier clipping. One 6x run (launch-bound cases have them) must not pull the split away
    from a real 15% step, nor become a step of its own."""
    series = _series(40, 25, 0.15, 0.005, 2)
    series[8] *= 6.0
    found = change_points(series)
    assert [c.index for c in found] == [25], found
    flat = _series(40, None, 0.0, 0.005, 3)
    for i in (5, 17, 30):
        flat[i] *= 4.0
    assert change_points(flat) == []


def test_outliers_next_to_a_step_do_not_hide_it() -> None:
    """A series from benchmarks/detector_eval.py (real H200 noise of a 5 us case, 20% step at 28, four 2-6x
    outlier runs): clipped against the global median and MAD the outliers stayed large enough to pull
    the split away and nothing was found; clipped against their neighbours the step is found."""
    series = [
        5.15,
        5.5,
        5.18,
        5.18,
        5.15,
        5.15,
        5.78,
        5.76,
        5.12,
        5.12,
        5.15,
        5.12,
        5.15,
        5.1,
        5.15,
        16.21,
        5.12,
        5.12,
        11.67,
        5.22,
        5.6,
        5.54,
        5.79,
        5.12,
        5.12,
        5.15,
        5.18,
        5.12,
        6.18,
        6.95,
        6.2,
        6.16,
        6.91,
        6.93,
        6.14,
        6.68,
        6.22,
        6.22,
        6.91,
        6.18,
        6.68,
        6.14,
        6.11,
        6.22,
        6.12,
        6.22,
        29.64,
        6.68,
        6.14,
        6.14,
        6.14,
        6.18,
        22.65,
        6.57,
        6.14,
        6.18,
        6.18,
        6.18,
        6.14,
        21.0,
    ]
    found = change_points(series, min_effect=0.03)
    assert [c.index for c in found] == [28] and found[0].change == pytest.approx(0.2, abs=0.03)


# ---------------------------------------------------------------------------------------------
# Machines, contamination, run-wide shifts (docs/design.md)
# ---------------------------------------------------------------------------------------------
def test_between_machine_sigma_is_a_variance_component() -> None:
    rng = np.random.default_rng(4)
    groups = {
        f"GPU-{i}": list(np.exp(np.log(0.1) + 0.03 * rng.standard_normal() + 0.002 * rng.standard_normal(6)))
        for i in range(12)
    }
    assert 0.015 < between_machine_sigma(groups) < 0.05
    same = {f"GPU-{i}": list(0.1 * np.exp(0.002 * rng.standard_normal(6))) for i in range(12)}
    assert between_machine_sigma(same) < 0.002
    assert between_machine_sigma({"GPU-0": [0.1, 0.1]}) is None
    assert machine_sigma({}, NOISE_GEMM, H200) == (H200.sigma[NOISE_GEMM], "default for GEMM cases")


def test_a_between_gpu_term_widens_the_noise() -> None:
    """Candidate and baseline on different GPUs: a 6% step one machine's tight history calls significant is
    within a 5% between-GPU spread."""
    base, cand = _samples(0.2, 0.002), _samples(0.212, 0.002, seed=1)
    history = list(0.2 * np.exp(0.002 * np.random.default_rng(2).standard_normal(12)))
    same = compare_case("k", base, cand, history)
    other = compare_case("k", base, cand, history, machine=0.05)
    assert same.p < 1e-6 and other.p > 0.05 and other.machine_sigma == 0.05


def test_host_delay_moves_the_median_not_the_lower_quantiles() -> None:
    base = _samples(0.05, 0.005, n=100)
    rng = np.random.default_rng(3)
    clean = _samples(0.05, 0.005, n=100, seed=4)
    delayed = [v + (rng.uniform(0.01, 0.1) if i % 2 else 0.0) for i, v in enumerate(clean)]
    found = contamination(base, delayed)
    assert found is not None and found.median_ratio > 1.1
    assert contamination(base, [v * 1.2 for v in base]) is None  # every quantile moved: a slowdown
    one_fast = [v * 1.2 for v in base[1:]] + [min(base)]  # a slowdown with one fast sample: p20 moved, min did not
    assert contamination(base, one_fast) is None
    assert contamination(base[:4], delayed[:4]) is None  # too few samples for a p20
    assert compare_case("k", base, delayed).contaminated is not None
    assert compare_case("k", base, delayed, heavy_tailed=True).contaminated is None  # call time includes the host


def test_a_run_wide_shift_needs_most_cases_moving_together() -> None:
    def comp(ratio: float) -> Comparison:
        return Comparison("k", ratio, 0.0, 0.5, 0.5, 0.05, 10)

    shift = run_shift([comp(1.2)] * 9 + [comp(1.0)])
    assert shift is not None and shift.slower == 9 and abs(shift.ratio - 1.2) < 1e-9 and shift.p < 0.05
    assert run_shift([comp(1.2)] * 5 + [comp(1.0)] * 5) is None
    assert run_shift([comp(1.2)] * 3) is None  # too few cases to speak of a run


def test_a_step_the_history_already_holds_is_a_change_not_noise() -> None:
    """The real H200 history of the causal softmax forward (bf16, 512x2048x2048, ci/history): 16 runs near 2.37 ms,
    then the triangle-skipping kernel near 1.59 ms (3 runs), then 6af074a4 at 1.93 ms (+21.8%). Measured across
    the step, the runs at it deviated 40% from their neighbours and the slowdown was "within noise" (p 0.18)."""
    history = [
        2.3648,
        2.3629,
        2.3654,
        2.3639,
        2.3801,
        2.3643,
        2.3628,
        2.3642,
        2.3672,
        2.3634,
        2.3641,
        2.3789,
        2.3782,
        2.3691,
        2.3792,
        2.3787,
        1.5936,
        1.5996,
        1.5881,
    ]
    rng = np.random.default_rng(3)
    baseline = list(1.5881 * (1 + 0.002 * rng.standard_normal(40)))
    candidate = list(1.9345 * (1 + 0.002 * rng.standard_normal(40)))
    c = compare_case("causal", baseline, candidate, history)
    assert c.basis == "history" and c.p_between < 1e-3 and c.sigma < 0.01
    # the same history without its step: the noise estimate is the runs' own, unchanged by the cut
    flat = compare_case("causal", baseline, candidate, history[:16])
    assert flat.sigma == pytest.approx(c.sigma, rel=0.5) and flat.p_between < 1e-3


def test_gpus_are_compared_within_the_last_segment_of_the_history() -> None:
    """The same causal softmax history by GPU (ci/history): two GPUs measured the old kernel, three the new one.
    Across the step the GPUs differ by 20% or more, which is the code, not the machines; within the last segment
    they differ by well under 1%."""
    old = {"GPU-cadb0535": [2.3792], "GPU-d83c984e": [2.3787]}
    new = {"GPU-7b44cc34": [1.5936], "GPU-12456339": [1.5996], "GPU-44732af5": [1.5881]}
    history = [
        2.3648,
        2.3629,
        2.3654,
        2.3639,
        2.3801,
        2.3643,
        2.3628,
        2.3642,
        2.3672,
        2.3634,
        2.3641,
        2.3789,
        2.3782,
        2.3691,
        2.3792,
        2.3787,
        1.5936,
        1.5996,
        1.5881,
    ]
    assert segment_start(history) == 16 and segment_start(history[:16]) == 0 and segment_start([]) == 0
    assert between_machine_sigma({**old, **new}) > 0.15
    assert between_machine_sigma(new) < 0.01


# ---------------------------------------------------------------------------------------------
# How far a machine may explain a shift
# ---------------------------------------------------------------------------------------------
def test_between_machine_ratio_is_the_slowest_gpu_over_the_fastest() -> None:
    from kernelwatch.gate.detect import between_machine_ratio

    assert between_machine_ratio({"a": [1.0, 1.0, 5.0], "b": [1.2, 1.2]}) == pytest.approx(1.2)  # medians, not means
    assert between_machine_ratio({"a": [1.0]}) is None
    assert between_machine_ratio({"a": [1.0], "b": []}) is None


def test_run_ratio_takes_the_median_over_shared_cases_of_each_gpu_pair() -> None:
    """One case 40% apart among four 1% apart is a case's noise, not the machine: the whole run is 1.01x."""
    from kernelwatch.gate.detect import run_ratio

    cases = [
        {"a": [1.0], "b": [1.01]},
        {"a": [2.0], "b": [2.02]},
        {"a": [3.0], "b": [3.03]},
        {"a": [4.0], "b": [5.6]},
        {"a": [5.0], "b": [5.05], "c": [50.0]},
    ]
    assert run_ratio(cases) == pytest.approx(1.01)
    assert run_ratio(cases[:3]) is None  # fewer shared cases than RUN_SHIFT_MIN_CASES


def test_machine_bound_takes_the_larger_of_the_measured_default_and_the_history() -> None:
    assert machine_bound(None, NOISE_MEMORY, H200) == (
        H200.bound[NOISE_MEMORY],
        "the largest measured between H200s for memory-bound cases",
    )
    assert machine_bound(1.01, NOISE_GEMM, H200)[0] == H200.bound[NOISE_GEMM]
    assert machine_bound(2.5, NOISE_LAUNCH, H200) == (
        2.5,
        "the largest between-GPU ratio of a launch-bound case in the history",
    )


def test_a_model_without_measurements_gets_the_named_default() -> None:
    """The H200's figures were applied to every hardware, silently: another model now gets DEFAULT, whose messages
    say it is a default and whose figures it holds."""
    assert machine_of("NVIDIA H200") is H200
    assert machine_of("NVIDIA A100-SXM4-80GB") is DEFAULT is machine_of(None)
    assert not DEFAULT.measured and DEFAULT.bound == H200.bound and DEFAULT.sigma == H200.sigma
    bound, source = machine_bound(None, NOISE_GEMM, DEFAULT)
    assert bound == H200.bound[NOISE_GEMM] and source.startswith("the default for GEMM cases"), source
    assert "no measurement for Ascend910B4" in DEFAULT.describe("Ascend910B4")
