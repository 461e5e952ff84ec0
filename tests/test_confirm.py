"""`kernelwatch confirm` (docs/design.md): the sequential rule's error rates, and the whole path on the CPU.

The CPU test builds a scratch git repository from this tree (its tracked files, without ci/history),
plants a kernel module whose second commit does half as much work again, and confirms it between
commits: the worktrees, one worker per commit importing its own tree, alternating rounds, the verdict
and the exit code, with the host clock as the timer (``time_on_cpu``).
"""

from __future__ import annotations

import math
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from collector.confirm import MIN_ROUNDS, ConfirmError, judge, median_interval, resolve_commit, run_rounds
from kernelwatch.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _simulate(ratio: float, sd: float, trials: int, seed: int, heavy: bool = False, cases: int = 1) -> dict[str, int]:
    rng = random.Random(seed)
    counts = {"SAME": 0, "SLOWER": 0, "FASTER": 0, "UNKNOWN": 0}

    def noise() -> float:
        if heavy and rng.random() < 0.1:  # one measurement in ten hit by host noise: +0-30%
            return rng.uniform(0, 0.3)
        return rng.gauss(0, sd)

    for _ in range(trials):
        keys = [f"c{i}" for i in range(cases)]
        results = run_rounds(keys, lambda side, case: math.exp(noise()) * (ratio if side == "candidate" else 1.0))
        for r in results.values():
            counts[r.verdict] += 1
    return counts


def test_false_slower_rate_is_within_the_documented_bound() -> None:
    """Equal commits: SLOWER at most alpha / 2 = 2.5% of confirmations, also with heavy-tailed noise hitting
    either side. Defect: looking 5 times at the 5% level (no Bonferroni) gives about 8% false SLOWERs."""
    trials = 1500
    for heavy in (False, True):
        counts = _simulate(1.0, 0.03, trials, seed=19 + heavy, heavy=heavy)
        assert counts["SLOWER"] / trials <= 0.025, counts
    # the same bound holds for a confirmation of three cases at once (all of them counted)
    counts = _simulate(1.0, 0.03, 500, seed=7, cases=3)
    assert counts["SLOWER"] / 1500 <= 0.025 / 3 + 0.01, counts


def test_power_a_real_step_is_found_and_equal_code_is_same() -> None:
    """1% noise: +10% is SLOWER (first look, 8 rounds), -10% FASTER, no change SAME. Defect: an interval
    at the wrong level (or on the wrong order statistics) that never excludes the margin."""
    assert _simulate(1.10, 0.01, 200, seed=1)["SLOWER"] == 200
    assert _simulate(1 / 1.10, 0.01, 200, seed=2)["FASTER"] == 200
    same = _simulate(1.0, 0.01, 200, seed=3)
    assert same["SAME"] >= 196 and same["SLOWER"] == 0, same


def test_the_sign_interval_and_the_margin() -> None:
    """The interval [d_(k), d_(n+1-k)] with the largest k whose two-sided error 2 P(Bin(n, 1/2) <= k-1) is
    within the level: n = 8 at 0.01 gives k = 1 (2/256 = 0.0078); n = 20 at 0.05 gives k = 6 (0.041)."""
    d = [float(i) for i in range(1, 21)]
    assert median_interval(d[:8], 0.01) == (1.0, 8.0)
    assert median_interval(d[:7], 0.01) is None  # 2/128 > 0.01: no interval yet
    assert median_interval(d, 0.05) == (6.0, 15.0)
    e = math.log1p(0.025)
    assert judge([e * 1.2] * 8, 0.05, 0.01) == "SLOWER"
    assert judge([e * 0.8] * 8, 0.05, 0.01) == "SAME"
    assert judge([-e * 1.2] * 8, 0.05, 0.01) == "FASTER"
    assert judge([e * 0.8] * 4 + [e * 1.2] * 4, 0.05, 0.01) is None  # straddles the margin: more rounds
    with pytest.raises(ConfirmError, match="at least 8 rounds"):
        run_rounds(["c"], lambda s, c: 1.0, max_rounds=MIN_ROUNDS - 1)


def test_commit_shas_are_validated_before_git_sees_them(tmp_path: Path) -> None:
    for bad in ("-x", "--upload-pack=touch", "HEAD", "abc", "g" * 40, "a" * 41, "1234567 "):
        with pytest.raises(ConfirmError, match="not a commit sha"):
            resolve_commit(tmp_path, bad, "the baseline commit")


