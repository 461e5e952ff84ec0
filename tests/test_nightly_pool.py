"""benchmarks/nightly_pool.sh, rehearsed on the CPU: two stand-in GPUs (an ``nvidia-smi`` on PATH that lists two),
each collects its own run from a clone of the bundle, then each run goes through the nightly's steps against the
committed history and the other's run. The device call it is written for is a multi-GPU machine; what can break
before any GPU is touched is this plumbing (the bundle, the clones, which run each GPU is gated against)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CASE = "mse_loss/persistent/fp32/direction=fwd,reduction=mean"  # its accuracy cases: seconds on the CPU
SMI = """#!/bin/sh
if [ "$1" = "-L" ]; then printf 'GPU 0: stand-in\\nGPU 1: stand-in\\n'; else echo "index, uuid"; fi
"""

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


def _git(*argv: str, cwd: Path) -> None:
    subprocess.run(["git", *argv], cwd=cwd, check=True, capture_output=True)


def test_each_gpu_collects_its_run_and_is_gated_against_the_others(tmp_path: Path) -> None:
    """Defects caught: a GPU gated against its own run (or none of the others'), a clone of the wrong branch, a
    step whose failure leaves no row, the tarball missing a GPU's folder."""
    src = tmp_path / "src"
    _git("clone", "-q", str(ROOT), str(src), cwd=tmp_path)
    _git("checkout", "-q", "-B", "main", cwd=src)
    (src / ".kw-local").mkdir()
    _git("bundle", "create", "-q", ".kw-local/repo.bundle", "main", cwd=src)
    bin_dir, out, pool = tmp_path / "bin", tmp_path / "out", tmp_path / "pool"
    bin_dir.mkdir()
    out.mkdir()
    (bin_dir / "nvidia-smi").write_text(SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "OUT": str(out),
        "PYTHON": sys.executable,
        "KW_DEVICE": "cpu",
        "KW_COLLECT_ARGS": f"--suite accuracy --match {CASE}",
        "KW_POOL_DIR": str(pool),
        "TRITON_INTERPRET": "1",
    }
    got = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "nightly_pool.sh"), "300"],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    summary = (out / "summary.txt").read_text()
    assert "== GPU 0" in summary and "== GPU 1" in summary, summary
    for me, other in ((0, 1), (1, 0)):
        rows = json.loads((pool / f"g{me}" / "judge-eval.json").read_text())
        job = [r for r in rows if r["experiment"] == "nightly" and r["case"] == "*"]
        assert len(job) == 1, rows
        assert job[0]["run_artifact"].startswith(str(pool / f"g{me}")), job
        assert [Path(a).parent.name for a in job[0]["against"]] == [f"g{other}"], job
        assert job[0]["exit_code"] in (0, 1, 2) and job[0]["first_gate_exit"] is not None, job
    listed = subprocess.run(["tar", "-tzf", str(out / "pool.tar.gz")], capture_output=True, text=True).stdout
    assert "./g0/judge-eval.json" in listed and "./g1/judge-eval.json" in listed and "repo0" not in listed, listed
