"""KernelWatch's Triton kernels, each with its PyTorch reference and its spec.

``import kernels`` works without an accelerator: launches happen on whatever device the
tensors live on (CUDA, Ascend NPU, or the CPU through ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import importlib
import pkgutil

from kernels.mse_loss import mse_loss
from kernels.spec import Case, KernelSpec, Target, Tolerance

__all__ = ["mse_loss", "Case", "KernelSpec", "Target", "Tolerance", "discover"]


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
