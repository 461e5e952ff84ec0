"""`kernelwatch schema`: the JSON Schema of kernelwatch.run/1, for CI authors' own validators."""

from __future__ import annotations

import json

import click

from kernelwatch.options import clean_errors


@click.command("schema")
@clean_errors
def command() -> None:
    """Print the JSON Schema (draft 2020-12) of the run artifact, kernelwatch.run/1.

    It is generated from the same typed model `kernelwatch ingest` validates with. Rules that JSON
    Schema cannot state (unique case keys, references to listed cases, finished_at after
    started_at, no NUL in text, duplicate JSON keys) are checked by `kernelwatch ingest` too.
    """
    from kernelwatch.store.schema import json_schema

    click.echo(json.dumps(json_schema(), indent=1, sort_keys=True))
