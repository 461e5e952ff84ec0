"""One case over commits. First the verdict the merge gate gives its newest run (Triage's, from
``kernelwatch.dashboard.verdicts``): effect with its interval, p, the baseline and candidate runs and their GPUs, a
stored confirmation; then the kernel's own time on a linear axis fitted to it (the step visible), its speed
against eager, torch.compile, peers and references, % of the floor, change points, acknowledged changes,
accuracy and profiler counters; the commands to reproduce and bisect it."""

import difflib

import pandas as pd
import streamlit as st

from kernelwatch.dashboard import charts, common, confirmations, data
from kernelwatch.dashboard.safe import md
from kernelwatch.dashboard.safe import plot as esc
from kernelwatch.gate.bisect import bisect_command, rerun_command
from kernelwatch.gate.detect import MIN_SERIES as MIN_HISTORY  # change points need this many runs
from kernelwatch.gate.detect import change_points_within, method_starts
from kernelwatch.gate.statuses import p_text
from kernelwatch.kernels.names import calls_per_sample
from kernelwatch.store import queries
from kernelwatch.store.schema import isolate


def closest_keys(eng, key: str, n: int = 3) -> list[str]:
    """The known case keys nearest to ``key`` (difflib's ratio), for a stale or mistyped URL."""
    keys = [k for kernel in queries.kernel_names(eng) for k in queries.case_keys(eng, kernel)]
    return difflib.get_close_matches(key, keys, n=n, cutoff=0.5)


def verdict_row(candidate: str, case: str) -> tuple[dict, dict | None]:
    """(the judged run, this case's Triage row in it or None): the gate's verdict on the case's newest run."""
    judged = common.judge(candidate)
    return judged, next((r for r in judged["rows"] if r["case"] == case), None)


eng, params = common.start("Case history")
key = params.get("case")
if not key:  # no case asked for: the change Triage opens on
    story = common.story_row(eng, "perf") or common.story_row(eng, "accuracy")
    key = story["case"] if story else None
info = queries.case_info(eng, key) if key else None
if key and info is None:
    near = closest_keys(eng, key)
    st.error(
        md(
            f"Unknown case {key[:160]!r}: this database has no such key"
            + (f"; the closest: {', '.join(near)}" if near else "")
            + ". Showing the case picked below.",
            limit=900,
        ),
        icon=":material/search_off:",
    )
c_kernel, c_case, c_hw = st.columns([1.2, 3, 1.4])
with c_kernel:
    kernel = common.pick_kernel(eng, params, default=info["kernel"] if info else None)
keys = queries.case_keys(eng, kernel)
if not keys:
    st.info("No cases recorded for this kernel.")
    common.finish(params, {"kernel": kernel})
    st.stop()
if info is None or info["kernel"] != kernel:
    info = queries.case_info(eng, keys[0])
case = c_case.selectbox(
    "Case", keys, index=keys.index(info["key"]), key="case", format_func=lambda k: data.short_case(k, kernel)
)
info = queries.case_info(eng, case)
measured_on = queries.case_hardware(eng, case)
options = {fp: label for fp, label in data.hardware_options(eng).items() if fp in measured_on}
if not options:
    st.info("No results for this case yet.")
    common.finish(params, {"kernel": kernel, "case": case})
    st.stop()
with c_hw:
    fp = common.pick_hardware(eng, params, options=options)
st.caption(md(f"case key: {case}", limit=400))  # the full key, as text (the picker shows it without its kernel)
last = params.integer("last", 50, 2, 500)
state = {"kernel": kernel, "case": case, "hardware": fp, "last": last if last != 50 else None}

perf = pd.DataFrame(queries.case_perf(eng, case, fp, last))
acc = pd.DataFrame(queries.case_accuracy(eng, case, fp, last))
acks = queries.acks(eng, fp, case)
prof = pd.DataFrame(queries.case_profiler(eng, case, fp))
runs = pd.concat(
    [
        f[["run_id", "commit", "subject", "commit_time", "started", "synthetic", "peak_gbps", "peak_read_gbps"]]
        for f in (perf, acc)
        if not f.empty
    ]
).drop_duplicates("run_id")
if runs.empty:
    st.info("No perf or accuracy results of this case on this hardware.")
    common.finish(params, state)
    st.stop()
