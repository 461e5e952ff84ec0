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


# Every label a page cuts, as the reader's browser draws it: a table cell or header wider than its column (the
# grid draws on a canvas: its columns, theme and cells are the props React gave it, measured with the grid's
# font), an element that clips its text, a text ending in an ellipsis, a select box's value wider than the box.
# A table wider than the page scrolls sideways with every text whole: not a cut.
TRUNCATED_JS = """
() => {
  const found = [];
  const ctx = document.createElement('canvas').getContext('2d');
  const width = (text, font) => { ctx.font = font; return ctx.measureText(text).width; };
  const where = (el) => el.closest('[data-testid]')?.getAttribute('data-testid') || el.tagName;
  document.querySelectorAll('[data-testid="stDataFrame"]').forEach((df, t) => {
    const canvas = df.querySelector('canvas[data-testid="data-grid-canvas"]');
    if (!canvas) return;
    const key = Object.keys(canvas).find(k => k.startsWith('__reactFiber'));
    let f = canvas[key], props = null, theme = null;
    for (let i = 0; f && i < 80; i++, f = f.return) {
      const p = f.memoizedProps || {};
      const grid = Array.isArray(p.columns) && typeof p.getCellContent === 'function' && typeof p.rows === 'number';
      if (!props && grid) props = p;
      if (!theme && p.theme && p.theme.baseFontStyle) theme = p.theme;
    }
    if (!props || !theme) { found.push(`table ${t}: grid props not found`); return; }
    const pad = theme.cellHorizontalPadding;
    const body = `${theme.baseFontStyle} ${theme.fontFamily}`;
    const head = `${theme.headerFontStyle} ${theme.fontFamily}`;
    props.columns.forEach((c, ci) => {
      const title = c.title || '';
      if (title && width(title, head) + pad > c.width + 0.5)
        found.push(`table ${t} header "${title}": ${Math.ceil(width(title, head))} px of text in ${c.width} px`);
      for (let r = 0; r < props.rows; r++) {
        const cell = props.getCellContent([ci, r]);
        if (!cell || cell.kind === 'image' || cell.kind === 'bubble') continue;
        const text = cell.displayData !== undefined ? String(cell.displayData)
          : (typeof cell.data === 'string' ? cell.data : '');
        if (!text) continue;
        const w = width(text, body);
        if (w + 2 * pad > c.width + 0.5 || text.endsWith('…'))
          found.push(`table ${t} column "${title}" row ${r}: "${text}" ${Math.ceil(w)} px in ${c.width} px`);
      }
    });
  });
  // Everything else: an element clipping its own text, or a text cut with an ellipsis
  const main = document.querySelector('[data-testid="stMain"]') || document.body;
  main.querySelectorAll('*').forEach(el => {
    if (el.closest('[data-testid="stDataFrame"], .js-plotly-plot, [data-testid="stCode"]')) return;
    const style = getComputedStyle(el);
    const text = el.textContent.trim();
    if (!text || el.clientWidth === 0 || style.display === 'none' || style.visibility === 'hidden') return;
    const clipping = (e) => getComputedStyle(e).textOverflow === 'ellipsis'
      || ['hidden', 'clip'].includes(getComputedStyle(e).overflowX);
    const cut = (e) => e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0 && clipping(e);
    if (cut(el) && ![...el.querySelectorAll('*')].some(cut))  // the innermost element that cuts it
      found.push(`${where(el)} "${text.slice(0, 90)}": ${el.scrollWidth} px in ${el.clientWidth} px`);
    const own = [...el.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join('').trim();
    if (own.endsWith('…'))
      found.push(`${where(el)} "${own.slice(0, 90)}": ends in an ellipsis`);
  });
  // A select box shows its value in an input: the text must fit the input's box
  main.querySelectorAll('input').forEach(inp => {
    if (!inp.value || inp.type === 'hidden' || inp.clientWidth === 0) return;
    const cs = getComputedStyle(inp);
    const room = inp.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    const w = width(inp.value, cs.font);
    if (w > room + 1)
      found.push(`input "${inp.getAttribute('aria-label') || ''}" = "${inp.value.slice(0, 90)}": ${Math.ceil(w)} px`
        + ` in ${Math.floor(room)} px`);
  });
  return found;
}
"""


def truncated(page) -> list[str]:
    """One line per label the page cuts (:data:`TRUNCATED_JS`)."""
    return page.evaluate(TRUNCATED_JS)


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
) -> list[tuple[str, Path, bool, list[str]]]:
    """(page, PNG, whether it shows an exception, what it cuts) for every page of the dashboard at ``url``."""
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
                broken = page.locator("[data-testid='stException']").count() > 0
                shots.append((name, path, broken, truncated(page)))
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
    for name, path, broken, cut in capture(args.url, args.out, args.width, args.case, args.chromium, args.height):
        print(f"{name:<12} {path}{'  (shows an exception)' if broken else ''}")
        for line in cut:
            print(f"             cut: {line}")
        if broken:
            failed.append(name)
    if failed:
        print(f"pages with an exception: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
