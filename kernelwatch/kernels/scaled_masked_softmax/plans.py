"""Launch plans of the scaled masked softmax: the tile tables per vendor and pure functions of (rows, sizes,
dtype, device description); the launchers of :mod:`kernelwatch.kernels.scaled_masked_softmax.api` start exactly
these."""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

from kernelwatch.kernels.plan import ITEMSIZE, DeviceInfo, Footprint, Launch, int_type, load, pointer, work
from kernelwatch.kernels.scaled_masked_softmax.kernel import (
    _softmax_bwd_kernel,
    _softmax_bwd_looped_kernel,
    _softmax_bwd_looped_persistent_kernel,
    _softmax_bwd_persistent_kernel,
    _softmax_fwd_heads_kernel,
    _softmax_fwd_kernel,
    _softmax_fwd_looped_kernel,
    _softmax_fwd_looped_persistent_kernel,
    _softmax_fwd_persistent_kernel,
)

# ---------------------------------------------------------------------------------------------
# Tile configurations, per vendor
# ---------------------------------------------------------------------------------------------
# Longest row done in one pass (longer rows take the two-pass path), and elements per program.
# The interpreter's small limit makes the CPU tests exercise both paths on small shapes.
SINGLE_PASS_MAX = {"nvidia": 16384, "ascend": 8192, "cpu": 64}
TILE_ELEMENTS = {"nvidia": 1024, "ascend": 4096, "cpu": 2048}  # nvidia: H200 sweep, kernelwatch/kernels/NOTES.md
LOOP_BLOCK = {"nvidia": 4096, "ascend": 4096, "cpu": 2048}
# NVIDIA, masked rows up to this long: one program per (batch, query-row block) walks every head so the
# mask is read once (H200 sweep, kernelwatch/kernels/NOTES.md: ROWS x BLOCK_N = 2048 elements, 4 warps; at sk = 4096
# the per-row-tile kernel stays ahead, 88% against 82%). The interpreter takes it for rows up to 64 so
# the CPU tests run it.
HEADS_LOOP_MAX_SK = {"nvidia": 2048, "cpu": 64}
HEADS_LOOP_TILE = 2048
HEADS_LOOP_WARPS = 4
# Ascend: a tile's last axis is padded to 32 B in the unified buffer, so a row narrower than that costs as
# much as one of 32 B; BLOCK_N is at least that wide and ROWS shrinks until the tile plan fits (plan.py).
UB_ROW_BYTES = 32


# NVIDIA, causal rows in one pass: 2048 elements a program with 2 warps (H200, kernelwatch/kernels/NOTES.md: the masked
# rule's tiles took 149 us at [512,512,512] and 2189 us at [512,2048,2048]; 2048 elements with 4 warps 128 / 1633 us,
# with 2 warps 113.5 / 1565 us). Half of a causal tile on average is above the diagonal and not loaded.
CAUSAL_TILE = 2048
CAUSAL_WARPS = 2


def _warps(tile: int) -> int:
    return 4 if tile <= 1024 or tile == 4096 else 8 if tile <= 8192 else 16


