"""`kernelwatch synth`."""

from __future__ import annotations

import click

from kernelwatch.options import clean_errors, db_option, project_option


@click.command("synth")
@click.option("--runs", type=click.IntRange(1, 100_000), default=30, show_default=True)
@click.option("--cases", type=click.IntRange(1, 100_000), default=12, show_default=True)
@click.option("--hardware", type=click.IntRange(1, 2), default=1, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--step",
    "steps",
    multiple=True,
    metavar="AT:FACTOR[:MATCH]",
    help="From run AT on, matching cases take FACTOR times as long (e.g. 20:1.1:KERNEL).",
)
@click.option(
    "--demo-from",
    "demo_from",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Instead: the demo branch (synthetic/demo) derived from this real run artifact, two runs whose "
    "second has a regression, an improvement and an accuracy drift (kernelwatch/store/synthetic.py: DEMO_CHANGES).",
)
@db_option
@project_option
@clean_errors
def command(
    runs: int,
    cases: int,
    hardware: int,
    seed: int,
    steps: tuple[str, ...],
    demo_from: str | None,
    db_url: str | None,
) -> None:
    """Fill a database with SYNTHETIC history (labelled so everywhere) for demos and scale tests.

    Its cases are drawn from every kernel this checkout has, with the variants its spec names."""
    import math

    from kernelwatch.store.engine import open_database
    from kernelwatch.store.ingest import OUTCOMES, ingest_documents
    from kernelwatch.store.synthetic import DEMO_CHANGES, Step, SyntheticError, SyntheticHistory, demo_branch

    if demo_from is not None:
        from kernelwatch.store.artifact import load_artifact
        from kernelwatch.store.queries import list_runs
        from kernelwatch.store.schema import hardware_fingerprint, parse_time

        source = load_artifact(demo_from)  # read and derived from before the database is created
        try:
            demo_branch(source)
        except SyntheticError as exc:
            raise click.BadParameter(str(exc), param_hint="--demo-from") from None
        engine = open_database(db_url)
        # Dated after the newest real run of the source's hardware only: a run elsewhere (the demo's CPU run,
        # collected after this) must not move the copies, or the next `make demo` builds other content.
        own = hardware_fingerprint(source.hardware)
        real = [
            r["started"] for r in list_runs(engine) if not r["synthetic"] and r["started"] and r["fingerprint"] == own
        ]
        docs = demo_branch(source, after=parse_time(max(real)) if real else None)
        out = ingest_documents(
            engine, [(f"synthetic demo run {i}", d) for i, d in enumerate(docs)], replace_synthetic=True
        )
        counts = {s: sum(o.status == s for o in out) for s in OUTCOMES}
        click.echo(
            ", ".join(f"{n} {s}" for s, n in counts.items() if n)
            + f": SYNTHETIC demo runs (branch synthetic/demo, derived from {demo_from}):"
        )
        for change in DEMO_CHANGES:
            click.echo(f"  {change.story}")
        return
    from kernelwatch.kernels import discover

    parsed = []
    for s in steps:
        parts = s.split(":")
        try:
            step = Step(int(parts[0]), float(parts[1]), parts[2] if len(parts) > 2 else "")
        except (ValueError, IndexError):
            raise click.BadParameter(f"{s!r}: expected AT:FACTOR[:MATCH]", param_hint="--step") from None
        if not (math.isfinite(step.factor) and step.factor > 0) or step.at < 0:
            raise click.BadParameter(f"{s!r}: AT must be >= 0 and FACTOR a positive number", param_hint="--step")
        parsed.append(step)
    specs = discover()
    kernels = tuple((name, spec.variant_names()) for name, spec in sorted(specs.items()))
    history = SyntheticHistory(runs=runs, cases=cases, hardware=hardware, seed=seed, steps=parsed, kernels=kernels)
    try:
        docs = list(history.sourced_documents())  # every run built and validated before the database is created
    except SyntheticError as exc:
        raise click.BadParameter(str(exc), param_hint="--step" if parsed else None) from None
    out = ingest_documents(open_database(db_url), docs)
    click.echo(f"{sum(o.status == 'ingested' for o in out)} synthetic runs ingested ({len(out)} generated)")
