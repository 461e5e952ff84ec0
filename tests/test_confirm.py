"""`kernelwatch confirm` (docs/design.md): the sequential rule's error rates, and the whole path on the CPU.

The CPU test builds a scratch git repository from this tree (its tracked files, without ci/history),
plants a kernel module whose second commit costs half as much device time again (and returns 3x where the first
returns 2x), and confirms it between commits: the worktrees, one worker loading both trees side by side,
interleaved rounds, the verdict, the exit code and the stored per-round data. The worker's clock is planted
(tests/planted_clock.py, through tests/planted_backends.py): a call costs what its commit says, with seeded noise,
so a verdict never depends on how busy the host is (host-timed, identical commits read UNKNOWN on a loaded
2-core machine). The decision rule's error rates are checked by simulation: rounds drawn from known
distributions, the sequential rule run on them.
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
    Reading,
    Worker,
    common_method,
    confirm_trees,
    first_decisive_look,
    judge,
    looks,
    measurement_ms,
    median_interval,
    resolve_commit,
    run_rounds,
)
from kernelwatch.collect.perf import LAUNCH_BATCH, launch_batch

ROOT = Path(__file__).resolve().parents[1]


def _simulate(
    ratio: float,
    sd: float,
    trials: int,
    seed: int,
    heavy: bool = False,
    cases: int = 1,
    max_rounds: int = 24,
    case_seconds: float = math.inf,
) -> dict[str, int]:
    """Verdicts of ``trials`` confirmations whose rounds are drawn from a known distribution: candidate / baseline
    is ``ratio`` times lognormal noise of sd ``sd`` on each side (plus, with ``heavy``, host noise of +0-30% on
    one measurement in ten). With ``case_seconds``, a round costs one second of a planted clock."""
    rng = random.Random(seed)
    counts = dict.fromkeys(("SAME", "NOT_SLOWER", "SLOWER", "FASTER", "UNKNOWN"), 0)
    now = [0.0]

    def noise() -> float:
        if heavy and rng.random() < 0.1:
            return rng.uniform(0, 0.3)
        return rng.gauss(0, sd)

    def measure(case: str, r: int) -> Reading:
        now[0] += 1.0
        return Reading(math.exp(noise()), math.exp(noise()) * ratio)

    for _ in range(trials):
        keys = [f"c{i}" for i in range(cases)]
        results = run_rounds(keys, measure, max_rounds=max_rounds, case_seconds=case_seconds, clock=lambda: now[0])
        for r in results.values():
            counts[r.verdict] += 1
    return counts


def test_false_slower_rate_is_within_the_documented_bound() -> None:
    """Equal commits: SLOWER at most alpha / 2 = 2.5% of confirmations, also with heavy-tailed noise hitting
    either side, with the default 96 rounds of looks as with 24. Defect: looking at every planned look at the 5%
    level (no Bonferroni) gives about 8% false SLOWERs."""
    trials = 1500
    for heavy in (False, True):
        counts = _simulate(1.0, 0.03, trials, seed=19 + heavy, heavy=heavy)
        assert counts["SLOWER"] / trials <= 0.025, counts
    counts = _simulate(1.0, 0.03, 800, seed=23, heavy=True, max_rounds=96)
    assert counts["SLOWER"] / 800 <= 0.025, counts
    # the same bound holds for a confirmation of three cases at once (all of them counted)
    counts = _simulate(1.0, 0.03, 500, seed=7, cases=3)
    assert counts["SLOWER"] / 1500 <= 0.025 / 3 + 0.01, counts


def test_false_not_slower_rate_at_the_margin_is_within_the_bound() -> None:
    """A candidate slower by exactly half the minimum effect (the margin e): NOT_SLOWER or SAME (both clear the
    gate) at most alpha / 2 = 2.5% of confirmations. Defect: NOT_SLOWER on the estimate (ratio < 1 + e) instead
    of the interval's upper end clears about half of them."""
    counts = _simulate(1.025, 0.03, 1000, seed=29, max_rounds=96)
    assert (counts["NOT_SLOWER"] + counts["SAME"]) / 1000 <= 0.025, counts


def test_power_a_real_step_is_found_and_equal_code_is_cleared() -> None:
    """1% noise: +10% is SLOWER (first look, 8 rounds), +5% too, -10% FASTER, no change cleared (mostly SAME,
    else NOT_SLOWER: the first look's interval reaches below -e). 3% noise per side
    (the spread measured on a power-capped GEMM between two processes): +10% is still SLOWER in every
    confirmation and identical code is cleared (NOT_SLOWER or SAME) in at least 90% within 96 rounds, never
    SLOWER. Defect: an interval at the wrong level (or on the wrong order statistics) that never excludes the
    margin; a rule that needs the whole interval inside +-e leaves most of the noisy identical cases UNKNOWN."""
    assert _simulate(1.10, 0.01, 200, seed=1)["SLOWER"] == 200
    assert _simulate(1.05, 0.01, 200, seed=4, max_rounds=96)["SLOWER"] >= 190
    assert _simulate(1 / 1.10, 0.01, 200, seed=2)["FASTER"] == 200
    same = _simulate(1.0, 0.01, 200, seed=3)
    assert same["SAME"] + same["NOT_SLOWER"] == 200 and same["SAME"] >= 150, same
    assert _simulate(1.10, 0.03, 200, seed=5, max_rounds=96)["SLOWER"] == 200
    noisy = _simulate(1.0, 0.03, 300, seed=6, max_rounds=96)
    assert noisy["SLOWER"] == 0 and noisy["NOT_SLOWER"] + noisy["SAME"] >= 270, noisy
    assert noisy["NOT_SLOWER"] > 0  # the old rule's UNKNOWN: certainly not slower, maybe faster