@functools.lru_cache(maxsize=512)
def _plan(kind: str, sk: int) -> tuple[int, int, int, bool]:
    """(ROWS per program, BLOCK_N, num_warps, single pass?) for rows of sk elements (NVIDIA, interpreter)."""
    if sk <= SINGLE_PASS_MAX[kind]:
        block_n = triton.next_power_of_2(max(sk, 1))
        rows = max(1, TILE_ELEMENTS[kind] // block_n)
        return rows, block_n, _warps(rows * block_n), True
    block_n = LOOP_BLOCK[kind]
    return 1, block_n, _warps(block_n), False


# ---------------------------------------------------------------------------------------------
# Launch plans: pure functions of (rows, sizes, dtype, device description); the launchers start exactly these
# ---------------------------------------------------------------------------------------------
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # fp64: gradcheck


def _acc(dtype: str):
    """fp32 arithmetic for every dtype but fp64 (which exists so gradcheck can be exact)."""
    return tl.float64 if dtype == "fp64" else tl.float32


def _acc_name(dtype: str) -> str:
    return "fp64" if dtype == "fp64" else "fp32"


def _fwd_footprint(rows: int, block_n: int, dtype: str, has_mask: bool, looped: bool) -> Footprint:
    """x and the mask loaded, x in fp32, the logits z, the exponentials e (y in place), the row statistics
    m, s, 1/s as (rows, 1) tiles and the cast output. The looped path's two phases hold the same tiles."""
    acc, shape = _acc_name(dtype), (rows, block_n)
    tiles = [load("x", shape, dtype)]
    if has_mask:
        tiles.append(load("mask", shape, "u8"))
    if dtype != acc:
        tiles.append(work("x_acc", shape, acc))
    tiles += [work("z", shape, acc), work("e", shape, acc)]
    tiles += [work(s, (rows, 1), acc) for s in ("m", "s", "inv")]
    if dtype != acc:
        tiles.append(work("y_out", shape, dtype))
    phase = tuple(tiles)
    return Footprint((phase, phase) if looped else (phase,))


def _bwd_footprint(rows: int, block_n: int, dtype: str, looped: bool) -> Footprint:
    """y and dy loaded and in fp32, their product, dx, the row sum (a (rows, 1) tile, or the loop's fp32
    partial-sum tile), the cast output."""
    acc, shape = _acc_name(dtype), (rows, block_n)
    tiles = [load("y", shape, dtype), load("dy", shape, dtype)]
    if dtype != acc:
        tiles += [work("y_acc", shape, acc), work("dy_acc", shape, acc)]
    tiles += [work("prod", shape, acc), work("dx", shape, acc)]
    tiles.append(work("dot", (block_n,), acc) if looped else work("dot", (rows, 1), acc))
    if dtype != acc:
        tiles.append(work("dx_out", shape, dtype))
    return Footprint((tuple(tiles),))


def _ascend_tile(sk: int, dtype: str, footprint: Any) -> tuple[int, int, bool]:
    """(ROWS, BLOCK_N, single pass?) on Ascend: one pass when a whole row fits the unified buffer, rows
    padded to at least 32 B, ROWS halved from TILE_ELEMENTS / BLOCK_N until the tile plan fits."""
    min_cols = max(1, UB_ROW_BYTES // ITEMSIZE[dtype])
    block_n = max(triton.next_power_of_2(max(sk, 1)), min_cols)
    if sk <= SINGLE_PASS_MAX["ascend"] and footprint(1, block_n, False).fits():
        rows = max(1, TILE_ELEMENTS["ascend"] // block_n)
        while rows > 1 and not footprint(rows, block_n, False).fits():
            rows //= 2
        return rows, block_n, True
    block_n = LOOP_BLOCK["ascend"]
    while block_n > min_cols and not footprint(1, block_n, True).fits():
        block_n //= 2
    return 1, block_n, False


def plan_forward(
    n_rows: int, sq: int, heads: int, sk: int, dtype: str, mask_dtype: str | None, causal: bool, device: DeviceInfo
) -> tuple[Launch, ...]:
    """The launch of the forward over ``n_rows`` rows of ``sk`` (``sq`` rows per head, ``heads`` heads);
    ``mask_dtype`` is ``"u8"`` for a mask tensor, None without one (none when there are no rows)."""
    if n_rows == 0:
        return ()
    has_mask = mask_dtype is not None
    constexprs = {"HAS_MASK": has_mask, "CAUSAL": causal, "ACC": _acc(dtype)}
    ints = int_type(max(n_rows, sk, sq * sk))
    sig = {
        "x_ptr": pointer(dtype),
        "m_ptr": pointer(mask_dtype or dtype),
        "y_ptr": pointer(dtype),
        "n_rows": ints,
        "sk": ints,
        "sq": ints,
        "H": ints,
        "mask_sb": ints,
        "mask_sq": ints,
        "scale2": "fp32",
    }
    kind = device.vendor
    if has_mask and not causal and sk <= HEADS_LOOP_MAX_SK.get(kind, 0):
        block_n = triton.next_power_of_2(max(sk, 1))
        rows = max(1, HEADS_LOOP_TILE // block_n)
        grid = (n_rows // (sq * heads) * triton.cdiv(sq, rows),)
        return (
            Launch(
                _softmax_fwd_heads_kernel,
                grid,
                {"ROWS": rows, "BLOCK_N": block_n, "ACC": constexprs["ACC"]},
                sig,
                HEADS_LOOP_WARPS,
                footprint=_fwd_footprint(rows, block_n, dtype, True, False),
            ),
        )
    if kind == "ascend":
        rows, block_n, single = _ascend_tile(sk, dtype, lambda r, b, lp: _fwd_footprint(r, b, dtype, has_mask, lp))
        warps = None
    else:
        rows, block_n, warps, single = _plan(kind, sk)
        if causal and single and kind == "nvidia":
            rows, warps = max(1, CAUSAL_TILE // block_n), CAUSAL_WARPS
    footprint = _fwd_footprint(rows, block_n, dtype, has_mask, not single)
    if single:
        units = n_rows // (sq * heads) * heads * triton.cdiv(sq, rows)
        fn = _softmax_fwd_kernel
        constexprs = {"ROWS": rows, "BLOCK_N": block_n, **constexprs}
        if kind == "ascend":
            fn = _softmax_fwd_persistent_kernel
    else:
        units = n_rows
        fn = _softmax_fwd_looped_persistent_kernel if kind == "ascend" else _softmax_fwd_looped_kernel
        constexprs = {"BLOCK_N": block_n, **constexprs}
    grid = (min(units, device.compute_units),) if kind == "ascend" else (units,)
    return (Launch(fn, grid, constexprs, sig, warps, footprint=footprint),)


def plan_backward(n_rows: int, sk: int, dtype: str, device: DeviceInfo, causal: bool = False) -> tuple[Launch, ...]:
    """The launch of :func:`softmax_backward` over ``n_rows`` rows of ``sk`` (none when there are no rows);
    ``causal``: rows of square causal matrices, whose upper triangles (y = 0, so dx = 0) are not read."""
    if n_rows == 0:
        return ()
    ints = int_type(max(n_rows, sk, n_rows * sk))
    sig = {
        "y_ptr": pointer(dtype),
        "dy_ptr": pointer(dtype),
        "dx_ptr": pointer(dtype),
        "n_rows": ints,
        "sk": ints,
        "scale": "fp32",
    }
    kind = device.vendor
    if kind == "ascend":
        rows, block_n, single = _ascend_tile(sk, dtype, lambda r, b, lp: _bwd_footprint(r, b, dtype, lp))
        warps = None
    else:
        rows, block_n, warps, single = _plan(kind, sk)
    footprint = _bwd_footprint(rows, block_n, dtype, not single)
    if single:
        units = triton.cdiv(n_rows, rows)
        fn = _softmax_bwd_persistent_kernel if kind == "ascend" else _softmax_bwd_kernel
        constexprs = {"ROWS": rows, "BLOCK_N": block_n, "CAUSAL": causal, "ACC": _acc(dtype)}
    else:
        units = n_rows
        fn = _softmax_bwd_looped_persistent_kernel if kind == "ascend" else _softmax_bwd_looped_kernel
        constexprs = {"BLOCK_N": block_n, "CAUSAL": causal, "ACC": _acc(dtype)}
    grid = (min(units, device.compute_units),) if kind == "ascend" else (units,)
    return (Launch(fn, grid, constexprs, sig, warps, footprint=footprint),)


@functools.lru_cache(maxsize=512)
def forward_plan(
    n_rows: int, sq: int, heads: int, sk: int, dtype: str, mask_dtype: str | None, causal: bool, device: DeviceInfo
) -> tuple[Launch, ...]:
    return plan_forward(n_rows, sq, heads, sk, dtype, mask_dtype, causal, device)


@functools.lru_cache(maxsize=512)
def backward_plan(n_rows: int, sk: int, dtype: str, device: DeviceInfo, causal: bool) -> tuple[Launch, ...]:
    return plan_backward(n_rows, sk, dtype, device, causal)
