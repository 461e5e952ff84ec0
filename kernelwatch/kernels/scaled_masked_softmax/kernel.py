"""The Triton kernels of the scaled masked softmax: forward (one pass per row tile, every head of a query-row
block, or two passes over long rows) and backward, each plain or persistent. Which of them runs, with which
tiles, is :mod:`kernelwatch.kernels.scaled_masked_softmax.plans`."""

from __future__ import annotations

import triton
import triton.language as tl


# ---------------------------------------------------------------------------------------------
# Triton kernels. *_tile / *_row helpers are one unit of work; the plain kernels do one unit per program
# (NVIDIA, interpreter), the *_persistent kernels loop units over one program per vector core (Ascend: a
# launch has at most 65,535 programs, see kernelwatch/kernels/plan.py).
# ---------------------------------------------------------------------------------------------
@triton.jit
def _causal_groups(cols, q):
    """Load mask of the causal rows ``q`` (a column tensor): columns up to the diagonal, widened to whole
    groups of 16 columns. One mask value per group keeps the load vectorised (the element-exact mask
    ``cols <= q`` made it one 2-byte load per element: kernelwatch/kernels/NOTES.md); the few columns past the
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
    (making x's load wait for the mask doubled the memory latency per tile: kernelwatch/kernels/NOTES.md).
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
    the floor's (kernelwatch/kernels/NOTES.md: 68-73% -> 88-92% of the copy-bandwidth floor on an H200)."""
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
        # (H200: 90.7 -> 94.0% of the floor at sq 1024, 91.3 -> 93.7% at 2048; kernelwatch/kernels/NOTES.md). The last
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
