"""Devices the collector can measure on: CUDA, Ascend NPU, and the CPU through Triton's interpreter.

A backend knows how to synchronise, time with device events, flush L2 between repetitions,
and measure the machine's ceilings (copy bandwidth, matrix rate) once.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

DEVICE_TYPES = ("cuda", "npu", "cpu")


def npu_available() -> bool:
    if importlib.util.find_spec("torch_npu") is None:
        return False
    import torch_npu  # noqa: F401  (registers torch.npu)

    return torch.npu.is_available()


def detect_device() -> str:
    """``cuda`` if a CUDA GPU is visible, else ``npu`` when torch_npu sees one, else ``cpu``."""
    if torch.cuda.is_available():
        return "cuda"
    if npu_available():
        return "npu"
    return "cpu"


def device_count(device_type: str) -> int:
    if device_type == "cuda":
        return torch.cuda.device_count()
    if device_type == "npu":
        return torch.npu.device_count() if npu_available() else 0
    return 1


def check_available(device_type: str) -> None:
    if device_type not in DEVICE_TYPES:
        raise ValueError(f"unknown device {device_type!r}: choose one of auto, {', '.join(DEVICE_TYPES)}")
    if device_type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: no CUDA GPU is visible to PyTorch")
    if device_type == "npu" and not npu_available():
        raise RuntimeError("--device npu: torch_npu is not importable or sees no NPU")


@dataclass
class Backend:
    """One device of one type, as a worker process sees it."""

    device: torch.device

    @property
    def kind(self) -> str:
        return self.device.type

    @property
    def times_perf(self) -> bool:
        return self.kind != "cpu"

    @property
    def module(self):
        return getattr(torch, self.kind)

    def activate(self) -> None:
        if self.kind == "npu":
            import torch_npu  # noqa: F401
        if self.kind in ("cuda", "npu"):
            self.module.set_device(self.device)
        else:
            os.environ.setdefault("TRITON_INTERPRET", "1")

    def synchronize(self) -> None:
        if self.kind != "cpu":
            self.module.synchronize(self.device)

    def event(self):
        return self.module.Event(enable_timing=True)

    def flush_buffer(self) -> torch.Tensor:
        # Larger than any L2 we know (H200: 60 MB, Ascend 910B: 192 MB).
        return torch.ones(512 * 1024 * 1024 // 4, dtype=torch.int32, device=self.device)

    @staticmethod
    def flush(buffer: torch.Tensor) -> None:
        """Evict the L2 by reading a large buffer. Reading, not zeroing: zeroing leaves the L2 full of
        dirty lines whose write-back would be charged to the next timed kernel (about 14 us on an
        H200, measured as a 30% loss on a 45 us kernel; kernels/NOTES.md)."""
        buffer.max()

    def time_samples(self, fn: Callable[[], object], warmup_ms: float = 25.0, rep_ms: float = 100.0,
                     min_reps: int = 10, max_reps: int = 300) -> list[float]:
        """Milliseconds per call, one sample per repetition, L2 flushed before each."""
        flush = self.flush_buffer()
        fn()
        self.synchronize()
        start, end = self.event(), self.event()
        start.record()
        for _ in range(5):
            self.flush(flush)
            fn()
        end.record()
        self.synchronize()
        estimate = max(start.elapsed_time(end) / 5, 1e-3)
        for _ in range(max(1, int(warmup_ms / estimate))):
            fn()
        reps = int(min(max(rep_ms / estimate, min_reps), max_reps))
        starts = [self.event() for _ in range(reps)]
        ends = [self.event() for _ in range(reps)]
        for i in range(reps):
            self.flush(flush)
            starts[i].record()
            fn()
            ends[i].record()
        self.synchronize()
        del flush
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]

    def measure_peaks(self) -> dict[str, float | None]:
        """Copy bandwidth (bytes read + written) and bf16 matrix rate, measured on this device."""
        if not self.times_perf:
            return {"peak_gbps": None, "peak_tflops": None}
        n = 1 << 28  # 1 GiB of fp32 each way
        bufs = [torch.randn(n, device=self.device), torch.empty(n, device=self.device)]
        copy = statistics.median(self.time_samples(lambda: bufs[1].copy_(bufs[0]), rep_ms=200))
        gbps = 2 * n * 4 / (copy * 1e-3) / 1e9
        m = 8192
        bufs = [torch.randn(m, m, device=self.device, dtype=torch.bfloat16) for _ in range(2)]
        mm = statistics.median(self.time_samples(lambda: bufs[0] @ bufs[1], rep_ms=300))
        tflops = 2 * m**3 / (mm * 1e-3) / 1e12
        bufs.clear()
        return {"peak_gbps": round(gbps, 1), "peak_tflops": round(tflops, 1)}
