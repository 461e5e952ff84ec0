"""Plotly figure builders. Pure functions of DataFrames: no Streamlit, no database, no torch.

Readable by construction: at most MAX_SERIES data series per chart (the pages group cases by one
parameter and let the user pick which groups), legend entries are short labels, a label keeps its
colour whatever else is shown (:func:`colours`), reference lines are legend entries rather than text
drawn on the plot (two labels can never print on top of each other), and every text from the database
goes through ``safe.plot`` (Plotly renders a subset of HTML, links included, in labels and hovers).
"""

from __future__ import annotations

import base64
import itertools
import math
import zlib
from collections.abc import Iterable

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kernelwatch.dashboard.safe import plot as esc
from kernelwatch.gate.statuses import TABLE
from kernelwatch.kernels.names import (
    ALL_LABELS,
    APEX_IMPL,
    COMPILE_IMPL,
    EAGER_IMPL,
    FLAGGEMS_IMPL,
    KERNEL_IMPL,
    LABELS,
    LIGER_IMPL,
    PEER_LABELS,
    calls_per_sample,
)
from kernelwatch.kernels.names import label as impl_label

MAX_SERIES = 8
SYNTHETIC_NOTE = "<br><sup>includes SYNTHETIC data (generated, not measured)</sup>"
# Okabe-Ito's colour-blind-safe set, then darker tones: a label's colour comes from its place among all
# the labels a parameter can take (not among those shown), so filtering never recolours a line.
PALETTE = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#F0E442",
    "#000000",
    "#7F3C8D",
    "#11A579",
    "#3969AC",
    "#E73F74",
)
IMPL_COLOURS = {
    KERNEL_IMPL: "#0072B2",
    EAGER_IMPL: "#7F7F7F",
    COMPILE_IMPL: "#D55E00",
    LIGER_IMPL: "#E69F00",
    FLAGGEMS_IMPL: "#56B4E9",
    APEX_IMPL: "#000000",
}
IMPL_NAMES = LABELS
PEER_NAMES = PEER_LABELS  # peers (kernelwatch/kernels/names.py): drawn dashed; never gating
ANY_NAMES = ALL_LABELS  # every implementation a page names, references (cuBLAS alone, ...) included
# Verdict colours by label (kernelwatch.gate.statuses): a table cell's fill, a line's colour; a label without one is
# neutral.
VERDICT_FILL = {s.label: s.fill for s in TABLE if s.fill}
NEUTRAL = "#8c8c8c"
VERDICT_LINE = {s.label: s.line for s in TABLE if s.line}


def impl_colour(impl: str) -> str:
    """The fixed colour of the three implementations every kernel has (and of the peers); a kernel's own
    baselines (cuBLAS alone, ...) take one of the others, fixed by the name (crc32), so no kernel's names live
    here."""
    return IMPL_COLOURS.get(impl) or PALETTE[2 + zlib.crc32(impl.encode()) % (len(PALETTE) - 2)]


def colours(universe: Iterable[str]) -> dict[str, str]:
    """label -> colour, fixed by the label's rank among every label of ``universe`` (sorted)."""
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(sorted(set(universe)))}


def _title(text: str, synthetic: bool) -> dict:
    """Left-aligned in the top margin: Plotly's toolbar takes the top right corner, a title never reaches it
    (tests/test_chart_layout.py measures both in Chromium)."""
    return {
        "text": esc(text) + (SYNTHETIC_NOTE if synthetic else ""),
        "font": {"size": 15},
        "x": 0.005,
        "xanchor": "left",
        "xref": "container",
        "yref": "container",
        "y": 1,
        "yanchor": "top",
        "pad": {"t": 12},
    }


def _hline(
    fig: go.Figure,
    xs: list[str],
    y: float,
    name: str,
    colour: str,
    dash: str,
    row: int | None = None,
    legendgroup: str | None = None,
    showlegend: bool = True,
) -> None:
    """A horizontal reference line drawn as a trace: its label lives in the legend, never on the plot."""
    trace = go.Scatter(
        x=[xs[0], xs[-1]],
        y=[y, y],
        mode="lines",
        name=name,
        hoverinfo="name",
        line={"color": colour, "dash": dash, "width": 1.5},
        legendgroup=legendgroup or name,
        showlegend=showlegend,
    )
    if row is None:
        fig.add_trace(trace)
    else:
        fig.add_trace(trace, row=row, col=1)


