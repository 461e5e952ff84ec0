"""The profiling phase of a collector run (``collect --profile``): each kernel's perf cases in one process.

After the suites, once the workers have stopped and nothing else holds the device, every kernel whose perf
cases measured is profiled in one process: ``ncu`` around ``python -m kernelwatch.collect.profile_target`` on CUDA
(one report for all the kernel's cases, :mod:`kernelwatch.collect.profiling`), the target alone on Ascend (it runs
the ``torch_npu`` profiler passes itself). One process per case, as before, paid the interpreter, torch,
a CUDA context under the profiler and Triton's kernel loading for every case: ~20 s each, ~20 minutes for
the suite. Kernels are dealt to the run's devices, one profiled process per device at a time.

The target says on stderr which case it starts and finishes (:data:`kernelwatch.collect.profile_target.MARK`); each
finished case is a progress line of the run. A case that kills the target is recorded with the exit
status and the target's last words, and the cases after it go on in a fresh process. A case that makes no
progress for :data:`CASE_TIMEOUT_S` has its target killed (not ``ncu``, which then writes the report of
the cases before it). A batch that never reached its first case (ncu missing a library, no permission to
read the counters) gives all its cases that one error.
"""

from __future__ import annotations

import json
import os
import queue
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwatch.collect.profiling import (
    ProfileError,
    attribute,
    case_rows,
    metric,
    ncu_csv_kernels,
    ncu_export_command,
    ncu_import_command,
)

CASE_TIMEOUT_S = 240.0  # no progress from the target for this long: its case hangs
EXIT_GRACE_S = 120.0  # after the target is killed, ncu's time to write the report and exit
IMPORT_TIMEOUT_S = 300.0
MARK = "kernelwatch-profile:"  # kernelwatch.collect.profile_target.MARK (not imported: that module imports torch)
KEEP_ENV = "KERNELWATCH_PROFILE_DIR"  # keep each batch's ncu report (Nsight Compute opens it) and CSV here

Rows = list[dict[str, Any]]


@dataclass
class Job:
    """One kernel's perf cases to profile: ``cases`` are (key, kernel regex) in order."""

    kernel: str
    bound: str
    ideals: dict[str, str | None]
    cases: list[tuple[str, str]]


@dataclass
class Event:
    """What the profiling threads report to the run: ``begin`` (a kernel's process starts, ``n`` cases),
    ``tick`` (a case finished in the target), ``rows`` (a case's metric rows), ``end`` (a kernel is done)."""

    kind: str
    kernel: str
    device: str
    key: str = ""
    rows: Rows = field(default_factory=list)
    seconds: float = 0.0
    n: int = 0


@dataclass
class _Outcome:
    rows: dict[int, Rows]  # case index -> rows, for every case the target finished or reported failed
    stopped_at: int | None  # the case running when the target ended early (it crashed or hung)
    why: str  # what stopped it
    started: bool  # the target reached its first case
    seconds: dict[int, float]


def source_of(device: str) -> str:
    """The profiler of a device: ``none`` on the CPU, where the phase is a dry run (its tests)."""
    return {"cuda": "ncu", "npu": "torch_npu"}.get(device.split(":")[0], "none")


def error_rows(device: str, message: str) -> Rows:
    return [metric(source_of(device), source_of(device), None, None, error=message[:500])]


def union_regex(job: Job) -> str:
    return "|".join(dict.fromkeys(regex for _, regex in job.cases))


