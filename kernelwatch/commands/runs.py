"""`kernelwatch runs`."""

from __future__ import annotations

import click

from kernelwatch.options import clean_errors, db_option, open_readonly

WIDTH = 100  # the default table's lines at most (branch and hardware names are cut with "…" past it)
RUN_COLUMNS = ("id", "commit", "branch", "hardware", "status", "started", "perf", "acc", "prof")
WIDE_COLUMNS = ("id", "commit", "branch", "hardware", "status", "started", "holds")
JSON_COLUMNS = (
    "id",
    "commit",
    "branch",
    "hardware",
    "trigger",
    "status",
    "started",
    "device_count",
    "kernels",
    "perf",
    "accuracy",
    "profiler",
)


@click.command("runs")
@click.option("--hardware", default=None, help="Only runs on hardware whose name contains this or fingerprint prefix.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many runs, newest first.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--wide",
    is_flag=True,
    help=f"Table: every kernel and the device count of each run, names uncut (the default fits {WIDTH} columns).",
)
@db_option
@clean_errors
def command(hardware: str | None, limit: int | None, fmt: str, wide: bool, db_url: str | None) -> None:
    """List stored runs, newest first, with what each holds: kernel timings (perf), gating accuracy cases
    (acc), profiler metrics (prof); with --wide, its kernels and devices."""
    from kernelwatch.output import render
    from kernelwatch.store.queries import contents_text, list_runs, run_contents

    engine = open_readonly(db_url)
    records = list_runs(engine, hardware=hardware, limit=limit)
    contents = run_contents(engine, [r["id"] for r in records])
    for r in records:
        r.update(contents[r["id"]])
        r["holds"] = contents_text(contents[r["id"]], r["device"], r["device_count"], names=True)
        if fmt == "table":
            r["id"] = r["id"][:8]
            r["started"] = (r["started"] or "")[:16].replace("T", " ")
            r["commit"] = r["commit"][:8] + ("+dirty" if r["dirty"] else "")
            r.update(acc=r["accuracy"], prof=r["profiler"])
            for count in ("perf", "acc", "prof"):
                r[count] = r[count] or None  # "-": none of that kind
    if fmt == "json":
        click.echo(render(records, JSON_COLUMNS, fmt))
    elif wide:
        click.echo(render(records, WIDE_COLUMNS, fmt))
    else:
        click.echo(render(records, RUN_COLUMNS, fmt, width=WIDTH, shrink=("branch", "hardware")))
