"""End to end in a real headless Chromium: `streamlit run` on loopback, every page, real charts."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import IN_CI
from tests.test_dashboard import HISTORY, dash_db  # noqa: F401 - the same database fixture

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM = os.environ.get("KERNELWATCH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
PAGES = ("overview", "performance", "roofline", "profiler", "accuracy", "compare")

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(dash_db: str):  # noqa: ANN201, F811
    if not Path(CHROMIUM).exists():
        if IN_CI:
            pytest.fail(f"Chromium is required in CI: {CHROMIUM} is missing")
        pytest.skip(f"no Chromium at {CHROMIUM}")
    port = _free_port()
    env = {**os.environ, "KERNELWATCH_DB": dash_db, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "dashboard" / "app.py"), "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
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
def browser(server):  # noqa: ANN001, ANN201
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        yield chromium
        chromium.close()


def _open(browser, url: str, name: str):  # noqa: ANN001, ANN202
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector("h1", timeout=60_000)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
    page.wait_for_function(
        "() => document.querySelectorAll('.js-plotly-plot').length"
        " >= document.querySelectorAll('[data-testid=\"stPlotlyChart\"]').length", timeout=60_000)
    time.sleep(1.5)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    assert page.locator("[data-testid='stException']").count() == 0, page.inner_text("body")[:2000]
    return page


def _traces(page) -> list[list[str]]:  # noqa: ANN001
    page.wait_for_selector(".js-plotly-plot", timeout=60_000)
    return page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                         ".map(el => (el.data || []).map(t => t.name || t.type))")


@pytest.mark.parametrize("name", PAGES)
def test_every_page_renders_without_an_exception(browser, server, name) -> None:  # noqa: ANN001
    page = _open(browser, f"{server}/{'' if name == 'overview' else name}", name)
    assert page.get_by_text("Page not found").count() == 0
    assert "KernelWatch" in page.title() or page.locator("h1").count() >= 1
    page.close()


def test_picking_kernel_and_hardware_renders_the_expected_traces(browser, server, dash_db) -> None:  # noqa: ANN001, F811
    from db.engine import open_database
    from db.queries import latest_complete_runs

    fp = next(r["fingerprint"] for r in latest_complete_runs(open_database(dash_db, readonly=True))
              if r["device"] == "cuda" and not r["synthetic"])
    page = _open(browser, f"{server}/performance?kernel=mse_loss&hardware={fp}&variant=persistent&dtype=fp16",
                 "performance-mse-h200")
    (traces,) = _traces(page)
    cases = [t for t in traces if t.startswith("mse_loss/persistent/fp16")]
    assert len(cases) == 6, traces  # 4 sizes x mean + 2 sums
    assert "kernel=mse_loss" in page.url
    page.close()
    page = _open(browser, f"{server}/roofline?hardware={fp}", "roofline-h200")
    (traces,) = _traces(page)
    assert "measured roofline" in traces and "triton" in traces
    page.close()
