"""``make compile-check``: compile every kernel launch of ``kernelwatch/kernels/`` for every target, with no GPU or NPU.

The launches are not listed by hand: for each target's device description (:mod:`kernelwatch.kernels.plan`) every spec
case's ``launch_plans`` is evaluated, and each distinct (kernel, argument types, constexprs, warps, stages)
is compiled once:

* CUDA, with upstream Triton (this environment): to cubin for ``GPUTarget("cuda", 80, 32)`` with the A100
  description's plans and ``GPUTarget("cuda", 90, 32)`` with the H200's (H100 plans are the H200's).
* Ascend, with triton-ascend (its own environment: it installs a ``triton`` package of its own): the
  stages that run without CANN, ``ttir`` then ``ttadapter`` (Triton IR to linalg, the bundled
  ``triton-adapter-opt``), for ``GPUTarget("npu", "Ascend910B3", 0)`` with the 910B description's plans. A
  frontend ``CompilationError`` or a ``ConvertTritonIRToLinalgIR`` failure fails the check; so does a kernel
  the compiler classifies as cube+vector (``mix_mode``) when its plan's footprint says vector-only, or the
  reverse, since the grid and the 512 B alignment follow from that.

    python -m kernelwatch.collect.compile_check [--targets cuda-sm80,cuda-sm90] [--ascend-python
    .venv-ascend/bin/python]
                               [--report FILE.md] [--jobs N] [--kernels NAME,...] [--extra-kernels MODULE,...]

``--kernels`` compiles the launches of those specs only; with ``--report`` an existing report keeps the
rows of every other kernel and only the named kernels' rows are replaced. ``--extra-kernels`` adds spec
modules found outside ``kernelwatch/kernels/`` (as ``kernelwatch collect --extra-kernels`` does).

Prints each failure (target, kernel, configuration, first error line) and a summary table; exits 1 on any
failure. CUDA compiles go through Triton's cache in ``--cache-dir`` (default ``~/.cache/kernelwatch/
compile-check``): its key covers the kernel's source and that of every function it calls, the argument types,
constexprs, options, target and the Triton version, and only successful compiles are stored, so a hit means
this exact configuration compiled with this compiler. ``--fresh`` compiles everything into an empty cache
(4.5-7.5 minutes for all targets on a shared 2-core machine, against 16-24 seconds with a warm cache).
The Ascend stages are run directly and never cached.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import importlib
import inspect
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ASCEND_TARGET = "ascend-910b3"
CUDA_TARGETS = ("cuda-sm80", "cuda-sm90")
# triton-adapter-opt 3.2.0 crashed (stack dump, no diagnostic) on 1 of 580 lowerings in this project's runs, and
# the same kernel lowered on the next try; a real lowering failure repeats with a diagnostic.
ADAPTER_TRIES = 3


@dataclass(frozen=True)
class Job:
    target: str
    module: str
    kernel: str
    signature: tuple[tuple[str, str], ...]
    constexprs: tuple[tuple[str, str], ...]  # values printed; the worker rebuilds the real ones from the plan
    num_warps: int | None
    num_stages: int | None
    cube_vector: bool
    dtypes: str
    cases: int

    @property
    def config(self) -> str:
        parts = [f"{k}={v}" for k, v in self.constexprs]
        parts += [f"num_warps={self.num_warps}"] if self.num_warps is not None else []
        parts += [f"num_stages={self.num_stages}"] if self.num_stages is not None else []
        sig = ",".join(t for _, t in self.signature)
        return f"{' '.join(parts)} [{sig}]"


@dataclass
class Result:
    job: Job
    ok: bool
    seconds: float
    error: str = ""
    detail: str = ""


def _describe_target(target: str) -> Any:
    from kernelwatch.kernels.plan import ASCEND_910B, NVIDIA_A100, NVIDIA_H200

    return {"cuda-sm80": NVIDIA_A100, "cuda-sm90": NVIDIA_H200, ASCEND_TARGET: ASCEND_910B}[target]


def _show(value: Any) -> str:
    return f"tl.{value.name}" if type(value).__name__ == "dtype" and hasattr(value, "name") else repr(value)


def select_specs(names: tuple[str, ...] = (), extra_modules: tuple[str, ...] = ()) -> dict[str, Any]:
    """The discovered specs (with ``extra_modules``), only those of ``names`` when given (unknown: ValueError)."""
    from kernelwatch import kernels

    specs = kernels.discover(extra_modules)
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise ValueError(f"unknown kernel {unknown[0]!r} (known: {', '.join(sorted(specs))})")
    return {n: s for n, s in specs.items() if not names or n in names}


def enumerate_jobs(
    targets: list[str], names: tuple[str, ...] = (), extra_modules: tuple[str, ...] = ()
) -> tuple[list[Job], dict[Job, Any]]:
    """Distinct launches over every spec case for each target, and for each the Launch to compile."""
    from kernelwatch.kernels.plan import launches

    specs = select_specs(names, extra_modules)
    found: dict[tuple, Any] = {}
    meta: dict[tuple, dict] = {}
    for target in targets:
        device = _describe_target(target)
        for spec in specs.values():
            for case in (*spec.accuracy_cases(), *spec.perf_cases()):
                for step in launches(spec.launch_plans(case, device)):
                    fn = getattr(step.fn, "fn", step.fn)
                    key = (
                        target,
                        fn.__module__,
                        step.name,
                        tuple(step.signature.items()),
                        tuple((k, _show(v)) for k, v in step.constexprs.items()),
                        step.num_warps,
                        step.num_stages,
                    )
                    found.setdefault(key, step)
                    entry = meta.setdefault(key, {"dtypes": set(), "cases": 0})
                    entry["dtypes"].add(case.dtype)
                    entry["cases"] += 1
    jobs, steps = [], {}
    for key, step in found.items():
        target, module, kernel, sig, const, warps, stages = key
        cube_vector = bool(step.footprint and step.footprint.cube_vector)
        job = Job(
            target,
            module,
            kernel,
            sig,
            const,
            warps,
            stages,
            cube_vector,
            ",".join(sorted(meta[key]["dtypes"])),
            meta[key]["cases"],
        )
        jobs.append(job)
        steps[job] = step
    return jobs, steps


# ---------------------------------------------------------------------------------------------
# Compiling one launch (in a worker process)
# ---------------------------------------------------------------------------------------------
_STEPS: dict[Job, Any] = {}
_JOBS: list[Job] = []


def _init_worker(targets: list[str], names: tuple[str, ...], extra_modules: tuple[str, ...]) -> None:
    warnings.filterwarnings("ignore")
    jobs, steps = enumerate_jobs(targets, names, extra_modules)
    _JOBS[:] = jobs
    _STEPS.update(steps)


def _source(step: Any) -> Any:
    """An ASTSource for this Triton's API (3.3+: constexprs in the signature; 3.2: separate constants)."""
    from triton.compiler.compiler import ASTSource

    fn = step.fn
    if "constexprs" in inspect.signature(ASTSource.__init__).parameters:
        signature = {**step.signature, **{k: "constexpr" for k in step.constexprs}}
        order = list(getattr(fn, "arg_names", signature))
        signature = {k: signature[k] for k in order if k in signature}
        return ASTSource(fn, signature, constexprs=dict(step.constexprs))
    return ASTSource(fn, dict(step.signature), dict(step.constexprs))


