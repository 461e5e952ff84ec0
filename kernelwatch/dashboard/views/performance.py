"""Performance across commits: one line per group of cases (by one parameter), over eager PyTorch and over
torch.compile, with change points; the newest run's cases below with their shortfalls."""

from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from kernelwatch.dashboard import charts, common, data
from kernelwatch.dashboard.safe import plot as esc
from kernelwatch.gate.detect import MIN_SERIES as MIN_HISTORY  # change points need this many runs
from kernelwatch.gate.detect import change_points
from kernelwatch.gate.statuses import counted, p_text
from kernelwatch.store import queries

METRICS = ("speedup over eager and torch.compile", "time per call (µs)", "% of roofline floor")
RED, AMBER = "#f8d0d0", "#fbeec2"


def default_group(options: list[str], counts: dict[str, int]) -> str:
    for name in (data.VARIANT_DTYPE, "shape", "dtype", "variant", *options):
        if name in options and 2 <= counts[name] <= charts.MAX_SERIES:
            return name
    return options[0]


def shortfalls(frame: pd.DataFrame):
    def row_style(row: pd.Series) -> list[str]:
        out = []
        for col in row.index:
            colour = ""
            if col == "target met" and row[col] == "no":
                colour = RED
            elif col == "x torch.compile" and row[col] is not None and row[col] == row[col] and row[col] < 1:
                colour = AMBER
            out.append(f"background-color: {colour}" if colour else "")
        return out

    return frame.style.apply(row_style, axis=1)


def line_targets(kernel_rows: pd.DataFrame) -> dict[str, list[tuple[float, str]]]:
    """impl -> [(speedup target, legend name)]: a target line is drawn only for the lines whose every case has
    that target (a line's geometric mean over cases without it says nothing about it); the name lists those
    lines unless it is all of them. A case's target is the one its newest run records."""
    per_group: dict[str, dict[str, set]] = {}
    for group, rows in kernel_rows.sort_values("order").drop_duplicates("case", keep="last").groupby("group"):
        parsed = [data.targets(t) for t in rows["target"]]
        for impl in {i for p in parsed for i in p}:
            per_group.setdefault(impl, {})[group] = {p.get(impl) for p in parsed}
    groups = set(kernel_rows["group"])
    out: dict[str, list[tuple[float, str]]] = {}
    for impl, sets in per_group.items():
        by_value: dict[float, list[str]] = {}
        for group, found in sets.items():
            if len(found) == 1 and None not in found:
                by_value.setdefault(next(iter(found)), []).append(group)
        for value, names in sorted(by_value.items()):
            label = "" if set(names) == groups else " (" + ", ".join(sorted(names, key=lambda v: (len(v), v))) + ")"
            out.setdefault(impl, []).append((value, label))
    return out


def mixed_note(frame: pd.DataFrame, by: str) -> str:
    """What each point averages over when a line mixes variants or dtypes."""
    mixed = [
        f"{len(frame[name].unique())} {name}s"
        for name in ("variant", "dtype")
        if name not in by and frame[name].nunique() > 1
    ]
    return f"; each point: geometric mean over {', '.join(mixed)}" if mixed else ""


eng, params = common.start("Performance across commits")
story = common.story_row(eng, "perf")
kernel = common.pick_kernel(eng, params, default=story and story["kernel"])
options = data.hardware_options(eng)
wanted = [h for h in (params.get("hardware") or "").split(",") if h]
unknown = [h for h in wanted if h not in options]
if unknown:
    params.problems.append(f"Unknown hardware {unknown[0][:60]!r} ignored.")
chosen = [h for h in wanted if h in options] or [common.default_hardware(eng, options)]
c1, c2, c3 = st.columns([3, 2, 2])
hardware = c1.multiselect("Hardware", list(options), default=chosen, format_func=options.get, key="hardware")
metric = c2.selectbox("Show", METRICS, index=METRICS.index(params.choice("metric", METRICS, METRICS[0])), key="metric")
last = c3.slider("Last runs", 5, 200, params.integer("last", 30, 5, 200), key="last")
state = {
    "kernel": kernel,
    "hardware": ",".join(hardware),
    "last": last,
    "metric": None if metric == METRICS[0] else metric,
}

