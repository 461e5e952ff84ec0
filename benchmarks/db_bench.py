"""Database benchmark: ingest speed and the two hot queries at 1,000,000 perf results.

    python benchmarks/db_bench.py [--pg URL] [--rows 1000000] [--keep DIR]

Targets (docs/design.md): one run of 600 results ingests in < 0.3 s on SQLite; with 1M perf results,
"history of one case on one hardware" and "latest complete run per hardware" each < 50 ms, on
SQLite and on PostgreSQL. The history is synthetic (labelled so in the database).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, select

from kernelwatch.store.artifact import dumps, parse_artifact
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.models import PerfResult
from kernelwatch.store.queries import case_history, latest_complete_runs
from kernelwatch.store.synthetic import SyntheticHistory


def _timed(fn, repeat: int = 15) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def ingest_600(url: str) -> float:
    engine = open_database(url)
    history = SyntheticHistory(runs=6, cases=150, samples=100, seed=42)  # 150 x 3 perf + 150 accuracy = 600
    docs = [parse_artifact(dumps(d)) for d in history.documents()]
    times = []
    for i, doc in enumerate(docs):
        start = time.perf_counter()
        ingest_documents(engine, [(str(i), doc)])
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) * 1e3


def fill(url: str, rows: int) -> tuple[str, str]:
    """Fill a database with ``rows`` perf results (2 hardware); returns (case key, fingerprint)."""
    engine = open_database(url)
    cases = 125
    runs = max(1, rows // (cases * 3 * 2))
    history = SyntheticHistory(runs=runs, cases=cases, hardware=2, samples=20, seed=7)
    with engine.connect() as conn:
        have = conn.execute(select(func.count()).select_from(PerfResult)).scalar_one()
    if have < rows:
        start = time.perf_counter()
        batch = []
        for i, doc in enumerate(history.documents()):
            batch.append((str(i), doc))
            if len(batch) == 50:
                ingest_documents(engine, batch)
                batch = []
        ingest_documents(engine, batch)
        print(f"  filled {url.split('@')[-1]} in {time.perf_counter() - start:.0f} s", flush=True)
    fp = latest_complete_runs(engine)[0]["fingerprint"]
    return history.case_list()[17]["key"], fp


def queries(url: str, rows: int) -> tuple[int, float, float, int]:
    key, fp = fill(url, rows)
    engine = open_database(url, readonly=url.startswith("sqlite"))
    with engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(PerfResult)).scalar_one()
    n_hist = len(case_history(engine, key, fp))
    t_hist = _timed(lambda: case_history(engine, key, fp))
    t_latest = _timed(lambda: latest_complete_runs(engine))
    return total, t_hist, t_latest, n_hist


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg", default=None, help="PostgreSQL URL to benchmark as well")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keep", default=None, help="folder to keep the SQLite database in between runs")
    args = parser.parse_args()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="kw-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    results = []
    t600 = ingest_600(f"sqlite:///{folder / 'ingest.db'}")
    (folder / "ingest.db").unlink()
    results.append(("sqlite", "ingest one run of 600 results", t600, 300.0, ""))
    if args.pg:
        results.append(("postgresql", "ingest one run of 600 results", ingest_600(args.pg), None, ""))
    targets = [("sqlite", f"sqlite:///{folder / f'big-{args.rows}.db'}")]
    if args.pg:
        targets.append(("postgresql", args.pg))
    for name, url in targets:
        total, t_hist, t_latest, n_hist = queries(url, args.rows)
        results.append(
            (name, f"history of one case on one hardware ({n_hist} points)", t_hist, 50.0, f"{total:,} perf results")
        )
        results.append((name, "latest complete run per hardware", t_latest, 50.0, f"{total:,} perf results"))
    print(f"\n{'database':<11} {'operation':<52} {'median ms':>10} {'target ms':>10}  {'met':<4} notes")
    for db, op, ms, target, notes in results:
        met = "-" if target is None else ("yes" if ms < target else "NO")
        tgt = "-" if target is None else f"{target:g}"
        print(f"{db:<11} {op:<52} {ms:>10.2f} {tgt:>10}  {met:<4} {notes}")


if __name__ == "__main__":
    main()
