"""The accuracy suite for one case: float64 reference, seeded inputs, poisoned outputs, several trials.

error budget = max over elements of |out - ref| / (atol + rtol * |ref|); <= 1 passes.
Where the reference rounded to the output dtype is not finite (an fp16 sum past 65504, the mean
of nothing) the kernel must produce exactly that value. A NaN or Inf anywhere else fails.

Two kinds of accuracy result:

* ``gate``: the inputs of trial t are drawn from seed ``case_seed(case) + t``, a pure function of the
  case key. The same commit on the same hardware and software sees bit-identical inputs and gets the
  same verdict; only this kind decides the gate.
* ``explore``: fresh seeds (``explore_seed``, from a per-run base and the case key) look for inputs
  the fixed set misses. Their results are stored and reported beside the gating ones and never
  change the gating set or the verdict.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from typing import Any

import torch

from kernelwatch.kernels.poison import poisoned_outputs
from kernelwatch.kernels.spec import Case, KernelSpec
from kernelwatch.store.schema import AccuracyResult

GATE, EXPLORE = "gate", "explore"


def case_seed(case: Case) -> int:
    """The gating seed of a case: CRC-32 of its key (stable across processes, machines and runs)."""
    return zlib.crc32(case.key.encode()) & 0x7FFF_FFFF


def explore_seed(case: Case, base: int, index: int) -> int:
    """The ``index``-th exploration seed of a case under a run's ``base`` (BLAKE2b of the three).

    Distinct from the gating seed's stream by construction (a different hash of different text), and
    reproducible: the same ``base`` gives the same exploration again.
    """
    digest = hashlib.blake2b(f"explore:{base}:{index}:{case.key}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF


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


def check_case(spec: KernelSpec, case: Case, device: torch.device, seed: int | None = None) -> AccuracyResult:
    """Run ``case.trials`` trials on seeds ``seed``, ``seed + 1``, ...; the worst error over all trials
    and outputs is the result. Without ``seed``, the gating seed ``case_seed(case)``."""
    tol = case.tol
    if tol is None:
        raise ValueError(f"{case.key}: an accuracy case needs a tolerance")
    seed = case_seed(case) if seed is None else seed
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
    return AccuracyResult(
        case=case.key,
        **{k: _finite_or_none(v) if isinstance(v, float) else v for k, v in worst.items()},
        rtol=tol.rtol,
        atol=tol.atol,
        trials=case.trials,
        seed=seed,
        passed=worst["nan_mismatches"] == 0 and worst["error_budget"] <= 1.0,
        error=error,
    )


def error_result(case: Case, message: str, seed: int | None = None) -> AccuracyResult:
    """The accuracy result of a case that raised, hung or killed its worker; with ``seed``, an exploration's."""
    tol = case.tol
    return AccuracyResult(
        case=case.key,
        max_abs_err=None,
        max_rel_err=None,
        error_budget=None,
        nan_mismatches=0,
        rtol=tol.rtol if tol else 0.0,
        atol=tol.atol if tol else 0.0,
        trials=case.trials,
        seed=case_seed(case) if seed is None else seed,
        passed=False,
        error=message,
        kind=GATE if seed is None else EXPLORE,
    )


def explore_case(spec: KernelSpec, case: Case, device: torch.device, base: int, seeds: int) -> AccuracyResult:
    """``seeds`` fresh draws of a case (exploration seeds 1..seeds under ``base``, each with the case's
    trials): the worst of them, with the seed that produced it so that it can be replayed.

    ``trials`` counts every draw; ``passed`` is False when any draw failed. This never touches the
    gating seed: what it finds is reported beside the verdict, not in it.
    """
    worst: AccuracyResult | None = None
    failures = 0
    for index in range(1, seeds + 1):
        result = check_case(spec, case, device, explore_seed(case, base, index))
        failures += not result.passed
        if (
            worst is None
            or (result.error_budget or 0.0) > (worst.error_budget or 0.0)
            or (result.nan_mismatches and not worst.nan_mismatches)
        ):
            worst = result
    if worst is None:
        raise ValueError("exploration needs at least one seed")
    return AccuracyResult(
        **{**worst.model_dump(), "trials": case.trials * seeds, "passed": failures == 0, "kind": EXPLORE}
    )
