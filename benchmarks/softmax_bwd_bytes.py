"""What each implementation of a softmax perf case moves through DRAM, and how long it takes (like for like?).

    python benchmarks/softmax_bwd_bytes.py                 # time every implementation of the cases below
    ncu --clock-control none --profile-from-start off \\
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \\
        --csv python benchmarks/softmax_bwd_bytes.py --profile   # one profiled call of each, L2 flushed before

The implementations are the collector's own (``SPEC.implementations`` of the case, inputs from
``SPEC.make_inputs`` with the case's seed), so what is counted is what the perf suite times. Timing is the
collector's too (``Backend.device_samples``: L2 flushed, graph replay where capture works). Prints one table:
median µs, and the spec's floor bytes over the time (GB/s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from kernelwatch.collect.backends import Backend
from kernelwatch.kernels.scaled_masked_softmax.spec import SPEC

WANTED = (  # (variant, dtype, direction, shape)
    ("masked", "fp16", "bwd", (32, 16, 1024, 1024)),
    ("masked", "bf16", "bwd", (8, 16, 4096, 4096)),
    ("masked", "fp16", "fwd", (32, 16, 1024, 1024)),
    ("causal", "bf16", "fwd", (512, 512, 512)),
    ("causal", "bf16", "bwd", (512, 512, 512)),
)


def cases() -> list:
    return [
        case
        for case in SPEC.perf_cases()
        if (case.variant, case.dtype, case.p["direction"], tuple(case.p["shape"])) in WANTED
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", action="store_true", help="one call of each inside cudaProfilerStart/Stop")
    args = ap.parse_args()
    backend = Backend(torch.device("cuda"))
    backend.activate()
    flush = backend.flush_buffer()
    rows = []
    for case in cases():
        inputs = SPEC.make_inputs(case, backend.device, 1234)
        impls = SPEC.implementations(case, inputs)
        for name, fn in impls.items():
            for _ in range(3):  # compile and warm up outside the profiled range
                fn()
            torch.cuda.synchronize()
            if args.profile:
                backend.flush(flush)
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_push(f"{case.key}|{name}")
                torch.cuda.cudart().cudaProfilerStart()
                fn()
                torch.cuda.synchronize()
                torch.cuda.cudart().cudaProfilerStop()
                torch.cuda.nvtx.range_pop()
                print(f"profiled {case.key} {name}", file=sys.stderr, flush=True)
                continue
            samples, timing = backend.device_samples(fn)
            med = statistics.median(samples)
            rows.append((case.key, name, timing, med * 1e3, SPEC.bytes_moved(case) / (med * 1e-3) / 1e9))
        del inputs, impls
        torch.cuda.empty_cache()
    if rows:
        print(f"{'case':62} {'impl':16} {'timing':7} {'median us':>10} {'floor GB/s':>11}")
        for key, name, timing, us, gbps in rows:
            print(f"{key[:62]:62} {name:16} {timing:7} {us:10.1f} {gbps:11.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
