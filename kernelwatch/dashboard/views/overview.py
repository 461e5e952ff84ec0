"""Overview: per hardware, each kernel's verdicts (Triage's, by the merge gate), speedups, targets and trend."""

import os
from urllib.parse import urlencode

import numpy as np
import pandas as pd
import streamlit as st

from kernelwatch.dashboard import common, data, verdicts
from kernelwatch.dashboard.safe import md
from kernelwatch.gate.statuses import (
    ACCURACY_FAILED,
    ACCURACY_WARNING,
    AMBER_FILL,
    ERROR,
    FASTER,
    GREEN_FILL,
    PASS,
    RED_FILL,
    label_of,
)
from kernelwatch.kernels.names import COMPILE_IMPL, KERNEL_IMPL, PEER_LABELS
from kernelwatch.store import queries

HISTORY = 20  # runs per hardware behind the trend


def shortfalls(frame: pd.DataFrame):
    """Red: slower, accuracy failures, errors, targets missed; amber: warnings, slower than torch.compile;
    green: faster."""

    def missed(v: object) -> bool:
        return isinstance(v, str) and "/" in v and v.split("/")[0] != v.split("/")[1]

    def colour(row: pd.Series) -> list[str]:
        out = []
        for col in row.index:
            v, c = row[col], ""
            if (col in (verdicts.SLOWER, label_of(ACCURACY_FAILED), verdicts.NOT_MEASURED) and v) or (
                col == "targets met" and missed(v)
            ):
                c = RED_FILL
            elif (col == "x torch.compile" and v is not None and v == v and v < 1) or (
                col == label_of(ACCURACY_WARNING) and v
            ):
                c = AMBER_FILL
            elif col == label_of(FASTER) and v:
                c = GREEN_FILL
            out.append(f"background-color: {c}" if c else "")
        return out

    return frame.style.apply(colour, axis=1)


eng, params = common.start("KernelWatch — overview")
latest = queries.latest_runs(eng)
if not latest:
    st.info(
        "No complete runs yet: run `make demo`, `kernelwatch collect`, or `kernelwatch ingest ci/history/*.json.gz`."
    )
    st.stop()
latest.sort(key=data.hardware_rank)
st.caption(
    "Each hardware's newest runs per kernel, judged as Triage judges them (the merge gate against each run's "
    "baseline; the counts are Triage's with that kernel picked). For each case, see Triage."
)


@st.cache_data(ttl=300, show_spinner=False, max_entries=64)
def speed(url: str | None, fingerprint: str, newest_run: str) -> dict[str, dict]:
    """Per kernel of one hardware: speedups, targets and trend of its newest run with kernel timings."""
    eng = data.engine()
    history = queries.recent_runs(eng, fingerprint, HISTORY)
    perf = data.perf_frame(
        eng, history, None, implementations=(KERNEL_IMPL, COMPILE_IMPL, *data.PEER_IMPLS), with_params=False
    )
    order = {r["id"]: i for i, r in enumerate(history)}
    out = {}
    for kernel in sorted(set(perf["kernel"]) if not perf.empty else set()):
        kp = perf[perf["kernel"] == kernel]
        newest = max(kp["run_id"], key=order.get)
        trit = kp[kp["implementation"] == KERNEL_IMPL]
        now = trit[trit["run_id"] == newest]
        comp = kp[(kp["implementation"] == COMPILE_IMPL) & (kp["run_id"] == newest)].set_index("case")
        vs_compile = [
            c / t
            for case, t in zip(now["case"], now["median_ms"])
            if t and case in comp.index and (c := comp.loc[case, "median_ms"])
        ]
        met = list(now["target_met"].dropna())
        # the trend: per run, the geometric mean over the cases EVERY plotted run holds (a case joining or
        # leaving the set is not a change of speed)
        held = trit.dropna(subset=["speedup_vs_eager"])
        common_cases = (
            set.intersection(*(set(g["case"]) for _, g in held.groupby("run_id"))) if not held.empty else set()
        )
        kept = held[held["case"].isin(common_cases) & (held["speedup_vs_eager"] > 0)]
        trend = list(np.exp(np.log(kept["speedup_vs_eager"]).groupby(kept["order"]).mean()).dropna())
        out[kernel] = {
            "x eager": data.geomean(list(now["speedup_vs_eager"])),
            "x torch.compile": data.geomean(vs_compile),
            "vs best peer": data.vs_best_peer(kp[kp["run_id"] == newest]),
            "targets met": f"{int(sum(met))}/{len(met)}" if met else None,
            "trend (x eager)": trend or None,
        }
    return out


