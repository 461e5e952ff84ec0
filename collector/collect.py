"""One collector run: choose cases, run them in isolated device workers, assemble the artifact.

The parent process never touches the device. Each device gets a worker process; a case that
raises is recorded by its worker, a case that kills its worker or outlives the per-case limit is
recorded here, the worker is replaced, and the suite goes on. The run ends ``complete`` when no
case errored, ``partial`` when some did, ``failed`` when none could run.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import os
import random
import shlex
import signal
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any

from collector.schedule import Dispatcher
from collector.worker import WorkItem, worker_main
from db.schema import (
    SCHEMA,
    AccuracyResult,
    CaseInfo,
    Commit,
    Hardware,
    PerfResult,
    ProfilerMetric,
    RunDocument,
    RunInfo,
    format_time,
    new_run_id,
)

SUITES = ("accuracy", "perf")
STARTUP_GRACE_S = 120.0  # importing torch and initialising a device, on top of the first case's limit


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
    match: str | None = None
    seed: int | None = None
    profile: bool = False
    progress: bool = True
    command: str | None = None
    notes: list[str] = field(default_factory=list)


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
        raise ValueError(f"unknown kernel {unknown[0]!r}; known: {', '.join(sorted(specs))}")
    chosen = [specs[k] for k in (opts.kernels or tuple(sorted(specs)))]
    items: list[WorkItem] = []
    cases: dict[WorkItem, Any] = {}
    for spec in chosen:
        for suite in opts.suites:
            for case in spec.accuracy_cases() if suite == "accuracy" else spec.perf_cases():
                if opts.match and opts.match not in case.key:
                    continue
                item = (suite, case.key)
                if item not in cases:
                    items.append(item)
                    cases[item] = (spec, case)
    return items, cases


class WorkerHandle:
    """One device's worker process, restarted when a case kills it."""

    def __init__(self, ctx, index: int, device: str, opts: Options, run_seed: int) -> None:  # noqa: ANN001
        self.ctx, self.index, self.device, self.opts, self.run_seed = ctx, index, device, opts, run_seed
        self.process = None
        self.conn = None
        self.deadline = 0.0
        self.fresh = True

    def start(self) -> None:
        parent, child = self.ctx.Pipe()
        self.process = self.ctx.Process(
            target=worker_main, name=f"kernelwatch-{self.device}",
            args=(child, self.device, self.opts.extra_modules, self.run_seed, self.opts.profile), daemon=True)
        self.process.start()
        child.close()
        self.conn = parent
        self.fresh = True

    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def send(self, msg: dict[str, Any], timeout_s: float) -> None:
        if not self.alive():
            self.start()
        self.deadline = time.monotonic() + timeout_s + (STARTUP_GRACE_S if self.fresh else 0.0)
        self.fresh = False
        self.conn.send(msg)

    def kill(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            self.process.join(timeout=10)
        self.process = None

    def death_message(self) -> str:
        code = self.process.exitcode if self.process else None
        if code is not None and code < 0:
            try:
                return f"the worker process was killed by {signal.Signals(-code).name} while running this case"
            except ValueError:
                pass
        return f"the worker process died (exit code {code}) while running this case"

    def stop(self) -> None:
        if self.alive():
            try:
                self.conn.send({"op": "stop"})
                self.process.join(timeout=10)
            except (OSError, BrokenPipeError):
                pass
        self.kill()


def _describe(handle: WorkerHandle) -> dict[str, Any]:
    handle.send({"op": "describe"}, timeout_s=600.0)
    ready = wait([handle.conn, handle.process.sentinel], timeout=handle.deadline - time.monotonic())
    if handle.conn in ready:
        return handle.conn.recv()
    raise RuntimeError(f"the {handle.device} worker could not describe its device: {handle.death_message()}")


def _progress(total: int, enabled: bool):  # noqa: ANN202
    from tqdm import tqdm

    return tqdm(total=total, disable=not enabled, unit="case", dynamic_ncols=True, file=sys.stderr,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}] {postfix}")


