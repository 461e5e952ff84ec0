"""The PyTorch API of Fused RMSNorm + MatMul: the launcher (:func:`fused_rmsnorm_matmul_forward`), the autograd
function (an unfused PyTorch backward), :func:`fused_rmsnorm_matmul` and :class:`FusedRMSLinear`.

gamma is either folded into the weight once per weight version (``fold_gamma``: W' = W diag(gamma), recomputed
when weight or gamma change, in place too) or multiplied into each A tile in the prologue (``prologue_gamma``).
The fold lives where the weights live (:class:`~kernelwatch.kernels.norm_gemm.WeightSlot`): a module owns its
slot; the functional API takes one from :data:`FOLDED`, which keeps it as long as the tensors it came from.
Beside the fold, a slot keeps W''s TMA descriptors and one launcher per input key (shape, strides, dtype,
device, alignment, variant, eps), so a call that hits it checks nothing, plans nothing and builds only the
descriptors of its own x and y: the host path of a model that calls the kernel layer after layer."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from kernelwatch.kernels.device import describe
from kernelwatch.kernels.fused_rmsnorm_matmul.plans import FLAGS, NAME, VARIANTS, autotuned_kernel, forward_plan
from kernelwatch.kernels.norm_gemm import (
    DecodeScratch,
    WeightCache,
    WeightSlot,
    check_inputs,
    decode_weight,
    dense,
    descriptor_template,
    fold_gamma,
    launch_tiles,
    rebased,
    weight_descriptor,
)
from kernelwatch.kernels.plan import DeviceInfo, launch
from kernelwatch.kernels.poison import new_output
from kernelwatch.kernels.spec import DTYPE_NAMES


class FoldedWeightCache:
    """W diag(gamma) per (weight, gamma, bias) for the functional API: a :class:`WeightSlot` each, living as long
    as those tensors (:class:`~kernelwatch.kernels.norm_gemm.WeightCache`)."""

    def __init__(self) -> None:
        self._slots = WeightCache()

    def slot(self, weight: torch.Tensor, gamma: torch.Tensor, bias: torch.Tensor | None, fold: bool) -> WeightSlot:
        return self._slots.slot((weight, gamma, bias), fold)

    def get(self, weight: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
        """W diag(gamma), folded once per version of the two."""
        return self.slot(weight, gamma, None, True).get((weight, gamma, None), lambda: fold_gamma(weight, gamma))

    def __len__(self) -> int:
        return len(self._slots)

    def clear(self) -> None:
        self._slots.clear()


FOLDED = FoldedWeightCache()
DECODE_SCRATCH = DecodeScratch()
Launcher = Callable[[torch.Tensor], torch.Tensor]


def _launcher(
    x: torch.Tensor,
    info: DeviceInfo,
    w: torch.Tensor,
    descs: dict,
    gamma: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    variant: str,
) -> Launcher:
    """Every call with x's key: the plan, the weight's arguments and descriptors, looked up once here."""
    k, n = x.shape[-1], w.shape[0]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    lead, dtype, device = (*x.shape[:-1], n), x.dtype, x.device
    y = new_output((m, n), dtype, device)
    if m == 0 or n == 0:
        return lambda x: new_output(lead, dtype, device)
    plan = forward_plan(m, n, k, DTYPE_NAMES[dtype], variant, bias is not None, info, dense(x2, w, y))
    steps, eps = plan.steps, float(eps)
    sxm, sxk = x2.stride(0), x2.stride(1)
    if plan.path == "hopper":
        prepass, gemm = steps
        c = gemm.constexprs
        a_t, c_t = descriptor_template(x2, (c["BM"], c["BK"])), descriptor_template(y, (c["BM"], c["BN"]))
        b = weight_descriptor(w, descs, (c["BN"], c["BK"]))

        def hopper(x: torch.Tensor) -> torch.Tensor:
            x2 = x.reshape(-1, k)
            y = new_output((m, n), dtype, device)
            rstd = new_output((m,), torch.float32, device)
            launch(prepass, x2, rstd, m, k, sxm, sxk, eps)
            launch(gemm, rebased(a_t, x2), b, rebased(c_t, y), rstd, bias if bias is not None else y, m, n, k)
            return y.view(lead)

        return hopper
    if plan.path == "decode":
        (step,) = steps
        parts, sums, counts = DECODE_SCRATCH.views(step, device, row_sums=1)
        w_arg = decode_weight(step, w, descs)

        def decode(x: torch.Tensor) -> torch.Tensor:
            x2 = x.reshape(-1, k)
            y = new_output((m, n), dtype, device)
            launch(step, x2, w_arg, parts, sums, counts, bias if bias is not None else y, y, m, n, k, sxm, eps)
            return y.view(lead)

        return decode
    swn, swk, sym = w.stride(0), w.stride(1), y.stride(0)

    def tiles(x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, k)
        y = new_output((m, n), dtype, device)
        rstd = y
        if variant == "rstd_prepass":
            rstd = new_output((m,), torch.float32, device)
            launch(steps[0], x2, rstd, m, k, sxm, sxk, eps)
        bias_arg = bias if bias is not None else y
        args = (x2, w, gamma, bias_arg, rstd, y, m, n, k, sxm, sxk, swn, swk, sym)
        launch_tiles(steps[-1], autotuned_kernel, FLAGS, m, n, *args, eps)
        return y.view(lead)

    return tiles


def fused_rmsnorm_matmul_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    bias: torch.Tensor | None = None,
    eps: float = 1e-6,
    variant: str = "fold_gamma",
    slot: WeightSlot | None = None,
) -> torch.Tensor:
    """Forward only (what the collector times). ``slot``: where the fold and the launchers live (a module's
    own); by default :data:`FOLDED`'s slot of these tensors."""
    fold = variant != "prologue_gamma"
    tensors = (weight, gamma, bias)
    if slot is None:
        slot = FOLDED.slot(weight, gamma, bias, fold)
    if not slot.current(tensors):
        check_inputs(NAME, x, weight, gamma, bias)
        slot.rebuild(tensors, (lambda: fold_gamma(weight, gamma)) if fold else (lambda: weight))
    info = describe(x.device)  # a simulated device (tests) plans differently from the CPU's own
    key = (x.shape, x.stride(), x.dtype, info, x.data_ptr() & 15, variant, eps)
    run = slot.calls.get(key)
    if run is None:
        check_inputs(NAME, x, weight, gamma, bias)
        if variant not in VARIANTS:
            raise ValueError(f"{NAME}: variant must be one of {VARIANTS}, got {variant!r}")
        if fold != (slot.value is not weight):
            raise ValueError(f"{NAME}: variant {variant!r} called with a slot made for another variant")
        run = slot.calls[key] = _launcher(x, info, slot.value, slot.descs, gamma, bias, eps, variant)
    return run(x)


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
    def forward(ctx, x, weight, gamma, bias, eps, variant, slot=None):
        ctx.save_for_backward(x, weight, gamma, bias)
        ctx.eps = eps
        return fused_rmsnorm_matmul_forward(x, weight, gamma, bias, eps, variant, slot)

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
        return (*out, None, None, None)


