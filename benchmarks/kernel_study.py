"""Kernel study on one GPU (the peers goals of docs/kernels.md): candidates checked against float64 and timed
beside what `kernelwatch/kernels/` ships.

    python benchmarks/kernel_study.py [--only causal,decode,gemm,masked] [--budget-s 220]

Every candidate runs on fresh random inputs into NaN-poisoned outputs: no NaN may be left anywhere, and a
slice of the output (whole rows) is compared with a float64 reference (error budget <= 1 with the spec's
tolerance). Timing is the collector's own: ``kernelwatch.collect.backends.Backend.time_samples`` (L2 flushed by a
read before each sample, samples behind a spin kernel, CUDA events, median). Floors use the copy and read
ceilings measured at the start of the same run (``Backend.measure_peaks``). Prints one compact table at the
end; kernelwatch/kernels/NOTES.md quotes it. Sections stop starting new candidates once ``--budget-s`` has passed.
"""

from __future__ import annotations

import argparse
import importlib
import math
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import triton
import triton.language as tl

ROWS_OUT: list[tuple] = []  # (section, case, candidate, ok, median_us, p20, p80, derived)
START = time.perf_counter()
BUDGET_S = 220.0
BACKEND = None
PEAKS: dict = {}
SMOKE = False  # --smoke: tiny shapes on the CPU through the interpreter (tests the script, times nothing real)
DEV = torch.device("cuda")


def empty_cache() -> None:
    if DEV.type == "cuda":
        torch.cuda.empty_cache()


try:  # programmatic dependent launch (Hopper): the GEMM may start while the prepass drains
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    HAVE_PDL = True
except Exception:
    HAVE_PDL = False


def out_of_time() -> bool:
    return time.perf_counter() - START > BUDGET_S


def budget(out: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float) -> float:
    diff = (out.double() - ref.double()).abs()
    return float((diff / (atol + rtol * ref.double().abs())).max())


def record(section: str, case: str, cand: str, fn, check=None, derive=None, calls: bool = False) -> float | None:
    """Check (``check()`` -> error budget or raises), then time ``fn``; one table row."""
    if out_of_time():
        ROWS_OUT.append((section, case, cand, "skip", None, None, None, "out of time"))
        return None
    try:
        ok = "-"
        if check is not None:
            b = check()
            ok = f"{b:.2f}" if b <= 1.0 else f"FAIL {b:.3g}"
            if b > 1.0:
                ROWS_OUT.append((section, case, cand, ok, None, None, None, ""))
                return None
        if SMOKE:  # the script's paths, not a timing
            fn()
            ROWS_OUT.append((section, case, cand, ok, None, None, None, "smoke: ran"))
            return 1.0
        s = sorted(BACKEND.time_samples(fn))
        med = statistics.median(s) * 1e3
        p20, p80 = s[int(0.2 * (len(s) - 1))] * 1e3, s[int(0.8 * (len(s) - 1))] * 1e3
        extra = derive(med) if derive else ""
        if calls:
            extra += f" call {statistics.median(BACKEND.call_samples(fn)) * 1e3:.1f}us"
        ROWS_OUT.append((section, case, cand, ok, med, p20, p80, extra))
        return med
    except Exception as exc:
        msg = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:90] if str(exc).strip() else ''}"
        ROWS_OUT.append((section, case, cand, "ERR", None, None, None, msg))
        traceback.print_exc(limit=2)
        return None


def pct(nbytes: float, gbps_key: str = "peak_gbps"):
    def f(med_us: float) -> str:
        floor_us = nbytes / (PEAKS[gbps_key] * 1e9) * 1e6
        return f"{100 * floor_us / med_us:.1f}% floor({floor_us:.1f}us)"

    return f


def poisoned(fn):
    """``fn()`` with the kernels' outputs allocated NaN-filled (kernelwatch.kernels.poison), as the accuracy suite runs
    them."""
    from kernelwatch.kernels.poison import poisoned_outputs

    def run():
        with poisoned_outputs():
            return fn()

    return run


def nan_free(t: torch.Tensor) -> None:
    if torch.isnan(t).any():
        raise AssertionError("NaN left in the output (an element was not written)")