runs["when"] = runs["commit_time"].fillna(runs["started"])
runs = runs.sort_values(["when", "started"]).reset_index(drop=True)
runs["order"] = range(len(runs))
runs["x"] = [data.point_label(c, r) for c, r in zip(runs["commit"], runs["run_id"])]
hw_row = next((h for h in queries.list_hardware(eng) if h["fingerprint"] == fp), {})
vendor, hw_name = hw_row.get("vendor"), hw_row.get("device_name")
suite = "perf" if not perf.empty else "accuracy"
runs["reproduce"] = [rerun_command(c, case, suite, vendor) for c in runs["commit"]]
if runs["synthetic"].any():
    common.synthetic_note(True)

newest = runs.iloc[-1]
judged, verdict = verdict_row(newest["run_id"], case)
base = judged["baseline"]
cand = judged["candidate"]
if verdict is None:
    st.info(
        md(
            f"The newest run of this case ({data.run_label(cand)}) has no verdict on it"
            + (f": {judged['undecided']}" if judged["undecided"] else ".")
        )
    )
else:
    m1, m2, m3, m4 = st.columns([2.2, 1.6, 1.3, 1.3])  # "faster (within noise)" whole at 1280 px
    m1.metric(
        "verdict",
        verdict["verdict"],
        help="The merge gate's verdict on the newest run of this case, as Triage shows it",
    )
    effect, interval = verdict["effect %"], verdict["interval %"]
    if verdict["budget change"] and verdict["now us"] is None:
        m2.metric("error budget", verdict["budget change"], help="before → now; 1 = at the tolerance")
    elif effect is not None:
        m2.metric(
            "effect",
            f"{effect:+.1f}%",
            help="candidate / baseline median time - 1 (+ is slower)",
            delta=None if interval is None else f"95% interval {interval[0]:+.1f}% to {interval[1]:+.1f}%",
            delta_color="off",
            delta_arrow="off",
        )
    else:
        m2.metric("effect", "-")
    m3.metric(
        f"baseline (run {base['id'][:8]})" if base else "baseline",
        base["commit"][:8] if base else "none",
        help="The run the gate compares with, by its baseline rule",
    )
    m4.metric(
        f"candidate (run {cand['id'][:8]})", cand["commit"][:8], help="The newest run of this case on this hardware"
    )
    sides = [
        f"baseline: run {base['id'][:8]} on {isolate(base['branch'])}, GPU {verdict['before GPU'] or 'not recorded'}"
        if base
        else "no baseline",
        f"candidate: run {cand['id'][:8]} on {isolate(cand['branch'])}, GPU {verdict['GPU'] or 'not recorded'}",
    ]
    p = verdict["p"]
    st.caption(md(" · ".join([*sides, *([p_text(p)] if p is not None else [])])))
    if verdict["details"]:
        st.caption(md(verdict["details"], limit=700))
    confirmations.show(eng, fp, case=case)

with st.expander("Reproduce the newest run's measurement, or find where a change entered this history"):
    c1, c2 = st.columns(2)
    reproduce = rerun_command(newest["commit"], case, suite, vendor)
    if reproduce:
        c1.code(reproduce, language="bash", wrap_lines=True)
    else:
        c1.caption("No reproduce command: the newest run's commit is not a git sha (recorded outside a checkout).")
    c2.code(bisect_command(case, fp[:12]), language="bash", wrap_lines=True)

