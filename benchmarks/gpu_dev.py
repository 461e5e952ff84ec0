"""Kernel development on a GPU: candidate kernels checked and timed beside what `kernelwatch/kernels/` ships.

    python benchmarks/gpu_dev.py [--only softmax,rmsnorm,decode,percall] [--out results.json]

Only the studies kernelwatch/kernels/NOTES.md cites ("second push" softmax and RMSNorm+MatMul tables, the
cost-per-call pieces). What shipped is imported from `kernelwatch/kernels/` and launched with the study's
configurations; only the candidates NOTES.md records as rejected (the sum of squares inside the TMA
loop, a second read of the A tile, a phase before the GEMM, split K with a second adding kernel) are
defined here. Every candidate is checked against a float32 PyTorch reference on the same inputs, then
timed with CUDA events, L2 flushed by reading 512 MB before each repetition, median. Prints one table
per study; logs of the runs NOTES.md quotes: benchmarks/results/2026-11-30-h200-dev*.log.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# What shipped, launched by the studies below with their own configurations (jit kernels resolve these globals).
from kernelwatch.kernels.fused_rmsnorm_matmul.kernel import _decode_splitk_kernel, _rms_gemm_tma_kernel, _rstd_kernel
from kernelwatch.kernels.norm_gemm import gemm_tile_ids
from kernelwatch.kernels.scaled_masked_softmax.kernel import _softmax_fwd_heads_kernel

RESULTS: list[dict] = []
FLUSH: torch.Tensor | None = None


def flush() -> None:
    FLUSH.max()


def time_ms(fn, reps: int = 30, warmup: int = 3) -> tuple[float, float, float]:
    """(median, p20, p80) milliseconds of one call, L2 flushed before each."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return statistics.median(t), t[int(0.2 * (reps - 1))], t[int(0.8 * (reps - 1))]


