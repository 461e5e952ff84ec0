"""Handing work items to device workers and gathering their results: each item exactly once.

Items are dealt in *groups*: a worker that takes the first item of a group gets the rest of that
group next, so work that shares per-process state (the perf cases of one baseline key share their
PyTorch baselines, measured once per worker) runs in one process. Groups are dealt dynamically (an
idle worker takes the next group), longest first (:func:`plan`), so a slow device never holds the
others back and the run does not end on one big case while the other devices idle. Results are
merged back into the items' own order whatever order they came in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any


def plan(
    items: list[Hashable],
    group_of: Callable[[Hashable], Hashable],
    cost_of: Callable[[Hashable], float],
    first: Callable[[Hashable], bool] | None = None,
) -> list[list[Hashable]]:
    """Items grouped by ``group_of`` (item order kept inside a group), groups by total cost, largest first; the
    groups holding an item ``first`` names before all others (each part in that order).

    Longest-processing-time-first list scheduling: with m workers its makespan is at most
    (4/3 - 1/(3m)) of the optimum (Graham 1969), where dealing in suite order can end with one
    worker running the largest case alone. Equal costs keep the items' order.
    """
    groups: dict[Hashable, list[Hashable]] = {}
    for item in items:
        groups.setdefault(group_of(item), []).append(item)
    return sorted(
        groups.values(),
        key=lambda g: (first is None or not any(first(i) for i in g), -sum(cost_of(i) for i in g)),
    )


@dataclass
class Dispatcher:
    """``groups``: the dealing units in dealing order (default: each item alone, in item order)."""

    items: list[Hashable]
    groups: list[list[Hashable]] | None = None
    _pending: deque = field(init=False)
    _reserved: dict[int, deque] = field(default_factory=dict, init=False)
    _in_flight: dict[int, Hashable] = field(default_factory=dict, init=False)
    _results: dict[Hashable, Any] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if len(set(self.items)) != len(self.items):
            raise ValueError("work items must be unique")
        groups = self.groups if self.groups is not None else [[i] for i in self.items]
        dealt = [i for g in groups for i in g]
        if len(dealt) != len(self.items) or set(dealt) != set(self.items):
            raise ValueError("the groups must hold every work item exactly once")
        self._pending = deque(deque(g) for g in groups if g)

    def take(self, worker: int) -> Hashable | None:
        """The next item for an idle worker (the rest of its group first), or None when nothing is left."""
        if worker in self._in_flight:
            raise RuntimeError(f"worker {worker} already holds {self._in_flight[worker]!r}")
        queue = self._reserved.get(worker)
        if not queue:
            if not self._pending:
                return None
            queue = self._reserved[worker] = self._pending.popleft()
        item = queue.popleft()
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
        return not self._pending and not self._in_flight and not any(self._reserved.values())

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
