"""Opening a results database: URL resolution, SQLite settings, migrations on open.

SQLite (the default, ``kernelwatch.db`` in the working folder) is opened with WAL, a busy
timeout, foreign keys on and ``BEGIN IMMEDIATE`` for every transaction, so concurrent writers
queue on the lock instead of failing half-way with "database is locked". PostgreSQL is reached
through ``postgresql+psycopg://``.

Migrations are applied when a database is opened for writing. The check and the upgrade run in
one transaction that first takes the database's write lock (SQLite: ``BEGIN IMMEDIATE``;
PostgreSQL: a transaction-scoped advisory lock), so two processes opening a new database at
once do not both try to create it.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

DEFAULT_DB = "kernelwatch.db"
ENV_VAR = "KERNELWATCH_DB"
BUSY_TIMEOUT_S = 60.0
_PG_MIGRATION_LOCK = 0x4B57_0001  # "KW" + 1: the advisory lock id taken while migrating
UNREADABLE_SHOWN = 120  # characters of the driver's message (SQLite's "Could not decode..." quotes the value)
QUICK_CHECK_SHOWN = 3  # problems quick_check reports in the one line (it stops looking after them)
_checked: set[tuple[str, int, int, int]] = set()  # (file, inode, size, mtime) of SQLite files this process found whole


class DatabaseError(RuntimeError):
    """The database cannot be opened or used; the message says which and why."""


class StoredValueError(DatabaseError):
    """A stored value its column's type cannot hold (text in a number column, a time that is not one, JSON that does
    not parse): raised where it is read (``kernelwatch.store.stored``), naming the table, the run (or row) and the
    field."""

    def __init__(self, table: str, row: str | None, field: str, problem: str) -> None:
        self.table, self.row, self.field, self.problem = table, row, field, problem
        where = table if not row else row if row.startswith(f"{table} ") else f"{table} of {row}"
        super().__init__(f"the database holds a damaged value: {where}, field {field}: {problem}; nothing was changed")


def unreadable(exc: BaseException, url: str | URL | None = None) -> str:
    """One line for a database that failed under a query (a dropped table, corrupted pages, a lost server):
    the driver's first line, never the statement or its parameters."""
    cause = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    first = cause[0] if cause else type(exc).__name__
    first = first if len(first) <= UNREADABLE_SHOWN else first[:UNREADABLE_SHOWN] + "..."  # it may quote a value
    where = f" {redact(url)}" if url is not None else ""
    return (
        f"the database{where} cannot be read ({first}): it is damaged or not what this KernelWatch wrote; "
        f"nothing was changed"
    )


def resolve_url(url: str | None = None) -> str:
    """``--db`` beats ``KERNELWATCH_DB`` beats ``sqlite:///kernelwatch.db``; a bare path means SQLite."""
    url = url or os.environ.get(ENV_VAR) or DEFAULT_DB
    if "://" not in url:  # a path: percent-encoded, or a ? or # in it would start the URL's query
        url = URL.create("sqlite", database=str(Path(url).expanduser().absolute())).render_as_string()
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def redact(url: str | URL) -> str:
    try:
        return make_url(str(url)).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"


