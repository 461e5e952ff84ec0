"""`kernelwatch show RUN_ID`."""

from __future__ import annotations

from typing import Any

import click

from kernelwatch.kernels.names import SHORT_LABELS as IMPL_SHORT
from kernelwatch.options import FORMATS, clean_errors, closest, db_option, fail, open_readonly

WIDTH = 120


@click.command("show")
@click.argument("run_id")
@click.option(
    "--kernel",
    "kernels",
    multiple=True,
    metavar="NAME",
    help="Only this kernel's cases (repeatable; `kernelwatch runs --wide` lists a run's kernels).",
)
@click.option("--match", default=None, metavar="TEXT", help="Only cases whose key contains TEXT.")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
@db_option
@clean_errors
def command(run_id: str, kernels: tuple[str, ...], match: str | None, fmt: str, db_url: str | None) -> None:
    """Print one run's results: one record per case x implementation.

    The table starts with the run (commit, branch, hardware, status, what it holds) and groups the cases by
    kernel, each case on its own line and its implementations under it, times in µs (as on the dashboard).
    JSON and CSV keep the stored fields (times in ms). --kernel and --match keep the cases asked for."""
    from kernelwatch.output import render, terminal
    from kernelwatch.store.export import find_run_id
    from kernelwatch.store.queries import RESULT_FIELDS, contents_text, run_contents, run_info, run_results

    engine = open_readonly(db_url)
    rid = find_run_id(engine, run_id)
    records = _selected(run_results(engine, rid), rid, kernels, match)
    if fmt != "table":
        click.echo(render(records, RESULT_FIELDS, fmt))
        return
    run = run_info(engine, rid)
    holds = contents_text(run_contents(engine, [rid])[rid], run["device"], run["device_count"])
    when = (run["started"] or "-")[:16].replace("T", " ")
    click.echo(
        terminal(
            f"run {run['id']} · commit {run['commit'][:12]} ({run['branch']}) · {run['status']}"
            + (" · SYNTHETIC" if run["synthetic"] else "")
        )
    )
    click.echo(terminal(f"{run['hardware']} · started {when} UTC · {holds}"))
    click.echo(
        "times in µs: median (p20-p80); % of peak; speedup over eager; budget = accuracy error budget (<= 1 passes)"
    )
    for line in table_lines(records):
        click.echo(terminal(line))


def _selected(
    records: list[dict[str, Any]], run_id: str, kernels: tuple[str, ...], match: str | None
) -> list[dict[str, Any]]:
    """The records of the kernels and cases asked for; a kernel the run lacks, or a --match no case of it
    contains, stops the command with the run's closest names."""
    held = sorted({r["kernel"] for r in records})
    for kernel in kernels:
        if kernel not in held:
            near = closest(kernel, held)
            fail(
                f"run {run_id[:8]} has no kernel {kernel!r}"
                + (f" (closest: {', '.join(near)})" if near else "")
                + f"; it holds {', '.join(held) or 'no results'}"
            )
    if kernels:
        records = [r for r in records if r["kernel"] in kernels]
    if match is not None:
        chosen = [r for r in records if match in r["case"]]
        if not chosen:
            keys = sorted({r["case"] for r in records})
            near = closest(match, keys)
            fail(
                f"no case of run {run_id[:8]}{' in ' + ', '.join(kernels) if kernels else ''} contains {match!r} "
                f"({len(keys)} cases" + (f"; closest: {', '.join(near)})" if near else ")")
            )
        records = chosen
    return records


def _num(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table_lines(records: list[dict[str, Any]]) -> list[str]:
    """The records as lines of at most WIDTH characters: a kernel heading, each case's key (without the kernel)
    on its own line, then one indented row per implementation."""
    head = (
        f"    {'impl.':<11} {'median':>9} {'p20-p80':>19} {'% peak':>7} {'x eager':>8} {'budget':>7}  {'ok':<4}  notes"
    )
    out, kernel, case = [], None, None
    order = {impl: i for i, impl in enumerate(IMPL_SHORT)}
    records = sorted(
        records, key=lambda r: (r["kernel"], r["case"], order.get(r["implementation"], len(order)), r["implementation"])
    )
    for r in records:
        if r["kernel"] != kernel:
            kernel, case = r["kernel"], None
            out += ["", kernel, head]
        if r["case"] != case:
            case = r["case"]
            key = case[len(kernel) + 1 :] if case.startswith(kernel + "/") else case
            out.append(f"  {key}"[:WIDTH])
        us = {k: None if r[k] is None else r[k] * 1e3 for k in ("median_ms", "p20_ms", "p80_ms")}
        spread = "-" if us["p20_ms"] is None else f"{us['p20_ms']:.4g}-{us['p80_ms']:.4g}"
        ok = "-" if r["passed"] is None else "yes" if r["passed"] else "NO"
        notes = (["target missed"] if r["target_met"] is False else []) + (
            [" ".join(str(r["error"]).split())] if r["error"] else []
        )
        line = (
            f"    {IMPL_SHORT.get(r['implementation'], r['implementation'])[:11]:<11} "
            f"{_num(us['median_ms'], '.4g'):>9} {spread:>19} {_num(r['pct_peak'], '.1f'):>7} "
            f"{_num(r['speedup_vs_eager'], '.2f'):>8} {_num(r['error_budget'], '.3g'):>7}  {ok:<4}  " + "; ".join(notes)
        )
        out.append(line[:WIDTH].rstrip())
    return out
