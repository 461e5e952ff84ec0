"""A full `kernelwatch collect` timed cold (empty compiler caches) and then warm (the same caches).

    python benchmarks/collect_time.py --out-dir DIR [--cache-dir DIR] [--runs cold,warm] [-- COLLECT ARGS...]

Each run is ``python -m kernelwatch collect --out DIR/<run>.json.gz --no-progress COLLECT ARGS`` with
``KERNELWATCH_CACHE_DIR`` set to the cache folder (Triton's and TorchInductor's caches both in it:
``kernelwatch.collect.precompile.cache_dirs``; default a fresh temporary folder, never inside DIR). ``cold`` needs
that folder empty or absent (it is never emptied here); ``warm`` reuses what the previous run left. The runs
can be split over two invocations with the same ``--cache-dir`` (each under a 10-minute limit); ``--runs warm``
alone needs ``--cache-dir``. For each run: the
collector's own time summary (stderr, as printed), the wall clock measured here, and the run's notes on the
Triton cache; at the end one table of both runs' phases (``run.phases_s``), also written to
``DIR/collect_time.md``. Extra collect arguments follow ``--`` (``--profile``, ``--devices all``, ``--kernels``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("cold", "warm")
SHOWN = (
    "setup",
    "workers",
    "precompile",
    "precompile.compile",
    "suites",
    "profiling",
    "stop",
    "journal",
    "total",
    "worker.accuracy",
    "worker.perf.inputs",
    "worker.perf.warmup",
    "worker.perf.timing",
    "worker.perf.call",
    "worker.perf.memory",
)


def _run(name: str, out_dir: Path, cache: Path, extra: list[str]) -> dict:
    out = out_dir / f"{name}.json.gz"
    env = {
        **os.environ,
        "KERNELWATCH_CACHE_DIR": str(cache),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
    }
    for var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):  # the run's caches are KERNELWATCH_CACHE_DIR's
        env.pop(var, None)
    command = [sys.executable, "-m", "kernelwatch", "collect", "--out", str(out), "--no-progress", *extra]
    print(f"== {name}: {' '.join(command[1:])} (KERNELWATCH_CACHE_DIR={cache})", flush=True)
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    (out_dir / f"{name}.log").write_text(proc.stdout + proc.stderr)
    print(proc.stdout.strip())
    print(proc.stderr.strip()[-6000:])
    print(f"== {name}: exit {proc.returncode}, {wall:.1f} s wall", flush=True)
    if proc.returncode not in (0, 3) or not out.exists():
        raise SystemExit(f"collect_time: the {name} run failed (exit {proc.returncode}); see {out_dir / name}.log")
    with gzip.open(out, "rt") as f:
        run = json.load(f)["run"]
    notes = run.get("notes") or ""
    cache_notes = [n for n in notes.split("; ") if n.startswith(("Triton cache", "kernel compilations", "precompile"))]
    return {
        "name": name,
        "wall_s": wall,
        "status": run["status"],
        "phases": run.get("phases_s") or {},
        "cache_notes": cache_notes,
    }


def _table(results: list[dict]) -> str:
    lines = [
        "| phase (s) | " + " | ".join(r["name"] for r in results) + " |",
        "| --- | " + " | ".join("---:" for _ in results) + " |",
        "| wall clock, measured here | " + " | ".join(f"{r['wall_s']:.1f}" for r in results) + " |",
    ]
    keys = [k for k in SHOWN if any(k in r["phases"] for r in results)]
    keys += sorted({k for r in results for k in r["phases"] if re.match(r"(busy|idle)\.", k)})
    for key in keys:
        cells = [f"{r['phases'][key]:.1f}" if key in r["phases"] else "" for r in results]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    for r in results:
        lines += [f"\n{r['name']} ({r['status']}): {note}" for note in r["cache_notes"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, required=True, help="artifacts, logs and collect_time.md go here")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="the compiler caches (default: a fresh temporary folder); a cold run needs it empty",
    )
    parser.add_argument("--runs", default="cold,warm", help="comma-separated, in order: cold, warm")
    args = parser.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    if not runs or any(r not in RUNS for r in runs):
        parser.error(f"--runs takes cold and/or warm, got {args.runs!r}")
    if args.cache_dir is None and runs[0] != "cold":
        parser.error("--runs warm reuses a cache: name it with --cache-dir")
    cache = (args.cache_dir or Path(tempfile.mkdtemp(prefix="kw-collect-time-"))).absolute()
    if "cold" in runs and cache.exists() and any(cache.iterdir()):
        parser.error(f"--cache-dir {cache} is not empty: a cold run needs a fresh folder")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    results = [_run(name, args.out_dir, cache, extra) for name in runs]
    table = _table(results)
    print(table)
    (args.out_dir / "collect_time.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