def _layout(fig: go.Figure, height: int) -> None:
    """The legend goes under the plot, where it can wrap onto more lines without covering the title."""
    fig.update_layout(
        height=height,
        margin={"t": 72, "l": 60, "r": 20, "b": 70},
        hovermode="closest",
        legend={"orientation": "h", "yref": "container", "yanchor": "bottom", "y": 0.005, "x": 0, "font": {"size": 11}},
    )
    fig.update_xaxes(tickangle=-35, automargin=True)


def _categories(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame.sort_values("order")["x"]))


MAX_X_TICKS = 12  # rotated commit labels of ~1,100 px of plot: more than this overlap


def _run_axis(fig: go.Figure, xs: list[str], row: int | None = None, **kwargs: object) -> None:
    """A category axis of runs (commit·run id) with at most MAX_X_TICKS labels: past that, every k-th run is
    labelled with its commit alone (the hover names every point's run)."""
    ticks: dict = {}
    if len(xs) > MAX_X_TICKS:
        step = math.ceil(len(xs) / MAX_X_TICKS)
        shown = xs[::step]
        ticks = {"tickmode": "array", "tickvals": shown, "ticktext": [x.split("·")[0] for x in shown]}
    target = {} if row is None else {"row": row, "col": 1}
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=xs, **ticks, **kwargs, **target)


def _nice_step(span: float, most: int) -> float:
    """The 1-2-5 step that cuts ``span`` into at most ``most`` intervals."""
    raw = span / max(most, 1)
    base = 10 ** math.floor(math.log10(raw))
    return next(m * base for m in (1, 2, 2.5, 5, 10) if m * base >= raw)


def _label(value: float, step: float) -> str:
    """A tick label with the digits its step needs and no more ("2,900", "0.05", "1.15")."""
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    if abs(value) >= 1000 and decimals == 0:
        return f"{value:,.0f}"
    return f"{value:.{decimals}f}" if step < 1 else f"{value:g}"


def linear_ticks(values: Iterable[float], most: int = 6, pad: float = 0.08, zero: bool = False) -> dict:
    """A linear axis fitted to ``values``: the range spans them plus ``pad`` of their spread either side (or 1%
    of their level when they are all equal), never reaching below 0 for positive values unless ``zero``; ticks
    every 1-2-5 step inside it, at least three, each labelled. An axis left to Plotly over a narrow range
    shows one or two labels."""
    vals = [float(v) for v in values if v is not None and isinstance(v, (int, float)) and math.isfinite(v)]
    if not vals:
        return {}
    lo, hi = min(vals), max(vals)
    spread = hi - lo or abs(hi) * 0.02 or 1.0
    lo, hi = lo - pad * spread, hi + pad * spread
    if zero:
        lo = min(lo, 0.0)
    elif min(vals) >= 0:
        lo = max(lo, 0.0)
    step = _nice_step(hi - lo, most)
    ticks = [round(k * step, 12) for k in range(math.ceil(lo / step), math.floor(hi / step) + 1)]
    while len(ticks) < 3:
        step = _nice_step(step * 0.999, 2)
        ticks = [round(k * step, 12) for k in range(math.ceil(lo / step), math.floor(hi / step) + 1)]
    return {"tickmode": "array", "tickvals": ticks, "ticktext": [_label(t, step) for t in ticks], "range": [lo, hi]}


