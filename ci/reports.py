"""Gate reports: Markdown (pull-request comment or CI step summary), JUnit XML, single-file HTML."""

from __future__ import annotations

import html
import os
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import plotly.graph_objects as go

from ci.gate import GateResult
from db.schema import printable

ICONS = {"regression": "❌", "accuracy": "❌", "error": "❌", "missing": "❌", "unmeasured": "❌", "unreliable": "❌",
         "warning": "⚠️", "machine": "🖥️",
         "noisy": "〰️", "pass": "✅", "new": "🆕", "acknowledged": "☑️"}
# The characters with a meaning inside a line or a table cell: escapes, code, emphasis, link and image
# brackets, HTML and entities, cell borders, strike-through, maths. Block markers (#, >, -, 1.) mean
# nothing in the middle of a line, so the text stays readable where the report is printed as it is.
_INLINE = re.compile(r"([\\`*_\[\]<|&~$])")
_AUTOLINK = re.compile(r"(?i)(?<=[a-z0-9])(?=(?:://|@)|(?<=www)\.)")


def md_text(value: object) -> str:
    """Any text as inert Markdown inside a line (a table cell): the characters with inline meaning
    backslash-escaped (CommonMark renders each as itself), line breaks flattened, and a zero-width space
    where GitHub would autolink a bare URL, ``www.`` or an e-mail address despite the escapes. Control
    characters (ESC, backspace...) are shown escaped: a report is also printed to terminals."""
    text = printable(" ".join(str(value).split()))
    return _INLINE.sub(r"\\\1", _AUTOLINK.sub("\u200b", text))


def md_code(value: object) -> str:
    """Any text as one code span: a backtick fence longer than any backtick run inside, padded with spaces,
    pipes escaped (a GFM table splits cells on them even inside code spans), line breaks flattened,
    control characters shown escaped."""
    text = printable(" ".join(str(value).split())).replace("|", "\\|")
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}" if len(fence) > 1 else f"`{text}`"


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.4g} us"


def markdown(result: GateResult) -> str:
    c, b = result.candidate, result.baseline
    lines = [f"## KernelWatch gate: {result.verdict}", "",
             f"Candidate {md_code(c['commit']['sha'][:12])} ({md_text(c['commit']['branch'])}, run "
             f"{md_code(c['id'][:8])}, {md_text(c['status'])}) against baseline {md_code(b['commit'][:12])} "
             f"({md_text(b['branch'])}, run {md_code(b['id'][:8])}); "
             + ("wall time per call (calls back to back); " if result.metric == "call" else "")
             + f"minimum effect {result.min_effect:.0%}, "
             f"false discovery rate {result.fdr:.0%}.", ""]
    if result.undecided:
        lines += [f"**Cannot decide:** {md_text(result.undecided)}", ""]
    lines += [f"Note: {md_text(n)}" for n in result.notes]
    counts: dict[str, int] = defaultdict(int)
    for v in result.verdicts:
        counts[v.status] += 1
    lines.append(" · ".join(f"{ICONS.get(s, '•')} {s}: {n}" for s, n in sorted(counts.items())))
    acknowledged = [v for v in result.verdicts if v.status == "acknowledged"]
    for title, rows in (("Failures", result.failed), ("Warnings", result.warnings),
                        ("Acknowledged (expected, not failing)", acknowledged)):
        if rows:
            lines += ["", f"### {title}", "", "| case | what | before | now | details |",
                      "| --- | --- | --- | --- | --- |"]
            for v in rows:
                before, now = ((_fmt_ms(v.baseline_ms), _fmt_ms(v.time_ms)) if v.suite == "perf" else
                               tuple("-" if x is None else f"{x:.3g}" for x in (v.baseline_budget, v.budget)))
                lines.append(f"| {md_code(v.case)} | {md_text(v.status)} | {before} | {now} | {md_text(v.message)} |")
    if result.explored:
        bad = [a for a in result.explored if not a["passed"]]
        budgets = [a["error_budget"] for a in result.explored if a["error_budget"] is not None]
        lines += ["", "### Exploration (fresh seeds; not part of the verdict)", "",
                  f"{len(result.explored) - len(bad)} of {len(result.explored)} cases passed"
                  + (f"; worst budget {max(budgets):.3g}" if budgets else "") + "."]
        if bad:
            lines += ["", "| case | budget | seed | error |", "| --- | --- | --- | --- |"]
            lines += [f"| {md_code(a['case'])} | {a['error_budget'] if a['error_budget'] is not None else '-'} | "
                      f"{a['seed']} | {md_text(a['error'] or '')} |" for a in bad[:50]]
    return "\n".join(lines) + "\n"


