"""kernelwatch/collect/perf.py's derived numbers: quantiles, GB/s, % of the roofline, speedup, targets.

No device: ``finish`` and ``summarise`` are pure functions of the timings, the spec and the peaks.
benchmarks/mutation_table.py checks that a quantile off by one, % of peak from the wrong byte count,
an inverted speedup or an inverted target ratio each fail a test here.
"""

from __future__ import annotations

import os
import statistics

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are imported: later tests launch them

import numpy as np
import pytest

from kernelwatch.collect.perf import finish as finish_rows
from kernelwatch.collect.perf import summarise
from kernelwatch.kernels.mse_loss.spec import SPEC as MSE
from kernelwatch.kernels.spec import EAGER_IMPL, KERNEL_IMPL, Target

PEAKS = {"peak_gbps": 4000.0, "peak_tflops": 700.0}


def _case(n: int = 33_554_432, dtype: str = "fp32"):
    return next(
        c
        for c in MSE.perf_cases()
        if c.p["shape"] == (n,) and c.dtype == dtype and c.variant == "persistent" and c.p["reduction"] == "mean"
    )


def _timed(median_ms: float, impl: str = KERNEL_IMPL) -> dict:
    return {
        "implementation": impl,
        "median_ms": median_ms,
        "p20_ms": median_ms,
        "p80_ms": median_ms,
        "min_ms": median_ms,
        "samples_ms": [median_ms],
        "error": None,
    }


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
    rows = {r.implementation: r for r in finish_rows(MSE, case, {KERNEL_IMPL: _timed(0.07)}, PEAKS)}
    k = rows[KERNEL_IMPL]
    assert k.bytes == (2 * n + 1) * 4
    assert k.gbps == pytest.approx((2 * n + 1) * 4 / 0.07e-3 / 1e9)
    assert k.pct_peak == pytest.approx(100 * k.gbps / 4000.0)
    assert k.pct_peak == pytest.approx(95.87, abs=0.01)


def test_percent_of_peak_takes_the_larger_floor_for_compute_bound_cases() -> None:
    """roofline floor = max(bytes / peak GB/s, FLOPs / peak FLOP/s)."""
    from kernelwatch.kernels.fused_rmsnorm_matmul.spec import SPEC as RMS

    case = next(c for c in RMS.perf_cases() if c.p["shape"] == (4096, 4096) and c.dtype == "fp16")
    flops, nbytes = RMS.flops(case), RMS.bytes_moved(case)
    t = 0.25
    (row,) = [r for r in finish_rows(RMS, case, {KERNEL_IMPL: _timed(t)}, PEAKS) if r.implementation == KERNEL_IMPL]
    floor_s = max(nbytes / 4000e9, flops / 700e12)
    assert floor_s == flops / 700e12  # compute-bound
    assert row.pct_peak == pytest.approx(100 * floor_s / (t * 1e-3))
    assert row.tflops == pytest.approx(flops / (t * 1e-3) / 1e12)


def test_speedup_is_eager_time_over_kernel_time() -> None:
    """Defect: the speedup inverted."""
    case = _case()
    rows = {
        r.implementation: r
        for r in finish_rows(MSE, case, {KERNEL_IMPL: _timed(0.05), EAGER_IMPL: _timed(0.1, EAGER_IMPL)}, PEAKS)
    }
    assert rows[KERNEL_IMPL].speedup_vs_eager == pytest.approx(2.0)
    assert rows[EAGER_IMPL].speedup_vs_eager == pytest.approx(1.0)


def test_targets_are_judged_on_the_right_side() -> None:
    """BIG_TARGET: >= 85% of peak and >= 1.8x eager. Defect: a target ratio inverted."""
    case = _case()
    assert case.target is not None and case.target.min_pct_peak == 85

    def met(kernel_ms: float, eager_ms: float) -> bool | None:
        rows = finish_rows(MSE, case, {KERNEL_IMPL: _timed(kernel_ms), EAGER_IMPL: _timed(eager_ms, EAGER_IMPL)}, PEAKS)
        return next(r for r in rows if r.implementation == KERNEL_IMPL).target_met

    assert met(0.07, 0.15) is True  # 95.9% of peak, 2.1x eager
    assert met(0.07, 0.10) is False  # 1.4x eager
    assert met(0.09, 0.20) is False  # 74.6% of peak
    t = Target(max_ratio_to=("cublas_linear", 1.10))
    assert t.evaluate(None, {KERNEL_IMPL: 1.05, "cublas_linear": 1.0}) is True
    assert t.evaluate(None, {KERNEL_IMPL: 1.20, "cublas_linear": 1.0}) is False
    assert t.evaluate(None, {KERNEL_IMPL: 1.0}) is None  # the other implementation was not measured


