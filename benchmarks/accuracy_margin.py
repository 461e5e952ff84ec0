"""Worst error budget of every gating accuracy case over many seeds: is the margin real?

    python benchmarks/accuracy_margin.py --device cpu [--seeds 20] [--kernels NAME] [--match TEXT]
        [--jsonl margin.jsonl] [--limit 0.8]

Seed 0 of a case is its gating seed (``kernelwatch.collect.accuracy.case_seed``); seeds 1..S-1 are exploration
seeds under ``--base`` (``explore_seed``), so the table is reproducible. Each seed runs the case's
own trials, exactly as ``kernelwatch collect`` does. The gate's inputs are one draw of many: a case
whose budget over fresh draws reaches 1 will fail some day on an unrelated commit, so its worst
budget over the seeds must stay at or below ``--limit`` (0.8 leaves 20% of the tolerance as margin).

Prints the worst budget per case (with the seed that produced it and the gating seed's budget),
then per kernel / variant / dtype; exits 1 when any case is over the limit or raised, 0 otherwise.
With ``--jsonl`` every (case, seed) result is appended as it is measured, and a rerun skips what the
file already holds (the CPU interpreter needs hours for the full suite). ``--from FILE`` (repeatable)
prints the table of such files without measuring anything.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu (Triton's interpreter), cuda, cuda:1, npu, ...")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--base", type=int, default=0, help="base of the exploration seeds")
    parser.add_argument("--kernels", default="", help="comma-separated kernel names (default: all)")
    parser.add_argument("--match", default=None, help="only cases whose key contains this text")
    parser.add_argument("--limit", type=float, default=0.8)
    parser.add_argument("--jsonl", type=Path, default=None, help="append results here; skip what it holds")
    parser.add_argument("--top", type=int, default=40, help="cases shown in the per-case table")
    parser.add_argument(
        "--shard",
        default="0/1",
        metavar="I/N",
        help="measure only every N-th case from the I-th (0-based): N processes share a suite",
    )
    parser.add_argument(
        "--from",
        dest="sources",
        type=Path,
        action="append",
        default=[],
        help="report the rows of this --jsonl file (repeatable) and measure nothing",
    )
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    try:
        args.shard_index, args.shard_count = map(int, args.shard.split("/"))
    except ValueError:
        parser.error(f"--shard {args.shard!r}: expected I/N, e.g. 0/4")
    if not 0 <= args.shard_index < args.shard_count:
        parser.error(f"--shard {args.shard!r}: I must be in 0..N-1")
    return args


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> int:
    args = _parse()
    if args.sources:
        rows = [
            r
            for path in args.sources
            for r in _read(path)
            if (not args.match or args.match in r["case"]) and r["seed_index"] < args.seeds
        ]
        return report(rows, args.limit, args.top, args.seeds)
    if args.device.startswith("cpu"):
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    from kernelwatch.collect.accuracy import case_seed, check_case, explore_seed
    from kernelwatch.collect.backends import Backend
    from kernelwatch.kernels import discover

    backend = Backend(torch.device(args.device))
    backend.activate()
    specs = discover()
    names = [k for k in args.kernels.split(",") if k] or sorted(specs)
    unknown = [k for k in names if k not in specs]
    if unknown:
        print(f"accuracy_margin: unknown kernel {unknown[0]!r}; known: {', '.join(sorted(specs))}", file=sys.stderr)
        return 2
    done: dict[tuple[str, int], dict] = {}
    if args.jsonl and args.jsonl.exists():
        done = {(r["case"], r["seed_index"]): r for r in _read(args.jsonl)}
    sink = args.jsonl.open("a") if args.jsonl else None
    rows: list[dict] = []
    started = time.monotonic()
    position = -1
    for name in names:
        spec = specs[name]
        for case in spec.accuracy_cases():
            if args.match and args.match not in case.key:
                continue
            position += 1
            if position % args.shard_count != args.shard_index:
                continue
            for j in range(args.seeds):
                if (case.key, j) in done:
                    rows.append(done[(case.key, j)])
                    continue
                seed = case_seed(case) if j == 0 else explore_seed(case, args.base, j)
                t0 = time.monotonic()
                try:
                    res = check_case(spec, case, backend.device, seed)
                    row = {
                        "case": case.key,
                        "seed_index": j,
                        "seed": seed,
                        "budget": res.error_budget,
                        "passed": res.passed,
                        "error": res.error,
                    }
                except Exception as exc:
                    row = {
                        "case": case.key,
                        "seed_index": j,
                        "seed": seed,
                        "budget": None,
                        "passed": False,
                        "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                    }
                row["seconds"] = round(time.monotonic() - t0, 3)
                rows.append(row)
                if sink:
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
            print(f"[{time.monotonic() - started:8.0f} s] {case.key}", file=sys.stderr, flush=True)
    return report(rows, args.limit, args.top, args.seeds)


def report(rows: list[dict], limit: float, top: int, seeds: int) -> int:
    by_case: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_case[r["case"]].append(r)
    summary = []
    for case, rs in by_case.items():
        errors = [r for r in rs if r["error"] or r["budget"] is None]
        budgets = [r["budget"] for r in rs if r["budget"] is not None]
        worst = max(rs, key=lambda r: -1 if r["budget"] is None else r["budget"])
        gate = next((r["budget"] for r in rs if r["seed_index"] == 0), None)
        summary.append(
            {
                "case": case,
                "worst": max(budgets) if budgets else None,
                "worst_seed": worst["seed"],
                "gate": gate,
                "seeds": len(rs),
                "errors": errors,
            }
        )
    summary.sort(key=lambda s: -(s["worst"] if s["worst"] is not None else float("inf")))
    over = [s for s in summary if s["errors"] or s["worst"] is None or s["worst"] > limit]
    print(f"{len(summary)} gating accuracy cases x {seeds} seeds (seed 0 = the gating seed); limit {limit}\n")
    print(f"{'worst':>7} {'gate seed':>9}  {'worst at seed':>13}  case")
    for s in summary[:top]:
        worst = "error" if s["errors"] else f"{s['worst']:.3f}"
        gate = "-" if s["gate"] is None else f"{s['gate']:.3f}"
        print(f"{worst:>7} {gate:>9}  {s['worst_seed']:>13}  {s['case']}")
    if len(summary) > top:
        print(f"... {len(summary) - top} more cases, all at or below {summary[top]['worst']:.3f}")
    groups: dict[str, list[dict]] = defaultdict(list)
    for s in summary:
        kernel, variant, dtype = s["case"].split("/")[:3]
        groups[f"{kernel}/{variant}/{dtype}"].append(s)
    print(f"\n{'worst':>7} {'cases':>5} {'over':>4}  kernel/variant/dtype")
    for group, ss in sorted(groups.items()):
        finite = [s["worst"] for s in ss if s["worst"] is not None]
        worst = max(finite) if finite else float("nan")
        print(f"{worst:>7.3f} {len(ss):>5} {sum(s in over for s in ss):>4}  {group}")
    for s in over:
        for e in s["errors"][:1]:
            print(f"error: {s['case']} seed {e['seed']}: {e['error']}")
    print(f"\n{len(over)} of {len(summary)} cases over {limit} or raising")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
