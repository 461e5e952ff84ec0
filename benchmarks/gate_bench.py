"""How long `kernelwatch gate` takes to decide against a large history.

    python benchmarks/gate_bench.py --db sqlite:////tmp/kwbench/big-1000000.db [--runs 1333 --cases 125]

Uses the synthetic history that benchmarks/db_bench.py builds (seed 7, 2 hardware) and judges the
run that would follow it. Target (docs/design.md): < 5 s against 2,000 runs x 200 cases.
"""

from __future__ import annotations

import argparse
import time

from kernelwatch.gate.judge import decide
from kernelwatch.gate.statuses import REGRESSION
from kernelwatch.store.artifact import dumps, parse_artifact
from kernelwatch.store.engine import open_database
from kernelwatch.store.synthetic import Step, SyntheticHistory


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--runs", type=int, default=1_000_000 // (125 * 3 * 2))
    parser.add_argument("--cases", type=int, default=125)
    args = parser.parse_args()
    history = SyntheticHistory(
        runs=args.runs + 1, cases=args.cases, hardware=2, samples=20, seed=7, steps=[Step(args.runs, 1.1, "mse_loss")]
    )
    candidate = parse_artifact(dumps(history.document(args.runs, 0, history.case_list())))
    engine = open_database(args.db)
    decide(engine, candidate, "synthetic/main")  # warm the connection pool
    times = []
    for _ in range(3):
        start = time.perf_counter()
        result = decide(engine, candidate, "synthetic/main")
        times.append(time.perf_counter() - start)
    print(f"{'history':<32} {'cases':>6} {'decide s (median of 3)':>24} {'regressions':>12}  target")
    best = sorted(times)[1]
    print(
        f"{f'{args.runs} runs x 2 hardware':<32} {args.cases:>6} {best:>24.2f} "
        f"{sum(v.status == REGRESSION for v in result.verdicts):>12}  < 5 s {'met' if best < 5 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
