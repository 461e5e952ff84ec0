"""One stderr line per wall-timed measurement, when ``KERNELWATCH_TRACE_WALL=1``: what the host and the device
did while the collector timed a stack's eager pass, and the same pass timed again under changed conditions.

Why: the collector's eager stack figures of Triton-launched implementations moved up to 1.8x between H200s
running one commit, and `confirm` measured the same code at the low figure minutes later on the same machine
(kernelwatch/kernels/NOTES.md, "Stacks of layers"). Each line tells the candidates apart:

- the host: the process's share of the CPU during the window, its involuntary context switches (another process
  on the core), the load average, its threads, the core it ran on and that core's clock where the host says;
- the device: the SM clock before and after (its power state);
- the interpreter: garbage collections during the window (per generation, and their milliseconds), whether a
  frame-evaluation callback (Dynamo's), a trace or profile function or a ``sys.monitoring`` tool was set (each
  makes every Python frame dearer, and a Triton launch is many frames where eager PyTorch's is few), and how many
  launches took the short launch path (:mod:`kernelwatch.kernels.fastlaunch`; none where launch hooks turned it
  off);
- then the pass timed twice more, once with the collector off (``gc-off``) and once after ``gc.freeze()`` moved the
  worker's heap out of the collector's sight (``frozen``), so the line shows what each condition costs in place.

The extra timings are taken only when tracing, after the measurement that is stored."""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from kernelwatch.kernels.fastlaunch import short_launches

ENV = "KERNELWATCH_TRACE_WALL"
PREFIX = "kernelwatch wall-trace"
_cases = [0]  # perf cases this process began (note_case), the traced one included


def note_case() -> None:
    """One more perf case begun in this process (the trace says which one a measurement belongs to)."""
    _cases[0] += 1


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _sm_mhz(backend: Any) -> str:
    if backend.kind != "cuda":
        return "-"
    try:
        return str(backend.module.clock_rate(backend.device))  # NVML's current SM clock (nvidia-ml-py)
    except Exception:
        return "?"


def _proc_status(field: str) -> str:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return line.split()[1]
    except OSError:
        pass
    return "?"


def _core() -> str:
    """The core this process last ran on and its clock in MHz, where /proc and cpufreq say."""
    try:
        with open("/proc/self/stat") as f:
            cpu = int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return "?"
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq") as f:
            return f"{cpu}@{int(f.read()) // 1000}MHz"
    except (OSError, ValueError):
        return str(cpu)


def _frame_hooks() -> str:
    """What makes every Python frame dearer, set now: Dynamo's eval-frame callback, a trace or profile function,
    ``sys.monitoring`` tools."""
    found = []
    try:
        from torch._C._dynamo.eval_frame import get_eval_frame_callback

        callback = get_eval_frame_callback()
        if callback not in (None, False):
            found.append(f"dynamo:{type(callback).__name__}")
    except Exception:
        pass
    if sys.gettrace() is not None:
        found.append("settrace")
    if sys.getprofile() is not None:
        found.append("setprofile")
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        found += [f"monitoring:{name}" for i in range(6) if (name := monitoring.get_tool(i))]
    return ",".join(found) or "none"


@contextlib.contextmanager
def _gc_watch() -> Iterator[dict[int, list[float]]]:
    """Milliseconds of each garbage collection in the window, by generation."""
    seen: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started: list[float] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            seen.setdefault(info.get("generation", 0), []).append((time.perf_counter() - started.pop()) * 1e3)

    gc.callbacks.append(watch)
    try:
        yield seen
    finally:
        gc.callbacks.remove(watch)


def _median(measure: Callable[[], tuple[list[float], str]]) -> float:
    return statistics.median(measure()[0])


def measured(backend: Any, label: str, measure: Callable[[], tuple[list[float], str]]) -> tuple[list[float], str]:
    """``measure()`` (one wall-timed measurement: samples in ms and the timing method), traced as the module says
    when :func:`enabled`; its result is returned as measured either way."""
    if not enabled():
        return measure()
    usage, cpu, wall, hits, sm, threads = (
        resource.getrusage(resource.RUSAGE_SELF),
        time.process_time(),
        time.perf_counter(),
        short_launches(),
        _sm_mhz(backend),
        _proc_status("Threads"),
    )
    with _gc_watch() as collections:
        result = measure()
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    after = resource.getrusage(resource.RUSAGE_SELF)
    sm_after, hooks, core, hits = _sm_mhz(backend), _frame_hooks(), _core(), short_launches() - hits
    gcs = " ".join(f"g{g}:{len(ms)}/{sum(ms):.1f}ms" for g, ms in sorted(collections.items()))
    tracked = sum(s["collections"] for s in gc.get_stats())
    gc.disable()
    try:
        gc_off = _median(measure)
    finally:
        gc.enable()
    gc.freeze()
    try:
        frozen = _median(measure)
    finally:
        gc.unfreeze()
    print(
        f"{PREFIX} {label}: median {statistics.median(result[0]):.4f} ms, gc-off {gc_off:.4f}, frozen {frozen:.4f}; "
        f"{wall * 1e3:.1f} ms, cpu {cpu / wall if wall > 0 else 0:.2f} of it, "
        f"{after.ru_nivcsw - usage.ru_nivcsw} involuntary / {after.ru_nvcsw - usage.ru_nvcsw} voluntary switches, "
        f"SM {sm}->{sm_after} MHz, load {os.getloadavg()[0]:.1f}, pid {os.getpid()} case {_cases[0]}, "
        f"threads {threads}, core {core}, "
        f"gc {gcs} (collections so far {tracked}, heap {len(gc.get_objects())} objects), hooks {hooks}, "
        f"short launches +{hits}",
        file=sys.stderr,
        flush=True,
    )
    return result
