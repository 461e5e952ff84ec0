"""A team's own kernels (examples/team-kernels, docs/adding-a-kernel.md): the example's files made into a git
repository of their own, then collect, ``--changed-since``, gate and confirm on it through the CPU interpreter.

Each step fails on KernelWatch before the registry (d3bce35): collect took no project file (the kernel came in only
through the hidden ``--extra-kernels``), ``--changed-since`` diffed KernelWatch's own checkout ("nothing to run"
after the team's kernel was edited), the run's commit was the working directory's, and the gate, which had no way
to load the kernel, passed an artifact with tolerances 100x looser than its spec.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "team-kernels"
BUILT_IN = ("fused_layernorm_matmul", "fused_rmsnorm_matmul", "mse_loss", "scaled_masked_softmax")
PERF_CASE = "rownorm/rows/fp32/shape=4x1024"

pytestmark = pytest.mark.slow


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _kw(cwd: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {
        k: v for k, v in os.environ.items() if k not in ("KERNELWATCH_PROJECT", "GITHUB_HEAD_REF", "GITHUB_REF_NAME")
    }
    env.update(PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
    return subprocess.run(
        [sys.executable, "-m", "kernelwatch", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The example as a repository on branch main: commit 1 as shipped, commit 2 with the kernel edited (blocks
    of 256 columns instead of 128: half the loop trips)."""
    repo = tmp_path_factory.mktemp("team") / "team-kernels"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "rownorm")
    first = _git(repo, "rev-parse", "HEAD")
    out = repo.parent / "out"
    out.mkdir()
    db = f"sqlite:///{out / 'kw.db'}"
    collected = _kw(repo, "collect", "--device", "cpu", "--suite", "accuracy", "--kernels", "rownorm",
                    "--no-progress", "--out", str(out / "c1.json"))  # fmt: skip
    assert collected.returncode == 0, collected.stderr[-3000:]
    assert _kw(repo, "ingest", "--db", db, str(out / "c1.json")).returncode == 0
    kernel = repo / "team_kernels" / "rownorm.py"
    kernel.write_text(kernel.read_text().replace("BLOCK = 128", "BLOCK = 256"))
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "rownorm: blocks of 256")
    return {"repo": repo, "out": out, "db": db, "first": first, "second": _git(repo, "rev-parse", "HEAD")}


def test_collect_reads_the_kernel_and_the_commit_from_the_teams_repository(team: dict) -> None:
    doc = json.loads((team["out"] / "c1.json").read_text())
    assert {c["kernel"] for c in doc["cases"]} == {"rownorm"} and len(doc["accuracy"]) == 4
    assert all(a["passed"] for a in doc["accuracy"]), doc["accuracy"]
    assert doc["run"]["commit"]["sha"] == team["first"] and doc["run"]["commit"]["branch"] == "main"


def test_changed_since_measures_the_edited_team_kernel_and_skips_ours(team: dict) -> None:
    repo, out = team["repo"], team["out"]
    unchanged = _kw(repo, "collect", "--device", "cpu", "--suite", "accuracy", "--no-progress",
                    "--changed-since", "HEAD", "--out", str(out / "none.json"))  # fmt: skip
    assert unchanged.returncode == 0 and "nothing to run" in unchanged.stderr, unchanged.stderr[-2000:]
    assert not (out / "none.json").exists()
    result = _kw(repo, "collect", "--device", "cpu", "--suite", "accuracy", "--no-progress",
                 "--changed-since", "HEAD~1", "--out", str(out / "c2.json"))  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    doc = json.loads((out / "c2.json").read_text())
    assert {c["kernel"] for c in doc["cases"]} == {"rownorm"}
    assert doc["run"]["commit"]["sha"] == team["second"]
    assert "rownorm (team_kernels/rownorm.py)" in doc["run"]["notes"]
    from kernelwatch.store.schema import skipped_from_notes

    assert skipped_from_notes(doc["run"]["notes"]) == list(BUILT_IN)


def test_the_gate_judges_the_edited_commit_and_names_a_forged_tolerance(team: dict) -> None:
    repo, out = team["repo"], team["out"]
    if not (out / "c2.json").exists():
        pytest.skip("needs the --changed-since run of the test before")
    gate = ["gate", "--db", team["db"], "--report-dir", str(out / "report")]
    passed = _kw(repo, *gate, "--artifact", str(out / "c2.json"))  # the baseline, main, from the project file
    assert passed.returncode == 0, passed.stdout[-3000:] + passed.stderr[-2000:]
    assert "unchanged: 4" in passed.stdout and "minimum effect 8%" in passed.stdout  # the project file's
    forged = json.loads((out / "c2.json").read_text())
    for row in forged["accuracy"]:
        row["rtol"], row["atol"] = row["rtol"] * 100, row["atol"] * 100
    (out / "forged.json").write_text(json.dumps(forged))
    caught = _kw(repo, *gate, "--artifact", str(out / "forged.json"))
    assert caught.returncode == 1, caught.stdout[-3000:]
    report = (out / "report" / "gate.md").read_text()  # the terminal's summary folds its lines; gate.md does not
    assert report.count("is looser than the spec's") == 4, caught.stdout[-3000:]
    # outside the project nothing knows the kernel's spec: what every gate did before the registry
    blind = _kw(out, *gate, "--artifact", str(out / "forged.json"), "--baseline", "main")
    assert blind.returncode == 0, blind.stdout[-3000:]


def test_confirm_measures_two_commits_of_the_teams_repository(team: dict) -> None:
    """Both commits checked out from the team's repository, each worker importing its own tree's kernel (the
    driver checks where each spec came from). Half the loop trips in the interpreter: FASTER, or UNKNOWN on a host
    too loaded to decide; SAME would mean both workers ran one tree."""
    result = _kw(team["repo"], "confirm", "--case", PERF_CASE, "--baseline-commit", team["first"],
                 "--candidate-commit", team["second"], "--device", "cpu", "--round-ms", "20",
                 "--min-effect", "0.2")  # fmt: skip
    row = next((line for line in result.stdout.splitlines() if line.startswith(f"| `{PERF_CASE}`")), None)
    assert row is not None, result.stdout[-2000:] + result.stderr[-2000:]
    verdict = [c.strip() for c in row.split("|")][2]
    assert (verdict, result.returncode) in (("FASTER", 0), ("UNKNOWN", 2)), row
    assert re.search(rf"{team['second'][:12]} vs {team['first'][:12]} on cpu", result.stderr)
