"""Silent PASSes of the gate and the store a hostile user found, each a test that failed on d3bce35: the shipped history
(ci/history) stored, a copy of a real H200 run edited as a hostile user would, gated with ``--baseline main`` on
SQLite and PostgreSQL. Before each fix, every probe here exited 0 (its test says what it printed)."""

from __future__ import annotations

import copy
import datetime as dt
import functools
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import create_engine, text

from kernelwatch.cli import main
from kernelwatch.store.artifact import dumps, load_artifact, to_data
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.schema import format_time, parse_time
from tests.history import history_runs
from tests.pgserver import drop_database
from tests.test_gate_probes import slower, statuses

HISTORY = Path(__file__).resolve().parents[1] / "ci" / "history"
CD36845F = HISTORY / "2026-11-30T2052-cd36845f-h200x2-full-2gpu.json.gz"  # a full run, its notes say no scope
NEWEST = HISTORY / "2026-12-03T1253-621ddb38-h200-full-cold-peers-gpu44f1bea0.json.gz"  # "every case of its specs"
REPEAT14 = HISTORY / "2026-11-30T1903-73812d88-h200-mse-softmax-perf-repeat14.json.gz"
WARM = HISTORY / "2026-12-02T2206-5e02f011-h200-full-warm-peers-gpu8cb9cd62.json.gz"
OTHER_GPU = "GPU-00000000-1111-2222-3333-444444444444"


@functools.cache
def _load(path: Path) -> dict:
    return to_data(load_artifact(path))


def run(path: Path) -> dict:
    return copy.deepcopy(_load(path))


def as_new_run(doc: dict, started: str | None = None, minutes: int = 0) -> dict:
    """The same run under a new id, started at ``started`` (or ``minutes`` after it was)."""
    doc["run"]["id"] = str(uuid.uuid4())
    start = parse_time(doc["run"]["started_at"])
    when = parse_time(started) if started else start + dt.timedelta(minutes=minutes)
    doc["run"]["started_at"] = format_time(when)
    if doc["run"].get("finished_at"):
        doc["run"]["finished_at"] = format_time(when + (parse_time(doc["run"]["finished_at"]) - start))
    return doc


def kernel_of(doc: dict) -> dict[str, str]:
    return {c["key"]: c["kernel"] for c in doc["cases"]}


def drop_perf(doc: dict, keep) -> dict:
    """``doc`` without the perf (and profiler) rows ``keep`` refuses, and the case entries left without a row."""
    doc["perf"] = [p for p in doc["perf"] if keep(p)]
    timed = {p["case"] for p in doc["perf"]}
    doc["profiler"] = [m for m in doc["profiler"] if m["case"] in timed]
    used = timed | {a["case"] for a in doc["accuracy"]}
    doc["cases"] = [c for c in doc["cases"] if c["key"] in used]
    return doc


# ---------------------------------------------------------------------------------------------
# The shipped history, stored once per module and copied for each test
# ---------------------------------------------------------------------------------------------
def _store_history(url: str) -> None:
    engine = open_database(url)
    ingest_documents(engine, [(Path(p).name, doc) for p, doc in history_runs()])  # read once per process
    engine.dispose()


