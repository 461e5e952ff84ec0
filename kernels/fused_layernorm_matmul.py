r"""Fused LayerNorm + MatMul with no intermediate write-back.

``fused_layernorm_matmul(x, weight, gamma, beta=None, bias=None, eps=1e-5)``, x ``[..., K]``, weight
``[N, K]``, gamma and beta ``[K]``, bias ``[N]``:

    y = ((x - mu) * r * gamma + beta) @ weight^T + bias,   mu = mean_k x_k,  r = 1/sqrt(var_k x_k + eps)

(the biased variance, as ``torch.nn.LayerNorm``). The normalisation is a per-row shift and scale, so
with W' = W diag(gamma) and s = W' 1 (the row sums of W'):

    (x_hat * gamma + beta) W^T + b = r (x - mu) W'^T + (beta W^T + b) = r (x W'^T - mu s^T) + c.

``fold_gamma``: a prepass writes mu and r per row (8 bytes a row); one GEMM over the raw x then applies
y = r (acc - mu s) + c in its epilogue. W', s and c = beta W^T + b are computed once per weight version
(cached, recomputed when weight, gamma, beta or bias change, in place too); s is summed from W' as
rounded, so the correction cancels exactly what the GEMM multiplied. The epilogue subtracts two large
numbers when |mu| >> sigma (acc ~ mu s): fp32 keeps that cancellation at 2^-24 (|mu|/sigma) relative,
the third term of :func:`tolerance`. Measured (CPU interpreter, float64 reference, |mu|/sigma = 4): fp32
budgets 0.017-0.051 for fold_gamma against 0.004-0.017 centred (the predicted sqrt(17) = 4x), fp16/bf16
0.21-0.44 either way (the operand rounding dominates): well inside the budget, so fold_gamma is the default.
``center_prologue`` normalises each A tile in the prologue instead (a = (x - mu) r gamma, rounded to the
operand dtype), the way an unfused LayerNorm rounds its output: no cancellation, A through registers.
Sums in fp32. Backward is unfused (PyTorch).

Launches come from :func:`plan_forward` as a tagged :class:`Plan`: the stats prepass, then the GEMM
(autotuned tiles on NVIDIA, one program per AI core on Ascend; on Hopper the persistent TMA GEMM; at
decode shapes K split over programs), with the tile tables of ``kernels/fused_rmsnorm_matmul.py`` (the
same GEMM, tuned on the H200: kernels/NOTES.md).
"""

from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from kernels.device import describe
from kernels.fused_rmsnorm_matmul import (
    ASCEND_GROUP_M,
    ASCEND_TILES,
    AUTOTUNE_MIN_WORK,
    CUDA_GROUP_M,
    CUDA_TILES,
    DECODE_MAX_M,
    DECODE_MIN_WEIGHTS,
    DECODE_TILE,
    HOPPER_GEMM,
    HOPPER_MIN_WORK,
    HOPPER_RSTD_MAX_BLOCK,
    INTERPRETER_CONFIG,
    RSTD_TILE,
    SMALL_CUDA_CONFIG,
    _bm_cap,
    _dense,
    _descriptor,
    _gemm_tile_ids,
    _round_to_bf16,
    cuda_candidates,
)
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
    KERNEL_IMPL,
    Case,
    KernelSpec,
    Target,
    Tolerance,
    element_size,
)

VARIANTS = ("fold_gamma", "center_prologue")
FLAGS = ("HAS_C", "CENTER", "IEEE", "UPCAST")  # the constexprs the autotuner does not pick
AUTOTUNE_KEY = ("M", "N", "K", "HAS_C", "CENTER")
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
CUDA_BLOCKS = ("tiles", "hopper", "decode")  # the paths a plan can take (Plan.path)


# ---------------------------------------------------------------------------------------------
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
def _ln_epilogue(acc, mean, rstd, s_ptr, c_ptr, offs_n, n_ok, HAS_C: tl.constexpr, CENTER: tl.constexpr):
    """y = r (acc - mu s) + c (fold_gamma), or acc + c when the prologue already centred and scaled A."""
    if not CENTER:
        s = tl.load(s_ptr + offs_n, mask=n_ok, other=0.0)
        acc = (acc - mean[:, None] * s[None, :]) * rstd[:, None]
    if HAS_C:
        acc += tl.load(c_ptr + offs_n, mask=n_ok, other=0.0)[None, :]
    return acc


