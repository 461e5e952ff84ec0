"""Where a cold run's "perf: device timing" goes: compilations during timing, per implementation.

    python benchmarks/cold_timing.py [--cases N]    # on a GPU, in a fresh cache folder (made here)

A full collect on a fresh H200 spent 104.1 s in device timing with cold compiler caches and 42.3 s warm
(``benchmarks/results/2026-12-02-h200-full-cold-warm``): timing runs no compiler on purpose, so something
compiles there. For the first ``--cases`` perf cases of each kernel, every implementation is taken through
the collector's phases (``perf.time_implementation``'s order: a warm-up call, ``device_samples``,
``call_samples``) with Triton compilations (any module's: the kernels', the peers', TorchInductor's) and
TorchDynamo frame compilations counted per phase. Printed: one row per implementation that compiled or took
over a second in timing.
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile
import time

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--cases", type=int, default=3)
args = ap.parse_args()
os.environ["KERNELWATCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="kw-cold-")

import torch  # noqa: E402
from triton import knobs  # noqa: E402

from kernelwatch.collect.backends import Backend  # noqa: E402
from kernelwatch.collect.inputs import drawn_on  # noqa: E402
from kernelwatch.collect.precompile import use_cache_dirs  # noqa: E402
from kernelwatch.kernels import discover  # noqa: E402

use_cache_dirs()
compiles: collections.Counter = collections.Counter()


def listen(*, src, cache_hit: bool, **_) -> None:
    if not cache_hit:
        fn = getattr(getattr(src, "fn", None), "fn", None)
        compiles[getattr(fn, "__module__", "?") or "?"] += 1


knobs.compilation.listener = listen


def frames() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["frames"].values()) if "frames" in counters else 0


backend = Backend(torch.device("cuda"))
backend.activate()
print("| case | implementation | phase | s | Triton compiles (module: n) | dynamo frames |")
print("| --- | --- | --- | ---: | --- | ---: |")
for spec in discover().values():
    for case in spec.perf_cases()[: args.cases]:
        with drawn_on(backend.device):
            inputs = spec.make_inputs(case, backend.device, 7)
        torch._dynamo.reset()
        for impl, fn in spec.implementations(case, inputs).items():
            for phase, step in (
                ("warm-up", lambda: (fn(), backend.synchronize())),
                ("timing", lambda: backend.device_samples(fn)),
                ("call", lambda: backend.call_samples(fn)),
            ):
                compiles.clear()
                f0, t0 = frames(), time.perf_counter()
                try:
                    step()
                except Exception as exc:
                    print(f"| {case.key} | {impl} | {phase} | error {type(exc).__name__} | | |")
                    break
                dt, df = time.perf_counter() - t0, frames() - f0
                if compiles or df or (phase != "warm-up" and dt > 1.0):
                    mods = ", ".join(f"{m}: {n}" for m, n in compiles.most_common(3))
                    print(f"| {case.key} | {impl} | {phase} | {dt:.2f} | {mods} | {df} |", flush=True)
