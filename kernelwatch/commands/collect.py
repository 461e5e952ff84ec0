"""`kernelwatch collect`: run the suites and store the run (database or artifact file)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
from click.core import ParameterSource

from kernelwatch.options import clean_errors, db_option

# What --resume may be given with: where the recovered run goes, and nothing about what to measure.
RESUME_COMPANIONS = {"resume", "out", "db_url", "no_progress"}


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v for value in values for v in value.split(",") if v)


def _store(doc, out: Path | None, db_url: str | None) -> None:  # noqa: ANN001
    from db.artifact import write_artifact

    if out is not None:
        write_artifact(doc, out)
        click.echo(f"wrote {out}")
    if out is None or db_url:
        from db.engine import open_database
        from db.ingest import ingest_documents

        (outcome,) = ingest_documents(open_database(db_url), [("collect", doc)])
        click.echo(f"stored run {outcome.run_id} ({outcome.results} results)")


def _store_keeping_journal(doc, out: Path | None, db_url: str | None, journal: Path) -> float:  # noqa: ANN001
    """Store the run; remove its journal only once it is stored. Returns the seconds the writing took."""
    from db.journal import remove_journal

    start = time.monotonic()
    try:
        _store(doc, out, db_url)
    except BaseException as exc:
        if journal.exists():
            click.echo(f"kernelwatch: the run is kept in {journal}: store it with "
                       f"`kernelwatch collect --resume {journal}` (with --out or --db)", err=True)
        if isinstance(exc, OSError):  # e.g. a database path that cannot be made
            raise click.ClickException(f"cannot store the run: {exc.strerror or exc}"
                                       f"{f' ({exc.filename})' if exc.filename else ''}") from None
        raise
    remove_journal(journal)
    return time.monotonic() - start


def _summary(doc) -> None:  # noqa: ANN001
    acc = doc.accuracy
    failed = [a for a in acc if not a.passed]
    click.echo(f"run {doc.run.id}: {doc.run.status}; accuracy {len(acc) - len(failed)}/{len(acc)} passed; "
               f"{len(doc.perf)} perf results")
    for a in failed[:20]:
        click.echo(f"  FAIL {a.case}: budget {a.error_budget} {a.error or ''}".rstrip())
    sys.exit({"complete": 0, "partial": 3}.get(doc.run.status, 1))


@click.command("collect")
@click.option("--kernels", "-k", multiple=True, metavar="NAME[,NAME]",
              help="Kernels to run (default: all). Repeat or separate with commas.")
@click.option("--suite", "suites", default="accuracy,perf", show_default=True, metavar="accuracy,perf",
              help="Which suites to run.")
@click.option("--device", type=click.Choice(["auto", "cuda", "npu", "cpu"]), default="auto", show_default=True,
              help="auto: cuda if visible, else npu if torch_npu sees one, else cpu (interpreter, accuracy only).")
@click.option("--devices", type=click.Choice(["one", "all"]), default="one", show_default=True,
              help="all: shard the cases over every device of the host, one worker process per device.")
@click.option("--match", default=None, metavar="TEXT", help="Only cases whose key contains TEXT.")
@click.option("--case-timeout", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Seconds one case may take (compilation included) before it is recorded as an error.")
@click.option("--trigger", type=click.Choice(["manual", "pr", "nightly"]), default="manual", show_default=True)
@click.option("--ci-job", default=None, envvar="KERNELWATCH_CI_JOB", help="CI job reference (URL or id).")
@click.option("--seed", type=int, default=None, help="Run seed for the accuracy inputs (default: fresh each run).")
@click.option("--profile", is_flag=True, help="Also record profiler counters per perf case (ncu / torch_npu).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the run artifact here instead of (or, with --db, besides) the database.")
@click.option("--resume", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="JOURNAL",
              help="Store the run an interrupted collect left in its journal (OUT.journal, or "
                   ".kw-journal/RUN.jsonl), as far as it got; measures nothing. Goes with --out / --db only.")
@click.option("--extra-kernels", multiple=True, metavar="MODULE", hidden=True,
              help="Import kernel specs from extra modules (tests plant broken kernels so).")
@click.option("--cpu-perf", is_flag=True, hidden=True,
              help="Run the perf suite on the CPU interpreter too (tests of the perf path; the numbers mean nothing).")
@click.option("--no-progress", is_flag=True, help="No progress bar (or progress lines, when stderr is not a terminal).")
@db_option
@clean_errors
@click.pass_context
def command(ctx: click.Context, kernels, suites, device, devices, match, case_timeout, trigger, ci_job, seed,  # noqa: ANN001
            profile, out, resume, extra_kernels, cpu_perf, no_progress, db_url) -> None:
    """Run accuracy and perf suites and write one run.

    Without --out the run goes to the database; with --out it is written as a kernelwatch.run/1
    artifact (load it later with `kernelwatch ingest`); give both to do both. Each finished case is
    appended at once to a journal (OUT.journal beside the artifact, else .kw-journal/RUN-ID.jsonl),
    removed once the run is stored: after a kill, `kernelwatch collect --resume JOURNAL` (or
    `kernelwatch ingest JOURNAL`) stores what had finished as a partial run. The exit status is 0
    when the run is complete, 3 when some cases errored or it was cut short (partial run) and 1 when
    it failed. A time-by-phase summary goes to stderr at the end.
    """
    if resume is not None:
        given = [p for p in ctx.command.params if p.name not in RESUME_COMPANIONS
                 and ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE]
        if given:
            flag = max(given[0].opts, key=len)
            raise click.UsageError(f"--resume stores a journal's run as it is; it cannot go with {flag}")
        from db.journal import recover

        doc = recover(resume)
        _store_keeping_journal(doc, out, db_url, resume)
        click.echo(f"recovered {len(doc.accuracy)} accuracy and {len(doc.perf)} perf results from {resume}")
        _summary(doc)

    from collector.collect import Options, format_phases, reproduce_command, run_collection
    from db.journal import journal_path
    from db.schema import new_run_id

    if cpu_perf and device != "cpu":
        raise click.BadParameter("times the perf suite in the CPU interpreter: it needs --device cpu",
                                 param_hint="--cpu-perf")
    suite_list = _split((suites,))
    bad = [s for s in suite_list if s not in ("accuracy", "perf")]
    if bad or not suite_list:
        name = bad[0] if bad else suites
        raise click.BadParameter(f"unknown suite {name!r}: use accuracy, perf", param_hint="--suite")
    run_id = new_run_id()
    journal = journal_path(out, run_id)
    opts = Options(kernels=_split(kernels), suites=suite_list, device=device, all_devices=devices == "all",
                   case_timeout_s=case_timeout, trigger=trigger, ci_job=ci_job, extra_modules=tuple(extra_kernels),
                   match=match, seed=seed, profile=profile, progress=not no_progress,
                   command=reproduce_command(sys.argv[1:]), time_on_cpu=cpu_perf, run_id=run_id, journal=journal)
    try:
        doc = run_collection(opts)
    except (ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None
    writing = _store_keeping_journal(doc, out, db_url, journal)
    if doc.run.phases_s:
        click.echo(format_phases(doc.run.phases_s, writing), err=True)
    _summary(doc)
