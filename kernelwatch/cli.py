"""The root command. Subcommands are registered by name and imported only when used, so `kernelwatch
ingest` never imports torch and a collector-only host without the dashboard's packages still runs."""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "collect": ("kernelwatch.commands.collect", "Run the accuracy and perf suites and store one run."),
    "ingest": ("kernelwatch.commands.ingest", "Load run artifacts into the database (all or nothing)."),
    "export": ("kernelwatch.commands.export", "Write a stored run as a kernelwatch.run/1 artifact."),
    "runs": ("kernelwatch.commands.runs", "List stored runs, newest first."),
    "show": ("kernelwatch.commands.show", "Print one run's results."),
    "gate": ("kernelwatch.commands.gate", "Fail a merge on broken accuracy or a real slowdown."),
    "confirm": ("kernelwatch.commands.confirm", "Re-measure flagged cases on one device, two commits."),
    "bisect": ("kernelwatch.commands.bisect", "Where did a change enter a case's history?"),
    "ack": ("kernelwatch.commands.ack", "Record that a change in a case's time is expected."),
    "synth": ("kernelwatch.commands.synth", "Fill a database with SYNTHETIC history."),
    "dashboard": ("kernelwatch.commands.dashboard", "Serve the dashboard on loopback."),
    "schema": ("kernelwatch.commands.schema", "Print the JSON Schema of kernelwatch.run/1."),
    "db": ("kernelwatch.commands.db", "Manage the results database schema."),
    "doctor": ("kernelwatch.commands.doctor", "Check what a run on this host needs; one line per missing piece."),
}


try:
    import click
except ModuleNotFoundError as _missing:  # a Python without KernelWatch's packages: one line, not a traceback
    from kernelwatch.dependencies import command_named, exit_missing

    exit_missing(_missing, command_named(sys.argv[1:], COMMANDS))

from kernelwatch.options import CommandError  # noqa: E402 - after the check that click is there

_NO_ARGS = getattr(click.exceptions, "NoArgsIsHelpError", ())


class OneLineUsageError(CommandError):
    """A usage error in the one form of every error (click prints three lines: usage, a hint, the error),
    exit status 2, with where to read the usage."""

    def __init__(self, error: click.UsageError) -> None:
        super().__init__(error.format_message(), ctx=error.ctx)
        self.message += f" (see {self.command_path} --help)"


class LazyGroup(click.Group):
    """A group whose subcommands live in modules named by ``COMMANDS`` (attribute ``command``)."""

    def make_context(self, *args, **kwargs) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except _NO_ARGS:  # bare `kernelwatch`: the help is the answer
            raise
        except click.UsageError as exc:
            raise OneLineUsageError(exc) from None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise OneLineUsageError(exc) from None

    def main(self, *args, **kwargs):
        from kernelwatch.dependencies import command_named, exit_missing

        try:
            try:
                from kernelwatch.output import tolerant_streams

                tolerant_streams()
            except ModuleNotFoundError:  # --help still answers; a command that needs the package says which
                pass
            return super().main(*args, **kwargs)
        except ModuleNotFoundError as exc:  # a package a command imports when it runs (sqlalchemy, psycopg...)
            argv = kwargs.get("args") or (args[0] if args else None) or sys.argv[1:]
            exit_missing(exc, command_named(list(argv), COMMANDS))

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        entry = COMMANDS.get(name)
        if entry is None:
            return None
        return importlib.import_module(entry[0]).command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Listing help must not import every subcommand (and torch with the collector's).
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][1]) for name in self.list_commands(ctx)])


@click.group(
    "kernelwatch", cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(package_name="kernelwatch", message="kernelwatch %(version)s")
def main() -> None:
    """KernelWatch: are your Triton kernels still right and still fast, commit after commit?

    Collect accuracy and performance of every kernel into a database (SQLite by default,
    PostgreSQL when CI runners share one), review them in the dashboard, gate merges on them.
    """


if __name__ == "__main__":
    main()
