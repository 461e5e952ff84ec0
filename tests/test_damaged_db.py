"""A damaged or wrongly typed database is one line and exit status 2 in every command that reads it, naming the run
and the field, on a real SQLite file and a real PostgreSQL database.

Before: `UPDATE run SET started_at='yesterday'` gave a ValueError traceback in runs, show, gate, export, bisect and
confirm; `samples_ms='{not json'` a JSONDecodeError; `median_ms='fast'` a TypeError; a dropped table or column an
OperationalError with its SQL (and ingest exit 1); corrupted pages a traceback in confirm; the dashboard served
pages from all of them. PostgreSQL's "connection refused" took two lines.
"""

from __future__ import annotations

import shutil
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from kernelwatch.cli import main
from kernelwatch.store.artifact import dumps, parse_artifact
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.schema import to_data
from kernelwatch.store.synthetic import SyntheticHistory
from tests.test_readonly import _env

HISTORY = SyntheticHistory(runs=8, cases=2, samples=10)
DOCS = [to_data(d) for d in HISTORY.documents()]
NEWEST = DOCS[-1]["run"]["id"]
CASE = next(p["case"] for p in DOCS[-1]["perf"] if p["implementation"] == "triton")
SHA = DOCS[-1]["run"]["commit"]["sha"]


def commands(tmp: Path) -> dict[str, list[str]]:
    """Every command that opens the database, with arguments that make it read what it reads."""
    artifact = tmp / "stored.json"  # a run the database holds: "unchanged" where the database can be read
    if not artifact.exists():
        artifact.write_text(dumps(DOCS[0]))
    return {
        "runs": ["runs"],
        "show": ["show", NEWEST[:8]],
        "gate": ["gate", "--candidate", NEWEST[:8], "--baseline", "synthetic/main", "--report-dir", str(tmp / "r")],
        "export": ["export", NEWEST[:8], "-o", "-"],
        "bisect": ["bisect", CASE, "--hardware", "H200"],
        "confirm": ["confirm", "--candidate", NEWEST[:8], "--baseline", "synthetic/main", "--device", "cpu"],
        "ack": ["ack", CASE, "--hardware", "H200", "--commit", SHA, "--reason", "probe"],
        "db current": ["db", "current"],
        "ingest": ["ingest", str(artifact)],
    }


READERS = ("runs", "show", "gate", "export", "bisect", "confirm")  # read every value of the runs they show
ALL = (*READERS, "ack", "db current", "ingest")

# damage -> (SQL, the commands that must refuse, what the line names). Value damage is met by the commands that
# read the value; a missing table or column by every command, when it opens the database.
SQLITE_DAMAGE = {
    "started_at='yesterday'": (
        "UPDATE run SET started_at='yesterday'",
        READERS,
        ("field started_at: 'yesterday' is not a date and time", "run "),
    ),
    "samples_ms='{not json'": (
        "UPDATE perf_result SET samples_ms='{not json'",
        ("show", "gate", "export", "bisect", "confirm"),
        ("perf_result of run ", "field samples_ms: '{not json' is not a JSON list of numbers"),
    ),
    "median_ms='fast'": (
        "UPDATE perf_result SET median_ms='fast'",
        ("show", "gate", "export", "bisect", "confirm"),
        ("perf_result of run ", "field median_ms: 'fast' is not a number"),
    ),
    "dropped table": ("DROP TABLE profiler_metric", ALL, ("is damaged: its table profiler_metric is missing",)),
    "dropped column": (
        "ALTER TABLE perf_result DROP COLUMN p80_ms",
        ALL,
        ("is damaged: table perf_result has no column p80_ms",),
    ),
}
POSTGRES_DAMAGE = {
    "dropped table": ("DROP TABLE profiler_metric", ALL, ("is damaged: its table profiler_metric is missing",)),
    "dropped column": (
        "ALTER TABLE perf_result DROP COLUMN p80_ms",
        ALL,
        ("is damaged: table perf_result has no column p80_ms",),
    ),
    "median_ms text 'fast'": (
        "ALTER TABLE perf_result ALTER COLUMN median_ms TYPE text; UPDATE perf_result SET median_ms = 'fast'",
        ("show", "gate", "export", "bisect", "confirm"),
        ("perf_result of run ", "field median_ms: 'fast' is not a number"),
    ),
}


