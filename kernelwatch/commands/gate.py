"""`kernelwatch gate`."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import click

from kernelwatch.options import (
    Effect,
    Finite,
    clean_errors,
    db_option,
    effect,
    expected_message,
    fail,
    project_option,
)


def measured_here(doc: Any) -> None:
    """``--here``: every GPU the candidate's results name is one of this machine's; GateUndecided naming the
    others. A result that names no GPU is compared as another GPU's (``kernelwatch.gate.suspects.unlike``)."""
    from kernelwatch.collect.metadata import machine_gpu_uuids
    from kernelwatch.gate.judge import GateUndecided

    mine = machine_gpu_uuids()
    if mine is None:
        raise GateUndecided(
            "--here: this machine lists no GPU (nvidia-smi is missing or failed), so where the candidate ran "
            "cannot be checked; gate without --here only where the artifact is trusted"
        )
    named = sorted({r.device_uuid for r in doc.perf if r.device_uuid})
    foreign = [u for u in named if u not in mine]
    if foreign:
        raise GateUndecided(
            f"--here: the candidate's results name {', '.join(foreign)}, which this machine does not have "
            f"(its GPUs: {', '.join(mine)}): a run gated with --here must have been measured here"
        )


@functools.cache
def unchanged_since(commit: str) -> set[str]:
    """The kernels none of whose sources differ between ``commit`` and this tree (kernelwatch.collect.changes, the
    rule of ``collect --changed-since``); empty where git cannot tell (not a repository, an unknown commit)."""
    from kernelwatch.collect.changes import ChangeError, changed_kernels, kernel_modules

    try:
        return set(changed_kernels(commit, kernel_modules()).skipped)
    except ChangeError:
        return set()


