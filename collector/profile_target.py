"""The process Nsight Compute profiles: warm one case's kernel up, then run it once in an NVTX range.

    python -m collector.profile_target KERNEL CASE_KEY DEVICE [EXTRA_MODULE...]
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

from kernels import discover
from kernels.spec import KERNEL_IMPL, Case, KernelSpec

WARMUP_CALLS = 3
NVTX_RANGE = "kernelwatch_profile"  # the only range ncu collects (collector.profiling filters on it)


def runner(spec: KernelSpec, case: Case, device: torch.device) -> Callable[[], object]:
    inputs = spec.make_inputs(case, device, seed=0)
    return spec.implementations(case, inputs)[KERNEL_IMPL]


def main(argv: list[str]) -> None:
    kernel, key, device = argv[:3]
    spec = discover(tuple(argv[3:]))[kernel]
    case = next(c for c in spec.perf_cases() if c.key == key)
    dev = torch.device(device)
    torch.cuda.set_device(dev)
    fn = runner(spec, case, dev)
    for _ in range(WARMUP_CALLS):
        fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(NVTX_RANGE)
    fn()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1:])
