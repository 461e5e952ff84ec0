"""A corpus of bad run artifacts: each is refused by `kernelwatch ingest` with one exact line, the
same on SQLite and PostgreSQL, exit status 2 (bad input), no traceback, and the database unchanged (a checksum
of a dump taken before and after).

The corpus is the table ``CORPUS`` below: a name, how the file is made (from one valid synthetic run,
or from raw text / bytes), and the message that must follow ``kernelwatch ingest: error: FILE: ``. The files
are generated into a temporary folder; none is committed.
"""

from __future__ import annotations

import copy
import gc
import gzip
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from kernelwatch.cli import main
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.schema import MAX_ARTIFACT_BYTES, SCHEMA, parse_artifact, printable, to_data
from kernelwatch.store.synthetic import SyntheticHistory
from tests.pgserver import create_database, drop_database

ROOT = Path(__file__).resolve().parents[1]
HISTORY = SyntheticHistory(runs=2, cases=2, samples=5)
GOOD = to_data(HISTORY.document(0, 0, HISTORY.case_list()))  # stored before the corpus runs
BASE = to_data(HISTORY.document(1, 0, HISTORY.case_list()))  # every corpus entry is a variation of it
KEY0 = BASE["cases"][0]["key"]  # 'mse_loss/persistent/fp16/n=4096,synthetic=0'
RAW = "@@raw@@"  # a placeholder string replaced by raw JSON text after dumping


# ---------------------------------------------------------------------------------------------
# How a file is made
# ---------------------------------------------------------------------------------------------
Maker = Callable[[Path], Path]


def _write(folder: Path, data: bytes, name: str = "bad.json") -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


def edit(change: Callable[[dict], Any], raw: str | None = None) -> Maker:
    """The base document changed in place by ``change``; a value set to RAW becomes ``raw`` verbatim."""

    def make(folder: Path) -> Path:
        doc = copy.deepcopy(BASE)
        change(doc)
        dumped = json.dumps(doc)  # ensure_ascii: a lone surrogate is written as the escape \\ud800
        if raw is not None:
            assert dumped.count(json.dumps(RAW)) == 1
            dumped = dumped.replace(json.dumps(RAW), raw)
        return _write(folder, dumped.encode())

    return make


def retext(old: str, new: str) -> Maker:
    """The base document's JSON text with one ``old`` replaced by ``new`` (for what json.dumps cannot write)."""

    def make(folder: Path) -> Path:
        dumped = json.dumps(BASE)
        assert old in dumped
        return _write(folder, dumped.replace(old, new, 1).encode())

    return make


def raw(data: bytes) -> Maker:
    return lambda folder: _write(folder, data)


def sparse(size: int) -> Maker:
    """A file of ``size`` bytes that takes no disk space (a hole): the size limit is tested without 512 MiB."""

    def make(folder: Path) -> Path:
        path = folder / "huge.json"
        with path.open("wb") as fh:
            fh.truncate(size)
        return path

    return make


def folder_instead_of_file(folder: Path) -> Path:
    path = folder / "a-folder.json"
    path.mkdir()
    return path


def missing_file(folder: Path) -> Path:
    return folder / "does-not-exist.json"


def odd_file_name(folder: Path) -> Path:
    return folder / "esc\x1b[31m\nnewline.json"  # missing, and its name must reach the terminal escaped


def name_too_long(folder: Path) -> Path:
    return folder / ("n" * 300 + ".json")


def symlink_loop(folder: Path) -> Path:
    (folder / "a.json").symlink_to(folder / "b.json")
    (folder / "b.json").symlink_to(folder / "a.json")
    return folder / "a.json"


def nested(depth: int, open_: str = "[", close: str = "]", inner: str = "1") -> str:
    return open_ * depth + inner + close * depth


def setter(path: str, value: Any) -> Callable[[dict], None]:
    """``setter("perf.0.median_ms", -1.0)``: set one field of the document."""
    *parents, last = path.split(".")

    def change(doc: dict) -> None:
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value

    return change


def dropper(path: str) -> Callable[[dict], None]:
    *parents, last = path.split(".")

    def change(doc: dict) -> None:
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        del node[last]

    return change


def quantiles(min_ms: float, p20_ms: float, median_ms: float, p80_ms: float) -> Callable[[dict], None]:
    return lambda doc: doc["perf"][0].update(min_ms=min_ms, p20_ms=p20_ms, median_ms=median_ms, p80_ms=p80_ms)


# ---------------------------------------------------------------------------------------------
# The corpus: (name, how it is made, the message after "kernelwatch ingest: error: FILE: ")
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bad:
    name: str
    make: Maker
    message: str


INT64 = "9223372036854775807"
TIMESTAMP = "expected an ISO 8601 timestamp with a time zone, between 1970 and 9999"
UNKNOWN = f"unknown field (schema {SCHEMA})"
UNICODE = "text must be valid Unicode (a lone surrogate is not)"
NUL = "text must not contain NUL characters"

