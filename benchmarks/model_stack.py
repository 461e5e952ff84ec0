"""The fused norm + GEMM kernels as a model calls them: L distinct layers, each with its own weight and norm
parameters, called in turn on one input; microseconds per layer, every unfused peer beside them
(kernelwatch/kernels/NOTES.md, "Stacks of layers").

    python benchmarks/model_stack.py                          # H200: the table (about 4 minutes)
    python benchmarks/model_stack.py --json stack.json        # and every number as JSON
    python benchmarks/model_stack.py --device cpu             # smoke: tiny shapes, interpreter, numbers mean nothing

Per kernel (RMSNorm+MatMul, LayerNorm+MatMul), shape (``[1024,8192]->4096``, ``[4096]^3``, ``[16,8192]->8192``),
depth L (1, 16, 32, 80) and implementation, three figures per layer:

* ``eager``: wall time of one pass of the stack, host path included (layers called back to back,
  ``torch.cuda.synchronize()`` at the end of the pass), median of at least 20 passes, divided by L;
* ``graph``: one CUDA graph of the whole stack, each replay timed with CUDA events, median of at least 20, / L;
* ``host``: time spent in Python per call: ``time.perf_counter()`` around a pass without its synchronisation
  (the launches only queue: a pass of at most 80 layers stays far inside the launch queue, so the GPU is not what
  the host waits for), synchronised after, median of 20 passes, / L.

Implementations: ``triton`` (the module API, ``FusedRMSLinear`` / ``FusedLayerNormLinear``: each layer owns its
fold), ``torch_eager`` (``F.rms_norm`` / ``F.layer_norm`` then ``F.linear``), ``torch_compile`` (the whole stack,
compiled once per shape and depth; depths above ``--compile-max-depth`` are skipped for compile time and say so),
``liger`` (Liger-Kernel's RMSNorm / LayerNorm, then ``F.linear``), ``flaggems`` (FlagGems' ``rms_norm`` /
``layer_norm``, then ``F.linear``); a peer that does not import is named with the reason. Every fused pass is
checked against the unfused one (each layer's output) before it is timed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = (((1024, 8192), 4096), ((4096, 4096), 4096), ((16, 8192), 8192))
DEPTHS = (1, 16, 32, 80)
SMOKE_SHAPES = (((4, 32), 16), ((2, 64), 32))
SMOKE_DEPTHS = (1, 3)
PASSES = 20
IMPLS = ("triton", "torch_eager", "torch_compile", "liger", "flaggems")


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def peers(device: str) -> tuple[dict[str, dict[str, Callable]], dict[str, str]]:
    """(impl -> {"rms": norm, "ln": norm}, impl -> why it is missing) for liger and flaggems."""
    found: dict[str, dict[str, Callable]] = {}
    missing: dict[str, str] = {}
    if device != "cuda":
        return found, {"liger": "CUDA only", "flaggems": "CUDA only"}
    try:
        from liger_kernel.transformers.functional import liger_layer_norm, liger_rms_norm

        found["liger"] = {
            "rms": lambda x, g, beta, eps: liger_rms_norm(x, g, eps, in_place=False),
            "ln": lambda x, g, beta, eps: liger_layer_norm(x, g, beta, eps),
        }
    except Exception as exc:  # any import failure names the peer as missing
        missing["liger"] = f"{type(exc).__name__}: {exc}"[:120]
    try:
        import flag_gems

        from kernelwatch.kernels.peers import flaggems_layer_norm

        gems_ln = flaggems_layer_norm("cuda")  # FlagGems' layer_norm returns (y, mean, rstd)
        found["flaggems"] = {
            "rms": lambda x, g, beta, eps: flag_gems.rms_norm(x, [x.shape[-1]], g, eps),
            "ln": lambda x, g, beta, eps: gems_ln(x, [x.shape[-1]], g, beta, eps),
        }
    except Exception as exc:
        missing["flaggems"] = f"{type(exc).__name__}: {exc}"[:120]
    return found, missing


def layers_of(kernel: str, shape: tuple[int, int], n: int, depth: int, device: str, seed: int) -> tuple:
    """x and ``depth`` layers (weight, gamma, beta) drawn on the device, fp16."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    k = shape[-1]
    half = dict(dtype=torch.float16, device=device)
    x = (torch.randn(shape, generator=gen, device=device) * 2).to(torch.float16)
    layers = []
    for _ in range(depth):
        w = (torch.randn(n, k, generator=gen, device=device) / math.sqrt(k)).to(**half)
        g = (1 + 0.5 * torch.rand(k, generator=gen, device=device)).to(**half)
        beta = (0.5 * torch.randn(k, generator=gen, device=device)).to(**half) if kernel == "ln" else None
        layers.append((w, g, beta))
    return x, layers


