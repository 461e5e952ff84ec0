"""The Triton kernels of MSELoss: the reductions (none, atomic, persistent with its finish) and the backward.
Which of them runs, with which blocks, is :mod:`kernelwatch.kernels.mse_loss.plans`."""

from __future__ import annotations

import triton
import triton.language as tl


# ---------------------------------------------------------------------------------------------
# Triton kernels. The *_tile helpers are one block's work; the plain kernels run one block per program
# (NVIDIA, interpreter), the *_persistent kernels loop blocks over a grid of one program per vector
# core (Ascend: a launch has at most 65,535 programs, see kernelwatch/kernels/plan.py).
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
