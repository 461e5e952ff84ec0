"""`kernelwatch doctor`: what a run on this host will use, and one line per missing piece."""

from __future__ import annotations

import json
import sys

import click

from kernelwatch.options import clean_errors, db_option, project_option


@click.command("doctor")
@click.option(
    "--device",
    type=click.Choice(["auto", "cuda", "npu", "cpu"]),
    default="auto",
    show_default=True,
    help="The device the run will ask for.",
)
@click.option("--profile", is_flag=True, help="The run will record profiler counters: ncu / msprof are required.")
@click.option("--no-db", is_flag=True, help="Do not check the database (a runner that only writes --out).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@db_option
@project_option
@clean_errors
def command(device: str, profile: bool, no_db: bool, fmt: str, db_url: str | None) -> None:
    """Check the device, Triton, CANN, compiler, profiler, the project's kernels and database a run needs.

    Exits 0 when everything required is there, 1 otherwise, with one line on stderr per missing piece.
    """
    from kernelwatch.collect.doctor import diagnose

    checks = diagnose(device=device, profile=profile, db_url=db_url, check_db=not no_db)
    if fmt == "json":
        click.echo(json.dumps([c.as_dict() for c in checks], indent=2))
    else:
        for c in checks:
            status = "ok" if c.ok else ("FAIL" if c.required else "--")
            click.echo(f"{status:<5} {c.name:<17} {c.value}")
    failed = [c for c in checks if c.failed]
    for c in failed:
        click.echo(f"kernelwatch doctor: {c.name}: {c.reason}", err=True)
    sys.exit(1 if failed else 0)
