"""Gate reports: Markdown (pull-request comment or CI step summary), JUnit XML, single-file HTML."""

from __future__ import annotations

import html
import math
import os
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from kernelwatch.gate.judge import CaseVerdict, GateResult
from kernelwatch.gate.statuses import (
    ACKNOWLEDGED,
    ERROR,
    FASTER,
    FASTER_NOISY,
    LABELS,
    NEW,
    PASS,
    REGRESSION,
    SEVERITY,
    TABLE,
    WARNING,
    label_of,
)
from kernelwatch.store.files import replaced_link_note, write_atomic
from kernelwatch.store.schema import IDENTITY, isolate, printable

# What a hardware label's parenthesis is, wherever one is shown: "NVIDIA H200 (b10424)".
_IDENTITY_WORDS = {
    "vendor": "vendor",
    "device_name": "device model",
    "compute_units": "compute units",
    "memory_bytes": "memory size",
}
FINGERPRINT_NOTE = (
    "the hardware fingerprint: the first characters of a hash of the "
    + ", ".join(_IDENTITY_WORDS[k] for k in IDENTITY)
    + " (not the driver, toolkit or library versions: those are each run's context); runs with the same one "
    "are compared"
)


def label(v: CaseVerdict, result: GateResult) -> str:
    """The reader's name of a verdict (``kernelwatch.gate.statuses.LABELS``; a status not listed, e.g. a newer one,
    shows its own name): a passing case at least its minimum effect faster is "faster" when the swapped test survives
    FDR control (``result.faster``), else "faster (within noise)"."""
    if v.status == PASS and v.comparison is not None and 1 / v.comparison.ratio - 1 > v.comparison.min_effect:
        return label_of(FASTER if v.case in result.faster else FASTER_NOISY)
    return LABELS.get(v.status, v.status)


def severity(name: str) -> int:
    return SEVERITY.index(name) if name in SEVERITY else len(SEVERITY)


def counts(result: GateResult) -> list[tuple[str, int]]:
    """(label, cases) most severe first: each case counted once, by its most severe verdict (a case with an
    accuracy and a perf verdict is one case): the totals the reports, Triage and Overview print."""
    worst: dict[str, str] = {}
    for v in result.verdicts:
        name = label(v, result)
        if v.case not in worst or severity(name) < severity(worst[v.case]):
            worst[v.case] = name
    found: dict[str, int] = defaultdict(int)
    for name in worst.values():
        found[name] += 1
    return sorted(found.items(), key=lambda kv: (severity(kv[0]), kv[0]))


def by_severity(rows: list[CaseVerdict], result: GateResult) -> list[CaseVerdict]:
    """Most severe first, then the largest effect (slowdown, or budget growth), then the case key."""

    def size(v: CaseVerdict) -> float:
        if v.comparison is not None:
            return abs(math.log(v.comparison.ratio)) if v.comparison.ratio > 0 else 0.0
        if v.budget and v.baseline_budget:
            return abs(math.log(v.budget / v.baseline_budget))
        return v.budget or 0.0

    return sorted(rows, key=lambda v: (severity(label(v, result)), -size(v), v.case))


def hardware_text(result: GateResult) -> str:
    """ "NVIDIA H200 (b10424, 2 devices)": the hardware the candidate and its baseline ran on."""
    hw = result.hardware
    if not hw:
        return "hardware not recorded"
    count = hw.get("device_count") or 1
    return (
        f"{hw.get('device_name') or 'unnamed device'} (hardware fingerprint {str(hw.get('fingerprint'))[:6]}"
        + (f", {count} devices" if count > 1 else "")
        + ")"
    )


ICONS = {s.label: s.icon for s in TABLE if s.icon}  # the Markdown report's, before each count
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
    text = isolate(printable(" ".join(str(value).split())))
    return _INLINE.sub(r"\\\1", _AUTOLINK.sub("\u200b", text))


def md_code(value: object) -> str:
    """Any text as one code span: a backtick fence longer than any backtick run inside, padded with spaces,
    pipes escaped (a GFM table splits cells on them even inside code spans), line breaks flattened,
    control characters shown escaped."""
    text = isolate(printable(" ".join(str(value).split()))).replace("|", "\\|")
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}" if len(fence) > 1 else f"`{text}`"


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.4g} us"


