r"""Scaled masked softmax (Megatron-LM / apex semantics) and its causal variant.

``scaled_masked_softmax(input, mask, scale=1.0)``, input ``[b, h, sq, sk]``, mask ``[b or 1, 1, sq, sk]``
(bool or uint8, True = masked out, broadcast over heads) or None:

    y_j = exp(s x_j - m) / \sum_{k unmasked} exp(s x_k - m),   m = max_{k unmasked} s x_k
    y_j = 0 where masked; a row with every position masked is all zeros.

``scaled_upper_triang_masked_softmax(input, scale=1.0)``, input ``[attn_batches, sq, sq]``: the same
with column j > i masked in row i, no mask tensor read (and the masked half never loaded).

Backward, from the saved output only:  dx = s * y * (dy - \sum_j dy_j y_j).

Computed in fp32 for fp16, bf16 and fp32 inputs. Rows that fit one block are done in one pass
(several rows per program when rows are short); longer rows use an online-softmax pass for
(max, sum) and a second pass that writes, so any ``sk`` works. Launches come from
:func:`plan_forward` / :func:`plan_backward`: one program per row tile on NVIDIA, one program per
vector core looping over the row tiles on Ascend (at most 65,535 programs a launch there), with
tiles sized to the 192 KB unified buffer.
"""

from __future__ import annotations

import math

import torch

from kernelwatch.kernels.peers import apex_softmax, compile_peer
from kernelwatch.kernels.plan import DeviceInfo, Launch
from kernelwatch.kernels.scaled_masked_softmax.api import (
    scaled_masked_softmax,
    scaled_masked_softmax_forward,
    scaled_upper_triang_masked_softmax,
    scaled_upper_triang_masked_softmax_forward,
    softmax_backward,
)
from kernelwatch.kernels.scaled_masked_softmax.plans import plan_backward, plan_forward
from kernelwatch.kernels.spec import (
    APEX_IMPL,
    COMPILE_IMPL,
    EAGER_IMPL,
    KERNEL_IMPL,
    Case,
    KernelSpec,
    Target,
    Tolerance,
    element_size,
    numel,
)


# ---------------------------------------------------------------------------------------------
# PyTorch references
# ---------------------------------------------------------------------------------------------
def reference_forward(x: torch.Tensor, mask: torch.Tensor | None, scale: float, causal: bool = False) -> torch.Tensor:
    """float64, on the CPU; fully masked rows are zeros (this project's documented behaviour)."""
    z = x.detach().cpu().double() * scale
    if causal:
        sq = z.shape[-1]
        masked = torch.ones(sq, sq, dtype=torch.bool).triu(1).expand_as(z)
    elif mask is not None:
        masked = mask.detach().cpu().bool().expand(z.shape[0], z.shape[1], *z.shape[2:])
    else:
        masked = torch.zeros_like(z, dtype=torch.bool)
    y = torch.softmax(z.masked_fill(masked, float("-inf")), dim=-1)
    return torch.nan_to_num(y, nan=0.0).masked_fill(masked, 0.0)


def reference_backward(y64: torch.Tensor, dy: torch.Tensor, scale: float) -> torch.Tensor:
    dy64 = dy.detach().cpu().double()
    return scale * y64 * (dy64 - (dy64 * y64).sum(-1, keepdim=True))


