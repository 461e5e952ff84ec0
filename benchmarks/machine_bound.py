"""How much slower one H200 ran than another in ci/history: the bounds on a "machine" shift
(kernelwatch.gate.machines: H200.bound, H200.run_bound).

    python benchmarks/machine_bound.py [--same-code 43d6c970,82af87ea,5e02f011]

Every implementation's time (kernel, eager, torch.compile, cuBLAS, peers) is grouped by commit and physical GPU (its
UUID where the run records it, else the run's machine tag, device label and commit, as benchmarks/machine_spread.py
does); the time is the p20 of the samples, which host delay leaves in place (kernelwatch.gate.detect.contamination), and
a GPU's time of a case is the median over its runs of that commit. ``--same-code`` pools commits whose CUDA code is
the same (``benchmarks/cuda_unchanged.py``: identical PTX, launch for launch) as one commit. Printed:

* per bound class (the case's facts, kernelwatch.kernels.names.CaseFacts.bound_class: launch-bound, else its noise
class: memory / atomic reduction / GEMM), the
  ratio of the slowest to the fastest GPU of each (commit, case, implementation) measured on two or more GPUs
  (kernelwatch.gate.detect.between_machine_ratio): count, median, p99, max and the largest;
* per class and commit, the whole-run ratio (kernelwatch.gate.detect.run_ratio: for two GPUs, the median over the
class's shared
  cases of the log ratio).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelwatch.gate.detect import between_machine_ratio, run_ratio
from kernelwatch.store.artifact import load_artifact
from kernelwatch.store.schema import recorded_facts

HISTORY = Path(__file__).resolve().parents[1] / "ci" / "history"


def groups(
    same: tuple[str, ...] = (),
) -> tuple[dict[tuple[str, str, str], dict[str, list[float]]], dict[tuple[str, str, str], str], int]:
    """({(commit, case, implementation): {gpu: [p20 per run]}}, the class of each, the number of GPUs); the
    commits of ``same`` (prefixes) count as one, named by all of them."""
    times: dict[tuple[str, str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    classes: dict[tuple[str, str, str], str] = {}
    gpus: set[str] = set()
    for path in sorted(HISTORY.glob("*.json.gz")):
        doc = load_artifact(path)
        tag = path.name.split("-")[4]
        facts = recorded_facts(doc)
        for p in doc.perf:
            if not p.p20_ms:
                continue
            gpu = p.device_uuid or f"{tag}:{p.device or 'cuda:0'}:{doc.run.commit.sha[:8]}"
            gpus.add(gpu)
            commit = doc.run.commit.sha[:8]
            if any(commit.startswith(c[:8]) for c in same):
                commit = "+".join(c[:8] for c in same)
            key = (commit, p.case, p.implementation)
            times[key][gpu].append(p.p20_ms)
            classes[key] = facts[p.case].bound_class
    return times, classes, len(gpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--same-code", default="", help="commits (comma-separated) whose CUDA code is the same")
    same = tuple(c.strip() for c in ap.parse_args().same_code.split(",") if c.strip())
    times, classes, n_gpus = groups(same)
    print(f"{n_gpus} GPU groups in {HISTORY}")
    per_case: dict[str, list[tuple[float, tuple[str, str, str]]]] = defaultdict(list)
    per_run: dict[tuple[str, str], list[dict[str, list[float]]]] = defaultdict(list)
    for key, by_gpu in times.items():
        ratio = between_machine_ratio(by_gpu)
        if ratio is None:
            continue
        klass = classes[key]
        per_case[klass].append((ratio, key))
        per_run[(klass, key[0])].append(by_gpu)
    for klass, rows in sorted(per_case.items()):
        r = np.array([x for x, _ in rows])
        worst, (commit, case, impl) = max(rows)
        print(
            f"{klass:16s} {len(r):4d} case pairs: median {np.median(r):.4f}, p99 {np.quantile(r, 0.99):.4f}, "
            f"max {r.max():.4f} ({impl} {case} at {commit})"
        )
    for (klass, commit), cases in sorted(per_run.items()):
        ratio = run_ratio(cases)
        if ratio is not None:
            print(f"run   {klass:16s} {commit}: {len(cases):4d} cases, largest whole-run ratio {ratio:.4f}")


if __name__ == "__main__":
    main()
