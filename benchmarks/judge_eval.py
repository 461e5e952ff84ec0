"""Does the judge (``kernelwatch confirm``) agree with itself, and does it find real slowdowns?

    PYTHONUNBUFFERED=1 python benchmarks/judge_eval.py                         # (a) + (b) on a GPU, ~20 min
    PYTHONUNBUFFERED=1 python benchmarks/judge_eval.py --experiments nightly --against OTHER_RUN.json
    TRITON_INTERPRET=1 python benchmarks/judge_eval.py --device cpu --cases KEY --planted-cases KEY  # smoke

Needs no git history: the trees are directories. ``--tree`` (default: this checkout) is the baseline; the
candidate of (a) is a copy of it (``--same-tree`` to give another tree with identical kernels instead).

* ``aa``: ``confirm_trees`` of the tree against its copy on every perf case of the suite (``--cases`` for a
  subset), ``--chunk`` cases per worker setup, ``--case-seconds`` each. Identical code: every verdict but
  SLOWER and UNKNOWN is right.
* ``spread``: identical code on the ``--planted-cases`` (one per class), 16 rounds each, timed interleaved
  and in two back-to-back blocks per round (how two workers measured before): the sd of the paired log ratio
  per class, before and after (rows with ``order``).
* ``planted``: for each ratio of ``--ratios`` (1.05 and 1.10), a copy of the tree whose kernel API does more
  work on the device in the ``--planted-cases`` (one of every class by default: launch-bound MSELoss,
  memory-bound softmax, mid GEMM, the Llama MLP GEMM, decode, and RMSNorm+MatMul fold_gamma at 1024x8192): a
  spin kernel (``torch.cuda._sleep``) launched on the same stream before the kernel, its length calibrated to
  (ratio - 1) of the case's time (measured by the (a) rounds, or by a short A/A first). Where a sample is a
  graph of 100 calls (launch-bound cases), a spin shorter than a graph node's own cost is not possible, so it
  runs once every ``every`` calls, each spin at least twice that cost. On the CPU, a host spin of that
  length. The code change is ``kernelwatch/kernels/_planted.py`` in the copy and a ``discover`` that wraps
  those cases' kernel calls.
  Every verdict but SLOWER is a miss. ``measured_ratio`` says what the planted change cost as confirm saw it.
* ``nightly``: the workflow's steps on a copy of the tree committed into a scratch git repository with a fixed
  author and date (so every GPU's copy of one tree has the same commit sha): ``collect --trigger nightly``
  (both suites, as the workflow; ``--collect-args`` adds options), ingest
  the committed history (``ci/history``) and ``--against`` run artifacts (another GPU's run of the same tree:
  this script's ``run.json`` from there) into a scratch SQLite database, ``gate --baseline main``, and where
  it exits 1 ``confirm --db`` and ``gate`` again. The job's exit is the last gate's (0: PASS).
  ``collect`` alone makes the first GPU's ``run-<gpu>.json`` for the next GPU's ``--against``.

Rows (``--out``, default ``benchmarks/results/<date>-judge-eval/judge-eval.json``): a list of objects with
``experiment``, ``gpu_uuid``, ``case``, ``planted_ratio``, ``verdict``, ``rounds``, ``seconds``, and
``measured_ratio``, ``low``, ``high``, ``timing``, ``sd_log_ratio`` (the rounds' spread), ``sm_mhz`` (range);
nightly rows also ``exit_code`` (one row per job, case ``*``, and one per confirmed case). A summary table is
printed at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelwatch.collect.confirm import CASE_SECONDS, CaseConfirm, confirm_trees  # noqa: E402

PLANTED_CASES = (
    "mse_loss/persistent/fp32/direction=fwd,reduction=mean,shape=4096",
    "scaled_masked_softmax/masked/fp16/density=0.1,direction=fwd,mask=batch,scale=0.125,shape=32x16x1024x1024",
    "fused_rmsnorm_matmul/fold_gamma/fp16/bias=False,direction=fwd,layout=contiguous,n=4096,shape=4096x4096",
    "fused_rmsnorm_matmul/fold_gamma/bf16/bias=False,direction=fwd,layout=contiguous,n=14336,shape=8192x4096",
    "fused_rmsnorm_matmul/fold_gamma/fp16/bias=False,direction=fwd,layout=contiguous,n=8192,shape=16x8192",
    "fused_rmsnorm_matmul/fold_gamma/bf16/bias=False,direction=fwd,layout=contiguous,n=4096,shape=1024x8192",
)
SKIP = ("ci/history", "benchmarks/results", ".git", ".venv", "node_modules")
FIXED_DATE = "2026-01-01T00:00:00+0000"  # the scratch commit's date: one tree, one sha, on every machine
SPREAD_ROUNDS = 16
DIVISORS = (1, 2, 4, 5, 10, 20, 25, 50, 100)  # a launch-bound case's spin runs every this many calls (of 100)

PLANTED_MODULE = '''"""Planted by benchmarks/judge_eval.py: extra device work before chosen perf cases' kernel calls."""