def per_call_us(fn, calls: int = 2000) -> float:
    """Wall time per call, calls back to back, one sync at the end (what a loop pays)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def record(
    study: str,
    case: str,
    impl: str,
    ms: float | None,
    floor_ms: float | None = None,
    err: float | None = None,
    note: str = "",
) -> None:
    row = {"study": study, "case": case, "impl": impl, "ms": ms, "floor_ms": floor_ms, "err": err, "note": note}
    RESULTS.append(row)
    pct = f"{100 * floor_ms / ms:6.1f}%" if ms and floor_ms else "       "
    shown = f"{ms * 1e3:9.1f} us" if ms else "   failed"
    print(f"  {case:<26} {impl:<44} {shown} {pct} err={err if err is None else f'{err:.2e}'} {note}", flush=True)


def attempt(study: str, case: str, impl: str, fn, check, floor_ms: float | None = None, reps: int = 30) -> float | None:
    try:
        err = check(fn)
        if err is None or not math.isfinite(err) or err > 5e-2:
            record(study, case, impl, None, floor_ms, err, "WRONG")
            return None
        med, _, _ = time_ms(fn, reps)
        record(study, case, impl, med, floor_ms, err)
        return med
    except Exception as exc:
        record(study, case, impl, None, floor_ms, None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:90]}")
        return None


# =============================================================================================
# Softmax: one program per (batch, query-row block) walks every head, the mask tile read once
# =============================================================================================
def softmax_heads(x, mask_u8, scale, rows, warps, stages):
    """kernels' one-program-per-(batch, row block) forward, launched with the study's ROWS / warps; ``stages``
    > 1 software-pipelines its loop over the heads (the rejected ``num_stages=2`` row of NOTES.md)."""
    b, h, sq, sk = x.shape
    y = torch.empty_like(x)
    mask_sb = 0 if mask_u8.shape[0] == 1 else sq * sk
    grid = (b * triton.cdiv(sq, rows),)
    _softmax_fwd_heads_kernel[grid](
        x,
        mask_u8,
        y,
        b * h * sq,
        sk,
        sq,
        h,
        mask_sb,
        sk,
        scale * 1.4426950408889634,
        ROWS=rows,
        BLOCK_N=triton.next_power_of_2(sk),
        ACC=tl.float32,
        num_warps=warps,
        num_stages=stages,
    )
    return y


def study_softmax(dtypes: tuple[str, ...]) -> None:
    from kernelwatch.kernels.scaled_masked_softmax.api import scaled_masked_softmax_forward

    peak = PEAKS["copy_gbps"]
    shapes = ((32, 16, 512, 512), (32, 16, 1024, 1024), (32, 16, 2048, 2048), (8, 16, 4096, 4096))
    for dname in dtypes:
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dname]
        for shape in shapes:
            b, h, sq, sk = shape
            g = torch.Generator(device="cuda").manual_seed(1)
            x = (torch.randn(shape, generator=g, device="cuda") * 4).to(dtype)
            mask = torch.rand((b, 1, sq, sk), generator=g, device="cuda") < 0.1
            mu8 = mask.view(torch.uint8)
            nbytes = 2 * x.numel() * x.element_size() + mask.numel()
            floor = nbytes / (peak * 1e9) * 1e3
            ref = torch.softmax((x[:2].float() * 0.125).masked_fill(mask[:2], float("-inf")), -1)

            def check(fn):
                out = fn()
                return float((out[:2].float() - ref).abs().max())

            case = f"{dname} {b}x{h}x{sq}x{sk}"
            attempt(
                "softmax",
                case,
                "shipped kernelwatch.kernels.scaled_masked_softmax",
                lambda: scaled_masked_softmax_forward(x, mask, 0.125),
                check,
                floor,
                reps=15,
            )
            configs = [(1, 4, 1), (1, 8, 1), (2, 4, 1), (2, 8, 1), (1, 4, 2), (2, 8, 2), (4, 8, 1)]
            if sk <= 512:
                configs = [(2, 4, 1), (4, 4, 1), (4, 8, 1), (8, 8, 1), (4, 4, 2), (8, 8, 2)]
            if sk >= 4096:
                configs = [(1, 8, 1), (1, 16, 1), (1, 8, 2), (2, 16, 1)]
            for rows, warps, stages in configs:
                attempt(
                    "softmax",
                    case,
                    f"heads-loop rows={rows} warps={warps} stages={stages}",
                    lambda rows=rows, warps=warps, stages=stages: softmax_heads(x, mu8, 0.125, rows, warps, stages),
                    check,
                    floor,
                    reps=15,
                )
            torch.cuda.empty_cache()


# =============================================================================================
# RMSNorm + MatMul: persistent TMA GEMM, sum of squares from the A tiles, 1/rms in the epilogue
# =============================================================================================
@triton.jit
def _rms_gemm_inloop_kernel(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    eps,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
    FLATTEN: tl.constexpr,
):
    """Rejected: the persistent TMA GEMM summing x^2 from the shared-memory A tile inside its K loop."""
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    tile_c = start - NUM_SMS
    for tile in tl.range(start, num_pid_m * num_pid_n, NUM_SMS, flatten=FLATTEN):
        pid_m, pid_n = gemm_tile_ids(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        ss = tl.zeros((BM, BK), dtype=tl.float32)
        for ki in range(tl.cdiv(K, BK)):
            a = a_desc.load([pid_m * BM, ki * BK])
            b = b_desc.load([pid_n * BN, ki * BK])
            af = a.to(tl.float32)
            ss += af * af
            acc = tl.dot(a, b.T, acc)
        tile_c += NUM_SMS
        pid_m, pid_n = gemm_tile_ids(tile_c, num_pid_m, num_pid_n, GROUP_M)
        acc = acc * (1.0 / tl.sqrt(tl.sum(ss, axis=1) / K + eps))[:, None]
        c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


def rstd_prepass(x, rows=4, block_k=1024, warps=4):
    """kernels' 1/rms prepass (4 B a row) with the study's tile."""
    m, k = x.shape
    rstd = torch.empty(m, device=x.device, dtype=torch.float32)
    _rstd_kernel[(triton.cdiv(m, rows),)](
        x, rstd, m, k, x.stride(0), x.stride(1), 1e-6, ROWS=rows, BLOCK_K=block_k, num_warps=warps
    )
    return rstd


def _descriptors(x, w, y, bm, bn, bk):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return (
        TensorDescriptor.from_tensor(x, [bm, bk]),
        TensorDescriptor.from_tensor(w, [bn, bk]),
        TensorDescriptor.from_tensor(y, [bm, bn]),
    )


def rms_gemm_tma(x, w, cfg, norm=True, prepass=False, pre_cfg=(4, 1024, 4), group_m=8):
    """The persistent TMA GEMM: kernels' (with 1/rms from the prepass, or all ones for the GEMM alone) unless
    ``norm`` without ``prepass``, the rejected in-loop sum of squares. ``cfg`` = (BM, BN, BK, stages, warps,
    flatten); kernels' GEMM always flattens its tile loop."""
    bm, bn, bk, stages, warps, flatten = cfg
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    a_desc, b_desc, c_desc = _descriptors(x, w, y, bm, bn, bk)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    grid = min(sms, triton.cdiv(m, bm) * triton.cdiv(n, bn))
    if norm and not prepass:
        _rms_gemm_inloop_kernel[(grid,)](
            a_desc,
            b_desc,
            c_desc,
            m,
            n,
            k,
            1e-6,
            BM=bm,
            BN=bn,
            BK=bk,
            GROUP_M=group_m,
            NUM_SMS=grid,
            FLATTEN=flatten,
            num_stages=stages,
            num_warps=warps,
        )
        return y
    rstd = rstd_prepass(x, *pre_cfg) if norm else torch.ones(m, device=x.device, dtype=torch.float32)
    _rms_gemm_tma_kernel[(grid,)](
        a_desc,
        b_desc,
        c_desc,
        rstd,
        y,
        m,
        n,
        k,
        HAS_BIAS=False,
        BM=bm,
        BN=bn,
        BK=bk,
        GROUP_M=group_m,
        NUM_SMS=grid,
        PDL=False,
        num_stages=stages,
        num_warps=warps,
    )
    return y


