"""Options and error handling shared by every subcommand."""

from __future__ import annotations

import functools
import sys

import click

DB_HELP = "Database URL (default: $KERNELWATCH_DB, else sqlite file ./kernelwatch.db)."
FORMATS = click.Choice(["table", "json", "csv"])


def db_option(f):
    return click.option("--db", "db_url", envvar="KERNELWATCH_DB", default=None, metavar="URL", help=DB_HELP)(f)


def open_readonly(db_url: str | None):  # noqa: ANN201 - an Engine
    """The database for a command that only reads: never created, migrated or written.

    A missing, unmigrated or unreachable database is refused with one line and exit status 2.
    """
    from db.engine import DatabaseError, open_database
    from kernelwatch.output import terminal

    try:
        return open_database(db_url, readonly=True)
    except DatabaseError as exc:
        click.echo(terminal(f"kernelwatch: error: {exc}"), err=True)
        sys.exit(2)


def clean_errors(f):
    """Turn the project's expected failures into one message on stderr and exit status 1.

    A database that fails under a query (a dropped table, corrupted pages) is exit status 2, as an
    unreadable database is when it is opened: the command could not do its work, nothing was judged."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        from db.artifact import ArtifactError
        from kernelwatch.output import terminal

        expected: tuple[type[BaseException], ...] = (ArtifactError, FileNotFoundError, LookupError)
        try:
            from db.engine import DatabaseError
            from db.ingest import IngestError

            expected += (DatabaseError, IngestError)
        except ImportError:  # a collector-only host without SQLAlchemy
            pass
        try:
            from sqlalchemy.exc import SQLAlchemyError
        except ImportError:
            SQLAlchemyError = ()  # noqa: N806 - a collector-only host: no database to fail
        try:
            return f(*args, **kwargs)
        except SQLAlchemyError as exc:
            from db.engine import unreadable

            click.echo(terminal(f"kernelwatch: error: {unreadable(exc)}"), err=True)
            sys.exit(2)
        except expected as exc:
            msg = exc.args[0] if isinstance(exc, LookupError) and exc.args else str(exc)
            click.echo(terminal(f"kernelwatch: error: {msg}"), err=True)
            sys.exit(1)

    return wrapper


def output_file(ctx: click.Context, param: click.Parameter, value: str | None):  # noqa: ANN201 - Path | None
    """The callback of an artifact path to write (``--out``, ``-o``): checked as given, before anything
    runs (:func:`db.artifact.artifact_target`). A path ending in ``/`` names a folder and is refused in
    one line, never written as a file named like the folder (``Path`` would drop the ``/``); ``-`` passes."""
    from pathlib import Path

    if value is None or value == "-":
        return None if value is None else Path(value)
    from db.artifact import ArtifactError, artifact_target

    try:
        artifact_target(value)
    except ArtifactError as exc:
        raise click.BadParameter(str(exc)) from None
    return Path(value)
