r"""MSELoss: ``mse_loss(input, target, reduction="mean")`` with the semantics of
``torch.nn.functional.mse_loss``.

    none:  out_i = (x_i - y_i)^2                       (shape of the input)
    sum:   out   = \sum_i (x_i - y_i)^2                (0-d)
    mean:  out   = (1/n) \sum_i (x_i - y_i)^2          (0-d; nan for n = 0)
    d out / d x_i = 2 s (x_i - y_i) g_i = - d out / d y_i,   s = 1/n for mean, 1 otherwise

Squares are accumulated in fp32 whatever the input dtype; the result is cast to it.

Two reduction variants, both kept so the dashboard shows what the optimisation bought:

* ``atomic`` (design document "mse_loss_triton_ascend_design", docs/kernels.md): one program per BLOCK, each
  ``atomic_add``-ing its partial sum into a single fp32 cell.
* ``persistent`` (design document "mse_loss_grid_stride_optimization", docs/kernels.md): a fixed grid of
  programs (one per vector core on Ascend, SMs x waves on CUDA) that stride over the tensor,
  accumulate in registers and write one partial each; a second one-program stage adds the
  partials in a fixed order, so the result has the same bits on every run.

On Ascend a launch has at most 65,535 programs, so every launch there is a grid of one program per
vector core looping over the blocks (``*_persistent_kernel``); the atomic variant keeps one
``atomic_add`` per BLOCK. Launches come from :mod:`kernelwatch.kernels.mse_loss.plans` (``plan_forward`` /
``plan_backward``).
"""

from __future__ import annotations

import torch

from kernelwatch.kernels.mse_loss.api import mse_loss, mse_loss_forward
from kernelwatch.kernels.mse_loss.plans import REDUCTIONS, VARIANTS, plan_backward, plan_forward
from kernelwatch.kernels.names import COPY_CEILING, NOISE_ATOMIC, READ_CEILING, work_class
from kernelwatch.kernels.peers import compile_peer, flaggems
from kernelwatch.kernels.plan import DeviceInfo, Launch
from kernelwatch.kernels.spec import (
    COMPILE_IMPL,
    EAGER_IMPL,
    FLAGGEMS_IMPL,
    KERNEL_IMPL,
    Case,
    KernelSpec,
    Target,
    Tolerance,
    element_size,
    numel,
)

TOLERANCES = {  # (dtype, reduction is sum) -> tolerance; the design document's table (docs/kernels.md), bf16 added
    ("fp32", False): Tolerance(1e-5, 1e-5),
    ("fp32", True): Tolerance(1e-5, 1.0),
    ("fp16", False): Tolerance(1e-3, 1e-3),
    ("fp16", True): Tolerance(1e-3, 1.0),
    ("bf16", False): Tolerance(1.6e-2, 1e-2),
    ("bf16", True): Tolerance(1.6e-2, 1.0),
}
# Backward values are 2(x - y)g/n: the forward's rtol with an atol scaled to their size.
GRAD_ATOL = {"fp32": 1e-6, "fp16": 1e-4, "bf16": 1e-3}

BIG_TARGET = Target(min_pct_peak=85, min_speedup_vs_eager=1.8, source="docs/kernels.md, MSELoss targets (H200)")
HUGE_TARGET = Target(min_pct_peak=95, source="docs/kernels.md, MSELoss targets (H200)")
SMALL_TARGET = Target(min_speedup_vs_eager=1.0, source="docs/kernels.md, MSELoss targets (H200): no slower than eager")

# (label, shape, extra) - the design document's sizes (docs/kernels.md), and what breaks naive kernels
ACCURACY_SHAPES: tuple[tuple[tuple[int, ...], dict], ...] = (
    ((128,), {}),
    ((1024,), {}),
    ((1_048_576,), {}),
    ((1000,), {}),  # not a multiple of any block
    ((4099,), {}),  # odd prime
    ((0,), {}),
    ((1,), {}),
    ((3, 7, 11, 13), {}),
    ((257, 130), {"layout": "strided"}),  # a non-contiguous view, every other column
    ((65_537,), {"magnitude": 1e4}),  # large values
)


def _accuracy_cases() -> list[Case]:
    cases = []
    for variant in VARIANTS:
        for dtype in ("fp32", "fp16", "bf16"):
            for reduction in REDUCTIONS:
                if variant == "atomic" and reduction == "none":
                    continue  # 'none' does not reduce: one kernel serves both variants
                tol = TOLERANCES[(dtype, reduction == "sum")]
                for shape, extra in ACCURACY_SHAPES:
                    if extra.get("magnitude") and dtype == "fp16":
                        continue  # squares of 1e4 exceed fp16: covered by the overflow case below
                    cases.append(
                        Case.make(
                            "mse_loss", variant, dtype, tol, shape=shape, reduction=reduction, direction="fwd", **extra
                        )
                    )
                    if shape in ((1000,), (3, 7, 11, 13)) or extra.get("layout"):
                        gtol = Tolerance(tol.rtol, GRAD_ATOL[dtype])
                        cases.append(
                            Case.make(
                                "mse_loss",
                                variant,
                                dtype,
                                gtol,
                                shape=shape,
                                reduction=reduction,
                                direction="bwd",
                                **extra,
                            )
                        )
        # fp16 sum past 65504: inf, as PyTorch gives
        cases.append(
            Case.make(
                "mse_loss",
                variant,
                "fp16",
                TOLERANCES[("fp16", True)],
                shape=(100_000,),
                reduction="sum",
                direction="fwd",
                magnitude=4.0,
            )
        )
    return cases


PERF_SIZES = (4096, 1_048_576, 33_554_432, 268_435_456)


