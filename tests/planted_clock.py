"""A planted device clock for tests of `kernelwatch confirm` (tests/test_confirm.py): its verdicts are decided by
timings the test chose, never by how busy the host is.

A planted kernel calls :func:`spend` with the milliseconds one call of it costs; :class:`Event` (the planted
backend's stand-in for a device event, tests/planted_backends.py) reads the clock that :func:`spend` advances.
Each call costs its milliseconds times lognormal noise of sd :data:`NOISE_SD`, drawn from a generator seeded
once per process: the worker calls in a fixed order, so a confirmation is the same every time it runs.
"""

from __future__ import annotations

import math
import random

NOISE_SD = 0.02  # per call; a measurement's median of 5 or more calls spreads about 1%
_RNG = random.Random(41)
_NOW_MS = [0.0]


def spend(ms: float) -> None:
    """One call's device time: ``ms`` with its noise."""
    _NOW_MS[0] += ms * math.exp(_RNG.gauss(0.0, NOISE_SD))


class Event:
    """``record`` reads the planted clock; ``elapsed_time`` gives milliseconds, as a device event does."""

    def __init__(self) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = _NOW_MS[0]

    def elapsed_time(self, end: Event) -> float:
        return end.t - self.t