@pytest.fixture(scope="module")
def sqlite_history(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("history") / "history.db"
    _store_history(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="module")
def pg_history(pg_admin: str) -> Iterator[str]:
    name = f"kw_hist_{uuid.uuid4().hex[:12]}"
    _create(pg_admin, f'CREATE DATABASE "{name}"')
    _store_history(f"{pg_admin.rsplit('/', 1)[0]}/{name}")
    try:
        yield name
    finally:
        drop_database(pg_admin, name)


def _create(admin: str, sql: str) -> None:
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def history_url(request, tmp_path: Path) -> Iterator[str]:
    """A database holding every run of ci/history (a fresh copy per test)."""
    if request.param == "sqlite":
        path = tmp_path / "kw.db"
        shutil.copy(request.getfixturevalue("sqlite_history"), path)
        yield f"sqlite:///{path}"
        return
    admin, template = request.getfixturevalue("pg_admin"), request.getfixturevalue("pg_history")
    name = f"kw_test_{uuid.uuid4().hex[:12]}"
    _create(admin, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield f"{admin.rsplit('/', 1)[0]}/{name}"
    finally:
        drop_database(admin, name)


def gate(cli, db_url: str, tmp_path: Path, doc: dict | None = None, *extra: str):
    args = ["gate", "--baseline", "main", "--db", db_url, "--report-dir", str(tmp_path / "report"), *extra]
    if doc is not None:
        path = tmp_path / "candidate.json"
        path.write_text(dumps(doc))
        args += ["--artifact", str(path)]
    result = cli.invoke(main, args)
    report = tmp_path / "report" / "gate.md"  # the terminal gets plain text; the tables are in gate.md
    markdown = report.read_text() if report.exists() else ""
    if report.exists():
        report.unlink()  # a later gate in the same test writes its own
    return SimpleNamespace(exit_code=result.exit_code, output=result.output + "\n" + markdown)


# ---------------------------------------------------------------------------------------------
# 1. What the candidate must measure comes from the specs, not from the artifact
# ---------------------------------------------------------------------------------------------
def test_probe1_a_run_without_kernel_timings_fails_as_missing(history_url, tmp_path, cli) -> None:
    """Probe 1: cd36845f's full run with every kernel timing removed (references kept), dated 2026-12-01T20:00Z.
    Was PASS (exit 0), "baseline assembled per case from 2 runs ... 0 perf + 288 accuracy": the baseline was
    assembled only for the cases the candidate measured. Now every perf case the specs define and main measured
    is missing: exit 1."""
    doc = drop_perf(as_new_run(run(CD36845F), "2026-12-01T20:00:00Z"), lambda p: p["implementation"] != "triton")
    doc["run"]["commit"]["time"] = "2026-12-01T20:00:00Z"
    result = gate(cli, history_url, tmp_path, doc)
    assert result.exit_code == 1, result.output
    counts = statuses(result.output)
    assert counts.get("missing", 0) >= 62, counts
    assert "torch_eager, torch_rms_norm but not the kernel" in result.output.replace("\\_", "_")  # references named


def test_a_run_that_calls_itself_synthetic_buys_no_way_out_of_the_specs(history_url, tmp_path, cli) -> None:
    """The SYNTHETIC flag is the artifact's word: the newest run of main with every softmax timing dropped and
    ``synthetic: true`` set. Defect: a synthetic candidate is judged without the specs' case set, so the dropped
    cases are never named missing (the verdict then rests on what else the copy holds). Now a synthetic run off a
    synthetic/ branch is refused (exit 2)."""
    doc = drop_perf(as_new_run(run(NEWEST)), lambda p: not p["case"].startswith("scaled_masked_softmax/"))
    doc["run"]["synthetic"] = True
    result = gate(cli, history_url, tmp_path, doc)
    assert result.exit_code == 2, result.output
    assert "says it is SYNTHETIC but its branch 'main'" in result.output


@pytest.mark.parametrize("kernels", [("scaled_masked_softmax",), None])
def test_probe2_dropping_a_kernels_timings_is_missing_never_retired(kernels, history_url, tmp_path, cli) -> None:
    """Probe 2: the newest run (its notes: "every case of its specs") with every perf row of scaled_masked_softmax
    (or of every kernel) dropped. Was PASS, "retired: 24 cases of the baseline the candidate's specs no longer
    define" (72 for every kernel): the artifact's notes retired them. The checked-out specs still define all of
    them: each is missing, none retired, exit 1."""
    doc = as_new_run(run(NEWEST), minutes=60)
    kernel = kernel_of(doc)
    dropped = {p["case"] for p in doc["perf"] if p["implementation"] == "triton"}
    if kernels:
        dropped = {c for c in dropped if kernel[c] in kernels}
    doc = drop_perf(doc, lambda p: p["case"] not in dropped)
    result = gate(cli, history_url, tmp_path, doc)
    assert result.exit_code == 1, result.output
    counts = statuses(result.output)
    assert counts.get("missing") == len(dropped) and len(dropped) >= 24, (counts, len(dropped))
    assert "retired" not in result.output


def rename(doc: dict, cases: set[str], suffix: str = ",rev=2") -> dict:
    """``cases`` under new keys (``suffix`` appended) in every section."""
    new = {c: c + suffix for c in cases}
    for c in doc["cases"]:
        if c["key"] in new:
            c["key"] = new[c["key"]]
            c["params"] = {**c["params"], "rev": 2}
    for section in ("accuracy", "perf", "profiler"):
        for item in doc[section]:
            item["case"] = new.get(item["case"], item["case"])
    return doc


def _slowed_and_renamed(doc: dict) -> tuple[dict, list[str]]:
    """Seven of the newest run's large cases 8-12% slower, on another GPU, their keys given a suffix ",rev=2"."""
    large = sorted(p["case"] for p in doc["perf"] if p["implementation"] == "triton" and p["median_ms"] > 0.1)[:7]
    for i, case in enumerate(large):
        doc = slower(doc, 1.08 + 0.04 * i / 6, cases=(case,))
    for p in doc["perf"]:
        p["device_uuid"] = OTHER_GPU
    return rename(doc, set(large)), large


def test_probe3_renamed_slow_cases_are_missing_not_new(history_url, tmp_path, cli) -> None:
    """Probe 3: seven cases 8-12% slower on another GPU, their keys renamed ",rev=2". Was PASS, "new: 7 ·
    unchanged: 450" (the old keys retired). The specs still define the old keys: missing, exit 1; the renamed
    ones are new."""
    doc, large = _slowed_and_renamed(as_new_run(run(NEWEST), minutes=60))
    result = gate(cli, history_url, tmp_path, doc)
    assert result.exit_code == 1, result.output
    counts = statuses(result.output)
    assert counts.get("missing") == 7, counts
    assert re.search(r"Cases: .*new: 7\b", result.output), result.output[:600]
    for case in large:
        assert f"| `{case}` | missing |" in result.output.replace("\\_", "_")


# ---------------------------------------------------------------------------------------------
# 2. Confirmations come only from `kernelwatch confirm`
# ---------------------------------------------------------------------------------------------
CONFIRMED_AT = "2026-12-03T15:00:00Z"  # after the newest run's commit (2026-12-03T12:47Z)


def _suspect(history_url: str) -> tuple[dict, str]:
    """The newest run again, on another GPU, one large case 10% slower: a suspect (the runs cannot decide)."""
    doc = as_new_run(run(NEWEST), minutes=60)
    case = sorted(p["case"] for p in doc["perf"] if p["implementation"] == "triton" and p["median_ms"] > 0.1)[0]
    doc = slower(doc, 1.10, cases=(case,))
    for p in doc["perf"]:
        p["device_uuid"] = OTHER_GPU
    return doc, case


def confirmation(doc: dict, case: str, verdict: str = "SAME", **change) -> dict:
    sha = doc["run"]["commit"]["sha"]
    row = {
        "case": case,
        "baseline_commit": sha,
        "candidate_commit": sha,
        "verdict": verdict,
        "rounds": 12,
        "ratio": 1.001,
        "low": 0.998,
        "high": 1.004,
        "min_effect": 0.05,
        "device_uuid": OTHER_GPU,
        "seconds": 30.0,
        "confirmed_at": CONFIRMED_AT,
    }
    return {**row, **change}


def store(db_url: str, doc: dict, *rows: dict) -> None:
    """Rows stored as `kernelwatch confirm --db` stores them."""
    from kernelwatch.store.ingest import store_confirmations
    from kernelwatch.store.schema import Confirmation, Hardware

    store_confirmations(
        open_database(db_url), Hardware.model_validate(doc["hardware"]), [Confirmation.model_validate(r) for r in rows]
    )


def _confirmation_rows(db_url: str) -> int:
    engine = open_database(db_url, readonly=True)
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM confirmation")).scalar_one()


def test_probe4_a_valid_confirmation_still_clears_its_suspect(history_url, tmp_path, cli) -> None:
    """The control of probe 4: the suspect fails, and a SAME that `confirm` stored for both whole shas, after both
    commits, at the gate's minimum effect, clears it (exit 0)."""
    doc, case = _suspect(history_url)
    before = gate(cli, history_url, tmp_path, doc)
    assert before.exit_code == 1 and statuses(before.output) == {"suspect (confirm)": 1}, before.output
    store(history_url, doc, confirmation(doc, case))
    after = gate(cli, history_url, tmp_path, doc)
    assert after.exit_code == 0 and "1 case decided by a stored confirmation" in after.output, after.output


def test_probe4_ingest_never_stores_an_artifacts_confirmations(history_url, tmp_path, cli) -> None:
    """Probe 4: `ingest` of an artifact carrying a SAME stored it, and the gate cleared the suspect (exit 0).
    Ingest now stores the run and says in one line that the confirmation was not stored; the suspect still
    fails. Re-ingesting the stored run with confirmations added ("unchanged") stored rows too: none now."""
    doc, case = _suspect(history_url)
    forged = copy.deepcopy(doc)
    forged["confirmations"] = [confirmation(doc, case)]
    path = tmp_path / "forged.json"
    path.write_text(dumps(forged))
    result = cli.invoke(main, ["ingest", "--db", history_url, str(path)])
    assert result.exit_code == 0, result.output
    assert "1 confirmation not stored: only `kernelwatch confirm` stores confirmations" in result.output
    assert _confirmation_rows(history_url) == 0
    assert gate(cli, history_url, tmp_path, None, "--candidate", doc["run"]["id"]).exit_code == 1
    forged["confirmations"].append(confirmation(doc, case, confirmed_at="2026-12-03T16:00:00Z"))
    path.write_text(dumps(forged))
    again = cli.invoke(main, ["ingest", "--db", history_url, str(path)])
    assert again.exit_code == 0 and again.output.startswith("unchanged"), again.output
    assert _confirmation_rows(history_url) == 0


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"candidate_commit": "SHORT"}, id="prefix-sha"),
        pytest.param({"baseline_commit": "SHORT"}, id="prefix-baseline-sha"),
        pytest.param({"confirmed_at": "2020-01-01T00:00:00Z"}, id="before-the-commits"),
        pytest.param({"min_effect": 9.0}, id="min-effect-9"),
        pytest.param({"min_effect": None}, id="no-min-effect"),
    ],
)
def test_probe4_a_confirmation_that_does_not_match_decides_nothing(change, history_url, tmp_path, cli) -> None:
    """Probe 4: stored SAMEs of a commit *prefix* (shared with another commit), confirmed in 2020 (before the
    commit existed), with a minimum effect of 9.0 (900%) against the gate's 5%: each cleared the suspect (exit 0).
    None of them applies now: exit 1."""
    doc, case = _suspect(history_url)
    sha = doc["run"]["commit"]["sha"]
    change = {k: (sha[:8] if v == "SHORT" else v) for k, v in change.items()}
    store(history_url, doc, confirmation(doc, case, **change))
    result = gate(cli, history_url, tmp_path, doc)
    assert result.exit_code == 1 and statuses(result.output) == {"suspect (confirm)": 1}, result.output


