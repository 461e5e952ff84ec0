"""One case over commits: absolute times with their spread, speedups, % of the floor, change points,
acknowledged changes, accuracy and profiler counters; the commands to reproduce and bisect it."""

import pandas as pd
import streamlit as st

from ci.bisect import bisect_command, rerun_command
from ci.detect import MIN_SERIES as MIN_HISTORY  # change points need this many runs
from ci.detect import change_points
from dashboard import charts, common, confirmations, data
from dashboard.safe import plot as esc
from db import queries

eng, params = common.start("Case history")
key = params.get("case")
info = queries.case_info(eng, key) if key else None
if key and info is None:
    params.problems.append(f"Unknown case {key[:120]!r}: pick one below.")
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
case = c_case.selectbox("Case", keys, index=keys.index(info["key"]), key="case",
                    format_func=lambda k: data.short_case(k, kernel))
info = queries.case_info(eng, case)
measured_on = queries.case_hardware(eng, case)
options = {fp: label for fp, label in data.hardware_options(eng).items() if fp in measured_on}
if not options:
    st.info("No results for this case yet.")
    common.finish(params, {"kernel": kernel, "case": case})
    st.stop()
with c_hw:
    fp = common.pick_hardware(eng, params, options=options)
last = params.integer("last", 50, 2, 500)
state = {"kernel": kernel, "case": case, "hardware": fp, "last": last if last != 50 else None}

perf = pd.DataFrame(queries.case_perf(eng, case, fp, last))
acc = pd.DataFrame(queries.case_accuracy(eng, case, fp, last))
acks = queries.acks(eng, fp, case)
prof = pd.DataFrame(queries.case_profiler(eng, case, fp))
runs = pd.concat([f[["run_id", "commit", "subject", "commit_time", "started", "synthetic", "peak_gbps",
                     "peak_read_gbps"]] for f in (perf, acc) if not f.empty]).drop_duplicates("run_id")
if runs.empty:
    st.info("No perf or accuracy results of this case on this hardware.")
    common.finish(params, state)
    st.stop()
runs["when"] = runs["commit_time"].fillna(runs["started"])
runs = runs.sort_values(["when", "started"]).reset_index(drop=True)
runs["order"] = range(len(runs))
runs["x"] = [data.point_label(c, r) for c, r in zip(runs["commit"], runs["run_id"])]
vendor = next((h["vendor"] for h in queries.list_hardware(eng) if h["fingerprint"] == fp), None)
suite = "perf" if not perf.empty else "accuracy"
runs["reproduce"] = [rerun_command(c, case, suite, vendor) for c in runs["commit"]]
if runs["synthetic"].any():
    common.synthetic_note(True)

newest = runs.iloc[-1]
st.caption("Reproduce the newest run's measurement, or find where a change entered this history:")
c1, c2 = st.columns(2)
reproduce = rerun_command(newest["commit"], case, suite, vendor)
if reproduce:
    c1.code(reproduce, language="bash", wrap_lines=True)
else:
    c1.caption("No reproduce command: the newest run's commit is not a git sha (recorded outside a checkout).")
c2.code(bisect_command(case, fp[:12]), language="bash", wrap_lines=True)
confirmations.show(eng, fp, case=case)

