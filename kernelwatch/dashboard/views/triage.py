"""Triage: what got slower or less accurate, where, since when, and how to reproduce it.

Per hardware, the newest run with kernel timings and the newest with accuracy results (one section when one
run is both), each against its baseline (``verdicts.baseline_for``), judged by the merge gate itself
(``kernelwatch.gate.judge.decide``); one row per case, most severe first. Clicking a row opens the case page; clicking a
command cell shows the command ready to copy.
"""

import pandas as pd
import streamlit as st

from kernelwatch.dashboard import charts, common, confirmations, data, verdicts
from kernelwatch.dashboard.safe import md
from kernelwatch.gate.statuses import NEW, PASS, label_of, p_value
from kernelwatch.store import queries
from kernelwatch.store.schema import isolate

COLUMNS = (
    "verdict",
    "kernel",
    "case",
    "effect %",
    "p",
    "GPU",
    "now us",
    "before us",
    "budget change",
    "trend us",
    "reproduce",
    "bisect",
)
W = common.TRIAGE_WIDTHS
CONFIG = {
    "verdict": st.column_config.TextColumn("verdict", width=W["verdict"], help="The gate's verdict on this case"),
    "kernel": st.column_config.TextColumn("kernel", width=W["kernel"]),
    "case": st.column_config.TextColumn(
        "case",
        width=W["case"],
        help="variant/dtype and the parameters that tell this "
        "kernel's rows apart; click a row to open the case page (full key)",
    ),
    "effect %": st.column_config.NumberColumn(
        "effect %",
        format="%+.1f",
        width=W["effect %"],
        help="candidate / baseline median time - 1 (+ is slower); for an accuracy row, the change of its error budget",
    ),
    "p": st.column_config.TextColumn(
        "p",
        width=W["p"],
        help="Evidence for the change (the gate's p-value, before FDR control; for "
        "a faster case, the same test with the runs swapped)",
    ),
    "now us": st.column_config.NumberColumn("now µs", format="%.4g", width=W["now us"]),
    "before us": st.column_config.NumberColumn("before µs", format="%.4g", width=W["before us"]),
    "budget change": st.column_config.TextColumn(
        "error budget", width=W["budget change"], help="Accuracy: the error budget before → now (1 = at the tolerance)"
    ),
    "trend us": st.column_config.ImageColumn(
        "last 30 runs",
        width=W["trend us"],
        help="The kernel's median time in the last 30 runs, coloured by the "
        "verdict: red slower, green faster, amber within noise",
    ),
    "GPU": st.column_config.TextColumn(
        "GPU",
        width=W["GPU"],
        help="The model and physical device that measured it now (GPU-…: the start of its UUID; cuda:N: a run "
        "that recorded no UUID); the details say when the baseline came from another one",
    ),
    "reproduce": st.column_config.TextColumn(
        "reproduce", width=W["reproduce"], help="Click to show the command to copy"
    ),
    "bisect": st.column_config.TextColumn("bisect", width=W["bisect"], help="Click to show the command to copy"),
}


def style(frame: pd.DataFrame):
    return frame.style.apply(
        lambda col: [f"background-color: {charts.VERDICT_FILL.get(v, '')}" for v in col], subset=["verdict"]
    )


eng, params = common.start("Triage: what changed in the newest runs")
st.caption(
    "Per hardware, the newest run with perf results and the newest with accuracy results, each against "
    "its baseline, judged by the merge gate's statistics "
    "(timing samples, the case's own run-to-run noise on that hardware, false-discovery control). "
    "Most severe first. Click a row to open the case; click a command to copy it."
)
latest = sorted(queries.latest_runs(eng), key=data.hardware_rank)
if not latest:
    st.info("No runs yet: run `make demo`, `kernelwatch collect`, or `kernelwatch ingest ci/history/*.json.gz`.")
    st.stop()
options = data.hardware_options(eng)
c1, c2, c3 = st.columns([2, 2, 1])
hw_choices = ["all", *[r["fingerprint"] for r in latest]]
hw_default = params.choice("hardware", hw_choices, "all")
fp = c1.selectbox(
    "Hardware",
    hw_choices,
    index=hw_choices.index(hw_default),
    key="hardware",
    format_func=lambda f: "all hardware" if f == "all" else options.get(f, f),
    help=common.hardware_help(),
)
kernel = None
with c2:
    kernel = common.pick_kernel(eng, params, allow_all=True)
show_options = ["changes", "all cases"]
show = c3.selectbox(
    "Show",
    show_options,
    index=show_options.index(params.choice("show", show_options, "changes")),
    key="show",
    help="changes: every case that is not unchanged",
)
state = {"hardware": None if fp == "all" else fp, "kernel": kernel, "show": None if show == "changes" else show}

