"""A small kernel for tests of the collector's scheduling, perf path and journal on the interpreter.
Imported only through `--project tests/projects/timing.toml`; never part of the real suite.

* perf cases: variants ``v1``/``v2`` x three sizes, so each baseline key is shared by two cases.
  When ``TIMED_LOG`` names a file, every measurement of the eager baseline appends one line
  ``<pid> <baseline key>`` to it (the tests count how often baselines were measured, and where).
* accuracy cases: ``TIMED_CASES`` of them (default 6), each sleeping ``TIMED_SLEEP_S`` (default 0)
  seconds before computing, and those from index ``TIMED_SLOW_FROM`` on sleeping an hour, so a test
  can kill a collector while some cases have finished and its workers are in the middle of others.
"""

from __future__ import annotations

import os
import time

import torch

from kernelwatch.kernels.spec import EAGER_IMPL, KERNEL_IMPL, Case, KernelSpec, Tolerance
from tests.planted_kernels import square_diff

TOL = Tolerance(1e-5, 1e-5)
SIZES = (256, 1024, 4096)


def _accuracy_cases() -> list[Case]:
    count = int(os.environ.get("TIMED_CASES", "6"))
    return [Case.make("timed", "v1", "fp32", TOL, trials=1, shape=(256,), index=i) for i in range(count)]


def _perf_cases() -> list[Case]:
    return [Case.make("timed", v, "fp32", TOL, trials=1, shape=(n,)) for v in ("v1", "v2") for n in SIZES]


def _inputs(case: Case, device: torch.device, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    n = case.p["shape"][0]
    return {"x": torch.randn(n, generator=gen).to(device), "y": torch.randn(n, generator=gen).to(device)}


def _run(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    slow_from = int(os.environ.get("TIMED_SLOW_FROM", "-1"))
    time.sleep(3600 if 0 <= slow_from <= case.p.get("index", -1) else float(os.environ.get("TIMED_SLEEP_S", "0")))
    x, y = inputs["x"], inputs["y"]
    return (square_diff(x, y, stop=x.numel()),)


def _reference(case: Case, inputs: dict) -> tuple[torch.Tensor, ...]:
    return ((inputs["x"].double() - inputs["y"].double()) ** 2,)


def _impls(case: Case, inputs: dict) -> dict:
    x, y = inputs["x"], inputs["y"]
    logged = []

    def eager() -> torch.Tensor:
        log = os.environ.get("TIMED_LOG")
        if log and not logged:
            logged.append(True)
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {SPEC.baseline_key(case)}\n")
        return (x - y) ** 2

    return {KERNEL_IMPL: lambda: square_diff(x, y, stop=x.numel()), EAGER_IMPL: eager}


SPEC = KernelSpec(
    name="timed",
    accuracy_cases=_accuracy_cases,
    perf_cases=_perf_cases,
    make_inputs=_inputs,
    run=_run,
    reference=_reference,
    implementations=_impls,
    bytes_moved=lambda c: 12 * c.p["shape"][0],
)
