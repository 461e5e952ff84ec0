"""Profiler: counters per case across commits, against the ideal bands of docs/metrics.md.

Opens on hardware and a kernel that have counters, and on a ratio metric (a percentage, ideally one
with a documented ideal), not on a raw byte count.
"""

import pandas as pd
import streamlit as st

from kernelwatch.dashboard import charts, common, data
from kernelwatch.dashboard.safe import md
from kernelwatch.dashboard.safe import plot as esc
from kernelwatch.gate.statuses import counted
from kernelwatch.store import queries


def metric_rank(name: str, unit: str | None, has_ideal: bool) -> tuple:
    ratio = unit == "%" or "ratio" in name or name.endswith("_pct")
    return (not has_ideal, not ratio, name)


eng, params = common.start("Profiler counters across commits")
st.caption(
    "Ideals follow what bounds the kernel. Memory-bound (vector) kernels: Ascend mte2 > 80%, mte3 < 1% "
    "(reductions), vec < 30%, vec_wait < 40% (MSELoss design document, docs/metrics.md); "
    "CUDA DRAM throughput > 80%. "
    "Compute-bound (cube) kernels: Ascend aic_cube_ratio > 80%, CUDA SM throughput > 80%. "
    "Each stored counter carries the ideal it was judged by."
)
options = data.hardware_options(eng)
with_counters = {fp: label for fp, label in options.items() if queries.profiler_kernels(eng, fp)}
c1, c2, c3 = st.columns([1, 1, 1.3])
with c1:
    fp = common.pick_hardware(
        eng, params, options=options, default=next(iter(with_counters), None) if with_counters else None
    )
kernels = queries.profiler_kernels(eng, fp)
if not kernels:
    st.info("No profiler counters on this hardware yet: run `kernelwatch collect --profile`.")
    common.finish(params, {"hardware": fp})
    st.stop()
with c2:
    story = common.story_row(eng, "perf")
    kernel = common.pick_kernel(eng, params, names=kernels, default=story["kernel"] if story else kernels[0])
runs = queries.recent_runs(eng, fp, params.integer("last", 50, 2, 500), kernel)
frame = pd.DataFrame(queries.profiler_rows(eng, [r["id"] for r in runs], kernel))
if frame.empty:
    st.info("No counters of this kernel in the recent runs.")
    common.finish(params, {"hardware": fp, "kernel": kernel})
    st.stop()
info = {r["id"]: r for r in runs}
frame["order"] = frame["run_id"].map({r["id"]: i for i, r in enumerate(runs)})
frame["x"] = [data.point_label(info[i]["commit"], i) for i in frame["run_id"]]
frame["synthetic"] = frame["run_id"].map(lambda i: info[i]["synthetic"])
valued = frame[frame["value"].notna()]
units = valued.groupby("name")["unit"].first()
ideals = valued.groupby("name")["ideal"].apply(lambda s: s.notna().any())
metrics = sorted(units.index, key=lambda n: metric_rank(n, units[n], bool(ideals.get(n))))
metric = c3.selectbox(
    "Metric",
    metrics,
    index=metrics.index(params.choice("metric", metrics, metrics[0])),
    key="metric",
    format_func=lambda n: f"{data.metric_name(n)} ({n})" if n in data.METRIC_NAMES else n,
)
sub = valued[valued["name"] == metric].copy()
case_colour = charts.colours(valued["case"].unique())  # by case key: stable whatever is picked
cases = sorted(sub["case"].unique())
chosen = st.multiselect(
    f"Cases (at most {charts.MAX_SERIES})",
    cases,
    # the cases of the change Triage opens on (its variant and dtype) first
    default=sorted(cases, key=lambda c: not (story and c.startswith(story["case"].rsplit("/", 1)[0] + "/")))[
        : charts.MAX_SERIES
    ],
    max_selections=charts.MAX_SERIES,
    format_func=lambda c: data.short_case(c, kernel),
    key="series",
)
sub = sub[sub["case"].isin(chosen)]
label = data.distinct_labels(chosen)
sub["group"] = [label[c] for c in sub["case"]]
palette = {label[c]: case_colour[c] for c in chosen}
sub["hover"] = [
    f"{esc(g)}: {v:.4g} {esc(u or '')}<br>run {esc(r[:8])}<br>launch {esc(data.launch_of([k])[:60])}"
    for g, v, u, r, k in zip(sub["group"], sub["value"], sub["unit"], sub["run_id"], sub["launch"])
]
ideal = sub["ideal"].dropna().iloc[0] if sub["ideal"].notna().any() else None
shown_name = data.metric_name(metric)
fig = charts.grouped_metric(
    sub.assign(**{"profiled launch": [data.launch_of([k]) for k in sub["launch"]]}),
    palette,
    "case",
    f"{kernel}: {shown_name}",
    f"{shown_name} ({units[metric] or 'no unit'})",
    log=False,
    method="profiled launch",
)
if ideal and ideal[0] in "<>":
    bound = float(ideal[1:])
    top = max(float(sub["value"].max()) if not sub.empty else bound, bound) * 1.1
    y0, y1 = (bound, top) if ideal[0] == ">" else (0, bound)
    fig.add_hrect(y0=y0, y1=y1, fillcolor="green", opacity=0.10, line_width=0)
    fig.add_scatter(
        x=[None],
        y=[None],
        mode="markers",
        name=f"ideal {ideal} (green band)",
        marker={"color": "rgba(0,128,0,0.3)", "symbol": "square", "size": 12},
    )
st.plotly_chart(fig, key="metric-chart")
with_counters_runs = sorted(set(sub["run_id"]), key=lambda i: info[i]["started"] or "")
if with_counters_runs:
    newest_run = info[with_counters_runs[-1]]
    behind = sum((r["started"] or "") > (newest_run["started"] or "") for r in queries.recent_runs(eng, fp, 500))
    st.caption(
        md(
            f"Counters from {counted(len(with_counters_runs), 'run')}; the newest, {data.run_label(newest_run)}, "
            + (f"is {counted(behind, 'run')} behind this hardware's newest: " if behind else "is the newest run: ")
            + "kernelwatch collect --profile records new ones.",
            limit=400,
        )
    )
newest = sub[sub["order"] == sub["order"].max()]
st.caption("The newest run's values; red: outside the ideal.")
table = pd.DataFrame(
    {
        "case": [label[c] for c in newest["case"]],
        "metric": [data.metric_name(metric)] * len(newest),
        "value": newest["value"],
        "unit": newest["unit"],
        "ideal": [data.fmt(i) for i in newest["ideal"]],
        "meets ideal": [data.fmt(m) if m == m else "-" for m in newest["meets_ideal"]],
        "taken from launch": [data.launch_of([v]) for v in newest["launch"]],
    }
)
common.table(
    table.style.map(lambda v: "background-color: #f8d0d0" if v == "no" else "", subset=["meets ideal"]),
    column_config={
        "case": st.column_config.TextColumn(width=400),
        "value": st.column_config.NumberColumn(format="%.4g"),
    },
)
errors = frame[frame["error"].notna() & frame["value"].isna()]
if not errors.empty:
    st.caption("Cases whose counters could not be read:")
    common.table(errors[["case", "name", "error"]].drop_duplicates())
common.finish(params, {"kernel": kernel, "hardware": fp, "metric": metric})
