"""The collector's journal: every finished work item on disk as soon as it finishes.

``kernelwatch collect`` appends to a journal while it runs, so a collector killed at any moment
(SIGKILL, a CI job's time limit, a lost machine) loses only the items it was running. The journal
is JSON Lines, each line self-describing (format :data:`JOURNAL_SCHEMA`):

1. ``{"journal": "kernelwatch.journal/1", "kind": "header", "run": {...}, "hardware": {...}, "expected": N}``:
   the run as ``kernelwatch.run/1`` describes it (status ``running``), written before any case runs;
2. ``{"kind": "result", "suite": ..., "key": ..., "case": {...}, "accuracy": [...], "perf": [...],
   "profiler": [...], ...}`` per finished work item, its records exactly as the artifact holds them;
3. ``{"kind": "end", "status": ..., ...}`` once the run is over, before its artifact or database write.

Where it lives (:func:`journal_path`): next to the artifact (``run.json.journal`` for ``--out
run.json``), else ``.kw-journal/<run id>.jsonl`` in the working directory. ``collect`` removes it
once the run is stored. :func:`recover` turns one into a run document: a ``partial`` run of the
finished items (or the recorded status when the end line is there), with a note saying so;
``kernelwatch collect --resume JOURNAL`` and ``kernelwatch ingest JOURNAL`` both use it.

Every line is flushed to the operating system when written (a killed process loses nothing
written); ``fsync`` runs at the header, at the end and at most every :data:`FSYNC_EVERY_S` seconds
between (a lost machine loses at most those seconds). A torn last line, cut off mid-write, is
ignored; a bad line anywhere else is an error naming its line number.
"""

from __future__ import annotations

import io
import json
import os
import stat
import time
from collections import Counter
from contextlib import suppress
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from kernelwatch.store.artifact import load_artifact, parse_artifact
from kernelwatch.store.files import open_input
from kernelwatch.store.schema import (
    MAX_ARTIFACT_BYTES,
    SCHEMA,
    AccuracyResult,
    ArtifactError,
    CaseInfo,
    Hardware,
    NonNegative,
    PerfResult,
    ProfilerMetric,
    RunDocument,
    RunInfo,
    Short,
    Text,
    Timestamp,
    describe,
    format_time,
    parse_time,
    printable,
    validate,
)

JOURNAL_SCHEMA = "kernelwatch.journal/1"
JOURNAL_DIR = ".kw-journal"
FSYNC_EVERY_S = 2.0
SECTIONS: dict[str, type] = {"accuracy": AccuracyResult, "perf": PerfResult, "profiler": ProfilerMetric}
MAX_JOURNAL_BYTES = MAX_ARTIFACT_BYTES  # a journal holds one run, as an artifact does
Phases = dict[Short, NonNegative]


class _RecordPhases(BaseModel):
    """A result record's ``phases`` (seconds per phase of the worker), validated alone."""

    model_config = ConfigDict(strict=True)

    phases: Phases | None = None


class JournalEnd(BaseModel):
    """The end line, as :meth:`JournalWriter.end` writes it."""

    model_config = ConfigDict(strict=True, extra="forbid")

    kind: str
    status: Literal["running", "complete", "failed", "partial"]
    finished_at: Timestamp | None
    notes: Text | None
    phases_s: Phases | None


def journal_path(out: Path | None, run_id: str) -> Path:
    """``OUT.journal`` beside an artifact; ``.kw-journal/<run id>.jsonl`` when the run goes to a database."""
    if out is not None:
        return out.with_name(out.name + ".journal")
    return Path(JOURNAL_DIR) / f"{run_id}.jsonl"


def _line(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False) + "\n").encode()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        with suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


