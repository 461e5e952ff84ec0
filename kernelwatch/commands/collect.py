"""`kernelwatch collect`: run the suites and store the run (database or artifact file)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kernelwatch.options import clean_errors, db_option


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v for value in values for v in value.split(",") if v)


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
@click.option("--case-timeout", type=float, default=600.0, show_default=True,
              help="Seconds one case may take (compilation included) before it is recorded as an error.")
@click.option("--trigger", type=click.Choice(["manual", "pr", "nightly"]), default="manual", show_default=True)
@click.option("--ci-job", default=None, envvar="KERNELWATCH_CI_JOB", help="CI job reference (URL or id).")
@click.option("--seed", type=int, default=None, help="Run seed for the accuracy inputs (default: fresh each run).")
@click.option("--profile", is_flag=True, help="Also record profiler counters per perf case (ncu / torch_npu).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the run artifact here instead of (or, with --db, besides) the database.")
@click.option("--extra-kernels", multiple=True, metavar="MODULE", hidden=True,
              help="Import kernel specs from extra modules (tests plant broken kernels so).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@db_option
@clean_errors
def command(kernels, suites, device, devices, match, case_timeout, trigger, ci_job, seed, profile, out,
            extra_kernels, no_progress, db_url) -> None:  # noqa: ANN001
    """Run accuracy and perf suites and write one run.

    Without --out the run goes to the database; with --out it is written as a kernelwatch.run/1
    artifact (load it later with `kernelwatch ingest`); give both to do both. The exit status
    is 0 when the run is complete, 3 when some cases errored (partial run) and 1 when it failed.
    """
    from collector.collect import Options, reproduce_command, run_collection
    from db.artifact import write_artifact

    suite_list = _split((suites,))
    bad = [s for s in suite_list if s not in ("accuracy", "perf")]
    if bad or not suite_list:
        name = bad[0] if bad else suites
        raise click.BadParameter(f"unknown suite {name!r}: use accuracy, perf", param_hint="--suite")
    opts = Options(kernels=_split(kernels), suites=suite_list, device=device, all_devices=devices == "all",
                   case_timeout_s=case_timeout, trigger=trigger, ci_job=ci_job, extra_modules=tuple(extra_kernels),
                   match=match, seed=seed, profile=profile, progress=not no_progress,
                   command=reproduce_command(sys.argv[1:]))
    try:
        doc = run_collection(opts)
    except (ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None
    if out is not None:
        write_artifact(doc, out)
        click.echo(f"wrote {out}")
    if out is None or db_url:
        from db.engine import open_database
        from db.ingest import ingest_documents

        (outcome,) = ingest_documents(open_database(db_url), [("collect", doc)])
        click.echo(f"stored run {outcome.run_id} ({outcome.results} results)")
    acc = doc.accuracy
    failed = [a for a in acc if not a.passed]
    click.echo(f"run {doc.run.id}: {doc.run.status}; accuracy {len(acc) - len(failed)}/{len(acc)} passed; "
               f"{len(doc.perf)} perf results")
    for a in failed[:20]:
        click.echo(f"  FAIL {a.case}: budget {a.error_budget} {a.error or ''}".rstrip())
    sys.exit({"complete": 0, "partial": 3}.get(doc.run.status, 1))
