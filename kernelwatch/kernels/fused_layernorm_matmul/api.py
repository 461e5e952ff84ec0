"""The PyTorch API of Fused LayerNorm + MatMul: the launcher (:func:`fused_layernorm_matmul_forward`), the
autograd function (an unfused PyTorch backward), :func:`fused_layernorm_matmul` and
:class:`FusedLayerNormLinear`.

What a forward derives from the parameters (W' = W diag(gamma), s = W' 1 and c = beta W^T + b) is cached per
weight version in :data:`PREPARED`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernelwatch.kernels.device import describe
from kernelwatch.kernels.fused_layernorm_matmul.plans import FLAGS, NAME, VARIANTS, autotuned_kernel, forward_plan
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


@dataclass(frozen=True)
class Prepared:
    weight: torch.Tensor  # W' = W diag(gamma), contiguous, in x's dtype
    colsum: torch.Tensor  # fp32 row sums of ``weight`` as stored
    c: torch.Tensor | None  # fp32 beta W^T + b, None when neither is given


def prepare(
    weight: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None, bias: torch.Tensor | None
) -> Prepared:
    """W', its row sums s as rounded (so the correction cancels exactly what the GEMM multiplied) and
    c = beta W^T + b, summed in float64."""
    w = fold_gamma(weight, gamma)
    with torch.no_grad():
        colsum = w.float().sum(1)
        c = None
        if beta is not None:
            c = weight.double().matmul(beta.double()).float()
        if bias is not None:
            c = bias.float() if c is None else c + bias.float()
    return Prepared(w, colsum, c)


class PreparedWeightCache:
    """What a forward derives from (weight, gamma, beta, bias), per object identity and version (in-place
    updates bump it)."""

    def __init__(self, capacity: int = 16) -> None:
        self._prepared = VersionedCache(capacity)

    def get(
        self,
        weight: torch.Tensor,
        gamma: torch.Tensor,
        beta: torch.Tensor | None,
        bias: torch.Tensor | None,
    ) -> Prepared:
        return self._prepared.get((weight, gamma, beta, bias), (), lambda: prepare(weight, gamma, beta, bias))

    def clear(self) -> None:
        self._prepared.clear()


PREPARED = PreparedWeightCache()
DECODE_SCRATCH = DecodeScratch()


def fused_layernorm_matmul_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    variant: str = "fold_gamma",
) -> torch.Tensor:
    """Forward only (what the collector times)."""
    check_inputs(NAME, x, weight, gamma, bias, beta)
    if variant not in VARIANTS:
        raise ValueError(f"{NAME}: variant must be one of {VARIANTS}, got {variant!r}")
    k, n = x.shape[-1], weight.shape[0]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    y = new_output((m, n), x.dtype, x.device)
    if m == 0 or n == 0:
        return y.reshape(*x.shape[:-1], n)
    prep = PREPARED.get(weight, gamma, beta, bias)
    w, has_c = prep.weight, prep.c is not None
    plan = forward_plan(m, n, k, DTYPE_NAMES[x.dtype], variant, has_c, describe(x.device), dense(x2, w, y))
    stats, gemm = plan.steps
    mean = new_output((m,), torch.float32, x.device)
    rstd = new_output((m,), torch.float32, x.device)
    launch(stats, x2, mean, rstd, m, k, x2.stride(0), x2.stride(1), float(eps))
    c = prep.c if has_c else mean  # an unused pointer when HAS_C is off
    colsum = prep.colsum
    if plan.path == "hopper":
        launch(gemm, *hopper_descriptors(gemm, x2, w, {}, y), mean, rstd, colsum, c, m, n, k)
    elif plan.path == "decode":
        parts, counts = DECODE_SCRATCH.views(gemm, x.device, row_sums=False)
        w_arg = decode_weight(gemm, w, {})
        launch(gemm, x2, w_arg, parts, counts, mean, rstd, colsum, c, y, m, n, k, x2.stride(0))
    else:
        args = (x2, w, mean, rstd, colsum, c, y, m, n, k, x2.stride(0), x2.stride(1), w.stride(0), w.stride(1))
        launch_tiles(gemm, autotuned_kernel, FLAGS, m, n, *args, y.stride(0))
    return y.reshape(*x.shape[:-1], n)


def layernorm_linear_reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> torch.Tensor:
    """The same function in PyTorch, in fp32 (at least) where it matters: what the backward differentiates."""
    up = torch.float64 if x.dtype == torch.float64 else torch.float32
    xn = torch.nn.functional.layer_norm(
        x.to(up), (x.shape[-1],), gamma.to(up), beta.to(up) if beta is not None else None, eps
    )
    return torch.nn.functional.linear(xn, weight.to(up), bias.to(up) if bias is not None else None)


class FusedLayerNormMatmulFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, gamma, beta, bias, eps, variant):
        ctx.save_for_backward(x, weight, gamma, beta, bias)
        ctx.eps = eps
        if x.dtype == torch.float64:  # only gradcheck gets here (the public function refuses fp64): the
            # kernels take fp16/bf16/fp32, so in float64 the forward is the reference and the check is the backward's
            return layernorm_linear_reference(x, weight, gamma, beta, bias, eps)
        return fused_layernorm_matmul_forward(x, weight, gamma, beta, bias, eps, variant)

    @staticmethod
    def backward(ctx, dy):
        saved = ctx.saved_tensors
        inputs = [
            t.detach().requires_grad_(need) if t is not None else None
            for t, need in zip(saved, ctx.needs_input_grad[:5])
        ]
        with torch.enable_grad():
            y = layernorm_linear_reference(*inputs, ctx.eps)
            wanted = [t for t in inputs if t is not None and t.requires_grad]
            grads = iter(torch.autograd.grad(y, wanted, dy.to(y.dtype)))
        out = [next(grads).to(t.dtype) if t is not None and t.requires_grad else None for t in inputs]
        return (*out, None, None)


def fused_layernorm_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    variant: str = "fold_gamma",
) -> torch.Tensor:
    """((x - mean) / sqrt(var + eps) * gamma + beta) @ weight^T + bias, without writing the normalised x."""
    check_inputs(NAME, x, weight, gamma, bias, beta)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, gamma, beta, bias)):
        return FusedLayerNormMatmulFunction.apply(x, weight, gamma, beta, bias, eps, variant)
    return fused_layernorm_matmul_forward(x, weight, gamma, beta, bias, eps, variant)


class FusedLayerNormLinear(torch.nn.Module):
    """LayerNorm(dim) followed by Linear(dim, hidden), fused: parameters gamma, beta, weight and bias."""

    def __init__(self, dim: int, hidden: int, eps: float = 1e-5, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.eps = eps
        self.gamma = torch.nn.Parameter(torch.ones(dim, **factory))
        self.beta = torch.nn.Parameter(torch.zeros(dim, **factory))
        self.weight = torch.nn.Parameter(torch.empty(hidden, dim, **factory))
        self.bias = torch.nn.Parameter(torch.zeros(hidden, **factory)) if bias else None
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_layernorm_matmul(x, self.weight, self.gamma, self.beta, self.bias, self.eps)

    def extra_repr(self) -> str:
        hidden, dim = self.weight.shape
        return f"dim={dim}, hidden={hidden}, eps={self.eps}, bias={self.bias is not None}"
