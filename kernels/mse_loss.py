r"""MSELoss: ``mse_loss(input, target, reduction="mean")`` with the semantics of
``torch.nn.functional.mse_loss``.

    none:  out_i = (x_i - y_i)^2                       (shape of the input)
    sum:   out   = \sum_i (x_i - y_i)^2                (0-d)
    mean:  out   = (1/n) \sum_i (x_i - y_i)^2          (0-d; nan for n = 0)
    d out / d x_i = 2 s (x_i - y_i) g_i = - d out / d y_i,   s = 1/n for mean, 1 otherwise

Squares are accumulated in fp32 whatever the input dtype; the result is cast to it.

Two reduction variants, both kept so the dashboard shows what the optimisation bought:

* ``atomic`` (design document "mse_loss_triton_ascend_design", docs/kernels.md): one program per BLOCK, each
  ``atomic_add``-ing its partial sum into a single fp32 cell.
* ``persistent`` (design document "mse_loss_grid_stride_optimization", docs/kernels.md): a fixed grid of
  programs (one per vector core on Ascend, SMs x waves on CUDA) that stride over the tensor,
  accumulate in registers and write one partial each; a second one-program stage adds the
  partials in a fixed order, so the result has the same bits on every run.

On Ascend a launch has at most 65,535 programs, so every launch there is a grid of one program per
vector core looping over the blocks (``*_persistent_kernel``); the atomic variant keeps one
``atomic_add`` per BLOCK. Launches come from :func:`plan_forward` / :func:`plan_backward`.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

from kernels.device import INTERPRETER_PROGRAMS, describe
from kernels.names import COPY_CEILING, READ_CEILING
from kernels.peers import flaggems
from kernels.plan import DeviceInfo, Footprint, Launch, Tile, int_type, launch, load, pointer, work
from kernels.poison import new_output
from kernels.spec import (
    COMPILE_IMPL,
    DTYPE_NAMES,
    EAGER_IMPL,
    FLAGGEMS_IMPL,
    KERNEL_IMPL,
    Case,
    KernelSpec,
    Target,
    Tolerance,
    element_size,
    numel,
)

REDUCTIONS = ("none", "mean", "sum")
VARIANTS = ("persistent", "atomic")

# ---------------------------------------------------------------------------------------------
# Tile configurations, per vendor. (upper bound on n, inclusive or None for "any") -> BLOCK.
# ---------------------------------------------------------------------------------------------
# atomic, from the design document (docs/kernels.md): BLOCK 256 below 4096 elements, 512 below 1,048,576, else 1024.
ATOMIC_BLOCKS = ((4095, 256), (1_048_575, 512), (None, 1024))
# persistent on Ascend, from the design document (docs/kernels.md; UB is 192 KB, docs/ascend.md).
ASCEND_PERSISTENT_BLOCKS = ((16_384, 1024), (131_072, 2048), (4_194_304, 4096), (None, 8192))
# persistent on NVIDIA: BLOCK, warps and programs per SM, from the H200 sweep in
# benchmarks/mse_loss_tune.py (see kernels/NOTES.md).
CUDA_PERSISTENT = {"BLOCK": 8192, "num_warps": 8, "waves": 4}
CUDA_SMALL_N = 16_384  # up to this, one program does everything in one launch
ELEMENTWISE_BLOCK = {"nvidia": 1024, "ascend": 4096, "cpu": 1024}
# The last program to finish adds the partials (one launch instead of two). Off on Ascend until its
# atomics' memory ordering has been checked on an NPU.
FUSED_FINISH = {"nvidia": True, "ascend": False, "cpu": True}
INTERPRETER_PERSISTENT_BLOCK = 1024


def _pick(table: tuple[tuple[int | None, int], ...], n: int) -> int:
    for bound, value in table:
        if bound is None or n <= bound:
            return value
    raise AssertionError("table must end with a catch-all row")


# ---------------------------------------------------------------------------------------------
# Triton kernels. The *_tile helpers are one block's work; the plain kernels run one block per program
# (NVIDIA, interpreter), the *_persistent kernels loop blocks over a grid of one program per vector
# core (Ascend: a launch has at most 65,535 programs, see kernels/plan.py).
# ---------------------------------------------------------------------------------------------
@triton.jit
def _mse_none_tile(x_ptr, y_ptr, out_ptr, n, tile, BLOCK: tl.constexpr):
    offs = tl.cast(tile, tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    d = x - y
    tl.store(out_ptr + offs, (d * d).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _mse_none_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    _mse_none_tile(x_ptr, y_ptr, out_ptr, n, tl.program_id(0), BLOCK)


@triton.jit
def _mse_none_persistent_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    for tile in range(tl.program_id(0), tl.cdiv(n, BLOCK), tl.num_programs(0)):
        _mse_none_tile(x_ptr, y_ptr, out_ptr, n, tile, BLOCK)


@triton.jit
def _mse_atomic_tile(x_ptr, y_ptr, acc_ptr, n, tile, BLOCK: tl.constexpr):
    offs = tl.cast(tile, tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    d = x - y
    tl.atomic_add(acc_ptr, tl.sum(d * d, axis=0))


@triton.jit
def _mse_atomic_kernel(x_ptr, y_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    _mse_atomic_tile(x_ptr, y_ptr, acc_ptr, n, tl.program_id(0), BLOCK)


@triton.jit
def _mse_atomic_persistent_kernel(x_ptr, y_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    """One atomic_add per BLOCK as in the design document (docs/kernels.md), the blocks looped over the vector cores."""
    for tile in range(tl.program_id(0), tl.cdiv(n, BLOCK), tl.num_programs(0)):
        _mse_atomic_tile(x_ptr, y_ptr, acc_ptr, n, tile, BLOCK)


@triton.jit
def _mse_persistent_kernel(
    x_ptr,
    y_ptr,
    partial_ptr,
    out_ptr,
    count_ptr,
    n,
    scale,
    BLOCK: tl.constexpr,
    SINGLE: tl.constexpr,
    FUSED_FINISH: tl.constexpr,
    FINISH_BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    num_full = n // BLOCK
    for tile in range(pid, num_full, nprog):
        offs = tile * BLOCK + tl.arange(0, BLOCK)  # < n, so no overflow in n's own int width
        x = tl.load(x_ptr + offs).to(tl.float32)
        y = tl.load(y_ptr + offs).to(tl.float32)
        d = x - y
        acc += d * d
    if pid == nprog - 1:
        offs = num_full * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        d = x - y
        acc += d * d
    total = tl.sum(acc, axis=0)
    if SINGLE:
        tl.store(out_ptr, (total * scale).to(out_ptr.dtype.element_ty))
    else:
        tl.store(partial_ptr + pid, total)
        if FUSED_FINISH:
            # acq_rel: our partial is visible before the count moves; the last program sees them all
            done = tl.atomic_add(count_ptr, 1, sem="acq_rel")
            if done == nprog - 1:
                offs = tl.arange(0, FINISH_BLOCK)
                partials = tl.load(partial_ptr + offs, mask=offs < nprog, other=0.0, cache_modifier=".cg")
                tl.store(out_ptr, (tl.sum(partials, axis=0) * scale).to(out_ptr.dtype.element_ty))
                tl.atomic_xchg(count_ptr, 0)  # ready for the next launch


@triton.jit
def _mse_finish_kernel(partial_ptr, out_ptr, num_partials, scale, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    partials = tl.load(partial_ptr + offs, mask=offs < num_partials, other=0.0)
    tl.store(out_ptr, (tl.sum(partials, axis=0) * scale).to(out_ptr.dtype.element_ty))


@triton.jit
def _mse_backward_tile(
    x_ptr,
    y_ptr,
    g_ptr,
    gx_ptr,
    gy_ptr,
    n,
    scale,
    tile,
    G_SCALAR: tl.constexpr,
    WRITE_GX: tl.constexpr,
    WRITE_GY: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offs = tl.cast(tile, tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if G_SCALAR:
        g = tl.load(g_ptr).to(tl.float32)
    else:
        g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    gx = (2.0 * scale) * (x - y) * g
    if WRITE_GX:
        tl.store(gx_ptr + offs, gx.to(gx_ptr.dtype.element_ty), mask=mask)
    if WRITE_GY:
        tl.store(gy_ptr + offs, (-gx).to(gy_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _mse_backward_kernel(
    x_ptr,
    y_ptr,
    g_ptr,
    gx_ptr,
    gy_ptr,
    n,
    scale,
    G_SCALAR: tl.constexpr,
    WRITE_GX: tl.constexpr,
    WRITE_GY: tl.constexpr,
    BLOCK: tl.constexpr,
):
    _mse_backward_tile(
        x_ptr, y_ptr, g_ptr, gx_ptr, gy_ptr, n, scale, tl.program_id(0), G_SCALAR, WRITE_GX, WRITE_GY, BLOCK
    )


@triton.jit
def _mse_backward_persistent_kernel(
    x_ptr,
    y_ptr,
    g_ptr,
    gx_ptr,
    gy_ptr,
    n,
    scale,
    G_SCALAR: tl.constexpr,
    WRITE_GX: tl.constexpr,
    WRITE_GY: tl.constexpr,
    BLOCK: tl.constexpr,
):
    for tile in range(tl.program_id(0), tl.cdiv(n, BLOCK), tl.num_programs(0)):
        _mse_backward_tile(x_ptr, y_ptr, g_ptr, gx_ptr, gy_ptr, n, scale, tile, G_SCALAR, WRITE_GX, WRITE_GY, BLOCK)


# ---------------------------------------------------------------------------------------------
# Launch plans: pure functions of (n, dtype, device description); the launchers below start exactly these
# ---------------------------------------------------------------------------------------------
def _upcast(name: str, shape: tuple[int, ...], dtype: str) -> list[Tile]:
    return [] if dtype == "fp32" else [work(name, shape)]


def _cast(name: str, shape: tuple[int, ...], dtype: str) -> list[Tile]:
    return [] if dtype == "fp32" else [work(name, shape, dtype)]


def _stream_tiles(block: int, dtype: str, loads: tuple[str, ...] = ("x", "y")) -> list[Tile]:
    """Loaded inputs (multi-buffered), their fp32 copies and one fp32 working tile."""
    tiles = [load(name, (block,), dtype) for name in loads]
    for name in loads:
        tiles += _upcast(name + "_f32", (block,), dtype)
    return [*tiles, work("d", (block,))]


def _elementwise(fn_plain: Any, fn_persistent: Any, n: int, block: int, device: DeviceInfo) -> tuple[Any, tuple]:
    """One program per block, or (Ascend) blocks looped over one program per vector core."""
    tiles = triton.cdiv(n, block)
    if device.vendor == "ascend":
        return fn_persistent, (min(tiles, device.compute_units),)
    return fn_plain, (tiles,)


def _persistent_launch(n: int, dtype: str, device: DeviceInfo) -> tuple[Launch, ...]:
    kind = device.vendor
    if kind == "ascend":
        block, warps, programs = _pick(ASCEND_PERSISTENT_BLOCKS, n), 4, device.compute_units
    elif kind == "nvidia":
        block, warps = CUDA_PERSISTENT["BLOCK"], CUDA_PERSISTENT["num_warps"]
        programs = device.compute_units * CUDA_PERSISTENT["waves"]
        if n <= CUDA_SMALL_N:
            block = max(256, min(block, triton.next_power_of_2(max(n, 1))))
            programs = 1
    else:
        block, warps, programs = INTERPRETER_PERSISTENT_BLOCK, 4, INTERPRETER_PROGRAMS
    grid = max(1, min(programs, triton.cdiv(n, block)))
    footprint = Footprint(((*_stream_tiles(block, dtype), work("acc", (block,))),))
    sig = {
        "x_ptr": pointer(dtype),
        "y_ptr": pointer(dtype),
        "partial_ptr": pointer(dtype),
        "out_ptr": pointer(dtype),
        "count_ptr": pointer(dtype),
        "n": int_type(n),
        "scale": "fp32",
    }
    if grid == 1:
        return (
            Launch(
                _mse_persistent_kernel,
                (1,),
                {"BLOCK": block, "SINGLE": True, "FUSED_FINISH": False, "FINISH_BLOCK": 1},
                sig,
                warps,
                footprint=footprint,
            ),
        )
    fused = FUSED_FINISH[kind]
    finish_block = triton.next_power_of_2(grid)
    sig = {**sig, "partial_ptr": "*fp32", "count_ptr": "*i32" if fused else pointer(dtype)}
    main = Launch(
        _mse_persistent_kernel,
        (grid,),
        {"BLOCK": block, "SINGLE": False, "FUSED_FINISH": fused, "FINISH_BLOCK": finish_block},
        sig,
        warps,
        footprint=footprint,
    )
    if fused:
        return (main,)
    return (main, _finish_launch(grid, finish_block, dtype))


def _finish_launch(partials: int, block: int, dtype: str) -> Launch:
    sig = {"partial_ptr": "*fp32", "out_ptr": pointer(dtype), "num_partials": "i32", "scale": "fp32"}
    return Launch(_mse_finish_kernel, (1,), {"BLOCK": block}, sig, footprint=Footprint(((work("p", (block,)),),)))


def plan_forward(n: int, reduction: str, variant: str, dtype: str, device: DeviceInfo) -> tuple[Launch, ...]:
    """The launches of ``mse_loss_forward`` for n elements of ``dtype`` on ``device`` (none for n = 0)."""
    if n == 0:
        return ()
    sig = {"x_ptr": pointer(dtype), "y_ptr": pointer(dtype), "out_ptr": pointer(dtype), "n": int_type(n)}
    if reduction == "none":
        block = ELEMENTWISE_BLOCK[device.vendor]
        fn, grid = _elementwise(_mse_none_kernel, _mse_none_persistent_kernel, n, block, device)
        tiles = (*_stream_tiles(block, dtype), *_cast("out", (block,), dtype))
        return (Launch(fn, grid, {"BLOCK": block}, sig, footprint=Footprint((tiles,))),)
    if variant == "atomic":
        block = _pick(ATOMIC_BLOCKS, n)
        fn, grid = _elementwise(_mse_atomic_kernel, _mse_atomic_persistent_kernel, n, block, device)
        sig = {"x_ptr": pointer(dtype), "y_ptr": pointer(dtype), "acc_ptr": "*fp32", "n": int_type(n)}
        atomic = Launch(fn, grid, {"BLOCK": block}, sig, footprint=Footprint((tuple(_stream_tiles(block, dtype)),)))
        return (atomic, _finish_launch(1, 2, dtype))
    return _persistent_launch(n, dtype, device)


def plan_backward(
    n: int, reduction: str, need_input: bool, need_target: bool, dtype: str, device: DeviceInfo
) -> tuple[Launch, ...]:
    """The launch of ``mse_loss_backward`` (none when nothing is needed or n = 0)."""
    if n == 0 or not (need_input or need_target):
        return ()
    block = ELEMENTWISE_BLOCK[device.vendor]
    fn, grid = _elementwise(_mse_backward_kernel, _mse_backward_persistent_kernel, n, block, device)
    scalar = reduction != "none"
    loads = ("x", "y") if scalar else ("x", "y", "g")
    tiles = (*_stream_tiles(block, dtype, loads), *_cast("gx", (block,), dtype), *_cast("gy", (block,), dtype))
    sig = {
        "x_ptr": pointer(dtype),
        "y_ptr": pointer(dtype),
        "g_ptr": pointer(dtype),
        "gx_ptr": pointer(dtype),
        "gy_ptr": pointer(dtype),
        "n": int_type(n),
        "scale": "fp32",
    }
    constexprs = {"G_SCALAR": scalar, "WRITE_GX": need_input, "WRITE_GY": need_target, "BLOCK": block}
    return (Launch(fn, grid, constexprs, sig, footprint=Footprint((tiles,))),)


# ---------------------------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------------------------
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _check(input: torch.Tensor, target: torch.Tensor, reduction: str, variant: str) -> None:
    if not isinstance(input, torch.Tensor) or not isinstance(target, torch.Tensor):
        raise TypeError("mse_loss: input and target must be tensors")
    if (
        input.dtype is target.dtype
        and input.dtype in _FLOATS
        and reduction in REDUCTIONS
        and variant in VARIANTS
        and input.shape == target.shape
        and input.get_device() == target.get_device()
    ):
        return  # every call pays for this line only (each check below costs about a microsecond)
    if input.shape != target.shape:
        raise ValueError(
            f"mse_loss: input shape {tuple(input.shape)} != target shape {tuple(target.shape)} (no broadcasting)"
        )
    if input.dtype != target.dtype:
        raise TypeError(f"mse_loss: input dtype {input.dtype} != target dtype {target.dtype}")
    if input.dtype not in _FLOATS:
        raise TypeError(f"mse_loss: dtype {input.dtype} is not supported (fp32, fp16, bf16)")
    if input.device != target.device:
        raise ValueError(f"mse_loss: input on {input.device}, target on {target.device}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"mse_loss: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if variant not in VARIANTS:
        raise ValueError(f"mse_loss: variant must be one of {VARIANTS}, got {variant!r}")


def _flat(t: torch.Tensor) -> torch.Tensor:
    """The elements in memory order. A contiguous tensor already is that (no view: the kernels index a
    flat pointer, and a view costs a microsecond on every call)."""
    return t if t.is_contiguous() else t.contiguous()


@functools.lru_cache(maxsize=512)
def _forward_plan(n: int, reduction: str, variant: str, dtype: str, device: DeviceInfo) -> tuple[Launch, ...]:
    return plan_forward(n, reduction, variant, dtype, device)


@functools.lru_cache(maxsize=512)
def _backward_plan(
    n: int, reduction: str, need_input: bool, need_target: bool, dtype: str, device: DeviceInfo
) -> tuple[Launch, ...]:
    return plan_backward(n, reduction, need_input, need_target, dtype, device)


_SCRATCH: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def _scratch(device: torch.device, partials: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 partial sums, a zeroed int32 the fused finish counts programs with and resets to 0), kept per
    device so that a call allocates nothing but its output (an allocation costs ~3 us a call).

    One per device: two persistent reductions running at once on different streams of one device
    would share them, which this kernel does not support.
    """
    held = _SCRATCH.get(device)
    if held is None or held[0].numel() < partials:
        held = _SCRATCH[device] = (
            torch.empty(max(partials, 1024), dtype=torch.float32, device=device),
            torch.zeros(1, dtype=torch.int32, device=device),
        )
    return held