def _perf_target(n: int, variant: str) -> Target | None:
    if variant != "persistent":
        return None
    return {4096: SMALL_TARGET, 33_554_432: BIG_TARGET, 268_435_456: HUGE_TARGET}.get(n)


def _perf_cases() -> list[Case]:
    cases = []
    for variant in VARIANTS:
        for dtype in ("fp32", "fp16"):
            for n in PERF_SIZES:
                reductions = ("mean", "sum") if variant == "persistent" and n >= 33_554_432 else ("mean",)
                for reduction in reductions:
                    cases.append(
                        Case.make(
                            "mse_loss",
                            variant,
                            dtype,
                            TOLERANCES[(dtype, reduction == "sum")],
                            _perf_target(n, variant),
                            shape=(n,),
                            reduction=reduction,
                            direction="fwd",
                        )
                    )
    return cases


def _make_inputs(case: Case, device: torch.device, seed: int) -> dict:
    p = case.p
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shape = tuple(p["shape"])
    alloc = (shape[0], shape[1] * 2) if p.get("layout") == "strided" else shape
    scale = p.get("magnitude", 1.0)
    x = (torch.randn(alloc, generator=gen) * scale).to(case.torch_dtype)
    y = (torch.randn(alloc, generator=gen) * scale).to(case.torch_dtype)
    x, y = x.to(device), y.to(device)
    if p.get("layout") == "strided":
        x, y = x[:, ::2], y[:, ::2]
    inputs = {"input": x, "target": y, "reduction": p["reduction"]}
    if p["direction"] == "bwd":
        out_shape = shape if p["reduction"] == "none" else ()
        inputs["grad"] = torch.randn(out_shape, generator=gen).to(case.torch_dtype).to(device)
    return inputs


def _run(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    x, y = inputs["input"], inputs["target"]
    if case.p["direction"] == "fwd":
        return (mse_loss(x, y, inputs["reduction"], variant=case.variant),)
    x, y = x.detach().requires_grad_(), y.detach().requires_grad_()
    out = mse_loss(x, y, inputs["reduction"], variant=case.variant)
    gx, gy = torch.autograd.grad(out, (x, y), inputs["grad"])
    return gx, gy


def _reference(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    x = inputs["input"].detach().cpu().double()
    y = inputs["target"].detach().cpu().double()
    reduction = inputs["reduction"]
    if case.p["direction"] == "fwd":
        return (torch.nn.functional.mse_loss(x, y, reduction=reduction),)
    g = inputs["grad"].cpu().double()
    scale = 1.0 / x.numel() if reduction == "mean" else 1.0
    gx = 2.0 * scale * (x - y) * g
    return gx, -gx


FLAGGEMS_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}  # flag_gems.ops.mse_loss.Reduction


def _implementations(case: Case, inputs: dict) -> dict:
    x, y, reduction = inputs["input"], inputs["target"], inputs["reduction"]
    eager = torch.nn.functional.mse_loss
    impls = {
        KERNEL_IMPL: lambda: mse_loss_forward(x, y, reduction, case.variant),
        EAGER_IMPL: lambda: eager(x, y, reduction=reduction),
    }
    compiled = compile_peer(eager)
    impls[COMPILE_IMPL] = lambda: compiled(x, y, reduction=reduction)
    gems = flaggems(x.device)
    if gems is not None and case.p.get("direction", "fwd") == "fwd":
        code = FLAGGEMS_REDUCTIONS[reduction]
        impls[FLAGGEMS_IMPL] = lambda: gems.mse_loss(x, y, code)
    return impls


def _bytes(case: Case) -> int:
    n = numel(case.p["shape"])
    size = element_size(case.dtype)
    if case.p["direction"] == "bwd":
        grad_in = n if case.p["reduction"] == "none" else 1
        return (2 * n + grad_in + 2 * n) * size
    out = n if case.p["reduction"] == "none" else 1
    return (2 * n + out) * size


def _ceiling(case: Case) -> str:
    """The forward with reduction mean or sum reads both inputs and writes one scalar: a read-only stream."""
    return READ_CEILING if case.p["direction"] == "fwd" and case.p["reduction"] != "none" else COPY_CEILING


def _flops(case: Case) -> int:
    return 3 * numel(case.p["shape"])  # subtract, multiply, add


def _launch_plans(case: Case, device: DeviceInfo) -> tuple[Launch, ...]:
    """Every launch that running ``case`` makes on ``device`` (the forward, then the backward)."""
    p = case.p
    n = numel(p["shape"])
    steps = plan_forward(n, p["reduction"], case.variant, case.dtype, device)
    if p["direction"] == "bwd":
        steps += plan_backward(n, p["reduction"], True, True, case.dtype, device)
    return steps


SPEC = KernelSpec(
    name="mse_loss",
    accuracy_cases=_accuracy_cases,
    perf_cases=_perf_cases,
    make_inputs=_make_inputs,
    run=_run,
    reference=_reference,
    implementations=_implementations,
    bytes_moved=_bytes,
    flops=_flops,
    profile_kernel=lambda case: "_mse_atomic" if case.variant == "atomic" else "_mse_persistent_kernel",
    launch_plans=_launch_plans,
    variants=VARIANTS,
    ceiling=_ceiling,
    plan_sample=4,
    # the atomic variant accumulates with one atomic_add per block: its time differs between GPUs of one model as
    # atomics' throughput does (7-11% on the two GPUs of one host, docs/design.md)
    noise=lambda case: NOISE_ATOMIC if case.variant == "atomic" else work_class(_bytes(case), _flops(case)),
    peers=(FLAGGEMS_IMPL,),
    public=("mse_loss",),
    doc=__doc__ or "",
)
