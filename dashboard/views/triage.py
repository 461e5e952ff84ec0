"""Triage: what got slower or less accurate, where, since when, and how to reproduce it.

Each hardware's newest run against its baseline, judged by the merge gate itself (``ci.gate.decide``);
one row per case, most severe first. Clicking a row opens the case page; clicking a command cell shows
the command ready to copy.
"""

import os

import pandas as pd
import streamlit as st

from dashboard import common, data, verdicts
from dashboard.safe import md
from db import queries

RED, AMBER, GREEN, VIOLET = "#f8d0d0", "#fbeec2", "#d3efd9", "#e7dcf3"
COLOUR = {"accuracy failed": RED, "errored": RED, "not measured": RED, "slower": RED, "accuracy warning": AMBER,
          "slower (within noise)": AMBER, "acknowledged": VIOLET, "faster": GREEN}
COLUMNS = ("verdict", "kernel", "case", "effect %", "p", "now us", "before us", "trend us", "reproduce", "bisect")
CONFIG = {
    "verdict": st.column_config.TextColumn("verdict", width=128, help="The gate's verdict on this case"),
    "kernel": st.column_config.TextColumn("kernel", width=118),
    "case": st.column_config.TextColumn("case", width=300, help="Click a row to open the case page"),
    "effect %": st.column_config.NumberColumn("effect %", format="%+.1f", width=64,
                                              help="candidate / baseline median time - 1 (+ is slower)"),
    "p": st.column_config.NumberColumn("p", format="%.1e", width=62,
                                       help="Evidence for the change (the gate's p-value, before FDR control)"),
    "now us": st.column_config.NumberColumn("now µs", format="%.4g", width=66),
    "before us": st.column_config.NumberColumn("before µs", format="%.4g", width=70),
    "trend us": st.column_config.LineChartColumn("last 30 runs (µs)", width=110),
    "reproduce": st.column_config.TextColumn("reproduce", width=170, help="Click to show the command to copy"),
    "bisect": st.column_config.TextColumn("bisect", width=140, help="Click to show the command to copy"),
}


@st.cache_data(ttl=300, show_spinner="Judging the newest run against its baseline…", max_entries=64)
def judged(url: str | None, candidate: str, baseline: str | None, acks: int) -> dict:
    """Triage of one run, cached per (database, candidate, baseline, number of acks): runs never change."""
    return verdicts.triage(data.engine(), candidate, baseline, data.BASE_BRANCH).as_dict()


def style(frame: pd.DataFrame):  # noqa: ANN201 - a pandas Styler
    return frame.style.apply(lambda col: [f"background-color: {COLOUR.get(v, '')}" for v in col], subset=["verdict"])


eng, params = common.start("Triage: what changed in the newest runs")
st.caption("Each hardware's newest run against its baseline, judged by the merge gate's statistics "
           "(timing samples, the case's own run-to-run noise on that hardware, false-discovery control). "
           "Most severe first. Click a row to open the case; click a command to copy it.")
latest = sorted(queries.latest_runs(eng), key=data.hardware_rank)
if not latest:
    st.info("No runs yet: run `make demo`, `kernelwatch collect`, or `kernelwatch ingest ci/history/*.json.gz`.")
    st.stop()
options = data.hardware_options(eng)
c1, c2, c3 = st.columns([2, 2, 1])
hw_choices = ["all", *[r["fingerprint"] for r in latest]]
hw_default = params.choice("hardware", hw_choices, "all")
fp = c1.selectbox("Hardware", hw_choices, index=hw_choices.index(hw_default), key="hardware",
                  format_func=lambda f: "all hardware" if f == "all" else options.get(f, f))
kernel = None
with c2:
    kernel = common.pick_kernel(eng, params, allow_all=True)
show_options = ["changes", "all cases"]
show = c3.selectbox("Show", show_options, index=show_options.index(params.choice("show", show_options, "changes")),
                    key="show", help="changes: every case that is not unchanged")
state = {"hardware": None if fp == "all" else fp, "kernel": kernel, "show": None if show == "changes" else show}

