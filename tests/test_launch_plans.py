"""Launch plans: Ascend grids and unified-buffer footprints over every spec case, the CUDA launches kept as
they were, and the launchers starting exactly what the plans say (real kernels in the interpreter).

The checks over every spec take the specs as an argument (``specs`` / ``spec``) and know nothing of any
one kernel: tests/test_kernel_contract.py runs them on a planted kernel."""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
import triton

from kernelwatch import kernels
from kernelwatch.collect.accuracy import check_case
from kernelwatch.kernels.device import describe, simulated
from kernelwatch.kernels.plan import (
    ASCEND_910B,
    GRID_LIMIT,
    NVIDIA_A100,
    NVIDIA_H200,
    UB_BYTES,
    Autotuned,
    DeviceInfo,
    Footprint,
    Launch,
    Tile,
    check_args,
    launches,
    recording,
    tile_bytes,
)

ROOT = Path(__file__).resolve().parents[1]
SPECS = kernels.discover()
MSE = importlib.import_module("kernelwatch.kernels.mse_loss.plans")
SMX = importlib.import_module("kernelwatch.kernels.scaled_masked_softmax.plans")
FRM = importlib.import_module("kernelwatch.kernels.fused_rmsnorm_matmul.plans")
NORM_GEMM = importlib.import_module("kernelwatch.kernels.norm_gemm")
CPU = torch.device("cpu")


def _all_cases(specs: dict = SPECS) -> list:
    return [case for spec in specs.values() for case in (*spec.accuracy_cases(), *spec.perf_cases())]


def grid_violations(device: DeviceInfo, specs: dict = SPECS) -> list[str]:
    bad = []
    for case in _all_cases(specs):
        for step in launches(specs[case.kernel].launch_plans(case, device)):
            cores = device.cube_units if step.footprint and step.footprint.cube_vector else device.compute_units
            if step.programs > GRID_LIMIT or (device.vendor == "ascend" and step.programs > cores):
                bad.append(f"{case.key}: {step.name} launches {step.programs} programs")
    return bad


def unplanned_cases(device: DeviceInfo, specs: dict = SPECS) -> list[str]:
    """Cases with a non-empty input and no launch planned."""
    return [
        case.key
        for case in _all_cases(specs)
        if min(case.p.get("shape") or (1,)) > 0 and not specs[case.kernel].launch_plans(case, device)
    ]


def footprint_overruns(device: DeviceInfo, specs: dict = SPECS) -> list[str]:
    over = []
    for case in _all_cases(specs):
        for step in launches(specs[case.kernel].launch_plans(case, device)):
            if step.footprint is None:
                over.append(f"{case.key}: {step.name} has no footprint estimate")
            elif not step.footprint.fits():
                over.append(f"{case.key}: {step.name} {step.config()} needs {step.footprint.bytes} B")
    return over


def test_every_ascend_launch_is_a_persistent_grid_within_the_launch_limit() -> None:
    assert grid_violations(ASCEND_910B) == []


def test_the_grid_check_fails_on_one_program_per_tile_grids() -> None:
    """The check above can fail: NVIDIA's plans (one program per row tile) exceed 65,535 programs."""
    bad = grid_violations(NVIDIA_H200)
    assert any("scaled_masked_softmax" in b for b in bad) and any("mse_loss/atomic" in b for b in bad)


def test_every_case_of_every_kernel_has_a_plan_on_ascend() -> None:
    assert unplanned_cases(ASCEND_910B) == []


def test_every_ascend_launch_fits_the_unified_buffer() -> None:
    assert footprint_overruns(ASCEND_910B) == []


def test_the_footprint_estimate_flags_the_tiles_issue_12_suspected() -> None:
    """Softmax sk=1 with ROWS=4096, BLOCK_N=1 (each row padded to 32 B) and the 128x256x64 cube+vector
    tile of the fused kernel overflow 192 KB; the same numbers with 32 B alignment would not explain it."""
    assert SMX._fwd_footprint(4096, 1, "fp32", False, False).bytes > UB_BYTES
    assert FRM.matmul_footprint(128, 256, 64, "fp16", False, False, False).bytes > UB_BYTES


