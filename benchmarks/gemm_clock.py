"""What the SM clock does to a compute-bound GEMM's time, and what that does to comparisons (issues 27, 28).

    python benchmarks/gemm_clock.py                # on a GPU with pynvml (nvidia-ml-py): about 5 minutes
    python benchmarks/gemm_clock.py --part order   # one part: order, tiles, confirm

An H200 runs a large bf16 GEMM at its power limit, and then its SM clock is whatever the power budget
allows: the time of a 1.4 ms GEMM depends on what ran before it. Two questions follow.

``order`` (issue 28): at the Llama MLP shape (``[8192,4096]->14336``, bf16), every implementation of the
``fused_rmsnorm_matmul`` case measured the collector's way (``Backend.device_samples``: one block of about
100 ms per implementation, one after another), in the suite's order and reversed, then interleaved (rounds of
20 ms per implementation, rotating the order). NVML is polled every 2 ms in a thread: each block's mean SM
clock, power and the throttle reasons seen. If one implementation is faster only in one order, the collector's
peer comparison at this shape is measuring the clock, not the code.

``confirm`` (issue 27, item 4): ``kernelwatch confirm``'s decision rule (``confirm.run_rounds``) on paired rounds
of three case classes: the GEMM (cuBLAS at the Llama shape), a memory-bound op (``torch.add`` on 2^25 fp32,
about 55 us) and a launch-bound one (MSELoss at 4,096 elements through the kernel). The candidate is the
baseline itself (A/A) or the baseline followed by a spin kernel of 5, 10 or 20% of its median (a planted
change of known size). Each configuration runs 24 paired rounds, order alternating, and the rule is applied
to two measures of the same rounds: the median time (what confirm uses) and the median time times the mean
SM clock over the measurement (cycles: what a compute-bound kernel's time is once the clock is taken out).
Printed: verdict, rounds to the verdict, ratio and its interval, and the spread (sd of the paired log ratio).
"""

from __future__ import annotations

import argparse
import math
import statistics
import threading
import time
from collections.abc import Callable

import torch

from kernelwatch.collect.backends import Backend
from kernelwatch.collect.confirm import CaseConfirm, run_rounds
from kernelwatch.collect.inputs import drawn_on
from kernelwatch.kernels import discover
from kernelwatch.kernels.names import KERNEL_IMPL

LLAMA = "fused_rmsnorm_matmul/fold_gamma/bf16/bias=False,direction=fwd,layout=contiguous,n=14336,shape=8192x4096"
MSE_SMALL = "shape=4096"
POLL_S = 0.002
PLANTS = (0.0, 0.05, 0.10, 0.20)
ROUNDS = 24


