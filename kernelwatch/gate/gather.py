"""The gate's one trip to the store: everything a verdict needs, gathered into plain data (:class:`Gathered`).

The judge (:mod:`kernelwatch.gate.judge`) is a pure function of it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from kernelwatch.gate.baseline import Baseline, _times, baseline_document, baseline_run
from kernelwatch.gate.result import Expected, GateUndecided, SpecCases
from kernelwatch.kernels.names import (
    KERNEL_IMPL,
    CaseFacts,
    calls_per_sample,
)
from kernelwatch.store.queries import (
    acks,
    confirmations,
    judging_runs,
    perf_rows,
    run_info,
)
from kernelwatch.store.schema import (
    RunDocument,
    hardware_fingerprint,
    recorded_facts,
    to_data,
)

HISTORY_RUNS = 30
# What ``--metric`` compares: (per-run summary column, its samples). gpu: GPU time with the L2 flushed, one
# sample per repetition; call: wall time per call with calls issued back to back (host + device), one
# sample per batch (the collector's cost per call).
METRICS = {"gpu": ("median_ms", "samples_ms"), "call": ("call_ms", "call_samples_ms")}


def case_facts_of(candidate: RunDocument, specs: SpecCases | None) -> dict[str, CaseFacts]:
    """Per case of the candidate, its facts (noise class, launch-bound, references: ``CaseFacts``): the checked-out
    specs' where they define the case, else what the run recorded (or, from before it did, its rows imply:
    ``kernelwatch.store.schema.recorded_facts``)."""
    return {**recorded_facts(candidate), **(specs.facts if specs else {})}


def _histories(
    engine: Engine, candidate: RunDocument, branch: str, column: str = "median_ms", now: dt.datetime | None = None
) -> tuple[dict[str, list[tuple[float, str | None]]], int]:
    """(per case, (the kernel's median, its GPU UUID) in commit order; how many runs were read): the history
    that judges the candidate, from :func:`kernelwatch.store.queries.judging_runs` (the last HISTORY_RUNS complete runs
    of ``branch`` on the candidate's hardware, no PR push, none after the candidate or ``now``; one query).
    A case's history holds only timings taken like the candidate's, one call or a batch of many per sample
    (:func:`calls_per_sample`): a launch-bound MSELoss reads 5.8 us one way and 1.95 us the other, and a history
    holding both would make its noise look like 50%."""
    fingerprint = hardware_fingerprint(to_data(candidate)["hardware"])
    method = {p.case: calls_per_sample(p.timing) for p in candidate.perf if p.implementation == KERNEL_IMPL}
    runs = judging_runs(
        engine,
        fingerprint,
        branch,
        _times(candidate),
        now or dt.datetime.now(dt.timezone.utc),
        candidate.run.id,
        HISTORY_RUNS,
    )
    order = {r["id"]: i for i, r in enumerate(runs)}
    rows = perf_rows(engine, list(order), implementations=(KERNEL_IMPL,), with_params=False)
    out: dict[str, list[tuple[int, float, str | None]]] = {}
    for r in rows:
        if r[column] and calls_per_sample(r["timing"]) == method.get(r["case"]):
            out.setdefault(r["case"], []).append((order[r["run_id"]], r[column], r["device_uuid"]))
    return {case: [(m, u) for _, m, u in sorted(points)] for case, points in out.items()}, len(runs)


@dataclass
class Gathered:
    """Everything the judge reads of the store, as plain data (:func:`gather`; the judge never touches a database):

    * ``candidate``: the run judged; ``assembled``: its baseline's runs per case, ``base`` their results as one
      document (:func:`~kernelwatch.gate.baseline.baseline_document`), ``infos`` each of those runs' commit time
      and start (run id -> :func:`~kernelwatch.store.queries.run_info`);
    * ``histories``: per case, the kernel's per-run times (and GPU) in commit order, of the baseline branch's
      judging runs, timed like the candidate (one call or a batch per sample) in the compared ``metric``;
      ``judges``: how many runs that history was read from;
    * ``confirmations``: the stored confirmations on the candidate's hardware of its kernel-timed cases;
    * ``acks``: the acknowledged changes (``kernelwatch ack``) on its hardware.
    """

    candidate: RunDocument
    assembled: Baseline
    base: RunDocument
    infos: dict[str, dict[str, Any]]
    metric: str
    histories: dict[str, list[tuple[float, str | None]]]
    judges: int
    confirmations: list[dict[str, Any]]
    acks: list[dict[str, Any]]


def gather(
    engine: Engine,
    candidate: RunDocument,
    baseline_spec: str | Baseline,
    metric: str = "gpu",
    expected: Expected | None = None,
    now: dt.datetime | None = None,
) -> Gathered:
    """Read everything a verdict on ``candidate`` needs from the store, once (the baseline, the history filtered by
    timing method and metric, confirmations, acknowledgements). Raises GateUndecided for an unknown metric or an
    unresolvable baseline (:func:`~kernelwatch.gate.baseline.baseline_run`)."""
    if metric not in METRICS:
        raise GateUndecided(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    fingerprint = hardware_fingerprint(to_data(candidate)["hardware"])
    assembled = baseline_run(engine, baseline_spec, candidate, expected)
    infos = {source["id"]: run_info(engine, source["id"]) or {} for source in assembled.sources}
    base = baseline_document(engine, assembled)
    histories, judges = _histories(engine, candidate, assembled.run["branch"], METRICS[metric][0], now)
    timed = sorted({p.case for p in candidate.perf if p.implementation == KERNEL_IMPL})
    return Gathered(
        candidate,
        assembled,
        base,
        infos,
        metric,
        histories,
        judges,
        confirmations(engine, fingerprint, timed),
        list(acks(engine, fingerprint)),
    )
