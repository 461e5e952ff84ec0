"""Compare two runs case by case: time ratio with its significance, accuracy delta.

Opens on the newest run and the baseline the merge gate's rule picks for it (``ci.gate.choose_baseline``).
The colours are the gate's verdicts (``ci.gate.decide`` of B against A), not statistics of their own.
"""

import pandas as pd
import streamlit as st

from ci.gate import GateUndecided, choose_baseline, decide
from dashboard import common, data
from dashboard.safe import md
from db import queries
from db.export import export_run

RED, GREEN = "#f8d0d0", "#d3efd9"
TRIES = 6  # newest runs tried for a default pair


def default_pair(eng, runs: list[dict]) -> tuple[str, str] | None:  # noqa: ANN001
    """(A, B): the newest run that has a comparable earlier run, and that run; measured runs first."""
    for pool in ([r for r in runs if not r["synthetic"]], runs):
        for run in pool[:TRIES]:
            base = choose_baseline(eng, export_run(eng, run["id"]), None)
            if base is not None:
                return base["id"], run["id"]
    return None


FAILING_PERF = ("regression", "unreliable")  # the gate's failing perf verdicts


def highlight(frame: pd.DataFrame):  # noqa: ANN201 - a pandas Styler
    def row_style(row: pd.Series) -> list[str]:
        slower = row.get("gate") in FAILING_PERF
        faster = row.get("B/A time") is not None and row["B/A time"] == row["B/A time"] and row["B/A time"] < 1 / 1.05
        failed = any(row.get(c) is not None and row[c] == row[c] and row[c] > 1 for c in ("budget A", "budget B"))
        out = []
        for col in row.index:
            colour = ""
            if col in ("B/A time", "p (B slower)") and slower:
                colour = RED
            elif col == "B/A time" and faster:
                colour = GREEN
            elif col in ("budget A", "budget B") and failed and row[col] == row[col] and row[col] and row[col] > 1:
                colour = RED
            out.append(f"background-color: {colour}" if colour else "")
        return out

    return frame.style.apply(row_style, axis=1)


eng, params = common.start("Compare two runs")
runs = queries.list_runs(eng, limit=300)
if len(runs) < 2:
    st.info("Two runs are needed.")
    st.stop()
contents = queries.run_contents(eng, [r["id"] for r in runs])
labels = {r["id"]: f"{data.run_label(r, contents[r['id']])} · {r['hardware']}" for r in runs}
pair = default_pair(eng, runs) or (runs[1]["id"], runs[0]["id"])


def pick(key: str, default: str, column) -> str:  # noqa: ANN001
    prefix = params.run_prefix(key)
    match = [rid for rid in labels if prefix and rid.startswith(prefix)]
    if prefix and not match:
        params.problems.append(f"No run {prefix!r}: choose one below.")
    chosen = match[0] if match else default
    return column.selectbox(f"Run {key.upper()}" + (" (before)" if key == "a" else " (after)"), list(labels),
                            index=list(labels).index(chosen), format_func=labels.get, key=key)


c1, c2 = st.columns(2)
a, b = pick("a", pair[0], c1), pick("b", pair[1], c2)
run_a, run_b = (next(r for r in runs if r["id"] == x) for x in (a, b))
if run_a["synthetic"] or run_b["synthetic"]:
    common.synthetic_note(True)
impls = ["triton", "all"]
impl = st.selectbox("Implementations", impls, index=impls.index(params.choice("impl", impls, "triton")), key="impl",
                    format_func={"triton": "the kernel (Triton) only", "all": "all implementations"}.get)
pa = {(r["case"], r["implementation"]): r for r in queries.perf_rows(eng, [a], with_samples=True)}
pb = {(r["case"], r["implementation"]): r for r in queries.perf_rows(eng, [b], with_samples=True)}
acc_a = {r["case"]: r for r in queries.accuracy_rows(eng, [a]) if r["kind"] == "gate"}
acc_b = {r["case"]: r for r in queries.accuracy_rows(eng, [b]) if r["kind"] == "gate"}
verdicts: dict[str, object] = {}
if run_a["fingerprint"] == run_b["fingerprint"]:
    try:
        verdicts = {v.case: v for v in decide(eng, export_run(eng, b), a).verdicts if v.suite == "perf"}
    except GateUndecided as exc:
        st.info(md(f"The gate cannot judge B against A: {exc}"))
rows = []
for key in sorted(set(pa) & set(pb)):
    ra, rb = pa[key], pb[key]
    if (impl == "triton" and key[1] != "triton") or not ra["samples_ms"] or not rb["samples_ms"]:
        continue
    v = verdicts.get(key[0]) if key[1] == "triton" else None
    rows.append({"kernel": ra["kernel"], "case": key[0], "impl": key[1], "A µs": ra["median_ms"] * 1e3,
                 "B µs": rb["median_ms"] * 1e3,
                 "B/A time": rb["median_ms"] / ra["median_ms"] if ra["median_ms"] and rb["median_ms"] else None,
                 "gate": getattr(v, "status", None), "p (B slower)": getattr(v, "p_value", None),
                 "budget A": (acc_a.get(key[0]) or {}).get("error_budget"),
                 "budget B": (acc_b.get(key[0]) or {}).get("error_budget")})
for case in sorted((set(acc_a) & set(acc_b)) - {r["case"] for r in rows}):
    rows.append({"kernel": acc_a[case]["kernel"], "case": case, "impl": "triton",
                 "budget A": acc_a[case]["error_budget"], "budget B": acc_b[case]["error_budget"]})
frame = pd.DataFrame(rows, columns=["kernel", "case", "impl", "A µs", "B µs", "B/A time", "gate", "p (B slower)",
                                   "budget A", "budget B"])
same_hw = run_a["fingerprint"] == run_b["fingerprint"]
st.caption(md(("Same hardware. " if same_hw else "DIFFERENT hardware: times are not comparable. ")
              + "gate and p: the merge gate's verdict on B against A and its p-value (samples, the case's history, "
              "FDR control); red: what the gate fails on performance (regression, unreliable), or a budget over 1; "
              "green: B faster by more than 5%."))
if frame.empty:
    st.info("These runs share no cases.")
else:
    frame["budget delta"] = frame["budget B"] - frame["budget A"]
    shown = frame.assign(case=data.case_labels(list(frame["case"]), list(frame["kernel"])))
    common.table(highlight(shown), height=min(38 + 35 * len(frame), 740), column_config={
        "kernel": st.column_config.TextColumn(width=170),
        "case": st.column_config.TextColumn(width=420, help="variant/dtype and the parameters that tell this kernel's "
                                            "rows apart (the CSV has every full key)"),
        "impl": st.column_config.TextColumn(width=70),
        **{c: st.column_config.NumberColumn(format="%.4g", width=80) for c in ("A µs", "B µs")},
        "B/A time": st.column_config.NumberColumn(format="%.3f", width=80),
        "p (B slower)": st.column_config.NumberColumn(format="%.1e", width=90),
        **{c: st.column_config.NumberColumn(format="%.3g", width=80)
           for c in ("budget A", "budget B", "budget delta")}})
    st.download_button("Download CSV", frame.to_csv(index=False), file_name=f"compare-{a[:8]}-{b[:8]}.csv",
                       mime="text/csv")
common.finish(params, {"a": a[:8], "b": b[:8], "impl": None if impl == "triton" else impl})
