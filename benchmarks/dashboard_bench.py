"""Server-side render time of every dashboard page (AppTest), against a large synthetic database.

    python benchmarks/dashboard_bench.py --db sqlite:////tmp/kwbench/big-1000000.db [--pg URL]

Build the database with benchmarks/db_bench.py first (1,000,000 perf results, 2 hardware x 1,333 runs x
125 cases x 3 implementations). Target (docs/design.md): every page renders in < 1 s with 1M perf results.

Two numbers per page: "cold" is a render right after the cached results are dropped
(``st.cache_data.clear()``; the engine stays open and the modules imported, as in a server that has
served a page before), "warm" the median of the following renders (what the next visitor of the same
view waits). Triage caches the gate's verdicts per (candidate, baseline, acks) and Overview its summary
per newest run: stored runs never change, so only a new run makes the next visitor wait for "cold".
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

VIEWS = Path(__file__).resolve().parents[1] / "kernelwatch" / "dashboard" / "views"
PAGES = ("triage", "case", "overview", "performance", "accuracy", "compare", "roofline", "profiler")


def _query(url: str, page: str) -> dict[str, str]:
    """A view worth timing: the case page on a case with 1,333 runs of history."""
    if page != "case":
        return {}
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.queries import latest_runs, perf_rows

    engine = open_database(url, readonly=True)
    run = latest_runs(engine)[0]
    case = sorted(r["case"] for r in perf_rows(engine, [run["id"]], implementations=("triton",)))[17]
    return {"case": case, "hardware": run["fingerprint"]}


def _render(page: str, query: dict[str, str]) -> float:
    at = AppTest.from_file(str(VIEWS / f"{page}.py"), default_timeout=300)
    for key, value in query.items():
        at.query_params[key] = value
    start = time.perf_counter()
    at.run()
    took = time.perf_counter() - start
    if at.exception:
        raise RuntimeError(f"{page}: {at.exception[0].value}")
    return took


def render_times(url: str, repeat: int = 3) -> dict[str, tuple[float, float]]:
    """page -> (cold seconds, warm seconds)."""
    import streamlit as st

    os.environ["KERNELWATCH_DB"] = url
    st.cache_resource.clear()
    _render("overview", {})  # opens the engine once, as a running server has
    out = {}
    for page in PAGES:
        query = _query(url, page)
        _render(page, query)  # imports and first-use costs of this page's modules
        st.cache_data.clear()
        cold = _render(page, query)
        warm = statistics.median(_render(page, query) for _ in range(repeat))
        out[page] = (cold, warm)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", required=True)
    parser.add_argument("--pg", default=None)
    args = parser.parse_args()
    targets = [("sqlite", args.db)] + ([("postgresql", args.pg)] if args.pg else [])
    results = {name: render_times(url) for name, url in targets}
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.models import PerfResult

    with open_database(args.db, readonly=True).connect() as conn:
        from sqlalchemy import func, select

        total = conn.execute(select(func.count()).select_from(PerfResult)).scalar_one()
    print(f"\n{total:,} perf results; seconds per render (AppTest, server side)")
    head = " ".join(f"{n + ' cold':>16} {n + ' warm':>16}" for n in results)
    print(f"{'page':<12} {head}  target < 1 s")
    for page in PAGES:
        cells = " ".join(f"{results[n][page][0]:>16.3f} {results[n][page][1]:>16.3f}" for n in results)
        cold_ok = all(results[n][page][0] < 1.0 for n in results)
        warm_ok = all(results[n][page][1] < 1.0 for n in results)
        verdict = "met" if cold_ok else ("met warm, MISSED cold" if warm_ok else "MISSED")
        print(f"{page:<12} {cells}  {verdict}")


if __name__ == "__main__":
    main()
