"""Where a change entered one case's history on one hardware, and the commits to re-run to pin it."""

from __future__ import annotations

import inspect
import shlex
import statistics
import subprocess
from dataclasses import dataclass, field

from sqlalchemy import Engine

from kernelwatch.gate.detect import MIN_SERIES, ChangePoint, change_points, change_points_within, method_starts
from kernelwatch.kernels.names import KERNEL_IMPL, calls_per_sample
from kernelwatch.store.queries import case_history
from kernelwatch.store.queries import find_hardware as find_hardware  # the one --hardware rule
from kernelwatch.store.schema import is_commit_sha

MIN_SEGMENT = inspect.signature(change_points).parameters["min_segment"].default  # runs on each side of a step


@dataclass(frozen=True)
class Step:
    point: ChangePoint
    good: str  # last commit before the change
    bad: str  # first commit after it
    commits: list[str] = field(default_factory=list)  # to re-run, oldest first


@dataclass(frozen=True)
class EdgeChange:
    """A change the detector cannot call a step: fewer than :data:`MIN_SEGMENT` runs on one side of it."""

    change: float  # median after / median before - 1
    runs_before: int
    runs_after: int
    good: str  # the last commit before the change
    bad: str  # the first commit after it
    commits: list[str] = field(default_factory=list)  # good..bad from git, oldest first ([] outside a checkout)

    @property
    def short_side(self) -> str:
        return "after" if self.runs_after < MIN_SEGMENT else "before"

    @property
    def note(self) -> str:
        if self.short_side == "before":
            k = self.runs_before
            return (
                f"a change of {self.change:+.0%} after {k} run{'s' if k > 1 else ''} (between {self.good[:12]} "
                f"and {self.bad[:12]}): too few runs before it to call a step ({MIN_SEGMENT} needed)"
            )
        after = self.runs_after
        return (
            f"a change of {self.change:+.0%} in the last {after} run{'s' if after > 1 else ''} (from "
            f"{self.bad[:12]} on): too few runs after it to call a step ({MIN_SEGMENT} needed)"
        )

    @property
    def to_repeat(self) -> str:
        """The commit whose re-runs give the short side the runs it lacks: the last good one or the first bad one."""
        return self.good if self.short_side == "before" else self.bad


@dataclass(frozen=True)
class MethodChange:
    """Where the case's timing changed what one sample holds (:func:`calls_per_sample`): never a step."""

    before: str  # calls per sample before, e.g. "one call"
    after: str
    good: str  # the last commit timed the old way
    bad: str  # the first commit timed the new way


@dataclass(frozen=True)
class Bisection:
    """What ``kernelwatch bisect`` answers about one case on one hardware.

    * ``runs``: the runs of its history;
    * ``steps``: every step found, oldest first, each within one timing method;
    * ``edges``: changes past the minimum effect that too few runs on one side keep from being called a step,
      newest first: the newest change after the last step (what Triage flags on the newest run: a change with one
      run after it), then, when no step was found, one with too few runs before it;
    * ``methods``: where the timing method changed (never read as a step);
    * ``synthetic``: commits of SYNTHETIC runs (no commit to re-run).
    """

    runs: int
    steps: list[Step]
    edges: list[EdgeChange]
    methods: list[MethodChange]
    synthetic: frozenset[str]


def steps(
    engine: Engine, case: str, fingerprint: str, implementation: str = KERNEL_IMPL, min_effect: float = 0.05
) -> Bisection:
    """The steps of ``case``'s history on one hardware, looked for within each stretch timed one way (a method
    change is reported, never called a step), and the newest change past ``min_effect`` after the last step that
    too few runs keep from being tested (:func:`edge_change`), and when no step is found, one too few runs before."""
    history = case_history(engine, case, fingerprint, implementation)
    if len(history) < MIN_SERIES:
        raise LookupError(f"{case} has {len(history)} runs on this hardware: at least {MIN_SERIES} are needed")
    medians = [h["median_ms"] for h in history]
    sha = [h["commit_sha"] for h in history]
    method = [calls_per_sample(h["timing"]) for h in history]
    starts = method_starts([h["timing"] for h in history])
    methods = [MethodChange(method[i - 1], method[i], sha[i - 1], sha[i]) for i in starts[1:]]
    found = [
        Step(p, sha[p.index - 1], sha[p.index], commits_between(sha[p.index - 1], sha[p.index]) or [sha[p.index]])
        for p in change_points_within(medians, [h["timing"] for h in history], min_effect)
    ]
    last = max([starts[-1], *(s.point.index for s in found if s.point.index >= starts[-1])])
    tail = medians[last:]
    head = None if found else edge_change(tail, min_effect, ends=("before",))
    skip = head[0] if head else 0
    edges = []
    for at, edge in ((skip, edge_change(tail[skip:], min_effect, ends=("after",))), (0, head)):
        if edge is not None:
            k = last + at + edge[0]
            good, bad = sha[k - 1], sha[k]
            edges.append(EdgeChange(edge[1], k - starts[-1], len(history) - k, good, bad, commits_between(good, bad)))
    synthetic = frozenset(h["commit_sha"] for h in history if h["synthetic"])
    return Bisection(len(history), found, edges, methods, synthetic)