CORPUS: list[Bad] = [
    # nesting deep enough to exhaust Python's recursion (the decoder, the validator, repr)
    Bad("deep-nesting", raw(nested(5000).encode()), "not readable: JSON nested too deeply"),
    Bad("deep-objects", raw(nested(5000, '{"a":', "}").encode()), "not readable: JSON nested too deeply"),
    Bad(
        "deep-lists-in-params",
        edit(setter("cases.0.params.n", RAW), nested(950)),
        "cases[0].params.n[0][0][0][0]: lists nested deeper than 4",
    ),
    Bad(
        "deep-objects-in-params",
        edit(setter("cases.0.params.n", RAW), nested(950, '{"a":', "}")),
        "cases[0].params.n: expected a string, number, boolean, null or list of those",
    ),
    Bad("deep-value-in-unknown-field", edit(setter("run.nested", RAW), nested(900)), f"run.nested: {UNKNOWN}"),
    Bad(
        "deep-value-in-text-field",
        edit(setter("run.notes", RAW), nested(900)),
        "run.notes: expected a string, got [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[...",
    ),
    Bad(
        "params-nested-5-deep",
        edit(setter("cases.0.params.shape", [[[[[1]]]]])),
        "cases[0].params.shape[0][0][0][0]: lists nested deeper than 4",
    ),
    # numbers no column can hold
    Bad(
        "5000-digit-integer",
        edit(setter("accuracy.0.trials", RAW), "9" * 5000),
        "accuracy[0].trials: out of range (an integer of 5000 digits)",
    ),
    Bad(
        "5000-digit-integer-in-float-field",
        edit(setter("perf.0.median_ms", RAW), "9" * 5000),
        "perf[0].median_ms: out of range (an integer of 5000 digits)",
    ),
    Bad(
        "5000-digit-integer-in-params",
        edit(setter("cases.0.params.n", RAW), "9" * 5000),
        "cases[0].params.n: integer out of the 64-bit range (5000 digits)",
    ),
    Bad(
        "400-digit-integer-in-float-field",
        edit(setter("accuracy.0.rtol", 10**400)),
        "accuracy[0].rtol: out of the range of a 64-bit float, got 1" + "0" * 56 + "...",
    ),
    Bad(
        "float-overflowing-to-inf",
        edit(setter("accuracy.0.rtol", RAW), "1e400"),
        "accuracy[0].rtol: expected a finite number, got inf",
    ),
    Bad(
        "memory-bytes-10**30",
        edit(setter("hardware.memory_bytes", 10**30)),
        f"hardware.memory_bytes: must be <= {INT64}, got {10**30}",
    ),
    Bad("perf-bytes-2**63", edit(setter("perf.0.bytes", 2**63)), f"perf[0].bytes: must be <= {INT64}, got {2**63}"),
    Bad("flops-negative", edit(setter("perf.0.flops", -1)), "perf[0].flops: must be >= 0, got -1"),
    Bad(
        "device-count-2**40",
        edit(setter("hardware.device_count", 2**40)),
        f"hardware.device_count: must be <= 2147483647, got {2**40}",
    ),
    Bad(
        "nan-mismatches-2**31",
        edit(setter("accuracy.0.nan_mismatches", 2**31)),
        f"accuracy[0].nan_mismatches: must be <= 2147483647, got {2**31}",
    ),
    Bad(
        "seed-below-int64",
        edit(setter("accuracy.0.seed", -(2**63))),
        f"accuracy[0].seed: must be >= -{INT64}, got {-(2**63)}",
    ),
    Bad(
        "params-integer-2**63",
        edit(setter("cases.0.params.n", 2**63)),
        "cases[0].params.n: integer out of the 64-bit range",
    ),
    # times: finite, non-negative, ordered
    Bad("negative-median", edit(setter("perf.0.median_ms", -1.0)), "perf[0].median_ms: must be >= 0.0, got -1.0"),
    Bad("negative-min", edit(setter("perf.0.min_ms", -0.5)), "perf[0].min_ms: must be >= 0.0, got -0.5"),
    Bad("negative-p20", edit(setter("perf.0.p20_ms", -2.0)), "perf[0].p20_ms: must be >= 0.0, got -2.0"),
    Bad("negative-p80", edit(setter("perf.0.p80_ms", -3.0)), "perf[0].p80_ms: must be >= 0.0, got -3.0"),
    Bad(
        "negative-sample", edit(setter("perf.0.samples_ms.0", -1.0)), "perf[0].samples_ms[0]: must be >= 0.0, got -1.0"
    ),
    Bad(
        "negative-host-probe",
        edit(setter("perf.0.host_probe_us", -21.2)),
        "perf[0].host_probe_us: must be >= 0.0, got -21.2",
    ),
    Bad(
        "string-host-probe-sample",
        edit(setter("perf.0.host_probe_samples_us", [21.2, "fast"])),
        "perf[0].host_probe_samples_us[1]: expected a number, got 'fast'",
    ),
    Bad(
        "host-probes-not-one-per-sample",
        edit(setter("perf.0.host_probe_samples_us", [21.2])),
        "perf[0].host_probe_samples_us: 1 probes for 5 samples (one after each)",
    ),
    Bad(
        "negative-phase-seconds",
        edit(setter("run.phases_s", {"perf": -1.0})),
        "run.phases_s.perf: must be >= 0.0, got -1.0",
    ),
    Bad("min-above-p20", edit(quantiles(2.5, 2.0, 3.0, 4.0)), "perf[0].min_ms: 2.5 is larger than p20_ms 2.0"),
    Bad("p20-above-median", edit(quantiles(1.0, 3.0, 2.0, 4.0)), "perf[0].p20_ms: 3.0 is larger than median_ms 2.0"),
    Bad("median-above-p80", edit(quantiles(1.0, 2.0, 5.0, 4.0)), "perf[0].median_ms: 5.0 is larger than p80_ms 4.0"),
    Bad(
        "NaN-literal", retext('"rtol": 0.001', '"rtol": NaN'), "NaN is not valid JSON (non-finite numbers must be null)"
    ),
    Bad(
        "Infinity-literal",
        retext('"rtol": 0.001', '"rtol": Infinity'),
        "Infinity is not valid JSON (non-finite numbers must be null)",
    ),
    Bad(
        "-Infinity-literal",
        retext('"rtol": 0.001', '"rtol": -Infinity'),
        "-Infinity is not valid JSON (non-finite numbers must be null)",
    ),
    Bad(
        "finished-before-started",
        edit(lambda d: d["run"].update(started_at="2026-01-05T10:00:00Z", finished_at="2026-01-05T09:59:59Z")),
        "run.finished_at: before started_at (2026-01-05T10:00:00.000000Z)",
    ),
    Bad(
        "year-1-with-offset",
        edit(setter("run.started_at", "0001-01-01T00:00:00+01:00")),
        f"run.started_at: {TIMESTAMP}",
    ),
    Bad(
        "year-9999-west-of-utc",
        edit(setter("run.finished_at", "9999-12-31T23:59:59-01:00")),
        f"run.finished_at: {TIMESTAMP}",
    ),
    Bad(
        "before-1970",
        edit(setter("run.commit.time", "1969-12-31T23:59:59Z")),
        "run.commit.time: expected a timestamp between 1970 and 9999",
    ),
    Bad(
        "timestamp-without-zone", edit(setter("run.started_at", "2026-01-05T10:00:00")), f"run.started_at: {TIMESTAMP}"
    ),
    # text PostgreSQL rejects and SQLite would store
    Bad(
        "lone-surrogate-in-subject",
        edit(setter("run.commit.subject", "fix \ud800 here")),
        f"run.commit.subject: {UNICODE}",
    ),
    Bad("lone-surrogate-in-field-name", edit(setter("perf.0.\udc00", 1)), f"perf[0]: {UNICODE}"),
    Bad("lone-surrogate-in-params", edit(setter("cases.0.params.mode", "\udfff")), f"cases[0].params.mode: {UNICODE}"),
    Bad("NUL-in-subject", edit(setter("run.commit.subject", "a\x00b")), f"run.commit.subject: {NUL}"),
    Bad("NUL-in-case-key", edit(setter("cases.0.key", "k\x00")), f"cases[0].key: {NUL}"),
    Bad(
        "NUL-in-versions-key",
        edit(setter("run.versions.torch\x00", "2")),
        f'run.versions["torch\\u0000"] (the key): {NUL}',
    ),
    Bad("NUL-in-params-value", edit(setter("cases.0.params.mode", "x\x00")), f"cases[0].params.mode: {NUL}"),
    Bad(
        "10000-character-device-name",
        edit(setter("hardware.device_name", "x" * 10_000)),
        "hardware.device_name: at most 128 characters (got 10000)",
    ),
    Bad(
        "256-character-case-key",
        edit(setter("cases.0.key", "k" * 256)),
        "cases[0].key: at most 255 characters (got 256)",
    ),
    Bad(
        "65-character-kernel",
        edit(setter("cases.0.kernel", "k" * 65)),
        "cases[0].kernel: at most 64 characters (got 65)",
    ),
    Bad(
        "33-character-implementation",
        edit(setter("perf.0.implementation", "i" * 33)),
        "perf[0].implementation: at most 32 characters (got 33)",
    ),
    Bad(
        "65537-character-notes",
        edit(setter("run.notes", "n" * 65_537)),
        "run.notes: at most 65536 characters (got 65537)",
    ),
    Bad(
        "300-character-params-string",
        edit(setter("cases.0.params.mode", "m" * 300)),
        "cases[0].params.mode: at most 255 characters (got 300)",
    ),
    Bad("empty-vendor", edit(setter("hardware.vendor", "")), "hardware.vendor: must not be empty"),
    Bad("blank-branch", edit(setter("run.commit.branch", "   ")), "run.commit.branch: must not be empty"),
    Bad(
        "run-id-with-newline",
        edit(lambda d: d["run"].update(id=d["run"]["id"] + "\n")),
        "run.id: expected a lower-case UUID",
    ),
    Bad(
        "run-id-upper-case",
        edit(lambda d: d["run"].update(id=d["run"]["id"].upper())),
        "run.id: expected a lower-case UUID",
    ),
    # JSON the standard allows and Python would read with a silent choice
    Bad(
        "duplicate-json-key",
        retext('"status": "complete"', '"status": "complete", "status": "failed"'),
        "duplicate key 'status' in one JSON object",
    ),
    # wrong types everywhere
    Bad(
        "string-for-number",
        edit(setter("perf.2.median_ms", "fast")),
        "perf[2].median_ms: expected a number, got 'fast'",
    ),
    Bad("number-for-string", edit(setter("run.commit.sha", 5)), "run.commit.sha: expected a string, got 5"),
    Bad(
        "boolean-for-integer",
        edit(setter("accuracy.0.trials", True)),
        "accuracy[0].trials: expected an integer, got True",
    ),
    Bad(
        "float-for-integer", edit(setter("accuracy.0.trials", 3.0)), "accuracy[0].trials: expected an integer, got 3.0"
    ),
    Bad(
        "string-for-boolean",
        edit(setter("run.commit.dirty", "yes")),
        "run.commit.dirty: expected true or false, got 'yes'",
    ),
    Bad("null-for-required", edit(setter("run.started_at", None)), "run.started_at: expected a string, got None"),
    Bad("object-for-list", edit(setter("cases", {})), "cases: expected a list, got {}"),
    Bad("list-for-object", edit(setter("hardware", [])), "hardware: expected an object, got []"),
    Bad(
        "string-for-samples", edit(setter("perf.0.samples_ms", "1,2")), "perf[0].samples_ms: expected a list, got '1,2'"
    ),
    Bad(
        "object-in-params",
        edit(setter("cases.0.params.x", {"a": 1})),
        "cases[0].params.x: expected a string, number, boolean, null or list of those",
    ),
    Bad(
        "unknown-trigger",
        edit(setter("run.trigger", "weekly")),
        "run.trigger: expected 'pr', 'nightly' or 'manual', got 'weekly'",
    ),
    Bad(
        "unknown-accuracy-kind",
        edit(setter("accuracy.0.kind", "gated")),
        "accuracy[0].kind: expected 'gate' or 'explore', got 'gated'",
    ),
    # unknown and missing fields, counts
    Bad("unknown-top-level-field", edit(setter("extra", 1)), f"extra: {UNKNOWN}"),
    Bad("unknown-nested-field", edit(setter("perf.0.fast", True)), f"perf[0].fast: {UNKNOWN}"),
    Bad(
        "escape-sequence-field-name", edit(setter("perf.0.\x1b[31mred", True)), f'perf[0]["\\u001b[31mred"]: {UNKNOWN}'
    ),
    Bad("missing-run-status", edit(dropper("run.status")), "run.status: missing field"),
    Bad("missing-hardware", edit(dropper("hardware")), "hardware: missing field"),
    Bad("missing-schema", edit(dropper("schema")), "schema: missing field"),
    Bad(
        "unknown-schema-version",
        edit(setter("schema", "kernelwatch.run/9")),
        f"schema: unknown schema version 'kernelwatch.run/9' (this KernelWatch reads {SCHEMA})",
    ),
    Bad(
        "65-versions",
        edit(setter("run.versions", {f"lib{i}": "1" for i in range(65)})),
        "run.versions: at most 64 items (got 65)",
    ),
    Bad(
        "100001-samples",
        edit(setter("perf.0.samples_ms", [1.0] * 100_001)),
        "perf[0].samples_ms: at most 100000 items (got 100001)",
    ),
    # the document as a whole
    Bad(
        "case-referenced-not-listed", edit(setter("perf.0.case", "nope")), "perf[0].case: 'nope' is not listed in cases"
    ),
    Bad(
        "accuracy-case-not-listed",
        edit(setter("accuracy.1.case", "gone")),
        "accuracy[1].case: 'gone' is not listed in cases",
    ),
    Bad(
        "duplicate-case",
        edit(lambda d: d["cases"].append(copy.deepcopy(d["cases"][0]))),
        f"cases[2]: duplicate key '{KEY0}'",
    ),
    Bad(
        "duplicate-perf-result",
        edit(lambda d: d["perf"].append(copy.deepcopy(d["perf"][0]))),
        "perf[6]: duplicate case/implementation ('mse_loss/persistent/fp16/n=4096,synthetic=0', 'torch_co...",
    ),
    Bad(
        "duplicate-accuracy-result",
        edit(lambda d: d["accuracy"].append(copy.deepcopy(d["accuracy"][0]))),
        "accuracy[2]: duplicate case/kind ('mse_loss/persistent/fp16/n=4096,synthetic=0', 'gate')",
    ),
    Bad("json-array", raw(b"[]"), "(document): expected a JSON object, got an array"),
    Bad("json-null", raw(b"null"), "(document): expected a JSON object, got null"),
    Bad("json-string", raw(b'"kernelwatch.run/1"'), "(document): expected a JSON object, got a string"),
    # the file itself
    Bad("empty-file", raw(b""), "not valid JSON (Expecting value at line 1 column 1)"),
    Bad(
        "truncated",
        raw(b'{"schema": "kernelwatch.run/1", "run": {'),
        "not valid JSON (Expecting property name enclosed in double quotes at line 1 column 41)",
    ),
    Bad("not-utf-8", raw(b'{"schema": "\xff"}'), "not UTF-8 text (byte 12)"),
    Bad("utf-16", raw('{"schema": 1}'.encode("utf-16")), "not UTF-8 text (byte 0)"),
    Bad(
        "utf-8-bom",
        raw(b"\xef\xbb\xbf{}"),
        "not valid JSON (Unexpected UTF-8 BOM (decode using utf-8-sig) at line 1 column 1)",
    ),
    Bad("larger-than-512-MiB", sparse(MAX_ARTIFACT_BYTES + 1), f"larger than 512 MiB ({MAX_ARTIFACT_BYTES + 1} bytes)"),
    Bad("folder-instead-of-file", folder_instead_of_file, "is a folder, not an artifact file"),
    Bad("missing-file", missing_file, "no such file"),
    Bad("escape-and-newline-in-file-name", odd_file_name, "no such file"),
    Bad("file-name-too-long", name_too_long, "cannot read (File name too long)"),
    Bad("symlink-loop", symlink_loop, "cannot read (Too many levels of symbolic links)"),
]


