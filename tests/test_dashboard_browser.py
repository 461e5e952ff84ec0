"""End to end in a real headless Chromium: `streamlit run` on loopback over the committed H200 history with a
labelled synthetic step injected; a reviewer's walk from triage to the case page to the bisect command;
hostile names never become links, images or requests; screenshots of the main pages in test-artifacts/."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import IN_CI
from tests.test_dashboard import EVIL_HW, MD_CASE, STEP_CASE, dash_db, fingerprint  # noqa: F401 - same database

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("KERNELWATCH_CHROMIUM") or "/usr/bin/chromium"  # Debian's, not a downloaded build
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
PAGES = ("", "triage", "case", "overview", "performance", "accuracy", "compare", "roofline", "profiler")

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
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield chromium
        chromium.close()


def _settle(page, timeout: float = 90) -> None:  # noqa: ANN001
    """Wait until the script run is over: no status widget, no stale or skeleton element, every Plotly
    chart drawn, and the DOM unchanged for two seconds."""
    deadline, last, stable = time.time() + timeout, None, 0
    while stable < 4:
        assert time.time() < deadline, "the page never settled"
        time.sleep(0.5)
        state = page.evaluate("""() => [
            document.querySelectorAll('*').length,
            !!document.querySelector('[data-testid="stStatusWidget"]'),
            document.querySelectorAll('[data-stale="true"], [data-testid="stSkeleton"]').length,
            document.querySelectorAll('[data-testid="stPlotlyChart"]').length
              - document.querySelectorAll('.js-plotly-plot .main-svg').length / 1]""")
        busy = state[1] or state[2] or state[3] > 0
        stable = stable + 1 if state == last and not busy else 0
        last = state


def _open(browser, url: str, shot: str | None = None, height: int = 1400):  # noqa: ANN001, ANN202
    page = browser.new_page(viewport={"width": 1400, "height": height})
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector("h1", timeout=60_000)
    _settle(page)
    if shot:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{shot}.png"), full_page=True)
    assert page.locator("[data-testid='stException']").count() == 0, page.inner_text("body")[:2000]
    return page


def _grid(page, index: int = 0) -> list[str]:  # noqa: ANN001
    """The cells of a dataframe, from the grid's accessibility tree (the grid itself draws on a canvas)."""
    return page.evaluate("(i) => Array.from(document.querySelectorAll('[data-testid=\"stDataFrame\"]')[i]"
                         ".querySelectorAll('[role=\"gridcell\"]')).map(c => c.textContent)", index)


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders_without_an_exception(browser, server, path) -> None:  # noqa: ANN001
    page = _open(browser, f"{server}/{path}")
    assert page.get_by_text("Page not found").count() == 0
    assert page.locator("h1").count() >= 1
    page.close()


def test_triage_is_the_landing_page(browser, server) -> None:  # noqa: ANN001
    page = _open(browser, f"{server}/", "triage", height=1600)
    assert page.locator("h1").inner_text().startswith("Triage")
    heads = page.locator("h3").all_inner_texts()
    assert heads[0].startswith("NVIDIA H200") and "SYNTHETIC" in heads[0]
    cells = _grid(page, 0)
    assert cells[:2] == ["slower", "mse_loss"] and "shape=33554432" in cells[2]
    assert page.get_by_text("SYNTHETIC data: generated by db/synthetic.py").count() >= 1
    page.close()


