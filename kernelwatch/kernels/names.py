"""Names every layer shares: implementations, their display labels, vendors, ceilings, case facts. Imports nothing
of the project (and no torch).

The one definition of these facts. ``db``, ``ci`` and ``dashboard`` import this module (and only this one
from ``kernels``): importing it runs no torch, no Triton (``kernelwatch/kernels/__init__.py`` loads its kernels lazily).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
CUBLAS_IMPL = "cublas_linear"  # the fused norm+GEMM kernels' GEMM alone (F.linear): their first same-run reference
REFERENCE_LABELS = {CUBLAS_IMPL: "cuBLAS (F.linear)", "torch_rms_norm": "PyTorch F.rms_norm + F.linear"}
ALL_LABELS = {**LABELS, **PEER_LABELS, **REFERENCE_LABELS}
# Implementations as the dashboard names them, short enough for a terminal column (`kernelwatch show`).
SHORT_LABELS = {
    KERNEL_IMPL: "kernel",
    EAGER_IMPL: "eager",
    COMPILE_IMPL: "compile",
    CUBLAS_IMPL: "F.linear",
    "torch_rms_norm": "rms+linear",
}


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


# Noise classes: what a case's time is bound by, which decides how it varies between runs and between machines of
# one model (the gate's between-machine noise and machine bounds are data per class: kernelwatch.gate.machines).
# Declared by a kernel's spec (KernelSpec.facts); ``memory`` and ``gemm`` follow from its bytes and FLOPs
# (:func:`work_class`), an atomic reduction only its spec can tell.
NOISE_MEMORY, NOISE_ATOMIC, NOISE_GEMM = "memory", "atomic-reduction", "gemm"
NOISE_CLASSES = (NOISE_MEMORY, NOISE_ATOMIC, NOISE_GEMM)
# A launch-bound case's spread is launch latency's, whatever bounds its work: its own class beside these.
NOISE_LAUNCH = "launch-bound"
NOISE_LABELS = {
    NOISE_LAUNCH: "launch-bound",
    NOISE_MEMORY: "memory-bound",
    NOISE_ATOMIC: "atomic-reduction",
    NOISE_GEMM: "GEMM",
}
# A case is GEMM-class above this many floating-point operations per byte moved (the [4096]^3 matmuls have
# ~750; decode [16, 8192] GEMV 16, MSELoss 0.75, softmax 1.25).
GEMM_INTENSITY = 50.0
# A case is launch-bound when it moves at most this much and computes at most this many FLOPs: on an H200 the
# MSELoss cases of 4,096 and 1,048,576 elements (16 KiB to 8 MiB), 2-9 us a call, where one call per sample is
# mostly launch latency. The next-smallest perf case moves 64 MiB. The one definition of launch-bound: the collector
# batches such cases' calls (LAUNCH_BATCH), the gate gives them the outlier-run term and the launch-bound machine bound.
LAUNCH_BOUND_BYTES = 16 << 20
LAUNCH_BOUND_FLOPS = 1 << 30
# Calls per sample of a launch-bound case. Between-GPU spread of MSELoss at 4,096 elements (persistent fp32) on
# three H200s: one call per sample 5.32-5.87 us (1.103x), 100 calls 1.95-1.98 us (1.015x); repeat spread in one
# process 0.006-0.038 against 0.0007-0.0095 (kernelwatch/kernels/NOTES.md, "Launch-bound cases across GPUs").
LAUNCH_BATCH = 100


def work_class(nbytes: float | None, flops: float | None) -> str:
    """``gemm`` above GEMM_INTENSITY flop per byte, else ``memory`` (an atomic reduction is declared by its spec)."""
    return NOISE_GEMM if flops and nbytes and flops / nbytes > GEMM_INTENSITY else NOISE_MEMORY


def launch_bound(nbytes: float | None, flops: float | None) -> bool:
    """At most LAUNCH_BOUND_BYTES moved and LAUNCH_BOUND_FLOPS computed (unknown sizes: not launch-bound)."""
    return nbytes is not None and nbytes <= LAUNCH_BOUND_BYTES and (flops or 0) <= LAUNCH_BOUND_FLOPS


@dataclass(frozen=True)
class CaseFacts:
    """What a case's spec declares about timing it, recorded with the case in every run (``CaseInfo.facts``) and
    read by the gate (from the checked-out specs where they define the case, else from the run):

    * ``noise``: its noise class (one of NOISE_CLASSES) and ``launch_bound`` (:func:`launch_bound`);
    * ``calls_per_sample``: how many back-to-back calls one timed sample holds (LAUNCH_BATCH when launch-bound);
    * ``references``: its same-run references, preferred first, as (implementation, label): what tells a slower
      machine from a slower kernel (eager PyTorch last, every case has it);
    * ``peers``: the other projects' implementations its spec may time beside it (never gating);
    * ``device_twin``: for a case timed by the wall (a stack's eager pass), the key of the case that times the same
      work on the device alone (the stack as one CUDA graph); None for every other case.
    """

    noise: str
    launch_bound: bool
    calls_per_sample: int
    references: tuple[tuple[str, str], ...]
    peers: tuple[str, ...] = ()
    device_twin: str | None = None

    def __post_init__(self) -> None:
        if self.noise not in NOISE_CLASSES:
            raise ValueError(f"noise class {self.noise!r} is not one of {', '.join(NOISE_CLASSES)}")
        if isinstance(self.calls_per_sample, bool) or not isinstance(self.calls_per_sample, int):
            raise ValueError(f"calls_per_sample must be a whole number, got {self.calls_per_sample!r}")
        if self.calls_per_sample < 1:
            raise ValueError(f"calls_per_sample must be at least 1, got {self.calls_per_sample}")
        if not isinstance(self.launch_bound, bool):
            raise ValueError(f"launch_bound must be true or false, got {self.launch_bound!r}")

    @property
    def bound_class(self) -> str:
        """NOISE_LAUNCH for a launch-bound case, else its noise class: the key of the machine bounds."""
        return NOISE_LAUNCH if self.launch_bound else self.noise

    @property
    def reference_names(self) -> tuple[str, ...]:
        return tuple(impl for impl, _ in self.references)

    def to_data(self) -> dict[str, Any]:
        return {
            "noise": self.noise,
            "launch_bound": self.launch_bound,
            "calls_per_sample": self.calls_per_sample,
            "references": [list(r) for r in self.references],
            "peers": list(self.peers),
            **({"device_twin": self.device_twin} if self.device_twin else {}),
        }

    @classmethod
    def from_data(cls, data: Any) -> CaseFacts:
        """The facts of :meth:`to_data`'s shape; ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"case facts must be an object, got {type(data).__name__}")
        fields = {"noise", "launch_bound", "calls_per_sample", "references", "peers"}
        if set(data) - {"device_twin"} != fields:
            odd = sorted((set(data) - {"device_twin"}) ^ fields)
            raise ValueError(
                f"case facts must hold exactly {', '.join(sorted(fields))}, and may hold device_twin "
                f"(not: {', '.join(odd)})"
            )
        twin = data.get("device_twin")
        if twin is not None and not (isinstance(twin, str) and twin):
            raise ValueError(f"case facts: device_twin must be a case key, got {twin!r}")
        refs, peers = data["references"], data["peers"]
        if not isinstance(refs, list) or not all(
            isinstance(r, list) and len(r) == 2 and all(isinstance(s, str) and s for s in r) for r in refs
        ):
            raise ValueError("case facts: references must be a list of [implementation, label] pairs of text")
        if not isinstance(peers, list) or not all(isinstance(p, str) and p for p in peers):
            raise ValueError("case facts: peers must be a list of implementation names")
        return cls(
            data["noise"], data["launch_bound"], data["calls_per_sample"], tuple(map(tuple, refs)), tuple(peers), twin
        )
