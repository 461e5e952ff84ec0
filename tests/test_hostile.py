"""Hostile input: what a stored value, a planted file or a strange terminal can do.

Each family was found by a probe of the code before these fixes; each test names the defect it catches:
git option injection through stored shas, concurrent PostgreSQL ingests, report writers following planted
symlinks, damaged databases, hardware and params conflicts at ingest, malformed and oversized journals,
exit codes that depended on the terminal, and the smaller ones (stdin, FIFOs, sidecar files, run-id case,
devices, read-only folders, usage errors, a busy port). Where a database is involved, SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shlex
import signal
import socket
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool

from kernelwatch.cli import main
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.schema import dumps, parse_artifact, to_data
from kernelwatch.store.synthetic import Step, SyntheticHistory
from tests.pgserver import create_database, drop_database

ROOT = Path(__file__).resolve().parents[1]
PLANTED_SHAS = ["--output=../sub/", "/victim.txt", ".", "HEAD~1", "a..b", "-p", "abc", "abcdefg", "0123456789abcdef "]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _kw(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300, **kwargs
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernelwatch", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env or _env(),
        timeout=timeout,
        **kwargs,
    )


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def _write_history(folder: Path, history: SyntheticHistory) -> list[Path]:
    files = []
    for i, doc in enumerate(history.documents()):
        path = folder / f"run{i:02d}.json"
        path.write_text(dumps(doc))
        files.append(path)
    return files


def _store(db_url: str, history: SyntheticHistory) -> list[dict]:
    docs = [to_data(d) for d in history.documents()]
    engine = open_database(db_url)
    ingest_documents(engine, [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(docs)])
    engine.dispose()  # the last connection closes: SQLite checkpoints and removes -wal and -shm
    return docs


def _git_repo(path: Path) -> Path:
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.email=kw@example.invalid", "-c", "user.name=kw"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "tracked.txt").write_text("committed\n")
    subprocess.run([*git, "add", "tracked.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    return path


# ---------------------------------------------------------------------------------------------------------
# 1. Stored commit shas never reach git as options or paths
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sha", PLANTED_SHAS)
def test_a_commit_sha_that_is_not_hex_is_refused_at_ingest(sha: str, tmp_path: Path, make_doc) -> None:
    doc = make_doc()
    doc["run"]["commit"]["sha"] = sha
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    proc = _kw("ingest", "--db", str(tmp_path / "kw.db"), str(path))
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and f"{path}: run.commit.sha: expected a commit sha" in line, line
    assert not (tmp_path / "kw.db").exists(), "refused before the database is even opened"


def test_a_run_outside_a_checkout_is_ingested_but_never_offered_to_git(tmp_path: Path, make_doc, cli) -> None:
    doc = make_doc()
    doc["run"]["commit"]["sha"] = "unknown"
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    assert cli.invoke(main, ["ingest", "--db", str(tmp_path / "kw.db"), str(path)]).exit_code == 0
    from kernelwatch.gate.bisect import commits_between, rerun_command

    assert rerun_command("unknown", "mse_loss/x") is None
    assert commits_between("unknown", "abc1234") == [] and commits_between("--output=/x/", "abc1234") == []
    for planted in PLANTED_SHAS:
        assert rerun_command(planted, "mse_loss/x") is None, planted


def test_a_reproduce_command_can_never_discard_an_edit(tmp_path: Path) -> None:
    """`git checkout .` (a stored sha of '.') discarded uncommitted edits; `git checkout X` takes a path X too."""
    from kernelwatch.gate.bisect import rerun_command

    repo = _git_repo(tmp_path / "repo")
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    (repo / "tracked.txt").write_text("an uncommitted edit\n")
    (repo / head[:12]).write_text("a file named like the sha\n")
    command = rerun_command(head, "mse_loss/persistent/fp16/n=4096")
    assert command is not None and command.startswith(f"git switch --detach --end-of-options {head[:12]} && ")
    git_part = shlex.split(command.split(" && ")[0])
    proc = subprocess.run(git_part, cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (repo / "tracked.txt").read_text() == "an uncommitted edit\n"
    assert rerun_command(".", "mse_loss/x") is None


def test_bisect_never_hands_a_stored_value_to_git(db_url: str, tmp_path: Path) -> None:
    """An older database may hold shas stored before ingest checked them: `--output=DIR/` and `/victim.txt`
    around a step made `git rev-list --output=DIR/../victim.txt` truncate victim.txt."""
    history = SyntheticHistory(runs=16, cases=2, samples=10, steps=[Step(8, 2.0)])
    docs = _store(db_url, history)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "sub").mkdir()
    planted = {7: "--output=../sub/", 8: "/victim.txt", 9: "."}  # run in tmp_path/repo: ../sub/../victim.txt
    engine = create_engine(db_url)
    with engine.begin() as conn:
        for index, sha in planted.items():
            conn.execute(
                text("UPDATE run SET commit_sha = :sha WHERE id = :id"), {"sha": sha, "id": docs[index]["run"]["id"]}
            )
    engine.dispose()
    repo = _git_repo(tmp_path / "repo")
    case = history.case_list()[0]["key"]
    proc = _kw("bisect", case, "--hardware", "H200", "--db", db_url, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == "precious\n"
    assert "between --output" in proc.stdout, proc.stdout  # the step was found around the planted values
    assert "git switch" not in proc.stdout and "not a git sha" in proc.stdout, proc.stdout


# ---------------------------------------------------------------------------------------------------------
# 2. Concurrent ingests
# ---------------------------------------------------------------------------------------------------------
def _ingest_worker(barrier, jobs: list[tuple[int, str, list[str]]], results) -> None:
    """One writer process: per round, wait for the other seven, then `kernelwatch ingest` its files (the
    command itself, in this forked process: its own connections, no interpreter start-up to pay)."""
    import gc

    from click.testing import CliRunner

    for r, url, files in jobs:
        barrier.wait(timeout=300)
        result = CliRunner().invoke(main, ["ingest", "--db", url, *files])
        error = None if result.exception is None or isinstance(result.exception, SystemExit) else repr(result.exception)
        results.put((r, result.exit_code, result.stdout, result.stderr, error))
        gc.collect()  # the round's engine and its connections go


def _parallel_rounds(tmp_path: Path, rounds: int, urls: list[str]) -> None:
    """8 parallel ingests of 6 random files of 12 (two hardware, shared cases) per round, a fresh database each."""
    import multiprocessing

    files = _write_history(tmp_path, SyntheticHistory(runs=6, cases=2, samples=5, hardware=2))
    single = open_database(f"sqlite:///{tmp_path / 'single.db'}")
    ingest_documents(single, [(str(f), parse_artifact(f.read_text())) for f in files])
    tables = ("run", "hardware", "kernel_case", "perf_result", "accuracy_result")
    with single.connect() as conn:
        expected_rows = {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar() for t in tables}
    single.dispose()
    subsets = {
        r: [[str(f) for f in random.Random(f"{r}-{w}").sample(files, 6)] for w in range(8)] for r in range(rounds)
    }
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(8), ctx.Queue()
    workers = [
        ctx.Process(
            target=_ingest_worker, args=(barrier, [(r, urls[r], subsets[r][w]) for r in range(rounds)], results)
        )
        for w in range(8)
    ]
    for w in workers:
        w.start()
    outcomes = [results.get(timeout=600) for _ in range(8 * rounds)]
    for w in workers:
        w.join(timeout=60)
    for r, code, out, err, error in outcomes:
        assert code == 0 and not err.strip() and error is None, f"round {r}: {err or error}"
        assert all(line.split()[0] in ("ingested", "unchanged") for line in out.splitlines()), out
    for r in range(rounds):
        wanted = {f for s in subsets[r] for f in s}
        engine = create_engine(urls[r])
        with engine.connect() as conn:
            stored = {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar() for t in tables}
        engine.dispose()
        assert stored["run"] == len(wanted), f"round {r}: {stored}"
        if len(wanted) == len(files):
            assert stored == expected_rows, f"round {r}: every run lands exactly once: {stored} vs {expected_rows}"
        landed = sum(
            1 for rr, _, out, _, _ in outcomes if rr == r for line in out.splitlines() if line.startswith("ingested")
        )
        assert landed == len(wanted), f"round {r}: each run is 'ingested' by exactly one writer"


@pytest.mark.postgres
def test_eight_parallel_ingests_into_one_postgresql_all_land(pg_admin: str, tmp_path: Path) -> None:
    """27 of 48 processes failed (`deadlock detected`, `duplicate key ... "run_pkey"`) and stored nothing."""
    made = [create_database(pg_admin, "kw_hostile") for _ in range(6)]  # the 48 ingests that found the races
    try:
        _parallel_rounds(tmp_path, len(made), [url for url, _ in made])
    finally:
        for _, name in made:
            drop_database(pg_admin, name)


def test_eight_parallel_ingests_into_one_sqlite_all_land(tmp_path: Path) -> None:
    _parallel_rounds(tmp_path, 3, [f"sqlite:///{tmp_path / f'r{r}.db'}" for r in range(3)])


@pytest.mark.postgres
def test_parallel_ingest_processes_from_the_command_line(pg_admin: str, tmp_path: Path) -> None:
    """One round of eight real `kernelwatch ingest` processes (the console entry, interpreter start-up and all)."""
    files = _write_history(tmp_path, SyntheticHistory(runs=6, cases=2, samples=5, hardware=2))
    url, name = create_database(pg_admin, "kw_hostile")
    try:
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kernelwatch",
                    "ingest",
                    "--db",
                    url,
                    *map(str, random.Random(w).sample(files, 6)),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_env(),
            )
            for w in range(8)
        ]
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0 and not err.strip(), err
        engine = create_engine(url)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM run")).scalar() == len(
                {f for w in range(8) for f in random.Random(w).sample(files, 6)}
            )
        engine.dispose()
    finally:
        drop_database(pg_admin, name)


@pytest.mark.postgres
def test_a_database_in_use_by_a_session_we_may_not_end_is_dropped_once_it_ends(pg_admin: str) -> None:
    """CI failed on `DROP DATABASE ... WITH (FORCE)`: an autovacuum worker was in the database, and PostgreSQL
    15 lets no ordinary role terminate one. A session of another role stands in for it here: FORCE is refused
    (unless we are a superuser), the drop waits for the session to end, and the database goes."""
    import threading

    url, name = create_database(pg_admin, "kw_hostile")
    role = f"kw_other_{uuid.uuid4().hex[:8]}"
    admin = create_engine(pg_admin, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE {role} LOGIN PASSWORD 'other'"))
    other = create_engine(make_url(url).set(username=role, password="other"), poolclass=NullPool)
    try:
        held = other.connect()
        held.execute(text("SELECT 1"))
        threading.Timer(2.0, held.close).start()
        drop_database(pg_admin, name, within_s=20)
        with admin.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM pg_database WHERE datname = :n"), {"n": name}).scalar() == 0
    finally:
        other.dispose()
        drop_database(pg_admin, name)
        with admin.connect() as conn:
            conn.execute(text(f"DROP ROLE IF EXISTS {role}"))
        admin.dispose()


# ---------------------------------------------------------------------------------------------------------
# 3. Report writers
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture
def gate_db(tmp_path: Path) -> dict:
    (tmp_path / "db").mkdir()
    url = f"sqlite:///{tmp_path / 'db' / 'gate.db'}"
    docs = _store(url, SyntheticHistory(runs=8, cases=3, samples=10))
    return {"url": url, "candidate": docs[-1]["run"]["id"], "baseline": docs[-2]["run"]["id"]}


def _gate_args(gate_db: dict, *extra: str) -> list[str]:
    return [
        "gate",
        "--db",
        gate_db["url"],
        "--candidate",
        gate_db["candidate"],
        "--baseline",
        gate_db["baseline"],
        *extra,
    ]


@pytest.mark.parametrize("where", ["report-dir", "default"])
def test_a_planted_report_symlink_is_replaced_and_its_target_untouched(
    where: str, gate_db: dict, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    folder = work / ("reports" if where == "report-dir" else "gate-report")
    folder.mkdir(parents=True)
    targets = {}
    for name in ("gate.md", "gate-junit.xml", "gate.html"):
        targets[name] = tmp_path / f"someone-else-{name}"
        targets[name].write_text("precious\n")
        (folder / name).symlink_to(targets[name])
    extra = ["--report-dir", str(folder)] if where == "report-dir" else []
    proc = _kw(*_gate_args(gate_db, *extra), cwd=work)
    assert proc.returncode == 0, proc.stderr
    for name, target in targets.items():
        assert target.read_text() == "precious\n", name
        assert not (folder / name).is_symlink() and (folder / name).stat().st_size > 0
    assert sorted(p.name for p in folder.iterdir()) == sorted(targets), "no temporary file left behind"


def _no_core_and_small_files(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_report_that_does_not_fit_leaves_the_old_one_whole(gate_db: dict, tmp_path: Path) -> None:
    """A full disk (here: a file-size limit below gate.html's size) left a truncated gate.html."""
    import sqlite3

    db = sqlite3.connect(gate_db["url"].removeprefix("sqlite:///"))
    db.execute("PRAGMA journal_mode = DELETE")  # no -shm index for readers to create under the size limit
    db.close()
    folder = tmp_path / "reports"
    assert _kw(*_gate_args(gate_db, "--report-dir", str(folder))).returncode == 0
    old = {p.name: p.read_bytes() for p in folder.iterdir()}
    html_size = len(old["gate.html"])
    limit = max(len(old["gate.md"]), len(old["gate-junit.xml"])) + 1
    assert html_size > limit, "the test needs gate.html larger than the limit"
    proc = _kw(*_gate_args(gate_db, "--report-dir", str(folder)), preexec_fn=_no_core_and_small_files(limit))
    assert proc.returncode == 0, proc.stderr  # a report that cannot be written never changes the verdict
    assert "warning: reports not written" in proc.stderr, proc.stderr
    assert (folder / "gate.html").read_bytes() == old["gate.html"], "the old report stays whole"
    assert sorted(p.name for p in folder.iterdir()) == sorted(old), "no temporary file left behind"


# ---------------------------------------------------------------------------------------------------------
# 4. A damaged database
# ---------------------------------------------------------------------------------------------------------
def test_a_dropped_table_is_one_line_and_exit_2(db_url: str, tmp_path: Path) -> None:
    docs = _store(db_url, SyntheticHistory(runs=8, cases=2, samples=10))
    run_id = docs[-1]["run"]["id"]
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE profiler_metric"))
    engine.dispose()
    for args in (
        ["export", run_id, "-o", str(tmp_path / "x.json")],
        ["gate", "--candidate", run_id, "--baseline", docs[-2]["run"]["id"], "--report-dir", str(tmp_path / "r")],
    ):
        proc = _kw(*args, "--db", db_url)
        line = _one_line(proc.stderr)
        assert proc.returncode == 2 and "profiler_metric" in line and "damaged" in line, (args, line)


def test_corrupted_pages_are_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "kw.db"
    docs = _store(f"sqlite:///{path}", SyntheticHistory(runs=8, cases=3, samples=10))
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        for offset in range(4096 * 2, size, 4096):
            fh.seek(offset + 100)
            fh.write(b"\xde\xad\xbe\xef" * 200)
    run_id = docs[-1]["run"]["id"]
    for args in (
        ["runs"],
        ["show", run_id],
        ["export", run_id, "-o", str(tmp_path / "x.json")],
        ["gate", "--candidate", run_id, "--baseline", docs[-2]["run"]["id"], "--report-dir", str(tmp_path / "r")],
    ):
        proc = _kw(*args, "--db", str(path))
        line = _one_line(proc.stderr)
        assert proc.returncode == 2 and "malformed" in line, (args, line)


# ---------------------------------------------------------------------------------------------------------
# 5. Ingest conflicts with what is stored
# ---------------------------------------------------------------------------------------------------------
def test_datasheet_ceilings_are_the_runs_own(db_url: str, tmp_path: Path, cli) -> None:
    """The first run's hardware row was kept silently: export showed 4800 for a run that said 5000, and
    re-ingesting that export was 'already exists with different content'."""
    docs = [to_data(d) for d in SyntheticHistory(runs=2, cases=2, samples=5).documents()]
    docs[1]["hardware"]["peak_gbps_datasheet"] = 5000.0
    docs[1]["hardware"]["peak_tflops_datasheet"] = None
    paths = []
    for i, doc in enumerate(docs):
        paths.append(tmp_path / f"a{i}.json")
        paths[-1].write_text(dumps(doc))
    assert cli.invoke(main, ["ingest", "--db", db_url, *map(str, paths)]).exit_code == 0
    for doc in docs:
        out = tmp_path / f"export-{doc['run']['id']}.json"
        assert cli.invoke(main, ["export", doc["run"]["id"], "-o", str(out), "--db", db_url]).exit_code == 0
        exported = json.loads(out.read_text())
        assert exported["hardware"] == doc["hardware"]
        again = cli.invoke(main, ["ingest", "--db", db_url, str(out)])
        assert again.exit_code == 0 and again.output.startswith("unchanged"), again.output


def test_params_of_another_json_type_are_refused_explicitly(db_url: str, tmp_path: Path, cli) -> None:
    """[1048576.0] against a stored [1048576] was 'ingested', and its export then differed from it."""
    docs = [to_data(d) for d in SyntheticHistory(runs=2, cases=2, samples=5).documents()]
    docs[1]["cases"][0]["params"]["n"] = [float(docs[1]["cases"][0]["params"]["n"])]
    docs[0]["cases"][0]["params"]["n"] = [docs[0]["cases"][0]["params"]["n"]]
    for i, doc in enumerate(docs):
        (tmp_path / f"a{i}.json").write_text(dumps(doc))
    assert cli.invoke(main, ["ingest", "--db", db_url, str(tmp_path / "a0.json")]).exit_code == 0
    result = cli.invoke(main, ["ingest", "--db", db_url, str(tmp_path / "a1.json")])
    assert result.exit_code == 2 and "is stored with params" in result.output and "4096.0" in result.output


# ---------------------------------------------------------------------------------------------------------
# 6. Journals
# ---------------------------------------------------------------------------------------------------------
def _journal_lines(doc: dict, run_id: str | None = None) -> tuple[dict, dict]:
    run = {**doc["run"], "status": "running", "finished_at": None, "notes": None}
    if run_id:
        run["id"] = run_id
    header = {
        "journal": "kernelwatch.journal/1",
        "kind": "header",
        "artifact_schema": "kernelwatch.run/1",
        "run": run,
        "hardware": doc["hardware"],
        "expected": 2,
    }
    case = doc["cases"][0]
    result = {
        "kind": "result",
        "suite": "perf",
        "key": case["key"],
        "case": case,
        "accuracy": [],
        "perf": [p for p in doc["perf"] if p["case"] == case["key"]],
        "profiler": [],
        "finished_at": doc["run"]["finished_at"],
        "phases": {"run": 0.5},
    }
    return header, result


def _jsonl(*records: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda h, r: (
                h,
                r,
                {"kind": "end", "status": "complete", "finished_at": None, "notes": 5, "phases_s": None},
            ),
            "line 3: notes: expected a string, got 5",
        ),
        (lambda h, r: (h, {**r, "phases": "abc"}), "line 2: phases: expected an object, got 'abc'"),
        (lambda h, r: (h, {**r, "phases": {"run": -1}}), "line 2: phases.run: must be >= 0"),
        (
            lambda h, r: (
                h,
                r,
                {"kind": "end", "status": "done", "finished_at": None, "notes": None, "phases_s": None},
            ),
            "line 3: status:",
        ),
        (
            lambda h, r: (
                h,
                r,
                {"kind": "end", "status": "complete", "finished_at": None, "notes": None, "phases_s": "x"},
            ),
            "line 3: phases_s: expected an object",
        ),
    ],
)
def test_a_malformed_journal_line_is_one_line(edit, message: str, tmp_path: Path, make_doc) -> None:
    header, result = _journal_lines(make_doc())
    path = tmp_path / "j.jsonl"
    path.write_text(_jsonl(*edit(header, result)))
    proc = _kw("ingest", "--db", str(tmp_path / "kw.db"), str(path))
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and f"{path}: {message}" in line, line