def _first_error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not re.match(r"#\d+ 0x", line.strip())]
    for line in lines:
        if re.search(r"error|Error|failed|not supported|unsupported", line):
            return line[:300]
    return (lines[-1] if lines else "no message")[:300]


def _compile_cuda(job: Job, step: Any) -> str:
    import triton
    from triton.backends.compiler import GPUTarget

    capability = int(job.target.rsplit("sm", 1)[1])
    options = {k: v for k, v in (("num_warps", job.num_warps), ("num_stages", job.num_stages)) if v is not None}
    kernel = triton.compile(_source(step), target=GPUTarget("cuda", capability, 32), options=options)
    if not kernel.asm.get("cubin"):
        raise RuntimeError("no cubin produced")
    return f"cubin {len(kernel.asm['cubin'])} B"


def _compile_ascend(job: Job, step: Any) -> str:
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    target = GPUTarget("npu", "Ascend910B3", 0)
    backend = make_backend(target)
    options = backend.parse_options({k: v for k, v in (("num_warps", job.num_warps),) if v is not None})
    stages: dict[str, Any] = {}
    backend.add_stages(stages, options)
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = _source(step).make_ir(options, backend.get_codegen_implementation(), backend.get_module_map(), context)
    metadata = {"hash": job.kernel, "target": target, **options.__dict__}
    module = stages["ttir"](module, metadata)
    crashes = []
    for _ in range(ADAPTER_TRIES):
        try:
            linalg = stages["ttadapter"](module, metadata)
            break
        except subprocess.CalledProcessError as exc:
            stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else str(exc.stderr or exc)
            if exc.returncode >= 0 and "Stack dump" not in stderr:
                raise RuntimeError(f"ConvertTritonIRToLinalgIR: {_first_error_line(stderr)}") from None
            crashes.append(f"exit {exc.returncode}")  # the tool crashed: a lowering failure would repeat
    else:
        raise RuntimeError(
            f"ConvertTritonIRToLinalgIR: triton-adapter-opt crashed {len(crashes)} times ({', '.join(crashes)})"
        )
    match = re.search(r'mix_mode = "(\w+)"', linalg)
    mode = match.group(1) if match else "unknown"
    if (mode != "aiv") != job.cube_vector:
        planned = "cube+vector" if job.cube_vector else "vector-only"
        raise RuntimeError(f"plan mismatch: the plan's footprint is {planned}, the compiler's mix_mode is {mode!r}")
    retried = f"; triton-adapter-opt crashed first ({', '.join(crashes)}), lowered on retry" if crashes else ""
    return f"mix_mode={mode}{retried}"


