"""`kernelwatch runs`."""

from __future__ import annotations

import click

from kernelwatch.options import clean_errors, db_option, open_readonly

RUN_COLUMNS = ("id", "commit", "branch", "hardware", "trigger", "status", "started")


@click.command("runs")
@click.option("--hardware", default=None, help="Only runs on hardware whose name contains this or fingerprint prefix.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many runs, newest first.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@db_option
@clean_errors
def command(hardware: str | None, limit: int | None, fmt: str, db_url: str | None) -> None:
    """List stored runs, newest first."""
    from db.queries import list_runs
    from kernelwatch.output import render

    records = list_runs(open_readonly(db_url), hardware=hardware, limit=limit)
    for r in records:
        r["commit"] = r["commit"][:12] + ("+dirty" if r["dirty"] else "")
    click.echo(render(records, RUN_COLUMNS, fmt))
