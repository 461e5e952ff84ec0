"""A damaged SQLite file is refused by every command before anything is read or written.

Before (d3bce35): random bytes over three pages that no query of theirs visits (indexes of the ack, confirmation
and profiler tables) left `gate` PASSing on the damaged file (exit 0), `ingest` storing a run into it (exit 0),
and `runs`, `show`, `export`, `bisect`, `confirm`, `db current`, `db upgrade` exiting 0. SQLite's `quick_check`,
run once per process per file where a database is opened (kernelwatch/store/engine.py: check_integrity), now
answers every command in one line naming the file, exit 2.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwatch.cli import main
from kernelwatch.store.artifact import dumps, parse_artifact
from kernelwatch.store.engine import DatabaseError, open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.schema import to_data
from kernelwatch.store.synthetic import SyntheticHistory
from tests.test_readonly import _env

HISTORY = SyntheticHistory(runs=8, cases=2, samples=10)
DOCS = [to_data(d) for d in HISTORY.documents()]
STORED, NEW = DOCS[:-1], DOCS[-1]  # NEW: a run the damaged database does not hold yet, for ingest
NEWEST = STORED[-1]["run"]["id"]
CASE = next(p["case"] for p in STORED[-1]["perf"] if p["implementation"] == "triton")
SHA = STORED[-1]["run"]["commit"]["sha"]
# Indexes no read of the gate, runs, show, export or bisect walks, nor an ingest of a run without confirmations,
# acknowledgements or profiler counters: damage there is invisible to everything but an integrity check.
SMALL = "mse_loss/atomic/fp32/direction=bwd,reduction=mean,shape=1000"  # one small accuracy case
UNVISITED = ("sqlite_autoindex_ack_1", "sqlite_autoindex_confirmation_1", "ix_prof_case_hw")


def commands(tmp: Path) -> dict[str, list[str]]:
    artifact = tmp / "new.json"
    artifact.write_text(dumps(NEW))
    return {
        "runs": ["runs"],
        "show": ["show", NEWEST[:8]],
        "gate": ["gate", "--candidate", NEWEST[:8], "--baseline", "synthetic/main", "--report-dir", str(tmp / "r")],
        "export": ["export", NEWEST[:8], "-o", "-"],
        "bisect": ["bisect", CASE, "--hardware", "H200"],
        "confirm": ["confirm", "--candidate", NEWEST[:8], "--baseline", "synthetic/main", "--device", "cpu"],
        "ack": ["ack", CASE, "--hardware", "H200", "--commit", SHA, "--reason", "probe"],
        "db current": ["db", "current"],
        "db upgrade": ["db", "upgrade"],
        "ingest": ["ingest", str(artifact)],
        "synth": ["synth", "--runs", "2", "--cases", "1"],
        "collect": ["collect", "-k", "mse_loss", "--suite", "accuracy", "--device", "cpu", "--case", SMALL],
    }


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("whole") / "kw.db"
    engine = open_database(f"sqlite:///{path}")
    ingest_documents(engine, [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(STORED)])
    engine.dispose()
    return path


def damage(source: Path, target: Path) -> str:
    """A copy of ``source`` with random bytes over the pages of three unvisited indexes; its sha256."""
    shutil.copy(source, target)
    conn = sqlite3.connect(target)
    pages = [p for (p,) in conn.execute(f"SELECT pageno FROM dbstat WHERE name IN {UNVISITED!r}")]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    assert len(pages) == 3, pages
    rng = random.Random(38)
    with open(target, "r+b") as fh:
        for page in pages:
            fh.seek((page - 1) * size)
            fh.write(rng.randbytes(size))
    return hashlib.sha256(target.read_bytes()).hexdigest()


def test_every_command_refuses_a_damaged_file_in_one_line_and_writes_nothing(whole: Path, tmp_path: Path, cli) -> None:
    path = tmp_path / "kw.db"
    digest = damage(whole, path)
    for command, args in commands(tmp_path).items():
        result = cli.invoke(main, [*args, "--db", str(path)])
        lines = result.stderr.splitlines()
        assert (result.exit_code, result.stdout, len(lines)) == (2, "", 1), (command, result.output, result.exception)
        assert lines[0].startswith(f"kernelwatch {command}: error: "), (command, lines[0])
        assert f"the database sqlite:///{path} is damaged: SQLite's quick_check finds" in lines[0], (command, lines)
        wal = path.with_name(path.name + "-wal")  # a writer's rows wait there until the last connection closes
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, command
        assert not wal.exists() or wal.stat().st_size == 0, (command, "wrote to the write-ahead log")
    assert not (tmp_path / "r").exists()  # the gate wrote no report either


def test_the_same_commands_work_on_the_whole_file(whole: Path, tmp_path: Path, cli) -> None:
    """The check is no false alarm: the undamaged copy passes it in every reader (the damage test's control)."""
    path = tmp_path / "kw.db"
    shutil.copy(whole, path)
    for command in ("runs", "show", "gate", "export", "bisect", "db current"):
        result = cli.invoke(main, [*commands(tmp_path)[command], "--db", str(path)])
        assert result.exit_code == 0, (command, result.output)


def test_the_dashboard_refuses_it_through_the_same_check(whole: Path, tmp_path: Path) -> None:
    path = tmp_path / "kw.db"
    damage(whole, path)
    proc = subprocess.run(
        [sys.executable, "-m", "kernelwatch", "dashboard", "--port", "1", "--db", str(path)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert (
        proc.stderr.startswith("kernelwatch dashboard: error: the database sqlite:///") and proc.stderr.count("\n") == 1
    ), proc.stderr
    assert "is damaged: SQLite's quick_check finds" in proc.stderr


def test_a_file_is_checked_once_per_process(whole: Path, tmp_path: Path) -> None:
    """Found whole once, a file is not walked again by the same process; damaged after that (its size or time
    changed), it is walked again and refused."""
    path = tmp_path / "kw.db"
    shutil.copy(whole, path)
    open_database(str(path), readonly=True).dispose()
    from kernelwatch.store import engine as store_engine

    stat = path.stat()
    assert (str(path), stat.st_ino, stat.st_size, stat.st_mtime_ns) in store_engine._checked  # not walked again
    damage(whole, path)
    with pytest.raises(DatabaseError, match="is damaged: SQLite's quick_check"):
        open_database(str(path), readonly=True)