def test_no_time_means_no_derived_numbers() -> None:
    case = _case()
    empty = {
        "implementation": KERNEL_IMPL,
        "median_ms": None,
        "p20_ms": None,
        "p80_ms": None,
        "min_ms": None,
        "samples_ms": [],
        "error": "x",
    }
    (row,) = finish_rows(MSE, case, {KERNEL_IMPL: empty}, PEAKS)
    assert row.gbps is None and row.pct_peak is None and row.speedup_vs_eager is None
    assert row.target_met is None


def test_samples_are_enqueued_in_held_chunks_and_none_is_lost() -> None:
    """time_samples enqueues its samples in chunks behind a hold (on CUDA a spin kernel; the H200 decode
    case was charged the device's idle time without it): every sample of a count that is not a multiple
    of the chunk comes back, each measured; on the CPU the hold is a no-op."""
    import torch

    from kernelwatch.collect.backends import SAMPLE_CHUNK, Backend

    backend = Backend(torch.device("cpu"), time_on_cpu=True)
    reps = 2 * SAMPLE_CHUNK + 3
    calls = []
    samples = backend.time_samples(lambda: calls.append(1), min_reps=reps, max_reps=reps)
    assert len(samples) == reps and all(s >= 0 for s in samples)
    assert len(calls) >= reps + 6  # the samples, the five host-time calls and the estimate's
    backend.hold(5.0)  # nothing to hold on the CPU: returns at once


# ---------------------------------------------------------------------------------------------
# How GPU time is taken: graph replay, events as the fallback, the checked hold (docs/design.md).
# The CPU has neither graphs nor a device queue, so the orchestration is checked with host stand-ins:
# a "graph" that captures a call by running it and replays what it recorded, and events whose query
# says whether the hold had run out.
# ---------------------------------------------------------------------------------------------
class _HostGraph:
    """Capture runs the call once (as CUDA capture runs its host side); replay runs ``work``, the part a
    real graph would hold (the device work, without the host side)."""

    capturing = False

    def __init__(self) -> None:
        self.work = None

    def replay(self) -> None:
        if self.work is not None:
            self.work()


class _Capture:
    def __init__(self, graph: _HostGraph) -> None:
        self.graph = graph

    def __enter__(self) -> None:
        _HostGraph.capturing = True

    def __exit__(self, *exc: object) -> None:
        _HostGraph.capturing = False


def _graph_backend(**kw):
    import torch

    from kernelwatch.collect.backends import Backend

    class GraphOnHost(Backend):
        def _graph_api(self):
            return _HostGraph, _Capture

        def _capture(self, fn, strict: bool = False, calls: int = 1):
            # Backend._capture's own steps use torch.cuda streams; here only its contract: a graph or None.
            graph = _HostGraph()
            try:
                with _Capture(graph):
                    for _ in range(calls):
                        fn()
            except Exception:
                if strict:
                    raise
                return None
            work = kw.get("replays")
            if work is not None:
                graph.work = lambda: [work() for _ in range(calls)]
            return graph

    return GraphOnHost(torch.device("cpu"), time_on_cpu=True)


def _sleep_us(us: float) -> None:
    import time

    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def test_the_cpu_takes_the_events_path_and_says_so() -> None:
    """No graphs on the CPU: the samples come from the host clock and the method is ``events``; forcing
    ``graph`` is an error rather than a silent fallback (benchmarks/host_delay.py forces methods)."""
    import torch

    from kernelwatch.collect.backends import TIMING_EVENTS, Backend

    backend = Backend(torch.device("cpu"), time_on_cpu=True)
    samples, timing = backend.device_samples(lambda: _sleep_us(200), min_reps=12, max_reps=12)
    assert timing == TIMING_EVENTS and len(samples) == 12
    assert min(samples) >= 0.2  # each sample brackets the call
    with pytest.raises(RuntimeError, match="no graph capture on cpu"):
        backend.device_samples(lambda: None, method="graph")
    with pytest.raises(ValueError, match="unknown timing method"):
        backend.device_samples(lambda: None, method="cupti")