def test_the_corpus_has_one_entry_per_name_and_every_kind_the_issue_lists() -> None:
    names = [bad.name for bad in CORPUS]
    assert len(names) == len(set(names))
    issue = {
        "deep-nesting",
        "deep-lists-in-params",
        "5000-digit-integer",
        "memory-bytes-10**30",
        "perf-bytes-2**63",
        "year-1-with-offset",
        "lone-surrogate-in-subject",
        "NUL-in-subject",
        "10000-character-device-name",
        "device-count-2**40",
        "negative-median",
        "negative-min",
        "negative-p20",
        "negative-p80",
        "finished-before-started",
        "duplicate-json-key",
        "NaN-literal",
        "Infinity-literal",
        "string-for-number",
        "unknown-nested-field",
        "missing-run-status",
        "unknown-schema-version",
        "empty-file",
        "not-utf-8",
        "json-array",
        "case-referenced-not-listed",
        "duplicate-case",
        "duplicate-perf-result",
        "larger-than-512-MiB",
        "folder-instead-of-file",
        "missing-file",
    }
    assert issue <= set(names)
    assert len(CORPUS) >= 80


def test_the_base_document_is_valid() -> None:
    """Every entry changes one thing in a valid document: the refusal is about that one thing."""
    parse_artifact(json.dumps(BASE))
    parse_artifact(json.dumps(GOOD))


