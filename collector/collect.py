"""One collector run: choose cases, run them in isolated device workers, assemble the artifact.

The parent process never touches the device. Each device gets a worker process; all of them start
at once and each measures its own device's ceilings (the result of a case measured on device k is
compared with device k's ceilings). Cases are dealt by :mod:`collector.schedule`: the perf cases of
one baseline key go to one worker (which measures the PyTorch baselines once for all of them),
longest groups first. A case that raises is recorded by its worker, a case that kills its worker or
outlives the per-case limit is recorded here, the worker is replaced, and the suite goes on. Every
finished item is appended to the run's journal (:mod:`db.journal`) at once. The run ends
``complete`` when no case errored, ``partial`` when some did or the run was interrupted, ``failed``
when none could run.

Accuracy inputs come from each case's fixed gating seed (``collector.accuracy``). With
``explore_seeds`` > 0 every accuracy case is also run on that many fresh seeds, as separate work items
("explore", key); they become accuracy rows of kind "explore", which the gate reports and never
judges, and neither an errored nor an unfinished exploration makes the run partial.

``run.phases_s`` holds where the time went: wall seconds of the parent's phases (``setup``,
``workers``: their start-up and ceilings, ``suites``, ``stop``, ``journal``, ``total``), worker
seconds summed over workers per phase (``worker.*``), and each device's busy and idle seconds
during the suites (``busy.<device>``, ``idle.<device>``); :func:`format_phases` prints them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import multiprocessing as mp
import os
import random
import shlex
import signal
import socket
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from collector.progress import Progress
from collector.schedule import Dispatcher, plan
from collector.worker import WorkItem, worker_main
from db.journal import JournalWriter, build_document, check_record
from db.schema import (
    ArtifactError,
    CaseInfo,
    Commit,
    Hardware,
    RunDocument,
    RunInfo,
    devices_note,
    format_time,
    host_note,
    new_run_id,
)

SUITES = ("accuracy", "perf")
STARTUP_GRACE_S = 120.0  # importing torch and initialising a device, on top of the first case's limit
DESCRIBE_TIMEOUT_S = 600.0
MAX_CPU_WORKERS = 4  # --device cpu --devices all: one interpreter worker per core, up to this many

# A rough cost model that only orders the work (longest first); nothing measured depends on it.
# A perf item compiles its kernel and times 3-5 implementations (~0.3 s each: warm-up, 100 ms of
# samples, the per-call batches); its inputs are generated on the host. An accuracy item is
# dominated by its float64 reference on the host.
PERF_ITEM_S = 3.0
ACCURACY_ITEM_S = 0.05
HOST_BYTES_PER_S = 1e9
REFERENCE_BYTES_PER_S = 2e8


class SelectionError(ValueError):
    """The kernels or cases asked for do not exist (a usage error: nothing was run)."""


@dataclass
class Options:
    kernels: tuple[str, ...] = ()
    suites: tuple[str, ...] = SUITES
    device: str = "auto"
    all_devices: bool = False
    case_timeout_s: float = 600.0
    trigger: str = "manual"
    ci_job: str | None = None
    extra_modules: tuple[str, ...] = ()
    match: str | None = None  # substring of the case key
    cases: tuple[str, ...] = ()  # exact case keys
    seed: int | None = None  # base of the exploration seeds (fresh when None)
    explore_seeds: int = 0
    profile: bool = False
    progress: bool = True
    command: str | None = None
    notes: list[str] = field(default_factory=list)
    time_on_cpu: bool = False  # run the perf suite on the interpreter too (tests of the perf path)
    run_id: str | None = None
    journal: Path | None = None  # where finished items are appended as they finish (None: no journal)


def resolve_device(requested: str) -> str:
    from collector.backends import check_available, detect_device

    device = detect_device() if requested == "auto" else requested
    check_available(device)
    return device


def select_items(opts: Options) -> tuple[list[WorkItem], dict[WorkItem, Any]]:
    """The (suite, key) work items of the requested kernels and suites, with their cases."""
    from kernels import discover

    specs = discover(opts.extra_modules)
    unknown = [k for k in opts.kernels if k not in specs]
    if unknown:
        raise SelectionError(f"unknown kernel {unknown[0]!r}; known: {', '.join(sorted(specs))}")
    chosen = [specs[k] for k in (opts.kernels or tuple(sorted(specs)))]
    items: list[WorkItem] = []
    cases: dict[WorkItem, Any] = {}
    explore: list[WorkItem] = []
    known: set[str] = set()
    for spec in chosen:
        for suite in opts.suites:
            for case in spec.accuracy_cases() if suite == "accuracy" else spec.perf_cases():
                known.add(case.key)
                if (opts.match and opts.match not in case.key) or (opts.cases and case.key not in opts.cases):
                    continue
                item = (suite, case.key)
                if item not in cases:
                    items.append(item)
                    cases[item] = (spec, case)
                    if suite == "accuracy" and opts.explore_seeds > 0:
                        explore.append(("explore", case.key))
                        cases[explore[-1]] = (spec, case)
    _check_selection(opts, known, items)
    return items + explore, cases


def _suite_keys(opts: Options, suite: str) -> set[str]:
    from kernels import discover

    specs = discover(opts.extra_modules)
    chosen = [specs[k] for k in (opts.kernels or tuple(sorted(specs)))]
    return {c.key for spec in chosen for c in (spec.accuracy_cases() if suite == "accuracy" else spec.perf_cases())}


def _check_selection(opts: Options, known: set[str], items: list[WorkItem]) -> None:
    """A case filter that selects nothing is a typo or a case this commit does not have: say so, never
    write an empty "complete" run."""
    where = f"{', '.join(opts.kernels) or 'any kernel'} (suites: {', '.join(opts.suites) or 'none'})"
    if opts.match is not None and not opts.match:
        raise SelectionError("--match '': empty text would select every case; leave --match out to run them all")
    for key in opts.cases:
        if key not in known:
            other = [s for s in SUITES if s not in opts.suites and key in _suite_keys(opts, s)]
            if other:
                raise SelectionError(f"--case {key!r} is a case of the {other[0]} suite, which this run does not "
                                     f"include (suites: {', '.join(opts.suites)})")
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise SelectionError(f"--case {key!r}: no such case in {where}{hint}")
    if not items and (opts.match or opts.cases):
        what = f"--match {opts.match!r}" if opts.match else "--case"
        raise SelectionError(f"{what} selects no case of {where}")


def worker_devices(device: str, all_devices: bool) -> list[tuple[str, str]]:
    """(torch device, label) per worker. On the CPU, ``all`` means one interpreter worker per core (at
    most :data:`MAX_CPU_WORKERS`), labelled ``cpu:0``, ``cpu:1``... like the devices of a GPU host."""
    from collector.backends import device_count

    if device == "cpu":
        n = min(os.cpu_count() or 1, MAX_CPU_WORKERS) if all_devices else 1
        return [("cpu", f"cpu:{i}") for i in range(n)]
    n = device_count(device) if all_devices else 1
    return [(f"{device}:{i}", f"{device}:{i}") for i in range(n)]


def host_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def group_of(item: WorkItem, cases: dict[WorkItem, Any]) -> tuple[str, str]:
    """Perf cases of one baseline key run in one worker (which then measures the baselines once)."""
    spec, case = cases[item]
    return ("perf", spec.baseline_key(case)) if item[0] == "perf" else item


def cost_of(item: WorkItem, cases: dict[WorkItem, Any]) -> float:
    """Rough seconds an item takes (see the constants above): only its rank matters."""
    spec, case = cases[item]
    size = spec.bytes_moved(case)
    if item[0] == "perf":
        return PERF_ITEM_S + size / HOST_BYTES_PER_S
    return case.trials * (ACCURACY_ITEM_S + size / REFERENCE_BYTES_PER_S)


class WorkerHandle:
    """One device's worker process, restarted when a case kills it."""

    def __init__(self, ctx, index: int, device: str, label: str, config: dict[str, Any]) -> None:  # noqa: ANN001
        self.ctx, self.index, self.device, self.label = ctx, index, device, label
        self.config = {**config, "device": device, "label": label}
        self.process = None
        self.conn = None
        self.deadline = 0.0
        self.sent_at = 0.0
        self.fresh = True

    def start(self) -> None:
        parent, child = self.ctx.Pipe()
        self.process = self.ctx.Process(target=worker_main, name=f"kernelwatch-{self.label}",
                                        args=(child, {**self.config, "parent": os.getpid()}), daemon=True)
        self.process.start()
        child.close()
        self.conn = parent
        self.fresh = True

    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def send(self, msg: dict[str, Any], timeout_s: float) -> None:
        if not self.alive():
            self.start()
        self.sent_at = time.monotonic()
        self.deadline = self.sent_at + timeout_s + (STARTUP_GRACE_S if self.fresh else 0.0)
        self.fresh = False
        self.conn.send(msg)

    def kill(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            self.process.join(timeout=10)
        self.process = None

    def death_message(self) -> str:
        if self.process is not None:
            # The pipe closes a moment before the process is reaped: wait for its exit status.
            self.process.join(timeout=10)
        code = self.process.exitcode if self.process else None
        if code is not None and code < 0:
            try:
                return f"the worker process was killed by {signal.Signals(-code).name} while running this case"
            except ValueError:
                pass
        return f"the worker process died (exit code {code}) while running this case"

    def request_stop(self) -> None:
        if self.alive():
            with contextlib.suppress(OSError):
                self.conn.send({"op": "stop"})

    def stop(self) -> None:
        """Ask the worker to stop, wait a while, then kill it. :func:`stop_all` stops several at once."""
        self.request_stop()
        if self.process is not None:
            self.process.join(timeout=10)
        self.kill()


def stop_all(handles: list[WorkerHandle]) -> None:
    """Stop every worker, in parallel: each takes a second or two to tear torch down."""
    for h in handles:
        h.request_stop()
    for h in handles:
        h.stop()


def _start_workers(handles: list[WorkerHandle], notes: list[str]) -> dict[int, dict[str, Any]]:
    """Start every worker at once; each describes its device and measures its ceilings. A worker that
    cannot is left out (with a note); the run fails only when none can."""
    for h in handles:
        h.send({"op": "describe"}, timeout_s=DESCRIBE_TIMEOUT_S)
    replies: dict[int, dict[str, Any]] = {}
    pending = list(handles)
    while pending:
        timeout = max(0.0, min(h.deadline for h in pending) - time.monotonic())
        wait([h.conn for h in pending] + [h.process.sentinel for h in pending], timeout=timeout)
        for h in list(pending):
            why = None
            if h.conn.poll():
                try:
                    replies[h.index] = h.conn.recv()
                    pending.remove(h)
                    continue
                except (EOFError, OSError):
                    why = h.death_message()
            elif not h.alive():
                why = h.death_message()
            elif time.monotonic() > h.deadline:
                why = f"no answer in {DESCRIBE_TIMEOUT_S:g} s"
            if why is not None:
                notes.append(f"{h.label} left out: its worker could not describe the device ({why})")
                h.kill()
                pending.remove(h)
    if not replies:
        raise RuntimeError(f"no worker could describe its device: {'; '.join(notes[-len(handles):])}")
    return replies


def _error_result(item: WorkItem, cases: dict[WorkItem, Any], explore_base: int, message: str, device: str) -> Any:
    from collector.accuracy import error_result, explore_seed
    from collector.perf import error_results

    spec, case = cases[item]
    if item[0] == "accuracy":
        return error_result(case, message)
    if item[0] == "explore":
        return error_result(case, message, explore_seed(case, explore_base, 1))
    return error_results(spec, case, message, device)


def make_record(item: WorkItem, result: Any, cases: dict[WorkItem, Any], device: str, errored: bool,
                seconds: float, phases: dict[str, float]) -> dict[str, Any]:
    """The journal record of one finished item: its case and result rows as the artifact holds them."""
    _, case = cases[item]
    record: dict[str, Any] = {
        "suite": item[0], "key": item[1], "device": device, "errored": errored, "seconds": round(seconds, 6),
        "finished_at": format_time(dt.datetime.now(dt.timezone.utc)), "phases": phases,
        "case": CaseInfo(key=case.key, kernel=case.kernel, variant=case.variant, dtype=case.dtype,
                         params=case.json_params()).model_dump(mode="json"),
        "accuracy": [], "perf": [], "profiler": []}
    if item[0] == "accuracy":
        record["accuracy"] = [{"case": case.key, **result}]
    elif item[0] == "explore":
        record["accuracy"] = [{"case": case.key, **result, "kind": "explore"}]
    else:
        rows, metrics = (result["perf"], result["profiler"]) if isinstance(result, dict) else (result, [])
        record["perf"] = [{"case": case.key, **r} for r in rows]
        record["profiler"] = [{"case": case.key, **m} for m in metrics]
    return check_record(record, f"{item[0]} {item[1]}")


def _ceiling_note(ceilings: dict[str, dict[str, Any]]) -> str:
    def fmt(value: Any, unit: str) -> str:
        return "?" if value is None else f"{value} {unit}"

    parts = [f"{label} copy {fmt(c.get('peak_gbps'), 'GB/s')}, read {fmt(c.get('peak_read_gbps'), 'GB/s')}, "
             f"{fmt(c.get('peak_tflops'), 'TFLOP/s')}" for label, c in ceilings.items()]
    return "ceilings per device (each result is compared with its own device's): " + "; ".join(parts)


def effective_suites(opts: Options) -> tuple[str, tuple[str, ...]]:
    """(device, the suites that run there): the perf suite is skipped in the CPU interpreter unless
    ``time_on_cpu``. Raises :class:`SelectionError` when nothing is left to run."""
    device = resolve_device(opts.device)
    if opts.time_on_cpu and device != "cpu":
        raise ValueError(f"--cpu-perf times the perf suite on the CPU interpreter; it cannot go with --device {device}")
    suites = opts.suites
    if device == "cpu" and not opts.time_on_cpu:
        suites = tuple(s for s in suites if s != "perf")
        if not suites:
            raise SelectionError("nothing to run: the perf suite is skipped on cpu (Triton's interpreter: timings "
                                 "would mean nothing); add --suite accuracy, or run on a GPU or NPU")
    return device, suites


def check_selection(opts: Options) -> None:
    """Everything a usage error could be, checked before anything is created (a database, a journal)."""
    _, suites = effective_suites(opts)
    select_items(Options(**{**opts.__dict__, "suites": suites}))


def check_run_fields(opts: Options) -> None:
    """The run's own fields (commit and branch from git or CI variables, --ci-job, the command line) fit
    the schema, checked before any worker starts or any journal is written: one line naming the field."""
    from pydantic import ValidationError

    from collector.metadata import git_info
    from db.schema import describe

    commit = git_info()
    try:
        Commit(**commit)
    except ValidationError as exc:
        raise ValueError(f"the run cannot be recorded: run.commit.{describe(exc)}") from None
    try:
        _run_info(opts, new_run_id(), "cpu", commit, {}, dt.datetime.now(dt.timezone.utc), None, "running", [], None)
    except ValidationError as exc:
        raise ValueError(f"the run cannot be recorded: run.{describe(exc)}") from None


def run_collection(opts: Options) -> RunDocument:
    """Run the suites and return a complete ``kernelwatch.run/1`` document (not yet written).

    With ``opts.journal`` every finished item is on disk before this returns (see :mod:`db.journal`);
    the caller removes the journal once the document is stored.
    """
    t_start = time.monotonic()
    wall: Counter = Counter()
    worker_phases: Counter = Counter()
    busy: Counter = Counter()
    from collector.metadata import git_info

    device, suites = effective_suites(opts)
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    notes = list(opts.notes)
    if device == "cpu" and "perf" in opts.suites:
        if opts.time_on_cpu:
            notes.append("perf suite timed on the CPU in Triton's interpreter (--cpu-perf): a test of the "
                         "collector, the numbers mean nothing")
        else:
            notes.append("perf suite skipped: on the CPU kernels run in Triton's interpreter; its timings mean nothing")
            print("kernelwatch: perf suite skipped on cpu (Triton's interpreter: timings would mean nothing)",
                  file=sys.stderr)
    items, cases = select_items(Options(**{**opts.__dict__, "suites": suites}))
    if opts.explore_seeds < 0:
        raise ValueError(f"--explore-seeds must be 0 or more, got {opts.explore_seeds}")
    run_seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(1 << 31)
    if opts.explore_seeds:
        notes.append(f"exploration: {opts.explore_seeds} fresh seeds per accuracy case, base {run_seed} "
                     "(accuracy rows of kind explore; never part of the verdict)")
    run_id = opts.run_id or new_run_id()
    started = dt.datetime.now(dt.timezone.utc)
    commit = git_info()
    workers = worker_devices(device, opts.all_devices)
    config = {"extra_modules": list(opts.extra_modules), "explore": (run_seed, opts.explore_seeds),
              "profile": opts.profile,
              "threads": max(1, host_cpus() // len(workers)) if len(workers) > 1 else 0,
              "time_on_cpu": opts.time_on_cpu}
    journal = JournalWriter(opts.journal) if opts.journal is not None else None
    ctx = mp.get_context("spawn")
    handles = [WorkerHandle(ctx, i, d, label, config) for i, (d, label) in enumerate(workers)]
    records: dict[WorkItem, dict[str, Any]] = {}
    errored: set[WorkItem] = set()
    status = "complete"
    described: dict[str, Any] = {}
    ceilings: dict[str, dict[str, Any]] = {}
    dispatcher = Dispatcher(items, plan(items, lambda i: group_of(i, cases), lambda i: cost_of(i, cases)))
    progress: Progress | None = None
    wall["setup"] = time.monotonic() - t_start
    t_suites = t_suites_end = None
    previous_term = signal.signal(signal.SIGTERM, _interrupt)  # a cancelled CI job still leaves its artifact
    try:
        t_workers = time.monotonic()
        replies = _start_workers(handles, notes)
        wall["workers"] = time.monotonic() - t_workers
        for index, reply in sorted(replies.items()):
            worker_phases.update(reply.get("phases", {}))
            ceilings[handles[index].label] = reply["peaks"]
        described = replies[min(replies)]
        if len(ceilings) > 1 and any(v is not None for c in ceilings.values() for v in c.values()):
            notes.append(_ceiling_note(ceilings))
        physical = {handles[i].label: r.get("physical") for i, r in sorted(replies.items())}
        if any(physical.values()):
            notes.append(devices_note(physical))
        notes.append(host_note(socket.gethostname()))
        live = [h for h in handles if h.index in replies]
        if journal is not None:
            journal.header(_run_info(opts, run_id, device, commit, described, started, None, "running", notes, None),
                           _hardware(described), len(items))
        progress = Progress(len(items), opts.progress, total_cost=sum(cost_of(i, cases) for i in items))
        t_suites = time.monotonic()

        def finish_item(h: WorkerHandle, item: WorkItem, result: Any, failed: bool, phases: dict[str, float]) -> None:
            seconds = time.monotonic() - h.sent_at
            busy[h.label] += seconds
            worker_phases.update(phases)
            try:
                record = make_record(item, result, cases, h.label, failed, seconds, phases)
            except ArtifactError as exc:  # a value the schema refuses is this case's error, not the run's end
                failed = True
                record = make_record(item, _error_result(item, cases, run_seed, f"result refused by the schema: "
                                                         f"{exc}"[:500], h.label), cases, h.label, True, seconds,
                                     phases)
            dispatcher.complete(h.index, record)
            records[item] = record
            if failed:
                errored.add(item)
            if journal is not None:
                journal.result(record)
            progress.update(item[1], cost_of(item, cases))

        while not dispatcher.finished:
            for h in live:
                if dispatcher.current(h.index) is None:
                    item = dispatcher.take(h.index)
                    if item is not None:
                        h.send({"op": "case", "item": item, "peaks": ceilings[h.label]}, opts.case_timeout_s)
            busy_handles = [handles[i] for i in dispatcher.busy_workers]
            if not busy_handles:
                break
            timeout = max(0.0, min(h.deadline for h in busy_handles) - time.monotonic())
            wait([h.conn for h in busy_handles] + [h.process.sentinel for h in busy_handles], timeout=timeout)
            for h in busy_handles:
                item = dispatcher.current(h.index)
                message = None
                if h.conn.poll():
                    try:
                        reply = h.conn.recv()
                    except (EOFError, OSError):
                        reply = None
                    if reply is not None:
                        finish_item(h, item, reply["result"], reply["errored"], reply.get("phases", {}))
                        continue
                    message = h.death_message()
                elif not h.alive():
                    message = h.death_message()
                elif time.monotonic() > h.deadline:
                    message = f"exceeded the per-case time limit of {opts.case_timeout_s:g} s"
                if message is None:
                    continue
                h.kill()
                finish_item(h, item, _error_result(item, cases, run_seed, message, h.label), True, {})
        t_suites_end = time.monotonic()
    except KeyboardInterrupt:
        missing = [i for i in items if i[0] != "explore" and i not in records]
        if not records:
            status = "failed"
        elif missing:
            status = "partial"
        notes.append("interrupted: cases not run are missing" if missing else
                     "interrupted during exploration: every gating case ran, some exploration did not")
    except RuntimeError as exc:
        status = "failed"
        notes.append(str(exc))
    finally:
        if t_suites is not None and t_suites_end is None:
            t_suites_end = time.monotonic()
        signal.signal(signal.SIGTERM, previous_term)
        if progress is not None:
            progress.close()
        t_stop = time.monotonic()
        stop_all(handles)
        wall["stop"] = time.monotonic() - t_stop
    if t_suites is not None:
        wall["suites"] = t_suites_end - t_suites
        for label in ceilings:
            wall[f"busy.{label}"] = busy[label]
            wall[f"idle.{label}"] = max(0.0, wall["suites"] - busy[label])
    if status == "complete" and any(item[0] != "explore" for item in errored):
        status = "partial"
    if not described:
        described = {"hardware": _unknown_hardware(device), "versions": {}}
    wall["journal"] = journal.seconds if journal is not None else 0.0
    if journal is not None and journal.failed:
        notes.append(journal.failed)
    wall["total"] = time.monotonic() - t_start
    phases_s = {k: round(v, 3) for k, v in wall.items()}
    phases_s.update({f"worker.{k}": round(v, 3) for k, v in sorted(worker_phases.items())})
    doc = assemble(opts, device, commit, described, started, status, [records[i] for i in items if i in records],
                   notes, run_id, phases_s)
    if journal is not None:
        if journal.lines:
            journal.end(doc.run.status, doc.run.finished_at, doc.run.notes, doc.run.phases_s)
            journal.close()
        else:  # no header: the run ended before any device was described, nothing to recover
            journal.remove()
    return doc


def _interrupt(signum, frame) -> None:  # noqa: ANN001
    raise KeyboardInterrupt


def _unknown_hardware(device: str) -> dict[str, Any]:
    return {"vendor": {"cuda": "nvidia", "npu": "ascend"}.get(device, "cpu"), "device_name": "unknown",
            "device_count": 0, "compute_units": None, "memory_bytes": None, "driver": None, "toolkit": None,
            "peak_gbps": None, "peak_gbps_datasheet": None, "peak_tflops": None, "peak_tflops_datasheet": None,
            "peak_read_gbps": None}


def _hardware(described: dict[str, Any]) -> Hardware:
    return Hardware(**{k: described["hardware"].get(k) for k in Hardware.model_fields})


def _run_info(opts: Options, run_id: str, device: str, commit: dict[str, Any], described: dict[str, Any],
              started: dt.datetime, finished: dt.datetime | None, status: str, notes: list[str],
              phases_s: dict[str, float] | None) -> RunInfo:
    return RunInfo(id=run_id, commit=Commit(**commit), trigger=opts.trigger, ci_job=opts.ci_job, device=device,
                   command=opts.command, versions=described.get("versions", {}), started_at=format_time(started),
                   finished_at=format_time(finished) if finished else None, status=status, synthetic=False,
                   notes="; ".join(notes) or None, phases_s=phases_s)


def assemble(opts: Options, device: str, commit: dict[str, Any], described: dict[str, Any], started: dt.datetime,
             status: str, records: list[dict[str, Any]], notes: list[str], run_id: str | None = None,
             phases_s: dict[str, float] | None = None) -> RunDocument:
    """The run as a typed document (``db.schema``) from the records of its finished items."""
    run = _run_info(opts, run_id or new_run_id(), device, commit, described, started, dt.datetime.now(dt.timezone.utc),
                    status, notes, phases_s)
    return build_document(run.model_dump(mode="json"), _hardware(described).model_dump(mode="json"), records)


PHASE_NAMES = {
    "setup": "setup (devices, cases, git)", "workers": "workers start + ceilings", "suites": "suites",
    "stop": "workers stop", "journal": "journal writes", "total": "total",
    "worker.startup": "start-up (imports, device)", "worker.ceilings": "ceilings (copy, read, matmul)",
    "worker.accuracy": "accuracy suite", "worker.perf.inputs": "perf: inputs",
    "worker.perf.warmup": "perf: compile + warm-up", "worker.perf.timing": "perf: device timing",
    "worker.perf.call": "perf: cost per call", "worker.perf.memory": "perf: peak memory",
    "worker.profiling": "profiling",
}


def format_phases(phases: dict[str, float], writing_s: float | None = None) -> str:
    """The per-phase time summary printed at the end of ``collect``."""
    wall = [k for k in ("setup", "workers", "suites", "stop", "journal", "total") if k in phases]
    work = [k for k in PHASE_NAMES if k.startswith("worker.") and k in phases]
    work += sorted(k for k in phases if k.startswith("worker.") and k not in PHASE_NAMES)
    devices = sorted(k.removeprefix("busy.") for k in phases if k.startswith("busy."))
    lines = ["kernelwatch: time by phase (s)", "  wall clock"]
    lines += [f"    {PHASE_NAMES[k]:<34}{phases[k]:9.1f}" for k in wall]
    if writing_s is not None:
        lines.append(f"    {'writing the run (after the above)':<34}{writing_s:9.1f}")
    if work:
        lines.append(f"  worker time, summed over {max(1, len(devices))} worker(s)")
        lines += [f"    {PHASE_NAMES.get(k, k.removeprefix('worker.')):<34}{phases[k]:9.1f}" for k in work]
    if devices:
        lines.append("  per device during the suites: busy / idle")
        lines += [f"    {d:<34}{phases[f'busy.{d}']:9.1f} / {phases.get(f'idle.{d}', 0.0):.1f}" for d in devices]
    return "\n".join(lines)


def reproduce_command(argv: list[str]) -> str:
    return "kernelwatch " + " ".join(shlex.quote(a) for a in argv)
