"""Does the CUDA code of this checkout compile to the same PTX as an earlier commit's, launch for launch?

    python benchmarks/cuda_unchanged.py [REF] [--capability 90] [--kernels NAME,...]  # REF: a commit before the change

For every distinct NVIDIA launch the plan functions produce over every spec case (the compile check's
list), compile this checkout's kernel and REF's kernel of the same name with the same argument types,
constexprs, warps and stages, and compare the PTX with line information and comments stripped. Identical
PTX means identical machine code, so the timing of the CUDA path cannot have changed. No GPU needed.
REF's kernels are compiled in a subprocess from a ``git archive`` of REF. A kernel is looked up by its module,
else in the nearest package above it that has it: REF may hold a kernel package's code as one module.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if "--worker" not in sys.argv:  # the worker imports REF's kernels from PYTHONPATH instead
    sys.path.insert(0, str(ROOT))


def normalized_ptx(ptx: str) -> str:
    """PTX without source locations, file tables, comments, debug sections and the debug-only labels."""
    ptx = re.sub(r"\.section\s+\.debug_\w+\s*\{.*?\n\s*\}", "", ptx, flags=re.S)
    keep = [
        line
        for line in ptx.splitlines()
        if not re.match(r"\s*(\.loc|\.file|//|\$L__tmp|\$L__func_|\.section)", line) and line.strip()
    ]
    return "\n".join(keep)


def kernel_function(module: str, name: str, root: Path) -> Any:
    """``module.name``, or ``name`` of the nearest enclosing package that has it, imported from a file under
    ``root`` (an installed copy of the package found first would compare a tree with itself)."""
    import importlib

    parts = module.split(".")
    while parts:
        try:
            found = importlib.import_module(".".join(parts))
        except ImportError:
            found = None
        if found is not None and hasattr(found, name):
            where = Path(found.__file__ or "").resolve()
            if not where.is_relative_to(root.resolve()):
                raise RuntimeError(f"{found.__name__} was imported from {where}, not from {root}")
            return getattr(found, name)
        parts.pop()
    raise AttributeError(f"no {name} in {module} or a package above it")


def compile_jobs(jobs: list[dict], capability: int, root: Path) -> dict[str, str]:
    """job id -> sha256 of normalized PTX (or 'ERROR ...'), for the kernels of the tree at ``root``."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    out = {}
    for job in jobs:
        fn = kernel_function(job["module"], job["kernel"], root)
        const = {
            k: tl.dtype(v[3:]) if isinstance(v, str) and v.startswith("tl.") else v
            for k, v in job["constexprs"].items()
        }
        sig = {**job["signature"], **{k: "constexpr" for k in const}}
        missing = [k for k in fn.arg_names if k not in sig]
        if missing:  # the tree's kernel takes other arguments: a different launch by construction
            out[job["id"]] = f"ERROR arguments {', '.join(missing)} not in the launch's signature"
            continue
        sig = {k: sig[k] for k in fn.arg_names}
        opts = {k: job[k] for k in ("num_warps", "num_stages") if job[k] is not None}
        try:
            k = triton.compile(
                ASTSource(fn, sig, constexprs=const), target=GPUTarget("cuda", capability, 32), options=opts
            )
            out[job["id"]] = hashlib.sha256(normalized_ptx(k.asm["ptx"]).encode()).hexdigest()
        except Exception as exc:
            out[job["id"]] = f"ERROR {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("ref", nargs="?", default="81e0aca")
    parser.add_argument("--capability", type=int, default=90)
    parser.add_argument("--kernels", default="", help="comma-separated spec names (default: every kernel)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="kw-ptx-"))
    if args.worker:
        jobs = json.loads(args.worker.read_text())
        print(json.dumps(compile_jobs(jobs, args.capability, Path.cwd())))
        return 0
    from kernelwatch.collect.compile_check import enumerate_jobs

    target = "cuda-sm80" if args.capability == 80 else "cuda-sm90"
    found, steps = enumerate_jobs([target], tuple(k for k in args.kernels.split(",") if k))
    jobs = []
    for i, job in enumerate(found):
        step = steps[job]
        const = {k: f"tl.{v.name}" if type(v).__name__ == "dtype" else v for k, v in step.constexprs.items()}
        jobs.append(
            {
                "id": str(i),
                "module": job.module,
                "kernel": job.kernel,
                "signature": dict(step.signature),
                "constexprs": const,
                "num_warps": job.num_warps,
                "num_stages": job.num_stages,
            }
        )
    ours = compile_jobs(jobs, args.capability, ROOT)
    # REF's kernels: the kernelwatch package (or, before the one namespace, a top-level kernels package, whose
    # modules the jobs then name without the kernelwatch. prefix)
    new_layout = subprocess.run(["git", "cat-file", "-e", f"{args.ref}:kernelwatch/kernels"], cwd=ROOT).returncode == 0
    if not new_layout:
        for job in jobs:
            job["module"] = job["module"].removeprefix("kernelwatch.")
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "ref.tar"
        tree = "kernelwatch" if new_layout else "kernels"
        subprocess.run(["git", "archive", "-o", str(archive), args.ref, tree], cwd=ROOT, check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        spec = Path(tmp) / "jobs.json"
        spec.write_text(json.dumps(jobs))
        env = {**os.environ, "PYTHONPATH": tmp}
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", str(spec), "--capability", str(args.capability)],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            print(proc.stderr[-3000:])
            return 2
        theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    same = differ = 0
    rows: dict[str, list[int]] = {}
    for job, found_job in zip(jobs, found):
        a, b = ours[job["id"]], theirs.get(job["id"], "ERROR missing")
        row = rows.setdefault(job["kernel"], [0, 0])
        if a == b and not a.startswith("ERROR"):
            same += 1
            row[0] += 1
        else:
            differ += 1
            row[1] += 1
            print(f"DIFFERENT {job['kernel']} {found_job.config}: ours {a[:60]} / {args.ref} {b[:60]}")
    print("\n| kernel | identical PTX | different |\n| --- | --- | --- |")
    for kernel, (s, d) in sorted(rows.items()):
        print(f"| `{kernel}` | {s} | {d} |")
    print(f"\nsm_{args.capability}: {same} launches identical to {args.ref}, {differ} different")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
