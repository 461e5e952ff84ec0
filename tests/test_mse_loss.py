"""MSELoss on the CPU through Triton's interpreter: the functional API, autograd, errors, the spec."""

from __future__ import annotations

import os
import zlib

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
import torch.nn.functional as F

from kernelwatch import kernels
from kernelwatch.collect.accuracy import check_case, compare
from kernelwatch.kernels.mse_loss.api import mse_loss_backward
from kernelwatch.kernels.mse_loss.spec import SPEC, TOLERANCES
from kernelwatch.kernels.poison import poisoned_outputs

CPU = torch.device("cpu")
DTYPES = [("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)]


@pytest.mark.parametrize("variant", ["persistent", "atomic"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("shape", [(1,), (127,), (1000,), (4099,), (3, 5, 7)])
@pytest.mark.parametrize("name,dtype", DTYPES)
def test_forward_matches_float64(variant, reduction, shape, name, dtype) -> None:
    torch.manual_seed(zlib.crc32(repr((variant, reduction, shape, name)).encode()))  # the same on every run
    x, y = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
    with poisoned_outputs():
        out = kernels.mse_loss(x, y, reduction, variant=variant)
    assert out.dtype == dtype and out.shape == (shape if reduction == "none" else ())
    ref = F.mse_loss(x.double(), y.double(), reduction=reduction)
    tol = TOLERANCES[(name, reduction == "sum")]
    errs = compare(out, ref, tol.rtol, tol.atol)
    assert errs["nan_mismatches"] == 0 and errs["error_budget"] <= 1.0, errs


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("variant", ["persistent", "atomic"])
def test_backward_matches_torch_for_both_arguments(reduction, variant) -> None:
    x = torch.randn(6, 50, requires_grad=True)
    y = torch.randn(6, 50, requires_grad=True)
    g = torch.randn(6, 50) if reduction == "none" else torch.randn(())
    kernels.mse_loss(x, y, reduction, variant=variant).backward(g)
    x2, y2 = x.detach().double().requires_grad_(), y.detach().double().requires_grad_()
    F.mse_loss(x2, y2, reduction=reduction).backward(g.double())
    torch.testing.assert_close(x.grad.double(), x2.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(y.grad.double(), y2.grad, rtol=1e-5, atol=1e-6)


def test_gradcheck_in_float32_against_finite_differences() -> None:
    x = torch.randn(17, dtype=torch.float32, requires_grad=True)
    y = torch.randn(17, dtype=torch.float32, requires_grad=True)
    out = kernels.mse_loss(x, y)
    gx, gy = torch.autograd.grad(out, (x, y))
    eps = 1e-2
    for i in (0, 8, 16):
        bumped = x.detach().clone()
        bumped[i] += eps
        y64 = y.detach().double()
        numeric = (F.mse_loss(bumped.double(), y64) - F.mse_loss(x.detach().double(), y64)) / eps
        assert abs(float(numeric) - float(gx[i])) < 2e-2
    torch.testing.assert_close(gy, -gx)


def test_only_requested_gradients_are_written() -> None:
    x, y = torch.randn(10), torch.randn(10)
    gx, gy = mse_loss_backward(torch.tensor(1.0), x, y, "sum", need_input=True, need_target=False)
    assert gy is None and torch.allclose(gx, 2 * (x - y))


def test_non_contiguous_views() -> None:
    base_x, base_y = torch.randn(40, 30), torch.randn(40, 30)
    x, y = base_x[:, ::3], base_y.t()[::3, :].t()[:, :10]
    assert not x.is_contiguous()
    for reduction in ("none", "mean", "sum"):
        out = kernels.mse_loss(x, y, reduction)
        torch.testing.assert_close(out, F.mse_loss(x, y, reduction=reduction), rtol=1e-5, atol=1e-5)


def test_empty_input_behaves_as_pytorch() -> None:
    x = torch.randn(0)
    assert torch.isnan(kernels.mse_loss(x, x, "mean"))
    assert kernels.mse_loss(x, x, "sum").item() == 0.0
    assert kernels.mse_loss(x, x, "none").shape == (0,)


def test_fp16_sum_overflows_to_inf_as_pytorch_does() -> None:
    x = torch.randn(100_000).half() * 4
    y = torch.randn(100_000).half() * 4
    assert torch.isinf(kernels.mse_loss(x, y, "sum")) and torch.isinf(F.mse_loss(x, y, reduction="sum"))


def test_persistent_variant_is_deterministic() -> None:
    x, y = torch.randn(70_001), torch.randn(70_001)
    first = kernels.mse_loss(x, y, "sum")
    assert all(torch.equal(first, kernels.mse_loss(x, y, "sum")) for _ in range(3))


@pytest.mark.parametrize(
    "x,y,reduction,exc,message",
    [
        (torch.randn(3), torch.randn(4), "mean", ValueError, "shape"),
        (torch.randn(3), torch.randn(3).double(), "mean", TypeError, "dtype"),
        (torch.randn(3).double(), torch.randn(3).double(), "mean", TypeError, "not supported"),
        (torch.randn(3), torch.randn(3), "avg", ValueError, "reduction must be one of"),
        (torch.randn(3), torch.randn(1), "mean", ValueError, "no broadcasting"),
    ],
)
def test_bad_arguments_get_clear_errors(x, y, reduction, exc, message) -> None:
    with pytest.raises(exc, match=message):
        kernels.mse_loss(x, y, reduction)
    with pytest.raises(ValueError, match="variant"):
        kernels.mse_loss(torch.randn(2), torch.randn(2), variant="fast")


def test_error_budget_catches_a_wrong_result() -> None:
    case = next(
        c
        for c in SPEC.accuracy_cases()
        if c.key.endswith("reduction=mean,shape=1000") and c.dtype == "fp32" and c.p["direction"] == "fwd"
    )
    good = check_case(SPEC, case, CPU, seed=1)
    assert good.passed and good.error_budget < 1
    broken = SPEC.__class__(**{**SPEC.__dict__, "run": lambda c, i: (SPEC.run(c, i)[0] * (1 + 1e-3),)})
    bad = check_case(broken, case, CPU, seed=1)
    assert not bad.passed and bad.error_budget > 10


def test_spec_describes_every_case() -> None:
    acc, perf = SPEC.accuracy_cases(), SPEC.perf_cases()
    keys = [c.key for c in acc]
    assert len(keys) == len(set(keys))
    assert {c.p["shape"] for c in acc} >= {(128,), (1024,), (1_048_576,), (0,), (1,), (4099,)}
    assert any(c.p.get("layout") == "strided" for c in acc) and any(c.p["direction"] == "bwd" for c in acc)
    assert all(c.tol is not None for c in acc)
    big = [c for c in perf if c.variant == "persistent" and c.p["shape"] == (33_554_432,)]
    assert big and all(c.target and c.target.min_pct_peak == 85 for c in big)
    assert SPEC.bytes_moved(big[0]) == 2 * 33_554_432 * (4 if big[0].dtype == "fp32" else 2) + (
        4 if big[0].dtype == "fp32" else 2
    )
