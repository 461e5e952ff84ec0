"""Names every layer shares: implementations, their display labels, vendors, ceilings. Imports nothing.

The one definition of these facts. ``db``, ``ci`` and ``dashboard`` import this module (and only this one
from ``kernels``): importing it runs no torch, no Triton (``kernelwatch/kernels/__init__.py`` loads its kernels lazily).
"""

from __future__ import annotations

KERNEL_IMPL = "triton"  # the kernel under test; every spec's implementations include it
EAGER_IMPL = "torch_eager"  # eager PyTorch: the speedup baseline (speedup = t(eager) / t(kernel))
COMPILE_IMPL = "torch_compile"
IMPLEMENTATIONS = (KERNEL_IMPL, EAGER_IMPL, COMPILE_IMPL)  # the ones every kernel is timed with
LABELS = {KERNEL_IMPL: "kernel (Triton)", EAGER_IMPL: "eager PyTorch", COMPILE_IMPL: "torch.compile"}
# Peers: what a user would pick instead of this project's kernels, timed when their package imports on a CUDA
# device (kernelwatch/kernels/peers.py) and recorded beside the kernel; never gating (no target names them, the gate
# reads the kernel's rows only); the case page draws them dashed, Overview shows the kernel against the fastest.
LIGER_IMPL = "liger"  # Liger-Kernel's RMSNorm, then F.linear
FLAGGEMS_IMPL = "flaggems"  # FlagGems: its mse_loss; its RMSNorm, then F.linear
APEX_IMPL = "apex"  # NVIDIA apex's Megatron fused softmax CUDA extensions
PEER_IMPLS = (LIGER_IMPL, FLAGGEMS_IMPL, APEX_IMPL)
PEER_LABELS = {LIGER_IMPL: "peer: Liger-Kernel", FLAGGEMS_IMPL: "peer: FlagGems", APEX_IMPL: "peer: apex (Megatron)"}

# A kernel's own same-run references (not peers: part of its spec, e.g. the GEMM alone), as a page names them.
REFERENCE_LABELS = {"cublas_linear": "cuBLAS (F.linear)", "torch_rms_norm": "PyTorch F.rms_norm + F.linear"}
ALL_LABELS = {**LABELS, **PEER_LABELS, **REFERENCE_LABELS}


def label(implementation: str) -> str:
    """What every page and report calls an implementation ("cuBLAS (F.linear)" for ``cublas_linear``); an
    implementation not listed shows its stored name."""
    return ALL_LABELS.get(implementation, implementation)


VENDORS = {"cuda": "nvidia", "npu": "ascend"}  # torch device type -> hardware vendor; anything else is "cpu"

# Which measured bandwidth is a case's 100%: a copy (bytes read + written, every case's floor) or a
# read-only stream (a case that reads its inputs and writes next to nothing can beat the copy rate).
COPY_CEILING = "copy"
READ_CEILING = "read"
CEILINGS = (COPY_CEILING, READ_CEILING)


def vendor(device_type: str) -> str:
    """``nvidia`` for ``cuda``, ``ascend`` for ``npu``, else ``cpu`` (the Triton interpreter)."""
    return VENDORS.get(device_type, "cpu")


# How GPU time was taken (perf results' ``timing``): one call replayed from a graph per sample, a graph of
# many back-to-back calls per sample divided by their number (launch-bound cases), or events around a direct call.
TIMING_GRAPH, TIMING_GRAPH_BATCH, TIMING_EVENTS = "graph", "graph-batch", "events"
GRAPH_TIMINGS = (TIMING_GRAPH, TIMING_GRAPH_BATCH)
# A stack case in mode=eager (kernelwatch.kernels.spec.stack_of): host wall time of each pass of the stack, synchronised
# before and after, divided by its layers: the host path and the device work as a model called eagerly pays them.
TIMING_WALL = "wall"


def calls_per_sample(timing: str | None) -> str:
    """What one sample of a timing holds: "one call" or "a batch of calls" (:data:`TIMING_GRAPH_BATCH`). The two
    measure different things (a launch-bound MSELoss reads 5.8 us one way and 1.95 us the other), so a change
    from one to the other is a change of what the number means, never of the kernel's speed: the gate
    re-baselines it, the charts break their line at it, change points and bisect never cross it. Unrecorded
    timings (older runs) were one call per sample."""
    return "a batch of calls" if timing == TIMING_GRAPH_BATCH else "one call"
