"""`kernelwatch ingest FILE...`."""

from __future__ import annotations

from pathlib import Path

import click

from kernelwatch.options import clean_errors, db_option


@click.command("ingest")
# No checks by click: the loader names a missing, unreadable or folder path in the one-line form of every refusal.
@click.argument("files", nargs=-1, required=True, type=click.Path(readable=False, path_type=Path))
@db_option
@clean_errors
def command(files: tuple[Path, ...], db_url: str | None) -> None:
    """Load run artifacts (kernelwatch.run/1 JSON) into the database.

    A collector's journal (OUT.journal or .kw-journal/RUN-ID.jsonl, left by a collect that was
    killed) is accepted too: the run it recovers, a partial one, is stored.

    Every file is validated completely before the database is even opened, and all of them are
    written in one transaction: either every run is stored or none is. Re-ingesting a run already
    stored changes nothing; the same run id with different content is an error. Confirmations an
    artifact carries are never stored (only `kernelwatch confirm` stores them): a line says so.
    """
    from kernelwatch.collect.ceilings import fill_missing
    from kernelwatch.output import terminal
    from kernelwatch.store.access import check_writers
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.ingest import ingest_documents, load_files

    docs = load_files(files)
    check_writers(docs)
    engine = open_database(db_url)
    for outcome in ingest_documents(engine, docs):
        click.echo(terminal(f"{outcome.status:9s} {outcome.run_id}  {outcome.results} results  ({outcome.source})"))
        if outcome.confirmations_ignored:
            n = outcome.confirmations_ignored
            click.echo(
                terminal(
                    f"kernelwatch ingest: {outcome.source}: {n} confirmation{'s' if n != 1 else ''} not stored: only "
                    "`kernelwatch confirm` stores confirmations (the run itself is stored)"
                ),
                err=True,
            )
    fill_missing(engine)  # runs from before cases recorded their ceiling: from the kernels' specs
