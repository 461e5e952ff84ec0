"""Between-machine spread of per-run medians, per case class, measured on ci/history's H200 runs.

    python benchmarks/machine_spread.py

For each commit and case, the kernel's per-run medians are grouped by the physical GPU that measured
them: its UUID where the run records it, else the run's machine (the file name's tag, ``h200`` or
``h200x2``), its device label and the commit (a session: no two sessions are assumed to share a GPU).
``kernelwatch.gate.detect.between_machine_sigma`` (the gate's estimator: the random-effect standard deviation of log
medians) gives each (commit, case) with two or more GPUs one value. Printed per noise class (the case's facts,
``kernelwatch.store.schema.recorded_facts``: GEMM by arithmetic intensity, an atomic reduction, or memory-bound): the
number of estimates, their median, 90th percentile and maximum, and the five largest.
``kernelwatch.gate.machines.H200.sigma`` cites this output.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from kernelwatch.gate.detect import between_machine_sigma
from kernelwatch.kernels.names import KERNEL_IMPL
from kernelwatch.store.artifact import load_artifact
from kernelwatch.store.schema import recorded_facts

HISTORY = Path(__file__).resolve().parents[1] / "ci" / "history"


def spreads() -> dict[str, list[tuple[float, str, str, int]]]:
    """{class: [(sigma, case, commit, number of GPUs)]}, smallest first."""
    medians: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    classes: dict[str, str] = {}
    for path in sorted(HISTORY.glob("*.json.gz")):
        doc = load_artifact(path)
        tag = path.name.split("-")[4]
        facts = recorded_facts(doc)
        for p in doc.perf:
            if p.implementation != KERNEL_IMPL or not p.median_ms:
                continue
            gpu = p.device_uuid or f"{tag}:{p.device or 'cuda:0'}:{doc.run.commit.sha[:8]}"
            medians[(doc.run.commit.sha, p.case)][gpu].append(p.median_ms)
            classes[p.case] = facts[p.case].noise
    out: dict[str, list[tuple[float, str, str, int]]] = defaultdict(list)
    for (commit, case), groups in medians.items():
        sigma = between_machine_sigma(groups)
        if sigma is not None:
            out[classes[case]].append((sigma, case, commit[:8], len(groups)))
    return {k: sorted(v) for k, v in out.items()}


def main() -> None:
    for name, rows in sorted(spreads().items()):
        s = np.array([r[0] for r in rows])
        print(
            f"{name:7s} {len(rows):4d} estimates: median {np.median(s):.4f}, p90 {np.quantile(s, 0.9):.4f}, "
            f"max {s.max():.4f}"
        )
        for sigma, case, commit, gpus in rows[-5:]:
            print(f"    {sigma:.4f}  {commit}  {gpus} GPUs  {case}")


if __name__ == "__main__":
    main()