def test_rounds_follow_the_time_budget() -> None:
    """An undecidable case (30% noise, pair by pair) stops at the last look whose successor would pass its
    budget: 40 s of 1 s rounds stop at 32 (48 is past), UNKNOWN either way; the looks grow about 1.5x. A budget
    never stops a case before the first look that can decide (one case, eight looks: 12 crossed pairs, 24
    rounds): 2 s, 10 s and 30 s stop at 24. Defects: a fixed 24 rounds whatever the budget; a budget that ends a
    case at 8 rounds, where only UNKNOWN is possible (19 of 76 identical cases on an H200)."""
    assert looks(96) == [8, 12, 16, 24, 32, 48, 64, 96] and looks(100) == looks(96)
    assert looks(24) == [8, 12, 16, 24]
    assert first_decisive_look(looks(96), 0.05 / 8) == 24 and first_decisive_look(looks(96), 0.05 / 64) == 24
    assert first_decisive_look(looks(96), 0.01) == 16
    now = [0.0]

    def measure(case: str, r: int) -> Reading:
        now[0] += 1.0
        return Reading(1.0, math.exp(0.3 * (-1) ** (r // 2)))

    for budget, rounds in ((2.0, 24), (10.0, 24), (30.0, 24), (40.0, 32), (1000.0, 96)):
        res = run_rounds(["c"], measure, max_rounds=96, case_seconds=budget, clock=lambda: now[0])["c"]
        assert (res.verdict, res.rounds, res.case_seconds) == ("UNKNOWN", rounds, budget), (budget, res)
        assert res.seconds == rounds
        now[0] = 0.0


def test_an_effect_of_the_side_that_opens_a_round_cancels_in_its_pair() -> None:
    """Identical code whose every round favours the side that opens it (on an H200 the atomic MSELoss at 1M
    elements read 0.954, 1.037, 0.964, 1.039, ...: the opener alternates by round) is SAME, never SLOWER, at the
    first look that can decide; a real +10% on top of the same opener effect is SLOWER. Defect: rounds judged
    one by one, whose sign interval spans the opener effect, leave such a case UNKNOWN for ever."""
    rng = random.Random(7)

    def measure(true: float):
        def one(case: str, r: int) -> Reading:
            opener = 0.04 if r % 2 == 0 else -0.04
            return Reading(1.0, true * math.exp(opener + rng.gauss(0, 0.002)))

        return one

    for case_seconds in (math.inf, 1e-9):
        same = run_rounds(["c"], measure(1.0), max_rounds=96, case_seconds=case_seconds)["c"]
        assert (same.verdict, same.rounds) == ("SAME", 24), same
        slower = run_rounds(["c"], measure(1.10), max_rounds=96, case_seconds=case_seconds)["c"]
        assert (slower.verdict, slower.rounds) == ("SLOWER", 24), slower
        assert 1.09 < slower.ratio < 1.11


def test_a_long_call_is_measured_over_more_time_and_a_short_one_keeps_the_round() -> None:
    """A 1.4 ms GEMM at its power cap spread 0.031 (sd of the paired log ratio) over 20 ms measurements and
    0.016 over 100 ms on an H200: such a case samples about 70 calls; a 5 us kernel keeps 20 ms; the length
    never exceeds the cap nor falls below the round; a broken probe keeps the round."""
    assert measurement_ms(0.005) == ROUND_MS
    assert 95 <= measurement_ms(1.4) <= 100
    assert measurement_ms(50.0) == MAX_MEASUREMENT_MS
    assert measurement_ms(1.4, round_ms=300.0) == 300.0
    assert measurement_ms(float("nan")) == ROUND_MS and measurement_ms(0.0) == ROUND_MS


def test_a_stack_timed_by_the_wall_is_measured_over_a_dozen_passes() -> None:
    """An eager stack's pass (32-80 layers) is timed by the wall: a measurement holds a dozen passes, so its
    budget holds many rounds, not 12 crossed pairs whose sign interval is their whole range (a 4 ms mid-shape
    pass sampled 250 ms a side read 0.997-1.058 for identical code on an H200); a deep prefill pass keeps
    the cap, a short one the round."""
    assert measurement_ms(3.94, wall=True) == pytest.approx(12 * 3.94)
    assert measurement_ms(3.94) == MAX_MEASUREMENT_MS
    assert measurement_ms(21.5, wall=True) == MAX_MEASUREMENT_MS
    assert measurement_ms(1.0, wall=True) == ROUND_MS


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
    assert judge([-e * 1.2] * 4 + [e * 0.8] * 4, 0.05, 0.01) == "NOT_SLOWER"  # upper end below +e, lower below -e
    assert judge([-e * 1.2] * 4 + [e * 1.2] * 4, 0.05, 0.01) is None
    with pytest.raises(ConfirmError, match="at least 8 rounds"):
        run_rounds(["c"], lambda c, r: Reading(1.0, 1.0), max_rounds=MIN_ROUNDS - 1)


def test_commit_shas_are_validated_before_git_sees_them(tmp_path: Path) -> None:
    for bad in ("-x", "--upload-pack=touch", "HEAD", "abc", "g" * 40, "a" * 41, "1234567 "):
        with pytest.raises(ConfirmError, match="not a commit sha"):
            resolve_commit(tmp_path, bad, "the baseline commit")


PLANTED = '''"""A planted kernel for tests of kernelwatch confirm: WORK_MS of planted device time a call, x * FACTOR."""
import torch

from kernelwatch.kernels.spec import EAGER_IMPL, KERNEL_IMPL, Case, KernelSpec, Tolerance
from tests.planted_clock import spend

WORK_MS = {work}
FACTOR = {factor}
TOL = Tolerance(1e-5, 1e-5)


def _inputs(case, device, seed):
    gen = torch.Generator().manual_seed(seed)
    return {{"x": torch.randn(64, generator=gen).to(device)}}


def _impls(case, inputs):
    x = inputs["x"]

    def kernel():
        spend(WORK_MS)
        return x * FACTOR

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
    """A repository of this tree plus the planted module: commits 1 (100 ms of planted device time, x * 2), 2 (150 ms,
    x * 3), 3 (2's code, another README). A call of 100 ms is sampled for MAX_MEASUREMENT_MS: five samples a side
    (min_reps), so a round costs little host time."""
    repo = tmp_path_factory.mktemp("scratch")
    files = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"], check=True, capture_output=True, text=True
    ).stdout.split("\n")
    for name in files:
        if name and not name.startswith(("ci/history/", "benchmarks/results/")) and (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    (repo / "kernelwatch.toml").write_text('kernels = ["planted_confirm"]\n')  # the project confirm is told of
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    shas = []
    for work, factor, note in ((100, 2, ""), (150, 3, ""), (150, 3, "\nsame code, another README\n")):
        (repo / "planted_confirm.py").write_text(PLANTED.format(work=work, factor=factor))
        if note:
            with (repo / "README.md").open("a") as f:
                f.write(note)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"work {work} ms")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return repo, shas


CASE = "confirmed/v1/fp32/shape=64"


@pytest.fixture(autouse=True)
def planted_timing(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every confirm worker of these tests loads tests/planted_backends.py as its ``Backend`` (laid out as the
    worker expects: ``collect/backends.py`` beside the driver's ``kernels/names.py``)."""
    import kernelwatch.collect.confirm as confirm_module

    root = tmp_path_factory.mktemp("planted-backends")
    (root / "collect").mkdir()
    (root / "kernels").mkdir()
    shutil.copy2(ROOT / "tests" / "planted_backends.py", root / "collect" / "backends.py")
    shutil.copy2(ROOT / "kernelwatch" / "kernels" / "names.py", root / "kernels" / "names.py")
    monkeypatch.setattr(confirm_module, "BACKENDS", root / "collect" / "backends.py")
    return root


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
            "--project",
            str(repo / "kernelwatch.toml"),
            "--min-effect",
            "0.2",
            "--round-ms",
            "20",
            *extra,
        ],
    )


def test_confirm_finds_a_planted_slowdown_between_two_commits(cli, scratch) -> None:
    """+50% of device time between commits 1 and 2: SLOWER, exit 1, the rounds reported; the worktrees are gone.
    Defect: both workers importing one tree (this checkout's, say) would make it SAME."""
    repo, (c1, c2, _) = scratch
    result = _confirm(cli, repo, c1[:10], c2)
    assert result.exit_code == 1, result.output
    row = next(line for line in result.output.splitlines() if line.startswith(f"| `{CASE}`"))
    cells = [c.strip() for c in row.split("|")]
    assert cells[2] == "SLOWER" and int(cells[3]) >= MIN_ROUNDS
    assert float(cells[4]) == pytest.approx(1.5, rel=0.03)  # candidate / baseline: 150 ms / 100 ms
    assert _git(repo, "worktree", "list").count("\n") == 0  # only the main worktree is left


def test_confirm_clears_identical_code(cli, scratch, tmp_path: Path) -> None:
    """Commits 2 and 3 differ only in the README: SAME at the first look that can decide (24 rounds), exit 0; the
    report file holds the table with the case's seconds. Defect: a rule that needs the whole interval inside the
    margin leaves it UNKNOWN (exit 2)."""
    repo, (_, c2, c3) = scratch
    out = tmp_path / "confirm.md"
    result = _confirm(cli, repo, c2, c3, "--report-file", str(out), "--case-seconds", "60")  # room on a loaded host
    assert result.exit_code == 0, result.output
    row = next(line for line in out.read_text().splitlines() if line.startswith(f"| `{CASE}` |"))
    cells = [c.strip() for c in row.split("|")]
    assert (cells[2], cells[3]) == ("SAME", "24") and row in result.output, row
    assert 0 < float(cells[-2]) <= 60 + 30  # the case's seconds, within its budget and one look's overshoot


def _tree(repo: Path, sha: str, where: Path) -> Path:
    """Commit ``sha`` of ``repo`` as a plain directory (no .git: how the device machine gets a tree)."""
    where.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", sha], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def test_one_worker_loads_two_trees_side_by_side_and_times_them_interleaved(scratch, tmp_path: Path) -> None:
    """Two trees (commit 1: 100 ms of device time, x * 2; commit 2: 150 ms, x * 3) in ONE worker process: each side's
    kernels come from its own tree, each side's call returns its own result (the checksums differ by 3/2), and a
    measurement gives both sides' medians from one interleaved sequence, the slower tree on the slower side
    whichever side opens it. Defect: the second tree's import finding the first's modules in sys.modules (both
    sides would run commit 1's kernel: checksum ratio 1, timing ratio 1)."""
    repo, (c1, c2, _) = scratch
    trees = {"baseline": _tree(repo, c1, tmp_path / "a"), "candidate": _tree(repo, c2, tmp_path / "b")}
    worker = Worker(trees, "cpu", ("planted_confirm",))
    try:
        msg = {"op": "setup", "trees": {k: str(v) for k, v in trees.items()}, "cases": [{"key": CASE, "seed": 1}]}
        setup = worker.ask(msg, 300)
        assert setup["errors"] == {"baseline": {}, "candidate": {}} and setup["missing"]["candidate"] == [], setup
        for side, tree in trees.items():
            assert Path(setup["trees"][side]).is_relative_to(tree), setup
        sums = setup["checksums"]
        assert sums["candidate"][CASE] == pytest.approx(1.5 * sums["baseline"][CASE]), sums
        assert setup["sizes"] == {CASE: [512, 0]}
        for first in ("baseline", "candidate"):
            got = worker.ask({"op": "measure", "key": CASE, "rep_ms": 15, "first": first}, 60)
            assert got["timing"] == "events" and got["samples"] >= 5, got
            assert got["baseline_ms"] == pytest.approx(100, rel=0.05), got
            assert got["candidate_ms"] / got["baseline_ms"] == pytest.approx(1.5, rel=0.05), got
            assert got["sm_mhz"] is None and got["power_w"] is None  # no NVML on the CPU
    finally:
        worker.close()
    assert worker.proc.returncode == 0


def test_the_paired_sequence_alternates_and_one_method_times_both() -> None:
    """``Backend.paired_samples`` on the CPU: calls go A, B, B, A, ... (so neither side always follows the
    other), each callable is called before the timed sequence (its caches warm outside the samples: fold_gamma's
    folded weight), the same number of samples per side; a forced graph raises instead of timing another way.
    Defect: timing A's samples and then B's (two back-to-back blocks, as two workers did)."""
    import torch

    from kernelwatch.collect.backends import Backend

    backend = Backend(torch.device("cpu"), time_on_cpu=True)
    seen: list[str] = []

    def call(name: str):
        def fn() -> None:
            seen.append(name)

        return fn

    samples, timing = backend.paired_samples([call("a"), call("b")], rep_ms=1.0, min_reps=8, max_reps=8)
    assert timing == "events" and len(samples[0]) == len(samples[1]) == 8
    assert seen[:2] == ["a", "b"]  # called once each before anything is timed
    tail = "".join(seen[-16:])  # the timed sequence: 16 samples
    assert tail == "abba" * 4, tail
    seen.clear()
    backend.paired_samples([call("a"), call("b")], rep_ms=1.0, min_reps=8, max_reps=8, blocks=True)
    assert "".join(seen[-16:]) == "a" * 8 + "b" * 8  # the old order, kept for judge_eval's before/after
    with pytest.raises(RuntimeError, match="no graph capture on cpu"):
        backend.paired_samples([call("a"), call("b")], rep_ms=1.0, method="graph")
    assert common_method("graph", "graph") == "graph"
    assert common_method("graph", "events") == common_method("events", "graph") == "events"


def test_confirm_between_two_directories_without_git(scratch, tmp_path: Path) -> None:
    """``confirm_trees`` takes two plain directories (the device machine has no git history): commit 1 against
    commit 2 is SLOWER, with each round's reading, which side opened it, and both sides' plans kept; a
    directory without the package is refused with one line. Defect: confirm needing worktrees of one repo."""
    repo, (c1, c2, _) = scratch
    a, b = _tree(repo, c1, tmp_path / "a"), _tree(repo, c2, tmp_path / "b")
    res = confirm_trees(a, b, [CASE], "cpu", ("planted_confirm",), min_effect=0.2, round_ms=10, case_seconds=30)[CASE]
    assert res.verdict == "SLOWER" and res.rounds >= MIN_ROUNDS, res
    assert len(res.readings) == res.rounds and [g.first for g in res.readings[:2]] == ["baseline", "candidate"]
    assert res.ratio == pytest.approx(1.5, rel=0.03)
    assert all(1.4 < g.candidate_ms / g.baseline_ms < 1.6 for g in res.readings), [
        g.candidate_ms / g.baseline_ms for g in res.readings
    ]
    assert set(res.plans) == {"baseline", "candidate"}  # recorded (empty: the planted kernel launches nothing)
    with pytest.raises(ConfirmError, match="holds no kernelwatch/kernels package"):
        confirm_trees(a, tmp_path, [CASE], "cpu")


def test_a_tree_older_than_the_registry_is_confirmed_with_kernelwatchs_own_kernels(scratch, tmp_path: Path) -> None:
    """When KernelWatch watches itself, confirm passes its own kernel modules (the project's) to the worker; a
    baseline tree from before the registry lists its kernels and then those again, and refused to load ("two
    kernel specs are named ..."): the nightly's confirm against a week-old baseline failed on an H200 so."""
    repo, (c1, _, _) = scratch
    a, b = _tree(repo, c1, tmp_path / "a"), _tree(repo, c1, tmp_path / "b")
    init = b / "kernelwatch" / "kernels" / "__init__.py"
    old = init.read_text().replace(
        "dict.fromkeys([*kernel_modules(project), *extra_modules])", "[*kernel_modules(project), *extra_modules]"
    )
    assert old != init.read_text()
    init.write_text(old)  # discover as it was before the registry: no de-duplication
    own = ("planted_confirm", "kernelwatch.kernels.mse_loss")
    res = confirm_trees(b, a, [CASE], "cpu", own, min_effect=0.2, round_ms=10, case_seconds=5)[CASE]
    assert res.verdict in ("SAME", "NOT_SLOWER", "UNKNOWN") and res.rounds >= MIN_ROUNDS, res


def test_a_commit_older_than_a_timing_method_is_timed_by_the_drivers_backend(scratch, tmp_path: Path) -> None:
    """A baseline tree's ``names`` may predate a timing method the driver's ``Backend`` names (``graph-batch``):
    the worker loads the driver's ``names`` under its ``Backend`` and each tree's kernels import their own,
    the old tree beside a new one in one process. Defect: an ImportError in every confirmation against a commit
    from before the method existed."""
    repo, (_, c2, _) = scratch
    tree = _tree(repo, c2, tmp_path / "old")
    names = tree / "kernelwatch" / "kernels" / "names.py"
    text = names.read_text()
    start = text.index("# How GPU time was taken")
    end = text.index("\n", text.index("GRAPH_TIMINGS =")) + 1
    names.write_text(text[:start] + 'TIMING_GRAPH, TIMING_EVENTS = "graph", "events"\nOLD_TREE = True\n' + text[end:])
    trees = {"baseline": tree, "candidate": _tree(repo, c2, tmp_path / "new")}
    worker = Worker(trees, "cpu", ("planted_confirm",))
    try:
        msg = {"op": "setup", "trees": {k: str(v) for k, v in trees.items()}, "cases": [{"key": CASE, "seed": 1}]}
        setup = worker.ask(msg, 300)
        assert setup["errors"] == {"baseline": {}, "candidate": {}}, setup
        assert Path(setup["trees"]["baseline"]).is_relative_to(tree), setup
        timed = worker.ask({"op": "measure", "key": CASE, "rep_ms": 5, "calls": LAUNCH_BATCH}, 60)
        assert timed["timing"] == "events"  # the CPU has no graph: one call a sample
        assert timed["baseline_ms"] == pytest.approx(150, rel=0.05), timed
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
    gate += [
        "--min-effect",
        "0.2",
    ]  # confirm measures at 0.2: a confirmation at a larger effect than the gate's is not used
    before = cli.invoke(main, gate)
    before.md = (tmp_path / "r" / "gate.md").read_text()  # the gate's tables (its terminal report is plain text)
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
            "--project",
            str(repo / "kernelwatch.toml"),
            "--min-effect",
            "0.2",
            "--round-ms",
            "20",
        ],
    )
    after = cli.invoke(main, gate)
    after.md = (tmp_path / "r" / "gate.md").read_text()
    return before, listed, confirmed, after


def test_a_cross_device_suspect_confirmed_slower_fails_as_a_regression(cli, scratch, tmp_path: Path) -> None:
    """Commit 2 does 1.5x the work of commit 1; the runs come from two devices, so the gate cannot decide (suspect,
    exit 1). confirm --dry-run lists the case; confirm --db measures SLOWER and stores it; the next gate calls it a
    regression, quoting the confirmation. Defect: confirm taking only "regression" would find nothing here."""
    repo, (c1, c2, _) = scratch
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    before, listed, confirmed, after = _gate_and_confirm(
        cli, repo, url, _run_doc(c1, 1.0, "GPU-aaaa1111-0000", 8), _run_doc(c2, 1.5, "GPU-bbbb2222-0000", 9), tmp_path
    )
    assert before.exit_code == 1 and f"| `{CASE}` | suspect (confirm) |" in before.md, before.output
    assert listed.exit_code == 0 and listed.output.splitlines() == [CASE], listed.output
    assert confirmed.exit_code == 1 and f"| `{CASE}` | SLOWER |" in confirmed.output, confirmed.output
    assert "stored 1 confirmation(s)" in confirmed.output
    assert after.exit_code == 1, after.output
    line = next(x for x in after.md.splitlines() if x.startswith(f"| `{CASE}`"))
    assert "| slower |" in line and "confirmed SLOWER on cpu: ×1." in line and "rounds" in line, line
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.queries import confirmations
    from kernelwatch.store.schema import Confirmation, hardware_fingerprint

    fingerprint = hardware_fingerprint(_run_doc(c1, 1.0, "x", 8)["hardware"])
    rows = confirmations(open_database(url, readonly=True), fingerprint, [CASE])
    stored = Confirmation.model_validate(rows[0])
    assert len(rows) == 1 and (stored.baseline_commit, stored.candidate_commit, stored.verdict) == (c1, c2, "SLOWER")
    assert stored.rounds >= MIN_ROUNDS and stored.low <= stored.ratio <= stored.high
    assert stored.ratio == pytest.approx(1.5, rel=0.03) and 1.4 < stored.low <= stored.high < 1.6, stored
    assert stored.seconds > 0 and stored.device_uuid == "cpu"  # the host's seconds: the rounds' real cost
    # each round is kept: its ratio, medians, the side that opened it, the method; no NVML on the CPU
    rounds = stored.detail.rounds
    assert len(rounds) == stored.rounds and [r.first for r in rounds[:2]] == ["baseline", "candidate"]
    assert all(r.ratio == pytest.approx(r.candidate_ms / r.baseline_ms) for r in rounds)
    assert sorted(r.ratio for r in rounds)[len(rounds) // 2] == pytest.approx(stored.ratio, rel=0.05)
    assert {r.timing for r in rounds} == {"events"} and rounds[0].sm_mhz is None and rounds[0].power_w is None
    assert stored.detail.case_seconds == 20.0 and stored.detail.measurement_ms == MAX_MEASUREMENT_MS  # 70 x 100 ms
    assert set(stored.detail.plans) == {"baseline", "candidate"}
    # and exported with the candidate's run, as stored
    from kernelwatch.store.artifact import dumps
    from kernelwatch.store.export import export_run, find_run_id

    (tmp_path / "cand.json").write_text(dumps(_run_doc(c2, 1.5, "GPU-bbbb2222-0000", 9)))
    assert cli.invoke(main, ["ingest", "--db", url, str(tmp_path / "cand.json")]).exit_code == 0
    engine = open_database(url, readonly=True)
    exported = export_run(engine, find_run_id(engine, "00000000-0000-4000-8000-000000000009"))
    assert [c.detail for c in exported.confirmations] == [stored.detail]


def test_a_cross_device_suspect_confirmed_same_is_cleared(cli, scratch, tmp_path: Path) -> None:
    """Commits 2 and 3 run the same code; the candidate's device happened to be 30% slower: suspect (exit 1), then
    confirm says SAME (or NOT_SLOWER) and stores it, and the next gate passes the job (exit 0)."""
    repo, (_, c2, c3) = scratch
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    before, listed, confirmed, after = _gate_and_confirm(
        cli, repo, url, _run_doc(c2, 1.5, "GPU-aaaa1111-0000", 8), _run_doc(c3, 1.95, "GPU-bbbb2222-0000", 9), tmp_path
    )
    assert before.exit_code == 1 and f"| `{CASE}` | suspect (confirm) |" in before.md, before.output
    assert confirmed.exit_code == 0 and f"| `{CASE}` | SAME |" in confirmed.output, confirmed.output
    assert after.exit_code == 0 and after.output.startswith("KernelWatch gate: PASS"), after.output
    assert "decided by a stored confirmation" in after.md


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


def test_dry_run_fails_and_says_why_on_stdout_when_the_job_fails_whatever_is_confirmed(cli, tmp_path: Path) -> None:
    """`confirm --dry-run` exited 0 with empty stdout while stderr said "the gate also fails on 12 case(s) ... (the job
    fails whatever is confirmed)": a script reading its exit status went ahead."""
    import copy

    from kernelwatch.store.artifact import dumps
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.ingest import ingest_documents
    from kernelwatch.store.schema import RunDocument

    other = CASE.replace("shape=64", "shape=128")

    def with_other(doc: dict) -> dict:  # a second case, timed as in the baseline
        doc = copy.deepcopy(doc)
        doc["cases"].append({**doc["cases"][0], "key": other, "params": {"shape": [128]}})
        doc["perf"].append({**_run_doc("a" * 40, 1.0, "GPU-a-0", 8)["perf"][0], "case": other})
        return doc

    url = f"sqlite:///{tmp_path / 'kw.db'}"
    base = with_other(_run_doc("a" * 40, 1.0, "GPU-a-0", 8))
    ingest_documents(open_database(url), [("base", RunDocument.model_validate(base))])
    path = tmp_path / "candidate.json"
    source = ["confirm", "--artifact", str(path), "--baseline", "main", "--db", url, "--dry-run"]
    path.write_text(dumps(with_other(_run_doc("b" * 40, 1.5, "GPU-b-0", 9))))  # a suspect, nothing else
    listed = cli.invoke(main, source)
    assert listed.exit_code == 0 and listed.stdout.splitlines() == [CASE], listed.output
    path.write_text(dumps(_run_doc("b" * 40, 1.5, "GPU-b-0", 9)))  # the suspect, and the other case missing
    failing = cli.invoke(main, source)
    assert failing.exit_code == 1, failing.output
    assert failing.stdout.splitlines()[0].startswith("kernelwatch confirm: the gate also fails on 1 case(s)")
    assert f"{other} (perf missing)" in failing.stdout and "(the job fails whatever is confirmed)" in failing.stdout
    assert failing.stdout.splitlines()[1:] == [CASE]
    doc = _run_doc("b" * 40, 1.0, "GPU-a-0", 9)  # nothing to confirm, the other case missing: still failing
    path.write_text(dumps(doc))
    nothing = cli.invoke(main, source)
    assert nothing.exit_code == 1 and "the gate also fails on 1 case(s)" in nothing.stdout, nothing.output


def test_the_confirm_worker_compiles_into_the_caches_collect_fills(monkeypatch, tmp_path: Path) -> None:
    """On a GPU the worker uses collect's compiler caches (KERNELWATCH_CACHE_DIR, TRITON_CACHE_DIR, or
    ~/.cache/kernelwatch): the nightly's confirm follows its collect. Defect: the worker compiling every kernel
    again into Triton's default cache. The interpreter's worker compiles nothing and keeps the environment."""
    from kernelwatch.collect.confirm import worker_env
    from kernelwatch.collect.precompile import use_cache_dirs

    for name in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):  # recorded, so use_cache_dirs' writes are undone
        monkeypatch.setenv(name, "unset")
        monkeypatch.delenv(name)
    monkeypatch.setenv("KERNELWATCH_CACHE_DIR", str(tmp_path))
    env = worker_env("cuda")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton"), env.get("TRITON_CACHE_DIR")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    assert env["TRITON_CACHE_AUTOTUNING"] == "1" and "KERNELWATCH_PROJECT" not in env
    collect = use_cache_dirs()  # what collect points its workers at, in the same environment
    assert worker_env("cuda")["TRITON_CACHE_DIR"] == str(collect.triton)
    cpu = worker_env("cpu", {"PATH": "/usr/bin"})
    assert cpu["TRITON_INTERPRET"] == "1" and "TRITON_CACHE_DIR" not in cpu


def test_what_the_collector_timed_by_the_wall_is_confirmed_by_the_wall() -> None:
    """A stack's eager pass is stored by its wall time, host path included: confirm must re-measure it so, or a
    host-path regression the gate flags is confirmed SAME by device time and passes. The worker times an eager
    stack case by the wall (both sides interleaved, A B B A) and its graph twin as before. Defects: device
    time for a wall case; a worker that loses the method between measurements."""
    import torch

    from kernelwatch.collect.backends import Backend
    from kernelwatch.collect.confirm import Worker
    from kernelwatch.kernels.fused_rmsnorm_matmul.spec import SPEC

    backend = Backend(torch.device("cpu"), time_on_cpu=True)
    seen: list[str] = []

    def call(name: str):
        return lambda: seen.append(name)

    samples, timing = backend.paired_samples([call("a"), call("b")], rep_ms=1.0, min_reps=8, max_reps=8, method="wall")
    assert timing == "wall" and len(samples[0]) == len(samples[1]) == 8 and "".join(seen[-16:]) == "abba" * 4

    stacks = [c for c in SPEC.perf_cases() if "layers" in c.p and c.p["layers"] == 32 and c.p["n"] == 8192]
    eager = next(c.key for c in stacks if c.p["mode"] == "eager")
    graph = next(c.key for c in stacks if c.p["mode"] == "graph")
    trees = {"baseline": str(ROOT), "candidate": str(ROOT)}
    worker = Worker({s: ROOT for s in trees}, "cpu", ())
    try:
        cases = [{"key": k, "seed": 1} for k in (eager, graph)]
        setup = worker.ask({"op": "setup", "trees": trees, "cases": cases}, 600)
        assert not setup["errors"]["baseline"] and not setup["errors"]["candidate"], setup["errors"]
        for key, want in ((eager, "wall"), (graph, "events"), (eager, "wall")):
            got = worker.ask({"op": "measure", "key": key, "rep_ms": 1.0, "calls": 1, "first": "candidate"}, 600)
            assert got.get("timing") == want, (key, got)
            if want == "wall":  # the host's clock (this file's planted device clock moves only in planted kernels)
                assert got["baseline_ms"] > 0 and got["candidate_ms"] > 0, got
    finally:
        worker.close()


PLANTED_MEMORY = '''"""Planted kernels for a test of kernelwatch confirm on a device whose memory holds LIMIT
cases' inputs, both commits' together (the count is kept where both trees' copies of this module see it); shape
999 never fits."""
import builtins
import weakref

import torch

from kernelwatch.kernels.spec import EAGER_IMPL, KERNEL_IMPL, Case, KernelSpec, Tolerance
from tests.planted_clock import spend

LIMIT = 4
LIVE = builtins.__dict__.setdefault("_kw_planted_live_inputs", [])
TOL = Tolerance(1e-5, 1e-5)


def _inputs(case, device, seed):
    LIVE[:] = [r for r in LIVE if r() is not None]
    if case.p["shape"] == (999,) or len(LIVE) >= LIMIT:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB (planted)")
    x = torch.randn(case.p["shape"], generator=torch.Generator().manual_seed(seed)).to(device)
    LIVE.append(weakref.ref(x))
    return {"x": x}


def _impls(case, inputs):
    x = inputs["x"]

    def kernel():
        spend(5.0)
        return x * 2

    return {KERNEL_IMPL: kernel, EAGER_IMPL: lambda: x * 2}


SPEC = KernelSpec(name="roomy", accuracy_cases=lambda: [],
                  perf_cases=lambda: [Case.make("roomy", "v1", "fp32", TOL, trials=1, shape=(n,))
                                      for n in (64, 65, 66, 999)],
                  make_inputs=_inputs, run=lambda c, i: (i["x"] * 2,), reference=lambda c, i: (i["x"].double() * 2,),
                  implementations=_impls, bytes_moved=lambda c: 512)
'''


def test_cases_the_devices_memory_cannot_hold_together_are_set_up_again_in_smaller_chunks(
    scratch, tmp_path: Path
) -> None:
    """A device whose memory holds four cases' inputs, both commits' together, and four cases to confirm: the
    baseline builds three (the fourth never fits), the candidate one; the other two are set up again beside fewer
    and get verdicts, and the case that never fits gets a note that names the device's memory. Defect (an H200
    nightly, GPU-ad583776): twelve 32- and 80-layer stacks set up at once, both commits' weights, and the five
    the memory could not hold were UNKNOWN with "OutOfMemoryError", failing a nightly of unchanged stacks."""
    repo, (c1, _, _) = scratch
    a, b = _tree(repo, c1, tmp_path / "a"), _tree(repo, c1, tmp_path / "b")
    for tree in (a, b):
        (tree / "planted_memory.py").write_text(PLANTED_MEMORY)
    cases = [f"roomy/v1/fp32/shape={n}" for n in (64, 65, 66, 999)]
    said: list[str] = []
    res = confirm_trees(
        a, b, cases, "cpu", ("planted_memory",), min_effect=0.2, round_ms=10, case_seconds=5, progress=said.append
    )
    for case in cases[:3]:
        assert res[case].verdict in ("SAME", "NOT_SLOWER") and not res[case].note, (case, res[case])
    assert res[cases[3]].verdict == "UNKNOWN" and "do not fit the device's memory" in res[cases[3]].note
    assert any("did not fit beside the others" in line for line in said), said
    assert sum("loading both trees" in line for line in said) >= 3, said  # 1 fitted, then the others again


PLANTED_MEASURE_MEMORY = '''"""Planted kernels whose inputs always fit but whose measurement (every call after
the first) runs out of the device's memory while more than two cases' inputs are loaded, both commits' together;
shape 999's always does."""
import builtins
import weakref

import torch

from kernelwatch.kernels.spec import EAGER_IMPL, KERNEL_IMPL, Case, KernelSpec, Tolerance
from tests.planted_clock import spend

LIVE = builtins.__dict__.setdefault("_kw_planted_measured_inputs", [])
TOL = Tolerance(1e-5, 1e-5)


def _inputs(case, device, seed):
    x = torch.randn(case.p["shape"], generator=torch.Generator().manual_seed(seed)).to(device)
    LIVE.append(weakref.ref(x))
    return {"x": x}


def _impls(case, inputs):
    x, calls = inputs["x"], [0]

    def kernel():
        calls[0] += 1
        LIVE[:] = [r for r in LIVE if r() is not None]
        if calls[0] > 1 and (case.p["shape"] == (999,) or len(LIVE) > 2):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (planted graph pool)")
        spend(5.0)
        return x * 2

    return {KERNEL_IMPL: kernel, EAGER_IMPL: lambda: x * 2}


SPEC = KernelSpec(name="pooled", accuracy_cases=lambda: [],
                  perf_cases=lambda: [Case.make("pooled", "v1", "fp32", TOL, trials=1, shape=(n,))
                                      for n in (64, 65, 999)],
                  make_inputs=_inputs, run=lambda c, i: (i["x"] * 2,), reference=lambda c, i: (i["x"].double() * 2,),
                  implementations=_impls, bytes_moved=lambda c: 512)
'''


def test_a_case_whose_measurement_runs_out_of_memory_is_measured_again_beside_fewer(scratch, tmp_path: Path) -> None:
    """Inputs that fit but measurements that do not (a graph capture's pool beside every case's inputs): the
    cases that ran out are dropped from the round, set up again with fewer beside them and decided; one that runs
    out alone gets a note naming the memory. Defect: a measurement's out-of-memory error ended the whole
    confirmation (every case UNKNOWN, the nightly failed)."""
    repo, (c1, _, _) = scratch
    a, b = _tree(repo, c1, tmp_path / "a"), _tree(repo, c1, tmp_path / "b")
    for tree in (a, b):
        (tree / "planted_measure_memory.py").write_text(PLANTED_MEASURE_MEMORY)
    cases = [f"pooled/v1/fp32/shape={n}" for n in (64, 65, 999)]
    said: list[str] = []
    res = confirm_trees(
        a, b, cases, "cpu", ("planted_measure_memory",), min_effect=0.2, round_ms=10, case_seconds=5,
        progress=said.append,
    )  # fmt: skip
    for case in cases[:2]:
        assert res[case].verdict in ("SAME", "NOT_SLOWER") and not res[case].note, (case, res[case])
        assert res[case].rounds >= MIN_ROUNDS and len(res[case].readings) == res[case].rounds
    assert res[cases[2]].verdict == "UNKNOWN" and "ran out of the device's memory" in res[cases[2]].note
    assert any("ran out of the device's memory while measured" in line for line in said), said


def test_a_stacks_plan_is_told_once_with_its_layer_count() -> None:
    """A confirmation keeps each side's launch plan; an 80-layer stack launched the same plan 80 times and stored it
    80 times over (13 KB a side, cut at 4,000 characters mid-launch). Now once, with the count; a sequence that
    does not repeat, one launch, or none, reads as before."""
    from types import SimpleNamespace

    from kernelwatch.collect.confirm_worker import _describe_steps

    def step(name: str, warps: int) -> SimpleNamespace:
        return SimpleNamespace(name=name, grid=(132,), config=lambda: f"BM=128 num_warps={warps}")

    pair = [step("_rstd_kernel", 4), step("_rms_gemm_tma_kernel", 8)]
    told = "_rstd_kernel[BM=128 num_warps=4] grid=[132]; _rms_gemm_tma_kernel[BM=128 num_warps=8] grid=[132]"
    assert _describe_steps(None, pair * 80) == f"80 x [{told}]"
    assert _describe_steps(None, pair) == told
    assert _describe_steps(None, [*pair, pair[0]]) == f"{told}; _rstd_kernel[BM=128 num_warps=4] grid=[132]"
    assert _describe_steps(None, pair[:1]) == "_rstd_kernel[BM=128 num_warps=4] grid=[132]"
    assert _describe_steps(None, []) == ""
