"""Cost per call and correctness of the kernels' public functions, on whichever launch path this process takes.

    KERNELWATCH_FAST_LAUNCH=0 python benchmarks/launch_path.py --json off.json   # Triton's own launch path
    python benchmarks/launch_path.py --json on.json                              # the short path (default)
    python benchmarks/launch_path.py --compare off.json on.json                  # the table of both

Cost per call is wall time per call with calls back to back and one synchronisation at the end (what a
training loop pays), best of five rounds of 1,000 calls; for MSELoss the rounds of the kernel and of eager
``F.mse_loss`` alternate, so the host's noise (large on the lent machines) hits both alike.
Correctness: each function's output on three
fresh random inputs of the same shape (so the second and third calls reuse the cached launch with new
pointers) against a float64 PyTorch reference, outputs poisoned with NaN by the kernels' allocator;
``short launches`` counts the launches that took the short path, so a path that silently never engages
shows 0. CUDA only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROUNDS, CALLS = 5, 1000
SMALL = False
DEVICE = "cuda"  # --device cpu: a dry run of the checks in Triton's interpreter (timings mean nothing)


def sync() -> None:
    import torch

    if DEVICE == "cuda":
        torch.cuda.synchronize()


def per_call_us(*fns: Callable[[], object]) -> list[float]:
    """Best wall time per call of each function, rounds interleaved (host noise hits them alike)."""
    for fn in fns:
        for _ in range(50 if DEVICE == "cuda" else 1):
            fn()
    sync()
    calls = CALLS if DEVICE == "cuda" else 2
    best = [math.inf] * len(fns)
    for _ in range(ROUNDS):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            best[i] = min(best[i], (time.perf_counter() - t0) / calls * 1e6)
    return best


def cases() -> list[tuple[str, Callable, Callable, Callable, float]]:
    """(name, inputs(seed), kernel(inputs), float64 reference(inputs), tolerance: |err| <= tol (1 + |ref|))."""
    import torch
    import torch.nn.functional as F

    from kernelwatch import kernels
    from kernelwatch.kernels.scaled_masked_softmax.spec import reference_forward

    def randn(seed: int, *shape: int, dtype=torch.float32) -> torch.Tensor:
        g = torch.Generator(device=DEVICE).manual_seed(seed)
        return torch.randn(*shape, device=DEVICE, generator=g).to(dtype)

    def mse(i, reduction="mean"):
        return F.mse_loss(i[0].double(), i[1].double(), reduction=reduction)

    out: list[tuple[str, Callable, Callable, Callable, float]] = []
    for n in (4096, 1_048_576):
        for dname, dtype, tol in (("fp32", torch.float32, 1e-5), ("fp16", torch.float16, 1e-3)):
            out.append(
                (
                    f"mse_loss persistent {dname} n={n}",
                    lambda s, n=n, dtype=dtype: (randn(s, n, dtype=dtype), randn(s + 1, n, dtype=dtype)),
                    lambda i: kernels.mse_loss(*i),
                    mse,
                    tol,
                )
            )
    out.append(
        (
            "mse_loss atomic fp32 n=4096",
            lambda s: (randn(s, 4096), randn(s + 1, 4096)),
            lambda i: kernels.mse_loss(*i, variant="atomic"),
            mse,
            1e-5,
        )
    )
    out.append(
        (
            "mse_loss none fp16 n=4096",
            lambda s: (randn(s, 4096, dtype=torch.float16), randn(s + 1, 4096, dtype=torch.float16)),
            lambda i: kernels.mse_loss(*i, reduction="none"),
            lambda i: mse(i, "none"),
            1e-3,
        )
    )
    out.append(
        (
            "softmax masked fp16 [2,4,128,128]",
            lambda s: (randn(s, 2, 4, 128, 128, dtype=torch.float16), randn(s + 1, 2, 1, 128, 128) > 0.5),
            lambda i: kernels.scaled_masked_softmax(i[0], i[1], 0.125),
            lambda i: reference_forward(i[0], i[1], 0.125, False),
            2e-3,
        )
    )
    out.append(
        (
            "softmax causal fp16 [8,256,256]",
            lambda s: (randn(s, 8, 256, 256, dtype=torch.float16),),
            lambda i: kernels.scaled_upper_triang_masked_softmax(i[0], 0.125),
            lambda i: reference_forward(i[0], None, 0.125, True),
            2e-3,
        )
    )
    out.append(
        (
            "rmsnorm+matmul decode fp16 [16,8192]->8192",
            lambda s: (
                randn(s, 16, 8192, dtype=torch.float16),
                (randn(s + 1, 8192, 8192) / 90).half(),
                (1 + randn(s + 2, 8192) / 10).half(),
            ),
            lambda i: kernels.fused_rmsnorm_matmul(*i),
            lambda i: F.linear(F.rms_norm(i[0].double(), (8192,), i[2].double(), 1e-6), i[1].double()),
            2e-2,
        )
    )
    return out


def measure() -> dict:
    import torch
    import triton

    from kernelwatch.kernels import fastlaunch

    rows = []
    eager = {}
    for name, make, run, ref, tol in cases():
        if SMALL and ("1048576" in name or "8192" in name):
            continue
        worst = 0.0
        for seed in (11, 12, 13):
            inputs = make(seed)
            got = run(inputs).double()
            want = ref(inputs).to(got.device)
            err = ((got - want).abs() / (tol * (1 + want.abs()))).max().item() if got.numel() else 0.0
            worst = max(worst, err if not math.isnan(err) else math.inf)
        inputs = make(11)
        if name.startswith("mse_loss persistent"):
            x, y = inputs
            us, eager[name] = per_call_us(lambda: run(inputs), lambda: torch.nn.functional.mse_loss(x, y))
        else:
            (us,) = per_call_us(lambda: run(inputs))
        row = {"case": name, "us_per_call": us, "worst_rel_err": worst, "tol": tol}
        rows.append(row)
        print(f"  {name:<44} {row['us_per_call']:8.2f} us/call  error budget {worst:.3f}", flush=True)
    device = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (interpreter)"
    return {
        "path": fastlaunch.path(),
        "short_launches": fastlaunch.short_launches(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "device": device,
        "rows": rows,
        "eager": eager,
    }


def compare(paths: list[Path]) -> None:
    docs = [json.loads(p.read_text()) for p in paths]
    print(
        f"{docs[0]['device']}, torch {docs[0]['torch']}, triton {docs[0]['triton']}; "
        f"us per call, calls back to back (best of {ROUNDS} x {CALLS})\n"
    )
    heads = [f"{d['path']} path" for d in docs]
    print(f"{'case':<44} " + " ".join(f"{h:>12} {'eager':>7}" for h in heads) + "  correct")
    for i, row in enumerate(docs[0]["rows"]):
        cells = [(d["rows"][i]["us_per_call"], d["eager"].get(row["case"], math.nan)) for d in docs]
        ok = all(d["rows"][i]["worst_rel_err"] <= 1.0 for d in docs)
        print(f"{row['case']:<44} " + " ".join(f"{c:12.2f} {e:7.2f}" for c, e in cells) + f"  {'yes' if ok else 'NO'}")
    print("\nshort launches: " + ", ".join(f"{d['path']} path {d['short_launches']}" for d in docs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="write this process's measurements here")
    parser.add_argument("--compare", type=Path, nargs="+", help="print the table of earlier --json files")
    parser.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default="cuda",
        help="cpu: a dry run of the checks in Triton's interpreter (small sizes only make sense)",
    )
    parser.add_argument("--small", action="store_true", help="skip the 1M-element and 8192x8192 cases")
    args = parser.parse_args()
    global DEVICE, SMALL
    DEVICE, SMALL = args.device, args.small
    if DEVICE == "cpu":
        import os

        os.environ["TRITON_INTERPRET"] = "1"
    if args.compare:
        compare(args.compare)
        return 0
    doc = measure()
    print(f"path {doc['path']}, short launches {doc['short_launches']}")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    return 0 if all(r["worst_rel_err"] <= 1.0 for r in doc["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
