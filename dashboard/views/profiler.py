"""Profiler: counters per case across commits, against the design documents' ideal bands."""

import pandas as pd
import streamlit as st

from dashboard import charts, common
from db import queries

eng, params = common.start("Profiler counters across commits")
kernel = common.pick_kernel(eng, params)
fp = common.pick_hardware(eng, params)
runs = queries.recent_runs(eng, fp, params.integer("last", 50, 2, 500), kernel)
rows = queries.profiler_rows(eng, [r["id"] for r in runs], kernel)
st.caption("Ideals follow what bounds the kernel. Memory-bound (vector) kernels: Ascend mte2 > 80%, mte3 < 1% "
           "(reductions), vec < 30%, vec_wait < 40% (MSELoss design document); CUDA DRAM throughput > 80%. "
           "Compute-bound (cube) kernels: Ascend aic_cube_ratio > 80%, CUDA SM throughput > 80%. "
           "Each stored counter carries the ideal it was judged by.")
if not rows:
    st.info(f"No profiler counters for {kernel} on this hardware yet: run `kernelwatch collect --profile`.")
else:
    frame = pd.DataFrame(rows)
    order = {r["id"]: i for i, r in enumerate(runs)}
    commits = {r["id"]: r["commit"] for r in runs}
    frame["order"] = frame["run_id"].map(order)
    frame["commit"] = frame["run_id"].map(commits)
    frame["synthetic"] = frame["run_id"].map({r["id"]: r["synthetic"] for r in runs})
    errors = frame[frame["error"].notna() & frame["value"].isna()]
    metrics = sorted(frame.loc[frame["value"].notna(), "name"].unique())
    metric = st.selectbox("Metric", metrics, index=metrics.index(params.choice("metric", metrics, metrics[0]))
                          if metrics else 0, key="metric") if metrics else None
    if metric:
        sub = frame[(frame["name"] == metric) & frame["value"].notna()]
        ideal = sub["ideal"].dropna().iloc[0] if sub["ideal"].notna().any() else None
        st.plotly_chart(charts.metric_history(sub, metric, ideal, f"{kernel}: {metric}"), key="metric-chart")
        latest = sub[sub["order"] == sub["order"].max()][["case", "value", "unit", "ideal", "meets_ideal"]]
        st.dataframe(latest, hide_index=True)
    if not errors.empty:
        st.write("Cases whose counters could not be read:")
        st.dataframe(errors[["case", "name", "error"]].drop_duplicates(), hide_index=True)
common.finish(params, {"kernel": kernel, "hardware": fp, "metric": metric if rows else None})
