"""`kernelwatch collect --changed-since REF` (kernelwatch.collect.changes) and the gate's carry-over of the kernels it
skipped (kernelwatch.gate.judge.carry_over): on a throw-away git copy of the repository, with planted changes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelwatch.cli import main
from kernelwatch.collect.changes import ChangeError, changed_kernels, kernel_modules, resolve_ref, sources
from kernelwatch.kernels import discover
from kernelwatch.store.artifact import dumps, load_artifact, to_data
from kernelwatch.store.schema import skipped_from_notes, skipped_note, whole_from_notes

ROOT = Path(__file__).resolve().parents[1]
KERNELS = tuple(sorted(discover()))  # the registry's: a kernel added to it needs no edit here


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """The project's Python packages and pyproject.toml, committed in a fresh repository."""
    repo = tmp_path_factory.mktemp("repo")
    ignore = shutil.ignore_patterns("__pycache__", "history", "*.pyc")
    for package in ("kernelwatch",):
        shutil.copytree(ROOT / package, repo / package, ignore=ignore)
    (repo / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "planted_kernels.py", repo / "tests")
    shutil.copytree(ROOT / "tests" / "projects", repo / "tests" / "projects")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, repo / name)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    return repo


def _touch(path: Path) -> None:
    path.write_text(path.read_text() + "\n# a planted change\n")


@pytest.fixture
def clean(repo: Path) -> Iterator[Path]:
    yield repo
    _git(repo, "checkout", "-q", "--", ".")
    _git(repo, "clean", "-qfd")


def _modules() -> dict[str, str]:
    modules = kernel_modules()
    assert sorted(modules) == list(KERNELS) and modules["mse_loss"] == "kernelwatch.kernels.mse_loss"
    return modules


@pytest.mark.parametrize(
    ("planted", "run"),
    [
        (None, {}),
        ("README.md", {}),  # documentation moves no number
        ("kernelwatch/kernels/mse_loss/kernel.py", {"mse_loss": ["kernelwatch/kernels/mse_loss/kernel.py"]}),
        (
            "kernelwatch/kernels/fused_rmsnorm_matmul/plans.py",
            {"fused_rmsnorm_matmul": ["kernelwatch/kernels/fused_rmsnorm_matmul/plans.py"]},
        ),
        # both fused kernels are built on the shared norm + GEMM module: a change there runs both
        (
            "kernelwatch/kernels/norm_gemm.py",
            {k: ["kernelwatch/kernels/norm_gemm.py"] for k in ("fused_layernorm_matmul", "fused_rmsnorm_matmul")},
        ),
        (
            "kernelwatch/kernels/plan.py",
            {k: ["kernelwatch/kernels/plan.py"] for k in KERNELS},
        ),  # every kernel plans through it
        (
            "kernelwatch/collect/backends.py",
            {k: ["kernelwatch/collect/backends.py"] for k in KERNELS},
        ),  # how every kernel is timed
        ("pyproject.toml", {k: ["pyproject.toml"] for k in KERNELS}),
        ("kernelwatch/collect/gone.py", {}),  # an untracked file nothing imports
    ],
)
def test_which_kernels_run_and_which_are_skipped(clean: Path, planted: str | None, run: dict) -> None:
    if planted == "kernelwatch/collect/gone.py":
        (clean / planted).write_text("x = 1\n")
    elif planted is not None:
        _touch(clean / planted)
    changes = changed_kernels("HEAD", _modules(), clean)
    assert changes.run == run, changes
    assert changes.skipped == [k for k in KERNELS if k not in run]
    assert changes.files == ([] if planted is None else [planted])
    assert skipped_from_notes("; ".join(["host: h", *changes.notes(), "x: y"])) == changes.skipped


def test_the_sources_of_a_kernel_follow_its_imports_and_no_further() -> None:
    mse = sources(["kernelwatch.kernels.mse_loss"])
    package = {f"kernelwatch/kernels/mse_loss/{m}.py" for m in ("__init__", "kernel", "plans", "api", "spec")}
    assert (
        package | {"kernelwatch/kernels/plan.py", "kernelwatch/kernels/spec.py", "kernelwatch/kernels/__init__.py"}
        <= mse
    )
    assert not any(f.startswith("kernelwatch/collect/") for f in mse)
    layernorm, rmsnorm = (
        sources(["kernelwatch.kernels.fused_layernorm_matmul"]),
        sources(["kernelwatch.kernels.fused_rmsnorm_matmul"]),
    )
    assert "kernelwatch/kernels/norm_gemm.py" in layernorm and "kernelwatch/kernels/norm_gemm.py" in rmsnorm
    assert not any(f.startswith("kernelwatch/kernels/fused_rmsnorm_matmul/") for f in layernorm)
    assert not any(f.startswith("kernelwatch/kernels/fused_layernorm_matmul/") for f in rmsnorm)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("-rf", "not a git revision"),
        ("--output=/tmp/x", "not a git revision"),
        ("HEAD..main", "not a git revision"),
        ("a b", "not a git revision"),
        ("", "not a git revision"),
        ("no-such-branch-31", "no such commit"),
    ],
)
def test_a_bad_ref_is_refused_in_one_line(ref: str, message: str, repo: Path) -> None:
    with pytest.raises(ChangeError, match=message):
        resolve_ref(ref, repo)
    assert resolve_ref("HEAD", repo) == _git(repo, "rev-parse", "HEAD").strip()


