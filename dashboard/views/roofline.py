"""Roofline: every case of one run against the hardware's measured ceilings."""

import pandas as pd
import streamlit as st

from dashboard import charts, common, data
from db import queries

eng, params = common.start("Roofline of a run")
fp = common.pick_hardware(eng, params)
runs = queries.recent_runs(eng, fp, 50)
runs = [r for r in runs if queries.perf_rows(eng, [r["id"]], implementations=("triton",))] or runs
if not runs:
    st.info("No runs on this hardware.")
    st.stop()
labels = {r["id"]: f"{r['commit'][:8]} {r['subject'] or ''} ({r['started'][:16]})"
          + (" [synthetic]" if r["synthetic"] else "") for r in reversed(runs)}
prefix = params.run_prefix("run")
default = next((rid for rid in labels if prefix and rid.startswith(prefix)), next(iter(labels)))
if prefix and not default.startswith(prefix):
    params.problems.append(f"No run {prefix!r} on this hardware: showing the newest.")
run_id = st.selectbox("Run", list(labels), index=list(labels).index(default), format_func=labels.get, key="run")
run = next(r for r in runs if r["id"] == run_id)
frame = data.perf_frame(eng, [run], None)
if frame.empty:
    st.info("This run has no perf results (a CPU run measures accuracy only).")
else:
    st.caption(f"measured ceilings: {run['peak_gbps']} GB/s copy, {run['peak_tflops']} TFLOP/s bf16 matmul")
    st.plotly_chart(charts.roofline(frame, run["peak_gbps"], run["peak_tflops"], f"run {run_id[:8]}"), key="roof")
    table = frame.pivot_table(index="case", columns="implementation", values="pct_peak", aggfunc="first")
    st.write("% of the roofline floor (bytes / peak GB/s or FLOPs / peak FLOP/s), kernel beside PyTorch:")
    st.dataframe(pd.DataFrame(table).round(1))
common.finish(params, {"hardware": fp, "run": run_id[:8]})