def markdown(result: GateResult) -> str:
    c, b = result.candidate, result.baseline
    lines = [
        f"## KernelWatch gate: {result.verdict}",
        "",
        f"Candidate {md_code(c['commit']['sha'][:12])} ({md_text(c['commit']['branch'])}, run "
        f"{md_code(c['id'][:8])}, {md_text(c['status'])}) against baseline {md_code(b['commit'][:12])} "
        f"({md_text(b['branch'])}, run {md_code(b['id'][:8])}) on {md_text(hardware_text(result))}; "
        + ("wall time per call (calls back to back); " if result.metric == "call" else "")
        + f"minimum effect {result.min_effect:.0%}, "
        f"false discovery rate {result.fdr:.0%}.",
        "",
    ]
    if result.undecided:
        lines += [f"**Cannot decide:** {md_text(result.undecided)}", ""]
    lines += [f"Note: {md_text(n)}" for n in result.notes]
    lines.append("Cases: " + " · ".join(f"{ICONS.get(s, '•')} {s}: {n}" for s, n in counts(result)))
    acknowledged = [v for v in result.verdicts if v.status == ACKNOWLEDGED]
    for title, rows in (
        ("Failures", result.failed),
        ("Warnings", result.warnings),
        ("Acknowledged (expected, not failing)", acknowledged),
    ):
        if rows:
            lines += [
                "",
                f"### {title}",
                "",
                "| case | what | before | now | details |",
                "| --- | --- | --- | --- | --- |",
            ]
            for v in by_severity(rows, result):
                before, now = (
                    (_fmt_ms(v.baseline_ms), _fmt_ms(v.time_ms))
                    if v.suite == "perf"
                    else tuple("-" if x is None else f"{x:.3g}" for x in (v.baseline_budget, v.budget))
                )
                lines.append(
                    f"| {md_code(v.case)} | {md_text(label(v, result))} | {before} | {now} | {md_text(v.message)} |"
                )
    if result.explored:
        bad = [a for a in result.explored if not a["passed"]]
        budgets = [a["error_budget"] for a in result.explored if a["error_budget"] is not None]
        lines += [
            "",
            "### Exploration (fresh seeds; not part of the verdict)",
            "",
            f"{len(result.explored) - len(bad)} of {len(result.explored)} cases passed"
            + (f"; worst budget {max(budgets):.3g}" if budgets else "")
            + ".",
        ]
        if bad:
            lines += ["", "| case | budget | seed | error |", "| --- | --- | --- | --- |"]
            lines += [
                f"| {md_code(a['case'])} | {a['error_budget'] if a['error_budget'] is not None else '-'} | "
                f"{a['seed']} | {md_text(a['error'] or '')} |"
                for a in bad[:50]
            ]
    return "\n".join(lines) + "\n"


TERMINAL_WIDTH = 100  # the widest line of the terminal report (a CI log)
TERMINAL_ROWS = 10  # failing (and warning) rows the terminal report lists; the rest are in gate.md / gate.html


def fold(text: str, width: int = TERMINAL_WIDTH, indent: str = "", first: str = "") -> list[str]:
    """``first`` + ``text`` as lines of at most ``width`` characters, the rest indented by ``indent``: broken at
    spaces, else after a comma, slash or equals sign of a case key, else anywhere."""
    text = printable(" ".join(str(text).split()))
    lines, line, filled = [], first, False
    for piece in (p for p in re.split(r"(?<=[ ,/=])", text) if p):
        if filled and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line, filled = indent, False
        while len(line) + len(piece.rstrip()) > width:  # a piece longer than a whole line
            room = width - len(line)
            lines.append(line + piece[:room])
            line, piece = indent, piece[room:]
        line, filled = line + piece, True
    lines.append(line.rstrip())
    return lines