def test_tile_bytes_pads_the_last_axis() -> None:
    assert tile_bytes(Tile("v", (4096, 1), "fp32"), 32) == 4096 * 32  # a size-1 last axis takes 32 B
    assert tile_bytes(Tile("v", (8, 64), "fp16"), 32) == 8 * 128
    assert tile_bytes(Tile("v", (8, 64), "fp16"), 512) == 8 * 512  # cube+vector: 512 B tail
    assert tile_bytes(Tile("v", (100,), "fp32", buffers=2), 32) == 416 * 2
    fp = Footprint(((Tile("a", (10,), "fp32"),), (Tile("b", (100,), "fp32"),)))
    assert fp.phase_bytes() == (64, 416) and fp.bytes == 416


def test_ascend_softmax_rows_are_never_narrower_than_32_bytes() -> None:
    (step,) = SMX.plan_forward(2, 2, 1, 1, "fp32", None, False, ASCEND_910B)
    assert step.constexprs["BLOCK_N"] == 8 and step.footprint.fits()
    (step,) = SMX.plan_forward(2, 2, 1, 1, "fp16", None, False, ASCEND_910B)
    assert step.constexprs["BLOCK_N"] == 16


def test_cube_kernels_use_ai_cores_and_vector_kernels_vector_cores() -> None:
    steps = FRM.plan_forward(4096, 4096, 4096, "fp16", "rstd_prepass", False, ASCEND_910B)
    rstd, gemm = steps
    assert rstd.grid == (48,) and not rstd.footprint.cube_vector
    assert gemm.grid == (24,) and gemm.footprint.cube_vector and gemm.name == "_fused_rmsnorm_matmul_persistent_kernel"
    (step,) = SMX.plan_forward(32 * 16 * 2048, 2048, 16, 2048, "fp16", "u8", False, ASCEND_910B)
    assert step.grid == (48,) and step.name == "_softmax_fwd_persistent_kernel"


def _config(step: Launch) -> tuple:
    return (
        step.name,
        step.grid,
        {k: v for k, v in step.constexprs.items() if k != "ACC"},
        step.num_warps,
        step.num_stages,
    )