if not perf.empty:
    perf = perf.merge(runs[["run_id", "order", "x", "reproduce"]], on="run_id")
    rank = {impl: i for i, impl in enumerate((data.KERNEL_IMPL, data.COMPILE_IMPL, data.EAGER_IMPL))}
    perf = perf.sort_values(
        ["implementation", "order"], key=lambda s: s.map(rank).fillna(9) if s.name == "implementation" else s
    )
    for col in ("median", "p20", "p80", "call"):
        perf[f"{col}_us"] = perf[f"{col}_ms"] * 1e3
    perf["hover"] = [
        f"{esc(charts.impl_label(impl))}: {m:.4g} us (p20-p80 {lo:.4g}-{hi:.4g})<br>commit {esc(c[:12])} "
        f"{esc(s or '')}<br>run {esc(r)} · {esc(data.when(w or t))}{' · SYNTHETIC' if syn else ''}<br>"
        f"<i>{esc(cmd or '-')}</i>"
        for impl, m, lo, hi, c, s, r, w, t, syn, cmd in zip(
            perf["implementation"],
            perf["median_us"],
            perf["p20_us"].fillna(float("nan")),
            perf["p80_us"].fillna(float("nan")),
            perf["commit"],
            perf["subject"],
            perf["run_id"],
            perf["commit_time"],
            perf["started"],
            perf["synthetic"],
            perf["reproduce"],
        )
    ]
    kern = perf[perf["implementation"] == data.KERNEL_IMPL].sort_values("order")
    marks = []
    series = [v for v in kern["median_ms"] if v and v > 0]
    timings = list(kern["timing"])
    if len(series) == len(kern) and len(series) >= MIN_HISTORY:
        for cp in change_points_within(series, timings):
            row = kern.iloc[cp.index]
            marks.append(
                {
                    "x": row["x"],
                    "y": row["median_us"],
                    "kind": "change point",
                    "hover": f"change point: {cp.change:+.1%} from here ({p_text(cp.pvalue)})<br>"
                    f"{cp.before * 1e3:.4g} -> {cp.after * 1e3:.4g} us",
                }
            )
    for i in method_starts(timings)[1:]:
        row, was = kern.iloc[i], kern.iloc[i - 1]
        marks.append(
            {
                "x": row["x"],
                "y": row["median_us"],
                "kind": "timing changed",
                "hover": f"timing changed: {calls_per_sample(was['timing'])} per sample before "
                f"({esc(was['timing'] or 'events')}), {calls_per_sample(row['timing'])} from here "
                f"({esc(row['timing'] or 'events')}): a new measurement, not a speed change",
            }
        )
    for a in acks:
        at = runs[runs["commit"].str.startswith(a["commit"])]
        hit = kern[kern["run_id"].isin(at["run_id"])]
        if not hit.empty:
            row = hit.iloc[0]
            marks.append(
                {
                    "x": row["x"],
                    "y": row["median_us"],
                    "kind": "acknowledged",
                    "hover": f"acknowledged at {esc(a['commit'][:12])} by {esc(a['author'] or '?')}: "
                    f"{esc(a['reason'])}",
                }
            )
    x_of = dict(zip(runs["run_id"], runs["x"]))
    points = {role: x_of[r["id"]] for role, r in (("baseline", base), ("candidate", cand)) if r and r["id"] in x_of}
    st.plotly_chart(
        charts.case_kernel_time(kern, "time per call of the kernel alone", points, pd.DataFrame(marks)), key="times"
    )
    wide = perf.pivot_table(index="run_id", columns="implementation", values="median_ms", aggfunc="first")
    speed = runs[["run_id", "order", "x", "synthetic"]].merge(wide, left_on="run_id", right_index=True)
    if data.KERNEL_IMPL in speed:
        for col, impl in (("vs_eager", data.EAGER_IMPL), ("vs_compile", data.COMPILE_IMPL)):
            speed[col] = speed[impl] / speed[data.KERNEL_IMPL] if impl in speed else None
        target = next((t for t in kern["target"] if isinstance(t, str)), None)
        factor, ceiling = data.floor_ceiling(newest.to_dict(), info["ceiling"])
        floor = perf[["x", "order", "implementation", "pct_peak", "synthetic", "run_id"]].merge(
            runs[["run_id", "peak_gbps", "peak_read_gbps"]], on="run_id"
        )
        floor["pct"] = [
            p * data.floor_ceiling({"peak_gbps": g, "peak_read_gbps": r}, info["ceiling"])[0]
            if p is not None and p == p
            else None
            for p, g, r in zip(floor["pct_peak"], floor["peak_gbps"], floor["peak_read_gbps"])
        ]
        others = [i for i in wide.columns if i != data.KERNEL_IMPL]
        relative = speed.melt(
            id_vars=["x", "order", "synthetic"], value_vars=others, var_name="implementation", value_name="time"
        )
        relative["speedup"] = relative["time"] / relative["x"].map(dict(zip(speed["x"], speed[data.KERNEL_IMPL])))
        s1, s2 = st.columns(2)
        s1.plotly_chart(
            charts.case_relative(relative, "speedup of the kernel over", data.targets(target)), key="speedup"
        )
        s2.plotly_chart(charts.case_floor(floor, "% of the roofline floor", "% of floor"), key="floor")
        s2.caption(ceiling)
        if target:
            st.text(f"documented target: {data.target_text(target)}")
    with st.expander("Absolute times of every implementation"):
        st.plotly_chart(charts.case_times(perf, "time per call, every implementation"), key="all-times")
    table = runs[["run_id", "x", "commit", "started", "synthetic"]].merge(wide, left_on="run_id", right_index=True)
    calls = perf.pivot_table(index="run_id", columns="implementation", values="call_ms", aggfunc="first")
    kernel_rows = perf[perf["implementation"] == data.KERNEL_IMPL].set_index("run_id")
    gpu_of = {  # the model and physical device
        rid: data.device_label(hw_name, r["device_uuid"], r["device"]) for rid, r in kernel_rows.iterrows()
    }
    timing_of = kernel_rows["timing"].to_dict()
    probe_of = kernel_rows["host_probe_us"].dropna().to_dict() if "host_probe_us" in kernel_rows else {}
    extra = [i for i in wide.columns if i not in (data.KERNEL_IMPL, data.EAGER_IMPL, data.COMPILE_IMPL)]
    rows = []
    for _, r in table.sort_values("x", key=lambda s: s.map(dict(zip(runs["x"], runs["order"])))).iterrows():

        def us(impl: str, r=r) -> float | None:
            v = r.get(impl)
            return None if v is None or v != v else v * 1e3

        call = (
            calls.loc[r["run_id"], data.KERNEL_IMPL]
            if data.KERNEL_IMPL in calls and r["run_id"] in calls.index
            else None
        )
        rows.append(
            {
                "run": data.run_label(
                    {"id": r["run_id"], "commit": r["commit"], "started": r["started"], "synthetic": r["synthetic"]}
                ),
                "kernel µs": us(data.KERNEL_IMPL),
                **({"host probe µs/launch": probe_of.get(r["run_id"])} if probe_of else {}),
                "eager µs": us(data.EAGER_IMPL),
                "torch.compile µs": us(data.COMPILE_IMPL),
                **{f"{charts.impl_label(i)} µs": us(i) for i in extra},
                "kernel wall µs/call": None if call is None or call != call else call * 1e3,
                "GPU": gpu_of.get(r["run_id"]) or "-",
                "timing": data.fmt(timing_of.get(r["run_id"])),
            }
        )
    peer_cols = [f"{charts.impl_label(i)} µs" for i in extra]
    common.table(
        pd.DataFrame(rows[::-1]),
        column_config={
            "run": st.column_config.TextColumn(width=360),
            **{
                c: st.column_config.NumberColumn(format="%.4g")
                for c in ("kernel µs", "eager µs", "torch.compile µs", *peer_cols, "kernel wall µs/call")
            },
            "host probe µs/launch": st.column_config.NumberColumn(format="%.3g"),
        },
    )
    if probe_of:
        st.caption(
            "Host probe: the host's microseconds per launch of a fixed Triton kernel, taken beside each sample of "
            "this wall-timed case (median). Where the kernel's pass waits on its host, its time follows the probe: "
            "a run whose probe read higher ran on a slower host, not necessarily slower code."
        )
    if perf["call_ms"].isna().all():
        st.caption("Wall time per call (calls back to back, host + device) is not recorded in these runs yet.")
