r"""Fused LayerNorm + MatMul with no intermediate write-back.

``fused_layernorm_matmul(x, weight, gamma, beta=None, bias=None, eps=1e-5)``, x ``[..., K]``, weight
``[N, K]``, gamma and beta ``[K]``, bias ``[N]``:

    y = ((x - mu) * r * gamma + beta) @ weight^T + bias,   mu = mean_k x_k,  r = 1/sqrt(var_k x_k + eps)

(the biased variance, as ``torch.nn.LayerNorm``). The normalisation is a per-row shift and scale, so
with W' = W diag(gamma) and s = W' 1 (the row sums of W'):

    (x_hat * gamma + beta) W^T + b = r (x - mu) W'^T + (beta W^T + b) = r (x W'^T - mu s^T) + c.

``fold_gamma``: a prepass writes mu and r per row (8 bytes a row); one GEMM over the raw x then applies y = r (acc -
mu s) + c in its epilogue. At decode shapes the split-K GEMM sums the statistics itself from the x tiles it loads
(one launch a call, nothing but y written). W', s and c = beta W^T + b are computed once per weight version (cached,
recomputed when weight, gamma, beta or bias change, in place too); s is summed from W' as rounded, so the correction
cancels exactly what the GEMM multiplied. The epilogue subtracts two large numbers when |mu| >> sigma (acc ~ mu s):
fp32 keeps that cancellation at 2^-24 (|mu|/sigma) relative, the third term of :func:`tolerance`. Measured (CPU
interpreter, float64 reference, |mu|/sigma = 4): fp32 budgets 0.017-0.051 for fold_gamma against 0.004-0.017 centred
(the predicted sqrt(17) = 4x), fp16/bf16 0.21-0.44 either way (the operand rounding dominates): well inside the
budget. A centring variant (``center_prologue``: each A tile normalised in the GEMM's prologue, no cancellation) ran
at 0.46-0.49x eager PyTorch on the H200 and was dropped (kernelwatch/kernels/NOTES.md); unfused PyTorch is the
faster way to a centred product. Sums in fp32. Backward is unfused (PyTorch).

Launches come from :func:`~kernelwatch.kernels.fused_layernorm_matmul.plans.plan_forward` as a tagged
:class:`~kernelwatch.kernels.norm_gemm.Plan`: the stats prepass, then the GEMM (autotuned tiles on NVIDIA, one
program per AI core on Ascend; on Hopper the persistent TMA GEMM; at decode shapes K split over programs, in one
launch), with the tile tables of :mod:`kernelwatch.kernels.norm_gemm` (the RMSNorm kernel's GEMM, tuned on the H200:
kernelwatch/kernels/NOTES.md).
"""

from __future__ import annotations

import math

import torch

from kernelwatch.kernels.fused_layernorm_matmul.api import (
    FusedLayerNormLinear,
    fused_layernorm_matmul,
    fused_layernorm_matmul_forward,
)
from kernelwatch.kernels.fused_layernorm_matmul.plans import NAME, VARIANTS, plan_forward
from kernelwatch.kernels.names import CUBLAS_IMPL, label
from kernelwatch.kernels.norm_gemm import (
    RTOL,
    accumulation_atol,
    case_dense,
    case_mnk,
    operand_atol,
    stack_cases,
    stack_inputs,
    stack_runner,
)
from kernelwatch.kernels.peers import compile_peer, flaggems_layer_norm, liger_layer_norm
from kernelwatch.kernels.plan import DeviceInfo, Step
from kernelwatch.kernels.spec import (
    COMPILE_IMPL,
    EAGER_IMPL,
    FLAGGEMS_IMPL,
    KERNEL_IMPL,
    LIGER_IMPL,
    Case,
    KernelSpec,
    Target,
    Tolerance,
    element_size,
    stack_of,
)

X_SCALE = 2.0  # x = shift + X_SCALE * N(0, 1) in the spec's inputs: |mu| / sigma = shift / X_SCALE


def tolerance(dtype: str, k: int, shift: float = 0.0) -> Tolerance:
    """Elementwise tolerance of y = r (x - mu) (gamma . w_n) + c_n from the error model of the kernel.

    With t_k = r (x_k - mu) gamma_k w_nk the exact terms of one output (RMSNorm's model,
    ``kernelwatch.kernels.fused_rmsnorm_matmul.spec.tolerance``, with x - mu for x):

    1. output rounding to ``dtype``: |e| <= u_out |y|, covered by ``rtol`` (RTOL, at least 4 u_out);
    2. one operand rounding: fold_gamma rounds W diag(gamma) once per weight (PyTorch's unfused
       layer_norm -> linear rounds its output instead): the dot sums
       t_k (1 + d_k), |d_k| <= u, so the error is near normal with sd <= u / sqrt(3) ||t||_2. LayerNorm
       makes sum_k (r (x_k - mu))^2 = K (up to eps), and w ~ N(0, 1/K), so ||t||_2^2 ~ mean of gamma^2
       (1.58 for gamma ~ U[1, 1.5]) exactly as for RMSNorm: S = OPERAND_NORM = 2, lambda = 4;
    3. fp32 accumulation of K products: ACCUMULATION_ATOL sqrt(K / 64) (random-walk growth) when x is
       centred. fold_gamma accumulates the raw x and subtracts mu s afterwards: the
       partial sums are sqrt(1 + (mu/sigma)^2) times larger before r scales them, and so is their rounding:
       term 3 grows by that factor. ``shift`` = |mu| / sigma of the inputs (the spec's x = shift * 2 + 2 N(0, 1)
       gives mu / sigma = shift). The beta W^T + b vector is summed in float64 once per weight.

    atol = lambda S u / sqrt(3) + term 3: bf16 0.0180, fp16 0.00226 at K = 64, mu = 0.
    """
    accumulation = accumulation_atol(k) * math.sqrt(1.0 + shift * shift)
    return Tolerance(RTOL[dtype], operand_atol(dtype) + accumulation)


