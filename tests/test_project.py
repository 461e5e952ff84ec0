"""The kernel registry and the project file (kernelwatch/project.py): where kernels, the repository, the baseline and
the thresholds come from, and the one-line refusal of a project file that cannot be used."""

from __future__ import annotations

import os
import pkgutil
import sys
from pathlib import Path

import pytest

from kernelwatch import kernels
from kernelwatch.cli import main
from kernelwatch.project import PACKAGE_ROOT, ProjectError, kernel_modules, load_project

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "team-kernels"


def test_every_kernel_package_of_ours_is_declared_as_an_entry_point() -> None:
    """A kernel package left out of pyproject's kernelwatch.kernels table would be silently never measured."""
    packages = {
        f"kernelwatch.kernels.{m.name}"
        for m in pkgutil.iter_modules(kernels.__path__)
        if m.ispkg and (Path(kernels.__path__[0]) / m.name / "spec.py").is_file()
    }
    own = load_project(ROOT / "pyproject.toml")
    assert packages and packages <= set(kernel_modules(own))
    assert {spec.name for spec in kernels.discover().values()} >= {m.rpartition(".")[2] for m in packages}


def test_the_example_pyproject_registers_its_kernel_without_an_install(monkeypatch) -> None:
    project = load_project(EXAMPLE)
    assert project.file == (EXAMPLE / "pyproject.toml").resolve() and project.repository == EXAMPLE.resolve()
    assert project.kernels == ("team_kernels.rownorm",) and project.baseline == "main"
    assert project.min_effect == 0.08 and project.case_min_effect == {"rownorm": 0.1}
    assert kernel_modules(project)[-1] == "team_kernels.rownorm"
    restore = project.activate()
    try:
        assert os.environ["KERNELWATCH_PROJECT"] == str(project.file)
        assert str(EXAMPLE.resolve()) in sys.path
        assert "rownorm" in kernels.discover()
    finally:
        restore()
    assert "KERNELWATCH_PROJECT" not in os.environ or os.environ["KERNELWATCH_PROJECT"] != str(project.file)
    assert str(EXAMPLE.resolve()) not in sys.path
    sys.modules.pop("team_kernels.rownorm", None)
    sys.modules.pop("team_kernels", None)


def test_without_a_project_file_the_project_is_this_checkout(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KERNELWATCH_PROJECT", raising=False)
    project = load_project()
    assert project.file is None and project.repository == PACKAGE_ROOT and project.kernels == ()
    (tmp_path / "sub").mkdir()
    (tmp_path / "kernelwatch.toml").write_text('baseline = "release"\n')
    monkeypatch.chdir(tmp_path / "sub")
    found = load_project()  # the nearest one upwards
    assert found.file == (tmp_path / "kernelwatch.toml").resolve() and found.baseline == "release"
    assert found.repository == tmp_path.resolve()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kernels = [", "not valid TOML"),
        ("kernel = ['a']", "unknown key 'kernel'"),
        ("kernels = 'team.mod'", "kernels must be a list of module names"),
        ("min-effect = 0", "min-effect must be a number in (0, 10)"),
        ("case-min-effect = {rownorm = 'x'}", "case-min-effect rownorm must be a number"),
        ("repository = 'nowhere'", "is no folder"),
        ("baseline = ''", "baseline must be a non-empty string"),
    ],
)
def test_a_bad_project_file_is_refused_in_one_line(text: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "kernelwatch.toml"
    path.write_text(text + "\n")
    with pytest.raises(ProjectError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        load_project(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_the_commands_refuse_a_bad_project_with_exit_2_and_one_line(tmp_path: Path, cli) -> None:
    (tmp_path / "kernelwatch.toml").write_text("kernels = ['no_such_team_module']\n")
    artifact = ROOT / "tests" / "fixtures" / "release-0.1.0" / "synth0.json"
    for args in (["gate", "--project", str(tmp_path / "missing.toml"), "--artifact", "x.json"],
                 ["gate", "--project", str(tmp_path), "--artifact", str(artifact), "--baseline", "main",
                  "--db", f"sqlite:///{tmp_path / 'kw.db'}", "--report-dir", str(tmp_path / "r")],
                 ["collect", "--project", str(tmp_path / "kernelwatch.toml"), "--device", "cpu",
                  "--out", str(tmp_path / "run.json")]):  # fmt: skip
        result = cli.invoke(main, args)
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.output, result.output
        assert "missing.toml" in lines[0] or "no_such_team_module" in lines[0], lines
    assert not (tmp_path / "run.json").exists()


def test_doctor_names_the_projects_kernels_and_a_module_that_cannot_be_imported(tmp_path: Path, cli) -> None:
    good = cli.invoke(main, ["doctor", "--device", "cpu", "--no-db", "--project", str(EXAMPLE)])
    assert good.exit_code == 0, good.output
    line = next(x for x in good.output.splitlines() if x.split()[1:2] == ["kernels"])
    assert "rownorm" in line and "mse_loss" in line and str(EXAMPLE / "pyproject.toml") in line
    (tmp_path / "kernelwatch.toml").write_text("kernels = ['no_such_team_module']\n")
    bad = cli.invoke(main, ["doctor", "--device", "cpu", "--no-db", "--project", str(tmp_path)])
    assert bad.exit_code == 1, bad.output
    assert "kernelwatch doctor: kernels: kernel module 'no_such_team_module' cannot be imported" in bad.output
    sys.modules.pop("team_kernels.rownorm", None)
    sys.modules.pop("team_kernels", None)