def _reduce(x: torch.Tensor, y: torch.Tensor, reduction: str, variant: str) -> torch.Tensor:
    n = x.numel()
    out = new_output((), x.dtype, x.device)
    scale = (1.0 / n if n else float("nan")) if reduction == "mean" else 1.0
    if n == 0:
        return out.fill_(scale * 0.0)
    xf, yf = _flat(x), _flat(y)
    steps = _forward_plan(n, reduction, variant, DTYPE_NAMES[x.dtype], describe(x.device))
    if variant == "atomic":
        atomic, finish = steps
        acc = torch.zeros(1, dtype=torch.float32, device=x.device)
        launch(atomic, xf, yf, acc, n)
        launch(finish, acc, out, 1, scale)
        return out
    main = steps[0]
    if main.constexprs["SINGLE"]:
        launch(main, xf, yf, out, out, out, n, scale)
        return out
    fused = main.constexprs["FUSED_FINISH"]
    partials, counter = _scratch(x.device, main.grid[0])
    launch(main, xf, yf, partials, out, counter if fused else out, n, scale)
    if not fused:
        launch(steps[1], partials, out, main.grid[0], scale)
    return out


def mse_loss_forward(
    input: torch.Tensor, target: torch.Tensor, reduction: str = "mean", variant: str = "persistent"
) -> torch.Tensor:
    """Forward only, no autograd bookkeeping (what the collector times)."""
    if reduction != "none":
        return _reduce(input, target, reduction, variant)
    out = new_output(input.shape, input.dtype, input.device)
    n = input.numel()
    if n:
        (step,) = _forward_plan(n, reduction, variant, DTYPE_NAMES[input.dtype], describe(input.device))
        launch(step, _flat(input), _flat(target), out, n)
    return out


