"""`kernelwatch confirm`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kernelwatch.options import Effect, Finite, clean_errors, db_option, fail, project_option, writable_file


@click.command("confirm")
@click.option("--candidate", default=None, metavar="RUN_ID", help="Gate this stored run and confirm what it flags.")
@click.option(
    "--artifact",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Gate this run artifact and confirm what it flags.",
)
@click.option(
    "--baseline", default=None, metavar="BRANCH|RUN_ID", help="The gate's baseline (as for kernelwatch gate)."
)
@click.option(
    "--case",
    "cases",
    multiple=True,
    metavar="CASE_KEY",
    help="Confirm these perf cases instead of a gate's (repeatable; needs --baseline-commit).",
)
@click.option(
    "--baseline-commit",
    default=None,
    metavar="SHA",
    help="The baseline commit (default: the gate's baseline run's commit).",
)
@click.option(
    "--candidate-commit",
    default=None,
    metavar="SHA",
    help="The candidate commit (default: the candidate run's commit; with --case, HEAD).",
)
@click.option(
    "--repo",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="The git repository holding both commits (default: the project's repository, as --changed-since uses).",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cuda", "npu", "cpu"]),
    default="auto",
    show_default=True,
    help="Where both commits are measured (cpu: Triton's interpreter timed by the host clock, for tests).",
)
@click.option(
    "--max-rounds",
    type=click.IntRange(8, 400),
    default=96,
    show_default=True,
    help="Rounds before a case is UNKNOWN (the looks are planned up to it).",
)
@click.option(
    "--case-seconds",
    type=Finite(0.1, 3600),
    default=20.0,
    show_default=True,
    help="Time budget of one case: past it at a look, the case stops (UNKNOWN if still undecided).",
)
@click.option(
    "--min-effect",
    type=Effect(0, 10, min_open=True, max_open=True),
    default=0.05,
    show_default=True,
    help="The gate's minimum effect: SLOWER needs more than half of it, with confidence.",
)
@click.option(
    "--round-ms",
    type=Finite(1, 10_000),
    default=20.0,
    show_default=True,
    help="Device time sampled per case, commit and round.",
)
@click.option(
    "--report-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    callback=writable_file,
    help="Also write the Markdown report here.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the cases that would be re-measured, one case key per line, and stop (no device used).",
)
@db_option
@project_option
@clean_errors
def command(
    candidate: str | None,
    artifact: Path | None,
    baseline: str | None,
    cases: tuple[str, ...],
    baseline_commit: str | None,
    candidate_commit: str | None,
    repo: Path | None,
    device: str,
    max_rounds: int,
    case_seconds: float,
    min_effect: float,
    round_ms: float,
    report_file: Path | None,
    dry_run: bool,
    db_url: str | None,
) -> None:
    """Re-measure the cases a gate flags on one device, baseline and candidate commits interleaved.

    Each commit is checked out into a temporary git worktree; one worker process loads both trees' kernels
    side by side and times their calls of a case interleaved (A, B, B, A, ..., L2 flushed before each) on the
    same inputs, one paired ratio per round, until the case is SLOWER or NOT_SLOWER (not slower by half the
    minimum effect; SAME or FASTER where the interval says so too) by a sequential sign test (false SLOWER
    at most 2.5% per confirmation), or its time budget or the round limit leaves it UNKNOWN. From a gate,
    its other failures (accuracy, errors, missing cases) still fail: this verdict replaces the gate's on
    the flagged perf cases only: every suspect, regression and unreliable case, each against the commit of
    the run that supplied its baseline. With a database (--db), each case's verdict and its per-round data
    are stored there, and the next gate run of this commit uses it. Exit 0: every case SAME, NOT_SLOWER or
    FASTER (or nothing to confirm; --dry-run). Exit 1: a case is SLOWER, or the gate fails on something else
    (also with --dry-run, which then says why on stdout).
    Exit 2: a case is UNKNOWN, or bad options.
    """
    from kernelwatch.collect.confirm import (
        CaseConfirm,
        ConfirmError,
        confirm,
        exit_code,
        records,
        report,
        resolve_commit,
    )
    from kernelwatch.output import terminal
    from kernelwatch.project import active_project

    project = active_project()
    repo = repo if repo is not None else project.repository
    baseline = baseline or (project.baseline if not cases and (candidate or artifact) else None)
    try:
        if cases and (candidate or artifact or baseline):
            raise ConfirmError(
                "give either --case (with --baseline-commit) or a gate's --candidate/--artifact "
                "and --baseline, not both"
            )
        others: list[str] = []
        if cases:
            if not baseline_commit:
                raise ConfirmError("--case needs --baseline-commit SHA")
            groups = {baseline_commit: list(dict.fromkeys(cases))}
            cand_sha = candidate_commit or ("HEAD" if dry_run else _head(repo))
        else:
            groups, others, cand_sha = _from_gate(candidate, artifact, baseline, db_url)
            if baseline_commit:
                groups = {baseline_commit: [k for keys in groups.values() for k in keys]}
            cand_sha = candidate_commit or cand_sha
            if others:
                why = terminal(
                    f"kernelwatch confirm: the gate also fails on {len(others)} case(s) that a "
                    "re-measurement cannot settle (the job fails whatever is confirmed): "
                    + "; ".join(others[:5])
                    + (" ..." if len(others) > 5 else "")
                )
                click.echo(why, err=not dry_run)
        keys = [k for group in groups.values() for k in group]
        if dry_run:
            for key in keys:
                click.echo(terminal(key))
            sys.exit(1 if others else 0)
        if not keys:
            click.echo("kernelwatch confirm: nothing to confirm: the gate flags no performance case")
            sys.exit(1 if others else 0)
        cand_sha = resolve_commit(repo, cand_sha, "the candidate commit")
        groups = {resolve_commit(repo, b, "the baseline commit"): ks for b, ks in groups.items()}
        device = _device(device)
        results: dict[str, CaseConfirm] = {}
        texts, stored = [], []
        for base_sha, group in groups.items():
            click.echo(
                f"kernelwatch confirm: {len(group)} case(s), {cand_sha[:12]} vs {base_sha[:12]} on {device}, "
                f"at most {max_rounds} rounds or {case_seconds:g} s per case",
                err=True,
            )
            found = confirm(
                repo,
                base_sha,
                cand_sha,
                group,
                device,
                project.kernels,
                min_effect,
                max_rounds=max_rounds,
                round_ms=round_ms,
                case_seconds=case_seconds,
                progress=lambda line: click.echo(terminal(f"kernelwatch confirm: {line}"), err=True),
            )
            results.update(found)
            texts.append(report(found, base_sha, cand_sha))
            stored.append((base_sha, found))
    except ConfirmError as exc:
        fail(str(exc))
    text = "\n\n".join(texts)
    click.echo(terminal(text))
    if report_file is not None:
        from kernelwatch.store.files import replaced_link_note, write_atomic

        try:
            link = write_atomic(report_file, (text + "\n").encode("utf-8"))
            if link is not None:
                click.echo(terminal(f"kernelwatch confirm: {replaced_link_note(report_file, link)}"), err=True)
        except OSError as exc:
            fail(f"--report-file {report_file}: {exc.strerror or exc}")
    if db_url is not None:
        hardware, uuid = _measured_on(device)
        items = [r for base_sha, found in stored for r in records(found, base_sha, cand_sha, min_effect, uuid)]
        try:
            from kernelwatch.store.engine import DatabaseError, open_database, redact, resolve_url
            from kernelwatch.store.ingest import store_confirmations

            store_confirmations(open_database(db_url), hardware, items)
        except DatabaseError as exc:
            fail(str(exc))
        click.echo(
            terminal(f"kernelwatch confirm: stored {len(items)} confirmation(s) in {redact(resolve_url(db_url))}"),
            err=True,
        )
    sys.exit(1 if others else exit_code(results))


def _measured_on(device: str):
    """The hardware both commits ran on, as a collector run would record it, and its physical id (the GPU UUID;
    ``cpu`` for the interpreter)."""
    from kernelwatch.collect.metadata import device_uuid, hardware_info
    from kernelwatch.store.schema import Hardware

    info = hardware_info(device)
    uuid = "cpu"
    if device == "cuda":
        import torch

        uuid = device_uuid(torch.cuda.get_device_properties(0))
    elif device == "npu":
        uuid = None
    return Hardware.model_validate({"peak_gbps": None, "peak_tflops": None, **info}), uuid


def _head(repo: Path) -> str:
    from kernelwatch.collect.confirm import _git

    return _git(repo, "rev-parse", "--verify", "HEAD")


def _device(device: str) -> str:
    from kernelwatch.collect.backends import check_available, detect_device
    from kernelwatch.collect.confirm import ConfirmError

    resolved = detect_device() if device == "auto" else device
    if device == "auto" and resolved == "cpu":
        raise ConfirmError("no GPU or NPU is visible; --device cpu times Triton's interpreter (tests only)")
    try:
        check_available(resolved)
    except (RuntimeError, ValueError) as exc:
        raise ConfirmError(str(exc)) from None
    return resolved


def _from_gate(
    candidate: str | None, artifact: Path | None, baseline: str | None, db_url: str | None
) -> tuple[dict[str, list[str]], list[str], str]:
    """({baseline commit: the perf cases the gate sends to confirm, each against the commit of the run that
    supplied its baseline}, its other failures in words, the candidate run's commit). Reads the database and
    the artifact only: no device, no torch."""
    from kernelwatch.collect.confirm import ConfirmError
    from kernelwatch.gate.judge import GateUndecided, decide
    from kernelwatch.gate.statuses import CONFIRMABLE
    from kernelwatch.options import expected_message
    from kernelwatch.store.artifact import load_artifact
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.export import export_run, find_run_id
    from kernelwatch.store.schema import to_data

    if (candidate is None) == (artifact is None):
        raise ConfirmError("give exactly one of --candidate RUN_ID or --artifact FILE (or --case)")
    if not baseline:
        raise ConfirmError("--baseline BRANCH|RUN_ID is needed to run the gate")
    try:
        engine = open_database(db_url, readonly=True)
        document = load_artifact(artifact) if artifact else export_run(engine, find_run_id(engine, candidate))
        doc = to_data(document)
        result = decide(engine, document, baseline)  # decide takes RunDocuments
    except Exception as exc:
        msg = str(exc) if isinstance(exc, GateUndecided) else expected_message(exc)
        if msg is None:
            raise
        raise ConfirmError(f"the gate cannot decide: {msg}") from None
    if result.undecided:
        raise ConfirmError(f"the gate cannot decide: {result.undecided}")
    groups: dict[str, list[str]] = {}
    for v in result.verdicts:
        if v.suite == "perf" and v.status in CONFIRMABLE:
            base_sha = result.assembled.commit_of(v.case) if result.assembled else result.baseline["commit"]
            groups.setdefault(base_sha or result.baseline["commit"], []).append(v.case)
    keys = {k for ks in groups.values() for k in ks}
    others = [f"{v.case} ({v.suite} {v.status})" for v in result.failed if v.case not in keys]
    return groups, others, doc["run"]["commit"]["sha"]
