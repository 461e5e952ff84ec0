"""Progress of a collector run: a bar on a terminal, a line now and then in a log.

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


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """``update(item_name, cost)`` per finished item; ``close()`` at the end.

    The time left is elapsed x (cost left / cost done), with the scheduler's cost estimates, since
    the largest items run first.
    """

    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None,
                 every: int | None = None, interval_s: float = LOG_INTERVAL_S, total_cost: float | None = None) -> None:
        self.total, self.enabled = total, enabled
        self.total_cost = total_cost if total_cost else float(total)  # the time left is estimated from costs
        self.done_cost = 0.0
        self.stream = stream if stream is not None else sys.stderr
        self.every = every or max(1, math.ceil(total / LOG_LINES))
        self.interval_s = interval_s
        self.done = 0
        self.started = self.last_line = time.monotonic()
        self.bar = None
        isatty = getattr(self.stream, "isatty", None)
        if enabled and isatty is not None and isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="case", dynamic_ncols=True, file=self.stream,
                            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}] {postfix}")

    def update(self, name: str = "", cost: float = 1.0) -> None:
        self.done += 1
        self.done_cost += cost
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(name[:80], refresh=False)
            self.bar.update(1)
            return
        now = time.monotonic()
        if self.done % self.every == 0 or now - self.last_line >= self.interval_s or self.done == self.total:
            self._line(now, name)

    def _line(self, now: float, name: str) -> None:
        elapsed = now - self.started
        left = elapsed / self.done_cost * max(0.0, self.total_cost - self.done_cost) if self.done_cost > 0 else 0.0
        pct = 100.0 * self.done / self.total if self.total else 100.0
        last = f", last {name}" if name else ""
        print(f"kernelwatch: {self.done}/{self.total} items ({pct:.0f}%), {_clock(elapsed)} elapsed, "
              f"~{_clock(left)} left{last}", file=self.stream, flush=True)
        self.last_line = now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
