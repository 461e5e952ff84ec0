"""Fused RMSNorm + MatMul, ``fused_rmsnorm_matmul(x, weight, gamma, bias=None, eps=1e-6)``: one package.

``kernel.py`` the Triton kernels, ``plans.py`` their launch plans (the tile tables and path thresholds it
shares with LayerNorm + MatMul are :mod:`kernelwatch.kernels.norm_gemm`'s), ``api.py`` the PyTorch API (launcher,
autograd,
:class:`FusedRMSLinear`), ``spec.py`` what the collector needs (:data:`SPEC`; its docstring describes the kernel).
Only :data:`SPEC` and the names it lists in ``public`` are exported here.
"""

from kernelwatch.kernels.fused_rmsnorm_matmul.api import FusedRMSLinear, fused_rmsnorm_matmul
from kernelwatch.kernels.fused_rmsnorm_matmul.spec import SPEC

__all__ = ["SPEC", "FusedRMSLinear", "fused_rmsnorm_matmul"]
