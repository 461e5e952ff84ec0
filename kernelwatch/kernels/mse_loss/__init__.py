"""MSELoss, ``mse_loss(input, target, reduction="mean")``: one package.

``kernel.py`` the Triton kernels, ``plans.py`` their block tables and launch plans, ``api.py`` the PyTorch API
(launchers, autograd, :func:`mse_loss`), ``spec.py`` what the collector needs (:data:`SPEC`; its docstring
describes the kernel). Only :data:`SPEC` and the names it lists in ``public`` are exported here.
"""

from kernelwatch.kernels.mse_loss.api import mse_loss
from kernelwatch.kernels.mse_loss.spec import SPEC

__all__ = ["SPEC", "mse_loss"]
