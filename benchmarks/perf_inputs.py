"""Where a perf suite's input time goes: bytes each perf case's ``make_inputs`` draws and computes on the host
and copies to the device, as the kernels write it, and with ``kernelwatch.collect.inputs.drawn_on`` (draws on the
device).

    python benchmarks/perf_inputs.py [--device cuda]

Without a GPU (the default ``--device cpu``) the inputs are fake tensors (no memory, no time): the table counts
what the host would draw and write, then times ``torch.randn`` here for scale. With ``--device cuda`` every perf
case's inputs are really built both ways and timed (synchronised), which is the "perf: inputs" phase.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from torch.overrides import TorchFunctionMode

from kernelwatch.collect.inputs import DRAWS, drawn_on
from kernelwatch.kernels import discover


class HostBytes(TorchFunctionMode):
    """Bytes of every tensor made on the host: by a random draw, or by anything else (arithmetic, casts)."""

    def __init__(self) -> None:
        super().__init__()
        self.drawn = self.other = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.device.type == "cpu":
            size = out.numel() * out.element_size()
            if any(func is d for d in DRAWS):
                self.drawn += size
            else:
                self.other += size
        return out


def _tensor_bytes(inputs: dict) -> int:
    return sum(t.numel() * t.element_size() for t in inputs.values() if isinstance(t, torch.Tensor))


def count_on_cpu() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    totals = [0, 0, 0, 0]
    print(f"{'kernel':<24}{'cases':>6}{'drawn GB':>10}{'host ops GB':>12}{'to device GB':>13}")
    for name, spec in discover().items():
        count, copied, cases = HostBytes(), 0, 0
        for case in spec.perf_cases():
            if name == "scaled_masked_softmax" and math.prod(case.p["shape"]) > 1 << 24:
                continue  # already drawn on the device (kernelwatch/kernels/scaled_masked_softmax/spec.py, `big`)
            cases += 1
            with FakeTensorMode(allow_non_fake_inputs=True), count:
                copied += _tensor_bytes(spec.make_inputs(case, torch.device("cpu"), 0))
        print(f"{name:<24}{cases:>6}{count.drawn / 1e9:>10.1f}{count.other / 1e9:>12.1f}{copied / 1e9:>13.1f}")
        for i, v in enumerate((cases, count.drawn, count.other, copied)):
            totals[i] += v
    print(f"{'total':<24}{totals[0]:>6}{totals[1] / 1e9:>10.1f}{totals[2] / 1e9:>12.1f}{totals[3] / 1e9:>13.1f}")
    g = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    torch.randn(1 << 26, generator=g)
    rate = 4 * (1 << 26) / (time.perf_counter() - start) / 1e9
    print(
        f"host randn here: {rate:.2f} GB/s ({torch.get_num_threads()} threads): {totals[1] / 1e9 / rate:.0f} s "
        "for the draws alone"
    )


def time_on_device(device: torch.device) -> None:
    sync = getattr(torch, device.type).synchronize
    print(f"{'kernel':<24}{'cases':>6}{'host-drawn s':>13}{'device-drawn s':>15}")
    totals = [0.0, 0.0]
    for name, spec in discover().items():
        seconds = [0.0, 0.0]
        cases = spec.perf_cases()
        for case in cases:
            for i, on_device in enumerate((False, True)):
                start = time.perf_counter()
                if on_device:
                    with drawn_on(device):
                        inputs = spec.make_inputs(case, device, 0)
                else:
                    inputs = spec.make_inputs(case, device, 0)
                sync()
                seconds[i] += time.perf_counter() - start
                del inputs
        print(f"{name:<24}{len(cases):>6}{seconds[0]:>13.1f}{seconds[1]:>15.2f}")
        totals[0] += seconds[0]
        totals[1] += seconds[1]
    print(f"{'total':<24}{'':>6}{totals[0]:>13.1f}{totals[1]:>15.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "npu"])
    args = parser.parse_args()
    if args.device == "cpu":
        count_on_cpu()
    else:
        time_on_device(torch.device(args.device, 0))


if __name__ == "__main__":
    main()