def _store(url: str) -> None:
    engine = open_database(url)
    ingest_documents(engine, [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(DOCS)])
    engine.dispose()


@pytest.fixture(scope="module")
def sqlite_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("source") / "kw.db"
    _store(f"sqlite:///{path}")
    return path


def _check(cli, url: str, tmp: Path, must_fail: tuple[str, ...], names: tuple[str, ...]) -> None:
    for command, args in commands(tmp).items():
        result = cli.invoke(main, [*args, "--db", url])
        assert result.exception is None or isinstance(result.exception, SystemExit), (command, result.exception)
        if command not in must_fail:
            assert result.exit_code in (0, 1), (command, result.output)  # what it reads is whole: it works
            continue
        lines = result.stderr.splitlines()
        assert (result.exit_code, result.stdout, len(lines)) == (2, "", 1), (command, result.output)
        assert lines[0].startswith(f"kernelwatch {command}: error: "), (command, lines[0])
        assert all(n in lines[0] for n in names) and "SELECT" not in lines[0], (command, lines[0])


@pytest.mark.parametrize("damage", SQLITE_DAMAGE)
def test_damaged_sqlite_values_and_tables_are_one_line(damage: str, sqlite_source: Path, tmp_path: Path, cli) -> None:
    sql, must_fail, names = SQLITE_DAMAGE[damage]
    path = tmp_path / "kw.db"
    shutil.copy(sqlite_source, path)
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()
    _check(cli, f"sqlite:///{path}", tmp_path, must_fail, names)


def test_a_value_names_its_own_run(sqlite_source: Path, tmp_path: Path, cli) -> None:
    """One damaged row among whole ones: the line names that run, whichever command reads it."""
    path = tmp_path / "kw.db"
    shutil.copy(sqlite_source, path)
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE perf_result SET samples_ms = '[1.0, \"x\"]' WHERE run_id = ? AND id = "
        "(SELECT min(id) FROM perf_result WHERE run_id = ?)",
        (NEWEST, NEWEST),
    )
    conn.commit()
    conn.close()
    for args in (["show", NEWEST[:8]], ["export", NEWEST[:8], "-o", "-"]):
        result = cli.invoke(main, [*args, "--db", str(path)])
        assert result.exit_code == 2 and result.stderr == (
            f"kernelwatch {args[0]}: error: the database holds a damaged value: perf_result of run {NEWEST}, field "
            f"samples_ms: [1.0, 'x'] is not a JSON list of numbers; nothing was changed\n"
        ), result.output
    other = DOCS[-2]["run"]["id"]
    assert cli.invoke(main, ["show", other, "--db", str(path)]).exit_code == 0  # the other runs still read


def test_corrupted_pages_are_one_line_in_every_command(sqlite_source: Path, tmp_path: Path, cli) -> None:
    path = tmp_path / "kw.db"
    shutil.copy(sqlite_source, path)
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        for offset in range(4096 * 2, size, 4096):
            fh.seek(offset + 100)
            fh.write(b"\xde\xad\xbe\xef" * 200)
    for command, args in commands(tmp_path).items():
        result = cli.invoke(main, [*args, "--db", str(path)])
        lines = result.stderr.splitlines()
        assert (result.exit_code, len(lines)) == (2, 1), (command, result.output, result.exception)
        assert lines[0].startswith(f"kernelwatch {command}: error: ") and "malformed" in lines[0], lines[0]