@triton.jit
def _ln_matmul_tile(
    x_ptr,
    w_ptr,
    g_ptr,
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
    CENTER: tl.constexpr,
    IEEE: tl.constexpr,
    UPCAST: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid_m, pid_n = _gemm_tile_ids(tile, tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_M)
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
        if CENTER:
            g = tl.load(g_ptr + k0 + offs_k, mask=k_ok, other=0.0).to(tl.float32)
            v = (a.to(tl.float32) - mean[:, None]) * rstd[:, None] * g[None, :]
            v = tl.where(k_ok[None, :], v, 0.0)
            if UPCAST:
                a = _round_to_bf16(v)
            else:
                a = v.to(a.dtype)
        if UPCAST:  # Triton's CPU interpreter multiplies bf16 tiles wrongly; fp32 products are exact
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        elif IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BK * stride_xk
        b_ptrs += BK * stride_wk
    acc = _ln_epilogue(acc, mean, rstd, s_ptr, c_ptr, offs_n, n_ok, HAS_C, CENTER)
    if UPCAST:
        acc = _round_to_bf16(acc)
    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _fused_ln_matmul_kernel(
    x_ptr,
    w_ptr,
    g_ptr,
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
    CENTER: tl.constexpr,
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
        g_ptr,
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
        CENTER,
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
    g_ptr,
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
    CENTER: tl.constexpr,
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
            g_ptr,
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
            CENTER,
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
        pid_m, pid_n = _gemm_tile_ids(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([pid_m * BM, ki * BK])
            b = b_desc.load([pid_n * BN, ki * BK])
            acc = tl.dot(a, b.T, acc)
        tile_c += NUM_SMS
        pid_m, pid_n = _gemm_tile_ids(tile_c, num_pid_m, num_pid_n, GROUP_M)
        rows = pid_m * BM + tl.arange(0, BM)
        cols = pid_n * BN + tl.arange(0, BN)
        mean = tl.load(mean_ptr + rows, mask=rows < M, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=rows < M, other=0.0)
        acc = _ln_epilogue(acc, mean, rstd, s_ptr, c_ptr, cols, cols < N, HAS_C, False)
        c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


@triton.jit
def _ln_decode_splitk_kernel(
    x_ptr,
    w,
    part_ptr,
    count_ptr,
    mean_ptr,
    rstd_ptr,
    s_ptr,
    c_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    HAS_C: tl.constexpr,
    W_DESC: tl.constexpr,
    UPCAST: tl.constexpr,
    SPLITS: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    """Program (n, s): partial sums of columns [n*BN, n*BN + BN) over the s-th share of K. The last program
    of column block n (an acq_rel counter) adds the SPLITS partials, applies r (acc - mu s) + c, writes y,
    and zeroes the counter for the next launch. ``w`` is a TMA descriptor of W' when W_DESC, else its pointer."""
    pid_n = tl.program_id(0)
    s = tl.program_id(1)
    rows = tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    kk = tl.arange(0, BK)
    k_per = tl.cdiv(tl.cdiv(K, BK), SPLITS) * BK
    acc = tl.zeros((BM, BN), dtype=tl.float32)
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
        if UPCAST:
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32).T, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b.T, acc)
    slot = (pid_n * SPLITS + s) * BM
    tl.store(part_ptr + (slot + rows[:, None]) * BN + tl.arange(0, BN)[None, :], acc)
    if tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel") == SPLITS - 1:
        total = tl.zeros((BM, BN), dtype=tl.float32)
        for t in tl.static_range(SPLITS):
            first = (pid_n * SPLITS + t) * BM
            total += tl.load(part_ptr + (first + rows[:, None]) * BN + tl.arange(0, BN)[None, :], cache_modifier=".cg")
        mean = tl.load(mean_ptr + rows, mask=rows < M, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=rows < M, other=0.0)
        total = _ln_epilogue(total, mean, rstd, s_ptr, c_ptr, cols, cols < N, HAS_C, False)
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
    """The CUDA autotuner over CUDA_TILES, built on first use (``triton.autotune`` needs an active driver)."""
    if not _AUTOTUNED:
        configs = [
            triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP_M": CUDA_GROUP_M}, num_stages=s, num_warps=w)
            for bm, bn, bk, s, w in CUDA_TILES
        ]

        def prune(configs, named_args, **kwargs):
            wanted = cuda_candidates(named_args["M"])
            return [
                c
                for c in configs
                if (c.kwargs["BM"], c.kwargs["BN"], c.kwargs["BK"], c.num_stages, c.num_warps) in wanted
            ]

        _AUTOTUNED.append(
            triton.autotune(configs=configs, key=list(AUTOTUNE_KEY), prune_configs_by={"early_config_prune": prune})(
                _fused_ln_matmul_kernel
            )
        )
    return _AUTOTUNED[0]


# ---------------------------------------------------------------------------------------------
# Launch plans: pure functions of (M, N, K, dtype, variant, device description)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """The launches of one forward and the path they take (``tiles``, ``hopper``, ``decode``): the
    launcher dispatches on ``path``, never on which function a launch holds."""

    path: str
    steps: tuple[Step, ...]


def _matmul_footprint(bm: int, bn: int, bk: int, dtype: str, center: bool, has_c: bool) -> Footprint:
    """Unified-buffer tiles of one program (cube operands live in L1/L0; tail axes aligned to 512 B). Row
    statistics (mu, r) as (BM, 1) tiles for the whole tile; K loop: the A tile (multi-buffered), with the
    centring prologue also gamma, A in fp32 and cast back. Epilogue: the fp32 accumulator, s and c, the
    cast output."""
    stats = [work("mean", (bm, 1)), work("rstd", (bm, 1))]
    loop = [*stats, load("a", (bm, bk), dtype)]
    if center:
        loop += [load("gamma", (bk,), dtype), work("a_norm", (bm, bk)), work("a_cast", (bm, bk), dtype)]
    epilogue = [*stats, work("acc", (bm, bn))]
    if not center:
        epilogue.append(load("s", (bn,), "fp32"))
    if has_c:
        epilogue.append(load("c", (bn,), "fp32"))
    if dtype != "fp32":
        epilogue.append(work("y_out", (bm, bn), dtype))
    return Footprint((tuple(loop), tuple(epilogue)), cube_vector=True)


def _stats_footprint(rows: int, block_k: int, dtype: str) -> Footprint:
    return Footprint(
        (
            (
                load("x", (rows, block_k), dtype),
                work("shift", (rows, 1)),
                work("d", (rows, block_k)),
                work("s1", (rows, block_k)),
                work("s2", (rows, block_k)),
                work("mean", (rows, 1)),
                work("rstd", (rows, 1)),
            ),
        )
    )


def _stats_step(m: int, k: int, dtype: str, device: DeviceInfo, one_row: bool) -> Launch:
    ints = int_type(m * k)
    sig = {
        "x_ptr": pointer(dtype),
        "mean_ptr": "*fp32",
        "rstd_ptr": "*fp32",
        "M": ints,
        "K": ints,
        "stride_xm": ints,
        "stride_xk": ints,
        "eps": "fp32",
    }
    if one_row:  # Hopper: one row per program, the whole row in one load (kernels/NOTES.md, RMSNorm's prepass)
        block_k = min(triton.next_power_of_2(k), HOPPER_RSTD_MAX_BLOCK)
        return Launch(
            _ln_stats_kernel,
            (m,),
            {"ROWS": 1, "BLOCK_K": block_k},
            sig,
            8 if block_k >= 8192 else 4,
            footprint=_stats_footprint(1, block_k, dtype),
        )
    rows, block_k = RSTD_TILE[device.vendor]
    tiles = triton.cdiv(m, rows)
    fn, grid = (
        (_ln_stats_persistent_kernel, (min(tiles, device.compute_units),))
        if device.vendor == "ascend"
        else (_ln_stats_kernel, (tiles,))
    )
    return Launch(fn, grid, {"ROWS": rows, "BLOCK_K": block_k}, sig, footprint=_stats_footprint(rows, block_k, dtype))


def _ascend_matmul_tile(m: int, dtype: str, center: bool, has_c: bool) -> tuple[int, int, int]:
    for bm, bn, bk in ASCEND_TILES:
        bm = min(bm, _bm_cap(m))
        if _matmul_footprint(bm, bn, bk, dtype, center, has_c).fits():
            return bm, bn, bk
    raise ValueError(f"fused_layernorm_matmul: no Ascend tile fits the unified buffer for {dtype}")


def _hopper_plan(m: int, n: int, k: int, dtype: str, has_c: bool, device: DeviceInfo) -> Plan:
    ints = int_type(max(m * k, n * k, m * n))
    bm, bn, bk, stages, warps, group_m = HOPPER_GEMM
    programs = min(device.compute_units, triton.cdiv(m, bm) * triton.cdiv(n, bn))
    sig = {
        "a_desc": descriptor(dtype, (bm, bk)),
        "b_desc": descriptor(dtype, (bn, bk)),
        "c_desc": descriptor(dtype, (bm, bn)),
        "mean_ptr": "*fp32",
        "rstd_ptr": "*fp32",
        "s_ptr": "*fp32",
        "c_ptr": "*fp32",
        "M": ints,
        "N": ints,
        "K": ints,
    }
    gemm = Launch(
        _ln_gemm_tma_kernel,
        (programs,),
        {"HAS_C": has_c, "BM": bm, "BN": bn, "BK": bk, "GROUP_M": group_m, "NUM_SMS": programs},
        sig,
        warps,
        stages,
    )
    return Plan("hopper", (_stats_step(m, k, dtype, device, one_row=True), gemm))


def _decode_plan(m: int, n: int, k: int, dtype: str, has_c: bool, device: DeviceInfo, w_desc: bool) -> Plan:
    bn, bk, splits, stages, warps = DECODE_TILE if device.vendor == "nvidia" else (32, 32, 2, None, None)
    ints = int_type(max(m * k, n * k, m * n))
    sig = {
        "x_ptr": pointer(dtype),
        "w": descriptor(dtype, (bn, bk)) if w_desc else pointer(dtype),
        "part_ptr": "*fp32",
        "count_ptr": "*i32",
        "mean_ptr": "*fp32",
        "rstd_ptr": "*fp32",
        "s_ptr": "*fp32",
        "c_ptr": "*fp32",
        "y_ptr": pointer(dtype),
        "M": ints,
        "N": ints,
        "K": ints,
        "stride_xm": ints,
    }
    constexprs = {
        "HAS_C": has_c,
        "W_DESC": w_desc,
        "UPCAST": device.interpreter and dtype == "bf16",
        "SPLITS": splits,
        "BM": _bm_cap(m),
        "BN": bn,
        "BK": bk,
    }
    gemm = Launch(_ln_decode_splitk_kernel, (triton.cdiv(n, bn), splits), constexprs, sig, warps, stages)
    return Plan("decode", (_stats_step(m, k, dtype, device, one_row=device.vendor == "nvidia"), gemm))


def plan_forward(
    m: int, n: int, k: int, dtype: str, variant: str, has_c: bool, device: DeviceInfo, dense: bool = True
) -> Plan:
    """The launches of ``fused_layernorm_matmul_forward`` for x ``[m, k]``, weight ``[n, k]`` (none when m or
    n is 0): the mean/rstd prepass, then the GEMM. ``has_c``: beta or bias is given (c = beta W^T + b).

    fold_gamma in fp16/bf16 on NVIDIA takes the RMSNorm kernel's two fast paths, with the same thresholds:
    decode shapes (at most DECODE_MAX_M rows of a large weight) split K over programs; on Hopper, problems of
    at least 2^23 multiply-adds use the persistent TMA GEMM when ``dense`` (rows contiguous and 16-byte
    aligned). The interpreter takes the decode path on small shapes too, so the CPU tests run it."""
    if variant not in VARIANTS:
        raise ValueError(f"fused_layernorm_matmul: variant must be one of {VARIANTS}, got {variant!r}")
    if m == 0 or n == 0:
        return Plan("tiles", ())
    kind = device.vendor
    half = dtype in ("fp16", "bf16")
    decode_size = (kind == "nvidia" and n * k >= DECODE_MIN_WEIGHTS) or (kind == "cpu" and n >= 32)
    if variant == "fold_gamma" and half and m <= DECODE_MAX_M and decode_size:
        return _decode_plan(m, n, k, dtype, has_c, device, dense and (device.capability or 0) >= 90)
    if (
        variant == "fold_gamma"
        and half
        and kind == "nvidia"
        and dense
        and (device.capability or 0) >= 90
        and m > DECODE_MAX_M
        and m * n * k >= HOPPER_MIN_WORK
        and not (device.interpreter and dtype == "bf16")
    ):  # the interpreter's bf16 dots are wrong
        return _hopper_plan(m, n, k, dtype, has_c, device)
    center = variant == "center_prologue"
    ints = int_type(max(m * k, n * k, m * n))
    sig = {
        "x_ptr": pointer(dtype),
        "w_ptr": pointer(dtype),
        "g_ptr": pointer(dtype),
        "mean_ptr": "*fp32",
        "rstd_ptr": "*fp32",
        "s_ptr": "*fp32",
        "c_ptr": "*fp32",
        "y_ptr": pointer(dtype),
        "M": ints,
        "N": ints,
        "K": ints,
        "stride_xm": ints,
        "stride_xk": ints,
        "stride_wn": ints,
        "stride_wk": ints,
        "stride_ym": ints,
    }
    flags = {
        "HAS_C": has_c,
        "CENTER": center,
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
        return Launch(
            fn,
            grid,
            {**flags, "BM": bm, "BN": bn, "BK": bk, "GROUP_M": group_m},
            sig,
            warps,
            stages,
            _matmul_footprint(bm, bn, bk, dtype, center, has_c),
        )

    if kind == "nvidia" and m * n * k >= AUTOTUNE_MIN_WORK:
        step: Step = Autotuned(
            tuple(
                gemm(_fused_ln_matmul_kernel, bm, bn, bk, CUDA_GROUP_M, w, s) for bm, bn, bk, s, w in cuda_candidates(m)
            ),
            AUTOTUNE_KEY,
        )
    elif kind == "nvidia":
        c = SMALL_CUDA_CONFIG
        step = gemm(_fused_ln_matmul_kernel, c["BM"], c["BN"], c["BK"], c["GROUP_M"], c["num_warps"], c["num_stages"])
    elif kind == "ascend":
        bm, bn, bk = _ascend_matmul_tile(m, dtype, center, has_c)
        step = gemm(_fused_ln_matmul_persistent_kernel, bm, bn, bk, ASCEND_GROUP_M, programs=device.cube_units)
    else:
        c = INTERPRETER_CONFIG
        step = gemm(_fused_ln_matmul_kernel, c["BM"], c["BN"], c["BK"], c["GROUP_M"])
    return Plan("tiles", (_stats_step(m, k, dtype, device, one_row=False), step))


@functools.lru_cache(maxsize=512)
def _forward_plan(
    m: int, n: int, k: int, dtype: str, variant: str, has_c: bool, device: DeviceInfo, dense: bool
) -> Plan:
    return plan_forward(m, n, k, dtype, variant, has_c, device, dense)


# ---------------------------------------------------------------------------------------------
# W' = W diag(gamma), s = W' 1 and c = beta W^T + b, cached per weight version
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prepared:
    weight: torch.Tensor  # W' (fold_gamma) or W (center_prologue), contiguous, in x's dtype
    colsum: torch.Tensor  # fp32 row sums of ``weight`` as stored (fold_gamma), else an empty tensor
    c: torch.Tensor | None  # fp32 beta W^T + b, None when neither is given


class PreparedWeightCache:
    """What a forward derives from (weight, gamma, beta, bias), per object identity and version (in-place
    updates bump it)."""

    def __init__(self, capacity: int = 16) -> None:
        self.capacity = capacity
        self._entries: dict[tuple, tuple] = {}

    def get(
        self,
        weight: torch.Tensor,
        gamma: torch.Tensor,
        beta: torch.Tensor | None,
        bias: torch.Tensor | None,
        fold: bool,
    ) -> Prepared:
        tensors = (weight, gamma, beta, bias)
        key = (*(id(t) for t in tensors), fold)
        versions = tuple(t._version if t is not None else None for t in tensors)
        hit = self._entries.get(key)
        if hit is not None:
            refs, held_versions, prepared = hit
            if all((r() if r is not None else None) is t for r, t in zip(refs, tensors)) and held_versions == versions:
                return prepared
        with torch.no_grad():
            w = (weight.float() * gamma.float()[None, :]).to(weight.dtype).contiguous() if fold else weight
            colsum = w.float().sum(1) if fold else torch.empty(0, dtype=torch.float32, device=weight.device)
            c = None
            if beta is not None:
                c = weight.double().matmul(beta.double()).float()
            if bias is not None:
                c = bias.float() if c is None else c + bias.float()
        prepared = Prepared(w, colsum, c)
        if len(self._entries) >= self.capacity:
            self._entries.pop(next(iter(self._entries)))
        self._entries[key] = (tuple(weakref.ref(t) if t is not None else None for t in tensors), versions, prepared)
        return prepared

    def clear(self) -> None:
        self._entries.clear()


PREPARED = PreparedWeightCache()


# ---------------------------------------------------------------------------------------------
# Launcher
# ---------------------------------------------------------------------------------------------
def _check(
    x: torch.Tensor, weight: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None, bias: torch.Tensor | None
) -> None:
    named = [("x", x), ("weight", weight), ("gamma", gamma), ("beta", beta), ("bias", bias)]
    for name, t in named:
        if t is None and name in ("beta", "bias"):
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"fused_layernorm_matmul: {name} must be a tensor")
        if t.dtype != x.dtype:
            raise TypeError(f"fused_layernorm_matmul: {name} dtype {t.dtype} != x dtype {x.dtype}")
        if t.device != x.device:
            raise ValueError(f"fused_layernorm_matmul: {name} on {t.device}, x on {x.device}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"fused_layernorm_matmul: dtype {x.dtype} is not supported (fp16, bf16, fp32)")
    if x.dim() < 1 or weight.dim() != 2 or gamma.dim() != 1:
        raise ValueError(
            f"fused_layernorm_matmul: expected x [..., K], weight [N, K], gamma [K]; got "
            f"{tuple(x.shape)}, {tuple(weight.shape)}, {tuple(gamma.shape)}"
        )
    k = x.shape[-1]
    if weight.shape[1] != k or gamma.shape[0] != k or (beta is not None and tuple(beta.shape) != (k,)):
        raise ValueError(
            f"fused_layernorm_matmul: K mismatch: x has K={k}, weight {tuple(weight.shape)}, "
            f"gamma {tuple(gamma.shape)}" + (f", beta {tuple(beta.shape)}" if beta is not None else "")
        )
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"fused_layernorm_matmul: bias shape {tuple(bias.shape)} != [{weight.shape[0]}]")


_DECODE_SCRATCH: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def _decode_scratch(device: torch.device, floats: int, blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 partial sums, a zeroed int32 counter per column block that the last program resets), per device."""
    held = _DECODE_SCRATCH.get(device)
    if held is None or held[0].numel() < floats or held[1].numel() < blocks:
        held = _DECODE_SCRATCH[device] = (
            torch.empty(max(floats, 1 << 20), dtype=torch.float32, device=device),
            torch.zeros(max(blocks, 1024), dtype=torch.int32, device=device),
        )
    return held


def fused_layernorm_matmul_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    variant: str = "fold_gamma",
) -> torch.Tensor:
    """Forward only (what the collector times)."""
    _check(x, weight, gamma, beta, bias)
    if variant not in VARIANTS:
        raise ValueError(f"fused_layernorm_matmul: variant must be one of {VARIANTS}, got {variant!r}")
    k, n = x.shape[-1], weight.shape[0]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    y = new_output((m, n), x.dtype, x.device)
    if m == 0 or n == 0:
        return y.reshape(*x.shape[:-1], n)
    prep = PREPARED.get(weight, gamma, beta, bias, fold=variant == "fold_gamma")
    w, has_c = prep.weight, prep.c is not None
    plan = _forward_plan(m, n, k, DTYPE_NAMES[x.dtype], variant, has_c, describe(x.device), _dense(x2, w, y))
    stats, gemm = plan.steps
    mean = new_output((m,), torch.float32, x.device)
    rstd = new_output((m,), torch.float32, x.device)
    launch(stats, x2, mean, rstd, m, k, x2.stride(0), x2.stride(1), float(eps))
    c = prep.c if has_c else mean  # an unused pointer when HAS_C is off
    colsum = prep.colsum if prep.colsum.numel() else mean
    if plan.path == "hopper":
        cx = gemm.constexprs
        launch(
            gemm,
            _descriptor(x2, (cx["BM"], cx["BK"])),
            _descriptor(w, (cx["BN"], cx["BK"])),
            _descriptor(y, (cx["BM"], cx["BN"])),
            mean,
            rstd,
            colsum,
            c,
            m,
            n,
            k,
        )
    elif plan.path == "decode":
        cx = gemm.constexprs
        blocks, splits, bm = gemm.grid[0], cx["SPLITS"], cx["BM"]
        parts, counts = _decode_scratch(x.device, blocks * splits * bm * cx["BN"], blocks)
        w_arg = _descriptor(w, (cx["BN"], cx["BK"])) if cx["W_DESC"] else w
        launch(gemm, x2, w_arg, parts, counts, mean, rstd, colsum, c, y, m, n, k, x2.stride(0))
    else:
        args = (
            x2,
            w,
            gamma,
            mean,
            rstd,
            colsum,
            c,
            y,
            m,
            n,
            k,
            x2.stride(0),
            x2.stride(1),
            w.stride(0),
            w.stride(1),
            y.stride(0),
        )
        if isinstance(gemm, Autotuned):
            flags = {name: gemm.candidates[0].constexprs[name] for name in FLAGS}
            grid = lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)
            launch_autotuned(gemm, autotuned_kernel(), grid, *args, **flags)
        else:
            launch(gemm, *args)
    return y.reshape(*x.shape[:-1], n)