def summary(fingerprint: str, newest_run: str) -> list[dict]:
    """One row per kernel of one hardware: Triage's verdict counts (``verdicts.kernel_summary``), then speed."""
    speeds = speed(os.environ.get("KERNELWATCH_DB"), fingerprint, newest_run)
    rows = []
    for kernel in queries.kernel_names(eng):
        found = verdicts.kernel_summary(eng, fingerprint, kernel, common.judge)
        if not found["runs"]:
            continue
        runs = " + ".join(dict.fromkeys(f"{r['commit'][:8]} (run {r['id'][:8]})" for _, r in found["runs"]))
        rows.append(
            {
                "kernel": kernel,
                "judged run": runs,
                **{name: found[name] for name in verdicts.SUMMARY},
                "resolved": found["resolved"],
                **speeds.get(kernel, {}),
                "details": f"triage?{urlencode({'kernel': kernel, 'hardware': fingerprint})}",
            }
        )
    return rows


COLUMNS = (
    "kernel",
    *verdicts.SUMMARY,
    "resolved",
    "x eager",
    "x torch.compile",
    "vs best peer",
    "targets met",
    "trend (x eager)",
    "details",
)
SHORT = {
    "within noise": "± noise",
    label_of(ACCURACY_FAILED): "acc. fail",
    label_of(ACCURACY_WARNING): "acc. warn",
    verdicts.NOT_MEASURED: label_of(ERROR),
    label_of(PASS): "same",
}
for run in latest:
    tag = " — SYNTHETIC (generated, not measured)" if run["synthetic"] else ""
    label = data.hardware_options(eng).get(run["fingerprint"], run["hardware"])
    st.subheader(md(label) + tag, divider="gray", help=common.hardware_help())
    rows = summary(run["fingerprint"], run["id"])
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    # a column with nothing in it on this hardware (a CPU run's speed, counts of 0) is named below, not drawn
    empty = [c for c in COLUMNS[1:-1] if not any(v is not None and v == v and v != 0 for v in frame[c])]
    common.table(
        shortfalls(frame.drop(columns=empty)),
        column_config={
            "kernel": st.column_config.TextColumn(width=170),
            **{
                name: st.column_config.NumberColumn(
                    SHORT.get(name, name), width=62, help="cases Triage calls " + " or ".join(f"'{v}'" for v in labels)
                )
                for name, labels in verdicts.SUMMARY.items()
            },
            "resolved": st.column_config.NumberColumn(
                width=64, help=f"slowdowns a newer run measured back: '{verdicts.RESOLVED}' in Triage"
            ),
            "x eager": st.column_config.NumberColumn(
                "x eager", format="%.2f", width=70, help="geometric mean of t(eager) / t(kernel) in the newest run"
            ),
            "x torch.compile": st.column_config.NumberColumn(
                "x compile", format="%.2f", width=76, help="geometric mean of t(torch.compile) / t(kernel)"
            ),
            "vs best peer": st.column_config.NumberColumn(
                "x peer",
                format="%.2f",
                width=64,
                help="geometric mean of t(fastest peer: "
                + ", ".join(label.removeprefix("peer: ") for label in PEER_LABELS.values())
                + ") / t(kernel), over the cases a peer was timed in",
            ),
            "targets met": st.column_config.TextColumn("targets", width=64),
            "trend (x eager)": st.column_config.LineChartColumn("trend (x eager)", width=96),
            "details": st.column_config.LinkColumn("details", display_text="triage →", width=70),
        },
    )
    if empty:
        st.caption(md("none on this hardware: " + ", ".join(SHORT.get(c, c) for c in empty)))
    judged = "; ".join(f"{r['kernel']}: {r['judged run']}" for r in rows)
    started = data.when(run["started"])
    st.caption(
        md(
            f"newest run {run['id'][:8]} · commit {run['commit'][:12]} · started {started} · judged (the "
            f"newest with kernel timings and the newest with accuracy, per kernel): {judged}",
            limit=1200,
        )
    )
    st.caption(
        md(
            "counts: the merge gate's verdicts, as Triage shows them with that kernel picked; red: slower, "
            "accuracy failures, errors or targets missed; amber: accuracy warnings or slower than torch.compile; "
            "green: faster; trend: geometric mean over the cases every plotted run holds",
            limit=600,
        )
    )
common.finish(params, {})