def mse_loss_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    target: torch.Tensor,
    reduction: str,
    need_input: bool = True,
    need_target: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(d loss/d input, d loss/d target), each in the inputs' shape and dtype."""
    n = input.numel()
    gx = new_output(input.shape, input.dtype, input.device) if need_input else None
    gy = new_output(input.shape, input.dtype, input.device) if need_target else None
    if n == 0 or not (need_input or need_target):
        return gx, gy
    scale = 1.0 / n if reduction == "mean" else 1.0
    g = grad_output.reshape(()) if reduction != "none" else _flat(grad_output.expand(input.shape))
    (step,) = _backward_plan(n, reduction, need_input, need_target, DTYPE_NAMES[input.dtype], describe(input.device))
    dummy = gx if gx is not None else gy
    launch(
        step, _flat(input), _flat(target), g, gx if gx is not None else dummy, gy if gy is not None else dummy, n, scale
    )
    return gx, gy


class MSELossFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, target, reduction, variant):
        ctx.save_for_backward(input, target)
        ctx.reduction = reduction
        return mse_loss_forward(input, target, reduction, variant)

    @staticmethod
    def backward(ctx, grad_output):
        input, target = ctx.saved_tensors
        gx, gy = mse_loss_backward(
            grad_output, input, target, ctx.reduction, ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        )
        return gx, gy, None, None