@pytest.mark.parametrize("cautious", ["SLOWER", "UNKNOWN"])
def test_probe4_the_more_cautious_confirmation_wins(cautious, history_url, tmp_path, cli) -> None:
    """Probe 4: a SLOWER and a later SAME for one case: the SAME won (exit 0). The more cautious wins now (SLOWER
    over UNKNOWN over SAME), whatever the order: exit 1."""
    doc, case = _suspect(history_url)
    store(
        history_url,
        doc,
        confirmation(doc, case, cautious, ratio=1.09, low=1.07, high=1.11),
        confirmation(doc, case, "SAME", confirmed_at="2026-12-03T16:00:00Z"),
    )
    result = gate(cli, history_url, tmp_path, doc)
    assert result.exit_code == 1, result.output
    assert f"confirmed {cautious}" in result.output, result.output


# ---------------------------------------------------------------------------------------------
# 3. Who may write the baseline's history
# ---------------------------------------------------------------------------------------------
ROLES_SQL = Path(__file__).resolve().parents[1] / "ci" / "workflows" / "postgres-roles.sql"


def _probe5(tmp_path: Path) -> tuple[dict, dict, dict]:
    """(the planted main run written by a pull request's job, the same run as the PR's own branch, a candidate
    1.3x slower on five large cases)."""
    newest = run(NEWEST)
    five = tuple(sorted(p["case"] for p in newest["perf"] if p["implementation"] == "triton" and p["median_ms"] > 0.1))
    five = five[:5]
    planted = slower(as_new_run(run(NEWEST), minutes=30), 1.5, cases=five)
    planted["run"]["trigger"] = "pr"
    own = copy.deepcopy(planted)
    own["run"]["id"], own["run"]["commit"]["branch"] = str(uuid.uuid4()), "feature/faster"
    candidate = slower(as_new_run(run(NEWEST), minutes=60), 1.3, cases=five)
    candidate["run"]["trigger"], candidate["run"]["commit"]["branch"] = "pr", "feature/faster"
    return planted, own, candidate


