"""`kernelwatch confirm`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kernelwatch.options import clean_errors, db_option, fail

CONFIRMABLE = ("regression", "unreliable")  # the gate's perf verdicts a same-device re-measurement settles


@click.command("confirm")
@click.option("--candidate", default=None, metavar="RUN_ID", help="Gate this stored run and confirm what it flags.")
@click.option("--artifact", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Gate this run artifact and confirm what it flags.")
@click.option("--baseline", default=None, metavar="BRANCH|RUN_ID",
              help="The gate's baseline (as for kernelwatch gate).")
@click.option("--case", "cases", multiple=True, metavar="CASE_KEY",
              help="Confirm these perf cases instead of a gate's (repeatable; needs --baseline-commit).")
@click.option("--baseline-commit", default=None, metavar="SHA",
              help="The baseline commit (default: the gate's baseline run's commit).")
@click.option("--candidate-commit", default=None, metavar="SHA",
              help="The candidate commit (default: the candidate run's commit; with --case, HEAD).")
@click.option("--repo", type=click.Path(file_okay=False, exists=True, path_type=Path), default=Path("."),
              show_default=True, help="The git repository holding both commits.")
@click.option("--device", type=click.Choice(["auto", "cuda", "npu", "cpu"]), default="auto", show_default=True,
              help="Where both commits are measured (cpu: Triton's interpreter timed by the host clock, for tests).")
@click.option("--max-rounds", type=click.IntRange(8, 200), default=24, show_default=True,
              help="Rounds before a case is UNKNOWN.")
@click.option("--min-effect", type=click.FloatRange(0, 10, min_open=True, max_open=True), default=0.05,
              show_default=True, help="The gate's minimum effect: SLOWER needs more than half of it, with confidence.")
@click.option("--round-ms", type=click.FloatRange(1, 10_000), default=20.0, show_default=True,
              help="Device time sampled per case, commit and round.")
@click.option("--report-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the Markdown report here.")
@click.option("--extra-kernels", multiple=True, metavar="MODULE", hidden=True,
              help="Import kernel specs from extra modules of both trees (tests plant kernels so).")
@db_option
@clean_errors
def command(candidate: str | None, artifact: Path | None, baseline: str | None, cases: tuple[str, ...],
            baseline_commit: str | None, candidate_commit: str | None, repo: Path, device: str, max_rounds: int,
            min_effect: float, round_ms: float, report_file: Path | None, extra_kernels: tuple[str, ...],
            db_url: str | None) -> None:
    """Re-measure the cases a gate flags on one device, baseline and candidate commits interleaved.

    Each commit is checked out into a temporary git worktree and imported by its own worker process;
    rounds alternate between them on the same inputs until each case is SAME, SLOWER or FASTER (a
    sequential sign test on the paired ratios; false SLOWER at most 2.5% per confirmation) or the round
    limit says UNKNOWN. From a gate, its other failures (accuracy, errors, missing cases) still fail:
    this verdict replaces the gate's on the flagged perf cases only. Exit 0: every case SAME or FASTER
    (or nothing to confirm). Exit 1: a case is SLOWER, or the gate fails on something else. Exit 2: a
    case is UNKNOWN, or bad options.
    """
    from collector.confirm import ConfirmError, confirm, exit_code, report, resolve_commit
    from kernelwatch.output import terminal

    try:
        if cases and (candidate or artifact or baseline):
            raise ConfirmError("give either --case (with --baseline-commit) or a gate's --candidate/--artifact "
                               "and --baseline, not both")
        others: list[str] = []
        if cases:
            if not baseline_commit:
                raise ConfirmError("--case needs --baseline-commit SHA")
            keys = list(dict.fromkeys(cases))
            base_sha, cand_sha = baseline_commit, candidate_commit or _head(repo)
        else:
            keys, others, base_sha, cand_sha = _from_gate(candidate, artifact, baseline, db_url)
            base_sha, cand_sha = baseline_commit or base_sha, candidate_commit or cand_sha
            if others:
                click.echo(terminal(f"kernelwatch confirm: the gate also fails on {len(others)} case(s) that a "
                                    "re-measurement cannot settle (the job fails whatever is confirmed): "
                                    + "; ".join(others[:5]) + (" ..." if len(others) > 5 else "")), err=True)
            if not keys:
                click.echo("kernelwatch confirm: nothing to confirm: the gate flags no performance case")
                sys.exit(1 if others else 0)
        base_sha = resolve_commit(repo, base_sha, "the baseline commit")
        cand_sha = resolve_commit(repo, cand_sha, "the candidate commit")
        device = _device(device)
        click.echo(f"kernelwatch confirm: {len(keys)} case(s), {cand_sha[:12]} vs {base_sha[:12]} on {device}, "
                   f"at most {max_rounds} rounds", err=True)
        results = confirm(repo, base_sha, cand_sha, keys, device, extra_kernels, min_effect,
                          max_rounds=max_rounds, round_ms=round_ms,
                          progress=lambda line: click.echo(terminal(f"kernelwatch confirm: {line}"), err=True))
    except ConfirmError as exc:
        fail(str(exc))
    text = report(results, base_sha, cand_sha)
    click.echo(terminal(text))
    if report_file is not None:
        from db.files import replaced_link_note, write_atomic

        try:
            link = write_atomic(report_file, (text + "\n").encode("utf-8"))
            if link is not None:
                click.echo(terminal(f"kernelwatch confirm: {replaced_link_note(report_file, link)}"), err=True)
        except OSError as exc:
            fail(f"--report-file {report_file}: {exc.strerror or exc}")
    sys.exit(1 if others else exit_code(results))


def _head(repo: Path) -> str:
    from collector.confirm import _git

    return _git(repo, "rev-parse", "--verify", "HEAD")


def _device(device: str) -> str:
    from collector.backends import check_available, detect_device
    from collector.confirm import ConfirmError

    resolved = detect_device() if device == "auto" else device
    if device == "auto" and resolved == "cpu":
        raise ConfirmError("no GPU or NPU is visible; --device cpu times Triton's interpreter (tests only)")
    try:
        check_available(resolved)
    except (RuntimeError, ValueError) as exc:
        raise ConfirmError(str(exc)) from None
    return resolved


def _from_gate(candidate: str | None, artifact: Path | None, baseline: str | None,
               db_url: str | None) -> tuple[list[str], list[str], str, str]:
    """(the perf cases the gate flags, its other failures in words, the baseline run's commit, the candidate
    run's commit)."""
    from ci.gate import GateUndecided, decide
    from collector.confirm import ConfirmError
    from db.artifact import load_artifact
    from db.engine import open_database
    from db.export import export_run, find_run_id
    from db.schema import to_data
    from kernelwatch.options import expected_message

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
    keys = [v.case for v in result.verdicts if v.suite == "perf" and v.status in CONFIRMABLE]
    others = [f"{v.case} ({v.suite} {v.status})" for v in result.failed if v.case not in keys]
    return keys, others, result.baseline["commit"], doc["run"]["commit"]["sha"]