@click.command("gate")
@click.option("--candidate", default=None, metavar="RUN_ID", help="A stored run (id or unique prefix).")
@click.option(
    "--artifact",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A run artifact that need not be in the database.",
)
@click.option(
    "--baseline",
    default=None,
    metavar="BRANCH|RUN_ID",
    help="A branch: the baseline is assembled per case, each case's newest earlier result in that branch's "
    "complete runs on the candidate's hardware (never the candidate, a later, future-dated or an empty run; a "
    "SYNTHETIC candidate: its own branch's); or one run: a run id or a unique run-id prefix. Default: the "
    "project file's baseline.",
)
@click.option(
    "--min-effect",
    type=Effect(0, 10, min_open=True, max_open=True),
    default=None,
    help="Smallest slowdown that counts as a regression: 5% or 0.05 (a bare number over 1 is refused). "
    "Default: the project file's min-effect, else 5%.",
)
@click.option(
    "--case-min-effect",
    multiple=True,
    metavar="KERNEL_OR_CASE=EFFECT",
    help="Per kernel or per case minimum effect, e.g. KERNEL=0.1 or KERNEL=10% (a kernel or case of the "
    "candidate); over the project file's case-min-effect.",
)
@click.option(
    "--fdr", type=Finite(), default=0.05, show_default=True, help="False discovery rate across cases, in (0, 1)."
)
@click.option(
    "--metric",
    type=click.Choice(["gpu", "call"]),
    default="gpu",
    show_default=True,
    help="gpu: GPU time per call with the L2 flushed; call: wall time per call, calls back to back "
    "(host + device: what a loop pays).",
)
@click.option(
    "--report-dir",
    type=click.Path(file_okay=False),
    default="gate-report",
    show_default=True,
    help="Where gate.md, gate-junit.xml and gate.html go.",
)
@click.option(
    "--here",
    is_flag=True,
    help="The candidate was collected on this machine (a CI job's collect, then its gate): every GPU its results "
    "name must be one of this machine's (nvidia-smi), so a run cannot pass another GPU's baseline off as its own.",
)
@db_option
@project_option
@clean_errors
def command(
    candidate: str | None,
    artifact: Path | None,
    baseline: str | None,
    min_effect: float | None,
    case_min_effect: tuple[str, ...],
    fdr: float,
    metric: str,
    report_dir: str,
    here: bool,
    db_url: str | None,
) -> None:
    """Fail a merge on broken accuracy or a significant slowdown.

    Exit 0: every case measured and well. Exit 1: an accuracy case fails, a case errored, a case the
    baseline measured is missing or unmeasured, or a case regressed by more than the minimum effect with
    statistical support (its samples and its between-run noise on this hardware, FDR controlled).
    Exit 2: cannot decide (bad options, no baseline, nothing comparable measured). Prints a plain summary at most
    100 columns wide; the Markdown, HTML and JUnit reports go to --report-dir.
    """
    from kernelwatch.gate.judge import GateUndecided, SpecCases, check_values, decide
    from kernelwatch.gate.reports import fold, plain, publish
    from kernelwatch.kernels import discover
    from kernelwatch.kernels.spec import case_facts, case_kernels
    from kernelwatch.kernels.spec import tolerances as spec_tolerances
    from kernelwatch.output import say, terminal
    from kernelwatch.project import active_project
    from kernelwatch.store.artifact import load_artifact
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.export import export_run, find_run_id
    from kernelwatch.store.synthetic import SYNTHETIC_BRANCHES

    project = active_project()
    baseline = baseline or project.baseline
    min_effect = min_effect if min_effect is not None else project.min_effect or 0.05
    try:
        if (candidate is None) == (artifact is None):
            raise GateUndecided("give exactly one of --candidate RUN_ID or --artifact FILE")
        if not baseline:
            raise GateUndecided("give --baseline BRANCH|RUN_ID (or baseline in the project file)")
        if not report_dir:
            raise GateUndecided("--report-dir '': give a folder for the reports (default gate-report)")
        efforts: dict[str, float] = {}
        for item in case_min_effect:
            name, sep, value = item.rpartition("=")  # case keys hold "=" themselves
            if name in efforts:
                raise GateUndecided(f"--case-min-effect {name}: given twice")
            if not sep or not name:
                raise GateUndecided(f"--case-min-effect {item!r}: expected NAME=FRACTION or NAME=PERCENT%")
            try:
                efforts[name] = effect(f"--case-min-effect {item!r}", value)
            except ValueError as exc:
                raise GateUndecided(str(exc)) from None
        check_values(min_effect, fdr, efforts)
        specs = discover()  # the registry's kernels: a bad project stops here
        tolerances = spec_tolerances(specs)
        doc = load_artifact(artifact) if artifact else None
        engine = open_database(db_url, readonly=True)
        if doc is None:
            doc = export_run(engine, find_run_id(engine, candidate))
        # the project file's per-kernel thresholds, where the candidate has the kernel; the command line's over them
        known = {c.kernel for c in doc.cases} | {c.key for c in doc.cases}
        efforts = {**{k: v for k, v in project.case_min_effect.items() if k in known}, **efforts}
        # generated history's cases are the generator's, not the specs'
        if doc.run.synthetic and not doc.run.commit.branch.startswith(SYNTHETIC_BRANCHES):
            # the flag is the artifact's word: it must not buy a real branch's run out of the specs' case set
            raise GateUndecided(
                f"the candidate says it is SYNTHETIC but its branch {doc.run.commit.branch!r} is not a "
                f"{SYNTHETIC_BRANCHES}... branch: generated runs are never judged as a real branch's"
            )
        if here:
            measured_here(doc)
        defined = None if doc.run.synthetic else SpecCases(case_kernels(specs), unchanged_since, case_facts(specs))
        result = decide(engine, doc, baseline, min_effect, fdr, efforts, metric, tolerances, defined)
    except Exception as exc:
        message = str(exc) if isinstance(exc, GateUndecided) else expected_message(exc)
        if message is None:
            raise
        fail(f"cannot decide: {message}")
    say(plain(result, Path(report_dir)))
    for line in publish(result, Path(report_dir)):
        warning = line.startswith("warning")  # one line on stderr, whole: what a log search finds
        say(terminal(line) if warning else "\n".join(fold(line, indent="  ")), err=warning)
    if result.undecided:
        fail(f"cannot decide: {result.undecided}")
    sys.exit(result.exit_code)
