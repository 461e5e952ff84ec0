"""Evaluate change-point detectors on labelled series built from real H200 run-to-run noise.

    python benchmarks/detector_eval.py ci/history/*repeat*.json.gz [--series 400 --length 60]

Noise: each artifact is one repetition of the same commit's perf suite on the same H200. A
synthetic "run" of a case draws one of those real runs and takes the median of a bootstrap resample
of its real timing samples, so both the between-run and the within-run spread are the measured
ones. Launch-bound cases (their facts, ``kernelwatch.store.schema.recorded_facts``: the gate's own rule) also get
the heavy tail docs/design.md documents from a 30-process study on the H200 (about 2 in 30 runs 2-6x
slower), which four repetitions cannot show. (The first version called a case launch-bound below
4 MB moved: the 1M-element fp16 MSELoss case, 7.9 us, moves 4 MB + 2 bytes and escaped the tail.)

Labels: half of the series carry one step (2, 5, 10 or 20% slower from a random position on);
the other half carry none. A detection within WINDOW points of the step, either side, is a true
positive; any other detection is a false alarm. (The first version accepted 2 points late and none
early: a split estimated one run early is the same size of error as one run late, and both point
``kernelwatch bisect`` at a commit range next to the real one; ``--late-only`` restores that rule.)
Detectors: ours (``kernelwatch.gate.detect.change_points``), Apache Otava's ``compute_change_points`` (defaults),
and a fixed 10% threshold on consecutive medians.

A/A: every ordered pair of the real repeats (one commit) is also put through the gate's own test,
``compare_case`` per case with the remaining repeats as history, FDR-controlled across the cases
as ``kernelwatch gate`` does: every regression it reports there is a false one.
"""

from __future__ import annotations

import argparse
import random
from collections import defaultdict

import numpy as np

from kernelwatch.gate.detect import (
    DEFAULT_FDR,
    DEFAULT_MIN_EFFECT,
    change_points,
    compare_case,
    regressions,
)
from kernelwatch.store.artifact import load_artifact, to_data
from kernelwatch.store.schema import recorded_facts

STEPS = (0.02, 0.05, 0.10, 0.20)
TAIL_RATE, TAIL_FACTORS = 2 / 30, (2.0, 6.0)
WINDOW = 2


def real_noise(paths: list[str]) -> dict[str, dict]:
    cases: dict[str, dict] = defaultdict(lambda: {"runs": [], "medians": []})
    short: set[str] = set()
    for path in paths:
        doc = load_artifact(path)
        short |= {k for k, f in recorded_facts(doc).items() if f.launch_bound}
        for p in to_data(doc)["perf"]:
            if p["implementation"] == "triton" and p["samples_ms"]:
                cases[p["case"]]["runs"].append(np.asarray(p["samples_ms"]))
                cases[p["case"]]["medians"].append(float(np.median(p["samples_ms"])))
    return {k: {**v, "launch_bound": k in short} for k, v in cases.items() if len(v["runs"]) >= 2}


def make_series(noise: dict, length: int, rng: random.Random, step: float | None, at: int) -> list[float]:
    out = []
    for i in range(length):
        samples = noise["runs"][rng.randrange(len(noise["runs"]))]
        boot = [samples[rng.randrange(len(samples))] for _ in range(len(samples))]
        value = float(np.median(boot))
        if noise["launch_bound"] and rng.random() < TAIL_RATE:
            value *= rng.uniform(*TAIL_FACTORS)
        if step is not None and i >= at:
            value *= 1 + step
        out.append(value)
    return out


def ours(series: list[float]) -> list[int]:
    return [c.index for c in change_points(series, min_effect=0.03)]


def otava(series: list[float]) -> list[int]:
    from otava.analysis import compute_change_points

    points, _ = compute_change_points(series)
    return [p.index for p in points]


def threshold(series: list[float]) -> list[int]:
    return [i for i in range(1, len(series)) if series[i] / series[i - 1] > 1.10]