def plain(result: GateResult, folder: Path | None = None) -> str:
    """The gate's report for a terminal or a CI log: plain text, no Markdown, no emoji, lines of at most
    TERMINAL_WIDTH characters: the verdict, the runs and hardware, the counts, the first failing and warning rows
    with what they measured. gate.md and gate.html (``folder``) hold every row."""
    c, b = result.candidate, result.baseline
    out = [f"KernelWatch gate: {result.verdict}"]
    out += fold(
        f"{c['commit']['sha'][:12]} ({c['commit']['branch']}, run {c['id'][:8]}, {c['status']})",
        indent=" " * 11,
        first="candidate  ",
    )
    out += fold(f"{b['commit'][:12]} ({b['branch']}, run {b['id'][:8]})", indent=" " * 11, first="baseline   ")
    out += fold(hardware_text(result), indent=" " * 11, first="hardware   ")
    metric = "wall time per call (calls back to back)" if result.metric == "call" else "GPU time"
    out += fold(
        f"{metric}; minimum effect {result.min_effect:.0%}, false discovery rate {result.fdr:.0%}",
        indent=" " * 11,
        first="judged     ",
    )
    if result.undecided:
        out += fold(result.undecided, indent="  ", first="cannot decide: ")
    for note in result.notes:
        out += fold(note, indent="  ", first="note: ")
    out += fold(" · ".join(f"{s}: {n}" for s, n in counts(result)) or "none", indent=" " * 11, first="cases      ")
    for title, rows in (("Failures", result.failed), ("Warnings", result.warnings)):
        if not rows:
            continue
        shown = by_severity(rows, result)[:TERMINAL_ROWS]
        more = f", the first {len(shown)}" if len(shown) < len(rows) else ""
        out += ["", f"{title} ({len(rows)}{more}):"]
        for v in shown:
            before, now = (
                (_fmt_ms(v.baseline_ms), _fmt_ms(v.time_ms))
                if v.suite == "perf"
                else tuple("-" if x is None else f"{x:.3g}" for x in (v.baseline_budget, v.budget))
            )
            measured = f" ({before} -> {now})" if (before, now) != ("-", "-") else ""
            out += fold(v.case, indent="    ", first="  ")
            out += fold(f"{label(v, result)}{measured}: {v.message}", indent="      ", first="    ")
    if folder is not None:
        out += ["", *fold(f"every row: {folder / 'gate.md'} and {folder / 'gate.html'}")]
    return "\n".join(out)


def junit(result: GateResult) -> str:
    """JUnit XML; every text escaped to printable characters (XML 1.0 cannot hold ESC or backspace)."""
    suites = ET.Element("testsuites", name="kernelwatch-gate")
    by_kernel = defaultdict(list)
    for v in result.verdicts:
        by_kernel[v.kernel].append(v)
    for kernel, verdicts in sorted(by_kernel.items()):
        failures = sum(v.failed and v.status != ERROR for v in verdicts)
        errors = sum(v.status == ERROR for v in verdicts)
        suite = ET.SubElement(
            suites, "testsuite", name=kernel, tests=str(len(verdicts)), failures=str(failures), errors=str(errors)
        )
        for v in verdicts:
            message = printable(v.message)
            case = ET.SubElement(suite, "testcase", classname=printable(kernel), name=printable(v.case))
            if v.failed and v.status != ERROR:
                ET.SubElement(case, "failure", message=message, type=v.status).text = message
            elif v.status == ERROR:
                ET.SubElement(case, "error", message=message, type=ERROR).text = message
            elif v.status in WARNING:
                ET.SubElement(case, "system-out").text = f"{v.status}: {message}"
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)


STATUS_CLASS = {s.name: s.css for s in TABLE if s.refines is None}  # the HTML report's row class
LABEL_CLASS = {s.label: s.css for s in TABLE if s.css}
RATIO_SPAN = 1.5  # a bar's half-width is |log(ratio)| / log(RATIO_SPAN): 1.5x slower (or faster) reaches the edge


def _h(value: object) -> str:
    return html.escape(isolate(printable(" ".join(str(value).split()))), quote=True)


def _bar(ratio: float, status: str) -> str:
    """A bar centred on 1 (no change): right of the centre line when the candidate is slower, left when faster,
    its length log(ratio) on a log scale, so +10% and -9% are as long; past RATIO_SPAN it is clipped (marked)."""
    half = min(abs(math.log(ratio)) / math.log(RATIO_SPAN), 1.0) * 50 if ratio > 0 else 0.0
    side = "left:50%" if ratio >= 1 else f"left:{50 - half:.2f}%"
    cls = "bad" if status == REGRESSION else "faster" if ratio < 1 else "same"
    clipped = " clip" if ratio > 0 and abs(math.log(ratio)) > math.log(RATIO_SPAN) else ""
    return f"<div class='track'><span class='b {cls}{clipped}' style='{side};width:{half:.2f}%'></span></div>"


