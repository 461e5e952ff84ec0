r"""Fused RMSNorm + MatMul with no intermediate write-back.

``fused_rmsnorm_matmul(x, weight, gamma, bias=None, eps=1e-6)``, x ``[..., K]``, weight ``[N, K]``,
gamma ``[K]``, bias ``[N]``:

    y = (x / sqrt(mean_k x_k^2 + eps) * gamma) @ weight^T + bias

The normalisation is a per-row scale r_m = 1/sqrt(mean_k x_mk^2 + eps), so

    diag(r) X diag(gamma) W^T = diag(r) (X (W diag(gamma))^T).

The kernel is one GEMM over K whose loop also sums x^2 from the A tiles it loads anyway; r is
applied in the epilogue, and the normalised x never exists in memory. gamma is either folded into
the weight once per weight version (``fold_gamma``: W' = W diag(gamma), cached, recomputed when
weight or gamma change, in place too) or multiplied into each A tile in the prologue
(``prologue_gamma``). Sum of squares and accumulation in fp32. Backward is unfused (PyTorch).

Launches come from :func:`plan_forward`: autotuned tiles on NVIDIA (one program per output tile); on
Ascend one program per AI core looping over the output tiles, with a tile whose unified-buffer
estimate fits (cube and vector work mix here, so tail axes are aligned to 512 B).
"""

from __future__ import annotations

import functools
import math
import weakref
from typing import Any

import torch
import triton
import triton.language as tl

try:  # programmatic dependent launch on Hopper (Triton >= 3.3); absent elsewhere (triton-ascend)
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # pragma: no cover - only an old or non-CUDA Triton
    gdc_launch_dependents = gdc_wait = None

from kernels.device import describe
from kernels.peers import flaggems, liger_rms_norm
from kernels.plan import (
    Autotuned,
    DeviceInfo,
    Footprint,
    Launch,
    Step,
    descriptor,
    int_type,
    launch,
    launch_autotuned,
    load,
    pointer,
    work,
)
from kernels.poison import new_output
from kernels.spec import (
    COMPILE_IMPL,
    DTYPE_NAMES,
    EAGER_IMPL,
    FLAGGEMS_IMPL,
    KERNEL_IMPL,
    LIGER_IMPL,
    Case,
    KernelSpec,
    Target,
    Tolerance,
    element_size,
)

VARIANTS = ("fold_gamma", "prologue_gamma", "rstd_prepass")
FLAGS = ("HAS_BIAS", "PROLOGUE_GAMMA", "RSTD_GIVEN", "IEEE", "UPCAST")  # the constexprs the autotuner does not pick
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

