"""Accuracy: error budgets across commits and hardware; failing cases with their errors."""

import pandas as pd
import streamlit as st

from dashboard import charts, common
from db import queries

eng, params = common.start("Accuracy drift")
kernel = common.pick_kernel(eng, params)
fp = common.pick_hardware(eng, params)
runs = queries.recent_runs(eng, fp, params.integer("last", 30, 2, 500), kernel)
rows = queries.accuracy_rows(eng, [r["id"] for r in runs], kernel)
if rows:
    frame = pd.DataFrame(rows)
    info = {r["id"]: r for r in runs}
    frame["order"] = frame["run_id"].map({r["id"]: i for i, r in enumerate(runs)})
    frame["commit"] = frame["run_id"].map(lambda i: info[i]["commit"])
    frame["synthetic"] = frame["run_id"].map(lambda i: info[i]["synthetic"])
    dtypes = sorted(frame["dtype"].unique())
    dtype = st.selectbox("dtype", dtypes, index=dtypes.index(params.choice("dtype", dtypes, dtypes[0])), key="dtype")
    sub = frame[(frame["dtype"] == dtype) & frame["error_budget"].notna()]
    st.plotly_chart(charts.budget_history(sub, f"{kernel} {dtype}: error budget per case"), key="budget")
else:
    dtype = None
    st.info(f"No accuracy results for {kernel} on this hardware.")
latest = queries.latest_complete_runs(eng)
cells = []
for run in latest:
    for r in queries.accuracy_rows(eng, [run["id"]]):
        cells.append({"row": f"{r['kernel']} {r['dtype']}", "hardware": run["hardware"],
                      "budget": r["error_budget"] if r["passed"] or r["error_budget"] is not None else 1e9})
if cells:
    heat = pd.DataFrame(cells).pivot_table(index="row", columns="hardware", values="budget", aggfunc="max")
    st.plotly_chart(charts.budget_heatmap(heat, "worst error budget, latest run per hardware"), key="heat")
failing = [r for run in latest for r in queries.accuracy_rows(eng, [run["id"]]) if not r["passed"]]
st.subheader(f"Failing cases in the latest runs: {len(failing)}")
if failing:
    st.dataframe([{k: r[k] for k in ("case", "max_abs_err", "max_rel_err", "error_budget", "nan_mismatches", "error")}
                  for r in failing], hide_index=True)
common.finish(params, {"kernel": kernel, "hardware": fp, "dtype": dtype})
