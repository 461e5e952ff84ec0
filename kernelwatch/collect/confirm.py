"""Paired confirmation on one device (docs/design.md): is the candidate commit slower than the baseline commit?

A gate compares two runs that may come from two machines; this compares two commits on *one* device,
interleaved, so the machine's own speed cannot decide the verdict (Chromium's Pinpoint does the same).

Method. Both commits are checked out into temporary ``git worktree``s (or given as two directories:
:func:`confirm_trees`). ONE worker process (``kernelwatch/collect/confirm_worker.py``, timing code from this
checkout) imports each tree's kernels in turn under its own ``sys.path`` and keeps both sides' calls, built on
the same inputs (the collector's seed, ``case_seed``) and compiled once. A round of a case is one interleaved
sequence of both sides' calls, A, B, B, A, ... (the side that opens it alternates with the round), the L2
flushed before each, by one method for both (graph replays only where both sides' calls are captured, fixed
by the case's first measurement), about :func:`measurement_ms` of samples per side (``Backend.paired_samples``).
Round ``i`` gives one paired log ratio ``d_i = ln(median candidate_i / median baseline_i)``; both medians come
from calls that saw the same clock and power state. Each round also keeps the NVML SM clock and board power
before and after it and each side's kernel launches (tile configuration, autotuned choice), stored with the
verdict (``kernelwatch.store.schema.ConfirmDetail``). Before, one worker per commit measured 20-250 ms in
turn, and on power-capped GEMMs identical code read 2-10% apart (benchmarks/results/2026-12-04-h200-judge-probe).

Why the length follows the case: an H200 runs a 1.4 ms bf16 GEMM (``[8192,4096]->14336``) at its 700 W
power cap, with the SM clock between 1,410 and 1,890 MHz depending on what ran just before, so two 20 ms
measurements a few milliseconds apart differ by the power state (``benchmarks/gemm_clock.py``,
``benchmarks/results/2026-12-02-h200-gemm-clock``: sd of the paired log ratio 0.031 at 20 ms, 0.016 at
100 ms, 0.009-0.020 at 250 ms; a longer warm-up before 20 ms did not help, 0.026-0.041). At 20 ms a
planted +10% stayed UNKNOWN after 24 rounds on two GPUs; at 100 ms it was SLOWER in 8 rounds (8.8 s).
A memory-bound 55 us op (sd 0.003) and a launch-bound 5 us kernel decide in 8 rounds at 20 ms, and keep it.

Decision (:func:`judge`), a group-sequential sign test: at looks ``n`` in :func:`looks` up to ``max_rounds``
(8, 12, 16, 24, 32, 48, 64, 96, ...) the distribution-free confidence interval of the median of ``d`` (the
mean log ratio of each pair of rounds with opposite openers, :func:`crossed`: ``n`` rounds give ``n / 2``) is
``[d_(k), d_(n+1-k)]`` (order statistics) with the largest ``k`` such that ``2 P(Bin(n, 1/2) <= k-1) <=
alpha_look``, and ``alpha_look = alpha / (cases x looks)`` (Bonferroni over every planned look of every case).
With ``e = ln(1 + min_effect / 2)`` (half the gate's minimum effect: 2.5% by default):

* SLOWER when the interval lies above ``+e``: slower by more than half the minimum effect, with confidence;
* FASTER when it lies below ``-e``;
* SAME when it lies inside ``(-e, +e)``;
* NOT_SLOWER when its upper end is below ``+e`` and its lower end is not above ``-e``: not slower by half the
  minimum effect, faster or not (what the gate asks; before, an interval such as [0.967, 1.009] was UNKNOWN);
* otherwise another round, unless the case's time budget (``case_seconds``) would be past by the next look
  (never before the first look that can decide at all, :func:`first_decisive_look`); UNKNOWN when it stops
  undecided.

False alarms: if the two commits are equally fast (median ratio 1), a SLOWER needs an interval whose lower
end exceeds the true median, which happens with probability at most ``alpha_look / 2`` per look, so at
most ``alpha / 2`` (2.5% at the default alpha 0.05) for the whole confirmation, all cases and looks
together, whatever the noise's distribution, provided the rounds are independent given the commits; a
case that stops early on its budget only drops looks. The same bound holds for a false NOT_SLOWER (the
upper end below a true median of ``+e`` or more). tests/test_confirm.py checks both by simulation. Power:
with 1% noise per round a 10% slowdown is SLOWER at the first look that can decide (24 rounds for eight cases,
:func:`first_decisive_look`).

Exit codes of ``kernelwatch confirm``: 0 every case SAME, NOT_SLOWER or FASTER, 1 a case SLOWER, 2 a case UNKNOWN
(or a usage error).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwatch.kernels.names import GRAPH_TIMINGS, TIMING_EVENTS, TIMING_GRAPH, TIMING_WALL
from kernelwatch.store.schema import CONFIRM_VERDICTS, Confirmation, ConfirmDetail, ConfirmRound, format_time

MIN_ROUNDS = 8  # the first look: 2 / 2^8 = 0.0078 is the smallest two-sided sign-test level at n = 8
MAX_ROUNDS = 96
CASE_SECONDS = 20.0  # the default time budget of one case (both commits, every round)
ALPHA = 0.05
ROUND_MS = 20.0  # device time sampled per measurement, at least
SAMPLES_PER_MEASUREMENT = 70  # a measurement lasts about this many calls where that is longer than ROUND_MS
# A case timed by the wall (a stack's eager pass: 32-80 layers, 2-20 ms) is measured over this many passes: a pass
# already holds dozens of calls, and its rounds' spread comes from the host (a hiccup that moves one round), which
# more rounds outvote and longer ones do not. At 70 passes (250 ms a side) a case had 12 crossed pairs in its
# budget, and the sign interval of 12 is their whole range: one round moved by the host made an identical
# mid-shape eager stack UNKNOWN on an H200 (GPU-ad583776, interval 0.997-1.058).
WALL_PASSES_PER_MEASUREMENT = 12
MAX_MEASUREMENT_MS = 250.0
SETUP_TIMEOUT_S = 900.0  # importing torch, loading both trees, building inputs and compiling every case
MEASURE_TIMEOUT_S = 120.0
SHA = re.compile(r"[0-9a-fA-F]{7,40}")
VERDICTS = CONFIRM_VERDICTS
SIDES = ("baseline", "candidate")
WORKER = Path(__file__).with_name("confirm_worker.py")
DRIVER_ROOT = Path(__file__).resolve().parents[2]  # the folder holding this kernelwatch package
BACKENDS = Path(__file__).with_name("backends.py")
REPLY = "KWCONFIRM "


class ConfirmError(RuntimeError):
    """Confirmation cannot start or go on (exit 2); the message says why."""


SET_UP_OUT_OF_MEMORY = (
    "both commits' inputs of this case do not fit the device's memory at once (out of memory with nothing else loaded)"
)
MEASURED_OUT_OF_MEMORY = "its measurement ran out of the device's memory with nothing else loaded (out of memory)"


class DeviceFull(ConfirmError):
    """A measurement of one case ran out of the device's memory (its inputs fitted, its measurement did not)."""


