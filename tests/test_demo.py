"""`make demo` a second and a tenth time in the same checkout: its ingest and synth steps into one database.

Before: the second `make demo` stopped at `kernelwatch synth: error: synthetic demo run 0: run.id: run e30294d8-...
already exists with different content` (exit 2) and served nothing. The demo's copies were dated after the newest
real run of any hardware, and the first `make demo` had added one: its CPU accuracy run, collected after the synth
step. A changed ci/history (a newer real run of the source's hardware) moved the copies too.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwatch.store.artifact import load_artifact
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import IngestError, ingest_documents
from kernelwatch.store.schema import hardware_fingerprint, parse_time, to_data

ROOT = Path(__file__).resolve().parents[1]
HISTORY = sorted((ROOT / "ci" / "history").glob("*.json.gz"))
MAKEFILE = (ROOT / "Makefile").read_text()
DEMO_SOURCE = ROOT / next(
    line.split("?=")[1].strip() for line in MAKEFILE.splitlines() if line.startswith("DEMO_SOURCE")
)

pytestmark = pytest.mark.slow


def _kw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelwatch", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def _runs(db: Path) -> dict[str, tuple[str, str, str]]:
    with sqlite3.connect(db) as conn:
        return {
            i: (h, s, f) for i, h, s, f in conn.execute("SELECT id, content_hash, started_at, finished_at FROM run")
        }


def test_the_demo_steps_run_twice_and_over_a_changed_history(tmp_path: Path) -> None:
    db = tmp_path / "kernelwatch.db"
    url = f"sqlite:///{db}"
    own = hardware_fingerprint(load_artifact(DEMO_SOURCE).hardware)
    docs = {p: load_artifact(p) for p in HISTORY}
    newest = max(
        (p for p, d in docs.items() if hardware_fingerprint(d.hardware) == own), key=lambda p: docs[p].run.started_at
    )
    older = [p for p in HISTORY if p != newest]

    def synth() -> str:
        out = _kw("synth", "--db", url, "--demo-from", str(DEMO_SOURCE))
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()[0]

    assert _kw("ingest", "--db", url, *map(str, older)).returncode == 0
    assert synth().startswith("2 ingested:")
    # what `make demo` does next: a real CPU accuracy run, collected here (a few cases) through Triton's interpreter
    cpu = _kw(
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
    assert cpu.returncode == 0, cpu.stderr
    before = _runs(db)
    assert synth().startswith("2 unchanged:")  # the second `make demo`: exit 2 before
    assert _runs(db) == before

    # a changed history: ci/history gained a newer run of the source's hardware
    again = _kw("ingest", "--db", url, *map(str, HISTORY))
    assert again.returncode == 0, again.stderr
    assert sum(line.startswith("unchanged") for line in again.stdout.splitlines()) == len(older)
    assert synth().startswith("2 replaced:")
    after = _runs(db)
    demo = {i: v for i, v in after.items() if i in before and i not in {d.run.id for d in docs.values()}}
    demo = {i: v for i, v in demo.items() if before[i] != v}
    assert len(demo) == 2  # the two demo runs, rebuilt; nothing else changed
    assert {i: v for i, v in after.items() if i not in demo and i in before} == {
        i: v for i, v in before.items() if i not in demo
    }
    latest = parse_time(docs[newest].run.started_at).replace(tzinfo=None)  # SQLite keeps UTC without a zone
    assert all(
        dt.datetime.fromisoformat(started) > latest for _, started, _ in demo.values()
    )  # still after every real run
    assert synth().startswith("2 unchanged:")  # and the tenth time
    assert _runs(db) == after


def test_a_demo_built_twice_soon_after_a_real_run_is_the_same_demo() -> None:
    """Five and twenty-five minutes after a real run: the copies were spread between it and the clock, so the
    second `make demo` within half an hour of a GPU run rebuilt both demo runs ("2 replaced")."""
    from kernelwatch.store.synthetic import demo_branch

    real = dt.datetime(2026, 12, 4, 12, 27, tzinfo=dt.timezone.utc)
    builds = [
        [to_data(d) for d in demo_branch(load_artifact(DEMO_SOURCE), after=real, now=real + dt.timedelta(minutes=m))]
        for m in (5, 25, 60 * 24)
    ]
    assert builds[0] == builds[1] == builds[2]
    stamps = [parse_time(d["run"][k]) for d in builds[0] for k in ("started_at", "finished_at")]
    assert real < min(stamps) and max(stamps) <= real + dt.timedelta(minutes=5)
    squeezed = demo_branch(load_artifact(DEMO_SOURCE), after=real, now=real + dt.timedelta(seconds=1))
    assert all(real < parse_time(d.run.started_at) <= real + dt.timedelta(seconds=1) for d in squeezed)


def test_a_real_run_is_never_replaced(tmp_path: Path) -> None:
    """Replacing is for SYNTHETIC runs rebuilt by synth; a real run with other content stays refused."""
    engine = open_database(f"sqlite:///{tmp_path / 'kw.db'}")
    doc = load_artifact(HISTORY[0])
    ingest_documents(engine, [("first", doc)])
    data = to_data(doc)
    data["run"]["notes"] = (data["run"]["notes"] or "") + " edited"
    edited = type(doc).model_validate(data)
    with pytest.raises(IngestError, match="already exists with different content"):
        ingest_documents(engine, [("edited", edited)], replace_synthetic=True)


def test_the_screenshot_tool_in_the_demo_environment_names_what_to_install(tmp_path: Path) -> None:
    """`make install-demo`'s .venv has no Playwright: the tool the README offers ended in a traceback there.
    Here only the standard library and this checkout are importable, as there."""
    script = (
        "import sys; sys.path[:0] = [sys.argv[1]]; sys.argv = ['screenshots', *sys.argv[2:]]; "
        "import runpy; runpy.run_module('kernelwatch.dashboard.screenshots', run_name='__main__')"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-I", "-c", script, str(ROOT), "--out", str(tmp_path / "shots")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert (
        f"'playwright' is missing from {sys.executable}: install it with `{sys.executable} -m pip install playwright`"
        in proc.stderr
    )
    assert not (tmp_path / "shots").exists()


def test_the_screenshot_tool_without_a_dashboard_says_so_in_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    proc = _kw_module("kernelwatch.dashboard.screenshots", "--url", f"http://127.0.0.1:{port}", "--out", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"no dashboard answers at http://127.0.0.1:{port}" in proc.stderr


def _kw_module(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_a_synthetic_run_with_other_content_is_replaced_whole(db_url: str) -> None:
    """SQLite and PostgreSQL: the rebuilt run's results replace the old ones (none left behind, none doubled)."""
    from sqlalchemy import func, select

    from kernelwatch.store.models import AccuracyResult, PerfResult, Run
    from kernelwatch.store.synthetic import demo_branch

    engine = open_database(db_url)
    first = demo_branch(load_artifact(DEMO_SOURCE))
    ingest_documents(engine, [("first", d) for d in first])
    later = demo_branch(load_artifact(DEMO_SOURCE), after=dt.datetime(2026, 12, 3, tzinfo=dt.timezone.utc))
    assert [d.run.id for d in later] == [d.run.id for d in first]
    with pytest.raises(IngestError):
        ingest_documents(engine, [("later", d) for d in later])
    out = ingest_documents(engine, [("later", d) for d in later], replace_synthetic=True)
    assert [o.status for o in out] == ["replaced", "replaced"]
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Run)).scalar() == 2
        for model, section in ((PerfResult, "perf"), (AccuracyResult, "accuracy")):
            stored = conn.execute(select(func.count()).select_from(model)).scalar()
            assert stored == sum(len(getattr(d, section)) for d in later)
        started = sorted(conn.execute(select(Run.started_at)).scalars())
    assert started[0].year == 2026 and started[0].month == 12 and started[0].day >= 3
    engine.dispose()
