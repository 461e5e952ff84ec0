"""Launch plans of Fused LayerNorm + MatMul: pure functions of (M, N, K, dtype, variant, device description).

Every forward is the stats prepass, then the GEMM of one path (at decode shapes one launch: the split-K GEMM forms
the statistics from the x tiles it loads) (:func:`kernelwatch.kernels.norm_gemm.plan_path`):
autotuned tiles on NVIDIA, one program per AI core on Ascend; on Hopper the persistent TMA GEMM; at decode shapes K
split over programs. The tile tables and thresholds are :mod:`kernelwatch.kernels.norm_gemm`'s (tuned on the H200 for
the RMSNorm kernel's GEMM, the same GEMM: kernelwatch/kernels/NOTES.md)."""

from __future__ import annotations

import functools

from kernelwatch.kernels.fused_layernorm_matmul.kernel import (
    _fused_ln_matmul_kernel,
    _fused_ln_matmul_persistent_kernel,
    _ln_decode_splitk_kernel,
    _ln_gemm_tma_kernel,
    _ln_stats_kernel,
    _ln_stats_persistent_kernel,
)
from kernelwatch.kernels.norm_gemm import (
    LazyAutotuner,
    Plan,
    decode_step,
    gemm_ints,
    hopper_step,
    plan_path,
    prepass_step,
    tiles_step,
)
from kernelwatch.kernels.plan import DeviceInfo, Footprint, Launch, int_type, load, pointer, work

NAME = "fused_layernorm_matmul"
VARIANTS = ("fold_gamma",)  # center_prologue (A centred in the prologue) was dropped: kernelwatch/kernels/NOTES.md
FLAGS = ("HAS_C", "IEEE", "UPCAST")  # the constexprs the autotuner does not pick
AUTOTUNE_KEY = ("M", "N", "K", "HAS_C")

autotuned_kernel = LazyAutotuner(_fused_ln_matmul_kernel, AUTOTUNE_KEY)


def matmul_footprint(bm: int, bn: int, bk: int, dtype: str, has_c: bool) -> Footprint:
    """Unified-buffer tiles of one program (cube operands live in L1/L0; tail axes aligned to 512 B). Row
    statistics (mu, r) as (BM, 1) tiles for the whole tile; K loop: the A tile (multi-buffered). Epilogue:
    the fp32 accumulator, s and c, the cast output."""
    stats = [work("mean", (bm, 1)), work("rstd", (bm, 1))]
    loop = [*stats, load("a", (bm, bk), dtype)]
    epilogue = [*stats, work("acc", (bm, bn)), load("s", (bn,), "fp32")]
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
    """The mean / 1/std prepass: one row per program before the Hopper and NVIDIA decode GEMMs."""
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
    kernels = (_ln_stats_kernel, _ln_stats_persistent_kernel)
    return prepass_step(
        m, k, device, kernels, sig, one_row, lambda rows, block_k: _stats_footprint(rows, block_k, dtype)
    )


_STATS_SIG = {"mean_ptr": "*fp32", "rstd_ptr": "*fp32", "s_ptr": "*fp32", "c_ptr": "*fp32"}  # the epilogue's inputs
EPS = {"eps": "fp32"}


def plan_forward(
    m: int, n: int, k: int, dtype: str, variant: str, has_c: bool, device: DeviceInfo, dense: bool = True
) -> Plan:
    """The launches of ``fused_layernorm_matmul_forward`` for x ``[m, k]``, weight ``[n, k]`` (none when m or
    n is 0): the mean/rstd prepass, then the GEMM; at decode shapes the GEMM alone (it forms the statistics).
    ``has_c``: beta or bias is given (c = beta W^T + b). fold_gamma in fp16/bf16 takes the two fast paths of
    :func:`kernelwatch.kernels.norm_gemm.plan_path`, with the RMSNorm kernel's thresholds: decode shapes split K
    over programs; on Hopper, large problems use the persistent TMA GEMM when ``dense`` (rows contiguous and
    16-byte aligned)."""
    if variant not in VARIANTS:
        raise ValueError(f"{NAME}: variant must be one of {VARIANTS}, got {variant!r}")
    if m == 0 or n == 0:
        return Plan("tiles", ())
    path = plan_path(m, n, k, dtype, True, device, dense)
    if path == "decode":
        w_desc = dense and (device.capability or 0) >= 90
        scratch = {"s1_ptr": "*fp32", "s2_ptr": "*fp32", "count_ptr": "*i32", "s_ptr": "*fp32", "c_ptr": "*fp32"}
        flags = {"HAS_C": has_c}
        return Plan(path, (decode_step(_ln_decode_splitk_kernel, m, n, k, dtype, device, w_desc, scratch, EPS, flags),))
    if path == "hopper":
        gemm = hopper_step(_ln_gemm_tma_kernel, m, n, k, dtype, device, _STATS_SIG, {"HAS_C": has_c})
        return Plan(path, (_stats_step(m, k, dtype, device, one_row=True), gemm))
    ints = gemm_ints(m, n, k)
    sig = {
        "x_ptr": pointer(dtype),
        "w_ptr": pointer(dtype),
        **_STATS_SIG,
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
        "IEEE": dtype == "fp32",
        "UPCAST": device.interpreter and dtype == "bf16",
    }
    step = tiles_step(
        m,
        n,
        k,
        dtype,
        device,
        (_fused_ln_matmul_kernel, _fused_ln_matmul_persistent_kernel),
        sig,
        flags,
        lambda bm, bn, bk: matmul_footprint(bm, bn, bk, dtype, has_c),
        AUTOTUNE_KEY,
        NAME,
    )
    return Plan(path, (_stats_step(m, k, dtype, device, one_row=False), step))


@functools.lru_cache(maxsize=512)
def forward_plan(
    m: int, n: int, k: int, dtype: str, variant: str, has_c: bool, device: DeviceInfo, dense: bool
) -> Plan:
    return plan_forward(m, n, k, dtype, variant, has_c, device, dense)
