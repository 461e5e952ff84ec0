"""`kernelwatch confirm` (docs/design.md): the sequential rule's error rates, and the whole path on the CPU.

The CPU test builds a scratch git repository from this tree (its tracked files, without ci/history),
plants a kernel module whose second commit does half as much work again, and confirms it between
commits: the worktrees, one worker per commit importing its own tree, alternating rounds, the verdict
and the exit code, with the host clock as the timer (``time_on_cpu``).
"""

from __future__ import annotations

import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwatch.cli import main
from kernelwatch.collect.confirm import (
    MAX_MEASUREMENT_MS,
    MIN_ROUNDS,
    ROUND_MS,
    ConfirmError,
    Worker,
    common_method,
    judge,
    measurement_ms,
    median_interval,
    resolve_commit,
    run_rounds,
)
from kernelwatch.collect.perf import LAUNCH_BATCH, launch_batch

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


def test_a_long_call_is_measured_over_more_time_and_a_short_one_keeps_the_round() -> None:
    """A 1.4 ms GEMM at its power cap spread 0.031 (sd of the paired log ratio) over 20 ms measurements and
    0.016 over 100 ms on an H200: such a case samples about 70 calls; a 5 us kernel keeps 20 ms; the length
    never exceeds the cap nor falls below the round; a broken probe keeps the round."""
    assert measurement_ms(0.005) == ROUND_MS
    assert 95 <= measurement_ms(1.4) <= 100
    assert measurement_ms(50.0) == MAX_MEASUREMENT_MS
    assert measurement_ms(1.4, round_ms=300.0) == 300.0
    assert measurement_ms(float("nan")) == ROUND_MS and measurement_ms(0.0) == ROUND_MS


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

from kernelwatch.kernels.spec import EAGER_IMPL, KERNEL_IMPL, Case, KernelSpec, Tolerance

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
    files = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"], check=True, capture_output=True, text=True
    ).stdout.split("\n")
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


def _confirm(cli, repo: Path, base: str, cand: str, *extra: str):
    return cli.invoke(
        main,
        [
            "confirm",
            "--repo",
            str(repo),
            "--case",
            CASE,
            "--baseline-commit",
            base,
            "--candidate-commit",
            cand,
            "--device",
            "cpu",
            "--extra-kernels",
            "planted_confirm",
            "--min-effect",
            "0.2",
            "--round-ms",
            "20",
            *extra,
        ],
    )


def test_confirm_finds_a_planted_slowdown_between_two_commits(cli, scratch) -> None:
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


def test_confirm_calls_identical_code_same(cli, scratch, tmp_path: Path) -> None:
    """Commits 2 and 3 differ only in the README: SAME, exit 0, and the report file holds the table."""
    repo, (_, c2, c3) = scratch
    out = tmp_path / "confirm.md"
    result = _confirm(cli, repo, c2, c3, "--report-file", str(out))
    assert result.exit_code == 0, result.output
    assert f"| `{CASE}` | SAME |" in result.output
    assert f"| `{CASE}` | SAME |" in out.read_text()


def test_both_commits_are_timed_by_one_method_per_case(scratch) -> None:
    """A case is replayed from a graph only where both commits' probes kept a graph; a worker told to replay one
    it cannot capture answers an error (confirm stops on it) instead of timing another way. Defect: each
    measurement chose its own method, and a launch-bound case read 8-12% apart between graph and events."""
    assert common_method("graph", "graph") == "graph"
    assert common_method("graph", "events") == common_method("events", "graph") == "events"
    repo, _ = scratch
    worker = Worker("candidate", repo, "cpu", ("planted_confirm",))
    try:
        setup = worker.ask({"op": "setup", "cases": [{"key": CASE, "seed": 1}]}, 120)
        assert setup["missing"] == [] and setup["errors"] == {}, setup
        forced = worker.ask({"op": "measure", "key": CASE, "rep_ms": 5, "method": "graph"}, 60)
        assert forced == {"error": "RuntimeError: no graph capture on cpu"}
        timed = worker.ask({"op": "measure", "key": CASE, "rep_ms": 5, "method": "events"}, 60)
        assert timed["timing"] == "events" and timed["median_ms"] > 0.9  # the planted 1.5 ms of work
    finally:
        worker.close()