@pytest.mark.postgres
@pytest.mark.parametrize("damage", POSTGRES_DAMAGE)
def test_damaged_postgresql_tables_and_types_are_one_line(damage: str, pg_url: str, tmp_path: Path, cli) -> None:
    sql, must_fail, names = POSTGRES_DAMAGE[damage]
    _store(pg_url)
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        for statement in sql.split("; "):
            conn.execute(text(statement))
    engine.dispose()
    _check(cli, pg_url, tmp_path, must_fail, names)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_postgresql_connection_refused_is_one_line(tmp_path: Path, cli) -> None:
    """libpq's message has a second line ("Is the server running on that host...")."""
    url = f"postgresql+psycopg://kw:secret@127.0.0.1:{_free_port()}/kw"
    for command, args in commands(tmp_path).items():
        result = cli.invoke(main, [*args, "--db", url])
        lines = result.stderr.splitlines()
        assert (result.exit_code, len(lines)) == (2, 1), (command, result.output)
        assert lines[0].startswith(f"kernelwatch {command}: error: ") and "Connection refused" in lines[0], lines
        assert "secret" not in lines[0]


def _dashboard(url: str) -> subprocess.CompletedProcess:
    """The dashboard in its own process: past the check it would exec the server (and time out here)."""
    return subprocess.run(
        [sys.executable, "-m", "kernelwatch", "dashboard", "--port", str(_free_port()), "--db", url],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "damage",
    ["started_at='yesterday'", "samples_ms='{not json'", "median_ms='fast'", "dropped column", "corrupted pages"],
)
def test_the_dashboard_refuses_a_damaged_database_before_serving(
    damage: str, sqlite_source: Path, tmp_path: Path
) -> None:
    path = tmp_path / "kw.db"
    shutil.copy(sqlite_source, path)
    if damage == "corrupted pages":
        with open(path, "r+b") as fh:
            fh.seek(path.stat().st_size // 2)
            fh.write(b"\xa5" * 16384)
        names: tuple[str, ...] = ("damaged",)
    else:
        sql, _, names = SQLITE_DAMAGE[damage]
        conn = sqlite3.connect(path)
        conn.execute(sql)
        conn.commit()
        conn.close()
    proc = _dashboard(f"sqlite:///{path}")
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelwatch dashboard: error: "), proc.stderr
    assert all(n in lines[0] for n in names), lines[0]


def test_the_dashboards_check_finds_one_damaged_value_among_many(sqlite_source: Path, tmp_path: Path) -> None:
    """The check asks SQLite for suspects (typeof, json_valid) and decodes only those: each kind of damage in one
    row of one run is still found and named; the whole database is not (no false positive)."""
    from kernelwatch.store.engine import StoredValueError
    from kernelwatch.store.stored import check_database

    engine = open_database(str(sqlite_source), readonly=True)
    check_database(engine)  # whole
    engine.dispose()
    for sql, field in (
        ("UPDATE run SET finished_at = 'soon' WHERE id = :run", "finished_at"),
        ("UPDATE run SET versions = '[1]' WHERE id = :run", "versions"),
        ("UPDATE perf_result SET gbps = 'x' WHERE run_id = :run", "gbps"),
        ("UPDATE perf_result SET call_samples_ms = '{\"a\": 1}' WHERE run_id = :run", "call_samples_ms"),
        ("UPDATE accuracy_result SET passed = 'maybe' WHERE run_id = :run", "passed"),
    ):
        path = tmp_path / f"{field}.db"
        shutil.copy(sqlite_source, path)
        conn = sqlite3.connect(path)
        conn.execute(sql.replace(":run", "?"), (NEWEST,))
        conn.commit()
        conn.close()
        engine = open_database(str(path), readonly=True)
        with pytest.raises(StoredValueError) as caught:
            check_database(engine)
        engine.dispose()
        assert (caught.value.field, caught.value.row) == (field, f"run {NEWEST}"), str(caught.value)
