"""Launch plans: what a launcher starts, computed by pure functions a test can evaluate anywhere.

Each kernel module has plan functions that turn (problem sizes, dtype name, a :class:`DeviceInfo`) into
:class:`Launch` records: which ``@triton.jit`` function, its grid, its compile-time constants, the Triton
type of every other argument, ``num_warps``/``num_stages``, and an estimate of the tiles it keeps on chip.
The launchers start exactly what the plan says (:func:`launch`), so the grid test, the unified-buffer
test and ``make compile-check`` all look at the launches that really happen. Nothing here touches a
device or allocates a tensor.

Ascend limits used here (triton-ascend documentation and CANN's platform description of the 910B):

* a launch has at most ``GRID_LIMIT`` = 65,535 programs (``coreDim`` is a uint16:
  ``docs/en/migration_guide/migrate_from_gpu.md``; checked at launch in ``runtime/jit.py`` unless
  ``TRITON_ALL_BLOCKS_PARALLEL=1``, which this project never relies on);
* persistent grids: one program per vector core for vector-only kernels, one per AI (cube) core for
  kernels that contain ``tl.dot`` (``docs/en/programming_guide``: "for CV fusion operators, the number of
  cores is equal to the number of cube cores");
* the unified buffer (UB) is ``UB_BYTES`` = 192 KB per core (CANN ``platform_config/Ascend910B2.ini``
  ``ub_size=196608``; the compiler's overflow message counts 1,572,864 bits); a tile's last axis is padded
  to ``UB_ALIGN`` = 32 B (``ubblock_size=32``), to ``CV_ALIGN`` = 512 B in kernels that mix cube and vector
  work (programming guide, "Aligning the Size of the Tail Axis").
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from kernelwatch.kernels.fastlaunch import fast_launcher

GRID_LIMIT = 65_535
UB_BYTES = 196_608
UB_ALIGN = 32
CV_ALIGN = 512
MULTIBUFFER = 2  # triton-ascend double-buffers global-memory loads by default ("multiBuffer ... True by default")

VENDORS = ("nvidia", "ascend", "cpu")
ITEMSIZE = {"fp64": 8, "fp32": 4, "fp16": 2, "bf16": 2, "u8": 1, "i32": 4, "i64": 8}
TORCH_TYPES = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float64: "fp64",
    torch.uint8: "u8",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.bool: "i1",
}


@dataclass(frozen=True)
class DeviceInfo:
    """What a plan needs to know about a device; the one definition of compute units.

    ``compute_units``: SMs on NVIDIA, *vector* cores on Ascend (``num_vectorcore``), CPU cores for the
    interpreter. Run metadata records this same number. ``cube_units``: Ascend AI (cube) cores
    (``num_aicore``), the program count of kernels that contain ``tl.dot``. ``capability``: CUDA compute
    capability as major*10 + minor. ``interpreter``: kernels run through ``TRITON_INTERPRET=1``.
    """

    vendor: str
    compute_units: int
    name: str = ""
    cube_units: int | None = None
    capability: int | None = None
    interpreter: bool = False

    def __hash__(self) -> int:  # plan caches hash this on every kernel call: once per description
        return self._hash

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "_hash",
            hash((self.vendor, self.compute_units, self.name, self.cube_units, self.capability, self.interpreter)),
        )
        if self.vendor not in VENDORS:
            raise ValueError(f"DeviceInfo: vendor must be one of {VENDORS}, got {self.vendor!r}")
        if self.compute_units < 1:
            raise ValueError(f"DeviceInfo: compute_units must be >= 1, got {self.compute_units}")
        if self.vendor == "ascend" and not self.cube_units:
            raise ValueError("DeviceInfo: an Ascend description needs cube_units (num_aicore)")


# Atlas 800I A2 / Ascend 910B: 24 AI cores, 48 vector cores (CANN data/platform_config/Ascend910B2.ini,
# [SoCInfo] cube_core_cnt=24, vector_core_cnt=48; num_vectorcore = 2 x num_aicore per docs/ascend.md).
ASCEND_910B = DeviceInfo("ascend", 48, name="Ascend910B (Atlas 800I A2)", cube_units=24)
# NVIDIA datasheets: A100 108 SMs (sm_80), H100 SXM and H200 132 SMs (sm_90).
NVIDIA_A100 = DeviceInfo("nvidia", 108, name="NVIDIA A100", capability=80)
NVIDIA_H200 = DeviceInfo("nvidia", 132, name="NVIDIA H200", capability=90)


# ---------------------------------------------------------------------------------------------
# On-chip footprint estimate (Ascend unified buffer)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tile:
    """One tile a program keeps in the unified buffer: ``shape`` elements of ``dtype``, ``buffers`` copies.

    A row statistic that is broadcast against a 2-D tile (``m[:, None]``) is a ``(rows, 1)`` tile.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    buffers: int = 1