def log_ticks(values: Iterable[float], most: int = 9) -> dict:
    """Range, tick values and labels of a log axis over ``values``: the range is the values' own with a margin
    of a tenth of their span in log (at least 4% either side), ticks at 1-2-5 steps per decade (decades alone
    when that would be more than ``most``); where fewer than three fall inside (less than a decade), plain
    linear 1-2-5 steps inside the range instead. Every label is a plain number ("0.02", "1", "50"): Plotly's
    own log ticks label the minor 2 and 5 of each decade "2" and "5" next to "0.1" and "1"."""
    vals = [v for v in values if v is not None and isinstance(v, (int, float)) and v > 0 and math.isfinite(v)]
    if not vals:
        return {}
    lo, hi = math.log10(min(vals)), math.log10(max(vals))
    margin = max(0.1 * (hi - lo), 0.017)
    lo, hi = lo - margin, hi + margin
    ticks: list[float] = []
    for mantissas in ((1, 2, 5), (1,)):
        ticks = [m * 10.0**e for e in range(math.floor(lo), math.ceil(hi) + 1) for m in mantissas]
        ticks = [t for t in ticks if lo <= math.log10(t) <= hi]
        if len(ticks) <= most:
            break
    else:
        ticks = ticks[:: math.ceil(len(ticks) / most)]
    if len(ticks) >= 3:
        return {"tickmode": "array", "tickvals": ticks, "ticktext": [f"{t:g}" for t in ticks], "range": [lo, hi]}
    linear = linear_ticks([10**lo, 10**hi], most=5, pad=0.0)
    kept = [(v, t) for v, t in zip(linear["tickvals"], linear["ticktext"]) if v > 0]
    return {"tickmode": "array", "tickvals": [v for v, _ in kept], "ticktext": [t for _, t in kept], "range": [lo, hi]}


def sparkline(values: list[float] | None, colour: str, width: int = 88, height: int = 26) -> str | None:
    """A small SVG line of ``values`` (oldest first) as a data URL for an image cell, drawn in ``colour``
    (a verdict's, VERDICT_LINE): Streamlit's own sparkline colours by the first and last value, so a faster
    row was red. Only numbers reach the SVG."""
    vals = [float(v) for v in values or [] if v is not None and math.isfinite(v)]
    if len(vals) < 2:
        return None
    lo, hi = min(vals), max(vals)
    span = hi - lo or 1.0
    pts = " ".join(
        f"{2 + i * (width - 4) / (len(vals) - 1):.1f},{height - 3 - (v - lo) / span * (height - 6):.1f}"
        for i, v in enumerate(vals)
    )
    last = pts.split(" ")[-1].split(",")
    svg = (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}'>"
        f"<polyline fill='none' stroke='{colour}' stroke-width='1.6' points='{pts}'/>"
        f"<circle cx='{last[0]}' cy='{last[1]}' r='2.2' fill='{colour}'/></svg>"
    )
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()


# ---------------------------------------------------------------------------------------------
# Performance across commits, grouped
# ---------------------------------------------------------------------------------------------
def _dash(rows: pd.DataFrame) -> str:
    """A line's dash: its rows' ``dash`` column (another branch's line is dashed), else solid."""
    return str(rows["dash"].iloc[0]) if "dash" in rows and len(rows) else "solid"