@dataclass
class Reading:
    """One paired round: both sides' medians (ms) from one interleaved sequence, and what the device did."""

    baseline_ms: float
    candidate_ms: float
    timing: str = TIMING_EVENTS
    first: str = "baseline"
    sm_mhz: list[float] | None = None
    power_w: list[float] | None = None


@dataclass
class CaseConfirm:
    """One case's confirmation: the verdict, the rounds it took, the paired medians (ms) per round, the estimated
    ratio candidate / baseline (exp of the median log ratio) and its interval at the last look, the readings of
    every round and each side's kernel plan."""

    case: str
    verdict: str = "UNKNOWN"
    rounds: int = 0
    baseline_ms: list[float] = field(default_factory=list)
    candidate_ms: list[float] = field(default_factory=list)
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    note: str = ""
    timing: str | None = None
    seconds: float = 0.0  # wall time of this case's measurements, both commits, every round
    measurement_ms: float | None = None  # device time sampled per side and round (:func:`measurement_ms`)
    deferred: bool = False  # its measurement ran out of the device's memory: to be set up again with fewer
    readings: list[Reading] = field(default_factory=list)
    plans: dict[str, str] = field(default_factory=dict)
    case_seconds: float | None = None


# ---------------------------------------------------------------------------------------------
# The decision rule
# ---------------------------------------------------------------------------------------------
def looks(max_rounds: int) -> list[int]:
    """The rounds after which the rule looks: 8, 12, 16, 24, 32, 48, 64, 96, ... (1.33-1.5 times apart, so the
    Bonferroni share of each look stays large while a case may run many rounds), up to ``max_rounds``."""
    out, n = [], MIN_ROUNDS
    while n <= max_rounds:
        out.append(n)
        n = n + 4 if n < 16 else n * 3 // 2 if n & (n - 1) == 0 else n * 4 // 3
    return out


