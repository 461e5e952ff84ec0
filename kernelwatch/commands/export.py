"""`kernelwatch export RUN_ID -o FILE`."""

from __future__ import annotations

from pathlib import Path

import click

from kernelwatch.options import clean_errors, db_option, open_readonly, output_file


@click.command("export")
@click.argument("run_id")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    callback=output_file,
    required=True,
    help="File to write ('-' for stdout).",
)
@db_option
@clean_errors
def command(run_id: str, output: Path, db_url: str | None) -> None:
    """Write one stored run (id or unique id prefix) as a kernelwatch.run/1 artifact."""
    from kernelwatch.store.artifact import dumps, write_artifact
    from kernelwatch.store.export import export_run, find_run_id
    from kernelwatch.store.files import replaced_link_note

    engine = open_readonly(db_url)
    doc = export_run(engine, find_run_id(engine, run_id))
    if str(output) == "-":
        click.echo(dumps(doc), nl=False)
    else:
        link = write_artifact(doc, output)
        if link is not None:
            click.echo(f"kernelwatch export: {replaced_link_note(output, link)}", err=True)
        click.echo(f"wrote {output}")
