"""The physical device is data: each perf result names its GPU (UUID) and host as fields. Runs from before the
fields stated them in their notes; such an artifact is upgraded once, as it is read (``upgrade_document``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from alembic import command
from sqlalchemy import select, text

from kernelwatch.store.artifact import load_artifact as load_run
from kernelwatch.store.engine import _alembic_config, create_db_engine, open_database, upgrade
from kernelwatch.store.export import export_run
from kernelwatch.store.ingest import ingest_documents, ingest_files
from kernelwatch.store.models import PerfResult
from kernelwatch.store.schema import (
    RunDocument,
    canonical,
    content_hash,
    physical_from_notes,
    to_data,
    upgrade_document,
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


def test_an_old_artifact_s_notes_borne_uuid_ends_in_the_typed_field() -> None:
    """The upgrade works on the parsed data, before the model sees it: the UUID the notes name for each label is
    the result's ``device_uuid`` (the notes themselves are kept as they were)."""
    raw = json.loads(gzip.decompress(SWAPPED.read_bytes()))
    upgraded = upgrade_document(raw)
    assert all("device_uuid" not in p for p in raw["perf"])  # the parsed data is not changed in place
    labels = {p["device"] for p in upgraded["perf"] if p.get("device")}
    assert labels == {"cuda:0", "cuda:1"}
    for p in upgraded["perf"]:
        assert p["device_uuid"] == physical_from_notes(raw["run"]["notes"])[0][p["device"]]
        assert p["device_uuid"] in raw["run"]["notes"] and p["device_uuid"].startswith("GPU-")
    assert upgraded["run"]["notes"] == raw["run"]["notes"]


def test_notes_of_the_old_form_upgrade_device_and_host(make_doc) -> None:
    data = make_doc()
    data["run"]["notes"] = "devices: cuda:0 = GPU-abc, PCI 0000:00:06; cuda:1 = unknown; host: runner-7"
    for p in data["perf"]:
        p["device"] = "cuda:0"
    doc = validate(data)
    assert {(p.device_uuid, p.host) for p in doc.perf} == {("GPU-abc", "runner-7")}
    stated = data["perf"][0]
    stated["device_uuid"] = "GPU-stated"  # a result that states its device keeps it
    by_key = {(p.case, p.implementation): p.device_uuid for p in validate(data).perf}
    assert by_key.pop((stated["case"], stated["implementation"])) == "GPU-stated"
    assert set(by_key.values()) == {"GPU-abc"}


def test_new_runs_carry_device_and_host_as_fields_not_notes(make_doc) -> None:
    """Nothing travels through the notes: the fields are what a new artifact states, and notes are left alone."""
    data = make_doc()
    data["run"]["notes"] = None
    for p in data["perf"]:
        p.update(device="cuda:0", device_uuid="GPU-abc", host="runner-7")
    doc = validate(data)
    assert {(p.device_uuid, p.host) for p in doc.perf} == {("GPU-abc", "runner-7")}
    assert doc.run.notes is None and upgrade_document(data) is data


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
        conn.connection.dbapi_connection.execute(
            "PRAGMA foreign_keys = OFF"
        )  # as kernelwatch.store.engine.upgrade does
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