def passes(kernel: str, x, layers: list, device: str, compile_ok: bool, found: dict) -> dict[str, Callable | str]:
    """impl -> one pass of the stack (a list of every layer's output), or why it does not run here."""
    import torch
    import torch.nn.functional as F

    from kernelwatch.kernels.fused_layernorm_matmul.api import FusedLayerNormLinear
    from kernelwatch.kernels.fused_rmsnorm_matmul.api import FusedRMSLinear

    k = x.shape[-1]

    def module(cls, w, g, beta, eps):
        """A layer over these tensors, built by hand rather than by ``.of`` so an older commit runs this too
        (the before / after of a change)."""
        layer = cls(k, w.shape[0], eps, bias=False, device="meta", dtype=w.dtype)
        layer.weight, layer.gamma = torch.nn.Parameter(w, False), torch.nn.Parameter(g, False)
        if beta is not None:
            layer.beta = torch.nn.Parameter(beta, False)
        return layer

    if kernel == "rms":
        modules = [module(FusedRMSLinear, w, g, None, 1e-6) for w, g, _ in layers]

        def norm(x, g, beta):
            return F.rms_norm(x, (k,), g, 1e-6)
    else:
        modules = [module(FusedLayerNormLinear, w, g, beta, 1e-5) for w, g, beta in layers]

        def norm(x, g, beta):
            return F.layer_norm(x, (k,), g, beta, 1e-5)

    def unfused(x):
        return [F.linear(norm(x, g, beta), w) for w, g, beta in layers]

    out: dict[str, Callable | str] = {
        "triton": lambda: [m(x) for m in modules],
        "torch_eager": lambda: unfused(x),
    }
    if not compile_ok:
        out["torch_compile"] = "skipped: depth above --compile-max-depth" if device == "cuda" else "skipped on cpu"
    else:
        compiled = torch.compile(unfused, dynamic=False)
        out["torch_compile"] = lambda: compiled(x)
    eps = 1e-6 if kernel == "rms" else 1e-5
    for name, norms in found.items():
        peer = norms[kernel]
        out[name] = lambda peer=peer: [F.linear(peer(x, g, beta, eps), w) for w, g, beta in layers]
    return out


def check(fused: Callable, unfused: Callable) -> float:
    """Largest |fused - unfused| over every layer's output, relative to the largest |unfused|; raises past 2e-2."""
    got, want = fused(), unfused()
    worst = max(
        ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6)).item() for a, b in zip(got, want)
    )
    if not worst <= 2e-2:
        raise AssertionError(f"the fused stack differs from the unfused one: relative error {worst:.3g}")
    return worst


def time_eager(fn: Callable, device: str, reps: int) -> tuple[float, float]:
    """(median wall ms of a synchronised pass, median host ms of its launches alone)."""
    for _ in range(3):
        fn()
    _sync(device)
    wall, host = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        _sync(device)
        t2 = time.perf_counter()
        host.append((t1 - t0) * 1e3)
        wall.append((t2 - t0) * 1e3)
    return statistics.median(wall), statistics.median(host)


