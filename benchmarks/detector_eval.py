"""Evaluate change-point detectors on labelled series built from real H200 run-to-run noise.

    python benchmarks/detector_eval.py ci/history/*repeat*.json [--series 400 --length 60]

Noise: each artifact is one repetition of the same commit's perf suite on the same H200. A
synthetic "run" of a case draws one of those real runs and takes the median of a bootstrap resample
of its real timing samples, so both the between-run and the within-run spread are the measured
ones. Launch-bound cases (< 4 MB moved) also get the heavy tail DESIGN.md documents from a
30-process study on the H200 (about 2 in 30 runs 2-6x slower), which four repetitions cannot show.

Labels: half of the series carry one step (2, 5, 10 or 20% slower from a random position on);
the other half carry none. A detection within 2 points after the step is a true positive; any
other detection is a false alarm. Detectors: ours (``ci.detect.change_points``), Apache Otava's
``compute_change_points`` (defaults), and a fixed 10% threshold on consecutive medians.
"""

from __future__ import annotations

import argparse
import random
from collections import defaultdict

import numpy as np

from ci.detect import change_points
from db.artifact import load_artifact, to_data

STEPS = (0.02, 0.05, 0.10, 0.20)
LAUNCH_BOUND_BYTES = 4 << 20
TAIL_RATE, TAIL_FACTORS = 2 / 30, (2.0, 6.0)


def real_noise(paths: list[str]) -> dict[str, dict]:
    cases: dict[str, dict] = defaultdict(lambda: {"runs": [], "bytes": 0})
    for path in paths:
        for p in to_data(load_artifact(path))["perf"]:
            if p["implementation"] == "triton" and p["samples_ms"]:
                cases[p["case"]]["runs"].append(np.asarray(p["samples_ms"]))
                cases[p["case"]]["bytes"] = p["bytes"] or 0
    return {k: v for k, v in cases.items() if len(v["runs"]) >= 2}


def make_series(noise: dict, length: int, rng: random.Random, step: float | None, at: int) -> list[float]:
    out = []
    for i in range(length):
        samples = noise["runs"][rng.randrange(len(noise["runs"]))]
        boot = [samples[rng.randrange(len(samples))] for _ in range(len(samples))]
        value = float(np.median(boot))
        if noise["bytes"] < LAUNCH_BOUND_BYTES and rng.random() < TAIL_RATE:
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
    args = parser.parse_args()
    noise = real_noise(args.artifacts)
    rng = random.Random(args.seed)
    keys = sorted(noise)
    stats = {(d, s): defaultdict(int) for d in DETECTORS for s in STEPS}
    for step in STEPS:
        for n in range(args.series):
            case = keys[rng.randrange(len(keys))]
            labelled = n % 2 == 0
            at = rng.randrange(10, args.length - 10)
            series = make_series(noise[case], args.length, rng, step if labelled else None, at)
            for name, detect in DETECTORS.items():
                found = detect(series)
                st = stats[(name, step)]
                st["points"] += len(series)
                hit = labelled and any(at <= i <= at + 2 for i in found)
                st["steps"] += labelled
                st["tp"] += hit
                st["fa"] += sum(1 for i in found if not (labelled and at <= i <= at + 2))
    print(f"{len(keys)} cases of real H200 noise from {len(args.artifacts)} repeated runs; "
          f"{args.series} series of {args.length} points per step size\n")
    print(f"{'step':>5} {'detector':<12} {'recall':>7} {'precision':>9} {'false alarms / 1000 points':>27}")
    for step in STEPS:
        for name in DETECTORS:
            st = stats[(name, step)]
            recall = st["tp"] / st["steps"] if st["steps"] else 0.0
            precision = st["tp"] / (st["tp"] + st["fa"]) if st["tp"] + st["fa"] else 1.0
            print(f"{step:>5.0%} {name:<12} {recall:>7.2f} {precision:>9.2f} {1000 * st['fa'] / st['points']:>27.2f}")


if __name__ == "__main__":
    main()