# ---------------------------------------------------------------------------------------------
# Tile configurations, per vendor
# ---------------------------------------------------------------------------------------------
# NVIDIA: the autotuner's candidates (BM, BN, BK, num_stages, num_warps), GROUP_M 8; kernels/NOTES.md.
CUDA_TILES = (
    (128, 256, 64, 3, 8),
    (128, 128, 64, 4, 8),
    (128, 128, 64, 3, 4),
    (64, 256, 64, 4, 8),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (64, 64, 128, 4, 4),
    (16, 64, 256, 4, 4),
    (16, 32, 256, 5, 4),
    (32, 64, 128, 5, 4),
    (16, 128, 128, 4, 4),
    (16, 32, 512, 4, 4),
    (16, 32, 256, 7, 4),
    (32, 32, 256, 5, 4),
)
CUDA_GROUP_M = 8
AUTOTUNE_KEY = ("M", "N", "K", "HAS_BIAS", "PROLOGUE_GAMMA", "RSTD_GIVEN")
# Ascend (triton-ascend): cube tiles (BM, BN, BK) in order of preference; the first whose unified-buffer
# estimate fits is used, BM capped by the rows there are. A kernel that mixes cube and vector work aligns
# every tail axis to 512 B (kernels/plan.py), so BN = 128 (fp32 accumulator rows of 512 B) and BK = 128
# waste nothing, and a (BM, 1) row statistic costs BM x 512 B: the 128x256x64 tile this project started
# with needs 256 KB by this estimate, 128-row tiles sit at the 192 KB limit; 64 rows leave half of it free.
ASCEND_TILES = ((64, 128, 128), (32, 128, 128), (16, 128, 128))
ASCEND_GROUP_M = 8
INTERPRETER_CONFIG = {"BM": 16, "BN": 32, "BK": 32, "GROUP_M": 4}
# Problems smaller than this (M*N*K) skip autotuning: one fixed tile is fine and tuning every small
# accuracy shape cost minutes on the H200 (kernels/NOTES.md).
AUTOTUNE_MIN_WORK = 1 << 28
SMALL_CUDA_CONFIG = {"BM": 64, "BN": 64, "BK": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
RSTD_TILE = {"nvidia": (4, 1024), "ascend": (4, 1024), "cpu": (4, 128)}  # (rows, BLOCK_K) of the prepass
# Hopper (sm_90), fold_gamma, fp16/bf16, M*N*K >= AUTOTUNE_MIN_WORK: a persistent GEMM that moves its tiles with
# the tensor memory accelerator (TMA) and scales by 1/rms in the epilogue, after a prepass that writes 1/rms
# (4 bytes a row). H200, kernels/NOTES.md: the GEMM alone equals cuBLAS (91.3 vs 91.6 us at [1024,8192]x4096);
# summing x^2 from the shared-memory A tiles inside it cost 45% (and was wrong at BN=256 on Triton 3.6), so
# the sum moves to the prepass: one row per program, the whole row in one load.
# (BM, BN, BK, num_stages, num_warps, GROUP_M); 4 stages of 128x256x64 do not fit in shared memory.
HOPPER_GEMM = (128, 256, 64, 3, 8, 8)
HOPPER_RSTD_MAX_BLOCK = 8192
# The prepass triggers its dependents at once and the GEMM (launched with PDL) waits for it only before its first
# epilogue, so the GEMM's main loop starts while the prepass drains (kernels/NOTES.md, "Ahead of the peers").
HOPPER_PDL = False
HOPPER_MIN_WORK = 1 << 23
# Decode (at most DECODE_MAX_M rows), NVIDIA, fold_gamma: the weight read is the whole cost, so K is split
# over SPLITS programs per BN columns to put a program on every SM; the last program of a column block adds
# the partial sums, scales and writes (one launch). H200 sweep (kernels/NOTES.md): (BN, BK, SPLITS, stages, warps).
DECODE_MAX_M = 16
DECODE_MIN_WEIGHTS = 1 << 20  # below this the weight read is not what a call waits for
DECODE_TILE = (128, 128, 2, 4, 4)


def _bm_cap(m: int) -> int:
    """Tiles much taller than M (decode shapes) are not worth trying."""
    return max(16, triton.next_power_of_2(m))


def cuda_candidates(m: int) -> tuple[tuple[int, int, int, int, int], ...]:
    """The CUDA tiles the autotuner tries for M rows: those no taller than ``_bm_cap(M)``, else the last four."""
    kept = tuple(t for t in CUDA_TILES if t[0] <= _bm_cap(m))
    return kept or CUDA_TILES[-4:]


def _prune(configs, named_args, **kwargs):
    """The autotuner's early prune: exactly the candidates of :func:`cuda_candidates`."""
    wanted = cuda_candidates(named_args["M"])
    return [c for c in configs if (c.kwargs["BM"], c.kwargs["BN"], c.kwargs["BK"], c.num_stages, c.num_warps) in wanted]


# ---------------------------------------------------------------------------------------------
# Triton kernels. _matmul_tile is one output tile; the plain kernel does one tile per program (NVIDIA,
# interpreter), the persistent kernel loops tiles over one program per AI core (Ascend).
# ---------------------------------------------------------------------------------------------
@triton.jit
def _round_to_bf16(v):
    """fp32 -> the nearest bf16 value, ties to even, returned as fp32 (so a later cast is exact).

    On a GPU ``v.to(tl.bfloat16)`` rounds to nearest even. Triton's CPU interpreter (3.9) truncates
    fp32 -> bf16 instead (its ``cast_impl`` passes no rounding mode), an error of up to one ulp with
    the sign of -v: measured on the interpreter, prologue_gamma's worst bf16 budget over 20 seeds went
    from 1.13 to 0.76 (shape 2x5x96) once x*gamma and the output were rounded here. Bit trick: add
    0x7FFF plus the lowest kept bit, then clear the 16 dropped bits (the carry rounds up into the
    exponent correctly, up to inf). NaN passes through unchanged; subnormals are not expected here (the
    interpreter's own cast flushes them).
    """
    bits = v.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(v != v, v, bits.to(tl.float32, bitcast=True))


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
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    group = GROUP_M * num_n
    first_m = (tile // group) * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (tile % group) % size_m
    pid_n = (tile % group) // size_m

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
                a = _round_to_bf16(a.to(tl.float32) * g[None, :])
            else:
                a = (a.to(tl.float32) * g[None, :]).to(a.dtype)
        if UPCAST:  # Triton's CPU interpreter multiplies bf16 tiles wrongly; fp32 products are exact
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        elif IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
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
        acc = _round_to_bf16(acc)
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
def _gemm_tile_ids(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    group = GROUP_M * num_pid_n
    first_m = (tile // group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % group) % size_m, (tile % group) // size_m


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
        pid_m, pid_n = _gemm_tile_ids(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([pid_m * BM, ki * BK])
            b = b_desc.load([pid_n * BN, ki * BK])
            acc = tl.dot(a, b.T, acc)
        tile_c += NUM_SMS
        pid_m, pid_n = _gemm_tile_ids(tile_c, num_pid_m, num_pid_n, GROUP_M)
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
    W_DESC (Hopper), else its pointer (rows of K contiguous elements)."""
    pid_n = tl.program_id(0)
    s = tl.program_id(1)
    rows = tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    kk = tl.arange(0, BK)
    k_per = tl.cdiv(tl.cdiv(K, BK), SPLITS) * BK
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    ss = tl.zeros((BM, BK), dtype=tl.float32)
    for k0 in range(s * k_per, min(s * k_per + k_per, K), BK):
        k_ok = (k0 + kk) < K
        a = tl.load(
            x_ptr + rows[:, None].to(tl.int64) * stride_xm + (k0 + kk)[None, :],
            mask=(rows < M)[:, None] & k_ok[None, :],
            other=0.0,
        )
        if W_DESC:
            b = w.load([pid_n * BN, k0])
        else:
            b = tl.load(
                w + cols[:, None].to(tl.int64) * K + (k0 + kk)[None, :],
                mask=(cols < N)[:, None] & k_ok[None, :],
                other=0.0,
            )
        af = a.to(tl.float32)
        ss += af * af
        if UPCAST:  # the interpreter multiplies bf16 tiles wrongly (see _matmul_tile); fp32 products are exact
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
        if UPCAST:
            total = _round_to_bf16(total)
        tl.store(
            y_ptr + rows[:, None].to(tl.int64) * N + cols[None, :],
            total.to(y_ptr.dtype.element_ty),
            mask=(rows < M)[:, None] & (cols < N)[None, :],
        )
        tl.atomic_xchg(count_ptr + pid_n, 0)


_AUTOTUNED: list[Any] = []


def autotuned_kernel() -> Any:
    """The CUDA autotuner over CUDA_TILES, built on first use: ``triton.autotune`` needs an active driver,
    and importing this module must not (the Ascend compile check imports it on a machine without one)."""
    if not _AUTOTUNED:
        configs = [
            triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP_M": CUDA_GROUP_M}, num_stages=s, num_warps=w)
            for bm, bn, bk, s, w in CUDA_TILES
        ]
        _AUTOTUNED.append(
            triton.autotune(configs=configs, key=list(AUTOTUNE_KEY), prune_configs_by={"early_config_prune": _prune})(
                _fused_rmsnorm_matmul_kernel
            )
        )
    return _AUTOTUNED[0]


# ---------------------------------------------------------------------------------------------
# Launch plans: pure functions of (M, N, K, dtype, variant, device description)
# ---------------------------------------------------------------------------------------------
def _matmul_footprint(
    bm: int, bn: int, bk: int, dtype: str, prologue: bool, rstd_given: bool, has_bias: bool
) -> Footprint:
    """Unified-buffer tiles of one program (cube operands live in L1/L0 and are not counted; the vector side
    needs every tail axis aligned to 512 B). K loop: the A tile (multi-buffered) with its fp32 copy for
    sum(x^2) and the row sums; with the gamma prologue also gamma (multi-buffered), A*gamma in fp32 and cast
    back. Epilogue: the fp32 accumulator, 1/rms as a (BM, 1) tile, the bias, the cast output."""
    loop = [load("a", (bm, bk), dtype)]
    if not rstd_given:
        loop += [work("a_f32", (bm, bk)), work("sumsq", (bm,))]
    if prologue:
        loop += [load("gamma", (bk,), dtype), work("a_gamma", (bm, bk)), work("a_gamma_cast", (bm, bk), dtype)]
    epilogue = [work("acc", (bm, bn)), work("rstd", (bm, 1))]
    if not rstd_given:
        epilogue.append(work("sumsq", (bm,)))
    if has_bias:
        epilogue.append(load("bias", (bn,), dtype))
    if dtype != "fp32":
        epilogue.append(work("y_out", (bm, bn), dtype))
    return Footprint((tuple(loop), tuple(epilogue)), cube_vector=True)


def _ascend_matmul_tile(m: int, dtype: str, prologue: bool, rstd_given: bool, has_bias: bool) -> tuple[int, ...]:
    for bm, bn, bk in ASCEND_TILES:
        bm = min(bm, _bm_cap(m))
        if _matmul_footprint(bm, bn, bk, dtype, prologue, rstd_given, has_bias).fits():
            return bm, bn, bk
    raise ValueError(f"fused_rmsnorm_matmul: no Ascend tile fits the unified buffer for {dtype}")


def _hopper_plan(m: int, n: int, k: int, dtype: str, has_bias: bool, device: DeviceInfo) -> tuple[Step, ...]:
    """The 1/rms prepass (one row per program) and the persistent TMA GEMM that scales by it."""
    ints = int_type(max(m * k, n * k, m * n))
    block_k = min(triton.next_power_of_2(k), HOPPER_RSTD_MAX_BLOCK)
    pdl = HOPPER_PDL and gdc_wait is not None
    rstd = Launch(
        _rstd_pdl_kernel if pdl else _rstd_kernel,
        (m,),
        {"ROWS": 1, "BLOCK_K": block_k},
        {
            "x_ptr": pointer(dtype),
            "r_ptr": "*fp32",
            "M": ints,
            "K": ints,
            "stride_xm": ints,
            "stride_xk": ints,
            "eps": "fp32",
        },
        8 if block_k >= 8192 else 4,
    )
    bm, bn, bk, stages, warps, group_m = HOPPER_GEMM
    programs = min(device.compute_units, triton.cdiv(m, bm) * triton.cdiv(n, bn))
    sig = {
        "a_desc": descriptor(dtype, (bm, bk)),
        "b_desc": descriptor(dtype, (bn, bk)),
        "c_desc": descriptor(dtype, (bm, bn)),
        "r_ptr": "*fp32",
        "bias_ptr": pointer(dtype),
        "M": ints,
        "N": ints,
        "K": ints,
    }
    gemm = Launch(
        _rms_gemm_tma_kernel,
        (programs,),
        {"HAS_BIAS": has_bias, "BM": bm, "BN": bn, "BK": bk, "GROUP_M": group_m, "NUM_SMS": programs, "PDL": pdl},
        sig,
        warps,
        stages,
        launch_pdl=pdl,
    )
    return rstd, gemm


def _decode_plan(
    m: int, n: int, k: int, dtype: str, has_bias: bool, device: DeviceInfo, w_desc: bool
) -> tuple[Step, ...]:
    bn, bk, splits, stages, warps = DECODE_TILE if device.vendor == "nvidia" else (32, 32, 2, None, None)
    ints = int_type(max(m * k, n * k, m * n))
    sig = {
        "x_ptr": pointer(dtype),
        "w": descriptor(dtype, (bn, bk)) if w_desc else pointer(dtype),
        "part_ptr": "*fp32",
        "ss_ptr": "*fp32",
        "count_ptr": "*i32",
        "bias_ptr": pointer(dtype),
        "y_ptr": pointer(dtype),
        "M": ints,
        "N": ints,
        "K": ints,
        "stride_xm": ints,
        "eps": "fp32",
    }
    constexprs = {
        "HAS_BIAS": has_bias,
        "W_DESC": w_desc,
        "UPCAST": device.interpreter and dtype == "bf16",
        "SPLITS": splits,
        "BM": _bm_cap(m),
        "BN": bn,
        "BK": bk,
    }
    return (Launch(_decode_splitk_kernel, (triton.cdiv(n, bn), splits), constexprs, sig, warps, stages),)


PATHS = ("decode", "hopper", "gemm")  # what plan_path returns; the launcher starts each its own way


def plan_path(m: int, n: int, k: int, dtype: str, variant: str, device: DeviceInfo, dense: bool = True) -> str:
    """Which launches serve the problem (the one place that decides; :func:`plan_forward` builds them):
    ``decode`` (split-K, at most DECODE_MAX_M rows of a large weight), ``hopper`` (1/rms prepass + TMA GEMM)
    or ``gemm`` (the pointer GEMM, after the prepass for rstd_prepass)."""
    kind = device.vendor
    decode_size = (kind == "nvidia" and n * k >= DECODE_MIN_WEIGHTS) or (kind == "cpu" and n >= 32)
    if variant == "fold_gamma" and dtype in ("fp16", "bf16") and m <= DECODE_MAX_M and decode_size:
        return "decode"
    if (
        variant == "fold_gamma"
        and dtype in ("fp16", "bf16")
        and kind == "nvidia"
        and dense
        and (device.capability or 0) >= 90
        and m > DECODE_MAX_M
        and m * n * k >= HOPPER_MIN_WORK
        and not (device.interpreter and dtype == "bf16")
    ):  # the interpreter's bf16 dots are wrong
        return "hopper"
    return "gemm"


def plan_forward(
    m: int, n: int, k: int, dtype: str, variant: str, has_bias: bool, device: DeviceInfo, dense: bool = True
) -> tuple[Step, ...]:
    """The launches of ``fused_rmsnorm_matmul_forward`` for x ``[m, k]``, weight ``[n, k]`` (none when
    m or n is 0): the rstd prepass for that variant, then the GEMM (autotuned on NVIDIA for large problems).

    fold_gamma in fp16/bf16 on NVIDIA takes two special paths: decode shapes (at most DECODE_MAX_M rows of a
    large weight) split K over programs; on Hopper, problems of at least 2^23 multiply-adds use the
    persistent TMA GEMM after a 1/rms prepass when ``dense`` (x's rows contiguous, every row and the
    weight's 16-byte aligned, as TMA requires). The interpreter takes the decode path too, on small shapes,
    so the CPU tests run it."""
    if variant not in VARIANTS:
        raise ValueError(f"fused_rmsnorm_matmul: variant must be one of {VARIANTS}, got {variant!r}")
    if m == 0 or n == 0:
        return ()
    kind = device.vendor
    path = plan_path(m, n, k, dtype, variant, device, dense)
    if path == "decode":
        return _decode_plan(m, n, k, dtype, has_bias, device, dense and (device.capability or 0) >= 90)
    if path == "hopper":
        return _hopper_plan(m, n, k, dtype, has_bias, device)
    prologue, rstd_given = variant == "prologue_gamma", variant == "rstd_prepass"
    ints = int_type(max(m * k, n * k, m * n))
    steps: list[Step] = []
    if rstd_given:
        rows, block_k = RSTD_TILE[kind]
        tiles = triton.cdiv(m, rows)
        fn, grid = (
            (_rstd_persistent_kernel, (min(tiles, device.compute_units),))
            if kind == "ascend"
            else (_rstd_kernel, (tiles,))
        )
        footprint = Footprint(
            (
                (
                    load("x", (rows, block_k), dtype),
                    work("x_f32", (rows, block_k)),
                    work("acc", (rows, block_k)),
                    work("r", (rows, 1)),
                ),
            )
        )
        sig = {
            "x_ptr": pointer(dtype),
            "r_ptr": "*fp32",
            "M": ints,
            "K": ints,
            "stride_xm": ints,
            "stride_xk": ints,
            "eps": "fp32",
        }
        steps.append(Launch(fn, grid, {"ROWS": rows, "BLOCK_K": block_k}, sig, footprint=footprint))
    sig = {
        "x_ptr": pointer(dtype),
        "w_ptr": pointer(dtype),
        "g_ptr": pointer(dtype),
        "b_ptr": pointer(dtype),
        "r_ptr": "*fp32" if rstd_given else pointer(dtype),
        "y_ptr": pointer(dtype),
        "M": ints,
        "N": ints,
        "K": ints,
        "stride_xm": ints,
        "stride_xk": ints,
        "stride_wn": ints,
        "stride_wk": ints,
        "stride_ym": ints,
        "eps": "fp32",
    }
    flags = {
        "HAS_BIAS": has_bias,
        "PROLOGUE_GAMMA": prologue,
        "RSTD_GIVEN": rstd_given,
        "IEEE": dtype == "fp32",
        "UPCAST": device.interpreter and dtype == "bf16",
    }

    def gemm(
        fn: Any,
        bm: int,
        bn: int,
        bk: int,
        group_m: int,
        warps: int | None = None,
        stages: int | None = None,
        programs: int | None = None,
    ) -> Launch:
        tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
        grid = (min(tiles, programs),) if programs else (tiles,)
        footprint = _matmul_footprint(bm, bn, bk, dtype, prologue, rstd_given, has_bias)
        return Launch(
            fn, grid, {**flags, "BM": bm, "BN": bn, "BK": bk, "GROUP_M": group_m}, sig, warps, stages, footprint
        )

    if kind == "nvidia" and m * n * k >= AUTOTUNE_MIN_WORK:
        candidates = tuple(
            gemm(_fused_rmsnorm_matmul_kernel, bm, bn, bk, CUDA_GROUP_M, w, s)
            for bm, bn, bk, s, w in cuda_candidates(m)
        )
        steps.append(Autotuned(candidates, AUTOTUNE_KEY))
    elif kind == "nvidia":
        c = SMALL_CUDA_CONFIG
        steps.append(
            gemm(_fused_rmsnorm_matmul_kernel, c["BM"], c["BN"], c["BK"], c["GROUP_M"], c["num_warps"], c["num_stages"])
        )
    elif kind == "ascend":
        bm, bn, bk = _ascend_matmul_tile(m, dtype, prologue, rstd_given, has_bias)
        steps.append(
            gemm(_fused_rmsnorm_matmul_persistent_kernel, bm, bn, bk, ASCEND_GROUP_M, programs=device.cube_units)
        )
    else:
        c = INTERPRETER_CONFIG
        steps.append(gemm(_fused_rmsnorm_matmul_kernel, c["BM"], c["BN"], c["BK"], c["GROUP_M"]))
    return tuple(steps)


@functools.lru_cache(maxsize=512)
def _forward_plan(
    m: int, n: int, k: int, dtype: str, variant: str, has_bias: bool, device: DeviceInfo, dense: bool
) -> tuple[str, tuple[Step, ...]]:
    """(path, launches), cached per problem."""
    return (
        plan_path(m, n, k, dtype, variant, device, dense),
        plan_forward(m, n, k, dtype, variant, has_bias, device, dense),
    )


# ---------------------------------------------------------------------------------------------
# gamma folded into the weight, cached per weight version
# ---------------------------------------------------------------------------------------------
class FoldedWeightCache:
    """W diag(gamma) per (weight, gamma) object and version; in-place updates bump the version.

    Beside each folded weight: its TMA descriptors by block shape (:meth:`descriptors`), built on first
    use and dropped with the entry, so a decode loop builds none per call."""

    def __init__(self, capacity: int = 16) -> None:
        self.capacity = capacity
        self._entries: dict[tuple[int, int], tuple] = {}
        self._descriptors: dict[int, tuple[torch.Tensor, dict]] = {}  # id(folded) -> (folded, {block: desc})

    def descriptors(self, folded: torch.Tensor) -> dict:
        """The block-shape -> descriptor dict of a weight this cache returned (a fresh, uncached dict for any
        other tensor: the prologue variant's raw weight)."""
        held = self._descriptors.get(id(folded))
        return held[1] if held is not None and held[0] is folded else {}

    def get(self, weight: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
        key = (id(weight), id(gamma))
        hit = self._entries.get(key)
        if hit is not None:
            w_ref, g_ref, w_ver, g_ver, folded = hit
            if w_ref() is weight and g_ref() is gamma and w_ver == weight._version and g_ver == gamma._version:
                return folded
        with torch.no_grad():
            folded = (weight.float() * gamma.float()[None, :]).to(weight.dtype).contiguous()
        if hit is not None:
            self._descriptors.pop(id(hit[4]), None)
        if len(self._entries) >= self.capacity:
            old = self._entries.pop(next(iter(self._entries)))
            self._descriptors.pop(id(old[4]), None)
        self._entries[key] = (weakref.ref(weight), weakref.ref(gamma), weight._version, gamma._version, folded)
        self._descriptors[id(folded)] = (folded, {})
        return folded

    def clear(self) -> None:
        self._entries.clear()
        self._descriptors.clear()


FOLDED = FoldedWeightCache()


# ---------------------------------------------------------------------------------------------
# Launcher
# ---------------------------------------------------------------------------------------------
def _check(x: torch.Tensor, weight: torch.Tensor, gamma: torch.Tensor, bias: torch.Tensor | None) -> None:
    for name, t in (("x", x), ("weight", weight), ("gamma", gamma)) + ((("bias", bias),) if bias is not None else ()):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"fused_rmsnorm_matmul: {name} must be a tensor")
        if t.dtype != x.dtype:
            raise TypeError(f"fused_rmsnorm_matmul: {name} dtype {t.dtype} != x dtype {x.dtype}")
        if t.device != x.device:
            raise ValueError(f"fused_rmsnorm_matmul: {name} on {t.device}, x on {x.device}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"fused_rmsnorm_matmul: dtype {x.dtype} is not supported (fp16, bf16, fp32)")
    if x.dim() < 1 or weight.dim() != 2 or gamma.dim() != 1:
        raise ValueError(
            f"fused_rmsnorm_matmul: expected x [..., K], weight [N, K], gamma [K]; got "
            f"{tuple(x.shape)}, {tuple(weight.shape)}, {tuple(gamma.shape)}"
        )
    k = x.shape[-1]
    if weight.shape[1] != k or gamma.shape[0] != k:
        raise ValueError(
            f"fused_rmsnorm_matmul: K mismatch: x has K={k}, weight {tuple(weight.shape)}, gamma {tuple(gamma.shape)}"
        )
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"fused_rmsnorm_matmul: bias shape {tuple(bias.shape)} != [{weight.shape[0]}]")


def _dense(x2: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> bool:
    """What TMA descriptors need: unit inner strides, 16-byte aligned rows and bases."""
    size = x2.element_size()
    return (
        x2.stride(1) == 1
        and w.stride(1) == 1
        and (x2.stride(0) * size) % 16 == 0
        and (w.stride(0) * size) % 16 == 0
        and (y.stride(0) * size) % 16 == 0
        and all(t.data_ptr() % 16 == 0 for t in (x2, w, y))
    )


def _descriptor(t: torch.Tensor, block: tuple[int, int]) -> Any:
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor.from_tensor(t, list(block))


def _weight_descriptor(w: torch.Tensor, descs: dict, block: tuple[int, int]) -> Any:
    """W's descriptor from the folded weight's cache (built once per weight version and block shape)."""
    desc = descs.get(block)
    if desc is None:
        desc = descs[block] = _descriptor(w, block)
    return desc


def _launch_hopper(
    steps: tuple[Step, ...],
    x2: torch.Tensor,
    w: torch.Tensor,
    descs: dict,
    bias: torch.Tensor | None,
    y: torch.Tensor,
    eps: float,
) -> None:
    prepass, gemm = steps
    m, k = x2.shape
    rstd = new_output((m,), torch.float32, x2.device)
    launch(prepass, x2, rstd, m, k, x2.stride(0), x2.stride(1), eps)
    c = gemm.constexprs
    launch(
        gemm,
        _descriptor(x2, (c["BM"], c["BK"])),
        _weight_descriptor(w, descs, (c["BN"], c["BK"])),
        _descriptor(y, (c["BM"], c["BN"])),
        rstd,
        bias if bias is not None else y,
        m,
        w.shape[0],
        k,
    )


_DECODE_SCRATCH: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
_DECODE_VIEWS: dict[tuple, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def _decode_scratch(device: torch.device, floats: int, blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 partial sums, a zeroed int32 counter per column block that the last program resets), kept per
    device: two decode calls running at once on different streams of one device would share them."""
    held = _DECODE_SCRATCH.get(device)
    if held is None or held[0].numel() < floats or held[1].numel() < blocks:
        held = _DECODE_SCRATCH[device] = (
            torch.empty(max(floats, 1 << 20), dtype=torch.float32, device=device),
            torch.zeros(max(blocks, 1024), dtype=torch.int32, device=device),
        )
        _DECODE_VIEWS.clear()  # views of the old buffers must not outlive them
    return held


def _decode_views(
    device: torch.device, part_floats: int, sum_floats: int, blocks: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(partials, row sums, counters): views of the device's scratch, cut once per launch shape."""
    key = (device, part_floats, sum_floats, blocks)
    views = _DECODE_VIEWS.get(key)
    if views is None:
        scratch, counts = _decode_scratch(device, part_floats + sum_floats, blocks)
        views = _DECODE_VIEWS[key] = (scratch[:part_floats], scratch[part_floats : part_floats + sum_floats], counts)
    return views


def _launch_decode(
    step: Launch, x2: torch.Tensor, w: torch.Tensor, descs: dict, bias: torch.Tensor | None, y: torch.Tensor, eps: float
) -> None:
    m, k = x2.shape
    n = w.shape[0]
    c = step.constexprs
    blocks, splits, bm = step.grid[0], c["SPLITS"], c["BM"]
    parts, sums, counts = _decode_views(x2.device, blocks * splits * bm * c["BN"], blocks * splits * bm, blocks)
    w_arg = _weight_descriptor(w, descs, (c["BN"], c["BK"])) if c["W_DESC"] else w
    launch(step, x2, w_arg, parts, sums, counts, bias if bias is not None else y, y, m, n, k, x2.stride(0), eps)


def fused_rmsnorm_matmul_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    bias: torch.Tensor | None = None,
    eps: float = 1e-6,
    variant: str = "fold_gamma",
) -> torch.Tensor:
    """Forward only (what the collector times)."""
    _check(x, weight, gamma, bias)
    if variant not in VARIANTS:
        raise ValueError(f"fused_rmsnorm_matmul: variant must be one of {VARIANTS}, got {variant!r}")
    k = x.shape[-1]
    n = weight.shape[0]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    y = new_output((m, n), x.dtype, x.device)
    if m == 0 or n == 0:
        return y.reshape(*x.shape[:-1], n)
    prologue = variant == "prologue_gamma"
    w = weight if prologue else FOLDED.get(weight, gamma)
    path, steps = _forward_plan(
        m, n, k, DTYPE_NAMES[x.dtype], variant, bias is not None, describe(x.device), _dense(x2, w, y)
    )
    if path == "hopper":
        _launch_hopper(steps, x2, w, FOLDED.descriptors(w), bias, y, float(eps))
        return y.reshape(*x.shape[:-1], n)
    if path == "decode":
        _launch_decode(steps[0], x2, w, FOLDED.descriptors(w), bias, y, float(eps))
        return y.reshape(*x.shape[:-1], n)
    rstd = y
    if variant == "rstd_prepass":
        rstd = new_output((m,), torch.float32, x.device)
        launch(steps[0], x2, rstd, m, k, x2.stride(0), x2.stride(1), float(eps))
    args = (
        x2,
        w,
        gamma,
        bias if bias is not None else y,
        rstd,
        y,
        m,
        n,
        k,
        x2.stride(0),
        x2.stride(1),
        w.stride(0),
        w.stride(1),
        y.stride(0),
        float(eps),
    )
    gemm = steps[-1]
    if isinstance(gemm, Autotuned):
        flags = {name: gemm.candidates[0].constexprs[name] for name in FLAGS}
        grid = lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)
        launch_autotuned(gemm, autotuned_kernel(), grid, *args, **flags)
    else:
        launch(gemm, *args)
    return y.reshape(*x.shape[:-1], n)


def rmsnorm_linear_reference(
    x: torch.Tensor, weight: torch.Tensor, gamma: torch.Tensor, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """The same function in PyTorch, in x's precision promoted to fp32 where it matters (for autograd)."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    y = torch.nn.functional.linear(
        xf * rstd * gamma.float(), weight.float(), bias.float() if bias is not None else None
    )
    return y


class FusedRMSNormMatmulFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, gamma, bias, eps, variant):
        ctx.save_for_backward(x, weight, gamma, bias)
        ctx.eps = eps
        return fused_rmsnorm_matmul_forward(x, weight, gamma, bias, eps, variant)

    @staticmethod
    def backward(ctx, dy):
        x, weight, gamma, bias = ctx.saved_tensors
        inputs = [
            t.detach().requires_grad_(need) if t is not None else None
            for t, need in zip((x, weight, gamma, bias), ctx.needs_input_grad[:4])
        ]
        with torch.enable_grad():
            y = rmsnorm_linear_reference(*inputs, ctx.eps)
            wanted = [t for t in inputs if t is not None and t.requires_grad]
            grads = iter(torch.autograd.grad(y, wanted, dy.float()))
        out = [next(grads).to(t.dtype) if t is not None and t.requires_grad else None for t in inputs]
        return (*out, None, None)


def fused_rmsnorm_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    bias: torch.Tensor | None = None,
    eps: float = 1e-6,
    variant: str = "fold_gamma",
) -> torch.Tensor:
    """(x / sqrt(mean(x^2) + eps) * gamma) @ weight^T + bias, without writing the normalised x."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, gamma, bias)):
        return FusedRMSNormMatmulFunction.apply(x, weight, gamma, bias, eps, variant)
    return fused_rmsnorm_matmul_forward(x, weight, gamma, bias, eps, variant)


class FusedRMSLinear(torch.nn.Module):
    """RMSNorm(dim) followed by Linear(dim, hidden), fused: parameters gamma, weight and bias."""

    def __init__(self, dim: int, hidden: int, eps: float = 1e-6, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.eps = eps
        self.gamma = torch.nn.Parameter(torch.ones(dim, **factory))
        self.weight = torch.nn.Parameter(torch.empty(hidden, dim, **factory))
        self.bias = torch.nn.Parameter(torch.zeros(hidden, **factory)) if bias else None
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_rmsnorm_matmul(x, self.weight, self.gamma, self.bias, self.eps)

    def extra_repr(self) -> str:
        hidden, dim = self.weight.shape
        return f"dim={dim}, hidden={hidden}, eps={self.eps}, bias={self.bias is not None}"


# ---------------------------------------------------------------------------------------------
# Spec
# ---------------------------------------------------------------------------------------------
NAME = "fused_rmsnorm_matmul"
RTOL = {"fp32": 1e-4, "fp16": 2e-3, "bf16": 1.6e-2}  # >= 4 x the output rounding 2^-24, 2^-11, 2^-8
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}
OPERAND_SIGMAS = 4.0  # lambda below
OPERAND_NORM = 2.0  # S below
ACCUMULATION_ATOL = 1e-5  # fp32 accumulation over K = 64, grown with sqrt(K)


def tolerance(dtype: str, k: int) -> Tolerance:
    """Elementwise tolerance of y = r (x * gamma) . w_n + b from the error model of the kernel.

    With t_k = r x_k gamma_k w_nk the exact terms of one output:

    1. output rounding to ``dtype``: |e| <= u_out |y| (round to nearest), covered by ``rtol`` (RTOL,
       at least 4 u_out);
    2. one operand rounding: gamma is applied to an operand of the dot before it enters the tensor
       cores in ``dtype`` (prologue_gamma rounds x * gamma, fold_gamma and rstd_prepass round
       W * gamma, once per weight), so the dot sums t_k (1 + d_k), |d_k| <= u = 2^-p, d_k independent
       with mean 0 and sd <= u / sqrt(3) (round to nearest: an error uniform in half an ulp). The error
       sum_k t_k d_k is near normal with sd <= u / sqrt(3) * ||t||_2. PyTorch's unfused rms_norm ->
       linear rounds its normalised operand the same once; fp32 operands make this term vanish;
    3. fp32 accumulation of K products: ACCUMULATION_ATOL * sqrt(K / 64) (random-walk growth).

    ||t||_2 does not grow with K: RMSNorm makes sum_k (r x_k)^2 = K and the spec draws w ~ N(0, 1/K),
    so ||t||_2^2 ~ mean of gamma^2 (1.58 for gamma ~ U[1, 1.5]): over 20 seeds of every accuracy case
    its median is 1.24 and its maximum 2.1 (largest at K = 64-128), hence S = OPERAND_NORM = 2.
    atol = lambda S u / sqrt(3) + term 3, lambda = OPERAND_SIGMAS = 4: bf16 0.0180, fp16 0.00226.

    The first version scaled atol with sqrt(K / 64) from 8e-3 (bf16) and 1e-3 (fp16): right for term 3,
    but term 2, the one that matters in half precision, is flat in K. At K = 64 it sat at the noise of
    any implementation with one operand rounding (PyTorch's unfused rms_norm -> linear reached budget
    0.78 over 20 seeds on the CPU, fold_gamma 0.91, rstd_prepass fp16 1.09), at K = 520 above it.
    """
    operand = OPERAND_SIGMAS * OPERAND_NORM * UNIT_ROUNDOFF[dtype] / math.sqrt(3)
    return Tolerance(RTOL[dtype], operand + ACCUMULATION_ATOL * math.sqrt(max(k, 64) / 64))


ACCURACY_POINTS = (  # (x shape, N, bias, layout)
    ((1, 64), 16, True, "contiguous"),
    ((7, 100), 48, True, "contiguous"),
    ((33, 257), 70, False, "contiguous"),
    ((2, 5, 96), 40, True, "contiguous"),
    ((40, 128), 64, True, "transposed"),
    ((3, 520), 33, True, "contiguous"),
    ((5, 1024), 1040, True, "contiguous"),  # decode (split K): a wide weight, N not a multiple of its tile
    ((130, 256), 264, True, "contiguous"),  # the Hopper path (TMA): M and N not multiples of its tiles
)
PERF_POINTS = (
    ((1024, 8192), 4096, 1.05),
    ((4096, 4096), 4096, 1.10),
    ((16, 8192), 8192, 1.10),
    ((4, 512, 4096), 4096, None),
    ((8192, 4096), 14336, None),
)
LLAMA_MLP = (8192, 4096)  # a Llama-class MLP up-projection (docs/kernels.md): recorded for the shipped variant only


def _accuracy_cases() -> list[Case]:
    cases = []
    for variant in VARIANTS:
        for dtype in ("fp32", "fp16", "bf16"):
            for shape, n, bias, layout in ACCURACY_POINTS:
                for direction in ("fwd", "bwd"):
                    if direction == "bwd" and variant != "fold_gamma":
                        continue  # one backward serves every variant
                    cases.append(
                        Case.make(
                            NAME,
                            variant,
                            dtype,
                            tolerance(dtype, shape[-1]),
                            shape=shape,
                            n=n,
                            bias=bias,
                            layout=layout,
                            direction=direction,
                        )
                    )
    return cases


TARGETS_DOC = "docs/kernels.md, RMSNorm+MatMul targets (H200)"


def _perf_cases() -> list[Case]:
    cases = []
    for variant in VARIANTS:
        for dtype in ("fp16", "bf16"):
            for shape, n, ratio in PERF_POINTS:
                if shape == LLAMA_MLP and variant != "fold_gamma":
                    continue  # 1.4 ms GEMMs autotuned per variant would cost the run minutes for no decision
                target = None
                if variant == "fold_gamma" and ratio is not None:
                    big = shape == (1024, 8192)
                    target = Target(
                        max_ratio_to=("cublas_linear", ratio),
                        min_speedup_vs_eager=2 if big else None,
                        min_speedup_vs_compile=1.0 if big else None,
                        source=TARGETS_DOC,
                    )
                cases.append(
                    Case.make(
                        NAME,
                        variant,
                        dtype,
                        tolerance(dtype, shape[-1]),
                        target,
                        trials=1,
                        shape=shape,
                        n=n,
                        bias=False,
                        layout="contiguous",
                        direction="fwd",
                    )
                )
    return cases


def _make_inputs(case: Case, device: torch.device, seed: int) -> dict:
    p = case.p
    shape, n = tuple(p["shape"]), p["n"]
    k = shape[-1]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dtype = case.torch_dtype
    x = torch.randn(shape, generator=gen) * 2.0
    w = torch.randn(n, k, generator=gen) / math.sqrt(k)
    g = 1.0 + 0.5 * torch.rand(k, generator=gen)
    b = torch.randn(n, generator=gen) if p["bias"] else None
    x = x.to(dtype).to(device)
    if p["layout"] == "transposed":
        x = x.t().contiguous().t()
    inputs = {
        "x": x,
        "weight": w.to(dtype).to(device),
        "gamma": g.to(dtype).to(device),
        "bias": b.to(dtype).to(device) if b is not None else None,
        "eps": 1e-6,
        "variant": case.variant,
    }
    if p["direction"] == "bwd":
        inputs["dy"] = torch.randn(*shape[:-1], n, generator=gen).to(dtype).to(device)
    return inputs


def _run(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    x, w, g, b = inputs["x"], inputs["weight"], inputs["gamma"], inputs["bias"]
    if case.p["direction"] == "fwd":
        return (fused_rmsnorm_matmul(x, w, g, b, inputs["eps"], case.variant),)
    leaves = [t.detach().requires_grad_() if t is not None else None for t in (x, w, g, b)]
    y = fused_rmsnorm_matmul(*leaves, inputs["eps"], case.variant)
    wanted = [t for t in leaves if t is not None]
    return tuple(torch.autograd.grad(y, wanted, inputs["dy"]))


def _reference(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    leaves = [
        t.detach().cpu().double().requires_grad_() if t is not None else None
        for t in (inputs["x"], inputs["weight"], inputs["gamma"], inputs["bias"])
    ]
    x, w, g, b = leaves
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + inputs["eps"])
    y = torch.nn.functional.linear(x * rstd * g, w, b)
    if case.p["direction"] == "fwd":
        return (y.detach(),)
    wanted = [t for t in leaves if t is not None]
    return tuple(torch.autograd.grad(y, wanted, inputs["dy"].cpu().double()))


def eager_rmsnorm_linear(
    x: torch.Tensor, weight: torch.Tensor, gamma: torch.Tensor, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """What a model does unfused: RMSNorm in PyTorch ops, then a linear layer."""
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * gamma
    return torch.nn.functional.linear(normed, weight, bias)


def _implementations(case: Case, inputs: dict) -> dict:
    x, w, g, b, eps = inputs["x"], inputs["weight"], inputs["gamma"], inputs["bias"], inputs["eps"]
    compiled = torch.compile(eager_rmsnorm_linear, dynamic=False)
    k = x.shape[-1]
    impls = {
        KERNEL_IMPL: lambda: fused_rmsnorm_matmul_forward(x, w, g, b, eps, case.variant),
        EAGER_IMPL: lambda: eager_rmsnorm_linear(x, w, g, b, eps),
        "torch_rms_norm": lambda: torch.nn.functional.linear(torch.nn.functional.rms_norm(x, (k,), g, eps), w, b),
        COMPILE_IMPL: lambda: compiled(x, w, g, b, eps),
        "cublas_linear": lambda: torch.nn.functional.linear(x, w, b),
    }
    liger = liger_rms_norm(x.device)
    if liger is not None:  # Liger-Kernel's RMSNorm (its default Llama casting), then cuBLAS
        impls[LIGER_IMPL] = lambda: torch.nn.functional.linear(liger(x, g, eps, in_place=False), w, b)
    gems = flaggems(x.device)
    if gems is not None:
        impls[FLAGGEMS_IMPL] = lambda: torch.nn.functional.linear(gems.rms_norm(x, [k], g, eps), w, b)
    return impls


def _mnk(case: Case) -> tuple[int, int, int]:
    shape = case.p["shape"]
    return math.prod(shape[:-1]), case.p["n"], shape[-1]


def _bytes(case: Case) -> int:
    m, n, k = _mnk(case)
    size = element_size(case.dtype)
    return (m * k + n * k + m * n + k + (n if case.p["bias"] else 0)) * size


def _flops(case: Case) -> int:
    m, n, k = _mnk(case)
    return 2 * m * n * k + 3 * m * k


def _launch_plans(case: Case, device: DeviceInfo) -> tuple[Step, ...]:
    """Every launch that running ``case`` makes on ``device`` (the backward is PyTorch's). Fresh allocations
    are 16-byte aligned, so a case's rows suit TMA when its layout is contiguous and its rows are whole
    multiples of 16 bytes."""
    m, n, k = _mnk(case)
    size = element_size(case.dtype)
    dense = case.p["layout"] == "contiguous" and (k * size) % 16 == 0 and (n * size) % 16 == 0
    return plan_forward(m, n, k, case.dtype, case.variant, bool(case.p["bias"]), device, dense)


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
    # The kernel that does the work on each path: the fused one, Hopper's TMA GEMM (after its 1/rms prepass), decode's
    # split-K kernel (plan_path); tests/test_launch_plans.py checks this names a launch of every perf case.
    profile_kernel=lambda case: "_fused_rmsnorm_matmul|_rms_gemm_tma_kernel|_decode_splitk_kernel",
    launch_plans=_launch_plans,
    bound="compute",
    variants=VARIANTS,
    public=("fused_rmsnorm_matmul", "FusedRMSLinear"),
    doc=__doc__ or "",
)
