"""Every page of the demo at 1,280 px in a real headless Chromium, read from the rendered Plotly layouts: at least
three labelled ticks on every axis, no chart title under Plotly's toolbar, nothing wider than the window, Triage's
key columns without horizontal scroll, no Deploy button, and the case page's kernel panel showing the planted
15% step (its y range at most 3x the kernel's own spread)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from kernelwatch.dashboard.screenshots import CHROMIUM_ARGS, settle
from kernelwatch.store.engine import open_database
from tests.conftest import IN_CI
from tests.test_verdict_agreement import SOFTMAX, build_demo, demo_commits

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("KERNELWATCH_CHROMIUM") or "/usr/bin/chromium"
WIDTH = 1280
H200 = "b104246322b32e20"  # the demo's H200 (ci/history's): its fingerprint
PAGES = (
    "",
    "triage",
    f"case?{urllib.parse.urlencode({'case': SOFTMAX, 'hardware': H200})}",
    "overview",
    "performance",
    "performance?kernel=scaled_masked_softmax",
    "accuracy",
    "compare",
    "roofline",
    "profiler",
)
# The columns of Triage that may scroll out of view at 1,280 px (the rest are its key columns).
TRIAGE_SCROLLS = ("budget change", "trend us", "reproduce", "bisect")  # the GPU is a key column, after p

LAYOUT = """() => {
  const box = e => { if (!e) return null; const b = e.getBoundingClientRect();
                     return b.width && b.height ? {l: b.left, r: b.right, t: b.top, b: b.bottom} : null; };
  const charts = Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => {
    const fl = gd._fullLayout;
    const axes = Object.keys(fl).filter(k => /^[xy]axis\\d*$/.test(k)).map(k => {
      const ax = fl[k];
      const labelled = (ax._vals || []).filter(v => v.text !== undefined && String(v.text).trim() !== '');
      return {name: k, type: ax.type, visible: ax.visible, labels: ax.showticklabels, ticks: labelled.length,
              categories: (ax._categories || []).length, range: ax.range};
    });
    return {title: fl.title && fl.title.text, titleBox: box(gd.querySelector('.gtitle')),
            toolbar: box(gd.querySelector('.modebar')), right: gd.getBoundingClientRect().right, axes,
            traces: gd._fullData.map(t => ({name: t.name, y: Array.from(t.y || []), text: t.text || null}))};
  });
  const grids = Array.from(document.querySelectorAll('[data-testid="stDataFrame"]')).map(el => {
    const sc = el.querySelector('.dvn-scroller') || el;
    return {scroll: sc.scrollWidth, client: sc.clientWidth, right: el.getBoundingClientRect().right};
  });
  return {scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth,
          deploy: document.querySelectorAll('[data-testid="stAppDeployButton"]').length, charts, grids};
}"""

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server():
    if not Path(CHROMIUM).exists():
        if IN_CI:
            pytest.fail(f"Chromium is required in CI: {CHROMIUM} is missing")
        pytest.skip(f"no Chromium at {CHROMIUM}")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "KERNELWATCH_DB": build_demo(), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(ROOT / "kernelwatch" / "dashboard" / "app.py"),
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
        ],
        env=env,
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # cwd: the config is found by the app
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{base}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail(f"streamlit did not become healthy: {proc.stdout.read().decode()[-2000:]}")
    yield base
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture(scope="module")
def layouts(server):
    """path -> the rendered layout of that page at 1,280 px (each page opened once, when a test first asks)."""
    from playwright.sync_api import sync_playwright

    found: dict[str, dict] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)

        def layout(path: str) -> dict:
            if path not in found:
                page = browser.new_page(viewport={"width": WIDTH, "height": 1800})
                page.goto(f"{server}/{path}", wait_until="domcontentloaded")
                page.wait_for_selector("h1", timeout=60_000)
                settle(page, timeout=240)
                assert page.locator("[data-testid='stException']").count() == 0, page.inner_text("body")[:2000]
                found[path] = page.evaluate(LAYOUT)
                page.close()
            return found[path]

        yield layout
        browser.close()


def _overlap(a: dict | None, b: dict | None) -> bool:
    return bool(a and b and a["l"] < b["r"] and b["l"] < a["r"] and a["t"] < b["b"] and b["t"] < a["b"])


@pytest.mark.parametrize("path", PAGES)
def test_every_axis_has_three_labelled_ticks_and_no_title_is_under_the_toolbar(layouts, path) -> None:
    """A log axis spanning less than a decade showed one tick ("5000"); titles sat under Plotly's toolbar."""
    found = layouts(path)
    for chart in found["charts"]:
        for axis in chart["axes"]:
            if not axis["visible"] or not axis["labels"]:
                continue  # a shared x axis labels its bottom panel only
            least = min(3, axis["categories"]) if axis["type"] == "category" else 3
            assert axis["ticks"] >= least, (path, chart["title"], axis)
        assert not _overlap(chart["titleBox"], chart["toolbar"]), (
            path,
            chart["title"],
            chart["titleBox"],
            chart["toolbar"],
        )
        assert chart["right"] <= WIDTH, (path, chart["title"])


@pytest.mark.parametrize("path", PAGES)
def test_nothing_is_wider_than_the_window_and_there_is_no_deploy_button(layouts, path) -> None:
    found = layouts(path)
    assert found["scroll"] <= found["client"], path
    assert all(g["right"] <= WIDTH for g in found["grids"]), path
    assert found["deploy"] == 0, path


def test_triage_key_columns_fit_without_horizontal_scroll(layouts) -> None:
    """The Triage table needed ~1,315 px of columns in 1,120: only the columns after its key ones (verdict to the
    times before and now, the model and GPU among them) may scroll."""
    from kernelwatch.dashboard.common import TRIAGE_WIDTHS

    grid = layouts("triage")["grids"][0]
    may_scroll = sum(TRIAGE_WIDTHS[c] for c in TRIAGE_SCROLLS)
    assert grid["scroll"] - grid["client"] <= may_scroll, grid


def test_the_case_page_shows_the_15_percent_step_on_the_kernel_panel(layouts) -> None:
    path = PAGES[2]
    kernel = layouts(path)["charts"][0]
    parts = [t for t in kernel["traces"] if t["name"] == "kernel (Triton)"]  # measured, then the SYNTHETIC copies
    assert len(parts) == 2 and len(parts[-1]["y"]) == 2, [len(t["y"]) for t in parts]
    values = [v for line in parts for v in line["y"] if v is not None]
    low, high = kernel["axes"][[a["name"] for a in kernel["axes"]].index("yaxis")]["range"]
    assert high - low <= 3 * (max(values) - min(values)), (low, high, min(values), max(values))
    assert values[-1] / values[-2] > 1.12  # the planted step, at the newest point
    names = {t["name"] for t in kernel["traces"]}
    clean, planted = demo_commits(open_database(build_demo(), readonly=True))
    assert {f"candidate {planted}", f"baseline {clean}"} <= names, names  # judged against its own branch
    speed = layouts(path)["charts"][1]  # eager and torch.compile each on a panel of their own
    assert "speedup" in speed["title"] and sum(a["name"].startswith("yaxis") for a in speed["axes"]) >= 2
