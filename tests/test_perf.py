"""collector/perf.py's derived numbers: quantiles, GB/s, % of the roofline, speedup, targets.

No device: ``finish`` and ``summarise`` are pure functions of the timings, the spec and the peaks.
benchmarks/mutation_table.py checks that a quantile off by one, % of peak from the wrong byte count,
an inverted speedup or an inverted target ratio each fail a test here.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are imported: later tests launch them

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from collector.perf import finish as finish_rows  # noqa: E402
from collector.perf import summarise  # noqa: E402
from kernels.mse_loss import SPEC as MSE  # noqa: E402
from kernels.spec import EAGER_IMPL, KERNEL_IMPL, Target  # noqa: E402

PEAKS = {"peak_gbps": 4000.0, "peak_tflops": 700.0}


def _case(n: int = 33_554_432, dtype: str = "fp32"):  # noqa: ANN202
    return next(c for c in MSE.perf_cases() if c.p["shape"] == (n,) and c.dtype == dtype
                and c.variant == "persistent" and c.p["reduction"] == "mean")


def _timed(median_ms: float, impl: str = KERNEL_IMPL) -> dict:
    return {"implementation": impl, "median_ms": median_ms, "p20_ms": median_ms, "p80_ms": median_ms,
            "min_ms": median_ms, "samples_ms": [median_ms], "error": None}


@pytest.mark.parametrize("n", [1, 2, 3, 5, 10, 11, 200])
def test_quantiles_are_numpys_linear_interpolation(n: int) -> None:
    """Defect: a quantile position off by one (q * n instead of q * (n - 1))."""
    samples = list(np.random.default_rng(n).gamma(2.0, 1.0, n))
    s = summarise(samples)
    assert s["median_ms"] == pytest.approx(float(np.median(samples)))
    assert s["p20_ms"] == pytest.approx(float(np.percentile(samples, 20)))
    assert s["p80_ms"] == pytest.approx(float(np.percentile(samples, 80)))
    assert s["min_ms"] == min(samples) and len(s["samples_ms"]) == min(n, 200)


def test_bandwidth_and_percent_of_peak_use_the_specs_bytes() -> None:
    """Defect: % of peak from the wrong byte count. 33.5M fp32 elements, mean: two inputs read, one scalar
    written = (2 n + 1) * 4 bytes; at 0.07 ms that is 3835 GB/s, 95.9% of a 4000 GB/s peak."""
    case = _case()
    n = 33_554_432
    assert MSE.bytes_moved(case) == (2 * n + 1) * 4
    rows = {r["implementation"]: r for r in finish_rows(MSE, case, {KERNEL_IMPL: _timed(0.07)}, PEAKS)}
    k = rows[KERNEL_IMPL]
    assert k["bytes"] == (2 * n + 1) * 4
    assert k["gbps"] == pytest.approx((2 * n + 1) * 4 / 0.07e-3 / 1e9)
    assert k["pct_peak"] == pytest.approx(100 * k["gbps"] / 4000.0)
    assert k["pct_peak"] == pytest.approx(95.87, abs=0.01)


def test_percent_of_peak_takes_the_larger_floor_for_compute_bound_cases() -> None:
    """roofline floor = max(bytes / peak GB/s, FLOPs / peak FLOP/s)."""
    from kernels.fused_rmsnorm_matmul import SPEC as RMS

    case = next(c for c in RMS.perf_cases() if c.p["shape"] == (4096, 4096) and c.dtype == "fp16")
    flops, nbytes = RMS.flops(case), RMS.bytes_moved(case)
    t = 0.25
    (row,) = [r for r in finish_rows(RMS, case, {KERNEL_IMPL: _timed(t)}, PEAKS) if r["implementation"] == KERNEL_IMPL]
    floor_s = max(nbytes / 4000e9, flops / 700e12)
    assert floor_s == flops / 700e12  # compute-bound
    assert row["pct_peak"] == pytest.approx(100 * floor_s / (t * 1e-3))
    assert row["tflops"] == pytest.approx(flops / (t * 1e-3) / 1e12)


def test_speedup_is_eager_time_over_kernel_time() -> None:
    """Defect: the speedup inverted."""
    case = _case()
    rows = {r["implementation"]: r for r in finish_rows(MSE, case, {KERNEL_IMPL: _timed(0.05),
                                                                    EAGER_IMPL: _timed(0.1, EAGER_IMPL)}, PEAKS)}
    assert rows[KERNEL_IMPL]["speedup_vs_eager"] == pytest.approx(2.0)
    assert rows[EAGER_IMPL]["speedup_vs_eager"] == pytest.approx(1.0)


def test_targets_are_judged_on_the_right_side() -> None:
    """BIG_TARGET: >= 85% of peak and >= 1.8x eager. Defect: a target ratio inverted."""
    case = _case()
    assert case.target is not None and case.target.min_pct_peak == 85

    def met(kernel_ms: float, eager_ms: float) -> bool | None:
        rows = finish_rows(MSE, case, {KERNEL_IMPL: _timed(kernel_ms), EAGER_IMPL: _timed(eager_ms, EAGER_IMPL)}, PEAKS)
        return next(r for r in rows if r["implementation"] == KERNEL_IMPL)["target_met"]

    assert met(0.07, 0.15) is True  # 95.9% of peak, 2.1x eager
    assert met(0.07, 0.10) is False  # 1.4x eager
    assert met(0.09, 0.20) is False  # 74.6% of peak
    t = Target(max_ratio_to=("cublas_linear", 1.10))
    assert t.evaluate(None, {KERNEL_IMPL: 1.05, "cublas_linear": 1.0}) is True
    assert t.evaluate(None, {KERNEL_IMPL: 1.20, "cublas_linear": 1.0}) is False
    assert t.evaluate(None, {KERNEL_IMPL: 1.0}) is None  # the other implementation was not measured


def test_no_time_means_no_derived_numbers() -> None:
    case = _case()
    empty = {"implementation": KERNEL_IMPL, "median_ms": None, "p20_ms": None, "p80_ms": None, "min_ms": None,
             "samples_ms": [], "error": "x"}
    (row,) = finish_rows(MSE, case, {KERNEL_IMPL: empty}, PEAKS)
    assert row["gbps"] is None and row["pct_peak"] is None and row["speedup_vs_eager"] is None
    assert row["target_met"] is None


def test_samples_are_enqueued_in_held_chunks_and_none_is_lost() -> None:
    """time_samples enqueues its samples in chunks behind a hold (on CUDA a spin kernel; the H200 decode
    case was charged the device's idle time without it): every sample of a count that is not a multiple
    of the chunk comes back, each measured; on the CPU the hold is a no-op."""
    import torch

    from collector.backends import SAMPLE_CHUNK, Backend

    backend = Backend(torch.device("cpu"), time_on_cpu=True)
    reps = 2 * SAMPLE_CHUNK + 3
    calls = []
    samples = backend.time_samples(lambda: calls.append(1), min_reps=reps, max_reps=reps)
    assert len(samples) == reps and all(s >= 0 for s in samples)
    assert len(calls) >= reps + 6  # the samples, the five host-time calls and the estimate's
    backend.hold(5.0)  # nothing to hold on the CPU: returns at once