def compile_one(index: int) -> Result:
    job = _JOBS[index]
    step = _STEPS[job]
    start = time.perf_counter()
    try:
        detail = _compile_ascend(job, step) if job.target == ASCEND_TARGET else _compile_cuda(job, step)
    except Exception as exc:
        name = type(exc).__name__
        message = str(exc)
        if name == "MLIRCompilationError" or message.startswith(("ConvertTritonIRToLinalgIR", "plan mismatch")):
            error = message.splitlines()[0][:300] if message else name
        else:
            error = f"{name}: {_first_error_line(message)}"
        return Result(job, False, time.perf_counter() - start, error)
    return Result(job, True, time.perf_counter() - start, detail=detail)


def run_targets(
    targets: list[str], workers: int, names: tuple[str, ...] = (), extra_modules: tuple[str, ...] = ()
) -> tuple[list[Result], dict[str, str]]:
    import triton

    jobs, _ = enumerate_jobs(targets, names, extra_modules)
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(targets, names, extra_modules)
    ) as pool:
        results = list(pool.map(compile_one, range(len(jobs))))
    versions = {"triton": triton.__version__}
    try:
        from importlib.metadata import version

        versions["triton-ascend"] = version("triton-ascend")
    except Exception:
        pass
    return results, versions


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------
def summary(results: list[Result]) -> list[tuple[str, str, int, int, float]]:
    rows: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in results:
        rows[(r.job.kernel, r.job.target)].append(r)
    return [
        (kernel, target, sum(r.ok for r in rs), sum(not r.ok for r in rs), sum(r.seconds for r in rs))
        for (kernel, target), rs in sorted(rows.items())
    ]