def run_collection(opts: Options) -> RunDocument:
    """Run the suites and return a complete ``kernelwatch.run/1`` document (not yet written)."""
    from collector.accuracy import error_result
    from collector.metadata import git_info
    from collector.perf import error_results

    device = resolve_device(opts.device)
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    notes = list(opts.notes)
    suites = opts.suites
    if device == "cpu" and "perf" in suites:
        suites = tuple(s for s in suites if s != "perf")
        notes.append("perf suite skipped: on the CPU kernels run in Triton's interpreter; its timings mean nothing")
        print("kernelwatch: perf suite skipped on cpu (Triton's interpreter: timings would mean nothing)",
              file=sys.stderr)
    items, cases = select_items(Options(**{**opts.__dict__, "suites": suites}))
    run_seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(1 << 31)
    started = dt.datetime.now(dt.timezone.utc)
    commit = git_info()

    from collector.backends import device_count

    if device == "cpu":  # the interpreter is single-threaded: one worker per core (up to 4) for "all"
        devices = ["cpu"] * (min(os.cpu_count() or 1, 4) if opts.all_devices else 1)
    else:
        devices = [f"{device}:{i}" for i in range(device_count(device) if opts.all_devices else 1)]
    ctx = mp.get_context("spawn")
    handles = [WorkerHandle(ctx, i, d, opts, run_seed) for i, d in enumerate(devices)]
    results: dict[WorkItem, Any] = {}
    errored: set[WorkItem] = set()
    status = "complete"
    described: dict[str, Any] = {}
    dispatcher = Dispatcher(items)
    previous_term = signal.signal(signal.SIGTERM, _interrupt)  # a cancelled CI job still leaves its artifact
    try:
        described = _describe(handles[0])
        peaks = {k: described["hardware"].get(k) for k in ("peak_gbps", "peak_tflops")}
        bar = _progress(len(items), opts.progress)
        while not dispatcher.finished:
            for h in handles:
                if dispatcher.current(h.index) is None:
                    item = dispatcher.take(h.index)
                    if item is not None:
                        bar.set_postfix_str(item[1][:80])
                        h.send({"op": "case", "item": item, "peaks": peaks}, opts.case_timeout_s)
            busy = [handles[i] for i in dispatcher.busy_workers]
            if not busy:
                break
            timeout = max(0.0, min(h.deadline for h in busy) - time.monotonic())
            wait([h.conn for h in busy] + [h.process.sentinel for h in busy], timeout=timeout)
            for h in busy:
                item = dispatcher.current(h.index)
                message = None
                if h.conn.poll():
                    try:
                        reply = h.conn.recv()
                    except (EOFError, OSError):
                        reply = None
                    if reply is not None:
                        dispatcher.complete(h.index, reply["result"])
                        if reply["errored"]:
                            errored.add(item)
                        bar.update(1)
                        continue
                    message = h.death_message()
                elif not h.alive():
                    message = h.death_message()
                elif time.monotonic() > h.deadline:
                    message = f"exceeded the per-case time limit of {opts.case_timeout_s:g} s"
                if message is None:
                    continue
                h.kill()
                spec, case = cases[item]
                result = (error_result(case, run_seed, message) if item[0] == "accuracy"
                          else error_results(spec, case, message))
                dispatcher.complete(h.index, result)
                errored.add(item)
                bar.update(1)
        bar.close()
        results = dict(dispatcher.results())
    except KeyboardInterrupt:
        status = "failed" if not dispatcher.partial_results() else "partial"
        notes.append("interrupted: cases not run are missing")
        results = dict(dispatcher.partial_results())
    except RuntimeError as exc:
        status = "failed"
        notes.append(str(exc))
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        for h in handles:
            h.stop()
    if status == "complete" and errored:
        status = "partial"
    if not described:
        described = {"hardware": _unknown_hardware(device), "versions": {}}
    return assemble(opts, device, commit, described, started, status, results, cases, notes)


def _interrupt(signum, frame) -> None:  # noqa: ANN001
    raise KeyboardInterrupt


def _unknown_hardware(device: str) -> dict[str, Any]:
    return {"vendor": {"cuda": "nvidia", "npu": "ascend"}.get(device, "cpu"), "device_name": "unknown",
            "device_count": 0, "compute_units": None, "memory_bytes": None, "driver": None, "toolkit": None,
            "peak_gbps": None, "peak_gbps_datasheet": None, "peak_tflops": None, "peak_tflops_datasheet": None}


def assemble(opts: Options, device: str, commit: dict[str, Any], described: dict[str, Any], started: dt.datetime,
             status: str, results: dict[WorkItem, Any], cases: dict[WorkItem, Any], notes: list[str]) -> RunDocument:
    """The run as a typed document (``db.schema``); a field the schema refuses is a bug here."""
    hw = Hardware(**{k: described["hardware"].get(k) for k in Hardware.model_fields})
    run = RunInfo(id=new_run_id(), commit=Commit(**commit), trigger=opts.trigger, ci_job=opts.ci_job, device=device,
                  command=opts.command, versions=described.get("versions", {}), started_at=format_time(started),
                  finished_at=format_time(dt.datetime.now(dt.timezone.utc)), status=status, synthetic=False,
                  notes="; ".join(notes) or None)
    case_infos: dict[str, CaseInfo] = {}
    accuracy: list[AccuracyResult] = []
    perf: list[PerfResult] = []
    profiler: list[ProfilerMetric] = []
    for item, result in results.items():
        spec, case = cases[item]
        if case.key not in case_infos:
            case_infos[case.key] = CaseInfo(key=case.key, kernel=case.kernel, variant=case.variant, dtype=case.dtype,
                                            params=case.json_params())
        if item[0] == "accuracy":
            accuracy.append(AccuracyResult(case=case.key, **result))
        else:
            rows, metrics = (result["perf"], result["profiler"]) if isinstance(result, dict) else (result, [])
            perf.extend(PerfResult(case=case.key, **r) for r in rows)
            profiler.extend(ProfilerMetric(case=case.key, **m) for m in metrics)
    return RunDocument(schema=SCHEMA, run=run, hardware=hw, cases=list(case_infos.values()), accuracy=accuracy,
                       perf=perf, profiler=profiler)


def reproduce_command(argv: list[str]) -> str:
    return "kernelwatch " + " ".join(shlex.quote(a) for a in argv)