def layernorm_linear_reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> torch.Tensor:
    """The same function in PyTorch, in fp32 (at least) where it matters: what the backward differentiates."""
    up = torch.float64 if x.dtype == torch.float64 else torch.float32
    xn = torch.nn.functional.layer_norm(
        x.to(up), (x.shape[-1],), gamma.to(up), beta.to(up) if beta is not None else None, eps
    )
    return torch.nn.functional.linear(xn, weight.to(up), bias.to(up) if bias is not None else None)


class FusedLayerNormMatmulFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, gamma, beta, bias, eps, variant):
        ctx.save_for_backward(x, weight, gamma, beta, bias)
        ctx.eps = eps
        if x.dtype == torch.float64:  # only gradcheck gets here (the public function refuses fp64): the
            # kernels take fp16/bf16/fp32, so in float64 the forward is the reference and the check is the backward's
            return layernorm_linear_reference(x, weight, gamma, beta, bias, eps)
        return fused_layernorm_matmul_forward(x, weight, gamma, beta, bias, eps, variant)

    @staticmethod
    def backward(ctx, dy):
        saved = ctx.saved_tensors
        inputs = [
            t.detach().requires_grad_(need) if t is not None else None
            for t, need in zip(saved, ctx.needs_input_grad[:5])
        ]
        with torch.enable_grad():
            y = layernorm_linear_reference(*inputs, ctx.eps)
            wanted = [t for t in inputs if t is not None and t.requires_grad]
            grads = iter(torch.autograd.grad(y, wanted, dy.to(y.dtype)))
        out = [next(grads).to(t.dtype) if t is not None and t.requires_grad else None for t in inputs]
        return (*out, None, None)


