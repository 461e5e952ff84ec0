"""The PyTorch API of Fused LayerNorm + MatMul: the launcher (:func:`fused_layernorm_matmul_forward`), the
autograd function (an unfused PyTorch backward), :func:`fused_layernorm_matmul` and
:class:`FusedLayerNormLinear`.

What a forward derives from the parameters (W' = W diag(gamma), s = W' 1 and c = beta W^T + b) lives where the
weights live, rebuilt when one of them changes (:class:`~kernelwatch.kernels.norm_gemm.WeightSlot`): a module owns
its slot, the functional API takes one from :data:`PREPARED`. Beside it, W''s TMA descriptors and a launcher per
input key, as in :mod:`kernelwatch.kernels.fused_rmsnorm_matmul.api`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernelwatch.kernels.device import describe
from kernelwatch.kernels.fused_layernorm_matmul.plans import FLAGS, NAME, VARIANTS, autotuned_kernel, forward_plan
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
    """What a forward derives from (weight, gamma, beta, bias) for the functional API: a :class:`WeightSlot` per
    tuple of those tensors, living as long as they do (:class:`~kernelwatch.kernels.norm_gemm.WeightCache`)."""

    def __init__(self) -> None:
        self._slots = WeightCache()

    def slot(
        self, weight: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None, bias: torch.Tensor | None
    ) -> WeightSlot:
        return self._slots.slot((weight, gamma, beta, bias))

    def get(
        self,
        weight: torch.Tensor,
        gamma: torch.Tensor,
        beta: torch.Tensor | None,
        bias: torch.Tensor | None,
    ) -> Prepared:
        tensors = (weight, gamma, beta, bias)
        return self.slot(*tensors).get(tensors, lambda: prepare(weight, gamma, beta, bias))

    def __len__(self) -> int:
        return len(self._slots)

    def clear(self) -> None:
        self._slots.clear()


PREPARED = PreparedWeightCache()
DECODE_SCRATCH = DecodeScratch()
Launcher = Callable[[torch.Tensor], torch.Tensor]


def _launcher(x: torch.Tensor, info: DeviceInfo, prep: Prepared, descs: dict, eps: float, variant: str) -> Launcher:
    """Every call with x's key: the plan, the prepared weight's arguments and descriptors, looked up once here."""
    w = prep.weight
    k, n = x.shape[-1], w.shape[0]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    lead, dtype, device = (*x.shape[:-1], n), x.dtype, x.device
    y = new_output((m, n), dtype, device)
    if m == 0 or n == 0:
        return lambda x: new_output(lead, dtype, device)
    has_c = prep.c is not None
    plan = forward_plan(m, n, k, DTYPE_NAMES[dtype], variant, has_c, info, dense(x2, w, y))
    eps, colsum, c_arg = float(eps), prep.colsum, prep.c
    sxm, sxk = x2.stride(0), x2.stride(1)
    if plan.path == "decode":  # one launch: the GEMM forms the statistics
        (gemm,) = plan.steps
        parts, s1, s2, counts = DECODE_SCRATCH.views(gemm, device, row_sums=2)
        w_arg, c = decode_weight(gemm, w, descs), c_arg if has_c else colsum  # an unused pointer when HAS_C is off

        def decode(x: torch.Tensor) -> torch.Tensor:
            x2 = x.reshape(-1, k)
            y = new_output((m, n), dtype, device)
            launch(gemm, x2, w_arg, parts, s1, s2, counts, colsum, c, y, m, n, k, sxm, eps)
            return y.view(lead)

        return decode
    stats, gemm = plan.steps

    def statistics(x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mean = new_output((m,), torch.float32, device)
        rstd = new_output((m,), torch.float32, device)
        launch(stats, x2, mean, rstd, m, k, sxm, sxk, eps)
        return mean, rstd, c_arg if has_c else mean  # an unused pointer when HAS_C is off

    if plan.path == "hopper":
        cx = gemm.constexprs
        a_t, c_t = descriptor_template(x2, (cx["BM"], cx["BK"])), descriptor_template(y, (cx["BM"], cx["BN"]))
        b = weight_descriptor(w, descs, (cx["BN"], cx["BK"]))

        def hopper(x: torch.Tensor) -> torch.Tensor:
            x2 = x.reshape(-1, k)
            y = new_output((m, n), dtype, device)
            mean, rstd, c = statistics(x2)
            launch(gemm, rebased(a_t, x2), b, rebased(c_t, y), mean, rstd, colsum, c, m, n, k)
            return y.view(lead)

        return hopper
    swn, swk, sym = w.stride(0), w.stride(1), y.stride(0)

    def tiles(x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, k)
        y = new_output((m, n), dtype, device)
        mean, rstd, c = statistics(x2)
        args = (x2, w, mean, rstd, colsum, c, y, m, n, k, sxm, sxk, swn, swk)
        launch_tiles(gemm, autotuned_kernel, FLAGS, m, n, *args, sym)
        return y.view(lead)

    return tiles


def fused_layernorm_matmul_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    variant: str = "fold_gamma",
    slot: WeightSlot | None = None,
) -> torch.Tensor:
    """Forward only (what the collector times). ``slot``: where the prepared weight and the launchers live (a
    module's own); by default :data:`PREPARED`'s slot of these tensors."""
    tensors = (weight, gamma, beta, bias)
    if slot is None:
        slot = PREPARED.slot(*tensors)
    if not slot.current(tensors):
        check_inputs(NAME, x, weight, gamma, bias, beta)
        slot.rebuild(tensors, lambda: prepare(weight, gamma, beta, bias))
    info = describe(x.device)  # a simulated device (tests) plans differently from the CPU's own
    key = (x.shape, x.stride(), x.dtype, info, x.data_ptr() & 15, variant, eps)
    run = slot.calls.get(key)
    if run is None:
        check_inputs(NAME, x, weight, gamma, bias, beta)
        if variant not in VARIANTS:
            raise ValueError(f"{NAME}: variant must be one of {VARIANTS}, got {variant!r}")
        run = slot.calls[key] = _launcher(x, info, slot.value, slot.descs, eps, variant)
    return run(x)


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
    def forward(ctx, x, weight, gamma, beta, bias, eps, variant, slot=None):
        ctx.save_for_backward(x, weight, gamma, beta, bias)
        ctx.eps = eps
        if x.dtype == torch.float64:  # only gradcheck gets here (the public function refuses fp64): the
            # kernels take fp16/bf16/fp32, so in float64 the forward is the reference and the check is the backward's
            return layernorm_linear_reference(x, weight, gamma, beta, bias, eps)
        return fused_layernorm_matmul_forward(x, weight, gamma, beta, bias, eps, variant, slot)

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
        return (*out, None, None, None)


def fused_layernorm_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    variant: str = "fold_gamma",
    slot: WeightSlot | None = None,
) -> torch.Tensor:
    """((x - mean) / sqrt(var + eps) * gamma + beta) @ weight^T + bias, without writing the normalised x.
    ``slot``: where the prepared weight lives (a module passes its own; see :func:`fused_layernorm_matmul_forward`)."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, gamma, beta, bias)):
        check_inputs(NAME, x, weight, gamma, bias, beta)
        return FusedLayerNormMatmulFunction.apply(x, weight, gamma, beta, bias, eps, variant, slot)
    return fused_layernorm_matmul_forward(x, weight, gamma, beta, bias, eps, variant, slot)


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
        self.prepared = WeightSlot()  # W diag(gamma), s, c, W''s descriptors and launchers: rebuilt on a change

    @classmethod
    def of(
        cls,
        weight: torch.Tensor,
        gamma: torch.Tensor,
        beta: torch.Tensor,
        bias: torch.Tensor | None = None,
        eps: float = 1e-5,
        requires_grad: bool = False,
    ) -> FusedLayerNormLinear:
        """A layer over these tensors (shared, not copied): weight ``[hidden, dim]``, gamma and beta ``[dim]``."""
        hidden, dim = weight.shape
        layer = cls(dim, hidden, eps, bias is not None, device="meta", dtype=weight.dtype)
        layer.weight = torch.nn.Parameter(weight, requires_grad=requires_grad)
        layer.gamma = torch.nn.Parameter(gamma, requires_grad=requires_grad)
        layer.beta = torch.nn.Parameter(beta, requires_grad=requires_grad)
        layer.bias = torch.nn.Parameter(bias, requires_grad=requires_grad) if bias is not None else None
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_layernorm_matmul(x, self.weight, self.gamma, self.beta, self.bias, self.eps, slot=self.prepared)

    def extra_repr(self) -> str:
        hidden, dim = self.weight.shape
        return f"dim={dim}, hidden={hidden}, eps={self.eps}, bias={self.bias is not None}"
