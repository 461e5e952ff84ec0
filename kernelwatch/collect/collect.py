"""One collector run: choose cases, run them in isolated device workers, assemble the artifact.

:func:`run_collection` ties the pieces together: the cases (:mod:`kernelwatch.collect.selection`), the device
workers and the loop that deals them work (:mod:`kernelwatch.collect.pool`, :mod:`kernelwatch.collect.schedule`), the
records of finished items and the run document (:mod:`kernelwatch.collect.records`), and progress
(:mod:`kernelwatch.collect.progress`). Every finished item is appended to the run's journal
(:mod:`kernelwatch.store.journal`) at once. The run ends ``complete`` when no case errored, ``partial`` when some did or
the run was interrupted, ``failed`` when none could run.

Accuracy inputs come from each case's fixed gating seed (``kernelwatch.collect.accuracy``). With
``explore_seeds`` > 0 every accuracy case is also run on that many fresh seeds, as separate work items
("explore", key); they become accuracy rows of kind "explore", which the gate reports and never
judges, and neither an errored nor an unfinished exploration makes the run partial.

``run.phases_s`` holds where the time went: wall seconds of the parent's phases (``setup``,
``workers``: their start-up and ceilings, ``precompile``: every launch compiled ahead on the spare
cores, CUDA only, see :mod:`kernelwatch.collect.precompile`, with ``precompile.compile`` its compile seconds summed over
the pool, ``suites``, ``stop``, ``journal``, ``total``), worker
seconds summed over workers per phase (``worker.*``), and each device's busy and idle seconds
during the suites (``busy.<device>``, ``idle.<device>``); :func:`kernelwatch.collect.progress.format_phases`
prints them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import multiprocessing as mp
import os
import random
import shlex
import signal
import sys
import time
from collections import Counter
from typing import Any

from kernelwatch.collect.pool import (
    WorkerHandle,
    cost_of,
    group_of,
    host_cpus,
    isolated,
    progress_group,
    run_items,
    start_workers,
    stop_all,
    worker_devices,
)
from kernelwatch.collect.precompile import CacheDirs, precompile, spare_processes, target_of, use_cache_dirs
from kernelwatch.collect.progress import Progress, format_phases
from kernelwatch.collect.records import (
    Tally,
    assemble,
    ceiling_note,
    check_run_fields,
    hardware_of,
    run_info,
    unknown_hardware,
)
from kernelwatch.collect.schedule import Dispatcher, plan
from kernelwatch.collect.selection import (
    SUITES,
    Options,
    SelectionError,
    check_selection,
    effective_suites,
    select_items,
)
from kernelwatch.collect.worker import WorkItem
from kernelwatch.store.files import replaced_link_note
from kernelwatch.store.journal import JournalWriter
from kernelwatch.store.schema import RunDocument, new_run_id, whole_note

__all__ = [
    "SUITES",
    "Options",
    "SelectionError",
    "check_run_fields",
    "check_selection",
    "format_phases",
    "reproduce_command",
    "run_collection",
    "select_items",
]


def _cpu_notes(opts: Options, device: str) -> list[str]:
    if device != "cpu" or "perf" not in opts.suites:
        return []
    if opts.time_on_cpu:
        return [
            "perf suite timed on the CPU in Triton's interpreter (--cpu-perf): a test of the "
            "collector, the numbers mean nothing"
        ]
    print("kernelwatch: perf suite skipped on cpu (Triton's interpreter: timings would mean nothing)", file=sys.stderr)
    return ["perf suite skipped: on the CPU kernels run in Triton's interpreter; its timings mean nothing"]


def _describe(
    replies: dict[int, dict[str, Any]],
    handles: list[WorkerHandle],
    tally: Tally,
    ceilings: dict[str, dict[str, Any]],
    notes: list[str],
) -> dict[str, Any]:
    """The first described device stands for the run; every device's ceilings go to ``ceilings``."""
    for index, reply in sorted(replies.items()):
        tally.worker_phases.update(reply.get("phases", {}))
        ceilings[handles[index].label] = reply["peaks"]
    if len(ceilings) > 1 and any(v is not None for c in ceilings.values() for v in c.values()):
        notes.append(ceiling_note(ceilings))
    tally.where.update({handles[i].label: r["where"] for i, r in sorted(replies.items())})
    return replies[min(replies)]