def test_walk_from_triage_to_the_case_page_to_the_bisect_command(browser, server, dash_db) -> None:  # noqa: ANN001, F811
    h200 = fingerprint(dash_db, "NVIDIA H200")
    page = _open(browser, f"{server}/?hardware={h200}")
    assert page.get_by_text("slower: 1 · unchanged: 11").count() == 1
    grid = page.locator("[data-testid='stDataFrame']").first
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 400, box["y"] + 35 + 17)  # the first row, its "case" cell
    page.wait_for_url("**/case?**", timeout=60_000)
    _settle(page)
    query = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)
    assert query["case"] == [STEP_CASE] and query["hardware"] == [h200]
    assert page.locator("h1").inner_text() == "Case history"
    assert page.get_by_text("SYNTHETIC data: generated by db/synthetic.py").count() >= 1
    titles = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                           ".map(el => el.layout.title.text)")
    assert f"{STEP_CASE}: time per call" in titles[0] and "SYNTHETIC" in titles[0]
    traces = page.evaluate("() => document.querySelector('.js-plotly-plot').data.map(t => t.name)")
    assert {"kernel (Triton)", "eager PyTorch", "torch.compile"} <= set(traces)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1400, "height": 2300})
    _settle(page)
    page.screenshot(path=str(ARTIFACTS / "case.png"), full_page=True)
    codes = page.locator("[data-testid='stCode'] code").all_inner_texts()
    bisect = next(" ".join(c.split()) for c in codes if c.strip().startswith("kernelwatch bisect"))
    assert shlex.split(bisect) == ["kernelwatch", "bisect", "--hardware", h200[:12], "--", STEP_CASE]
    argv = shlex.split(bisect)
    argv[0] = str(Path(sys.executable).with_name("kernelwatch"))
    out = subprocess.run(argv, env={**os.environ, "KERNELWATCH_DB": dash_db}, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"runs of {STEP_CASE} on NVIDIA H200" in out.stdout or "entered between" in out.stdout
    page.close()


def test_accuracy_across_hardware_keeps_every_hardware(browser, server) -> None:  # noqa: ANN001
    page = _open(browser, f"{server}/accuracy", "accuracy", height=2000)
    heat = page.evaluate("() => document.querySelector('.js-plotly-plot').data[0]")
    assert heat["type"] == "heatmap" and "NVIDIA H200 (b10424)" in heat["x"]
    assert any("CPU interpreter" in x for x in heat["x"])
    assert page.get_by_text("Failing cases: 1").count() == 1
    cells = _grid(page, 1)
    assert cells[0].startswith("CPU interpreter")  # the failing case shows its hardware
    page.close()


def test_compare_opens_on_two_runs_of_one_hardware(browser, server) -> None:  # noqa: ANN001
    page = _open(browser, f"{server}/compare", "compare", height=1300)
    a, b = page.locator("[data-testid='stSelectbox'] input").evaluate_all("els => els.map(e => e.value)")[:2]
    assert a.split("·")[-1].strip() == b.split("·")[-1].strip() == "NVIDIA H200"
    assert "run " in a and a != b
    assert page.get_by_text("These runs share no cases").count() == 0
    assert len(_grid(page, 0)) > 50
    page.close()


def test_hostile_values_stay_text(browser, server, dash_db) -> None:  # noqa: ANN001, F811
    evil = fingerprint(dash_db, EVIL_HW)
    requests: list[str] = []
    urls = [f"{server}/?hardware={evil}",
            f"{server}/case?{urllib.parse.urlencode({'case': MD_CASE, 'hardware': evil})}",
            f"{server}/performance?kernel=%5Bclick%20here%5D(https://example.com/k)&last=%C2%B2",
            f"{server}/accuracy?kernel=!%5Bt%5D(https://example.com/t.png)",
            f"{server}/overview?%5Bx%5D(https://example.com/p)=1&last=%D9%A3"]
    for url in urls:
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        page.on("request", lambda r: requests.append(r.url))
        page.goto(url, wait_until="domcontentloaded")
        page.wait_for_selector("h1", timeout=60_000)
        _settle(page)
        assert page.locator("[data-testid='stException']").count() == 0
        assert page.locator("a[href*='example.com']").count() == 0, url
        assert page.locator("img[src*='example.com'], image[href*='example.com']").count() == 0, url
        body = page.inner_text("body")
        assert "example.com" in body  # shown, as text
        page.close()
    assert not [r for r in requests if (urllib.parse.urlparse(r).hostname or "").endswith("example.com")]