# ---------------------------------------------------------------------------------------------
# The two databases, each holding one good run, and a checksum of everything in them
# ---------------------------------------------------------------------------------------------
def sqlite_checksum(url: str) -> str:
    """SHA-256 of the database file's bytes and of its SQL dump (schema and rows, in SQLite's order)."""
    path = Path(url.split("///", 1)[1])
    digest = hashlib.sha256(path.read_bytes())
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        for line in conn.iterdump():
            digest.update(line.encode())
    finally:
        conn.close()
    return digest.hexdigest()


def postgres_checksum(url: str) -> str:
    """SHA-256 of every table's columns and rows (ordered by the row's text) and every sequence's position."""
    engine = create_engine(url)
    digest = hashlib.sha256()
    with engine.connect() as conn:
        columns = conn.execute(
            text(
                "SELECT table_name, column_name, data_type, character_maximum_length, is_nullable "
                "FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, ordinal_position"
            )
        ).all()
        digest.update(repr(columns).encode())
        for table in sorted({c[0] for c in columns}):
            for (row,) in conn.execute(text(f'SELECT t::text FROM "{table}" t ORDER BY 1')):
                digest.update(f"{table}:{row}\n".encode())
        digest.update(
            repr(conn.execute(text("SELECT sequencename, last_value FROM pg_sequences ORDER BY 1")).all()).encode()
        )
    engine.dispose()
    return digest.hexdigest()