def test_nvidia_plans_keep_the_cuda_launches_measured_on_the_h200() -> None:
    """The CUDA grids, constexprs and warps are those of the H200 measurements (kernelwatch/kernels/NOTES.md)."""
    h200 = NVIDIA_H200
    assert [_config(s) for s in MSE.plan_forward(33_554_432, "mean", "persistent", "fp32", h200)] == [
        (
            "_mse_persistent_kernel",
            (528,),
            {"BLOCK": 8192, "SINGLE": False, "FUSED_FINISH": True, "FINISH_BLOCK": 1024},
            8,
            None,
        )
    ]
    assert [_config(s) for s in MSE.plan_forward(4096, "mean", "persistent", "fp16", h200)] == [
        (
            "_mse_persistent_kernel",
            (1,),
            {"BLOCK": 4096, "SINGLE": True, "FUSED_FINISH": False, "FINISH_BLOCK": 1},
            8,
            None,
        )
    ]
    assert [_config(s) for s in MSE.plan_forward(268_435_456, "mean", "atomic", "fp32", h200)] == [
        ("_mse_atomic_kernel", (262_144,), {"BLOCK": 1024}, None, None),
        ("_mse_finish_kernel", (1,), {"BLOCK": 2}, None, None),
    ]
    assert [_config(s) for s in MSE.plan_forward(1000, "none", "persistent", "bf16", h200)] == [
        ("_mse_none_kernel", (1,), {"BLOCK": 1024}, None, None)
    ]
    assert [_config(s) for s in MSE.plan_backward(5000, "sum", True, False, "fp16", h200)] == [
        (
            "_mse_backward_kernel",
            (5,),
            {"G_SCALAR": True, "WRITE_GX": True, "WRITE_GY": False, "BLOCK": 1024},
            None,
            None,
        )
    ]
    n_rows = 32 * 16 * 2048  # masked rows up to 2048: every head of a (batch, query row block) in one program
    assert [_config(s) for s in SMX.plan_forward(n_rows, 2048, 16, 2048, "fp16", "u8", False, h200)] == [
        ("_softmax_fwd_heads_kernel", (32 * 2048,), {"ROWS": 1, "BLOCK_N": 2048}, 4, None)
    ]
    assert [_config(s) for s in SMX.plan_forward(32 * 16 * 512, 512, 16, 512, "fp16", "u8", False, h200)] == [
        ("_softmax_fwd_heads_kernel", (32 * 128,), {"ROWS": 4, "BLOCK_N": 512}, 4, None)
    ]
    assert [_config(s) for s in SMX.plan_forward(8 * 16 * 4096, 4096, 16, 4096, "fp16", "u8", False, h200)] == [
        (
            "_softmax_fwd_kernel",
            (8 * 16 * 4096,),
            {"ROWS": 1, "BLOCK_N": 4096, "HAS_MASK": True, "CAUSAL": False},
            4,
            None,
        )
    ]
    # causal: 2048 elements a program, 2 warps (the masked rule's tiles, 4 or 8 warps were slower on the H200)
    assert [_config(s) for s in SMX.plan_forward(512 * 512, 512, 1, 512, "fp16", None, True, h200)] == [
        ("_softmax_fwd_kernel", (512 * 128,), {"ROWS": 4, "BLOCK_N": 512, "HAS_MASK": False, "CAUSAL": True}, 2, None)
    ]
    assert [_config(s) for s in SMX.plan_forward(512 * 2048, 2048, 1, 2048, "fp16", None, True, h200)] == [
        ("_softmax_fwd_kernel", (512 * 2048,), {"ROWS": 1, "BLOCK_N": 2048, "HAS_MASK": False, "CAUSAL": True}, 2, None)
    ]
    assert [_config(s) for s in SMX.plan_backward(2, 33000, "fp32", h200)] == [
        ("_softmax_bwd_looped_kernel", (2,), {"BLOCK_N": 4096, "CAUSAL": False}, 4, None)
    ]
    # fold_gamma on Hopper: the 1/rms prepass, one row per program, then the persistent TMA GEMM
    prepass, gemm = FRM.plan_forward(1024, 4096, 8192, "fp16", "fold_gamma", False, h200)
    assert _config(prepass) == ("_rstd_kernel", (1024,), {"ROWS": 1, "BLOCK_K": 8192}, 8, None)
    assert _config(gemm) == (
        "_rms_gemm_tma_kernel",
        (128,),
        {"HAS_BIAS": False, "BM": 128, "BN": 256, "BK": 64, "GROUP_M": 8, "NUM_SMS": 128, "PDL": False},
        8,
        3,
    )
    assert gemm.signature["a_desc"] == "tensordesc<fp16[128, 64]>"
    assert FRM.plan_forward(4096, 4096, 4096, "bf16", "fold_gamma", False, h200)[1].grid == (132,)
    # ... not on an A100, nor for rows TMA cannot describe, nor for the other variants: the autotuned GEMM
    for planned in (
        FRM.plan_forward(1024, 4096, 8192, "fp16", "fold_gamma", False, NVIDIA_A100),
        FRM.plan_forward(1024, 4096, 8192, "fp16", "fold_gamma", False, h200, dense=False),
        FRM.plan_forward(1024, 4096, 8192, "fp16", "prologue_gamma", False, h200),
    ):
        (tuned,) = planned
        assert isinstance(tuned, Autotuned) and len(tuned.candidates) == 14
        assert _config(tuned.candidates[0])[2]["BN"] == 256
    # decode: K split in two over 64 column blocks of 128, the last program of a block finishes it
    (decode,) = FRM.plan_forward(16, 8192, 8192, "bf16", "fold_gamma", False, h200)
    assert _config(decode) == (
        "_decode_splitk_kernel",
        (64, 2),
        {"HAS_BIAS": False, "W_DESC": True, "UPCAST": False, "SPLITS": 2, "BM": 16, "BN": 128, "BK": 128},
        4,
        4,
    )
    assert FRM.plan_forward(16, 8192, 8192, "bf16", "fold_gamma", False, NVIDIA_A100)[0].constexprs["W_DESC"] is False
    (tuned,) = FRM.plan_forward(16, 8192, 8192, "bf16", "rstd_prepass", False, h200)[1:]
    assert [c.constexprs["BM"] for c in tuned.candidates] == [16] * 5
    (small,) = FRM.plan_forward(7, 48, 100, "fp32", "fold_gamma", True, h200)
    assert _config(small)[1:] == (
        (1,),
        {
            "HAS_BIAS": True,
            "PROLOGUE_GAMMA": False,
            "RSTD_GIVEN": False,
            "IEEE": True,
            "UPCAST": False,
            "BM": 64,
            "BN": 64,
            "BK": 64,
            "GROUP_M": 8,
        },
        4,
        3,
    )
    rstd, _ = FRM.plan_forward(2048, 4096, 4096, "fp16", "rstd_prepass", False, NVIDIA_A100)
    assert _config(rstd) == ("_rstd_kernel", (512,), {"ROWS": 4, "BLOCK_K": 1024}, None, None)


