"""Fused LayerNorm + MatMul on the CPU through Triton's interpreter."""

from __future__ import annotations

import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
import torch.nn.functional as F

from kernelwatch.collect.accuracy import compare
from kernelwatch.kernels.device import simulated
from kernelwatch.kernels.fused_layernorm_matmul.api import (
    PREPARED,
    FusedLayerNormLinear,
    FusedLayerNormMatmulFunction,
    fused_layernorm_matmul,
)
from kernelwatch.kernels.fused_layernorm_matmul.plans import VARIANTS, plan_forward
from kernelwatch.kernels.fused_layernorm_matmul.spec import SPEC, tolerance
from kernelwatch.kernels.plan import ASCEND_910B, NVIDIA_A100, NVIDIA_H200, Autotuned, recording

DTYPES = [("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)]


def _ref(x, w, g, beta, b, eps=1e-5):
    x, w, g = x.double(), w.double(), g.double()
    mu = x.mean(-1, keepdim=True)
    xn = (x - mu) * torch.rsqrt((x - mu).pow(2).mean(-1, keepdim=True) + eps) * g
    if beta is not None:
        xn = xn + beta.double()
    y = xn @ w.t()
    return y + b.double() if b is not None else y


def _inputs(m_shape, n, dtype, seed=0, shift=0.0):
    gen = torch.Generator().manual_seed(seed)
    k = m_shape[-1]
    x = (2 * (shift + torch.randn(m_shape, generator=gen))).to(dtype)
    w = (torch.randn(n, k, generator=gen) / math.sqrt(k)).to(dtype)
    g = (1 + 0.5 * torch.rand(k, generator=gen)).to(dtype)
    beta = (0.5 * torch.randn(k, generator=gen)).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype)
    return x, w, g, beta, b


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name,dtype", DTYPES)
@pytest.mark.parametrize("m_shape,n,shift", [((1, 64), 16, 0.0), ((17, 100), 33, 4.0), ((2, 3, 48), 20, 0.0)])
def test_forward_matches_float64(variant, name, dtype, m_shape, n, shift) -> None:
    x, w, g, beta, b = _inputs(m_shape, n, dtype, shift=shift)
    y = fused_layernorm_matmul(x, w, g, beta, b, variant=variant)
    assert y.shape == (*m_shape[:-1], n) and y.dtype == dtype
    tol = tolerance(name, m_shape[-1], shift)
    errs = compare(y, _ref(x, w, g, beta, b), tol.rtol, tol.atol)
    assert errs["nan_mismatches"] == 0 and errs["error_budget"] <= 1, errs


def test_a_large_mean_costs_fold_gamma_its_fp32_accumulation_not_its_budget() -> None:
    """Defect caught: the epilogue r (acc - mu s) cancels when |mu| >> sigma. At mu / sigma = 50 the fp32
    error grows with it (as the model's third term says) past what unfused fp32 PyTorch (layer_norm, then
    linear: x centred before the GEMM) loses, and stays inside tolerance(shift=50); a stats pass computing
    var = E[x^2] - mu^2 unshifted fails here."""
    x, w, g, beta, b = _inputs((24, 256), 40, torch.float32, seed=5, shift=50.0)
    ref = _ref(x, w, g, beta, b)
    atol = tolerance("fp32", 256, 50.0).atol
    fold = compare(fused_layernorm_matmul(x, w, g, beta, b), ref, 1e-4, atol)
    unfused = compare(F.linear(F.layer_norm(x, (256,), g, beta), w, b), ref, 1e-4, atol)
    assert fold["error_budget"] <= 1 and unfused["error_budget"] <= 1, (fold, unfused)
    assert fold["max_abs_err"] > unfused["max_abs_err"]


def test_the_dropped_centring_variant_is_refused_by_name() -> None:
    """center_prologue ran at 0.46-0.49x eager PyTorch on the H200 and was dropped: asking for it names the
    variants there are, and computes nothing."""
    x, w, g, beta, b = _inputs((4, 64), 16, torch.float32, seed=1, shift=0.0)
    with pytest.raises(ValueError, match=r"variant must be one of \('fold_gamma',\), got 'center_prologue'"):
        fused_layernorm_matmul(x, w, g, beta, b, variant="center_prologue")
    with pytest.raises(ValueError, match="variant must be one of"):
        plan_forward(1024, 4096, 8192, "fp16", "center_prologue", True, NVIDIA_H200)


def test_tolerance_follows_the_error_model() -> None:
    """atol = 4 * 2 * u / sqrt(3) + 1e-5 sqrt(K / 64) sqrt(1 + shift^2), RMSNorm's model with x - mu."""
    for name, u in (("fp16", 2.0**-11), ("bf16", 2.0**-8)):
        assert tolerance(name, 64).atol == pytest.approx(8 * u / math.sqrt(3) + 1e-5)
    assert tolerance("fp32", 256, 4.0).atol == pytest.approx(8 * 2.0**-24 / math.sqrt(3) + 2e-5 * math.sqrt(17))
    assert tolerance("fp16", 8192).rtol == tolerance("fp16", 64).rtol


def test_gradcheck_in_float64() -> None:
    """The backward (PyTorch's, unfused) for x, weight, gamma, beta and bias against finite differences."""
    gen = torch.Generator().manual_seed(2)
    x, w, g, beta, b = (
        torch.randn(s, generator=gen, dtype=torch.float64).requires_grad_() for s in ((3, 6), (4, 6), (6,), (6,), (4,))
    )
    assert torch.autograd.gradcheck(
        lambda *t: FusedLayerNormMatmulFunction.apply(*t, 1e-5, "fold_gamma"), (x, w, g, beta, b)
    )
    with pytest.raises(TypeError, match="not supported"):
        fused_layernorm_matmul(x, w, g, beta, b)  # the public function runs the kernels, which take no fp64


def test_backward_of_the_kernel_path_matches_float64() -> None:
    x, w, g, beta, b = (t.requires_grad_() for t in _inputs((6, 40), 12, torch.float32))
    dy = torch.randn(6, 12)
    grads = torch.autograd.grad(fused_layernorm_matmul(x, w, g, beta, b), (x, w, g, beta, b), dy)
    leaves = [t.detach().double().requires_grad_() for t in (x, w, g, beta, b)]
    ref = torch.autograd.grad(_ref(*leaves), leaves, dy.double())
    for got, want in zip(grads, ref):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


def test_module_holds_gamma_beta_weight_bias_and_matches_the_function() -> None:
    layer = FusedLayerNormLinear(48, 20)
    assert {n for n, _ in layer.named_parameters()} == {"gamma", "beta", "weight", "bias"}
    with torch.no_grad():
        layer.beta.normal_()
    x = torch.randn(3, 48)
    want = _ref(x, *(p.detach() for p in (layer.weight, layer.gamma, layer.beta, layer.bias)))
    torch.testing.assert_close(layer(x).double(), want, rtol=1e-4, atol=1e-5)
    assert FusedLayerNormLinear(8, 4, bias=False).bias is None


def test_non_contiguous_x_without_beta_or_bias() -> None:
    x, w, g, _, _ = _inputs((40, 32), 24, torch.float32)
    xt = x.t().contiguous().t()
    assert not xt.is_contiguous()
    torch.testing.assert_close(
        fused_layernorm_matmul(xt, w, g).double(), _ref(x, w, g, None, None), rtol=1e-4, atol=1e-5
    )


def test_prepared_weight_cache_follows_in_place_updates() -> None:
    x, w, g, beta, b = _inputs((5, 32), 8, torch.float32)
    PREPARED.clear()
    first = fused_layernorm_matmul(x, w, g, beta, b)
    assert torch.equal(fused_layernorm_matmul(x, w, g, beta, b), first)  # served from the cache
    for t, change in ((g, 2.0), (beta, 1.0), (b, -3.0), (w, 0.5)):
        with torch.no_grad():
            t.add_(change)
        torch.testing.assert_close(
            fused_layernorm_matmul(x, w, g, beta, b).double(), _ref(x, w, g, beta, b), rtol=1e-4, atol=1e-5
        )


@pytest.mark.parametrize(
    "args,exc,message",
    [
        ((torch.randn(2, 8), torch.randn(4, 9), torch.randn(8)), ValueError, "K mismatch"),
        ((torch.randn(2, 8), torch.randn(4, 8), torch.randn(8), torch.randn(9)), ValueError, "K mismatch"),
        ((torch.randn(2, 8), torch.randn(4, 8).half(), torch.randn(8)), TypeError, "dtype"),
        ((torch.randn(2, 8).int(), torch.randn(4, 8).int(), torch.randn(8).int()), TypeError, "not supported"),
        ((torch.randn(2, 8), torch.randn(4, 8), torch.randn(8), None, torch.randn(5)), ValueError, "bias shape"),
    ],
)
def test_bad_arguments_get_clear_errors(args, exc, message) -> None:
    with pytest.raises(exc, match=message):
        fused_layernorm_matmul(*args)


def test_plans_take_the_rmsnorm_kernels_paths_tagged() -> None:
    """H200: the TMA GEMM at [1024,8192]->4096 and [4096]^3 after the stats prepass, split K at decode in one
    launch (it forms the statistics itself);
    A100 and fp32: the autotuned pointer GEMM; Ascend: persistent grids on AI / vector cores."""
    big = plan_forward(1024, 4096, 8192, "fp16", "fold_gamma", True, NVIDIA_H200)
    assert big.path == "hopper" and [s.name for s in big.steps] == ["_ln_stats_kernel", "_ln_gemm_tma_kernel"]
    assert big.steps[0].grid == (1024,) and big.steps[1].grid == (128,)
    assert plan_forward(4096, 4096, 4096, "bf16", "fold_gamma", True, NVIDIA_H200).path == "hopper"
    decode = plan_forward(16, 8192, 8192, "bf16", "fold_gamma", True, NVIDIA_H200)
    assert decode.path == "decode" and [s.name for s in decode.steps] == ["_ln_decode_splitk_kernel"]
    assert decode.steps[0].grid == (64, 2) and decode.steps[0].constexprs["W_DESC"]
    for plan in (
        plan_forward(1024, 4096, 8192, "fp16", "fold_gamma", True, NVIDIA_A100),
        plan_forward(1024, 4096, 8192, "fp32", "fold_gamma", True, NVIDIA_H200),
    ):
        assert plan.path == "tiles" and isinstance(plan.steps[1], Autotuned)
    stats, gemm = plan_forward(4096, 4096, 4096, "fp16", "fold_gamma", True, ASCEND_910B).steps
    assert stats.grid == (48,) and not stats.footprint.cube_vector and stats.footprint.fits()
    assert gemm.grid == (24,) and gemm.footprint.cube_vector and gemm.footprint.fits()
    assert plan_forward(0, 8, 8, "fp16", "fold_gamma", True, NVIDIA_H200).steps == ()


@pytest.mark.parametrize(
    "shape,n,shift,names",
    [
        ((130, 256), 264, 4.0, ["_ln_stats_kernel", "_ln_gemm_tma_kernel"]),
        ((5, 1024), 1040, 4.0, ["_ln_decode_splitk_kernel"]),
        ((7, 1000), 2048, 64.0, ["_ln_decode_splitk_kernel"]),  # K not a whole number of tiles, |mean| >> sigma
    ],
)
def test_the_hopper_and_decode_paths_compute_right_in_the_interpreter(shape, n, shift, names) -> None:
    x, w, g, beta, b = _inputs(shape, n, torch.float16, seed=4, shift=shift)
    with simulated(NVIDIA_H200), recording() as rec:
        y = fused_layernorm_matmul(x, w, g, beta, b)
    assert [s.name for s in rec.steps] == names
    tol = tolerance("fp16", shape[-1], shift)
    errs = compare(y, _ref(x, w, g, beta, b), tol.rtol, tol.atol)
    assert errs["nan_mismatches"] == 0 and errs["error_budget"] <= 1, errs


def test_spec_perf_cases_targets_and_baselines() -> None:
    perf = SPEC.perf_cases()
    assert {(c.p["shape"], c.p["n"]) for c in perf} == {((1024, 8192), 4096), ((4096, 4096), 4096), ((16, 8192), 8192)}
    targets = {c.target.max_ratio_to for c in perf if c.variant == "fold_gamma" and "layers" not in c.p}
    assert targets == {("cublas_linear", 1.05)}
    assert all(c.target is None for c in perf if "layers" in c.p)  # stack cases: benchmarks, no target yet
    small = next(c for c in SPEC.accuracy_cases() if c.p["shape"] == (1, 64) and c.dtype == "fp32")
    impls = SPEC.implementations(small, SPEC.make_inputs(small, torch.device("cpu"), 0))
    assert {"triton", "torch_eager", "torch_compile", "cublas_linear"} <= set(impls)
    big = next(c for c in perf if c.p["shape"] == (1024, 8192))
    assert SPEC.flops(big) >= 2 * 1024 * 8192 * 4096 and SPEC.bytes_moved(big) == 2 * (
        1024 * 8192 + 4096 * 8192 + 1024 * 4096 + 2 * 8192
    )