def test_a_call_that_cannot_be_captured_is_timed_with_events() -> None:
    """Defect: a capture failure (a call that synchronises, say) propagating, or a graph kept anyway."""
    from kernelwatch.collect.backends import TIMING_EVENTS

    def synchronising() -> None:
        if _HostGraph.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")
        _sleep_us(100)

    samples, timing = _graph_backend().device_samples(synchronising, min_reps=10, max_reps=10)
    assert timing == TIMING_EVENTS and min(samples) >= 0.1


def test_a_graph_that_did_not_capture_the_work_is_not_believed() -> None:
    """Defect: a call launching on a stream other than the capturing one leaves an (almost) empty graph,
    whose replay times in microseconds: kept, every such case would look 100x faster."""
    from kernelwatch.collect.backends import TIMING_EVENTS, TIMING_GRAPH

    backend = _graph_backend(replays=None)  # the graph holds nothing
    samples, timing = backend.device_samples(lambda: _sleep_us(300), min_reps=10, max_reps=10)
    assert timing == TIMING_EVENTS and min(samples) >= 0.3
    forced, timing = backend.device_samples(lambda: _sleep_us(300), min_reps=10, max_reps=10, method="graph")
    assert timing == TIMING_GRAPH and max(forced) < 0.3  # forcing skips the check (and shows why it is there)


def test_a_graph_that_did_the_work_is_used_and_excludes_the_calls_host_side() -> None:
    """The host side (here 0.4 ms before 0.6 ms of 'device' work) runs at capture only; replay is the work.
    Defect: the graph path timing the direct call (its median would be >= 1 ms)."""
    from kernelwatch.collect.backends import TIMING_GRAPH

    def call() -> None:
        _sleep_us(400)  # host side: argument checks, descriptors, the launch
        _sleep_us(600)  # the work

    samples, timing = _graph_backend(replays=lambda: _sleep_us(600)).device_samples(call, min_reps=10, max_reps=10)
    assert timing == TIMING_GRAPH
    assert min(samples) >= 0.6 and statistics.median(samples) < 0.9


def test_a_graph_of_many_calls_is_divided_by_their_number() -> None:
    """A launch-bound case's sample is a replay of ``calls`` back-to-back calls divided by ``calls``, named
    ``graph-batch`` (another method to the gate). Defects: the replay not divided (4x the time), the one-call
    work check applied (a batch is legitimately under half the event-timed call), or the name left ``graph``."""
    from kernelwatch.collect.backends import TIMING_GRAPH_BATCH

    def call() -> None:
        _sleep_us(400)  # host side, at capture only
        _sleep_us(600)

    backend = _graph_backend(replays=lambda: _sleep_us(200))  # back to back, a call's work overlaps
    samples, timing = backend.device_samples(call, min_reps=10, max_reps=10, calls=4)
    assert timing == TIMING_GRAPH_BATCH
    assert 0.2 <= statistics.median(samples) < 0.35
    with pytest.raises(ValueError, match="calls per sample must be at least 1, got 0"):
        backend.device_samples(call, calls=0)


def test_an_empty_graph_of_many_calls_is_not_believed() -> None:
    """A batch graph that captured nothing replays in microseconds whatever ``calls`` is; divided, it would make
    the case 1000x faster. Defect: the batch work check missing."""
    from kernelwatch.collect.backends import TIMING_EVENTS

    samples, timing = _graph_backend(replays=None).device_samples(
        lambda: _sleep_us(300), min_reps=10, max_reps=10, calls=50
    )
    assert timing == TIMING_EVENTS and min(samples) >= 0.3