def test_a_journal_past_the_size_limit_is_refused_before_it_is_read(tmp_path: Path, make_doc) -> None:
    """A header plus 1 GiB of NUL bytes was a 0-result run after 2.1 GB of memory."""
    header, _ = _journal_lines(make_doc())
    path = tmp_path / "huge.jsonl"
    path.write_text(_jsonl(header))
    with open(path, "r+b") as fh:
        fh.truncate(1 << 30)  # sparse: no disk used
    limit = 256 << 20

    def small_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit * 6, limit * 6))

    proc = _kw("ingest", "--db", str(tmp_path / "kw.db"), str(path), preexec_fn=small_memory)
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and "larger than 512 MiB" in line, line


def test_a_renamed_journal_is_the_same_run(db_url: str, tmp_path: Path, make_doc, cli) -> None:
    header, result = _journal_lines(make_doc())
    first = tmp_path / "first.jsonl"
    first.write_text(_jsonl(header, result))
    renamed = tmp_path / "copy-of-it.jsonl"
    renamed.write_text(first.read_text())
    assert cli.invoke(main, ["ingest", "--db", db_url, str(first)]).output.startswith("ingested")
    again = cli.invoke(main, ["ingest", "--db", db_url, str(renamed)])
    assert again.exit_code == 0 and again.output.startswith("unchanged"), again.output


