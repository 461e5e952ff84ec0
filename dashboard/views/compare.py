"""Compare two runs case by case: time ratio with its significance, accuracy delta."""

import pandas as pd
import streamlit as st

from ci.detect import compare_case
from dashboard import common
from db import queries

eng, params = common.start("Compare two runs")
runs = queries.list_runs(eng, limit=300)
if len(runs) < 2:
    st.info("Two runs are needed.")
    st.stop()
labels = {r["id"]: f"{r['commit'][:8]} · {r['hardware']} · {r['started'][:16]}"
          + (" [synthetic]" if r["synthetic"] else "") for r in runs}


def pick(key: str, default_index: int) -> str:
    prefix = params.run_prefix(key)
    match = [rid for rid in labels if prefix and rid.startswith(prefix)]
    if prefix and not match:
        params.problems.append(f"No run {prefix!r}: choose one below.")
    default = match[0] if match else list(labels)[default_index]
    return st.selectbox(f"Run {key.upper()}", list(labels), index=list(labels).index(default),
                        format_func=labels.get, key=key)


a, b = pick("a", 1), pick("b", 0)
run_a, run_b = (next(r for r in runs if r["id"] == x) for x in (a, b))
pa = {(r["case"], r["implementation"]): r for r in queries.perf_rows(eng, [a], with_samples=True)}
pb = {(r["case"], r["implementation"]): r for r in queries.perf_rows(eng, [b], with_samples=True)}
acc_a = {r["case"]: r for r in queries.accuracy_rows(eng, [a])}
acc_b = {r["case"]: r for r in queries.accuracy_rows(eng, [b])}
rows = []
for key in sorted(set(pa) & set(pb)):
    ra, rb = pa[key], pb[key]
    if not ra["samples_ms"] or not rb["samples_ms"]:
        continue
    cmp = compare_case(key[0], ra["samples_ms"], rb["samples_ms"])
    rows.append({"case": key[0], "implementation": key[1], "A median us": ra["median_ms"] * 1e3,
                 "B median us": rb["median_ms"] * 1e3, "B/A time": cmp.ratio, "p (B slower)": cmp.p_within,
                 "budget A": (acc_a.get(key[0]) or {}).get("error_budget"),
                 "budget B": (acc_b.get(key[0]) or {}).get("error_budget")})
for case in sorted((set(acc_a) & set(acc_b)) - {r["case"] for r in rows}):
    rows.append({"case": case, "implementation": "triton", "budget A": acc_a[case]["error_budget"],
                 "budget B": acc_b[case]["error_budget"]})
frame = pd.DataFrame(rows)
if frame.empty:
    st.info("These runs share no cases.")
else:
    if {"budget A", "budget B"} <= set(frame):
        frame["budget delta"] = frame["budget B"] - frame["budget A"]
    same_hw = run_a["fingerprint"] == run_b["fingerprint"]
    st.caption(("Same hardware: " if same_hw else "Different hardware: ")
               + f"A = {labels[a]}, B = {labels[b]}. Sort by any column; p is a one-sided Mann-Whitney U "
               "on the two runs' timing samples.")
    st.dataframe(frame, hide_index=True)
    st.download_button("Download CSV", frame.to_csv(index=False), file_name=f"compare-{a[:8]}-{b[:8]}.csv",
                       mime="text/csv")
common.finish(params, {"a": a[:8], "b": b[:8]})
