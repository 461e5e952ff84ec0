"""KernelWatch against the implementations a user would pick instead, on one CUDA GPU.

    python benchmarks/peers.py [--apex-src .kw-local/apex] [--no-apex] [--dtypes fp16,bf16] [--out FILE]

Peers, each timed only where it is importable (none is required):

* ``apex``: NVIDIA apex's Megatron fused softmax. Its two extensions (``scaled_masked_softmax_cuda``,
  ``scaled_upper_triang_masked_softmax_cuda``) are built here from apex's ``csrc`` (``--apex-src``: a folder
  holding ``csrc/megatron`` and ``csrc/type_shim.h``, and a ``COMMIT`` file naming apex's commit) with
  ``torch.utils.cpp_extension`` (``MAX_JOBS`` defaults to 16; about 80 s on an H200), into
  ``<apex-src>/build``;
* ``liger`` (Liger-Kernel's RMSNorm, then cuBLAS) and ``flaggems`` (FlagGems' RMSNorm, then cuBLAS; its
  ``mse_loss``): installed packages (for example wheels unpacked onto ``PYTHONPATH``).

The implementations are the collector's own (each kernel spec's ``implementations``, which add the peers
that load, kernelwatch/kernels/peers.py), on the spec's perf inputs; timing is the collector's
(``Backend.time_samples``: L2 flushed by a read before each sample, samples behind a spin kernel, CUDA events, median)
and for decode also the cost per call (``Backend.call_samples``, calls back to back). Each peer's output is compared
with the kernel's on the same inputs first (max |difference|, printed). Prints the peers table: per case
KernelWatch, cuBLAS alone where it applies, every peer, the best peer and KernelWatch's speedup over it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
APEX_FLAGS = [
    "-O3",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
]  # apex setup.py, the megatron softmax extensions
APEX_EXTENSIONS = {
    "scaled_masked_softmax_cuda": "scaled_masked_softmax",
    "scaled_upper_triang_masked_softmax_cuda": "scaled_upper_triang_masked_softmax",
}


def build_apex(src: Path) -> tuple[list[str], str]:
    """Build (or load from ``src/build``) apex's two softmax extensions; (built module names, a note)."""
    from torch.utils.cpp_extension import load

    from kernelwatch.kernels.peers import APEX_COMMIT_FILE

    megatron = src / "csrc" / "megatron"
    if not megatron.is_dir():
        return [], f"no apex sources at {megatron}"
    os.environ.setdefault("MAX_JOBS", "16")
    commit = (src / "COMMIT").read_text().strip() if (src / "COMMIT").is_file() else "unknown"
    built, notes = [], []
    for name, stem in APEX_EXTENSIONS.items():
        out = src / "build" / name
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        try:
            module = load(
                name=name,
                sources=[str(megatron / f"{stem}.cpp"), str(megatron / f"{stem}_cuda.cu")],
                extra_include_paths=[str(src / "csrc")],
                extra_cflags=["-O3"],
                extra_cuda_cflags=APEX_FLAGS,
                build_directory=str(out),
                verbose=False,
            )
        except Exception as exc:
            notes.append(f"{name}: build failed: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]}")
            continue
        (out / APEX_COMMIT_FILE).write_text(commit + "\n")
        sys.path.insert(
            0, str(out)
        )  # where a later `import scaled_masked_softmax_cuda` (kernelwatch/kernels/peers.py) looks
        sys.modules[name] = module
        built.append(name)
        notes.append(f"{name}: {time.perf_counter() - t0:.0f} s")
    return built, f"apex {commit[:12]}: " + "; ".join(notes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--apex-src", default=str(ROOT / ".kw-local" / "apex"), help="apex sources (csrc/megatron)")
    ap.add_argument("--no-apex", action="store_true", help="do not build apex's extensions")
    ap.add_argument("--dtypes", default="fp16,bf16", help="comma-separated: fp16, bf16 (MSELoss adds fp32)")
    ap.add_argument("--out", help="also write the table (markdown) to this file")
    args = ap.parse_args()
    dtypes = [d for d in args.dtypes.split(",") if d]
    if not set(dtypes) <= {"fp16", "bf16"} or not dtypes:
        print(f"peers: --dtypes must name fp16 and/or bf16, got {args.dtypes!r}", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("peers: needs a CUDA GPU (none visible)", file=sys.stderr)
        return 2
    note = "apex not built (--no-apex)"
    if not args.no_apex:
        _, note = build_apex(Path(args.apex_src))
    import triton

    from kernelwatch import kernels
    from kernelwatch.collect.backends import Backend
    from kernelwatch.kernels.peers import versions
    from kernelwatch.kernels.spec import KERNEL_IMPL, PEER_IMPLS

    backend = Backend(torch.device("cuda"))
    backend.activate()
    peer_versions = versions()
    header = f"{torch.cuda.get_device_name()} · torch {torch.__version__} · triton {triton.__version__} · peers " + (
        ", ".join(f"{k} {v}" for k, v in sorted(peer_versions.items())) or "none importable"
    )
    print(header, "\n" + note, flush=True)
    specs = kernels.discover()
    wanted = []  # (spec, case, label, cost per call?)
    for spec_name, pick in (
        ("scaled_masked_softmax", lambda c: c.p["direction"] == "fwd"),
        ("fused_rmsnorm_matmul", lambda c: c.variant == "fold_gamma" and c.p["shape"] != (4, 512, 4096)),
        (
            "mse_loss",
            lambda c: c.variant == "persistent" and c.p["shape"] == (33554432,) and c.p["reduction"] == "mean",
        ),
    ):
        for case in specs[spec_name].perf_cases():
            if pick(case) and (case.dtype in dtypes or (spec_name == "mse_loss" and case.dtype in ("fp32", "fp16"))):
                shape = case.p["shape"]
                label = f"{spec_name} {case.variant} {case.dtype} {list(shape)}" + (
                    f"->{case.p['n']}" if "n" in case.p else ""
                )
                wanted.append((specs[spec_name], case, label, spec_name == "fused_rmsnorm_matmul" and shape[0] <= 16))
    rows = []
    for spec, case, label, per_call in wanted:
        inputs = spec.make_inputs(case, backend.device, 20)
        impls = spec.implementations(case, inputs)
        baselines = ("cublas_linear", "torch_rms_norm") if per_call else ("cublas_linear",)
        names = [KERNEL_IMPL, *(n for n in baselines if n in impls), *(n for n in PEER_IMPLS if n in impls)]
        kernel_out = impls[KERNEL_IMPL]()
        times, calls, agree = {}, {}, {}
        for name in names:
            try:
                if name in PEER_IMPLS:
                    out = impls[name]()
                    diff = (
                        (out.float() - kernel_out.float()).abs().max().item()
                        if out.shape == kernel_out.shape
                        else float("nan")
                    )
                    agree[name] = diff
                times[name] = statistics.median(backend.time_samples(impls[name])) * 1e3
                if per_call:
                    calls[name] = statistics.median(backend.call_samples(impls[name])) * 1e3
            except Exception as exc:
                times[name] = None
                agree[name] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:80] if str(exc) else ''}"
        kw = times.get(KERNEL_IMPL)
        peers_t = {n: t for n, t in times.items() if n in PEER_IMPLS and t}
        best = min(peers_t, key=peers_t.get) if peers_t else None
        rows.append((label, kw, times.get("cublas_linear"), peers_t, best, agree, calls))
        line = f"{label}: KW {kw:.1f} us" if kw else f"{label}: KW failed"
        print(
            line,
            {n: round(t, 1) for n, t in peers_t.items()},
            {n: (round(v, 4) if isinstance(v, float) else v) for n, v in agree.items()},
            {n: round(v, 1) for n, v in calls.items()},
            flush=True,
        )
        del inputs, impls, kernel_out
        torch.cuda.empty_cache()

    out = [
        "",
        header,
        note,
        "",
        "| case | KernelWatch µs | cuBLAS alone µs | peers µs | best peer | KW vs best |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for label, kw, cublas, peers_t, best, agree, calls in rows:
        peer_text = ", ".join(f"{n} {t:.1f}" for n, t in sorted(peers_t.items())) or "none"
        failed = [f"{n}: {v}" for n, v in agree.items() if isinstance(v, str)]
        if failed:
            peer_text += " (" + "; ".join(failed) + ")"
        if best and kw:
            ratio = peers_t[best] / kw
            verdict = f"{ratio:.2f}x faster" if ratio >= 1 else f"**{best} {1 / ratio:.2f}x faster**"
        else:
            verdict = "-"
        cub = f"{cublas:.1f}" + (f" (KW {kw / cublas:.3f}x)" if kw else "") if cublas else "-"
        kw_text = f"{kw:.1f}" if kw else "failed"
        if calls:
            kw_text += " · per call " + ", ".join(f"{n} {v:.1f}" for n, v in calls.items())
        out.append(f"| {label} | {kw_text} | {cub} | {peer_text} | {best or '-'} | {verdict} |")
    text = "\n".join(out)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