def edge_change(
    medians: list[float], min_effect: float, ends: tuple[str, ...] = ("before", "after")
) -> tuple[int, float] | None:
    """A change the detector cannot call because it has fewer than :data:`MIN_SEGMENT` runs on one side.

    For each split ``k`` that leaves 1 to MIN_SEGMENT - 1 runs at the start ("before" in ``ends``) or the end
    ("after"), the runs before and after must not overlap (every run on the short side beyond every run
    on the other) and the medians of the two sides must differ by at least ``min_effect``; the largest such
    change is returned as (k, median after / median before - 1), ``k`` the number of runs before it. None if
    there is none.
    """
    n = len(medians)
    best: tuple[int, float] | None = None
    heads = range(1, MIN_SEGMENT) if "before" in ends else range(0)
    tails = range(n - MIN_SEGMENT + 1, n) if "after" in ends else range(0)
    for k in [*heads, *tails]:
        if not 0 < k < n:
            continue
        before, after = medians[:k], medians[k:]
        if not (max(before) < min(after) or min(before) > max(after)):
            continue
        change = statistics.median(after) / statistics.median(before) - 1
        if abs(change) >= min_effect and (best is None or abs(change) > abs(best[1])):
            best = (k, change)
    return best


def commits_between(good: str, bad: str) -> list[str]:
    """``git rev-list good..bad`` oldest first, or [] outside a checkout that has both.

    The shas come from the database: only hex commit ids reach git (an older database may hold a value such
    as ``--output=FILE`` stored before ingest checked them), after ``--end-of-options`` so that nothing can
    be read as an option, and before ``--`` so that nothing can be read as a path."""
    if not (is_commit_sha(good) and is_commit_sha(bad)):
        return []
    try:
        out = subprocess.run(
            ["git", "rev-list", "--reverse", "--end-of-options", f"{good}..{bad}", "--"],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [sha for sha in out.stdout.split() if is_commit_sha(sha)]


def rerun_command(sha: str, case: str, suite: str = "perf", vendor: str | None = None) -> str | None:
    """The shell command that re-measures exactly ``case`` at ``sha``; every value quoted for the shell.

    None when ``sha`` is not a commit id (``unknown`` outside a checkout, or a value stored before ingest
    checked shas): no command is offered rather than one git would misread. ``git switch --detach`` takes
    only a commit (``git checkout X`` would take a path X and discard its edits), after ``--end-of-options``.
    On a CPU (``vendor`` ``cpu``) only the accuracy suite runs, so the command is that suite's, on that device.
    ``--case`` is exact (``--match`` is a substring: ``shape=1`` would take ``shape=128`` too); commits
    older than ``--case`` take ``--match`` with the same key."""
    if not is_commit_sha(sha):
        return None
    kernel = case.split("/", 1)[0]
    device = ""
    if vendor == "cpu":
        suite, device = "accuracy", " --device cpu"
    return (
        f"git switch --detach --end-of-options {sha[:12]} && kernelwatch collect{device} "
        f"--kernels {shlex.quote(kernel)} --suite {shlex.quote(suite)} --case {shlex.quote(case)}"
    )


def bisect_command(case: str, hardware: str) -> str:
    """The shell command that finds where a change entered ``case``'s history; every value quoted."""
    return f"kernelwatch bisect --hardware {shlex.quote(hardware)} -- {shlex.quote(case)}"  # a key may start with -
