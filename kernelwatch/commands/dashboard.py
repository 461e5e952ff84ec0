"""`kernelwatch dashboard`: start the Streamlit app on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

import dashboard
from kernelwatch.options import clean_errors, db_option

APP = Path(dashboard.__file__).with_name("app.py")


@click.command("dashboard")
@click.option("--port", type=click.IntRange(1, 65535), default=8501, show_default=True)
@click.option("--address", default="127.0.0.1", show_default=True,
              help="Interface to bind. The default keeps the dashboard on this machine.")
@click.option("--headless/--open-browser", default=True, show_default=True)
@db_option
@clean_errors
def command(port: int, address: str, headless: bool, db_url: str | None) -> None:
    """Serve the dashboard (read-only on the database where the database allows it)."""
    from db.engine import open_database, resolve_url

    url = resolve_url(db_url)
    open_database(url).dispose()  # create/migrate once here, so the app can open it read-only
    env = {**os.environ, "KERNELWATCH_DB": url}
    cmd = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.port", str(port),
           "--server.address", address, "--server.headless", str(headless).lower(),
           "--browser.gatherUsageStats", "false"]
    click.echo(f"KernelWatch dashboard on http://{address}:{port}  (database: {url})")
    sys.exit(subprocess.call(cmd, env=env))
