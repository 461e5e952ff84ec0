"""How far a stored error budget sits below the ceiling its errors allow, per case across ci/history runs: the spread
behind kernelwatch.gate.budget.BUDGET_RATIO_SPREAD.

    python benchmarks/budget_ratio.py

For every gating accuracy row with errors and a positive budget, ratio = budget /
kernelwatch.gate.budget.budget_ceiling(max abs, max rel, rtol, atol). The gating inputs of a case are fixed
(kernelwatch.collect.accuracy.case_seed), so the ratio says where on one reference the errors fall. Printed: per case
with two or more such rows, the largest over the smallest ratio: how many cases, median, p90, p99, max, and the five
largest.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelwatch.gate.budget import budget_ceiling
from kernelwatch.store.artifact import load_artifact

HISTORY = Path(__file__).resolve().parents[1] / "ci" / "history"


def main() -> None:
    ratios: dict[str, list[float]] = defaultdict(list)
    rows = commits = 0
    seen: set[str] = set()
    for path in sorted(HISTORY.glob("*.json.gz")):
        doc = load_artifact(path)
        for a in doc.accuracy:
            if a.kind != "gate" or not a.error_budget or a.max_abs_err is None or a.max_rel_err is None:
                continue
            ceiling = budget_ceiling(a.max_abs_err, a.max_rel_err, a.rtol, a.atol)
            if 0 < ceiling < float("inf"):
                ratios[a.case].append(a.error_budget / ceiling)
                rows += 1
                if doc.run.commit.sha not in seen:
                    seen.add(doc.run.commit.sha)
                    commits += 1
    spread = sorted((max(v) / min(v), case, len(v)) for case, v in ratios.items() if len(v) >= 2)
    s = np.array([x for x, _, _ in spread])
    print(
        f"{len(spread)} cases in two or more runs ({rows} rows, {commits} commits): largest / smallest budget / "
        f"ceiling: median {np.median(s):.3f}, p90 {np.quantile(s, 0.9):.2f}, p99 {np.quantile(s, 0.99):.1f}, "
        f"max {s.max():.2f}"
    )
    for x, case, n in spread[-5:]:
        print(f"    {x:6.2f}  {n:2d} runs  {case}")


if __name__ == "__main__":
    main()
