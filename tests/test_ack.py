"""`kernelwatch ack`: validation, listing, and the gate's "acknowledged" verdict (reported, not failing)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelwatch.cli import main
from kernelwatch.gate.judge import decide
from kernelwatch.gate.reports import markdown
from kernelwatch.store.ack import AckError, add_ack
from kernelwatch.store.artifact import dumps, parse_artifact, to_data
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.queries import acks, list_runs
from kernelwatch.store.schema import RunDocument
from kernelwatch.store.synthetic import Step, SyntheticHistory

RUNS = 24  # H200 history 0..23 and an Ascend run at commit 24; the H200 candidate is commit 25
HISTORY = SyntheticHistory(runs=RUNS + 2, cases=6, hardware=2, samples=30, steps=[Step(RUNS, 1.2, "mse_loss")])
H200, ASCEND = "NVIDIA H200 (synthetic)", "Ascend910B4 (synthetic)"


def _long(doc: dict) -> dict:
    """The synthetic times x100 (0.5-3.5 ms): far from launch-bound, so a 20% step is a clear regression."""
    for p in doc["perf"]:
        for key in ("median_ms", "p20_ms", "p80_ms", "min_ms"):
            p[key] *= 100
        p["samples_ms"] = [v * 100 for v in p["samples_ms"]]
    for c in doc["cases"]:  # what the generator's facts said of the 5-35 us stand-ins no longer holds
        c["facts"] = {**c["facts"], "launch_bound": False}
    return doc


def _setup(db_url: str) -> tuple[RunDocument, dict]:
    """Ingest the history; return (candidate document, baseline run)."""
    docs = [parse_artifact(dumps(_long(to_data(d)))) for d in HISTORY.documents()]
    stored = [d for i, d in enumerate(docs) if i < 2 * RUNS or i == 2 * RUNS + 1]  # + Ascend at commit 24
    ingest_documents(open_database(db_url), [(str(i), d) for i, d in enumerate(stored)])
    engine = open_database(db_url, readonly=True)
    last = HISTORY.commit(RUNS - 1)["sha"]
    base = next(r for r in list_runs(engine) if r["hardware"] == H200 and r["commit"] == last)
    return docs[2 * RUNS + 2], base  # decide takes RunDocuments


def _mse_cases() -> list[str]:
    return [c["key"] for c in HISTORY.case_list() if c["kernel"] == "mse_loss"]


def test_a_regression_acknowledged_between_baseline_and_candidate_does_not_fail(db_url) -> None:
    candidate, base = _setup(db_url)
    engine = open_database(db_url, readonly=True)
    before = decide(engine, candidate, base["id"])
    assert {v.case for v in before.verdicts if v.status == "regression"} == set(_mse_cases())
    assert before.exit_code == 1

    writer = open_database(db_url)
    first, second = _mse_cases()
    add_ack(writer, first, H200, HISTORY.commit(RUNS)["sha"][:10], "new tiling, <b>expected</b>", "kw")
    add_ack(writer, second, H200, HISTORY.commit(RUNS + 1)["sha"], "same change", None)  # the candidate's own
    after = decide(engine, candidate, base["id"])
    status = {v.case: v.status for v in after.verdicts if v.case in (first, second) and v.comparison is not None}
    assert status == {first: "acknowledged", second: "acknowledged"}
    assert after.exit_code == 0 and not after.failed
    report = markdown(after)
    assert "### Acknowledged" in report and "acknowledged at" in report and "expected" in report
    assert not re.search(r"(?<!\\)<b>", report)  # the reason is text: escaped for Markdown


def test_an_ack_outside_the_range_or_on_other_hardware_changes_nothing(db_url) -> None:
    candidate, base = _setup(db_url)
    writer = open_database(db_url)
    first, second = _mse_cases()
    add_ack(writer, first, H200, HISTORY.commit(RUNS - 1)["sha"], "the baseline's own commit: excluded")
    add_ack(writer, second, H200, HISTORY.commit(3)["sha"], "long before the baseline")
    add_ack(writer, first, ASCEND, HISTORY.commit(RUNS)["sha"], "another machine")
    result = decide(open_database(db_url, readonly=True), candidate, base["id"])
    assert {v.case for v in result.verdicts if v.status == "regression"} == set(_mse_cases())
    assert result.exit_code == 1


def test_the_gate_command_passes_once_every_step_is_acknowledged(tmp_path: Path, cli) -> None:
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    candidate, base = _setup(url)
    artifact = tmp_path / "candidate.json"
    artifact.write_text(dumps(candidate))
    args = [
        "gate",
        "--artifact",
        str(artifact),
        "--baseline",
        base["id"],
        "--db",
        url,
        "--report-dir",
        str(tmp_path / "r"),
    ]
    assert cli.invoke(main, args).exit_code == 1
    for case in _mse_cases():
        out = cli.invoke(
            main,
            [
                "ack",
                case,
                "--hardware",
                "h200",
                "--commit",
                HISTORY.commit(RUNS)["sha"][:8],
                "--reason",
                "kernel rewrite",
                "--db",
                url,
            ],
        )
        assert out.exit_code == 0, out.output
        assert out.output.startswith(f"acknowledged {case} on {H200} from {HISTORY.commit(RUNS)['sha'][:12]}")
    result = cli.invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "acknowledged" in (tmp_path / "r" / "gate.md").read_text()


@pytest.mark.parametrize(
    "argv,message",
    [
        (
            ["no/such/case", "--hardware", "h200", "--commit", "abcdef12", "--reason", "x"],
            "unknown case 'no/such/case'",
        ),
        (
            ["{case}", "--hardware", "synthetic", "--commit", "abcdef12", "--reason", "x"],
            "--hardware 'synthetic' must match exactly one hardware: it matches 2",
        ),
        (["{case}", "--hardware", "A100", "--commit", "abcdef12", "--reason", "x"], "it matches 0 (none); known:"),
        (["{case}", "--hardware", "h200", "--commit", "abcdef12", "--reason", "   "], "--reason must not be empty"),
        (
            ["{case}", "--hardware", "h200", "--commit", "abcdef12", "--reason", "two\nlines"],
            "one line of printable text",
        ),
        (
            ["{case}", "--hardware", "h200", "--commit", "abcdef12", "--reason", "red \x1b[31mtext"],
            "--reason must be one line of printable text (no line breaks or control characters)",
        ),
        (
            ["{case}", "--hardware", "h200", "--commit", "abcdef12", "--reason", "x", "--author", "me\rroot"],
            "--author must be one line of printable text",
        ),
        (["{case}", "--hardware", "h200", "--commit", "not-a-sha", "--reason", "x"], "must be a commit sha"),
        (["{case}", "--hardware", "h200", "--commit", "abc", "--reason", "x"], "must be a commit sha"),
        (["{case}", "--hardware", "h200", "--reason", "x"], "missing --commit"),
    ],
)
def test_bad_input_gets_one_line(tmp_path: Path, cli, argv, message) -> None:
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    _setup(url)
    argv = [a.replace("{case}", _mse_cases()[0]) for a in argv]
    result = cli.invoke(main, ["ack", *argv, "--db", url])
    assert result.exit_code == 2  # bad input: exit 2 and the command's name, as every error
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelwatch ack: error: ") and message in lines[0], result.output
    assert acks(open_database(url, readonly=True)) == []


def test_duplicates_are_refused_and_the_list_shows_acks(tmp_path: Path, cli) -> None:
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    _setup(url)
    case = _mse_cases()[0]
    argv = [
        "ack",
        case,
        "--hardware",
        "H200",
        "--commit",
        HISTORY.commit(5)["sha"][:9],
        "--reason",
        "why",
        "--author",
        "ana",
        "--db",
        url,
    ]
    assert cli.invoke(main, argv).exit_code == 0
    again = cli.invoke(main, argv)
    assert again.exit_code == 2 and "already acknowledged" in again.output
    listing = cli.invoke(main, ["ack", "--list", "--hardware", "h200", "--format", "csv", "--db", url])
    assert listing.exit_code == 0
    header, row = listing.output.strip().splitlines()
    assert header == "case,hardware,commit,reason,author,created_at"
    assert row.startswith(f'"{case}",{H200},{HISTORY.commit(5)["sha"][:12]},why,ana,')  # CSV-quoted key


def test_ack_never_creates_a_database(tmp_path: Path, cli) -> None:
    path = tmp_path / "missing.db"
    result = cli.invoke(
        main, ["ack", "x", "--hardware", "h", "--commit", "abcdef1", "--reason", "r", "--db", f"sqlite:///{path}"]
    )
    assert result.exit_code == 2 and not path.exists()


def test_library_refuses_ambiguous_commit_prefixes(tmp_path: Path) -> None:
    import uuid

    url = f"sqlite:///{tmp_path / 'kw.db'}"
    _setup(url)
    extra = []
    for sha in ("abcd1" + "0" * 35, "abcd2" + "0" * 35):
        doc = to_data(next(SyntheticHistory(runs=1, cases=6, hardware=1).documents()))
        doc["run"]["id"], doc["run"]["commit"]["sha"] = str(uuid.uuid4()), sha
        extra.append((sha, parse_artifact(dumps(doc))))
    ingest_documents(open_database(url), extra)
    with pytest.raises(AckError, match="ambiguous on this hardware: abcd10000000, abcd20000000"):
        add_ack(open_database(url), _mse_cases()[0], H200, "abcd", "r")
    assert add_ack(open_database(url), _mse_cases()[0], H200, "abcd2", "r")["commit"] == "abcd2" + "0" * 35
