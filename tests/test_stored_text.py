"""Stored text is data wherever it is shown: a NUL byte planted in the database is refused by the
dashboard's pre-serve check and named on a page instead of a traceback; a U+202E (RIGHT-TO-LEFT OVERRIDE) or
right-to-left letters in a branch or device name never reorder the rest of the line.

Before (d3bce35): NUL bytes in a run's branch, commit subject or an accuracy error passed `kernelwatch dashboard`'s
check (it went on to serve) and made Triage and the case page show a Python traceback (ArtifactError from the
schema); the dashboard showed a U+202E raw in Markdown, Plotly labels, selectbox labels and table cells, and
neither the dashboard nor the gate's reports isolated right-to-left names.
"""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from kernelwatch.cli import main
from kernelwatch.dashboard.safe import md, plot
from kernelwatch.gate.reports import html_report, markdown, md_code, md_text
from kernelwatch.store.artifact import dumps, parse_artifact
from kernelwatch.store.engine import StoredValueError, open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.schema import isolate, to_data
from kernelwatch.store.stored import check_database
from kernelwatch.store.synthetic import Step, SyntheticHistory
from tests.test_readonly import _env

ROOT = Path(__file__).resolve().parents[1]
HISTORY = SyntheticHistory(runs=6, cases=3, samples=10, steps=[Step(5, 1.3, "")])
DOCS = [to_data(d) for d in HISTORY.documents()]
NEWEST = DOCS[-1]["run"]["id"]
RLO, FSI, PDI = "\u202e", "\u2068", "\u2069"
HEBREW = "\u05e2\u05d1\u05e8\u05d9\u05ea"  # עברית
BRANCH = f"{HEBREW} 7"  # a right-to-left branch name ending in digits: unisolated, "7" would move before it
NUL_PLANTS = {  # (SQL, what the one line names)
    "branch": ("UPDATE run SET branch = branch || char(0) || 'x'", "field branch: 'synthetic/main\\x00x'"),
    "subject": ("UPDATE run SET commit_subject = 'fix' || char(0)", "field commit_subject: 'fix\\x00'"),
    "device": ("UPDATE hardware SET device_name = device_name || char(0)", "field device_name: "),
    "error": ("UPDATE accuracy_result SET error = 'boom' || char(0)", "field error: 'boom\\x00'"),
    "params": ('UPDATE kernel_case SET params = \'{"n": "a\\u0000"}\'', "field params: "),
}


def _store(url: str) -> None:
    engine = open_database(url)
    ingest_documents(engine, [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(DOCS)])
    engine.dispose()


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("whole") / "kw.db"
    _store(f"sqlite:///{path}")
    return path


def _planted(whole: Path, folder: Path, sql: str) -> Path:
    path = folder / "kw.db"
    shutil.copy(whole, path)
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()
    return path


# ---------------------------------------------------------------------------------------------------------
# NUL
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("plant", NUL_PLANTS)
def test_the_pre_serve_check_finds_a_nul_in_stored_text(plant: str, whole: Path, tmp_path: Path) -> None:
    sql, names = NUL_PLANTS[plant]
    path = _planted(whole, tmp_path, sql)
    engine = open_database(str(path), readonly=True)
    with pytest.raises(StoredValueError) as caught:
        check_database(engine)
    engine.dispose()
    assert names in str(caught.value) and "without NUL characters" in str(caught.value), str(caught.value)