# ---------------------------------------------------------------------------------------------
# Causal softmax
# ---------------------------------------------------------------------------------------------
@triton.jit
def _old_causal_fwd(x_ptr, y_ptr, n_rows, sk, scale2, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    """What main shipped before this study: the element-exact mask `cols <= q` on the load."""
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    inb = (row < n_rows)[:, None] & (cols[None, :] < sk)
    valid = inb & (cols[None, :] <= (row % sk)[:, None])
    offs = row[:, None].to(tl.int64) * sk + cols[None, :]
    x = tl.load(x_ptr + offs, mask=valid, other=0.0, eviction_policy="evict_first").to(tl.float32)
    z = tl.where(valid, x * scale2, float("-inf"))
    m = tl.max(z, axis=1)
    e = tl.exp2(z - m[:, None])
    s = tl.sum(e, axis=1)
    tl.store(y_ptr + offs, (e * (1.0 / s)[:, None]).to(y_ptr.dtype.element_ty), mask=inb)


@triton.jit
def _causal_fwd_blocks(
    x_ptr, y_ptr, n_rows, sk, scale2, ROWS: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr
):
    """Candidate: the row tile is processed in CHUNK-wide column blocks; blocks wholly above the diagonal of
    every row of the tile are neither loaded nor computed (a scalar branch), only written as zeros."""
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = row < n_rows
    q = row % sk
    q_last = (tl.program_id(0) * ROWS + ROWS - 1) % sk
    q_last = tl.where(q_last < (tl.program_id(0) * ROWS) % sk, sk - 1, q_last)  # a tile across two matrices
    base = row[:, None].to(tl.int64) * sk
    m = tl.full([ROWS], float("-inf"), tl.float32)
    s = tl.zeros([ROWS], tl.float32)
    for c0 in range(0, q_last + 1, CHUNK):  # online (max, sum) over the kept blocks only
        cols = c0 + tl.arange(0, CHUNK)
        ok = row_ok[:, None] & (cols[None, :] < sk) & (((cols // 16) * 16)[None, :] <= q[:, None])
        x = tl.load(x_ptr + base + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        z = tl.where(cols[None, :] <= q[:, None], x * scale2, float("-inf"))
        m_new = tl.maximum(m, tl.max(z, axis=1))
        s = s * tl.exp2(m - m_new) + tl.sum(tl.exp2(z - m_new[:, None]), axis=1)
        m = m_new
    inv = 1.0 / s
    for c0 in range(0, sk, CHUNK):
        cols = c0 + tl.arange(0, CHUNK)
        st = row_ok[:, None] & (cols[None, :] < sk)
        if c0 <= q_last:
            ok = st & (((cols // 16) * 16)[None, :] <= q[:, None])
            x = tl.load(x_ptr + base + cols[None, :], mask=ok, other=0.0).to(tl.float32)
            z = tl.where(cols[None, :] <= q[:, None], x * scale2, float("-inf"))
            y = tl.exp2(z - m[:, None]) * inv[:, None]
        else:
            y = tl.zeros([ROWS, CHUNK], tl.float32)
        tl.store(y_ptr + base + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=st)


@triton.jit
def _causal_persistent(
    x_ptr, y_ptr, n_rows, sk, scale2, ROWS: tl.constexpr, BLOCK_N: tl.constexpr, STORE_CS: tl.constexpr
):
    """Candidate: the shipped grouped-mask causal tile, looped over row tiles by a fixed grid (STORE_CS: y
    stored with the streaming cache hint)."""
    cols = tl.arange(0, BLOCK_N)
    for tile in range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)):
        row = tile * ROWS + tl.arange(0, ROWS)
        q = row % sk
        inb = (row < n_rows)[:, None] & (cols[None, :] < sk)
        ok = inb & (((cols // 16) * 16)[None, :] <= q[:, None])
        offs = row[:, None].to(tl.int64) * sk + cols[None, :]
        x = tl.load(x_ptr + offs, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        z = tl.where(cols[None, :] <= q[:, None], x * scale2, float("-inf"))
        m = tl.max(z, axis=1)
        e = tl.exp2(z - m[:, None])
        y = (e * (1.0 / tl.sum(e, axis=1))[:, None]).to(y_ptr.dtype.element_ty)
        if STORE_CS:
            tl.store(y_ptr + offs, y, mask=inb, cache_modifier=".cs")
        else:
            tl.store(y_ptr + offs, y, mask=inb)


def study_causal() -> None:
    smx_api = importlib.import_module("kernelwatch.kernels.scaled_masked_softmax.api")
    smx_kernel = importlib.import_module("kernelwatch.kernels.scaled_masked_softmax.kernel")
    smx_plans = importlib.import_module("kernelwatch.kernels.scaled_masked_softmax.plans")
    smx_spec = importlib.import_module("kernelwatch.kernels.scaled_masked_softmax.spec")

    dev = DEV
    for shape in ((4, 64, 64), (2, 128, 128)) if SMOKE else ((512, 512, 512), (512, 2048, 2048)):
        b, sq, _ = shape
        n = b * sq * sq
        kept = smx_spec.causal_kept(shape)
        for dtype in (torch.float16, torch.bfloat16):
            name = f"{list(shape)} {str(dtype)[6:]}"
            size = 2
            tol = smx_spec.TOLERANCES["fp16" if dtype == torch.float16 else "bf16"]
            x = torch.randn(shape, device=dev, dtype=torch.float32).mul_(4.0).to(dtype)
            n_rows = b * sq
            sl = min(b, max(1, (1 << 23) // (sq * sq)))  # whole matrices checked against float64
            ref = smx_spec.reference_forward(x[:sl], None, 0.125, causal=True).to(dev)

            def check_with(run):
                def c() -> float:
                    y = torch.full_like(x, float("nan"))
                    run(y)
                    nan_free(y)
                    return budget(y[:sl], ref, tol.rtol, tol.atol)

                return c

            full = pct((2 * n) * size)
            causal_floor = pct((kept + n) * size)
            shipped = poisoned(lambda: smx_api.scaled_upper_triang_masked_softmax_forward(x, 0.125))

            def check_shipped() -> float:
                y = shipped()
                nan_free(y)
                return budget(y[:sl], ref, tol.rtol, tol.atol)

            record(
                "causal",
                name,
                "shipped",
                lambda: smx_api.scaled_upper_triang_masked_softmax_forward(x, 0.125),
                check_shipped,
                causal_floor,
            )
            if dtype != torch.float16:
                continue
            old_rows, old_block, old_warps, _ = smx_plans._plan("nvidia", sq)
            y = torch.empty_like(x)

            def old(y=y, rows=old_rows, block=old_block, warps=old_warps):
                _old_causal_fwd[(triton.cdiv(n_rows, rows),)](
                    x, y, n_rows, sq, 0.125 * smx_api.LOG2E, ROWS=rows, BLOCK_N=block, num_warps=warps
                )
                return y

            record(
                "causal",
                name,
                f"old exact-mask R{old_rows} W{old_warps}",
                old,
                check_with(lambda yy: old(y=yy)),
                lambda t: full(t) + " | " + causal_floor(t),
            )
            block = triton.next_power_of_2(sq)
            tried = {(old_rows, old_warps)}
            for tile, warps in (
                (1024, 4),
                (1024, 2),
                (2048, 2),
                (2048, 4),
                (4096, 2),
                (4096, 4),
                (4096, 8),
                (8192, 4),
                (8192, 8),
            ):
                rows = max(1, tile // block)
                if (rows, warps) in tried:
                    continue
                tried.add((rows, warps))

                def cand(y=y, rows=rows, warps=warps):
                    smx_kernel._softmax_fwd_kernel[(b * triton.cdiv(sq, rows),)](
                        x,
                        x,
                        y,
                        n_rows,
                        sq,
                        sq,
                        1,
                        0,
                        sq,
                        0.125 * smx_api.LOG2E,
                        ROWS=rows,
                        BLOCK_N=block,
                        HAS_MASK=False,
                        CAUSAL=True,
                        ACC=tl.float32,
                        num_warps=warps,
                    )
                    return y

                record(
                    "causal",
                    name,
                    f"grouped R{rows} W{warps}",
                    cand,
                    check_with(lambda yy, c=cand: c(y=yy)),
                    causal_floor,
                )
            sms = torch.cuda.get_device_properties(dev).multi_processor_count if not SMOKE else 2
            for tile, warps, waves, cs in (
                (2048, 4, 8, False),
                (2048, 4, 16, False),
                (4096, 4, 8, False),
                (2048, 2, 16, False),
                (2048, 4, 16, True),
            ):
                rows = max(1, tile // block)

                def per(y=y, rows=rows, warps=warps, waves=waves, cs=cs):
                    _causal_persistent[(sms * waves,)](
                        x, y, n_rows, sq, 0.125 * smx_api.LOG2E, ROWS=rows, BLOCK_N=block, STORE_CS=cs, num_warps=warps
                    )
                    return y

                record(
                    "causal",
                    name,
                    f"persistent R{rows} W{warps} x{waves}/SM{' st.cs' if cs else ''}",
                    per,
                    check_with(lambda yy, c=per: c(y=yy)),
                    causal_floor,
                )
            for rows, chunk, warps in ((4, 256, 4), (4, 256, 2), (8, 128, 4), (8, 256, 4), (2, 512, 4), (4, 512, 4)):
                if chunk > block:
                    continue

                def blk(y=y, rows=rows, chunk=chunk, warps=warps):
                    _causal_fwd_blocks[(triton.cdiv(n_rows, rows),)](
                        x, y, n_rows, sq, 0.125 * smx_api.LOG2E, ROWS=rows, BLOCK_N=block, CHUNK=chunk, num_warps=warps
                    )
                    return y

                record(
                    "causal",
                    name,
                    f"blocks R{rows} C{chunk} W{warps}",
                    blk,
                    check_with(lambda yy, c=blk: c(y=yy)),
                    causal_floor,
                )
            # backward: the shipped causal path (lower triangles only) against the full-row one
            yv = smx_api.scaled_upper_triang_masked_softmax_forward(x, 0.125)
            dy = torch.randn(shape, device=dev, dtype=torch.float32).to(dtype)
            ref_b = smx_spec.reference_backward(
                smx_spec.reference_forward(x[:sl], None, 0.125, True), dy[:sl], 0.125
            ).to(dev)

            def check_b(causal: bool):
                def c() -> float:
                    dx = poisoned(lambda: smx_api.softmax_backward(yv, dy, 0.125, causal))()
                    nan_free(dx)
                    return budget(dx[:sl], ref_b, tol.rtol, tol.atol)

                return c

            bwd_floor = pct((2 * kept + n) * size)
            record(
                "causal",
                name + " bwd",
                "shipped causal",
                lambda: smx_api.softmax_backward(yv, dy, 0.125, True),
                check_b(True),
                bwd_floor,
            )
            record(
                "causal",
                name + " bwd",
                "full rows (old)",
                lambda: smx_api.softmax_backward(yv, dy, 0.125, False),
                check_b(False),
                bwd_floor,
            )
            empty_cache()


# ---------------------------------------------------------------------------------------------
# Masked softmax forward
# ---------------------------------------------------------------------------------------------
@triton.jit
def _heads_prefetch(
    x_ptr, m_ptr, y_ptr, sq, sk, H, mask_sb, scale2, ROWS: tl.constexpr, BLOCK_N: tl.constexpr, STORE_CS: tl.constexpr
):
    """Candidate: the heads kernel with the next head's x loaded before this head's reductions (STORE_CS: y
    stored with the streaming cache hint)."""
    pid = tl.program_id(0)
    q_blocks = tl.cdiv(sq, ROWS)
    b = pid // q_blocks
    q = (pid % q_blocks) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    inb = (q < sq)[:, None] & (cols < sk)[None, :]
    keep = (
        tl.load(m_ptr + b.to(tl.int64) * mask_sb + q[:, None].to(tl.int64) * sk + cols[None, :], mask=inb, other=1) == 0
    )
    offs = ((b * H).to(tl.int64) * sq + q)[:, None] * sk + cols[None, :]
    x = tl.load(x_ptr + offs, mask=inb, other=0.0, eviction_policy="evict_first")
    step = tl.cast(sq, tl.int64) * sk
    for h in range(H):
        ahead = step * (1 - (h + 1) // H)  # the last head reloads itself (from L2) instead of a guarded load
        nxt = tl.load(x_ptr + offs + ahead, mask=inb, other=0.0, eviction_policy="evict_first")
        z = tl.where(keep, x.to(tl.float32) * scale2, float("-inf"))
        m = tl.max(z, axis=1)
        m = tl.where(m == float("-inf"), 0.0, m)
        e = tl.exp2(z - m[:, None])
        s = tl.sum(e, axis=1)
        inv = tl.where(s > 0, 1.0 / s, 0.0)
        if STORE_CS:
            tl.store(y_ptr + offs, (e * inv[:, None]).to(y_ptr.dtype.element_ty), mask=inb, cache_modifier=".cs")
        else:
            tl.store(y_ptr + offs, (e * inv[:, None]).to(y_ptr.dtype.element_ty), mask=inb)
        offs += step
        x = nxt


def study_masked() -> None:
    smx_api = importlib.import_module("kernelwatch.kernels.scaled_masked_softmax.api")
    smx_kernel = importlib.import_module("kernelwatch.kernels.scaled_masked_softmax.kernel")
    smx_spec = importlib.import_module("kernelwatch.kernels.scaled_masked_softmax.spec")

    dev = DEV
    for shape in ((2, 3, 16, 16), (1, 2, 8, 64)) if SMOKE else smx_spec.PERF_SHAPES:
        b, h, sq, sk = shape
        n = b * h * sq * sk
        dtype = torch.float16
        tol = smx_spec.TOLERANCES["fp16"]
        name = f"{list(shape)} fp16"
        x = torch.randn(shape, device=dev, dtype=torch.float32).mul_(4.0).to(dtype)
        mask = torch.rand((b, 1, sq, sk), device=dev) < 0.1
        m8 = mask.view(torch.uint8)
        sl = max(1, min(b, (1 << 23) // (h * sq * sk)))
        ref = smx_spec.reference_forward(x[:sl], mask[:sl], 0.125).to(dev)
        floor = pct(2 * n * 2 + b * sq * sk)
        y = torch.empty_like(x)
        n_rows = b * h * sq
        s2 = 0.125 * smx_api.LOG2E

        def check_with(run):
            def c() -> float:
                y.fill_(float("nan"))
                run()
                nan_free(y)
                return budget(y[:sl], ref, tol.rtol, tol.atol)

            return c

        shipped = poisoned(lambda: smx_api.scaled_masked_softmax_forward(x, mask, 0.125))

        def check_shipped() -> float:
            out = shipped()
            nan_free(out)
            return budget(out[:sl], ref, tol.rtol, tol.atol)

        record(
            "masked",
            name,
            "shipped",
            lambda: smx_api.scaled_masked_softmax_forward(x, mask, 0.125),
            check_shipped,
            floor,
        )
        block = triton.next_power_of_2(sk)
        heads = [
            (max(1, tile // block), w)
            for tile, w in ((1024, 4), (2048, 2))
            if tile >= block and (max(1, tile // block), w) != (max(1, 2048 // block), 4)
        ]
        for rows, warps in heads:

            def hk(rows=rows, warps=warps):
                smx_kernel._softmax_fwd_heads_kernel[(b * triton.cdiv(sq, rows),)](
                    x,
                    m8,
                    y,
                    n_rows,
                    sk,
                    sq,
                    h,
                    sq * sk,
                    sk,
                    s2,
                    ROWS=rows,
                    BLOCK_N=block,
                    ACC=tl.float32,
                    num_warps=warps,
                )

            record("masked", name, f"heads R{rows} W{warps}", hk, check_with(hk), floor)
        for rows, warps, cs in (
            (max(1, 2048 // block), 4, False),
            (max(1, 1024 // block), 4, False),
            (max(1, 1024 // block), 2, False),
            (max(1, 2048 // block), 2, False),
            (max(1, 4096 // block), 4, False),
            (max(1, 4096 // block), 2, False),
            (max(1, 2048 // block), 4, True),
        ):
            if rows * block > 8192:
                continue

            def pf(rows=rows, warps=warps, cs=cs):
                _heads_prefetch[(b * triton.cdiv(sq, rows),)](
                    x, m8, y, sq, sk, h, sq * sk, s2, ROWS=rows, BLOCK_N=block, STORE_CS=cs, num_warps=warps
                )

            record(
                "masked", name, f"heads+prefetch R{rows} W{warps}{' st.cs' if cs else ''}", pf, check_with(pf), floor
            )
        for rows, warps in ((1, 8), (1, 4)):
            if sk < 4096:
                continue

            def rk(rows=rows, warps=warps):
                smx_kernel._softmax_fwd_kernel[(b * h * triton.cdiv(sq, rows),)](
                    x,
                    m8,
                    y,
                    n_rows,
                    sk,
                    sq,
                    h,
                    sq * sk,
                    sk,
                    s2,
                    ROWS=rows,
                    BLOCK_N=block,
                    HAS_MASK=True,
                    CAUSAL=False,
                    ACC=tl.float32,
                    num_warps=warps,
                )

            record("masked", name, f"row-tile R{rows} W{warps}", rk, check_with(rk), floor)
        empty_cache()


# ---------------------------------------------------------------------------------------------
# Fused RMSNorm + MatMul (prefill GEMM)
# ---------------------------------------------------------------------------------------------
@triton.jit
def _rstd_pdl_kernel(x_ptr, r_ptr, M, K, stride_xm, stride_xk, eps, BLOCK_K: tl.constexpr):
    gdc_launch_dependents()  # let the GEMM's programs start as soon as every prepass program has started
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row.to(tl.int64) * stride_xm + cols * stride_xk, mask=cols < K, other=0.0)
        acc += x.to(tl.float32) * x.to(tl.float32)
    tl.store(r_ptr + row, 1.0 / tl.sqrt(tl.sum(acc, axis=0) / K + eps))


@triton.jit
def _gemm_tile_ids(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    group = GROUP_M * num_pid_n
    first_m = (tile // group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % group) % size_m, (tile % group) // size_m


@triton.jit
def _gemm_pdl_kernel(
    a_desc,
    b_desc,
    c_desc,
    r_ptr,
    M,
    N,
    K,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
    PDL: tl.constexpr,
):
    """The shipped persistent TMA GEMM; with PDL it waits for the prepass only before its first epilogue."""
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
        if PDL:
            gdc_wait()
        acc = acc * tl.load(r_ptr + rows, mask=rows < M, other=0.0)[:, None]
        c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_desc.dtype))


def study_gemm() -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    frm_api = importlib.import_module("kernelwatch.kernels.fused_rmsnorm_matmul.api")
    frm_kernel = importlib.import_module("kernelwatch.kernels.fused_rmsnorm_matmul.kernel")
    frm_plans = importlib.import_module("kernelwatch.kernels.fused_rmsnorm_matmul.plans")
    frm_spec = importlib.import_module("kernelwatch.kernels.fused_rmsnorm_matmul.spec")

    dev = DEV
    sms = torch.cuda.get_device_properties(dev).multi_processor_count if not SMOKE else 2
    for (m, k), n in (
        (((64, 128), 64),) if SMOKE else (((1024, 8192), 4096), ((4096, 4096), 4096), ((8192, 4096), 14336))
    ):
        for dtype in (torch.float16, torch.bfloat16):
            dname = "fp16" if dtype == torch.float16 else "bf16"
            name = f"[{m},{k}]->{n} {dname}"
            tol = frm_spec.tolerance(dname, k)
            gen = torch.Generator(device=dev).manual_seed(m + n)
            x = (torch.randn((m, k), device=dev, generator=gen) * 2).to(dtype)
            w = (torch.randn((n, k), device=dev, generator=gen) / math.sqrt(k)).to(dtype)
            g = (1 + 0.5 * torch.rand(k, device=dev, generator=gen)).to(dtype)
            sl = 128
            xs = x[:sl].double()
            ref = torch.nn.functional.linear(
                xs * torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + 1e-6) * g.double(), w.double()
            )
            cublas = record("gemm", name, "cuBLAS F.linear alone", lambda: torch.nn.functional.linear(x, w))
            ratio = (lambda t: f"{t / cublas:.3f}x cuBLAS") if cublas else None

            def check_fn(run):
                def c() -> float:
                    y = run()
                    nan_free(y)
                    return budget(y[:sl], ref, tol.rtol, tol.atol)

                return c

            shipped = lambda: frm_api.fused_rmsnorm_matmul_forward(x, w, g, None, 1e-6)
            record("gemm", name, "shipped", shipped, check_fn(poisoned(shipped)), ratio)
            if not SMOKE and not frm_plans.HOPPER_PDL:  # the launcher's own PDL path (plan flag flipped for this row)
                frm_plans.HOPPER_PDL = True
                frm_plans.forward_plan.cache_clear()
                try:
                    record("gemm", name, "shipped with HOPPER_PDL", shipped, check_fn(poisoned(shipped)), ratio)
                finally:
                    frm_plans.HOPPER_PDL = False
                    frm_plans.forward_plan.cache_clear()
            if dname == "bf16" and (m, k) == (4096, 4096):
                continue
            wf = frm_api.FOLDED.get(w, g)
            rstd = torch.empty(m, device=dev, dtype=torch.float32)
            block_k = min(triton.next_power_of_2(k), 8192)
            for bm, bn, bk, stages, warps, group, pdl in (
                (128, 256, 64, 3, 8, 8, False),
                (128, 256, 64, 3, 8, 8, True),
                (128, 256, 64, 3, 8, 16, False),
                (128, 256, 64, 3, 8, 4, False),
            ):
                if (pdl and not HAVE_PDL) or SMOKE:  # TMA and PDL need the GPU
                    continue
                y = torch.empty((m, n), device=dev, dtype=dtype)
                progs = min(sms, triton.cdiv(m, bm) * triton.cdiv(n, bn))
                da = TensorDescriptor.from_tensor(x, [bm, bk])
                db = TensorDescriptor.from_tensor(wf, [bn, bk])
                dc = TensorDescriptor.from_tensor(y, [bm, bn])

                def run(
                    y=y,
                    da=da,
                    db=db,
                    dc=dc,
                    bm=bm,
                    bn=bn,
                    bk=bk,
                    stages=stages,
                    warps=warps,
                    group=group,
                    pdl=pdl,
                    progs=progs,
                ):
                    if pdl:
                        _rstd_pdl_kernel[(m,)](
                            x, rstd, m, k, x.stride(0), 1, 1e-6, BLOCK_K=block_k, num_warps=8 if block_k >= 8192 else 4
                        )
                    else:
                        frm_kernel._rstd_kernel[(m,)](
                            x,
                            rstd,
                            m,
                            k,
                            x.stride(0),
                            1,
                            1e-6,
                            ROWS=1,
                            BLOCK_K=block_k,
                            num_warps=8 if block_k >= 8192 else 4,
                        )
                    _gemm_pdl_kernel[(progs,)](
                        da,
                        db,
                        dc,
                        rstd,
                        m,
                        n,
                        k,
                        BM=bm,
                        BN=bn,
                        BK=bk,
                        GROUP_M=group,
                        NUM_SMS=progs,
                        PDL=pdl,
                        num_warps=warps,
                        num_stages=stages,
                        launch_pdl=pdl,
                    )
                    return y

                record(
                    "gemm",
                    name,
                    f"{bm}x{bn}x{bk} s{stages} w{warps} g{group}{' pdl' if pdl else ''}",
                    run,
                    check_fn(lambda y=y, run=run: (y.fill_(float("nan")), rstd.fill_(float("nan")), run())[-1]),
                    ratio,
                )
            if (m, k) == (1024, 8192) and dname == "fp16":
                for warps in (4, 8, 16):
                    record(
                        "gemm",
                        name,
                        f"prepass alone 1 row w{warps}",
                        lambda w_=warps: frm_kernel._rstd_kernel[(m,)](
                            x, rstd, m, k, x.stride(0), 1, 1e-6, ROWS=1, BLOCK_K=block_k, num_warps=w_
                        ),
                        derive=pct(m * k * 2, "peak_read_gbps"),
                    )
            frm_api.FOLDED.clear()
            empty_cache()


# ---------------------------------------------------------------------------------------------
# Decode [16, 8192] -> 8192
# ---------------------------------------------------------------------------------------------
@triton.jit
def _decode_swap_kernel(
    x_ptr,
    w,
    part_ptr,
    ss_ptr,
    count_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    eps,
    SPLITS: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    """Candidate: the shipped split-K decode kernel with the product swapped, acc^T = W' x^T: the weight tile
    (TMA, shared memory) is the wide left operand (BN rows), x^T the narrow right one (BM = 16 columns), the
    shape Hopper's asynchronous MMA takes (cuBLAS's small-M trick)."""
    pid_n = tl.program_id(0)
    s = tl.program_id(1)
    rows = tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    kk = tl.arange(0, BK)
    k_per = tl.cdiv(tl.cdiv(K, BK), SPLITS) * BK
    acc = tl.zeros((BN, BM), dtype=tl.float32)
    ss = tl.zeros((BM, BK), dtype=tl.float32)
    for k0 in range(s * k_per, min(s * k_per + k_per, K), BK):
        a = tl.load(
            x_ptr + rows[:, None].to(tl.int64) * stride_xm + (k0 + kk)[None, :],
            mask=(rows < M)[:, None] & ((k0 + kk) < K)[None, :],
            other=0.0,
        )
        b = w.load([pid_n * BN, k0])
        af = a.to(tl.float32)
        ss += af * af
        acc = tl.dot(b, tl.trans(a), acc)
    slot = (pid_n * SPLITS + s) * BM
    tl.store(part_ptr + (slot + rows[None, :]) * BN + tl.arange(0, BN)[:, None], acc)
    tl.store(ss_ptr + slot + rows, tl.sum(ss, axis=1))
    if tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel") == SPLITS - 1:
        total = tl.zeros((BM, BN), dtype=tl.float32)
        sumsq = tl.zeros((BM,), dtype=tl.float32)
        for t in tl.static_range(SPLITS):
            first = (pid_n * SPLITS + t) * BM
            total += tl.load(part_ptr + (first + rows[:, None]) * BN + tl.arange(0, BN)[None, :], cache_modifier=".cg")
            sumsq += tl.load(ss_ptr + first + rows, cache_modifier=".cg")
        total = total * (1.0 / tl.sqrt(sumsq / K + eps))[:, None]
        tl.store(
            y_ptr + rows[:, None].to(tl.int64) * N + cols[None, :],
            total.to(y_ptr.dtype.element_ty),
            mask=(rows < M)[:, None] & (cols < N)[None, :],
        )
        tl.atomic_xchg(count_ptr + pid_n, 0)


def study_decode() -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    frm_api = importlib.import_module("kernelwatch.kernels.fused_rmsnorm_matmul.api")
    frm_kernel = importlib.import_module("kernelwatch.kernels.fused_rmsnorm_matmul.kernel")
    frm_spec = importlib.import_module("kernelwatch.kernels.fused_rmsnorm_matmul.spec")

    dev = DEV
    m, k, n = (4, 256, 128) if SMOKE else (16, 8192, 8192)
    for dtype in (torch.float16, torch.bfloat16):
        dname = "fp16" if dtype == torch.float16 else "bf16"
        name = f"decode [16,8192]->8192 {dname}"
        tol = frm_spec.tolerance(dname, k)
        x = (torch.randn((m, k), device=dev) * 2).to(dtype)
        w = (torch.randn((n, k), device=dev) / math.sqrt(k)).to(dtype)
        g = (1 + 0.5 * torch.rand(k, device=dev)).to(dtype)
        xs = x.double()
        ref = torch.nn.functional.linear(
            xs * torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + 1e-6) * g.double(), w.double()
        )
        nbytes = (m * k + n * k + m * n) * 2
        read = pct(nbytes, "peak_read_gbps")
        cublas = record(
            "decode", name, "cuBLAS F.linear alone", lambda: torch.nn.functional.linear(x, w), derive=read, calls=True
        )

        def derive(t: float) -> str:
            return read(t) + (f" {t / cublas:.3f}x cuBLAS" if cublas else "")

        def check_fn(run):
            def c() -> float:
                y = run()
                nan_free(y)
                return budget(y, ref, tol.rtol, tol.atol)

            return c

        shipped = lambda: frm_api.fused_rmsnorm_matmul_forward(x, w, g, None, 1e-6)
        record("decode", name, "shipped fold_gamma", shipped, check_fn(poisoned(shipped)), derive, calls=True)
        record(
            "decode",
            name,
            "F.rms_norm + F.linear",
            lambda: torch.nn.functional.linear(torch.nn.functional.rms_norm(x, (k,), g, 1e-6), w),
            derive=derive,
            calls=True,
        )
        pre = lambda: frm_api.fused_rmsnorm_matmul_forward(x, w, g, None, 1e-6, "rstd_prepass")
        record("decode", name, "shipped rstd_prepass", pre, check_fn(poisoned(pre)), derive, calls=True)
        if dname == "bf16" or SMOKE:  # the candidates' TMA weight needs the GPU
            continue
        wf = frm_api.FOLDED.get(w, g)
        for bn, bk, splits, stages, warps in (
            (128, 128, 2, 4, 4),
            (128, 128, 2, 3, 4),
            (128, 128, 2, 5, 4),
            (128, 256, 2, 3, 4),
            (256, 128, 4, 3, 8),
            (256, 128, 4, 4, 4),
            (128, 128, 2, 4, 8),
        ):
            blocks = triton.cdiv(n, bn)
            part_floats = blocks * splits * 16 * bn
            scratch, counts = frm_api.DECODE_SCRATCH.buffers(dev, part_floats + blocks * splits * 16, blocks)
            parts, sums = scratch[:part_floats], scratch[part_floats : part_floats + blocks * splits * 16]
            desc = TensorDescriptor.from_tensor(wf, [bn, bk])
            y = torch.empty((m, n), device=dev, dtype=dtype)

            def run(
                bn=bn,
                bk=bk,
                splits=splits,
                stages=stages,
                warps=warps,
                desc=desc,
                y=y,
                parts=parts,
                sums=sums,
                counts=counts,
                blocks=blocks,
            ):
                frm_kernel._decode_splitk_kernel[(blocks, splits)](
                    x,
                    desc,
                    parts,
                    sums,
                    counts,
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
                    BM=16,
                    BN=bn,
                    BK=bk,
                    num_warps=warps,
                    num_stages=stages,
                )
                return y

            record(
                "decode",
                name,
                f"BN{bn} BK{bk} S{splits} s{stages} w{warps}",
                run,
                check_fn(lambda y=y, run=run: (y.fill_(float("nan")), run())[-1]),
                derive,
            )
        for bn, bk, splits, stages, warps in (
            (128, 128, 2, 4, 4),
            (128, 128, 2, 3, 4),
            (128, 256, 2, 3, 4),
            (64, 128, 2, 4, 4),
            (64, 256, 2, 3, 4),
            (128, 128, 4, 4, 4),
            (256, 128, 4, 3, 8),
            (64, 128, 1, 6, 4),
            (128, 64, 2, 6, 4),
            (256, 64, 2, 4, 8),
        ):
            blocks = triton.cdiv(n, bn)
            part_floats = blocks * splits * 16 * bn
            scratch, counts = frm_api.DECODE_SCRATCH.buffers(dev, part_floats + blocks * splits * 16, blocks)
            parts, sums = scratch[:part_floats], scratch[part_floats : part_floats + blocks * splits * 16]
            desc = TensorDescriptor.from_tensor(wf, [bn, bk])
            y = torch.empty((m, n), device=dev, dtype=dtype)

            def swap(
                bn=bn,
                bk=bk,
                splits=splits,
                stages=stages,
                warps=warps,
                desc=desc,
                y=y,
                parts=parts,
                sums=sums,
                counts=counts,
                blocks=blocks,
            ):
                _decode_swap_kernel[(blocks, splits)](
                    x,
                    desc,
                    parts,
                    sums,
                    counts,
                    y,
                    m,
                    n,
                    k,
                    x.stride(0),
                    1e-6,
                    SPLITS=splits,
                    BM=16,
                    BN=bn,
                    BK=bk,
                    num_warps=warps,
                    num_stages=stages,
                )
                return y

            record(
                "decode",
                name,
                f"swapAB BN{bn} BK{bk} S{splits} s{stages} w{warps}",
                swap,
                check_fn(lambda y=y, run=swap: (y.fill_(float("nan")), run())[-1]),
                derive,
            )
        frm_api.FOLDED.clear()


SECTIONS = {"causal": study_causal, "decode": study_decode, "gemm": study_gemm, "masked": study_masked}


def main() -> int:
    global BACKEND, BUDGET_S, SMOKE, DEV
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated sections: " + ",".join(SECTIONS))
    ap.add_argument("--budget-s", type=float, default=BUDGET_S, help="stop starting candidates after this")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU interpreter: checks the script")
    args = ap.parse_args()
    wanted = [s for s in args.only.split(",") if s] or list(SECTIONS)
    unknown = [s for s in wanted if s not in SECTIONS]
    if unknown:
        print(f"kernel_study: unknown section(s) {unknown}; known: {list(SECTIONS)}", file=sys.stderr)
        return 2
    SMOKE = args.smoke
    if SMOKE:
        DEV = torch.device("cpu")
    elif not torch.cuda.is_available():
        print("kernel_study: needs a CUDA GPU (none visible); --smoke runs tiny shapes on the CPU", file=sys.stderr)
        return 2
    BUDGET_S = args.budget_s
    from kernelwatch.collect.backends import Backend

    BACKEND = Backend(DEV, time_on_cpu=SMOKE)
    BACKEND.activate()
    PEAKS.update(BACKEND.measure_peaks())
    device_name = torch.cuda.get_device_name() if not SMOKE else "CPU smoke"
    print(
        f"{device_name} torch {torch.__version__} triton {triton.__version__} pdl={HAVE_PDL} "
        f"copy {PEAKS['peak_gbps']:.0f} GB/s read {PEAKS['peak_read_gbps']:.0f} GB/s "
        f"bf16 {PEAKS['peak_tflops']:.0f} TFLOP/s",
        flush=True,
    )
    for section in wanted:
        t0 = time.perf_counter()
        try:
            SECTIONS[section]()
        except Exception as exc:
            traceback.print_exc(limit=3)
            ROWS_OUT.append((section, "-", "section", "ERR", None, None, None, f"{type(exc).__name__}: {exc}"[:120]))
        print(f"[{section}] {time.perf_counter() - t0:.0f}s", flush=True)
    print("\nsection | case | candidate | err budget | median us | p20-p80 | derived")
    for sec, case, cand, ok, med, p20, p80, extra in ROWS_OUT:
        t = f"{med:.1f}" if med is not None else "-"
        r = f"{p20:.1f}-{p80:.1f}" if p20 is not None else "-"
        print(f"{sec} | {case} | {cand} | {ok} | {t} | {r} | {extra}")
    print(f"total {time.perf_counter() - START:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
