"""Gate reports carry names from artifacts: in gate.md they stay text (no links, images, HTML, broken code spans
or table cells); in gate.html nothing becomes a link, an image or a request, checked in a real Chromium."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from ci.detect import Comparison
from ci.gate import CaseVerdict, GateResult
from ci.reports import html_report, markdown, md_code, md_text

LINK = "mse_loss/[click here](https://example.com/c) ![t](https://example.com/t.png)"
HTML = "mse_loss/<a href='https://example.com/a'>a</a><img src=https://example.com/i.png>"
TICKS = "mse_loss/a`b``c|d"
CHROMIUM = os.environ.get("KERNELWATCH_CHROMIUM") or "/usr/bin/chromium"


def _result() -> GateResult:
    result = GateResult(
        candidate={"id": "0" * 8 + "-0000-4000-8000-" + "0" * 12, "status": "complete",
                   "commit": {"sha": "abc[x](https://example.com)", "branch": "feature/<b>bold</b>"}},
        baseline={"id": "1" * 8 + "-0000-4000-8000-" + "1" * 12, "commit": "def", "branch": "main"})
    for case in (LINK, HTML, TICKS):
        result.verdicts.append(CaseVerdict(case, "mse_loss", "regression", f"slower; see {case} at www.example.com",
                                           comparison=Comparison(case, 1.3, 1e-9, 1e-9, 1e-9, 0.05, 10)))
    return result


def _outside_code(text: str) -> str:
    """The text with its code spans removed (CommonMark: a run of n backticks up to the next run of exactly n);
    inside a code span nothing is markup, and GitHub autolinks nothing there."""
    out, i = [], 0
    while i < len(text):
        run = re.match(r"`+", text[i:])
        if not run:
            out.append(text[i])
            i += 1
            continue
        n = len(run.group())
        close = re.search(rf"(?<!`)`{{{n}}}(?!`)", text[i + n:])
        if close is None:
            out.append(run.group())
            i += n
        else:
            i += n + close.end()
    return "".join(out)


def _unescaped(text: str) -> list[str]:
    """Outside code spans: link or image syntax, HTML tags, bare URLs GitHub would autolink."""
    return re.findall(r"(?<!\\)\]\(|(?<!\\)<[A-Za-z/!]|https?://|www\.", _outside_code(text))


def test_markdown_keeps_names_as_text_and_table_rows_whole() -> None:
    report = markdown(_result())
    assert not _unescaped(report), _unescaped(report)
    header = next(line for line in report.splitlines() if line.startswith("| case |"))
    rows = [line for line in report.splitlines() if line.startswith("| ") and "mse_loss" in line]
    assert len(rows) == 3
    for row in rows:  # a row splits into exactly the header's cells: pipes inside names are escaped
        assert len(re.findall(r"(?<!\\)\|", row)) == header.count("|"), row
    ticks = next(r for r in rows if "a`b" in r)
    assert "``` mse_loss/a`b``c\\|d ```" in ticks  # a fence longer than any backtick run inside


def test_escape_helpers() -> None:
    assert md_code("plain") == "`plain`"
    assert md_code("a`b") == "`` a`b ``"
    assert md_text("[x](https://e.com)").startswith("\\[x\\]")
    assert "https://" not in md_text("see https://e.com") and "www." not in md_text("www.e.com")


@pytest.mark.browser
def test_html_report_renders_no_link_image_or_request(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    path = tmp_path / "gate.html"
    path.write_text(html_report(_result()), encoding="utf-8")
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.goto(path.as_uri())
        page.wait_for_selector("#ratios .main-svg", timeout=60_000)
        anchors = page.locator("a[href*='example.com']").count()
        images = page.locator("img[src*='example.com'], image[href*='example.com']").count()
        ticks = page.evaluate("() => Array.from(document.querySelectorAll('#ratios .ytick text'))"
                              ".map(t => t.textContent)")
        body = page.inner_text("body")
        browser.close()
    assert anchors == 0 and images == 0
    assert not [r for r in requests if "example.com" in r]
    assert HTML in ticks and LINK in ticks  # the chart labels show the names, literally
    assert HTML in body