def mse_loss(
    input: torch.Tensor, target: torch.Tensor, reduction: str = "mean", variant: str = "persistent"
) -> torch.Tensor:
    """``torch.nn.functional.mse_loss`` in Triton; differentiable w.r.t. both arguments."""
    _check(input, target, reduction, variant)
    if torch.is_grad_enabled() and (input.requires_grad or target.requires_grad):
        return MSELossFunction.apply(input, target, reduction, variant)
    return mse_loss_forward(input, target, reduction, variant)


# ---------------------------------------------------------------------------------------------
# Spec: cases, tolerances, targets, bytes
# ---------------------------------------------------------------------------------------------
TOLERANCES = {  # (dtype, reduction is sum) -> tolerance; the design document's table (docs/kernels.md), bf16 added
    ("fp32", False): Tolerance(1e-5, 1e-5),
    ("fp32", True): Tolerance(1e-5, 1.0),
    ("fp16", False): Tolerance(1e-3, 1e-3),
    ("fp16", True): Tolerance(1e-3, 1.0),
    ("bf16", False): Tolerance(1.6e-2, 1e-2),
    ("bf16", True): Tolerance(1.6e-2, 1.0),
}
# Backward values are 2(x - y)g/n: the forward's rtol with an atol scaled to their size.
GRAD_ATOL = {"fp32": 1e-6, "fp16": 1e-4, "bf16": 1e-3}

