"""The Triton kernels of Fused RMSNorm + MatMul: the fused pointer GEMM (one tile per program, or persistent),
the 1/rms prepass, the Hopper TMA GEMM and the split-K decode GEMM. The shared pieces they call are in
:mod:`kernelwatch.kernels.norm_gemm`; which of them runs, with which tiles, is
:mod:`kernelwatch.kernels.fused_rmsnorm_matmul.plans`."""

from __future__ import annotations

import triton
import triton.language as tl

try:  # programmatic dependent launch on Hopper (Triton >= 3.3); absent elsewhere (triton-ascend)
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # pragma: no cover - only an old or non-CUDA Triton
    gdc_launch_dependents = gdc_wait = None

from kernelwatch.kernels.norm_gemm import (
    decode_operands,
    decode_store,
    dot_acc,
    gemm_tile_ids,
    round_to_bf16,
    tma_tile_acc,
)


@triton.jit
def _matmul_tile(
    x_ptr,
    w_ptr,
    g_ptr,
    b_ptr,
    r_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    eps,
    tile,
    HAS_BIAS: tl.constexpr,
    PROLOGUE_GAMMA: tl.constexpr,
    RSTD_GIVEN: tl.constexpr,
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
    a_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :] * stride_xk
    b_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None] * stride_wk

    acc = tl.zeros([BM, BN], dtype=tl.float32)
    sumsq = tl.zeros([BM], dtype=tl.float32)
    for k0 in range(0, K, BK):
        k_ok = (k0 + offs_k) < K
        a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if not RSTD_GIVEN:
            af = a.to(tl.float32)
            sumsq += tl.sum(af * af, axis=1)
        if PROLOGUE_GAMMA:
            g = tl.load(g_ptr + k0 + offs_k, mask=k_ok, other=0.0).to(tl.float32)
            if UPCAST:
                a = round_to_bf16(a.to(tl.float32) * g[None, :])
            else:
                a = (a.to(tl.float32) * g[None, :]).to(a.dtype)
        acc = dot_acc(a, b, acc, IEEE, UPCAST)
        a_ptrs += BK * stride_xk
        b_ptrs += BK * stride_wk

    if RSTD_GIVEN:
        rstd = tl.load(r_ptr + offs_m, mask=m_ok, other=0.0)
    else:
        rstd = 1.0 / tl.sqrt(sumsq / K + eps)
    acc = acc * rstd[:, None]
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    if UPCAST:
        acc = round_to_bf16(acc)
    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _fused_rmsnorm_matmul_kernel(
    x_ptr,
    w_ptr,
    g_ptr,
    b_ptr,
    r_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    eps,
    HAS_BIAS: tl.constexpr,
    PROLOGUE_GAMMA: tl.constexpr,
    RSTD_GIVEN: tl.constexpr,
    IEEE: tl.constexpr,
    UPCAST: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    _matmul_tile(
        x_ptr,
        w_ptr,
        g_ptr,
        b_ptr,
        r_ptr,
        y_ptr,
        M,
        N,
        K,
        stride_xm,
        stride_xk,
        stride_wn,
        stride_wk,
        stride_ym,
        eps,
        tl.program_id(0),
        HAS_BIAS,
        PROLOGUE_GAMMA,
        RSTD_GIVEN,
        IEEE,
        UPCAST,
        BM,
        BN,
        BK,
        GROUP_M,
    )


@triton.jit
def _fused_rmsnorm_matmul_persistent_kernel(
    x_ptr,
    w_ptr,
    g_ptr,
    b_ptr,
    r_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    eps,
    HAS_BIAS: tl.constexpr,
    PROLOGUE_GAMMA: tl.constexpr,
    RSTD_GIVEN: tl.constexpr,
    IEEE: tl.constexpr,
    UPCAST: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    num_tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
    for tile in range(tl.program_id(0), num_tiles, tl.num_programs(0)):
        _matmul_tile(
            x_ptr,
            w_ptr,
            g_ptr,
            b_ptr,
            r_ptr,
            y_ptr,
            M,
            N,
            K,
            stride_xm,
            stride_xk,
            stride_wn,
            stride_wk,
            stride_ym,
            eps,
            tile,
            HAS_BIAS,
            PROLOGUE_GAMMA,
            RSTD_GIVEN,
            IEEE,
            UPCAST,
            BM,
            BN,
            BK,
            GROUP_M,
        )


@triton.jit
def _rstd_rows(x_ptr, r_ptr, M, K, stride_xm, stride_xk, eps, tile, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tile * ROWS + tl.arange(0, ROWS)
    acc = tl.zeros([ROWS, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        ok = (rows < M)[:, None] & (cols < K)[None, :]
        x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xm + cols[None, :] * stride_xk, mask=ok, other=0.0)
        xf = x.to(tl.float32)
        acc += xf * xf
    tl.store(r_ptr + rows, 1.0 / tl.sqrt(tl.sum(acc, axis=1) / K + eps), mask=rows < M)


@triton.jit
def _rstd_kernel(x_ptr, r_ptr, M, K, stride_xm, stride_xk, eps, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """1/sqrt(mean(x^2) + eps) per row: the only thing the prepass variant writes (4 bytes a row)."""
    _rstd_rows(x_ptr, r_ptr, M, K, stride_xm, stride_xk, eps, tl.program_id(0), ROWS, BLOCK_K)


@triton.jit
def _rstd_pdl_kernel(x_ptr, r_ptr, M, K, stride_xm, stride_xk, eps, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """:func:`_rstd_kernel` that lets its dependent launch (the TMA GEMM, launched with PDL) start at once."""
    gdc_launch_dependents()
    _rstd_rows(x_ptr, r_ptr, M, K, stride_xm, stride_xk, eps, tl.program_id(0), ROWS, BLOCK_K)


@triton.jit
def _rstd_persistent_kernel(x_ptr, r_ptr, M, K, stride_xm, stride_xk, eps, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    for tile in range(tl.program_id(0), tl.cdiv(M, ROWS), tl.num_programs(0)):
        _rstd_rows(x_ptr, r_ptr, M, K, stride_xm, stride_xk, eps, tile, ROWS, BLOCK_K)


@triton.jit
def _rms_gemm_tma_kernel(
    a_desc,
    b_desc,
    c_desc,
    r_ptr,
    bias_ptr,
    M,
    N,
    K,
    HAS_BIAS: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
    PDL: tl.constexpr,
):
    """Persistent GEMM y = diag(r) x W'^T (+ b) on Hopper: TMA descriptors move the A, B and C tiles, tiles are
    walked GROUP_M row blocks at a time; r (1/rms per row) comes from the prepass. The tile loop is
    flattened into the K loop so the next tile's loads overlap this tile's epilogue."""
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    tile_c = start - NUM_SMS  # the epilogue's own counter (the flattened loop must not share one)
    for tile in tl.range(start, num_pid_m * num_pid_n, NUM_SMS, flatten=True):
        pid_m, pid_n = gemm_tile_ids(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tma_tile_acc(a_desc, b_desc, pid_m, pid_n, k_tiles, BM, BN, BK)
        tile_c += NUM_SMS
        pid_m, pid_n = gemm_tile_ids(tile_c, num_pid_m, num_pid_n, GROUP_M)
        rows = pid_m * BM + tl.arange(0, BM)
        if PDL:  # launched while the prepass may still run: wait for its 1/rms (immediate after the first time)
            gdc_wait()
        acc = acc * tl.load(r_ptr + rows, mask=rows < M, other=0.0)[:, None]
        if HAS_BIAS:
            cols = pid_n * BN + tl.arange(0, BN)
            acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


@triton.jit
def _decode_splitk_kernel(
    x_ptr,
    w,
    part_ptr,
    ss_ptr,
    count_ptr,
    bias_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    eps,
    HAS_BIAS: tl.constexpr,
    W_DESC: tl.constexpr,
    UPCAST: tl.constexpr,
    SPLITS: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    """Program (n, s): partial sums of columns [n*BN, n*BN + BN) over the s-th share of K, and of x^2 over it.
    The last program of column block n (an acq_rel counter) adds the SPLITS partials, scales by 1/rms, adds
    the bias, writes y, and zeroes the counter for the next launch. ``w`` is a TMA descriptor of W' when
    W_DESC (Hopper), else its pointer."""
    pid_n = tl.program_id(0)
    s = tl.program_id(1)
    rows = tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    kk = tl.arange(0, BK)
    k_per = tl.cdiv(tl.cdiv(K, BK), SPLITS) * BK
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    ss = tl.zeros((BM, BK), dtype=tl.float32)
    for k0 in range(s * k_per, min(s * k_per + k_per, K), BK):
        a, b = decode_operands(x_ptr, w, rows, cols, k0, kk, M, N, K, stride_xm, pid_n, BN, W_DESC)
        af = a.to(tl.float32)
        ss += af * af
        # the interpreter multiplies bf16 tiles wrongly (kernelwatch.kernels.norm_gemm.dot_acc): fp32 products are exact
        if UPCAST:
            acc = tl.dot(af, b.to(tl.float32).T, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b.T, acc)
    slot = (pid_n * SPLITS + s) * BM
    tl.store(part_ptr + (slot + rows[:, None]) * BN + tl.arange(0, BN)[None, :], acc)
    tl.store(ss_ptr + slot + rows, tl.sum(ss, axis=1))
    if tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel") == SPLITS - 1:
        total = tl.zeros((BM, BN), dtype=tl.float32)
        sumsq = tl.zeros((BM,), dtype=tl.float32)
        for t in tl.static_range(SPLITS):
            first = (pid_n * SPLITS + t) * BM
            total += tl.load(part_ptr + (first + rows[:, None]) * BN + tl.arange(0, BN)[None, :], cache_modifier=".cg")
            sumsq += tl.load(ss_ptr + first + rows, cache_modifier=".cg")
        total = total * (1.0 / tl.sqrt(sumsq / K + eps))[:, None]
        if HAS_BIAS:
            total += tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        decode_store(y_ptr, count_ptr, total, rows, cols, pid_n, M, N, UPCAST)
