"""Launch plans of MSELoss: the block tables per vendor and pure functions of (n, dtype, device description);
the launchers of :mod:`kernelwatch.kernels.mse_loss.api` start exactly these."""

from __future__ import annotations

import functools
from typing import Any

import triton

from kernelwatch.kernels.device import INTERPRETER_PROGRAMS
from kernelwatch.kernels.mse_loss.kernel import (
    _mse_atomic_kernel,
    _mse_atomic_persistent_kernel,
    _mse_backward_kernel,
    _mse_backward_persistent_kernel,
    _mse_finish_kernel,
    _mse_none_kernel,
    _mse_none_persistent_kernel,
    _mse_persistent_kernel,
)
from kernelwatch.kernels.plan import DeviceInfo, Footprint, Launch, Tile, int_type, load, pointer, work

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
# benchmarks/mse_loss_tune.py (see kernelwatch/kernels/NOTES.md).
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


@functools.lru_cache(maxsize=512)
def forward_plan(n: int, reduction: str, variant: str, dtype: str, device: DeviceInfo) -> tuple[Launch, ...]:
    return plan_forward(n, reduction, variant, dtype, device)


@functools.lru_cache(maxsize=512)
def backward_plan(
    n: int, reduction: str, need_input: bool, need_target: bool, dtype: str, device: DeviceInfo
) -> tuple[Launch, ...]:
    return plan_backward(n, reduction, need_input, need_target, dtype, device)
