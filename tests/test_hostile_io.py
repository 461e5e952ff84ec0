"""Hostile files around a command: nothing hangs on a FIFO, nothing is written through a link.

Each test names the defect it reproduces, as found on 7b562ad: ``gate --artifact``, ``confirm --artifact``,
``collect --resume`` and ``synth --demo-from`` opened a FIFO and waited forever for a writer; the artifact's
temporary file ``.NAME.PID.tmp`` was opened by name, so a link planted there was written through;
``export -o`` / ``collect --out`` / ``confirm --report-file`` wrote through a symlink at the output path;
``export -o dir/`` wrote a file named ``dir``; ``synth --step 29:1e-300`` ended in a pydantic traceback
and left an empty database behind. The full-disk part of the issue is in tests/test_full_disk.py.
Where a database is involved, SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect
from sqlalchemy.pool import NullPool

from kernelwatch.cli import main
from kernelwatch.store.artifact import load_artifact
from kernelwatch.store.engine import open_database
from kernelwatch.store.files import NotReplaced, write_atomic
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.journal import Journal, load_run
from kernelwatch.store.schema import ArtifactError, dumps, parse_artifact, to_data
from kernelwatch.store.synthetic import SyntheticHistory
from tests.test_confirm import scratch  # noqa: F401 - the module-scoped repository fixture

ROOT = Path(__file__).resolve().parents[1]
FIFO_LINE = "not a regular file but a FIFO (not opened: reading it could block forever)"


def _kw(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernelwatch", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=timeout,
        **kwargs,
    )


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def _store(db_url: str) -> list[dict]:
    docs = [to_data(d) for d in SyntheticHistory(runs=3, cases=2, samples=10).documents()]
    engine = open_database(db_url)
    ingest_documents(engine, [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(docs)])
    engine.dispose()
    return docs


def _tables(db_url: str) -> list[str]:
    """The tables of a database that exists (a PostgreSQL one the fixture made, or a SQLite file)."""
    engine = create_engine(db_url, poolclass=NullPool)
    try:
        return inspect(engine).get_table_names()
    finally:
        engine.dispose()


def _nothing_created(db_url: str) -> None:
    if db_url.startswith("sqlite"):
        assert not Path(db_url.removeprefix("sqlite:///")).exists(), "the database file was created"
    else:
        assert _tables(db_url) == [], "the PostgreSQL database was migrated"


@pytest.fixture
def alarm() -> Iterator[None]:
    """An in-process read that blocks fails the test after 20 s instead of hanging the suite."""

    def hung(signum, frame) -> None:
        raise TimeoutError("blocked on a file that is not a regular one")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------------------------------------------------
# Reading: one loader, only regular files (or a pipe handed to the process), never a blocking open
# ---------------------------------------------------------------------------------------------------------
COMMANDS = {
    "gate": lambda f, db, ids: ["gate", "--artifact", f, "--baseline", ids[0], "--db", db],
    "confirm": lambda f, db, ids: ["confirm", "--artifact", f, "--baseline", ids[0], "--db", db],
    "collect": lambda f, db, ids: ["collect", "--resume", f, "--db", db],
    "synth": lambda f, db, ids: ["synth", "--demo-from", f, "--db", db],
    "ingest": lambda f, db, ids: ["ingest", f, "--db", db],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_fifo_never_hangs_a_command(command: str, db_url: str, tmp_path: Path) -> None:
    """Before: gate, confirm, collect --resume and synth --demo-from opened the FIFO and waited for a writer
    forever (the subprocess timeout fired); ingest alone refused it. Now all five refuse it in one line, and
    synth and ingest create no database for it."""
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    ids = [d["run"]["id"] for d in _store(db_url)] if command in ("gate", "confirm") else ["x"]
    proc = _kw(*COMMANDS[command](str(fifo), db_url, ids), timeout=60)
    line = _one_line(proc.stderr)
    assert f"{fifo}: {FIFO_LINE}" in line, line
    if command in ("gate", "confirm"):
        assert proc.returncode == 2 and "cannot decide" in line, line
    else:  # the common error line of kernelwatch/options.py (its exit status is settled there)
        assert proc.returncode in (1, 2), proc.returncode
    if command in ("synth", "ingest"):
        _nothing_created(db_url)
    assert fifo.is_fifo()


def _socket(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return sock


@pytest.mark.parametrize("kind", ["fifo", "device", "folder", "socket"])
def test_every_reader_refuses_anything_but_a_regular_file(kind: str, tmp_path: Path, alarm: None) -> None:
    """The artifact reader, the journal reader and ingest's sniffing reader share one loader. Before, the first
    two opened whatever they were given: a FIFO blocked, /dev/zero was read up to the size limit."""
    paths = {"fifo": tmp_path / "f", "device": Path("/dev/zero"), "folder": tmp_path / "d", "socket": tmp_path / "s"}
    path = paths[kind]
    sock = None
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "socket":
        sock = _socket(path)
    try:
        for read in (load_artifact, lambda p: Journal(p), load_run):
            with pytest.raises(ArtifactError) as caught:
                read(path)
            message = str(caught.value)
            assert "\n" not in message and message.startswith(f"{path}: ")
            if kind == "folder":
                assert "is a folder, not" in message
            else:
                assert f"not a regular file but a {'FIFO' if kind == 'fifo' else kind}" in message
    finally:
        if sock is not None:
            sock.close()


def test_a_pipe_handed_as_dev_stdin_is_still_read(db_url: str, tmp_path: Path) -> None:
    """The loader refuses FIFOs named by path, not the pipe a command is handed: gate --artifact /dev/stdin."""
    docs = _store(db_url)
    proc = _kw(
        "gate",
        "--artifact",
        "/dev/stdin",
        "--baseline",
        docs[-2]["run"]["id"],
        "--db",
        db_url,
        input=dumps(docs[-1]),
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and "not a regular file" not in proc.stderr, proc.stderr
    assert "PASS" in proc.stdout, proc.stdout[-2000:]


# ---------------------------------------------------------------------------------------------------------
# Writing: exclusive temporary files renamed over the target; a link at the target is replaced, and said
# ---------------------------------------------------------------------------------------------------------
def _victim(tmp_path: Path, name: str = "victim") -> Path:
    victim = tmp_path / name
    victim.write_text("precious\n")
    return victim


def test_export_over_a_symlink_replaces_the_link_and_says_so(db_url: str, tmp_path: Path, cli) -> None:
    """Before: export -o link.json wrote the run into the link's target."""
    run = _store(db_url)[-1]["run"]["id"]
    victim = _victim(tmp_path)
    link = tmp_path / "run.json"
    link.symlink_to(victim)
    result = cli.invoke(main, ["export", run, "-o", str(link), "--db", db_url])
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "precious\n"
    assert not link.is_symlink() and load_artifact(link).run.id == run
    assert _one_line(result.stderr) == (
        f"kernelwatch export: {link} was a symbolic link (to {victim}): replaced by "
        f"a regular file, {victim} not written"
    )