def grouped_speedups(
    series: pd.DataFrame,
    palette: dict[str, str],
    group_by: str,
    title: str,
    targets: dict[str, list[tuple[float, str]]],
    changes: pd.DataFrame | None = None,
) -> go.Figure:
    """Two panels sharing the x axis (runs in commit order): the kernel's speedup over eager PyTorch and
    over torch.compile, one line per group (geometric mean over the group's cases in each run), log y.

    ``series`` columns: x, order, group, vs_eager, vs_compile, hover, synthetic. ``targets``: impl -> [(value,
    the lines it applies to, "" for all)].
    """
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=(
            "kernel speedup over eager PyTorch (t eager / t kernel)",
            "kernel speedup over torch.compile (t compile / t kernel)",
        ),
    )
    xs = _categories(series) if not series.empty else ["-"]
    for group, rows in series.groupby("group", sort=True):
        rows = rows.sort_values("order")
        for row, col in ((1, "vs_eager"), (2, "vs_compile")):
            fig.add_trace(
                go.Scatter(
                    x=rows["x"],
                    y=rows[col],
                    mode="lines+markers",
                    name=esc(group),
                    legendgroup=esc(group),
                    showlegend=row == 1,
                    hovertext=rows["hover"],
                    hoverinfo="text",
                    line={"color": palette.get(group, "#333"), "dash": _dash(rows)},
                    marker={"symbol": ["diamond-open" if s else "circle" for s in rows["synthetic"]], "size": 7},
                ),
                row=row,
                col=1,
            )
    if changes is not None and not changes.empty:
        fig.add_trace(
            go.Scatter(
                x=changes["x"],
                y=changes["y"],
                mode="markers",
                name="change point",
                hovertext=changes["hover"],
                hoverinfo="text",
                marker={"symbol": "x", "size": 13, "color": "#C00000"},
            ),
            row=1,
            col=1,
        )
    _hline(fig, xs, 1.0, "parity (1x)", "#7F7F7F", "dot", row=1, legendgroup="parity")
    _hline(fig, xs, 1.0, "parity (1x)", "#7F7F7F", "dot", row=2, legendgroup="parity", showlegend=False)
    for row, impl, word in ((1, EAGER_IMPL, "eager"), (2, COMPILE_IMPL, "torch.compile")):
        for value, lines in targets.get(impl, []):
            _hline(fig, xs, value, f"target {value:g}x {word}{esc(lines)}", "#009E73", "dash", row=row)
    for row, col in ((1, "vs_eager"), (2, "vs_compile")):
        refs = [1.0, *(v for v, _ in targets.get(EAGER_IMPL if row == 1 else COMPILE_IMPL, []))]
        fig.update_yaxes(type="log", **log_ticks([*series.get(col, []), *refs]), row=row, col=1)
    _run_axis(fig, xs, row=1)
    _run_axis(fig, xs, row=2, title=f"run (commit·run id, commit order); lines: {esc(group_by)}")
    _layout(fig, 680)
    fig.update_layout(
        title=_title(title, bool(series["synthetic"].any()) if not series.empty else False),
        legend_title_text=esc(group_by) + ":",
    )
    return fig


def grouped_metric(
    series: pd.DataFrame,
    palette: dict[str, str],
    group_by: str,
    title: str,
    y_title: str,
    log: bool = True,
    reference: tuple[float, str] | None = None,
    method: str | None = None,
) -> go.Figure:
    """One panel, one line per group. ``series`` columns: x, order, group, value, hover, synthetic, and ``method``
    when given (what a number means: e.g. the profiled launch): a group's line breaks where it changes, marked
    "<method> changed" (a new measurement, never a change of the kernel)."""
    fig = go.Figure()
    xs = _categories(series) if not series.empty else ["-"]
    changed: list[tuple[str, float, str]] = []
    for group, rows in series.groupby("group", sort=True):
        rows = rows.sort_values("order")
        means = list(rows[method].fillna("not recorded")) if method else [""] * len(rows)
        stretch = list(itertools.accumulate(int(a != b) for a, b in zip(means, means[:1] + means[:-1])))
        for n in sorted(set(stretch)):
            part = rows[[k == n for k in stretch]]
            fig.add_trace(
                go.Scatter(
                    x=part["x"],
                    y=part["value"],
                    mode="lines+markers",
                    name=esc(group),
                    legendgroup=esc(group),
                    showlegend=n == 0,
                    hovertext=part["hover"],
                    hoverinfo="text",
                    line={"color": palette.get(group, "#333"), "dash": _dash(rows)},
                    marker={"symbol": ["diamond-open" if s else "circle" for s in part["synthetic"]], "size": 7},
                )
            )
            if n:
                at = stretch.index(n)
                changed.append(
                    (part["x"].iloc[0], part["value"].iloc[0], f"{group}: {means[at - 1]} before, {means[at]} here")
                )
    if changed:
        fig.add_trace(
            go.Scatter(
                x=[c[0] for c in changed],
                y=[c[1] for c in changed],
                mode="markers",
                name=f"{esc(method)} changed",
                hovertext=[
                    esc(f"{method} changed: {c[2]} (a new measurement, not a change of the kernel)") for c in changed
                ],
                hoverinfo="text",
                marker={"symbol": "line-ew-open", "size": 16, "color": "#555555", "line": {"width": 2}},
            )
        )
        for x in dict.fromkeys(c[0] for c in changed):
            fig.add_vline(x=x, line_dash="dot", line_color="#555555", line_width=1, opacity=0.6)
    if reference:
        _hline(fig, xs, reference[0], reference[1], "#C00000", "dash")
    _run_axis(fig, xs, title="run (commit·run id, commit order)")
    ys = [*series.get("value", []), *([reference[0]] if reference else [])]
    fig.update_yaxes(
        type="log" if log else "linear", title=esc(y_title), **(log_ticks(ys) if log else linear_ticks(ys, zero=True))
    )
    _layout(fig, 460)
    fig.update_layout(
        title=_title(title, bool(series["synthetic"].any()) if not series.empty else False),
        legend_title_text=esc(group_by) + ":",
    )
    return fig