def tile_bytes(tile: Tile, align: int) -> int:
    """rows x (last axis bytes rounded up to ``align``) x buffers; rows = product of the other axes."""
    *lead, last = tile.shape
    row = -(-last * ITEMSIZE[tile.dtype] // align) * align
    return math.prod(lead) * row * tile.buffers


def load(name: str, shape: tuple[int, ...], dtype: str) -> Tile:
    """A tile loaded from global memory inside a loop: multi-buffered."""
    return Tile(name, shape, dtype, MULTIBUFFER)


def work(name: str, shape: tuple[int, ...], dtype: str = "fp32") -> Tile:
    return Tile(name, shape, dtype)


@dataclass(frozen=True)
class Footprint:
    """Tiles live at once, per phase of the program (a loop body, an epilogue); the estimate is the
    largest phase. ``cube_vector``: the kernel mixes cube (``tl.dot``) and vector work, so every tail axis
    is aligned to 512 B instead of 32 B.

    The counting rule (an estimate: the compiler's own allocation happens in ``bishengir-compile``, which
    needs CANN and is not run here): every tile loaded from global memory counts ``MULTIBUFFER`` times;
    every fp32 copy of a narrower loaded tile counts once; one fp32 working tile per chain of elementwise
    operations; loop-carried accumulators; row statistics as ``(rows, 1)`` tiles; a cast tile in the
    output dtype before a narrower store.
    """

    phases: tuple[tuple[Tile, ...], ...]
    cube_vector: bool = False

    @property
    def align(self) -> int:
        return CV_ALIGN if self.cube_vector else UB_ALIGN

    def phase_bytes(self) -> tuple[int, ...]:
        return tuple(sum(tile_bytes(t, self.align) for t in phase) for phase in self.phases)

    @property
    def bytes(self) -> int:
        return max(self.phase_bytes(), default=0)

    def fits(self, budget: int = UB_BYTES) -> bool:
        return self.bytes <= budget


# ---------------------------------------------------------------------------------------------
# Launches
# ---------------------------------------------------------------------------------------------
def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


def _static_args(fn: Any, positional: int, kwargs: dict[str, Any]) -> tuple[tuple, tuple] | None:
    """What the short launch path would otherwise rebuild on every call: the hashable constexpr key and
    the constexpr values after the ``positional`` arguments, in parameter order. None where a constexpr
    is left to its default or a value is unhashable (the path then works them out per call)."""
    tail = list(getattr(fn, "arg_names", ()))[positional:]
    if not all(name in kwargs for name in tail):
        return None
    items = tuple(kwargs.items())
    try:
        hash(items)
    except TypeError:
        return None
    return items, tuple(kwargs[name] for name in tail)


@dataclass(frozen=True)
class Launch:
    """One kernel launch: ``fn[grid](*args, **constexprs, num_warps=..., num_stages=...)``.

    ``signature``: the Triton type of every parameter that is not a constexpr, in order (``*fp16``,
    ``i32``, ``fp32``), which is what a compiler needs besides the constexprs. ``None`` warps or stages
    leave Triton's default. ``footprint``: the unified-buffer estimate of one program.
    """

    fn: Any
    grid: tuple[int, ...]
    constexprs: Mapping[str, Any]
    signature: Mapping[str, str]
    num_warps: int | None = None
    num_stages: int | None = None
    footprint: Footprint | None = None
    launch_pdl: bool = False  # programmatic dependent launch (Hopper): may start before the previous launch ends

    def __post_init__(self) -> None:
        object.__setattr__(self, "constexprs", _frozen(self.constexprs))
        object.__setattr__(self, "signature", _frozen(self.signature))
        kwargs = {**self.constexprs, **self.options}
        object.__setattr__(self, "_kwargs", kwargs)  # what launch() passes
        object.__setattr__(self, "_static", _static_args(self.fn, len(self.signature), kwargs))

    @property
    def name(self) -> str:
        return kernel_name(self.fn)

    @property
    def programs(self) -> int:
        return math.prod(self.grid)

    @property
    def options(self) -> dict[str, int | bool]:
        opts: dict[str, int | bool] = {}
        if self.num_warps is not None:
            opts["num_warps"] = self.num_warps
        if self.num_stages is not None:
            opts["num_stages"] = self.num_stages
        if self.launch_pdl:
            opts["launch_pdl"] = True
        return opts

    def config(self) -> str:
        """The compile-relevant part, printable: constexprs, then warps and stages."""
        parts = [f"{k}={_show(v)}" for k, v in self.constexprs.items()]
        parts += [f"{k}={v}" for k, v in self.options.items()]
        return " ".join(parts)


@dataclass(frozen=True)
class Autotuned:
    """A launch whose configuration Triton's autotuner picks, once per ``key``, among ``candidates``."""

    candidates: tuple[Launch, ...]
    key: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.candidates[0].name


Step = Launch | Autotuned


def launches(steps: Sequence[Step]) -> Iterator[Launch]:
    """Every concrete launch of a plan (each autotuning candidate counts)."""
    for step in steps:
        if isinstance(step, Autotuned):
            yield from step.candidates
        else:
            yield step


def _show(value: Any) -> str:
    return value.name if hasattr(value, "name") and not isinstance(value, (int, float, str)) else str(value)


def kernel_name(fn: Any) -> str:
    return getattr(getattr(fn, "fn", fn), "__name__", str(fn))


def kernel_params(fn: Any) -> tuple[list[str], list[str]]:
    """(non-constexpr parameter names, constexpr parameter names) of a ``@triton.jit`` function."""
    python_fn = getattr(fn, "fn", fn)
    plain, const = [], []
    for p in inspect.signature(python_fn).parameters.values():
        annotation = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")
        (const if str(annotation).endswith("constexpr") else plain).append(p.name)
    return plain, const


def int_type(value: int) -> str:
    return "i32" if -(2**31) <= value < 2**31 else "i64"


def pointer(dtype: str) -> str:
    return "*" + dtype


def descriptor(dtype: str, block: tuple[int, ...]) -> str:
    """A TMA tensor descriptor argument (Hopper and later), as Triton names its type."""
    return f"tensordesc<{dtype}{list(block)}>"


# ---------------------------------------------------------------------------------------------
# Starting a launch (the only way the launchers start a kernel), and checking launches in tests
# ---------------------------------------------------------------------------------------------
@dataclass
class Recorder:
    """``steps``: every step launched. With ``dry``, nothing starts: ``calls`` gets each concrete launch with
    its arguments instead (every candidate of an autotuned step), which is what a compiler ahead of the run
    needs (:mod:`kernelwatch.collect.precompile`)."""

    steps: list[Step] = field(default_factory=list)
    dry: bool = False
    calls: list[tuple[Launch, tuple]] = field(default_factory=list)


_recorder: Recorder | None = None


@contextlib.contextmanager
def recording(dry: bool = False) -> Iterator[Recorder]:
    """Record every step launched inside the block and check its arguments against its signature; with
    ``dry``, start none of them (see :class:`Recorder`)."""
    global _recorder
    previous, _recorder = _recorder, Recorder(dry=dry)
    try:
        yield _recorder
    finally:
        _recorder = previous


def arg_type(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return pointer(TORCH_TYPES.get(value.dtype, str(value.dtype)))
    if hasattr(value, "base") and hasattr(value, "block_shape"):  # triton.tools.tensor_descriptor.TensorDescriptor
        return descriptor(TORCH_TYPES.get(value.base.dtype, str(value.base.dtype)), tuple(value.block_shape))
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return int_type(value)
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"unsupported kernel argument of type {type(value).__name__}")


def check_args(step: Launch, args: Sequence[Any]) -> None:
    """Raise if the arguments do not match the launch's signature or its constexprs are incomplete."""
    plain, const = kernel_params(step.fn)
    if list(step.signature) != plain or len(args) != len(plain):
        raise AssertionError(
            f"{step.name}: plan signature {list(step.signature)} / {len(args)} arguments "
            f"do not match the kernel's parameters {plain}"
        )
    if sorted(step.constexprs) != sorted(const):
        raise AssertionError(f"{step.name}: plan constexprs {sorted(step.constexprs)} != kernel's {sorted(const)}")
    for name, value in zip(plain, args):
        got = arg_type(value)
        if got != step.signature[name] and not (got == "i32" and step.signature[name] == "i64"):
            raise AssertionError(f"{step.name}: argument {name} is {got}, the plan says {step.signature[name]}")


def launch(step: Launch, *args: Any) -> None:
    """``step.fn[step.grid](*args, **step.constexprs, **options)``, through the short CUDA launch path
    of :mod:`kernelwatch.kernels.fastlaunch` where it applies."""
    if _recorder is not None:
        check_args(step, args)
        _recorder.steps.append(step)
        if _recorder.dry:
            _recorder.calls.append((step, args))
            return
    fast_launcher(step.fn)(step.grid, args, step._kwargs, step._static)


_CHOSEN: dict[int, tuple[Autotuned, Launch]] = {}  # id(step) -> (step, the candidate its autotuner chose)


def chosen_candidate(step: Autotuned, config: Any) -> Launch | None:
    """The candidate of ``step`` that a ``triton.Config`` describes (its kwargs, warps and stages), if any."""
    if config is None:
        return None
    for cand in step.candidates:
        if (
            all(cand.constexprs.get(k) == v for k, v in config.kwargs.items())
            and cand.num_warps in (None, config.num_warps)
            and cand.num_stages in (None, config.num_stages)
        ):
            return cand
    return None


def launch_autotuned(step: Autotuned, tuner: Any, grid: Any, *args: Any, **constexprs: Any) -> None:
    """Start the autotuner (which picks among ``step.candidates``) with the constexprs it does not tune.

    A plan's step stands for one problem (its sizes and dtypes), so once the autotuner has chosen, later
    calls launch the chosen candidate through :func:`launch` (the short path) instead of the autotuner's
    own, whose host side cost 117-201 us per decode-sized call on an H200 (kernelwatch/kernels/NOTES.md)."""
    if _recorder is not None:
        check_args(step.candidates[0], args)
        _recorder.steps.append(step)
        if _recorder.dry:
            _recorder.calls.extend((candidate, args) for candidate in step.candidates)
            return
    held = _CHOSEN.get(id(step))
    if held is not None and held[0] is step:
        chosen = held[1]
        fast_launcher(chosen.fn)(chosen.grid, args, chosen._kwargs, chosen._static)
        return
    tuner[grid](*args, **constexprs)
    chosen = chosen_candidate(step, getattr(tuner, "best_config", None))
    if chosen is not None:
        if len(_CHOSEN) >= 1024:
            _CHOSEN.clear()
        _CHOSEN[id(step)] = (step, chosen)
