"""Overview: per hardware, each kernel's newest run: accuracy, speedups, targets, regressions, trend."""

import numpy as np
import streamlit as st

from ci.detect import change_points
from dashboard import common, data
from db import queries

HISTORY = 20  # runs per hardware behind the trend and the regression count
ACCURACY_RUNS = 8  # the newest accuracy result of a kernel is looked for in this many runs

eng, params = common.start("KernelWatch — overview")
latest = queries.latest_complete_runs(eng)
if not latest:
    st.info("No complete runs yet: run `make demo`, `kernelwatch collect`, or `kernelwatch ingest ci/history/*.json`.")
    st.stop()
latest.sort(key=lambda r: (r["synthetic"], r["device"] == "cpu", r["hardware"]))
for run in latest:
    tag = " — SYNTHETIC (generated, not measured)" if run["synthetic"] else ""
    st.subheader(f"{run['hardware']}{tag}")
    history = queries.recent_runs(eng, run["fingerprint"], HISTORY)
    perf = data.perf_frame(eng, history, None, implementations=("triton", "torch_compile"), with_params=False)
    acc = queries.accuracy_rows(eng, [r["id"] for r in history[-ACCURACY_RUNS:]])
    order = {r["id"]: i for i, r in enumerate(history)}
    commit = {r["id"]: r["commit"] for r in history}
    kernels = sorted({a["kernel"] for a in acc} | (set(perf["kernel"]) if not perf.empty else set()))
    rows = []
    for kernel in kernels:
        runs_with = [a["run_id"] for a in acc if a["kernel"] == kernel]
        kp = perf[perf["kernel"] == kernel] if not perf.empty else perf
        if not kp.empty:
            runs_with += list(kp["run_id"])
        newest = max(runs_with, key=order.get)
        acc_runs = [a["run_id"] for a in acc if a["kernel"] == kernel]
        acc_run = max(acc_runs, key=order.get) if acc_runs else None
        ka = [a for a in acc if a["kernel"] == kernel and a["run_id"] == acc_run]
        trend, regressions, vs_eager, vs_compile, met = [], 0, None, [], []
        if not kp.empty:
            trit = kp[kp["implementation"] == "triton"]
            now = trit[trit["run_id"] == newest]
            comp = kp[(kp["implementation"] == "torch_compile") & (kp["run_id"] == newest)].set_index("case")
            vs_eager = data.geomean(list(now["speedup_vs_eager"]))
            vs_compile = [c / t for case, t in zip(now["case"], now["median_ms"])
                          if t and case in comp.index and (c := comp.loc[case, "median_ms"])]
            met = list(now["target_met"].dropna())
            logs = np.log(trit["speedup_vs_eager"].where(trit["speedup_vs_eager"] > 0))
            trend = list(np.exp(logs.groupby(trit["order"]).mean()).dropna())
            medians = trit.pivot_table(index="case", columns="order", values="median_ms", aggfunc="first")
            for series in medians.to_numpy():
                series = series[~np.isnan(series)]
                if len(series) >= 6 and (series > 0).all():
                    regressions += sum(1 for p in change_points(list(series)) if p.change > 0)
        rows.append({
            "kernel": kernel,
            "run": f"{commit[newest][:8]} ({newest[:8]})",
            "accuracy run": f"{commit[acc_run][:8]} ({acc_run[:8]})" if acc_run else "-",
            "accuracy passed": sum(a["passed"] for a in ka),
            "accuracy failed": sum(not a["passed"] for a in ka),
            "geomean x eager": vs_eager,
            "geomean x torch.compile": data.geomean(vs_compile),
            "targets met": f"{int(sum(met))}/{len(met)}" if met else "-",
            "regressions": regressions,
            "trend (x eager)": [t for t in trend if t is not None],
            "details": f"/performance?kernel={kernel}&hardware={run['fingerprint']}",
        })
    st.dataframe(rows, hide_index=True, column_config={
        "details": st.column_config.LinkColumn("details", display_text="performance →"),
        "trend (x eager)": st.column_config.LineChartColumn("trend (x eager), last commits"),
        "geomean x eager": st.column_config.NumberColumn(format="%.2f"),
        "geomean x torch.compile": st.column_config.NumberColumn(format="%.2f"),
    })
    st.caption(f"newest complete run {run['id'][:8]} · commit {run['commit'][:12]} · {run['started']} · "
               f"regressions = change points that made a case slower in the last {HISTORY} runs")
common.finish(params, {})
