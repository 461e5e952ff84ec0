"""KernelWatch's Triton kernels, each with its PyTorch reference and its spec.

``import kernels`` works without an accelerator: launches happen on whatever device the
tensors live on (CUDA, Ascend NPU, or the CPU through ``TRITON_INTERPRET=1``).

* :func:`mse_loss` — ``torch.nn.functional.mse_loss`` (``atomic`` and ``persistent`` variants);
* :func:`scaled_masked_softmax`, :func:`scaled_upper_triang_masked_softmax` — Megatron-LM / apex semantics,
  differentiable;
* :func:`fused_rmsnorm_matmul`, :class:`FusedRMSLinear` — RMSNorm followed by a linear layer, the
  normalised activations never written.
"""

from __future__ import annotations

import importlib
import pkgutil

from kernels.fused_rmsnorm_matmul import FusedRMSLinear, fused_rmsnorm_matmul
from kernels.mse_loss import mse_loss
from kernels.scaled_masked_softmax import scaled_masked_softmax, scaled_upper_triang_masked_softmax
from kernels.spec import Case, KernelSpec, Target, Tolerance

__all__ = ["mse_loss", "scaled_masked_softmax", "scaled_upper_triang_masked_softmax", "fused_rmsnorm_matmul",
           "FusedRMSLinear", "Case", "KernelSpec", "Target", "Tolerance", "discover"]


def discover(extra_modules: tuple[str, ...] = ()) -> dict[str, KernelSpec]:
    """Every ``SPEC`` in this package's modules, plus those of ``extra_modules`` (tests plant kernels so)."""
    names = [f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    specs: dict[str, KernelSpec] = {}
    for name in [*names, *extra_modules]:
        spec = getattr(importlib.import_module(name), "SPEC", None)
        if isinstance(spec, KernelSpec):
            if spec.name in specs:
                raise ValueError(f"two kernel specs are named {spec.name!r} ({name})")
            specs[spec.name] = spec
    return specs
