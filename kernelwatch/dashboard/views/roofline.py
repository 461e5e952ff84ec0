"""Roofline: every case of one run against the hardware's measured ceilings."""

import streamlit as st

from kernelwatch.dashboard import charts, common, data
from kernelwatch.kernels.names import KERNEL_IMPL
from kernelwatch.store import queries

eng, params = common.start("Roofline of a run")
fp = common.pick_hardware(eng, params)
runs = queries.recent_runs(eng, fp, 50)
runs = [r for r in runs if queries.perf_rows(eng, [r["id"]], implementations=(KERNEL_IMPL,), with_params=False)] or runs
if not runs:
    st.info("No runs on this hardware.")
    st.stop()
contents = queries.run_contents(eng, [r["id"] for r in runs])
labels = {r["id"]: data.run_label(r, contents[r["id"]]) for r in reversed(runs)}
prefix = params.run_prefix("run")
default = next((rid for rid in labels if prefix and rid.startswith(prefix)), next(iter(labels)))
if prefix and not default.startswith(prefix):
    params.problems.append(f"No run {prefix!r} on this hardware: showing the newest.")
run_id = st.selectbox("Run", list(labels), index=list(labels).index(default), format_func=labels.get, key="run")
run = next(r for r in runs if r["id"] == run_id)
if run["synthetic"]:
    common.synthetic_note(True)
frame = data.perf_frame(eng, [run], None)
if frame.empty:
    st.info("This run has no perf results (a CPU run measures accuracy only).")
else:
    read = f", {run['peak_read_gbps']:,.0f} GB/s read-only stream" if run["peak_read_gbps"] else ""
    st.text(
        f"measured ceilings of this run: {data.fmt(run['peak_gbps'], ',.0f')} GB/s copy{read}, "
        f"{data.fmt(run['peak_tflops'], ',.0f')} TFLOP/s bf16 matmul"
    )
    st.plotly_chart(charts.roofline(frame, run["peak_gbps"], run["peak_tflops"], f"run {run_id[:8]}"), key="roof")
    cases = frame.drop_duplicates("case").set_index("case")
    factor = {c: data.floor_ceiling(run, ceiling)[0] for c, ceiling in zip(cases.index, cases["ceiling"])}
    frame["pct"] = [
        v * factor[c] if v is not None and v == v else None for v, c in zip(frame["pct_peak"], frame["case"])
    ]
    table = frame.pivot_table(index="case", columns="implementation", values="pct", aggfunc="first").round(1)
    impls = [i for i in (data.KERNEL_IMPL, data.EAGER_IMPL, data.COMPILE_IMPL) if i in table] + sorted(
        i for i in table if i not in data.NAMES
    )
    table = table[impls].rename(columns=lambda i: f"{charts.impl_label(i)} (% of floor)")
    kernels = list(cases["kernel"].reindex(table.index))
    labels = data.case_labels(list(table.index), kernels)
    table = table.reset_index(drop=True)
    table.columns.name = None
    table.insert(0, "case", labels)
    table.insert(0, "kernel", kernels)
    table = table.sort_values(["kernel", "case"])
    st.caption(
        "% of the roofline floor per case, kernel beside PyTorch: floor = max(bytes / copy GB/s, FLOPs / "
        "matmul rate). Read-only streams (cases whose kernel names the read ceiling) are measured against the "
        "read ceiling when the "
        "run has one; otherwise against the copy rate, which a read-only stream can beat (over 100%)."
    )
    pct = {  # every column is a % of the floor (the caption says so): headed by the implementation alone
        c: st.column_config.NumberColumn(c.removesuffix(" (% of floor)"), format="%.1f %%", width=80)
        for c in table.columns
        if c.endswith("(% of floor)")
    }
    common.table(
        table.reset_index(drop=True),
        column_config={
            "kernel": st.column_config.TextColumn(width=170),
            "case": st.column_config.TextColumn(width=280),
            **pct,
        },
    )
common.finish(params, {"hardware": fp, "run": run_id[:8]})