def test_a_link_planted_at_the_old_temporary_name_is_never_followed(db_url: str, tmp_path: Path, cli) -> None:
    """Before: write_artifact wrote ``.run.json.<pid>.tmp`` by name, so a link planted there for this process's
    pid had the whole run written into its target (then renamed: the victim got the run, run.json the link)."""
    run = _store(db_url)[-1]["run"]["id"]
    victim = _victim(tmp_path)
    planted = tmp_path / f".run.json.{os.getpid()}.tmp"
    planted.symlink_to(victim)
    out = tmp_path / "run.json"
    result = cli.invoke(main, ["export", run, "-o", str(out), "--db", db_url])
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "precious\n" and planted.is_symlink()
    assert not out.is_symlink() and load_artifact(out).run.id == run
    left = {p.name for p in tmp_path.iterdir() if not p.name.startswith("kw.db")}
    assert left == {planted.name, "run.json", "victim"}, "no temporary file left behind"


@pytest.mark.parametrize("given", ["missing/", "existing/"])
def test_export_to_a_folder_path_is_one_line_and_writes_nothing(
    given: str, db_url: str, tmp_path: Path, monkeypatch
) -> None:
    """Before: export -o dir/ wrote a file named dir. A path ending in / names a folder: refused (exit 2), for a
    folder that does not exist as for one that does; nothing is written."""
    run = _store(db_url)[-1]["run"]["id"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "existing").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = _kw("export", run, "-o", given, "--db", db_url, cwd=tmp_path)
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and line.startswith("kernelwatch export: error:") and given in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "existing").is_dir() and list((tmp_path / "existing").iterdir()) == []


