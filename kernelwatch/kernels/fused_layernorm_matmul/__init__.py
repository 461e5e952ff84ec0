"""Fused LayerNorm + MatMul, ``fused_layernorm_matmul(x, weight, gamma, beta=None, bias=None, eps=1e-5)``: one
package.

``kernel.py`` the Triton kernels, ``plans.py`` their launch plans (the tile tables and path thresholds it
shares with RMSNorm + MatMul are :mod:`kernelwatch.kernels.norm_gemm`'s), ``api.py`` the PyTorch API (launcher,
autograd,
:class:`FusedLayerNormLinear`), ``spec.py`` what the collector needs (:data:`SPEC`; its docstring describes the
kernel). Only :data:`SPEC` and the names it lists in ``public`` are exported here.
"""

from kernelwatch.kernels.fused_layernorm_matmul.api import FusedLayerNormLinear, fused_layernorm_matmul
from kernelwatch.kernels.fused_layernorm_matmul.spec import SPEC

__all__ = ["SPEC", "FusedLayerNormLinear", "fused_layernorm_matmul"]