def fused_layernorm_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    variant: str = "fold_gamma",
) -> torch.Tensor:
    """((x - mean) / sqrt(var + eps) * gamma + beta) @ weight^T + bias, without writing the normalised x."""
    _check(x, weight, gamma, beta, bias)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, gamma, beta, bias)):
        return FusedLayerNormMatmulFunction.apply(x, weight, gamma, beta, bias, eps, variant)
    return fused_layernorm_matmul_forward(x, weight, gamma, beta, bias, eps, variant)


class FusedLayerNormLinear(torch.nn.Module):
    """LayerNorm(dim) followed by Linear(dim, hidden), fused: parameters gamma, beta, weight and bias."""

    def __init__(self, dim: int, hidden: int, eps: float = 1e-5, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.eps = eps
        self.gamma = torch.nn.Parameter(torch.ones(dim, **factory))
        self.beta = torch.nn.Parameter(torch.zeros(dim, **factory))
        self.weight = torch.nn.Parameter(torch.empty(hidden, dim, **factory))
        self.bias = torch.nn.Parameter(torch.zeros(hidden, **factory)) if bias else None
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_layernorm_matmul(x, self.weight, self.gamma, self.beta, self.bias, self.eps)

    def extra_repr(self) -> str:
        hidden, dim = self.weight.shape
        return f"dim={dim}, hidden={hidden}, eps={self.eps}, bias={self.bias is not None}"


# ---------------------------------------------------------------------------------------------
# Spec
# ---------------------------------------------------------------------------------------------
NAME = "fused_layernorm_matmul"
RTOL = {"fp32": 1e-4, "fp16": 2e-3, "bf16": 1.6e-2}  # >= 4 x the output rounding 2^-24, 2^-11, 2^-8
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}
OPERAND_SIGMAS = 4.0  # lambda below
OPERAND_NORM = 2.0  # S below
ACCUMULATION_ATOL = 1e-5  # fp32 accumulation over K = 64, grown with sqrt(K)
X_SCALE = 2.0  # x = shift + X_SCALE * N(0, 1) in the spec's inputs: |mu| / sigma = shift / X_SCALE