if not perf.empty:
    perf = perf.merge(runs[["run_id", "order", "x", "reproduce"]], on="run_id")
    rank = {impl: i for i, impl in enumerate((data.KERNEL_IMPL, data.COMPILE_IMPL, data.EAGER_IMPL))}
    perf = perf.sort_values(["implementation", "order"], key=lambda s: s.map(rank).fillna(9) if s.name ==
                            "implementation" else s)
    for col in ("median", "p20", "p80", "call"):
        perf[f"{col}_us"] = perf[f"{col}_ms"] * 1e3
    perf["hover"] = [
        f"{esc(impl)}: {m:.4g} us (p20-p80 {lo:.4g}-{hi:.4g})<br>commit {esc(c[:12])} {esc(s or '')}<br>"
        f"run {esc(r)} · {esc(data.when(w or t))}{' · SYNTHETIC' if syn else ''}<br><i>{esc(cmd or '-')}</i>"
        for impl, m, lo, hi, c, s, r, w, t, syn, cmd in zip(
            perf["implementation"], perf["median_us"], perf["p20_us"].fillna(float("nan")),
            perf["p80_us"].fillna(float("nan")), perf["commit"], perf["subject"], perf["run_id"], perf["commit_time"],
            perf["started"], perf["synthetic"], perf["reproduce"])]
    kern = perf[perf["implementation"] == data.KERNEL_IMPL].sort_values("order")
    marks = []
    series = [v for v in kern["median_ms"] if v and v > 0]
    if len(series) == len(kern) and len(series) >= MIN_HISTORY:
        for p in change_points(series):
            row = kern.iloc[p.index]
            marks.append({"x": row["x"], "y": row["median_us"], "kind": "change point",
                          "hover": f"change point: {p.change:+.1%} from here (p={p.pvalue:.1e})<br>"
                                   f"{p.before * 1e3:.4g} -> {p.after * 1e3:.4g} us"})
    for a in acks:
        at = runs[runs["commit"].str.startswith(a["commit"])]
        hit = kern[kern["run_id"].isin(at["run_id"])]
        if not hit.empty:
            row = hit.iloc[0]
            marks.append({"x": row["x"], "y": row["median_us"], "kind": "acknowledged",
                          "hover": f"acknowledged at {esc(a['commit'][:12])} by {esc(a['author'] or '?')}: "
                                   f"{esc(a['reason'])}"})
    st.plotly_chart(charts.case_times(perf, f"{case}: time per call", pd.DataFrame(marks)), key="times")

    wide = perf.pivot_table(index="run_id", columns="implementation", values="median_ms", aggfunc="first")
    speed = runs[["run_id", "order", "x", "synthetic"]].merge(wide, left_on="run_id", right_index=True)
    if data.KERNEL_IMPL in speed:
        for col, impl in (("vs_eager", data.EAGER_IMPL), ("vs_compile", data.COMPILE_IMPL)):
            speed[col] = speed[impl] / speed[data.KERNEL_IMPL] if impl in speed else None
        target = next((t for t in kern["target"] if isinstance(t, str)), None)
        factor, ceiling = data.floor_ceiling(newest.to_dict(), info["ceiling"])
        floor = perf[["x", "order", "implementation", "pct_peak", "synthetic", "run_id"]].merge(
            runs[["run_id", "peak_gbps", "peak_read_gbps"]], on="run_id")
        floor["pct"] = [p * data.floor_ceiling({"peak_gbps": g, "peak_read_gbps": r}, info["ceiling"])[0]
                        if p is not None and p == p else None
                        for p, g, r in zip(floor["pct_peak"], floor["peak_gbps"], floor["peak_read_gbps"])]
        s1, s2 = st.columns(2)
        s1.plotly_chart(charts.case_speedups(speed, "speedup of the kernel", data.targets(target)), key="speedup")
        s2.plotly_chart(charts.case_floor(floor, "% of the roofline floor", "% of floor"), key="floor")
        s2.caption(ceiling)
        if target:
            st.text(f"documented target: {target}")
    table = runs[["run_id", "x", "commit", "started", "synthetic"]].merge(wide, left_on="run_id", right_index=True)
    calls = perf.pivot_table(index="run_id", columns="implementation", values="call_ms", aggfunc="first")
    kernel_rows = perf[perf["implementation"] == data.KERNEL_IMPL].set_index("run_id")
    gpu_of = {rid: data.short_gpu(u) for rid, u in kernel_rows["device_uuid"].items()}  # the physical device
    timing_of = kernel_rows["timing"].to_dict()
    rows = []
    for _, r in table.sort_values("x", key=lambda s: s.map(dict(zip(runs["x"], runs["order"])))).iterrows():
        def us(impl: str, r=r) -> float | None:  # noqa: ANN001
            v = r.get(impl)
            return None if v is None or v != v else v * 1e3
        call = calls.loc[r["run_id"], data.KERNEL_IMPL] if data.KERNEL_IMPL in calls and r["run_id"] in calls.index \
            else None
        rows.append({"run": data.run_label({"id": r["run_id"], "commit": r["commit"], "started": r["started"],
                                            "synthetic": r["synthetic"]}),
                     "kernel µs": us(data.KERNEL_IMPL), "eager µs": us(data.EAGER_IMPL),
                     "torch.compile µs": us(data.COMPILE_IMPL),
                     **{f"{peer} µs (peer)": us(peer) for peer in data.PEER_IMPLS if peer in table},
                     "kernel wall µs/call": None if call is None or call != call else call * 1e3,
                     "GPU": gpu_of.get(r["run_id"]) or "-", "timing": timing_of.get(r["run_id"]) or "-"})
    peer_cols = [f"{peer} µs (peer)" for peer in data.PEER_IMPLS if peer in table]
    common.table(pd.DataFrame(rows[::-1]), column_config={
        "run": st.column_config.TextColumn(width=360),
        **{c: st.column_config.NumberColumn(format="%.4g") for c in
           ("kernel µs", "eager µs", "torch.compile µs", *peer_cols, "kernel wall µs/call")}})
    if perf["call_ms"].isna().all():
        st.caption("Wall time per call (calls back to back, host + device) is not recorded in these runs yet.")
else:
    st.info("No timings of this case on this hardware (an accuracy-only history).")

if acks:
    st.subheader("Acknowledged changes")
    common.table([{"commit": a["commit"][:12], "reason": a["reason"], "by": a["author"] or "-",
                   "recorded": a["created_at"]} for a in acks])

st.subheader("Accuracy")
if acc.empty:
    st.text("No gating accuracy results of this case on this hardware.")
else:
    acc = acc.merge(runs[["run_id", "x"]], on="run_id")
    common.table([{"run": x, "error budget": data.fmt(b), "passed": data.fmt(p), "max abs err": data.fmt(e),
                   "NaN mismatches": data.fmt(n), "error": data.fmt(err)}
                  for x, b, p, e, n, err in zip(acc["x"], acc["error_budget"], acc["passed"], acc["max_abs_err"],
                                                acc["nan_mismatches"], acc["error"])][::-1])

st.subheader("Profiler counters")
if prof.empty:
    st.caption("No profiler counters of this case on this hardware: `kernelwatch collect --profile` records them.")
else:
    prof = prof.merge(runs[["run_id", "x"]], on="run_id", how="left")
    prof["shown"] = [data.fmt(v, ".4g") + (f" {u}" if u and v is not None and v == v else "")
                     for v, u in zip(prof["value"], prof["unit"])]
    wide = prof.pivot_table(index="name", columns="x", values="shown", aggfunc="first").fillna("-")
    wide = wide[[x for x in runs["x"] if x in wide.columns]]  # oldest run first, as on the charts
    launches = prof.groupby("x")["launch"].agg(data.launch_of)
    wide = pd.concat([pd.DataFrame([[launches.get(c, "-") for c in wide.columns]], index=["launch"],
                                   columns=wide.columns), wide]).rename_axis("name")
    ideal = prof.dropna(subset=["ideal"]).groupby("name")["ideal"].first()
    wide.insert(0, "ideal", [ideal.get(n, "-") for n in wide.index])
    common.table(wide.reset_index())
common.finish(params, state)
