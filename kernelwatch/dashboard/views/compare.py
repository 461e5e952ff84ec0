"""Compare two runs case by case: time ratio with its significance, accuracy delta.

Opens on the newest run that has a comparable earlier run and the baseline Triage judges it against
(``verdicts.baseline_for``, the merge gate's rule), rows by effect, most slowed first. The gate column is
the gate's verdict on B against A as every page names it (``verdicts.triage``), not statistics of its own.
"""

import pandas as pd
import streamlit as st

from kernelwatch.dashboard import charts, common, data, verdicts
from kernelwatch.dashboard.safe import md
from kernelwatch.gate.reports import FINGERPRINT_NOTE
from kernelwatch.gate.statuses import RED_FILL, p_value
from kernelwatch.kernels.names import KERNEL_IMPL
from kernelwatch.store import queries
from kernelwatch.store.export import export_run

TRIES = 6  # newest runs tried for a default pair


def default_pair(eng, runs: list[dict]) -> tuple[str, str] | None:
    """(A, B): the newest run (of the newest TRIES) that has a comparable earlier run, and the run that supplied
    most of its timed cases to the baseline Triage assembles for it (else most of its cases)."""
    for run in runs[:TRIES]:
        base = verdicts.baseline_for(eng, export_run(eng, run["id"]), data.BASE_BRANCH)
        if base is not None:
            timed = max(base.sources, key=lambda s: s["perf"], default=None)
            return (timed["id"] if timed and timed["perf"] else base.run["id"]), run["id"]
    return None


def highlight(frame: pd.DataFrame):
    """The gate's verdict colours (as on Triage) on the verdict and the ratio; a budget over 1 red."""

    def row_style(row: pd.Series) -> list[str]:
        fill = charts.VERDICT_FILL.get(row.get("gate"), "")
        out = []
        for col in row.index:
            colour = fill if col in ("gate", "B/A time", "p") else ""
            if col in ("budget A", "budget B") and row[col] == row[col] and row[col] is not None and row[col] > 1:
                colour = RED_FILL
            out.append(f"background-color: {colour}" if colour else "")
        return out

    return frame.style.apply(row_style, axis=1)


eng, params = common.start("Compare two runs")
runs = queries.list_runs(eng, limit=300)
if len(runs) < 2:
    st.info("Two runs are needed.")
    st.stop()
contents = queries.run_contents(eng, [r["id"] for r in runs])
labels = {r["id"]: f"{data.run_label(r, contents[r['id']])} · {r['hardware']} ({r['fingerprint'][:6]})" for r in runs}
pair = default_pair(eng, runs) or (runs[1]["id"], runs[0]["id"])


def pick(key: str, default: str, column) -> str:
    prefix = params.run_prefix(key)
    match = [rid for rid in labels if prefix and rid.startswith(prefix)]
    if prefix and not match:
        params.problems.append(f"No run {prefix!r}: choose one below.")
    chosen = match[0] if match else default
    return column.selectbox(
        f"Run {key.upper()}" + (" (before)" if key == "a" else " (after)"),
        list(labels),
        index=list(labels).index(chosen),
        format_func=labels.get,
        key=key,
    )


a, b = pick("a", pair[0], st), pick("b", pair[1], st)  # one a line: a label says what the run holds
run_a, run_b = (next(r for r in runs if r["id"] == x) for x in (a, b))
if run_a["synthetic"] or run_b["synthetic"]:
    common.synthetic_note(True)
impls = [KERNEL_IMPL, "all"]
impl = st.selectbox(
    "Implementations",
    impls,
    index=impls.index(params.choice("impl", impls, KERNEL_IMPL)),
    key="impl",
    format_func={KERNEL_IMPL: "the kernel (Triton) only", "all": "all implementations"}.get,
)
pa = {(r["case"], r["implementation"]): r for r in queries.perf_rows(eng, [a], with_samples=True)}
pb = {(r["case"], r["implementation"]): r for r in queries.perf_rows(eng, [b], with_samples=True)}
acc_a = {r["case"]: r for r in queries.accuracy_rows(eng, [a]) if r["kind"] == "gate"}
acc_b = {r["case"]: r for r in queries.accuracy_rows(eng, [b]) if r["kind"] == "gate"}
judged: dict[str, dict] = {}
if run_a["fingerprint"] == run_b["fingerprint"] and (run_a["started"] or "") <= (run_b["started"] or ""):
    result = common.judge(b, a)
    if result["undecided"]:
        st.info(md(f"The gate cannot judge B against A: {result['undecided']}"))
    judged = {r["case"]: r for r in result["rows"]}