def run_collection(opts: Options) -> RunDocument:
    """Run the suites and return a complete ``kernelwatch.run/1`` document (not yet written).

    With ``opts.journal`` every finished item is on disk before this returns (see :mod:`kernelwatch.store.journal`);
    the caller removes the journal once the document is stored.
    """
    t_start = time.monotonic()
    wall: Counter = Counter()
    from kernelwatch.collect.metadata import git_info

    device, suites = effective_suites(opts)
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    notes = list(opts.notes) + _cpu_notes(opts, device)
    items, cases = select_items(Options(**{**opts.__dict__, "suites": suites}))
    if not opts.match and not opts.cases:
        notes.append(whole_note(list(suites), sorted({spec.name for spec, _ in cases.values()})))
    if opts.explore_seeds < 0:
        raise ValueError(f"--explore-seeds must be 0 or more, got {opts.explore_seeds}")
    run_seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(1 << 31)
    if opts.explore_seeds:
        notes.append(
            f"exploration: {opts.explore_seeds} fresh seeds per accuracy case, base {run_seed} "
            "(accuracy rows of kind explore; never part of the verdict)"
        )
    run_id = opts.run_id or new_run_id()
    started = dt.datetime.now(dt.timezone.utc)
    commit = git_info()
    cache = use_cache_dirs() if device == "cuda" else None  # before the workers start: they inherit it
    handles = _handles(opts, device, run_seed)
    journal = JournalWriter(opts.journal) if opts.journal is not None else None
    if journal is not None and journal.replaced_link is not None:
        print(f"kernelwatch collect: {replaced_link_note(opts.journal, journal.replaced_link)}", file=sys.stderr)
    dispatcher = Dispatcher(
        items, plan(items, lambda i: group_of(i, cases), lambda i: cost_of(i, cases), lambda i: isolated(i, cases))
    )
    tally = Tally(cases, run_seed, dispatcher, journal)
    status = "complete"
    described: dict[str, Any] = {}
    ceilings: dict[str, dict[str, Any]] = {}
    wall["setup"] = time.monotonic() - t_start
    t_suites = t_suites_end = None
    interrupted = False
    profiles = _profile_items(opts, device, items, cases, notes)
    previous_term = signal.signal(signal.SIGTERM, _interrupt)  # a cancelled CI job still leaves its artifact
    try:
        try:
            t_workers = time.monotonic()
            replies = start_workers(handles, notes)
            wall["workers"] = time.monotonic() - t_workers
            described = _describe(replies, handles, tally, ceilings, notes)
            if cache is not None:
                wall["precompile"], wall["precompile.compile"] = _precompile(opts, items, replies, cache, notes)
            if journal is not None:
                journal.header(
                    run_info(opts, run_id, device, commit, described, started, None, "running", notes, None),
                    hardware_of(described),
                    len(items) + len(profiles),
                )
            live = [h for h in handles if h.index in replies]
            group_costs: dict[str, float] = {}
            for i in items + profiles:
                group = progress_group(i, cases)
                group_costs[group] = group_costs.get(group, 0.0) + cost_of(i, cases)
            tally.progress = Progress(
                len(items) + len(profiles),
                opts.progress,
                total_cost=sum(group_costs.values()),
                group_costs=group_costs,
                workers=len(live),
            )
            t_suites = time.monotonic()
            run_items(live, handles, dispatcher, ceilings, opts.case_timeout_s, tally, lambda i: isolated(i, cases))
            t_suites_end = time.monotonic()
        except KeyboardInterrupt:
            interrupted = True
            missing = [i for i in items if i[0] != "explore" and i not in tally.records]
            if not tally.records:
                status = "failed"
            elif missing:
                status = "partial"
            notes.append(
                "interrupted: cases not run are missing"
                if missing
                else "interrupted during exploration: every gating case ran, some exploration did not"
            )
        except RuntimeError as exc:
            status = "failed"
            notes.append(str(exc))
        finally:
            if t_suites is not None and t_suites_end is None:
                t_suites_end = time.monotonic()
            t_stop = time.monotonic()
            stop_all(handles)
            wall["stop"] = time.monotonic() - t_stop
        if profiles and not interrupted and status != "failed":
            t_profile = time.monotonic()
            _profile(opts, tally, profiles, [h.device for h in handles if h.label in ceilings], notes)
            wall["profiling"] = time.monotonic() - t_profile
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        if tally.progress is not None:
            tally.progress.close()
    if t_suites is not None:
        _device_time(wall, t_suites_end - t_suites, tally.busy, ceilings)
    if status == "complete" and any(item[0] != "explore" for item in tally.errored):
        status = "partial"
    if not described:
        described = {"hardware": unknown_hardware(device), "versions": {}}
    wall["journal"] = journal.seconds if journal is not None else 0.0
    if journal is not None and journal.failed:
        notes.append(journal.failed)
    wall["total"] = time.monotonic() - t_start
    _worker_compiles(tally.worker_phases, notes)
    phases_s = {k: round(v, 3) for k, v in wall.items()}
    phases_s.update({f"worker.{k}": round(v, 3) for k, v in sorted(tally.worker_phases.items())})
    doc = assemble(
        opts,
        device,
        commit,
        described,
        started,
        status,
        [tally.records[i] for i in items + profiles if i in tally.records],
        notes,
        run_id,
        phases_s,
    )
    if journal is not None:
        _end_journal(journal, doc)
    return doc


