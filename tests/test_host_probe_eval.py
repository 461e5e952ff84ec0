"""benchmarks/host_probe_eval.py: whether the host probe follows the host-bound stacks, read from stored runs."""

from __future__ import annotations

import copy
import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("host_probe_eval", ROOT / "benchmarks" / "host_probe_eval.py")
host_probe_eval = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(host_probe_eval)
PROBED = next((ROOT / "ci" / "history").glob("*host-probe*gpua7829a6c*"))


def test_rank_correlation() -> None:
    rho = host_probe_eval.spearman
    assert rho([1, 2, 3, 4, 5], [10, 20, 30, 40, 50]) == pytest.approx(1.0)
    assert rho([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    assert rho([1, 2, 3, 4], [1, 2, 3, 4]) is None  # too few pairs to say anything
    assert rho([1, 2, 3, 4, 5], [1, 2, 3]) is None


def test_the_real_run_within_and_a_second_host_across(tmp_path: Path) -> None:
    """On the real probed H200 run: the 32/80-layer table holds the host-bound stacks (ours at decode among them,
    scaled within 3.1%), and a copy of the run moved to another GPU, each eager figure and its probe both 1.5x (a
    slower host, identical code), reads as identical across runs once scaled (every one of the 29 eager results
    bound by the host in both, of every implementation, within 4%), where no raw ratio of the 60 is; the copy also
    stores a probe after each sample, which the last table correlates."""
    doc = json.loads(gzip.decompress(PROBED.read_bytes()))
    moved = copy.deepcopy(doc)
    moved["run"]["id"] = "00000000-0000-4000-8000-000000000017"
    for p in moved["perf"]:
        p["device_uuid"] = "GPU-00000000-0000-0000-0000-000000000017"
        if p.get("host_probe_us") is not None:
            for key in ("median_ms", "p20_ms", "p80_ms", "min_ms"):
                p[key] *= 1.5
            p["samples_ms"] = [s * 1.5 for s in p["samples_ms"]]
            p["host_probe_us"] *= 1.5
            p["host_probe_samples_us"] = [p["host_probe_us"] * s / p["samples_ms"][0] for s in p["samples_ms"]]
    copy_path = tmp_path / "moved.json.gz"
    copy_path.write_bytes(gzip.compress(json.dumps(moved).encode()))
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "host_probe_eval.py"), str(PROBED), str(copy_path)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    assert "2 run(s) with host probes: GPU-a7829a6c, GPU-00000000" in out
    assert "| rmsnorm_matmul,n=8192,shape=16x8192 | triton | 85.6, 36.1 | 48.8, 21.2 | 1.756 | 1.031 |" in out
    assert "### Across runs: 2 ordered pairs on different GPUs" in out
    assert out.count("| 60 | 0 | 29/29 | 1.000, 1.000 |") == 2
    assert "| +1.00 |" in out  # each pass's time against the probe after it, in the copy: in step
