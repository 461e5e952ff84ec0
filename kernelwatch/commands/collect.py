"""`kernelwatch collect`: run the suites and store the run (database or artifact file)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import NoReturn

import click
from click.core import ParameterSource

from kernelwatch.options import Finite, clean_errors, db_option, expected_message, fail, output_file, project_option

# What --resume may be given with: where the recovered run goes, and nothing about what to measure.
RESUME_COMPANIONS = {"resume", "out", "db_url", "no_progress"}
COLLECT_FAILED = 1  # the exit status of a run that failed or could not be stored (README: `collect` exits ...)


class UsageError(click.ClickException):
    """Nothing was run: the kernels or cases asked for do not exist (exit status 2, one line)."""

    exit_code = 2


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v for value in values for v in value.split(",") if v)


def _store(doc, out: Path | None, db_url: str | None, written: list[str]) -> None:
    """Write the run to every destination asked for (an artifact, the database), each tried even when
    another fails; ``written`` gets those that took it. Raises the first failure."""
    from kernelwatch.store.artifact import write_artifact
    from kernelwatch.store.files import replaced_link_note

    failures: list[Exception] = []
    if out is not None:
        try:
            link = write_artifact(doc, out)
            if link is not None:
                click.echo(f"kernelwatch collect: {replaced_link_note(out, link)}", err=True)
            click.echo(f"wrote {out}")
            written.append(str(out))
        except Exception as exc:  # the database may still take it; the first failure is raised
            failures.append(exc)
    if out is None or db_url:
        from kernelwatch.store.access import check_writers
        from kernelwatch.store.engine import open_database
        from kernelwatch.store.ingest import ingest_documents

        try:
            check_writers([("collect", doc)])
            (outcome,) = ingest_documents(open_database(db_url), [("collect", doc)])
            click.echo(f"stored run {outcome.run_id} ({outcome.results} results)")
            written.append("the database")
        except Exception as exc:
            failures.append(exc)
    if failures:
        raise failures[0]


def _check_destination(out: Path | None, db_url: str | None, journal: Path | None = None) -> None:
    """Refuse a destination that cannot take the run before measuring anything (the run would survive in
    its journal, but after an hour's wait): the journal's folder can be written (checked first: a read-only
    working folder must not leave a database created and migrated behind), the database opens (created and
    migrated if new), the artifact's folder exists."""
    if journal is not None:
        folder = journal.absolute().parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not os.access(folder, os.W_OK | os.X_OK):
            raise click.ClickException(
                f"{journal.parent}: cannot write the run's journal there ({folder} is "
                "read-only); run from a folder you can write, nothing was created"
            )
    if out is not None:
        from kernelwatch.store.artifact import ArtifactError, artifact_target

        try:
            artifact_target(out)
        except ArtifactError as exc:
            raise click.BadParameter(str(exc), param_hint="--out") from None
    if out is None or db_url:
        from kernelwatch.store.engine import open_database

        open_database(db_url).dispose()


def _store_keeping_journal(doc, out: Path | None, db_url: str | None, journal: Path) -> float:
    """Store the run; remove its journal only once it is stored. Returns the seconds the writing took.

    When the run cannot be stored (a full disk, a database gone) every finished result is kept where
    something can take it, and stderr says exactly what is where (:func:`_keep`)."""
    from kernelwatch.store.journal import remove_journal

    start = time.monotonic()
    written: list[str] = []
    try:
        _store(doc, out, db_url, written)
    except BaseException as exc:
        _keep(doc, journal, written)
        if isinstance(exc, OSError):  # e.g. a database path that cannot be made
            fail(
                f"cannot store the run: {exc.strerror or exc}{f' ({exc.filename})' if exc.filename else ''}",
                COLLECT_FAILED,
            )
        message = expected_message(exc) if isinstance(exc, Exception) else None
        if message is not None:  # measured but not stored: the collect failed (exit 1), not its usage
            fail(message, COLLECT_FAILED)
        raise
    remove_journal(journal)
    return time.monotonic() - start


def _results(doc) -> int:
    return len(doc.accuracy) + len(doc.perf)


def _journal_results(journal: Path) -> tuple[int, bool] | None:
    """How many results the journal on disk holds and whether its end line is there (None: no readable
    journal). A full disk stops the writes, so it may hold fewer than the run."""
    from kernelwatch.store.artifact import ArtifactError
    from kernelwatch.store.journal import Journal

    if not journal.is_file():
        return None
    try:
        kept = Journal(journal)
    except ArtifactError:
        return None
    return sum(len(r["accuracy"]) + len(r["perf"]) for r in kept.results), kept.end is not None


def _fallback_folders() -> list[Path]:
    """Where a run that could not be stored goes: $TMPDIR, the system's temporary folder, then
    ~/.cache/kernelwatch (often another file system than a full working folder). Each is found on its own
    and tried in turn: none may stop the others (``tempfile.gettempdir()`` raises when every temporary
    folder is full, and ``Path.home()`` when there is no home)."""
    import tempfile

    folders = [Path(os.environ["TMPDIR"])] if os.environ.get("TMPDIR") else []
    for where in (tempfile.gettempdir, lambda: Path.home() / ".cache" / "kernelwatch"):
        try:
            folders.append(Path(where()))
        except (OSError, RuntimeError, KeyError):
            continue
    return list(dict.fromkeys(f.absolute() for f in folders))


def _keep(doc, journal: Path, written: list[str]) -> None:
    """After a failed store: say where every finished result is, writing the run to a fallback folder
    (gzip, :func:`_fallback_folders`) when neither a destination nor the journal holds all of it. Never
    says the journal holds the run when it does not."""
    from kernelwatch.store.artifact import ArtifactError, write_artifact
    from kernelwatch.store.journal import remove_journal

    total = _results(doc)
    read_back = _journal_results(journal)
    in_journal = read_back[0] if read_back is not None else None
    whole = read_back == (total, True)
    resume = f"`kernelwatch collect --resume {journal}` (with --out or --db)"
    if written:
        where = " and ".join(written)
        click.echo(
            f"kernelwatch: all {total} finished results are in {where}"
            + (f"; the run is also kept in {journal}: store it with {resume}" if whole else ""),
            err=True,
        )
        return
    if whole:
        click.echo(f"kernelwatch: the run is kept in {journal}: store it with {resume}", err=True)
        return
    tried: list[str] = []
    for folder in _fallback_folders():
        target = folder / f"kernelwatch-{doc.run.id}.json.gz"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            write_artifact(doc, target)
        except (ArtifactError, OSError) as exc:
            tried.append(str(exc) if isinstance(exc, ArtifactError) else f"{folder}: {exc.strerror or exc}")
            continue
        partial = (
            f"; its unfinished journal {journal} ({in_journal} of them) was removed" if in_journal is not None else ""
        )
        if in_journal is not None:
            remove_journal(journal)  # a partial copy of the same run id would be refused beside the whole run
        click.echo(
            f"kernelwatch: all {total} finished results are kept in {target}: store them with "
            f"`kernelwatch ingest {target}`{partial}",
            err=True,
        )
        return
    held = (
        f"its journal {journal} holds {in_journal} of the {total} finished results: store them with {resume}; "
        f"the rest ({total - in_journal}) are lost"
        if in_journal
        else f"all {total} finished results are lost"
    )
    click.echo(f"kernelwatch: the run could not be written anywhere ({'; '.join(tried)}): {held}", err=True)


def _summary(doc) -> NoReturn:
    """Print what the run holds, then exit with its status: 0 complete, 3 partial, 1 failed."""
    from kernelwatch.output import terminal

    acc = [a for a in doc.accuracy if a.kind == "gate"]
    failed = [a for a in acc if not a.passed]
    click.echo(
        f"run {doc.run.id}: {doc.run.status}; accuracy {len(acc) - len(failed)}/{len(acc)} passed; "
        f"{len(doc.perf)} perf results"
    )
    for a in failed[:20]:
        click.echo(terminal(f"  FAIL {a.case}: budget {a.error_budget} {a.error or ''}".rstrip()))
    explored = [a for a in doc.accuracy if a.kind == "explore"]
    if explored:
        bad = [a for a in explored if not a.passed]
        budgets = [a.error_budget for a in explored if a.error_budget is not None]
        click.echo(
            f"exploration (kind explore; not part of the verdict): {len(explored) - len(bad)}/{len(explored)} "
            f"cases passed on fresh seeds; worst budget " + (f"{max(budgets):.3g}" if budgets else "n/a")
        )
        for a in bad[:20]:
            click.echo(
                terminal(f"  EXPLORE FAIL {a.case}: budget {a.error_budget} at seed {a.seed} {a.error or ''}".rstrip())
            )
    sys.exit({"complete": 0, "partial": 3}.get(doc.run.status, 1))


def _only_changed(opts, ref: str):
    """``opts`` for the kernels ``--changed-since REF`` keeps (kernelwatch.collect.changes), the others named in the
    run's notes; when none is left, says so and exits 0 (nothing to measure, nothing stored)."""
    from dataclasses import replace

    from kernelwatch.collect.changes import ChangeError, changed_kernels, kernel_modules

    modules = kernel_modules(opts.extra_modules)
    asked = {k: modules[k] for k in (opts.kernels or modules)}  # names were checked by check_selection
    try:
        changes = changed_kernels(ref, asked)
    except ChangeError as exc:
        raise UsageError(str(exc)) from None
    if not changes.run:
        click.echo(
            f"kernelwatch: nothing to run: no kernel's sources changed since {ref} "
            f"({len(changes.files)} changed files; skipped: {', '.join(changes.skipped)})",
            err=True,
        )
        sys.exit(0)
    if opts.progress:
        click.echo(
            f"kernelwatch: --changed-since {ref}: running {', '.join(changes.run)}"
            + (f"; skipped (unchanged): {', '.join(changes.skipped)}" if changes.skipped else ""),
            err=True,
        )
    return replace(
        opts,
        kernels=tuple(changes.run),
        carried=tuple(changes.skipped),
        carried_since=changes.commit,
        notes=[*opts.notes, *changes.notes()],
    )


@click.command("collect")
@click.option(
    "--kernels",
    "-k",
    multiple=True,
    metavar="NAME[,NAME]",
    help="Kernels to run (default: all). Repeat or separate with commas.",
)
@click.option(
    "--suite",
    "suites",
    default="accuracy,perf",
    show_default=True,
    metavar="accuracy,perf",
    help="Which suites to run.",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cuda", "npu", "cpu"]),
    default="auto",
    show_default=True,
    help="auto: cuda if visible, else npu if torch_npu sees one, else cpu (interpreter, accuracy only).",
)
@click.option(
    "--devices",
    type=click.Choice(["one", "all"]),
    default="one",
    show_default=True,
    help="all: shard the cases over every device of the host, one worker process per device.",
)
@click.option("--match", default=None, metavar="TEXT", help="Only cases whose key contains TEXT.")
@click.option(
    "--case",
    "case_keys",
    multiple=True,
    metavar="KEY",
    help="Only this case (its exact key, as `kernelwatch show` prints it). Repeatable.",
)
@click.option(
    "--case-timeout",
    type=Finite(min=0, min_open=True),
    default=600.0,
    show_default=True,
    help="Seconds one case may take (compilation included) before it is recorded as an error.",
)
@click.option("--trigger", type=click.Choice(["manual", "pr", "nightly"]), default="manual", show_default=True)
@click.option("--ci-job", default=None, envvar="KERNELWATCH_CI_JOB", help="CI job reference (URL or id).")
@click.option(
    "--explore-seeds",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="N",
    help="Also run every accuracy case on N fresh seeds, stored as kind explore: never in the verdict.",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Base of the exploration seeds (default: fresh each run). Gating inputs never depend on it.",
)
@click.option("--profile", is_flag=True, help="Also record profiler counters per perf case (ncu / torch_npu).")
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False),
    callback=output_file,
    default=None,
    help="Write the run artifact here instead of (or, with --db, besides) the database.",
)
@click.option(
    "--resume",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="JOURNAL",
    help="Store the run an interrupted collect left in its journal (OUT.journal, or "
    ".kw-journal/RUN.jsonl), as far as it got; measures nothing. Goes with --out / --db only.",
)
@click.option(
    "--cpu-perf",
    is_flag=True,
    hidden=True,
    help="Run the perf suite on the CPU interpreter too (tests of the perf path; the numbers mean nothing).",
)
@click.option("--no-progress", is_flag=True, help="No progress bar (or progress lines, when stderr is not a terminal).")
@click.option(
    "--changed-since",
    metavar="REF",
    default=None,
    help="Only the kernels whose sources (their module and what it imports) or whose measurement changed "
    "since git REF; the run names the others as skipped and the gate carries them over.",
)
@db_option
@project_option
@clean_errors
@click.pass_context
def command(
    ctx: click.Context,
    kernels,
    suites,
    device,
    devices,
    match,
    case_keys,
    case_timeout,
    trigger,
    ci_job,
    explore_seeds,
    seed,
    profile,
    out,
    resume,
    cpu_perf,
    no_progress,
    changed_since,
    db_url,
) -> None:
    """Run accuracy and perf suites and write one run.

    Without --out the run goes to the database; with --out it is written as a kernelwatch.run/1
    artifact (load it later with `kernelwatch ingest`); give both to do both. Each finished case is
    appended at once to a journal (OUT.journal beside the artifact, else .kw-journal/RUN-ID.jsonl),
    removed once the run is stored: after a kill, `kernelwatch collect --resume JOURNAL` (or
    `kernelwatch ingest JOURNAL`) stores what had finished as a partial run. The exit status is 0
    when the run is complete, 3 when some cases errored or it was cut short (partial run) and 1 when
    it failed. A time-by-phase summary goes to stderr at the end.

    Accuracy inputs are a pure function of each case (its gating seed), so one commit always gets
    the same verdict. --explore-seeds N draws N fresh seeds per accuracy case as well: stored as
    accuracy rows of kind "explore", printed apart, never part of the exit status or the gate's verdict.
    """
    if resume is not None:
        given = [
            p
            for p in ctx.command.params
            if p.name not in RESUME_COMPANIONS and ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE
        ]
        if given:
            flag = max(given[0].opts, key=len)
            raise click.UsageError(f"--resume stores a journal's run as it is; it cannot go with {flag}")
        from kernelwatch.store.journal import recover

        doc = recover(resume)
        _store_keeping_journal(doc, out, db_url, resume)
        click.echo(f"recovered {len(doc.accuracy)} accuracy and {len(doc.perf)} perf results from {resume}")
        _summary(doc)

    from kernelwatch.collect.collect import reproduce_command, run_collection
    from kernelwatch.collect.progress import format_phases
    from kernelwatch.collect.records import check_run_fields
    from kernelwatch.collect.selection import Options, SelectionError, check_selection
    from kernelwatch.project import active_project
    from kernelwatch.store.journal import journal_path
    from kernelwatch.store.schema import new_run_id

    if cpu_perf and device != "cpu":
        raise click.BadParameter(
            "times the perf suite in the CPU interpreter: it needs --device cpu", param_hint="--cpu-perf"
        )
    suite_list = _split((suites,))
    bad = [s for s in suite_list if s not in ("accuracy", "perf")]
    if bad or not suite_list:
        name = bad[0] if bad else suites
        raise click.BadParameter(f"unknown suite {name!r}: use accuracy, perf", param_hint="--suite")
    empty = [k for k in kernels if not _split((k,))]
    if empty:
        raise click.BadParameter(
            f"{empty[0]!r} names no kernel (leave --kernels out to run them all)", param_hint="--kernels"
        )
    run_id = new_run_id()
    journal = journal_path(out, run_id) if out is None or out.name else None
    opts = Options(
        kernels=_split(kernels),
        suites=suite_list,
        device=device,
        all_devices=devices == "all",
        case_timeout_s=case_timeout,
        trigger=trigger,
        ci_job=ci_job,
        extra_modules=active_project().kernels,
        match=match,
        cases=tuple(case_keys),
        seed=seed,
        explore_seeds=explore_seeds,
        profile=profile,
        progress=not no_progress,
        command=reproduce_command(sys.argv[1:]),
        time_on_cpu=cpu_perf,
        run_id=run_id,
        journal=journal,
    )
    try:
        check_selection(opts)  # usage errors first: they create nothing, not even the database
    except SelectionError as exc:
        raise UsageError(str(exc)) from None
    except (ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None
    if changed_since is not None:
        opts = _only_changed(opts, changed_since)
    try:
        check_run_fields(opts)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _check_destination(out, db_url, journal)
    try:
        doc = run_collection(opts)
    except SelectionError as exc:
        raise UsageError(str(exc)) from None
    except (ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None
    writing = _store_keeping_journal(doc, out, db_url, journal)
    if doc.run.phases_s:
        click.echo(format_phases(doc.run.phases_s, writing), err=True)
    _summary(doc)