@dataclass
class Database:
    kind: str
    url: str

    def checksum(self) -> str:
        # An engine an earlier command left open checkpoints SQLite's WAL into the file when it is collected:
        # collected between two checksums, it changed the file's bytes with nothing written (seen once the
        # allocation pattern moved the collection there).
        gc.collect()
        return sqlite_checksum(self.url) if self.kind == "sqlite" else postgres_checksum(self.url)


def _holding_one_run(kind: str, url: str) -> Database:
    engine = open_database(url)
    ingest_documents(engine, [("good", parse_artifact(json.dumps(GOOD)))])
    engine.dispose()  # the last connection checkpoints SQLite's WAL into the file
    return Database(kind, url)


@pytest.fixture(scope="module")
def sqlite_db(tmp_path_factory: pytest.TempPathFactory) -> Database:
    return _holding_one_run("sqlite", f"sqlite:///{tmp_path_factory.mktemp('corpus') / 'kw.db'}")


@pytest.fixture(scope="module")
def postgres_db(pg_admin: str) -> Iterator[Database]:
    url, name = create_database(pg_admin, "kw_corpus")
    try:
        yield _holding_one_run("postgres", url)
    finally:
        drop_database(pg_admin, name)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest) -> Database:
    return request.getfixturevalue(f"{request.param}_db")


