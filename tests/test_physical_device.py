"""The physical device is data: each perf result names its GPU (UUID) and host; older runs get them from notes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from alembic import command
from sqlalchemy import select, text

from db.artifact import load_artifact as load_run
from db.engine import _alembic_config, create_db_engine, open_database, upgrade
from db.export import export_run
from db.ingest import ingest_documents, ingest_files
from db.models import PerfResult
from db.schema import (
    RunDocument,
    canonical,
    content_hash,
    devices_note,
    host_note,
    physical_from_notes,
    to_data,
    validate,
)

ROOT = Path(__file__).resolve().parents[1]
# A perf run on two GPUs whose notes name each GPU (collected before device_uuid was a field).
SWAPPED = sorted((ROOT / "ci" / "history").glob("2026-11-30T2100-744fa8bf-*.json.gz"))[0]


def test_notes_of_an_older_run_give_each_result_its_gpu() -> None:
    doc = load_run(SWAPPED)
    uuids, host = physical_from_notes(doc.run.notes)
    assert set(uuids) == {"cuda:0", "cuda:1"} and all(u.startswith("GPU-") for u in uuids.values())
    assert uuids["cuda:0"] != uuids["cuda:1"] and host is None
    perf = [p for p in doc.perf if p.device]
    assert perf and all(p.device_uuid == uuids[p.device] for p in perf)


def test_an_older_artifact_keeps_its_content_hash() -> None:
    """The UUIDs filled in from the notes are not new content: the hash is the one of the file as it was."""
    raw = json.loads(gzip.decompress(SWAPPED.read_bytes()))
    assert all("device_uuid" not in p for p in raw["perf"])
    doc = load_run(SWAPPED)
    assert all("device_uuid" not in p for p in canonical(doc)["perf"])
    exported_like = to_data(doc)
    assert any(p.get("device_uuid") for p in exported_like["perf"])
    assert content_hash(validate(exported_like)) == content_hash(doc)


def test_a_stated_uuid_that_differs_from_the_notes_is_content() -> None:
    data = to_data(load_run(SWAPPED))
    first = next(p for p in data["perf"] if p["device"])
    first["device_uuid"] = "GPU-00000000-0000-0000-0000-000000000000"
    assert content_hash(validate(data)) != content_hash(load_run(SWAPPED))


def test_new_runs_name_device_and_host(make_doc) -> None:
    data = make_doc()
    data["run"]["notes"] = "; ".join([devices_note({"cuda:0": "GPU-abc, PCI 0000:00:06"}), host_note("runner-7")])
    for p in data["perf"]:
        p["device"] = "cuda:0"
    doc = validate(data)
    assert {(p.device_uuid, p.host) for p in doc.perf} == {("GPU-abc", "runner-7")}


def test_export_and_reingest_keep_device_and_hash(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    engine = open_database(url)
    ingest_files(engine, [SWAPPED])
    exported = export_run(engine, load_run(SWAPPED).run.id)
    assert isinstance(exported, RunDocument)
    named = set(physical_from_notes(exported.run.notes)[0].values())
    assert {p.device_uuid for p in exported.perf if p.device} == named
    out = tmp_path / "again.json"
    out.write_text(json.dumps(to_data(exported)))
    assert [o.status for o in ingest_files(engine, [out])] == ["unchanged"]


def test_migration_0003_takes_the_uuid_from_the_notes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    engine = open_database(url)
    ingest_documents(engine, [("swapped", load_run(SWAPPED))])
    with engine.begin() as conn:
        stored = dict(conn.execute(select(PerfResult.device, PerfResult.device_uuid).distinct()).all())
    assert set(stored) == {"cuda:0", "cuda:1"}
    engine.dispose()
    engine = create_db_engine(url)
    cfg = _alembic_config()
    with engine.connect() as conn:  # back to 0002: the columns go, as in a database of the last release
        conn.connection.dbapi_connection.execute("PRAGMA foreign_keys = OFF")  # as db.engine.upgrade does
        with conn.begin():
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0002")
    with engine.connect() as conn:
        columns = {r[1] for r in conn.execute(text("PRAGMA table_info(perf_result)"))}
    assert "device_uuid" not in columns
    upgrade(engine, "head")
    with engine.connect() as conn:
        again = dict(conn.execute(select(PerfResult.device, PerfResult.device_uuid).distinct()).all())
    assert again == stored
