"""Overview: per hardware, each kernel's newest run: accuracy, speedups, targets, regressions, trend."""

import os
from urllib.parse import urlencode

import numpy as np
import pandas as pd
import streamlit as st

from ci.detect import DEFAULT_MIN_EFFECT as MIN_EFFECT
from ci.detect import change_points
from dashboard import common, data
from dashboard.safe import md
from db import queries

HISTORY = 20  # runs per hardware behind the trend and the regression count
RED, AMBER = "#f8d0d0", "#fbeec2"


def shortfalls(frame: pd.DataFrame):  # noqa: ANN201 - a pandas Styler
    """Red: accuracy failures, targets missed; amber: slower than torch.compile, regressions found."""
    def missed(v: object) -> bool:
        return isinstance(v, str) and "/" in v and v.split("/")[0] != v.split("/")[1]

    def colour(row: pd.Series) -> list[str]:
        out = []
        for col in row.index:
            v, c = row[col], ""
            if (col == "accuracy failed" and v) or (col == "targets met" and missed(v)):
                c = RED
            elif (col == "x torch.compile" and v is not None and v == v and v < 1) or (col == "regressions" and v):
                c = AMBER
            out.append(f"background-color: {c}" if c else "")
        return out

    return frame.style.apply(colour, axis=1)


eng, params = common.start("KernelWatch — overview")
latest = queries.latest_runs(eng)
if not latest:
    st.info("No complete runs yet: run `make demo`, `kernelwatch collect`, or "
            "`kernelwatch ingest ci/history/*.json.gz`.")
    st.stop()
latest.sort(key=data.hardware_rank)
acc_sources = queries.latest_accuracy_runs(eng)
st.caption("Each hardware's newest runs per kernel. For what changed and how to reproduce it, see Triage.")
@st.cache_data(ttl=300, show_spinner=False, max_entries=64)
def summary(url: str | None, fingerprint: str, newest_run: str, acc_runs: tuple[str, ...]) -> list[dict]:
    """One row per kernel of one hardware; cached per (database, hardware, newest run, accuracy runs)."""
    eng = data.engine()
    history = queries.recent_runs(eng, fingerprint, HISTORY)
    perf = data.perf_frame(eng, history, None, implementations=("triton", "torch_compile", *data.PEER_IMPLS),
                           with_params=False)
    sources = {s["kernel"]: s for s in queries.latest_accuracy_runs(eng) if s["fingerprint"] == fingerprint}
    order = {r["id"]: i for i, r in enumerate(history)}
    commit = {r["id"]: r["commit"] for r in history} | {s["id"]: s["commit"] for s in sources.values()}
    kernels = sorted(set(sources) | (set(perf["kernel"]) if not perf.empty else set()))
    rows = []
    for kernel in kernels:
        kp = perf[perf["kernel"] == kernel] if not perf.empty else perf
        acc_run = sources[kernel]["id"] if kernel in sources else None
        newest = max(kp["run_id"], key=order.get) if not kp.empty else acc_run
        ka = [a for a in queries.accuracy_rows(eng, [acc_run], kernel) if a["kind"] == "gate"] if acc_run else []
        trend, regressions, vs_eager, vs_compile, met, vs_peer = [], 0, None, [], [], None
        if not kp.empty:
            vs_peer = data.vs_best_peer(kp[kp["run_id"] == newest])
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
                # A change point needs two segment medians MIN_EFFECT apart, both inside [min, max]: a series
                # that never spreads that far has none, and the search is skipped (exactly, not a heuristic).
                if len(series) >= 6 and (series > 0).all() and series.max() / series.min() - 1 >= MIN_EFFECT:
                    regressions += sum(1 for p in change_points(list(series), min_effect=MIN_EFFECT)
                                       if p.change > 0)
        rows.append({
            "kernel": kernel,
            "run": f"{commit[newest][:8]} ({newest[:8]})",
            "accuracy run": f"{commit[acc_run][:8]} ({acc_run[:8]})" if acc_run else None,
            "accuracy passed": sum(a["passed"] for a in ka) if ka else None,
            "accuracy failed": sum(not a["passed"] for a in ka) if ka else None,
            "x eager": vs_eager,
            "x torch.compile": data.geomean(vs_compile),
            "vs best peer": vs_peer,
            "targets met": f"{int(sum(met))}/{len(met)}" if met else None,
            "regressions": regressions if not kp.empty else None,
            "trend (x eager)": [t for t in trend if t is not None] or None,
            "details": f"performance?{urlencode({'kernel': kernel, 'hardware': fingerprint})}",
        })
    return rows


for run in latest:
    tag = " — SYNTHETIC (generated, not measured)" if run["synthetic"] else ""
    st.subheader(md(run["hardware"]) + tag, divider="gray")
    acc_runs = tuple(sorted(s["id"] for s in acc_sources if s["fingerprint"] == run["fingerprint"]))
    rows = summary(os.environ.get("KERNELWATCH_DB"), run["fingerprint"], run["id"], acc_runs)
    common.table(shortfalls(pd.DataFrame(rows)), column_config={
        "kernel": st.column_config.TextColumn(width=160),
        "run": st.column_config.TextColumn(width=140),
        "accuracy run": st.column_config.TextColumn(width=140),
        "accuracy passed": st.column_config.NumberColumn("acc. passed", width=72),
        "accuracy failed": st.column_config.NumberColumn("acc. failed", width=72),
        "x eager": st.column_config.NumberColumn("geomean x eager", format="%.2f", width=100),
        "x torch.compile": st.column_config.NumberColumn("geomean x torch.compile", format="%.2f", width=140),
        "vs best peer": st.column_config.NumberColumn("geomean vs best peer", format="%.2f", width=120,
                                                      help="t(fastest peer: Liger-Kernel, FlagGems, apex) / "
                                                           "t(kernel), over the cases a peer was timed in"),
        "targets met": st.column_config.TextColumn(width=80),
        "regressions": st.column_config.NumberColumn(width=80),
        "trend (x eager)": st.column_config.LineChartColumn("trend (x eager)", width=120),
        "details": st.column_config.LinkColumn("details", display_text="performance →", width=100),
    })
    started = data.when(run["started"])
    st.caption(md(f"newest run {run['id'][:8]} · commit {run['commit'][:12]} · started {started} · "
                  f"regressions = change points that made a case slower in the last {HISTORY} runs; red: accuracy "
                  "failures or targets missed; amber: slower than torch.compile or a regression found"))
common.finish(params, {})