for fp in hardware:
    runs = queries.recent_runs(eng, fp, last, kernel)
    frame = data.perf_frame(eng, runs, kernel, implementations=(data.KERNEL_IMPL, data.EAGER_IMPL, data.COMPILE_IMPL))
    st.subheader(options[fp], divider="gray", help=common.hardware_help())
    if frame.empty:
        st.info("No timings of this kernel on this hardware.")
        continue
    cases = frame.drop_duplicates("case")[["case", "variant", "dtype", "params"]].to_dict("records")
    groups = data.group_options(cases)
    counts = {g: len({data.group_value(c, g) for c in cases}) for g in groups}
    f1, f2, f3, f4 = st.columns([2, 2, 2, 3])
    by = f1.selectbox(
        "Lines: group cases by",
        groups,
        key=f"group-{fp}",
        index=groups.index(params.choice("group", groups, default_group(groups, counts))),
    )
    variants, dtypes = sorted({c["variant"] for c in cases}), sorted({c["dtype"] for c in cases})
    variant = f2.selectbox(
        "Variant",
        ["all", *variants],
        key=f"variant-{fp}",
        index=["all", *variants].index(params.choice("variant", ["all", *variants], "all")),
    )
    dtype = f3.selectbox(
        "dtype",
        ["all", *dtypes],
        key=f"dtype-{fp}",
        index=["all", *dtypes].index(params.choice("dtype", ["all", *dtypes], "all")),
    )
    text = f4.text_input("Case contains", params.text("shape") or "", key=f"shape-{fp}")
    palette = charts.colours(data.group_value(c, by) for c in cases)  # fixed per label, whatever is filtered
    # a branch's line keeps its group's colour (dashed): runs of two branches are never joined into one line
    palette |= {
        f"{group} · {b}": colour
        for group, colour in palette.items()
        for b in {r["branch"] for r in runs}
        if b != data.BASE_BRANCH
    }
    frame["group"] = [
        data.group_value({"variant": v, "dtype": d, "params": p}, by)
        for v, d, p in zip(frame["variant"], frame["dtype"], frame["params"])
    ]
    if variant != "all":
        frame = frame[frame["variant"] == variant]
    if dtype != "all":
        frame = frame[frame["dtype"] == dtype]
    if text:
        frame = frame[frame["case"].str.contains(text, regex=False)]
    values = sorted(frame["group"].unique(), key=lambda v: (len(v), v))
    wanted_series = [v for v in (params.get("series") or "").split(",") if v in values]
    series = st.multiselect(
        f"Lines ({by}; at most {charts.MAX_SERIES})",
        values,
        key=f"series-{fp}",
        default=wanted_series or values[: charts.MAX_SERIES],
        max_selections=charts.MAX_SERIES,
    )
    state.update(
        {
            "group": by,
            "variant": None if variant == "all" else variant,
            "dtype": None if dtype == "all" else dtype,
            "shape": text or None,
            "series": ",".join(series) if wanted_series or len(values) > charts.MAX_SERIES else None,
        }
    )
    frame = frame[frame["group"].isin(series)]
    if frame.empty:
        st.info("No case matches these filters.")
        continue
    wide = frame.pivot_table(index=["run_id", "case"], columns="implementation", values="median_ms", aggfunc="first")
    info = frame.drop_duplicates(["run_id", "case"]).set_index(["run_id", "case"])
    wide = wide.join(info[["group", "x", "order", "commit", "subject", "started", "synthetic", "pct_peak"]])
    kern = wide.get(data.KERNEL_IMPL)
    wide["vs_eager"] = wide.get(data.EAGER_IMPL) / kern if data.EAGER_IMPL in wide else None
    wide["vs_compile"] = wide.get(data.COMPILE_IMPL) / kern if data.COMPILE_IMPL in wide else None
    wide["time_us"] = kern * 1e3
    order_of = dict(zip(frame["run_id"], frame["order"]))
    points = []
    branch_of = {r["id"]: r["branch"] for r in runs}
    several = len({branch_of[r] for r in frame["run_id"].unique()}) > 1
    for group, cases_of in wide.reset_index().groupby("group"):
        # a geometric mean over a set of cases that changes from run to run jumps when a case joins or leaves
        # (a 512^3 softmax case joined at be613d2: 4-5x): each line averages the cases every one of its runs
        # holds, else the newest run's cases, and leaves out the runs that lack one of them
        held = cases_of.groupby("run_id")["case"].agg(set)
        shared = set.intersection(*held) or held[max(held.index, key=lambda r: order_of[r])]
        for run_id, rows in cases_of.groupby("run_id"):
            if not shared <= set(rows["case"]):
                continue
            rows = rows[rows["case"].isin(shared)]
            first = rows.iloc[0]
            branch = branch_of[run_id]
            line = group if not several or branch == data.BASE_BRANCH else f"{group} · {branch}"
            points.append(
                {
                    "group": line,
                    "colour": group,
                    "dash": "solid" if line == group else "dash",
                    "run_id": run_id,
                    "x": first["x"],
                    "order": first["order"],
                    "synthetic": bool(first["synthetic"]),
                    "n": len(rows),
                    "vs_eager": data.geomean(list(rows["vs_eager"])),
                    "vs_compile": data.geomean(list(rows["vs_compile"])),
                    "time": data.geomean(list(rows["time_us"])),
                    "value": data.geomean(list(rows["time_us"]))
                    if metric == METRICS[1]
                    else data.geomean(list(rows["pct_peak"])),
                    "hover": f"{esc(by)} {esc(group)}: geometric mean of the {counted(len(rows), 'case')} every run of "
                    f"this line holds<br>commit {esc(first['commit'][:12])} "
                    f"{esc(first['subject'] or '')}<br>branch {esc(branch)} · run {esc(run_id[:8])} · "
                    f"{esc(data.when(first['started']))}" + (" · SYNTHETIC" if first["synthetic"] else ""),
                }
            )
    series_frame = pd.DataFrame(points)
    target_values = line_targets(frame[frame["implementation"] == data.KERNEL_IMPL])
    marks = []
    for group, rows in series_frame.groupby("group"):
        rows = rows.sort_values("order")
        series_t = list(rows["time"])
        if len(series_t) >= MIN_HISTORY and all(v and v > 0 for v in series_t):
            for p in change_points(series_t):
                row = rows.iloc[p.index]
                marks.append(
                    {
                        "x": row["x"],
                        "y": row["vs_eager"] if metric == METRICS[0] else row["value"],
                        "hover": f"{esc(by)} {esc(group)}: time {p.change:+.1%} from here ({p_text(p.pvalue)})",
                    }
                )
    marks_frame = pd.DataFrame(marks)
    title = f"{kernel} on {options[fp]}: one line per {by}" + mixed_note(frame, by)
    if metric == METRICS[0]:
        fig = charts.grouped_speedups(series_frame, palette, by, title, target_values, marks_frame)
    else:
        y_title = (
            "geometric mean time per call (µs)"
            if metric == METRICS[1]
            else "% of the roofline floor (copy-bandwidth and matmul ceilings measured in each run; "
            "see the case page for the ceiling of each case)"
        )
        fig = charts.grouped_metric(
            series_frame,
            palette,
            by,
            title,
            y_title,
            log=metric == METRICS[1],
            reference=None if metric == METRICS[1] else (100.0, "100% of the floor"),
        )
        if marks:
            fig.add_scatter(
                x=marks_frame["x"],
                y=marks_frame["y"],
                mode="markers",
                name="change point",
                hovertext=marks_frame["hover"],
                hoverinfo="text",
                marker={"symbol": "x", "size": 13, "color": "#C00000"},
            )
    st.plotly_chart(fig, key=f"perf-{fp}")
    newest = wide.reset_index()
    newest = newest[newest["order"] == newest["order"].max()]
    kernel_rows = frame[frame["implementation"] == data.KERNEL_IMPL].set_index(["run_id", "case"])
    documented = frame.dropna(subset=["target"]).drop_duplicates("case").set_index("case")["target"]
    table = pd.DataFrame(
        {
            "case": data.case_labels(list(newest["case"]), [kernel] * len(newest)),
            "kernel µs": newest["time_us"],
            "x eager": newest["vs_eager"],
            "x torch.compile": newest["vs_compile"],
            "target": [data.target_text(documented.get(c)) for c in newest["case"]],
            "target met": [
                data.fmt(kernel_rows["target_met"].get((r, c))) for r, c in zip(newest["run_id"], newest["case"])
            ],
            "open": [f"case?{urlencode({'case': c, 'hardware': fp})}" for c in newest["case"]],
        }
    )
    st.caption("The newest run's cases in this view: red = target missed, amber = slower than torch.compile.")
    common.table(
        shortfalls(table),
        column_config={
            "case": st.column_config.TextColumn(
                width=300,
                help="variant/dtype and the parameters that tell these cases apart; the case page has the full key",
            ),
            "kernel µs": st.column_config.NumberColumn(format="%.4g"),
            "x eager": st.column_config.NumberColumn(format="%.2f"),
            "x torch.compile": st.column_config.NumberColumn(format="%.2f"),
            "target": st.column_config.TextColumn(width=200),
            "open": st.column_config.LinkColumn("case page", display_text="open →", width=80),
        },
    )
common.finish(params, state)
