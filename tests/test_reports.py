"""Gate reports carry names from artifacts: in gate.md they stay text (no links, images, HTML, broken code spans
or table cells); in gate.html nothing becomes a link, an image or a request, checked in a real Chromium."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from kernelwatch.gate.detect import Comparison
from kernelwatch.gate.judge import CaseVerdict, GateResult
from kernelwatch.gate.reports import html_report, markdown, md_code, md_text

LINK = "mse_loss/[click here](https://example.com/c) ![t](https://example.com/t.png)"
HTML = "mse_loss/<a href='https://example.com/a'>a</a><img src=https://example.com/i.png>"
TICKS = "mse_loss/a`b``c|d"
CHROMIUM = os.environ.get("KERNELWATCH_CHROMIUM") or "/usr/bin/chromium"


def _result() -> GateResult:
    result = GateResult(
        candidate={
            "id": "0" * 8 + "-0000-4000-8000-" + "0" * 12,
            "status": "complete",
            "commit": {"sha": "abc[x](https://example.com)", "branch": "feature/<b>bold</b>"},
        },
        baseline={"id": "1" * 8 + "-0000-4000-8000-" + "1" * 12, "commit": "def", "branch": "main"},
    )
    for case in (LINK, HTML, TICKS):
        result.verdicts.append(
            CaseVerdict(
                case,
                "mse_loss",
                "regression",
                f"slower; see {case} at www.example.com",
                comparison=Comparison(case, 1.3, 1e-9, 1e-9, 1e-9, 0.05, 10),
            )
        )
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
        close = re.search(rf"(?<!`)`{{{n}}}(?!`)", text[i + n :])
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
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        page = browser.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.goto(path.as_uri())
        page.wait_for_selector("#ratios td.case", timeout=60_000)
        anchors = page.locator("a[href*='example.com']").count()
        images = page.locator("img[src*='example.com'], image[href*='example.com']").count()
        ticks = page.locator("#ratios td.case").all_text_contents()
        body = page.inner_text("body")
        browser.close()
    assert anchors == 0 and images == 0
    assert not [r for r in requests if "example.com" in r]
    assert HTML in ticks and LINK in ticks  # the ratio table shows the names, literally
    assert HTML in body


def _full_suite_result(n_perf: int = 62, n_acc: int = 358) -> GateResult:
    """A result the size of the full H200 suite: 62 compared perf cases and 358 accuracy cases."""
    result = GateResult(
        candidate={"id": "0" * 36, "status": "complete", "commit": {"sha": "a" * 40, "branch": "pr"}},
        baseline={"id": "1" * 36, "commit": "b" * 40, "branch": "main"},
    )
    for i in range(n_perf):
        ratio = 1.108 if i == 0 else 0.9 if i == 1 else 1 + (i % 7 - 3) / 1000
        case = f"scaled_masked_softmax/masked/bf16/density=0.1,direction=fwd,mask=batch,scale=0.125,shape={i}x4096"
        result.verdicts.append(
            CaseVerdict(
                case,
                "scaled_masked_softmax",
                "regression" if i == 0 else "pass",
                f"{ratio - 1:+.1%}",
                baseline_ms=0.1,
                time_ms=0.1 * ratio,
                comparison=Comparison(case, ratio, 1e-9, 1e-9, 1e-9, 0.05, 30),
            )
        )
    for i in range(n_acc):
        result.verdicts.append(
            CaseVerdict(
                f"mse_loss/atomic/fp32/direction=fwd,shape={i}",
                "mse_loss",
                "pass",
                "error budget 0.1",
                suite="accuracy",
                budget=0.1,
                baseline_budget=0.1,
            )
        )
    return result


def test_html_report_is_small_plain_and_its_bars_are_centred_on_one() -> None:
    """gate.html was 4.8 MB (Plotly embedded) for 38 cases, opened on the raw Markdown in a <pre>, showed emoji
    that headless Chromium draws as boxes, and its bars started at 0, so +10.8% looked like every other case."""
    page = html_report(_full_suite_result())
    assert len(page.encode()) < 300_000
    assert "<pre" not in page and "<script" not in page and "## KernelWatch" not in page
    assert not re.search("[\U0001f000-\U0001ffff\u2600-\u27bf\u3030\ufe0f]", page)
    bars = re.findall(r"<td class='case'>([^<]*)</td>.*?style='left:([0-9.]+)%;width:([0-9.]+)%'", page)
    by_ratio = {case.split("shape=")[1]: (float(left), float(width)) for case, left, width in bars}
    slower, faster = by_ratio["0x4096"], by_ratio["1x4096"]
    assert slower[0] == 50 and slower[1] > 10  # +10.8% grows right from the centre, visibly
    assert faster[0] + faster[1] == pytest.approx(50, abs=0.01) and faster[1] > 10  # -10% grows left to it
    assert by_ratio["3x4096"][1] < 0.5  # +0.0%: no bar to speak of


def test_failures_are_sorted_by_severity_then_effect_and_the_hardware_is_named() -> None:
    """gate.md listed failures by case key (a +40% slowdown under a +6% one) and named no hardware."""
    result = GateResult(
        candidate={"id": "0" * 36, "status": "complete", "commit": {"sha": "a" * 40, "branch": "pr"}},
        baseline={"id": "1" * 36, "commit": "b" * 40, "branch": "main"},
        hardware={"device_name": "NVIDIA H200", "fingerprint": "b104246322b32e20", "device_count": 2},
    )
    for case, ratio in (("a/small", 1.06), ("b/large", 1.40), ("c/medium", 1.20)):
        result.verdicts.append(
            CaseVerdict(
                case,
                "k",
                "regression",
                f"{ratio - 1:+.0%}",
                baseline_ms=0.1,
                time_ms=0.1 * ratio,
                comparison=Comparison(case, ratio, 1e-9, 1e-9, 1e-9, 0.05, 30),
            )
        )
    result.verdicts.append(
        CaseVerdict("z/acc", "k", "accuracy", "error budget 1.5 > 1", suite="accuracy", budget=1.5, baseline_budget=0.5)
    )
    result.verdicts.append(
        CaseVerdict(
            "y/quick",
            "k",
            "pass",
            "-20%",
            baseline_ms=0.1,
            time_ms=0.08,
            comparison=Comparison("y/quick", 0.8, 1.0, 1.0, 1.0, 0.05, 30),
        )
    )
    report = markdown(result)
    rows = [line.split("`")[1].strip() for line in report.splitlines() if line.startswith("| `")]
    assert rows[:4] == ["z/acc", "b/large", "c/medium", "a/small"]  # accuracy failed, then slower by effect
    assert "on NVIDIA H200 (hardware fingerprint b10424, 2 devices)" in report
    assert "slower: 3" in report and "accuracy failed: 1" in report
    assert "faster (within noise): 1" in report  # 20% faster, its swapped test not significant (result.faster)
    result.faster = {"y/quick"}
    assert "✅ faster: 1" in markdown(result)
    page = html_report(result)
    assert page.index("z/acc") < page.index("b/large") < page.index("c/medium") < page.index("a/small")
    assert "NVIDIA H200 (hardware fingerprint b10424" in page