def test_collect_out_and_its_journal_over_symlinks_are_replaced(tmp_path: Path, monkeypatch, cli) -> None:
    """Before: collect --out run.json wrote the run into a run.json link's target (a link committed in a PR).
    The journal beside it (run.json.journal) is created new too: a link there is replaced, never appended to."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLANTED_VARIANTS", "correct")
    victim, journal_victim = _victim(tmp_path), _victim(tmp_path, "journal-victim")
    out = tmp_path / "run.json"
    out.symlink_to(victim)
    (tmp_path / "run.json.journal").symlink_to(journal_victim)
    result = cli.invoke(
        main,
        [
            "collect",
            "--project",
            str(Path(__file__).resolve().parent / "projects" / "planted.toml"),
            "--kernels",
            "planted",
            "--device",
            "cpu",
            "--no-progress",
            "--suite",
            "accuracy",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "precious\n" and journal_victim.read_text() == "precious\n"
    assert not out.is_symlink() and len(load_artifact(out).accuracy) == 1
    assert not (tmp_path / "run.json.journal").exists(), "the journal is removed once the run is stored"
    notes = [line for line in result.stderr.splitlines() if "was a symbolic link" in line]
    assert notes == [
        f"kernelwatch collect: {out}.journal was a symbolic link (to {journal_victim}): replaced by "
        f"a regular file, {journal_victim} not written",
        f"kernelwatch collect: {out} was a symbolic link (to {victim}): replaced by a regular file, "
        f"{victim} not written",
    ], result.stderr


def test_confirm_report_file_over_a_symlink_is_replaced(scratch, tmp_path: Path, cli) -> None:  # noqa: F811
    """Before: confirm --report-file wrote the report through a symlink (pull-request.yml writes
    gate-report/confirm.md in the PR's own checkout, where the PR can commit a link). A case neither commit
    has is UNKNOWN (exit 2) after the workers start: the report is still written, over the link."""
    repo, (c1, c2, _) = scratch
    victim = _victim(tmp_path)
    report = tmp_path / "confirm.md"
    report.symlink_to(victim)
    result = cli.invoke(
        main,
        [
            "confirm",
            "--repo",
            str(repo),
            "--case",
            "nosuch/case",
            "--baseline-commit",
            c1,
            "--candidate-commit",
            c2,
            "--device",
            "cpu",
            "--max-rounds",
            "8",
            "--report-file",
            str(report),
        ],
    )
    assert result.exit_code == 2, result.output
    assert victim.read_text() == "precious\n"
    assert not report.is_symlink()
    assert "| `nosuch/case` | UNKNOWN (the baseline commit has no perf case" in report.read_text()
    assert (
        f"kernelwatch confirm: {report} was a symbolic link (to {victim}): replaced by a regular file, "
        f"{victim} not written"
    ) in result.stderr.splitlines()


def test_a_gate_report_link_replaced_is_said(db_url: str, tmp_path: Path) -> None:
    """The gate's reports already replaced a planted link (tests/test_hostile.py); now it also says so."""
    docs = _store(db_url)
    folder = tmp_path / "reports"
    folder.mkdir()
    victim = _victim(tmp_path)
    (folder / "gate.md").symlink_to(victim)
    proc = _kw(
        "gate",
        "--candidate",
        docs[-1]["run"]["id"],
        "--baseline",
        docs[-2]["run"]["id"],
        "--db",
        db_url,
        "--report-dir",
        str(folder),
    )
    assert proc.returncode in (0, 1), proc.stderr
    assert victim.read_text() == "precious\n" and not (folder / "gate.md").is_symlink()
    assert (
        f"warning: {folder / 'gate.md'} was a symbolic link (to {victim}): replaced by a regular file, "
        f"{victim} not written"
    ) in proc.stderr.splitlines()


def test_write_atomic_replaces_files_and_links_and_refuses_anything_else(tmp_path: Path) -> None:
    """The one writer: a file or a link (even to a folder) is replaced; a FIFO or a folder is refused and left
    as it was; no temporary file is left behind either way."""
    (tmp_path / "file").write_text("old")
    (tmp_path / "folder").mkdir()
    (tmp_path / "to-folder").symlink_to(tmp_path / "folder")
    os.mkfifo(tmp_path / "fifo")
    assert write_atomic(tmp_path / "file", b"new") is None and (tmp_path / "file").read_bytes() == b"new"
    assert write_atomic(tmp_path / "to-folder", b"new") == str(tmp_path / "folder")
    assert (tmp_path / "to-folder").read_bytes() == b"new" and list((tmp_path / "folder").iterdir()) == []
    for name in ("fifo", "folder"):
        with pytest.raises(NotReplaced, match="never replaced"):
            write_atomic(tmp_path / name, b"new")
    assert (tmp_path / "fifo").is_fifo() and (tmp_path / "folder").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "file", "folder", "to-folder"]


# ---------------------------------------------------------------------------------------------------------
# synth: every option checked before anything is created
# ---------------------------------------------------------------------------------------------------------
def test_synth_refuses_a_step_that_makes_runs_the_schema_refuses_before_creating_anything(db_url: str) -> None:
    """Before: --step 29:1e-300 made run 29's GB/s infinite: a pydantic ValidationError traceback after the
    database had been created and migrated (left empty). Now one line, exit 2, no database."""
    proc = _kw("synth", "--runs", "30", "--cases", "3", "--step", "29:1e-300", "--db", db_url)
    line = _one_line(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert line.startswith(
        "kernelwatch synth: error: Invalid value for --step: synthetic run 29 cannot be stored "
        "(steps in effect: 29:1e-300): perf"
    ), line
    assert "finite" in line
    _nothing_created(db_url)


def test_synth_with_a_sound_step_still_stores_every_run(db_url: str) -> None:
    proc = _kw("synth", "--runs", "4", "--cases", "2", "--step", "3:1.5", "--db", db_url)
    assert proc.returncode == 0 and "4 synthetic runs ingested (4 generated)" in proc.stdout, proc.stderr
    runs = json.loads(_kw("runs", "--db", db_url, "--format", "json").stdout)
    assert len(runs) == 4