class JournalWriter:
    """Appends lines to a journal that must not exist yet (an old one holds an unstored run).

    Created exclusively (``O_EXCL | O_NOFOLLOW``): a symbolic link at its path is removed first and
    named in ``replaced_link`` (its target is never written)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds = 0.0
        self._synced = time.monotonic()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.replaced_link = os.readlink(path) if path.is_symlink() else None
            if self.replaced_link is not None:
                path.unlink()  # a link is replaced by the journal, never written through
            elif path.is_file() and path.stat().st_size == 0:
                path.unlink()  # an empty journal (a run that failed before its header) holds nothing to recover
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
            self._fd = os.open(path, flags, 0o644)
        except FileExistsError:
            raise ArtifactError(
                f"{path}: a journal of an earlier run is there (recover it with "
                f"`kernelwatch collect --resume {path}`, or delete it)"
            ) from None
        except OSError as exc:
            raise ArtifactError(f"{path}: cannot create the journal ({exc.strerror or exc})") from None
        _fsync_dir(path.parent)
        _lock(self._fd, exclusive=True)  # held until this process ends, however it ends
        self.lines = 0
        self.failed: str | None = None  # why writing stopped (a full disk): the run goes on without it

    def _write(self, data: dict[str, Any], sync: bool) -> None:
        if self.failed is not None:
            return
        start = time.monotonic()
        payload = _line(data)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(self._fd, view) :]
            now = time.monotonic()
            if sync or now - self._synced >= FSYNC_EVERY_S:
                os.fsync(self._fd)
                self._synced = now
        except OSError as exc:
            self.failed = f"{self.path}: journal writes stopped ({exc.strerror or exc})"
        self.lines += 1
        self.seconds += time.monotonic() - start

    def header(self, run: RunInfo, hardware: Hardware, expected: int) -> None:
        self._write(
            {
                "journal": JOURNAL_SCHEMA,
                "kind": "header",
                "artifact_schema": SCHEMA,
                "run": run.model_dump(mode="json"),
                "hardware": hardware.model_dump(mode="json"),
                "expected": expected,
            },
            sync=True,
        )

    def result(self, record: dict[str, Any]) -> None:
        """One finished work item: ``suite``, ``key``, ``case`` and its ``accuracy``/``perf``/``profiler`` rows."""
        self._write({"kind": "result", **record}, sync=False)

    def end(self, status: str, finished_at: str, notes: str | None, phases_s: dict[str, float] | None) -> None:
        self._write(
            {"kind": "end", "status": status, "finished_at": finished_at, "notes": notes, "phases_s": phases_s},
            sync=True,
        )

    def close(self) -> None:
        if self._fd >= 0:
            with suppress(OSError):
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1

    def remove(self) -> None:
        self.close()
        remove_journal(self.path)


def remove_journal(path: Path) -> None:
    """Delete a journal whose run is stored (and ``.kw-journal/`` when it is left empty)."""
    path.unlink(missing_ok=True)
    if path.parent.name == JOURNAL_DIR:
        with suppress(OSError):
            path.parent.rmdir()  # only when empty


def _lock(fd: int, exclusive: bool) -> bool:
    """Try a non-blocking advisory lock (the writer's, exclusive; a reader's, shared); False if taken."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no check
        return True
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def check_record(record: dict[str, Any], where: str) -> dict[str, Any]:
    """A result record with its case and rows validated and normalised by the schema's models."""
    try:
        case = CaseInfo.model_validate(record["case"]).model_dump(mode="json")
        rows = {
            section: [model.model_validate(r).model_dump(mode="json") for r in record.get(section, [])]
            for section, model in SECTIONS.items()
        }
    except ValidationError as exc:
        raise ArtifactError(f"{where}: {describe(exc)}") from None
    except (KeyError, TypeError, AttributeError):
        raise ArtifactError(f"{where}: not a result record (needs case, accuracy, perf, profiler)") from None
    try:
        phases = _RecordPhases.model_validate({"phases": record.get("phases")}).phases
    except ValidationError as exc:
        raise ArtifactError(f"{where}: {describe(exc)}") from None
    finished = record.get("finished_at")
    if finished is not None:
        try:
            parse_time(finished)
        except (TypeError, AttributeError, ValueError):
            raise ArtifactError(f"{where}: finished_at: expected an ISO 8601 timestamp") from None
    return {**record, "case": case, **rows, **({"phases": phases} if "phases" in record else {})}