# ---------------------------------------------------------------------------------------------
# One case across commits
# ---------------------------------------------------------------------------------------------
def case_times(frame: pd.DataFrame, title: str, marks: pd.DataFrame | None = None) -> go.Figure:
    """Median time (us) per implementation with its p20-p80 band; wall time per call where recorded.

    ``frame`` columns: x, order, implementation, median_us, p20_us, p80_us, call_us, hover, synthetic.
    ``marks`` columns: x, y, kind ("change point" / "acknowledged"), hover.
    """
    fig = go.Figure()
    xs = _categories(frame)
    for impl, rows in frame.groupby("implementation", sort=False):
        rows = rows.sort_values("order")
        colour = impl_colour(impl)
        name = esc(impl_label(impl))
        band = rows[rows["p20_us"].notna() & rows["p80_us"].notna()]
        if not band.empty:
            fig.add_trace(
                go.Scatter(
                    x=band["x"],
                    y=band["p80_us"],
                    mode="lines",
                    line={"width": 0},
                    legendgroup=name,
                    showlegend=False,
                    hoverinfo="skip",
                )
            )
            fig.add_trace(
                go.Scatter(
                    x=band["x"],
                    y=band["p20_us"],
                    mode="lines",
                    line={"width": 0},
                    fill="tonexty",
                    fillcolor=_alpha(colour, 0.18),
                    legendgroup=name,
                    showlegend=False,
                    hoverinfo="skip",
                )
            )
        fig.add_trace(
            go.Scatter(
                x=rows["x"],
                y=rows["median_us"],
                mode="lines+markers",
                name=name,
                legendgroup=name,
                line={"color": colour, "dash": "dash" if impl in PEER_NAMES else "solid"},
                hovertext=rows["hover"],
                hoverinfo="text",
                marker={"symbol": ["diamond-open" if s else "circle" for s in rows["synthetic"]], "size": 8},
            )
        )
        calls = rows[rows["call_us"].notna()]
        if not calls.empty and impl in IMPL_NAMES:
            fig.add_trace(
                go.Scatter(
                    x=calls["x"],
                    y=calls["call_us"],
                    mode="lines+markers",
                    name=f"{name}: wall time per call",
                    legendgroup=name,
                    line={"color": colour, "dash": "dot"},
                    marker={"size": 5},
                    hovertext=[f"wall time per call {v:.4g} us (calls back to back)" for v in calls["call_us"]],
                    hoverinfo="text",
                )
            )
    _marks(fig, marks)
    _run_axis(fig, xs, title="run (commit·run id, commit order)")
    ys = [*frame["p20_us"], *frame["p80_us"], *frame["median_us"], *frame["call_us"]]
    fig.update_yaxes(type="log", title="time per call (µs): median, p20-p80 band", **log_ticks(ys))
    _layout(fig, 460)
    fig.update_layout(title=_title(title, bool(frame["synthetic"].any())))
    return fig