def _ingest_file(cli, db_url: str, doc: dict, tmp_path: Path):
    path = tmp_path / f"{doc['run']['id']}.json"
    path.write_text(dumps(doc))
    return cli.invoke(main, ["ingest", "--db", db_url, str(path)])


def test_probe5_a_pull_requests_main_run_is_refused_at_ingest(history_url, tmp_path, cli) -> None:
    """Probe 5: a "main" run dated between the newest real run and the candidate, 1.5x slower on five cases,
    stored by a pull request's job (trigger pr): the candidate 1.3x slower on those cases PASSed ("faster (within
    noise): 3"). `ingest` (and `collect --db`) now refuse a pr run of a baseline branch in one line, exit 2,
    nothing stored; the candidate fails. The PR's own branch is still stored."""
    planted, own, candidate = _probe5(tmp_path)
    refused = _ingest_file(cli, history_url, planted, tmp_path)
    assert refused.exit_code == 2, refused.output
    lines = [line for line in refused.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "pr run of baseline branch 'main'" in lines[0], refused.output
    assert _ingest_file(cli, history_url, own, tmp_path).exit_code == 0
    result = gate(cli, history_url, tmp_path, candidate)
    assert result.exit_code == 1 and statuses(result.output).get("slower", 0) >= 3, result.output


@pytest.mark.postgres
def test_probe5_row_level_security_refuses_the_pr_roles_main_run(pg_admin, tmp_path, cli) -> None:
    """Probe 5 on a shared PostgreSQL with ci/workflows/postgres-roles.sql applied: two roles, the owner (nightly)
    and the pull request's. The PR role's insert of a main run, even one forged as nightly (past the trigger check),
    is refused by the server (row-level security), one line, exit 2; its own branch's run is stored; the slow
    candidate fails. The owner still stores main's runs."""
    name = f"kw_test_{uuid.uuid4().hex[:12]}"
    role = f"kw_pr_{uuid.uuid4().hex[:8]}"
    _create(pg_admin, f'CREATE DATABASE "{name}"')
    owner_url = f"{pg_admin.rsplit('/', 1)[0]}/{name}"
    try:
        engine = open_database(owner_url)
        ingest_documents(engine, [(NEWEST.name, load_artifact(NEWEST))])
        sql = ROLES_SQL.read_text().replace("kernelwatch_pr", role).replace("CHANGE-ME", "pr-secret")
        statements = "\n".join(ln for ln in sql.splitlines() if not ln.startswith("--")).split(";")
        with engine.begin() as conn:
            for statement in statements:
                if statement.strip():
                    conn.execute(text(statement))
        engine.dispose()
        admin = create_engine(pg_admin)
        pr_url = admin.url.set(username=role, password="pr-secret", database=name).render_as_string(hide_password=False)
        admin.dispose()
        planted, own, candidate = _probe5(tmp_path)
        planted["run"]["trigger"] = "nightly"  # forged: the trigger check cannot tell
        refused = _ingest_file(cli, pr_url, planted, tmp_path)
        assert refused.exit_code == 2 and "row-level security" in refused.output, refused.output
        assert len([ln for ln in refused.output.splitlines() if ln.strip()]) == 1, refused.output
        assert _ingest_file(cli, pr_url, own, tmp_path).exit_code == 0
        result = gate(cli, pr_url, tmp_path, candidate)
        assert result.exit_code == 1 and statuses(result.output).get("slower", 0) >= 3, result.output
        assert _ingest_file(cli, owner_url, planted, tmp_path).exit_code == 0  # the owner (nightly) writes main
    finally:
        _create(pg_admin, f'GRANT "{role}" TO CURRENT_USER')  # to end the PR role's sessions as the drop does
        drop_database(pg_admin, name)
        _drop_role(pg_admin, role)


def _drop_role(admin: str, role: str) -> None:
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'DROP ROLE IF EXISTS "{role}"'))
    finally:
        engine.dispose()