def test_the_dashboard_command_refuses_a_nul_before_serving(whole: Path, tmp_path: Path) -> None:
    path = _planted(whole, tmp_path, NUL_PLANTS["branch"][0])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run(  # past the check it would exec the server: the timeout is the old code's failure
        [sys.executable, "-m", "kernelwatch", "dashboard", "--port", str(port), "--db", str(path)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout, proc.stderr.count("\n")) == (2, "", 1), proc.stderr
    assert proc.stderr.startswith("kernelwatch dashboard: error: the database holds a damaged value: run ")
    assert NUL_PLANTS["branch"][1] in proc.stderr


def test_every_reader_names_a_nul_in_one_line(whole: Path, tmp_path: Path, cli) -> None:
    path = _planted(whole, tmp_path, NUL_PLANTS["subject"][0])
    for args in (["show", NEWEST[:8]], ["export", NEWEST[:8], "-o", "-"], ["runs"]):
        result = cli.invoke(main, [*args, "--db", str(path)])
        assert (result.exit_code, result.stdout, result.stderr.count("\n")) == (2, "", 1), (args, result.output)
        assert "field commit_subject: 'fix\\x00' is not text without NUL characters" in result.stderr


# ---------------------------------------------------------------------------------------------------------
# Bidirectional text: the one function, and where it is used
# ---------------------------------------------------------------------------------------------------------
def test_isolate_escapes_overrides_and_isolates_right_to_left_text() -> None:
    assert isolate("synthetic/main") == "synthetic/main"  # ASCII: as it is
    assert isolate(f"feature/{RLO}niam") == "feature/\\u202eniam"
    assert isolate(f"{HEBREW} 12") == f"{FSI}{HEBREW} 12{PDI}"
    assert isolate(f"{PDI}{RLO}x") == "\\u2069\\u202ex"  # a PDI of its own cannot close the isolate around it
    assert isolate(f"run on {isolate(HEBREW + ' 1')}") == f"{FSI}run on {FSI}{HEBREW} 1{PDI}{PDI}"  # twice: kept


@pytest.mark.parametrize("show", [md, plot, md_text, md_code], ids=["md", "plot", "md_text", "md_code"])
def test_every_escaper_isolates(show) -> None:
    for value in (f"feature/{RLO}niam", f"{HEBREW} 1"):
        shown = show(value)
        assert RLO not in shown, (show, shown)
    assert show(f"{HEBREW} 1").count(FSI) == 1 and show(f"{HEBREW} 1").count(PDI) == 1


@pytest.fixture
def bidi_db(db_url: str) -> str:
    """The history with a U+202E in the runs' subject and right-to-left letters in their branch name (the hardware
    keeps its name: it is hashed into the fingerprint)."""
    _store(db_url)
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE run SET commit_subject = :s"), {"s": f"fix {RLO}desrever"})
        conn.execute(text("UPDATE run SET branch = :b"), {"b": BRANCH})
    engine.dispose()
    return db_url


def test_the_gates_reports_isolate_stored_names(bidi_db: str, tmp_path: Path) -> None:
    """Markdown and HTML: the branch's right-to-left letters sit in an isolate, no U+202E is left raw."""
    from kernelwatch.gate.judge import decide
    from kernelwatch.kernels import discover
    from kernelwatch.kernels.spec import tolerances
    from kernelwatch.store.export import export_run

    engine = open_database(bidi_db, readonly=True)
    result = decide(engine, export_run(engine, NEWEST), BRANCH, 0.05, 0.05, {}, "gpu", tolerances(discover()))
    engine.dispose()
    for report in (markdown(result), html_report(result)):
        assert RLO not in report and f"{FSI}{BRANCH}{PDI}" in report, report[:2000]
        assert _isolated(report), report[:2000]


def _isolated(shown: str) -> bool:
    """Whether every right-to-left name in ``shown`` sits inside an isolate that closes on its line."""
    for line in shown.splitlines():
        start = 0
        while (at := line.find(HEBREW, start)) >= 0:
            before, after = line[:at], line[at:]
            if before.count(FSI) <= before.count(PDI) or PDI not in after:
                return False
            start = at + 1
    return True


# ---------------------------------------------------------------------------------------------------------
# The pages, in a real headless Chromium
# ---------------------------------------------------------------------------------------------------------
CHROMIUM = os.environ.get("KERNELWATCH_CHROMIUM") or "/usr/bin/chromium"


def _serve(url: str):
    """`streamlit run` of the dashboard on ``url`` (no pre-serve check: as a database damaged after it started)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = str(ROOT / "kernelwatch" / "dashboard" / "app.py")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", app, "--server.port", str(port), "--server.address", "127.0.0.1"]
        + ["--server.headless", "true", "--browser.gatherUsageStats", "false"],
        env={**_env(), "KERNELWATCH_DB": url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{base}/_stcore/health", timeout=2).read() == b"ok":
                return proc, base
        except OSError:
            time.sleep(0.5)
    proc.kill()
    pytest.fail("streamlit did not become healthy")


def _pages(url: str, paths: list[str]) -> list[dict]:
    """For each page: its alerts' text, whether it shows an exception, its whole text and its selectboxes."""
    from playwright.sync_api import sync_playwright

    from kernelwatch.dashboard.screenshots import CHROMIUM_ARGS, settle

    proc, base = _serve(url)
    out = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            for path in paths:
                page = browser.new_page(viewport={"width": 1400, "height": 1400})
                page.goto(f"{base}/{path}", wait_until="domcontentloaded")
                page.wait_for_selector("h1", timeout=60_000)
                settle(page)
                out.append(
                    {
                        "exception": page.locator("[data-testid='stException']").count(),
                        "alerts": page.locator("[data-testid='stAlert']").all_inner_texts(),
                        "body": page.evaluate("() => document.body.innerText"),
                        "selects": page.locator("[data-testid='stSelectbox'] input").evaluate_all(
                            "els => els.map(e => e.value)"
                        ),
                    }
                )
                page.close()
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    return out


@pytest.mark.browser
def test_a_nul_shows_a_message_on_the_page_not_a_traceback(whole: Path, tmp_path: Path) -> None:
    path = _planted(whole, tmp_path, NUL_PLANTS["branch"][0])
    from kernelwatch.store.queries import list_hardware

    engine = open_database(str(whole), readonly=True)
    fingerprint = list_hardware(engine)[0]["fingerprint"]
    engine.dispose()
    case = DOCS[-1]["perf"][0]["case"]
    for shown in _pages(f"sqlite:///{path}", ["", f"case?hardware={fingerprint}&case={case}"]):
        assert shown["exception"] == 0, shown["body"][:2000]
        message = next((a for a in shown["alerts"] if "This page cannot be shown" in a), None)
        assert message is not None and "field branch" in message and "without NUL characters" in message, shown


@pytest.mark.browser
def test_an_override_in_a_name_never_reverses_the_page(bidi_db: str) -> None:
    """Triage: the subject's U+202E is shown escaped, the branch's Hebrew sits in an isolate in the caption;
    nothing raw reaches the page."""
    (triage,) = _pages(bidi_db, [""])
    assert triage["exception"] == 0, triage["body"][:2000]
    assert RLO not in triage["body"] and all(RLO not in s for s in triage["selects"])
    assert f"{FSI}{BRANCH}{PDI}" in triage["body"] and _isolated(triage["body"]), triage["body"][:2000]