def ingest(cli, db: Database, path: Path) -> str:
    """Run `kernelwatch ingest` on one bad file; assert it is refused in one line and the database is unchanged."""
    before = db.checksum()
    result = cli.invoke(main, ["ingest", str(path), "--db", db.url])
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # not a traceback
    assert result.stdout == ""
    assert result.stderr.endswith("\n") and result.stderr[:-1].isprintable(), result.stderr  # one printable line
    assert db.checksum() == before, f"{db.kind} changed"
    return result.stderr[:-1]


@pytest.mark.parametrize("bad", CORPUS, ids=[b.name for b in CORPUS])
def test_bad_artifact_is_refused_in_one_line_and_changes_nothing(
    bad: Bad, database: Database, tmp_path: Path, cli
) -> None:
    path = bad.make(tmp_path)
    line = ingest(cli, database, path)
    assert line == f"kernelwatch ingest: error: {printable(str(path))}: {bad.message}"


@pytest.mark.postgres
def test_every_bad_artifact_gets_the_same_answer_on_both_databases(
    sqlite_db: Database, postgres_db: Database, tmp_path: Path, cli
) -> None:
    """The same file, the same line on SQLite and PostgreSQL, for every entry of the corpus."""
    differ = []
    for i, bad in enumerate(CORPUS):
        folder = tmp_path / str(i)
        folder.mkdir()
        path = bad.make(folder)
        lines = {db.kind: ingest(cli, db, path) for db in (sqlite_db, postgres_db)}
        if lines["sqlite"] != lines["postgres"]:
            differ.append((bad.name, lines))
    assert differ == []


# ---------------------------------------------------------------------------------------------
# Refused by the model before either database is touched
# ---------------------------------------------------------------------------------------------
def test_every_bad_artifact_is_refused_before_a_database_is_opened(tmp_path: Path, cli) -> None:
    """The files are judged first: a database that does not exist is not created, and one that cannot
    be reached is not even tried, so the refusal cannot depend on which database it was."""
    absent = tmp_path / "no-such-folder" / "kw.db"
    for n, url in enumerate((f"sqlite:///{absent}", "postgresql+psycopg://nobody@127.0.0.1:9/none")):
        for i, bad in enumerate(CORPUS):
            folder = tmp_path / f"{n}-{i}"
            folder.mkdir()
            path = bad.make(folder)
            result = cli.invoke(main, ["ingest", str(path), "--db", url])
            assert (result.exit_code, result.stderr) == (
                2,
                f"kernelwatch ingest: error: {printable(str(path))}: {bad.message}\n",
            ), (bad.name, url)
    assert not absent.parent.exists()


DIVERGENT = {  # corpus entry -> (table, column, a value of that kind)
    "NUL-in-subject": ("run", "commit_subject", "a\x00b"),
    "10000-character-device-name": ("hardware", "device_name", "x" * 10_000),
    "256-character-case-key": ("kernel_case", "key", "k" * 256),
    "device-count-2**40": ("run", "device_count", 2**40),
    "nan-mismatches-2**31": ("accuracy_result", "nan_mismatches", 2**31),
}


@pytest.mark.postgres
@pytest.mark.parametrize("name", sorted(DIVERGENT))
def test_sqlite_would_store_what_postgres_rejects(name: str, sqlite_db: Database, postgres_db: Database) -> None:
    """Why the model must refuse these: in a column of the same type SQLite stores the value and
    PostgreSQL rejects it (the corpus entry of the same name is refused alike on both)."""
    from sqlalchemy import Column, Integer, MetaData, Table, insert, select

    from kernelwatch.store.models import Base

    table, column, value = DIVERGENT[name]
    probe = Table(
        "divergence_probe",
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("v", Base.metadata.tables[table].c[column].type),
        prefixes=["TEMPORARY"],
    )
    outcomes = {}
    for db in (sqlite_db, postgres_db):
        engine = create_engine(db.url)
        with engine.connect() as conn:
            probe.create(conn)
            try:
                conn.execute(insert(probe).values(v=value))
                outcomes[db.kind] = conn.execute(select(probe.c.v)).scalar_one() == value
            except Exception as exc:
                outcomes[db.kind] = type(exc).__name__
            conn.rollback()
        engine.dispose()
    assert outcomes == {"sqlite": True, "postgres": "DataError"}
    assert any(b.name == name for b in CORPUS)


