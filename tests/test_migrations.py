"""Upgrading a database built by the previous release keeps every run (tests/fixtures/release-0.1.0/)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from sqlalchemy import MetaData, Table, create_engine, func, select, text

from kernelwatch.store.engine import current_revision, head_revision, open_database
from kernelwatch.store.export import export_run
from kernelwatch.store.ingest import ingest_files
from kernelwatch.store.models import AccuracyResult, Hardware, PerfResult, ProfilerMetric, Run
from kernelwatch.store.schema import content_hash

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "release-0.1.0.db.gz"
ARTIFACTS = sorted((ROOT / "ci" / "history").glob("2026-11-30T0*.json.gz")) + sorted(
    (ROOT / "tests" / "fixtures" / "release-0.1.0").glob("synth*.json")
)


TABLES = ("hardware", "kernel_case", "run", "accuracy_result", "perf_result", "profiler_metric")


def _fixture_file(tmp_path: Path) -> Path:
    path = tmp_path / "old.db"
    with gzip.open(FIXTURE) as src, path.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def _old_database(tmp_path: Path, url: str | None = None) -> str:
    """The release's database: the fixture file itself, or its rows copied into PostgreSQL at 0001."""
    path = _fixture_file(tmp_path)
    if url is None or url.startswith("sqlite"):
        return f"sqlite:///{path}"
    from kernelwatch.store.engine import create_db_engine, upgrade

    target = create_db_engine(url)
    upgrade(target, "0001")
    source = create_engine(f"sqlite:///{path}")
    meta = MetaData()
    meta.reflect(source)
    with source.connect() as src, target.begin() as dst:
        for name in TABLES:
            table = meta.tables[name]
            rows = [dict(r) for r in src.execute(table.select()).mappings()]
            if rows:
                dst.execute(Table(name, MetaData(), autoload_with=dst).insert(), rows)
            if "id" in table.c and name not in ("run",):
                dst.execute(
                    text(
                        f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                        f"(SELECT coalesce(max(id), 1) FROM {name}))"
                    )
                )
    source.dispose()
    target.dispose()
    return url


def _counts(url: str) -> dict[str, int]:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        out = {
            t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one()
            for t in ("run", "accuracy_result", "perf_result", "profiler_metric", "kernel_case")
        }
    engine.dispose()
    return out


def test_the_fixture_is_a_release_0_1_0_database(tmp_path: Path) -> None:
    url = _old_database(tmp_path)
    engine = create_engine(url)
    assert current_revision(engine) == "0001"
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT device_name, driver, device_count FROM hardware ORDER BY id")).all()
    assert len(rows) == 4, "the H200 and three synthetic rows that differ only in driver / device count"
    assert len({(r[1], r[2]) for r in rows if "synthetic" in r[0]}) == 3


def test_upgrade_keeps_every_run_and_merges_hardware_that_differed_only_in_context(tmp_path: Path, db_url: str) -> None:
    url = _old_database(tmp_path, db_url)
    before = _counts(url)
    engine = open_database(url)  # a writer's open migrates
    assert current_revision(engine) == head_revision() != "0001"
    assert _counts(url) == before
    with engine.connect() as conn:
        hardware = conn.execute(select(Hardware.device_name, Hardware.fingerprint)).all()
        assert sorted(name for name, _ in hardware) == ["NVIDIA H200", "NVIDIA H200 (synthetic)"]
        runs = conn.execute(select(Run.id, Run.driver, Run.device_count, Run.hardware_id)).all()
        synthetic_hw = {r.hardware_id for r in runs if r.driver and r.driver.startswith("synthetic")}
        assert len(synthetic_hw) == 1, "a driver update or another device count is not new hardware"
        assert {(r.driver, r.device_count) for r in runs if r.driver and r.driver.startswith("synthetic")} == {
            ("synthetic", 1),
            ("synthetic-2", 1),
            ("synthetic-3", 2),
        }
        for model in (AccuracyResult, PerfResult, ProfilerMetric):
            stray = conn.execute(
                select(func.count())
                .select_from(model)
                .join(Run, Run.id == model.run_id)
                .where(model.hardware_id != Run.hardware_id)
            ).scalar_one()
            assert stray == 0, f"{model.__tablename__} rows must follow their run's hardware"
        if conn.dialect.name == "sqlite":
            assert conn.execute(text("PRAGMA foreign_key_check")).all() == []
            assert conn.execute(text("PRAGMA foreign_keys")).scalar_one() == 1


def test_reingesting_the_release_artifacts_after_the_upgrade_changes_nothing(tmp_path: Path, db_url: str) -> None:
    url = _old_database(tmp_path, db_url)
    engine = open_database(url)
    before = _counts(url)
    outcomes = ingest_files(engine, ARTIFACTS)
    assert {o.status for o in outcomes} == {"unchanged"}, "content hashes of old artifacts must not change"
    assert _counts(url) == before
    run_id = outcomes[0].run_id
    exported = export_run(engine, run_id)
    stored = engine.connect().execute(select(Run.content_hash).where(Run.id == run_id)).scalar_one()
    assert content_hash(exported) == stored
