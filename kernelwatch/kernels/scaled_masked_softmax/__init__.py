"""Scaled masked softmax (Megatron-LM / apex semantics) and its causal variant: one package.

``kernel.py`` the Triton kernels, ``plans.py`` their tile tables and launch plans, ``api.py`` the PyTorch API
(launchers, autograd, :func:`scaled_masked_softmax`, :func:`scaled_upper_triang_masked_softmax`), ``spec.py``
what the collector needs (:data:`SPEC`, the PyTorch references; its docstring describes the kernel). Only
:data:`SPEC` and the names it lists in ``public`` are exported here.
"""

from kernelwatch.kernels.scaled_masked_softmax.api import scaled_masked_softmax, scaled_upper_triang_masked_softmax
from kernelwatch.kernels.scaled_masked_softmax.spec import SPEC

__all__ = ["SPEC", "scaled_masked_softmax", "scaled_upper_triang_masked_softmax"]