def tolerance(dtype: str, k: int, shift: float = 0.0) -> Tolerance:
    """Elementwise tolerance of y = r (x - mu) (gamma . w_n) + c_n from the error model of the kernel.

    With t_k = r (x_k - mu) gamma_k w_nk the exact terms of one output (RMSNorm's model,
    ``kernels/fused_rmsnorm_matmul.py: tolerance``, with x - mu for x):

    1. output rounding to ``dtype``: |e| <= u_out |y|, covered by ``rtol`` (RTOL, at least 4 u_out);
    2. one operand rounding: fold_gamma rounds W diag(gamma) once per weight, center_prologue rounds
       (x - mu) r gamma per tile, as PyTorch's unfused layer_norm -> linear rounds its output: the dot sums
       t_k (1 + d_k), |d_k| <= u, so the error is near normal with sd <= u / sqrt(3) ||t||_2. LayerNorm
       makes sum_k (r (x_k - mu))^2 = K (up to eps), and w ~ N(0, 1/K), so ||t||_2^2 ~ mean of gamma^2
       (1.58 for gamma ~ U[1, 1.5]) exactly as for RMSNorm: S = OPERAND_NORM = 2, lambda = 4;
    3. fp32 accumulation of K products: ACCUMULATION_ATOL sqrt(K / 64) (random-walk growth) when x is
       centred (center_prologue). fold_gamma accumulates the raw x and subtracts mu s afterwards: the
       partial sums are sqrt(1 + (mu/sigma)^2) times larger before r scales them, and so is their rounding:
       term 3 grows by that factor. ``shift`` = |mu| / sigma of the inputs (the spec's x = shift * 2 + 2 N(0, 1)
       gives mu / sigma = shift). The beta W^T + b vector is summed in float64 once per weight.

    atol = lambda S u / sqrt(3) + term 3: bf16 0.0180, fp16 0.00226 at K = 64, mu = 0.
    """
    operand = OPERAND_SIGMAS * OPERAND_NORM * UNIT_ROUNDOFF[dtype] / math.sqrt(3)
    accumulation = ACCUMULATION_ATOL * math.sqrt(max(k, 64) / 64) * math.sqrt(1.0 + shift * shift)
    return Tolerance(RTOL[dtype], operand + accumulation)