def test_negative_zero_and_subnormals_are_stored_alike(database: Database, tmp_path: Path, cli) -> None:
    """SQLite stores -0.0 as 0 and PostgreSQL keeps the sign: the model makes it +0.0 before either sees it."""
    import math

    doc = copy.deepcopy(BASE)
    doc["run"]["id"] = str(uuid.UUID(int=7, version=4))
    doc["perf"][0].update(
        gbps=-0.0,
        tflops=5e-324,
        samples_ms=[-0.0, 0.0, 1e-310, 1.0, 2.0],
        min_ms=-0.0,
        p20_ms=0.0,
        median_ms=1e-310,
        p80_ms=1.0,
    )
    path = tmp_path / "zero.json"
    path.write_text(json.dumps(doc))
    result = cli.invoke(main, ["ingest", str(path), "--db", database.url])
    assert result.exit_code == 0, result.output
    engine = create_engine(database.url)
    with engine.connect() as conn:
        gbps, tflops, min_ms, samples = conn.execute(
            text(
                "SELECT gbps, tflops, min_ms, samples_ms FROM perf_result WHERE run_id = :r AND implementation = :i "
                "AND case_id = (SELECT id FROM kernel_case WHERE key = :k)"
            ),
            {"r": doc["run"]["id"], "i": "torch_compile", "k": KEY0},
        ).one()
    engine.dispose()
    samples = json.loads(samples) if isinstance(samples, str) else samples
    assert [math.copysign(1.0, v) for v in (gbps, min_ms, samples[0])] == [1.0, 1.0, 1.0]
    assert (tflops, samples) == (5e-324, [0.0, 0.0, 1e-310, 1.0, 2.0])


# ---------------------------------------------------------------------------------------------
# Through a real process: real stdout/stderr encodings, argv bytes, the interpreter's own stack
# ---------------------------------------------------------------------------------------------
SUBPROCESS = (
    "deep-nesting",
    "deep-lists-in-params",
    "5000-digit-integer",
    "lone-surrogate-in-subject",
    "lone-surrogate-in-field-name",
    "NUL-in-versions-key",
    "escape-sequence-field-name",
    "not-utf-8",
    "larger-than-512-MiB",
    "folder-instead-of-file",
    "escape-and-newline-in-file-name",
)


def _kernelwatch(*args: str | bytes) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"}
    return subprocess.run([sys.executable, "-m", "kernelwatch", *args], env=env, capture_output=True, timeout=120)


@pytest.mark.parametrize("name", SUBPROCESS)
def test_bad_artifact_through_a_real_process(name: str, database: Database, tmp_path: Path) -> None:
    bad = next(b for b in CORPUS if b.name == name)
    path = bad.make(tmp_path)
    before = database.checksum()
    proc = _kernelwatch("ingest", str(path), "--db", database.url)
    assert (proc.returncode, proc.stdout) == (2, b""), proc.stderr.decode(errors="replace")
    assert proc.stderr.decode() == f"kernelwatch ingest: error: {printable(str(path))}: {bad.message}\n"
    assert database.checksum() == before


def test_a_file_name_that_is_not_utf_8_is_named_escaped(sqlite_db: Database, tmp_path: Path) -> None:
    """argv bytes that are not UTF-8 reach Python as lone surrogates; the message must still print."""
    name = os.fsencode(tmp_path) + b"/caf\xe9.json"
    with open(name, "wb") as fh:
        fh.write(b"[]")
    proc = _kernelwatch("ingest", name, "--db", sqlite_db.url)
    assert proc.returncode == 2
    assert proc.stderr.decode() == (
        f"kernelwatch ingest: error: {tmp_path}/caf\\udce9.json: (document): expected a JSON object, got an array\n"
    )


def test_one_bad_file_among_good_ones_stores_none(database: Database, tmp_path: Path, cli) -> None:
    good = tmp_path / "good.json"
    other = copy.deepcopy(BASE)
    other["run"]["id"] = str(uuid.UUID(int=11, version=4))
    good.write_text(json.dumps(other))
    bad_entry = next(b for b in CORPUS if b.name == "NUL-in-subject")
    folder = tmp_path / "bad"
    folder.mkdir()
    bad = bad_entry.make(folder)
    before = database.checksum()
    result = cli.invoke(main, ["ingest", str(good), str(bad), "--db", database.url])
    assert result.exit_code == 2
    assert result.stderr == f"kernelwatch ingest: error: {bad}: {bad_entry.message}\n"
    assert database.checksum() == before


# ---------------------------------------------------------------------------------------------
# The limits are the columns' limits, and the published JSON Schema states them
# ---------------------------------------------------------------------------------------------
TABLES = {  # record of the artifact -> the tables its fields are stored in, first match wins
    "RunInfo": ("run",),
    "Commit": ("run",),
    "Hardware": ("hardware", "run"),
    "CaseInfo": ("kernel_case",),
    "AccuracyResult": ("accuracy_result",),
    "PerfResult": ("perf_result",),
    "ProfilerMetric": ("profiler_metric",),
}
RENAMED = {("Commit", "sha"): "commit_sha", ("Commit", "time"): "commit_time", ("Commit", "subject"): "commit_subject"}
NOT_A_COLUMN = {("RunInfo", "commit"), ("AccuracyResult", "case"), ("PerfResult", "case"), ("ProfilerMetric", "case")}


def _published(prop: dict) -> dict:
    """The non-null branch of an optional property."""
    branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]
    assert len(branches) == 1, prop
    return branches[0]


