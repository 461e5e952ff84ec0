r"""Scaled masked softmax (Megatron-LM / apex semantics) and its causal variant.

``scaled_masked_softmax(input, mask, scale=1.0)``, input ``[b, h, sq, sk]``, mask ``[b or 1, 1, sq, sk]``
(bool or uint8, True = masked out, broadcast over heads) or None:

    y_j = exp(s x_j - m) / \sum_{k unmasked} exp(s x_k - m),   m = max_{k unmasked} s x_k
    y_j = 0 where masked; a row with every position masked is all zeros.

``scaled_upper_triang_masked_softmax(input, scale=1.0)``, input ``[attn_batches, sq, sq]``: the same
with column j > i masked in row i, no mask tensor read (and the masked half never loaded).

Backward, from the saved output only:  dx = s * y * (dy - \sum_j dy_j y_j).

Computed in fp32 for fp16, bf16 and fp32 inputs. Rows that fit one block are done in one pass
(several rows per program when rows are short); longer rows use an online-softmax pass for
(max, sum) and a second pass that writes, so any ``sk`` works. Launches come from
:func:`plan_forward` / :func:`plan_backward`: one program per row tile on NVIDIA, one program per
vector core looping over the row tiles on Ascend (at most 65,535 programs a launch there), with
tiles sized to the 192 KB unified buffer.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import triton
import triton.language as tl

from kernels.device import describe
from kernels.peers import apex_softmax
from kernels.plan import ITEMSIZE, DeviceInfo, Footprint, Launch, int_type, launch, load, pointer, work
from kernels.poison import new_output
from kernels.spec import (
    APEX_IMPL,
    COMPILE_IMPL,
    DTYPE_NAMES,
    EAGER_IMPL,
    KERNEL_IMPL,
    Case,
    KernelSpec,
    Target,
    Tolerance,
    element_size,
    numel,
)

LOG2E = 1.4426950408889634

# ---------------------------------------------------------------------------------------------
# Tile configurations, per vendor
# ---------------------------------------------------------------------------------------------
# Longest row done in one pass (longer rows take the two-pass path), and elements per program.
# The interpreter's small limit makes the CPU tests exercise both paths on small shapes.
SINGLE_PASS_MAX = {"nvidia": 16384, "ascend": 8192, "cpu": 64}
TILE_ELEMENTS = {"nvidia": 1024, "ascend": 4096, "cpu": 2048}  # nvidia: H200 sweep, kernels/NOTES.md
LOOP_BLOCK = {"nvidia": 4096, "ascend": 4096, "cpu": 2048}
# NVIDIA, masked rows up to this long: one program per (batch, query-row block) walks every head so the
# mask is read once (H200 sweep, kernels/NOTES.md: ROWS x BLOCK_N = 2048 elements, 4 warps; at sk = 4096
# the per-row-tile kernel stays ahead, 88% against 82%). The interpreter takes it for rows up to 64 so
# the CPU tests run it.
HEADS_LOOP_MAX_SK = {"nvidia": 2048, "cpu": 64}
HEADS_LOOP_TILE = 2048
HEADS_LOOP_WARPS = 4
# Ascend: a tile's last axis is padded to 32 B in the unified buffer, so a row narrower than that costs as
# much as one of 32 B; BLOCK_N is at least that wide and ROWS shrinks until the tile plan fits (plan.py).
UB_ROW_BYTES = 32


# NVIDIA, causal rows in one pass: 2048 elements a program with 2 warps (H200, kernels/NOTES.md: the masked rule's
# tiles took 149 us at [512,512,512] and 2189 us at [512,2048,2048]; 2048 elements with 4 warps 128 / 1633 us, with
# 2 warps 113.5 / 1565 us). Half of a causal tile on average is above the diagonal and not loaded.
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
# Triton kernels. *_tile / *_row helpers are one unit of work; the plain kernels do one unit per program
# (NVIDIA, interpreter), the *_persistent kernels loop units over one program per vector core (Ascend: a
# launch has at most 65,535 programs, see kernels/plan.py).
# ---------------------------------------------------------------------------------------------
@triton.jit
def _causal_groups(cols, q):
    """Load mask of the causal rows ``q`` (a column tensor): columns up to the diagonal, widened to whole
    groups of 16 columns. One mask value per group keeps the load vectorised (the element-exact mask
    ``cols <= q`` made it one 2-byte load per element: kernels/NOTES.md); the few columns past the
    diagonal it reads lie in the diagonal's own 32-byte sector (fp16) and are masked after the load."""
    return ((cols // 16) * 16)[None, :] <= q[:, None]


@triton.jit
def _row_logits(
    x_ptr,
    m_ptr,
    row,
    cols,
    n_rows,
    sk,
    sq,
    H,
    mask_sb,
    mask_sq,
    scale2,
    row_mask,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    ACC: tl.constexpr,
):
    """Scaled logits (base 2) of a tile of rows, -inf where masked or out of bounds.

    The input load does not depend on the mask's values, so both loads are in flight together
    (making x's load wait for the mask doubled the memory latency per tile: kernels/NOTES.md).
    """
    inb = row_mask[:, None] & (cols[None, :] < sk)
    valid = inb
    load_ok = inb
    if CAUSAL:  # arithmetic only: the masked upper triangle is never read
        q = row % sq
        valid = inb & (cols[None, :] <= q[:, None])
        load_ok = inb & _causal_groups(cols, q)
    x = tl.load(
        x_ptr + row[:, None].to(tl.int64) * sk + cols[None, :], mask=load_ok, other=0.0, eviction_policy="evict_first"
    ).to(ACC)
    if HAS_MASK:
        b = row // (H * sq)
        q = row % sq
        m_offs = b[:, None].to(tl.int64) * mask_sb + q[:, None].to(tl.int64) * mask_sq + cols[None, :]
        masked = tl.load(m_ptr + m_offs, mask=inb, other=1)
        valid = valid & (masked == 0)
    return tl.where(valid, x * scale2, float("-inf"))


@triton.jit
def _program_rows(pid, sq, H, ROWS: tl.constexpr):
    """Rows of one program, heads fastest: the programs that read one mask row run side by side,
    so the mask (shared by every head) comes from L2 after its first read."""
    h = pid % H
    t = pid // H
    q_blocks = tl.cdiv(sq, ROWS)
    q = (t % q_blocks) * ROWS + tl.arange(0, ROWS)
    b = t // q_blocks
    return (b * H + h) * sq + q, q < sq


@triton.jit
def _softmax_fwd_tile(
    x_ptr,
    m_ptr,
    y_ptr,
    n_rows,
    sk,
    sq,
    H,
    mask_sb,
    mask_sq,
    scale2,
    tile,
    ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    ACC: tl.constexpr,
):
    row, row_mask = _program_rows(tile, sq, H, ROWS)
    cols = tl.arange(0, BLOCK_N)
    z = _row_logits(
        x_ptr, m_ptr, row, cols, n_rows, sk, sq, H, mask_sb, mask_sq, scale2, row_mask, HAS_MASK, CAUSAL, ACC
    )
    m = tl.max(z, axis=1)
    m = tl.where(m == float("-inf"), 0.0, m)  # a fully masked row: every exp below is 0
    e = tl.exp2(z - m[:, None])
    s = tl.sum(e, axis=1)
    inv = tl.where(s > 0, 1.0 / s, 0.0)
    y = e * inv[:, None]
    out = y_ptr + row[:, None].to(tl.int64) * sk + cols[None, :]
    tl.store(out, y.to(y_ptr.dtype.element_ty), mask=row_mask[:, None] & (cols[None, :] < sk))


@triton.jit
def _softmax_fwd_kernel(
    x_ptr,
    m_ptr,
    y_ptr,
    n_rows,
    sk,
    sq,
    H,
    mask_sb,
    mask_sq,
    scale2,
    ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    ACC: tl.constexpr,
):
    _softmax_fwd_tile(
        x_ptr,
        m_ptr,
        y_ptr,
        n_rows,
        sk,
        sq,
        H,
        mask_sb,
        mask_sq,
        scale2,
        tl.program_id(0),
        ROWS,
        BLOCK_N,
        HAS_MASK,
        CAUSAL,
        ACC,
    )


@triton.jit
def _softmax_fwd_persistent_kernel(
    x_ptr,
    m_ptr,
    y_ptr,
    n_rows,
    sk,
    sq,
    H,
    mask_sb,
    mask_sq,
    scale2,
    ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    ACC: tl.constexpr,
):
    num_tiles = n_rows // (sq * H) * H * tl.cdiv(sq, ROWS)
    for tile in range(tl.program_id(0), num_tiles, tl.num_programs(0)):
        _softmax_fwd_tile(
            x_ptr, m_ptr, y_ptr, n_rows, sk, sq, H, mask_sb, mask_sq, scale2, tile, ROWS, BLOCK_N, HAS_MASK, CAUSAL, ACC
        )


@triton.jit
def _softmax_fwd_heads_kernel(
    x_ptr,
    m_ptr,
    y_ptr,
    n_rows,
    sk,
    sq,
    H,
    mask_sb,
    mask_sq,
    scale2,
    ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC: tl.constexpr,
):
    """One program per (batch, block of ROWS query rows) walks every head. The mask tile, shared by all
    heads, is read once and kept in registers: per head only x is read and y written, so the traffic is
    the floor's (kernels/NOTES.md: 68-73% -> 88-92% of the copy-bandwidth floor on an H200)."""
    pid = tl.program_id(0)
    q_blocks = tl.cdiv(sq, ROWS)
    b = pid // q_blocks
    q = (pid % q_blocks) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    inb = (q < sq)[:, None] & (cols < sk)[None, :]
    m_offs = b.to(tl.int64) * mask_sb + q[:, None].to(tl.int64) * mask_sq + cols[None, :]
    keep = tl.load(m_ptr + m_offs, mask=inb, other=1) == 0
    offs = ((b * H).to(tl.int64) * sq + q)[:, None] * sk + cols[None, :]
    step = tl.cast(sq, tl.int64) * sk  # one head further (sq may be specialised to a constant)
    x_next = tl.load(x_ptr + offs, mask=inb, other=0.0, eviction_policy="evict_first")
    for h in range(H):
        # the next head's x is loaded before this head's reductions, so a load is always in flight
        # (H200: 90.7 -> 94.0% of the floor at sq 1024, 91.3 -> 93.7% at 2048; kernels/NOTES.md). The last
        # head reloads its own tile (an L2 hit) rather than guard the load.
        x = x_next.to(ACC)
        x_next = tl.load(x_ptr + offs + step * (1 - (h + 1) // H), mask=inb, other=0.0, eviction_policy="evict_first")
        z = tl.where(keep, x * scale2, float("-inf"))
        m = tl.max(z, axis=1)
        m = tl.where(m == float("-inf"), 0.0, m)  # a fully masked row: every exp below is 0
        e = tl.exp2(z - m[:, None])
        s = tl.sum(e, axis=1)
        inv = tl.where(s > 0, 1.0 / s, 0.0)
        tl.store(y_ptr + offs, (e * inv[:, None]).to(y_ptr.dtype.element_ty), mask=inb)
        offs += step


@triton.jit
def _softmax_fwd_row_looped(
    x_ptr,
    m_ptr,
    y_ptr,
    n_rows,
    sk,
    sq,
    H,
    mask_sb,
    mask_sq,
    scale2,
    unit,
    BLOCK_N: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    ACC: tl.constexpr,
):
    row, row_mask = _program_rows(unit, sq, H, 1)
    m_run = tl.full([1], float("-inf"), ACC)
    s_run = tl.zeros([1], ACC)
    if CAUSAL:
        kept = unit % sq + 1  # causal has one head: row = unit; the statistics need only the kept columns
    else:
        kept = sk
    for start in range(0, kept, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        z = _row_logits(
            x_ptr, m_ptr, row, cols, n_rows, sk, sq, H, mask_sb, mask_sq, scale2, row_mask, HAS_MASK, CAUSAL, ACC
        )
        m_new = tl.maximum(m_run, tl.max(z, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        s_run = s_run * tl.exp2(m_run - m_safe) + tl.sum(tl.exp2(z - m_safe[:, None]), axis=1)
        m_run = m_new
    m_safe = tl.where(m_run == float("-inf"), 0.0, m_run)
    inv = tl.where(s_run > 0, 1.0 / s_run, 0.0)
    for start in range(0, sk, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        z = _row_logits(
            x_ptr, m_ptr, row, cols, n_rows, sk, sq, H, mask_sb, mask_sq, scale2, row_mask, HAS_MASK, CAUSAL, ACC
        )
        y = tl.exp2(z - m_safe[:, None]) * inv[:, None]
        out = y_ptr + row[:, None].to(tl.int64) * sk + cols[None, :]
        tl.store(out, y.to(y_ptr.dtype.element_ty), mask=row_mask[:, None] & (cols[None, :] < sk))


@triton.jit
def _softmax_fwd_looped_kernel(
    x_ptr,
    m_ptr,
    y_ptr,
    n_rows,
    sk,
    sq,
    H,
    mask_sb,
    mask_sq,
    scale2,
    BLOCK_N: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    ACC: tl.constexpr,
):
    _softmax_fwd_row_looped(
        x_ptr,
        m_ptr,
        y_ptr,
        n_rows,
        sk,
        sq,
        H,
        mask_sb,
        mask_sq,
        scale2,
        tl.program_id(0),
        BLOCK_N,
        HAS_MASK,
        CAUSAL,
        ACC,
    )


@triton.jit
def _softmax_fwd_looped_persistent_kernel(
    x_ptr,
    m_ptr,
    y_ptr,
    n_rows,
    sk,
    sq,
    H,
    mask_sb,
    mask_sq,
    scale2,
    BLOCK_N: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    ACC: tl.constexpr,
):
    for unit in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        _softmax_fwd_row_looped(
            x_ptr, m_ptr, y_ptr, n_rows, sk, sq, H, mask_sb, mask_sq, scale2, unit, BLOCK_N, HAS_MASK, CAUSAL, ACC
        )


@triton.jit
def _softmax_bwd_tile(
    y_ptr,
    dy_ptr,
    dx_ptr,
    n_rows,
    sk,
    scale,
    tile,
    ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    ACC: tl.constexpr,
):
    row = tile * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    ok = (row < n_rows)[:, None] & (cols[None, :] < sk)
    load_ok = ok
    if CAUSAL:  # y is 0 above the diagonal, so dx is too: only the lower triangles of y and dy are read
        load_ok = ok & _causal_groups(cols, row % sk)
    offs = row[:, None].to(tl.int64) * sk + cols[None, :]
    y = tl.load(y_ptr + offs, mask=load_ok, other=0.0).to(ACC)
    dy = tl.load(dy_ptr + offs, mask=load_ok, other=0.0).to(ACC)
    if CAUSAL:  # the group's columns past the diagonal: whatever dy holds there is not used
        dy = tl.where(cols[None, :] <= (row % sk)[:, None], dy, 0.0)
    dot = tl.sum(y * dy, axis=1)
    dx = scale * y * (dy - dot[:, None])
    tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _softmax_bwd_kernel(
    y_ptr,
    dy_ptr,
    dx_ptr,
    n_rows,
    sk,
    scale,
    ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    ACC: tl.constexpr,
):
    _softmax_bwd_tile(y_ptr, dy_ptr, dx_ptr, n_rows, sk, scale, tl.program_id(0), ROWS, BLOCK_N, CAUSAL, ACC)


@triton.jit
def _softmax_bwd_persistent_kernel(
    y_ptr,
    dy_ptr,
    dx_ptr,
    n_rows,
    sk,
    scale,
    ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    ACC: tl.constexpr,
):
    for tile in range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)):
        _softmax_bwd_tile(y_ptr, dy_ptr, dx_ptr, n_rows, sk, scale, tile, ROWS, BLOCK_N, CAUSAL, ACC)


@triton.jit
def _softmax_bwd_row_looped(
    y_ptr, dy_ptr, dx_ptr, n_rows, sk, scale, unit, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, ACC: tl.constexpr
):
    row = tl.cast(unit, tl.int64)
    if CAUSAL:
        kept = unit % sk + 1  # columns past the diagonal: y = 0 there, so dx = 0
    else:
        kept = sk
    dot = tl.zeros([BLOCK_N], ACC)
    for start in range(0, kept, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        ok = cols < sk
        if CAUSAL:
            ok = ok & (((cols // 16) * 16) < kept)  # whole groups: vectorised (see _causal_groups); y = 0 past kept
        y = tl.load(y_ptr + row * sk + cols, mask=ok, other=0.0).to(ACC)
        dy = tl.load(dy_ptr + row * sk + cols, mask=ok, other=0.0).to(ACC)
        if CAUSAL:
            dy = tl.where(cols < kept, dy, 0.0)
        dot += y * dy
    total = tl.sum(dot, axis=0)
    for start in range(0, sk, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        ok = cols < sk
        load_ok = ok
        if CAUSAL:
            load_ok = ok & (((cols // 16) * 16) < kept)
        y = tl.load(y_ptr + row * sk + cols, mask=load_ok, other=0.0).to(ACC)
        dy = tl.load(dy_ptr + row * sk + cols, mask=load_ok, other=0.0).to(ACC)
        if CAUSAL:
            dy = tl.where(cols < kept, dy, 0.0)
        tl.store(dx_ptr + row * sk + cols, (scale * y * (dy - total)).to(dx_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _softmax_bwd_looped_kernel(
    y_ptr, dy_ptr, dx_ptr, n_rows, sk, scale, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, ACC: tl.constexpr
):
    _softmax_bwd_row_looped(y_ptr, dy_ptr, dx_ptr, n_rows, sk, scale, tl.program_id(0), BLOCK_N, CAUSAL, ACC)


@triton.jit
def _softmax_bwd_looped_persistent_kernel(
    y_ptr, dy_ptr, dx_ptr, n_rows, sk, scale, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, ACC: tl.constexpr
):
    for unit in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        _softmax_bwd_row_looped(y_ptr, dy_ptr, dx_ptr, n_rows, sk, scale, unit, BLOCK_N, CAUSAL, ACC)


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
def _forward_plan(
    n_rows: int, sq: int, heads: int, sk: int, dtype: str, mask_dtype: str | None, causal: bool, device: DeviceInfo
) -> tuple[Launch, ...]:
    return plan_forward(n_rows, sq, heads, sk, dtype, mask_dtype, causal, device)


@functools.lru_cache(maxsize=512)
def _backward_plan(n_rows: int, sk: int, dtype: str, device: DeviceInfo, causal: bool) -> tuple[Launch, ...]:
    return plan_backward(n_rows, sk, dtype, device, causal)


# ---------------------------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------------------------
def _check_input(x: torch.Tensor, rank: int, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: input must be a tensor")
    if x.dim() != rank:
        shape = "[b, h, sq, sk]" if rank == 4 else "[attn_batches, sq, sq]"
        raise ValueError(f"{name}: input must be {shape} ({rank}-d), got shape {tuple(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported (fp16, bf16, fp32; fp64 for gradcheck)")


def _check_mask(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    b, _, sq, sk = x.shape
    if not isinstance(mask, torch.Tensor):
        raise TypeError("scaled_masked_softmax: mask must be a tensor or None")
    if mask.dtype not in (torch.bool, torch.uint8):
        raise TypeError(f"scaled_masked_softmax: mask dtype must be bool or uint8, got {mask.dtype}")
    if mask.dim() != 4 or mask.shape[0] not in (1, b) or tuple(mask.shape[1:]) != (1, sq, sk):
        raise ValueError(
            f"scaled_masked_softmax: mask shape {tuple(mask.shape)} does not fit input "
            f"{tuple(x.shape)}: expected [{b} or 1, 1, {sq}, {sk}]"
        )
    if mask.device != x.device:
        raise ValueError(f"scaled_masked_softmax: input on {x.device}, mask on {mask.device}")
    mask = mask.contiguous()
    return mask.view(torch.uint8) if mask.dtype == torch.bool else mask


def _forward(x: torch.Tensor, mask: torch.Tensor | None, scale: float, causal: bool) -> torch.Tensor:
    x = x.contiguous()
    sk = x.shape[-1]
    sq = x.shape[-2]
    heads = x.shape[1] if x.dim() == 4 else 1
    n_rows = x.numel() // sk if sk else 0
    y = new_output(x.shape, x.dtype, x.device)
    if n_rows == 0:
        return y
    has_mask = mask is not None
    m = mask if has_mask else x
    mask_sb = (0 if mask.shape[0] == 1 else sq * sk) if has_mask else 0
    (step,) = _forward_plan(
        n_rows, sq, heads, sk, DTYPE_NAMES[x.dtype], "u8" if has_mask else None, causal, describe(x.device)
    )
    launch(step, x, m, y, n_rows, sk, sq, heads, mask_sb, sk, float(scale) * LOG2E)
    return y


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, scale: float, causal: bool = False) -> torch.Tensor:
    """dx = scale * y * (dy - sum(dy * y)) along the last dimension; ``causal``: y of
    :func:`scaled_upper_triang_masked_softmax` (zero above the diagonal), whose upper triangles are not read."""
    y, dy = y.contiguous(), dy.contiguous()
    sk = y.shape[-1]
    n_rows = y.numel() // sk if sk else 0
    dx = new_output(y.shape, y.dtype, y.device)
    if n_rows == 0:
        return dx
    (step,) = _backward_plan(n_rows, sk, DTYPE_NAMES[y.dtype], describe(y.device), causal)
    launch(step, y, dy, dx, n_rows, sk, float(scale))
    return dx


def scaled_masked_softmax_forward(input: torch.Tensor, mask: torch.Tensor | None, scale: float = 1.0) -> torch.Tensor:
    """Forward only (what the collector times); checks its arguments."""
    _check_input(input, 4, "scaled_masked_softmax")
    m = _check_mask(input, mask) if mask is not None else None
    return _forward(input, m, scale, causal=False)


def scaled_upper_triang_masked_softmax_forward(input: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    _check_input(input, 3, "scaled_upper_triang_masked_softmax")
    if input.shape[1] != input.shape[2]:
        raise ValueError(
            f"scaled_upper_triang_masked_softmax: input must be square in its last two "
            f"dimensions, got {tuple(input.shape)}"
        )
    return _forward(input, None, scale, causal=True)


class ScaledMaskedSoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, mask, scale):
        y = scaled_masked_softmax_forward(input, mask, scale)
        ctx.save_for_backward(y)
        ctx.scale = scale
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return softmax_backward(y, dy, ctx.scale), None, None


class ScaledUpperTriangMaskedSoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, scale):
        y = scaled_upper_triang_masked_softmax_forward(input, scale)
        ctx.save_for_backward(y)
        ctx.scale = scale
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return softmax_backward(y, dy, ctx.scale, causal=True), None


def _check_scale(scale: float) -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise TypeError(f"scale must be a finite number, got {scale!r}")
    return float(scale)


def scaled_masked_softmax(input: torch.Tensor, mask: torch.Tensor | None, scale: float = 1.0) -> torch.Tensor:
    """softmax(scale * input) over the last dim with ``mask`` (True = masked) excluded; differentiable."""
    scale = _check_scale(scale)
    if torch.is_grad_enabled() and input.requires_grad:
        return ScaledMaskedSoftmaxFunction.apply(input, mask, scale)
    return scaled_masked_softmax_forward(input, mask, scale)


def scaled_upper_triang_masked_softmax(input: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Causal softmax(scale * input) of ``[attn_batches, sq, sq]``; differentiable."""
    scale = _check_scale(scale)
    if torch.is_grad_enabled() and input.requires_grad:
        return ScaledUpperTriangMaskedSoftmaxFunction.apply(input, scale)
    return scaled_upper_triang_masked_softmax_forward(input, scale)


# ---------------------------------------------------------------------------------------------
# PyTorch references
# ---------------------------------------------------------------------------------------------
def reference_forward(x: torch.Tensor, mask: torch.Tensor | None, scale: float, causal: bool = False) -> torch.Tensor:
    """float64, on the CPU; fully masked rows are zeros (this project's documented behaviour)."""
    z = x.detach().cpu().double() * scale
    if causal:
        sq = z.shape[-1]
        masked = torch.ones(sq, sq, dtype=torch.bool).triu(1).expand_as(z)
    elif mask is not None:
        masked = mask.detach().cpu().bool().expand(z.shape[0], z.shape[1], *z.shape[2:])
    else:
        masked = torch.zeros_like(z, dtype=torch.bool)
    y = torch.softmax(z.masked_fill(masked, float("-inf")), dim=-1)
    return torch.nan_to_num(y, nan=0.0).masked_fill(masked, 0.0)


def reference_backward(y64: torch.Tensor, dy: torch.Tensor, scale: float) -> torch.Tensor:
    dy64 = dy.detach().cpu().double()
    return scale * y64 * (dy64 - (dy64 * y64).sum(-1, keepdim=True))


def eager_forward(x: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """What a model does without the fused kernel: scale, masked_fill, softmax."""
    z = x * scale
    if mask is not None:
        z = z.masked_fill(mask, torch.finfo(x.dtype).min)
    return torch.softmax(z, dim=-1)


def eager_backward(y: torch.Tensor, dy: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.ops.aten._softmax_backward_data(dy, y, -1, y.dtype) * scale


# ---------------------------------------------------------------------------------------------
# Spec
# ---------------------------------------------------------------------------------------------
APEX_MAX_SK = 16384  # apex csrc/megatron: TORCH_INTERNAL_ASSERT(key_seq_len <= 16384)
TOLERANCES = {"fp32": Tolerance(1.3e-6, 1e-5), "fp16": Tolerance(1e-3, 1e-3), "bf16": Tolerance(1.6e-2, 8e-3)}
TARGETS_DOC = "docs/kernels.md, softmax targets (H200)"
FWD_TARGET = Target(min_pct_peak=85, min_speedup_vs_eager=5, min_speedup_vs_compile=2, source=TARGETS_DOC)
BWD_TARGET = Target(min_pct_peak=80, source=TARGETS_DOC)
NAME = "scaled_masked_softmax"

# (shape, params): small enough for the CPU interpreter, covering what breaks naive kernels
ACCURACY_POINTS: tuple[tuple[tuple[int, ...], dict], ...] = (
    ((2, 3, 5, 7), {"mask": "batch", "density": 0.5}),
    ((2, 2, 16, 33), {"mask": "batch", "density": 0.1}),
    ((2, 2, 16, 33), {"mask": "shared", "density": 0.9}),
    ((1, 2, 8, 128), {"mask": "none"}),
    ((2, 1, 8, 100), {"mask": "batch", "density": 0.3, "dead_rows": 3}),
    ((1, 2, 4, 64), {"mask": "batch", "density": 0.2, "magnitude": 300.0}),
    ((1, 1, 4, 3000), {"mask": "batch", "density": 0.1}),
    ((1, 1, 2, 1), {"mask": "none"}),
    ((2, 2, 6, 48), {"mask": "batch", "density": 0.5, "mask_dtype": "uint8", "layout": "transposed"}),
)
CAUSAL_POINTS: tuple[tuple[int, ...], ...] = ((4, 37, 37), (1, 100, 100))
LONG_ROW = ((1, 1, 2, 33000), {"mask": "batch", "density": 0.1})  # beyond one block on every vendor


def _accuracy_cases() -> list[Case]:
    cases = []
    for dtype in ("fp32", "fp16", "bf16"):
        tol = TOLERANCES[dtype]
        for shape, extra in (*ACCURACY_POINTS, LONG_ROW):
            for direction in ("fwd", "bwd"):
                if shape == LONG_ROW[0] and direction == "bwd" and dtype != "fp32":
                    continue
                cases.append(
                    Case.make(NAME, "masked", dtype, tol, shape=shape, direction=direction, scale=0.125, **extra)
                )
        for shape in CAUSAL_POINTS:
            for direction in ("fwd", "bwd"):
                cases.append(Case.make(NAME, "causal", dtype, tol, shape=shape, direction=direction, scale=0.5))
    return cases


PERF_SHAPES = ((32, 16, 512, 512), (32, 16, 1024, 1024), (32, 16, 2048, 2048), (8, 16, 4096, 4096))
CAUSAL_PERF_SHAPES = ((512, 512, 512), (512, 2048, 2048))  # [attn_batches, sq, sq]: apex's two causal cases


def _perf_cases() -> list[Case]:
    cases = []
    for dtype in ("fp16", "bf16"):
        for shape in PERF_SHAPES:
            cases.append(
                Case.make(
                    NAME,
                    "masked",
                    dtype,
                    TOLERANCES[dtype],
                    FWD_TARGET,
                    trials=1,
                    shape=shape,
                    direction="fwd",
                    mask="batch",
                    density=0.1,
                    scale=0.125,
                )
            )
            cases.append(
                Case.make(
                    NAME,
                    "masked",
                    dtype,
                    TOLERANCES[dtype],
                    BWD_TARGET,
                    trials=1,
                    shape=shape,
                    direction="bwd",
                    mask="batch",
                    density=0.1,
                    scale=0.125,
                )
            )
        for shape in CAUSAL_PERF_SHAPES:
            for direction in ("fwd", "bwd"):
                cases.append(
                    Case.make(
                        NAME,
                        "causal",
                        dtype,
                        TOLERANCES[dtype],
                        None,
                        trials=1,
                        shape=shape,
                        direction=direction,
                        scale=0.125,
                    )
                )
    return cases


def _make_inputs(case: Case, device: torch.device, seed: int) -> dict:
    p = case.p
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shape = tuple(p["shape"])
    dtype = case.torch_dtype
    magnitude = p.get("magnitude", 4.0)
    big = numel(shape) > 1 << 24
    if big:  # perf-sized: generate on the device
        dgen = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(shape, generator=dgen, device=device, dtype=torch.float32).mul_(magnitude).to(dtype)
    else:
        x = (torch.randn(shape, generator=gen) * magnitude).to(dtype).to(device)
    if p.get("layout") == "transposed":
        x = x.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values, non-contiguous strides
    inputs: dict = {"x": x, "scale": p["scale"], "causal": case.variant == "causal", "mask": None}
    if case.variant == "masked" and p.get("mask", "none") != "none":
        mb = shape[0] if p["mask"] == "batch" else 1
        mshape = (mb, 1, shape[2], shape[3])
        if big:
            mask = torch.rand(mshape, generator=dgen, device=device) < p["density"]
        else:
            mask = (torch.rand(mshape, generator=gen) < p["density"]).to(device)
        if p.get("dead_rows"):
            mask[:, :, : p["dead_rows"], :] = True
        if p.get("mask_dtype") == "uint8":
            mask = mask.to(torch.uint8)
        inputs["mask"] = mask
    if p["direction"] == "bwd":
        if big:
            inputs["dy"] = torch.randn(shape, generator=dgen, device=device, dtype=torch.float32).to(dtype)
        else:
            inputs["dy"] = torch.randn(shape, generator=gen).to(dtype).to(device)
    return inputs


def _apply(inputs: dict) -> torch.Tensor:
    if inputs["causal"]:
        return scaled_upper_triang_masked_softmax(inputs["x"], inputs["scale"])
    return scaled_masked_softmax(inputs["x"], inputs["mask"], inputs["scale"])


def _run(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    if case.p["direction"] == "fwd":
        return (_apply(inputs),)
    x = inputs["x"].detach().requires_grad_()
    y = _apply({**inputs, "x": x})
    (dx,) = torch.autograd.grad(y, x, inputs["dy"])
    return (dx,)


def _reference(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    y64 = reference_forward(inputs["x"], inputs["mask"], inputs["scale"], inputs["causal"])
    if case.p["direction"] == "fwd":
        return (y64,)
    return (reference_backward(y64, inputs["dy"], inputs["scale"]),)


def _implementations(case: Case, inputs: dict) -> dict:
    x, mask, scale, causal = inputs["x"], inputs["mask"], inputs["scale"], inputs["causal"]
    user_mask = mask
    if causal:
        sq = x.shape[-1]
        mask = torch.ones(sq, sq, dtype=torch.bool, device=x.device).triu(1)
    # apex's Megatron extensions: fp16/bf16, a mask tensor for the masked variant, rows up to 16,384
    apex = (
        apex_softmax(x.device, causal)
        if x.dtype in (torch.float16, torch.bfloat16)
        and x.shape[-1] <= APEX_MAX_SK
        and x.shape[-2] > 1
        and (causal or user_mask is not None)
        else None
    )
    if case.p["direction"] == "fwd":
        kernel = (
            (lambda: scaled_upper_triang_masked_softmax_forward(x, scale))
            if causal
            else (lambda: scaled_masked_softmax_forward(x, mask, scale))
        )
        compiled = torch.compile(eager_forward, dynamic=False)
        impls = {
            KERNEL_IMPL: kernel,
            EAGER_IMPL: lambda: eager_forward(x, mask, scale),
            COMPILE_IMPL: lambda: compiled(x, mask, scale),
        }
        if apex is not None:
            impls[APEX_IMPL] = (
                (lambda: apex.forward(x, scale)) if causal else (lambda: apex.forward(x, user_mask, scale))
            )
        return impls
    y = eager_forward(x, mask, scale)
    dy = inputs["dy"]
    compiled = torch.compile(eager_backward, dynamic=False)
    impls = {
        KERNEL_IMPL: lambda: softmax_backward(y, dy, scale, causal),
        EAGER_IMPL: lambda: eager_backward(y, dy, scale),
        COMPILE_IMPL: lambda: compiled(y, dy, scale),
    }
    if apex is not None:  # apex's backward writes dx over its dy argument (as Megatron calls it): a copy of its own
        dy_apex = dy.clone()
        impls[APEX_IMPL] = lambda: apex.backward(dy_apex, y, scale)
    return impls


def causal_kept(shape: tuple[int, ...]) -> int:
    """Elements a causal softmax must read: the lower triangle of every ``[sq, sq]`` matrix, diagonal
    included (row i keeps columns 0..i: sq (sq + 1) / 2 per matrix)."""
    *batch, sq, _ = shape
    return math.prod(batch) * sq * (sq + 1) // 2


def _bytes(case: Case) -> int:
    """The floor's bytes: what must be read and written. Masked: x read, y written, the mask read once
    (it is shared by every head). Causal: only the lower triangle (diagonal included) is read, the whole
    output written (zeros above the diagonal); its backward reads the lower triangles of y and dy."""
    p = case.p
    shape = p["shape"]
    n = numel(shape)
    size = element_size(case.dtype)
    read = causal_kept(shape) if case.variant == "causal" else n
    if p["direction"] == "bwd":
        return (2 * read + n) * size  # read y and dy, write dx
    if case.variant == "causal":
        return (read + n) * size
    mask_bytes = 0
    if p.get("mask", "none") != "none":
        mb = shape[0] if p["mask"] == "batch" else 1
        mask_bytes = mb * shape[2] * shape[3]
    return 2 * n * size + mask_bytes


def _flops(case: Case) -> int:
    return 5 * numel(case.p["shape"])  # scale, max, exp, sum, divide


def _launch_plans(case: Case, device: DeviceInfo) -> tuple[Launch, ...]:
    """Every launch that running ``case`` makes on ``device`` (the forward, then the backward)."""
    p = case.p
    shape = p["shape"]
    sk, sq = shape[-1], shape[-2]
    heads = shape[1] if len(shape) == 4 else 1
    n_rows = numel(shape) // sk if sk else 0
    mask_dtype = "u8" if case.variant == "masked" and p.get("mask", "none") != "none" else None
    steps = plan_forward(n_rows, sq, heads, sk, case.dtype, mask_dtype, case.variant == "causal", device)
    if p["direction"] == "bwd":
        steps += plan_backward(n_rows, sk, case.dtype, device, case.variant == "causal")
    return steps


SPEC = KernelSpec(
    name=NAME,
    accuracy_cases=_accuracy_cases,
    perf_cases=_perf_cases,
    make_inputs=_make_inputs,
    run=_run,
    reference=_reference,
    implementations=_implementations,
    bytes_moved=_bytes,
    flops=_flops,
    profile_kernel=lambda case: "_softmax_bwd" if case.p["direction"] == "bwd" else "_softmax_fwd",
    launch_plans=_launch_plans,
    # Softmax writes as many bytes as it reads (MTE3 carries about half the traffic, not < 1% as in a
    # reduction) and takes an exponential per element: the MSELoss document's mte3 and vec ideals do not apply.
    profiler_ideals={"aiv_mte3_ratio": None, "aiv_vec_ratio": None},
    variants=("masked", "causal"),
    public=("scaled_masked_softmax", "scaled_upper_triang_masked_softmax"),
    doc=__doc__ or "",
)