import dataclasses
import time

import torch

from kernelwatch.kernels.spec import KERNEL_IMPL

DEVICE = {device!r}
EXTRA = {extra!r}  # case key -> [spin cycles (cuda) or host microseconds (cpu), every how many calls]


def _slowed(fn, amount, every):
    count = [0]

    def call():
        count[0] += 1
        if count[0] % every == 0:
            if DEVICE == "cuda":
                torch.cuda._sleep(int(amount))
            else:
                end = time.perf_counter() + amount * 1e-6
                while time.perf_counter() < end:
                    pass
        return fn()

    return call


def plant(specs):
    out = {{}}
    for name, spec in specs.items():

        def implementations(case, inputs, _original=spec.implementations):
            impls = dict(_original(case, inputs))
            if case.key in EXTRA:
                impls[KERNEL_IMPL] = _slowed(impls[KERNEL_IMPL], *EXTRA[case.key])
            return impls

        out[name] = dataclasses.replace(spec, implementations=implementations)
    return out
'''

DISCOVER_PATCH = """

# planted by benchmarks/judge_eval.py
_unplanted_discover = discover


def discover(extra_modules: tuple[str, ...] = ()) -> dict[str, Any]:
    from kernelwatch.kernels._planted import plant

    return plant(_unplanted_discover(extra_modules))
"""


def say(line: str) -> None:
    print(f"[judge-eval {time.strftime('%H:%M:%S')}] {line}", flush=True)


def copy_tree(src: Path, dst: Path) -> Path:
    """``src`` without history, results, environments or caches."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        rel = Path(folder).resolve().relative_to(src.resolve())
        return {n for n in names if (rel / n).as_posix() in SKIP or n in ("__pycache__", ".pytest_cache")}

    shutil.copytree(src, dst, ignore=ignore, symlinks=True)
    return dst


def plant(tree: Path, extra: dict[str, list[float]], device: str) -> None:
    """The code change: ``_planted.py`` beside the kernels and a ``discover`` that applies it."""
    kernels = tree / "kernelwatch" / "kernels"
    (kernels / "_planted.py").write_text(PLANTED_MODULE.format(device=device, extra=extra))
    with (kernels / "__init__.py").open("a") as f:
        f.write(DISCOVER_PATCH)


def spin_calibration() -> tuple[float, float]:
    """(ms per spin launch with 0 cycles inside a graph, spin cycles per ms) on the current CUDA device."""
    import torch

    def per_launch_ms(cycles: int, n: int = 100) -> float:
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            torch.cuda._sleep(cycles)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n):
                torch.cuda._sleep(cycles)
        times = []
        for _ in range(7):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / n)
        return statistics.median(times)

    fixed = per_launch_ms(0)
    cycles = 200_000
    return fixed, cycles / max(per_launch_ms(cycles) - fixed, 1e-6)


def planted_extra(
    case_ms: dict[str, float], timings: dict[str, str], ratio: float, device: str
) -> dict[str, list[float]]:
    """Per case: [cycles or host us, every] so that the spins cost (ratio - 1) of the case's time per call."""
    out: dict[str, list[float]] = {}
    fixed, per_ms = spin_calibration() if device == "cuda" else (0.0, 0.0)
    for key, ms in case_ms.items():
        target_ms = (ratio - 1.0) * ms
        every = 1
        if timings.get(key) == "graph-batch":  # the fewest spins per 100-call graph that outlast a node's cost 2x
            every = next((e for e in DIVISORS if target_ms * e >= 2 * fixed), DIVISORS[-1])
        spin_ms = target_ms * every
        if device == "cuda":
            out[key] = [max(0.0, (spin_ms - fixed) * per_ms), every]
        else:
            out[key] = [spin_ms * 1e3, every]
    return out


def rows_of(experiment: str, results: dict[str, CaseConfirm], gpu: str | None, planted: float) -> list[dict[str, Any]]:
    rows = []
    for r in results.values():
        d = [math.log(c / b) for b, c in zip(r.baseline_ms, r.candidate_ms)]
        clocks = [m for g in r.readings for m in (g.sm_mhz or [])]
        rows.append(
            {
                "experiment": experiment,
                "gpu_uuid": gpu,
                "case": r.case,
                "planted_ratio": planted,
                "verdict": r.verdict + (f" ({r.note})" if r.note else ""),
                "rounds": r.rounds,
                "seconds": round(r.seconds, 3),
                "measured_ratio": r.ratio,
                "low": r.low,
                "high": r.high,
                "timing": r.timing,
                "baseline_ms": statistics.median(r.baseline_ms) if r.baseline_ms else None,
                "sd_log_ratio": statistics.stdev(d) if len(d) > 1 else None,
                "sm_mhz": [min(clocks), max(clocks)] if clocks else None,
                "plans": r.plans,
                "ratios": [round(c / b, 5) for b, c in zip(r.baseline_ms, r.candidate_ms)],
            }
        )
    return rows


def gpu_uuid(device: str) -> str | None:
    if device != "cuda":
        return device
    import torch

    from kernelwatch.collect.metadata import device_uuid

    return device_uuid(torch.cuda.get_device_properties(0))


def perf_cases() -> list[str]:
    from kernelwatch import kernels

    return [c.key for spec in kernels.discover().values() for c in spec.perf_cases()]


def precompile_cases(args: argparse.Namespace, cases: list[str]) -> None:
    """Compile every launch of ``cases`` ahead, as ``collect`` does, into the caches confirm's worker reads: each
    chunk's worker then finds them compiled (cold, each chunk of 8 compiled its own for 30-60 s on an H200)."""
    if args.device != "cuda":
        return
    import torch

    from kernelwatch.collect.pool import host_cpus
    from kernelwatch.collect.precompile import precompile, spare_processes, use_cache_dirs
    from kernelwatch.kernels.device import describe

    dirs = use_cache_dirs()
    started = time.perf_counter()
    try:
        outcome = precompile(
            [("perf", c) for c in cases], describe(torch.device("cuda")), spare_processes(1, host_cpus())
        )
    except Exception as exc:  # the workers compile what this could not
        say(f"precompile failed ({type(exc).__name__}: {exc}); the workers compile")
        return
    say(f"precompile: {outcome.note(dirs.triton)} ({time.perf_counter() - started:.0f} s)")


def run_aa(args: argparse.Namespace, tree: Path, scratch: Path, gpu: str | None) -> list[dict[str, Any]]:
    other = args.same_tree or copy_tree(tree, scratch / "same")
    cases = args.cases or sorted(perf_cases(), key=lambda c: "layers=" in c)  # the long stack cases last
    cases = cases[args.rotate % len(cases) :] + cases[: args.rotate % len(cases)]
    say(f"aa: {len(cases)} case(s), {tree} against {other}")
    precompile_cases(args, cases)
    rows: list[dict[str, Any]] = []
    at = 0
    while at < len(cases):
        chunk = fitting_chunk(args, time.perf_counter() - args.started)
        if chunk == 0:
            say(f"aa: --deadline-s {args.deadline_s:.0f}: no time for cases {at + 1}-{len(cases)}")
            break
        results = confirm_trees(
            tree,
            other,
            cases[at : at + chunk],
            args.device,
            max_rounds=args.max_rounds,
            case_seconds=args.case_seconds,
            progress=lambda line, at=at, n=chunk: say(f"aa [{at + 1}-{min(at + n, len(cases))}/{len(cases)}]: {line}"),
        )
        for row in rows_of("aa", results, gpu, 1.0):
            say(f"aa: {row['verdict']:>10} {row['rounds']:3d} rounds {row['seconds']:6.1f} s  {row['case']}")
            rows.append(row)
        args.checkpoint(rows)
        at += chunk
    return rows


CHUNK_SETUP_S = 30.0  # a chunk's worker: importing torch, loading both trees, building inputs (caches warm)


def fitting_chunk(args: argparse.Namespace, elapsed_s: float) -> int:
    """How many cases the next chunk of aa takes: ``--chunk``, fewer where ``--deadline-s`` would come before
    they could all use their ``--case-seconds`` (a device call cut at its deadline kept no row of the chunk it
    was in); 0 when not even one fits."""
    left = args.deadline_s - elapsed_s - CHUNK_SETUP_S
    if not math.isfinite(left):
        return args.chunk
    return max(0, min(args.chunk, int(left // args.case_seconds)))


def run_planted(
    args: argparse.Namespace, tree: Path, scratch: Path, gpu: str | None, aa: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    cases = list(args.planted_cases or PLANTED_CASES)
    prior = [r for f in args.prior for r in json.loads(f.read_text()) if r["experiment"] == "aa"]
    known = {r["case"]: r for r in [*prior, *aa] if r["baseline_ms"] is not None and r["case"] in cases}
    if len(known) < len(cases):  # the case's time, from a short A/A of its own
        probe = confirm_trees(tree, tree, [c for c in cases if c not in known], args.device, max_rounds=8)
        known.update({r["case"]: r for r in rows_of("probe", probe, gpu, 1.0) if r["baseline_ms"] is not None})
    case_ms = {c: known[c]["baseline_ms"] for c in cases if c in known}
    timings = {c: known[c]["timing"] for c in case_ms}
    rows: list[dict[str, Any]] = []
    for ratio in args.ratios:
        if time.perf_counter() - args.started > args.deadline_s:
            say(f"planted: --deadline-s {args.deadline_s:.0f} passed: x{ratio} not run")
            break
        planted_tree = copy_tree(tree, scratch / f"planted-{ratio}")
        plant(planted_tree, planted_extra(case_ms, timings, ratio, args.device), args.device)
        say(f"planted x{ratio}: {len(case_ms)} case(s)")
        results = confirm_trees(
            tree,
            planted_tree,
            list(case_ms),
            args.device,
            max_rounds=args.max_rounds,
            case_seconds=args.case_seconds,
            chunk=args.chunk,
            progress=lambda line, r=ratio: say(f"planted x{r}: {line}"),
        )
        for row in rows_of("planted", results, gpu, ratio):
            say(f"planted x{ratio}: {row['verdict']:>10} measured {row['measured_ratio']}  {row['case']}")
            rows.append(row)
    return rows


def run_spread(args: argparse.Namespace, tree: Path, scratch: Path, gpu: str | None) -> list[dict[str, Any]]:
    """Identical code, one case of every class, ``SPREAD_ROUNDS`` rounds (no early verdict) each way: both sides'
    calls interleaved (confirm now) and in two back-to-back blocks (confirm before, one process per side): the
    sd of the paired log ratio per class, before and after."""
    other = args.same_tree or copy_tree(tree, scratch / "same-spread")
    cases = list(args.planted_cases or PLANTED_CASES)
    rows: list[dict[str, Any]] = []
    for order in ("interleaved", "blocks"):
        results = confirm_trees(
            tree,
            other,
            cases,
            args.device,
            alpha=1e-12,  # no interval at any look: every case runs all its rounds
            max_rounds=SPREAD_ROUNDS,
            case_seconds=math.inf,
            chunk=args.chunk,
            order=order,
            progress=lambda line, o=order: say(f"spread ({o}): {line}"),
        )
        for row in rows_of("spread", results, gpu, 1.0):
            row["order"] = order
            say(f"spread ({order}): sd of log ratio {row['sd_log_ratio']:.4f}  {row['case']}")
            rows.append(row)
    return rows


def _kw(repo: Path, *argv: str, env: dict[str, str], log: Path | None = None) -> tuple[int, str]:
    """``kernelwatch ARGV`` in ``repo``: (exit status, its output). With ``log`` the output goes there as it is
    written (a device call cut by its deadline keeps what the command had printed), then is read back."""
    if log is None:
        out = subprocess.run(
            [sys.executable, "-m", "kernelwatch", *argv], cwd=repo, env=env, capture_output=True, text=True
        )
        code, text = out.returncode, out.stdout + out.stderr
    else:
        with open(log, "w") as f:
            code = subprocess.run(
                [sys.executable, "-m", "kernelwatch", *argv], cwd=repo, env=env, stdout=f, stderr=subprocess.STDOUT
            ).returncode
        text = log.read_text()
    say(f"kernelwatch {argv[0]}: exit {code}")
    return code, text


def scratch_repo(tree: Path, where: Path) -> Path:
    """``tree`` committed alone into a new git repository on branch main, with a fixed author and date."""
    repo = copy_tree(tree, where)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "judge-eval",
        "GIT_AUTHOR_EMAIL": "judge-eval@example.invalid",
        "GIT_COMMITTER_NAME": "judge-eval",
        "GIT_COMMITTER_EMAIL": "judge-eval@example.invalid",
        "GIT_AUTHOR_DATE": FIXED_DATE,
        "GIT_COMMITTER_DATE": FIXED_DATE,
    }
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "judge-eval tree"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, env=env, capture_output=True)
    return repo


def collect_run(
    args: argparse.Namespace, tree: Path, scratch: Path, gpu: str | None, out: Path
) -> tuple[Path, Path, dict[str, str], float]:
    """The tree collected as the nightly does, in ``--repo`` (a real checkout: its HEAD is the run's commit, and
    ``confirm`` checks the baseline's commit out of it) or else committed into a scratch repository: (repo, the
    run artifact ``run-<gpu>.json.gz`` beside ``--out``, the environment, when it started)."""
    repo = args.repo or scratch_repo(tree, scratch / "nightly")
    site = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(repo), *site]),
        "KERNELWATCH_DB": f"sqlite:///{scratch / 'nightly.db'}",
    }
    started = time.perf_counter()
    run_json = out.parent / f"run-{(gpu or 'device')[:12]}.json.gz"
    code, text = _kw(
        repo,
        "collect",
        "--trigger",
        "nightly",
        "--device",
        args.device,
        "--no-progress",
        "--out",
        str(run_json),
        *args.collect_args,
        env=env,
        log=out.parent / f"collect-{(gpu or 'device')[:12]}.txt",
    )  # fmt: skip  (the log holds KERNELWATCH_TRACE_WALL's lines too)
    if code not in (0, 3):
        raise SystemExit(f"collect failed (exit {code}): {text.strip().splitlines()[-1:]}")
    say(f"collect: the run artifact is {run_json}")
    return repo, run_json, env, started


def run_nightly(args: argparse.Namespace, tree: Path, scratch: Path, gpu: str | None, out: Path) -> list[dict]:
    if args.artifact is None:
        repo, run_json, env, started = collect_run(args, tree, scratch, gpu, out)
    else:  # the steps after collect, for a run collected by an earlier call (its row names where it ran)
        repo, run_json, started = args.repo, args.artifact, time.perf_counter()
        env = {**os.environ, "KERNELWATCH_DB": f"sqlite:///{scratch / 'nightly.db'}"}
    history = sorted((tree / "ci" / "history").glob("*.json*")) if args.history else []
    code, text = _kw(repo, "ingest", *(str(p) for p in [*history, *args.against]), env=env)
    if code != 0:
        say(f"ingest: {text.strip().splitlines()[-3:]}")
    gate = ["gate", "--artifact", str(run_json), "--baseline", "main", "--report-dir", str(scratch / "gate")]
    first, text = _kw(repo, *gate, env=env)
    (out.parent / f"gate1-{(gpu or 'device')[:12]}.txt").write_text(text)
    job, confirm_seconds, confirmed, rows = first, 0.0, None, []
    if first == 1:
        t0 = time.perf_counter()
        confirmed, text = _kw(
            repo, "confirm", "--artifact", str(run_json), "--baseline", "main", "--repo", str(repo),
            "--device", args.device, "--case-seconds", str(args.nightly_case_seconds), env=env,
        )  # fmt: skip
        confirm_seconds = time.perf_counter() - t0
        (out.parent / f"confirm-{(gpu or 'device')[:12]}.txt").write_text(text)
        job, text = _kw(repo, *gate, env=env)
        (out.parent / f"gate2-{(gpu or 'device')[:12]}.txt").write_text(text)
        rows = _confirmed_rows(env["KERNELWATCH_DB"], gpu, job)
    rows.append(
        {
            "experiment": "nightly",
            "gpu_uuid": gpu,
            "case": "*",
            "planted_ratio": 1.0,
            "verdict": "PASS" if job == 0 else "FAIL",
            "rounds": None,
            "seconds": round(time.perf_counter() - started, 1),
            "exit_code": job,
            "first_gate_exit": first,
            "confirm_seconds": round(confirm_seconds, 1),
            "confirm_exit": confirmed,
            "against": [str(p) for p in args.against],
            "run_artifact": str(run_json),
            "collected_on": _collected_on(run_json),
        }
    )
    return rows


def _collected_on(run_json: Path) -> str | None:
    from kernelwatch.store.artifact import load_artifact

    return next((p.device_uuid for p in load_artifact(run_json).perf if p.device_uuid), None)


def _confirmed_rows(url: str, gpu: str | None, job: int) -> list[dict[str, Any]]:
    from sqlalchemy import text

    from kernelwatch.store.engine import open_database

    engine = open_database(url, readonly=True)
    with engine.connect() as conn:
        found = conn.execute(text("SELECT case_key, verdict, rounds, seconds, ratio, low, high FROM confirmation"))
        return [
            {
                "experiment": "nightly",
                "gpu_uuid": gpu,
                "case": r.case_key,
                "planted_ratio": 1.0,
                "verdict": r.verdict,
                "rounds": r.rounds,
                "seconds": r.seconds,
                "measured_ratio": r.ratio,
                "low": r.low,
                "high": r.high,
                "exit_code": job,
            }
            for r in found
        ]


def summary(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| experiment | planted | cases | SLOWER | UNKNOWN | cleared | median s | max s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in rows:
        if r["case"] != "*":
            groups.setdefault((r["experiment"], r["planted_ratio"]), []).append(r)
    for (exp, ratio), got in sorted(groups.items()):
        verdicts = [g["verdict"].split(" ")[0] for g in got]
        secs = [g["seconds"] for g in got]
        cleared = sum(v in ("SAME", "NOT_SLOWER", "FASTER") for v in verdicts)
        lines.append(
            f"| {exp} | {ratio:.2f} | {len(got)} | {verdicts.count('SLOWER')} | {verdicts.count('UNKNOWN')} | "
            f"{cleared} | {statistics.median(secs):.1f} | {max(secs):.1f} |"
        )
    spread = [r for r in rows if r["experiment"] == "spread" and r["sd_log_ratio"] is not None]
    if spread:
        lines += [
            "",
            "| case | sd of paired log ratio, interleaved | the same, two blocks (before) |",
            "|---|---:|---:|",
        ]
        by_case: dict[str, dict[str, float]] = {}
        for r in spread:
            by_case.setdefault(r["case"], {})[r["order"]] = r["sd_log_ratio"]
        for case, sd in by_case.items():
            lines.append(f"| {case} | {sd.get('interleaved', math.nan):.4f} | {sd.get('blocks', math.nan):.4f} |")
    for r in rows:
        if r["case"] == "*":
            lines.append(f"nightly on {r['gpu_uuid']}: job exit {r['exit_code']} ({r['verdict']}), {r['seconds']} s")
    return "\n".join(lines)


def _holds_something(path: Path) -> bool:
    """Whether replacing ``path`` could lose anything: all but a file of no rows (``collect`` writes one)."""
    try:
        return json.loads(path.read_text()) != []
    except (OSError, ValueError):
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", default="aa,planted", help="comma-separated: aa, spread, planted, nightly")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the baseline tree (default: this checkout)")
    parser.add_argument("--same-tree", type=Path, default=None, help="(a)'s candidate (default: a copy of --tree)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--cases", nargs="*", default=None, help="(a)'s cases (default: every perf case)")
    parser.add_argument("--planted-cases", nargs="*", default=None, help="(b)'s cases (default: one per class)")
    parser.add_argument("--ratios", type=float, nargs="*", default=[1.05, 1.10])
    parser.add_argument(
        "--case-seconds", type=float, default=CASE_SECONDS, help="as confirm's default (settled cases stop sooner)"
    )
    parser.add_argument("--max-rounds", type=int, default=96)
    parser.add_argument("--chunk", type=int, default=8, help="cases per worker setup")
    parser.add_argument(
        "--against", type=Path, nargs="*", default=[], help="more run artifacts for the nightly's db (other GPUs')"
    )
    parser.add_argument(
        "--artifact", type=Path, default=None, help="the nightly without collect: gate and confirm this run"
    )
    parser.add_argument(
        "--repo", type=Path, default=None, help="the nightly in this git checkout as it is (also the tree)"
    )
    parser.add_argument(
        "--prior", type=Path, nargs="*", default=[], help="judge-eval.json of an earlier call: its aa rows time (b)"
    )
    parser.add_argument("--rotate", type=int, default=0, help="aa starts at this case (another GPU, another start)")
    parser.add_argument(
        "--deadline-s", type=float, default=math.inf, help="start no chunk of aa or planted after this many seconds"
    )
    parser.add_argument("--no-history", dest="history", action="store_false", help="no ci/history in the db")
    parser.add_argument("--nightly-case-seconds", type=float, default=20.0)
    parser.add_argument(
        "--collect-args", type=shlex.split, default=[], help='more collect options in one string ("--suite perf")'
    )
    parser.add_argument("--out", type=Path, default=None, help="the rows (an existing file is never overwritten)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    experiments = [e for e in args.experiments.split(",") if e]
    bad = [e for e in experiments if e not in ("aa", "spread", "planted", "collect", "nightly")]
    if bad:
        parser.error(f"unknown experiment(s) {bad}: choose aa, spread, planted, collect, nightly")
    for name in ("deadline_s", "case_seconds"):
        value = getattr(args, name)
        if math.isnan(value) or value <= 0:
            parser.error(f"--{name.replace('_', '-')} {value:g}: give a positive number of seconds")
    for path in [args.tree, *([args.same_tree] if args.same_tree else [])]:
        if not (path / "kernelwatch" / "kernels" / "__init__.py").is_file():
            parser.error(f"{path} holds no kernelwatch/kernels package")
    if args.repo is not None:
        if not (args.repo / ".git").exists():
            parser.error(f"--repo {args.repo}: not a git checkout")
        args.repo = args.repo.resolve()
        args.tree = args.repo
    if args.artifact is not None and args.repo is None:
        parser.error("--artifact needs --repo (the checkout of the run's commit, for confirm)")
    for path in [*args.against, *([args.artifact] if args.artifact else [])]:
        if not path.is_file():
            parser.error(f"--against {path}: no such file")
    out = args.out or ROOT / "benchmarks" / "results" / f"{dt.date.today().isoformat()}-judge-eval" / "judge-eval.json"
    out = out.resolve()  # the nightly's commands run in a scratch repository
    if out.exists() and not args.overwrite and _holds_something(out):  # a smoke run replaced a session's GPU rows
        parser.error(f"--out {out} exists: give another --out, or --overwrite to replace its rows")
    args.against = [p.resolve() for p in args.against]
    args.artifact = args.artifact.resolve() if args.artifact else None
    args.tree = args.tree.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    gpu = gpu_uuid(args.device)
    rows: list[dict[str, Any]] = []
    started = args.started = time.perf_counter()
    args.checkpoint = lambda more: out.write_text(json.dumps(rows + more, indent=1))  # a timeout keeps what ran
    with tempfile.TemporaryDirectory(prefix="kw-judge-eval-") as tmp:
        scratch = Path(tmp)
        for experiment in experiments:  # in the order given
            if experiment == "aa":
                rows += run_aa(args, args.tree, scratch, gpu)
            elif experiment == "spread":
                rows += run_spread(args, args.tree, scratch, gpu)
            elif experiment == "planted":
                rows += run_planted(args, args.tree, scratch, gpu, [r for r in rows if r["experiment"] == "aa"])
            elif experiment == "collect":  # a run of this tree for another GPU's nightly to gate against
                collect_run(args, args.tree, scratch, gpu, out)
            else:
                rows += run_nightly(args, args.tree, scratch, gpu, out)
            out.write_text(json.dumps(rows, indent=1))
    out.write_text(json.dumps(rows, indent=1))
    say(f"{len(rows)} rows in {out}, {time.perf_counter() - started:.0f} s")
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
