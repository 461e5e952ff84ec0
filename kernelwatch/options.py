"""Options and error handling shared by every subcommand.

Every command says what stopped it in one form: ``kernelwatch CMD: error: WHAT`` on stderr, one line. The exit
status is 2 for bad usage, bad input and a database that cannot be read (nothing was judged); a command's own
outcomes keep theirs (the gate's FAIL and a collect whose run could not be stored are 1). A command raises
:class:`CommandError` (or calls :func:`fail`); :func:`clean_errors`, on every command, turns the project's
expected exceptions into one; click prints it once (``CommandError.show``).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, NoReturn

import click

DB_HELP = "Database URL (default: $KERNELWATCH_DB, else sqlite file ./kernelwatch.db)."
FORMATS = click.Choice(["table", "json", "csv"])
USAGE = 2  # bad usage, bad input, a database that cannot be read: the command could not do its work


class Finite(click.FloatRange):
    """A number option: NaN and the infinities refused, then the range, if any (click's FloatRange lets NaN through
    every bound: ``--round-ms nan`` reached the measurement)."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        return "finite" if self.min is None and self.max is None else super()._describe_range()


class Effect(Finite):
    """A relative change: a fraction (``0.05``) or a percentage (``5%``). A bare number over 1 is refused, since
    ``--min-effect 5`` meant as 5% would read as 500% and wave every slowdown through."""

    name = "fraction|percent"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if not isinstance(value, str):
            return super().convert(value, param, ctx)
        text = value.strip()
        if text.endswith("%"):
            return super().convert(Finite().convert(text[:-1], param, ctx) / 100, param, ctx)
        number = Finite().convert(text, param, ctx)
        if number > 1:
            self.fail(
                f"{text} reads as {number:.0%} (a bare number is a fraction: 0.05 = 5%); write {text}% for {text} "
                "percent",
                param,
                ctx,
            )
        return super().convert(number, param, ctx)


def effect(name: str, text: str) -> float:
    """``text`` read as :class:`Effect` does, for a value inside another option (``--case-min-effect NAME=5%``);
    ValueError with the one-line reason."""
    try:
        return Effect().convert(text, None, None)
    except click.BadParameter as exc:
        raise ValueError(f"{name}: {exc.message}") from None


def writable_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """The callback of a report file written after long work (``confirm --report-file``): one that cannot be
    written (a folder, a FIFO, a device, a missing or read-only folder) is refused before the work starts."""
    from kernelwatch.store.files import check_writable
    from kernelwatch.store.schema import printable

    if value is None:
        return None
    try:
        check_writable(value)
    except OSError as exc:
        raise click.BadParameter(f"{printable(str(value))}: cannot be written ({exc.strerror or exc})") from None
    return value


def db_option(f):
    return click.option("--db", "db_url", envvar="KERNELWATCH_DB", default=None, metavar="URL", help=DB_HELP)(f)