def time_graph(fn: Callable, reps: int) -> float:
    """Median ms of a replay of one CUDA graph of the whole pass (warm-up and capture as PyTorch prescribes)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    del graph
    return statistics.median(samples)


def measure(device: str, shapes, depths, reps: int, compile_max_depth: int, only: tuple[str, ...]) -> dict:
    import torch

    found, missing = peers(device)
    rows = []
    with torch.no_grad():
        for kernel in ("rms", "ln"):
            for shape, n in shapes:
                for depth in depths:
                    x, layers = layers_of(kernel, shape, n, depth, device, seed=depth)
                    fns = passes(kernel, x, layers, device, device == "cuda" and depth <= compile_max_depth, found)
                    err = check(fns["triton"], fns["torch_eager"])
                    for impl, fn in fns.items():
                        if only and impl not in only:
                            continue
                        row = {"kernel": kernel, "shape": list(shape), "n": n, "layers": depth, "impl": impl}
                        if isinstance(fn, str):
                            rows.append({**row, "skipped": fn})
                            continue
                        try:
                            wall, host = time_eager(fn, device, reps)
                            graph = time_graph(fn, reps) if device == "cuda" else None
                        except Exception as exc:  # a peer that fails is reported, not fatal
                            rows.append({**row, "skipped": f"{type(exc).__name__}: {exc}"[:120]})
                            continue
                        rows.append(
                            {
                                **row,
                                "eager_us": wall / depth * 1e3,
                                "graph_us": graph / depth * 1e3 if graph is not None else None,
                                "host_us": host / depth * 1e3,
                                "check_rel_err": err if impl == "triton" else None,
                            }
                        )
                    del fns, x, layers
                    if device == "cuda":
                        torch.cuda.empty_cache()
    return {"device": device, "rows": rows, "missing": missing}


def table(result: dict) -> str:
    """Markdown: one row per (kernel, shape, depth, implementation), us per layer."""
    names = {"rms": "RMSNorm+MM", "ln": "LayerNorm+MM"}
    lines = [
        "| kernel | shape | layers | impl | eager us/layer | graph us/layer | host us/call |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: |",
    ]

    def f(v):
        return "-" if v is None else f"{v:.1f}"

    for r in result["rows"]:
        shape = "x".join(map(str, r["shape"])) + f"->{r['n']}"
        if "skipped" in r:
            lines.append(f"| {names[r['kernel']]} | `{shape}` | {r['layers']} | {r['impl']} | {r['skipped']} | | |")
            continue
        cells = (f(r["eager_us"]), f(r["graph_us"]), f(r["host_us"]))
        lines.append(f"| {names[r['kernel']]} | `{shape}` | {r['layers']} | {r['impl']} | " + " | ".join(cells) + " |")
    for name, why in result["missing"].items():
        lines.append(f"\nmissing peer {name}: {why}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--depths", default=None, help="comma-separated layer counts (default 1,16,32,80)")
    parser.add_argument("--compile-max-depth", type=int, default=32)
    parser.add_argument("--only", default="", help="comma-separated implementations to time (default: all)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("model_stack.py: no CUDA device here; --device cpu runs the smoke path", file=sys.stderr)
        return 2
    smoke = args.device == "cpu"
    try:
        depths = tuple(int(d) for d in args.depths.split(",")) if args.depths else (SMOKE_DEPTHS if smoke else DEPTHS)
    except ValueError:
        print(f"model_stack.py: --depths must be integers separated by commas, got {args.depths!r}", file=sys.stderr)
        return 2
    only = tuple(s for s in args.only.split(",") if s)
    unknown = [s for s in only if s not in IMPLS]
    if unknown or any(d < 1 for d in depths):
        print(
            f"model_stack.py: unknown implementation {unknown[0]!r} (known: {', '.join(IMPLS)})"
            if unknown
            else "model_stack.py: every depth must be at least 1",
            file=sys.stderr,
        )
        return 2
    started = time.perf_counter()
    result = measure(
        args.device, SMOKE_SHAPES if smoke else SHAPES, depths, 2 if smoke else PASSES, args.compile_max_depth, only
    )
    result["seconds"] = time.perf_counter() - started
    if args.device == "cuda":
        result["gpu"] = torch.cuda.get_device_name()
    print(table(result))
    print(f"\n{result['seconds']:.0f} s on {result.get('gpu', 'the CPU interpreter (numbers mean nothing)')}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