ACCURACY_POINTS = (  # (x shape, N, bias, layout, shift = |mu| / sigma of x)
    ((1, 64), 16, True, "contiguous", 0.0),
    ((33, 257), 70, False, "contiguous", 0.0),
    ((2, 5, 96), 40, True, "contiguous", 4.0),  # a large mean: the epilogue's cancellation
    ((40, 128), 64, True, "transposed", 0.0),
    ((3, 520), 33, True, "contiguous", 4.0),
)
FOLD_POINTS = (  # fold_gamma's own paths, forward only (the slowest shapes in the interpreter)
    ((5, 1024), 1040, True, "contiguous", 0.0),  # decode (split K): a wide weight, N not a multiple of its tile
    ((130, 256), 264, True, "contiguous", 4.0),  # the Hopper path (TMA): M and N not multiples of its tiles
)
PERF_POINTS = (((1024, 8192), 4096), ((4096, 4096), 4096), ((16, 8192), 8192))
TARGET_RATIO = 1.05  # t(kernel) <= 1.05 x t(cuBLAS linear alone) on the H200: docs/kernels.md
TARGETS_DOC = "docs/kernels.md, LayerNorm+MatMul targets (H200)"


def _accuracy_cases() -> list[Case]:
    cases = []
    for variant in VARIANTS:
        for dtype in ("fp32", "fp16", "bf16"):
            points = ACCURACY_POINTS + (FOLD_POINTS if variant == "fold_gamma" else ())
            for shape, n, bias, layout, shift in points:
                for direction in ("fwd", "bwd"):
                    if direction == "bwd" and (variant != "fold_gamma" or dtype != "fp32" or shape[-1] > 520):
                        continue  # the backward is PyTorch's: one variant and dtype check its wiring
                    cases.append(
                        Case.make(
                            NAME,
                            variant,
                            dtype,
                            tolerance(dtype, shape[-1], shift),
                            shape=shape,
                            n=n,
                            bias=bias,
                            layout=layout,
                            shift=shift,
                            direction=direction,
                        )
                    )
    return cases