def build_document(run: dict[str, Any], hardware: dict[str, Any], records: list[dict[str, Any]]) -> RunDocument:
    """One run document from its run and hardware blocks and its result records (in any order)."""
    cases: dict[str, dict[str, Any]] = {}
    sections: dict[str, list[dict[str, Any]]] = {name: [] for name in SECTIONS}
    for record in records:
        cases.setdefault(record["case"]["key"], record["case"])
        for name in SECTIONS:
            sections[name].extend(record.get(name, []))
    return validate({"schema": SCHEMA, "run": run, "hardware": hardware, "cases": list(cases.values()), **sections})


class Journal:
    """A journal read back: its header, result records (first of each item), end line, and what was odd.

    Read line by line (never the whole file at once), and at most :data:`MAX_JOURNAL_BYTES`: a regular
    file larger than that is refused before it is read. ``data``: the journal's bytes when they were
    already read (from a pipe, which can be read only once)."""

    def __init__(self, path: Path, data: bytes | None = None) -> None:
        self.path = path
        name = printable(str(path))
        if data is not None:
            self._parse(io.BytesIO(data), name)
            return
        with open_input(path, "a journal") as f:
            try:
                if not _lock(f.fileno(), exclusive=False):
                    raise ArtifactError(f"{name}: a running collector is still writing this journal")
                info = os.fstat(f.fileno())
                if stat.S_ISREG(info.st_mode) and info.st_size > MAX_JOURNAL_BYTES:
                    raise ArtifactError(f"{name}: larger than {MAX_JOURNAL_BYTES >> 20} MiB ({info.st_size} bytes)")
                self._parse(f, name)
            except OSError as exc:
                raise ArtifactError(f"{name}: cannot read ({exc.strerror or exc})") from None

    def _parse(self, f: io.BufferedIOBase, name: str) -> None:
        self.torn = False  # bytes after the last newline: a line cut off mid-write
        self.header: dict[str, Any] | None = None
        self.results: list[dict[str, Any]] = []
        self.end: dict[str, Any] | None = None
        seen: set[tuple[str, str]] = set()
        left = MAX_JOURNAL_BYTES
        number = 0
        while True:
            line = f.readline(left + 1)
            if not line:
                break
            left -= len(line)
            if left < 0:
                raise ArtifactError(f"{name}: larger than {MAX_JOURNAL_BYTES >> 20} MiB")
            number += 1
            if not line.endswith(b"\n"):
                self.torn = bool(line.strip())
                break
            if not line.strip():
                continue
            where = f"{name}: line {number}"
            try:
                data = json.loads(line.decode("utf-8"), parse_constant=_no_constants)
            except (UnicodeDecodeError, ValueError, RecursionError):
                raise ArtifactError(f"{where}: not a JSON line") from None
            if not isinstance(data, dict):
                raise ArtifactError(f"{where}: not a JSON object")
            kind = data.get("kind")
            if self.header is None:
                if data.get("journal") != JOURNAL_SCHEMA or kind != "header":
                    raise ArtifactError(f"{where}: not a {JOURNAL_SCHEMA} header")
                self.header = _check_header(data, where)
            elif kind == "result":
                item = (str(data.get("suite")), str(data.get("key")))
                if item not in seen:
                    seen.add(item)
                    self.results.append(check_record(data, where))
            elif kind == "end":
                try:
                    self.end = JournalEnd.model_validate(data).model_dump()
                except ValidationError as exc:
                    raise ArtifactError(f"{where}: {describe(exc)}") from None
            else:
                raise ArtifactError(f"{where}: unknown line kind {printable(str(kind)[:40])!r}")
        if self.header is None:
            raise ArtifactError(f"{name}: no journal header (the collector stopped before its first line)")

    def document(self) -> RunDocument:
        """The run as far as it got: :func:`recover`'s document."""
        run = dict(self.header["run"])
        notes = [run["notes"]] if run.get("notes") else []
        expected = self.header.get("expected")
        if self.end is not None:
            run.update(
                status=self.end.get("status"),
                finished_at=self.end.get("finished_at"),
                phases_s=self.end.get("phases_s"),
            )
            notes = [self.end["notes"]] if self.end.get("notes") else []
            # No file name in the notes: a renamed or copied journal is the same run with the same content.
            notes.append("recovered from its journal: the run had ended but was not stored")
        else:
            times = [parse_time(r["finished_at"]) for r in self.results if r.get("finished_at")]
            started = parse_time(run["started_at"])
            run.update(
                status="partial" if self.results else "failed",
                finished_at=format_time(max([started, *times])),
                phases_s=_phases(self.results),
            )
            notes.append(
                f"recovered from its journal after the collector stopped: "
                f"{len(self.results)} of {expected} work items had finished; the others were not run"
            )
        if self.torn:
            notes.append("the journal's last line was cut off mid-write and was ignored")
        run["notes"] = "; ".join(notes)
        try:
            return build_document(run, self.header["hardware"], self.results)
        except ArtifactError as exc:
            raise ArtifactError(f"{printable(str(self.path))}: {exc}") from None


