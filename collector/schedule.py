"""Handing cases to device workers and gathering their results: each case exactly once.

Work is dealt dynamically (an idle worker takes the next case), so a slow device never holds the
others back; results are merged back into the suite's own order whatever order they came in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Dispatcher:
    items: list[Hashable]
    _pending: deque = field(init=False)
    _in_flight: dict[int, Hashable] = field(default_factory=dict, init=False)
    _results: dict[Hashable, Any] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if len(set(self.items)) != len(self.items):
            raise ValueError("work items must be unique")
        self._pending = deque(self.items)

    def take(self, worker: int) -> Hashable | None:
        """The next item for an idle worker, or None when nothing is left to hand out."""
        if worker in self._in_flight:
            raise RuntimeError(f"worker {worker} already holds {self._in_flight[worker]!r}")
        if not self._pending:
            return None
        item = self._pending.popleft()
        self._in_flight[worker] = item
        return item

    def current(self, worker: int) -> Hashable | None:
        return self._in_flight.get(worker)

    def complete(self, worker: int, result: Any) -> Hashable:
        item = self._in_flight.pop(worker)
        if item in self._results:
            raise RuntimeError(f"{item!r} finished twice")
        self._results[item] = result
        return item

    @property
    def finished(self) -> bool:
        return not self._pending and not self._in_flight

    @property
    def busy_workers(self) -> list[int]:
        return list(self._in_flight)

    def partial_results(self) -> list[tuple[Hashable, Any]]:
        """The results so far, in item order (an interrupted run keeps these)."""
        return [(i, self._results[i]) for i in self.items if i in self._results]

    def results(self) -> list[tuple[Hashable, Any]]:
        """Results in the order the items were given; raises if any item has none."""
        missing = [i for i in self.items if i not in self._results]
        if missing:
            raise RuntimeError(f"{len(missing)} items have no result, first {missing[0]!r}")
        return [(i, self._results[i]) for i in self.items]
