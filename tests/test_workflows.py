"""CI workflow templates and the CANN environment wrapper (real bash, a stand-in set_env.sh)."""

from __future__ import annotations

import os
import subprocess
from importlib.metadata import requires
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / "ci" / "workflows").glob("*.yml"))
WRAPPER = ROOT / "ci" / "ascend-env.sh"
FORWARDED = (
    "ASCEND_HOME_PATH",
    "ASCEND_TOOLKIT_HOME",
    "ASCEND_OPP_PATH",
    "ASCEND_AICPU_PATH",
    "TOOLCHAIN_HOME",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "PATH",
)


def _steps(path: Path) -> list[dict]:
    doc = yaml.safe_load(path.read_text())
    return [step for job in doc["jobs"].values() for step in job["steps"]]


def test_there_are_workflows() -> None:
    assert {p.name for p in WORKFLOWS} >= {"nightly-ascend.yml", "nightly-nvidia.yml", "pull-request.yml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_run_step_uses_bash_and_the_doctor_runs_first(path: Path) -> None:
    """shell: bash gives `-o pipefail`, so `kernelwatch gate ... | tee` fails the job when the gate fails."""
    steps = _steps(path)
    runs = [s for s in steps if "run" in s]
    assert runs and all(s.get("shell") == "bash" for s in runs), [s.get("name") for s in runs if "shell" not in s]
    assert all("shell" not in s for s in steps if "uses" in s)  # not allowed on action steps
    commands = [s["run"] for s in runs if "kernelwatch " in s["run"]]
    assert "kernelwatch doctor" in commands[0], "the doctor must be the first kernelwatch command"


def test_every_ascend_step_sources_cann_and_never_installs_community_triton() -> None:
    steps = _steps(ROOT / "ci" / "workflows" / "nightly-ascend.yml")
    for step in steps:
        if "run" not in step:
            continue
        for line in filter(None, (ln.strip() for ln in step["run"].splitlines())):
            assert line.startswith("ci/ascend-env.sh"), f"{step.get('name')}: {line!r} runs without set_env.sh"
    install = next(s["run"] for s in steps if "pip install" in s.get("run", ""))
    assert ".[postgres,npu]" in install and "triton]" not in install and "triton>" not in install


def test_dependencies_keep_community_triton_off_npu_hosts() -> None:
    """The installed distribution's metadata: triton only through the `triton` extra, the npu extra pinned."""
    reqs = [r.replace(" ", "") for r in requires("kernelwatch") or []]
    base = [r for r in reqs if "extra==" not in r]
    assert base and not any(r.startswith("triton") for r in base)
    assert any(r.startswith("triton>=") and 'extra=="triton"' in r for r in reqs)
    npu = sorted(r.split(";")[0] for r in reqs if 'extra=="npu"' in r)
    assert npu == ["torch-npu==2.7.1", "triton-ascend==3.2.0"]
    assert "triton" in (ROOT / "Makefile").read_text().split("pip install -q -e")[1].splitlines()[0]


def test_make_demo_installs_only_what_it_runs_and_plants_its_story() -> None:
    """`make demo` installed the eval extra (apache-otava: BigQuery, Slack, gRPC clients) it never uses, and
    collected the full 358-case CPU run (~6 minutes) before serving."""
    out = subprocess.run(
        ["make", "-n", "-B", "demo", "VENV=/nonexistent"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    installs = [line for line in out.stdout.splitlines() if "pip install -q -e" in line]
    assert installs == ['/nonexistent/bin/python -m pip install -q -e ".[triton]"']
    commands = out.stdout
    assert "kernelwatch synth --db kernelwatch.db --demo-from ci/history/" in commands
    assert "--suite accuracy --devices all --match /fp32/" in commands
    full = subprocess.run(
        ["make", "-n", "-B", "install", "VENV=/nonexistent"], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout
    assert ".[test,postgres,eval,triton]" in full  # make test still installs everything it needs


def _set_env(tmp_path: Path, lines: list[str]) -> Path:
    script = tmp_path / "set_env.sh"
    script.write_text("\n".join(lines) + "\n")
    return script


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(WRAPPER), *args], env=env, capture_output=True, text=True, timeout=30)


def test_wrapper_sources_set_env_and_runs_the_command(tmp_path: Path) -> None:
    home = tmp_path / "cann"
    script = _set_env(
        tmp_path,
        [
            f"export ASCEND_HOME_PATH={home}",
            f"export ASCEND_TOOLKIT_HOME={home}",
            f"export ASCEND_OPP_PATH={home}/opp",
            f"export ASCEND_AICPU_PATH={home}",
            f"export TOOLCHAIN_HOME={home}/toolkit",
            f"export LD_LIBRARY_PATH={home}/lib64",
            f"export PYTHONPATH={home}/python",
            f"export PATH={home}/bin:$PATH",
        ],
    )
    env = {"PATH": os.environ["PATH"], "ASCEND_SET_ENV": str(script)}
    out = _run(["env"], env)
    assert out.returncode == 0, out.stderr
    seen = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    assert seen["ASCEND_HOME_PATH"] == str(home) and seen["PATH"].startswith(f"{home}/bin:")
    assert out.stderr == ""
    github_env = tmp_path / "github_env"
    out = _run(["--github-env"], {**env, "GITHUB_ENV": str(github_env)})
    assert out.returncode == 0, out.stderr
    written = dict(line.split("=", 1) for line in github_env.read_text().splitlines())
    assert set(written) == set(FORWARDED) and written["ASCEND_OPP_PATH"] == f"{home}/opp"


def test_wrapper_fails_without_set_env_or_without_ascend_home_path(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "ASCEND_SET_ENV": str(tmp_path / "missing.sh")}
    if Path("/usr/local/Ascend").exists():
        pytest.skip("this machine has a CANN installation")
    out = _run(["true"], env)
    assert out.returncode == 2 and "no CANN set_env.sh" in out.stderr
    script = _set_env(tmp_path, ["export ASCEND_TOOLKIT_HOME=/x"])
    out = _run(["true"], {**env, "ASCEND_SET_ENV": str(script)})
    assert out.returncode == 2 and "did not set ASCEND_HOME_PATH" in out.stderr
    script = _set_env(tmp_path, ["export ASCEND_HOME_PATH=/x"])
    out = _run(["true"], {**env, "ASCEND_SET_ENV": str(script)})
    assert out.returncode == 0 and "warning: " in out.stderr and "TOOLCHAIN_HOME" in out.stderr


# ---------------------------------------------------------------------------------------------
# The workflows: actionlint, and no step that can hide the gate's verdict
# ---------------------------------------------------------------------------------------------
def _actionlint() -> str:
    import shutil
    import sys

    found = shutil.which("actionlint") or str(Path(sys.executable).with_name("actionlint"))
    if not Path(found).exists():
        pytest.fail("actionlint is not installed: `pip install -e '.[test]'` brings it")
    return found


def test_actionlint_passes_on_every_workflow() -> None:
    folder = ROOT / "ci" / "workflows"
    out = subprocess.run(
        [_actionlint(), "-config-file", str(folder / "actionlint.yaml"), *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    """The check above could pass by checking nothing: a known mistake must be reported."""
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  j:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ github.event.pull_request.title }}\n        shell: bash\n"
    )
    out = subprocess.run([_actionlint(), str(bad)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "untrusted" in out.stdout


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_the_gate_runs_whenever_there_is_an_artifact_and_decides_the_job(path: Path) -> None:
    """The gate decides the job, except that its exit 1 hands the decision to `kernelwatch confirm` where the
    workflow has a confirm step (docs/design.md): then the gate step passes on 0 and 1, fails on 2, and the
    confirm step runs on exactly the gate's exit 1."""
    steps = _steps(path)
    collect = next(s for s in steps if "kernelwatch collect" in s.get("run", ""))
    gate = next(s for s in steps if "kernelwatch gate" in s.get("run", ""))
    assert "--out run.json" in collect["run"]
    assert collect["run"].rstrip().endswith('|| [ "$?" -eq 3 ]')  # a partial run (exit 3) goes on to the gate
    assert "always()" in gate["if"] and "hashFiles('run.json') != ''" in gate["if"]
    assert "continue-on-error" not in gate and "--artifact run.json" in gate["run"] and "--report-dir" in gate["run"]
    confirm = next((s for s in steps if "kernelwatch confirm" in s.get("run", "")), None)
    if confirm is None:
        assert "|" not in gate["run"]  # nothing between the gate and the job
        return
    assert "continue-on-error" not in confirm and "always()" in confirm["if"]
    assert f"steps.{gate['id']}.outputs.code == '1'" in confirm["if"]
    for code, ok in ((0, True), (1, True), (2, False)):
        out, written = _bash_step(gate["run"], code)
        assert (out.returncode == 0) == ok and written == f"code={code}", (code, out.returncode, written)
    nightly = "nightly" in path.name  # nightly: UNKNOWN (exit 2) fails with an error line naming what to do
    for code, ok in ((0, True), (1, False), (2, False)):
        out, _ = _bash_step(confirm["run"], code)
        assert (out.returncode == 0) == ok, (code, out.returncode)
        assert ("::error::" in out.stdout) == (nightly and code == 2)


def _bash_step(script: str, code: int) -> tuple[subprocess.CompletedProcess, str]:
    """A step's script under bash -eo pipefail (as GitHub runs `shell: bash`), `kernelwatch` exiting ``code``."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "output"
        output.write_text("")
        body = script.replace("ci/ascend-env.sh ", "").replace(".venv/bin/kernelwatch", "kw")
        prog = f"kw() {{ return {code}; }}\n{body}"
        out = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", prog],
            capture_output=True,
            text=True,
            timeout=30,
            env={"KERNELWATCH_DB": "x", "PATH": "/usr/bin:/bin", "GITHUB_OUTPUT": str(output), "BASE_REF": "main"},
        )
        return out, output.read_text().strip()


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_the_collect_step_keeps_exit_3_and_fails_on_the_others(path: Path) -> None:
    """Run the collect step's own command line under bash -eo pipefail, `kernelwatch` a function exiting as told."""
    collect = next(s for s in _steps(path) if "kernelwatch collect" in s.get("run", ""))
    script = collect["run"].replace("ci/ascend-env.sh ", "").replace(".venv/bin/kernelwatch", "kw")
    for code, ok in ((0, True), (3, True), (1, False), (2, False)):
        prog = f"kw() {{ return {code}; }}\n{script}\necho reached"
        out = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", prog],
            capture_output=True,
            text=True,
            env={"KERNELWATCH_DB": "x", "PATH": "/usr/bin:/bin"},
            timeout=30,
        )
        assert (out.returncode == 0 and "reached" in out.stdout) == ok, (code, out.returncode)