def test_collect_refuses_a_bad_ref_before_measuring(tmp_path: Path, cli) -> None:
    out = tmp_path / "run.json"
    for ref in ("no-such-branch-31", "--out=/tmp/x"):
        result = cli.invoke(
            main,
            [
                "collect",
                "--device",
                "cpu",
                "--kernels",
                "mse_loss",
                "--no-progress",
                "--changed-since",
                ref,
                "--out",
                str(out),
            ],
        )
        assert result.exit_code == 2, result.output
        assert "--changed-since" in result.output and len(result.output.strip().splitlines()) == 1, result.output
        assert "Traceback" not in result.output and not out.exists()


def _collect(repo: Path, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(repo), "PLANTED_VARIANTS": "correct"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelwatch",
            "collect",
            "--project",
            "tests/projects/planted.toml",
            "--device",
            "cpu",
            "--suite",
            "accuracy",
            "--no-progress",
            "--changed-since",
            "HEAD",
            "--out",
            str(out),
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_collect_runs_only_the_changed_kernel_and_names_the_skipped(clean: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    nothing = _collect(clean, out)
    assert nothing.returncode == 0, nothing.stderr
    assert "nothing to run: no kernel's sources changed since HEAD" in nothing.stderr and not out.exists()
    _touch(clean / "tests" / "planted_kernels.py")
    result = _collect(clean, out)
    assert result.returncode == 0, result.stderr
    doc = to_data(load_artifact(out))
    assert {c["kernel"] for c in doc["cases"]} == {"planted"}
    assert skipped_from_notes(doc["run"]["notes"]) == list(KERNELS)
    assert "kernels run, changed since HEAD" in doc["run"]["notes"]
    assert "planted (tests/planted_kernels.py)" in doc["run"]["notes"]
    assert whole_from_notes(doc["run"]["notes"]) == ({"accuracy"}, {"planted"})  # no case filter: every case


# ---------------------------------------------------------------------------------------------
# The gate: skipped kernels are carried over from the baseline, never missing
# ---------------------------------------------------------------------------------------------
def _history(db: str) -> dict:
    from kernelwatch.store.artifact import parse_artifact
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.ingest import ingest_documents
    from kernelwatch.store.synthetic import SyntheticHistory

    docs = list(SyntheticHistory(runs=7, cases=10, samples=30, seed=0, base_ms=0.1).documents())
    ingest_documents(open_database(db), [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(docs[:-1])])
    return to_data(docs[-1])


def _gate(cli, db: str, doc: dict, tmp_path: Path):
    path = tmp_path / "candidate.json"
    path.write_text(dumps(doc))
    return cli.invoke(
        main,
        [
            "gate",
            "--artifact",
            str(path),
            "--baseline",
            "synthetic/main",
            "--db",
            db,
            "--report-dir",
            str(tmp_path / "report"),
        ],
    )


def test_the_gate_carries_skipped_kernels_over_and_still_judges_the_rest(tmp_path: Path, cli) -> None:
    """A candidate without mse_loss: missing (it is partial, so everything is expected of it) until its notes
    say mse_loss was skipped as unchanged; then mse_loss is carried and the rest is judged as before."""
    db = f"sqlite:///{tmp_path / 'kw.db'}"
    candidate = _history(db)
    dropped = {c["key"] for c in candidate["cases"] if c["kernel"] == "mse_loss"}
    others = {c["kernel"] for c in candidate["cases"]} - {"mse_loss"}
    assert dropped and others
    candidate["run"]["status"] = "partial"
    candidate["accuracy"] = [a for a in candidate["accuracy"] if a["case"] not in dropped]
    candidate["perf"] = [p for p in candidate["perf"] if p["case"] not in dropped]
    candidate["cases"] = [c for c in candidate["cases"] if c["key"] not in dropped]
    result = _gate(cli, db, candidate, tmp_path)
    assert result.exit_code == 1 and "missing" in result.output, result.output
    candidate["run"]["notes"] = skipped_note("origin/main (abc)", ["mse_loss", "not_in_the_baseline"])
    result = _gate(cli, db, candidate, tmp_path)
    assert result.exit_code == 0, result.output
    assert "missing" not in result.output and "carried over from baseline run" in result.output
    report = (tmp_path / "report" / "gate.md").read_text()
    (carried,) = [line for line in report.splitlines() if line.startswith("Note: carried over")]
    assert carried.endswith(r": mse\_loss"), carried  # a kernel the baseline never had is not carried
    candidate["accuracy"][0].update(passed=False, error_budget=3.5)
    result = _gate(cli, db, candidate, tmp_path)
    assert result.exit_code == 1 and "error budget 3.5 > 1" in result.output, "a kernel that ran is still judged"
