"""Commands that only read never write, create or migrate a database; they refuse (exit 2, one line) one
that is missing, foreign or unmigrated, and read one in a folder nobody may write.

Only `collect`, `ingest`, `synth`, `ack` and `db upgrade` write. "A folder nobody may write" is tested
for real: the tests run as root, which ignores permission bits, so the command runs under
``setpriv`` with the capabilities that bypass them (dac_override, dac_read_search, fowner) removed
from its bounding and inheritable sets; it is still uid 0 and can read the project, but the kernel
refuses it every write to a 0555 folder or a 0444 file. A probe checks that before the tests rely on it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelwatch.cli import main
from kernelwatch.store.engine import head_revision
from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "release-0.1.0.db.gz"
NO_BYPASS = "-dac_override,-dac_read_search,-fowner"
SETPRIV = ["setpriv", f"--bounding-set={NO_BYPASS}", f"--inh-caps={NO_BYPASS}", "--"]

READERS = {  # command -> its arguments (the database comes by --db); {tmp} is a writable folder
    "gate": ["gate", "--candidate", "0", "--baseline", "synthetic/main", "--report-dir", "{tmp}/report"],
    "runs": ["runs"],
    "show": ["show", "0"],
    "export": ["export", "0", "-o", "{tmp}/out.json"],
    "bisect": ["bisect", "mse_loss/persistent/fp16/n=4096,synthetic=0", "--hardware", "H200"],
    "dashboard": ["dashboard", "--port", "9"],
    "db current": ["db", "current"],
}


def _prefix(command: str) -> str:
    return f"kernelwatch {command}: error: " + ("cannot decide: " if command == "gate" else "")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"}


def read(cli, command: str, url: str, tmp: Path) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of a read-only command. The dashboard runs in its own process:
    should it ever get past the check, it would exec the server in place of pytest."""
    args = [a.replace("{tmp}", str(tmp)) for a in READERS[command]] + ["--db", url]
    if command == "dashboard":
        proc = subprocess.run(
            [sys.executable, "-m", "kernelwatch", *args], env=_env(), capture_output=True, timeout=60, text=True
        )
        return proc.returncode, proc.stdout, proc.stderr
    result = cli.invoke(main, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.stdout, result.stderr


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(folder.iterdir())}


# ---------------------------------------------------------------------------------------------
# Missing, foreign, unmigrated: refused in one line, nothing created or changed
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", READERS)
def test_a_missing_database_is_refused_and_not_created(command: str, tmp_path: Path, cli) -> None:
    path = tmp_path / "absent" / "kw.db"
    code, out, err = read(cli, command, f"sqlite:///{path}", tmp_path)
    assert (code, out) == (2, "")
    assert err == f"{_prefix(command)}no database at {path}: run `kernelwatch collect` or `kernelwatch ingest` first\n"
    assert not path.parent.exists()


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """An unrelated SQLite database (rollback journal, one table, one row) in a folder of its own."""
    folder = tmp_path / "foreign"
    folder.mkdir()
    path = folder / "notes.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes (body) VALUES ('not yours')")
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize("command", READERS)
def test_a_foreign_sqlite_file_is_refused_untouched(command: str, foreign: Path, tmp_path: Path, cli) -> None:
    before, files = sha(foreign), listing(foreign.parent)
    code, out, err = read(cli, command, f"sqlite:///{foreign}", tmp_path)
    assert (code, out) == (2, "")
    assert err == (
        f"{_prefix(command)}sqlite:///{foreign} is not a KernelWatch database (it holds other tables: notes)\n"
    )
    assert sha(foreign) == before
    assert listing(foreign.parent) == files  # no -wal, -shm or -journal beside it
    conn = sqlite3.connect(f"file:{foreign}?mode=ro", uri=True)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # not switched to WAL
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]  # no tables added
    conn.close()