def eager_forward(x: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """What a model does without the fused kernel: scale, masked_fill, softmax."""
    z = x * scale
    if mask is not None:
        z = z.masked_fill(mask, torch.finfo(x.dtype).min)
    return torch.softmax(z, dim=-1)


def eager_backward(y: torch.Tensor, dy: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.ops.aten._softmax_backward_data(dy, y, -1, y.dtype) * scale


APEX_MAX_SK = 16384  # apex csrc/megatron: TORCH_INTERNAL_ASSERT(key_seq_len <= 16384)
TOLERANCES = {"fp32": Tolerance(1.3e-6, 1e-5), "fp16": Tolerance(1e-3, 1e-3), "bf16": Tolerance(1.6e-2, 8e-3)}
TARGETS_DOC = "docs/kernels.md, softmax targets (H200)"
FWD_TARGET = Target(min_pct_peak=85, min_speedup_vs_eager=5, min_speedup_vs_compile=2, source=TARGETS_DOC)
BWD_TARGET = Target(min_pct_peak=80, source=TARGETS_DOC)
NAME = "scaled_masked_softmax"

# (shape, params): small enough for the CPU interpreter, covering what breaks naive kernels
ACCURACY_POINTS: tuple[tuple[tuple[int, ...], dict], ...] = (
    ((2, 3, 5, 7), {"mask": "batch", "density": 0.5}),
    ((2, 2, 16, 33), {"mask": "batch", "density": 0.1}),
    ((2, 2, 16, 33), {"mask": "shared", "density": 0.9}),
    ((1, 2, 8, 128), {"mask": "none"}),
    ((2, 1, 8, 100), {"mask": "batch", "density": 0.3, "dead_rows": 3}),
    ((1, 2, 4, 64), {"mask": "batch", "density": 0.2, "magnitude": 300.0}),
    ((1, 1, 4, 3000), {"mask": "batch", "density": 0.1}),
    ((1, 1, 2, 1), {"mask": "none"}),
    ((2, 2, 6, 48), {"mask": "batch", "density": 0.5, "mask_dtype": "uint8", "layout": "transposed"}),
)
CAUSAL_POINTS: tuple[tuple[int, ...], ...] = ((4, 37, 37), (1, 100, 100))
LONG_ROW = ((1, 1, 2, 33000), {"mask": "batch", "density": 0.1})  # beyond one block on every vendor


def _accuracy_cases() -> list[Case]:
    cases = []
    for dtype in ("fp32", "fp16", "bf16"):
        tol = TOLERANCES[dtype]
        for shape, extra in (*ACCURACY_POINTS, LONG_ROW):
            for direction in ("fwd", "bwd"):
                if shape == LONG_ROW[0] and direction == "bwd" and dtype != "fp32":
                    continue
                cases.append(
                    Case.make(NAME, "masked", dtype, tol, shape=shape, direction=direction, scale=0.125, **extra)
                )
        for shape in CAUSAL_POINTS:
            for direction in ("fwd", "bwd"):
                cases.append(Case.make(NAME, "causal", dtype, tol, shape=shape, direction=direction, scale=0.5))
    return cases


PERF_SHAPES = ((32, 16, 512, 512), (32, 16, 1024, 1024), (32, 16, 2048, 2048), (8, 16, 4096, 4096))
CAUSAL_PERF_SHAPES = ((512, 512, 512), (512, 2048, 2048))  # [attn_batches, sq, sq]: apex's two causal cases


def _perf_cases() -> list[Case]:
    cases = []
    for dtype in ("fp16", "bf16"):
        for shape in PERF_SHAPES:
            cases.append(
                Case.make(
                    NAME,
                    "masked",
                    dtype,
                    TOLERANCES[dtype],
                    FWD_TARGET,
                    trials=1,
                    shape=shape,
                    direction="fwd",
                    mask="batch",
                    density=0.1,
                    scale=0.125,
                )
            )
            cases.append(
                Case.make(
                    NAME,
                    "masked",
                    dtype,
                    TOLERANCES[dtype],
                    BWD_TARGET,
                    trials=1,
                    shape=shape,
                    direction="bwd",
                    mask="batch",
                    density=0.1,
                    scale=0.125,
                )
            )
        for shape in CAUSAL_PERF_SHAPES:
            for direction in ("fwd", "bwd"):
                cases.append(
                    Case.make(
                        NAME,
                        "causal",
                        dtype,
                        TOLERANCES[dtype],
                        None,
                        trials=1,
                        shape=shape,
                        direction=direction,
                        scale=0.125,
                    )
                )
    return cases


def _make_inputs(case: Case, device: torch.device, seed: int) -> dict:
    p = case.p
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shape = tuple(p["shape"])
    dtype = case.torch_dtype
    magnitude = p.get("magnitude", 4.0)
    big = numel(shape) > 1 << 24
    if big:  # perf-sized: generate on the device
        dgen = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(shape, generator=dgen, device=device, dtype=torch.float32).mul_(magnitude).to(dtype)
    else:
        x = (torch.randn(shape, generator=gen) * magnitude).to(dtype).to(device)
    if p.get("layout") == "transposed":
        x = x.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values, non-contiguous strides
    inputs: dict = {"x": x, "scale": p["scale"], "causal": case.variant == "causal", "mask": None}
    if case.variant == "masked" and p.get("mask", "none") != "none":
        mb = shape[0] if p["mask"] == "batch" else 1
        mshape = (mb, 1, shape[2], shape[3])
        if big:
            mask = torch.rand(mshape, generator=dgen, device=device) < p["density"]
        else:
            mask = (torch.rand(mshape, generator=gen) < p["density"]).to(device)
        if p.get("dead_rows"):
            mask[:, :, : p["dead_rows"], :] = True
        if p.get("mask_dtype") == "uint8":
            mask = mask.to(torch.uint8)
        inputs["mask"] = mask
    if p["direction"] == "bwd":
        if big:
            inputs["dy"] = torch.randn(shape, generator=dgen, device=device, dtype=torch.float32).to(dtype)
        else:
            inputs["dy"] = torch.randn(shape, generator=gen).to(dtype).to(device)
    return inputs


def _apply(inputs: dict) -> torch.Tensor:
    if inputs["causal"]:
        return scaled_upper_triang_masked_softmax(inputs["x"], inputs["scale"])
    return scaled_masked_softmax(inputs["x"], inputs["mask"], inputs["scale"])


def _run(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    if case.p["direction"] == "fwd":
        return (_apply(inputs),)
    x = inputs["x"].detach().requires_grad_()
    y = _apply({**inputs, "x": x})
    (dx,) = torch.autograd.grad(y, x, inputs["dy"])
    return (dx,)


def _reference(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    y64 = reference_forward(inputs["x"], inputs["mask"], inputs["scale"], inputs["causal"])
    if case.p["direction"] == "fwd":
        return (y64,)
    return (reference_backward(y64, inputs["dy"], inputs["scale"]),)


def _implementations(case: Case, inputs: dict) -> dict:
    x, mask, scale, causal = inputs["x"], inputs["mask"], inputs["scale"], inputs["causal"]
    user_mask = mask
    if causal:
        sq = x.shape[-1]
        mask = torch.ones(sq, sq, dtype=torch.bool, device=x.device).triu(1)
    # apex's Megatron extensions: fp16/bf16, a mask tensor for the masked variant, rows up to 16,384
    apex = (
        apex_softmax(x.device, causal)
        if x.dtype in (torch.float16, torch.bfloat16)
        and x.shape[-1] <= APEX_MAX_SK
        and x.shape[-2] > 1
        and (causal or user_mask is not None)
        else None
    )
    if case.p["direction"] == "fwd":
        kernel = (
            (lambda: scaled_upper_triang_masked_softmax_forward(x, scale))
            if causal
            else (lambda: scaled_masked_softmax_forward(x, mask, scale))
        )
        compiled = compile_peer(eager_forward)
        impls = {
            KERNEL_IMPL: kernel,
            EAGER_IMPL: lambda: eager_forward(x, mask, scale),
            COMPILE_IMPL: lambda: compiled(x, mask, scale),
        }
        if apex is not None:
            impls[APEX_IMPL] = (
                (lambda: apex.forward(x, scale)) if causal else (lambda: apex.forward(x, user_mask, scale))
            )
        return impls
    y = eager_forward(x, mask, scale)
    dy = inputs["dy"]
    compiled = compile_peer(eager_backward)
    impls = {
        KERNEL_IMPL: lambda: softmax_backward(y, dy, scale, causal),
        EAGER_IMPL: lambda: eager_backward(y, dy, scale),
        COMPILE_IMPL: lambda: compiled(y, dy, scale),
    }
    if apex is not None:  # apex's backward writes dx over its dy argument (as Megatron calls it): a copy of its own
        dy_apex = dy.clone()
        impls[APEX_IMPL] = lambda: apex.backward(dy_apex, y, scale)
    return impls


def causal_kept(shape: tuple[int, ...]) -> int:
    """Elements a causal softmax must read: the lower triangle of every ``[sq, sq]`` matrix, diagonal
    included (row i keeps columns 0..i: sq (sq + 1) / 2 per matrix)."""
    *batch, sq, _ = shape
    return math.prod(batch) * sq * (sq + 1) // 2


def _bytes(case: Case) -> int:
    """The floor's bytes: what must be read and written. Masked: x read, y written, the mask read once
    (it is shared by every head). Causal: only the lower triangle (diagonal included) is read, the whole
    output written (zeros above the diagonal); its backward reads the lower triangles of y and dy."""
    p = case.p
    shape = p["shape"]
    n = numel(shape)
    size = element_size(case.dtype)
    read = causal_kept(shape) if case.variant == "causal" else n
    if p["direction"] == "bwd":
        return (2 * read + n) * size  # read y and dy, write dx
    if case.variant == "causal":
        return (read + n) * size
    mask_bytes = 0
    if p.get("mask", "none") != "none":
        mb = shape[0] if p["mask"] == "batch" else 1
        mask_bytes = mb * shape[2] * shape[3]
    return 2 * n * size + mask_bytes


def _flops(case: Case) -> int:
    return 5 * numel(case.p["shape"])  # scale, max, exp, sum, divide


def _launch_plans(case: Case, device: DeviceInfo) -> tuple[Launch, ...]:
    """Every launch that running ``case`` makes on ``device`` (the forward, then the backward)."""
    p = case.p
    shape = p["shape"]
    sk, sq = shape[-1], shape[-2]
    heads = shape[1] if len(shape) == 4 else 1
    n_rows = numel(shape) // sk if sk else 0
    mask_dtype = "u8" if case.variant == "masked" and p.get("mask", "none") != "none" else None
    steps = plan_forward(n_rows, sq, heads, sk, case.dtype, mask_dtype, case.variant == "causal", device)
    if p["direction"] == "bwd":
        steps += plan_backward(n_rows, sk, case.dtype, device, case.variant == "causal")
    return steps


SPEC = KernelSpec(
    name=NAME,
    accuracy_cases=_accuracy_cases,
    perf_cases=_perf_cases,
    make_inputs=_make_inputs,
    run=_run,
    reference=_reference,
    implementations=_implementations,
    bytes_moved=_bytes,
    flops=_flops,
    profile_kernel=lambda case: "_softmax_bwd" if case.p["direction"] == "bwd" else "_softmax_fwd",
    launch_plans=_launch_plans,
    # Softmax writes as many bytes as it reads (MTE3 carries about half the traffic, not < 1% as in a
    # reduction) and takes an exponential per element: the MSELoss document's mte3 and vec ideals do not apply.
    profiler_ideals={"aiv_mte3_ratio": None, "aiv_vec_ratio": None},
    variants=("masked", "causal"),
    peers=(APEX_IMPL,),
    public=("scaled_masked_softmax", "scaled_upper_triang_masked_softmax"),
    doc=__doc__ or "",
)
