"""Every page of a demo database at 1280 px in headless Chromium: no table cell, header, widget label or select
box value is cut (kernelwatch/dashboard/screenshots.py ``truncated`` measures each as the browser draws it).

Found on d3bce35 at 1280 px: Triage's GPU cells read "cuda:1 (r…", the case page's verdict "faster (within…",
the run pickers' labels, Compare's kernel names and budget columns were cut. The database is what `make demo`
builds: the shipped history, the SYNTHETIC demo branch, a CPU accuracy run (a few cases here). One app start,
every page.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest

from kernelwatch.dashboard.screenshots import CHROMIUM_ARGS, settle, truncated
from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("KERNELWATCH_CHROMIUM") or "/usr/bin/chromium"
MAKEFILE = (ROOT / "Makefile").read_text()
DEMO_SOURCE = next(line.split("?=")[1].strip() for line in MAKEFILE.splitlines() if line.startswith("DEMO_SOURCE"))
WIDTH = 1280
# Launch-bound and 20% faster in the demo: "faster (within noise)", once cut to "faster (within…" on its case page
FASTER_NOISY_CASE = "mse_loss/atomic/fp32/direction=fwd,reduction=mean,shape=4096"

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _kw(*args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "kernelwatch", *args], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('demo') / 'kernelwatch.db'}"
    _kw("ingest", "--db", url, *map(str, sorted((ROOT / "ci" / "history").glob("*.json.gz"))))
    _kw("synth", "--db", url, "--demo-from", str(ROOT / DEMO_SOURCE))
    _kw(
        "collect",
        "--db",
        url,
        "--device",
        "cpu",
        "--suite",
        "accuracy",
        "--match",
        "mse_loss/atomic/fp32/direction=fwd",
    )
    return url


@pytest.fixture(scope="module")
def served(demo: str):
    if not Path(CHROMIUM).exists():
        if IN_CI:
            pytest.fail(f"Chromium is required in CI: {CHROMIUM} is missing")
        pytest.skip(f"no Chromium at {CHROMIUM}")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = ROOT / "kernelwatch" / "dashboard" / "app.py"
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(port)]
        + ["--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        env={**os.environ, "KERNELWATCH_DB": demo, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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
        pytest.fail("streamlit did not become healthy")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield base, browser
        finally:
            browser.close()
            proc.terminate()
            proc.wait(timeout=20)


def _h200(url: str) -> str:
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.queries import list_hardware

    return next(h["fingerprint"] for h in list_hardware(open_database(url)) if h["device_name"] == "NVIDIA H200")


def _pages(demo: str) -> list[str]:
    return [
        "triage",
        f"triage?hardware={_h200(demo)}",  # the run pickers
        "case",
        f"case?case={quote(FASTER_NOISY_CASE, safe='')}",  # the longest verdict, "faster (within noise)"
        "overview",
        "performance",
        "accuracy",
        "compare",
        "roofline",
        "profiler",
    ]


def test_no_page_of_the_demo_cuts_a_label_at_1280_px(served, demo: str) -> None:
    base, browser = served
    cut: dict[str, list[str]] = {}
    for path in _pages(demo):
        page = browser.new_page(viewport={"width": WIDTH, "height": 1800})
        page.goto(f"{base}/{path}", wait_until="domcontentloaded")
        page.wait_for_selector("h1", timeout=60_000)
        settle(page)
        assert page.locator("[data-testid='stException']").count() == 0, page.inner_text("body")[:1500]
        assert page.locator("[data-testid='stDataFrame']").count() + page.locator("input").count() > 0, path
        found = truncated(page)
        if found:
            cut[path] = found
        if path.startswith("triage"):
            gpu = page.evaluate(GPU_CELLS)
            assert gpu["right"] <= gpu["visible"], gpu  # the hardware column in sight without scrolling
            assert gpu["cells"] and all(c.startswith("H200 · ") for c in gpu["cells"]), gpu["cells"][:5]
            assert not any("UUID" in c for c in gpu["cells"])
        page.close()
    assert not cut, "\n".join(f"{p}: {line}" for p, lines in cut.items() for line in lines[:15])


# Triage's first table: where its GPU column ends, how wide the grid shows, and the column's cells
GPU_CELLS = """() => {
  const canvas = document.querySelector('[data-testid="stDataFrame"] canvas[data-testid="data-grid-canvas"]');
  let f = canvas[Object.keys(canvas).find(k => k.startsWith('__reactFiber'))];
  while (f && !(Array.isArray((f.memoizedProps || {}).columns) && (f.memoizedProps || {}).getCellContent)) f = f.return;
  const p = f.memoizedProps, at = p.columns.findIndex(c => c.title === 'GPU');
  const right = p.columns.slice(0, at + 1).reduce((s, c) => s + c.width, 0);
  const cells = [];
  for (let r = 0; r < p.rows; r++) {
    const c = p.getCellContent([at, r]);
    if (c.data !== null && c.data !== undefined && c.data !== '') cells.push(c.displayData);
  }
  return {right, visible: canvas.clientWidth, cells};
}"""


def test_the_measure_sees_a_cut_cell_and_a_cut_select_box(served) -> None:
    """The measure itself, on a page made to cut: a text ending in an ellipsis and a narrow select box (the table
    measure fails the test above when common.fitted leaves the configured widths alone)."""
    base, browser = served
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    page.goto(f"{base}/triage", wait_until="domcontentloaded")
    page.wait_for_selector("h1", timeout=60_000)
    settle(page)
    assert truncated(page) == []
    page.evaluate(
        """() => { document.querySelector('[data-testid="stSelectbox"]').style.width = '90px';
                   const p = document.createElement('div'); p.textContent = 'a label cut short…';
                   document.querySelector('[data-testid="stMain"] h1').after(p); }"""
    )
    found = truncated(page)
    assert any(line.startswith('input "') for line in found), found
    assert any("a label cut short" in line and "ellipsis" in line for line in found), found
    page.close()
