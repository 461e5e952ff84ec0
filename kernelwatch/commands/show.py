"""`kernelwatch show RUN_ID`."""

from __future__ import annotations

import click

from kernelwatch.options import FORMATS, clean_errors, db_option, open_readonly


@click.command("show")
@click.argument("run_id")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
@db_option
@clean_errors
def command(run_id: str, fmt: str, db_url: str | None) -> None:
    """Print one run's results flat: one record per case x implementation."""
    from db.export import find_run_id
    from db.queries import RESULT_FIELDS, run_results
    from kernelwatch.output import render

    engine = open_readonly(db_url)
    records = run_results(engine, find_run_id(engine, run_id))
    columns = RESULT_FIELDS
    if fmt == "table":
        columns = tuple(c for c in RESULT_FIELDS if c not in ("kernel", "variant", "dtype", "params", "target"))
    click.echo(render(records, columns, fmt))