def test_the_autotuner_prunes_to_the_planned_candidates() -> None:
    for m in (16, 64, 1024, 2048):
        configs = [
            triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP_M": 8}, num_stages=s, num_warps=w)
            for bm, bn, bk, s, w in NORM_GEMM.CUDA_TILES
        ]
        kept = NORM_GEMM.prune(configs, {"M": m})
        planned = FRM.plan_forward(m, 4096, 4096, "fp16", "prologue_gamma", False, NVIDIA_H200)[0]
        assert [(c.kwargs["BM"], c.kwargs["BN"], c.kwargs["BK"], c.num_warps, c.num_stages) for c in kept] == [
            (s.constexprs["BM"], s.constexprs["BN"], s.constexprs["BK"], s.num_warps, s.num_stages)
            for s in planned.candidates
        ]


def plan_sample(spec: kernels.KernelSpec, info: DeviceInfo | None) -> list:
    """The accuracy cases the launcher check runs for a spec: every ``spec.plan_sample``-th under the Ascend
    description, every 4x-th under the others (the CPU accuracy suite runs them all elsewhere); inputs of at
    most 300,000 elements."""
    every = spec.plan_sample * (1 if info is ASCEND_910B else 4)
    return [
        c
        for i, c in enumerate(spec.accuracy_cases())
        if i % every == 0 and kernels.spec.numel(c.p.get("shape") or (1,)) <= 300_000
    ]


def check_launchers(spec: kernels.KernelSpec, info: DeviceInfo | None) -> None:
    """Every launch the launchers make is the plan's (same kernel, grid, constexprs, warps; arguments of the
    planned types), and the results pass the accuracy check with the Ascend and NVIDIA tiles too."""
    cases = plan_sample(spec, info)
    assert cases
    for case in cases:
        with simulated(info) if info is not None else contextlib.nullcontext():
            device = describe(CPU)
            with recording() as rec:
                result = check_case(spec, case, CPU, seed=1)
        assert result.error is None and result.passed, (case.key, result)
        planned = list(spec.launch_plans(case, device))
        trials = case.trials
        assert rec.steps == planned * trials, f"{case.key}: launched {[s.name for s in rec.steps]}"


@pytest.mark.slow
@pytest.mark.parametrize("info", [None, ASCEND_910B, NVIDIA_H200], ids=["cpu", "ascend-910b", "nvidia-h200"])
@pytest.mark.parametrize("spec_name", sorted(SPECS))
def test_launchers_start_exactly_the_planned_launches_and_compute_right(spec_name, info) -> None:
    check_launchers(SPECS[spec_name], info)


