"""The `kernelwatch` command line. Each subcommand is a thin shell over one module."""

from __future__ import annotations

from pathlib import Path

import click

from collector.cli_common import FORMATS, clean_errors, db_option


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="kernelwatch", message="kernelwatch %(version)s")
def main() -> None:
    """KernelWatch: are your Triton kernels still right and still fast, commit after commit?

    Collect accuracy and performance of every kernel into a database (SQLite by default,
    PostgreSQL when CI runners share one), review them in the dashboard, gate merges on them.
    """


@main.group()
def db() -> None:
    """Manage the results database schema."""


@db.command("upgrade")
@db_option
@clean_errors
def db_upgrade(db_url: str | None) -> None:
    """Apply the shipped Alembic migrations (opening a database for writing does this too)."""
    from db.engine import current_revision, open_database, redact

    engine = open_database(db_url)
    click.echo(f"{redact(engine.url)} is at revision {current_revision(engine)}")


@db.command("current")
@db_option
@clean_errors
def db_current(db_url: str | None) -> None:
    """Print the schema revision of a database without changing it."""
    from db.engine import create_db_engine, current_revision, head_revision

    rev = current_revision(create_db_engine(db_url))
    click.echo(f"{rev or 'empty'} (head: {head_revision()})")


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@db_option
@clean_errors
def ingest(files: tuple[Path, ...], db_url: str | None) -> None:
    """Load run artifacts (kernelwatch.run/1 JSON) into the database.

    Every file is validated completely before anything is written; each run is written in one
    transaction. Re-ingesting a run already stored is a no-op; the same run id with different
    content is an error.
    """
    from db.artifact import load_artifact
    from db.engine import open_database
    from db.ingest import ingest_documents

    docs = [(str(p), load_artifact(p)) for p in files]
    engine = open_database(db_url)
    for outcome in ingest_documents(engine, docs):
        click.echo(f"{outcome.status:9s} {outcome.run_id}  {outcome.results} results  ({outcome.source})")


@main.command()
@click.argument("run_id")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="File to write ('-' for stdout).")
@db_option
@clean_errors
def export(run_id: str, output: Path, db_url: str | None) -> None:
    """Write one stored run (id or unique id prefix) as a kernelwatch.run/1 artifact."""
    from db.artifact import dumps, write_artifact
    from db.engine import open_database
    from db.export import export_run, find_run_id

    engine = open_database(db_url)
    doc = export_run(engine, find_run_id(engine, run_id))
    if str(output) == "-":
        click.echo(dumps(doc), nl=False)
    else:
        write_artifact(doc, output)
        click.echo(f"wrote {output}")


RUN_COLUMNS = ("id", "commit", "branch", "hardware", "trigger", "status", "started")


@main.command()
@click.option("--hardware", default=None, help="Only runs on hardware whose name contains this or fingerprint prefix.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many runs, newest first.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@db_option
@clean_errors
def runs(hardware: str | None, limit: int | None, fmt: str, db_url: str | None) -> None:
    """List stored runs, newest first."""
    from collector.output import render
    from db.engine import open_database
    from db.queries import list_runs

    records = list_runs(open_database(db_url), hardware=hardware, limit=limit)
    for r in records:
        r["commit"] = r["commit"][:12] + ("+dirty" if r["dirty"] else "")
    click.echo(render(records, RUN_COLUMNS, fmt))


@main.command()
@click.argument("run_id")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
@db_option
@clean_errors
def show(run_id: str, fmt: str, db_url: str | None) -> None:
    """Print one run's results flat: one record per case x implementation."""
    from collector.output import render
    from db.engine import open_database
    from db.export import find_run_id
    from db.queries import RESULT_FIELDS, run_results

    engine = open_database(db_url)
    records = run_results(engine, find_run_id(engine, run_id))
    columns = RESULT_FIELDS
    if fmt == "table":
        columns = tuple(c for c in RESULT_FIELDS if c not in ("kernel", "variant", "dtype", "params", "target"))
    click.echo(render(records, columns, fmt))


def _register_optional_commands() -> None:
    from collector.collect_cmd import collect

    main.add_command(collect)
    from dashboard.cli import dashboard

    main.add_command(dashboard)
    try:  # the gate needs SQLAlchemy; a collector-only GPU host may not have it
        from ci.cli import bisect, gate, synth
    except ImportError:
        return
    for command in (gate, bisect, synth):
        main.add_command(command)


_register_optional_commands()

if __name__ == "__main__":
    main()