@triton.jit
def _rms_gemm_twice_kernel(
    a_desc,
    b_desc,
    c_desc,
    x_ptr,
    M,
    N,
    K,
    stride_xm,
    eps,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
    SS_COLS: tl.constexpr,
):
    """Rejected: sum of squares from a second, pointer-based read of the A tile (from L2), so the dot keeps
    its operand in shared memory untouched."""
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    num_tiles = num_pid_m * num_pid_n
    tile_id_c = start - NUM_SMS
    for tile_id in tl.range(start, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = gemm_tile_ids(tile_id, num_pid_m, num_pid_n, GROUP_M)
        rows = pid_m * BM + tl.arange(0, BM)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        ss = tl.zeros((BM, SS_COLS), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BK
            a = a_desc.load([pid_m * BM, offs_k])
            b = b_desc.load([pid_n * BN, offs_k])
            cols = offs_k + (ki % (BK // SS_COLS)) * 0 + tl.arange(0, SS_COLS)
            for j in tl.static_range(BK // SS_COLS):
                xs = tl.load(
                    x_ptr + rows[:, None].to(tl.int64) * stride_xm + (cols + j * SS_COLS)[None, :],
                    mask=(rows < M)[:, None] & ((cols + j * SS_COLS) < K)[None, :],
                    other=0.0,
                ).to(tl.float32)
                ss += xs * xs
            acc = tl.dot(a, b.T, acc)
        tile_id_c += NUM_SMS
        pid_m, pid_n = gemm_tile_ids(tile_id_c, num_pid_m, num_pid_n, GROUP_M)
        rstd = 1.0 / tl.sqrt(tl.sum(ss, axis=1) / K + eps)
        c_desc.store([pid_m * BM, pid_n * BN], (acc * rstd[:, None]).to(c_desc.dtype))


def rms_gemm_twice(x, w, cfg, ss_cols=64):
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk, stages, warps = cfg
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    a_desc = TensorDescriptor.from_tensor(x, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(w, [bn, bk])
    c_desc = TensorDescriptor.from_tensor(y, [bm, bn])
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    grid = min(sms, triton.cdiv(m, bm) * triton.cdiv(n, bn))
    _rms_gemm_twice_kernel[(grid,)](
        a_desc,
        b_desc,
        c_desc,
        x,
        m,
        n,
        k,
        x.stride(0),
        1e-6,
        BM=bm,
        BN=bn,
        BK=bk,
        GROUP_M=8,
        NUM_SMS=grid,
        SS_COLS=ss_cols,
        num_stages=stages,
        num_warps=warps,
    )
    return y


@triton.jit
def _rms_gemm_phase_kernel(
    a_desc,
    b_desc,
    c_desc,
    x_ptr,
    r_ptr,
    tag_ptr,
    state_ptr,
    M,
    N,
    K,
    stride_xm,
    eps,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
    R: tl.constexpr,
    RK: tl.constexpr,
    FALLBACKS: tl.constexpr,
):
    """Rejected. Phase 1: every program computes 1/rms of a few rows and tags them with this launch's number.
    Phase 2: persistent GEMM; an epilogue uses the tagged values, or computes its rows itself when a
    tag is not yet there (never waits: no program depends on another being resident)."""
    start = tl.program_id(0)
    launch = tl.atomic_add(state_ptr, 0, sem="acquire") + 1
    for chunk in range(start, tl.cdiv(M, R), NUM_SMS):
        rows = chunk * R + tl.arange(0, R)
        ok = rows < M
        acc = tl.zeros((R, RK), dtype=tl.float32)
        for k0 in range(0, K, RK):
            cols = k0 + tl.arange(0, RK)
            xs = tl.load(
                x_ptr + rows[:, None].to(tl.int64) * stride_xm + cols[None, :],
                mask=ok[:, None] & (cols < K)[None, :],
                other=0.0,
            ).to(tl.float32)
            acc += xs * xs
        tl.store(r_ptr + rows, 1.0 / tl.sqrt(tl.sum(acc, axis=1) / K + eps), mask=ok)
        tl.atomic_xchg(tag_ptr + rows, launch, mask=ok, sem="release")
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    num_tiles = num_pid_m * num_pid_n
    tile_id_c = start - NUM_SMS
    for tile_id in tl.range(start, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = gemm_tile_ids(tile_id, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([pid_m * BM, ki * BK])
            b = b_desc.load([pid_n * BN, ki * BK])
            acc = tl.dot(a, b.T, acc)
        tile_id_c += NUM_SMS
        pid_m, pid_n = gemm_tile_ids(tile_id_c, num_pid_m, num_pid_n, GROUP_M)
        rows = pid_m * BM + tl.arange(0, BM)
        ok = rows < M
        tags = tl.atomic_add(tag_ptr + rows, 0, mask=ok, sem="acquire")
        ready = tl.min(tl.where(ok, tags == launch, 1).to(tl.int32), axis=0)
        if ready == 1:
            rstd = tl.load(r_ptr + rows, mask=ok, other=0.0, cache_modifier=".cg")
        else:
            ssum = tl.zeros((BM,), dtype=tl.float32)
            for k0 in range(0, K, 64):
                cols = k0 + tl.arange(0, 64)
                xs = tl.load(
                    x_ptr + rows[:, None].to(tl.int64) * stride_xm + cols[None, :],
                    mask=ok[:, None] & (cols < K)[None, :],
                    other=0.0,
                ).to(tl.float32)
                ssum += tl.sum(xs * xs, axis=1)
            rstd = 1.0 / tl.sqrt(ssum / K + eps)
            if FALLBACKS:
                tl.atomic_add(state_ptr + 2, 1)
        c_desc.store([pid_m * BM, pid_n * BN], (acc * rstd[:, None]).to(c_desc.dtype))
    done = tl.atomic_add(state_ptr + 1, 1, sem="acq_rel")
    if done == tl.num_programs(0) - 1:
        tl.atomic_xchg(state_ptr + 1, 0)
        tl.atomic_add(state_ptr, 1, sem="release")


_PHASE_STATE: dict = {}


def rms_gemm_phase(x, w, cfg, r_rows=8, rk=1024):
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk, stages, warps = cfg
    m, k = x.shape
    n = w.shape[0]
    key = x.device
    state = _PHASE_STATE.get(key)
    if state is None or state[1].numel() < m:
        state = _PHASE_STATE[key] = (
            torch.zeros(4, dtype=torch.int32, device=x.device),
            torch.zeros(max(m, 4096), dtype=torch.int32, device=x.device),
            torch.empty(max(m, 4096), dtype=torch.float32, device=x.device),
        )
    counters, tags, rstd = state
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    a_desc = TensorDescriptor.from_tensor(x, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(w, [bn, bk])
    c_desc = TensorDescriptor.from_tensor(y, [bm, bn])
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    grid = min(sms, triton.cdiv(m, bm) * triton.cdiv(n, bn))
    _rms_gemm_phase_kernel[(grid,)](
        a_desc,
        b_desc,
        c_desc,
        x,
        rstd,
        tags,
        counters,
        m,
        n,
        k,
        x.stride(0),
        1e-6,
        BM=bm,
        BN=bn,
        BK=bk,
        GROUP_M=8,
        NUM_SMS=grid,
        R=r_rows,
        RK=rk,
        FALLBACKS=True,
        num_stages=stages,
        num_warps=warps,
    )
    return y


# Decode (few rows), rejected: split K over programs, partial sums in fp32, a second kernel adds them and scales.
@triton.jit
def _splitk_kernel(
    x_ptr, w_ptr, part_ptr, ss_ptr, M, N, K, K_PER: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr
):
    pid_n = tl.program_id(0)
    s = tl.program_id(1)
    rows = tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    kk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    ss = tl.zeros((BM, BK), dtype=tl.float32)
    for k0 in tl.range(s * K_PER, s * K_PER + K_PER, BK):
        offs_k = k0 + kk
        a = tl.load(x_ptr + rows[:, None] * K + offs_k[None, :], mask=(rows < M)[:, None], other=0.0)
        b = tl.load(w_ptr + cols[:, None].to(tl.int64) * K + offs_k[None, :])
        af = a.to(tl.float32)
        ss += af * af
        acc = tl.dot(a, b.T, acc)
    out = part_ptr + (s * BM + rows[:, None]) * N + cols[None, :]
    tl.store(out, acc)
    if pid_n == 0:
        tl.store(ss_ptr + s * BM + rows, tl.sum(ss, axis=1))


@triton.jit
def _splitk_finish_kernel(
    part_ptr, ss_ptr, y_ptr, M, N, K, eps, SPLITS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr
):
    pid = tl.program_id(0)
    rows = tl.arange(0, BM)
    cols = pid * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    ss = tl.zeros((BM,), dtype=tl.float32)
    for s in tl.static_range(SPLITS):
        acc += tl.load(part_ptr + (s * BM + rows[:, None]) * N + cols[None, :])
        ss += tl.load(ss_ptr + s * BM + rows)
    rstd = 1.0 / tl.sqrt(ss / K + eps)
    tl.store(
        y_ptr + rows[:, None] * N + cols[None, :],
        (acc * rstd[:, None]).to(y_ptr.dtype.element_ty),
        mask=(rows < M)[:, None],
    )


def rms_splitk(x, w, cfg, finish=True):
    bn, bk, splits, stages, warps = cfg
    m, k = x.shape
    n = w.shape[0]
    bm = max(16, triton.next_power_of_2(m))
    part = torch.empty((splits, bm, n), device=x.device, dtype=torch.float32)
    ss = torch.empty((splits, bm), device=x.device, dtype=torch.float32)
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    _splitk_kernel[(n // bn, splits)](
        x, w, part, ss, m, n, k, K_PER=k // splits, BM=bm, BN=bn, BK=bk, num_stages=stages, num_warps=warps
    )
    if finish:
        _splitk_finish_kernel[(n // 256,)](part, ss, y, m, n, k, 1e-6, SPLITS=splits, BM=bm, BN=256, num_warps=4)
    return y


@triton.jit
def _splitk_tma_kernel(
    x_ptr, w_desc, part_ptr, ss_ptr, M, N, K, K_PER: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr
):
    pid_n = tl.program_id(0)
    s = tl.program_id(1)
    rows = tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    kk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    ss = tl.zeros((BM, BK), dtype=tl.float32)
    for k0 in tl.range(s * K_PER, s * K_PER + K_PER, BK):
        a = tl.load(x_ptr + rows[:, None] * K + (k0 + kk)[None, :], mask=(rows < M)[:, None], other=0.0)
        b = w_desc.load([pid_n * BN, k0])
        af = a.to(tl.float32)
        ss += af * af
        acc = tl.dot(a, b.T, acc)
    tl.store(part_ptr + (s * BM + rows[:, None]) * N + cols[None, :], acc)
    if pid_n == 0:
        tl.store(ss_ptr + s * BM + rows, tl.sum(ss, axis=1))


_SPLITK_CNT: dict = {}


def rms_splitk_fused(x, w, cfg):
    """kernels' decode kernel (split K, the last program of a column block adds the partials) with the study's
    (BN, BK, splits, stages, warps) and a TMA descriptor of the weight."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    bn, bk, splits, stages, warps = cfg
    m, k = x.shape
    n = w.shape[0]
    bm = max(16, triton.next_power_of_2(m))
    blocks = triton.cdiv(n, bn)
    cnt = _SPLITK_CNT.get(x.device)
    if cnt is None or cnt.numel() < blocks:
        cnt = _SPLITK_CNT[x.device] = torch.zeros(max(blocks, 1024), dtype=torch.int32, device=x.device)
    part = torch.empty((blocks, splits, bm, bn), device=x.device, dtype=torch.float32)
    ss = torch.empty((blocks, splits, bm), device=x.device, dtype=torch.float32)
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    w_desc = TensorDescriptor.from_tensor(w, [bn, bk])
    _decode_splitk_kernel[(blocks, splits)](
        x,
        w_desc,
        part,
        ss,
        cnt,
        y,
        y,
        m,
        n,
        k,
        x.stride(0),
        1e-6,
        HAS_BIAS=False,
        W_DESC=True,
        UPCAST=False,
        SPLITS=splits,
        BM=bm,
        BN=bn,
        BK=bk,
        num_stages=stages,
        num_warps=warps,
    )
    return y


def rms_splitk_tma(x, w, cfg):
    from triton.tools.tensor_descriptor import TensorDescriptor

    bn, bk, splits, stages, warps = cfg
    m, k = x.shape
    n = w.shape[0]
    bm = max(16, triton.next_power_of_2(m))
    part = torch.empty((splits, bm, n), device=x.device, dtype=torch.float32)
    ss = torch.empty((splits, bm), device=x.device, dtype=torch.float32)
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    w_desc = TensorDescriptor.from_tensor(w, [bn, bk])
    _splitk_tma_kernel[(n // bn, splits)](
        x, w_desc, part, ss, m, n, k, K_PER=k // splits, BM=bm, BN=bn, BK=bk, num_stages=stages, num_warps=warps
    )
    _splitk_finish_kernel[(n // 256,)](part, ss, y, m, n, k, 1e-6, SPLITS=splits, BM=bm, BN=256, num_warps=4)
    return y


def study_rmsnorm(dtypes: tuple[str, ...], which: str) -> None:
    from kernelwatch.kernels.fused_rmsnorm_matmul.api import fused_rmsnorm_matmul_forward

    shapes = [(1024, 8192, 4096), (4096, 4096, 4096)] if which == "rmsnorm" else [(16, 8192, 8192)]
    for dname in dtypes:
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dname]
        for m, k, n in shapes:
            g = torch.Generator(device="cuda").manual_seed(2)
            x = (torch.randn((m, k), generator=g, device="cuda") * 2).to(dtype)
            w = (torch.randn((n, k), generator=g, device="cuda") / math.sqrt(k)).to(dtype)
            gamma = (1 + 0.5 * torch.rand(k, generator=g, device="cuda")).to(dtype)
            wg = (w.float() * gamma.float()).to(dtype)
            xf = x.float()
            ref = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)) @ wg.float().T
            plain_ref = xf @ wg.float().T
            flops = 2 * m * n * k
            floor = max(flops / (PEAKS["mm_tflops"] * 1e12), (m * k + n * k + m * n) * 2 / (PEAKS["copy_gbps"] * 1e9))
            floor *= 1e3

            def check(fn, want=ref):
                out = fn()
                return float((out.float() - want).abs().max() / want.abs().max())

            case = f"{dname} {m}x{k}->{n}"
            attempt(
                "rmsnorm",
                case,
                "cuBLAS F.linear (no norm)",
                lambda: torch.nn.functional.linear(x, wg),
                lambda fn: check(fn, plain_ref),
                floor,
            )
            attempt(
                "rmsnorm",
                case,
                "F.rms_norm + F.linear",
                lambda: torch.nn.functional.linear(torch.nn.functional.rms_norm(x, (k,), gamma, 1e-6), w),
                check,
                floor,
            )
            attempt(
                "rmsnorm", case, "shipped fold_gamma", lambda: fused_rmsnorm_matmul_forward(x, w, gamma), check, floor
            )
            if which == "rmsnorm":
                configs = [
                    (128, 256, 64, 3, 8, True),
                    (128, 256, 64, 4, 8, True),
                    (128, 256, 64, 3, 8, False),
                    (128, 128, 64, 4, 8, True),
                    (128, 128, 64, 4, 4, True),
                    (128, 128, 128, 3, 8, True),
                    (64, 256, 64, 4, 4, True),
                ]
                for cfg in configs[:3]:
                    attempt(
                        "rmsnorm",
                        case,
                        f"TMA persistent GEMM only {cfg}",
                        lambda cfg=cfg: rms_gemm_tma(x, wg, cfg, norm=False),
                        lambda fn: check(fn, plain_ref),
                        floor,
                    )
                for cfg in configs:
                    attempt(
                        "rmsnorm",
                        case,
                        f"TMA persistent fused {cfg}",
                        lambda cfg=cfg: rms_gemm_tma(x, wg, cfg),
                        check,
                        floor,
                    )
                for cfg in configs[:2]:
                    attempt(
                        "rmsnorm",
                        case,
                        f"TMA persistent + rstd prepass {cfg}",
                        lambda cfg=cfg: rms_gemm_tma(x, wg, cfg, prepass=True),
                        check,
                        floor,
                    )
            else:
                for cfg in [
                    (64, 128, 4, 4, 4),
                    (64, 128, 8, 4, 4),
                    (32, 128, 8, 4, 4),
                    (64, 256, 4, 3, 4),
                    (128, 128, 4, 4, 4),
                    (64, 128, 16, 4, 4),
                    (32, 256, 8, 3, 4),
                    (64, 64, 8, 5, 4),
                    (128, 64, 8, 4, 4),
                    (64, 128, 8, 6, 4),
                ]:
                    attempt("decode", case, f"split-K {cfg}", lambda cfg=cfg: rms_splitk(x, wg, cfg), check, floor)
            torch.cuda.empty_cache()


def study_rmsnorm2(dtypes: tuple[str, ...]) -> None:
    """Second round: GEMM configurations, the prepass alone, their best pairing; decode split-K sweep."""
    for dname in dtypes:
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dname]
        for m, k, n in ((1024, 8192, 4096), (4096, 4096, 4096), (16, 8192, 8192)):
            g = torch.Generator(device="cuda").manual_seed(2)
            x = (torch.randn((m, k), generator=g, device="cuda") * 2).to(dtype)
            w = (torch.randn((n, k), generator=g, device="cuda") / math.sqrt(k)).to(dtype)
            xf = x.float()
            r64 = torch.rsqrt(xf.pow(2).mean(-1) + 1e-6)
            ref = (xf * r64[:, None]) @ w.float().T
            plain_ref = xf @ w.float().T
            floor = (
                max(
                    2 * m * n * k / (PEAKS["mm_tflops"] * 1e12),
                    (m * k + n * k + m * n) * 2 / (PEAKS["copy_gbps"] * 1e9),
                )
                * 1e3
            )

            def check(fn, want=ref):
                out = fn()
                return float((out.float() - want).abs().max() / want.abs().max())

            case = f"{dname} {m}x{k}->{n}"
            attempt(
                "rms2",
                case,
                "cuBLAS F.linear (no norm)",
                lambda: torch.nn.functional.linear(x, w),
                lambda fn: check(fn, plain_ref),
                floor,
                reps=50,
            )
            if m >= 1024:
                for pre in ((1, 8192, 8), (1, 4096, 4), (2, 4096, 8), (4, 2048, 8), (1, 2048, 4), (8, 1024, 8)):
                    if pre[1] > k:
                        continue
                    attempt(
                        "rms2",
                        case,
                        f"rstd prepass alone {pre}",
                        lambda pre=pre: rstd_prepass(x, *pre),
                        lambda fn: float((fn() - r64).abs().max() / r64.abs().max()),
                        m * k * 2 / (PEAKS["copy_gbps"] * 1e9) * 1e3,
                        reps=50,
                    )
                gemms = [
                    (128, 256, 64, 3, 8, False, 8),
                    (128, 256, 64, 3, 8, False, 4),
                    (128, 256, 64, 3, 8, False, 16),
                    (128, 256, 64, 3, 8, True, 8),
                    (256, 128, 64, 3, 8, False, 8),
                    (128, 256, 128, 2, 8, False, 8),
                    (128, 128, 64, 5, 4, False, 8),
                ]
                for cfg in gemms:
                    attempt(
                        "rms2",
                        case,
                        f"TMA GEMM only {cfg}",
                        lambda cfg=cfg: rms_gemm_tma(x, w, cfg[:6], norm=False, group_m=cfg[6]),
                        lambda fn: check(fn, plain_ref),
                        floor,
                        reps=50,
                    )
                for pre in ((1, 8192, 8), (2, 4096, 8), (1, 4096, 4), (4, 2048, 8)):
                    if pre[1] > k:
                        continue
                    cfg = gemms[0]
                    attempt(
                        "rms2",
                        case,
                        f"TMA GEMM {cfg} + prepass {pre}",
                        lambda cfg=cfg, pre=pre: rms_gemm_tma(x, w, cfg[:6], prepass=True, pre_cfg=pre, group_m=cfg[6]),
                        check,
                        floor,
                        reps=50,
                    )
            else:
                for cfg in (
                    (128, 128, 4, 3, 4),
                    (128, 128, 4, 4, 4),
                    (128, 128, 2, 4, 4),
                    (128, 256, 4, 3, 4),
                    (256, 128, 2, 3, 8),
                    (128, 128, 4, 3, 8),
                    (256, 64, 4, 4, 8),
                    (128, 64, 4, 6, 4),
                    (128, 256, 2, 3, 4),
                    (64, 256, 4, 3, 4),
                ):
                    attempt(
                        "decode2", case, f"split-K {cfg}", lambda cfg=cfg: rms_splitk(x, w, cfg), check, floor, reps=50
                    )
                    attempt(
                        "decode2",
                        case,
                        f"split-K TMA {cfg}",
                        lambda cfg=cfg: rms_splitk_tma(x, w, cfg),
                        check,
                        floor,
                        reps=50,
                    )
                attempt(
                    "decode2",
                    case,
                    "split-K (128,128,4,3,4) no finish (diagnostic)",
                    lambda: rms_splitk(x, w, (128, 128, 4, 3, 4), finish=False),
                    lambda fn: 0.0,
                    floor,
                    reps=50,
                )
            torch.cuda.empty_cache()


def study_rmsnorm3(dtypes: tuple[str, ...]) -> None:
    """Third round: sum of squares without a second launch (read twice; a phase before the GEMM);
    decode with the partials added by the last program."""
    for dname in dtypes:
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dname]
        for m, k, n in ((1024, 8192, 4096), (4096, 4096, 4096), (16, 8192, 8192), (2000, 4096, 4096)):
            g = torch.Generator(device="cuda").manual_seed(3)
            x = (torch.randn((m, k), generator=g, device="cuda") * 2).to(dtype)
            w = (torch.randn((n, k), generator=g, device="cuda") / math.sqrt(k)).to(dtype)
            xf = x.float()
            ref = (xf * torch.rsqrt(xf.pow(2).mean(-1) + 1e-6)[:, None]) @ w.float().T
            floor = (
                max(
                    2 * m * n * k / (PEAKS["mm_tflops"] * 1e12),
                    (m * k + n * k + m * n) * 2 / (PEAKS["copy_gbps"] * 1e9),
                )
                * 1e3
            )

            def check(fn):
                out = fn()
                return float((out.float() - ref).abs().max() / ref.abs().max())

            case = f"{dname} {m}x{k}->{n}"
            attempt(
                "rms3",
                case,
                "cuBLAS F.linear (no norm)",
                lambda: torch.nn.functional.linear(x, w),
                lambda fn: 0.0,
                floor,
                reps=50,
            )
            attempt(
                "rms3",
                case,
                "F.rms_norm + F.linear",
                lambda: torch.nn.functional.linear(torch.nn.functional.rms_norm(x, (k,), None, 1e-6), w),
                check,
                floor,
                reps=50,
            )
            if m >= 1024:
                gemm = (128, 256, 64, 3, 8)
                attempt(
                    "rms3",
                    case,
                    f"TMA GEMM {gemm} + prepass (1,8192,8)",
                    lambda: rms_gemm_tma(x, w, (*gemm, False), prepass=True, pre_cfg=(1, min(k, 8192), 8)),
                    check,
                    floor,
                    reps=50,
                )
                for ss_cols in (64, 32):
                    attempt(
                        "rms3",
                        case,
                        f"read twice {gemm} ss_cols={ss_cols}",
                        lambda ss_cols=ss_cols: rms_gemm_twice(x, w, gemm, ss_cols),
                        check,
                        floor,
                        reps=50,
                    )
                for r_rows, rk in ((8, 1024), (4, 2048), (2, 4096), (16, 512)):

                    def run(r_rows=r_rows, rk=rk):
                        return rms_gemm_phase(x, w, gemm, r_rows, rk)

                    before = int(_PHASE_STATE[x.device][0][2]) if x.device in _PHASE_STATE else 0
                    attempt("rms3", case, f"phase-1 rstd {gemm} R={r_rows} RK={rk}", run, check, floor, reps=50)
                    after = int(_PHASE_STATE[x.device][0][2]) if x.device in _PHASE_STATE else 0
                    print(f"    epilogues that computed their own rows: {after - before}", flush=True)
            else:
                for cfg in (
                    (128, 128, 2, 4, 4),
                    (128, 128, 4, 3, 4),
                    (128, 256, 2, 3, 4),
                    (128, 128, 4, 4, 4),
                    (64, 128, 4, 4, 4),
                    (64, 256, 4, 3, 4),
                    (128, 64, 4, 5, 4),
                    (64, 128, 8, 4, 4),
                ):
                    attempt(
                        "decode3",
                        case,
                        f"split-K fused finish {cfg}",
                        lambda cfg=cfg: rms_splitk_fused(x, w, cfg),
                        check,
                        floor,
                        reps=50,
                    )
            torch.cuda.empty_cache()


# =============================================================================================
# Cost per call: calls back to back, one sync at the end
# =============================================================================================
def study_percall() -> None:
    from kernelwatch.kernels import mse_loss as kw_mse
    from kernelwatch.kernels.mse_loss.api import mse_loss_forward

    for n in (4096, 1 << 20):
        for dname, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
            x = torch.randn(n, device="cuda", dtype=dtype)
            y = torch.randn(n, device="cuda", dtype=dtype)
            case = f"mse {dname} n={n}"
            for name, fn in (
                ("F.mse_loss", lambda: torch.nn.functional.mse_loss(x, y)),
                ("kernelwatch.kernels.mse_loss (public)", lambda: kw_mse(x, y)),
                ("mse_loss_forward", lambda: mse_loss_forward(x, y, "mean", "persistent")),
                ("empty()+empty() only", lambda: (torch.empty((), device="cuda"), torch.empty(528, device="cuda"))),
            ):
                try:
                    us = per_call_us(fn)
                    RESULTS.append({"study": "percall", "case": case, "impl": name, "us_per_call": us})
                    print(f"  {case:<26} {name:<44} {us:9.2f} us/call", flush=True)
                except Exception as exc:
                    print(f"  {case:<26} {name:<44} failed: {exc}", flush=True)


@triton.jit
def _noop_kernel(x_ptr):
    pass


def study_percall2() -> None:
    """Where the host time of one MSELoss call goes (interleaved, best of several rounds)."""
    import importlib

    km_api = importlib.import_module("kernelwatch.kernels.mse_loss.api")
    km_plans = importlib.import_module("kernelwatch.kernels.mse_loss.plans")
    km_kernel = importlib.import_module("kernelwatch.kernels.mse_loss.kernel")

    out = torch.empty((), device="cuda")
    for n in (4096, 1 << 20):
        x = torch.randn(n, device="cuda")
        y = torch.randn(n, device="cuda")
        from kernelwatch.kernels.device import describe

        step = km_plans.forward_plan(n, "mean", "persistent", "fp32", describe(x.device))[0]
        grid, block, warps = step.grid[0], step.constexprs["BLOCK"], step.num_warps
        candidates = {
            "F.mse_loss": lambda: torch.nn.functional.mse_loss(x, y),
            "kernelwatch.kernels.mse_loss": lambda: km_api.mse_loss(x, y),
            "mse_loss_forward": lambda: km_api.mse_loss_forward(x, y, "mean", "persistent"),
            "torch.empty(())": lambda: torch.empty((), device="cuda"),
            "noop triton launch (1 arg)": lambda: _noop_kernel[(1,)](x),
            "plan lookup": lambda: km_plans.forward_plan(n, "mean", "persistent", "fp32", describe(x.device)),
            "x.is_contiguous()+view": lambda: x.view(-1) if x.is_contiguous() else None,
        }
        if grid == 1:
            candidates["raw persistent launch (single)"] = lambda: km_kernel._mse_persistent_kernel[(1,)](
                x,
                y,
                out,
                out,
                out,
                n,
                1.0 / n,
                BLOCK=block,
                SINGLE=True,
                FUSED_FINISH=False,
                FINISH_BLOCK=1,
                num_warps=warps,
            )
        best = {name: math.inf for name in candidates}
        for _ in range(5):
            for name, fn in candidates.items():
                best[name] = min(best[name], per_call_us(fn, calls=1000))
        for name, us in best.items():
            RESULTS.append({"study": "percall2", "case": f"fp32 n={n}", "impl": name, "us_per_call": us})
            print(f"  {'fp32 n=' + str(n):<26} {name:<44} {us:9.2f} us/call", flush=True)


PEAKS: dict[str, float] = {}


def measure_peaks() -> None:
    n = 1 << 28
    a = torch.randn(n, device="cuda")
    b = torch.empty_like(a)
    copy, _, _ = time_ms(lambda: b.copy_(a), reps=20)
    PEAKS["copy_gbps"] = 2 * n * 4 / (copy * 1e-3) / 1e9
    read, _, _ = time_ms(lambda: a.max(), reps=20)
    PEAKS["read_gbps"] = n * 4 / (read * 1e-3) / 1e9
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.float16)
    b = torch.randn(m, m, device="cuda", dtype=torch.float16)
    mm, _, _ = time_ms(lambda: a @ b, reps=10)
    PEAKS["mm_tflops"] = 2 * m**3 / (mm * 1e-3) / 1e12
    torch.cuda.empty_cache()
    print(
        f"ceilings: copy {PEAKS['copy_gbps']:.0f} GB/s, read {PEAKS['read_gbps']:.0f} GB/s, "
        f"fp16 mm {PEAKS['mm_tflops']:.0f} TFLOP/s",
        flush=True,
    )


def main() -> None:
    global FLUSH
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="softmax,rmsnorm,decode,percall")
    parser.add_argument("--dtypes", default="fp16")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_dev.py: no CUDA device visible; these studies time kernels on an NVIDIA GPU (Hopper for TMA)")
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}", flush=True)
    FLUSH = torch.ones(512 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    measure_peaks()
    dtypes = tuple(args.dtypes.split(","))
    started = time.time()
    for study in args.only.split(","):
        print(f"\n== {study} ({time.time() - started:.0f} s)", flush=True)
        try:
            if study == "softmax":
                study_softmax(dtypes)
            elif study in ("rmsnorm", "decode"):
                study_rmsnorm(dtypes, study)
            elif study == "rms3":
                study_rmsnorm3(dtypes)
            elif study == "rms2":
                study_rmsnorm2(dtypes)
            elif study == "percall2":
                study_percall2()
            elif study == "percall":
                study_percall()
        except Exception:
            traceback.print_exc()
        if args.out:
            Path(args.out).write_text(json.dumps({"peaks": PEAKS, "results": RESULTS}, indent=1))
    print(f"\ndone in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
