"""How a kernel describes itself to the collector: cases, tolerances, targets, bytes, FLOPs.

A kernel package (or module) exposes ``SPEC = KernelSpec(...)``. The collector discovers every module and
package in this package that has one; adding a kernel is adding a package.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from kernelwatch.kernels.names import (  # noqa: F401 - the specs' peers
    APEX_IMPL,
    CEILINGS,
    COMPILE_IMPL,
    COPY_CEILING,
    EAGER_IMPL,
    FLAGGEMS_IMPL,
    KERNEL_IMPL,
    LABELS,
    LAUNCH_BATCH,
    LIGER_IMPL,
    NOISE_CLASSES,
    PEER_IMPLS,
    CaseFacts,
    launch_bound,
    work_class,
)

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp64": torch.float64,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
BOUNDS = ("memory", "compute")


@dataclass(frozen=True)
class Tolerance:
    """Elementwise check |out - ref| <= atol + rtol * |ref| against a float64 reference."""

    rtol: float
    atol: float


@dataclass(frozen=True)
class Target:
    """A documented performance goal for one perf case; criteria left None are not checked.

    ``max_ratio_to`` holds (implementation, ratio): t(kernel) <= ratio * t(implementation).
    """

    min_pct_peak: float | None = None
    min_speedup_vs_eager: float | None = None
    min_speedup_vs_compile: float | None = None
    max_ratio_to: tuple[str, float] | None = None
    source: str = ""

    def describe(self) -> str:
        parts = []
        if self.min_pct_peak is not None:
            parts.append(f">={self.min_pct_peak:g}% of peak")
        if self.min_speedup_vs_eager is not None:
            parts.append(f">={self.min_speedup_vs_eager:g}x eager")
        if self.min_speedup_vs_compile is not None:
            parts.append(f">={self.min_speedup_vs_compile:g}x torch.compile")
        if self.max_ratio_to is not None:
            parts.append(f"<={self.max_ratio_to[1]:g}x time of {self.max_ratio_to[0]}")
        return "; ".join(parts)

    def evaluate(self, pct_peak: float | None, medians: Mapping[str, float | None]) -> bool | None:
        """True/False when every criterion could be judged, None when a needed number is missing."""
        kernel = medians.get(KERNEL_IMPL)
        checks: list[bool | None] = []
        if self.min_pct_peak is not None:
            checks.append(None if pct_peak is None else pct_peak >= self.min_pct_peak)

        def vs(impl: str, factor: float) -> bool | None:
            other = medians.get(impl)
            return None if other is None or kernel is None else other / kernel >= factor

        if self.min_speedup_vs_eager is not None:
            checks.append(vs(EAGER_IMPL, self.min_speedup_vs_eager))
        if self.min_speedup_vs_compile is not None:
            checks.append(vs(COMPILE_IMPL, self.min_speedup_vs_compile))
        if self.max_ratio_to is not None:
            checks.append(vs(self.max_ratio_to[0], 1.0 / self.max_ratio_to[1]))
        if any(c is False for c in checks):
            return False
        return None if any(c is None for c in checks) or not checks else True


def _fmt(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "x".join(str(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class Case:
    """One point of a kernel's suite. ``key`` is stable across runs and machines."""

    kernel: str
    variant: str
    dtype: str
    params: tuple[tuple[str, Any], ...]
    tol: Tolerance | None = None
    target: Target | None = None
    trials: int = 3

    @staticmethod
    def make(
        kernel: str,
        variant: str,
        dtype: str,
        tol: Tolerance | None = None,
        target: Target | None = None,
        trials: int = 3,
        **params: Any,
    ) -> Case:
        frozen = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items()))
        return Case(kernel, variant, dtype, frozen, tol, target, trials)

    @property
    def p(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def key(self) -> str:
        return f"{self.kernel}/{self.variant}/{self.dtype}/" + ",".join(f"{k}={_fmt(v)}" for k, v in self.params)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def json_params(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.params}


Inputs = dict[str, Any]
Runner = Callable[[], Any]


@dataclass(frozen=True)
class KernelSpec:
    """Everything the collector needs to check and time one kernel.

    * ``make_inputs(case, device, seed)``: fresh random inputs (never zeros) for a case.
    * ``run(case, inputs)``: the Triton implementation; returns the tensors that are checked.
    * ``reference(case, inputs)``: the same tensors computed in float64 by PyTorch.
    * ``implementations(case, inputs)``: implementation name -> zero-argument callable to time;
      must include ``KERNEL_IMPL`` and ``EAGER_IMPL`` (:mod:`kernelwatch.kernels.names`).
    * ``bytes_moved`` / ``flops``: the minimum traffic and arithmetic of a case (roofline).
    * ``profile_kernel``: a regex of the Triton kernel name(s) a profiler should look at.
    * ``launch_plans(case, device)``: every kernel launch (``kernelwatch.kernels.plan.Launch``) running the case makes
      on a device description, from the same plan functions the launchers use.
    * ``bound``: ``"memory"`` (vector / bandwidth-bound) or ``"compute"`` (cube / matrix-bound), which
      selects the profiler ideals; ``profiler_ideals`` overrides single metrics' ideals.
    * ``variants``: every variant its cases use, in the order to show them (synthetic history draws from
      them); left empty, :meth:`variant_names` reads them off the cases.
    * ``ceiling(case)``: which measured bandwidth is the case's 100% (``kernelwatch.kernels.names.CEILINGS``): ``copy``
      (bytes read + written; the default) or ``read`` (a case that only reads: a read-only stream can beat
      a copy). The collector stores it with the case; the dashboard reads it there.
    * ``plan_sample``: the launch-plan test starts every n-th accuracy case in the interpreter under each
      simulated device (4n off Ascend): 1 for kernels with few cases, more where the suite is large.
    * ``public``: the module's public API, exported as ``kernels.<name>``.
    * The facts the gate reads (:meth:`facts`, recorded with each case of a run): ``noise(case)``, the case's noise
      class (``kernelwatch.kernels.names.NOISE_CLASSES``; None: from its bytes and FLOPs, ``work_class``: an atomic
      reduction must say so); ``references(case)``, its same-run references other than eager PyTorch, preferred
      first, as (implementation, label) (eager PyTorch is always the last); ``peers``, the other projects'
      implementations (``PEER_IMPLS``) its ``implementations`` may add where they import.
    """

    name: str
    accuracy_cases: Callable[[], list[Case]]
    perf_cases: Callable[[], list[Case]]
    make_inputs: Callable[[Case, torch.device, int], Inputs]
    run: Callable[[Case, Inputs], tuple[torch.Tensor, ...]]
    reference: Callable[[Case, Inputs], tuple[torch.Tensor, ...]]
    implementations: Callable[[Case, Inputs], dict[str, Runner]]
    bytes_moved: Callable[[Case], int]
    flops: Callable[[Case], int] = field(default=lambda case: 0)
    profile_kernel: Callable[[Case], str] = field(default=lambda case: ".")
    launch_plans: Callable[[Case, Any], tuple[Any, ...]] = field(default=lambda case, device: ())
    bound: str = "memory"
    profiler_ideals: Mapping[str, str | None] = field(default_factory=dict)
    variants: tuple[str, ...] = ()
    ceiling: Callable[[Case], str] = field(default=lambda case: COPY_CEILING)
    plan_sample: int = 1
    public: tuple[str, ...] = ()
    doc: str = ""
    noise: Callable[[Case], str] | None = None
    references: Callable[[Case], tuple[tuple[str, str], ...]] = field(default=lambda case: ())
    peers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.bound not in BOUNDS:
            raise ValueError(f"KernelSpec {self.name!r}: bound must be one of {BOUNDS}, got {self.bound!r}")
        if self.plan_sample < 1:
            raise ValueError(f"KernelSpec {self.name!r}: plan_sample must be >= 1, got {self.plan_sample}")
        odd = [p for p in self.peers if p not in PEER_IMPLS]
        if odd:
            raise ValueError(f"KernelSpec {self.name!r}: peers {odd} are not among {PEER_IMPLS}")

    def facts(self, case: Case) -> CaseFacts:
        """What the gate knows of timing ``case`` (:class:`~kernelwatch.kernels.names.CaseFacts`): its noise class
        (``noise``, else from its size), whether it is launch-bound and so timed :data:`LAUNCH_BATCH` calls per
        sample (from its size: ``kernelwatch.kernels.names.launch_bound``), its same-run references (``references``,
        then eager PyTorch) and its peers."""
        nbytes, flops = self.bytes_moved(case), self.flops(case)
        noise = self.noise(case) if self.noise is not None else work_class(nbytes, flops)
        if noise not in NOISE_CLASSES:
            raise ValueError(f"KernelSpec {self.name!r}: noise of {case.key} is {noise!r}, not one of {NOISE_CLASSES}")
        short = launch_bound(nbytes, flops)
        refs = tuple((impl, label) for impl, label in self.references(case) if impl != EAGER_IMPL)
        return CaseFacts(
            noise,
            short,
            LAUNCH_BATCH if short else 1,
            (*refs, (EAGER_IMPL, LABELS[EAGER_IMPL])),
            tuple(self.peers),
            device_twin(case),
        )

    def variant_names(self) -> tuple[str, ...]:
        """``variants``, or the variants of its cases in order of first appearance."""
        if self.variants:
            return self.variants
        cases = (*self.accuracy_cases(), *self.perf_cases())
        return tuple(dict.fromkeys(c.variant for c in cases))

    def case_ceiling(self, case: Case) -> str:
        """``ceiling(case)``, checked against :data:`kernelwatch.kernels.names.CEILINGS`."""
        value = self.ceiling(case)
        if value not in CEILINGS:
            raise ValueError(f"KernelSpec {self.name!r}: ceiling of {case.key} is {value!r}, not one of {CEILINGS}")
        return value

    def baseline_key(self, case: Case) -> str:
        """Cases that differ only in variant share their PyTorch baselines."""
        return case.key.replace(f"/{case.variant}/", "/*/", 1)


# Stack cases: L distinct layers (each its own weight and norm parameters) called in turn on one input, as a model
# calls the kernel, timed per layer. ``mode`` eager: each pass with its host path, synchronised at its end;
# graph: one CUDA graph of the whole stack. The case's params carry both (``layers=32``, ``mode=eager``).
STACK_MODES = ("eager", "graph")
# The interpreter's stand-in for any stack case (layers, rows, K, N): perf is not measured on the CPU, but
# ``collect --cpu-perf`` runs the same path there on sizes it can finish.
CPU_STACK = (2, 4, 32, 16)


@dataclass(frozen=True)
class Stack:
    """A stack case's shape as it runs on one device: ``layers`` layers of x ``shape`` -> ``n`` columns."""

    layers: int
    mode: str
    shape: tuple[int, ...]
    n: int


def wall_timed(case: Case) -> bool:
    """Whether the collector times ``case`` by the wall, its host path counted: a stack case in ``mode=eager``."""
    return "layers" in case.p and case.p.get("mode") == "eager"


def device_twin(case: Case) -> str | None:
    """The key of the case that times a wall-timed case's work on the device alone: its stack as one CUDA graph
    (``mode=graph``, every other param the same); None for a case not timed by the wall."""
    if not wall_timed(case):
        return None
    return replace(case, params=tuple((k, "graph" if k == "mode" else v) for k, v in case.params)).key


def stack_of(case: Case, device: torch.device) -> Stack | None:
    """The stack a case runs on ``device`` (:data:`CPU_STACK`'s stand-in in the interpreter; the real sizes where
    a GPU is only described, as the ahead-of-time compiler does), None for a single-call case. Its params:
    ``layers``, ``mode`` (one of :data:`STACK_MODES`), ``shape`` (x's) and ``n``."""
    p = case.p
    if "layers" not in p:
        return None
    if p["mode"] not in STACK_MODES:
        raise ValueError(f"{case.key}: mode must be one of {STACK_MODES}, got {p['mode']!r}")
    from kernelwatch.kernels.device import describe

    device = torch.device(device)
    if device.type == "cpu" and describe(device).interpreter:
        layers, rows, k, n = CPU_STACK
        return Stack(layers, p["mode"], (rows, k), n)
    return Stack(int(p["layers"]), p["mode"], tuple(p["shape"]), int(p["n"]))


def numel(shape: tuple[int, ...] | list[int]) -> int:
    return math.prod(shape)


def element_size(dtype: str) -> int:
    return torch.tensor([], dtype=DTYPES[dtype]).element_size()


def tolerances(specs: Mapping[str, KernelSpec]) -> dict[str, tuple[float, float]]:
    """(rtol, atol) of every accuracy case of ``specs`` (``kernels.discover()``), by case key: what the gate checks
    a stored accuracy row's tolerance against."""
    return {c.key: (c.tol.rtol, c.tol.atol) for spec in specs.values() for c in spec.accuracy_cases() if c.tol}


def case_facts(specs: Mapping[str, KernelSpec]) -> dict[str, CaseFacts]:
    """The facts (:meth:`KernelSpec.facts`) of every perf case ``specs`` define, by case key: what the gate reads
    for the cases the checked-out tree defines."""
    return {c.key: spec.facts(c) for spec in specs.values() for c in spec.perf_cases()}


def case_kernels(specs: Mapping[str, KernelSpec]) -> dict[str, dict[str, str]]:
    """Suite -> {case key: kernel} of every case ``specs`` (``kernels.discover()``) define: what the gate expects a
    candidate to measure."""
    return {
        "accuracy": {c.key: spec.name for spec in specs.values() for c in spec.accuracy_cases()},
        "perf": {c.key: spec.name for spec in specs.values() for c in spec.perf_cases()},
    }
