"""The CI workflow templates: actionlint-clean, and no step that can hide the gate's verdict."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

FOLDER = Path(__file__).resolve().parents[1] / "ci" / "workflows"
WORKFLOWS = sorted(FOLDER.glob("*.yml"))


def _actionlint() -> str:
    found = shutil.which("actionlint") or str(Path(sys.executable).with_name("actionlint"))
    if not Path(found).exists():
        pytest.fail("actionlint is not installed: `pip install -e '.[test]'` brings it")
    return found


def test_actionlint_passes_on_every_workflow() -> None:
    assert len(WORKFLOWS) >= 3
    out = subprocess.run([_actionlint(), "-config-file", str(FOLDER / "actionlint.yaml"), *map(str, WORKFLOWS)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    """The check above could pass by checking nothing: a known mistake must be reported."""
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  j:\n    runs-on: ubuntu-latest\n    steps:\n"
                   "      - run: echo ${{ github.event.pull_request.title }}\n        shell: bash\n")
    out = subprocess.run([_actionlint(), str(bad)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "untrusted" in out.stdout


def _steps(path: Path) -> list[dict]:
    doc = yaml.safe_load(path.read_text())
    return [step for job in doc["jobs"].values() for step in job["steps"]]


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_run_step_is_bash_with_pipefail(path: Path) -> None:
    """GitHub's default shell for `run` is `bash -e {0}`: a failing command before a pipe is lost.
    `shell: bash` runs `bash --noprofile --norc -eo pipefail {0}`."""
    for step in _steps(path):
        if "run" in step:
            assert step.get("shell") == "bash", f"{path.name}: step {step.get('name', step['run'][:40])!r}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_the_gate_runs_whenever_there_is_an_artifact_and_decides_the_job(path: Path) -> None:
    steps = _steps(path)
    collect = next(s for s in steps if "kernelwatch collect" in s.get("run", ""))
    gate = next(s for s in steps if "kernelwatch gate" in s.get("run", ""))
    assert "--out run.json" in collect["run"]
    # a partial run (exit 3) lets the job go on to the gate; any other failure fails the step
    assert '-ne 3 ]; then exit "$status"' in collect["run"] and "|| status=$?" in collect["run"]
    assert "always()" in gate["if"] and "hashFiles('run.json') != ''" in gate["if"]
    assert "|" not in gate["run"] and "continue-on-error" not in gate  # nothing between the gate and the job
    assert "--artifact run.json" in gate["run"] and "--report-dir" in gate["run"]


def test_the_collect_step_script_keeps_exit_3_and_fails_on_others(tmp_path: Path) -> None:
    """Run the collect step's own shell logic, with `kernelwatch` a shell function exiting as told."""
    collect = next(s for s in _steps(FOLDER / "pull-request.yml") if "kernelwatch collect" in s.get("run", ""))
    script = collect["run"].replace(".venv/bin/kernelwatch", "kw")
    for code, expected in ((0, 0), (3, 0), (1, 1), (2, 2)):
        prog = f"kw() {{ return {code}; }}\n{script}"
        out = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", prog],
                             env={"KERNELWATCH_DB": "x", "PATH": "/usr/bin:/bin"}, timeout=30)
        assert out.returncode == expected, (code, out.returncode)