def fused_rmsnorm_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    bias: torch.Tensor | None = None,
    eps: float = 1e-6,
    variant: str = "fold_gamma",
    slot: WeightSlot | None = None,
) -> torch.Tensor:
    """(x / sqrt(mean(x^2) + eps) * gamma) @ weight^T + bias, without writing the normalised x. ``slot``: where
    the folded weight lives (a module passes its own; see :func:`fused_rmsnorm_matmul_forward`)."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, gamma, bias)):
        return FusedRMSNormMatmulFunction.apply(x, weight, gamma, bias, eps, variant, slot)
    return fused_rmsnorm_matmul_forward(x, weight, gamma, bias, eps, variant, slot)


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
        self.folded = WeightSlot()  # W diag(gamma), its descriptors and launchers: rebuilt when a parameter changes

    @classmethod
    def of(
        cls,
        weight: torch.Tensor,
        gamma: torch.Tensor,
        bias: torch.Tensor | None = None,
        eps: float = 1e-6,
        requires_grad: bool = False,
    ) -> FusedRMSLinear:
        """A layer over these tensors (shared, not copied): weight ``[hidden, dim]``, gamma ``[dim]``, bias."""
        hidden, dim = weight.shape
        layer = cls(dim, hidden, eps, bias is not None, device="meta", dtype=weight.dtype)
        layer.weight = torch.nn.Parameter(weight, requires_grad=requires_grad)
        layer.gamma = torch.nn.Parameter(gamma, requires_grad=requires_grad)
        layer.bias = torch.nn.Parameter(bias, requires_grad=requires_grad) if bias is not None else None
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_rmsnorm_matmul(x, self.weight, self.gamma, self.bias, self.eps, slot=self.folded)

    def extra_repr(self) -> str:
        hidden, dim = self.weight.shape
        return f"dim={dim}, hidden={hidden}, eps={self.eps}, bias={self.bias is not None}"


# ---------------------------------------------------------------------------------------------