def case_kernel_time(
    frame: pd.DataFrame, title: str, points: dict[str, str] | None = None, marks: pd.DataFrame | None = None
) -> go.Figure:
    """The kernel's own median time (us) per run with its p20-p80 band, on a linear axis fitted to its values
    (a 15% step is 15% of the height, not a few pixels of a log axis shared with eager), the runs ``points``
    names (role -> x: the baseline and the candidate) marked and labelled with their commits.

    ``frame`` columns: x, order, commit, median_us, p20_us, p80_us, hover, synthetic, and timing when known: the
    line breaks where the calls per sample change (:func:`kernelwatch.kernels.names.calls_per_sample`) and where
    SYNTHETIC runs begin or end.
    """
    fig = go.Figure()
    rows = frame.sort_values("order")
    xs = list(dict.fromkeys(rows["x"]))
    colour = IMPL_COLOURS[KERNEL_IMPL]
    band = rows[rows["p20_us"].notna() & rows["p80_us"].notna()]
    if not band.empty:
        fig.add_trace(
            go.Scatter(
                x=band["x"],
                y=band["p80_us"],
                mode="lines",
                line={"width": 0},
                legendgroup="band",
                showlegend=False,
                hoverinfo="skip",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=band["x"],
                y=band["p20_us"],
                mode="lines",
                line={"width": 0},
                fill="tonexty",
                fillcolor=_alpha(colour, 0.2),
                legendgroup="band",
                name="p20-p80 of its samples",
                hoverinfo="skip",
            )
        )
    # one line per stretch timed one way (a change of what a sample holds breaks it; the page marks it) and of one
    # kind: SYNTHETIC copies never continue a measured line
    timing = rows["timing"] if "timing" in rows else [None] * len(rows)
    method = [(calls_per_sample(t), bool(s)) for t, s in zip(timing, rows["synthetic"])]
    stretch = list(itertools.accumulate(int(a != b) for a, b in zip(method, method[:1] + method[:-1])))
    for n in sorted(set(stretch)):
        part = rows[[k == n for k in stretch]]
        fig.add_trace(
            go.Scatter(
                x=part["x"],
                y=part["median_us"],
                mode="lines+markers",
                name=LABELS[KERNEL_IMPL],
                legendgroup="kernel",
                showlegend=n == 0,
                line={"color": colour},
                hovertext=part["hover"],
                hoverinfo="text",
                marker={"symbol": ["diamond-open" if s else "circle" for s in part["synthetic"]], "size": 8},
            )
        )
    styles = {"baseline": ("square-open", "#444444"), "candidate": ("star", "#C00000")}
    for role, x in (points or {}).items():
        hit = rows[rows["x"] == x]
        if hit.empty:
            continue
        row = hit.iloc[-1]
        symbol, mark = styles.get(role, ("circle-open", "#333333"))
        text = f"{role} {esc(str(row['commit'])[:8])}"
        fig.add_trace(
            go.Scatter(
                x=[x],
                y=[row["median_us"]],
                mode="markers+text",
                name=text,
                text=[text],
                textposition="top center" if role == "candidate" else "bottom center",
                textfont={"color": mark, "size": 12},
                hoverinfo="skip",
                cliponaxis=False,
                marker={"symbol": symbol, "size": 16, "color": mark, "line": {"width": 2}},
            )
        )
    _marks(fig, marks)
    _run_axis(fig, xs, title="run (commit·run id, commit order)")
    # fitted to the medians; the band widens it by at most half their spread (a run with a wide band is cut at
    # the edge, its hover still says p20-p80), so a step of the medians fills the panel
    med = [v for v in rows["median_us"] if v == v]
    spread = (max(med) - min(med)) or max(med) * 0.01 if med else 0.0
    ys = [
        *med,
        *(
            [max(min(band["p20_us"]), min(med) - spread / 2), min(max(band["p80_us"]), max(med) + spread / 2)]
            if med and not band.empty
            else []
        ),
    ]
    fig.update_yaxes(title="kernel time per call (µs): median, p20-p80", **linear_ticks(ys, pad=0.12))
    _layout(fig, 440)
    fig.update_layout(title=_title(title, bool(frame["synthetic"].any())))
    return fig