# ---------------------------------------------------------------------------------------------------------
# 7. Exit codes that do not depend on the terminal
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("verdict", ["pass", "fail"])
def test_the_gate_verdict_survives_a_latin1_terminal(verdict: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'g.db'}"
    steps = [Step(7, 8.0)] if verdict == "fail" else []
    docs = _store(url, SyntheticHistory(runs=8, cases=3, samples=10, steps=steps))
    folder = tmp_path / "r"
    proc = _kw(
        "gate",
        "--db",
        url,
        "--candidate",
        docs[-1]["run"]["id"],
        "--baseline",
        docs[-2]["run"]["id"],
        "--report-dir",
        str(folder),
        env=_env(PYTHONIOENCODING="latin-1"),
        encoding="latin-1",
    )
    assert proc.returncode == (0 if verdict == "pass" else 1), proc.stderr
    assert "Traceback" not in proc.stderr and f"KernelWatch gate: {verdict.upper()}" in proc.stdout
    assert sorted(p.name for p in folder.iterdir()) == ["gate-junit.xml", "gate.html", "gate.md"]


def test_the_gate_verdict_survives_a_reader_that_stops_reading(gate_db: dict, tmp_path: Path) -> None:
    """`gate ... | head -1` on a PASS was exit 1, and no report was written."""
    folder = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelwatch", *_gate_args(gate_db, "--report-dir", str(folder))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert sorted(p.name for p in folder.iterdir()) == ["gate-junit.xml", "gate.html", "gate.md"]


