"""The device workers of a collector run and the loop that deals them work items.

The parent process never touches the device. Each device gets a worker process
(:class:`WorkerHandle`); all of them start at once and each measures its own device's ceilings
(:func:`start_workers`). Items are dealt by :mod:`kernelwatch.collect.schedule`: the perf cases of one baseline
key go to one worker (which measures the PyTorch baselines once for all of them), longest groups
first (:func:`group_of`, :func:`cost_of`). A case that raises is recorded by its worker; a case that
kills its worker or outlives the per-case limit is recorded here (:func:`run_items`), the worker is
replaced, and the suite goes on.

The cases timed by the wall with their host path (:func:`isolated`: a stack's eager pass) run in a worker that has
run no other case before them: their groups are dealt first, and a worker that ran another case is replaced
before one of them. A Triton launch's host path in a worker that had run the rest of the suite read up to 2x its
figure in a fresh one on the same H200, by how much depending on the worker's history, not on the code
(kernelwatch/kernels/NOTES.md, "Stacks of layers"). One fresh process for all of them, not one each: a fresh
worker's first torch.compile starts Inductor's pool of compile processes again, tens of seconds a case.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any, Protocol

from kernelwatch.collect.schedule import Dispatcher
from kernelwatch.collect.worker import WorkItem, worker_main

STARTUP_GRACE_S = 120.0  # importing torch and initialising a device, on top of the first case's limit
DESCRIBE_TIMEOUT_S = 600.0
MAX_CPU_WORKERS = 4  # --device cpu --devices all: one interpreter worker per core, up to this many

# A rough cost model that only orders the work (longest first); nothing measured depends on it.
# A perf item compiles its kernel and times 3-5 implementations (~0.3 s each: warm-up, 100 ms of
# samples, the per-call batches) on inputs drawn on the device (kernelwatch.collect.inputs); its size still ranks
# the large cases first. An accuracy item is
# dominated by its float64 reference on the host.
PERF_ITEM_S = 3.0
PROFILE_ITEM_S = 2.0  # a case in its kernel's profiled process (kernelwatch.collect.profile_phase)
ACCURACY_ITEM_S = 0.05
HOST_BYTES_PER_S = 1e9
REFERENCE_BYTES_PER_S = 2e8


class Tally(Protocol):
    """Where finished items go (:class:`kernelwatch.collect.records.Tally`)."""

    def finish(self, h: WorkerHandle, item: WorkItem, result: Any, failed: bool, phases: dict[str, float]) -> None: ...

    def error_result(self, item: WorkItem, message: str, device: str) -> Any: ...


def worker_devices(device: str, all_devices: bool) -> list[tuple[str, str]]:
    """(torch device, label) per worker. On the CPU, ``all`` means one interpreter worker per core (at
    most :data:`MAX_CPU_WORKERS`), labelled ``cpu:0``, ``cpu:1``... like the devices of a GPU host."""
    from kernelwatch.collect.backends import device_count

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


def isolated(item: WorkItem, cases: dict[WorkItem, Any]) -> bool:
    """A perf case timed by the wall (:func:`kernelwatch.kernels.spec.wall_timed`): measured in a fresh worker."""
    from kernelwatch.kernels.spec import wall_timed

    return item[0] == "perf" and wall_timed(cases[item][1])


def group_of(item: WorkItem, cases: dict[WorkItem, Any]) -> tuple[str, str]:
    """Perf cases of one baseline key run in one worker (which then measures the baselines once)."""
    spec, case = cases[item]
    return ("perf", spec.baseline_key(case)) if item[0] == "perf" else item


def cost_of(item: WorkItem, cases: dict[WorkItem, Any]) -> float:
    """Rough seconds an item takes (see the constants above): only its rank matters."""
    spec, case = cases[item]
    size = spec.bytes_moved(case)
    if item[0] == "profile":
        return PROFILE_ITEM_S
    if item[0] == "perf":
        return PERF_ITEM_S + size / HOST_BYTES_PER_S
    return case.trials * (ACCURACY_ITEM_S + size / REFERENCE_BYTES_PER_S)


def progress_group(item: WorkItem, cases: dict[WorkItem, Any]) -> str:
    """Items whose cost estimates share one rate (seconds per unit of cost): one suite of one kernel."""
    return f"{item[0]}/{cases[item][0].name}"


class WorkerHandle:
    """One device's worker process, restarted when a case kills it."""

    def __init__(self, ctx, index: int, device: str, label: str, config: dict[str, Any]) -> None:
        self.ctx, self.index, self.device, self.label = ctx, index, device, label
        self.config = {**config, "device": device, "label": label}
        self.process = None
        self.conn = None
        self.deadline = 0.0
        self.sent_at = 0.0
        self.fresh = True
        self.ran_others = False  # the running process was sent a case run_items' fresh_for does not name

    def start(self) -> None:
        parent, child = self.ctx.Pipe()
        self.process = self.ctx.Process(
            target=worker_main,
            name=f"kernelwatch-{self.label}",
            args=(child, {**self.config, "parent": os.getpid()}),
            daemon=True,
        )
        self.process.start()
        child.close()
        self.conn = parent
        self.fresh = True
        self.ran_others = False

    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def send(self, msg: dict[str, Any], timeout_s: float) -> None:
        if not self.alive():
            self.start()
        self.sent_at = time.monotonic()
        self.deadline = self.sent_at + timeout_s + (STARTUP_GRACE_S if self.fresh else 0.0)
        self.fresh = False
        self.conn.send(msg)

    def restart(self) -> None:
        """A fresh process for the next case (:func:`isolated`); the old one is stopped, not killed mid-case."""
        self.stop()
        self.start()

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


def start_workers(handles: list[WorkerHandle], notes: list[str]) -> dict[int, dict[str, Any]]:
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
        raise RuntimeError(f"no worker could describe its device: {'; '.join(notes[-len(handles) :])}")
    return replies


def run_items(
    live: list[WorkerHandle],
    handles: list[WorkerHandle],
    dispatcher: Dispatcher,
    ceilings: dict[str, dict[str, Any]],
    case_timeout_s: float,
    tally: Tally,
    fresh_for: Callable[[WorkItem], bool] | None = None,
) -> None:
    """Deal every item to the ``live`` workers until none is left; each finished item (its result, or
    the error of a worker that died or ran past ``case_timeout_s``) goes to ``tally.finish``. An item
    ``fresh_for`` names (:func:`isolated`) goes to a worker process that has run no other item before it."""
    while not dispatcher.finished:
        for h in live:
            if dispatcher.current(h.index) is None:
                item = dispatcher.take(h.index)
                if item is not None:
                    if fresh_for is not None:
                        wanted = fresh_for(item)
                        if wanted and h.ran_others:
                            h.restart()
                        h.ran_others = h.ran_others or not wanted
                    h.send({"op": "case", "item": item, "peaks": ceilings[h.label]}, case_timeout_s)
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
                    tally.finish(h, item, reply["result"], reply["errored"], reply.get("phases", {}))
                    continue
                message = h.death_message()
            elif not h.alive():
                message = h.death_message()
            elif time.monotonic() > h.deadline:
                message = f"exceeded the per-case time limit of {case_timeout_s:g} s"
            if message is None:
                continue
            h.kill()
            tally.finish(h, item, tally.error_result(item, message, h.label), True, {})