elif run_a["fingerprint"] == run_b["fingerprint"]:
    st.info("B started before A: the gate judges a run against an earlier one; swap them for its verdicts.")
rows = []
for key in sorted(set(pa) & set(pb)):
    ra, rb = pa[key], pb[key]
    if (impl == KERNEL_IMPL and key[1] != KERNEL_IMPL) or not ra["samples_ms"] or not rb["samples_ms"]:
        continue
    v = judged.get(key[0], {}) if key[1] == KERNEL_IMPL else {}
    rows.append(
        {
            "kernel": ra["kernel"],
            "case": key[0],
            "impl": charts.impl_label(key[1]),
            "A µs": ra["median_ms"] * 1e3,
            "B µs": rb["median_ms"] * 1e3,
            "B/A time": rb["median_ms"] / ra["median_ms"] if ra["median_ms"] and rb["median_ms"] else None,
            "gate": v.get("verdict"),
            "p": None if v.get("p") is None else p_value(v["p"]),
            "budget A": (acc_a.get(key[0]) or {}).get("error_budget"),
            "budget B": (acc_b.get(key[0]) or {}).get("error_budget"),
        }
    )
for case in sorted((set(acc_a) & set(acc_b)) - {r["case"] for r in rows}):
    rows.append(
        {
            "kernel": acc_a[case]["kernel"],
            "case": case,
            "impl": charts.impl_label(KERNEL_IMPL),
            "gate": judged.get(case, {}).get("verdict"),
            "budget A": acc_a[case]["error_budget"],
            "budget B": acc_b[case]["error_budget"],
        }
    )
frame = pd.DataFrame(
    rows, columns=["kernel", "case", "impl", "gate", "B/A time", "p", "A µs", "B µs", "budget A", "budget B"]
)
# by effect, most slowed first; then the accuracy-only rows, most grown budget first
frame["timed"] = frame["B/A time"].isna()
frame["order"] = frame["B/A time"].fillna(frame["budget B"] / frame["budget A"])
frame = frame.sort_values(["timed", "order", "case"], ascending=[True, False, True], na_position="last")
frame = frame.drop(columns=["timed", "order"]).reset_index(drop=True)
same_hw = run_a["fingerprint"] == run_b["fingerprint"]
st.caption(
    md(
        ("Same hardware. " if same_hw else "DIFFERENT hardware: times are not comparable. ")
        + "Most slowed first. gate and p: the merge gate's verdict on B against A, as Triage names it, and its "
        "p-value (samples, the case's history, FDR control); coloured as on Triage; a budget over 1 red. "
        "The parenthesis after a device name is " + FINGERPRINT_NOTE + ".",
        limit=800,
    )
)
if frame.empty:
    st.info("These runs share no cases.")
else:
    frame["budget delta"] = frame["budget B"] - frame["budget A"]
    # labels that tell the timed rows apart, and the accuracy-only rows apart (each set its own: the accuracy
    # suite's many parameters would lengthen every timed row's label)
    timed = frame["B/A time"].notna()
    labels = pd.Series("", index=frame.index, dtype=object)
    for part in (timed, ~timed):
        labels[part] = data.case_labels(list(frame.loc[part, "case"]), list(frame.loc[part, "kernel"]))
    shown = frame.assign(case=labels)
    common.table(
        highlight(shown),
        height=min(38 + 35 * len(frame), 740),
        column_config={
            "kernel": st.column_config.TextColumn(width=150),
            "case": st.column_config.TextColumn(
                width=280,
                help="variant/dtype and the parameters that tell this kernel's rows apart (the CSV has every full key)",
            ),
            "impl": st.column_config.TextColumn(width=110),
            "gate": st.column_config.TextColumn(width=130, help="The merge gate's verdict on B against A"),
            **{c: st.column_config.NumberColumn(format="%.4g", width=70) for c in ("A µs", "B µs")},
            "B/A time": st.column_config.NumberColumn(format="%.3f", width=70),
            "p": st.column_config.TextColumn(
                width=70, help="The gate's p-value (for a faster case, its test with the runs swapped)"
            ),
            **{
                c: st.column_config.NumberColumn(format="%.3g", width=92)
                for c in ("budget A", "budget B", "budget delta")
            },
        },
    )
    st.download_button(
        "Download CSV", frame.to_csv(index=False), file_name=f"compare-{a[:8]}-{b[:8]}.csv", mime="text/csv"
    )
common.finish(params, {"a": a[:8], "b": b[:8], "impl": None if impl == KERNEL_IMPL else impl})
