"""How fast the host launches, read beside every wall-timed sample: the host probe.

A stack timed eagerly (``mode=eager``) with its host path reads its host CPU's speed wherever the host path is longer
than the device's work: one commit's Triton-launched eager stacks read 1.4-1.7x apart on two H200 hosts, and up to
1.9x apart on one host minutes apart, while eager PyTorch's, bound by the device, agreed within 1-3%
(kernelwatch/kernels/NOTES.md, "Stacks of layers"). The probe is a fixed piece of the tool, not of the code measured:
:data:`LAUNCHES` launches of one tiny Triton kernel through Triton's own launch path, each with its output allocated,
as a layer of a stack does, timed on the host up to the last launch's return (the device is idle before and does a
few microseconds of work per launch, so the time is the host's). It is taken after each timed sample, outside its
window, and the result keeps each (``PerfResult.host_probe_samples_us``, in the order of ``samples_ms``) and their
median (``host_probe_us``, microseconds per launch): how fast this host ran a launch path as the case was timed. A
suspect compared across hosts tells what the two runs' probes make of it
(:func:`kernelwatch.gate.suspects.host_reading`)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import triton
import triton.language as tl

LAUNCHES = 16  # per probe: ~0.2-0.5 ms of host work on an H200 host, a few % of a stack's pass
BLOCK = 16


@triton.jit
def _probe_kernel(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * scale, mask=mask)


class HostProbe:
    """The probe on one device: :meth:`sample` after each timed sample, then :meth:`take` them (a measurement's
    own: a traced measurement is taken again, and its re-timings' probes are theirs)."""

    def __init__(self, device: torch.device | str, synchronize: Callable[[], None]) -> None:
        self._x = torch.ones(BLOCK, device=device, dtype=torch.float32)
        self._sync = synchronize
        self._us: list[float] = []
        self._launch()  # Triton compiles on the first launch: never inside a probe
        self._sync()

    def _launch(self) -> None:
        y = torch.empty_like(self._x)
        _probe_kernel[(1,)](self._x, y, BLOCK, 2.0, BLOCK=BLOCK)

    def sample(self) -> None:
        """One probe: host microseconds per launch over :data:`LAUNCHES` launches, then the device drained."""
        self._sync()
        start = time.perf_counter()
        for _ in range(LAUNCHES):
            self._launch()
        self._us.append((time.perf_counter() - start) * 1e6 / LAUNCHES)
        self._sync()

    def take(self) -> list[float]:
        """The probes since the last take, in order (microseconds per launch)."""
        out, self._us = self._us, []
        return out
