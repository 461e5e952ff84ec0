"""Every page of a served dashboard as a reviewer sees it: full-page PNGs from headless Chromium.

    python -m kernelwatch.dashboard.screenshots [--url http://127.0.0.1:8501] [--out test-artifacts] [--width 1280]
                                    [--height 1800] [--case KEY] [--chromium /usr/bin/chromium]

Start the dashboard first (``make demo`` serves one). Each page is captured once its script run is over
(:func:`settle`); the case page opens on ``--case``, else on the change Triage opens on. A page that
shows a Python exception is still captured, and the command then exits 1 naming it.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.parse
from pathlib import Path

PAGES = ("triage", "case", "overview", "performance", "accuracy", "compare", "roofline", "profiler")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def settle(page, timeout: float = 180) -> None:
    """Wait until the page's script run is over: no status widget, no stale or skeleton element, every Plotly
    chart drawn, and the DOM unchanged for two seconds."""
    deadline, last, stable = time.time() + timeout, None, 0
    while stable < 4:
        if time.time() > deadline:
            raise TimeoutError(f"{page.url}: the page never settled in {timeout:g} s")
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


def capture(
    url: str,
    out: Path,
    width: int = 1280,
    case: str | None = None,
    chromium: str = "/usr/bin/chromium",
    height: int = 1800,
) -> list[tuple[str, Path, bool]]:
    """(page, PNG, whether it shows an exception) for every page of the dashboard at ``url``."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    shots = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            for name in PAGES:
                query = f"?case={urllib.parse.quote(case, safe='')}" if name == "case" and case else ""
                page = browser.new_page(viewport={"width": width, "height": height})
                page.goto(f"{url.rstrip('/')}/{name}{query}", wait_until="domcontentloaded")
                page.wait_for_selector("h1", timeout=60_000)
                settle(page)
                path = out / f"{name}.png"
                page.screenshot(path=str(path), full_page=True)
                shots.append((name, path, page.locator("[data-testid='stException']").count() > 0))
                page.close()
        finally:
            browser.close()
    return shots


def _missing(url: str, chromium: str) -> str | None:
    """What this command needs and lacks, in one line: Playwright (``make install-demo`` has none), the browser,
    a dashboard serving at ``url``."""
    import importlib.util
    import urllib.request

    if importlib.util.find_spec("playwright") is None:
        return (
            f"the Python package 'playwright' is missing from {sys.executable}: install it with "
            f"`{sys.executable} -m pip install playwright` (it drives the Chromium at --chromium; no browser download)"
        )
    if not Path(chromium).is_file():
        return f"no Chromium at {chromium}: install it (Debian: apt-get install chromium) or name it with --chromium"
    try:
        urllib.request.urlopen(f"{url.rstrip('/')}/_stcore/health", timeout=10).read()
    except (OSError, ValueError) as exc:
        return f"no dashboard answers at {url} ({getattr(exc, 'reason', exc)}): start one first (make demo serves one)"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernelwatch.dashboard.screenshots", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--url", default="http://127.0.0.1:8501")
    parser.add_argument("--out", type=Path, default=Path("test-artifacts"))
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1800, help="the window: the app scrolls inside it")
    parser.add_argument("--case", default=None, help="the case page's case (default: the change Triage opens on)")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args(argv)
    problem = _missing(args.url, args.chromium)
    if problem:
        print(f"{parser.prog}: error: {problem}", file=sys.stderr)
        return 2
    failed = []
    for name, path, broken in capture(args.url, args.out, args.width, args.case, args.chromium, args.height):
        print(f"{name:<12} {path}{'  (shows an exception)' if broken else ''}")
        if broken:
            failed.append(name)
    if failed:
        print(f"pages with an exception: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
