"""Why does a paired confirm round of identical code spread on the power-capped GEMMs?

One process, the collector's ``Backend``, the perf cases given (all set up first, as a confirm worker does),
two independent copies of each case's inputs (A and B: the same values from the case's seed, distinct
tensors, as two commits' workers would hold). For every case, ``--rounds`` rounds of three measurements:

* ``blocks``: ``Backend.device_samples`` of A, then of B (order alternating per round), ``--block-ms`` each,
  the way ``kernelwatch confirm`` measures one side after the other;
* ``calls``: A and B interleaved call by call (A B B A ...), each call preceded by the same L2 flush and
  timed by its own pair of events; the round's ratio is median(B) / median(A);
* per round, the NVML SM clock (MHz) and board power (W) before each block, the timing method each block
  used, and how many times W diag(gamma) was folded inside each block (the fused RMSNorm+MatMul's
  ``fold_gamma``, the LayerNorm+MatMul's prepared weight).

The cases are measured round-major (round r of every case, then round r+1), as ``run_rounds`` does, so a
case's blocks are separated by the other cases' work.

    python benchmarks/judge_probe.py --rounds 16 --json OUT.json [--case KEY ...]

Prints one row per case and method: the sd of the log ratio (identical code: the noise a judge must see
through), its range, the clocks and power seen, the timing methods used and the folds inside measurements.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_CASES = [
    "fused_rmsnorm_matmul/fold_gamma/fp16/bias=False,direction=fwd,layout=contiguous,n=4096,shape=1024x8192",
    "fused_rmsnorm_matmul/fold_gamma/bf16/bias=False,direction=fwd,layout=contiguous,n=4096,shape=1024x8192",
    "fused_rmsnorm_matmul/fold_gamma/fp16/bias=False,direction=fwd,layout=contiguous,n=14336,shape=8192x4096",
    "fused_rmsnorm_matmul/fold_gamma/bf16/bias=False,direction=fwd,layout=contiguous,n=14336,shape=8192x4096",
    "fused_rmsnorm_matmul/rstd_prepass/fp16/bias=False,direction=fwd,layout=contiguous,n=4096,shape=1024x8192",
    "fused_layernorm_matmul/fold_gamma/fp16/bias=False,direction=fwd,layout=contiguous,n=4096,shape=1024x8192,shift=0.0",
    "fused_rmsnorm_matmul/fold_gamma/fp16/bias=False,direction=fwd,layout=contiguous,n=4096,shape=4096x4096",
    "mse_loss/persistent/fp32/direction=fwd,reduction=mean,shape=33554432",
    "mse_loss/atomic/fp32/direction=fwd,reduction=mean,shape=4096",
]


class Nvml:
    """SM clock and power of device 0, or None where NVML is absent."""

    def __init__(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            self.h = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:
            self.nv = None

    def read(self) -> tuple[int | None, float | None]:
        if self.nv is None:
            return None, None
        clock = self.nv.nvmlDeviceGetClockInfo(self.h, self.nv.NVML_CLOCK_SM)
        power = self.nv.nvmlDeviceGetPowerUsage(self.h) / 1000.0
        return clock, power


def fold_counter():
    """Count W diag(gamma) folds: every loaded kernel module that imported ``fold_gamma`` by name."""
    count = {"n": 0, "modules": []}
    for mod in list(sys.modules.values()):
        original = getattr(mod, "fold_gamma", None)
        if original is None or not callable(original) or getattr(mod, "__name__", "").endswith("norm_gemm"):
            continue

        def counted(*a, _orig=original, **k):
            count["n"] += 1
            return _orig(*a, **k)

        mod.fold_gamma = counted
        count["modules"].append(mod.__name__)
    return count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", help="perf case key (repeatable); default: the GEMM probe set")
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--block-ms", type=float, default=100.0)
    ap.add_argument("--calls", type=int, default=24, help="calls per side per round in the interleaved method")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import torch

    from kernelwatch import kernels
    from kernelwatch.collect.accuracy import case_seed
    from kernelwatch.collect.backends import Backend
    from kernelwatch.kernels.spec import KERNEL_IMPL

    backend = Backend(torch.device(args.device), time_on_cpu=args.device.startswith("cpu"))
    backend.activate()
    nvml = Nvml()
    specs = kernels.discover(())
    by_key = {c.key: (spec, c) for spec in specs.values() for c in spec.perf_cases()}
    wanted = args.case or DEFAULT_CASES
    cases = {}
    for key in wanted:
        if key not in by_key:
            print(f"no perf case {key}", file=sys.stderr)
            return 2
        spec, case = by_key[key]

        class _K:
            pass

        k = _K()
        k.key = key
        seed = case_seed(k)
        sides = {}
        for side in ("A", "B"):
            inputs = spec.make_inputs(case, backend.device, seed)
            fn = spec.implementations(case, inputs)[KERNEL_IMPL]
            fn()
            sides[side] = fn
        cases[key] = sides
    backend.synchronize()
    folds = fold_counter()
    print(f"fold_gamma wrapped in {folds['modules']}", flush=True)
    flush = torch.empty(512 * 1024 * 1024 // 4, dtype=torch.float32, device=args.device)
    rows = {key: [] for key in cases}
    t0 = time.perf_counter()
    for r in range(args.rounds):
        for key, sides in cases.items():
            order = ("A", "B") if r % 2 == 0 else ("B", "A")
            rec = {"round": r}
            for side in order:
                clock, power = nvml.read()
                before = folds["n"]
                samples, timing = backend.device_samples(
                    sides[side], warmup_ms=args.block_ms / 4, rep_ms=args.block_ms, min_reps=5
                )
                rec[f"block_{side}_ms"] = statistics.median(samples)
                rec[f"block_{side}_timing"] = timing
                rec[f"block_{side}_folds"] = folds["n"] - before
                rec[f"block_{side}_clock"] = clock
                rec[f"block_{side}_power"] = power
            per = {"A": [], "B": []}
            before = folds["n"]
            pattern = ("A", "B", "B", "A")
            for i in range(2 * args.calls):
                side = pattern[i % 4]
                flush.zero_()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                sides[side]()
                end.record()
                per[side].append((start, end))
            torch.cuda.synchronize()
            ms = {s: [a.elapsed_time(b) for a, b in v] for s, v in per.items()}
            rec["calls_A_ms"] = statistics.median(ms["A"])
            rec["calls_B_ms"] = statistics.median(ms["B"])
            rec["calls_folds"] = folds["n"] - before
            rec["clock_after"], rec["power_after"] = nvml.read()
            rows[key].append(rec)
        print(f"round {r + 1}/{args.rounds} at {time.perf_counter() - t0:.0f} s", flush=True)

    def sd_range(ratios: list[float]) -> tuple[float, float, float]:
        logs = [math.log(x) for x in ratios]
        return statistics.stdev(logs), min(ratios), max(ratios)

    out = []
    print(f"\n{'case':<78} {'method':<6} {'sd log':>7} {'min':>6} {'max':>6} {'med ms':>8} timing / folds / MHz / W")
    for key, recs in rows.items():
        b = [x["block_B_ms"] / x["block_A_ms"] for x in recs]
        c = [x["calls_B_ms"] / x["calls_A_ms"] for x in recs]
        timings = sorted({x["block_A_timing"] for x in recs} | {x["block_B_timing"] for x in recs})
        fold_blocks = sum(x["block_A_folds"] + x["block_B_folds"] for x in recs)
        fold_calls = sum(x["calls_folds"] for x in recs)
        clocks = [x[f"block_{s}_clock"] for x in recs for s in "AB" if x[f"block_{s}_clock"] is not None]
        powers = [x[f"block_{s}_power"] for x in recs for s in "AB" if x[f"block_{s}_power"] is not None]
        clk = f"{min(clocks)}-{max(clocks)}" if clocks else "-"
        pw = f"{min(powers):.0f}-{max(powers):.0f}" if powers else "-"
        short = key.replace("bias=False,direction=fwd,layout=contiguous,", "")
        for method, ratios, med, fo in (
            ("blocks", b, statistics.median(x["block_A_ms"] for x in recs), fold_blocks),
            ("calls", c, statistics.median(x["calls_A_ms"] for x in recs), fold_calls),
        ):
            sd, lo, hi = sd_range(ratios)
            tail = f"{','.join(timings)} / {fo} / {clk} / {pw}"
            print(f"{short:<78} {method:<6} {sd:7.4f} {lo:6.3f} {hi:6.3f} {med:8.4f} {tail}")
            out.append({"case": key, "method": method, "sd_log": sd, "min": lo, "max": hi, "median_ms": med})
    if args.json:
        args.json.write_text(json.dumps({"summary": out, "rounds": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
