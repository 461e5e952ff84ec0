"""The results database: schema, artifacts, idempotent and atomic ingest, concurrency, bad input.

Every test runs against a SQLite file and against a real PostgreSQL server.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, inspect, select

from kernelwatch.cli import main
from kernelwatch.store.artifact import SCHEMA, ArtifactError, content_hash, dumps, parse_artifact, to_data
from kernelwatch.store.engine import DatabaseError, current_revision, head_revision, open_database
from kernelwatch.store.export import export_run
from kernelwatch.store.ingest import IngestError, ingest_documents
from kernelwatch.store.models import AccuracyResult, Base, Case, Hardware, PerfResult, ProfilerMetric, Run
from kernelwatch.store.queries import case_history, latest_complete_runs, list_runs, run_results

ROOT = Path(__file__).resolve().parents[1]
TABLES = (Hardware, Run, Case, AccuracyResult, PerfResult, ProfilerMetric)


def snapshot(engine) -> dict:
    with engine.connect() as conn:
        counts = {m.__tablename__: conn.execute(select(func.count()).select_from(m)).scalar_one() for m in TABLES}
        runs = sorted(conn.execute(select(Run.id, Run.content_hash)).all())
    return {"counts": counts, "runs": runs}


def test_migrations_produce_the_models_schema(db_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    engine = open_database(db_url)
    assert current_revision(engine) == head_revision()
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    names = set(inspect(engine).get_table_names())
    assert {m.__tablename__ for m in TABLES} <= names
    indexes = {ix["name"] for ix in inspect(engine).get_indexes("perf_result")}
    assert "ix_perf_case_hw" in indexes
    assert "ix_run_hw_status_started" in {ix["name"] for ix in inspect(engine).get_indexes("run")}


def test_sqlite_is_opened_with_wal_busy_timeout_and_foreign_keys(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'a.db'}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 10_000


def test_default_url_is_kernelwatch_db_in_the_working_folder(tmp_path: Path, monkeypatch, cli) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KERNELWATCH_DB", raising=False)
    result = cli.invoke(main, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "kernelwatch.db").exists()
    other = tmp_path / "other.db"
    monkeypatch.setenv("KERNELWATCH_DB", f"sqlite:///{other}")
    assert cli.invoke(main, ["db", "upgrade"]).exit_code == 0
    assert other.exists()


def test_artifact_round_trip_gives_equal_content(db_url: str, tmp_path: Path, make_doc, cli) -> None:
    doc = make_doc(cases=8)
    doc["profiler"] = [
        {
            "case": doc["cases"][0]["key"],
            "source": "ncu",
            "name": "dram__bytes_read.sum",
            "value": 1.5e9,
            "unit": "byte",
            "ideal": None,
            "meets_ideal": None,
            "error": None,
        },
        {
            "case": doc["cases"][1]["key"],
            "source": "ncu",
            "name": "dram__bytes_read.sum",
            "value": 2.5e9,
            "unit": "byte",
            "ideal": None,
            "meets_ideal": None,
            "error": None,
            "launch": "_mse_persistent_kernel",
        },
    ]
    src = tmp_path / "run.json"
    src.write_text(dumps(doc))
    assert cli.invoke(main, ["ingest", str(src), "--db", db_url]).exit_code == 0
    out = tmp_path / "export.json"
    result = cli.invoke(main, ["export", doc["run"]["id"][:8], "-o", str(out), "--db", db_url])
    assert result.exit_code == 0, result.output
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    assert cli.invoke(main, ["ingest", str(out), "--db", fresh]).exit_code == 0
    again = export_run(open_database(fresh), doc["run"]["id"])
    original = parse_artifact(src.read_text())
    assert to_data(again) == to_data(original) == json.loads(out.read_text())
    assert content_hash(again) == content_hash(original)
    assert [r.launch for r in again.profiler] == [None, "_mse_persistent_kernel"]


def test_the_sm_clock_is_stored_exported_and_queried(db_url: str, make_doc) -> None:
    """A field added to the schema reaches its column, the export and the run queries with no list spelled again;
    a run from before it (no such key) keeps its hash."""
    from kernelwatch.store.queries import run_info
    from kernelwatch.store.schema import validate

    doc = make_doc()
    before = content_hash(validate(doc))
    doc["hardware"]["sm_clock_mhz"] = 1980
    engine = open_database(db_url)
    ingest_documents(engine, [("clock", validate(doc))])
    with engine.connect() as conn:
        assert conn.execute(select(Run.sm_clock_mhz)).scalar_one() == 1980
    assert run_info(engine, doc["run"]["id"])["sm_clock_mhz"] == 1980
    exported = export_run(engine, doc["run"]["id"])
    assert exported.hardware.sm_clock_mhz == 1980 and content_hash(exported) == content_hash(validate(doc)) != before
    doc["hardware"]["sm_clock_mhz"] = None
    assert content_hash(validate(doc)) == before


def test_a_profiler_row_s_launch_is_content_and_its_absence_is_not(make_doc) -> None:
    """Runs from before the launch was recorded keep their hash (and so re-ingest as unchanged)."""
    doc = make_doc(cases=2)
    row = {
        "case": doc["cases"][0]["key"],
        "source": "ncu",
        "name": "sm_throughput_pct",
        "value": 87.0,
        "unit": "%",
        "ideal": ">80",
        "meets_ideal": True,
        "error": None,
    }
    doc["profiler"] = [row]
    older = content_hash(parse_artifact(dumps(doc)))
    doc["profiler"] = [{**row, "launch": None}]
    assert content_hash(parse_artifact(dumps(doc))) == older
    doc["profiler"] = [{**row, "launch": "_ln_gemm_tma_kernel"}]
    assert content_hash(parse_artifact(dumps(doc))) != older
    doc["profiler"] = [{**row, "launch": "x" * 129}]
    with pytest.raises(ArtifactError, match="profiler"):
        parse_artifact(dumps(doc))


def test_reingest_changes_nothing(db_url: str, make_doc) -> None:
    engine = open_database(db_url)
    doc = parse_artifact(dumps(make_doc(cases=5)))
    (first,) = ingest_documents(engine, [("a", doc)])
    before = snapshot(engine)
    (second,) = ingest_documents(engine, [("a", doc)])
    assert (first.status, second.status) == ("ingested", "unchanged")
    assert snapshot(engine) == before


def _ingest_many(url: str, docs: list[str], error_file: str) -> None:
    try:
        engine = open_database(url)
        ingest_documents(engine, [(f"doc{i}", parse_artifact(d)) for i, d in enumerate(docs)])
    except Exception as exc:
        Path(error_file).write_text(repr(exc))
        raise


def test_four_processes_ingesting_fifty_runs_each_lose_nothing(db_url: str, tmp_path: Path) -> None:
    from kernelwatch.store.synthetic import SyntheticHistory

    docs = [dumps(d) for d in SyntheticHistory(runs=200, cases=6, samples=5).documents()]
    ctx = mp.get_context("spawn")
    files = [tmp_path / f"error-{i}.txt" for i in range(4)]
    procs = [ctx.Process(target=_ingest_many, args=(db_url, docs[i::4], str(files[i]))) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [f.read_text() for f in files if f.exists()] == []
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    snap = snapshot(open_database(db_url))
    assert snap["counts"]["run"] == 200
    assert snap["counts"]["perf_result"] == 200 * 6 * 3
    assert snap["counts"]["kernel_case"] == 6


def _writer_is_inside_its_transaction(db_url: str, engine) -> bool:
    """True while another process holds the ingest's write transaction open."""
    if db_url.startswith("sqlite"):
        import sqlite3

        probe = sqlite3.connect(db_url.split("///", 1)[1], timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            probe.close()
    with engine.connect() as conn:
        return bool(
            conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                "AND datname = current_database() AND (state = 'idle in transaction' OR query ILIKE 'INSERT%%')"
            ).scalar()
        )