class Runner:
    """Runs one kernel's batches on one device; ``emit`` gets each :class:`Event`; ``live`` holds the running
    processes so that an interrupted run can stop them."""

    def __init__(
        self,
        device: str,
        extra_modules: tuple[str, ...],
        emit: Callable[[Event], None],
        live: set[subprocess.Popen],
        case_timeout_s: float = CASE_TIMEOUT_S,
    ) -> None:
        self.device, self.extra_modules, self.emit, self.live = device, extra_modules, emit, live
        self.case_timeout_s = case_timeout_s

    def run(self, job: Job) -> None:
        begun = time.monotonic()
        self.emit(Event("begin", job.kernel, self.device, n=len(job.cases)))
        ncu = shutil.which("ncu")
        if source_of(self.device) == "ncu" and ncu is None:
            for key, _ in job.cases:
                self.emit(
                    Event(
                        "rows",
                        job.kernel,
                        self.device,
                        key,
                        error_rows(self.device, "ncu is not on the PATH: no counters recorded"),
                    )
                )
        else:
            remaining = list(job.cases)
            while remaining:
                try:
                    outcome = self._batch(job, remaining, ncu)
                except Exception as exc:
                    for key, _ in remaining:
                        self.emit(
                            Event(
                                "rows",
                                job.kernel,
                                self.device,
                                key,
                                error_rows(self.device, f"profiling failed: {type(exc).__name__}: {exc}"),
                            )
                        )
                    break
                for index, rows in sorted(outcome.rows.items()):
                    self.emit(
                        Event(
                            "rows", job.kernel, self.device, remaining[index][0], rows, outcome.seconds.get(index, 0.0)
                        )
                    )
                if outcome.stopped_at is None:
                    break
                if not outcome.started:
                    for key, _ in remaining:
                        self.emit(Event("rows", job.kernel, self.device, key, error_rows(self.device, outcome.why)))
                    break
                self.emit(
                    Event(
                        "rows",
                        job.kernel,
                        self.device,
                        remaining[outcome.stopped_at][0],
                        error_rows(self.device, outcome.why),
                    )
                )
                remaining = remaining[outcome.stopped_at + 1 :]
        self.emit(Event("end", job.kernel, self.device, seconds=time.monotonic() - begun, n=len(job.cases)))

    def _batch(self, job: Job, cases: list[tuple[str, str]], ncu: str | None) -> _Outcome:
        with tempfile.TemporaryDirectory(prefix="kw-profile-") as tmp:
            folder = Path(tmp)
            (folder / "cases.json").write_text(json.dumps([key for key, _ in cases]), encoding="utf-8")
            target = [
                sys.executable,
                "-m",
                "kernelwatch.collect.profile_target",
                job.kernel,
                self.device,
                str(folder / "cases.json"),
                *(a for m in self.extra_modules for a in ("--module", m)),
            ]
            report, npu_out = folder / "kernel.ncu-rep", folder / "npu.jsonl"
            source = source_of(self.device)
            if source == "ncu":
                command = ncu_export_command(ncu, union_regex(job), report, target)
            else:
                command = [*target, "--npu-out", str(npu_out)] if source == "torch_npu" else target
            path = os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
            env = {**os.environ, "PYTHONPATH": path}
            with open(folder / "stdout.txt", "wb") as stdout:
                proc = subprocess.Popen(command, stdout=stdout, stderr=subprocess.PIPE, env=env, start_new_session=True)
            self.live.add(proc)
            try:
                watched = self._watch(job, cases, proc)
            finally:
                self.live.discard(proc)
                if proc.poll() is None:
                    _kill_group(proc)
            done, failed, seconds, running, tail, why, started = watched
            rows: dict[int, Rows] = {
                i: error_rows(self.device, f"the case raised in the profiled process: {m}") for i, m in failed.items()
            }
            if done:
                rows.update(self._results(job, cases, done, report, npu_out, ncu))
            stopped = None
            if proc.returncode != 0 or len(done) + len(failed) < len(cases):
                stopped = running if running is not None else len(done) + len(failed)
                if stopped >= len(cases):
                    stopped = None
                if why is None:
                    last = " | ".join(tail)[-300:]
                    why = f"the profiled process exited with status {proc.returncode} during this case" + (
                        f": {last}" if last else ""
                    )
            return _Outcome(rows, stopped, why or "", started, seconds)

    def _watch(self, job: Job, cases: list[tuple[str, str]], proc: subprocess.Popen):
        """Read the target's marks until the process ends; kill the target when a case stops progressing."""
        done: set[int] = set()
        failed: dict[int, str] = {}
        seconds: dict[int, float] = {}
        tail: deque[str] = deque(maxlen=3)
        running: int | None = None
        pid: int | None = None
        why: str | None = None
        started = False
        buffer = b""
        last = time.monotonic()
        selector = selectors.DefaultSelector()
        selector.register(proc.stderr, selectors.EVENT_READ)
        try:
            while True:
                if not selector.select(timeout=1.0):
                    if why is None and time.monotonic() - last > self.case_timeout_s:
                        why = f"no progress in {self.case_timeout_s:g} s: the profiled process was stopped"
                        _kill_target(pid, proc)
                        last = time.monotonic() + EXIT_GRACE_S  # then ncu itself, if it does not end
                    elif why is not None and time.monotonic() > last:
                        _kill_group(proc)
                    continue
                chunk = os.read(proc.stderr.fileno(), 65536)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    line = raw.decode("utf-8", "replace").strip()
                    if not line.startswith(MARK):
                        if line:
                            tail.append(line[:200])
                        continue
                    words = line[len(MARK) :].split(maxsplit=2)
                    if len(words) < 2 or not words[1].lstrip("-").isdigit():
                        continue
                    what, number = words[0], int(words[1])
                    if why is None:
                        last = time.monotonic()
                    if what == "pid":
                        pid = number
                    elif what == "start":
                        started, running = True, number
                    elif what in ("done", "failed") and 0 <= number < len(cases):
                        running = None
                        if what == "done":
                            done.add(number)
                            with suppress(IndexError, ValueError):
                                seconds[number] = float(words[2])
                        else:
                            failed[number] = words[2] if len(words) > 2 else "no message"
                        self.emit(
                            Event("tick", job.kernel, self.device, cases[number][0], seconds=seconds.get(number, 0.0))
                        )
        finally:
            selector.close()
            proc.stderr.close()
        proc.wait()
        return done, failed, seconds, running, tail, why, started

    def _results(
        self, job: Job, cases: list[tuple[str, str]], done: set[int], report: Path, npu_out: Path, ncu: str | None
    ) -> dict[int, Rows]:
        if source_of(self.device) == "none":
            return {i: [] for i in done}
        if source_of(self.device) == "torch_npu":
            found: dict[int, Rows] = {}
            if npu_out.exists():
                for line in npu_out.read_text(encoding="utf-8").splitlines():
                    with suppress(ValueError, KeyError, TypeError):
                        entry = json.loads(line)
                        found[int(entry["index"])] = list(entry["rows"])
            return {
                i: found.get(i) or error_rows(self.device, "the profiled process wrote no counters for this case")
                for i in done
            }
        try:
            texts = [_import(ncu, report, by_range) for by_range in (False, True)]
            _keep(report, texts, f"{job.kernel}-{self.device.replace(':', '')}-{cases[0][0]}")
            kernels, ranges = (ncu_csv_kernels(t, f"ncu report of {job.kernel}") for t in texts)
            launches = attribute(kernels, ranges)
        except ProfileError as exc:
            return {i: error_rows(self.device, str(exc)) for i in done}
        return {i: case_rows(launches.get(i, []), cases[i][1], job.bound, job.ideals) for i in done}


