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
    scope = doc["run"]["scope"]  # the typed record the gate reads (the notes are for people)
    assert scope["carried"] == sorted(KERNELS) and "planted" in scope["kernels"] and scope["match"] is None
    assert len(scope["carried_since"]) == 40


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


def _decide(db: str, doc: dict, unchanged: set[str]):
    """The gate over a tree that defines the synthetic cases, whose git says ``unchanged`` kernels' sources did not
    change since any baseline commit."""
    from kernelwatch.gate.judge import SpecCases, decide
    from kernelwatch.store.artifact import parse_artifact
    from kernelwatch.store.engine import open_database

    engine = open_database(db, readonly=True)
    kernel = {}
    suites: dict[str, dict[str, str]] = {"accuracy": {}, "perf": {}}
    for run in (doc, *[_export(engine, r) for r in _ids(engine)]):
        kernel.update({c["key"]: c["kernel"] for c in run["cases"]})
        suites["accuracy"].update({a["case"]: kernel[a["case"]] for a in run["accuracy"] if a["kind"] == "gate"})
        suites["perf"].update({p["case"]: kernel[p["case"]] for p in run["perf"] if p["implementation"] == "triton"})
    return decide(engine, parse_artifact(dumps(doc)), "synthetic/main", specs=SpecCases(suites, lambda c: unchanged))


def _ids(engine) -> list[str]:
    from kernelwatch.store.queries import latest_complete_runs

    return [r["id"] for r in latest_complete_runs(engine)]


def _export(engine, run_id: str) -> dict:
    from kernelwatch.store.export import export_run

    return to_data(export_run(engine, run_id))


def _without_mse(candidate: dict) -> dict:
    dropped = {c["key"] for c in candidate["cases"] if c["kernel"] == "mse_loss"}
    assert dropped and {c["kernel"] for c in candidate["cases"]} - {"mse_loss"}
    candidate["accuracy"] = [a for a in candidate["accuracy"] if a["case"] not in dropped]
    candidate["perf"] = [p for p in candidate["perf"] if p["case"] not in dropped]
    candidate["cases"] = [c for c in candidate["cases"] if c["key"] not in dropped]
    candidate["run"]["status"] = "partial"  # cut short: everything is expected of it
    return candidate


def test_the_gate_carries_skipped_kernels_over_and_still_judges_the_rest(tmp_path: Path) -> None:
    """A candidate without mse_loss: missing until its scope says mse_loss was skipped as unchanged (a skipped
    note, as runs before the typed scope said it) and the tree confirms it; then mse_loss is carried and the rest is
    judged as before."""
    db = f"sqlite:///{tmp_path / 'kw.db'}"
    candidate = _without_mse(_history(db))
    result = _decide(db, candidate, {"mse_loss"})
    assert result.exit_code == 1 and any(v.status == "missing" for v in result.verdicts)
    candidate["run"]["notes"] = skipped_note("origin/main (abc1234)", ["mse_loss", "not_in_the_baseline"])
    result = _decide(db, candidate, {"mse_loss"})
    assert result.exit_code == 0, [(v.case, v.status) for v in result.failed]
    assert result.carried == ["mse_loss"]  # a kernel the baseline never had is not carried
    (carried,) = [n for n in result.notes if n.startswith("carried over")]
    assert carried.endswith(": mse_loss"), carried
    candidate["accuracy"][0].update(passed=False, error_budget=3.5)
    result = _decide(db, candidate, {"mse_loss"})
    assert result.exit_code == 1 and any("error budget 3.5 > 1" in v.message for v in result.failed)


def test_a_carry_over_the_tree_does_not_confirm_excuses_nothing(tmp_path: Path) -> None:
    """The scope an artifact claims is candidate-written. A typed scope saying mse_loss was carried over,
    from a tree where mse_loss's sources changed since the baseline's commit (or git cannot tell): every mse_loss
    case is missing, and a note says why it was not carried."""
    db = f"sqlite:///{tmp_path / 'kw.db'}"
    candidate = _without_mse(_history(db))
    candidate["run"]["scope"] = {
        "suites": ["accuracy", "perf"],
        "kernels": None,
        "match": None,
        "cases": [],
        "carried": ["mse_loss"],
        "carried_since": "abc1234",
    }
    result = _decide(db, candidate, set())
    assert result.exit_code == 1 and not result.carried
    assert {v.kernel for v in result.failed if v.status == "missing"} == {"mse_loss"}
    assert any(n.startswith("not carried over: mse_loss") for n in result.notes), result.notes
    assert _decide(db, candidate, {"mse_loss"}).exit_code == 0