def test_a_commit_older_than_a_timing_method_is_timed_by_the_drivers_backend(scratch, tmp_path: Path) -> None:
    """A baseline commit's ``names`` may predate a timing method the driver's ``Backend`` names (``graph-batch``):
    the worker loads the driver's ``names`` under its ``Backend`` and the commit's kernels still import their
    own. Defect: an ImportError in every confirmation against a commit from before the method existed."""
    repo, _ = scratch
    tree = tmp_path / "old"
    shutil.copytree(repo, tree, ignore=shutil.ignore_patterns(".git"))
    names = tree / "kernelwatch" / "kernels" / "names.py"
    text = names.read_text()
    start = text.index("# How GPU time was taken")
    end = text.index("\n", text.index("GRAPH_TIMINGS =")) + 1
    names.write_text(text[:start] + 'TIMING_GRAPH, TIMING_EVENTS = "graph", "events"\nOLD_TREE = True\n' + text[end:])
    worker = Worker("baseline", tree, "cpu", ("planted_confirm",))
    try:
        setup = worker.ask({"op": "setup", "cases": [{"key": CASE, "seed": 1}]}, 120)
        assert setup["errors"] == {} and Path(setup["tree"]).is_relative_to(tree), setup
        assert setup["sizes"] == {CASE: [512, 0]}  # launch_batch(512, 0): a launch-bound size
        timed = worker.ask({"op": "measure", "key": CASE, "rep_ms": 5, "calls": LAUNCH_BATCH}, 60)
        assert timed["timing"] == "events" and timed["median_ms"] > 0.9  # the CPU has no graph: one call a sample
        worker.send({"op": "quit"})
    finally:
        worker.close()
    assert launch_batch(512, 0) == LAUNCH_BATCH and launch_batch(64 << 20, 0) == launch_batch(1024, 1 << 31) == 1


def test_confirm_refuses_bad_input_with_one_line(cli, scratch) -> None:
    repo, (c1, c2, _) = scratch
    cases = [
        (["--case", CASE, "--baseline-commit", "--upload-pack=x", "--candidate-commit", c2], "not a commit sha"),
        (["--case", CASE, "--baseline-commit", "deadbeef", "--candidate-commit", c2], "is not a commit of"),
        (["--case", CASE], "--case needs --baseline-commit"),
        (["--case", CASE, "--baseline-commit", c1, "--baseline", "main"], "not both"),
        (["--artifact", "x.json"], "--baseline BRANCH|RUN_ID is needed"),
        (
            [
                "--case",
                "nosuch/case",
                "--baseline-commit",
                c1,
                "--candidate-commit",
                c2,
                "--device",
                "cpu",
                "--max-rounds",
                "8",
            ],
            None,
        ),
    ]
    for args, message in cases:
        result = cli.invoke(main, ["confirm", "--repo", str(repo), *args])
        assert result.exit_code == 2, (args, result.output)
        if message:
            assert message in result.output and "Traceback" not in result.output, (args, result.output)
        else:  # a case neither tree has: UNKNOWN, said so
            assert "UNKNOWN (the baseline commit has no perf case nosuch/case)" in result.output


# ---------------------------------------------------------------------------------------------
# Suspects go to confirm, confirmations are stored, the next gate uses them
# ---------------------------------------------------------------------------------------------
def _run_doc(sha: str, ms: float, uuid: str, hour: int) -> dict:
    """A stored-run document of CASE alone on this host's CPU hardware (as a collector run here records it):
    30 samples around ``ms``, measured on the device ``uuid``, committed and started at ``hour``."""
    import numpy as np

    from kernelwatch.collect.metadata import hardware_info
    from kernelwatch.store.schema import SCHEMA

    samples = [ms * (1 + 0.002 * ((i % 7) - 3)) for i in range(30)]
    q = {k: float(np.quantile(samples, v)) for k, v in (("p20_ms", 0.2), ("median_ms", 0.5), ("p80_ms", 0.8))}
    when = f"2026-12-02T{hour:02d}:00:00.000000Z"
    return {
        "schema": SCHEMA,
        "run": {
            "id": f"00000000-0000-4000-8000-{hour:012d}",
            "commit": {"sha": sha, "branch": "main", "time": when, "subject": "t", "dirty": False},
            "trigger": "manual",
            "ci_job": None,
            "device": "cpu",
            "command": None,
            "versions": {},
            "started_at": when,
            "finished_at": when,
            "status": "complete",
            "synthetic": False,
            "notes": None,
        },
        "hardware": {"peak_gbps": None, "peak_tflops": None, **hardware_info("cpu")},
        "cases": [{"key": CASE, "kernel": "confirmed", "variant": "v1", "dtype": "fp32", "params": {"shape": [64]}}],
        "accuracy": [],
        "perf": [
            {
                "case": CASE,
                "implementation": "triton",
                **q,
                "min_ms": min(samples),
                "samples_ms": samples,
                "bytes": 512,
                "flops": None,
                "gbps": None,
                "tflops": None,
                "pct_peak": None,
                "speedup_vs_eager": None,
                "target": None,
                "target_met": None,
                "error": None,
                "device": "cpu",
                "device_uuid": uuid,
            }
        ],
        "profiler": [],
    }


def _gate_and_confirm(cli, repo: Path, url: str, base: dict, cand: dict, tmp_path: Path):
    """Ingest ``base``; gate ``cand`` (an artifact) against main; confirm what it sends; gate again."""
    from kernelwatch.store.artifact import dumps

    path = tmp_path / "candidate.json"
    path.write_text(dumps(cand))
    (tmp_path / "base.json").write_text(dumps(base))
    assert cli.invoke(main, ["ingest", "--db", url, str(tmp_path / "base.json")]).exit_code == 0
    gate = ["gate", "--artifact", str(path), "--baseline", "main", "--db", url, "--report-dir", str(tmp_path / "r")]
    before = cli.invoke(main, gate)
    source = ["--artifact", str(path), "--baseline", "main", "--db", url]
    listed = cli.invoke(main, ["confirm", *source, "--dry-run"])
    confirmed = cli.invoke(
        main,
        [
            "confirm",
            *source,
            "--repo",
            str(repo),
            "--device",
            "cpu",
            "--extra-kernels",
            "planted_confirm",
            "--min-effect",
            "0.2",
            "--round-ms",
            "20",
        ],
    )
    return before, listed, confirmed, cli.invoke(main, gate)