def _activate_project(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    from kernelwatch.project import ProjectError, load_project

    try:
        project = load_project(value)
    except ProjectError as exc:
        raise CommandError(str(exc), ctx=ctx) from None
    ctx.call_on_close(project.activate())  # in-process callers (tests, the dashboard) get their state back


def project_option(f):
    """``--project PATH``: the project file (kernelwatch.project) whose kernels, repository and defaults the command
    uses; loaded and activated before the command runs."""
    return click.option(
        "--project",
        envvar="KERNELWATCH_PROJECT",
        default=None,
        metavar="PATH",
        expose_value=False,
        is_eager=True,
        callback=_activate_project,
        help="The project file (kernelwatch.toml, or a pyproject.toml with [tool.kernelwatch]) or its folder: "
        "its kernels, repository, baseline and thresholds. Default: the nearest one from here upwards.",
    )(f)


def command_path(ctx: click.Context | None) -> str:
    """``kernelwatch db current`` for the context of ``db current``, whatever name the program was started under
    (``python -m kernelwatch``, the entry point, a test's runner)."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["kernelwatch", *reversed(names)])


class CommandError(click.ClickException):
    """What stopped a command: printed as ``kernelwatch CMD: error: MESSAGE``, one line on stderr."""

    def __init__(self, message: str, exit_code: int = USAGE, ctx: click.Context | None = None) -> None:
        super().__init__(" ".join(str(message).split("\n")))
        self.exit_code = exit_code
        self.command_path = command_path(ctx or click.get_current_context(silent=True))

    def show(self, file=None) -> None:
        from kernelwatch.output import say, terminal

        say(terminal(f"{self.command_path}: error: {self.message}"), err=True)


def fail(message: str, exit_code: int = USAGE) -> NoReturn:
    """Stop the running command with one line naming what is wrong (exit status 2 unless given)."""
    raise CommandError(message, exit_code)


def expected_message(exc: BaseException) -> str | None:
    """The one line for an exception the project raises on purpose (bad input, a database that cannot be read,
    a damaged stored value), or None for anything else (a bug: its traceback is the answer)."""
    from kernelwatch.project import ProjectError
    from kernelwatch.store.artifact import ArtifactError

    if isinstance(exc, click.ClickException):
        return exc.format_message()
    if isinstance(exc, LookupError) and not isinstance(exc, (KeyError, IndexError)) and exc.args:
        return str(exc.args[0])  # "no run with id ...", "--hardware ... must match exactly one" (a KeyError is a bug)
    expected: tuple[type[BaseException], ...] = (ArtifactError, FileNotFoundError, ProjectError)
    try:
        from sqlalchemy.exc import SQLAlchemyError

        from kernelwatch.store.engine import DatabaseError, unreadable
        from kernelwatch.store.ingest import IngestError
    except ModuleNotFoundError:  # a collector-only host without SQLAlchemy: no database to fail
        return str(exc) if isinstance(exc, expected) else None
    if isinstance(exc, SQLAlchemyError):  # a dropped table, corrupted pages, a lost server: never its SQL
        return unreadable(exc)
    if isinstance(exc, (*expected, DatabaseError, IngestError)):
        return str(exc)
    return None


def clean_errors(f):
    """Every command's callback goes through this: the project's expected failures become one
    :class:`CommandError` (exit status 2), anything else stays a traceback."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except (CommandError, click.exceptions.Exit, click.Abort, click.UsageError):
            raise
        except Exception as exc:
            message = expected_message(exc)
            if message is None:
                raise
            code = exc.exit_code if isinstance(exc, click.ClickException) else USAGE
            raise CommandError(message, code) from None

    wrapper.clean_errors = True  # tests/test_cli_messages.py checks that every command has it
    return wrapper


def open_readonly(db_url: str | None):
    """The database for a command that only reads: never created, migrated or written.

    A missing, unmigrated, unreachable or damaged database is refused with one line and exit status 2.
    """
    from kernelwatch.store.engine import DatabaseError, open_database

    try:
        return open_database(db_url, readonly=True)
    except DatabaseError as exc:
        fail(str(exc))


def closest(name: str, known: list[str], n: int = 3) -> list[str]:
    """The known names most like ``name`` (difflib's ratio), best first."""
    import difflib

    return difflib.get_close_matches(name, known, n=n, cutoff=0.6)


def check_case(engine, key: str) -> None:
    """Stop with "unknown case" and the closest stored keys when ``key`` is no case of the database."""
    from kernelwatch.store.queries import case_info, case_keys, kernel_names

    if case_info(engine, key) is not None:
        return
    known = [k for kernel in kernel_names(engine) for k in case_keys(engine, kernel)]
    near = closest(key, known)
    hint = (
        f"closest known: {', '.join(near)}"
        if near
        else f"no known key is close ({len(known)} cases stored; `kernelwatch show RUN_ID` lists a run's)"
    )
    fail(f"unknown case {key[:200]!r}: {hint}")


def output_file(ctx: click.Context, param: click.Parameter, value: str | None):
    """The callback of an artifact path to write (``--out``, ``-o``): checked as given, before anything
    runs (:func:`kernelwatch.store.artifact.artifact_target`). A path ending in ``/`` names a folder and is refused in
    one line, never written as a file named like the folder (``Path`` would drop the ``/``); ``-`` passes."""
    if value is None or value == "-":
        return None if value is None else Path(value)
    from kernelwatch.store.artifact import ArtifactError, artifact_target

    try:
        artifact_target(value)
    except ArtifactError as exc:
        raise click.BadParameter(str(exc)) from None
    return Path(value)