BIG_TARGET = Target(min_pct_peak=85, min_speedup_vs_eager=1.8, source="docs/kernels.md, MSELoss targets (H200)")
HUGE_TARGET = Target(min_pct_peak=95, source="docs/kernels.md, MSELoss targets (H200)")
SMALL_TARGET = Target(min_speedup_vs_eager=1.0, source="docs/kernels.md, MSELoss targets (H200): no slower than eager")

# (label, shape, extra) - the design document's sizes (docs/kernels.md), and what breaks naive kernels
ACCURACY_SHAPES: tuple[tuple[tuple[int, ...], dict], ...] = (
    ((128,), {}),
    ((1024,), {}),
    ((1_048_576,), {}),
    ((1000,), {}),  # not a multiple of any block
    ((4099,), {}),  # odd prime
    ((0,), {}),
    ((1,), {}),
    ((3, 7, 11, 13), {}),
    ((257, 130), {"layout": "strided"}),  # a non-contiguous view, every other column
    ((65_537,), {"magnitude": 1e4}),  # large values
)


def _accuracy_cases() -> list[Case]:
    cases = []
    for variant in VARIANTS:
        for dtype in ("fp32", "fp16", "bf16"):
            for reduction in REDUCTIONS:
                if variant == "atomic" and reduction == "none":
                    continue  # 'none' does not reduce: one kernel serves both variants
                tol = TOLERANCES[(dtype, reduction == "sum")]
                for shape, extra in ACCURACY_SHAPES:
                    if extra.get("magnitude") and dtype == "fp16":
                        continue  # squares of 1e4 exceed fp16: covered by the overflow case below
                    cases.append(
                        Case.make(
                            "mse_loss", variant, dtype, tol, shape=shape, reduction=reduction, direction="fwd", **extra
                        )
                    )
                    if shape in ((1000,), (3, 7, 11, 13)) or extra.get("layout"):
                        gtol = Tolerance(tol.rtol, GRAD_ATOL[dtype])
                        cases.append(
                            Case.make(
                                "mse_loss",
                                variant,
                                dtype,
                                gtol,
                                shape=shape,
                                reduction=reduction,
                                direction="bwd",
                                **extra,
                            )
                        )
        # fp16 sum past 65504: inf, as PyTorch gives
        cases.append(
            Case.make(
                "mse_loss",
                variant,
                "fp16",
                TOLERANCES[("fp16", True)],
                shape=(100_000,),
                reduction="sum",
                direction="fwd",
                magnitude=4.0,
            )
        )
    return cases


