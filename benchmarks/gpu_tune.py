"""Tile-configuration sweeps for the softmax and fused RMSNorm+MatMul kernels on a CUDA GPU.

    python benchmarks/gpu_tune.py softmax rmsnorm

Timing is the collector's (device events, L2 flushed between repetitions, median). Prints a
table per problem; the chosen configurations go into the kernel modules' per-vendor tables.
"""

from __future__ import annotations

import importlib
import itertools
import statistics
import sys

import torch

from kernelwatch.collect.backends import Backend

smx_api = importlib.import_module("kernelwatch.kernels.scaled_masked_softmax.api")
smx_plans = importlib.import_module("kernelwatch.kernels.scaled_masked_softmax.plans")
smx_spec = importlib.import_module("kernelwatch.kernels.scaled_masked_softmax.spec")
frm_api = importlib.import_module("kernelwatch.kernels.fused_rmsnorm_matmul.api")
frm_plans = importlib.import_module("kernelwatch.kernels.fused_rmsnorm_matmul.plans")
frm_spec = importlib.import_module("kernelwatch.kernels.fused_rmsnorm_matmul.spec")


def med(backend: Backend, fn) -> float:
    return statistics.median(backend.time_samples(fn, rep_ms=60, max_reps=100))


def softmax(backend: Backend, peak: float) -> None:
    dev = backend.device
    for shape in smx_spec.PERF_SHAPES:
        b, h, sq, sk = shape
        x = torch.randn(shape, device=dev, dtype=torch.float16)
        mask = torch.rand(b, 1, sq, sk, device=dev) < 0.1
        dy = torch.randn_like(x)
        n = x.numel()
        fwd_bytes, bwd_bytes = 4 * n + b * sq * sk, 6 * n
        t_eager = med(backend, lambda: smx_spec.eager_forward(x, mask, 0.125))
        y = smx_spec.eager_forward(x, mask, 0.125)
        rows = []
        for tile, warps in itertools.product((1024, 2048, 4096, 8192, 16384), (4, 8, 16)):
            if tile < sk:
                continue
            smx_plans.TILE_ELEMENTS["nvidia"] = tile
            smx_plans._warps = lambda t, w=warps: w
            smx_plans._plan.cache_clear()
            smx_plans.forward_plan.cache_clear()
            smx_plans.backward_plan.cache_clear()
            tf = med(backend, lambda: smx_api.scaled_masked_softmax_forward(x, mask, 0.125))
            tb = med(backend, lambda: smx_api.softmax_backward(y, dy, 0.125))
            rows.append((tile, warps, tf, fwd_bytes / tf / 1e6 / peak * 100, tb, bwd_bytes / tb / 1e6 / peak * 100))
        print(f"\nsoftmax fp16 {shape}: eager fwd {t_eager:.3f} ms")
        print(f"{'tile':>6} {'warps':>5} {'fwd ms':>8} {'fwd %':>6} {'bwd ms':>8} {'bwd %':>6}")
        for r in sorted(rows, key=lambda r: r[2])[:6]:
            print(f"{r[0]:>6} {r[1]:>5} {r[2]:>8.3f} {r[3]:>6.1f} {r[4]:>8.3f} {r[5]:>6.1f}")
        sys.stdout.flush()
        torch.cuda.empty_cache()


def rmsnorm(backend: Backend, peak_tflops: float) -> None:
    dev = backend.device
    for (shape, n, _), dtype in itertools.product(frm_spec.PERF_POINTS, (torch.float16, torch.bfloat16)):
        k = shape[-1]
        x = torch.randn(shape, device=dev, dtype=dtype)
        w = (torch.randn(n, k, device=dev) / k**0.5).to(dtype)
        g = (1 + 0.5 * torch.rand(k, device=dev)).to(dtype)
        m = x.numel() // k
        flops = 2 * m * n * k
        res = {}
        for name, fn in {
            "fold": lambda: frm_api.fused_rmsnorm_matmul_forward(x, w, g, None, 1e-6, "fold_gamma"),
            "prologue": lambda: frm_api.fused_rmsnorm_matmul_forward(x, w, g, None, 1e-6, "prologue_gamma"),
            "prepass": lambda: frm_api.fused_rmsnorm_matmul_forward(x, w, g, None, 1e-6, "rstd_prepass"),
            "cublas": lambda: torch.nn.functional.linear(x, w),
            "eager": lambda: frm_spec.eager_rmsnorm_linear(x, w, g, None, 1e-6),
        }.items():
            res[name] = med(backend, fn)
        best = frm_plans.autotuned_kernel().cache
        cfgs = {str(key[:3]): str(cfg) for key, cfg in best.items()}
        print(
            f"\nrmsnorm+matmul {dtype} x{list(shape)} -> {n}: "
            + ", ".join(f"{k_} {v * 1e3:.1f} us ({flops / v / 1e9:.0f} TF)" for k_, v in res.items())
            + f"; fold/cublas {res['fold'] / res['cublas']:.3f}, prepass/cublas {res['prepass'] / res['cublas']:.3f}"
        )
        print("  autotuned:", cfgs)
        sys.stdout.flush()


def softmax_check(backend: Backend, peak: float) -> None:
    """The shipped configuration per shape, with and without the mask (where does the time go?)."""
    dev = backend.device
    print(f"\n{'shape':<24} {'mask fwd ms':>11} {'%':>5} {'no-mask ms':>10} {'%':>5} {'bwd ms':>7} {'%':>5}")
    for shape in smx_spec.PERF_SHAPES:
        b, h, sq, sk = shape
        x = torch.randn(shape, device=dev, dtype=torch.float16)
        mask = torch.rand(b, 1, sq, sk, device=dev) < 0.1
        dy = torch.randn_like(x)
        y = smx_spec.eager_forward(x, mask, 0.125)
        n = x.numel()
        tm = med(backend, lambda: smx_api.scaled_masked_softmax_forward(x, mask, 0.125))
        tn = med(backend, lambda: smx_api.scaled_masked_softmax_forward(x, None, 0.125))
        tb = med(backend, lambda: smx_api.softmax_backward(y, dy, 0.125))
        pm = (4 * n + b * sq * sk) / tm / 1e6 / peak * 100
        print(
            f"{str(shape):<24} {tm:>11.3f} {pm:>5.1f} {tn:>10.3f} {4 * n / tn / 1e6 / peak * 100:>5.1f} "
            f"{tb:>7.3f} {6 * n / tb / 1e6 / peak * 100:>5.1f}"
        )
        torch.cuda.empty_cache()


def main() -> None:
    backend = Backend(torch.device("cuda:0"))
    backend.activate()
    peaks = backend.measure_peaks()
    print(f"{torch.cuda.get_device_name(0)}: copy {peaks['peak_gbps']} GB/s, bf16 mm {peaks['peak_tflops']} TFLOP/s")
    which = sys.argv[1:] or ["softmax", "rmsnorm"]
    if "rmsnorm" in which:
        rmsnorm(backend, peaks["peak_tflops"])
    if "softmax" in which:
        softmax(backend, peaks["peak_gbps"])
    if "softmax_check" in which:
        softmax_check(backend, peaks["peak_gbps"])


if __name__ == "__main__":
    main()