def _set_wal(cursor) -> None:
    """Switch to WAL. Changing the journal mode ignores busy_timeout in SQLite, so processes that open a
    new database at the same moment can see "database is locked" here: wait and retry instead."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def _readonly_uri(path: Path, shown: str) -> str:
    """The SQLite URI that reads ``path`` without writing anything to it or beside it.

    ``mode=ro`` is enough, except for a WAL database in a folder nobody may write: a WAL reader
    needs the ``-shm`` index beside the file and cannot create it there (SQLite then says
    "attempt to write a readonly database"). Such a database is opened ``immutable`` (no locks, no
    ``-shm``), which is safe because nobody can write to that folder either, unless an unfinished
    ``-wal`` log (or a rollback ``-journal``) holds data the immutable reader would not see: refused.
    """
    logs = [path.with_name(path.name + suffix) for suffix in ("-wal", "-journal")]
    clean = (
        os.access(path.parent, os.W_OK)
        and os.access(path, os.W_OK)
        and not any(log.exists() and log.stat().st_size > 0 for log in logs)
    )
    # A WAL database opened mode=ro creates -wal and -shm beside it and, unable to checkpoint, leaves them
    # there when it closes. A clean database (no unfinished log) in a folder we may write is opened
    # read-write with PRAGMA query_only instead (every write statement fails): the last connection to close
    # removes both files, as SQLite's own readers do. Anything else stays mode=ro (a hot log is never
    # replayed by a reader).
    uri = f"file:{quote(str(path))}?mode={'rw' if clean else 'ro'}"
    try:
        probe = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            probe.execute("PRAGMA query_only = ON")
            probe.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return uri
        finally:
            probe.close()
    except sqlite3.OperationalError as exc:
        if os.access(path.parent, os.W_OK):
            raise DatabaseError(f"cannot open database {shown}: {exc}") from None
        for log in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-journal")):
            if log.exists() and log.stat().st_size > 0:
                raise DatabaseError(
                    f"cannot read {shown}: its folder is read-only and it has an unfinished "
                    f"{'write-ahead log' if log.name.endswith('wal') else 'rollback journal'} "
                    f"({log.name}); open it once where it can be written"
                ) from None
        return uri + "&immutable=1"
    except sqlite3.Error as exc:
        raise DatabaseError(f"cannot open database {shown}: {exc}") from None


def _refuse_foreign_sqlite(file: Path, shown: str, hint: str = "") -> None:
    """Refuse someone else's SQLite file (a mistyped --db) before any connection of ours touches it: it
    holds tables, and neither a KernelWatch revision nor KernelWatch's ``run`` table (another project's
    Alembic database has a revision this KernelWatch does not know, and no ``run``).

    The probe opens the file ``immutable``: no lock is taken (an owner holding it exclusively does not
    stall it), no ``-wal`` or ``-shm`` is created beside it, nothing is written."""
    if not file.is_file() or file.stat().st_size == 0:
        return
    try:
        probe = sqlite3.connect(f"file:{quote(str(file.absolute()))}?mode=ro&immutable=1", uri=True)
        try:
            objects = probe.execute("SELECT type, name FROM sqlite_master").fetchall()
            tables = sorted(name for kind, name in objects if kind == "table")
            revision = (
                (probe.execute("SELECT version_num FROM alembic_version").fetchone() or (None,))[0]
                if "alembic_version" in tables
                else None
            )
            stamped = any(probe.execute(f"PRAGMA {p}").fetchone()[0] for p in ("user_version", "application_id"))
        finally:
            probe.close()
    except sqlite3.Error:
        return  # not readable as SQLite: the engine's own open says why
    other = _foreign_tables(tables, revision)
    if other:
        raise DatabaseError(_foreign(shown, other) + hint)
    views = sorted(f"{kind} {name}" for kind, name in objects if kind != "table")
    if other is not None and (views or stamped):  # views only, or a file its application stamped
        what = ", ".join(views[:3]) or "an application stamp"
        raise DatabaseError(f"{shown} is not a KernelWatch database (it holds {what})" + hint)


def check_integrity(file: Path, shown: str, uri: str | None = None) -> None:
    """Refuse a SQLite file whose pages are damaged (bytes written over them, a torn copy) before anything reads
    or writes it: SQLite's ``PRAGMA quick_check`` (every page and record, without cross-checking the indexes
    against their tables: about 0.1 s per 100 MB), once per process per file.

    ``uri``: the read-only URI the reader will use; writers are checked through ``mode=ro``, so a damaged file
    is refused with nothing written to it. A file that cannot be checked (not SQLite, locked, a WAL file in a
    read-only folder) is left to the open, which says why.
    """
    if not file.is_file() or file.stat().st_size == 0:
        return
    stat = file.stat()
    key = (str(file.absolute()), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key in _checked:
        return
    try:
        probe = sqlite3.connect(uri or f"file:{quote(str(file.absolute()))}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            problems = [p for (p,) in probe.execute(f"PRAGMA quick_check({QUICK_CHECK_SHOWN})")]
        finally:
            probe.close()
    except sqlite3.DatabaseError as exc:
        if not str(getattr(exc, "sqlite_errorname", "")).startswith("SQLITE_CORRUPT") and "malformed" not in str(exc):
            return  # not SQLite, locked, in a read-only folder...: the open says so, as it always did
        problems = [str(exc)]
    if problems != ["ok"]:
        lines = [line.strip() for p in problems for line in p.splitlines()]
        found = "; ".join(line for line in lines if line and not line.startswith("***"))
        raise DatabaseError(
            f"the database {shown} is damaged: SQLite's quick_check finds {found[:300]}; nothing was read or written"
        )
    _checked.add(key)


def _sqlite_engine(url: URL, readonly: bool) -> Engine:
    path = url.database
    if not path or path == ":memory:":
        raise DatabaseError("an in-memory SQLite database cannot be shared between processes; give a file path")
    if path.startswith("file:") or url.query.get("uri"):
        raise DatabaseError(f"{redact(url)}: SQLite URI filenames are not supported; give a plain path, sqlite:///PATH")
    if readonly:
        file = Path(path).absolute()
        shown = redact(url)
        if not file.exists():
            raise DatabaseError(f"no database at {path}: run `kernelwatch collect` or `kernelwatch ingest` first")
        if not file.is_file():
            raise DatabaseError(f"no database at {path}: it is not a file")
        _refuse_foreign_sqlite(file, shown)
        uri = _readonly_uri(file, shown)
        check_integrity(file, shown, uri)
        # The URL stays the user's (messages name it); the connection comes from the read-only URI.
        engine = create_engine(
            url, creator=lambda: sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        )
    else:
        target = Path(path)
        if target.exists() and not target.is_file():  # SQLite would create FILE-journal beside a device
            raise DatabaseError(
                f"{redact(url)}: not a regular file (a device, FIFO or folder is never a database); nothing was written"
            )
        _refuse_foreign_sqlite(target, redact(url), _FOREIGN_HINT)
        check_integrity(target, redact(url))
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file where a folder must be, a read-only or missing mount...
            raise DatabaseError(
                f"cannot create the folder of database {redact(url)}: "
                f"{exc.strerror or exc} ({exc.filename or Path(path).parent})"
            ) from None
        engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # SQLAlchemy's begin event below issues BEGIN itself
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA foreign_keys = ON")
        if readonly:
            cur.execute("PRAGMA query_only = ON")
        else:
            _set_wal(cur)
            cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")

    return engine


def create_db_engine(url: str | None = None, *, readonly: bool = False) -> Engine:
    """An engine for ``url`` (resolved as :func:`resolve_url` does); no migrations."""
    resolved = resolve_url(url)
    try:
        parsed = make_url(resolved)
    except ArgumentError as exc:
        raise DatabaseError(f"not a database URL: {resolved!r} ({exc})") from None
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, readonly)
    if parsed.get_backend_name() != "postgresql":
        raise DatabaseError(f"unsupported database {parsed.get_backend_name()!r}: use SQLite or PostgreSQL")
    connect_args = {"connect_timeout": 10}
    if readonly:
        connect_args["options"] = "-c default_transaction_read_only=on"
    try:
        return create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
    except (ImportError, SQLAlchemyError) as exc:
        raise DatabaseError(f"cannot use {redact(parsed)}: {exc}") from None


def _alembic_config():
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).with_name("migrations")))
    return cfg


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply migrations under the database's write lock (safe with concurrent openers).

    The common case, a database already at head, is seen without taking any lock. On SQLite,
    foreign keys are switched off around the migration (Alembic rebuilds altered tables, and a
    rebuilt parent table would otherwise take its children with it) and checked before commit.
    """
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    if revision == "head" and current_revision(engine) == head_revision():
        return
    cfg = _alembic_config()
    with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:  # a PRAGMA that takes effect only outside a transaction: on the raw connection
            conn.connection.dbapi_connection.execute("PRAGMA foreign_keys = OFF")
        try:
            with conn.begin():
                if not sqlite:
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
                current = MigrationContext.configure(conn).get_current_revision()
                if revision == "head" and current == head_revision():
                    return  # another process migrated while we waited for the lock
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
                if sqlite:
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise DatabaseError(
                            f"migration left {len(broken)} rows with dangling references, first "
                            f"{broken[0]}: nothing was changed"
                        )
        finally:
            if sqlite:
                conn.connection.dbapi_connection.execute("PRAGMA foreign_keys = ON")