else:
    st.info("No timings of this case on this hardware (an accuracy-only history).")

if acks:
    st.subheader("Acknowledged changes")
    common.table(
        [
            {"commit": a["commit"][:12], "reason": a["reason"], "by": a["author"] or "-", "recorded": a["created_at"]}
            for a in acks
        ]
    )

st.subheader("Accuracy")
if acc.empty:
    st.text("No gating accuracy results of this case on this hardware.")
else:
    acc = acc.merge(runs[["run_id", "x"]], on="run_id")
    common.table(
        [
            {
                "run": x,
                "error budget": data.fmt(b),
                "passed": data.fmt(p),
                "max abs err": data.fmt(e),
                "NaN mismatches": data.fmt(n),
                "error": data.fmt(err),
            }
            for x, b, p, e, n, err in zip(
                acc["x"], acc["error_budget"], acc["passed"], acc["max_abs_err"], acc["nan_mismatches"], acc["error"]
            )
        ][::-1]
    )

st.subheader("Profiler counters")
if prof.empty:
    st.caption("No profiler counters of this case on this hardware: `kernelwatch collect --profile` records them.")
else:
    prof = prof.merge(runs[["run_id", "x"]], on="run_id", how="left")
    prof["shown"] = [
        data.fmt(v, ".4g") + (f" {u}" if u and v is not None and v == v else "")
        for v, u in zip(prof["value"], prof["unit"])
    ]
    wide = prof.pivot_table(index="name", columns="x", values="shown", aggfunc="first").fillna("-")
    wide = wide[[x for x in runs["x"] if x in wide.columns]]  # oldest run first, as on the charts
    launches = prof.groupby("x")["launch"].agg(data.launch_of)
    wide = pd.concat(
        [pd.DataFrame([[launches.get(c, "-") for c in wide.columns]], index=["launch"], columns=wide.columns), wide]
    ).rename_axis("name")
    ideal = prof.dropna(subset=["ideal"]).groupby("name")["ideal"].first()
    wide.insert(0, "ideal", [ideal.get(n, "-") for n in wide.index])
    common.table(wide.reset_index())
common.finish(params, state)
