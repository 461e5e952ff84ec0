"""What the SM clock does to a compute-bound GEMM's time, and what that does to comparisons.

    python benchmarks/gemm_clock.py                # on a GPU with pynvml (nvidia-ml-py): about 5 minutes
    python benchmarks/gemm_clock.py --part tiles --part method   # some parts: order, tiles, confirm, method, launch

An H200 runs a large bf16 GEMM at its power limit, and then its SM clock is whatever the power budget
allows: the time of a 1.4 ms GEMM depends on what ran before it. Two questions follow.

``order``: at the Llama MLP shape (``[8192,4096]->14336``, bf16), every implementation of the
``fused_rmsnorm_matmul`` case measured the collector's way (``Backend.device_samples``: one block of about
100 ms per implementation, one after another), in the suite's order and reversed, then interleaved (rounds of
20 ms per implementation, rotating the order). NVML is polled every 2 ms in a thread: each block's mean SM
clock, power and the throttle reasons seen. If one implementation is faster only in one order, the collector's
peer comparison at this shape is measuring the clock, not the code.

``confirm``: ``kernelwatch confirm``'s decision rule (``confirm.run_rounds``) on paired rounds
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
from kernelwatch.collect.confirm import CaseConfirm, Reading, run_rounds
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
    (128, 128, 64, 4, 8, 8),
    (128, 128, 64, 5, 8, 8),
    (128, 128, 64, 3, 8, 8),
    (128, 128, 64, 4, 4, 8),
)
TILE_CASES = (
    LLAMA,
    LLAMA.replace("/bf16/", "/fp16/"),
    "fused_rmsnorm_matmul/fold_gamma/bf16/bias=False,direction=fwd,layout=contiguous,n=4096,shape=4096x4096",
    "fused_rmsnorm_matmul/fold_gamma/bf16/bias=False,direction=fwd,layout=contiguous,n=4096,shape=1024x8192",
    "fused_rmsnorm_matmul/fold_gamma/bf16/bias=False,direction=fwd,layout=contiguous,n=4096,shape=4x512x4096",
    "fused_layernorm_matmul/fold_gamma/bf16/bias=False,direction=fwd,layout=contiguous,n=4096,shape=4096x4096,shift=0.0",
    "fused_layernorm_matmul/fold_gamma/bf16/bias=False,direction=fwd,layout=contiguous,n=4096,shape=1024x8192,shift=0.0",
)
PEERS = ("cublas_linear", "torch_compile", "liger", "flaggems")


def part_tiles(backend: Backend, clocks: Clocks, cases: tuple[str, ...] = TILE_CASES, rounds_n: int = 6) -> None:
    """Each case's kernel with other Hopper GEMM tiles, interleaved with cuBLAS alone and the unfused peers."""
    from kernelwatch.kernels import norm_gemm
    from kernelwatch.kernels.fused_layernorm_matmul import plans as ln_plans
    from kernelwatch.kernels.fused_rmsnorm_matmul import plans as rms_plans

    shipped = norm_gemm.HOPPER_GEMM
    print(f"\n## tiles: interleaved with the peers, {rounds_n} rounds, median us (x best peer)\n")
    print("| case | " + " | ".join(PEERS) + " | " + " | ".join(str(t) for t in TILES) + " |")
    print("| --- |" + " ---: |" * (len(PEERS) + len(TILES)))
    for key in cases:
        calls = case_calls(key, backend.device)
        runs: dict[str, Callable[[], object]] = {p: calls[p] for p in PEERS if p in calls}
        for tile in TILES:
            norm_gemm.HOPPER_GEMM = tile
            rms_plans.forward_plan.cache_clear()
            ln_plans.forward_plan.cache_clear()
            fresh = case_calls(key, backend.device)[KERNEL_IMPL]
            try:
                fresh()
                backend.synchronize()
            except Exception as exc:
                print(f"{key} tile {tile}: {type(exc).__name__}: {str(exc)[:160]}")
                continue
            runs[str(tile)] = fresh
        norm_gemm.HOPPER_GEMM = shipped
        rms_plans.forward_plan.cache_clear()
        ln_plans.forward_plan.cache_clear()
        for fn in runs.values():
            fn()
        rounds: dict[str, list[float]] = {n: [] for n in runs}
        names = list(runs)
        for r in range(rounds_n):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                rounds[name].append(timed(backend, clocks, runs[name], 20.0)[0])
        med = {n: statistics.median(v) for n, v in rounds.items()}
        best = min(med[p] for p in PEERS[1:] if p in med)
        cells = [f"{med[p]:.1f}" if p in med else "-" for p in PEERS]
        cells += [f"{med[str(t)]:.1f} ({best / med[str(t)]:.3f})" if str(t) in med else "-" for t in TILES]
        print(f"| {key.split('/')[0]} {key.split('/')[2]} {key.split('shape=')[1]} | " + " | ".join(cells) + " |")
    del calls, runs


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
                res = run_rounds(["c"], _replay(queues), max_rounds=ROUNDS)["c"]
                sd = statistics.stdev(math.log(c[idx] / b[idx]) for b, c in zip(got["baseline"], got["candidate"]))
                print(
                    f"| {label} | {plant:+.0%} | {measure} | {res.verdict} | {res.rounds} | {_ratio(res)} | {sd:.4f} "
                    f"| {res.rounds * per_round:.1f} |"
                )