def test_every_limit_of_the_model_fits_its_column() -> None:
    """A string no longer than its VARCHAR, an integer inside its INTEGER / BIGINT, an enum value inside
    its column: what the model lets through, PostgreSQL stores (and SQLite stores the same)."""
    from sqlalchemy import BigInteger, Integer, String

    from kernelwatch.store.models import Base
    from kernelwatch.store.schema import json_schema

    defs = json_schema()["$defs"]
    checked = 0
    for record, tables in TABLES.items():
        for field, prop in defs[record]["properties"].items():
            if (record, field) in NOT_A_COLUMN:
                continue
            name = RENAMED.get((record, field), field)
            column = next((Base.metadata.tables[t].c[name] for t in tables if name in Base.metadata.tables[t].c), None)
            assert column is not None, f"{record}.{field} is stored nowhere"
            bound = _published(prop)
            if isinstance(column.type, String) and column.type.length:
                longest = max(map(len, bound["enum"])) if "enum" in bound else bound.get("maxLength")
                assert longest is not None and longest <= column.type.length, (record, field, longest, column.type)
                checked += 1
            elif isinstance(column.type, Integer):
                top = 2**63 - 1 if isinstance(column.type, BigInteger) else 2**31 - 1
                assert -top <= bound["minimum"] and bound["maximum"] <= top, (record, field, bound, column.type)
                checked += 1
    assert checked >= 30


def _published_schema_validator(cli):
    jsonschema = pytest.importorskip("jsonschema")
    result = cli.invoke(main, ["schema"])
    assert result.exit_code == 0
    return jsonschema.Draft202012Validator(json.loads(result.stdout))


@pytest.mark.slow
def test_the_published_json_schema_accepts_the_whole_shipped_history(cli) -> None:
    """Every run in ci/history (about 10 s of validation for 61 files) passes the published schema."""
    validator = _published_schema_validator(cli)
    history = sorted((ROOT / "ci" / "history").glob("*.json.gz"))
    assert len(history) > 1 and all(validator.is_valid(json.loads(gzip.decompress(p.read_bytes()))) for p in history)


def test_the_published_json_schema_refuses_what_it_can_state(tmp_path: Path, cli) -> None:
    """`kernelwatch schema` is usable by a CI author's own validator: the newest shipped run passes (the test above
    takes the whole history), and the corpus entries a JSON Schema can express (types, bounds, lengths, enums,
    unknown fields) fail."""
    validator = _published_schema_validator(cli)
    newest = sorted((ROOT / "ci" / "history").glob("*.json.gz"))[-1]
    assert validator.is_valid(json.loads(gzip.decompress(newest.read_bytes()))), newest.name
    assert validator.is_valid(GOOD)
    expressible = [
        "memory-bytes-10**30",
        "perf-bytes-2**63",
        "device-count-2**40",
        "nan-mismatches-2**31",
        "negative-median",
        "10000-character-device-name",
        "256-character-case-key",
        "string-for-number",
        "boolean-for-integer",
        "unknown-nested-field",
        "missing-run-status",
        "unknown-schema-version",
        "unknown-trigger",
        "run-id-with-newline",
        "65-versions",
        "empty-vendor",
    ]
    for name in expressible:
        bad = next(b for b in CORPUS if b.name == name)
        folder = tmp_path / name
        folder.mkdir()
        assert not validator.is_valid(json.loads(bad.make(folder).read_text())), name


def test_a_run_id_prefix_gets_the_same_answer_on_both_databases(database: Database, cli) -> None:
    """SQLite's LIKE ignores case and PostgreSQL's does not; % and _ are wildcards in both."""
    run_id = GOOD["run"]["id"]
    upper = cli.invoke(main, ["show", run_id[:8].upper(), "--db", database.url, "--format", "json"])
    assert upper.exit_code == 0, upper.output
    assert {r["case"] for r in json.loads(upper.stdout)} == {c["key"] for c in GOOD["cases"]}
    for prefix in ("%", "_", run_id[:4] + "%"):
        result = cli.invoke(main, ["show", prefix, "--db", database.url])
        assert (result.exit_code, result.stderr) == (2, f"kernelwatch show: error: no run with id {prefix!r}\n")


def test_one_run_id_with_two_contents_in_one_call_stores_neither(database: Database, tmp_path: Path, cli) -> None:
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps(BASE))
    changed = copy.deepcopy(BASE)
    changed["perf"][0]["error"] = "another outcome"
    second.write_text(json.dumps(changed))
    before = database.checksum()
    result = cli.invoke(main, ["ingest", str(first), str(second), "--db", database.url])
    assert (result.exit_code, result.stderr) == (
        2,
        f"kernelwatch ingest: error: {second}: run.id: {BASE['run']['id']} "
        f"also appears, with different content, in {first}\n",
    )
    assert database.checksum() == before


def test_an_artifact_nobody_may_read_is_one_line(sqlite_db: Database, tmp_path: Path) -> None:
    from tests.test_readonly import _without_permission_bypass

    prefix = _without_permission_bypass()
    path = tmp_path / "secret.json"
    path.write_text(json.dumps(BASE))
    path.chmod(0o000)
    before = sqlite_db.checksum()
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "kernelwatch", "ingest", str(path), "--db", sqlite_db.url],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"kernelwatch ingest: error: {path}: cannot read (Permission denied)\n"
    assert sqlite_db.checksum() == before