def case_relative(frame: pd.DataFrame, title: str, targets: dict[str, float] | None = None) -> go.Figure:
    """One panel per implementation the kernel was timed against (eager, torch.compile, peers, references):
    its time over the kernel's (> 1: the kernel is faster) per run, each on a linear axis fitted to its own
    values; the parity line and a documented target where they fall in the panel's range.

    ``frame`` columns: x, order, implementation, speedup, synthetic.
    """
    targets = targets or {}
    impls = [
        i
        for i in (EAGER_IMPL, COMPILE_IMPL, *sorted(set(frame["implementation"]) - {EAGER_IMPL, COMPILE_IMPL}))
        if i in set(frame["implementation"])
    ]
    n = max(len(impls), 1)
    fig = make_subplots(
        rows=n,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.5 / (n + 1),
        subplot_titles=[f"over {esc(impl_label(i))} (t {esc(impl_label(i))} / t kernel)" for i in impls]
        or ["no other implementation timed"],
    )
    xs = _categories(frame) if not frame.empty else ["-"]
    for row, impl in enumerate(impls, start=1):
        rows = frame[(frame["implementation"] == impl) & frame["speedup"].notna()].sort_values("order")
        fig.add_trace(
            go.Scatter(
                x=rows["x"],
                y=rows["speedup"],
                mode="lines+markers",
                name=esc(impl_label(impl)),
                line={"color": impl_colour(impl), "dash": "dash" if impl in PEER_NAMES else "solid"},
                hovertemplate="%{x}: %{y:.3g}x<extra></extra>",
                showlegend=False,
            ),
            row=row,
            col=1,
        )
        ticks = linear_ticks(rows["speedup"], most=4, pad=0.15)
        lo, hi = ticks.get("range", [0, 0])
        for value, name, colour, dash in (
            (1.0, "parity (1x)", "#7F7F7F", "dot"),
            (targets.get(impl), "target", "#009E73", "dash"),
        ):
            if value is not None and lo <= value <= hi:
                _hline(fig, xs, value, f"{name} {value:g}x", colour, dash, row=row, showlegend=False)
        fig.update_yaxes(title="x", row=row, col=1, **ticks)
        _run_axis(fig, xs, row=row, **({"title": "run"} if row == n else {}))
    _layout(fig, 130 + 170 * n)
    fig.update_layout(title=_title(title, bool(frame["synthetic"].any()) if not frame.empty else False))
    return fig


def _marks(fig: go.Figure, marks: pd.DataFrame | None, row: int | None = None) -> None:
    if marks is None or marks.empty:
        return
    styles = {
        "change point": ("x", "#C00000", 14),
        "acknowledged": ("star", "#7F3C8D", 16),
        "timing changed": ("line-ew-open", "#555555", 16),
    }
    for kind, rows in marks.groupby("kind", sort=True):
        symbol, colour, size = styles.get(kind, ("circle-open", "#333", 12))
        trace = go.Scatter(
            x=rows["x"],
            y=rows["y"],
            mode="markers",
            name=esc(kind),
            hovertext=rows["hover"],
            hoverinfo="text",
            marker={"symbol": symbol, "size": size, "color": colour, "line": {"width": 2, "color": colour}},
        )
        if row is None:
            fig.add_trace(trace)
        else:
            fig.add_trace(trace, row=row, col=1)
        for x in rows["x"]:
            fig.add_vline(x=x, line_dash="dot", line_color=colour, line_width=1, opacity=0.6)


def _alpha(colour: str, alpha: float) -> str:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def case_floor(frame: pd.DataFrame, title: str, y_title: str) -> go.Figure:
    """% of the roofline floor per implementation per run; the 100% line is the ceiling the page names.

    ``frame`` columns: x, order, implementation, pct, synthetic.
    """
    fig = go.Figure()
    xs = _categories(frame)
    for impl, rows in frame[frame["pct"].notna()].groupby("implementation", sort=False):
        if impl not in IMPL_NAMES:
            continue
        rows = rows.sort_values("order")
        fig.add_trace(
            go.Scatter(
                x=rows["x"],
                y=rows["pct"],
                mode="lines+markers",
                name=IMPL_NAMES[impl],
                line={"color": impl_colour(impl)},
                hovertemplate="%{x}: %{y:.1f}%<extra></extra>",
            )
        )
    _hline(fig, xs, 100.0, "100% = the ceiling", "#C00000", "dash")
    _run_axis(fig, xs, title="run")
    fig.update_yaxes(title=esc(y_title), **linear_ticks([*frame["pct"].dropna(), 100.0], zero=True))
    _layout(fig, 400)
    fig.update_layout(title=_title(title, bool(frame["synthetic"].any())))
    return fig