def test_launch_bound_cases_are_the_small_ones_and_every_implementation_is_batched() -> None:
    """``calls_per_sample`` is decided from the case's size: exactly the perf cases that move at most
    ``LAUNCH_BOUND_BYTES`` (today MSELoss at 4,096 and 1,048,576 elements) get ``LAUNCH_BATCH`` calls, and
    ``time_implementation`` times with that many. Defects: a large case batched (its samples would read a warm
    L2), a small one not, or the count not reaching the timing."""
    from kernelwatch.collect.perf import LAUNCH_BATCH, calls_per_sample, time_implementation
    from kernelwatch.kernels import discover
    from kernelwatch.kernels.names import LAUNCH_BOUND_BYTES

    batched, single = [], []
    for spec in discover().values():
        for case in spec.perf_cases():
            n = calls_per_sample(spec, case)
            assert n in (1, LAUNCH_BATCH)
            (batched if n > 1 else single).append((spec, case))
            assert (n > 1) == (spec.bytes_moved(case) <= LAUNCH_BOUND_BYTES), case.key
    # the registry's kernels, whichever they are: both paths taken, MSELoss's launch-bound shapes among the batched
    assert batched and single
    assert {c.p["shape"] for s, c in batched if s.name == "mse_loss"} == {(4096,), (1048576,)}
    seen = []

    class Recording(type(_graph_backend())):
        def device_samples(self, fn, *args, calls: int = 1, **kwargs):
            seen.append(calls)
            return super().device_samples(fn, *args, calls=calls, **kwargs)

    import torch

    row = time_implementation(Recording(torch.device("cpu"), time_on_cpu=True), KERNEL_IMPL, lambda: None, 7)
    assert seen == [7] and row["error"] is None


def test_a_graph_slower_than_the_direct_call_is_not_believed() -> None:
    """A graph can replay other work than the call: on an H200 a 1 GiB ``copy_`` captured as a memcpy node
    moved 2.77 TB/s against 4.28 called directly, so every ceiling read 35% low. Defect: such a graph kept."""
    from kernelwatch.collect.backends import TIMING_EVENTS

    samples, timing = _graph_backend(replays=lambda: _sleep_us(900)).device_samples(
        lambda: _sleep_us(600), min_reps=10, max_reps=10
    )
    assert timing == TIMING_EVENTS and statistics.median(samples) < 0.85


def test_the_ceilings_are_measured_with_events() -> None:
    """Defect: the copy ceiling taken from a graph replay (a memcpy node on the copy engines, see above)."""
    import torch

    from kernelwatch.collect.backends import Backend

    methods = []

    class Recording(Backend):
        def device_samples(self, fn, *args, method: str = "auto", **kwargs):
            methods.append(method)
            return super().device_samples(fn, *args, method=method, **kwargs)

    peaks = Recording(torch.device("cpu"), time_on_cpu=True).measure_peaks()
    assert methods == ["events"] * 3 and all(v and v > 0 for v in peaks.values())


def test_a_chunk_whose_hold_ran_out_is_taken_again_with_a_longer_hold() -> None:
    """The hold check: the event after the hold must still be pending once the chunk is enqueued. Defect:
    samples of a chunk the device may have idled in kept, or retaken without a longer hold."""
    import torch

    from kernelwatch.collect.backends import MAX_RETAKES, SAMPLE_CHUNK, Backend, HostEvent

    outcomes = iter([True, True, False] + [False] * 10)  # query(): the hold had ended twice, then held

    class QueryEvent(HostEvent):
        def query(self) -> bool:
            return next(outcomes)

    class Checked(Backend):
        holds: list[float] = []
        made = 0

        def event(self):
            Checked.made += 1
            return QueryEvent()

        def hold(self, ms: float) -> None:
            Checked.holds.append(ms)

    backend = Checked(torch.device("cpu"), time_on_cpu=True)
    samples = backend._held_samples(lambda: None, backend.flush_buffer(), SAMPLE_CHUNK + 5)
    assert len(samples) == SAMPLE_CHUNK + 5
    # chunk 1: three tries, each hold twice the last (host time aside); chunk 2: one.
    assert len(Checked.holds) == 4 and MAX_RETAKES >= 2
    h = Checked.holds
    assert h[1] >= 2 * h[0] and h[2] >= 2 * h[1]


def test_time_implementation_records_the_method() -> None:
    """``timing`` is part of every perf result: the method on success, None on an error."""
    import torch

    from kernelwatch.collect.backends import Backend
    from kernelwatch.collect.perf import time_implementation

    backend = Backend(torch.device("cpu"), time_on_cpu=True)
    ok = time_implementation(backend, KERNEL_IMPL, lambda: _sleep_us(50))
    assert ok["timing"] == "events" and ok["error"] is None

    def broken() -> None:
        raise RuntimeError("no")

    bad = time_implementation(backend, KERNEL_IMPL, broken)
    assert bad["timing"] is None and bad["error"].startswith("RuntimeError")