def _perf_cases() -> list[Case]:
    cases = []
    for variant in VARIANTS:
        for dtype in ("fp16", "bf16"):
            for shape, n in PERF_POINTS:
                target = None
                if variant == "fold_gamma":
                    target = Target(max_ratio_to=("cublas_linear", TARGET_RATIO), source=TARGETS_DOC)
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
                        shift=0.0,
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
    x = X_SCALE * (p["shift"] + torch.randn(shape, generator=gen))
    w = torch.randn(n, k, generator=gen) / math.sqrt(k)
    g = 1.0 + 0.5 * torch.rand(k, generator=gen)
    beta = 0.5 * torch.randn(k, generator=gen)
    b = torch.randn(n, generator=gen) if p["bias"] else None
    x = x.to(dtype).to(device)
    if p["layout"] == "transposed":
        x = x.t().contiguous().t()
    inputs = {
        "x": x,
        "weight": w.to(dtype).to(device),
        "gamma": g.to(dtype).to(device),
        "beta": beta.to(dtype).to(device),
        "bias": b.to(dtype).to(device) if b is not None else None,
        "eps": 1e-5,
    }
    if p["direction"] == "bwd":
        inputs["dy"] = torch.randn(*shape[:-1], n, generator=gen).to(dtype).to(device)
    return inputs


