"""`kernelwatch doctor` on this CPU host, and with pieces taken away (environment, PATH, database)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwatch.collect.doctor import (
    check_cann,
    check_compiler,
    check_database,
    check_profiler,
    check_versions,
    diagnose,
)

ROOT = Path(__file__).resolve().parents[1]


def _doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernelwatch", "doctor", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env=env or dict(os.environ),
    )


def test_cpu_host_passes_and_reports_what_a_run_uses(tmp_path: Path) -> None:
    out = _doctor("--device", "cpu", "--db", str(tmp_path / "kw.db"))
    assert out.returncode == 0, out.stderr
    lines = {line.split()[1]: line for line in out.stdout.splitlines() if line.strip()}
    assert "cpu x1" in lines["device"] and lines["vendor"].split()[-1] == "cpu"
    for name in (
        "torch",
        "triton",
        "torch_npu",
        "triton-ascend",
        "ASCEND_HOME_PATH",
        "CANN",
        "C",
        "profiler",
        "database",
    ):
        assert name in lines, f"doctor does not report {name}"
    assert "(will be created)" in lines["database"]
    assert out.stderr == ""


def test_npu_asked_for_on_a_host_without_one_fails_with_one_line_per_missing_piece(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND")}
    out = _doctor("--device", "npu", "--db", str(tmp_path / "kw.db"), env=env)
    assert out.returncode == 1
    reasons = out.stderr.strip().splitlines()
    assert all(r.startswith("kernelwatch doctor: ") for r in reasons)
    text = "\n".join(reasons)
    assert "device: --device npu" in text
    assert "ASCEND_HOME_PATH is not set" in text
    assert "community triton is installed on an NPU host" in text  # this venv's triton would overwrite triton-ascend
    assert len(reasons) == len({r.split(":")[1] for r in reasons}), "one line per missing piece"


def test_unreachable_database_is_a_failure_naming_it_without_its_password() -> None:
    url = "postgresql+psycopg://kw:secret@127.0.0.1:1/kernelwatch"  # nothing listens on port 1
    check = check_database(url)
    assert not check.ok and check.failed and "not reachable" in check.reason
    assert "secret" not in check.reason and "secret" not in check.value
    out = _doctor("--device", "cpu", "--db", url)
    assert out.returncode == 1 and "database: database postgresql+psycopg://kw:***@127.0.0.1:1" in out.stderr


def test_sqlite_database_states(tmp_path: Path) -> None:
    db = tmp_path / "kw.db"
    assert check_database(str(db)).ok and "will be created" in check_database(str(db)).value
    sqlite3.connect(db).close()
    assert check_database(str(db)).ok and "will be created" not in check_database(str(db)).value
    assert not db.with_name("other.db").exists(), "the doctor must not create a database"


def test_path_without_a_compiler_fails_on_accelerators_only(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}
    compiler, _ = check_compiler("npu", env)
    assert compiler.failed and "no C compiler" in compiler.reason
    compiler, _ = check_compiler("cpu", env)
    assert compiler.ok and not compiler.required  # the interpreter compiles nothing
    fake_cc = tmp_path / "gcc"
    fake_cc.write_text("#!/bin/sh\n")
    fake_cc.chmod(0o755)
    compiler, _ = check_compiler("npu", env)
    assert compiler.ok and compiler.value == str(fake_cc)


def test_cann_environment_checks(tmp_path: Path) -> None:
    home, cann = check_cann("npu", {})
    assert home.failed and "source CANN's set_env.sh" in home.reason and cann.failed
    home, cann = check_cann("cpu", {})
    assert not home.failed and not cann.failed  # not needed off the NPU
    toolkit = tmp_path / "latest"
    (toolkit / "compiler").mkdir(parents=True)
    (toolkit / "compiler" / "version.info").write_text("Version=8.5.0\n")
    home, cann = check_cann("npu", {"ASCEND_HOME_PATH": str(toolkit), "ASCEND_TOOLKIT_HOME": str(toolkit)})
    assert home.ok and cann.ok and cann.value == "8.5.0"
    (toolkit / "compiler" / "version.info").write_text("Version=8.3.RC1\n")
    _, cann = check_cann("npu", {"ASCEND_HOME_PATH": str(toolkit)})
    assert cann.ok and "not the documented 8.5.0" in cann.value
    home, _ = check_cann("npu", {"ASCEND_HOME_PATH": str(tmp_path / "nowhere")})
    assert home.failed and "not a directory" in home.reason


def test_profiler_required_only_when_profiling(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}
    assert check_profiler("cuda", True, env).failed
    assert not check_profiler("cuda", False, env).failed
    msprof = tmp_path / "msprof"
    msprof.write_text("#!/bin/sh\n")
    msprof.chmod(0o755)
    assert check_profiler("npu", True, env).ok


def test_versions_on_this_cpu_host() -> None:
    checks = {c.name: c for c in check_versions("cpu")}
    assert checks["triton"].ok and checks["triton"].value.startswith("triton ")
    assert not any(c.failed for c in checks.values())


def test_json_output_lists_every_check(tmp_path: Path) -> None:
    out = _doctor("--device", "cpu", "--no-db", "--format", "json")
    data = json.loads(out.stdout)
    assert out.returncode == 0 and {"device", "vendor", "torch", "triton"} <= {c["name"] for c in data}
    assert "database" not in {c["name"] for c in data}


def test_diagnose_takes_the_environment_as_a_parameter(tmp_path: Path) -> None:
    no_tools = {"PATH": str(tmp_path)}
    checks = {c.name: c for c in diagnose("cpu", db_url=str(tmp_path / "kw.db"), env=no_tools)}
    assert not any(c.failed for c in checks.values())
    assert checks["C compiler"].value == "not found" and checks["profiler"].ok


def test_cuda_asked_for_with_the_cpu_build_of_torch_names_the_build(tmp_path: Path) -> None:
    """doctor --device cuda said "ok torch 2.13.0+cpu" and failed the device without saying why."""
    import torch

    if torch.version.cuda is not None:
        pytest.skip("this PyTorch is a CUDA build")
    out = _doctor("--device", "cuda", "--db", str(tmp_path / "kw.db"))
    assert out.returncode == 1
    lines = {line.split()[1]: line for line in out.stdout.splitlines() if line.strip()}
    assert lines["torch"].startswith("FAIL") and "CPU-only build" in lines["torch"]
    assert f"this PyTorch is the CPU-only build ({torch.__version__})" in out.stderr
    assert "a CUDA build of PyTorch" in out.stderr
