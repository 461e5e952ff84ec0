"""Where a change entered one case's history on one hardware, and the commits to re-run to pin it."""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field

from sqlalchemy import Engine

from ci.detect import MIN_SERIES, ChangePoint, change_points
from db.queries import case_history
from db.queries import find_hardware as find_hardware  # the one --hardware rule
from kernels.names import KERNEL_IMPL


@dataclass(frozen=True)
class Step:
    point: ChangePoint
    good: str  # last commit before the change
    bad: str  # first commit after it
    commits: list[str] = field(default_factory=list)  # to re-run, oldest first


def steps(engine: Engine, case: str, fingerprint: str, implementation: str = KERNEL_IMPL,
          min_effect: float = 0.05) -> tuple[int, list[Step]]:
    """(number of runs in the history, the steps found in it)."""
    history = case_history(engine, case, fingerprint, implementation)
    if len(history) < MIN_SERIES:
        raise LookupError(f"{case} has {len(history)} runs on this hardware: at least {MIN_SERIES} are needed")
    found = []
    for p in change_points([h["median_ms"] for h in history], min_effect=min_effect):
        good, bad = history[p.index - 1]["commit_sha"], history[p.index]["commit_sha"]
        found.append(Step(p, good, bad, commits_between(good, bad) or [bad]))
    return len(history), found


def commits_between(good: str, bad: str) -> list[str]:
    """``git rev-list good..bad`` oldest first, or [] outside a checkout that has both."""
    try:
        out = subprocess.run(["git", "rev-list", "--reverse", f"{good}..{bad}", "--"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return out.stdout.split() if out.returncode == 0 else []


def rerun_command(sha: str, case: str, suite: str = "perf") -> str:
    """The shell command that re-measures exactly ``case`` at ``sha``; every value quoted for the shell.

    ``--case`` is exact (``--match`` is a substring: ``shape=1`` would take ``shape=128`` too); commits
    older than ``--case`` take ``--match`` with the same key."""
    kernel = case.split("/", 1)[0]
    return (f"git checkout {shlex.quote(sha[:12])} && kernelwatch collect --kernels {shlex.quote(kernel)} "
            f"--suite {shlex.quote(suite)} --case {shlex.quote(case)}")


def bisect_command(case: str, hardware: str) -> str:
    """The shell command that finds where a change entered ``case``'s history; every value quoted."""
    return f"kernelwatch bisect --hardware {shlex.quote(hardware)} -- {shlex.quote(case)}"  # a key may start with -