# ---------------------------------------------------------------------------------------------------------
# 8. The smaller ones
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["artifact", "journal"])
def test_ingest_reads_a_pipe_given_as_dev_stdin(kind: str, db_url: str, tmp_path: Path, make_doc) -> None:
    """The journal sniff read the first line of the pipe, and the artifact reader got the rest."""
    doc = make_doc()
    data = dumps(doc) if kind == "artifact" else _jsonl(*_journal_lines(doc))
    proc = _kw("ingest", "--db", db_url, "/dev/stdin", input=data)
    assert proc.returncode == 0 and proc.stdout.startswith("ingested"), proc.stderr


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = _kw("ingest", "--db", str(tmp_path / "kw.db"), str(fifo), timeout=60)  # blocked forever before
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and "not a regular file" in line, line
    assert not (tmp_path / "kw.db").exists()


def test_readers_leave_nothing_beside_the_database(gate_db: dict, tmp_path: Path) -> None:
    """A WAL database read mode=ro got a -wal and a -shm beside it that nobody removed."""
    path = Path(gate_db["url"].removeprefix("sqlite:///"))
    assert sorted(p.name for p in path.parent.iterdir()) == ["gate.db"], "the writer closed cleanly"
    run_id = gate_db["candidate"]
    for args in (
        ["runs", "--db", str(path)],
        ["show", run_id, "--db", str(path)],
        ["export", run_id, "-o", "-", "--db", str(path)],
        ["db", "current", "--db", str(path)],
        _gate_args(gate_db, "--report-dir", str(tmp_path / "r")),
    ):
        proc = _kw(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert sorted(p.name for p in path.parent.iterdir()) == ["gate.db"], args


def test_a_run_id_prefix_in_upper_case_is_the_same_on_both_databases(db_url: str, tmp_path: Path, cli) -> None:
    docs = _store(db_url, SyntheticHistory(runs=8, cases=2, samples=10))
    baseline = docs[-2]["run"]["id"][:8].upper()
    result = cli.invoke(
        main,
        [
            "gate",
            "--db",
            db_url,
            "--candidate",
            docs[-1]["run"]["id"],
            "--baseline",
            baseline,
            "--report-dir",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code == 0, result.output


def test_ingest_into_a_character_device_is_refused_before_anything_is_created(tmp_path: Path, make_doc) -> None:
    folder = tmp_path / "dev"
    folder.mkdir()
    try:
        os.mknod(folder / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs root")
    (tmp_path / "run.json").write_text(dumps(make_doc()))
    proc = _kw("ingest", "--db", str(folder / "null"), str(tmp_path / "run.json"))
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and "not a regular file" in line, line
    assert sorted(p.name for p in folder.iterdir()) == ["null"], "no -journal beside the device"


def test_collect_in_a_read_only_folder_creates_no_database(tmp_path: Path) -> None:
    from tests.test_readonly import _without_permission_bypass

    prefix = _without_permission_bypass()
    work = tmp_path / "readonly"
    work.mkdir(mode=0o555)
    elsewhere = tmp_path / "db" / "kw.db"
    proc = subprocess.run(
        [
            *prefix,
            sys.executable,
            "-m",
            "kernelwatch",
            "collect",
            "--device",
            "cpu",
            "--kernels",
            "mse_loss",
            "--suite",
            "accuracy",
            "--db",
            str(elsewhere),
        ],
        cwd=work,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert not elsewhere.exists() and not elsewhere.parent.exists(), "nothing was created"
    line = _one_line(proc.stderr)
    assert proc.returncode != 0 and "cannot write the run's journal" in line, line


@pytest.mark.parametrize("args", [["gate", "--bogus"], ["runs", "--limit", "x"], ["no-such-command"], ["gate"]])
def test_usage_errors_are_one_line(args: list[str], cli) -> None:
    result = cli.invoke(main, args)
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and ": error: " in result.output, result.output


def test_a_dashboard_on_a_busy_port_fails_before_printing_its_url(gate_db: dict) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _kw("dashboard", "--db", gate_db["url"], "--port", str(port), timeout=60)
    assert proc.returncode == 2 and "http://" not in proc.stdout, proc.stdout
    line = _one_line(proc.stderr)
    assert f"cannot serve on 127.0.0.1:{port}" in line
    assert "pick another --port" in line  # a second `make demo` beside the first says what to do


# ---------------------------------------------------------------------------------------------------------
# 9. bisect at the edge of a history; a CPU case's reproduce command
# ---------------------------------------------------------------------------------------------------------
def test_a_change_with_too_few_runs_on_one_side_says_so(db_url: str, cli) -> None:
    """295.2, 296.8, then 201.6-204.4 us: 'no change of 5% or more in 9 runs' before."""
    history = SyntheticHistory(runs=9, cases=1, samples=10, noise=0.002, steps=[Step(2, 0.69)])
    _store(db_url, history)
    case = history.case_list()[0]["key"]
    result = cli.invoke(main, ["bisect", case, "--hardware", "H200", "--db", db_url])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("a change of -31% after 2 runs") and "too few runs before it" in result.output
    assert "(3 needed)" in result.output and "no change" not in result.output
    from kernelwatch.gate.bisect import edge_change

    assert edge_change([1.0] * 9, 0.05) is None


def test_a_cpu_accuracy_case_is_reproduced_with_the_accuracy_suite(tmp_path: Path) -> None:
    """Triage offered `collect ... --suite perf` for a CPU case, which exits 2 ('the perf suite is skipped on cpu')."""
    from kernelwatch.dashboard.verdicts import triage

    url = f"sqlite:///{tmp_path / 'cpu.db'}"
    docs = []
    for doc in SyntheticHistory(runs=3, cases=2, samples=5).documents():
        data = to_data(doc)
        data["run"]["device"] = "cpu"
        data["hardware"].update(
            vendor="cpu",
            device_name="cpu (interpreter)",
            compute_units=None,
            memory_bytes=None,
            peak_gbps=None,
            peak_gbps_datasheet=None,
            peak_tflops=None,
            peak_tflops_datasheet=None,
        )
        docs.append(data)
    ingest_documents(open_database(url), [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(docs)])
    engine = open_database(url, readonly=True)
    rows = triage(engine, docs[-1]["run"]["id"], docs[-2]["run"]["id"]).rows
    assert rows and all("--suite accuracy" in r["reproduce"] and "--device cpu" in r["reproduce"] for r in rows)
    assert all("--suite perf" not in r["reproduce"] for r in rows)
