"""The perf suite for one case: the kernel, eager PyTorch and torch.compile, measured on one device.

Per implementation, in this order:

1. warm-up: the first call compiles and autotunes (charged to the ``perf.warmup`` phase, never sampled);
2. GPU time per call: ``Backend.device_samples``, L2 flushed before each sample (``median_ms`` etc.), by
   graph replay or, where the call cannot be captured, events (``timing``: ``graph`` / ``events``); a
   launch-bound case (:func:`calls_per_sample`) replays a graph of :data:`LAUNCH_BATCH` calls per sample
   (``graph-batch``), every implementation alike;
3. cost per call: ``Backend.call_samples``, calls back to back, one sync per batch (``call_ms``);
4. peak memory: ``Backend.peak_memory``, the allocator's high-water mark over one call.

A stack case (:func:`~kernelwatch.kernels.spec.stack_of`: L distinct layers called in turn, as a model calls the
kernel) times one pass of the stack per sample and stores it per layer (divided by L): in ``mode=eager`` the
pass's wall time with its host path (``Backend.wall_samples``, timing ``wall``; after each sample the host probe,
:mod:`kernelwatch.collect.hostprobe`, whose median is ``host_probe_us``), in ``mode=graph`` the replay of
one CUDA graph of the whole stack (``graph``; a stack that cannot be captured is that implementation's error,
never timed another way; events on the CPU, which has no graphs). Its cost per call is the stack's, back to
back, per layer: the host cost a model pays, which the gate watches with ``--metric call``. Peak memory is the
whole pass's.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch

from kernelwatch.collect.backends import Backend
from kernelwatch.collect.hostprobe import HostProbe
from kernelwatch.collect.inputs import drawn_on
from kernelwatch.collect.walltrace import measured, note_case
from kernelwatch.kernels.names import LAUNCH_BATCH, TIMING_GRAPH, launch_bound
from kernelwatch.kernels.spec import EAGER_IMPL, KERNEL_IMPL, Case, KernelSpec, Stack, stack_of
from kernelwatch.store.schema import PerfResult


def launch_batch(nbytes: int, flops: int) -> int:
    """How many back-to-back calls one timed sample of a case of this size holds: :data:`LAUNCH_BATCH` for a
    launch-bound case (:func:`kernelwatch.kernels.names.launch_bound`), else 1. Decided from the size, never from a
    measurement, so the same case is timed the same way on every run and every device (``kernelwatch confirm``
    applies it to both commits' sizes)."""
    return LAUNCH_BATCH if launch_bound(nbytes, flops) else 1


def calls_per_sample(spec: KernelSpec, case: Case) -> int:
    """What the case's spec declares (``KernelSpec.facts``: :func:`launch_batch` of its size unless it says)."""
    return spec.facts(case).calls_per_sample


def _quantile(sorted_samples: list[float], q: float) -> float:
    pos = q * (len(sorted_samples) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * (pos - lo)


def summarise(samples: list[float]) -> dict[str, Any]:
    """Median, p20, p80 (linear interpolation between order statistics) and min of the samples.

    Every sample is stored as measured (no rounding, no truncation), so whoever recomputes a
    statistic from ``samples_ms`` gets the stored one.
    """
    if not samples:
        raise ValueError("no samples to summarise")
    stored = [float(v) for v in samples]
    s = sorted(stored)
    return {
        "median_ms": statistics.median(s),
        "p20_ms": _quantile(s, 0.2),
        "p80_ms": _quantile(s, 0.8),
        "min_ms": s[0],
        "samples_ms": stored,
    }


def origin(backend: Backend) -> dict[str, str | None]:
    """Where a result was measured, as every perf result states it: device label, physical device, host."""
    return {"device": backend.label, "device_uuid": backend.device_uuid, "host": backend.host}


def _empty(impl: str, error: str | None, where: dict[str, str | None] | None = None) -> dict[str, Any]:
    return {
        "implementation": impl,
        "median_ms": None,
        "p20_ms": None,
        "p80_ms": None,
        "min_ms": None,
        "samples_ms": [],
        "error": error,
        "call_ms": None,
        "call_samples_ms": [],
        "peak_mem_bytes": None,
        "timing": None,
        "host_probe_us": None,
        "host_probe_samples_us": [],
        **(where or {}),
    }


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def time_implementation(
    backend: Backend, impl: str, fn, calls: int = 1, stack: Stack | None = None, case: str = ""
) -> dict[str, Any]:
    """GPU time, cost per call and peak memory of one implementation (see the module docstring): the measured
    fields of its :class:`~kernelwatch.store.schema.PerfResult`, which :func:`finish` completes for each case sharing
    them. ``calls``: back-to-back calls per GPU-time sample (:func:`calls_per_sample`). ``stack``: ``fn`` is one
    pass of a stack, timed as its mode says and stored per layer (an eager pass traced by
    :mod:`kernelwatch.collect.walltrace` when asked, ``case`` naming it)."""
    host_probe_us, host_probe_samples_us = None, []
    try:
        with backend.phase("perf.warmup"):
            fn()
            backend.synchronize()
            probe = HostProbe(backend.device, backend.synchronize) if stack and stack.mode == "eager" else None
        with backend.phase("perf.timing"):
            if stack is None:
                samples, timing = backend.device_samples(fn, calls=calls)
            elif stack.mode == "eager":
                taken: list[list[float]] = []

                def eager() -> tuple[list[float], str]:
                    measurement = backend.wall_samples(fn, after_sample=probe.sample)
                    taken.append(probe.take())
                    return measurement

                samples, timing = measured(backend, f"{case} {impl}", eager)  # the first measurement is stored
                host_probe_samples_us = taken[0]
                host_probe_us = statistics.median(host_probe_samples_us) if host_probe_samples_us else None
            else:  # the CPU interpreter has no graphs: its events (host clock) time the stand-in
                samples, timing = backend.device_samples(fn, method=TIMING_GRAPH if backend.graphs else "auto")
        with backend.phase("perf.call"):
            call_times = backend.call_samples(fn)
        if stack is not None:
            samples = [s / stack.layers for s in samples]
            call_times = [c / stack.layers for c in call_times]
    except Exception as exc:
        return _empty(impl, _one_line(exc), origin(backend))
    with backend.phase("perf.memory"):
        try:
            peak = backend.peak_memory(fn)
        except Exception:
            peak = None
    return {
        "implementation": impl,
        **summarise(samples),
        "error": None,
        "call_ms": statistics.median(call_times),
        "call_samples_ms": call_times,
        "peak_mem_bytes": peak,
        "timing": timing,
        "host_probe_us": host_probe_us,
        "host_probe_samples_us": host_probe_samples_us,
        **origin(backend),
    }


class BaselineCache:
    """PyTorch baselines by baseline key, so kernel variants of one case share their numbers."""

    def __init__(self) -> None:
        self._store: dict[str, dict[str, dict[str, Any]]] = {}

    def get(self, key: str) -> dict[str, dict[str, Any]] | None:
        return self._store.get(key)

    def put(self, key: str, results: dict[str, dict[str, Any]]) -> None:
        self._store[key] = results


def perf_case(
    spec: KernelSpec, case: Case, backend: Backend, peaks: dict[str, float | None], baselines: BaselineCache, seed: int
) -> list[PerfResult]:
    """Every implementation of one case measured on ``backend``, with the derived numbers of :func:`finish`."""
    note_case()
    with backend.phase("perf.inputs"):
        with drawn_on(backend.device):  # random inputs born on the device: kernelwatch.collect.inputs
            inputs = spec.make_inputs(case, backend.device, seed)
        impls = spec.implementations(case, inputs)
    stack = stack_of(case, backend.device)
    calls = 1 if stack else calls_per_sample(spec, case)
    results: dict[str, dict[str, Any]] = {
        KERNEL_IMPL: time_implementation(backend, KERNEL_IMPL, impls[KERNEL_IMPL], calls, stack, case.key)
    }
    bkey = spec.baseline_key(case)
    cached = baselines.get(bkey)
    if cached is None:
        if hasattr(torch, "_dynamo"):
            torch._dynamo.reset()  # a fresh compile per case: past the recompile limit dynamo falls back to eager
        cached = {
            name: time_implementation(backend, name, fn, calls, stack, case.key)
            for name, fn in impls.items()
            if name != KERNEL_IMPL
        }
        baselines.put(bkey, cached)
    results.update(cached)
    del inputs, impls
    if backend.kind in ("cuda", "npu"):
        backend.module.empty_cache()
    return finish(spec, case, results, peaks)


def finish(
    spec: KernelSpec, case: Case, results: dict[str, dict[str, Any]], peaks: dict[str, float | None]
) -> list[PerfResult]:
    """The case's perf results: the measured fields and the derived numbers (GB/s, TFLOP/s, % of roofline,
    speedup over eager, target met). A value the schema refuses raises its ``ValidationError``."""
    nbytes, flops = spec.bytes_moved(case), spec.flops(case)
    peak_gbps, peak_tflops = peaks.get("peak_gbps"), peaks.get("peak_tflops")
    floor_s = max(
        nbytes / (peak_gbps * 1e9) if peak_gbps else 0.0, flops / (peak_tflops * 1e12) if peak_tflops and flops else 0.0
    )
    medians = {name: r["median_ms"] for name, r in results.items()}
    eager = medians.get(EAGER_IMPL)
    out = []
    for name, r in results.items():
        t = r["median_ms"]
        row = {
            **r,
            "case": case.key,
            "bytes": nbytes,
            "flops": flops or None,
            "gbps": None,
            "tflops": None,
            "pct_peak": None,
            "speedup_vs_eager": None,
            "target": None,
            "target_met": None,
        }
        if t:
            row["gbps"] = nbytes / (t * 1e-3) / 1e9
            row["tflops"] = flops / (t * 1e-3) / 1e12 if flops else None
            row["pct_peak"] = 100.0 * floor_s / (t * 1e-3) if floor_s else None
            row["speedup_vs_eager"] = eager / t if eager else None
        if name == KERNEL_IMPL and case.target is not None:
            row["target"] = case.target.describe()
            row["target_met"] = case.target.evaluate(row["pct_peak"], medians)
        out.append(PerfResult(**row))
    return out


def error_results(
    spec: KernelSpec, case: Case, message: str, where: dict[str, str | None] | None = None
) -> list[PerfResult]:
    """The perf result of a case that raised, hung or killed its worker; ``where``: :func:`origin`'s fields."""
    row = {
        **_empty(KERNEL_IMPL, message, where),
        "case": case.key,
        "bytes": spec.bytes_moved(case),
        "flops": spec.flops(case) or None,
        "gbps": None,
        "tflops": None,
        "pct_peak": None,
        "speedup_vs_eager": None,
        "target": case.target.describe() if case.target else None,
        "target_met": False if case.target else None,
    }
    return [PerfResult(**row)]