@pytest.mark.slow
def test_the_hopper_and_decode_paths_compute_right_in_the_interpreter() -> None:
    """The TMA GEMM (with its 1/rms prepass) and the split-K decode kernel with a TMA weight, which only
    an H200 plan starts, run through the interpreter and pass the accuracy check."""
    spec = SPECS["fused_rmsnorm_matmul"]
    wanted = {
        "n=264,shape=130x256": ["_rstd_kernel", "_rms_gemm_tma_kernel"],
        "n=1040,shape=5x1024": ["_decode_splitk_kernel"],
    }
    for case in spec.accuracy_cases():
        names = next((v for k, v in wanted.items() if case.key.endswith(k)), None)
        if names is None or case.variant != "fold_gamma" or case.dtype != "fp16" or case.p["direction"] != "fwd":
            continue
        with simulated(NVIDIA_H200), recording() as rec:
            result = check_case(spec, case, CPU, seed=3)
        assert result.passed and result.error is None, (case.key, result)
        assert [s.name for s in rec.steps] == names * case.trials
        assert all(s.constexprs.get("W_DESC", True) for s in rec.steps)
        wanted.pop(next(k for k in wanted if case.key.endswith(k)))
    assert not wanted, f"no fp16 fold_gamma accuracy case for {sorted(wanted)}"


def test_check_args_names_a_wrong_argument() -> None:
    (step,) = MSE.plan_forward(100, "none", "persistent", "fp16", NVIDIA_H200)
    x = torch.zeros(100, dtype=torch.float16)
    check_args(step, (x, x, x, 100))
    with pytest.raises(AssertionError, match="argument out_ptr is \\*fp32"):
        check_args(step, (x, x, x.float(), 100))
    with pytest.raises(AssertionError, match="do not match"):
        check_args(step, (x, x, x))


def test_device_descriptions_are_checked() -> None:
    with pytest.raises(ValueError, match="vendor"):
        DeviceInfo("amd", 10)
    with pytest.raises(ValueError, match="cube_units"):
        DeviceInfo("ascend", 48)
    with pytest.raises(ValueError, match="compute_units"):
        DeviceInfo("nvidia", 0)
    info = describe(CPU)
    assert info.vendor == "cpu" and info.interpreter and info.compute_units == (os.cpu_count() or 1)
    with simulated(ASCEND_910B):
        assert describe(CPU).vendor == "ascend" and describe(CPU).interpreter
    assert describe(CPU).vendor == "cpu"


def test_importing_the_kernels_builds_no_autotuner_and_touches_no_driver() -> None:
    """triton.autotune at import needs an active driver, which the Ascend compile check does not have."""
    code = (
        "import importlib, pkgutil\n"
        "import kernelwatch.kernels as kernels\n"
        "from triton.runtime.autotuner import Autotuner\n"
        "from triton.runtime.driver import driver\n"
        "for m in pkgutil.walk_packages(kernels.__path__, 'kernelwatch.kernels.'):\n"
        "    mod = importlib.import_module(m.name)\n"
        "    bad = [k for k, v in vars(mod).items() if isinstance(v, Autotuner)]\n"
        "    assert not bad, (m.name, bad)\n"
        "assert driver._active is None and driver._default is None\n"
        "print('clean')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("device", [NVIDIA_A100, NVIDIA_H200, ASCEND_910B], ids=lambda d: d.name)
def test_the_profiler_regex_of_every_perf_case_names_one_of_its_launches(device) -> None:
    """``collect --profile`` keeps the first launch whose name matches ``spec.profile_kernel(case)``: on every path
    a case's plan takes there must be one (Hopper's fold_gamma GEMM once had none: no counters for 10 cases), and
    for a compute-bound kernel it is the GEMM (LayerNorm+MatMul's "_ln_" once took the statistics prepass)."""
    import re

    for spec in kernels.discover(()).values():
        for case in spec.perf_cases():
            names = [step.name for step in launches(spec.launch_plans(case, device))]
            if names:
                chosen = next((n for n in names if re.search(spec.profile_kernel(case), n)), None)
                assert chosen is not None, (case.key, names)
                assert spec.bound != "compute" or re.search("gemm|matmul|splitk", chosen), (case.key, chosen)