PR_WORKFLOW = Path(__file__).resolve().parents[1] / "ci" / "workflows" / "pull-request.yml"


def test_probe5_the_pull_request_job_never_writes_a_shared_sqlite_history(tmp_path, cli) -> None:
    """Probe 5, SQLite: pull-request.yml stored its run with `collect ... --db "$KERNELWATCH_DB"`, the shared
    database (a planted main run the next candidate's baseline). Now no step of it hands the shared database to a
    writer (collect, ingest), and its "Read-only copy" step, run here as the job runs it, leaves a read-only copy
    that the job's KERNELWATCH_DB names from then on (an ingest into it is refused, but for root), and the shared file
    is unchanged."""
    import os
    import subprocess

    import yaml

    steps = yaml.safe_load(PR_WORKFLOW.read_text())["jobs"]["collect-and-gate"]["steps"]
    scripts = {s.get("name", ""): s.get("run", "") for s in steps}
    for name, script in scripts.items():
        for line in script.replace("\\\n", " ").splitlines():
            if "kernelwatch collect" in line or "kernelwatch ingest" in line:
                assert "--db" not in line, (name, line)
    (copy_step,) = [s for n, s in scripts.items() if n.startswith("Read-only copy")]
    shared = tmp_path / "shared.db"
    _store_history(f"sqlite:///{shared}")
    before = shared.read_bytes()
    env_file = tmp_path / "github_env"
    job = tmp_path / "job"
    job.mkdir()
    env = {"PATH": "/usr/bin:/bin", "KERNELWATCH_DB": f"sqlite:///{shared}", "GITHUB_ENV": str(env_file)}
    subprocess.run(["bash", "-eo", "pipefail", "-c", copy_step], cwd=job, env=env, check=True, timeout=120)
    (line,) = env_file.read_text().splitlines()
    url = line.removeprefix("KERNELWATCH_DB=")
    assert url == f"sqlite:///{job / 'history.db'}"
    assert (job / "history.db").stat().st_mode & 0o222 == 0
    planted, _, _ = _probe5(tmp_path)
    planted["run"]["trigger"] = "nightly"  # forged: past the trigger check
    written = _ingest_file(cli, url, planted, tmp_path)
    if os.geteuid() != 0:  # root writes a file whatever its mode; the shared file is untouched either way
        assert written.exit_code == 2, written.output
    assert shared.read_bytes() == before
