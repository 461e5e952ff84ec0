"""The PyTorch API of MSELoss: the launchers, the autograd function and :func:`mse_loss`."""

from __future__ import annotations

import torch

from kernelwatch.kernels.device import describe
from kernelwatch.kernels.mse_loss.plans import REDUCTIONS, VARIANTS, backward_plan, forward_plan
from kernelwatch.kernels.plan import launch
from kernelwatch.kernels.poison import new_output
from kernelwatch.kernels.spec import DTYPE_NAMES

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _check(input: torch.Tensor, target: torch.Tensor, reduction: str, variant: str) -> None:
    if not isinstance(input, torch.Tensor) or not isinstance(target, torch.Tensor):
        raise TypeError("mse_loss: input and target must be tensors")
    if (
        input.dtype is target.dtype
        and input.dtype in _FLOATS
        and reduction in REDUCTIONS
        and variant in VARIANTS
        and input.shape == target.shape
        and input.get_device() == target.get_device()
    ):
        return  # every call pays for this line only (each check below costs about a microsecond)
    if input.shape != target.shape:
        raise ValueError(
            f"mse_loss: input shape {tuple(input.shape)} != target shape {tuple(target.shape)} (no broadcasting)"
        )
    if input.dtype != target.dtype:
        raise TypeError(f"mse_loss: input dtype {input.dtype} != target dtype {target.dtype}")
    if input.dtype not in _FLOATS:
        raise TypeError(f"mse_loss: dtype {input.dtype} is not supported (fp32, fp16, bf16)")
    if input.device != target.device:
        raise ValueError(f"mse_loss: input on {input.device}, target on {target.device}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"mse_loss: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if variant not in VARIANTS:
        raise ValueError(f"mse_loss: variant must be one of {VARIANTS}, got {variant!r}")


def _flat(t: torch.Tensor) -> torch.Tensor:
    """The elements in memory order. A contiguous tensor already is that (no view: the kernels index a
    flat pointer, and a view costs a microsecond on every call)."""
    return t if t.is_contiguous() else t.contiguous()


_SCRATCH: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def _scratch(device: torch.device, partials: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 partial sums, a zeroed int32 the fused finish counts programs with and resets to 0), kept per
    device so that a call allocates nothing but its output (an allocation costs ~3 us a call).

    One per device: two persistent reductions running at once on different streams of one device
    would share them, which this kernel does not support.
    """
    held = _SCRATCH.get(device)
    if held is None or held[0].numel() < partials:
        held = _SCRATCH[device] = (
            torch.empty(max(partials, 1024), dtype=torch.float32, device=device),
            torch.zeros(1, dtype=torch.int32, device=device),
        )
    return held


def _reduce(x: torch.Tensor, y: torch.Tensor, reduction: str, variant: str) -> torch.Tensor:
    n = x.numel()
    out = new_output((), x.dtype, x.device)
    scale = (1.0 / n if n else float("nan")) if reduction == "mean" else 1.0
    if n == 0:
        return out.fill_(scale * 0.0)
    xf, yf = _flat(x), _flat(y)
    steps = forward_plan(n, reduction, variant, DTYPE_NAMES[x.dtype], describe(x.device))
    if variant == "atomic":
        atomic, finish = steps
        acc = torch.zeros(1, dtype=torch.float32, device=x.device)
        launch(atomic, xf, yf, acc, n)
        launch(finish, acc, out, 1, scale)
        return out
    main = steps[0]
    if main.constexprs["SINGLE"]:
        launch(main, xf, yf, out, out, out, n, scale)
        return out
    fused = main.constexprs["FUSED_FINISH"]
    partials, counter = _scratch(x.device, main.grid[0])
    launch(main, xf, yf, partials, out, counter if fused else out, n, scale)
    if not fused:
        launch(steps[1], partials, out, main.grid[0], scale)
    return out


def mse_loss_forward(
    input: torch.Tensor, target: torch.Tensor, reduction: str = "mean", variant: str = "persistent"
) -> torch.Tensor:
    """Forward only, no autograd bookkeeping (what the collector times)."""
    if reduction != "none":
        return _reduce(input, target, reduction, variant)
    out = new_output(input.shape, input.dtype, input.device)
    n = input.numel()
    if n:
        (step,) = forward_plan(n, reduction, variant, DTYPE_NAMES[input.dtype], describe(input.device))
        launch(step, _flat(input), _flat(target), out, n)
    return out


def mse_loss_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    target: torch.Tensor,
    reduction: str,
    need_input: bool = True,
    need_target: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(d loss/d input, d loss/d target), each in the inputs' shape and dtype."""
    n = input.numel()
    gx = new_output(input.shape, input.dtype, input.device) if need_input else None
    gy = new_output(input.shape, input.dtype, input.device) if need_target else None
    if n == 0 or not (need_input or need_target):
        return gx, gy
    scale = 1.0 / n if reduction == "mean" else 1.0
    g = grad_output.reshape(()) if reduction != "none" else _flat(grad_output.expand(input.shape))
    (step,) = backward_plan(n, reduction, need_input, need_target, DTYPE_NAMES[input.dtype], describe(input.device))
    dummy = gx if gx is not None else gy
    launch(
        step, _flat(input), _flat(target), g, gx if gx is not None else dummy, gy if gy is not None else dummy, n, scale
    )
    return gx, gy


class MSELossFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, target, reduction, variant):
        ctx.save_for_backward(input, target)
        ctx.reduction = reduction
        return mse_loss_forward(input, target, reduction, variant)

    @staticmethod
    def backward(ctx, grad_output):
        input, target = ctx.saved_tensors
        gx, gy = mse_loss_backward(
            grad_output, input, target, ctx.reduction, ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        )
        return gx, gy, None, None


def mse_loss(
    input: torch.Tensor, target: torch.Tensor, reduction: str = "mean", variant: str = "persistent"
) -> torch.Tensor:
    """``torch.nn.functional.mse_loss`` in Triton; differentiable w.r.t. both arguments."""
    _check(input, target, reduction, variant)
    if torch.is_grad_enabled() and (input.requires_grad or target.requires_grad):
        return MSELossFunction.apply(input, target, reduction, variant)
    return mse_loss_forward(input, target, reduction, variant)
