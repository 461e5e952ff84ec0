"""Overview: the latest complete run on each hardware, per kernel."""

import streamlit as st

from dashboard import charts, common, data
from db import queries

eng, params = common.start("KernelWatch — overview")
latest = queries.latest_complete_runs(eng)
if not latest:
    st.info("No complete runs yet: run `make demo`, `kernelwatch collect`, or `kernelwatch ingest ci/history/*.json`.")
    st.stop()
for run in latest:
    tag = " — SYNTHETIC (generated, not measured)" if run["synthetic"] else ""
    st.subheader(f"{run['hardware']}{tag}")
    st.caption(f"run {run['id'][:8]} · commit {run['commit'][:12]} {run['subject'] or ''} · {run['started']}")
    history = queries.recent_runs(eng, run["fingerprint"], 20)
    perf = data.perf_frame(eng, history, None)
    acc = queries.accuracy_rows(eng, [run["id"]])
    rows = []
    for kernel in sorted({r["kernel"] for r in acc} | (set(perf["kernel"]) if not perf.empty else set())):
        ka = [a for a in acc if a["kernel"] == kernel]
        kp = perf[(perf["kernel"] == kernel) & (perf["run_id"] == run["id"])] if not perf.empty else perf
        if kp is not None and not kp.empty:
            trit = kp[kp["implementation"] == "triton"]
            comp = kp[kp["implementation"] == "torch_compile"].set_index("case")["median_ms"]
            vs_compile = [c / t for case, t in zip(trit["case"], trit["median_ms"])
                          if (c := comp.get(case)) and t]
            met = trit["target_met"].dropna()
        else:
            trit, vs_compile, met = None, [], []
        rows.append({
            "kernel": kernel,
            "accuracy passed": sum(a["passed"] for a in ka),
            "accuracy failed": sum(not a["passed"] for a in ka),
            "geomean x eager": data.geomean(list(trit["speedup_vs_eager"])) if trit is not None else None,
            "geomean x torch.compile": data.geomean(vs_compile),
            "targets met": f"{int(sum(met))}/{len(met)}" if len(met) else "-",
            "link": f"/performance?kernel={kernel}&hardware={run['fingerprint']}",
        })
    st.dataframe(rows, hide_index=True, column_config={"link": st.column_config.LinkColumn("details")})
    if not perf.empty:
        trend = perf[perf["implementation"] == "triton"].groupby(["order", "commit"], sort=True)
        spark = trend["speedup_vs_eager"].apply(lambda s: data.geomean(list(s))).reset_index()
        st.caption("geomean speedup over eager, last commits")
        st.plotly_chart(charts.sparkline(list(spark["speedup_vs_eager"]), list(spark["commit"].str[:8])),
                        key=f"spark-{run['fingerprint']}")
common.finish(params, {})
