"""The collector's journal (kernelwatch/store/journal.py): written line by line, read back after a kill, torn lines and
all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelwatch.store.journal import JOURNAL_DIR, Journal, JournalWriter, journal_path, load_run, recover
from kernelwatch.store.schema import ArtifactError, Hardware, RunInfo, to_data


def _records(doc: dict) -> list[dict]:
    """One result record per case of a document, as the collector journals them."""
    out = []
    for case in doc["cases"]:
        rows = {s: [r for r in doc[s] if r["case"] == case["key"]] for s in ("accuracy", "perf", "profiler")}
        out.append(
            {
                "suite": "perf" if rows["perf"] else "accuracy",
                "key": case["key"],
                "device": "cuda:0",
                "errored": False,
                "seconds": 1.0,
                "finished_at": doc["run"]["finished_at"],
                "phases": {"x": 1.0},
                "case": case,
                **rows,
            }
        )
    return out


def _write(path: Path, doc: dict, records: list[dict], end: bool = False) -> None:
    run = {**doc["run"], "status": "running", "finished_at": None}
    writer = JournalWriter(path)
    writer.header(RunInfo.model_validate(run), Hardware.model_validate(doc["hardware"]), expected=len(records) + 2)
    for record in records:
        writer.result(record)
    if end:
        writer.end("complete", doc["run"]["finished_at"], "all done", {"total": 3.0})
    writer.close()


def test_a_journal_recovers_its_finished_items_as_a_partial_run(tmp_path: Path, make_doc) -> None:
    doc = make_doc()
    records = _records(doc)
    path = tmp_path / "run.json.journal"
    _write(path, doc, records)
    with path.open("ab") as f:
        f.write(json.dumps({"kind": "result", **records[0]}).encode()[:70])  # a line cut off mid-write
    got = to_data(recover(path))
    assert got["run"]["status"] == "partial" and got["run"]["id"] == doc["run"]["id"]
    assert f"{len(records)} of {len(records) + 2} work items had finished" in got["run"]["notes"]
    assert "last line was cut off" in got["run"]["notes"]
    assert got["perf"] == doc["perf"] and got["accuracy"] == doc["accuracy"] and got["hardware"] == doc["hardware"]
    assert got["run"]["phases_s"] == {"worker.x": float(len(records))}
    assert to_data(load_run(path)) == got  # what `kernelwatch ingest JOURNAL` reads


def test_an_ended_journal_keeps_the_recorded_status(tmp_path: Path, make_doc) -> None:
    doc = make_doc()
    path = tmp_path / "j.jsonl"
    _write(path, doc, _records(doc), end=True)
    got = to_data(recover(path))
    assert got["run"]["status"] == "complete" and got["run"]["phases_s"] == {"total": 3.0}
    assert got["run"]["notes"] == "all done; recovered from its journal: the run had ended but was not stored"


def test_bad_lines_are_one_line_errors_naming_the_line(tmp_path: Path, make_doc) -> None:
    doc = make_doc()
    records = _records(doc)
    path = tmp_path / "j.jsonl"
    _write(path, doc, records)
    lines = path.read_text().split("\n")
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([lines[0], "{not json", *lines[1:]]))
    with pytest.raises(ArtifactError, match=r"broken.jsonl: line 2: not a JSON line$"):
        recover(broken)
    bad = json.loads(lines[1])
    bad["perf"][0]["median_ms"] = -1.0
    negative = tmp_path / "negative.jsonl"
    negative.write_text("\n".join([lines[0], json.dumps(bad), ""]))
    with pytest.raises(ArtifactError, match=r"negative.jsonl: line 2: median_ms: must be >= 0"):
        recover(negative)
    headless = tmp_path / "headless.jsonl"
    headless.write_text(lines[1] + "\n")
    with pytest.raises(ArtifactError, match="line 1: not a kernelwatch.journal/1 header"):
        recover(headless)
    empty = tmp_path / "empty.jsonl"
    empty.write_text(lines[0][:40])  # killed while writing the header
    with pytest.raises(ArtifactError, match="no journal header"):
        recover(empty)


def test_a_journal_being_written_is_not_recovered_and_never_overwritten(tmp_path: Path, make_doc) -> None:
    doc = make_doc()
    path = tmp_path / "live.jsonl"
    writer = JournalWriter(path)
    writer.header(
        RunInfo.model_validate({**doc["run"], "status": "running", "finished_at": None}),
        Hardware.model_validate(doc["hardware"]),
        expected=1,
    )
    with pytest.raises(ArtifactError, match="a running collector is still writing this journal"):
        Journal(path)
    with pytest.raises(ArtifactError, match="a journal of an earlier run is there"):
        JournalWriter(path)
    writer.close()
    assert to_data(recover(path))["run"]["status"] == "failed"  # nothing had finished


def test_where_journals_live(tmp_path: Path) -> None:
    assert journal_path(tmp_path / "run.json", "abc") == tmp_path / "run.json.journal"
    assert journal_path(None, "abc") == Path(JOURNAL_DIR) / "abc.jsonl"