def test_a_cross_device_suspect_confirmed_slower_fails_as_a_regression(cli, scratch, tmp_path: Path) -> None:
    """Commit 2 does 1.5x the work of commit 1; the runs come from two devices, so the gate cannot decide (suspect,
    exit 1). confirm --dry-run lists the case; confirm --db measures SLOWER and stores it; the next gate calls it a
    regression, quoting the confirmation. Defect: confirm taking only "regression" would find nothing here."""
    repo, (c1, c2, _) = scratch
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    before, listed, confirmed, after = _gate_and_confirm(
        cli, repo, url, _run_doc(c1, 1.0, "GPU-aaaa1111-0000", 8), _run_doc(c2, 1.5, "GPU-bbbb2222-0000", 9), tmp_path
    )
    assert before.exit_code == 1 and f"| `{CASE}` | suspect (confirm) |" in before.output, before.output
    assert listed.exit_code == 0 and listed.output.splitlines() == [CASE], listed.output
    assert confirmed.exit_code == 1 and f"| `{CASE}` | SLOWER |" in confirmed.output, confirmed.output
    assert "stored 1 confirmation(s)" in confirmed.output
    assert after.exit_code == 1, after.output
    line = next(x for x in after.output.splitlines() if x.startswith(f"| `{CASE}`"))
    assert "| slower |" in line and "confirmed SLOWER on cpu: ×1." in line and "rounds" in line, line
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.queries import confirmations
    from kernelwatch.store.schema import Confirmation, hardware_fingerprint

    fingerprint = hardware_fingerprint(_run_doc(c1, 1.0, "x", 8)["hardware"])
    rows = confirmations(open_database(url, readonly=True), fingerprint, [CASE])
    stored = Confirmation.model_validate(rows[0])
    assert len(rows) == 1 and (stored.baseline_commit, stored.candidate_commit, stored.verdict) == (c1, c2, "SLOWER")
    assert stored.rounds >= MIN_ROUNDS and 1.3 < stored.ratio < 1.8 and stored.low <= stored.ratio <= stored.high
    assert stored.seconds > 2 * stored.rounds * 0.02 and stored.device_uuid == "cpu"  # 2 x 20 ms per round at least


def test_a_cross_device_suspect_confirmed_same_is_cleared(cli, scratch, tmp_path: Path) -> None:
    """Commits 2 and 3 run the same code; the candidate's device happened to be 30% slower: suspect (exit 1), then
    confirm says SAME and stores it, and the next gate passes the job (exit 0)."""
    repo, (_, c2, c3) = scratch
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    before, listed, confirmed, after = _gate_and_confirm(
        cli, repo, url, _run_doc(c2, 1.5, "GPU-aaaa1111-0000", 8), _run_doc(c3, 1.95, "GPU-bbbb2222-0000", 9), tmp_path
    )
    assert before.exit_code == 1 and f"| `{CASE}` | suspect (confirm) |" in before.output, before.output
    assert confirmed.exit_code == 0 and f"| `{CASE}` | SAME |" in confirmed.output, confirmed.output
    assert after.exit_code == 0 and "## KernelWatch gate: PASS" in after.output, after.output
    assert "decided by a stored confirmation" in after.output


def test_dry_run_lists_suspects_without_torch_or_a_worker(scratch, tmp_path: Path) -> None:
    """--dry-run must work on a CPU-only host with the database and the artifact alone: no torch imported (so no
    device code path), no worker, no worktree. Defect: resolving the device first imports torch."""
    from kernelwatch.store.artifact import dumps
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.ingest import ingest_documents
    from kernelwatch.store.schema import RunDocument

    repo, (c1, c2, _) = scratch
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    ingest_documents(open_database(url), [("base", RunDocument.model_validate(_run_doc(c1, 1.0, "GPU-a-0", 8)))])
    path = tmp_path / "candidate.json"
    path.write_text(dumps(_run_doc(c2, 1.5, "GPU-b-0", 9)))
    code = (
        "import sys\nfrom kernelwatch.cli import main\n"
        "try:\n    main.main(sys.argv[1:], standalone_mode=False)\nexcept SystemExit as e:\n    code = e.code\n"
        "print('MODULES', sorted(m for m in ('torch', 'triton') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "confirm",
            "--dry-run",
            "--artifact",
            str(path),
            "--baseline",
            "main",
            "--db",
            url,
            "--repo",
            str(repo),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [CASE, "MODULES []"], out.stdout
    assert _git(repo, "worktree", "list").count("\n") == 0
