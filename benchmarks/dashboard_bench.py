"""Server-side render time of every dashboard page (AppTest), against a large synthetic database.

    python benchmarks/dashboard_bench.py --db sqlite:////tmp/kwbench/big-1000000.db [--pg URL]

Build the database with benchmarks/db_bench.py first (1,000,000 perf results). Target (issue 6):
every page renders in < 1 s with 1M perf results, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

VIEWS = Path(__file__).resolve().parents[1] / "dashboard" / "views"
PAGES = ("overview", "performance", "roofline", "profiler", "accuracy", "compare")


def render_times(url: str, repeat: int = 3) -> dict[str, float]:
    import streamlit as st

    os.environ["KERNELWATCH_DB"] = url
    st.cache_resource.clear()
    out = {}
    for page in PAGES:
        times = []
        for _ in range(repeat + 1):
            at = AppTest.from_file(str(VIEWS / f"{page}.py"), default_timeout=300)
            start = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - start)
            if at.exception:
                raise RuntimeError(f"{page}: {at.exception[0].value}")
        out[page] = statistics.median(times[1:])  # the first run opens the engine
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", required=True)
    parser.add_argument("--pg", default=None)
    args = parser.parse_args()
    targets = [("sqlite", args.db)] + ([("postgresql", args.pg)] if args.pg else [])
    results = {name: render_times(url) for name, url in targets}
    print(f"\n{'page':<12} " + " ".join(f"{n + ' s':>14}" for n in results) + "  target")
    for page in PAGES:
        cells = " ".join(f"{results[n][page]:>14.3f}" for n in results)
        ok = all(results[n][page] < 1.0 for n in results)
        print(f"{page:<12} {cells}  < 1 s {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
