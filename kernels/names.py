"""Names every layer shares: implementations, their display labels, vendors, ceilings. Imports nothing.

The one definition of these facts. ``db``, ``ci`` and ``dashboard`` import this module (and only this one
from ``kernels``): importing it runs no torch, no Triton (``kernels/__init__.py`` loads its kernels lazily).
"""

from __future__ import annotations

KERNEL_IMPL = "triton"  # the kernel under test; every spec's implementations include it
EAGER_IMPL = "torch_eager"  # eager PyTorch: the speedup baseline (speedup = t(eager) / t(kernel))
COMPILE_IMPL = "torch_compile"
IMPLEMENTATIONS = (KERNEL_IMPL, EAGER_IMPL, COMPILE_IMPL)  # the ones every kernel is timed with
LABELS = {KERNEL_IMPL: "kernel (Triton)", EAGER_IMPL: "eager PyTorch", COMPILE_IMPL: "torch.compile"}

VENDORS = {"cuda": "nvidia", "npu": "ascend"}  # torch device type -> hardware vendor; anything else is "cpu"

# Which measured bandwidth is a case's 100%: a copy (bytes read + written, every case's floor) or a
# read-only stream (a case that reads its inputs and writes next to nothing can beat the copy rate).
COPY_CEILING = "copy"
READ_CEILING = "read"
CEILINGS = (COPY_CEILING, READ_CEILING)


def vendor(device_type: str) -> str:
    """``nvidia`` for ``cuda``, ``ascend`` for ``npu``, else ``cpu`` (the Triton interpreter)."""
    return VENDORS.get(device_type, "cpu")
