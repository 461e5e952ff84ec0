"""`kernelwatch runs`."""

from __future__ import annotations

import click

from kernelwatch.options import clean_errors, db_option, open_readonly

RUN_COLUMNS = ("id", "commit", "branch", "hardware", "status", "started", "holds")
JSON_COLUMNS = ("id", "commit", "branch", "hardware", "trigger", "status", "started", "device_count", "kernels",
                "perf", "accuracy", "profiler")


@click.command("runs")
@click.option("--hardware", default=None, help="Only runs on hardware whose name contains this or fingerprint prefix.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many runs, newest first.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@db_option
@clean_errors
def command(hardware: str | None, limit: int | None, fmt: str, db_url: str | None) -> None:
    """List stored runs, newest first, with what each holds: kernel timings (perf), gating accuracy cases,
    profiler metrics, its kernels and devices."""
    from db.queries import contents_text, list_runs, run_contents
    from kernelwatch.output import render

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
    click.echo(render(records, RUN_COLUMNS if fmt == "table" else JSON_COLUMNS, fmt))
