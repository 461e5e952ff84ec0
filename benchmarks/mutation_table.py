"""Break the statistics on purpose and show which tests catch each break.

    python benchmarks/mutation_table.py [--only NAME]

Each mutation replaces one exact piece of source text in a scratch copy of the repository, runs the
tests that pin that code (tests/test_detect.py, tests/test_perf.py) there, and lists the tests that
failed. A mutation no test catches is a hole in the tests: the script then exits 1. A run without any
mutation must pass first (exit 2 otherwise). tests/test_mutations.py checks that every pattern below
still occurs exactly once in the source, so a refactor cannot silently turn a mutation into a no-op.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ("tests/test_detect.py", "tests/test_perf.py")
COPY = ("kernelwatch", "tests", "pyproject.toml")


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str


MUTATIONS = (
    Mutation(
        "drop Benjamini-Hochberg",
        "kernelwatch/gate/detect.py",
        "return [bool(a <= q) for a in adjusted]",
        "return [bool(p <= q) for p in pvalues]",
    ),
    Mutation(
        "ignore the history",
        "kernelwatch/gate/detect.py",
        "hist = [h for h in (history or []) if h and h > 0]",
        "hist = []",
    ),
    Mutation(
        "min instead of max p-value",
        "kernelwatch/gate/detect.py",
        "p_between,\n        max(p_within, p_between),",
        "p_between,\n        min(p_within, p_between),",
    ),
    Mutation(
        "no outlier clipping",
        "kernelwatch/gate/detect.py",
        "c1 = np.cumsum(_clip_outliers(seg))",
        "c1 = np.cumsum(seg)",
    ),
    Mutation(
        "within-run p forced to 0",
        "kernelwatch/gate/detect.py",
        'p_within = float(stats.mannwhitneyu(cand, base, alternative="greater").pvalue)',
        "p_within = 0.0",
    ),
    Mutation("ratio inverted", "kernelwatch/gate/detect.py", "ratio = t_cand / t_base", "ratio = t_base / t_cand"),
    Mutation(
        "no between-GPU term",
        "kernelwatch/gate/detect.py",
        "p_between = max(p_between, float(stats.norm.sf(d / math.hypot(sigma, machine))))",
        "pass",
    ),
    Mutation(
        "contamination ignores p20", "kernelwatch/gate/detect.py", "math.log(p20_c / p20_b) < STAY_SHARE * m", "True"
    ),
    Mutation(
        "quantile off by one",
        "kernelwatch/collect/perf.py",
        "pos = q * (len(sorted_samples) - 1)",
        "pos = q * len(sorted_samples)",
    ),
    Mutation(
        "% of peak from the wrong byte count",
        "kernelwatch/collect/perf.py",
        "floor_s = max(\n        nbytes / (peak_gbps * 1e9)",
        "floor_s = max(\n        nbytes / 2 / (peak_gbps * 1e9)",
    ),
    Mutation(
        "speedup inverted",
        "kernelwatch/collect/perf.py",
        'row["speedup_vs_eager"] = eager / t if eager',
        'row["speedup_vs_eager"] = t / eager if eager',
    ),
    Mutation(
        "target ratio inverted",
        "kernelwatch/kernels/spec.py",
        "else other / kernel >= factor",
        "else kernel / other >= factor",
    ),
)


def apply(root: Path, m: Mutation) -> None:
    path = root / m.path
    text = path.read_text()
    count = text.count(m.old)
    if count != 1:
        raise SystemExit(f"mutation {m.name!r}: pattern found {count} times in {m.path} (expected once)")
    path.write_text(text.replace(m.old, m.new))


def run_tests(root: Path) -> tuple[int, list[str]]:
    """(pytest exit status, ids of the tests that failed or errored) in the scratch copy ``root``."""
    report = root / "junit.xml"
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            "--rootdir",
            str(root),
            *TESTS,
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    failed = []
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(f"{Path(case.get('classname', '').replace('.', '/')).name}::{case.get('name')}")
    return out.returncode, failed


def scratch_copy() -> Path:
    root = Path(tempfile.mkdtemp(prefix="kw-mutation-"))
    for name in COPY:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__", "history"))
        else:
            shutil.copy2(src, root / name)
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=None, help="run only mutations whose name contains this text")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or args.only in m.name]
    root = scratch_copy()
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import kernelwatch.gate.detect; print(kernelwatch.gate.detect.__file__)"],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
            capture_output=True,
            text=True,
        )
        if not probe.stdout.startswith(str(root)):
            print(f"the scratch copy is not what Python imports ({probe.stdout.strip()})", file=sys.stderr)
            return 2
        status, failed = run_tests(root)
        if status != 0:
            print(f"the tests fail without any mutation: {failed}", file=sys.stderr)
            return 2
        rows = []
        for m in chosen:
            original = (root / m.path).read_text()
            apply(root, m)
            try:
                status, failed = run_tests(root)
            finally:
                (root / m.path).write_text(original)
            rows.append((m, failed))
            print(f"{m.name}: {len(failed)} failing", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    width = max(len(m.name) for m, _ in rows)
    print(f"{'mutation':<{width}}  caught by (failing tests in {', '.join(TESTS)})")
    for m, failed in rows:
        names = ", ".join(re.sub(r"^test_(detect|perf)::", "", f) for f in failed) or "NOT CAUGHT"
        print(f"{m.name:<{width}}  {names}")
    missed = [m.name for m, failed in rows if not failed]
    print(f"\n{len(rows) - len(missed)} of {len(rows)} mutations caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