sections: list[tuple[str, dict, str | None]] = []  # (what the run is, the run judged, an explicit baseline)
for hw_run in latest if fp == "all" else [r for r in latest if r["fingerprint"] == fp]:
    newest = data.triage_runs(eng, hw_run["fingerprint"], kernel)
    if fp == "all":
        sections += [(role, run, None) for role, run in newest]
        continue
    # One hardware: any of its runs can be judged against any earlier one; "newest" judges both defaults.
    history = queries.recent_runs(eng, fp, data.TRIAGE_SCAN)[::-1]
    contents = queries.run_contents(eng, [r["id"] for r in history])
    labels = {r["id"]: data.run_label(r, contents[r["id"]]) for r in history}
    prefix = params.run_prefix("run")
    picked = next((i for i in labels if prefix and i.startswith(prefix)), "newest")
    d1, d2 = st.columns(2)
    run_options = ["newest", *labels]
    defaults = " and ".join(f"{role} {r['id'][:8]}" for role, r in newest)
    cid = d1.selectbox(
        "Run judged",
        run_options,
        index=run_options.index(picked),
        key="run",
        format_func={"newest": f"newest with perf and with accuracy ({defaults})", **labels}.get,
    )
    if cid == "newest":
        sections += [(role, run, None) for role, run in newest]
        state.update(run=None, base=None)
        continue
    candidate = next(r for r in history if r["id"] == cid)
    earlier = [r["id"] for r in history if r["id"] != cid and (r["started"] or "") < (candidate["started"] or "")]
    base_options = ["auto", *earlier]
    bprefix = params.run_prefix("base")
    bpicked = next((i for i in earlier if bprefix and i.startswith(bprefix)), "auto")
    bid = d2.selectbox(
        "Baseline",
        base_options,
        index=base_options.index(bpicked),
        key="base",
        format_func={"auto": "automatic: newest earlier comparable run", **labels}.get,
    )
    state.update(run=cid[:8], base=bid[:8] if bid != "auto" else None)
    sections.append(("picked", candidate, None if bid == "auto" else bid))

for role, candidate, baseline in sections:
    result = common.judge(candidate["id"], baseline)
    cand, base = result["candidate"], result["baseline"]
    title = options.get(cand["fingerprint"], cand["hardware"])
    heading = md(title) + ("" if role == "picked" else f" — newest run with {role}")
    st.subheader(heading + (" — SYNTHETIC" if cand["synthetic"] else ""), divider="gray", help=common.hardware_help())
    st.caption(
        md(
            f"judged: {data.run_label(cand)} on {isolate(cand['branch'])} ({cand['status']}) — baseline: "
            + (f"{data.run_label(base)} on {isolate(base['branch'])}" if base else "none")
        )
    )
    confirmations.show(eng, cand["fingerprint"], commit=cand["commit"])
    if cand["synthetic"] or (base and base["synthetic"]):
        common.synthetic_note(True)
    if result["software"]:
        st.warning(
            md(
                "Software changed since the baseline: "
                + "; ".join(result["software"])
                + ". A change in time may come from it, not from the code.",
                limit=600,
            ),
            icon=":material/build:",
        )
    if result["undecided"]:
        st.info(md(f"The gate cannot compare: {result['undecided']}", limit=500))
    rows = result["rows"]
    if kernel:
        rows = [r for r in rows if r["kernel"] == kernel]
    st.text(" · ".join(f"{v}: {n}" for v, n in verdicts.counts(rows)) or "no cases")
    if show == "changes":  # "new" (no baseline measured the case) is not a change: counted above, listed under "all"
        rows = [r for r in rows if r["verdict"] not in (label_of(PASS), label_of(NEW))]
    if not rows:
        st.success(
            "Nothing changed" + (f" in {kernel}" if kernel else "") + ": every case is unchanged or new "
            '("Show: all cases" lists them).'
        )
        continue
    frame = pd.DataFrame(rows)
    shown = frame.assign(
        case=data.case_labels(list(frame["case"]), list(frame["kernel"])),
        p=[None if v is None or v != v else p_value(v) for v in frame["p"]],
        # a command is shown whole below the table when its cell is clicked; the cell says what it runs
        reproduce=["collect" if c else None for c in frame["reproduce"]],
        bisect=["bisect" if c else None for c in frame["bisect"]],
        **{
            "trend us": [
                charts.sparkline(t, charts.VERDICT_LINE.get(v, charts.NEUTRAL))
                for t, v in zip(frame["trend us"], frame["verdict"])
            ]
        },
    )
    event = common.table(
        style(shown[list(COLUMNS)]),
        column_config=CONFIG,
        on_select="rerun",
        selection_mode=["single-row", "single-cell"],
        key=f"table-{cand['fingerprint']}-{cand['id']}",
        height=min(38 + 35 * len(shown), 560),
        row_height=35,
    )
    cells = event.selection.cells if event is not None else []
    picked_rows = event.selection.rows if event is not None else []
    if cells and cells[0][1] in ("reproduce", "bisect"):
        row = frame.iloc[cells[0][0]]
        st.text(f"{cells[0][1]} {isolate(row['case'])}:")
        st.code(row[cells[0][1]] or "# no command: this run's commit is not a git sha", language="bash")
    elif cells or picked_rows:
        row = frame.iloc[cells[0][0] if cells else picked_rows[0]]
        st.switch_page("views/case.py", query_params={"case": row["case"], "hardware": cand["fingerprint"]})
common.finish(params, state)
