"""Fused RMSNorm + MatMul on the CPU through Triton's interpreter."""

from __future__ import annotations

import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
import triton
import triton.language as tl

from kernelwatch.collect.accuracy import compare
from kernelwatch.kernels.fused_rmsnorm_matmul.api import FOLDED, FusedRMSLinear, fused_rmsnorm_matmul
from kernelwatch.kernels.fused_rmsnorm_matmul.plans import VARIANTS
from kernelwatch.kernels.fused_rmsnorm_matmul.spec import SPEC, tolerance
from kernelwatch.kernels.norm_gemm import round_to_bf16

DTYPES = [("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)]


def _ref(x, w, g, b, eps=1e-6):
    x, w, g = x.double(), w.double(), g.double()
    y = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g) @ w.t()
    return y + b.double() if b is not None else y


def _inputs(m_shape, n, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    k = m_shape[-1]
    x = (torch.randn(m_shape, generator=gen) * 2).to(dtype)
    w = (torch.randn(n, k, generator=gen) / math.sqrt(k)).to(dtype)
    g = (1 + 0.5 * torch.rand(k, generator=gen)).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype)
    return x, w, g, b


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name,dtype", DTYPES)
@pytest.mark.parametrize("m_shape,n", [((1, 64), 16), ((17, 100), 33), ((2, 3, 48), 20)])
def test_forward_matches_float64(variant, name, dtype, m_shape, n) -> None:
    x, w, g, b = _inputs(m_shape, n, dtype)
    y = fused_rmsnorm_matmul(x, w, g, b, variant=variant)
    assert y.shape == (*m_shape[:-1], n) and y.dtype == dtype
    tol = tolerance(name, m_shape[-1])
    errs = compare(y, _ref(x, w, g, b), tol.rtol, tol.atol)
    assert errs["nan_mismatches"] == 0 and errs["error_budget"] <= 1, errs


def test_tolerance_follows_the_error_model() -> None:
    """atol = 4 * 2 * u / sqrt(3) (one operand rounding, flat in K) + 1e-5 sqrt(K / 64) (fp32 accumulation)."""
    for name, u in (("fp16", 2.0**-11), ("bf16", 2.0**-8)):
        assert tolerance(name, 64).atol == pytest.approx(8 * u / math.sqrt(3) + 1e-5)
        assert tolerance(name, 8192).atol - tolerance(name, 64).atol == pytest.approx(1e-5 * (math.sqrt(128) - 1))
    assert tolerance("fp32", 64 * 4).atol == pytest.approx(2e-5, rel=0.02)
    assert tolerance("fp16", 8192).rtol == tolerance("fp16", 64).rtol


@triton.jit
def _cast_to_bf16(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    tl.store(y_ptr + offs, round_to_bf16(tl.load(x_ptr + offs, mask=ok)).to(tl.bfloat16), mask=ok)


def test_bf16_rounding_on_the_interpreter_is_to_nearest_even() -> None:
    """Defect caught: Triton's interpreter truncates fp32 -> bf16 (a GPU rounds to nearest even), which
    doubled prologue_gamma's operand error on the CPU. round_to_bf16 must agree with PyTorch bit for bit."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(20000, generator=gen) * 10.0 ** torch.randint(-20, 20, (20000,), generator=gen).float()
    x = torch.cat([x, torch.tensor([3.3895e38, -1.00390625, 1.01171875, 0.0, float("inf"), float("nan")])])
    y = torch.empty_like(x, dtype=torch.bfloat16)
    _cast_to_bf16[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    want = x.to(torch.bfloat16)
    assert torch.equal(y.view(torch.int16)[:-1], want.view(torch.int16)[:-1]) and torch.isnan(y[-1])


def test_prologue_gamma_bf16_rounds_its_operand_once_like_pytorch() -> None:
    """prologue_gamma = bf16(x * gamma) . W, scaled by r, rounded to bf16: computed so in PyTorch (round to
    nearest) the outputs agree to within one bf16 ulp (fp32 accumulation order aside)."""
    x, w, g, b = _inputs((40, 128), 64, torch.bfloat16, seed=3)
    y = fused_rmsnorm_matmul(x, w, g, b, variant="prologue_gamma").double()
    xf = x.double()
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    a = (x.float() * g.float()).to(torch.bfloat16).double()
    want = (r * (a @ w.double().t()) + b.double()).to(torch.bfloat16).double()
    ulp = torch.finfo(torch.bfloat16).eps * want.abs().clamp_min(2.0**-20)
    assert ((y - want).abs() <= ulp).all()
    assert (y == want).float().mean() > 0.95


def test_non_contiguous_x_and_no_bias() -> None:
    x, w, g, _ = _inputs((40, 32), 24, torch.float32)
    xt = x.t().contiguous().t()
    assert not xt.is_contiguous()
    torch.testing.assert_close(fused_rmsnorm_matmul(xt, w, g).double(), _ref(x, w, g, None), rtol=1e-4, atol=1e-5)


def test_backward_for_x_weight_gamma_and_bias() -> None:
    x, w, g, b = (t.requires_grad_() for t in _inputs((6, 40), 12, torch.float32))
    dy = torch.randn(6, 12)
    grads = torch.autograd.grad(fused_rmsnorm_matmul(x, w, g, b), (x, w, g, b), dy)
    leaves = [t.detach().double().requires_grad_() for t in (x, w, g, b)]
    ref = torch.autograd.grad(_ref(*leaves), leaves, dy.double())
    for got, want in zip(grads, ref):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


def test_module_holds_gamma_weight_bias_and_matches_the_function() -> None:
    layer = FusedRMSLinear(48, 20)
    assert {n for n, _ in layer.named_parameters()} == {"gamma", "weight", "bias"}
    x = torch.randn(3, 48)
    torch.testing.assert_close(
        layer(x).double(),
        _ref(x, layer.weight.detach(), layer.gamma.detach(), layer.bias.detach()),
        rtol=1e-4,
        atol=1e-5,
    )
    assert FusedRMSLinear(8, 4, bias=False).bias is None


def test_folded_weight_cache_is_invalidated_by_in_place_updates() -> None:
    x, w, g, _ = _inputs((5, 32), 8, torch.float32)
    FOLDED.clear()
    first = fused_rmsnorm_matmul(x, w, g)
    assert torch.equal(fused_rmsnorm_matmul(x, w, g), first)  # served from the cache
    with torch.no_grad():
        g.mul_(2.0)
    torch.testing.assert_close(fused_rmsnorm_matmul(x, w, g).double(), _ref(x, w, g, None), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        w.add_(0.5)
    torch.testing.assert_close(fused_rmsnorm_matmul(x, w, g).double(), _ref(x, w, g, None), rtol=1e-4, atol=1e-5)


def test_folded_weight_keeps_its_descriptors_until_it_changes() -> None:
    """The decode and Hopper launchers take W's TMA descriptor from the slot of the folded weight: the same dict
    while the weight is unchanged, a fresh one once an in-place update refolds it, none for another tensor."""
    _, w, g, _ = _inputs((5, 32), 8, torch.float32)
    FOLDED.clear()
    slot = FOLDED.slot(w, g, None, True)
    folded = FOLDED.get(w, g)
    descs = slot.descs
    descs[(8, 32)] = "built once"
    assert FOLDED.get(w, g) is folded and FOLDED.slot(w, g, None, True).descs is descs
    assert FOLDED.slot(w, g.clone(), None, True).descs == {}
    with torch.no_grad():
        w.add_(1.0)
    refolded = FOLDED.get(w, g)
    assert refolded is not folded and slot.descs == {} and slot.value is refolded


def test_plan_paths_are_tagged_not_guessed_from_the_kernel() -> None:
    from kernelwatch.kernels.fused_rmsnorm_matmul.plans import plan_path
    from kernelwatch.kernels.plan import NVIDIA_A100, NVIDIA_H200, DeviceInfo

    cpu = DeviceInfo("cpu", 2, interpreter=True)
    assert plan_path(16, 8192, 8192, "bf16", "fold_gamma", NVIDIA_H200) == "decode"
    assert plan_path(16, 8192, 8192, "bf16", "rstd_prepass", NVIDIA_H200) == "tiles"
    assert plan_path(1024, 4096, 8192, "fp16", "fold_gamma", NVIDIA_H200) == "hopper"
    assert plan_path(1024, 4096, 8192, "fp16", "fold_gamma", NVIDIA_H200, dense=False) == "tiles"
    assert plan_path(1024, 4096, 8192, "fp16", "fold_gamma", NVIDIA_A100) == "tiles"
    assert plan_path(5, 1040, 1024, "fp16", "fold_gamma", cpu) == "decode"


def test_an_autotuned_step_remembers_the_candidate_its_tuner_chose() -> None:
    from kernelwatch.kernels.fused_rmsnorm_matmul.plans import plan_forward
    from kernelwatch.kernels.plan import NVIDIA_H200, chosen_candidate

    (_, tuned) = plan_forward(16, 8192, 8192, "fp16", "rstd_prepass", False, NVIDIA_H200)
    want = tuned.candidates[1]
    c = want.constexprs
    config = triton.Config(
        {k: c[k] for k in ("BM", "BN", "BK", "GROUP_M")}, num_warps=want.num_warps, num_stages=want.num_stages
    )
    assert chosen_candidate(tuned, config) is want
    other = triton.Config(config.kwargs, num_warps=want.num_warps, num_stages=(want.num_stages or 0) + 9)
    assert chosen_candidate(tuned, other) is None and chosen_candidate(tuned, None) is None


@pytest.mark.parametrize(
    "args,exc,message",
    [
        ((torch.randn(2, 8), torch.randn(4, 9), torch.randn(8)), ValueError, "K mismatch"),
        ((torch.randn(2, 8), torch.randn(4, 8), torch.randn(9)), ValueError, "K mismatch"),
        ((torch.randn(2, 8), torch.randn(4, 8).half(), torch.randn(8)), TypeError, "dtype"),
        ((torch.randn(2, 8).int(), torch.randn(4, 8).int(), torch.randn(8).int()), TypeError, "not supported"),
    ],
)
def test_bad_arguments_get_clear_errors(args, exc, message) -> None:
    with pytest.raises(exc, match=message):
        fused_rmsnorm_matmul(*args)
    with pytest.raises(ValueError, match="bias shape"):
        fused_rmsnorm_matmul(torch.randn(2, 8), torch.randn(4, 8), torch.randn(8), torch.randn(5))


def test_spec_perf_cases_and_flops() -> None:
    perf = SPEC.perf_cases()
    shapes = {(c.p["shape"], c.p["n"]) for c in perf}
    assert ((1024, 8192), 4096) in shapes and ((16, 8192), 8192) in shapes and ((4, 512, 4096), 4096) in shapes
    assert ((8192, 4096), 14336) in shapes  # the Llama-class MLP
    big = next(c for c in perf if c.p["shape"] == (1024, 8192) and c.variant == "fold_gamma")
    assert SPEC.flops(big) >= 2 * 1024 * 8192 * 4096
    assert big.target.max_ratio_to == ("cublas_linear", 1.05)
