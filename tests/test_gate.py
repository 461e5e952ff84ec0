"""The merge gate on constructed histories: exit codes, decisions, reports."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from db.artifact import dumps, parse_artifact, to_data
from db.engine import open_database
from db.ingest import ingest_documents
from db.synthetic import Step, SyntheticHistory
from kernelwatch.cli import main

RUNS = 24


def _history(db_url: str, steps=(), seed: int = 0, **kwargs) -> dict:  # noqa: ANN001, ANN003
    """Ingest RUNS runs of history; return the (not ingested) candidate run that follows them."""
    docs = list(SyntheticHistory(runs=RUNS + 1, cases=10, samples=30, seed=seed, steps=list(steps), **kwargs)
                .documents())
    ingest_documents(open_database(db_url), [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(docs[:-1])])
    return to_data(docs[-1])


def _gate(cli, db_url: str, doc: dict, tmp_path: Path, *extra: str):  # noqa: ANN001, ANN202
    path = tmp_path / "candidate.json"
    path.write_text(dumps(doc))
    return cli.invoke(main, ["gate", "--artifact", str(path), "--baseline", "synthetic/main", "--db", db_url,
                             "--report-dir", str(tmp_path / "report"), *extra])


def test_a_clear_regression_fails_only_where_it_happened(db_url, tmp_path, cli) -> None:  # noqa: ANN001
    candidate = _history(db_url, steps=[Step(RUNS, 1.15, "mse_loss")])
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 1, result.output
    junit = ET.parse(tmp_path / "report" / "gate-junit.xml").getroot()
    failed = [c.get("name") for c in junit.iter("testcase") if c.find("failure") is not None]
    assert failed and all(name.startswith("mse_loss/") for name in failed)
    mse_cases = {c["key"] for c in candidate["cases"] if c["kernel"] == "mse_loss"}
    assert set(failed) == mse_cases
    assert "## KernelWatch gate: FAIL" in (tmp_path / "report" / "gate.md").read_text()


def test_a_to_a_noise_passes(db_url, tmp_path, cli) -> None:  # noqa: ANN001
    for seed in (1, 2, 3):
        candidate = _history(db_url, seed=seed) if seed == 1 else next(
            d for i, d in enumerate(SyntheticHistory(runs=RUNS + seed, cases=10, samples=30, seed=1).documents())
            if i == RUNS + seed - 1)
        result = _gate(cli, db_url, candidate, tmp_path)
        assert result.exit_code == 0, result.output


def test_a_small_step_below_the_minimum_effect_passes(db_url, tmp_path, cli) -> None:  # noqa: ANN001
    candidate = _history(db_url, steps=[Step(RUNS, 1.03, "mse_loss")])
    assert _gate(cli, db_url, candidate, tmp_path).exit_code == 0
    assert _gate(cli, db_url, candidate, tmp_path, "--min-effect", "0.01").exit_code == 1


def test_per_kernel_minimum_effect(db_url, tmp_path, cli) -> None:  # noqa: ANN001
    candidate = _history(db_url, steps=[Step(RUNS, 1.15, "mse_loss")])
    assert _gate(cli, db_url, candidate, tmp_path, "--case-min-effect", "mse_loss=0.3").exit_code == 0


def test_an_accuracy_failure_fails_and_budget_growth_warns(db_url, tmp_path, cli) -> None:  # noqa: ANN001
    candidate = _history(db_url)
    candidate["accuracy"][0].update(passed=False, error_budget=3.5)
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 1 and "error budget 3.5 > 1" in result.output
    candidate["accuracy"][0].update(passed=True, error_budget=0.9)
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 0 and "Warnings" in result.output and "error budget grew" in result.output


def test_an_errored_case_fails(db_url, tmp_path, cli) -> None:  # noqa: ANN001
    candidate = _history(db_url)
    row = next(p for p in candidate["perf"] if p["implementation"] == "triton")
    row.update(error="the worker process was killed by SIGSEGV", median_ms=None, samples_ms=[])
    assert _gate(cli, db_url, candidate, tmp_path).exit_code == 1


def test_no_baseline_on_this_hardware_cannot_decide(db_url, tmp_path, cli) -> None:  # noqa: ANN001
    candidate = _history(db_url)
    candidate["hardware"]["device_name"] = "NVIDIA A100-SXM4-80GB (synthetic)"
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 2 and "cannot decide" in result.output
    candidate = _history(db_url)
    result = _gate(cli, db_url, candidate, tmp_path).exit_code
    assert result == 0
    path = tmp_path / "c.json"
    path.write_text(dumps(candidate))
    wrong_branch = cli.invoke(main, ["gate", "--artifact", str(path), "--baseline", "release", "--db", db_url])
    assert wrong_branch.exit_code == 2 and "no complete run of branch 'release'" in wrong_branch.output


def test_bad_input_cannot_decide(db_url, tmp_path, cli) -> None:  # noqa: ANN001
    assert cli.invoke(main, ["gate", "--baseline", "main", "--db", db_url]).exit_code == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    result = cli.invoke(main, ["gate", "--artifact", str(bad), "--baseline", "main", "--db", db_url])
    assert result.exit_code == 2 and "bad.json" in result.output
    assert "no database at" in cli.invoke(main, ["gate", "--candidate", "ffff", "--baseline", "main", "--db",
                                                 db_url]).output or db_url.startswith("postgresql")
    open_database(db_url).dispose()
    missing = cli.invoke(main, ["gate", "--candidate", "ffff", "--baseline", "main", "--db", db_url])
    assert missing.exit_code == 2 and "no run with id 'ffff'" in missing.output


def test_candidate_from_the_database_by_run_id(db_url, tmp_path, cli) -> None:  # noqa: ANN001
    candidate = _history(db_url, steps=[Step(RUNS, 1.2, "softmax")])
    ingest_documents(open_database(db_url), [("c", parse_artifact(dumps(candidate)))])
    result = cli.invoke(main, ["gate", "--candidate", candidate["run"]["id"][:8], "--baseline", "synthetic/main",
                               "--db", db_url, "--report-dir", str(tmp_path / "r")])
    assert result.exit_code == 1 and "scaled_masked_softmax/" in result.output


def test_bisect_names_the_commits_around_the_step(tmp_path, cli) -> None:  # noqa: ANN001
    db_url = f"sqlite:///{tmp_path / 'b.db'}"
    history = SyntheticHistory(runs=30, cases=4, samples=10, steps=[Step(17, 1.25, "mse_loss")])
    ingest_documents(open_database(db_url), [(str(i), parse_artifact(dumps(d))) for i, d in
                                             enumerate(history.documents())])
    case = next(c["key"] for c in history.case_list() if c["kernel"] == "mse_loss")
    result = cli.invoke(main, ["bisect", case, "--hardware", "H200", "--db", db_url])
    assert result.exit_code == 0, result.output
    assert f"between {history.commit(16)['sha'][:12]} and {history.commit(17)['sha'][:12]}" in result.output
    assert "+2" in result.output and "kernelwatch collect --kernels mse_loss" in result.output


@pytest.mark.browser
def test_html_report_opens_in_chromium_with_its_chart(db_url, tmp_path, cli) -> None:  # noqa: ANN001
    from tests.test_dashboard_browser import CHROMIUM

    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium")
    candidate = _history(db_url, steps=[Step(RUNS, 1.15, "mse_loss")])
    _gate(cli, db_url, candidate, tmp_path)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu",
                                                                   "--disable-background-networking"])
        page = browser.new_page()
        page.goto((tmp_path / "report" / "gate.html").as_uri())
        page.wait_for_selector("#ratios .main-svg", timeout=30_000)
        bars = page.evaluate("() => document.getElementById('ratios').data[0].y.length")
        assert bars == 10
        assert "FAIL" in page.inner_text("h1")
        browser.close()