sections = latest if fp == "all" else [r for r in latest if r["fingerprint"] == fp]
for run in sections:
    candidate, baseline = run, None
    if fp != "all":  # one hardware: any of its runs can be judged against any earlier one
        history = queries.recent_runs(eng, fp, 60)[::-1]
        labels = {r["id"]: data.run_label(r) for r in history}
        prefix = params.run_prefix("run")
        picked = next((i for i in labels if prefix and i.startswith(prefix)), run["id"])
        d1, d2 = st.columns(2)
        cid = d1.selectbox("Run judged", list(labels), index=list(labels).index(picked) if picked in labels else 0,
                           format_func=labels.get, key="run")
        candidate = next(r for r in history if r["id"] == cid)
        earlier = [r["id"] for r in history if r["id"] != cid and (r["started"] or "") < (candidate["started"] or "")]
        base_options = ["auto", *earlier]
        bprefix = params.run_prefix("base")
        bpicked = next((i for i in earlier if bprefix and i.startswith(bprefix)), "auto")
        bid = d2.selectbox("Baseline", base_options, index=base_options.index(bpicked), key="base",
                           format_func={"auto": "automatic: newest earlier comparable run", **labels}.get)
        baseline = None if bid == "auto" else bid
        state.update(run=cid[:8] if cid != run["id"] else None, base=bid[:8] if baseline else None)
    n_acks = len(queries.acks(eng, candidate["fingerprint"]))
    result = judged(os.environ.get("KERNELWATCH_DB"), candidate["id"], baseline, n_acks)
    cand, base = result["candidate"], result["baseline"]
    title = options.get(cand["fingerprint"], cand["hardware"])
    st.subheader(md(title) + (" — SYNTHETIC" if cand["synthetic"] else ""), divider="gray")
    st.caption(md(f"judged: {data.run_label(cand)} on {cand['branch']} ({cand['status']}) — baseline: "
                  + (f"{data.run_label(base)} on {base['branch']}" if base else "none")))
    if cand["synthetic"] or (base and base["synthetic"]):
        common.synthetic_note(True)
    if result["software"]:
        st.warning(md("Software changed since the baseline: " + "; ".join(result["software"])
                      + ". A change in time may come from it, not from the code.", limit=600), icon=":material/build:")
    if result["undecided"]:
        st.info(md(f"The gate cannot compare: {result['undecided']}", limit=500))
    rows = result["rows"]
    if kernel:
        rows = [r for r in rows if r["kernel"] == kernel]
    counts = pd.Series([r["verdict"] for r in rows], dtype=object).value_counts()
    st.text(" · ".join(f"{v}: {counts[v]}" for v in verdicts.SEVERITY if v in counts) or "no cases")
    if show == "changes":
        rows = [r for r in rows if r["verdict"] != "unchanged"]
    if not rows:
        st.success("Nothing changed" + (f" in {kernel}" if kernel else "") + ": every case is unchanged.")
        continue
    frame = pd.DataFrame(rows)
    shown = frame.assign(case=[data.short_case(c, k) for c, k in zip(frame["case"], frame["kernel"])])
    event = common.table(style(shown[list(COLUMNS)]), column_config=CONFIG, on_select="rerun",
                         selection_mode=["single-row", "single-cell"], key=f"table-{cand['fingerprint']}",
                         height=min(38 + 35 * len(shown), 560), row_height=35)
    cells = event.selection.cells if event is not None else []
    picked_rows = event.selection.rows if event is not None else []
    if cells and cells[0][1] in ("reproduce", "bisect"):
        row = frame.iloc[cells[0][0]]
        st.text(f"{cells[0][1]} {row['case']}:")
        st.code(row[cells[0][1]], language="bash")
    elif cells or picked_rows:
        row = frame.iloc[cells[0][0] if cells else picked_rows[0]]
        st.switch_page("views/case.py", query_params={"case": row["case"], "hardware": cand["fingerprint"]})
common.finish(params, state)