DETECTORS = {"kernelwatch": ours, "otava": otava, "fixed 10%": threshold}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("artifacts", nargs="+")
    parser.add_argument("--series", type=int, default=400, help="series per step size (half without a step)")
    parser.add_argument("--length", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--late-only", action="store_true", help="the first version's window: 0-2 points late")
    parser.add_argument("--detectors", default=",".join(DETECTORS), help="comma-separated subset")
    args = parser.parse_args()
    early = 0 if args.late_only else WINDOW
    detectors = {name: DETECTORS[name] for name in args.detectors.split(",")}
    noise = real_noise(args.artifacts)
    rng = random.Random(args.seed)
    keys = sorted(noise)
    stats = {(d, s): defaultdict(int) for d in detectors for s in STEPS}
    for step in STEPS:
        for n in range(args.series):
            case = keys[rng.randrange(len(keys))]
            labelled = n % 2 == 0
            at = rng.randrange(10, args.length - 10)
            series = make_series(noise[case], args.length, rng, step if labelled else None, at)
            for name, detect in detectors.items():
                found = detect(series)
                st = stats[(name, step)]
                st["points"] += len(series)
                near = [labelled and at - early <= i <= at + WINDOW for i in found]
                st["steps"] += labelled
                st["tp"] += any(near)
                st["fa"] += near.count(False)
    window = f"0 to {WINDOW} points late" if args.late_only else f"within {WINDOW} points either side"
    print(
        f"{len(keys)} cases of real H200 noise from {len(args.artifacts)} repeated runs; "
        f"{args.series} series of {args.length} points per step size, seed {args.seed}; a detection counts "
        f"{window}\n"
    )
    print(f"{'step':>5} {'detector':<12} {'recall':>7} {'precision':>9} {'false alarms / 1000 points':>27}")
    for step in STEPS:
        for name in detectors:
            st = stats[(name, step)]
            recall = st["tp"] / st["steps"] if st["steps"] else 0.0
            precision = st["tp"] / (st["tp"] + st["fa"]) if st["tp"] + st["fa"] else 1.0
            print(f"{step:>5.0%} {name:<12} {recall:>7.2f} {precision:>9.2f} {1000 * st['fa'] / st['points']:>27.2f}")

    print()
    a_to_a(args.artifacts)


def a_to_a(paths: list[str]) -> None:
    """The gate's test on every ordered pair of real repeats: baseline i, candidate j, the others history."""
    runs = []
    short: set[str] = set()
    for path in paths:
        doc = load_artifact(path)
        short |= {k for k, f in recorded_facts(doc).items() if f.launch_bound}
        perf = {p["case"]: p for p in to_data(doc)["perf"] if p["implementation"] == "triton" and p["samples_ms"]}
        runs.append(perf)
    pairs = flagged = 0
    for i, base in enumerate(runs):
        for j, cand in enumerate(runs):
            if i == j:
                continue
            comps = []
            for case in sorted(set(base) & set(cand)):
                history = [r[case]["median_ms"] for k, r in enumerate(runs) if k != j and case in r]
                comps.append(
                    compare_case(
                        case,
                        base[case]["samples_ms"],
                        cand[case]["samples_ms"],
                        history,
                        DEFAULT_MIN_EFFECT,
                        launch_bound=case in short,
                    )
                )
            found = regressions(comps, DEFAULT_FDR)
            pairs += 1
            flagged += bool(found)
            for c in found:
                print(f"  A/A regression: baseline {i} candidate {j}: {c.case} {c.effect:+.1%} p={c.p:.2g}")
    print(
        f"A/A pairs of real repeats: {pairs}; pairs with a regression (compare_case + BH, minimum effect "
        f"{DEFAULT_MIN_EFFECT:.0%}, FDR {DEFAULT_FDR:.0%}): {flagged}"
    )


if __name__ == "__main__":
    main()
