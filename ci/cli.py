"""`kernelwatch gate`, `kernelwatch bisect` and `kernelwatch synth`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from collector.cli_common import clean_errors, db_option


@click.command()
@click.option("--candidate", default=None, metavar="RUN_ID", help="A stored run (id or unique prefix).")
@click.option("--artifact", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A run artifact that need not be in the database.")
@click.option("--baseline", required=True, metavar="BRANCH|RUN_ID",
              help="A run id, or a branch whose newest complete run on the same hardware is the baseline.")
@click.option("--min-effect", type=float, default=0.05, show_default=True,
              help="Smallest slowdown that counts as a regression (0.05 = 5%).")
@click.option("--case-min-effect", multiple=True, metavar="KERNEL_OR_CASE=FRACTION",
              help="Per kernel or per case minimum effect, e.g. mse_loss=0.1.")
@click.option("--fdr", type=float, default=0.05, show_default=True, help="False discovery rate across cases.")
@click.option("--report-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("gate-report"),
              show_default=True, help="Where gate.md, gate-junit.xml and gate.html go.")
@db_option
def gate(candidate, artifact, baseline, min_effect, case_min_effect, fdr, report_dir, db_url) -> None:  # noqa: ANN001
    """Fail a merge on broken accuracy or a significant slowdown.

    Exit 0: all well. Exit 1: an accuracy case fails, a case errored, or a case regressed by more than
    the minimum effect with statistical support (its samples, its history on this hardware, FDR
    controlled). Exit 2: cannot decide (no baseline on this hardware, bad input).
    """
    from ci.gate import GateUndecided, decide
    from ci.reports import markdown, write_reports
    from db.artifact import ArtifactError, load_artifact
    from db.engine import DatabaseError, open_database
    from db.export import RunNotFound, export_run, find_run_id

    try:
        if (candidate is None) == (artifact is None):
            raise GateUndecided("give exactly one of --candidate RUN_ID or --artifact FILE")
        efforts = {}
        for item in case_min_effect:
            name, _, value = item.partition("=")
            try:
                efforts[name] = float(value)
            except ValueError:
                raise GateUndecided(f"--case-min-effect {item!r}: expected NAME=FRACTION") from None
        engine = open_database(db_url)
        doc = load_artifact(artifact) if artifact else export_run(engine, find_run_id(engine, candidate))
        result = decide(engine, doc, baseline, min_effect, fdr, efforts)
    except (GateUndecided, ArtifactError, DatabaseError, RunNotFound) as exc:
        msg = exc.args[0] if isinstance(exc, LookupError) else str(exc)
        click.echo(f"kernelwatch gate: cannot decide: {msg}", err=True)
        sys.exit(2)
    paths = write_reports(result, report_dir)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(markdown(result))
    click.echo(markdown(result))
    click.echo(f"reports: {', '.join(str(p) for p in paths.values())}")
    sys.exit(result.exit_code)


@click.command()
@click.argument("case")
@click.option("--hardware", required=True, help="Device name substring or fingerprint prefix.")
@click.option("--implementation", default="triton", show_default=True)
@click.option("--min-effect", type=float, default=0.05, show_default=True)
@db_option
@clean_errors
def bisect(case, hardware, implementation, min_effect, db_url) -> None:  # noqa: ANN001
    """Where did a change in CASE's time enter the history on HARDWARE? Prints the commits to re-run."""
    from ci.detect import change_points
    from db.engine import open_database
    from db.queries import case_history, list_hardware

    engine = open_database(db_url)
    matches = [h for h in list_hardware(engine)
               if h["fingerprint"].startswith(hardware) or hardware.lower() in h["device_name"].lower()]
    if len(matches) != 1:
        names = ", ".join(f"{h['device_name']} ({h['fingerprint'][:8]})" for h in matches) or "none"
        raise LookupError(f"--hardware {hardware!r} must match exactly one hardware; matches: {names}")
    hw = matches[0]
    history = case_history(engine, case, hw["fingerprint"], implementation)
    if len(history) < 6:
        raise LookupError(f"{case} has {len(history)} runs on {hw['device_name']}: at least 6 are needed")
    points = change_points([h["median_ms"] for h in history], min_effect=min_effect)
    if not points:
        click.echo(f"no change of {min_effect:.0%} or more in {len(history)} runs of {case} on {hw['device_name']}")
        return
    for p in points:
        good, bad = history[p.index - 1], history[p.index]
        click.echo(f"a change of {p.change:+.1%} (p={p.pvalue:.1e}) entered between {good['commit_sha'][:12]} "
                   f"and {bad['commit_sha'][:12]}")
        commits = _commits_between(good["commit_sha"], bad["commit_sha"]) or [bad["commit_sha"]]
        kernel = case.split("/", 1)[0]
        for sha in commits:
            click.echo(f"  git checkout {sha[:12]} && kernelwatch collect --kernels {kernel} --suite perf "
                       f"--match '{case}'")


def _commits_between(good: str, bad: str) -> list[str]:
    try:
        out = subprocess.run(["git", "rev-list", "--reverse", f"{good}..{bad}"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return out.stdout.split() if out.returncode == 0 else []


@click.command()
@click.option("--runs", type=click.IntRange(1), default=30, show_default=True)
@click.option("--cases", type=click.IntRange(1), default=12, show_default=True)
@click.option("--hardware", type=click.IntRange(1, 2), default=1, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--step", "steps", multiple=True, metavar="AT:FACTOR[:MATCH]",
              help="From run AT on, matching cases take FACTOR times as long (e.g. 20:1.1:mse_loss).")
@db_option
@clean_errors
def synth(runs, cases, hardware, seed, steps, db_url) -> None:  # noqa: ANN001
    """Fill a database with SYNTHETIC history (labelled so everywhere) for demos and scale tests."""
    from db.artifact import dumps, parse_artifact
    from db.engine import open_database
    from db.ingest import ingest_documents
    from db.synthetic import Step, SyntheticHistory

    parsed = []
    for s in steps:
        parts = s.split(":")
        try:
            parsed.append(Step(int(parts[0]), float(parts[1]), parts[2] if len(parts) > 2 else ""))
        except (ValueError, IndexError):
            raise click.BadParameter(f"{s!r}: expected AT:FACTOR[:MATCH]", param_hint="--step") from None
    history = SyntheticHistory(runs=runs, cases=cases, hardware=hardware, seed=seed, steps=parsed)
    engine = open_database(db_url)
    out = ingest_documents(engine, [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(history.documents())])
    click.echo(f"{sum(o.status == 'ingested' for o in out)} synthetic runs ingested ({len(out)} generated)")
