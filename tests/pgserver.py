"""A real PostgreSQL server for the tests: the one named by KERNELWATCH_TEST_PG_URL (what .ci/run
starts), else a private throw-away cluster started from Debian's binaries, else none (skip, or fail
under CI)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

ENV = "KERNELWATCH_TEST_PG_URL"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class PrivateServer:
    """initdb + pg_ctl in a temporary folder, on a free loopback port; run as 'postgres' when we are root."""

    def __init__(self) -> None:
        bindir = _bindir()
        if bindir is None:
            raise RuntimeError("no PostgreSQL binaries under /usr/lib/postgresql")
        self.dir = Path(tempfile.mkdtemp(prefix="kw-pg-"))
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")
        data = self.dir / "data"
        self._run([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        self._run(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(self.dir / "log"),
                "-w",
                "-o",
                f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off",
                "start",
            ]
        )
        self.bindir, self.data = bindir, data
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, cmd: list[str]) -> None:
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def stop(self) -> None:
        try:
            self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"])
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def admin_url() -> tuple[str | None, PrivateServer | None, str]:
    """(URL of a maintenance database, the private server to stop later or None, why none)."""
    url = os.environ.get(ENV)
    if url:
        return url, None, ""
    try:
        server = PrivateServer()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return None, None, f"no PostgreSQL: set {ENV} or install Debian's postgresql ({exc})"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    return server.url, server, ""


def create_database(admin: str, prefix: str) -> tuple[str, str]:
    """A new, empty database on the admin URL's server: (its URL, its name)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return f"{admin.rsplit('/', 1)[0]}/{name}", name


INSUFFICIENT_PRIVILEGE = "42501"


def drop_database(admin: str, name: str, within_s: float = 30.0) -> None:
    """DROP DATABASE ... WITH (FORCE), which ends our own leftover sessions. PostgreSQL 15 refuses FORCE
    (42501, "must be a member of the role whose process is being terminated") while an autovacuum worker
    is in the database, as it runs under no role; a plain DROP then signals the worker away, and a
    session of a role we cannot signal is waited for, until `within_s`."""
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    deadline = time.monotonic() + within_s
    statements = (f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'DROP DATABASE IF EXISTS "{name}"')
    try:
        while True:
            refused: DBAPIError | None = None
            for sql in statements:
                try:
                    with engine.connect() as conn:
                        conn.execute(text(sql))
                    return
                except DBAPIError as exc:
                    if getattr(exc.orig, "sqlstate", None) not in (INSUFFICIENT_PRIVILEGE, "55006"):
                        raise
                    refused = exc
            if time.monotonic() > deadline:
                raise RuntimeError(f"database {name} could not be dropped within {within_s:.0f} s") from refused
            time.sleep(0.5)
    finally:
        engine.dispose()