ACCURACY_POINTS = (  # (x shape, N, bias, layout, shift = |mu| / sigma of x)
    ((1, 64), 16, True, "contiguous", 0.0),
    ((33, 257), 70, False, "contiguous", 0.0),
    ((2, 5, 96), 40, True, "contiguous", 4.0),  # a large mean: the epilogue's cancellation
    ((40, 128), 64, True, "transposed", 0.0),
    ((3, 520), 33, True, "contiguous", 4.0),
)
FOLD_POINTS = (  # fold_gamma's own paths, forward only (the slowest shapes in the interpreter)
    ((5, 1024), 1040, True, "contiguous", 0.0),  # decode (split K): a wide weight, N not a multiple of its tile
    ((130, 256), 264, True, "contiguous", 4.0),  # the Hopper path (TMA): M and N not multiples of its tiles
)
PERF_POINTS = (((1024, 8192), 4096), ((4096, 4096), 4096), ((16, 8192), 8192))
TARGET_RATIO = 1.05  # t(kernel) <= 1.05 x t(cuBLAS linear alone) on the H200: docs/kernels.md
TARGETS_DOC = "docs/kernels.md, LayerNorm+MatMul targets (H200)"


def _accuracy_cases() -> list[Case]:
    cases = []
    for variant in VARIANTS:
        for dtype in ("fp32", "fp16", "bf16"):
            points = ACCURACY_POINTS + (FOLD_POINTS if variant == "fold_gamma" else ())
            for shape, n, bias, layout, shift in points:
                for direction in ("fwd", "bwd"):
                    if direction == "bwd" and (variant != "fold_gamma" or dtype != "fp32" or shape[-1] > 520):
                        continue  # the backward is PyTorch's: one variant and dtype check its wiring
                    cases.append(
                        Case.make(
                            NAME,
                            variant,
                            dtype,
                            tolerance(dtype, shape[-1], shift),
                            shape=shape,
                            n=n,
                            bias=bias,
                            layout=layout,
                            shift=shift,
                            direction=direction,
                        )
                    )
    return cases


def _perf_cases() -> list[Case]:
    cases = []
    for variant in VARIANTS:
        for dtype in ("fp16", "bf16"):
            for shape, n in PERF_POINTS:
                target = None
                if variant == "fold_gamma":
                    target = Target(max_ratio_to=(CUBLAS_IMPL, TARGET_RATIO), source=TARGETS_DOC)
                cases.append(
                    Case.make(
                        NAME,
                        variant,
                        dtype,
                        tolerance(dtype, shape[-1]),
                        target,
                        trials=1,
                        shape=shape,
                        n=n,
                        bias=False,
                        layout="contiguous",
                        shift=0.0,
                        direction="fwd",
                    )
                )
    return cases + stack_cases(NAME, tolerance, shift=0.0)  # the model-like cases: norm_gemm.stack_cases


def _make_inputs(case: Case, device: torch.device, seed: int) -> dict:
    if stack_of(case, device) is not None:
        return {**stack_inputs(case, device, seed, beta=True), "eps": 1e-5}
    p = case.p
    shape, n = tuple(p["shape"]), p["n"]
    k = shape[-1]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dtype = case.torch_dtype
    x = X_SCALE * (p["shift"] + torch.randn(shape, generator=gen))
    w = torch.randn(n, k, generator=gen) / math.sqrt(k)
    g = 1.0 + 0.5 * torch.rand(k, generator=gen)
    beta = 0.5 * torch.randn(k, generator=gen)
    b = torch.randn(n, generator=gen) if p["bias"] else None
    x = x.to(dtype).to(device)
    if p["layout"] == "transposed":
        x = x.t().contiguous().t()
    inputs = {
        "x": x,
        "weight": w.to(dtype).to(device),
        "gamma": g.to(dtype).to(device),
        "beta": beta.to(dtype).to(device),
        "bias": b.to(dtype).to(device) if b is not None else None,
        "eps": 1e-5,
    }
    if p["direction"] == "bwd":
        inputs["dy"] = torch.randn(*shape[:-1], n, generator=gen).to(dtype).to(device)
    return inputs