WRITERS = {  # a writing command -> its arguments (before --db)
    "ingest": lambda: ["ingest", str(sorted((ROOT / "ci" / "history").glob("*.json.gz"))[-1])],
    "db upgrade": lambda: ["db", "upgrade"],
    "synth": lambda: ["synth", "--runs", "2"],
    "collect": lambda: ["collect", "--kernels", "mse_loss", "--device", "cpu", "--no-progress"],
}


@pytest.mark.parametrize("command", WRITERS)
def test_writers_refuse_a_foreign_sqlite_file_untouched(command: str, foreign: Path, cli) -> None:
    """A mistyped --db that names someone else's SQLite file: nothing written into it (no tables, not
    switched to WAL); collect says so before measuring anything."""
    before, files = sha(foreign), listing(foreign.parent)
    result = cli.invoke(main, [*WRITERS[command](), "--db", f"sqlite:///{foreign}"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().endswith(
        f"sqlite:///{foreign} is not a KernelWatch database (it holds other "
        "tables: notes); nothing was written: give a new file or an empty "
        "database of its own"
    )
    assert "run " not in result.output  # collect measured nothing
    assert sha(foreign) == before and listing(foreign.parent) == files


@pytest.mark.parametrize("command", WRITERS)
def test_writers_name_a_database_folder_that_cannot_be_made(command: str, tmp_path: Path, cli) -> None:
    """--db under a path that is a file: one line naming it (was a FileExistsError traceback)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = cli.invoke(main, [*WRITERS[command](), "--db", f"sqlite:///{blocker / 'kw.db'}"])
    assert result.exit_code == 2 and isinstance(result.exception, (SystemExit, type(None))), result.exception
    assert result.output.strip().splitlines()[-1] == (
        f"kernelwatch {command}: error: cannot create the folder of database sqlite:///{blocker / 'kw.db'}: "
        f"File exists ({blocker})"
    )
    assert blocker.read_text() == ""


def _other_alembic_project(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY);"
        "INSERT INTO alembic_version VALUES ('deadbeef1234');"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY);"
    )
    conn.close()
    return path


def _wal_foreign(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()  # the last connection checkpoints and removes -wal and -shm
    return path


def _views_only(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIEW answer AS SELECT 42")
    conn.close()
    return path


def _stamped(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 7")
    conn.close()
    return path


@pytest.mark.parametrize(
    "make, holds",
    [
        (_other_alembic_project, "other tables: orders"),
        (_wal_foreign, "other tables: notes"),
        (_views_only, "view answer"),
        (_stamped, "an application stamp"),
    ],
)
@pytest.mark.parametrize("command", [*WRITERS, "runs"])
def test_other_projects_databases_are_refused_untouched(command: str, make, holds: str, tmp_path: Path, cli) -> None:
    """Another project's Alembic database (a revision this KernelWatch does not know, no run table) is
    foreign, not "written by a newer KernelWatch"; a foreign file in WAL mode gets no -wal or -shm beside
    it. Writers and readers alike leave every byte and the folder as they were."""
    folder = tmp_path / "theirs"
    folder.mkdir()
    path = make(folder / "their.db")
    before, files = sha(path), listing(folder)
    args = ["runs"] if command == "runs" else WRITERS[command]()
    result = cli.invoke(main, [*args, "--db", f"sqlite:///{path}"])
    assert result.exit_code == 2, result.output  # writers too: a database it cannot use is exit 2
    assert f"is not a KernelWatch database (it holds {holds})" in result.output
    assert "newer KernelWatch" not in result.output
    assert sha(path) == before and listing(folder) == files


def test_a_foreign_database_held_exclusively_by_its_owner_is_refused_at_once(tmp_path: Path, cli) -> None:
    path = tmp_path / "busy.db"
    owner = sqlite3.connect(path, isolation_level=None)
    owner.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY)")
    owner.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        result = cli.invoke(main, ["db", "upgrade", "--db", f"sqlite:///{path}"])
        assert time.monotonic() - started < 10
        assert result.exit_code == 2 and "is not a KernelWatch database" in result.output, result.output
    finally:
        owner.execute("ROLLBACK")
        owner.close()
    assert sqlite3.connect(f"file:{path}?mode=ro", uri=True).execute("PRAGMA journal_mode").fetchone() == ("delete",)


def test_another_projects_alembic_database_on_postgresql_is_foreign_not_newer(pg_url: str, cli) -> None:
    """The rule the SQLite probe applies holds on PostgreSQL too: an unknown revision without KernelWatch's
    run table is someone else's database, for writers and readers alike; nothing is created in it."""
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)"))
        conn.execute(text("INSERT INTO alembic_version VALUES ('deadbeef1234')"))
        conn.execute(text("CREATE TABLE orders (id integer PRIMARY KEY)"))
    for args, code in ((["db", "upgrade"], 2), (["runs"], 2)):
        result = cli.invoke(main, [*args, "--db", pg_url])
        assert result.exit_code == code, result.output
        assert "is not a KernelWatch database (it holds other tables: orders)" in result.output
        assert "newer KernelWatch" not in result.output
    assert sorted(inspect(engine).get_table_names()) == ["alembic_version", "orders"]
    engine.dispose()


def test_sqlite_uri_filenames_are_refused_and_create_nothing(tmp_path: Path, cli, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for url in (f"sqlite:///file:{tmp_path}/x.db?uri=true", f"sqlite:///file:{tmp_path}/x.db"):
        result = cli.invoke(main, ["db", "upgrade", "--db", url])
        assert result.exit_code == 2 and "SQLite URI filenames are not supported" in result.output, result.output
    assert list(tmp_path.iterdir()) == []


def test_writers_refuse_a_foreign_postgresql_database(pg_url: str, cli) -> None:
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE notes (id integer PRIMARY KEY)"))
    result = cli.invoke(main, ["db", "upgrade", "--db", pg_url])
    assert result.exit_code == 2 and "is not a KernelWatch database (it holds other tables: notes)" in result.output
    assert inspect(engine).get_table_names() == ["notes"]
    engine.dispose()


NOT_DATABASES = {  # what --db names -> how it is made, the refusal after the prefix ({url}, {path})
    "a-folder": (lambda p: p.mkdir(), "no database at {path}: it is not a file"),
    "an-empty-file": (
        lambda p: p.write_bytes(b""),
        "{url} is an empty database: run `kernelwatch db upgrade` against it, then collect or ingest",
    ),
    "a-text-file": (lambda p: p.write_text("hello\n"), "cannot open database {url}: file is not a database"),
}


@pytest.mark.parametrize("what", NOT_DATABASES)
@pytest.mark.parametrize("command", READERS)
def test_a_path_that_is_no_database_is_refused_untouched(command: str, what: str, tmp_path: Path, cli) -> None:
    make, message = NOT_DATABASES[what]
    folder = tmp_path / "there"
    folder.mkdir()
    path = folder / "kw.db"
    make(path)
    files = listing(folder)
    before = sha(path) if path.is_file() else None
    code, out, err = read(cli, command, f"sqlite:///{path}", tmp_path)
    assert (code, out) == (2, "")
    assert err == _prefix(command) + message.format(url=f"sqlite:///{path}", path=path) + "\n"
    assert listing(folder) == files and (before is None or sha(path) == before)


@pytest.fixture
def release_db(tmp_path: Path) -> Path:
    """A database written by KernelWatch 0.1.0 (schema revision 0001, WAL mode)."""
    folder = tmp_path / "old"
    folder.mkdir()
    path = folder / "kw.db"
    with gzip.open(FIXTURE) as src, path.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


@pytest.mark.parametrize("command", READERS)
def test_an_unmigrated_database_is_refused_and_left_at_its_revision(
    command: str, release_db: Path, tmp_path: Path, cli
) -> None:
    before = sha(release_db)
    code, out, err = read(cli, command, f"sqlite:///{release_db}", tmp_path)
    assert (code, out) == (2, "")
    assert err == (
        f"{_prefix(command)}sqlite:///{release_db} is at schema revision 0001, this KernelWatch needs "
        f"{head_revision()}: run `kernelwatch db upgrade` against it\n"
    )
    assert sha(release_db) == before
    # A WAL reader in a writable folder leaves SQLite's empty log and index beside the file; nothing is in the log.
    wal = release_db.with_name("kw.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    conn = sqlite3.connect(f"file:{release_db}?mode=ro", uri=True)
    assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [("0001",)]
    conn.close()


def test_a_newer_database_is_refused_by_readers_and_writers(release_db: Path, tmp_path: Path, cli) -> None:
    """A revision this KernelWatch does not know comes from a newer release: upgrading is not the advice."""
    conn = sqlite3.connect(release_db)
    conn.execute("UPDATE alembic_version SET version_num = '9999'")
    conn.commit()
    conn.close()
    before = sha(release_db)
    url = f"sqlite:///{release_db}"
    message = (
        f"{url} is at schema revision 9999, which this KernelWatch (head {head_revision()}) does not know: "
        f"it was written by a newer KernelWatch; upgrade KernelWatch\n"
    )
    assert read(cli, "runs", url, tmp_path) == (2, "", f"kernelwatch runs: error: {message}")
    result = cli.invoke(main, ["db", "upgrade", "--db", url])
    assert (result.exit_code, result.stderr) == (2, f"kernelwatch db upgrade: error: {message}")
    assert sha(release_db) == before


# ---------------------------------------------------------------------------------------------
# PostgreSQL: an empty or unmigrated database is refused and gets no tables
# ---------------------------------------------------------------------------------------------
@pytest.mark.postgres
def test_postgres_readers_refuse_an_empty_and_an_unmigrated_database(pg_url: str, tmp_path: Path, cli) -> None:
    from kernelwatch.store.engine import create_db_engine, redact, upgrade
    from tests.test_bad_artifacts import postgres_checksum

    shown = redact(pg_url)
    before = postgres_checksum(pg_url)
    for command in READERS:
        code, out, err = read(cli, command, pg_url, tmp_path)
        assert (code, out, err) == (
            2,
            "",
            f"{_prefix(command)}{shown} is an empty database: run `kernelwatch db "
            f"upgrade` against it, then collect or ingest\n",
        ), command
    assert postgres_checksum(pg_url) == before
    engine = create_db_engine(pg_url)
    upgrade(engine, "0001")
    engine.dispose()
    before = postgres_checksum(pg_url)
    for command in READERS:
        code, out, err = read(cli, command, pg_url, tmp_path)
        assert (code, out, err) == (
            2,
            "",
            f"{_prefix(command)}{shown} is at schema revision 0001, this KernelWatch "
            f"needs {head_revision()}: run `kernelwatch db upgrade` against it\n",
        )
    assert postgres_checksum(pg_url) == before


# ---------------------------------------------------------------------------------------------
# A database in a folder nobody may write
# ---------------------------------------------------------------------------------------------
def _without_permission_bypass() -> list[str]:
    """The setpriv prefix, once a probe shows that a process started with it cannot write a 0555 folder."""
    if shutil.which("setpriv") is None:
        return _unavailable("no setpriv (util-linux)")
    if os.geteuid() != 0:
        return []  # an ordinary user obeys permission bits already
    probe = Path(os.environ.get("TMPDIR", "/tmp")) / f"kw-probe-{os.getpid()}"
    probe.mkdir(mode=0o555)
    try:
        proc = subprocess.run([*SETPRIV, "touch", str(probe / "x")], capture_output=True, timeout=30)
        if proc.returncode == 0 or (probe / "x").exists():
            return _unavailable(f"setpriv did not take away the permission bypass: {proc.stderr!r}")
    except (OSError, subprocess.SubprocessError) as exc:
        return _unavailable(f"setpriv failed: {exc}")
    finally:
        (probe / "x").unlink(missing_ok=True)
        probe.rmdir()
    return SETPRIV


def _unavailable(why: str) -> list[str]:
    if IN_CI:
        pytest.fail(f"a read-only folder cannot be tested here: {why}")
    pytest.skip(why)


def _kernelwatch(prefix: list[str], *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "kernelwatch", *args],
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _close_cleanly(path: Path) -> None:
    """Open and close the database for writing: the last connection checkpoints the WAL and deletes
    -wal and -shm, as after a collector's run (readers in a writable folder leave them behind)."""
    conn = sqlite3.connect(path)
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    conn.close()
    assert not path.with_name(path.name + "-wal").exists() and not path.with_name(path.name + "-shm").exists()


@pytest.fixture(scope="module", params=["closed-cleanly", "reader-index-left"])
def locked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A migrated database with 25 synthetic runs (the last one an 8x mse_loss slowdown: the synthetic cases
    take 5-20 us, launch-bound, where the gate fails only a step past the 2-6x outlier runs) in a 0555 folder,
    the file 0444; the candidate artifact of the last run beside it. Either alone (closed cleanly: a
    reader cannot create the -shm index it needs) or with the empty -wal and the -shm a reader left."""
    prefix = _without_permission_bypass()
    folder = tmp_path_factory.mktemp("locked")
    path = folder / "kw.db"
    url = f"sqlite:///{path}"
    made = _kernelwatch([], "synth", "--runs", "25", "--cases", "4", "--step", "24:8:mse_loss", "--db", url)
    assert made.returncode == 0, made.stderr
    runs = json.loads(_kernelwatch([], "runs", "--format", "json", "--db", url).stdout)
    newest = runs[0]["id"]
    exported = _kernelwatch([], "export", newest, "-o", str(folder / "candidate.json"), "--db", url)
    assert exported.returncode == 0, exported.stderr
    mse = sorted(
        c["key"] for c in json.loads((folder / "candidate.json").read_text())["cases"] if c["kernel"] == "mse_loss"
    )[0]  # synth draws its cases from the specs: take one it made
    if request.param == "closed-cleanly":
        _close_cleanly(path)
    else:
        # What a mode=ro reader leaves (KernelWatch's readers did before they opened a clean database
        # read-write with query_only; other tools still do): an empty -wal and the -shm index.
        reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        reader.execute("SELECT count(*) FROM sqlite_master").fetchone()
        reader.close()
        assert path.with_name("kw.db-shm").exists()
    path.chmod(0o444)
    (folder / "candidate.json").chmod(0o444)
    folder.chmod(0o555)
    try:
        yield {
            "prefix": prefix,
            "folder": folder,
            "path": path,
            "url": url,
            "newest": newest,
            "runs": len(runs),
            "case": mse,
        }
    finally:
        folder.chmod(0o755)


def test_the_locked_folder_really_refuses_writes(locked: dict) -> None:
    script = f"touch {locked['folder']}/x || exit 3; echo >> {locked['path']}"
    proc = subprocess.run([*locked["prefix"], "sh", "-c", script], capture_output=True, timeout=30)
    assert proc.returncode != 0 and not (locked["folder"] / "x").exists()


@pytest.mark.parametrize("command", [c for c in READERS if c != "dashboard"])
def test_readers_read_a_database_in_a_read_only_folder(command: str, locked: dict, tmp_path: Path) -> None:
    """Before: "attempt to write a readonly database". Now each reader answers, and nothing appears beside the file."""
    before, files = sha(locked["path"]), listing(locked["folder"])
    args = {
        "gate": [
            "gate",
            "--artifact",
            str(locked["folder"] / "candidate.json"),
            "--baseline",
            "synthetic/main",
            "--report-dir",
            str(tmp_path / "report"),
        ],
        "runs": ["runs", "--format", "json"],
        "show": ["show", locked["newest"][:8], "--format", "json"],
        "export": ["export", locked["newest"], "-o", "-"],
        "bisect": ["bisect", locked["case"], "--hardware", "H200"],
        "db current": ["db", "current"],
    }[command]
    proc = _kernelwatch(locked["prefix"], *args, "--db", locked["url"])
    expected_code = 1 if command == "gate" else 0  # the candidate is the 8x slowdown: the gate fails it
    assert proc.returncode == expected_code, proc.stderr
    assert "Traceback" not in proc.stderr and "readonly" not in proc.stderr
    answer = {
        "gate": lambda out: out.startswith("KernelWatch gate: FAIL"),
        "runs": lambda out: len(json.loads(out)) == locked["runs"],
        "show": lambda out: len(json.loads(out)) == 4 * 3,
        "export": lambda out: json.loads(out)["run"]["id"] == locked["newest"],
        "bisect": lambda out: f" in {locked['runs']} runs of " in out,  # it read the whole history
        "db current": lambda out: out == f"{head_revision()} (head)\n",
    }[command]
    assert answer(proc.stdout), proc.stdout[-2000:]
    assert sha(locked["path"]) == before and listing(locked["folder"]) == files


def test_an_unfinished_log_in_a_read_only_folder_is_refused(tmp_path: Path) -> None:
    """A WAL database copied while a writer had it open: committed rows still in -wal, no -shm. A reader
    that cannot build the index must not read the file without the log (it would miss those rows)."""
    prefix = _without_permission_bypass()
    source = tmp_path / "live.db"
    writer = sqlite3.connect(source)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("CREATE TABLE t (x)")
    writer.execute("INSERT INTO t VALUES (1)")
    writer.commit()
    folder = tmp_path / "copy"
    folder.mkdir()
    shutil.copy(source, folder / "kw.db")
    shutil.copy(source.with_name("live.db-wal"), folder / "kw.db-wal")
    writer.close()
    assert (folder / "kw.db-wal").stat().st_size > 0 and not (folder / "kw.db-shm").exists()
    folder.chmod(0o555)
    try:
        proc = _kernelwatch(prefix, "runs", "--db", f"sqlite:///{folder / 'kw.db'}")
    finally:
        folder.chmod(0o755)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        f"kernelwatch runs: error: cannot read sqlite:///{folder / 'kw.db'}: its folder is "
        f"read-only and it has an unfinished write-ahead log (kw.db-wal); open it once where it "
        f"can be written\n"
    )


def test_a_writer_in_a_read_only_folder_fails_in_one_line(locked: dict, tmp_path: Path) -> None:
    artifact = tmp_path / "other.json"
    doc = json.loads((locked["folder"] / "candidate.json").read_text())
    doc["run"]["id"] = "00000000-0000-4000-8000-000000000001"
    artifact.write_text(json.dumps(doc))
    before = sha(locked["path"])
    proc = _kernelwatch(locked["prefix"], "ingest", str(artifact), "--db", locked["url"])
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr in (  # refused when it opens (no -shm to use) or when it writes (a reader left one)
        f"kernelwatch ingest: error: cannot open database {locked['url']}: attempt to write a readonly database\n",
        f"kernelwatch ingest: error: nothing stored from {artifact}: attempt to write a readonly database\n",
    )
    assert sha(locked["path"]) == before


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.browser
def test_the_dashboard_serves_a_database_in_a_read_only_folder(locked: dict) -> None:
    """`kernelwatch dashboard` (no permission bypass) serves the overview from the locked database in Chromium."""
    from tests.test_dashboard_browser import CHROMIUM

    if not Path(CHROMIUM).exists():
        _unavailable(f"no Chromium at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    before, files = sha(locked["path"]), listing(locked["folder"])
    port = _free_port()
    server = subprocess.Popen(
        [
            *locked["prefix"],
            sys.executable,
            "-m",
            "kernelwatch",
            "dashboard",
            "--port",
            str(port),
            "--db",
            locked["url"],
        ],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"{base}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                assert server.poll() is None, server.stdout.read().decode()[-2000:]
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page()
            page.goto(base, wait_until="domcontentloaded")
            page.wait_for_selector("h1", timeout=60_000)
            page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
            body = page.inner_text("body")
            exceptions = page.locator("[data-testid='stException']").count()
            browser.close()
        assert exceptions == 0, body[:2000]
        assert "NVIDIA H200 (synthetic)" in body, body[:2000]
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert sha(locked["path"]) == before and listing(locked["folder"]) == files


# ---------------------------------------------------------------------------------------------
# Reports the gate cannot write: a warning, never a changed verdict or exit status
# ---------------------------------------------------------------------------------------------
def _verdict(stdout: str) -> str:
    """The gate's answer without where its reports went (the plain summary ends with "every row: FOLDER/...")."""
    stdout = stdout.split("\nevery row: ")[0]
    return "\n".join(line for line in stdout.splitlines() if not line.startswith("reports: "))


@pytest.mark.parametrize("candidate", ["pass", "fail"])
def test_unwritable_reports_are_a_warning_never_a_verdict(candidate: str, locked: dict, tmp_path: Path) -> None:
    """The same gate three times: reports writable; --report-dir under a file and GITHUB_STEP_SUMMARY a folder;
    both inside the read-only folder (under setpriv). Same exit status and verdict, one warning per report."""
    artifact = locked["folder"] / "candidate.json"
    if candidate == "pass":  # the run before the slowdown, gated against the history before it
        runs = json.loads(_kernelwatch([], "runs", "--format", "json", "--db", locked["url"]).stdout)
        artifact = tmp_path / "previous.json"
        exported = _kernelwatch([], "export", runs[1]["id"], "-o", str(artifact), "--db", locked["url"])
        assert exported.returncode == 0, exported.stderr
    gate = ["gate", "--artifact", str(artifact), "--baseline", "synthetic/main", "--db", locked["url"]]
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    summary_ok = tmp_path / "summary.md"
    ok = _kernelwatch(
        [], *gate, "--report-dir", str(tmp_path / "report"), env={**_env(), "GITHUB_STEP_SUMMARY": str(summary_ok)}
    )
    in_the_way = _kernelwatch(
        [], *gate, "--report-dir", str(blocker / "report"), env={**_env(), "GITHUB_STEP_SUMMARY": str(tmp_path)}
    )
    read_only = _kernelwatch(
        locked["prefix"],
        *gate,
        "--report-dir",
        str(locked["folder"] / "report"),
        env={**_env(), "GITHUB_STEP_SUMMARY": str(locked["folder"] / "summary.md")},
    )
    assert ok.returncode == (0 if candidate == "pass" else 1), ok.stdout + ok.stderr
    assert ok.stderr == "" and summary_ok.read_text() and (tmp_path / "report" / "gate.md").exists()
    for other, why in (
        (in_the_way, ("Not a directory", "Is a directory")),
        (read_only, ("Permission denied", "Permission denied")),
    ):
        assert other.returncode == ok.returncode
        assert _verdict(other.stdout) == _verdict(ok.stdout)
        assert "Traceback" not in other.stderr
        lines = other.stderr.splitlines()
        assert len(lines) == 2, other.stderr
        assert lines[0].startswith("warning: reports not written to ") and lines[0].endswith(why[0])
        assert lines[1].startswith("warning: step summary not written to ") and lines[1].endswith(why[1])
    assert not (locked["folder"] / "report").exists() and not (locked["folder"] / "summary.md").exists()


def test_a_database_path_with_url_characters_is_that_path(tmp_path: Path, cli) -> None:
    """A bare path holding ? # % is the file of that name, for writers and readers (not the file `we`)."""
    folder = tmp_path / "we?ird#%20"
    folder.mkdir()
    path = folder / "k?w#.db"
    assert cli.invoke(main, ["synth", "--runs", "2", "--cases", "2", "--db", str(path)]).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["we?ird#%20"] and path.exists()
    runs = cli.invoke(main, ["runs", "--format", "json", "--db", str(path)])
    assert runs.exit_code == 0 and len(json.loads(runs.stdout)) == 2
    missing = cli.invoke(main, ["runs", "--db", str(folder / "none?.db")])
    assert (missing.exit_code, missing.stderr) == (
        2,
        f"kernelwatch runs: error: no database at {folder / 'none?.db'}: run `kernelwatch collect` or "
        f"`kernelwatch ingest` first\n",
    )
