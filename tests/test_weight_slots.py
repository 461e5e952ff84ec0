"""Where the fused norm + GEMM kernels keep what they derive from their weights: one fold per layer
however deep the model, a new one when a parameter changes, and a launcher per input key. CPU interpreter."""

from __future__ import annotations

import gc
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
import torch.nn.functional as F

from kernelwatch.kernels import norm_gemm
from kernelwatch.kernels.fused_layernorm_matmul.api import (
    PREPARED,
    FusedLayerNormLinear,
    fused_layernorm_matmul,
)
from kernelwatch.kernels.fused_rmsnorm_matmul.api import FOLDED, FusedRMSLinear, fused_rmsnorm_matmul

LAYERS = 64  # four times the 16 entries of the FIFO this replaces
PASSES = 3
DIM, HIDDEN, ROWS = 32, 16, 2


def _rms_ref(x, layer):
    return F.linear(
        F.rms_norm(x.double(), (DIM,), layer.gamma.double(), layer.eps), layer.weight.double(), layer.bias.double()
    )


def _ln_ref(x, layer):
    return F.linear(
        F.layer_norm(x.double(), (DIM,), layer.gamma.double(), layer.beta.double(), layer.eps),
        layer.weight.double(),
        layer.bias.double(),
    )


MODULES = [(FusedRMSLinear, _rms_ref), (FusedLayerNormLinear, _ln_ref)]


def _stack(cls) -> list[torch.nn.Module]:
    torch.manual_seed(0)
    layers = [cls(DIM, HIDDEN) for _ in range(LAYERS)]
    with torch.no_grad():
        for layer in layers:
            layer.gamma.uniform_(0.5, 1.5)
            if hasattr(layer, "beta"):
                layer.beta.normal_()
    return layers


@pytest.mark.parametrize("cls,ref", MODULES, ids=["rmsnorm", "layernorm"])
def test_a_64_layer_stack_folds_each_layer_once_over_several_passes(cls, ref) -> None:
    """Defect caught: a bounded cache of folds (the 16-entry FIFO) refolds every layer of a deeper model on every
    call: 64 x 3 = 192 folds here instead of 64. Each layer's output is checked on every pass too."""
    layers = _stack(cls)
    x = torch.randn(ROWS, DIM)
    before = norm_gemm.folds()
    with torch.no_grad():
        for _ in range(PASSES):
            for layer in layers:
                torch.testing.assert_close(layer(x).double(), ref(x, layer), rtol=1e-4, atol=1e-5)
    assert norm_gemm.folds() - before == LAYERS


def test_the_functional_api_folds_64_distinct_weights_once_each_and_forgets_them_with_the_weights() -> None:
    """Defect caught: the functional API's cache evicting first in, first out (192 folds here), or holding the
    weights of dead layers (its entries outlive their tensors)."""
    torch.manual_seed(1)
    params = [(torch.randn(HIDDEN, DIM), torch.rand(DIM) + 0.5, torch.randn(DIM)) for _ in range(LAYERS)]
    x = torch.randn(ROWS, DIM)
    FOLDED.clear()
    PREPARED.clear()
    before = norm_gemm.folds()
    for _ in range(PASSES):
        for w, g, beta in params:
            fused_rmsnorm_matmul(x, w, g)
            fused_layernorm_matmul(x, w, g, beta)
    assert norm_gemm.folds() - before == 2 * LAYERS
    assert len(FOLDED) == LAYERS and len(PREPARED) == LAYERS
    del params, w, g, beta
    gc.collect()
    assert len(FOLDED) == 0 and len(PREPARED) == 0


@pytest.mark.parametrize("cls,ref", MODULES, ids=["rmsnorm", "layernorm"])
def test_an_optimizer_step_and_a_swapped_tensor_refold_and_compute_right(cls, ref) -> None:
    """Defect caught: a fold kept across a change of its parameters. An optimizer's step updates them in place
    (their version moves), ``p.data = t`` swaps the storage (the version does not move, the data pointer does);
    each must refold once and give the new parameters' result."""
    torch.manual_seed(2)
    layer = cls(DIM, HIDDEN)
    x = torch.randn(ROWS, DIM)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    with torch.no_grad():
        layer(x)
    folds = norm_gemm.folds()
    loss = layer(x).square().sum()  # the autograd path, with the module's own slot
    loss.backward()
    assert norm_gemm.folds() == folds  # nothing changed yet
    opt.step()
    with torch.no_grad():
        torch.testing.assert_close(layer(x).double(), ref(x, layer), rtol=1e-4, atol=1e-5)
        assert norm_gemm.folds() == folds + 1
        layer(x)
        assert norm_gemm.folds() == folds + 1
        layer.gamma.data = layer.gamma.data * 2.0
        torch.testing.assert_close(layer(x).double(), ref(x, layer), rtol=1e-4, atol=1e-5)
        assert norm_gemm.folds() == folds + 2


@pytest.mark.parametrize("cls", [FusedRMSLinear, FusedLayerNormLinear], ids=["rmsnorm", "layernorm"])
def test_a_launcher_per_input_key_and_bad_input_still_refused(cls) -> None:
    """Defect caught: a cached launch path that serves an x it was not planned for (another shape or dtype) or
    skips the input checks for it. Repeated calls reuse one launcher; a new shape adds one; x of another dtype
    is refused with the same clear error as before anything was cached."""
    layer = cls(DIM, HIDDEN)
    slot = layer.folded if cls is FusedRMSLinear else layer.prepared
    with torch.no_grad():
        for _ in range(3):
            layer(torch.randn(ROWS, DIM))
        assert len(slot.calls) == 1
        y = layer(torch.randn(3, 5, DIM))
        assert y.shape == (3, 5, HIDDEN) and len(slot.calls) == 2
        with pytest.raises(TypeError, match=r"weight dtype torch.float32 != x dtype torch.float16"):
            layer(torch.randn(ROWS, DIM).half())
        with pytest.raises(ValueError, match="K mismatch"):
            layer(torch.randn(ROWS, DIM + 1))


def test_weights_made_in_inference_mode_fold_once() -> None:
    """Defect caught: inference tensors have no version counter (reading it raises), so a layer built and called
    under ``torch.inference_mode()`` (a server) either fails or refolds on every call."""
    x = torch.randn(ROWS, DIM)
    with torch.inference_mode():
        layer = FusedRMSLinear(DIM, HIDDEN)
        assert layer.weight.is_inference()
        before = norm_gemm.folds()
        first = layer(x)
        torch.testing.assert_close(layer(x), first)
        assert norm_gemm.folds() - before == 1
    torch.testing.assert_close(first.double(), _rms_ref(x, layer), rtol=1e-4, atol=1e-5)