def _leaves(inputs: dict) -> list[torch.Tensor | None]:
    return [inputs[name] for name in ("x", "weight", "gamma", "beta", "bias")]


def _run(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    if case.p["direction"] == "fwd":
        return (fused_layernorm_matmul(*_leaves(inputs), inputs["eps"], case.variant),)
    leaves = [t.detach().requires_grad_() if t is not None else None for t in _leaves(inputs)]
    y = fused_layernorm_matmul(*leaves, inputs["eps"], case.variant)
    return tuple(torch.autograd.grad(y, [t for t in leaves if t is not None], inputs["dy"]))


def _reference(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    leaves = [t.detach().cpu().double().requires_grad_() if t is not None else None for t in _leaves(inputs)]
    x, w, g, beta, b = leaves
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    y = torch.nn.functional.linear((x - mu) * torch.rsqrt(var + inputs["eps"]) * g + beta, w, b)
    if case.p["direction"] == "fwd":
        return (y.detach(),)
    return tuple(torch.autograd.grad(y, [t for t in leaves if t is not None], inputs["dy"].cpu().double()))


def eager_layernorm_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> torch.Tensor:
    """What a model does unfused: ``F.layer_norm`` (its output written), then ``F.linear``."""
    normed = torch.nn.functional.layer_norm(x, (x.shape[-1],), gamma, beta, eps)
    return torch.nn.functional.linear(normed, weight, bias)


def _stack_implementations(inputs: dict) -> dict:
    """Each implementation's pass over the stack: the kernel through its module (which owns its prepared weight),
    and every unfused peer as a model would write it, torch.compile of the whole stack among them."""
    x, layers, eps = inputs["x"], inputs["layers"], inputs["eps"]
    k = x.shape[-1]
    F = torch.nn.functional
    modules = [FusedLayerNormLinear.of(w, g, beta, eps=eps) for w, g, beta in layers]

    def unfused(x: torch.Tensor) -> list[torch.Tensor]:
        return [F.linear(F.layer_norm(x, (k,), g, beta, eps), w) for w, g, beta in layers]

    compiled = compile_peer(unfused)
    impls = {
        KERNEL_IMPL: stack_runner(x, modules),
        EAGER_IMPL: lambda: unfused(x),
        COMPILE_IMPL: lambda: compiled(x),
    }
    liger = liger_layer_norm(x.device)
    if liger is not None:
        calls = [lambda x, w=w, g=g, beta=beta: F.linear(liger(x, g, beta, eps), w) for w, g, beta in layers]
        impls[LIGER_IMPL] = stack_runner(x, calls)
    gems_norm = flaggems_layer_norm(x.device)
    if gems_norm is not None:
        calls = [lambda x, w=w, g=g, beta=beta: F.linear(gems_norm(x, [k], g, beta, eps), w) for w, g, beta in layers]
        impls[FLAGGEMS_IMPL] = stack_runner(x, calls)
    return impls


def _implementations(case: Case, inputs: dict) -> dict:
    if "layers" in inputs:
        return _stack_implementations(inputs)
    x, w, g, beta, b = _leaves(inputs)
    eps = inputs["eps"]
    compiled = compile_peer(eager_layernorm_linear)
    return {
        KERNEL_IMPL: lambda: fused_layernorm_matmul_forward(x, w, g, beta, b, eps, case.variant),
        EAGER_IMPL: lambda: eager_layernorm_linear(x, w, g, beta, b, eps),
        COMPILE_IMPL: lambda: compiled(x, w, g, beta, b, eps),
        CUBLAS_IMPL: lambda: torch.nn.functional.linear(x, w, b),
    }


def _bytes(case: Case) -> int:
    m, n, k = case_mnk(case)
    return (m * k + n * k + m * n + 2 * k + (n if case.p["bias"] else 0)) * element_size(case.dtype)


def _flops(case: Case) -> int:
    m, n, k = case_mnk(case)
    return 2 * m * n * k + 5 * m * k


def _launch_plans(case: Case, device: DeviceInfo) -> tuple[Step, ...]:
    """Every launch that running ``case`` makes on ``device`` (the backward is PyTorch's)."""
    m, n, k = case_mnk(case)
    return plan_forward(m, n, k, case.dtype, case.variant, True, device, case_dense(case)).steps


def _references(case: Case) -> tuple[tuple[str, str], ...]:
    """The GEMM alone, timed beside every single-call case (a stack case times the kernel and its peers only)."""
    return () if "layers" in case.p else ((CUBLAS_IMPL, label(CUBLAS_IMPL)),)


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
    # The GEMM of each path, never the statistics prepass (_ln_stats_kernel) that runs before it (not at decode).
    profile_kernel=lambda case: "_ln_gemm_tma|_ln_decode_splitk|_fused_ln_matmul",
    launch_plans=_launch_plans,
    bound="compute",
    variants=VARIANTS,
    references=_references,
    peers=(LIGER_IMPL, FLAGGEMS_IMPL),
    plan_sample=3,
    public=("fused_layernorm_matmul", "FusedLayerNormLinear"),
    doc=__doc__ or "",
)
