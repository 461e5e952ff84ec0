"""The gate's verdicts on the committed history, recorded once (tests/data/gate-golden.json.gz) and recomputed by
tests/test_gate_golden.py: a change to the gate that moves any verdict on a real run names the run and the case.

Every run of ``ci/history/`` is ingested into one SQLite database and judged as the workflows judge it
(``kernelwatch gate --candidate ID --baseline main``): the checked-out specs' case set and tolerances, the
metric given, nothing carried over (what git says of a kernel's sources depends on the checkout, not the code).
Recorded per run: the exit code, the verdict, why it is undecided, the baseline run, the kernels carried and cases
retired and faster; per case: its status, its effect (6 decimals) and its same-run reference.

Regenerate (on purpose, saying in the commit which verdicts moved and why):
    PYTHONPATH=$PWD python -m tests.golden --write
"""

from __future__ import annotations

import argparse
import atexit
import functools
import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "gate-golden.json.gz"  # 2 MB of JSON; gzip: 1/10
HISTORY = ROOT / "ci" / "history"
BASELINE = "main"  # ci/workflows/nightly-nvidia.yml: kernelwatch gate ... --baseline main
METRICS = ("gpu", "call")


@functools.lru_cache(maxsize=1)
def history_db() -> str:
    """A SQLite database holding every committed run (what `kernelwatch ingest ci/history/*.json.gz` stores), once
    per process."""
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.ingest import ingest_documents, load_files

    folder = Path(tempfile.mkdtemp(prefix="kw-golden-"))
    atexit.register(shutil.rmtree, folder, True)
    url = f"sqlite:///{folder / 'history.db'}"
    engine = open_database(url)
    ingest_documents(engine, load_files(tuple(sorted(HISTORY.glob("*.json.gz")))))
    engine.dispose()
    return url


def _result(result: Any) -> dict[str, Any]:
    cases = {
        f"{v.suite}:{v.case}": [v.status, None if v.effect is None else round(v.effect, 6), v.reference]
        for v in result.verdicts
    }
    return {
        "exit": result.exit_code,
        "verdict": result.verdict,
        "undecided": result.undecided,
        "baseline": result.baseline["id"],
        "carried": sorted(result.carried),
        "retired": sorted(result.retired),
        "faster": sorted(result.faster),
        "cases": dict(sorted(cases.items())),
    }


def verdicts(metric: str) -> dict[str, dict[str, Any]]:
    """Run id -> the gate's decision on it (see the module's docstring); a run it cannot decide: exit 2 and why."""
    from kernelwatch.gate.judge import GateUndecided, SpecCases, decide
    from kernelwatch.kernels import discover
    from kernelwatch.kernels.spec import case_facts, case_kernels, tolerances
    from kernelwatch.store import queries
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.export import export_run

    specs = discover()
    defined, tol = SpecCases(case_kernels(specs), facts=case_facts(specs)), tolerances(specs)
    engine = open_database(history_db(), readonly=True)
    out: dict[str, dict[str, Any]] = {}
    try:
        for run in sorted(queries.list_runs(engine, limit=10_000), key=lambda r: r["id"]):
            doc = export_run(engine, run["id"])
            try:
                result = decide(engine, doc, BASELINE, metric=metric, tolerances=tol, specs=defined)
            except GateUndecided as exc:
                out[run["id"]] = {"exit": 2, "verdict": "UNDECIDED", "undecided": str(exc)}
                continue
            out[run["id"]] = _result(result)
    finally:
        engine.dispose()
    return out


def everything() -> dict[str, dict[str, dict[str, Any]]]:
    return {metric: verdicts(metric) for metric in METRICS}


def _reason(why: Any) -> Any:
    """Why a run is undecided, less what follows its first colon (the runs searched: it names the newest run of the
    history, which a new committed run changes)."""
    return why.split(":", 1)[0] if isinstance(why, str) else why


def differences(golden: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """One line per difference: a run or case gained, lost or judged otherwise (empty: none). A run added to
    ci/history is one ("new run": record its verdicts with --write, saying so)."""
    out = []
    for metric in sorted(set(golden) | set(now)):
        was, new = golden.get(metric, {}), now.get(metric, {})
        for run in sorted(set(was) | set(new)):
            if run not in new or run not in was:
                out.append(f"{metric} {run}: {'gone' if run not in new else 'new'} run")
                continue
            a, b = was[run], new[run]
            for key in sorted((set(a) | set(b)) - {"cases"}):
                same = _reason(a.get(key)) == _reason(b.get(key)) if key == "undecided" else a.get(key) == b.get(key)
                if not same:
                    out.append(f"{metric} {run}: {key} {a.get(key)!r} -> {b.get(key)!r}")
            ca, cb = a.get("cases", {}), b.get("cases", {})
            for case in sorted(set(ca) | set(cb)):
                if ca.get(case) != cb.get(case):
                    out.append(f"{metric} {run} {case}: {ca.get(case)} -> {cb.get(case)}")
    return out


def load() -> dict[str, Any]:
    """The recorded verdicts."""
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {GOLDEN.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    now = everything()
    if args.write:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(now, indent=0, sort_keys=True) + "\n"
        GOLDEN.write_bytes(gzip.compress(text.encode(), mtime=0))  # mtime 0: the same verdicts, the same bytes
        print(f"wrote {GOLDEN.relative_to(ROOT)}: {sum(len(v) for v in now.values())} gated runs")
        return 0
    diff = differences(load(), now)
    print("\n".join(diff) or "no verdict changed")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
