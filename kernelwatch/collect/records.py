"""A collector run's records: one per finished work item, journalled at once, then the run document.

A finished item (an accuracy, exploration or perf case, or a perf case's profiler counters: suite
``profile``) becomes a journal record (:func:`make_record`: its case and result rows as the
artifact holds them), kept in memory and appended to the run's journal (:mod:`kernelwatch.store.journal`) by
:class:`Tally`. At the end :func:`assemble` builds the ``kernelwatch.run/1`` document from the
records in item order.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernelwatch.collect.metadata import host_name
from kernelwatch.collect.pool import WorkerHandle, cost_of, progress_group
from kernelwatch.collect.schedule import Dispatcher
from kernelwatch.collect.selection import Options
from kernelwatch.collect.worker import WorkItem
from kernelwatch.kernels.names import vendor
from kernelwatch.store.journal import JournalWriter, build_document, check_record
from kernelwatch.store.schema import (
    AccuracyResult,
    ArtifactError,
    CaseInfo,
    Commit,
    Hardware,
    PerfResult,
    RunDocument,
    RunInfo,
    Scope,
    format_time,
    new_run_id,
)

if TYPE_CHECKING:
    from kernelwatch.collect.progress import Progress


def error_result(
    item: WorkItem, cases: dict[WorkItem, Any], explore_base: int, message: str, where: dict[str, str | None]
) -> AccuracyResult | list[PerfResult]:
    """The result of an item whose worker could not answer; ``where``: the device, physical device and host
    (:func:`kernelwatch.collect.perf.origin`'s fields)."""
    from kernelwatch.collect.accuracy import error_result, explore_seed
    from kernelwatch.collect.perf import error_results

    spec, case = cases[item]
    if item[0] == "accuracy":
        return error_result(case, message)
    if item[0] == "explore":
        return error_result(case, message, explore_seed(case, explore_base, 1))
    return error_results(spec, case, message, where)


def make_record(
    item: WorkItem,
    result: Any,
    cases: dict[WorkItem, Any],
    device: str,
    errored: bool,
    seconds: float,
    phases: dict[str, float],
) -> dict[str, Any]:
    """The journal record of one finished item: its case and result rows as the artifact holds them.

    ``result``: the worker's :class:`~kernelwatch.store.schema.AccuracyResult` (accuracy, explore), its list of
    :class:`~kernelwatch.store.schema.PerfResult` (perf), or the profiling phase's metric rows (profile)."""
    spec, case = cases[item]
    record: dict[str, Any] = {
        "suite": item[0],
        "key": item[1],
        "device": device,
        "errored": errored,
        "seconds": round(seconds, 6),
        "finished_at": format_time(dt.datetime.now(dt.timezone.utc)),
        "phases": phases,
        "case": CaseInfo(
            key=case.key,
            kernel=case.kernel,
            variant=case.variant,
            dtype=case.dtype,
            params=case.json_params(),
            ceiling=spec.case_ceiling(case),
            facts=spec.facts(case).to_data(),
        ).model_dump(mode="json"),
        "accuracy": [],
        "perf": [],
        "profiler": [],
    }
    if item[0] in ("accuracy", "explore"):
        record["accuracy"] = [result.model_dump(mode="json")]
    elif item[0] == "profile":
        record["profiler"] = [{"case": case.key, **m} for m in result]
    else:
        record["perf"] = [r.model_dump(mode="json") for r in result]
    return check_record(record, f"{item[0]} {item[1]}")


@dataclass
class Tally:
    """What the finished items left: their records (in memory and in the journal), which errored, each
    device's busy seconds and the workers' seconds per phase."""

    cases: dict[WorkItem, Any]
    run_seed: int
    dispatcher: Dispatcher
    journal: JournalWriter | None
    progress: Progress | None = None
    records: dict[WorkItem, dict[str, Any]] = field(default_factory=dict)
    errored: set[WorkItem] = field(default_factory=set)
    busy: Counter = field(default_factory=Counter)
    worker_phases: Counter = field(default_factory=Counter)
    where: dict[str, dict[str, str | None]] = field(default_factory=dict)  # label -> device_uuid, host

    def error_result(self, item: WorkItem, message: str, device: str) -> Any:
        where = {"device_uuid": None, "host": host_name(), **self.where.get(device, {}), "device": device}
        return error_result(item, self.cases, self.run_seed, message, where)

    def finish(self, h: WorkerHandle, item: WorkItem, result: Any, failed: bool, phases: dict[str, float]) -> None:
        seconds = time.monotonic() - h.sent_at
        self.busy[h.label] += seconds
        self.worker_phases.update(phases)
        try:
            record = make_record(item, result, self.cases, h.label, failed, seconds, phases)
        except ArtifactError as exc:  # a value the schema refuses is this case's error, not the run's end
            failed = True
            record = make_record(
                item,
                self.error_result(item, f"result refused by the schema: {exc}"[:500], h.label),
                self.cases,
                h.label,
                True,
                seconds,
                phases,
            )
        self.dispatcher.complete(h.index, record)
        self.records[item] = record
        if failed:
            self.errored.add(item)
        if self.journal is not None:
            self.journal.result(record)
        self.progress.update(item[1], cost_of(item, self.cases), seconds, progress_group(item, self.cases))

    def profiled(self, item: WorkItem, rows: list[dict[str, Any]], device: str, seconds: float) -> None:
        """A ``("profile", key)`` item's metric rows (:mod:`kernelwatch.collect.profile_phase`): recorded and
        journalled."""
        try:
            record = make_record(item, rows, self.cases, device, False, seconds, {})
        except ArtifactError as exc:
            from kernelwatch.collect.profile_phase import error_rows

            record = make_record(
                item,
                error_rows(device, f"counters refused by the schema: {exc}"),
                self.cases,
                device,
                False,
                seconds,
                {},
            )
        self.records[item] = record
        if self.journal is not None:
            self.journal.result(record)


def ceiling_note(ceilings: dict[str, dict[str, Any]]) -> str:
    def fmt(value: Any, unit: str) -> str:
        return "?" if value is None else f"{value} {unit}"

    parts = [
        f"{label} copy {fmt(c.get('peak_gbps'), 'GB/s')}, read {fmt(c.get('peak_read_gbps'), 'GB/s')}, "
        f"{fmt(c.get('peak_tflops'), 'TFLOP/s')}"
        for label, c in ceilings.items()
    ]
    return "ceilings per device (each result is compared with its own device's): " + "; ".join(parts)


def unknown_hardware(device: str) -> dict[str, Any]:
    """The hardware block of a run whose device no worker could describe: every field not known."""
    return {
        **dict.fromkeys(Hardware.model_fields),
        "vendor": vendor(device),
        "device_name": "unknown",
        "device_count": 0,
    }


def hardware_of(described: dict[str, Any]) -> Hardware:
    return Hardware(**{k: described["hardware"].get(k) for k in Hardware.model_fields})


def run_info(
    opts: Options,
    run_id: str,
    device: str,
    commit: dict[str, Any],
    described: dict[str, Any],
    started: dt.datetime,
    finished: dt.datetime | None,
    status: str,
    notes: list[str],
    phases_s: dict[str, float] | None,
) -> RunInfo:
    return RunInfo(
        id=run_id,
        commit=Commit(**commit),
        trigger=opts.trigger,
        ci_job=opts.ci_job,
        device=device,
        command=opts.command,
        versions=described.get("versions", {}),
        started_at=format_time(started),
        finished_at=format_time(finished) if finished else None,
        status=status,
        synthetic=False,
        notes="; ".join(notes) or None,
        phases_s=phases_s,
        scope=scope_of(opts, device),
    )


def scope_of(opts: Options, device: str) -> Scope:
    """What the run sets out to measure (:class:`kernelwatch.store.schema.Scope`), as it was asked."""
    selected = set(opts.kernels) | set(opts.carried)
    return Scope(
        suites=[s for s in opts.suites if s != "perf" or device != "cpu" or opts.time_on_cpu],
        kernels=sorted(selected) if opts.kernels else None,
        match=opts.match,
        cases=sorted(opts.cases),
        carried=sorted(opts.carried),
        carried_since=opts.carried_since,
    )


def check_run_fields(opts: Options) -> None:
    """The run's own fields (commit and branch from git or CI variables, --ci-job, the command line) fit
    the schema, checked before any worker starts or any journal is written: one line naming the field."""
    from pydantic import ValidationError

    from kernelwatch.collect.metadata import git_info
    from kernelwatch.store.schema import describe

    commit = git_info()
    try:
        Commit(**commit)
    except ValidationError as exc:
        raise ValueError(f"the run cannot be recorded: run.commit.{describe(exc)}") from None
    try:
        run_info(opts, new_run_id(), "cpu", commit, {}, dt.datetime.now(dt.timezone.utc), None, "running", [], None)
    except ValidationError as exc:
        raise ValueError(f"the run cannot be recorded: run.{describe(exc)}") from None


def assemble(
    opts: Options,
    device: str,
    commit: dict[str, Any],
    described: dict[str, Any],
    started: dt.datetime,
    status: str,
    records: list[dict[str, Any]],
    notes: list[str],
    run_id: str | None = None,
    phases_s: dict[str, float] | None = None,
) -> RunDocument:
    """The run as a typed document (``kernelwatch.store.schema``) from the records of its finished items."""
    run = run_info(
        opts,
        run_id or new_run_id(),
        device,
        commit,
        described,
        started,
        dt.datetime.now(dt.timezone.utc),
        status,
        notes,
        phases_s,
    )
    return build_document(run.model_dump(mode="json"), hardware_of(described).model_dump(mode="json"), records)
