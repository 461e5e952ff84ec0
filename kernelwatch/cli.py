"""The root command. Subcommands are registered by name and imported only when used, so `kernelwatch
ingest` never imports torch and a collector-only host without the dashboard's packages still runs."""

from __future__ import annotations

import importlib

import click

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


_NO_ARGS = getattr(click.exceptions, "NoArgsIsHelpError", ())


class OneLineUsageError(click.ClickException):
    """A usage error as one line on stderr (click prints three: usage, a hint, the error), exit status 2."""

    exit_code = 2

    def __init__(self, error: click.UsageError) -> None:
        super().__init__(error.format_message())
        self.command_path = error.ctx.command_path if error.ctx is not None else "kernelwatch"

    def show(self, file=None) -> None:  # noqa: ANN001 - click's signature
        from kernelwatch.output import terminal

        click.echo(terminal(f"{self.command_path}: error: {self.message} (see {self.command_path} --help)"),
                   err=True)


class LazyGroup(click.Group):
    """A group whose subcommands live in modules named by ``COMMANDS`` (attribute ``command``)."""

    def make_context(self, *args, **kwargs) -> click.Context:  # noqa: ANN002, ANN003
        try:
            return super().make_context(*args, **kwargs)
        except _NO_ARGS:  # bare `kernelwatch`: the help is the answer
            raise
        except click.UsageError as exc:
            raise OneLineUsageError(exc) from None

    def invoke(self, ctx: click.Context):  # noqa: ANN201
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise OneLineUsageError(exc) from None

    def main(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201 - click's signature
        from kernelwatch.output import tolerant_streams

        tolerant_streams()
        return super().main(*args, **kwargs)

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


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="kernelwatch", message="kernelwatch %(version)s")
def main() -> None:
    """KernelWatch: are your Triton kernels still right and still fast, commit after commit?

    Collect accuracy and performance of every kernel into a database (SQLite by default,
    PostgreSQL when CI runners share one), review them in the dashboard, gate merges on them.
    """


if __name__ == "__main__":
    main()