def _no_constants(name: str) -> float:
    raise ValueError(name)


def _check_header(data: dict[str, Any], where: str) -> dict[str, Any]:
    try:
        run = RunInfo.model_validate(data.get("run")).model_dump(mode="json")
        hardware = Hardware.model_validate(data.get("hardware")).model_dump(mode="json")
    except ValidationError as exc:
        raise ArtifactError(f"{where}: {describe(exc)}") from None
    expected = data.get("expected")
    if not isinstance(expected, int) or isinstance(expected, bool) or expected < 0:
        raise ArtifactError(f"{where}: expected: a count of work items is needed")
    return {**data, "run": run, "hardware": hardware}


def _phases(records: list[dict[str, Any]]) -> dict[str, float] | None:
    total: Counter = Counter()
    for record in records:
        for name, seconds in (record.get("phases") or {}).items():
            if isinstance(seconds, (int, float)) and seconds >= 0:
                total[f"worker.{name}"] += seconds
    return {k: round(v, 3) for k, v in sorted(total.items())} or None


def recover(path: str | Path) -> RunDocument:
    """The run a journal describes, as far as it got (see the module docstring)."""
    return Journal(Path(path)).document()


def is_journal(path: str | Path) -> bool:
    """Whether ``path`` starts with a journal header line (cheap: reads the first line only)."""
    try:
        with open_input(path) as f:
            first = f.readline(1 << 20)
    except (ArtifactError, OSError):
        return False
    return _journal_start(first)


def _journal_start(data: bytes) -> bool:
    return data.lstrip().startswith(b'{"journal":')


def load_run(path: str | Path) -> RunDocument:
    """An artifact, or the run recovered from a journal: what ``kernelwatch ingest`` reads.

    Opened by :func:`kernelwatch.store.files.open_input` (a FIFO, device, folder or socket named by path is refused
    without a blocking open). A regular file is sniffed (its first line) and then read by the right
    reader. A pipe this process was given (``cat run.json | kernelwatch ingest /dev/stdin``) can be read
    only once: it is read whole, up to :data:`MAX_ARTIFACT_BYTES`, then sniffed."""
    path = Path(path)
    name = printable(str(path))
    with open_input(path) as fh:
        try:
            if stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                journal = _journal_start(fh.readline(1 << 20))
                data = None
            else:
                data = fh.read(MAX_ARTIFACT_BYTES + 1)
        except OSError as exc:
            raise ArtifactError(f"{name}: cannot read ({exc.strerror or exc})") from None
    if data is None:
        return recover(path) if journal else load_artifact(path)
    if len(data) > MAX_ARTIFACT_BYTES:
        raise ArtifactError(f"{name}: larger than {MAX_ARTIFACT_BYTES >> 20} MiB")
    if _journal_start(data[: 1 << 20].split(b"\n", 1)[0]):
        return Journal(path, data).document()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{name}: not UTF-8 text (byte {exc.start})") from None
    return parse_artifact(text, str(path))


__all__ = [
    "JOURNAL_DIR",
    "JOURNAL_SCHEMA",
    "Journal",
    "JournalWriter",
    "build_document",
    "check_record",
    "is_journal",
    "journal_path",
    "load_run",
    "recover",
    "remove_journal",
]