def _precompile(
    opts: Options, items: list[WorkItem], replies: dict[int, dict[str, Any]], cache: CacheDirs, notes: list[str]
) -> tuple[float, float]:
    """Compile every launch of ``items`` ahead of the suites (:mod:`kernelwatch.collect.precompile`), once per kind
    of device among the workers, on the cores the workers leave; the run's notes say how warm the cache was.
    ``KERNELWATCH_PRECOMPILE=0`` turns it off (a comparison, or a way round a failure of its own).
    Returns (wall seconds, compile seconds summed over the pool)."""
    from kernelwatch.kernels.plan import DeviceInfo

    start = time.monotonic()
    compile_s = 0.0
    if os.environ.get("KERNELWATCH_PRECOMPILE", "1").strip().lower() in ("0", "false", "no", "off"):
        notes.append("precompile off (KERNELWATCH_PRECOMPILE=0): every launch compiled in its worker")
        return 0.0, 0.0
    devices = {tuple(sorted(r["plan_device"].items())) for r in replies.values() if r.get("plan_device")}
    for fields in sorted(devices):
        info = DeviceInfo(**dict(fields))
        if target_of(info) is None:
            continue
        if opts.progress:
            print(
                f"kernelwatch: compiling the launches of {len(items)} items for {info.name} ahead of the suites",
                file=sys.stderr,
                flush=True,
            )
        try:
            outcome = precompile(items, info, spare_processes(len(replies), host_cpus()), opts.extra_modules)
        except Exception as exc:
            notes.append(f"precompile failed ({type(exc).__name__}: {str(exc)[:200]}): the workers compiled")
            continue
        notes.append(outcome.note(cache.triton))
        compile_s += outcome.compile_s
        if opts.progress:
            print(f"kernelwatch: {outcome.note()}", file=sys.stderr, flush=True)
    return time.monotonic() - start, compile_s


def _worker_compiles(worker_phases: Counter, notes: list[str]) -> None:
    """The workers' compile counts travel with their phase seconds: into a note, out of the seconds."""
    cached, missed = worker_phases.pop("compile.cached", 0), worker_phases.pop("compile.missed", 0)
    if cached or missed:
        notes.append(
            f"kernel compilations in the workers: {int(cached)} found in Triton's cache, {int(missed)} compiled there"
        )