def _leaves(inputs: dict) -> list[torch.Tensor | None]:
    return [inputs[name] for name in ("x", "weight", "gamma", "beta", "bias")]


def _run(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    if case.p["direction"] == "fwd":
        return (fused_layernorm_matmul(*_leaves(inputs), inputs["eps"], case.variant),)
    leaves = [t.detach().requires_grad_() if t is not None else None for t in _leaves(inputs)]
    y = fused_layernorm_matmul(*leaves, inputs["eps"], case.variant)
    return tuple(torch.autograd.grad(y, [t for t in leaves if t is not None], inputs["dy"]))


def _reference(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    leaves = [t.detach().cpu().double().requires_grad_() if t is not None else None for t in _leaves(inputs)]
    x, w, g, beta, b = leaves
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    y = torch.nn.functional.linear((x - mu) * torch.rsqrt(var + inputs["eps"]) * g + beta, w, b)
    if case.p["direction"] == "fwd":
        return (y.detach(),)
    return tuple(torch.autograd.grad(y, [t for t in leaves if t is not None], inputs["dy"].cpu().double()))


def eager_layernorm_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> torch.Tensor:
    """What a model does unfused: ``F.layer_norm`` (its output written), then ``F.linear``."""
    normed = torch.nn.functional.layer_norm(x, (x.shape[-1],), gamma, beta, eps)
    return torch.nn.functional.linear(normed, weight, bias)


def _implementations(case: Case, inputs: dict) -> dict:
    x, w, g, beta, b = _leaves(inputs)
    eps = inputs["eps"]
    compiled = torch.compile(eager_layernorm_linear, dynamic=False)
    return {
        KERNEL_IMPL: lambda: fused_layernorm_matmul_forward(x, w, g, beta, b, eps, case.variant),
        EAGER_IMPL: lambda: eager_layernorm_linear(x, w, g, beta, b, eps),
        COMPILE_IMPL: lambda: compiled(x, w, g, beta, b, eps),
        "cublas_linear": lambda: torch.nn.functional.linear(x, w, b),
    }


def _mnk(case: Case) -> tuple[int, int, int]:
    shape = case.p["shape"]
    return math.prod(shape[:-1]), case.p["n"], shape[-1]


def _bytes(case: Case) -> int:
    m, n, k = _mnk(case)
    return (m * k + n * k + m * n + 2 * k + (n if case.p["bias"] else 0)) * element_size(case.dtype)


def _flops(case: Case) -> int:
    m, n, k = _mnk(case)
    return 2 * m * n * k + 5 * m * k


def _launch_plans(case: Case, device: DeviceInfo) -> tuple[Step, ...]:
    """Every launch that running ``case`` makes on ``device`` (the backward is PyTorch's). Fresh allocations
    are 16-byte aligned, so a contiguous case's rows suit TMA when they are whole multiples of 16 bytes."""
    m, n, k = _mnk(case)
    size = element_size(case.dtype)
    dense = case.p["layout"] == "contiguous" and (k * size) % 16 == 0 and (n * size) % 16 == 0
    return plan_forward(m, n, k, case.dtype, case.variant, True, device, dense).steps


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
    # The GEMM of each path, never the statistics prepass (_ln_stats_kernel) that runs first on all of them.
    profile_kernel=lambda case: "_ln_gemm_tma|_ln_decode_splitk|_fused_ln_matmul",
    launch_plans=_launch_plans,
    bound="compute",
    variants=VARIANTS,
    plan_sample=3,
    public=("fused_layernorm_matmul", "FusedLayerNormLinear"),
    doc=__doc__ or "",
)