PERF_SIZES = (4096, 1_048_576, 33_554_432, 268_435_456)


def _perf_target(n: int, variant: str) -> Target | None:
    if variant != "persistent":
        return None
    return {4096: SMALL_TARGET, 33_554_432: BIG_TARGET, 268_435_456: HUGE_TARGET}.get(n)


def _perf_cases() -> list[Case]:
    cases = []
    for variant in VARIANTS:
        for dtype in ("fp32", "fp16"):
            for n in PERF_SIZES:
                reductions = ("mean", "sum") if variant == "persistent" and n >= 33_554_432 else ("mean",)
                for reduction in reductions:
                    cases.append(
                        Case.make(
                            "mse_loss",
                            variant,
                            dtype,
                            TOLERANCES[(dtype, reduction == "sum")],
                            _perf_target(n, variant),
                            shape=(n,),
                            reduction=reduction,
                            direction="fwd",
                        )
                    )
    return cases


def _make_inputs(case: Case, device: torch.device, seed: int) -> dict:
    p = case.p
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shape = tuple(p["shape"])
    alloc = (shape[0], shape[1] * 2) if p.get("layout") == "strided" else shape
    scale = p.get("magnitude", 1.0)
    x = (torch.randn(alloc, generator=gen) * scale).to(case.torch_dtype)
    y = (torch.randn(alloc, generator=gen) * scale).to(case.torch_dtype)
    x, y = x.to(device), y.to(device)
    if p.get("layout") == "strided":
        x, y = x[:, ::2], y[:, ::2]
    inputs = {"input": x, "target": y, "reduction": p["reduction"]}
    if p["direction"] == "bwd":
        out_shape = shape if p["reduction"] == "none" else ()
        inputs["grad"] = torch.randn(out_shape, generator=gen).to(case.torch_dtype).to(device)
    return inputs


