"""`kernelwatch dashboard`: start the Streamlit app on loopback."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import click

from kernelwatch import dashboard
from kernelwatch.options import clean_errors, db_option, fail, open_readonly

APP = Path(dashboard.__file__).with_name("app.py")


@click.command("dashboard")
@click.option("--port", type=click.IntRange(1, 65535), default=8501, show_default=True)
@click.option(
    "--address",
    default="127.0.0.1",
    show_default=True,
    help="Interface to bind. The default keeps the dashboard on this machine.",
)
@click.option("--headless/--open-browser", default=True, show_default=True)
@db_option
@clean_errors
def command(port: int, address: str, headless: bool, db_url: str | None) -> None:
    """Serve the dashboard. It only reads: the database must exist, be migrated (`kernelwatch db upgrade`) and hold
    no damaged value (checked before serving).

    The server replaces this process (exec), so stopping this PID stops the server.
    """
    from kernelwatch.store.engine import redact, resolve_url
    from kernelwatch.store.stored import check_database

    url = resolve_url(db_url)
    engine = open_readonly(url)
    check_database(engine)  # a damaged database is one line here, not an exception on every page
    engine.dispose()
    _check_port(address, port)
    env = {**os.environ, "KERNELWATCH_DB": url}
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.port",
        str(port),
        "--server.address",
        address,
        "--server.headless",
        str(headless).lower(),
        "--browser.gatherUsageStats",
        "false",
    ]
    click.echo(f"KernelWatch dashboard on http://{address}:{port}  (database: {redact(url)})")
    sys.stdout.flush()
    os.execve(sys.executable, cmd, env)


def _check_port(address: str, port: int) -> None:
    """Refuse a port something already listens on before printing a URL that would not be ours.

    Bound and released at once with ``SO_REUSEADDR``, as the server binds it (a port in TIME_WAIT is free
    for it, a listening one is not); the server starts a moment later, so a port taken in between is still
    Streamlit's own error."""
    import socket

    try:
        family, kind, proto, _, where = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(where)
    except OSError as exc:
        hint = ""
        if exc.errno == errno.EADDRINUSE:
            hint = f" (an earlier dashboard? open http://{address}:{port}, stop it, or pick another --port"
            hint += "; make demo PORT=N)"
        fail(f"cannot serve on {address}:{port}: {exc.strerror or exc}{hint}")