def _import(ncu: str, report: Path, by_range: bool) -> str:
    if not report.exists():
        raise ProfileError("ncu wrote no report (was it stopped, or could it not read the counters?)")
    try:
        out = subprocess.run(
            ncu_import_command(ncu, report, by_range), capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise ProfileError(f"ncu --import did not finish in {IMPORT_TIMEOUT_S:g} s") from None
    if out.returncode != 0:
        raise ProfileError(f"ncu --import exited with status {out.returncode}: {out.stderr.strip()[-300:]}")
    return out.stdout


def _keep(report: Path, texts: list[str], stem: str) -> str | None:
    """Copy the report and its CSV imports into ``$KERNELWATCH_PROFILE_DIR``; the counters never depend on it: a
    folder that cannot be written is a warning on stderr (returned), and the run goes on."""
    folder = os.environ.get(KEEP_ENV)
    if not folder:
        return None
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)[:120]
    out = Path(folder)
    try:
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(report, out / f"{stem}.ncu-rep")
        for text, suffix in zip(texts, ("names", "ranges"), strict=True):
            (out / f"{stem}.{suffix}.csv").write_text(text, encoding="utf-8")
    except OSError as exc:
        warning = f"kernelwatch: {KEEP_ENV}={folder!r}: the ncu report was not kept ({exc.strerror or exc})"
        print(warning, file=sys.stderr, flush=True)
        return warning
    return None


def _kill_target(pid: int | None, proc: subprocess.Popen) -> None:
    """The target alone when its pid is known (ncu then writes the report of what it profiled), else all."""
    if pid is None or pid == proc.pid:
        _kill_group(proc)
        return
    with suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def _kill_group(proc: subprocess.Popen) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def profile_events(
    jobs: list[Job], devices: list[str], extra_modules: tuple[str, ...], case_timeout_s: float = CASE_TIMEOUT_S
) -> Iterator[Event]:
    """Profile ``jobs`` on ``devices`` (one process per device at a time) and yield their events as they come.

    Closing the iterator early (an interrupted run) kills the profiled processes still running."""
    pending = list(jobs)
    lock = threading.Lock()
    events: queue.Queue[Event | None] = queue.Queue()
    live: set[subprocess.Popen] = set()

    def work(device: str) -> None:
        runner = Runner(device, extra_modules, events.put, live, case_timeout_s)
        try:
            while True:
                with lock:
                    if not pending:
                        return
                    job = pending.pop(0)
                runner.run(job)
        finally:
            events.put(None)

    threads = [
        threading.Thread(target=work, args=(d,), name=f"kernelwatch-profile-{d}", daemon=True)
        for d in devices[: max(1, len(jobs))]
    ]
    for t in threads:
        t.start()
    running = len(threads)
    try:
        while running:
            event = events.get()
            if event is None:
                running -= 1
            else:
                yield event
    finally:
        with lock:
            pending.clear()
        for proc in list(live):
            _kill_group(proc)
        for t in threads:
            t.join(timeout=30)
