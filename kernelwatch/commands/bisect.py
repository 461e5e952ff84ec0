"""`kernelwatch bisect CASE --hardware H`."""

from __future__ import annotations

import click

from kernelwatch.options import clean_errors, db_option, open_readonly


@click.command("bisect")
@click.argument("case")
@click.option("--hardware", required=True, help="Device name substring or fingerprint prefix.")
@click.option("--implementation", default="triton", show_default=True)
@click.option("--min-effect", type=click.FloatRange(0.0, 10.0, min_open=True), default=0.05, show_default=True)
@db_option
@clean_errors
def command(case: str, hardware: str, implementation: str, min_effect: float, db_url: str | None) -> None:
    """Where did a change in CASE's time enter the history on HARDWARE? Prints the commits to re-run."""
    from ci.bisect import find_hardware, rerun_command, steps
    from kernelwatch.output import terminal

    engine = open_readonly(db_url)
    hw = find_hardware(engine, hardware)
    count, found, note = steps(engine, case, hw["fingerprint"], implementation, min_effect)
    if not found and note:
        click.echo(terminal(f"{note}; seen in {count} runs of {case} on {hw['device_name']}"))
        return
    if not found:
        click.echo(terminal(f"no change of {min_effect:.0%} or more in {count} runs of {case} on {hw['device_name']}"))
        return
    for step in found:
        click.echo(f"a change of {step.point.change:+.1%} (p={step.point.pvalue:.1e}) entered between "
                   f"{step.good[:12]} and {step.bad[:12]}")
        for sha in step.commits:
            command = rerun_command(sha, case, vendor=hw["vendor"])
            click.echo(terminal(f"  {command}" if command else f"  {sha[:12]}: not a git sha, no command to re-run it"))
