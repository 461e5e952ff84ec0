"""Plotly figure builders. Pure functions of DataFrames: no Streamlit, no database, no torch."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

SYNTHETIC_TAG = " [synthetic]"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


def _title(text: str, synthetic: bool) -> str:
    return text + (" — includes SYNTHETIC data (generated, not measured)" if synthetic else "")


def speedup_history(frame: pd.DataFrame, title: str, targets: dict[str, float], changes: dict[str, list]) -> go.Figure:
    """Speedup over eager PyTorch per case across commits (categorical x in commit order, log y)."""
    fig = go.Figure()
    commits = list(dict.fromkeys(frame["commit"].str[:8]))
    for i, (case, rows) in enumerate(frame.groupby("case", sort=True)):
        rows = rows.sort_values("order")
        label = case + (SYNTHETIC_TAG if rows["synthetic"].any() else "")
        hover = [
            f"{c[:12]} {s or ''}<br>{t}<br>median {m * 1e3:.2f} us (p20-p80 {lo * 1e3:.2f}-{hi * 1e3:.2f})"
            f"<br>speedup {sp:.2f}x<br><i>{cmd}</i>"
            for c, s, t, m, lo, hi, sp, cmd in zip(rows["commit"], rows["subject"], rows["commit_time"],
                                                  rows["median_ms"], rows["p20_ms"], rows["p80_ms"],
                                                  rows["speedup_vs_eager"], rows["reproduce"])
        ]
        color = PALETTE[i % len(PALETTE)]
        fig.add_trace(go.Scatter(x=rows["commit"].str[:8], y=rows["speedup_vs_eager"], mode="lines+markers",
                                 name=label, hovertext=hover, hoverinfo="text", line={"color": color}))
        points = changes.get(case, [])
        if points:
            xs = [rows["commit"].iloc[p.index][:8] for p in points]
            ys = [rows["speedup_vs_eager"].iloc[p.index] for p in points]
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=f"change point: {case}",
                                     marker={"symbol": "x", "size": 14, "color": "red"},
                                     hovertext=[f"{p.change:+.1%} from here" for p in points], hoverinfo="text",
                                     showlegend=False))
    _log_hline(fig, 1.0, "parity (1x)", "gray", "dot")
    for value in sorted(set(targets.values())):
        _log_hline(fig, value, f"target {value:g}x", "green", "dash")
    fig.update_layout(title=_title(title, bool(frame["synthetic"].any())), height=480, legend={"font": {"size": 9}},
                      margin={"t": 60, "l": 40, "r": 20, "b": 40})
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=commits, title="commit (in commit order)")
    fig.update_yaxes(type="log", title="speedup over eager PyTorch")
    return fig


def _log_hline(fig: go.Figure, y: float, text: str, color: str, dash: str) -> None:
    """A horizontal line on a log y axis (annotations there take log10 coordinates)."""
    fig.add_hline(y=y, line_dash=dash, line_color=color)
    fig.add_annotation(x=1, xref="paper", xanchor="right", y=math.log10(y), yref="y", text=text, showarrow=False,
                       font={"color": color, "size": 10}, yshift=8)


def sparkline(values: list[float | None], labels: list[str]) -> go.Figure:
    fig = go.Figure(go.Scatter(x=labels, y=values, mode="lines+markers", line={"width": 1.5}, marker={"size": 4}))
    fig.update_layout(height=90, margin={"t": 5, "l": 5, "r": 5, "b": 5}, showlegend=False)
    fig.update_xaxes(visible=False, type="category")
    fig.update_yaxes(visible=False)
    return fig


def roofline(frame: pd.DataFrame, peak_gbps: float | None, peak_tflops: float | None, title: str) -> go.Figure:
    """Achieved TFLOP/s against arithmetic intensity, under the measured ceilings."""
    fig = go.Figure()
    data = frame[(frame["flops"].fillna(0) > 0) & frame["median_ms"].notna()].copy()
    data["intensity"] = data["flops"] / data["bytes"]
    data["achieved"] = data["flops"] / (data["median_ms"] * 1e-3) / 1e12
    for i, (impl, rows) in enumerate(data.groupby("implementation", sort=True)):
        fig.add_trace(go.Scatter(x=rows["intensity"], y=rows["achieved"], mode="markers", name=impl,
                                 marker={"size": 9, "color": PALETTE[i % len(PALETTE)]},
                                 hovertext=rows["case"], hoverinfo="text+x+y"))
    if peak_gbps and peak_tflops and not data.empty:
        lo = max(min(data["intensity"].min() / 4, 0.01), 1e-3)
        hi = max(data["intensity"].max() * 4, peak_tflops * 1e12 / (peak_gbps * 1e9) * 4)
        xs = [lo * (hi / lo) ** (k / 60) for k in range(61)]
        ys = [min(peak_gbps * 1e9 * x / 1e12, peak_tflops) for x in xs]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="measured roofline",
                                 line={"color": "black", "dash": "dash"}))
    fig.update_layout(title=_title(title, bool(frame["synthetic"].any())), height=480)
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP / byte)")
    fig.update_yaxes(type="log", title="achieved TFLOP/s")
    return fig


def metric_history(frame: pd.DataFrame, metric: str, ideal: str | None, title: str) -> go.Figure:
    fig = go.Figure()
    for i, (case, rows) in enumerate(frame.groupby("case", sort=True)):
        rows = rows.sort_values("order")
        fig.add_trace(go.Scatter(x=rows["commit"].str[:8], y=rows["value"], mode="lines+markers", name=case,
                                 line={"color": PALETTE[i % len(PALETTE)]}))
    if ideal:
        bound = float(ideal[1:])
        top = max(frame["value"].max() if not frame.empty else bound, bound) * 1.1
        y0, y1 = (bound, top) if ideal[0] == ">" else (0, bound)
        fig.add_hrect(y0=y0, y1=y1, fillcolor="green", opacity=0.12, line_width=0,
                      annotation_text=f"ideal {ideal}", annotation_position="top left")
    fig.update_layout(title=_title(title, bool(frame.get("synthetic", pd.Series([False])).any())), height=360)
    fig.update_xaxes(type="category", title="commit (in commit order)")
    fig.update_yaxes(title=metric)
    return fig


def budget_history(frame: pd.DataFrame, title: str) -> go.Figure:
    fig = go.Figure()
    for i, (case, rows) in enumerate(frame.groupby("case", sort=True)):
        rows = rows.sort_values("order")
        fig.add_trace(go.Scatter(x=rows["commit"].str[:8], y=rows["error_budget"].clip(lower=1e-6),
                                 mode="lines+markers", name=case, line={"color": PALETTE[i % len(PALETTE)]}))
    _log_hline(fig, 1.0, "tolerance (budget 1.0)", "red", "dash")
    fig.update_layout(title=_title(title, bool(frame["synthetic"].any())), height=420, legend={"font": {"size": 9}})
    fig.update_xaxes(type="category", title="commit (in commit order)")
    fig.update_yaxes(type="log", title="error budget = max |out - ref| / (atol + rtol |ref|)")
    return fig


def budget_heatmap(table: pd.DataFrame, title: str) -> go.Figure:
    """Rows kernel/dtype, columns hardware, cells the worst error budget of the latest run."""
    z = [[None if (v is None or (isinstance(v, float) and math.isnan(v))) else v for v in row]
         for row in table.to_numpy().tolist()]
    fig = go.Figure(go.Heatmap(z=z, x=list(table.columns), y=list(table.index), colorscale="RdYlGn_r", zmin=0,
                               zmax=1.0, colorbar={"title": "worst budget"}, texttemplate="%{z:.2g}"))
    fig.update_layout(title=title, height=max(260, 40 * len(table.index) + 120))
    return fig
