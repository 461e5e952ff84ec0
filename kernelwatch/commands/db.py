"""`kernelwatch db upgrade | current`."""

from __future__ import annotations

import click

from kernelwatch.options import clean_errors, db_option, open_readonly


@click.group("db")
def command() -> None:
    """Manage the results database schema."""


@command.command("upgrade")
@db_option
@clean_errors
def upgrade(db_url: str | None) -> None:
    """Create the database or apply the shipped Alembic migrations to it."""
    from kernelwatch.store.engine import current_revision, open_database, redact

    engine = open_database(db_url)
    click.echo(f"{redact(engine.url)} is at revision {current_revision(engine)}")


@command.command("current")
@db_option
@clean_errors
def current(db_url: str | None) -> None:
    """Print the schema revision of a database without changing it.

    Like every command that only reads, it refuses (exit 2) a missing database, one that is not a
    KernelWatch database, and one at another revision than this KernelWatch's (the message names it).
    """
    from kernelwatch.store.engine import current_revision

    engine = open_readonly(db_url)
    click.echo(f"{current_revision(engine)} (head)")
