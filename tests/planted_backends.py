"""The driver's ``Backend`` with the planted clock (tests/planted_clock.py) standing in for the CPU's host clock.

tests/test_confirm.py lays this file out as ``collect/backends.py`` beside a ``kernels/names.py`` (where the
confirm worker looks for the timing names) and points ``kernelwatch.collect.confirm.BACKENDS`` at it: the
worker times both trees' calls through every path of ``Backend.paired_samples`` (interleaving, flushes,
warm-up, sample counts), and only the clock those samples are read from is planted.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tests.planted_clock import Event

_found = importlib.util.find_spec("kernelwatch")  # the driver's package (on PYTHONPATH); nothing imported
assert _found is not None and _found.origin is not None
_spec = importlib.util.spec_from_file_location(
    "kernelwatch_planted_real_backends", Path(_found.origin).parent / "collect" / "backends.py"
)
assert _spec is not None and _spec.loader is not None
_real = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _real  # dataclasses resolve annotations through sys.modules
_spec.loader.exec_module(_real)


class Backend(_real.Backend):
    def event(self):
        return Event() if self.kind == "cpu" else super().event()