def test_sigkill_during_ingest_leaves_no_partial_run(db_url: str, tmp_path: Path) -> None:
    from kernelwatch.store.synthetic import SyntheticHistory

    doc = to_data(next(SyntheticHistory(runs=1, cases=6000, samples=40).documents()))
    path = tmp_path / "big.json"
    path.write_text(dumps(doc))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    engine = open_database(db_url)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelwatch", "ingest", str(path), "--db", db_url],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not _writer_is_inside_its_transaction(db_url, engine):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    engine.dispose()
    snap = snapshot(engine)
    assert snap["counts"]["run"] == 0
    assert snap["counts"]["perf_result"] == 0 and snap["counts"]["accuracy_result"] == 0
    (outcome,) = ingest_documents(engine, [("again", parse_artifact(dumps(doc)))])
    assert outcome.status == "ingested"
    assert snapshot(engine)["counts"]["perf_result"] == len(doc["perf"])


BAD_INPUTS = {
    "truncated": (lambda text: text[: len(text) // 2], "not valid JSON"),
    "unknown schema": (lambda text: text.replace(SCHEMA, "kernelwatch.run/9"), "schema: unknown schema version"),
    "missing field": (lambda text: _edit(text, lambda d: d["run"].pop("status")), "run.status: missing field"),
    "mistyped field": (
        lambda text: _edit(text, lambda d: d["perf"][2].update(median_ms="fast")),
        "perf[2].median_ms: expected a number",
    ),
    "NaN": (
        lambda text: text.replace(
            '"median_ms": ' + str(json.loads(text)["perf"][0]["median_ms"]), '"median_ms": NaN', 1
        ),
        "NaN is not valid JSON",
    ),
    "unknown case": (
        lambda text: _edit(text, lambda d: d["accuracy"][0].update(case="nope")),
        "accuracy[0].case: 'nope' is not listed in cases",
    ),
}


def _edit(text: str, change) -> str:
    doc = json.loads(text)
    change(doc)
    return json.dumps(doc)


@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
def test_bad_input_is_named_and_changes_nothing(kind: str, db_url: str, tmp_path: Path, make_doc, cli) -> None:
    engine = open_database(db_url)
    good = tmp_path / "good.json"
    good.write_text(dumps(make_doc(0, cases=4)))
    ingest_documents(engine, [("good", parse_artifact(good.read_text()))])
    before = snapshot(engine)
    mutate, expected = BAD_INPUTS[kind]
    bad = tmp_path / "bad.json"
    bad.write_text(mutate(dumps(make_doc(1, cases=4))))
    other = tmp_path / "other.json"  # a valid file beside it must not be written either
    other.write_text(dumps(make_doc(2, cases=4)))
    result = cli.invoke(main, ["ingest", str(other), str(bad), "--db", db_url])
    assert result.exit_code != 0
    assert str(bad) in result.output and expected in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert snapshot(engine) == before


def test_same_run_id_with_different_content_is_refused(db_url: str, tmp_path: Path, make_doc, cli) -> None:
    engine = open_database(db_url)
    doc = make_doc(cases=4)
    first = tmp_path / "a.json"
    first.write_text(dumps(doc))
    assert cli.invoke(main, ["ingest", str(first), "--db", db_url]).exit_code == 0
    before = snapshot(engine)
    doc["perf"][0]["error"] = "a different outcome"
    second = tmp_path / "b.json"
    second.write_text(dumps(doc))
    result = cli.invoke(main, ["ingest", str(second), "--db", db_url])
    assert result.exit_code == 2
    assert "already exists with different content" in result.output and str(second) in result.output
    assert snapshot(engine) == before
    with pytest.raises(IngestError):
        ingest_documents(engine, [("b", parse_artifact(second.read_text()))])


def test_a_case_key_stored_with_other_params_is_refused(db_url: str, tmp_path: Path, make_doc, cli) -> None:
    """Every run of a key must describe the same point: a run that reuses a stored key with other params
    (a spec edited without renaming its cases) is refused whole, naming the key and the field."""
    engine = open_database(db_url)
    first = tmp_path / "a.json"
    first.write_text(dumps(make_doc(0, cases=4)))
    assert cli.invoke(main, ["ingest", str(first), "--db", db_url]).exit_code == 0
    before = snapshot(engine)
    doc = make_doc(1, cases=4)
    case = doc["cases"][1]
    case["params"] = {**case["params"], "n": 12345}
    second = tmp_path / "b.json"
    second.write_text(dumps(doc))
    result = cli.invoke(main, ["ingest", str(second), "--db", db_url])
    assert result.exit_code == 2, result.output
    assert f"case {case['key']!r} is stored with params" in result.output and "12345" in result.output
    assert str(second) in result.output and len(result.output.strip().splitlines()) == 1
    assert snapshot(engine) == before
    doc["cases"][1]["params"] = make_doc(1, cases=4)["cases"][1]["params"]
    second.write_text(dumps(doc))
    assert cli.invoke(main, ["ingest", str(second), "--db", db_url]).exit_code == 0


def test_an_artifact_never_replaces_a_device_fifo_or_folder(db_url: str, tmp_path: Path, make_doc, cli) -> None:
    """export -o (and collect --out) write atomically by renaming over the path: as root, -o /dev/null
    would replace the device. Anything but a regular file or a symlink is refused; a symlink is replaced,
    never written through (a run.json link committed in a PR had its target overwritten)."""
    doc = make_doc(cases=2)
    src = tmp_path / "a.json"
    src.write_text(dumps(doc))
    assert cli.invoke(main, ["ingest", str(src), "--db", db_url]).exit_code == 0
    run = doc["run"]["id"]
    fifo, folder, to_null = tmp_path / "fifo", tmp_path / "folder", tmp_path / "to-null"
    os.mkfifo(fifo)
    folder.mkdir()
    to_null.symlink_to("/dev/null")
    for target in (fifo, folder, tmp_path / ""):
        result = cli.invoke(main, ["export", run, "-o", str(target), "--db", db_url])
        assert result.exit_code in (1, 2) and isinstance(result.exception, (SystemExit, type(None))), result.output
    assert fifo.is_fifo() and folder.is_dir() and Path("/dev/null").is_char_device()
    assert cli.invoke(main, ["export", run, "-o", str(to_null), "--db", db_url]).exit_code == 0
    assert not to_null.is_symlink() and Path("/dev/null").is_char_device()
    real = tmp_path / "real.json"
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert cli.invoke(main, ["export", run, "-o", str(link), "--db", db_url]).exit_code == 0
    assert not link.is_symlink() and not real.exists() and json.loads(link.read_text())["run"]["id"] == run


def test_unreachable_database_is_one_clear_message(tmp_path: Path, make_doc, cli) -> None:
    path = tmp_path / "a.json"
    path.write_text(dumps(make_doc()))
    url = "postgresql+psycopg://nobody:secret@127.0.0.1:9/none"
    result = cli.invoke(main, ["ingest", str(path), "--db", url])
    assert result.exit_code == 2
    assert "cannot open database" in result.output and "127.0.0.1:9" in result.output
    assert "secret" not in result.output
    with pytest.raises(DatabaseError):
        open_database("mysql://x@localhost/y")


def test_artifact_errors_name_nested_fields() -> None:
    with pytest.raises(ArtifactError, match=r"run\.commit\.dirty: expected true or false"):
        from kernelwatch.store.synthetic import SyntheticHistory

        doc = to_data(next(SyntheticHistory(runs=1, cases=1).documents()))
        doc["run"]["commit"]["dirty"] = "yes"
        parse_artifact(json.dumps(doc), "x.json")


def test_runs_and_show_print_the_documented_records(db_url: str, make_doc, cli) -> None:
    from kernelwatch.store.synthetic import SyntheticHistory

    engine = open_database(db_url)
    docs = [to_data(d) for d in SyntheticHistory(runs=3, cases=4, hardware=2).documents()]
    ingest_documents(engine, [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(docs)])
    result = cli.invoke(main, ["runs", "--db", db_url, "--format", "json"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.output)
    assert len(runs) == 6
    assert set(runs[0]) == {
        "id",
        "commit",
        "branch",
        "hardware",
        "trigger",
        "status",
        "started",
        "device_count",
        "kernels",
        "perf",
        "accuracy",
        "profiler",
    }
    assert runs[0]["perf"] == 4 and runs[0]["accuracy"] == 4 and len(runs[0]["kernels"]) == 3  # what it holds
    listed = cli.invoke(main, ["runs", "--wide", "--db", db_url]).output  # the default table counts, in 100 columns
    assert "perf 4 + accuracy 4 · fused_rmsnorm_matmul, mse_loss, scaled_masked_softmax · 1 GPU" in listed
    assert runs[0]["started"] >= runs[-1]["started"]
    only = json.loads(cli.invoke(main, ["runs", "--db", db_url, "--format", "json", "--hardware", "Ascend"]).output)
    assert len(only) == 3 and all("Ascend" in r["hardware"] for r in only)
    run_id = docs[0]["run"]["id"]
    shown = json.loads(cli.invoke(main, ["show", run_id, "--db", db_url, "--format", "json"]).output)
    assert len(shown) == 4 * 3
    required = {
        "kernel",
        "variant",
        "case",
        "dtype",
        "params",
        "implementation",
        "median_ms",
        "p20_ms",
        "p80_ms",
        "gbps",
        "tflops",
        "pct_peak",
        "speedup_vs_eager",
        "target",
        "target_met",
        "error_budget",
        "passed",
        "error",
    }
    assert required <= set(shown[0])
    kernel_rows = [r for r in shown if r["implementation"] == "triton"]
    assert all(r["passed"] is True and r["error_budget"] is not None for r in kernel_rows)
    assert all(r["error_budget"] is None for r in shown if r["implementation"] != "triton")
    csv_out = cli.invoke(main, ["show", run_id[:6], "--db", db_url, "--format", "csv"]).output.splitlines()
    assert csv_out[0].split(",")[:3] == ["kernel", "variant", "case"] and len(csv_out) == 13
    table = cli.invoke(main, ["show", run_id, "--db", db_url]).output
    lines = table.splitlines()
    assert lines[0].startswith(f"run {run_id} · commit ") and "perf 4 + accuracy 4" in lines[1]  # a header
    assert "times in µs" in table and "x eager" in table and "budget" in table
    assert max(map(len, lines)) <= 120  # lines were 228 characters
    kernel_row = next(x for x in lines if x.startswith("    kernel "))
    doc_perf = next(
        p
        for p in docs[0]["perf"]
        if p["implementation"] == "triton" and p["case"] == min(p["case"] for p in docs[0]["perf"])
    )
    assert f"{doc_perf['median_ms'] * 1e3:.4g}" in kernel_row  # µs, as the dashboard shows them
    missing = cli.invoke(main, ["show", "ffffffff", "--db", db_url])
    assert missing.exit_code == 2 and "no run with id 'ffffffff'" in missing.output


def test_history_and_latest_queries(db_url: str) -> None:
    from kernelwatch.store.synthetic import SyntheticHistory

    engine = open_database(db_url)
    history = SyntheticHistory(runs=6, cases=3, hardware=2)
    docs = [to_data(d) for d in history.documents()]
    ingest_documents(engine, [(str(i), parse_artifact(dumps(d))) for i, d in reversed(list(enumerate(docs)))])
    latest = latest_complete_runs(engine)
    assert len(latest) == 2
    assert {r["commit"] for r in latest} == {history.commit(5)["sha"]}
    fp = latest[0]["fingerprint"]
    key = history.case_list()[0]["key"]
    rows = case_history(engine, key, fp)
    assert [r["commit_sha"] for r in rows] == [history.commit(i)["sha"] for i in range(6)]
    assert all(len(r["samples_ms"]) == history.samples for r in rows)
    assert len(list_runs(engine, limit=4)) == 4
    assert {r["implementation"] for r in run_results(engine, docs[0]["run"]["id"])} == {
        "triton",
        "torch_eager",
        "torch_compile",
    }


def test_concurrent_first_open_does_not_race(db_url: str) -> None:
    url = db_url
    code = f"from kernelwatch.store.engine import open_database; open_database({url!r})"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE) for _ in range(4)]
    errs = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errs
    assert current_revision(open_database(url)) == head_revision()