def print_summary(results: list[Result], wall: float) -> None:
    for r in results:
        if not r.ok:
            print(f"FAIL {r.job.target} {r.job.kernel} {r.job.config}: {r.error}")
    print(f"\n{'kernel':<42} {'target':<13} {'ok':>4} {'fail':>4} {'compile s':>9}")
    for kernel, target, ok, bad, secs in summary(results):
        print(f"{kernel:<42} {target:<13} {ok:>4} {bad:>4} {secs:>9.1f}")
    failed = sum(not r.ok for r in results)
    print(f"\n{len(results)} configurations compiled, {failed} failed, {wall:.0f} s wall")


_SUMMARY_ROW = re.compile(r"^\| `([^`]+)` \| ([\w-]+) \| \d+ \| \d+ \| [0-9.]+ \|$")
_DETAIL_ROW = re.compile(r"^\| ([\w-]+) \| `([^`]+)` \| `")


def write_report(
    path: Path, results: list[Result], versions: dict[str, str], wall: float, cache: str, only: tuple[str, ...] = ()
) -> None:
    """The report of ``results``. With ``only`` (spec names) and an existing report at ``path``, that
    report's rows of every other kernel function are kept and its header says what was regenerated."""
    header = [
        f"Compilers: {', '.join(f'{k} {v}' for k, v in sorted(versions.items()))}. Wall time {wall:.0f} s "
        f"with a {cache} Triton cache for the CUDA targets."
    ]
    kept_summary: list[str] = []
    kept_detail: list[str] = []
    if only and path.exists():
        mine = {r.job.kernel for r in results}
        old = path.read_text().splitlines()
        compilers = next((line for line in old if line.startswith("Compilers:")), None)
        header = (
            [line for line in old if line.startswith(("Compilers:", "Regenerated alone:")) and line != compilers]
            if compilers is None
            else [compilers]
        )
        header += [
            line for line in old if line.startswith("Regenerated alone:") and not any(f"`{n}`" in line for n in only)
        ]
        header.append(
            f"Regenerated alone: the launches of {', '.join(f'`{n}`' for n in only)} "
            f"(`--kernels`), {wall:.0f} s wall with a {cache} Triton cache; every other row is from "
            "the run above."
        )
        kept_summary = [line for line in old if (m := _SUMMARY_ROW.match(line)) and m.group(1) not in mine]
        kept_detail = [line for line in old if (m := _DETAIL_ROW.match(line)) and m.group(2) not in mine]
    summary_rows = kept_summary + [f"| `{k}` | {t} | {ok} | {bad} | {s:.1f} |" for k, t, ok, bad, s in summary(results)]
    detail_rows = list(kept_detail)
    for r in results:
        status = f"ok ({r.detail})" if r.ok else f"FAIL: {r.error}"
        detail_rows.append(
            f"| {r.job.target} | `{r.job.kernel}` | `{r.job.config}` | {r.job.dtypes} | "
            f"{r.job.cases} | {status.replace('|', '/')} |"
        )
    lines = [
        "# Compile check: every kernel launch, every target",
        "",
        "Generated by `make compile-check` (`python -m kernelwatch.collect.compile_check`); do not edit by hand.",
        "",
        *[line for h in header for line in (h, "")],
        "| kernel | target | ok | failed | compile s |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += sorted(summary_rows, key=lambda line: _SUMMARY_ROW.match(line).groups())
    lines += [
        "",
        "| target | kernel | configuration [argument types] | dtypes | cases | status |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += sorted(detail_rows, key=lambda line: (*_DETAIL_ROW.match(line).groups(), line))
    path.write_text("\n".join(lines) + "\n")


def _to_json(results: list[Result], versions: dict[str, str]) -> str:
    return json.dumps({"versions": versions, "results": [{**asdict(r), "job": asdict(r.job)} for r in results]})


def _from_json(text: str) -> tuple[list[Result], dict[str, str]]:
    data = json.loads(text)
    results = []
    for r in data["results"]:
        j = r.pop("job")
        fields = {**j, "signature": tuple(map(tuple, j["signature"])), "constexprs": tuple(map(tuple, j["constexprs"]))}
        job = Job(**fields)
        results.append(Result(job, **r))
    return results, data["versions"]


def _ascend_results(
    python: str, workers: int, names: tuple[str, ...] = (), extra_modules: tuple[str, ...] = ()
) -> tuple[list[Result], dict[str, str]]:
    """Run the Ascend part in triton-ascend's own environment and read its results back."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        paths = [str(ROOT), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
        command = [
            python,
            "-m",
            "kernelwatch.collect.compile_check",
            "--targets",
            ASCEND_TARGET,
            "--jobs",
            str(workers),
            "--fresh",
            "--json",
            out.name,
            "--kernels",
            ",".join(names),
            "--extra-kernels",
            ",".join(extra_modules),
        ]
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        text = Path(out.name).read_text()
    if not text:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise SystemExit(
            f"compile-check: the Ascend environment ({python}) could not run the check "
            f"(exit {proc.returncode}): {' | '.join(tail)}"
        )
    return _from_json(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--targets",
        default=",".join(CUDA_TARGETS),
        help=f"comma-separated, of {', '.join((*CUDA_TARGETS, ASCEND_TARGET))}",
    )
    parser.add_argument(
        "--ascend-python",
        default=None,
        help=f"python of triton-ascend's environment: adds {ASCEND_TARGET}, compiled there",
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--report", type=Path, default=None, help="write every configuration and status here (.md)")
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "kernelwatch" / "compile-check")
    parser.add_argument("--fresh", action="store_true", help="compile into an empty cache (a cold run)")
    parser.add_argument(
        "--kernels",
        default="",
        help="comma-separated spec names: compile only their launches "
        "(and, with --report, replace only their rows of an existing report)",
    )
    parser.add_argument("--extra-kernels", default="", help="comma-separated spec modules outside kernelwatch/kernels/")
    parser.add_argument("--list", action="store_true", help="print the launches that would compile, and exit")
    parser.add_argument("--json", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    unknown = [t for t in targets if t not in (*CUDA_TARGETS, ASCEND_TARGET)]
    if unknown:
        parser.error(f"unknown target {unknown[0]!r}")
    names = tuple(n for n in args.kernels.split(",") if n)
    extra = tuple(m for m in args.extra_kernels.split(",") if m)
    try:
        select_specs(names, extra)
    except (ValueError, ImportError) as exc:
        parser.error(str(exc))
    if args.list:
        listed = targets + ([ASCEND_TARGET] if args.ascend_python and ASCEND_TARGET not in targets else [])
        for job in enumerate_jobs(listed, names, extra)[0]:
            print(f"{job.target} {job.module} {job.kernel} {job.config}")
        return 0
    if args.fresh:
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="kw-compile-check-")
    else:
        args.cache_dir.mkdir(parents=True, exist_ok=True)
        os.environ["TRITON_CACHE_DIR"] = str(args.cache_dir)
    cache = "warm" if any(Path(os.environ["TRITON_CACHE_DIR"]).iterdir()) else "cold (empty)"
    start = time.perf_counter()
    results: list[Result] = []
    versions: dict[str, str] = {}
    if targets:
        results, versions = run_targets(targets, args.jobs, names, extra)
    if args.ascend_python:
        more, more_versions = _ascend_results(args.ascend_python, args.jobs, names, extra)
        results += more
        versions.update({f"{k} (Ascend env)": v for k, v in more_versions.items()})
    wall = time.perf_counter() - start
    if args.json:
        args.json.write_text(_to_json(results, versions))
        return 0
    print_summary(results, wall)
    if args.report:
        write_report(args.report, results, versions, wall, cache, only=names)
        print(f"wrote {args.report}")
    return 1 if any(not r.ok for r in results) or not results else 0


if __name__ == "__main__":
    importlib.import_module("kernelwatch.kernels")  # fail here, with its own message, if the kernels do not import
    sys.exit(main())