def _replay(queues: dict[str, list[float]]):
    """``run_rounds``' measure over rounds taken already: round r's two medians."""
    return lambda _case, r: Reading(queues["baseline"][r], queues["candidate"][r])


METHODS = (  # (name, rep_ms, warmup_ms) of one confirm measurement of the GEMM; the first is confirm's today
    ("20 ms", 20.0, 25.0),
    ("100 ms", 100.0, 25.0),
    ("250 ms", 250.0, 25.0),
    ("150 ms warm-up + 20 ms", 20.0, 150.0),
    ("150 ms warm-up + 100 ms", 100.0, 150.0),
)


def part_method(backend: Backend, clocks: Clocks) -> None:
    """Confirm's rule on the GEMM with longer measurements or a longer warm-up (the power state settled first):
    A/A and planted +5 / +10%, 24 paired rounds each."""
    gemm = case_calls(LLAMA, backend.device)["cublas_linear"]
    gemm()
    base_us = timed(backend, clocks, gemm, 50.0)[0]
    print("\n## method: confirm's rule on the GEMM (cuBLAS 8192x4096->14336 bf16), 24 paired rounds\n")
    print("| measurement | planted | verdict | rounds | ratio [interval] | sd of log ratio | s to verdict |")
    print("| --- | ---: | --- | ---: | --- | ---: | ---: |")
    for label, rep_ms, warm_ms in METHODS:
        for plant in PLANTS[:3]:
            delay = spin(backend, plant * base_us) if plant else None

            def candidate(delay=delay) -> None:
                gemm()
                if delay is not None:
                    delay()

            sides = {"baseline": gemm, "candidate": candidate}
            got: dict[str, list[float]] = {"baseline": [], "candidate": []}
            t0 = time.perf_counter()
            for r in range(ROUNDS):
                for side in ("baseline", "candidate") if r % 2 == 0 else ("candidate", "baseline"):
                    samples, _ = backend.device_samples(sides[side], warmup_ms=warm_ms, rep_ms=rep_ms)
                    got[side].append(statistics.median(samples))
            per_round = (time.perf_counter() - t0) / ROUNDS
            res = run_rounds(["c"], _replay(got), max_rounds=ROUNDS)["c"]
            d = [math.log(c / b) for b, c in zip(res.baseline_ms, res.candidate_ms)]
            print(
                f"| {label} | {plant:+.0%} | {res.verdict} | {res.rounds} | {_ratio(res)} | "
                f"{statistics.stdev(d) if len(d) > 1 else 0:.4f} | {res.rounds * per_round:.1f} |"
            )


MANY = 100  # calls per graph of the launch-bound method


def part_launch(backend: Backend, clocks: Clocks) -> None:
    """Launch-bound MSELoss cases timed one call per sample (the collector today) and as a graph of ``MANY``
    back-to-back calls per sample, divided: median us, paired A/A spread over 16 rounds, and the clock."""
    keys = [
        c.key
        for c in discover()["mse_loss"].perf_cases()
        if c.key.endswith(("shape=4096", "shape=1048576")) and "reduction=mean" in c.key
    ]
    print(f"\n## launch: one call per sample against a graph of {MANY} calls per sample (divided)\n")
    print("| case | one call us | sd A/A | MHz | many calls us | sd A/A | MHz |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key in keys:
        fn = case_calls(key, backend.device)[KERNEL_IMPL]

        def many(fn=fn) -> None:
            for _ in range(MANY):
                fn()

        cells = []
        for call, per in ((fn, 1), (many, MANY)):
            call()
            vals, mhz = [], []
            for _ in range(32):
                us, m, _, _ = timed(backend, clocks, call, 20.0)
                vals.append(us / per)
                mhz.append(m)
            d = [math.log(b / a) for a, b in zip(vals[::2], vals[1::2])]
            cells += [f"{statistics.median(vals):.2f}", f"{statistics.stdev(d):.4f}", f"{statistics.median(mhz):.0f}"]
        print(f"| {key.split('/', 1)[1]} | " + " | ".join(cells) + " |")


def _ratio(res: CaseConfirm) -> str:
    if res.ratio is None:
        return "-"
    return f"{res.ratio:.3f} [{res.low:.3f}, {res.high:.3f}]" if res.low is not None else f"{res.ratio:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--part", action="append", choices=("order", "tiles", "confirm", "method", "launch", "all"), default=None
    )
    args = parser.parse_args()
    args.part = args.part or ["all"]
    backend = Backend(torch.device("cuda"))
    backend.activate()
    clocks = Clocks()
    clocks.start()
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, uuid {getattr(props, 'uuid', '?')}; torch {torch.__version__}")
    if {"order", "all"} & set(args.part):
        part_order(backend, clocks)
    if {"tiles", "all"} & set(args.part):
        part_tiles(backend, clocks)
    if {"confirm", "all"} & set(args.part):
        part_confirm(backend, clocks)
    if {"method", "all"} & set(args.part):
        part_method(backend, clocks)
    if {"launch", "all"} & set(args.part):
        part_launch(backend, clocks)
    clocks.stop.set()


if __name__ == "__main__":
    main()
