"""The Triton kernels of Fused LayerNorm + MatMul: the mean / 1/std prepass, the fused pointer GEMM (one tile per
program, or persistent), the Hopper TMA GEMM and the split-K decode GEMM (which forms the statistics itself), each
with the LayerNorm epilogue y = r (acc - mu s) + c. The shared pieces they call are in
:mod:`kernelwatch.kernels.norm_gemm`; which of them runs, with which tiles, is
:mod:`kernelwatch.kernels.fused_layernorm_matmul.plans`."""

from __future__ import annotations

import triton
import triton.language as tl

from kernelwatch.kernels.norm_gemm import (
    decode_operands,
    decode_store,
    dot_acc,
    gemm_tile_ids,
    round_to_bf16,
    tma_tile_acc,
)


# Triton kernels
# ---------------------------------------------------------------------------------------------
@triton.jit
def _ln_stats_rows(
    x_ptr, mean_ptr, rstd_ptr, M, K, stride_xm, stride_xk, eps, tile, ROWS: tl.constexpr, BLOCK_K: tl.constexpr
):
    """mean and 1/sqrt(var + eps) of ROWS rows, from sums of x - x[row, 0] (a shift that keeps
    sum(d^2) - sum(d)^2 / K from cancelling when |mean| >> sigma; the shift cancels out exactly)."""
    rows = tile * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    base = x_ptr + rows[:, None].to(tl.int64) * stride_xm
    shift = tl.load(base, mask=row_ok[:, None], other=0.0).to(tl.float32)
    s1 = tl.zeros([ROWS, BLOCK_K], dtype=tl.float32)
    s2 = tl.zeros([ROWS, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        ok = row_ok[:, None] & (cols < K)[None, :]
        x = tl.load(base + cols[None, :] * stride_xk, mask=ok, other=0.0).to(tl.float32)
        d = tl.where(ok, x - shift, 0.0)
        s1 += d
        s2 += d * d
    d_mean = tl.sum(s1, axis=1) / K
    var = tl.maximum(tl.sum(s2, axis=1) / K - d_mean * d_mean, 0.0)
    tl.store(mean_ptr + rows, tl.reshape(shift, [ROWS]) + d_mean, mask=row_ok)
    tl.store(rstd_ptr + rows, 1.0 / tl.sqrt(var + eps), mask=row_ok)


@triton.jit
def _ln_stats_kernel(
    x_ptr, mean_ptr, rstd_ptr, M, K, stride_xm, stride_xk, eps, ROWS: tl.constexpr, BLOCK_K: tl.constexpr
):
    """The prepass: mean and 1/std per row, the only thing written besides y (8 bytes a row)."""
    _ln_stats_rows(x_ptr, mean_ptr, rstd_ptr, M, K, stride_xm, stride_xk, eps, tl.program_id(0), ROWS, BLOCK_K)


@triton.jit
def _ln_stats_persistent_kernel(
    x_ptr, mean_ptr, rstd_ptr, M, K, stride_xm, stride_xk, eps, ROWS: tl.constexpr, BLOCK_K: tl.constexpr
):
    for tile in range(tl.program_id(0), tl.cdiv(M, ROWS), tl.num_programs(0)):
        _ln_stats_rows(x_ptr, mean_ptr, rstd_ptr, M, K, stride_xm, stride_xk, eps, tile, ROWS, BLOCK_K)


@triton.jit
def _ln_epilogue(acc, mean, rstd, s_ptr, c_ptr, offs_n, n_ok, HAS_C: tl.constexpr):
    """y = r (acc - mu s) + c."""
    s = tl.load(s_ptr + offs_n, mask=n_ok, other=0.0)
    acc = (acc - mean[:, None] * s[None, :]) * rstd[:, None]
    if HAS_C:
        acc += tl.load(c_ptr + offs_n, mask=n_ok, other=0.0)[None, :]
    return acc


@triton.jit
def _ln_matmul_tile(
    x_ptr,
    w_ptr,
    mean_ptr,
    rstd_ptr,
    s_ptr,
    c_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    tile,
    HAS_C: tl.constexpr,
    IEEE: tl.constexpr,
    UPCAST: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid_m, pid_n = gemm_tile_ids(tile, tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_M)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    m_ok = offs_m < M
    n_ok = offs_n < N
    mean = tl.load(mean_ptr + offs_m, mask=m_ok, other=0.0)
    rstd = tl.load(rstd_ptr + offs_m, mask=m_ok, other=0.0)
    a_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :] * stride_xk
    b_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None] * stride_wk
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        k_ok = (k0 + offs_k) < K
        a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = dot_acc(a, b, acc, IEEE, UPCAST)
        a_ptrs += BK * stride_xk
        b_ptrs += BK * stride_wk
    acc = _ln_epilogue(acc, mean, rstd, s_ptr, c_ptr, offs_n, n_ok, HAS_C)
    if UPCAST:
        acc = round_to_bf16(acc)
    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _fused_ln_matmul_kernel(
    x_ptr,
    w_ptr,
    mean_ptr,
    rstd_ptr,
    s_ptr,
    c_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    HAS_C: tl.constexpr,
    IEEE: tl.constexpr,
    UPCAST: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    _ln_matmul_tile(
        x_ptr,
        w_ptr,
        mean_ptr,
        rstd_ptr,
        s_ptr,
        c_ptr,
        y_ptr,
        M,
        N,
        K,
        stride_xm,
        stride_xk,
        stride_wn,
        stride_wk,
        stride_ym,
        tl.program_id(0),
        HAS_C,
        IEEE,
        UPCAST,
        BM,
        BN,
        BK,
        GROUP_M,
    )


@triton.jit
def _fused_ln_matmul_persistent_kernel(
    x_ptr,
    w_ptr,
    mean_ptr,
    rstd_ptr,
    s_ptr,
    c_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    HAS_C: tl.constexpr,
    IEEE: tl.constexpr,
    UPCAST: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    num_tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
    for tile in range(tl.program_id(0), num_tiles, tl.num_programs(0)):
        _ln_matmul_tile(
            x_ptr,
            w_ptr,
            mean_ptr,
            rstd_ptr,
            s_ptr,
            c_ptr,
            y_ptr,
            M,
            N,
            K,
            stride_xm,
            stride_xk,
            stride_wn,
            stride_wk,
            stride_ym,
            tile,
            HAS_C,
            IEEE,
            UPCAST,
            BM,
            BN,
            BK,
            GROUP_M,
        )


@triton.jit
def _ln_gemm_tma_kernel(
    a_desc,
    b_desc,
    c_desc,
    mean_ptr,
    rstd_ptr,
    s_ptr,
    c_ptr,
    M,
    N,
    K,
    HAS_C: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
):
    """Persistent GEMM on Hopper over the raw x (TMA descriptors move A, B and C tiles), y = r (acc - mu s) + c
    in the epilogue; the tile loop is flattened into the K loop as in the RMSNorm kernel."""
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    tile_c = start - NUM_SMS
    for tile in tl.range(start, num_pid_m * num_pid_n, NUM_SMS, flatten=True):
        pid_m, pid_n = gemm_tile_ids(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tma_tile_acc(a_desc, b_desc, pid_m, pid_n, k_tiles, BM, BN, BK)
        tile_c += NUM_SMS
        pid_m, pid_n = gemm_tile_ids(tile_c, num_pid_m, num_pid_n, GROUP_M)
        rows = pid_m * BM + tl.arange(0, BM)
        cols = pid_n * BN + tl.arange(0, BN)
        mean = tl.load(mean_ptr + rows, mask=rows < M, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=rows < M, other=0.0)
        acc = _ln_epilogue(acc, mean, rstd, s_ptr, c_ptr, cols, cols < N, HAS_C)
        c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


@triton.jit
def _ln_decode_splitk_kernel(
    x_ptr,
    w,
    part_ptr,
    s1_ptr,
    s2_ptr,
    count_ptr,
    s_ptr,
    c_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    eps,
    HAS_C: tl.constexpr,
    W_DESC: tl.constexpr,
    UPCAST: tl.constexpr,
    SPLITS: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    """Program (n, s): partial sums of columns [n*BN, n*BN + BN) over the s-th share of K, and of d and d^2 over
    it (d = x - x[row, 0], the statistics prepass's shift, from the x tiles the product loads anyway). The last
    program of column block n (an acq_rel counter) adds the SPLITS partials, forms mu and r = 1/sqrt(var + eps)
    as the prepass does, applies r (acc - mu s) + c, writes y, and zeroes the counter for the next launch: one
    launch a call. ``w`` is a TMA descriptor of W' when W_DESC, else its pointer."""
    pid_n = tl.program_id(0)
    s = tl.program_id(1)
    rows = tl.arange(0, BM)
    row_ok = rows < M
    cols = pid_n * BN + tl.arange(0, BN)
    kk = tl.arange(0, BK)
    shift = tl.load(x_ptr + rows.to(tl.int64) * stride_xm, mask=row_ok, other=0.0).to(tl.float32)
    k_per = tl.cdiv(tl.cdiv(K, BK), SPLITS) * BK
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    s1 = tl.zeros((BM, BK), dtype=tl.float32)
    s2 = tl.zeros((BM, BK), dtype=tl.float32)
    for k0 in range(s * k_per, min(s * k_per + k_per, K), BK):
        a, b = decode_operands(x_ptr, w, rows, cols, k0, kk, M, N, K, stride_xm, pid_n, BN, W_DESC)
        af = a.to(tl.float32)
        d = tl.where(row_ok[:, None] & ((k0 + kk) < K)[None, :], af - shift[:, None], 0.0)
        s1 += d
        s2 += d * d
        if UPCAST:
            acc = tl.dot(af, b.to(tl.float32).T, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b.T, acc)
    slot = (pid_n * SPLITS + s) * BM
    tl.store(part_ptr + (slot + rows[:, None]) * BN + tl.arange(0, BN)[None, :], acc)
    tl.store(s1_ptr + slot + rows, tl.sum(s1, axis=1))
    tl.store(s2_ptr + slot + rows, tl.sum(s2, axis=1))
    if tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel") == SPLITS - 1:
        total = tl.zeros((BM, BN), dtype=tl.float32)
        sum1 = tl.zeros((BM,), dtype=tl.float32)
        sum2 = tl.zeros((BM,), dtype=tl.float32)
        for t in tl.static_range(SPLITS):
            first = (pid_n * SPLITS + t) * BM
            total += tl.load(part_ptr + (first + rows[:, None]) * BN + tl.arange(0, BN)[None, :], cache_modifier=".cg")
            sum1 += tl.load(s1_ptr + first + rows, cache_modifier=".cg")
            sum2 += tl.load(s2_ptr + first + rows, cache_modifier=".cg")
        d_mean = sum1 / K
        var = tl.maximum(sum2 / K - d_mean * d_mean, 0.0)
        mean = shift + d_mean
        rstd = 1.0 / tl.sqrt(var + eps)
        total = _ln_epilogue(total, mean, rstd, s_ptr, c_ptr, cols, cols < N, HAS_C)
        decode_store(y_ptr, count_ptr, total, rows, cols, pid_n, M, N, UPCAST)
