"""`kernelwatch ack CASE --hardware H --commit C --reason TEXT` and `kernelwatch ack --list`."""

from __future__ import annotations

import getpass

import click

from kernelwatch.options import FORMATS, check_case, clean_errors, db_option, fail, open_readonly

ACK_COLUMNS = ("case", "hardware", "commit", "reason", "author", "created_at")


@click.command("ack")
@click.argument("case", required=False)
@click.option("--hardware", default=None, help="Device name, or fingerprint prefix (see `kernelwatch runs`).")
@click.option("--commit", default=None, help="The commit from which the new time is expected (sha or prefix).")
@click.option("--reason", default=None, help="Why the change is expected (one line).")
@click.option("--author", default=None, help="Who acknowledges it (default: the login name).")
@click.option("--list", "listing", is_flag=True, help="List acknowledged changes (CASE and --hardware filter).")
@click.option("--format", "fmt", type=FORMATS, default="table", show_default=True, help="Output of --list.")
@db_option
@clean_errors
def command(
    case: str | None,
    hardware: str | None,
    commit: str | None,
    reason: str | None,
    author: str | None,
    listing: bool,
    fmt: str,
    db_url: str | None,
) -> None:
    """Record that CASE's change in time on HARDWARE from COMMIT on is expected: the gate reports it and no
    longer fails on it; the dashboard marks it. The dashboard itself never writes."""
    from kernelwatch.output import render, terminal
    from kernelwatch.store.ack import AckError, add_ack, find_hardware
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.queries import acks

    engine = open_readonly(db_url)  # a missing or unmigrated database is refused, never created
    if case is not None:
        check_case(engine, case)
    try:
        if listing:
            fingerprint = None
            if hardware:
                from sqlalchemy.orm import Session

                with Session(engine) as s:
                    fingerprint = find_hardware(s, hardware).fingerprint
            rows = acks(engine, fingerprint, case)
            for r in rows:
                r["commit"] = r["commit"][:12]
            click.echo(render(rows, ACK_COLUMNS, fmt))
            return
        missing = [
            name
            for name, value in (("CASE", case), ("--hardware", hardware), ("--commit", commit), ("--reason", reason))
            if value is None
        ]
        if missing:
            raise AckError(f"missing {', '.join(missing)} (or give --list)")
        engine.dispose()
        writer = open_database(db_url, migrate=False)
        row = add_ack(writer, case, hardware, commit, reason, author or _login())
    except AckError as exc:
        fail(str(exc))
    click.echo(terminal(f"acknowledged {row['case']} on {row['hardware']} from {row['commit'][:12]}: {row['reason']}"))


def _login() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None
