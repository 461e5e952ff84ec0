"""Accuracy: the worst error budget per kernel x dtype x hardware from each hardware's newest run that has
accuracy results for the kernel; failing cases with their hardware; drift across commits, grouped."""

import math

import pandas as pd
import streamlit as st

from kernelwatch.dashboard import charts, common, data
from kernelwatch.dashboard.safe import plot as esc
from kernelwatch.gate.statuses import counted
from kernelwatch.store import queries

ERROR = math.inf  # a case that raised has no budget: it is worse than any


def budget(row: dict) -> float:
    if row["error_budget"] is not None:
        return row["error_budget"]
    return ERROR if not row["passed"] else 0.0


eng, params = common.start("Accuracy across hardware")
st.caption(
    "Error budget = max over elements of |out - ref| / (atol + rtol |ref|): 1 is the tolerance. Each cell is "
    "the worst gating budget of that kernel and dtype in the hardware's newest run that has accuracy "
    "results for the kernel (a newer perf-only run does not hide it). " + common.hardware_help()
)
options = data.hardware_options(eng)
sources = queries.latest_accuracy_runs(eng)
if not sources:
    st.info("No accuracy results yet: `kernelwatch collect --suite accuracy`.")
    st.stop()
cells = []
for src in sources:
    for r in queries.accuracy_rows(eng, [src["id"]], src["kernel"]):
        if r.get("kind", "gate") != "gate":
            continue
        cells.append(
            {
                **r,
                "hardware": options.get(src["fingerprint"], src["hardware"]),
                "fingerprint": src["fingerprint"],
                "run": data.run_label(src),
                "synthetic": src["synthetic"],
                "worst": budget(r),
                "row": f"{r['kernel']} {r['dtype']}",
            }
        )
frame = pd.DataFrame(cells)
common.synthetic_note(bool(frame["synthetic"].any()))
heat = frame.pivot_table(index="row", columns="hardware", values="worst", aggfunc="max")
st.plotly_chart(charts.budget_heatmap(heat, "worst error budget per kernel and dtype (over 1 fails)"), key="heat")
used = frame.drop_duplicates(["hardware", "kernel"])[["hardware", "kernel", "run"]].sort_values(["hardware", "kernel"])
with st.expander("Which run each cell comes from"):
    common.table(used)

failing = frame[~frame["passed"].astype(bool)]
st.subheader(f"Failing cases: {len(failing)}")
if not failing.empty:
    common.table(
        pd.DataFrame(
            {
                "hardware": failing["hardware"],
                "kernel": failing["kernel"],
                "case": [data.short_case(c, k) for c, k in zip(failing["case"], failing["kernel"])],
                "budget": [data.fmt(v) for v in failing["error_budget"]],
                "max abs err": [data.fmt(v) for v in failing["max_abs_err"]],
                "NaN mismatches": failing["nan_mismatches"],
                "error": [data.fmt(e) for e in failing["error"]],
                "run": failing["run"],
            }
        ).sort_values(["hardware", "kernel", "case"]),
        column_config={"case": st.column_config.TextColumn(width=380), "error": st.column_config.TextColumn(width=260)},
    )

st.subheader("Drill down: every case of one kernel and dtype, across hardware")
rows = sorted(heat.index, key=lambda r: -heat.loc[r].max())  # the worst first: where to look
row = st.selectbox(
    "Kernel and dtype (worst first)", rows, index=rows.index(params.choice("cell", rows, rows[0])), key="cell"
)
sub = frame[frame["row"] == row]
detail = sub.pivot_table(index="case", columns="hardware", values="worst", aggfunc="max")
detail.index = [data.short_case(c, row.split(" ")[0]) for c in detail.index]
detail = detail.map(lambda v: "error" if v == ERROR else data.fmt(v))


def red(v: str):
    failed = v == "error" or (v not in ("-", "") and float(v) > 1)
    return "background-color: #f8d0d0" if failed else ""


common.table(
    detail.rename_axis("case").reset_index().style.map(red, subset=list(detail.columns)),
    column_config={"case": st.column_config.TextColumn(width=420)},
)

st.subheader("Drift across commits on one hardware")
d1, d2, d3 = st.columns(3)
with d1:
    story = common.story_row(eng, "accuracy")
    kernel = common.pick_kernel(eng, params, names=sorted(frame["kernel"].unique()), default=story and story["kernel"])
hw_options = {fp: options[fp] for fp in frame.loc[frame["kernel"] == kernel, "fingerprint"].unique() if fp in options}
with d2:
    fp = common.pick_hardware(eng, params, options=hw_options or options)
runs = queries.recent_runs(eng, fp, params.integer("last", 30, 2, 500), kernel)
hist = pd.DataFrame(queries.accuracy_rows(eng, [r["id"] for r in runs], kernel))
state = {"kernel": kernel, "hardware": fp, "cell": row}
if hist.empty:
    st.info("No accuracy results of this kernel on this hardware.")
else:
    if "kind" in hist:
        hist = hist[hist["kind"] == "gate"]
    info = {r["id"]: r for r in runs}
    hist["order"] = hist["run_id"].map({r["id"]: i for i, r in enumerate(runs)})
    hist["x"] = [data.point_label(info[i]["commit"], i) for i in hist["run_id"]]
    hist["synthetic"] = hist["run_id"].map(lambda i: info[i]["synthetic"])
    cases = [{"variant": v, "dtype": d, "params": {}} for v, d in zip(hist["variant"], hist["dtype"])]
    by = d3.selectbox(
        "Lines: group cases by",
        ["dtype", "variant"],
        key="group",
        index=["dtype", "variant"].index(params.choice("group", ["dtype", "variant"], "dtype")),
    )
    hist["group"] = [data.group_value(c, by) for c in cases]
    hist["value"] = [max(budget(r), 1e-6) if budget(r) != ERROR else 10.0 for r in hist.to_dict("records")]
    points = (
        hist.groupby(["group", "run_id"])
        .agg(
            x=("x", "first"),
            order=("order", "first"),
            synthetic=("synthetic", "first"),
            value=("value", "max"),
            n=("case", "count"),
        )
        .reset_index()
    )
    points["hover"] = [
        f"{esc(by)} {esc(g)}: worst of {counted(n, 'case')} {v:.3g}<br>run {esc(r[:8])}"
        for g, n, v, r in zip(points["group"], points["n"], points["value"], points["run_id"])
    ]
    palette = charts.colours(data.group_value(c, by) for c in cases)
    title = f"{kernel} on {options.get(fp, fp)}: worst error budget"
    st.plotly_chart(
        charts.grouped_metric(
            points, palette, by, title, "worst error budget (log)", log=True, reference=(1.0, "tolerance (budget 1)")
        ),
        key="drift",
    )
    state["group"] = by
common.finish(params, state)
