"""Row-wise squared L2 norm: ``out[r] = sum_j x[r, j]^2``, accumulated in float32.

One program per row walks the row in blocks of ``BLOCK`` columns. Inputs of fp16 or fp32, output fp32: the
reduction of a row of length n in fp32 has a relative error of order n * 2^-24, so the tolerance grows with n.

``SPEC`` is what KernelWatch reads (``kernelwatch.kernels.spec.KernelSpec``): the cases, tolerances, the
float64 reference, the implementations to time and the bytes a call must move.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelwatch.kernels.names import EAGER_IMPL, KERNEL_IMPL, READ_CEILING
from kernelwatch.kernels.spec import Case, KernelSpec, Tolerance, element_size

BLOCK = 128


@triton.jit
def _rownorm_kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def rownorm(x: torch.Tensor) -> torch.Tensor:
    """sum(x[r, :] ** 2) per row of a 2-D tensor, in float32."""
    if x.dim() != 2:
        raise ValueError(f"rownorm takes a 2-D tensor, got {x.dim()}-D")
    x = x.contiguous()
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    _rownorm_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=BLOCK)
    return out


def _cases(trials: int) -> list[Case]:
    return [
        Case.make(
            "rownorm", "rows", dtype, Tolerance(rtol=cols * 2.0**-22, atol=1e-6), trials=trials, shape=(rows, cols)
        )
        for dtype in ("fp32", "fp16")
        for rows, cols in ((4, 300), (16, 1000))
    ]


def _inputs(case: Case, device: torch.device, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {"x": (torch.rand(case.p["shape"], generator=gen) * 2 - 1).to(case.torch_dtype).to(device)}


def _eager(x: torch.Tensor) -> torch.Tensor:
    return x.float().pow(2).sum(dim=1)


SPEC = KernelSpec(
    name="rownorm",
    accuracy_cases=lambda: _cases(2),
    perf_cases=lambda: [Case.make("rownorm", "rows", "fp32", trials=1, shape=(4, 1024))],
    make_inputs=_inputs,
    run=lambda case, i: (rownorm(i["x"]),),
    reference=lambda case, i: (i["x"].double().pow(2).sum(dim=1),),
    implementations=lambda case, i: {KERNEL_IMPL: lambda: rownorm(i["x"]), EAGER_IMPL: lambda: _eager(i["x"])},
    bytes_moved=lambda case: (
        case.p["shape"][0] * case.p["shape"][1] * element_size(case.dtype) + case.p["shape"][0] * 4
    ),
    flops=lambda case: 2 * case.p["shape"][0] * case.p["shape"][1],
    ceiling=lambda case: READ_CEILING,
    variants=("rows",),
    public=("rownorm",),
)
