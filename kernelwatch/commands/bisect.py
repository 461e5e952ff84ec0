"""`kernelwatch bisect CASE --hardware H`."""

from __future__ import annotations

import click

from kernelwatch.kernels.names import KERNEL_IMPL
from kernelwatch.options import Effect, check_case, clean_errors, db_option, open_readonly

SHOWN_COMMITS = 20  # re-run commands printed per range; the rest are counted


@click.command("bisect")
@click.argument("case")
@click.option("--hardware", required=True, help="Device name substring or fingerprint prefix.")
@click.option("--implementation", default=KERNEL_IMPL, show_default=True)
@click.option(
    "--min-effect",
    type=Effect(0.0, 10.0, min_open=True),
    default=0.05,
    show_default=True,
    help="Smallest change that counts: 0.05 or 5%.",
)
@db_option
@clean_errors
def command(case: str, hardware: str, implementation: str, min_effect: float, db_url: str | None) -> None:
    """Where did a change in CASE's time enter the history on HARDWARE? Prints every step with its size and commits,
    the newest change (the one Triage flags on the newest run) and whether the history can test it yet, and where the
    timing method changed (never a step). Prints the commits to re-run."""
    from kernelwatch.gate.bisect import MIN_SEGMENT, find_hardware, steps
    from kernelwatch.output import terminal

    engine = open_readonly(db_url)
    check_case(engine, case)
    hw = find_hardware(engine, hardware)
    found = steps(engine, case, hw["fingerprint"], implementation, min_effect)
    for edge in found.edges:
        click.echo(terminal(f"{edge.note}; seen in {found.runs} runs of {case} on {hw['device_name']}"))
        click.echo(
            terminal(f"  range: {edge.good[:12]}..{edge.bad[:12]} (the last run before the change, the first after it)")
        )
        have = edge.runs_before if edge.short_side == "before" else edge.runs_after
        if edge.to_repeat in found.synthetic:
            click.echo(
                f"  it cannot be tested: {edge.to_repeat[:12]} is a SYNTHETIC run's commit, nothing to re-measure "
                f"({MIN_SEGMENT} runs {edge.short_side} the change are needed, {have} so far)"
            )
        else:
            click.echo(
                f"  to tell a step from noise, measure {edge.to_repeat[:12]} again ({MIN_SEGMENT} runs "
                f"{edge.short_side} the change are needed, {have} so far):"
            )
            _rerun([edge.to_repeat], case, hw["vendor"])
        inside = [sha for sha in edge.commits if sha != edge.bad]
        if inside:
            click.echo(f"  to find the commit within the range, re-run the {len(inside)} between them:")
            _rerun(inside, case, hw["vendor"])
    if not found.steps and not found.edges:
        click.echo(
            terminal(f"no change of {min_effect:.0%} or more in {found.runs} runs of {case} on {hw['device_name']}")
        )
    if found.steps and found.edges:
        click.echo(f"earlier steps ({len(found.steps)}):")
    for step in reversed(found.steps):
        click.echo(
            f"a change of {step.point.change:+.1%} (p={step.point.pvalue:.1e}; "
            f"{step.point.before * 1e3:.4g} -> {step.point.after * 1e3:.4g} us) entered between "
            f"{step.good[:12]} and {step.bad[:12]}"
        )
        _rerun(step.commits, case, hw["vendor"], indent="  ")
    for m in found.methods:
        click.echo(
            f"timing changed between {m.good[:12]} and {m.bad[:12]}: {m.before} per sample before, {m.after} "
            "after (a new measurement, never read as a step; steps are looked for on each side)"
        )


def _rerun(commits: list[str], case: str, vendor: str, indent: str = "    ") -> None:
    """One re-run command per commit (the first :data:`SHOWN_COMMITS`), each value quoted for the shell."""
    from kernelwatch.gate.bisect import rerun_command
    from kernelwatch.output import terminal

    for sha in commits[:SHOWN_COMMITS]:
        command = rerun_command(sha, case, vendor=vendor)
        click.echo(
            terminal(f"{indent}{command}" if command else f"{indent}{sha[:12]}: not a git sha, no command to re-run it")
        )
    if len(commits) > SHOWN_COMMITS:
        click.echo(f"{indent}... and {len(commits) - SHOWN_COMMITS} more commits")