def known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    return {rev.revision for rev in ScriptDirectory.from_config(_alembic_config()).walk_revisions()}


def _foreign_tables(tables: list[str], revision: str | None) -> list[str] | None:
    """None when the database is KernelWatch's (its ``run`` table or a revision this KernelWatch knows);
    otherwise the tables that are not (empty for an empty database, or one holding only Alembic's table)."""
    if "run" in tables or (revision is not None and revision in known_revisions()):
        return None
    return [t for t in tables if t != "alembic_version"]


def _foreign(shown: str, tables: list[str]) -> str:
    listed = ", ".join(tables[:3]) + (", ..." if len(tables) > 3 else "")
    return f"{shown} is not a KernelWatch database (it holds other tables: {listed})"


def _not_ready(engine: Engine, rev: str | None, foreign_hint: str = "") -> str:
    """Why a database is not one this KernelWatch can read as it is; the message says what to do."""
    from sqlalchemy import inspect

    shown, head = redact(engine.url), head_revision()
    other = _foreign_tables(sorted(inspect(engine).get_table_names()), rev)
    if other:
        return _foreign(shown, other) + foreign_hint
    if rev is None:
        return f"{shown} is an empty database: run `kernelwatch db upgrade` against it, then collect or ingest"
    if rev not in known_revisions():
        return (
            f"{shown} is at schema revision {rev}, which this KernelWatch (head {head}) does not know: "
            f"it was written by a newer KernelWatch; upgrade KernelWatch"
        )
    return (
        f"{shown} is at schema revision {rev}, this KernelWatch needs {head}: run `kernelwatch db upgrade` against it"
    )


