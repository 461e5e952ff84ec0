"""An accuracy row's error budget checked against the numbers it comes from, not taken as stored.

The collector (``kernelwatch.collect.accuracy.compare``) stores, per case, the worst over trials and outputs of

    A = max |out - ref|,   R = max |out - ref| / |ref| (ref != 0),   budget = max |out - ref| / (atol + rtol |ref|)

with the tolerance (rtol, atol) of the kernel's spec. The budget is not a function of A and R (its worst element
need not be theirs), but they bound it:

* above, always: every element's term is at most A / atol; where the reference is non-zero it is
  1 / (atol / a + rtol / r) <= 1 / (atol / A + rtol / R) = :func:`budget_ceiling`. A stored budget above
  A / atol cannot come from these errors.
* below, through the baseline: the gating inputs are a pure function of the case key (``kernelwatch.collect.accuracy
  .case_seed``), so candidate and baseline checked the same reference values, and budget / ceiling (where on
  that reference the errors fall) moves little between runs of one case: at most BUDGET_RATIO_SPREAD times over
  ci/history. The candidate's budget is then at least its ceiling times the baseline's ratio / BUDGET_RATIO_SPREAD
  (:func:`implied_budget`): errors 1000x larger under a budget that barely moved are named.
* the spec's tolerance: a row stored with a looser tolerance than the spec gives is named; under the spec's
  tolerance every element's term is at least min(atol / atol_spec, rtol / rtol_spec) times the stored one.
"""

from __future__ import annotations

import math
from typing import Any

# Measured by benchmarks/budget_ratio.py on ci/history (2026-12-02): for each of 331 gating cases with a budget in
# two or more runs (3,049 rows, 10 commits, tolerances of two eras), the largest over smallest budget / ceiling:
# median 1.007, p90 1.63, p99 9.1, max 11.54 (MSELoss fp16 forward, shape 3x7x11x13). Rounded up.
BUDGET_RATIO_SPREAD = 12.0
_ROUNDING = 1e-9  # relative: the budget and the errors are rounded separately (float64 -> JSON)


def budget_ceiling(max_abs: float, max_rel: float, rtol: float, atol: float) -> float:
    """The largest budget errors ``max_abs`` / ``max_rel`` allow where the reference is non-zero:
    1 / (atol / A + rtol / R); 0 without error, inf without any tolerance."""
    if max_abs <= 0:
        return 0.0
    denominator = atol / max_abs + (rtol / max_rel if max_rel > 0 else math.inf)
    return 1.0 / denominator if denominator > 0 else math.inf


def implied_budget(row: Any, baseline: Any) -> float | None:
    """The smallest budget ``row``'s errors imply, from ``baseline``'s ratio of budget to ceiling (the same case on
    the same gating inputs: same seed, same tolerance, a positive budget); None when the two cannot be compared."""
    if baseline is None or any(
        getattr(r, f) is None for r in (row, baseline) for f in ("max_abs_err", "max_rel_err", "error_budget")
    ):
        return None
    if (baseline.seed, baseline.rtol, baseline.atol) != (row.seed, row.rtol, row.atol) or baseline.error_budget <= 0:
        return None
    before = budget_ceiling(baseline.max_abs_err, baseline.max_rel_err, baseline.rtol, baseline.atol)
    now = budget_ceiling(row.max_abs_err, row.max_rel_err, row.rtol, row.atol)
    if not 0 < before < math.inf or not math.isfinite(now):
        return None
    return now * baseline.error_budget / before / BUDGET_RATIO_SPREAD


def disagreements(row: Any, baseline: Any = None, spec: tuple[float, float] | None = None) -> list[str]:
    """What in a measured gating accuracy row (``kernelwatch.store.schema.AccuracyResult``) disagrees with its own
    numbers, with ``baseline`` (the same case's row in the baseline run) and with ``spec`` (the spec's (rtol, atol)); []
    when nothing does. Each item names the stored value and what the numbers give."""
    out: list[str] = []
    budget = row.error_budget
    if budget is not None and (row.max_abs_err is None or row.max_rel_err is None):
        out.append(f"the stored error budget {budget:.3g} comes without the errors it is computed from")
        return out
    if budget is not None:
        hard = row.max_abs_err / row.atol if row.atol > 0 else math.inf
        if budget > hard * (1 + _ROUNDING) + 1e-300:
            out.append(
                f"the stored error budget {budget:.3g} is larger than its errors allow (max abs "
                f"{row.max_abs_err:.3g} / atol {row.atol:.3g} = {hard:.3g})"
            )
        implied = implied_budget(row, baseline)
        if implied is not None and budget < implied * (1 - _ROUNDING):
            out.append(
                f"the stored error budget {budget:.3g} disagrees with its errors (max abs "
                f"{row.max_abs_err:.3g}, max rel {row.max_rel_err:.3g}; the baseline's "
                f"{baseline.max_abs_err:.3g}, {baseline.max_rel_err:.3g} under budget "
                f"{baseline.error_budget:.3g}): they imply at least {implied:.3g}"
            )
    if spec is not None:
        rtol, atol = spec
        if row.rtol > rtol * (1 + _ROUNDING) or row.atol > atol * (1 + _ROUNDING):
            out.append(
                f"the stored tolerance (rtol {row.rtol:.3g}, atol {row.atol:.3g}) is looser than the spec's "
                f"(rtol {rtol:.3g}, atol {atol:.3g})"
            )
    recomputed = recomputed_pass(row, baseline, spec)
    if recomputed is not None and row.passed and not recomputed:
        out.append("the stored 'passed: true' disagrees with the measurement")
    return out


def recomputed_pass(row: Any, baseline: Any = None, spec: tuple[float, float] | None = None) -> bool | None:
    """Pass or fail from the numbers: no NaN/Inf mismatch, and the smallest budget they allow under the spec's
    tolerance (the stored budget, the one its errors imply, each scaled to the spec) at most 1; None without a
    budget."""
    if row.error_budget is None:
        return None
    low = max(row.error_budget, implied_budget(row, baseline) or 0.0)
    if spec is not None:
        rtol, atol = spec
        scale = min(row.atol / atol if atol > 0 else math.inf, row.rtol / rtol if rtol > 0 else math.inf)
        low *= scale if math.isfinite(scale) else 1.0
    return row.nan_mismatches == 0 and low <= 1.0
