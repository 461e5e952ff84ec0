"""Launch plans of Fused RMSNorm + MatMul: pure functions of (M, N, K, dtype, variant, device description).

Autotuned tiles on NVIDIA (one program per output tile); on Ascend one program per AI core looping over the
output tiles, with a tile whose unified-buffer estimate fits (cube and vector work mix here, so tail axes are
aligned to 512 B). The tile tables and the path thresholds are :mod:`kernelwatch.kernels.norm_gemm`'s."""

from __future__ import annotations

import functools

from kernelwatch.kernels.fused_rmsnorm_matmul.kernel import (
    _decode_splitk_kernel,
    _fused_rmsnorm_matmul_kernel,
    _fused_rmsnorm_matmul_persistent_kernel,
    _rms_gemm_tma_kernel,
    _rstd_kernel,
    _rstd_pdl_kernel,
    _rstd_persistent_kernel,
    gdc_wait,
)
from kernelwatch.kernels.norm_gemm import (
    LazyAutotuner,
    Plan,
    decode_step,
    gemm_ints,
    hopper_step,
    prepass_step,
    tiles_step,
)
from kernelwatch.kernels.norm_gemm import plan_path as shared_plan_path
from kernelwatch.kernels.plan import DeviceInfo, Footprint, Step, load, pointer, work

NAME = "fused_rmsnorm_matmul"
VARIANTS = ("fold_gamma", "prologue_gamma", "rstd_prepass")
FLAGS = ("HAS_BIAS", "PROLOGUE_GAMMA", "RSTD_GIVEN", "IEEE", "UPCAST")  # the constexprs the autotuner does not pick
AUTOTUNE_KEY = ("M", "N", "K", "HAS_BIAS", "PROLOGUE_GAMMA", "RSTD_GIVEN")
# The prepass triggers its dependents at once and the GEMM (launched with PDL) waits for it only before its first
# epilogue, so the GEMM's main loop starts while the prepass drains (kernelwatch/kernels/NOTES.md, "Ahead of the
# peers").
HOPPER_PDL = False

autotuned_kernel = LazyAutotuner(_fused_rmsnorm_matmul_kernel, AUTOTUNE_KEY)


def matmul_footprint(
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


def _rstd_footprint(rows: int, block_k: int, dtype: str) -> Footprint:
    return Footprint(
        (
            (
                load("x", (rows, block_k), dtype),
                work("x_f32", (rows, block_k)),
                work("acc", (rows, block_k)),
                work("r", (rows, 1)),
            ),
        )
    )


def _rstd_signature(dtype: str, ints: str) -> dict[str, str]:
    return {
        "x_ptr": pointer(dtype),
        "r_ptr": "*fp32",
        "M": ints,
        "K": ints,
        "stride_xm": ints,
        "stride_xk": ints,
        "eps": "fp32",
    }


def _hopper_plan(m: int, n: int, k: int, dtype: str, has_bias: bool, device: DeviceInfo) -> tuple[Step, ...]:
    """The 1/rms prepass (one row per program) and the persistent TMA GEMM that scales by it."""
    pdl = HOPPER_PDL and gdc_wait is not None
    prepass = _rstd_pdl_kernel if pdl else _rstd_kernel
    rstd = prepass_step(m, k, device, (prepass, prepass), _rstd_signature(dtype, gemm_ints(m, n, k)), one_row=True)
    epilogue = {"r_ptr": "*fp32", "bias_ptr": pointer(dtype)}
    gemm = hopper_step(
        _rms_gemm_tma_kernel, m, n, k, dtype, device, epilogue, {"HAS_BIAS": has_bias}, {"PDL": pdl}, launch_pdl=pdl
    )
    return rstd, gemm


def _decode_plan(
    m: int, n: int, k: int, dtype: str, has_bias: bool, device: DeviceInfo, w_desc: bool
) -> tuple[Step, ...]:
    scratch = {"ss_ptr": "*fp32", "count_ptr": "*i32", "bias_ptr": pointer(dtype)}
    flags = {"HAS_BIAS": has_bias}
    return (decode_step(_decode_splitk_kernel, m, n, k, dtype, device, w_desc, scratch, {"eps": "fp32"}, flags),)


def plan_path(m: int, n: int, k: int, dtype: str, variant: str, device: DeviceInfo, dense: bool = True) -> str:
    """Which launches serve the problem (:func:`kernelwatch.kernels.norm_gemm.plan_path`; fold_gamma folds gamma into
    the weight): ``decode``, ``hopper`` (1/rms prepass + TMA GEMM) or ``tiles`` (the pointer GEMM, after the
    prepass for rstd_prepass)."""
    return shared_plan_path(m, n, k, dtype, variant == "fold_gamma", device, dense)


def plan_forward(
    m: int, n: int, k: int, dtype: str, variant: str, has_bias: bool, device: DeviceInfo, dense: bool = True
) -> tuple[Step, ...]:
    """The launches of ``fused_rmsnorm_matmul_forward`` for x ``[m, k]``, weight ``[n, k]`` (none when
    m or n is 0): the rstd prepass for that variant, then the GEMM (autotuned on NVIDIA for large problems).

    fold_gamma in fp16/bf16 takes two special paths (:func:`plan_path`): decode shapes split K over programs;
    on Hopper, large problems use the persistent TMA GEMM after a 1/rms prepass when ``dense``."""
    if variant not in VARIANTS:
        raise ValueError(f"{NAME}: variant must be one of {VARIANTS}, got {variant!r}")
    if m == 0 or n == 0:
        return ()
    path = plan_path(m, n, k, dtype, variant, device, dense)
    if path == "decode":
        return _decode_plan(m, n, k, dtype, has_bias, device, dense and (device.capability or 0) >= 90)
    if path == "hopper":
        return _hopper_plan(m, n, k, dtype, has_bias, device)
    prologue, rstd_given = variant == "prologue_gamma", variant == "rstd_prepass"
    ints = gemm_ints(m, n, k)
    steps: list[Step] = []
    if rstd_given:
        steps.append(
            prepass_step(
                m,
                k,
                device,
                (_rstd_kernel, _rstd_persistent_kernel),
                _rstd_signature(dtype, ints),
                one_row=False,
                footprint=lambda rows, block_k: _rstd_footprint(rows, block_k, dtype),
            )
        )
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
    steps.append(
        tiles_step(
            m,
            n,
            k,
            dtype,
            device,
            (_fused_rmsnorm_matmul_kernel, _fused_rmsnorm_matmul_persistent_kernel),
            sig,
            flags,
            lambda bm, bn, bk: matmul_footprint(bm, bn, bk, dtype, prologue, rstd_given, has_bias),
            AUTOTUNE_KEY,
            NAME,
        )
    )
    return tuple(steps)


@functools.lru_cache(maxsize=512)
def forward_plan(
    m: int, n: int, k: int, dtype: str, variant: str, has_bias: bool, device: DeviceInfo, dense: bool
) -> Plan:
    """(path, launches), cached per problem."""
    return Plan(
        plan_path(m, n, k, dtype, variant, device, dense),
        plan_forward(m, n, k, dtype, variant, has_bias, device, dense),
    )
