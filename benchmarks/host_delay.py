"""A planted host-side delay must not move the GPU time (docs/design.md): the proof of ``Backend.device_samples``.

    python benchmarks/host_delay.py                 # on the H200: under a minute; the table is printed last
    python benchmarks/host_delay.py --device cpu    # a dry run of the script (host clock; numbers mean nothing)

The planted call is one memory-bound kernel of about 55 us on an H200 (``torch.add(x, 1, out=y)`` on 2^25
fp32: 268 MB moved at ~4.8 TB/s) whose host side first spins for a random 0-300 us (seeded; uniform), the
way a launch path with heavy argument handling would (the issue's decode case: 117-201 us of host time
per call). It is timed three ways:

* ``graph``: what the collector now does (``device_samples(method="graph")``: capture once, replay);
* ``events``: the collector's fallback (``method="events"``: events around the direct call, behind a hold
  that is checked and retaken when it ran out);
* ``old``: the method before graph replay (events behind a spin hold sized from five bare calls, unchecked),
  reproduced below as it was, so its failure is shown beside the fix;

each under five conditions: no sleep; sleep; sleep with the host busy (one CPU-burning process per core,
started here and stopped at the end); sleep with stalls in the call (a call in 1/:data:`STALL_P` also
sleeps 2-20 ms, like a GC pause or a descheduled thread inside the host side: longer than any hold sized
from earlier calls); and sleep with the same stalls *outside* the call, between samples (before the flush
that precedes each start event: no method's timed region holds the stall itself, but the device can run
dry during it, which only the hold check sees). Each cell pools :data:`ROUNDS` calls of the method (the L2
flushed before every sample) and reports median, p20 and p80 in microseconds, and the median's ratio to
the same method's no-sleep median. Target: every ratio of ``graph`` and ``events`` within 1 +- 0.02
(``ok``); ``old`` is expected to miss it under stalls. On the H200 (2026-12-01, 16 cores) the first three
conditions alone took 12 s and ``old`` held there too: a 0-300 us delay stays inside its hold.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROUNDS = 5
MAX_SLEEP_US = 300.0
TOLERANCE = 0.02
METHODS = ("graph", "events", "old")
STALL_P, STALL_MS = 0.08, (2.0, 20.0)  # about two host stalls per chunk of 25 samples, each 2-20 ms
CONDITIONS = ("no sleep", "sleep", "sleep+busy host", "sleep+stalls in call", "sleep+stalls outside")


def spin_us(us: float) -> None:
    """Busy-wait ``us`` microseconds (``time.sleep`` cannot wait less than ~60 us on Linux)."""
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def old_time_samples(
    backend,
    fn: Callable[[], object],
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    min_reps: int = 10,
    max_reps: int = 300,
) -> list[float]:
    """``Backend.time_samples`` as it was at d78e329 (events behind a spin hold sized from host time)."""
    from kernelwatch.collect.backends import SAMPLE_CHUNK

    flush = backend.flush_buffer()
    fn()
    backend.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        fn()
    host_ms = (time.perf_counter() - t0) / 5 * 1e3
    backend.synchronize()
    start, end = backend.event(), backend.event()
    start.record()
    for _ in range(5):
        backend.flush(flush)
        fn()
    end.record()
    backend.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(warmup_ms / estimate))):
        fn()
    reps = int(min(max(rep_ms / estimate, min_reps), max_reps))
    starts = [backend.event() for _ in range(reps)]
    ends = [backend.event() for _ in range(reps)]
    for first in range(0, reps, SAMPLE_CHUNK):
        chunk = range(first, min(first + SAMPLE_CHUNK, reps))
        backend.hold(2.0 * len(chunk) * (host_ms + 0.02))
        for i in chunk:
            backend.flush(flush)
            starts[i].record()
            fn()
            ends[i].record()
    backend.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def stall(rng: random.Random) -> None:
    if rng.random() < STALL_P:
        time.sleep(rng.uniform(*STALL_MS) * 1e-3)


def quantile(sorted_samples: list[float], q: float) -> float:
    from kernelwatch.collect.perf import _quantile

    return _quantile(sorted_samples, q)


def burners(count: int) -> list[subprocess.Popen]:
    """``count`` processes that each burn one core until killed."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument(
        "--burners",
        type=int,
        default=os.cpu_count() or 1,
        help="CPU-burning processes for the busy-host condition (default: one per core)",
    )
    args = ap.parse_args()
    import torch

    from kernelwatch.collect.backends import Backend

    class Stalling(Backend):
        """Host stalls between samples: ``flush`` runs before every sample's start event in every method."""

        stalls: random.Random | None = None

        def flush(self, buffer: torch.Tensor) -> None:  # type: ignore[override]
            if self.stalls is not None:
                stall(self.stalls)
            Backend.flush(buffer)

    if args.device == "cuda" and not torch.cuda.is_available():
        print("host_delay: no CUDA GPU is visible (use --device cpu for a dry run)", file=sys.stderr)
        return 2
    began = time.perf_counter()
    cpu = args.device == "cpu"
    backend = Stalling(torch.device(args.device), time_on_cpu=cpu)
    backend.activate()
    n = 1 << (16 if cpu else 25)
    x = torch.randn(n, device=backend.device)
    y = torch.empty_like(x)
    rng = random.Random(19)

    def kernel() -> torch.Tensor:
        return torch.add(x, 1.0, out=y)

    def delayed() -> torch.Tensor:
        spin_us(rng.uniform(0.0, MAX_SLEEP_US))
        return torch.add(x, 1.0, out=y)

    def stalled() -> torch.Tensor:
        spin_us(rng.uniform(0.0, MAX_SLEEP_US))
        stall(rng)
        return torch.add(x, 1.0, out=y)

    auto = backend.device_samples(delayed, rep_ms=20)[1]
    calls = {
        "no sleep": kernel,
        "sleep": delayed,
        "sleep+busy host": delayed,
        "sleep+stalls in call": stalled,
        "sleep+stalls outside": delayed,
    }

    def measure(method: str, fn: Callable[[], object]) -> list[float]:
        out: list[float] = []
        for _ in range(ROUNDS):
            if method == "old":
                out += old_time_samples(backend, fn)
            else:
                samples, used = backend.device_samples(fn, method=method)
                assert used == method, (method, used)
                out += samples
        return out

    methods = METHODS[1:] if cpu else METHODS  # no graphs on the CPU
    cells: dict[tuple[str, str], list[float]] = {}
    for condition in CONDITIONS:
        procs = burners(args.burners) if condition == "sleep+busy host" else []
        try:
            if procs:
                time.sleep(0.5)  # let them reach the run queue
            backend.stalls = random.Random(23) if condition == "sleep+stalls outside" else None
            for method in methods:
                cells[method, condition] = measure(method, calls[condition])
        finally:
            backend.stalls = None
            for p in procs:
                p.kill()
            for p in procs:
                p.wait()

    width = "| {:<7} | {:<20} | {:>9} | {:>9} | {:>9} | {:>8} | {:>6} | {:<4} |"
    print(
        f"\nhost_delay: {torch.cuda.get_device_name() if not cpu else 'cpu (dry run: numbers mean nothing)'}, "
        f"kernel torch.add on {n} fp32, host delay uniform 0-{MAX_SLEEP_US:.0f} us, {ROUNDS} rounds per cell, "
        f"{args.burners} burners; the collector's choice for the delayed call: {auto}; "
        f"{time.perf_counter() - began:.0f} s\n"
    )
    print(width.format("method", "condition", "median us", "p20 us", "p80 us", "samples", "ratio", "ok"))
    print(width.format(*["-" * w for w in (7, 20, 9, 9, 9, 8, 6, 4)]))
    failed = False
    for method in methods:
        base = statistics.median(cells[method, "no sleep"])
        for condition in CONDITIONS:
            s = sorted(cells[method, condition])
            med = statistics.median(s)
            ratio = med / base
            ok = abs(ratio - 1.0) <= TOLERANCE
            failed |= not ok and method != "old"
            print(
                width.format(
                    method,
                    condition,
                    f"{med * 1e3:.1f}",
                    f"{quantile(s, 0.2) * 1e3:.1f}",
                    f"{quantile(s, 0.8) * 1e3:.1f}",
                    len(s),
                    f"{ratio:.3f}",
                    "yes" if ok else "NO",
                )
            )
    return 1 if failed and not cpu else 0


if __name__ == "__main__":
    sys.exit(main())
