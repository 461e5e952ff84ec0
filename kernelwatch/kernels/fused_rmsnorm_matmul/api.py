"""The PyTorch API of Fused RMSNorm + MatMul: the launcher (:func:`fused_rmsnorm_matmul_forward`), the autograd
function (an unfused PyTorch backward), :func:`fused_rmsnorm_matmul` and :class:`FusedRMSLinear`.

gamma is either folded into the weight once per weight version (``fold_gamma``: W' = W diag(gamma), cached in
:data:`FOLDED`, recomputed when weight or gamma change, in place too) or multiplied into each A tile in the
prologue (``prologue_gamma``)."""

from __future__ import annotations

import math

import torch

from kernelwatch.kernels.device import describe
from kernelwatch.kernels.fused_rmsnorm_matmul.plans import FLAGS, NAME, VARIANTS, autotuned_kernel, forward_plan
from kernelwatch.kernels.norm_gemm import (
    DecodeScratch,
    VersionedCache,
    check_inputs,
    decode_weight,
    dense,
    fold_gamma,
    hopper_descriptors,
    launch_tiles,
)
from kernelwatch.kernels.plan import launch
from kernelwatch.kernels.poison import new_output
from kernelwatch.kernels.spec import DTYPE_NAMES


class FoldedWeightCache:
    """W diag(gamma) per (weight, gamma) object and version; in-place updates bump the version.

    Beside each folded weight: its TMA descriptors by block shape (:meth:`descriptors`), built on first
    use and dropped with the entry, so a decode loop builds none per call."""

    def __init__(self, capacity: int = 16) -> None:
        self._descriptors: dict[int, tuple[torch.Tensor, dict]] = {}  # id(folded) -> (folded, {block: desc})
        self._folded = VersionedCache(capacity, on_drop=lambda folded: self._descriptors.pop(id(folded), None))

    def descriptors(self, folded: torch.Tensor) -> dict:
        """The block-shape -> descriptor dict of a weight this cache returned (a fresh, uncached dict for any
        other tensor: the prologue variant's raw weight)."""
        held = self._descriptors.get(id(folded))
        return held[1] if held is not None and held[0] is folded else {}

    def get(self, weight: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
        def make() -> torch.Tensor:
            folded = fold_gamma(weight, gamma)
            self._descriptors[id(folded)] = (folded, {})
            return folded

        return self._folded.get((weight, gamma), (), make)

    def clear(self) -> None:
        self._folded.clear()
        self._descriptors.clear()


FOLDED = FoldedWeightCache()
DECODE_SCRATCH = DecodeScratch()


def fused_rmsnorm_matmul_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    bias: torch.Tensor | None = None,
    eps: float = 1e-6,
    variant: str = "fold_gamma",
) -> torch.Tensor:
    """Forward only (what the collector times)."""
    check_inputs(NAME, x, weight, gamma, bias)
    if variant not in VARIANTS:
        raise ValueError(f"{NAME}: variant must be one of {VARIANTS}, got {variant!r}")
    k = x.shape[-1]
    n = weight.shape[0]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    y = new_output((m, n), x.dtype, x.device)
    if m == 0 or n == 0:
        return y.reshape(*x.shape[:-1], n)
    prologue = variant == "prologue_gamma"
    w = weight if prologue else FOLDED.get(weight, gamma)
    plan = forward_plan(m, n, k, DTYPE_NAMES[x.dtype], variant, bias is not None, describe(x.device), dense(x2, w, y))
    steps, eps = plan.steps, float(eps)
    bias_arg = bias if bias is not None else y
    if plan.path == "hopper":
        prepass, gemm = steps
        rstd = new_output((m,), torch.float32, x2.device)
        launch(prepass, x2, rstd, m, k, x2.stride(0), x2.stride(1), eps)
        launch(gemm, *hopper_descriptors(gemm, x2, w, FOLDED.descriptors(w), y), rstd, bias_arg, m, n, k)
        return y.reshape(*x.shape[:-1], n)
    if plan.path == "decode":
        (step,) = steps
        parts, sums, counts = DECODE_SCRATCH.views(step, x2.device, row_sums=True)
        w_arg = decode_weight(step, w, FOLDED.descriptors(w))
        launch(step, x2, w_arg, parts, sums, counts, bias_arg, y, m, n, k, x2.stride(0), eps)
        return y.reshape(*x.shape[:-1], n)
    rstd = y
    if variant == "rstd_prepass":
        rstd = new_output((m,), torch.float32, x.device)
        launch(steps[0], x2, rstd, m, k, x2.stride(0), x2.stride(1), eps)
    args = (x2, w, gamma, bias_arg, rstd, y, m, n, k, x2.stride(0), x2.stride(1), w.stride(0), w.stride(1), y.stride(0))
    launch_tiles(steps[-1], autotuned_kernel, FLAGS, m, n, *args, eps)
    return y.reshape(*x.shape[:-1], n)


def rmsnorm_linear_reference(
    x: torch.Tensor, weight: torch.Tensor, gamma: torch.Tensor, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """The same function in PyTorch, in x's precision promoted to fp32 where it matters (for autograd)."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    y = torch.nn.functional.linear(
        xf * rstd * gamma.float(), weight.float(), bias.float() if bias is not None else None
    )
    return y


class FusedRMSNormMatmulFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, gamma, bias, eps, variant):
        ctx.save_for_backward(x, weight, gamma, bias)
        ctx.eps = eps
        return fused_rmsnorm_matmul_forward(x, weight, gamma, bias, eps, variant)

    @staticmethod
    def backward(ctx, dy):
        x, weight, gamma, bias = ctx.saved_tensors
        inputs = [
            t.detach().requires_grad_(need) if t is not None else None
            for t, need in zip((x, weight, gamma, bias), ctx.needs_input_grad[:4])
        ]
        with torch.enable_grad():
            y = rmsnorm_linear_reference(*inputs, ctx.eps)
            wanted = [t for t in inputs if t is not None and t.requires_grad]
            grads = iter(torch.autograd.grad(y, wanted, dy.float()))
        out = [next(grads).to(t.dtype) if t is not None and t.requires_grad else None for t in inputs]
        return (*out, None, None)


def fused_rmsnorm_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    bias: torch.Tensor | None = None,
    eps: float = 1e-6,
    variant: str = "fold_gamma",
) -> torch.Tensor:
    """(x / sqrt(mean(x^2) + eps) * gamma) @ weight^T + bias, without writing the normalised x."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, gamma, bias)):
        return FusedRMSNormMatmulFunction.apply(x, weight, gamma, bias, eps, variant)
    return fused_rmsnorm_matmul_forward(x, weight, gamma, bias, eps, variant)


class FusedRMSLinear(torch.nn.Module):
    """RMSNorm(dim) followed by Linear(dim, hidden), fused: parameters gamma, weight and bias."""

    def __init__(self, dim: int, hidden: int, eps: float = 1e-6, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.eps = eps
        self.gamma = torch.nn.Parameter(torch.ones(dim, **factory))
        self.weight = torch.nn.Parameter(torch.empty(hidden, dim, **factory))
        self.bias = torch.nn.Parameter(torch.zeros(hidden, **factory)) if bias else None
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_rmsnorm_matmul(x, self.weight, self.gamma, self.bias, self.eps)

    def extra_repr(self) -> str:
        hidden, dim = self.weight.shape
        return f"dim={dim}, hidden={hidden}, eps={self.eps}, bias={self.bias is not None}"


# ---------------------------------------------------------------------------------------------