# ---------------------------------------------------------------------------------------------
# Roofline, profiler, accuracy
# ---------------------------------------------------------------------------------------------
def roofline(frame: pd.DataFrame, peak_gbps: float | None, peak_tflops: float | None, title: str) -> go.Figure:
    """Achieved TFLOP/s against arithmetic intensity, under the measured ceilings."""
    fig = go.Figure()
    data = frame[(frame["flops"].fillna(0) > 0) & frame["median_ms"].notna()].copy()
    data["intensity"] = data["flops"] / data["bytes"]
    data["achieved"] = data["flops"] / (data["median_ms"] * 1e-3) / 1e12
    for impl, rows in data.groupby("implementation", sort=True):
        fig.add_trace(
            go.Scatter(
                x=rows["intensity"],
                y=rows["achieved"],
                mode="markers",
                name=esc(impl_label(impl)),
                marker={"size": 9, "color": impl_colour(impl)},
                hovertext=[esc(c) for c in rows["case"]],
                hoverinfo="text+x+y",
            )
        )
    xrange = yrange = None
    if not data.empty:
        # the points' own decade(s) with a third of a decade either side; the ridge (where the copy roof
        # meets the matmul roof) joins the view only when it is within a decade of the points
        lo, hi = data["intensity"].min() / 2, data["intensity"].max() * 2
        ridge = peak_tflops * 1e12 / (peak_gbps * 1e9) if peak_gbps and peak_tflops else None
        if ridge and ridge / 10 <= hi and ridge * 2 > hi:
            hi = ridge * 2
        xrange = [math.log10(lo), math.log10(hi)]
        ys = list(data["achieved"])
        if peak_gbps and peak_tflops:
            xs = [lo * (hi / lo) ** (k / 60) for k in range(61)]
            roof = [min(peak_gbps * 1e9 * x / 1e12, peak_tflops) for x in xs]
            fig.add_trace(
                go.Scatter(
                    x=xs, y=roof, mode="lines", name="measured roofline", line={"color": "black", "dash": "dash"}
                )
            )
            ys += roof
        yrange = [math.log10(min(ys) / 2), math.log10(max(ys) * 2)]
    xticks = log_ticks([10**v for v in xrange]) if xrange else {}
    yticks = log_ticks([10**v for v in yrange]) if yrange else {}
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP / byte)", **xticks)
    fig.update_yaxes(type="log", title="achieved TFLOP/s", **yticks)
    _layout(fig, 480)
    fig.update_layout(title=_title(title, bool(frame["synthetic"].any())))
    return fig


def budget_heatmap(table: pd.DataFrame, title: str, zmax: float = 1.5) -> go.Figure:
    """Rows kernel/dtype, columns hardware, cells the worst error budget of each hardware's newest accuracy run.

    Colours saturate at ``zmax``; the text of a cell is its real value ("error" for a case that raised).
    """

    def cell(v: object) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "no run"
        return "error" if v == math.inf else f"{v:.2g}"

    raw = table.to_numpy().tolist()
    z = [[None if cell(v) == "no run" else min(float(v), zmax) for v in row] for row in raw]
    text = [[cell(v) for v in row] for row in raw]
    columns = [c if len(c) <= 36 else c[:35] + "…" for c in map(str, table.columns)]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[esc(c) for c in columns],
            y=[esc(i) for i in table.index],
            colorscale="RdYlGn_r",
            zmin=0,
            zmax=zmax,
            colorbar={"title": "worst budget"},
            text=text,
            texttemplate="%{text}",
            hoverongaps=False,
            hovertemplate="%{y} on %{x}: worst budget %{text}<extra></extra>",
        )
    )
    fig.update_layout(
        title=_title(title, False),
        height=max(320, 34 * len(table.index) + 260),
        margin={"t": 60, "l": 220, "r": 20, "b": 60},
    )
    fig.update_xaxes(side="bottom", tickangle=-20, automargin=True)
    return fig
