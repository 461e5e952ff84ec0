"""The process a profiler watches: every listed perf case of one kernel, each warmed up and then run once.

    python -m kernelwatch.collect.profile_target KERNEL DEVICE CASES_FILE [--module M ...] [--npu-out FILE]

``CASES_FILE`` holds a JSON list of case keys, profiled in that order. On CUDA the process runs under
``ncu`` (:mod:`kernelwatch.collect.profile_phase`): case ``i``'s one profiled call is inside the NVTX ranges
``kernelwatch_profile`` / ``kw-case-<i>``, the only launches ``ncu`` collects, and the inner range's name
says which case a profiled kernel belongs to. On Ascend there is no outside profiler: the process runs the
``torch_npu`` profiler passes over each case itself and appends one JSON line per case to ``--npu-out``.
On the CPU nothing profiles: each case runs once, a dry run of the phase (its tests).

On stderr it says where it is, one line per event, each starting with :data:`MARK`:
``pid N`` first, then ``start I`` and ``done I`` around each case, so the parent can show progress, knows
which case was running if the process dies, and can stop this process (not the profiler) when a case hangs.
A case whose inputs or kernel raise is reported as ``failed I MESSAGE`` and the next case goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

import torch

from kernelwatch.collect.profiling import CASE_RANGE, NVTX_RANGE
from kernelwatch.kernels import discover
from kernelwatch.kernels.spec import KERNEL_IMPL, Case, KernelSpec

WARMUP_CALLS = 3
MARK = "kernelwatch-profile:"


def runner(spec: KernelSpec, case: Case, device: torch.device) -> Callable[[], object]:
    inputs = spec.make_inputs(case, device, seed=0)
    return spec.implementations(case, inputs)[KERNEL_IMPL]


def say(*words: object) -> None:
    print(MARK, *words, file=sys.stderr, flush=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":
        torch.npu.synchronize(device)


def profile_cuda_case(fn: Callable[[], object], index: int, device: torch.device) -> None:
    for _ in range(WARMUP_CALLS):
        fn()
    _sync(device)
    torch.cuda.nvtx.range_push(NVTX_RANGE)
    torch.cuda.nvtx.range_push(CASE_RANGE.format(index=index))
    fn()
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_pop()
    _sync(device)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m kernelwatch.collect.profile_target")
    parser.add_argument("kernel")
    parser.add_argument("device")
    parser.add_argument("cases_file")
    parser.add_argument("--module", action="append", default=[])
    parser.add_argument("--npu-out", default=None)
    args = parser.parse_args(argv)
    say("pid", os.getpid())
    with open(args.cases_file, encoding="utf-8") as f:
        keys = json.load(f)
    if args.device.startswith("npu"):
        import torch_npu  # noqa: F401 - registers the npu device with torch

    spec = discover(tuple(args.module))[args.kernel]
    by_key = {c.key: c for c in spec.perf_cases()}
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    for index, key in enumerate(keys):
        say("start", index)
        begun = time.perf_counter()
        try:
            case = by_key[key]
            fn = runner(spec, case, device)
            if device.type == "npu":
                from kernelwatch.collect.profiling import profile_npu

                rows = profile_npu(fn, spec.profile_kernel(case), spec.bound, spec.profiler_ideals)
                with open(args.npu_out, "a", encoding="utf-8") as out:
                    out.write(json.dumps({"index": index, "rows": rows}) + "\n")
            elif device.type == "cuda":
                profile_cuda_case(fn, index, device)
            else:  # no profiler on the CPU: a dry run of the profiling phase, as its tests use it
                fn()
            del fn
        except Exception as exc:
            text = str(exc).strip().splitlines()
            say("failed", index, f"{type(exc).__name__}: {text[0] if text else ''}"[:300])
            continue
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
        say("done", index, f"{time.perf_counter() - begun:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
