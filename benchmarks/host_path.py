"""Python host work per call of the fused norm + GEMM forwards, with the kernel launches replaced by a no-op: what
is left is each call's own work (input checks, plan lookup, folds, descriptors, allocations). CPU only (the
interpreter never runs: nothing launches), so it runs here and on any commit (before / after a change).

    python benchmarks/host_path.py                  # this checkout, 8 and 32 layers
    python benchmarks/host_path.py --repo OLD_TREE  # another checkout's kernelwatch (a worktree of an older commit)

Per kernel, path (the CPU plans' decode path at M=5, the pointer-GEMM path at M=64) and depth L: L distinct
layers (weight, gamma, beta) called in turn through the functional API, fp16, median over 30 passes of the
pass's wall time / L. A bounded fold cache shows here as a per-call cost that jumps past its capacity.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--depths", default="8,32")
    args = parser.parse_args(argv)
    os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, str(args.repo))
    import torch

    rms = importlib.import_module("kernelwatch.kernels.fused_rmsnorm_matmul.api")
    ln = importlib.import_module("kernelwatch.kernels.fused_layernorm_matmul.api")
    for mod in (rms, ln):
        mod.launch = lambda *a, **k: None
        mod.launch_tiles = lambda *a, **k: None
    torch.manual_seed(0)
    print(f"kernelwatch from {Path(rms.__file__).parents[2]}")
    print("| path | kernel | layers | host us/call |\n| --- | --- | ---: | ---: |")
    for depth in (int(d) for d in args.depths.split(",")):
        for path, shape, n in (("decode", (5, 1024), 1040), ("tiles", (64, 256), 128)):
            x = torch.randn(shape).half()
            k = shape[-1]
            layers = [
                (torch.randn(n, k).half(), torch.rand(k).half() + 0.5, torch.randn(k).half()) for _ in range(depth)
            ]
            calls = {
                "rms": lambda w, g, b: rms.fused_rmsnorm_matmul(x, w, g),
                "ln": lambda w, g, b: ln.fused_layernorm_matmul(x, w, g, b),
            }
            for name, call in calls.items():
                with torch.no_grad():
                    for layer in layers:
                        call(*layer)
                    per = []
                    for _ in range(30):
                        t0 = time.perf_counter()
                        for layer in layers:
                            call(*layer)
                        per.append((time.perf_counter() - t0) / depth * 1e6)
                print(f"| {path} | {name} | {depth} | {statistics.median(per):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