def _run(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    x, y = inputs["input"], inputs["target"]
    if case.p["direction"] == "fwd":
        return (mse_loss(x, y, inputs["reduction"], variant=case.variant),)
    x, y = x.detach().requires_grad_(), y.detach().requires_grad_()
    out = mse_loss(x, y, inputs["reduction"], variant=case.variant)
    gx, gy = torch.autograd.grad(out, (x, y), inputs["grad"])
    return gx, gy


def _reference(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    x = inputs["input"].detach().cpu().double()
    y = inputs["target"].detach().cpu().double()
    reduction = inputs["reduction"]
    if case.p["direction"] == "fwd":
        return (torch.nn.functional.mse_loss(x, y, reduction=reduction),)
    g = inputs["grad"].cpu().double()
    scale = 1.0 / x.numel() if reduction == "mean" else 1.0
    gx = 2.0 * scale * (x - y) * g
    return gx, -gx


FLAGGEMS_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}  # flag_gems.ops.mse_loss.Reduction


def _implementations(case: Case, inputs: dict) -> dict:
    x, y, reduction = inputs["input"], inputs["target"], inputs["reduction"]
    eager = torch.nn.functional.mse_loss
    impls = {
        KERNEL_IMPL: lambda: mse_loss_forward(x, y, reduction, case.variant),
        EAGER_IMPL: lambda: eager(x, y, reduction=reduction),
    }
    compiled = torch.compile(eager, dynamic=False)
    impls[COMPILE_IMPL] = lambda: compiled(x, y, reduction=reduction)
    gems = flaggems(x.device)
    if gems is not None and case.p.get("direction", "fwd") == "fwd":
        code = FLAGGEMS_REDUCTIONS[reduction]
        impls[FLAGGEMS_IMPL] = lambda: gems.mse_loss(x, y, code)
    return impls


def _bytes(case: Case) -> int:
    n = numel(case.p["shape"])
    size = element_size(case.dtype)
    if case.p["direction"] == "bwd":
        grad_in = n if case.p["reduction"] == "none" else 1
        return (2 * n + grad_in + 2 * n) * size
    out = n if case.p["reduction"] == "none" else 1
    return (2 * n + out) * size


def _ceiling(case: Case) -> str:
    """The forward with reduction mean or sum reads both inputs and writes one scalar: a read-only stream."""
    return READ_CEILING if case.p["direction"] == "fwd" and case.p["reduction"] != "none" else COPY_CEILING


def _flops(case: Case) -> int:
    return 3 * numel(case.p["shape"])  # subtract, multiply, add


def _launch_plans(case: Case, device: DeviceInfo) -> tuple[Launch, ...]:
    """Every launch that running ``case`` makes on ``device`` (the forward, then the backward)."""
    p = case.p
    n = numel(p["shape"])
    steps = plan_forward(n, p["reduction"], case.variant, case.dtype, device)
    if p["direction"] == "bwd":
        steps += plan_backward(n, p["reduction"], True, True, case.dtype, device)
    return steps


SPEC = KernelSpec(
    name="mse_loss",
    accuracy_cases=_accuracy_cases,
    perf_cases=_perf_cases,
    make_inputs=_make_inputs,
    run=_run,
    reference=_reference,
    implementations=_implementations,
    bytes_moved=_bytes,
    flops=_flops,
    profile_kernel=lambda case: "_mse_atomic" if case.variant == "atomic" else "_mse_persistent_kernel",
    launch_plans=_launch_plans,
    variants=VARIANTS,
    ceiling=_ceiling,
    plan_sample=4,
    public=("mse_loss",),
    doc=__doc__ or "",
)

__all__ = ["mse_loss", "mse_loss_forward", "mse_loss_backward", "MSELossFunction", "SPEC", "DTYPE_NAMES"]