def junit(result: GateResult) -> str:
    """JUnit XML; every text escaped to printable characters (XML 1.0 cannot hold ESC or backspace)."""
    suites = ET.Element("testsuites", name="kernelwatch-gate")
    by_kernel = defaultdict(list)
    for v in result.verdicts:
        by_kernel[v.kernel].append(v)
    for kernel, verdicts in sorted(by_kernel.items()):
        failures = sum(v.failed and v.status != "error" for v in verdicts)
        errors = sum(v.status == "error" for v in verdicts)
        suite = ET.SubElement(suites, "testsuite", name=kernel, tests=str(len(verdicts)), failures=str(failures),
                              errors=str(errors))
        for v in verdicts:
            message = printable(v.message)
            case = ET.SubElement(suite, "testcase", classname=printable(kernel), name=printable(v.case))
            if v.failed and v.status != "error":
                ET.SubElement(case, "failure", message=message, type=v.status).text = message
            elif v.status == "error":
                ET.SubElement(case, "error", message=message, type="error").text = message
            elif v.status in ("warning", "noisy", "machine"):
                ET.SubElement(case, "system-out").text = f"{v.status}: {message}"
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)


def _ratio_chart(result: GateResult) -> go.Figure:
    rows = [v for v in result.verdicts if v.comparison is not None]
    rows.sort(key=lambda v: v.comparison.ratio)
    colors = ["#d62728" if v.status == "regression" else "#2ca02c" for v in rows]
    # Plotly renders a subset of HTML in labels (<a href> becomes a link): case names go in escaped.
    labels = [html.escape(printable(v.case), quote=False) for v in rows]
    fig = go.Figure(go.Bar(x=[v.comparison.ratio for v in rows], y=labels,
                           orientation="h", marker={"color": colors}, name="candidate / baseline time"))
    fig.add_vline(x=1.0, line_dash="dot")
    fig.add_vline(x=1.0 + result.min_effect, line_dash="dash", line_color="red")
    fig.update_layout(title="time ratio per case (candidate / baseline)", height=max(300, 18 * len(rows) + 120))
    return fig


def html_report(result: GateResult) -> str:
    """One file, no server: the Plotly library is embedded."""
    chart = _ratio_chart(result).to_html(include_plotlyjs=True, full_html=False, div_id="ratios")
    rows = "".join(
        f"<tr class='{v.status}'><td>{html.escape(printable(v.case))}</td><td>{v.status}</td>"
        f"<td>{html.escape(printable(v.message))}</td></tr>"
        for v in sorted(result.verdicts, key=lambda v: (v.status == "pass", v.case)))
    md = html.escape(markdown(result))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>KernelWatch gate</title><style>"
            "body{font-family:sans-serif;margin:2em} td{padding:2px 8px} "
            ".regression,.accuracy,.error,.missing,.unmeasured,.unreliable{background:#fdd} "
            ".warning,.noisy,.machine{background:#ffd}"
            "</style></head><body>"
            f"<h1>KernelWatch gate: {result.verdict}</h1><pre>{md}</pre>{chart}"
            f"<table><tr><th>case</th><th>verdict</th><th>details</th></tr>{rows}</table></body></html>")


def publish(result: GateResult, folder: Path, summary: str | None = None) -> list[str]:
    """Write the reports and append the Markdown to ``$GITHUB_STEP_SUMMARY``; one line per outcome.

    A report that cannot be written is a warning: it never changes the verdict or the exit status.
    """
    lines = []
    try:
        paths = write_reports(result, folder)
        lines.append(f"reports: {', '.join(str(p) for p in paths.values())}")
    except OSError as exc:
        lines.append(f"warning: reports not written to {folder}: {exc.strerror or exc}")
    summary = summary if summary is not None else os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(markdown(result))
        except OSError as exc:
            lines.append(f"warning: step summary not written to {summary}: {exc.strerror or exc}")
    return lines


def write_reports(result: GateResult, folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": folder / "gate.md", "junit": folder / "gate-junit.xml", "html": folder / "gate.html"}
    paths["markdown"].write_text(markdown(result), encoding="utf-8")
    paths["junit"].write_text(junit(result), encoding="utf-8")
    paths["html"].write_text(html_report(result), encoding="utf-8")
    return paths
