"""Performance: speedup over PyTorch across commits, per case, faceted by hardware."""

import streamlit as st

from ci.detect import change_points
from dashboard import charts, common, data
from db import queries

eng, params = common.start("Performance across commits")
kernel = common.pick_kernel(eng, params)
options = data.hardware_options(eng)
wanted = [h for h in (params.get("hardware") or "").split(",") if h]
unknown = [h for h in wanted if h not in options]
if unknown:
    params.problems.append(f"Unknown hardware {unknown[0]!r} ignored.")
chosen = [h for h in wanted if h in options] or [common.default_hardware(eng, options)]
hardware = st.multiselect("Hardware", list(options), default=chosen, format_func=options.get, key="hardware")
last = st.slider("Last commits", 5, 200, params.integer("last", 30, 5, 200), key="last")
state = {"kernel": kernel, "hardware": ",".join(hardware), "last": last}
for fp in hardware:
    runs = queries.recent_runs(eng, fp, last, kernel)
    frame = data.perf_frame(eng, runs, kernel)
    if frame.empty:
        st.info(f"No perf results for {kernel} on {options[fp]}.")
        continue
    frame = frame[frame["implementation"] == "triton"]
    variants = sorted(frame["variant"].unique())
    dtypes = sorted(frame["dtype"].unique())
    c1, c2, c3 = st.columns(3)
    variant = c1.selectbox("Variant", ["all", *variants], index=(["all", *variants].index(
        params.choice("variant", ["all", *variants], "all"))), key=f"variant-{fp}")
    dtype = c2.selectbox("dtype", ["all", *dtypes], index=(["all", *dtypes].index(
        params.choice("dtype", ["all", *dtypes], "all"))), key=f"dtype-{fp}")
    shape = c3.text_input("Shape or case contains", params.text("shape") or "", key=f"shape-{fp}")
    if variant != "all":
        frame = frame[frame["variant"] == variant]
    if dtype != "all":
        frame = frame[frame["dtype"] == dtype]
    if shape:
        frame = frame[frame["case"].str.contains(shape, regex=False)]
    state.update({"variant": variant if variant != "all" else None, "dtype": dtype if dtype != "all" else None,
                  "shape": shape or None})
    if frame.empty:
        st.info("No case matches these filters.")
        continue
    frame = frame.assign(reproduce=[data.reproduce(kernel, c, d, s) for c, d, s in
                                    zip(frame["case"], frame["device"], frame["commit"])])
    targets = {c: v for c, t in zip(frame["case"], frame["target"]) if (v := data.target_speedup(t))}
    changes = {}
    for case, rows in frame.groupby("case"):
        series = list(rows.sort_values("order")["median_ms"])
        if len(series) >= 6 and all(v and v > 0 for v in series):
            changes[case] = change_points(series)
    st.plotly_chart(charts.speedup_history(frame, f"{kernel} on {options[fp]}", targets, changes),
                    key=f"perf-{fp}")
    steps = [(case, p) for case, ps in changes.items() for p in ps]
    if steps:
        st.write("Change points (per-run medians, binary segmentation, each split tested with a Mann-Whitney U):")
        ordered = {c: frame[frame["case"] == c].sort_values("order")["commit"].tolist() for c, _ in steps}
        st.dataframe([{"case": c, "time change": f"{p.change:+.1%}", "p": f"{p.pvalue:.1e}",
                       "first commit after": ordered[c][p.index][:12]} for c, p in steps], hide_index=True)
common.finish(params, state)