class Clocks(threading.Thread):
    """NVML's SM clock (MHz), power (W) and clock-event reasons, polled every ``POLL_S`` seconds."""

    def __init__(self, index: int = 0) -> None:
        super().__init__(daemon=True)
        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.rows: list[tuple[float, int, float, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        n, h = self.nvml, self.handle
        reasons = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
        reasons = reasons or n.nvmlDeviceGetCurrentClocksThrottleReasons
        while not self.stop.is_set():
            self.rows.append(
                (
                    time.perf_counter(),
                    n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
                    n.nvmlDeviceGetPowerUsage(h) / 1e3,
                    reasons(h),
                )
            )
            time.sleep(POLL_S)

    def window(self, t0: float, t1: float) -> tuple[float, float, int]:
        """(mean SM MHz, mean W, OR of the reasons) of the polls between t0 and t1."""
        rows = [r for r in self.rows if t0 <= r[0] <= t1] or [min(self.rows, key=lambda r: abs(r[0] - t1))]
        reasons = 0
        for r in rows:
            reasons |= r[3]
        return statistics.fmean(r[1] for r in rows), statistics.fmean(r[2] for r in rows), reasons


def reason_words(bits: int) -> str:
    names = {0x1: "idle", 0x4: "sw-power", 0x8: "hw-slow", 0x20: "sw-thermal", 0x40: "hw-thermal", 0x80: "hw-power"}
    return ",".join(v for k, v in names.items() if bits & k) or "-"


def case_calls(key: str, device: torch.device) -> dict[str, Callable[[], object]]:
    spec = discover()[key.split("/")[0]]
    case = next(c for c in spec.perf_cases() if c.key == key)
    with drawn_on(device):
        inputs = spec.make_inputs(case, device, 1234)
    return spec.implementations(case, inputs)


def timed(backend: Backend, clocks: Clocks, fn: Callable[[], object], rep_ms: float) -> tuple[float, float, float, int]:
    """(median us, mean MHz, mean W, reasons) of one ``device_samples`` measurement."""
    t0 = time.perf_counter()
    samples, _ = backend.device_samples(fn, rep_ms=rep_ms)
    t1 = time.perf_counter()
    mhz, watts, reasons = clocks.window(t0, t1)
    return statistics.median(samples) * 1e3, mhz, watts, reasons


def part_order(backend: Backend, clocks: Clocks) -> None:
    calls = case_calls(LLAMA, backend.device)
    for fn in calls.values():
        fn()
    backend.synchronize()
    names = list(calls)
    blocks: dict[str, list[tuple[float, float, float, int]]] = {n: [] for n in names}
    for order in (names, names[::-1]):
        for name in order:
            blocks[name].append(timed(backend, clocks, calls[name], 100.0))
    rounds: dict[str, list[tuple[float, float, float, int]]] = {n: [] for n in names}
    for r in range(10):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            rounds[name].append(timed(backend, clocks, calls[name], 20.0))
    print(f"\n## order: {LLAMA}\n")
    print(
        "| implementation | suite order us (MHz, W) | reversed us (MHz, W) | interleaved us | MHz | cycles (M) "
        "| reasons |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for name in names:
        (a, am, aw, ar), (b, bm, bw, br) = blocks[name]
        us = statistics.median(x[0] for x in rounds[name])
        mhz = statistics.median(x[1] for x in rounds[name])
        cyc = statistics.median(x[0] * x[1] for x in rounds[name]) / 1e3
        bits = ar | br
        for x in rounds[name]:
            bits |= x[3]
        print(
            f"| {name} | {a:.1f} ({am:.0f}, {aw:.0f}) | {b:.1f} ({bm:.0f}, {bw:.0f}) | {us:.1f} | {mhz:.0f} "
            f"| {cyc:.2f} | {reason_words(bits)} |"
        )


TILES = (  # (BM, BN, BK, stages, warps, GROUP_M) of the Hopper GEMM; the first is the shipped one
    (128, 256, 64, 3, 8, 8),
    (128, 256, 64, 3, 8, 4),
    (256, 128, 64, 3, 8, 8),
    (128, 128, 64, 4, 8, 8),
    (128, 256, 32, 5, 8, 8),
)


def part_tiles(backend: Backend, clocks: Clocks) -> None:
    """The kernel at the Llama MLP shape with other Hopper GEMM tiles, interleaved with cuBLAS alone."""
    from kernelwatch.kernels import norm_gemm
    from kernelwatch.kernels.fused_rmsnorm_matmul import plans

    shipped = norm_gemm.HOPPER_GEMM
    calls = case_calls(LLAMA, backend.device)
    runs: dict[str, Callable[[], object]] = {"cublas_linear": calls["cublas_linear"]}
    for tile in TILES:
        norm_gemm.HOPPER_GEMM = tile
        plans.forward_plan.cache_clear()
        fresh = case_calls(LLAMA, backend.device)[KERNEL_IMPL]
        try:
            fresh()
            backend.synchronize()
        except Exception as exc:
            print(f"tile {tile}: {type(exc).__name__}: {str(exc)[:160]}")
            continue
        runs[str(tile)] = fresh
    norm_gemm.HOPPER_GEMM = shipped
    plans.forward_plan.cache_clear()
    rounds: dict[str, list[tuple[float, float, float, int]]] = {n: [] for n in runs}
    names = list(runs)
    for r in range(8):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            rounds[name].append(timed(backend, clocks, runs[name], 20.0))
    print(f"\n## tiles: {LLAMA}, interleaved, 8 rounds\n")
    print("| launch | us | MHz | cycles (M) | vs cuBLAS (time) | vs cuBLAS (cycles) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    ref = statistics.median(x[0] for x in rounds["cublas_linear"])
    ref_c = statistics.median(x[0] * x[1] for x in rounds["cublas_linear"])
    for name in names:
        us = statistics.median(x[0] for x in rounds[name])
        cyc = statistics.median(x[0] * x[1] for x in rounds[name])
        mhz = statistics.median(x[1] for x in rounds[name])
        print(f"| {name} | {us:.1f} | {mhz:.0f} | {cyc / 1e3:.2f} | {us / ref:.3f} | {cyc / ref_c:.3f} |")


def spin(backend: Backend, us: float) -> Callable[[], None]:
    cycles = int(us / 1e3 * backend._calibrate_hold())
    return lambda: torch.cuda._sleep(cycles)


def part_confirm(backend: Backend, clocks: Clocks) -> None:
    gemm = case_calls(LLAMA, backend.device)["cublas_linear"]
    x = torch.randn(1 << 25, device=backend.device)
    y = torch.empty_like(x)
    mse_key = next(c.key for c in discover()["mse_loss"].perf_cases() if MSE_SMALL in c.key and "fp32" in c.key)
    mse = case_calls(mse_key, backend.device)[KERNEL_IMPL]
    classes = {
        "GEMM (cuBLAS 8192x4096->14336 bf16)": gemm,
        "memory (add, 2^25 fp32)": lambda: torch.add(x, 1, out=y),
        f"launch ({mse_key.split('/', 1)[1]})": mse,
    }
    print("\n## confirm: paired rounds, 24 per configuration, order alternating\n")
    print("| class | planted | measure | verdict | rounds | ratio [interval] | sd of log ratio | s |")
    print("| --- | ---: | --- | --- | ---: | --- | ---: | ---: |")
    for label, fn in classes.items():
        fn()
        backend.synchronize()
        base_us = timed(backend, clocks, fn, 50.0)[0]
        for plant in PLANTS:
            delay = spin(backend, plant * base_us) if plant else None

            def candidate(fn=fn, delay=delay) -> None:
                fn()
                if delay is not None:
                    delay()

            sides = {"baseline": fn, "candidate": candidate}
            got: dict[str, list[tuple[float, float]]] = {"baseline": [], "candidate": []}
            t0 = time.perf_counter()
            for r in range(ROUNDS):
                for side in ("baseline", "candidate") if r % 2 == 0 else ("candidate", "baseline"):
                    us, mhz, _, _ = timed(backend, clocks, sides[side], 20.0)
                    got[side].append((us, us * mhz))
            per_round = (time.perf_counter() - t0) / ROUNDS
            for measure, idx in (("time", 0), ("cycles", 1)):
                queues = {s: [v[idx] for v in got[s]] for s in got}
                res = run_rounds(["c"], lambda side, _c, q=queues: q[side].pop(0), max_rounds=ROUNDS)["c"]
                sd = statistics.stdev(math.log(c[idx] / b[idx]) for b, c in zip(got["baseline"], got["candidate"]))
                print(
                    f"| {label} | {plant:+.0%} | {measure} | {res.verdict} | {res.rounds} | {_ratio(res)} | {sd:.4f} "
                    f"| {res.rounds * per_round:.1f} |"
                )


def _ratio(res: CaseConfirm) -> str:
    if res.ratio is None:
        return "-"
    return f"{res.ratio:.3f} [{res.low:.3f}, {res.high:.3f}]" if res.low is not None else f"{res.ratio:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("order", "tiles", "confirm", "all"), default="all")
    args = parser.parse_args()
    backend = Backend(torch.device("cuda"))
    backend.activate()
    clocks = Clocks()
    clocks.start()
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, uuid {getattr(props, 'uuid', '?')}; torch {torch.__version__}")
    if args.part in ("order", "all"):
        part_order(backend, clocks)
    if args.part in ("tiles", "all"):
        part_tiles(backend, clocks)
    if args.part in ("confirm", "all"):
        part_confirm(backend, clocks)
    clocks.stop.set()


if __name__ == "__main__":
    main()