def _ratio_table(result: GateResult) -> str:
    """Every compared perf case, most slowed first: before, now, the ratio and its bar."""
    rows = sorted((v for v in result.verdicts if v.comparison is not None), key=lambda v: -v.comparison.ratio)
    if not rows:
        return "<p>No perf case was compared.</p>"
    lo = f"{1 / RATIO_SPAN:.3g}x"
    body = "".join(
        f"<tr class='{STATUS_CLASS.get(v.status, '')}'><td class='case'>{_h(v.case)}</td>"
        f"<td>{_h(label(v, result))}</td><td class='n'>{_h(_fmt_ms(v.baseline_ms))}</td>"
        f"<td class='n'>{_h(_fmt_ms(v.time_ms))}</td>"
        f"<td class='n'>{v.comparison.ratio:.3f}</td><td>{_bar(v.comparison.ratio, v.status)}</td></tr>"
        for v in rows
    )
    return (
        f"<table id='ratios' style='--min:{_effect_pos(result):.2f}%'><caption>Time ratio per case (candidate "
        f"/ baseline): each bar grows from the grey line at 1 (no change), right = slower, left = faster, on a "
        f"log scale with edges at {lo} and {RATIO_SPAN:g}x; the red line is the minimum effect "
        f"(+{result.min_effect:.0%}).</caption><colgroup><col class='c1'><col class='c2'><col class='c3'>"
        "<col class='c3'><col class='c4'><col class='c5'></colgroup><tr><th>case</th><th>verdict</th>"
        "<th>before</th><th>now</th><th>ratio</th><th class='axis'>&larr; faster | slower &rarr;</th></tr>"
        f"{body}</table>"
    )


def _effect_pos(result: GateResult) -> float:
    return 50 + min(math.log(1 + result.min_effect) / math.log(RATIO_SPAN), 1.0) * 50


def _verdict_table(rows: list, title: str, result: GateResult) -> str:
    if not rows:
        return ""
    body = "".join(
        f"<tr class='{STATUS_CLASS.get(v.status, '')}'><td class='case'>{_h(v.case)}</td>"
        f"<td>{_h(label(v, result))}</td>"
        f"<td class='n'>{_before_now(v)[0]}</td><td class='n'>{_before_now(v)[1]}</td><td>{_h(v.message)}</td></tr>"
        for v in by_severity(rows, result)
    )
    return (
        f"<h2>{_h(title)} ({len(rows)})</h2><table><colgroup><col class='c1'><col class='c2'><col class='c3'>"
        "<col class='c3'><col></colgroup><tr><th>case</th><th>verdict</th><th>before</th><th>now</th>"
        f"<th>details</th></tr>{body}</table>"
    )


def _before_now(v) -> tuple[str, str]:
    if v.suite == "perf":
        return _h(_fmt_ms(v.baseline_ms)), _h(_fmt_ms(v.time_ms))
    return tuple("-" if x is None else f"{x:.3g}" for x in (v.baseline_budget, v.budget))


_CSS = (
    "body{font:14px/1.4 system-ui,sans-serif;margin:24px auto;max-width:1240px;padding:0 16px;color:#222}"
    "h1{font-size:22px;margin:0 0 8px} h2{font-size:17px;margin:22px 0 6px}"
    "table{border-collapse:collapse;width:100%;table-layout:fixed;margin-bottom:8px}"
    "caption{text-align:left;color:#555;padding:4px 0}"
    "th,td{padding:3px 6px;border-bottom:1px solid #e4e4e4;text-align:left;vertical-align:top}"
    "td.case{overflow-wrap:anywhere;font-family:ui-monospace,monospace;font-size:12px}"
    "td.n{text-align:right;white-space:nowrap} col.c1{width:36%} col.c2{width:9%} col.c3{width:8%}"
    "col.c4{width:7%} col.c5{width:28%}"
    "tr.bad td{background:#fde0e0} tr.warn td{background:#fff6d5} tr.ack td{background:#eee6f6}"
    ".counts span{display:inline-block;margin:0 8px 4px 0;padding:1px 8px;border-radius:9px;background:#eee}"
    ".counts .bad{background:#f6c6c6} .counts .warn{background:#f8e8a8} .counts .ok{background:#d3efd9}"
    ".track{position:relative;height:12px;background:linear-gradient(90deg,transparent calc(50% - 1px),#888 "
    "calc(50% - 1px),#888 calc(50% + 1px),transparent calc(50% + 1px)),linear-gradient(90deg,transparent "
    "var(--min),#d62728 var(--min),#d62728 calc(var(--min) + 1px),transparent calc(var(--min) + 1px))}"
    ".b{position:absolute;top:1px;height:10px;background:#9ab} .b.bad{background:#d62728}"
    ".b.faster{background:#2ca02c} .b.clip{border-right:3px double #000}"
    "th.axis{text-align:center}"
    "p.meta{color:#444;margin:4px 0}"
)


