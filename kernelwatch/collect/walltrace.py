"""One stderr line per wall-timed measurement, when ``KERNELWATCH_TRACE_WALL=1``: what the host and the device
did while the collector timed a stack's eager pass.

Why: the collector's eager stack figures of Triton-launched implementations moved up to 1.8x between H200s
running one commit, and `confirm` measured the same code at the low figure minutes later on the same machine
(kernelwatch/kernels/NOTES.md, "Stacks of layers"). Each line tells the candidates apart: the process's share
of the CPU during the window and its involuntary context switches (another process on the core), the SM clock
before and after (the device's power state), the load average, and how many launches took the short launch path
(:mod:`kernelwatch.kernels.fastlaunch`; none where launch hooks turned it off)."""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any

from kernelwatch.kernels.fastlaunch import short_launches

ENV = "KERNELWATCH_TRACE_WALL"
PREFIX = "kernelwatch wall-trace"


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _sm_mhz(backend: Any) -> str:
    if backend.kind != "cuda":
        return "-"
    try:
        return str(backend.module.clock_rate(backend.device))  # NVML's current SM clock (nvidia-ml-py)
    except Exception:
        return "?"


@contextlib.contextmanager
def traced(backend: Any, label: str) -> Iterator[None]:
    """Around one wall-timed measurement of ``label``; a no-op unless :func:`enabled`."""
    if not enabled():
        yield
        return
    usage, cpu, wall, hits, sm = (
        resource.getrusage(resource.RUSAGE_SELF),
        time.process_time(),
        time.perf_counter(),
        short_launches(),
        _sm_mhz(backend),
    )
    yield
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"{PREFIX} {label}: {wall * 1e3:.1f} ms, cpu {cpu / wall if wall > 0 else 0:.2f} of it, "
        f"{after.ru_nivcsw - usage.ru_nivcsw} involuntary / {after.ru_nvcsw - usage.ru_nvcsw} voluntary switches, "
        f"SM {sm}->{_sm_mhz(backend)} MHz, load {os.getloadavg()[0]:.1f}, short launches +{short_launches() - hits}",
        file=sys.stderr,
        flush=True,
    )