def _profile_items(
    opts: Options, device: str, items: list[WorkItem], cases: dict[WorkItem, Any], notes: list[str]
) -> list[WorkItem]:
    """``("profile", key)`` per perf item when ``--profile`` is asked for on a device with a profiler."""
    if not opts.profile:
        return []
    if device == "cpu" and not opts.time_on_cpu:
        notes.append("--profile: no profiler on the CPU, no counters recorded")
        return []
    if device == "cpu":
        notes.append(
            "--profile with --cpu-perf: the profiling phase ran each case once with no profiler "
            "(a test of the collector), no counters recorded"
        )
    profiles = [("profile", key) for suite, key in items if suite == "perf"]
    for item in profiles:
        cases[item] = cases[("perf", item[1])]
    return profiles


def _profile(opts: Options, tally: Tally, profiles: list[WorkItem], devices: list[str], notes: list[str]) -> None:
    """The profiling phase (:mod:`kernelwatch.collect.profile_phase`): the perf cases whose kernel measured, one
    profiled process per kernel; a line per kernel on stderr and the run's progress per case."""
    from kernelwatch.collect.profile_phase import Job, profile_events

    measured = [i for i in profiles if ("perf", i[1]) in tally.records and ("perf", i[1]) not in tally.errored]
    if tally.progress is not None:
        tally.progress.drop(len(profiles) - len(measured))
    jobs: dict[str, Job] = {}
    for item in measured:
        spec, case = tally.cases[item]
        job = jobs.setdefault(spec.name, Job(spec.name, spec.bound, dict(spec.profiler_ideals or {}), []))
        job.cases.append((case.key, spec.profile_kernel(case)))
    ticked: set[str] = set()

    def say(line: str) -> None:
        if opts.progress:
            print(f"kernelwatch: {line}", file=sys.stderr, flush=True)

    errors: Counter = Counter()
    try:
        with contextlib.closing(profile_events(list(jobs.values()), devices, opts.extra_modules)) as events:
            for event in events:
                if event.kind == "begin":
                    say(f"profiling {event.n} {event.kernel} case(s) on {event.device} in one profiled process")
                elif event.kind == "end":
                    bad = f", {errors[event.kernel]} without counters" if errors[event.kernel] else ""
                    say(f"profiled {event.kernel} on {event.device}: {event.n} case(s) in {event.seconds:.0f} s{bad}")
                if event.kind in ("tick", "rows") and event.key not in ticked:
                    ticked.add(event.key)
                    item = ("profile", event.key)
                    tally.progress.update(
                        event.key, cost_of(item, tally.cases), event.seconds, progress_group(item, tally.cases)
                    )
                if event.kind == "rows":
                    if any(r.get("error") and r["name"] == r["source"] for r in event.rows):
                        errors[event.kernel] += 1
                    tally.profiled(("profile", event.key), event.rows, event.device, event.seconds)
    except KeyboardInterrupt:
        notes.append("interrupted during profiling: every suite ran, some cases have no counters")


def _handles(opts: Options, device: str, run_seed: int) -> list[WorkerHandle]:
    """One worker per device; with several, the host's CPU cores are shared among them."""
    workers = worker_devices(device, opts.all_devices)
    config = {
        "extra_modules": list(opts.extra_modules),
        "explore": (run_seed, opts.explore_seeds),
        "threads": max(1, host_cpus() // len(workers)) if len(workers) > 1 else 0,
        "time_on_cpu": opts.time_on_cpu,
    }
    ctx = mp.get_context("spawn")
    return [WorkerHandle(ctx, i, d, label, config) for i, (d, label) in enumerate(workers)]


def _device_time(wall: Counter, suites_s: float, busy: Counter, ceilings: dict[str, Any]) -> None:
    wall["suites"] = suites_s
    for label in ceilings:
        wall[f"busy.{label}"] = busy[label]
        wall[f"idle.{label}"] = max(0.0, wall["suites"] - busy[label])


def _end_journal(journal: JournalWriter, doc: RunDocument) -> None:
    if journal.lines:
        journal.end(doc.run.status, doc.run.finished_at, doc.run.notes, doc.run.phases_s)
        journal.close()
    else:  # no header: the run ended before any device was described, nothing to recover
        journal.remove()


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def reproduce_command(argv: list[str]) -> str:
    return "kernelwatch " + " ".join(shlex.quote(a) for a in argv)