def html_report(result: GateResult) -> str:
    """One small file, no script and nothing fetched: the verdict, what was compared, the failures and
    warnings, and every compared perf case's time ratio as a bar centred on 1 (CSS only)."""
    c, b = result.candidate, result.baseline
    meta = (
        f"Candidate {_h(c['commit']['sha'][:12])} ({_h(c['commit']['branch'])}, run {_h(c['id'][:8])}, "
        f"{_h(c['status'])}) against baseline {_h(b['commit'][:12])} ({_h(b['branch'])}, run {_h(b['id'][:8])}) "
        f"on {_h(hardware_text(result))}; "
        + ("wall time per call; " if result.metric == "call" else "GPU time; ")
        + f"minimum effect {result.min_effect:.0%}, false discovery rate {result.fdr:.0%}."
    )
    notes = "".join(f"<p class='meta'>Note: {_h(n)}</p>" for n in result.notes)
    if result.undecided:
        notes = f"<p class='meta'><b>Cannot decide:</b> {_h(result.undecided)}</p>" + notes
    badges = "".join(f"<span class='{LABEL_CLASS.get(s, '')}'>{_h(s)}: {n}</span>" for s, n in counts(result))
    acknowledged = [v for v in result.verdicts if v.status == ACKNOWLEDGED]
    others = sorted(
        (
            v
            for v in result.verdicts
            if v not in result.failed and v not in result.warnings and v.status != ACKNOWLEDGED
        ),
        key=lambda v: (v.status != NEW, v.case),
    )
    rest = _verdict_table(others, "Every other case", result)
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>KernelWatch gate: {_h(result.verdict)}</title><style>{_CSS}</style></head><body>"
        f"<h1>KernelWatch gate: {_h(result.verdict)}</h1><p class='meta'>{meta}</p>{notes}"
        f"<div class='counts'>{badges}</div>"
        + _verdict_table(result.failed, "Failures", result)
        + _verdict_table(result.warnings, "Warnings", result)
        + _verdict_table(acknowledged, "Acknowledged (expected, not failing)", result)
        + f"<h2>Perf: time ratio per case</h2>{_ratio_table(result)}"
        + (f"<details><summary>Every other case ({len(others)})</summary>{rest}</details>" if others else "")
        + "</body></html>"
    )


def publish(result: GateResult, folder: Path, summary: str | None = None) -> list[str]:
    """Write the reports and append the Markdown to ``$GITHUB_STEP_SUMMARY``; one line per outcome.

    A report that cannot be written is a warning: it never changes the verdict or the exit status.
    """
    lines = []
    try:
        paths, replaced = _write_reports(result, folder)
        lines.append(f"reports: {', '.join(str(p) for p in paths.values())}")
        lines += [f"warning: {note}" for note in replaced]
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
    """gate.md, gate-junit.xml and gate.html in ``folder``, each written by :func:`replace_file`."""
    paths, _ = _write_reports(result, folder)
    return paths


def _write_reports(result: GateResult, folder: Path) -> tuple[dict[str, Path], list[str]]:
    """The reports' paths and a line per symbolic link a report replaced."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": folder / "gate.md", "junit": folder / "gate-junit.xml", "html": folder / "gate.html"}
    notes = []
    for kind, content in (("markdown", markdown(result)), ("junit", junit(result)), ("html", html_report(result))):
        link = replace_file(paths[kind], content)
        if link is not None:
            notes.append(replaced_link_note(paths[kind], link))
    return paths, notes


def replace_file(path: Path, content: str) -> str | None:
    """Write ``content`` to a new file beside ``path``, then rename it over ``path``
    (:func:`kernelwatch.store.files.write_atomic`).

    A reader (or a full disk) never sees half a report: the old file stays until the new one is whole.
    A symlink planted at ``path`` (``gate.md`` -> someone's file) is replaced by the report and its target
    never written (returned, to be said); anything there but a file or a symlink (a folder, a FIFO) is refused.
    """
    return write_atomic(path, content.encode("utf-8"))
