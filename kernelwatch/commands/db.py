"""`kernelwatch db upgrade | current`."""

from __future__ import annotations

import click

from kernelwatch.options import clean_errors, db_option


@click.group("db")
def command() -> None:
    """Manage the results database schema."""


@command.command("upgrade")
@db_option
@clean_errors
def upgrade(db_url: str | None) -> None:
    """Create the database or apply the shipped Alembic migrations to it."""
    from db.engine import current_revision, open_database, redact

    engine = open_database(db_url)
    click.echo(f"{redact(engine.url)} is at revision {current_revision(engine)}")


@command.command("current")
@db_option
@clean_errors
def current(db_url: str | None) -> None:
    """Print the schema revision of a database without changing it."""
    from db.engine import create_db_engine, current_revision, head_revision

    rev = current_revision(create_db_engine(db_url, readonly=True))
    click.echo(f"{rev or 'empty'} (head: {head_revision()})")
