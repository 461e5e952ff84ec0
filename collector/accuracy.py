"""The accuracy suite for one case: float64 reference, fresh inputs, poisoned outputs, several trials.

error budget = max over elements of |out - ref| / (atol + rtol * |ref|); <= 1 passes.
Where the reference rounded to the output dtype is not finite (an fp16 sum past 65504, the mean
of nothing) the kernel must produce exactly that value. A NaN or Inf anywhere else fails.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import torch

from kernels.poison import poisoned_outputs
from kernels.spec import Case, KernelSpec


def case_seed(run_seed: int, case: Case) -> int:
    """Each case's inputs come from (run seed, case key): reproducible, and fresh every run."""
    return (run_seed ^ zlib.crc32(case.key.encode())) & 0x7FFF_FFFF


def compare(out: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float) -> dict[str, Any]:
    """Errors of one output tensor against its float64 reference."""
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"output shape {tuple(out.shape)} != reference shape {tuple(ref.shape)}")
    got = out.detach().to("cpu", torch.float64)
    want = ref.detach().to("cpu", torch.float64)
    representable = want.to(out.dtype).to(torch.float64) if out.dtype.is_floating_point else want
    special = ~torch.isfinite(representable) | ~torch.isfinite(got)
    same = (got == representable) | (torch.isnan(got) & torch.isnan(representable))
    mismatches = int((special & ~same).sum())
    ok = ~special
    if ok.any():
        diff = (got[ok] - want[ok]).abs()
        mag = want[ok].abs()
        budget = float((diff / (atol + rtol * mag)).max())
        max_abs = float(diff.max())
        nz = mag > 0
        max_rel = float((diff[nz] / mag[nz]).max()) if nz.any() else 0.0
    else:
        budget, max_abs, max_rel = 0.0, 0.0, 0.0
    return {"max_abs_err": max_abs, "max_rel_err": max_rel, "error_budget": budget, "nan_mismatches": mismatches}


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def check_case(spec: KernelSpec, case: Case, device: torch.device, run_seed: int) -> dict[str, Any]:
    """Run ``case.trials`` trials; the worst error over all trials and outputs is the result."""
    tol = case.tol
    if tol is None:
        raise ValueError(f"{case.key}: an accuracy case needs a tolerance")
    seed = case_seed(run_seed, case)
    worst = {"max_abs_err": 0.0, "max_rel_err": 0.0, "error_budget": 0.0, "nan_mismatches": 0}
    for trial in range(case.trials):
        inputs = spec.make_inputs(case, device, seed + trial)
        with poisoned_outputs():
            outs = spec.run(case, inputs)
        refs = spec.reference(case, inputs)
        if len(outs) != len(refs):
            raise ValueError(f"{len(outs)} outputs but {len(refs)} references")
        for out, ref in zip(outs, refs):
            errs = compare(out, ref, tol.rtol, tol.atol)
            worst["nan_mismatches"] += errs["nan_mismatches"]
            for k in ("max_abs_err", "max_rel_err", "error_budget"):
                worst[k] = max(worst[k], errs[k])
    error = None
    if worst["nan_mismatches"]:
        error = f"{worst['nan_mismatches']} NaN/Inf outputs where the reference has other values"
    return {
        **{k: _finite_or_none(v) if isinstance(v, float) else v for k, v in worst.items()},
        "rtol": tol.rtol,
        "atol": tol.atol,
        "trials": case.trials,
        "seed": seed,
        "passed": worst["nan_mismatches"] == 0 and worst["error_budget"] <= 1.0,
        "error": error,
    }


def error_result(case: Case, run_seed: int, message: str) -> dict[str, Any]:
    """The accuracy record of a case that raised, hung or killed its worker."""
    tol = case.tol
    return {"max_abs_err": None, "max_rel_err": None, "error_budget": None, "nan_mismatches": 0,
            "rtol": tol.rtol if tol else 0.0, "atol": tol.atol if tol else 0.0, "trials": case.trials,
            "seed": case_seed(run_seed, case), "passed": False, "error": message}