PLANTED = '''"""A planted kernel for tests of kernelwatch confirm: WORK_US of host-clock work per call."""
import time

import torch

from kernels.spec import EAGER_IMPL, KERNEL_IMPL, Case, KernelSpec, Tolerance

WORK_US = {work}
TOL = Tolerance(1e-5, 1e-5)


def _spin() -> None:
    end = time.perf_counter() + WORK_US * 1e-6
    while time.perf_counter() < end:
        pass


def _inputs(case, device, seed):
    gen = torch.Generator().manual_seed(seed)
    return {{"x": torch.randn(64, generator=gen).to(device)}}


def _impls(case, inputs):
    x = inputs["x"]

    def kernel():
        _spin()
        return x * 2

    return {{KERNEL_IMPL: kernel, EAGER_IMPL: lambda: x * 2}}


SPEC = KernelSpec(name="confirmed", accuracy_cases=lambda: [],
                  perf_cases=lambda: [Case.make("confirmed", "v1", "fp32", TOL, trials=1, shape=(64,))],
                  make_inputs=_inputs, run=lambda c, i: (i["x"] * 2,), reference=lambda c, i: (i["x"].double() * 2,),
                  implementations=_impls, bytes_moved=lambda c: 512)
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A repository of this tree plus the planted module: commits 1 (1.0 ms of work), 2 (1.5 ms), 3 (2's code,
    another README)."""
    repo = tmp_path_factory.mktemp("scratch")
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"], check=True,
                           capture_output=True, text=True).stdout.split("\n")
    for name in files:
        if name and not name.startswith(("ci/history/", "benchmarks/results/")) and (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    shas = []
    for work, note in ((1000, ""), (1500, ""), (1500, "\nsame code, another README\n")):
        (repo / "planted_confirm.py").write_text(PLANTED.format(work=work))
        if note:
            with (repo / "README.md").open("a") as f:
                f.write(note)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"work {work} us")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return repo, shas


CASE = "confirmed/v1/fp32/shape=64"


def _confirm(cli, repo: Path, base: str, cand: str, *extra: str):  # noqa: ANN001, ANN202
    return cli.invoke(main, ["confirm", "--repo", str(repo), "--case", CASE, "--baseline-commit", base,
                             "--candidate-commit", cand, "--device", "cpu", "--extra-kernels", "planted_confirm",
                             "--min-effect", "0.2", "--round-ms", "20", *extra])


def test_confirm_finds_a_planted_slowdown_between_two_commits(cli, scratch) -> None:  # noqa: ANN001
    """+50% of work between commits 1 and 2: SLOWER, exit 1, the rounds reported; the worktrees are gone.
    Defect: both workers importing one tree (this checkout's, say) would make it SAME."""
    repo, (c1, c2, _) = scratch
    result = _confirm(cli, repo, c1[:10], c2)
    assert result.exit_code == 1, result.output
    row = next(line for line in result.output.splitlines() if line.startswith(f"| `{CASE}`"))
    cells = [c.strip() for c in row.split("|")]
    assert cells[2] == "SLOWER" and int(cells[3]) >= MIN_ROUNDS
    assert 1.3 < float(cells[4]) < 1.8  # candidate / baseline: 1.5 ms / 1.0 ms of work
    assert _git(repo, "worktree", "list").count("\n") == 0  # only the main worktree is left


def test_confirm_calls_identical_code_same(cli, scratch, tmp_path: Path) -> None:  # noqa: ANN001
    """Commits 2 and 3 differ only in the README: SAME, exit 0, and the report file holds the table."""
    repo, (_, c2, c3) = scratch
    out = tmp_path / "confirm.md"
    result = _confirm(cli, repo, c2, c3, "--report-file", str(out))
    assert result.exit_code == 0, result.output
    assert f"| `{CASE}` | SAME |" in result.output
    assert f"| `{CASE}` | SAME |" in out.read_text()


def test_confirm_refuses_bad_input_with_one_line(cli, scratch) -> None:  # noqa: ANN001
    repo, (c1, c2, _) = scratch
    cases = [
        (["--case", CASE, "--baseline-commit", "--upload-pack=x", "--candidate-commit", c2], "not a commit sha"),
        (["--case", CASE, "--baseline-commit", "deadbeef", "--candidate-commit", c2], "is not a commit of"),
        (["--case", CASE], "--case needs --baseline-commit"),
        (["--case", CASE, "--baseline-commit", c1, "--baseline", "main"], "not both"),
        (["--artifact", "x.json"], "--baseline BRANCH|RUN_ID is needed"),
        (["--case", "nosuch/case", "--baseline-commit", c1, "--candidate-commit", c2, "--device", "cpu",
          "--max-rounds", "8"], None),
    ]
    for args, message in cases:
        result = cli.invoke(main, ["confirm", "--repo", str(repo), *args])
        assert result.exit_code == 2, (args, result.output)
        if message:
            assert message in result.output and "Traceback" not in result.output, (args, result.output)
        else:  # a case neither tree has: UNKNOWN, said so
            assert "UNKNOWN (the baseline commit has no perf case nosuch/case)" in result.output
