"""Progress of a collector run: a bar on a terminal, a line now and then in a log; at the end, where the
time went (:func:`format_phases`).

A redrawn bar is carriage returns: in a CI log (stderr not a terminal) it becomes one ever-growing
line (~70 KB for a full run). There the progress is one plain line every ``every`` finished items
or every ``interval_s`` seconds, whichever comes first, and one at the end.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

LOG_LINES = 20  # about this many lines per run in a log
LOG_INTERVAL_S = 30.0
MEDIAN_FROM = 3  # finished items of a group before its rate is their median seconds per cost


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60}:{seconds % 60:02d}"
    )


class Progress:
    """``update(item_name, cost, seconds, group)`` per finished item; ``close()`` at the end.

    The time left: each group of items (``group_costs``: e.g. suite and kernel -> the scheduler's summed cost
    estimates) has its own rate k_g = worker seconds / cost over its finished items (the global rate while a
    group has none finished), and

        left = sum_g k_g x (cost of g not yet finished) / workers.

    The scheduler's costs only rank items (largest first), and one unit of cost takes very different times in
    different kernels (an interpreted matmul against a reduction), so one rate over everything, measured on
    the heavy items that run first, overestimated the rest several times over; and elapsed time over finished
    cost ignored the ``workers`` - 1 items in flight beside each finished one: both together made a 5:54 run
    print "~20:42 left". From MEDIAN_FROM finished items on, k_g is their median seconds per cost: a worker's
    first item also pays its interpreter warm-up (49 s against ~2 s on this CPU), which one sum would spread
    over the whole estimate. Without seconds per item the estimate falls back to elapsed x cost left / cost done.
    """

    def __init__(
        self,
        total: int,
        enabled: bool = True,
        stream: TextIO | None = None,
        every: int | None = None,
        interval_s: float = LOG_INTERVAL_S,
        total_cost: float | None = None,
        group_costs: dict[str, float] | None = None,
        workers: int = 1,
        clock=time.monotonic,
    ) -> None:
        self.total, self.enabled = total, enabled
        self.total_cost = total_cost if total_cost else float(total)  # the time left is estimated from costs
        self.group_costs = dict(group_costs or {})
        self.workers = max(1, workers)
        self.clock = clock
        self.done_by_group: dict[str, list[float]] = {}  # group -> [cost done, worker seconds]
        self.ratios: dict[str, list[float]] = {}  # group -> seconds / cost of each finished item
        self.seconds_done = 0.0
        self.done_cost = 0.0
        self.stream = stream if stream is not None else sys.stderr
        self.every = every or max(1, math.ceil(total / LOG_LINES))
        self.interval_s = interval_s
        self.done = 0
        self.started = self.last_line = clock()
        self.bar = None
        isatty = getattr(self.stream, "isatty", None)
        if enabled and isatty is not None and isatty():
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                unit="case",
                dynamic_ncols=True,
                file=self.stream,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}] {postfix}",
            )

    def update(self, name: str = "", cost: float = 1.0, seconds: float | None = None, group: str = "") -> None:
        self.done += 1
        self.done_cost += cost
        if seconds is not None:
            done = self.done_by_group.setdefault(group, [0.0, 0.0])
            done[0] += cost
            done[1] += seconds
            self.seconds_done += seconds
            if cost > 0:
                self.ratios.setdefault(group, []).append(seconds / cost)
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(name[:80], refresh=False)
            self.bar.update(1)
            return
        now = self.clock()
        if self.done % self.every == 0 or now - self.last_line >= self.interval_s or self.done == self.total:
            self._line(now, name)

    def drop(self, n: int) -> None:
        """``n`` planned items will not run (a perf case that errored has nothing to profile)."""
        if n <= 0:
            return
        self.total = max(self.done, self.total - n)
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def left_s(self, now: float) -> float:
        """Seconds left, estimated as the class docstring says."""
        elapsed = now - self.started
        if not self.done_by_group:
            return elapsed / self.done_cost * max(0.0, self.total_cost - self.done_cost) if self.done_cost > 0 else 0.0
        done_cost = sum(c for c, _ in self.done_by_group.values())
        overall = self.seconds_done / done_cost if done_cost > 0 else 0.0
        groups = self.group_costs or {"": self.total_cost}
        work = 0.0
        for group, total in groups.items():
            cost, seconds = self.done_by_group.get(group, (0.0, 0.0))
            ratios = sorted(self.ratios.get(group, []))
            mean = seconds / cost if cost > 0 else overall
            rate = ratios[(len(ratios) - 1) // 2] if len(ratios) >= MEDIAN_FROM else mean  # see the class docstring
            work += rate * max(0.0, total - cost)
        return work / self.workers

    def _line(self, now: float, name: str) -> None:
        elapsed = now - self.started
        left = self.left_s(now)
        pct = 100.0 * self.done / self.total if self.total else 100.0
        last = f", last {name}" if name else ""
        print(
            f"kernelwatch: {self.done}/{self.total} items ({pct:.0f}%), {_clock(elapsed)} elapsed, "
            f"~{_clock(left)} left{last}",
            file=self.stream,
            flush=True,
        )
        self.last_line = now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


PHASE_NAMES = {
    "setup": "setup (devices, cases, git)",
    "workers": "workers start + ceilings",
    "precompile": "compile ahead (spare cores)",
    "suites": "suites",
    "stop": "workers stop",
    "profiling": "profiling (after the suites)",
    "journal": "journal writes",
    "total": "total",
    "worker.startup": "start-up (imports, device)",
    "worker.ceilings": "ceilings (copy, read, matmul)",
    "worker.accuracy": "accuracy suite",
    "worker.perf.inputs": "perf: inputs",
    "worker.perf.warmup": "perf: compile + warm-up",
    "worker.perf.timing": "perf: device timing",
    "worker.perf.call": "perf: cost per call",
    "worker.perf.memory": "perf: peak memory",
}


def format_phases(phases: dict[str, float], writing_s: float | None = None) -> str:
    """The per-phase time summary printed at the end of ``collect`` (``run.phases_s``: see
    :mod:`kernelwatch.collect.collect`)."""
    wall = [
        k for k in ("setup", "workers", "precompile", "suites", "stop", "profiling", "journal", "total") if k in phases
    ]
    work = [k for k in PHASE_NAMES if k.startswith("worker.") and k in phases]
    work += sorted(k for k in phases if k.startswith("worker.") and k not in PHASE_NAMES)
    devices = sorted(k.removeprefix("busy.") for k in phases if k.startswith("busy."))
    lines = ["kernelwatch: time by phase (s)", "  wall clock"]
    lines += [f"    {PHASE_NAMES[k]:<34}{phases[k]:9.1f}" for k in wall]
    if writing_s is not None:
        lines.append(f"    {'writing the run (after the above)':<34}{writing_s:9.1f}")
    if work:
        lines.append(f"  worker time, summed over {max(1, len(devices))} worker(s)")
        lines += [f"    {PHASE_NAMES.get(k, k.removeprefix('worker.')):<34}{phases[k]:9.1f}" for k in work]
    if devices:
        lines.append("  per device during the suites: busy / idle")
        lines += [f"    {d:<34}{phases[f'busy.{d}']:9.1f} / {phases.get(f'idle.{d}', 0.0):.1f}" for d in devices]
    return "\n".join(lines)