def _binom_cdf_half(k: int, n: int) -> float:
    """P(Bin(n, 1/2) <= k)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def median_interval(d: list[float], level: float) -> tuple[float, float] | None:
    """The sign-test interval of the median of ``d`` with two-sided error at most ``level``; None when
    ``n`` is too small for any interval at that level."""
    n = len(d)
    k = 0
    while k + 1 <= n // 2 and 2 * _binom_cdf_half(k, n) <= level:
        k += 1
    if k == 0:
        return None
    s = sorted(d)
    return s[k - 1], s[n - k]


def judge(d: list[float], min_effect: float, alpha_look: float) -> str | None:
    """The verdict at a look from the paired log ratios so far, or None (go on); see the module docstring."""
    ci = median_interval(d, alpha_look)
    if ci is None:
        return None
    e = math.log1p(min_effect / 2)
    low, high = ci
    if low > e:
        return "SLOWER"
    if high < -e:
        return "FASTER"
    if -e < low and high < e:
        return "SAME"
    if high < e:
        return "NOT_SLOWER"
    return None


def first_decisive_look(planned: list[int], alpha_look: float) -> int:
    """The first planned look at which the sign test has any interval at ``alpha_look`` (``2 / 2^(n/2) <=
    alpha_look`` over the n / 2 crossed pairs of n rounds): before it no verdict is possible, so a time budget
    never stops a case earlier. With the Bonferroni share of eight cases and eight looks (0.05 / 64) that is the
    look at 24 rounds (12 pairs): on an H200 (GPU-64e499a3) 19 of 76 identical cases stopped at 8 rounds on a 3 s
    budget, before any look that could decide, and could only be UNKNOWN."""
    for n in planned:
        if 2 * 0.5 ** (n // 2) <= alpha_look:  # n rounds are n / 2 crossed pairs (:func:`crossed`)
            return n
    return planned[-1]


def crossed(result: CaseConfirm) -> list[float]:
    """The observations the rule judges: the mean log ratio of each pair of rounds (1 and 2, 3 and 4, ...), whose
    sequences open with opposite commits (``run_rounds`` alternates the opener), an AB/BA crossover. Whatever
    favours the side that opens a round (or whose graph is captured first) cancels in the pair: on an H200
    (GPU-abc5b934) identical code of the atomic MSELoss at 1M and 4,096 elements read 0.954, 1.037, 0.964,
    1.039, ... (fp32) and 0.90, 1.11, ... (fp16) round after round, each round's ratio set by its opener, so the
    sign interval of single rounds spanned ±4-11% and the case stayed UNKNOWN. Under identical code a pair's
    mean is symmetric about 0 whenever the opener effect is the same both ways, so the bound holds."""
    d = [math.log(c / b) for b, c in zip(result.baseline_ms, result.candidate_ms)]
    return [(d[i] + d[i + 1]) / 2 for i in range(0, len(d) - 1, 2)]


def summarise(result: CaseConfirm, alpha_look: float) -> None:
    d = crossed(result)
    if not d:
        return
    s = sorted(d)
    mid = (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2
    result.ratio = math.exp(mid)
    ci = median_interval(d, alpha_look)
    if ci is not None:
        result.low, result.high = math.exp(ci[0]), math.exp(ci[1])


def measurement_ms(median_ms: float, round_ms: float = ROUND_MS, wall: bool = False) -> float:
    """How long one measurement of a case samples: ``round_ms``, or :data:`SAMPLES_PER_MEASUREMENT` calls of a
    case whose call takes ``median_ms`` where that is longer (:data:`WALL_PASSES_PER_MEASUREMENT` for a case
    timed by the wall), capped at :data:`MAX_MEASUREMENT_MS` (never below ``round_ms``)."""
    if not math.isfinite(median_ms) or median_ms <= 0:
        return round_ms
    samples = WALL_PASSES_PER_MEASUREMENT if wall else SAMPLES_PER_MEASUREMENT
    return max(round_ms, min(MAX_MEASUREMENT_MS, samples * median_ms))


def run_rounds(
    cases: list[str],
    measure: Callable[[str, int], Reading],
    min_effect: float = 0.05,
    alpha: float = ALPHA,
    max_rounds: int = MAX_ROUNDS,
    results: dict[str, CaseConfirm] | None = None,
    case_seconds: float = math.inf,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, CaseConfirm]:
    """Paired rounds until every case has a verdict, ``max_rounds`` pass, or a case has used ``case_seconds``
    (by ``clock``) at a look.

    ``measure(case, round)`` times both commits' calls of one case interleaved and returns a :class:`Reading`;
    the side that opens the sequence alternates with the round. The looks are planned up to ``max_rounds``
    (:func:`looks`), so stopping a case early on its time budget leaves the error bound as it was.
    """
    if max_rounds < MIN_ROUNDS:
        raise ConfirmError(f"--max-rounds {max_rounds}: at least {MIN_ROUNDS} rounds are needed for a first look")
    results = results if results is not None else {c: CaseConfirm(c) for c in cases}
    active = [c for c in cases if results[c].verdict == "UNKNOWN" and not results[c].note]
    planned = looks(max_rounds)
    alpha_look = alpha / max(1, len(active)) / len(planned)
    decisive = first_decisive_look(planned, alpha_look)
    for case in cases:
        results[case].case_seconds = case_seconds if math.isfinite(case_seconds) else None
    for r in range(planned[-1]):  # no round after the last look
        if not active:
            break
        for case in list(active):
            res = results[case]
            start = clock()
            try:
                got = measure(case, r)
            except DeviceFull:  # its rounds so far are dropped: it starts again, set up beside fewer cases
                results[case] = CaseConfirm(case, deferred=True)
                active.remove(case)
                continue
            res.seconds += clock() - start
            res.baseline_ms.append(got.baseline_ms)
            res.candidate_ms.append(got.candidate_ms)
            res.readings.append(got)
            res.timing = got.timing
            res.rounds = r + 1
        if r + 1 in planned:
            for case in list(active):
                res = results[case]
                verdict = judge(crossed(res), min_effect, alpha_look)
                if verdict is not None:
                    res.verdict = verdict
                    active.remove(case)
                    continue
                following = [n for n in planned if n > r + 1]
                if not following or (r + 1 >= decisive and res.seconds / (r + 1) * following[0] > case_seconds):
                    active.remove(case)  # the next look would come past the case's time budget
    for case in cases:
        summarise(results[case], alpha_look)
    return results


def exit_code(results: dict[str, CaseConfirm]) -> int:
    verdicts = {r.verdict for r in results.values()}
    return 1 if "SLOWER" in verdicts else 2 if "UNKNOWN" in verdicts or not results else 0


# ---------------------------------------------------------------------------------------------
# Commits and worktrees
# ---------------------------------------------------------------------------------------------
def _git(repo: Path, *args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfirmError(f"git {args[0]}: {exc}") from None
    if out.returncode != 0:
        first = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[0]
        raise ConfirmError(f"git {args[0]} in {repo}: {first}")
    return out.stdout.strip()


def resolve_commit(repo: Path, sha: str, what: str) -> str:
    """The full sha of ``sha`` (7-40 hex digits) in ``repo``; ConfirmError when it is no commit there."""
    if not isinstance(sha, str) or not SHA.fullmatch(sha):
        raise ConfirmError(f"{what} {sha!r} is not a commit sha (7 to 40 hex digits)")
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{sha}^{{commit}}")
    except ConfirmError:
        raise ConfirmError(f"{what} {sha} is not a commit of the repository {repo}") from None


@contextlib.contextmanager
def worktree(repo: Path, sha: str, parent: Path) -> Iterator[Path]:
    """``sha`` checked out (detached) under ``parent``, removed again afterwards."""
    path = parent / sha[:12]
    _git(repo, "worktree", "add", "--detach", "--quiet", "--end-of-options", str(path), sha)
    try:
        yield path
    finally:
        with contextlib.suppress(ConfirmError):
            _git(repo, "worktree", "remove", "--force", "--", str(path))
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(ConfirmError):
            _git(repo, "worktree", "prune")


# ---------------------------------------------------------------------------------------------
# Workers
def worker_env(device: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The confirm worker's environment: this checkout importable after each tree, Triton's autotuning kept on
    disk, and on a GPU the compiler caches ``kernelwatch collect`` fills (``precompile.cache_dirs``): the nightly's
    confirm, right after its collect, finds the candidate's kernels compiled (it compiled them all again, into
    Triton's default cache: a minute of each H200 confirm)."""
    from kernelwatch.collect.precompile import use_cache_dirs

    base = dict(os.environ) if base is None else base
    env = {k: v for k, v in base.items() if k not in ("PYTHONPATH", "KERNELWATCH_PROJECT")}
    # after each tree (put first while it loads): a team's tree holds no kernelwatch package, this checkout's serves
    env["PYTHONPATH"] = str(DRIVER_ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Triton's autotuner keeps its choice on disk, keyed by the kernel's source and the tuning key: a kernel
    # both trees hold unchanged is tuned once and both sides launch the same tile configuration (tuned apart,
    # the two sides of identical code may pick different tiles and read apart); a changed kernel tunes anew.
    env["TRITON_CACHE_AUTOTUNING"] = "1"
    if device.startswith("cpu"):
        env["TRITON_INTERPRET"] = "1"
        return env
    use_cache_dirs(env)
    return env


# ---------------------------------------------------------------------------------------------
class Worker:
    """A ``confirm_worker.py`` process that loads the kernels of the trees ``trees`` (side -> checkout) side by
    side, and times their calls of a case interleaved."""

    def __init__(self, trees: dict[str, Path], device: str, extra_modules: tuple[str, ...]) -> None:
        self.trees = trees
        self.sizes: dict[str, list[int]] = {}  # case -> [bytes moved, FLOPs], from the last setup
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(BACKENDS), device, *extra_modules],
            cwd=tempfile.gettempdir(),  # neither tree: its folder would be first on sys.path
            env=worker_env(device),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def ask(self, msg: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        self.send(msg)
        return self.receive(timeout_s)

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise ConfirmError(self._died()) from None

    def receive(self, timeout_s: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise ConfirmError(self._died())
            if line.startswith(REPLY):
                return json.loads(line[len(REPLY) :])
        raise ConfirmError(f"the worker did not answer within {timeout_s:.0f} s")

    def _died(self) -> str:
        self.proc.wait(timeout=30)
        err = (self.proc.stderr.read() if self.proc.stderr else "").strip().splitlines()
        return f"the worker exited {self.proc.returncode}: {err[-1] if err else ''}"

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def confirm(
    repo: Path,
    baseline_sha: str,
    candidate_sha: str,
    cases: list[str],
    device: str = "cuda",
    extra_modules: tuple[str, ...] = (),
    min_effect: float = 0.05,
    alpha: float = ALPHA,
    max_rounds: int = MAX_ROUNDS,
    round_ms: float = ROUND_MS,
    progress: Callable[[str], None] | None = None,
    case_seconds: float = CASE_SECONDS,
) -> dict[str, CaseConfirm]:
    """Check both commits out and run :func:`confirm_trees` on the two worktrees."""
    if not cases:
        raise ConfirmError("no case to confirm")
    if max_rounds < MIN_ROUNDS:
        raise ConfirmError(f"--max-rounds {max_rounds}: at least {MIN_ROUNDS} rounds are needed for a first look")
    from kernelwatch.project import active_project

    project = active_project()
    inside = project.python_path.is_relative_to(project.repository) and Path(repo).resolve() == project.repository
    python_path = project.python_path.relative_to(project.repository) if inside else Path(".")
    base = resolve_commit(repo, baseline_sha, "the baseline commit")
    cand = resolve_commit(repo, candidate_sha, "the candidate commit")
    (progress or (lambda _line: None))(f"baseline {base[:12]} and candidate {cand[:12]}")
    with (
        tempfile.TemporaryDirectory(prefix="kw-confirm-") as tmp,
        worktree(repo, base, Path(tmp) / "baseline") as base_tree,
        worktree(repo, cand, Path(tmp) / "candidate") as cand_tree,
    ):
        return confirm_trees(
            base_tree / python_path,  # where the project's modules are imported from: the tree, or its src/
            cand_tree / python_path,
            cases,
            device,
            extra_modules,
            min_effect,
            alpha,
            max_rounds,
            round_ms,
            progress,
            case_seconds,
        )


def confirm_trees(
    baseline_tree: Path,
    candidate_tree: Path,
    cases: list[str],
    device: str = "cuda",
    extra_modules: tuple[str, ...] = (),
    min_effect: float = 0.05,
    alpha: float = ALPHA,
    max_rounds: int = MAX_ROUNDS,
    round_ms: float = ROUND_MS,
    progress: Callable[[str], None] | None = None,
    case_seconds: float = CASE_SECONDS,
    chunk: int | None = None,
    order: str = "interleaved",
) -> dict[str, CaseConfirm]:
    """Confirm ``cases`` between two checked-out trees (directories; no git needed): one worker loads both trees'
    kernels side by side and times each round's calls interleaved; :func:`run_rounds` decides. With ``chunk``,
    the cases go through the worker ``chunk`` at a time (each chunk's inputs freed before the next: a whole
    suite's inputs, twice, do not fit one GPU), and the false-alarm bound holds per chunk. Cases the device's
    memory cannot hold beside the others of their chunk are set up again in smaller chunks (as many as fitted).
    ``order="blocks"`` times one side's samples and then the other's in each round, as two workers did before (for
    ``benchmarks/judge_eval.py``'s before/after spread; never for a verdict the gate uses)."""
    from kernelwatch.collect.accuracy import case_seed

    if not cases:
        raise ConfirmError("no case to confirm")
    for side, tree in zip(SIDES, (baseline_tree, candidate_tree)):
        if not extra_modules and not (Path(tree) / "kernelwatch" / "kernels" / "__init__.py").is_file():
            raise ConfirmError(f"the {side} tree {tree} holds no kernelwatch/kernels package")
    say = progress or (lambda _line: None)
    trees = {"baseline": Path(baseline_tree).resolve(), "candidate": Path(candidate_tree).resolve()}
    seeds = [{"key": c, "seed": case_seed(_Key(c))} for c in cases]
    worker = Worker(trees, device, extra_modules)
    results = {c: CaseConfirm(c) for c in cases}
    seed_of = {s["key"]: s for s in seeds}
    pending, step, done = list(cases), chunk or len(cases), 0
    try:
        while pending:
            group, pending = pending[:step], pending[step:]
            say(f"cases {done + 1}-{done + len(group)} of {len(cases)}: loading both trees in one worker, compiling")
            full = _confirm_group(worker, trees, group, [seed_of[c] for c in group], results, say, case_seconds)
            fitted = [c for c in group if c not in full]
            if full and not fitted and len(group) == 1:
                results[group[0]].note = SET_UP_OUT_OF_MEMORY
                done += 1
                continue
            if full:  # set up again with fewer cases beside them, as many as fitted this time
                say(f"{len(full)} case(s) did not fit beside the others in the device's memory: set up again")
                pending = full + pending
                step = _fewer(step, len(fitted), len(group))
            if fitted:
                run_rounds(
                    fitted,
                    _measurer(worker, fitted, results, round_ms, order),
                    min_effect,
                    alpha,
                    max_rounds,
                    results,
                    case_seconds,
                )
                deferred = [c for c in fitted if results[c].deferred]
                for case in deferred:
                    results[case].deferred = False
                if deferred and len(fitted) == 1:
                    results[deferred[0]].note = MEASURED_OUT_OF_MEMORY
                elif deferred:
                    say(f"{len(deferred)} case(s) ran out of the device's memory while measured: set up again")
                    pending = deferred + pending
                    step = _fewer(step, len(fitted) - len(deferred), len(fitted))
                    fitted = [c for c in fitted if c not in deferred]
                done += len(fitted)
    finally:
        worker.close()
    return results


def _fewer(step: int, kept: int, tried: int) -> int:
    """The chunk after ``tried`` cases of which the device's memory held ``kept``: as many as it held, else half."""
    return max(1, min(step, kept) if kept else tried // 2)


def _confirm_group(
    worker: Worker,
    trees: dict[str, Path],
    group: list[str],
    seeds: list[dict[str, Any]],
    results: dict[str, CaseConfirm],
    say: Callable[[str], None],
    case_seconds: float,
) -> list[str]:
    """Set the worker up with ``group``'s cases in both trees; notes on the cases a side lacks or cannot run.
    Answers the cases the device's memory could not hold beside the others (set up, on neither side)."""
    msg = {"op": "setup", "trees": {s: str(t) for s, t in trees.items()}, "cases": seeds}
    setup = worker.ask(msg, SETUP_TIMEOUT_S)
    for side in SIDES:
        if not Path(setup["trees"][side]).resolve().is_relative_to(trees[side]):
            raise ConfirmError(f"the {side} kernels came from {setup['trees'][side]}, not from {trees[side]}")
        for key in setup["missing"][side]:
            results[key].note = results[key].note or f"the {side} commit has no perf case {key}"
        for key, err in setup["errors"][side].items():
            results[key].note = results[key].note or f"the {side} commit's kernel raised: {err}"
        for key, plan in setup["plans"][side].items():
            results[key].plans[side] = plan
    worker.sizes = setup["sizes"]
    full = [k for k in setup.get("full", []) if k in group]
    if len(full) < len(group):
        say(f"{len(group) - len(full)} case(s), at most {case_seconds:g} s each")
    return full


def _measurer(
    worker: Worker, group: list[str], results: dict[str, CaseConfirm], round_ms: float, order: str = "interleaved"
) -> Callable[[str, int], Reading]:
    """``measure(case, round)`` for :func:`run_rounds`: both sides' calls of the case interleaved, the side that
    opens the sequence alternating with the round; the first call of a case fixes its measurement length."""
    from kernelwatch.collect.perf import launch_batch

    batch = {c: launch_batch(*worker.sizes[c]) if c in worker.sizes else 1 for c in group}
    lengths: dict[str, float] = {}

    def ask(case: str, rep_ms: float, first: str) -> dict[str, Any]:
        reply = worker.ask(
            {"op": "measure", "key": case, "rep_ms": rep_ms, "calls": batch[case], "first": first, "order": order},
            MEASURE_TIMEOUT_S,
        )
        if "error" in reply:
            raise (DeviceFull if reply.get("full") else ConfirmError)(f"{case}: {reply['error']}")
        return reply

    def measure(case: str, r: int) -> Reading:
        if case not in lengths:
            probe = ask(case, round_ms, "baseline")
            lengths[case] = measurement_ms(float(probe["baseline_ms"]), round_ms, probe["timing"] == TIMING_WALL)
            results[case].measurement_ms = lengths[case]
        first = SIDES[r % 2]
        reply = ask(case, lengths[case], first)
        return Reading(
            float(reply["baseline_ms"]),
            float(reply["candidate_ms"]),
            reply["timing"],
            first,
            reply.get("sm_mhz"),
            reply.get("power_w"),
        )

    return measure


def common_method(baseline: str, candidate: str) -> str:
    """The timing method of every measurement of a case in one confirmation: a graph replay only where each
    commit's call was kept as a graph by ``Backend.device_samples`` (it did the call's work), events otherwise.
    Chosen per measurement, a launch-bound MSELoss read graph in one and events in the next, 8-12% apart on
    one H200, which a paired ratio would take for the commits' difference."""
    return TIMING_GRAPH if baseline in GRAPH_TIMINGS and candidate in GRAPH_TIMINGS else TIMING_EVENTS


class _Key:
    """What ``case_seed`` reads of a case: its key."""

    def __init__(self, key: str) -> None:
        self.key = key


def records(
    results: dict[str, CaseConfirm],
    baseline_sha: str,
    candidate_sha: str,
    min_effect: float,
    device_uuid: str | None,
    when: float | None = None,
) -> list[Confirmation]:
    """The verdicts as stored data (``kernelwatch.store.schema.Confirmation``), one per case that was measured (a case
    one of the commits lacks, or whose kernel raised, has no measurement to keep)."""
    import datetime as dt

    at = format_time(dt.datetime.fromtimestamp(time.time() if when is None else when, dt.timezone.utc))
    return [
        Confirmation(
            case=r.case,
            baseline_commit=baseline_sha,
            candidate_commit=candidate_sha,
            verdict=r.verdict,
            rounds=r.rounds,
            ratio=r.ratio,
            low=r.low,
            high=r.high,
            min_effect=min_effect,
            device_uuid=device_uuid,
            seconds=round(r.seconds, 3),
            confirmed_at=at,
            detail=detail(r),
        )
        for r in results.values()
        if r.rounds and not r.note
    ]


def detail(result: CaseConfirm) -> ConfirmDetail:
    """A case's per-round data as stored (``kernelwatch.store.schema.ConfirmDetail``)."""
    return ConfirmDetail(
        plans={side: plan[:4000] for side, plan in result.plans.items()},
        measurement_ms=result.measurement_ms,
        case_seconds=result.case_seconds,
        rounds=[
            ConfirmRound(
                ratio=g.candidate_ms / g.baseline_ms,
                baseline_ms=g.baseline_ms,
                candidate_ms=g.candidate_ms,
                first=g.first,
                timing=g.timing,
                sm_mhz=g.sm_mhz,
                power_w=g.power_w,
            )
            for g in result.readings
        ],
    )


def report(results: dict[str, CaseConfirm], baseline_sha: str, candidate_sha: str) -> str:
    """The Markdown table of the verdicts, one row per case with its rounds."""
    lines = [
        f"## Paired confirmation: {candidate_sha[:12]} (candidate) vs {baseline_sha[:12]} (baseline), one device",
        "",
        "| case | verdict | rounds | candidate / baseline | interval | baseline ms (median) | "
        "candidate ms (median) | timing | ms sampled per measurement | seconds |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: |",
    ]

    def med(v: list[float]) -> str:
        return f"{sorted(v)[len(v) // 2]:.4f}" if v else "-"

    for r in results.values():
        interval = f"{r.low:.3f}-{r.high:.3f}" if r.low is not None else "-"
        ratio = f"{r.ratio:.3f}" if r.ratio is not None else "-"
        case = r.case.replace("|", "\\|")
        verdict = r.verdict + (f" ({r.note})" if r.note else "")
        lines.append(
            f"| `{case}` | {verdict.replace('|', '/')} | {r.rounds} | {ratio} | {interval} | "
            f"{med(r.baseline_ms)} | {med(r.candidate_ms)} | {r.timing or '-'} | "
            f"{f'{r.measurement_ms:.0f}' if r.measurement_ms else '-'} | {r.seconds:.1f} |"
        )
    return "\n".join(lines)
