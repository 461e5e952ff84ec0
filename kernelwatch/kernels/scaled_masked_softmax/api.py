"""The PyTorch API of the scaled masked softmax: the launchers, the autograd functions,
:func:`scaled_masked_softmax` and :func:`scaled_upper_triang_masked_softmax`."""

from __future__ import annotations

import math

import torch

from kernelwatch.kernels.device import describe
from kernelwatch.kernels.plan import launch
from kernelwatch.kernels.poison import new_output
from kernelwatch.kernels.scaled_masked_softmax.plans import FLOAT_DTYPES, backward_plan, forward_plan
from kernelwatch.kernels.spec import DTYPE_NAMES

LOG2E = 1.4426950408889634


def _check_input(x: torch.Tensor, rank: int, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: input must be a tensor")
    if x.dim() != rank:
        shape = "[b, h, sq, sk]" if rank == 4 else "[attn_batches, sq, sq]"
        raise ValueError(f"{name}: input must be {shape} ({rank}-d), got shape {tuple(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported (fp16, bf16, fp32; fp64 for gradcheck)")


def _check_mask(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    b, _, sq, sk = x.shape
    if not isinstance(mask, torch.Tensor):
        raise TypeError("scaled_masked_softmax: mask must be a tensor or None")
    if mask.dtype not in (torch.bool, torch.uint8):
        raise TypeError(f"scaled_masked_softmax: mask dtype must be bool or uint8, got {mask.dtype}")
    if mask.dim() != 4 or mask.shape[0] not in (1, b) or tuple(mask.shape[1:]) != (1, sq, sk):
        raise ValueError(
            f"scaled_masked_softmax: mask shape {tuple(mask.shape)} does not fit input "
            f"{tuple(x.shape)}: expected [{b} or 1, 1, {sq}, {sk}]"
        )
    if mask.device != x.device:
        raise ValueError(f"scaled_masked_softmax: input on {x.device}, mask on {mask.device}")
    mask = mask.contiguous()
    return mask.view(torch.uint8) if mask.dtype == torch.bool else mask


def _forward(x: torch.Tensor, mask: torch.Tensor | None, scale: float, causal: bool) -> torch.Tensor:
    x = x.contiguous()
    sk = x.shape[-1]
    sq = x.shape[-2]
    heads = x.shape[1] if x.dim() == 4 else 1
    n_rows = x.numel() // sk if sk else 0
    y = new_output(x.shape, x.dtype, x.device)
    if n_rows == 0:
        return y
    has_mask = mask is not None
    m = mask if has_mask else x
    mask_sb = (0 if mask.shape[0] == 1 else sq * sk) if has_mask else 0
    (step,) = forward_plan(
        n_rows, sq, heads, sk, DTYPE_NAMES[x.dtype], "u8" if has_mask else None, causal, describe(x.device)
    )
    launch(step, x, m, y, n_rows, sk, sq, heads, mask_sb, sk, float(scale) * LOG2E)
    return y


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, scale: float, causal: bool = False) -> torch.Tensor:
    """dx = scale * y * (dy - sum(dy * y)) along the last dimension; ``causal``: y of
    :func:`scaled_upper_triang_masked_softmax` (zero above the diagonal), whose upper triangles are not read."""
    y, dy = y.contiguous(), dy.contiguous()
    sk = y.shape[-1]
    n_rows = y.numel() // sk if sk else 0
    dx = new_output(y.shape, y.dtype, y.device)
    if n_rows == 0:
        return dx
    (step,) = backward_plan(n_rows, sk, DTYPE_NAMES[y.dtype], describe(y.device), causal)
    launch(step, y, dy, dx, n_rows, sk, float(scale))
    return dx


def scaled_masked_softmax_forward(input: torch.Tensor, mask: torch.Tensor | None, scale: float = 1.0) -> torch.Tensor:
    """Forward only (what the collector times); checks its arguments."""
    _check_input(input, 4, "scaled_masked_softmax")
    m = _check_mask(input, mask) if mask is not None else None
    return _forward(input, m, scale, causal=False)


def scaled_upper_triang_masked_softmax_forward(input: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    _check_input(input, 3, "scaled_upper_triang_masked_softmax")
    if input.shape[1] != input.shape[2]:
        raise ValueError(
            f"scaled_upper_triang_masked_softmax: input must be square in its last two "
            f"dimensions, got {tuple(input.shape)}"
        )
    return _forward(input, None, scale, causal=True)


class ScaledMaskedSoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, mask, scale):
        y = scaled_masked_softmax_forward(input, mask, scale)
        ctx.save_for_backward(y)
        ctx.scale = scale
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return softmax_backward(y, dy, ctx.scale), None, None


class ScaledUpperTriangMaskedSoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, scale):
        y = scaled_upper_triang_masked_softmax_forward(input, scale)
        ctx.save_for_backward(y)
        ctx.scale = scale
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return softmax_backward(y, dy, ctx.scale, causal=True), None


def _check_scale(scale: float) -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise TypeError(f"scale must be a finite number, got {scale!r}")
    return float(scale)


def scaled_masked_softmax(input: torch.Tensor, mask: torch.Tensor | None, scale: float = 1.0) -> torch.Tensor:
    """softmax(scale * input) over the last dim with ``mask`` (True = masked) excluded; differentiable."""
    scale = _check_scale(scale)
    if torch.is_grad_enabled() and input.requires_grad:
        return ScaledMaskedSoftmaxFunction.apply(input, mask, scale)
    return scaled_masked_softmax_forward(input, mask, scale)


def scaled_upper_triang_masked_softmax(input: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Causal softmax(scale * input) of ``[attn_batches, sq, sq]``; differentiable."""
    scale = _check_scale(scale)
    if torch.is_grad_enabled() and input.requires_grad:
        return ScaledUpperTriangMaskedSoftmaxFunction.apply(input, scale)
    return scaled_upper_triang_masked_softmax_forward(input, scale)