_FOREIGN_HINT = "; nothing was written: give a new file or an empty database of its own"


def open_database(url: str | None = None, *, readonly: bool = False, migrate: bool = True) -> Engine:
    """Open (and for writers, migrate) a database, turning driver failures into one clear message.

    ``readonly``: never create, migrate or write. A missing database, one at another revision
    than this KernelWatch's head, or one that is not a KernelWatch database is refused.
    """
    engine = create_db_engine(url, readonly=readonly)
    try:
        if readonly:
            rev = current_revision(engine)
            if rev != head_revision():
                raise DatabaseError(_not_ready(engine, rev))
            check_tables(engine)
        elif migrate:
            rev = current_revision(engine)
            if rev not in known_revisions():  # someone else's database, an empty one, or a newer KernelWatch's
                from sqlalchemy import inspect

                if rev is not None or _foreign_tables(inspect(engine).get_table_names(), rev):
                    raise DatabaseError(_not_ready(engine, rev, _FOREIGN_HINT))
            upgrade(engine)
            check_tables(engine)
    except DatabaseError:
        engine.dispose()
        raise
    except (SQLAlchemyError, OSError) as exc:
        engine.dispose()
        cause = getattr(exc, "orig", None) or exc
        # one line: libpq adds a hint line to "connection refused" ("Is the server running on that host...")
        raise DatabaseError(
            f"cannot open database {redact(resolve_url(url))}: {' '.join(str(cause).split())}"
        ) from None
    return engine


def check_tables(engine: Engine) -> None:
    """Refuse a database at this KernelWatch's revision that lacks one of its tables or columns (dropped by hand,
    or restored from a partial dump): one line naming the first one missing, before any query fails on it."""
    from sqlalchemy import inspect

    from kernelwatch.store.models import Base

    inspector = inspect(engine)
    present = set(inspector.get_table_names())
    for table in Base.metadata.sorted_tables:
        if table.name not in present:
            raise DatabaseError(
                f"the database {redact(engine.url)} is damaged: its table {table.name} is missing "
                f"(schema revision {head_revision()} has it); nothing was changed"
            )
        columns = {c["name"] for c in inspector.get_columns(table.name)}
        missing = [c.name for c in table.columns if c.name not in columns]
        if missing:
            raise DatabaseError(
                f"the database {redact(engine.url)} is damaged: table {table.name} has no column "
                f"{', '.join(missing)} (schema revision {head_revision()} has it); nothing was changed"
            )
