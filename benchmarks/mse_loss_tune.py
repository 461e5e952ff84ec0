"""Sweep the persistent MSELoss kernel's tile configuration on a GPU and print a table.

    python benchmarks/mse_loss_tune.py            # on a CUDA machine

Timing is the collector's (device events, L2 flushed between repetitions, median). The chosen
configuration goes into ``kernelwatch/kernels/mse_loss/plans.py`` (CUDA_PERSISTENT); the table into
kernelwatch/kernels/NOTES.md.
"""

from __future__ import annotations

import importlib
import itertools
import statistics
import sys

import torch
import triton

from kernelwatch.collect.backends import Backend

m_api = importlib.import_module("kernelwatch.kernels.mse_loss.api")
m_kernel = importlib.import_module("kernelwatch.kernels.mse_loss.kernel")


CONFIGS = [tuple(int(v) for v in c.split(",")) for c in sys.argv[1:]]  # e.g. 8192,8,4 to time just these


def median_ms(backend: Backend, fn) -> float:
    return statistics.median(backend.time_samples(fn, rep_ms=60))


def sweep(backend: Backend, n: int, dtype: torch.dtype, peak_gbps: float) -> list[tuple]:
    x = torch.randn(n, device=backend.device, dtype=dtype)
    y = torch.randn(n, device=backend.device, dtype=dtype)
    out = torch.empty((), device=backend.device, dtype=dtype)
    sms = torch.cuda.get_device_properties(backend.device).multi_processor_count
    nbytes = 2 * n * x.element_size()
    rows = []
    configs = CONFIGS or list(itertools.product((2048, 4096, 8192, 16384), (4, 8, 16), (1, 2, 4, 8)))
    for block, warps, waves in configs:
        grid = min(sms * waves, triton.cdiv(n, block))
        partials = torch.empty(grid, device=backend.device, dtype=torch.float32)

        counter = torch.zeros(1, dtype=torch.int32, device=backend.device)

        def run() -> None:
            m_kernel._mse_persistent_kernel[(grid,)](
                x,
                y,
                partials,
                out,
                counter,
                n,
                1.0 / n,
                BLOCK=block,
                SINGLE=False,
                FUSED_FINISH=True,
                FINISH_BLOCK=triton.next_power_of_2(grid),
                num_warps=warps,
            )

        t = median_ms(backend, run)
        rows.append((block, warps, waves, t, nbytes / (t * 1e-3) / 1e9 / peak_gbps * 100))
    return rows


def main() -> None:
    backend = Backend(torch.device("cuda:0"))
    backend.activate()
    peaks = backend.measure_peaks()
    print(
        f"device {torch.cuda.get_device_name(0)}; measured copy {peaks['peak_gbps']} GB/s, "
        f"bf16 matmul {peaks['peak_tflops']} TFLOP/s",
        flush=True,
    )
    best = {}
    for n, dtype in itertools.product((33_554_432, 268_435_456), (torch.float32, torch.float16)):
        rows = sorted(sweep(backend, n, dtype, peaks["peak_gbps"]), key=lambda r: r[3])
        best[(n, dtype)] = rows
        print(f"\nN={n} {dtype}: top 8 of {len(rows)}")
        print(f"{'BLOCK':>6} {'warps':>5} {'waves':>5} {'ms':>9} {'%peak':>6}")
        for r in rows[:8]:
            print(f"{r[0]:>6} {r[1]:>5} {r[2]:>5} {r[3]:>9.4f} {r[4]:>6.1f}")
        sys.stdout.flush()
    # the configuration with the best worst-case share of peak across the four problems
    configs = {(r[0], r[1], r[2]) for rows in best.values() for r in rows}
    score = {c: min(next(r[4] for r in rows if (r[0], r[1], r[2]) == c) for rows in best.values()) for c in configs}
    top = sorted(score.items(), key=lambda kv: -kv[1])[:5]
    print("\nbest worst-case % of peak over the four problems (BLOCK, warps, waves):")
    for c, s in top:
        print(f"  {c}: {s:.1f}%")
    for n in (4096, 1_048_576):
        x = torch.randn(n, device=backend.device)
        y = torch.randn(n, device=backend.device)
        t_k = median_ms(backend, lambda: m_api.mse_loss_forward(x, y, "mean"))
        t_e = median_ms(backend, lambda: torch.nn.functional.mse_loss(x, y))
        print(f"N={n} fp32 mean: kernel {t_k * 1e3:.1f} us, eager {t_e * 1e3:.1f} us")


if __name__ == "__main__":
    main()
