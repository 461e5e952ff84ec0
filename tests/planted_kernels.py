"""Kernels planted to fail in every way the collector must survive. Imported by the collector only
through `--project tests/projects/planted.toml`; never part of the real suite."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import torch
import triton
import triton.language as tl

from kernelwatch.kernels.poison import new_output
from kernelwatch.kernels.spec import EAGER_IMPL, KERNEL_IMPL, Case, KernelSpec, Tolerance

TOL = Tolerance(1e-5, 1e-5)


@triton.jit
def _square_diff_kernel(x_ptr, y_ptr, out_ptr, n, stop, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < stop  # the planted bug: `stop` is not always n
    d = tl.load(x_ptr + offs, mask=mask, other=0.0) - tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, d * d * scale, mask=mask)


def square_diff(x: torch.Tensor, y: torch.Tensor, stop: int, scale: float = 1.0) -> torch.Tensor:
    out = new_output(x.shape, x.dtype, x.device)
    n = x.numel()
    _square_diff_kernel[(triton.cdiv(n, 128),)](x, y, out, n, stop, scale, BLOCK=128)
    return out


def _run(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    x, y = inputs["x"], inputs["y"]
    n = x.numel()
    kind = case.variant
    if kind == "raises":
        raise RuntimeError("planted failure: this kernel always raises")
    if kind == "hangs":
        time.sleep(3600)
    if kind == "crashes":
        os.kill(os.getpid(), signal.SIGSEGV)
    if kind == "breaks_db":  # the database the collector checked at the start is gone when it stores the run
        path = os.environ["PLANTED_BREAK_PATH"]
        for leftover in (path, path + "-wal", path + "-shm"):
            if os.path.isfile(leftover):
                os.remove(leftover)
        os.makedirs(path, exist_ok=True)
    if kind == "fills_disk":  # the file system under the working folder is full from this case on
        path = os.environ["PLANTED_FILL_PATH"]
        if not os.path.exists(path):
            with open(path, "wb", buffering=0) as f, contextlib.suppress(OSError):
                while True:
                    f.write(bytes(65536))
    if kind == "nan":
        return (torch.full_like(x, float("nan")),)
    if kind == "unwritten":
        return (square_diff(x, y, stop=n - 1),)
    if kind == "off_by_one_percent":
        return (square_diff(x, y, stop=n, scale=1.01),)
    return (square_diff(x, y, stop=n),)


VARIANTS = ("correct", "off_by_one_percent", "unwritten", "nan", "raises", "hangs", "crashes", "after")


def _cases() -> list[Case]:
    wanted = tuple(v for v in os.environ.get("PLANTED_VARIANTS", ",".join(VARIANTS)).split(",") if v)
    return [Case.make("planted", v, "fp32", TOL, trials=2, shape=(1000,)) for v in wanted]


def _inputs(case: Case, device: torch.device, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(1000, generator=gen).to(device), "y": torch.randn(1000, generator=gen).to(device)}


def _reference(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    return ((inputs["x"].double() - inputs["y"].double()) ** 2,)


def _impls(case: Case, inputs: dict) -> dict:
    return {KERNEL_IMPL: lambda: _run(case, inputs), EAGER_IMPL: lambda: (inputs["x"] - inputs["y"]) ** 2}


SPEC = KernelSpec(
    name="planted",
    accuracy_cases=_cases,
    perf_cases=lambda: _cases() if os.environ.get("PLANTED_PERF") else [],
    make_inputs=_inputs,
    run=lambda c, i: _run(c, i),
    reference=_reference,
    implementations=_impls,
    bytes_moved=lambda c: 12_000,
)
