"""The built wheel is one package, ``kernelwatch``, and runs beside a team's own ``kernels/``, ``ci/``, ``db/``.

The wheel is built from a copy of the sources, installed into a fresh folder, and run from a working directory
that holds decoy packages under every name KernelWatch used to install at the top level (the working directory
is first on ``sys.path`` for ``python -m``): a collect on the CPU and the gate on its result must work and must
never import a decoy.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DECOYS = ("kernels", "collector", "db", "dashboard", "ci")
CASE = ("mse_loss", "mse_loss/atomic/fp32/direction=bwd,reduction=mean,shape=1000")  # one small fp32 accuracy case
DECOY = 'from pathlib import Path\nPath(__file__).with_name("IMPORTED").touch()\nraise ImportError("decoy")\n'


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel of this tree, installed (no dependencies: they come from the running environment) into a folder."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "kernelwatch", src / "kernelwatch", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    built = _run(
        [*pip, "wheel", str(src), "--no-deps", "--no-build-isolation", "--no-index", "-w", str(tmp)],
        tmp,
        {**os.environ},
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp.glob("kernelwatch-*.whl")
    site = tmp / "site"
    done = _run([*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)], tmp, {**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    return site


def test_the_wheel_holds_one_package_with_its_data_files(installed: Path) -> None:
    tops = {p.name for p in installed.iterdir() if p.is_dir() and not p.name.endswith((".dist-info", "bin"))}
    assert tops == {"kernelwatch"}
    for data in ("store/migrations/script.py.mako", "store/migrations/env.py", "dashboard/.streamlit/config.toml"):
        assert (installed / "kernelwatch" / data).is_file(), data


@pytest.mark.slow
def test_collect_and_gate_run_beside_decoys_of_the_old_names(installed: Path, tmp_path: Path) -> None:
    work = tmp_path / "team-repo"
    for name in DECOYS:
        (work / name).mkdir(parents=True)
        (work / name / "__init__.py").write_text(DECOY)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KERNELWATCH_DB")}
    env.update(PYTHONPATH=str(installed), TRITON_INTERPRET="1")
    kw = [sys.executable, "-m", "kernelwatch"]
    db = f"sqlite:///{work / 'kw.db'}"

    where = _run([sys.executable, "-c", "import kernelwatch.kernels as k; print(k.__file__)"], work, env)
    assert where.stdout.strip() == str(installed / "kernelwatch" / "kernels" / "__init__.py"), where.stderr[-2000:]

    collect = [*kw, "collect", "--device", "cpu", "--suite", "accuracy", "-k", CASE[0], "--case", CASE[1]]
    base = _run([*collect, "--no-progress", "--db", db], work, env)
    assert base.returncode == 0, base.stderr[-3000:]
    found = re.search(r"^run ([0-9a-f-]{36}): complete", base.stdout + base.stderr, re.M)
    assert found, (base.stdout + base.stderr)[-3000:]
    cand = _run([*collect, "--no-progress", "--out", str(work / "cand.json")], work, env)
    assert cand.returncode == 0, cand.stderr[-3000:]

    baseline = found.group(1)[:8]
    gate = _run(
        [*kw, "gate", "--artifact", "cand.json", "--baseline", baseline, "--db", db, "--report-dir", "r"], work, env
    )
    assert gate.returncode == 0, (gate.stdout + gate.stderr)[-3000:]
    assert (work / "r" / "gate.md").is_file()
    assert not list(work.glob("*/IMPORTED")), "a decoy package was imported"
