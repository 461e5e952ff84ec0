"""The merge gate on constructed histories: exit codes, decisions, reports."""

from __future__ import annotations

import datetime as dt
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kernelwatch.cli import main
from kernelwatch.store.artifact import dumps, load_artifact, parse_artifact, to_data
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.schema import format_time, parse_time
from kernelwatch.store.synthetic import Step, SyntheticHistory, stepped_copies

RUNS = 24
BASE_MS = 0.1  # 0.1-0.7 ms: past the launch-bound range, where one run's slowdown can be significant


def _history(db_url: str, steps=(), seed: int = 0, runs: int = RUNS, **kwargs) -> dict:
    """Ingest ``runs`` runs of history; return the (not ingested) candidate run that follows them."""
    kwargs.setdefault("base_ms", BASE_MS)
    docs = list(
        SyntheticHistory(runs=runs + 1, cases=10, samples=30, seed=seed, steps=list(steps), **kwargs).documents()
    )
    ingest_documents(open_database(db_url), [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(docs[:-1])])
    return to_data(docs[-1])


def _md(tmp_path: Path, folder: str = "report") -> str:
    """The gate's Markdown report (the terminal gets plain text; the tables are in gate.md)."""
    return (tmp_path / folder / "gate.md").read_text()


def _gate(cli, db_url: str, doc: dict, tmp_path: Path, *extra: str):
    path = tmp_path / "candidate.json"
    path.write_text(dumps(doc))
    return cli.invoke(
        main,
        [
            "gate",
            "--artifact",
            str(path),
            "--baseline",
            "synthetic/main",
            "--db",
            db_url,
            "--report-dir",
            str(tmp_path / "report"),
            *extra,
        ],
    )


def test_a_clear_regression_fails_only_where_it_happened(db_url, tmp_path, cli) -> None:
    candidate = _history(db_url, steps=[Step(RUNS, 1.15, "mse_loss")])
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 1, result.output
    junit = ET.parse(tmp_path / "report" / "gate-junit.xml").getroot()
    failed = [c.get("name") for c in junit.iter("testcase") if c.find("failure") is not None]
    assert failed and all(name.startswith("mse_loss/") for name in failed)
    mse_cases = {c["key"] for c in candidate["cases"] if c["kernel"] == "mse_loss"}
    assert set(failed) == mse_cases
    assert "## KernelWatch gate: FAIL" in (tmp_path / "report" / "gate.md").read_text()


def test_a_to_a_noise_passes(db_url, tmp_path, cli) -> None:
    for seed in (1, 2, 3):
        candidate = (
            _history(db_url, seed=seed)
            if seed == 1
            else next(
                d
                for i, d in enumerate(
                    SyntheticHistory(runs=RUNS + seed, cases=10, samples=30, seed=1, base_ms=BASE_MS).documents()
                )
                if i == RUNS + seed - 1
            )
        )
        result = _gate(cli, db_url, candidate, tmp_path)
        assert result.exit_code == 0, result.output


def test_a_small_step_below_the_minimum_effect_passes(db_url, tmp_path, cli) -> None:
    candidate = _history(db_url, steps=[Step(RUNS, 1.03, "mse_loss")])
    assert _gate(cli, db_url, candidate, tmp_path).exit_code == 0
    assert _gate(cli, db_url, candidate, tmp_path, "--min-effect", "0.01").exit_code == 1


def test_per_kernel_minimum_effect(db_url, tmp_path, cli) -> None:
    candidate = _history(db_url, steps=[Step(RUNS, 1.15, "mse_loss")])
    assert _gate(cli, db_url, candidate, tmp_path, "--case-min-effect", "mse_loss=0.3").exit_code == 0


def test_an_accuracy_failure_fails_and_budget_growth_warns(db_url, tmp_path, cli) -> None:
    candidate = _history(db_url)
    # the errors the budget comes from move with it (the synthetic rows have max abs = budget x atol)
    candidate["accuracy"][0].update(passed=False, error_budget=3.5, max_abs_err=3.5e-3, max_rel_err=3.5e-3)
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 1 and "error budget 3.5 > 1" in result.output
    candidate["accuracy"][0].update(passed=True, error_budget=0.9, max_abs_err=0.9e-3, max_rel_err=0.9e-3)
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 0 and "Warnings" in result.output and "error budget grew" in result.output


def test_an_errored_case_fails(db_url, tmp_path, cli) -> None:
    candidate = _history(db_url)
    row = next(p for p in candidate["perf"] if p["implementation"] == "triton")
    row.update(error="the worker process was killed by SIGSEGV", median_ms=None, samples_ms=[])
    assert _gate(cli, db_url, candidate, tmp_path).exit_code == 1


def test_no_baseline_on_this_hardware_cannot_decide(db_url, tmp_path, cli) -> None:
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
    assert wrong_branch.exit_code == 2, wrong_branch.output
    assert "'release' is neither a run id, a run-id prefix nor a branch" in wrong_branch.output
    assert "synthetic/main (" in wrong_branch.output  # what exists


def test_bad_input_cannot_decide(db_url, tmp_path, cli) -> None:
    assert cli.invoke(main, ["gate", "--baseline", "main", "--db", db_url]).exit_code == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    result = cli.invoke(main, ["gate", "--artifact", str(bad), "--baseline", "main", "--db", db_url])
    assert result.exit_code == 2 and "bad.json" in result.output
    assert "no database at" in cli.invoke(
        main, ["gate", "--candidate", "ffff", "--baseline", "main", "--db", db_url]
    ).output or db_url.startswith("postgresql")
    open_database(db_url).dispose()
    missing = cli.invoke(main, ["gate", "--candidate", "ffff", "--baseline", "main", "--db", db_url])
    assert missing.exit_code == 2 and "no run with id 'ffff'" in missing.output


def test_candidate_from_the_database_by_run_id(db_url, tmp_path, cli) -> None:
    candidate = _history(db_url, steps=[Step(RUNS, 1.2, "softmax")])
    ingest_documents(open_database(db_url), [("c", parse_artifact(dumps(candidate)))])
    result = cli.invoke(
        main,
        [
            "gate",
            "--candidate",
            candidate["run"]["id"][:8],
            "--baseline",
            "synthetic/main",
            "--db",
            db_url,
            "--report-dir",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code == 1 and "scaled_masked_softmax/" in result.output


def test_bisect_names_the_commits_around_the_step(tmp_path, cli) -> None:
    db_url = f"sqlite:///{tmp_path / 'b.db'}"
    history = SyntheticHistory(runs=30, cases=4, samples=10, steps=[Step(17, 1.25, "mse_loss")])
    ingest_documents(
        open_database(db_url), [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(history.documents())]
    )
    case = next(c["key"] for c in history.case_list() if c["kernel"] == "mse_loss")
    result = cli.invoke(main, ["bisect", case, "--hardware", "H200", "--db", db_url])
    assert result.exit_code == 0, result.output
    assert f"between {history.commit(16)['sha'][:12]} and {history.commit(17)['sha'][:12]}" in result.output
    assert "+2" in result.output and "kernelwatch collect --kernels mse_loss" in result.output


@pytest.mark.browser
def test_html_report_opens_in_chromium_with_its_chart(db_url, tmp_path, cli) -> None:
    from tests.test_dashboard_browser import CHROMIUM

    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium")
    candidate = _history(db_url, steps=[Step(RUNS, 1.15, "mse_loss")])
    evil_perf = [p for p in candidate["perf"] if p["case"] == candidate["cases"][1]["key"]]
    for p in evil_perf:  # the baseline has no such case: the chart shows the other 9 and the report this one
        p["case"] = EVIL
    candidate["cases"].append({**candidate["cases"][1], "key": EVIL})
    _gate(cli, db_url, candidate, tmp_path)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
        )
        page = browser.new_page()
        page.goto((tmp_path / "report" / "gate.html").as_uri())
        page.wait_for_selector("#ratios td.case", timeout=30_000)
        bars = page.locator("#ratios .track").count()
        assert bars == 9
        assert "FAIL" in page.inner_text("h1")
        assert page.locator("a[href*='evil']").count() == 0 and page.locator("b").count() == 0
        assert '<a href="http://evil.example/">' in page.locator("body").text_content()  # in a closed <details>
        from kernelwatch.gate.detect import compare_case
        from kernelwatch.gate.judge import CaseVerdict, GateResult
        from kernelwatch.gate.reports import html_report

        run = {"id": "0" * 36, "commit": {"sha": "0" * 40, "branch": "b"}, "status": "complete"}
        chart_only = GateResult(
            candidate=run,
            baseline={"id": "1" * 36, "commit": "1" * 40, "branch": "b"},
            verdicts=[
                CaseVerdict(EVIL, "mse_loss", "pass", comparison=compare_case(EVIL, [1.0, 1.1, 1.2], [1.0, 1.1, 1.2]))
            ],
        )
        (tmp_path / "chart.html").write_text(html_report(chart_only))
        page.goto((tmp_path / "chart.html").as_uri())
        page.wait_for_selector("#ratios td.case", timeout=30_000)
        assert page.locator("a[href*='evil']").count() == 0
        assert '<a href="http://evil.example/">' in page.locator("#ratios td.case").first.text_content()
        browser.close()


# ---------------------------------------------------------------------------------------------
# Options, incomplete candidates, baselines by name
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "option",
    [
        ("--min-effect", "nan"),
        ("--min-effect", "inf"),
        ("--min-effect", "-1"),
        ("--min-effect", "0"),
        ("--min-effect", "10"),
        ("--fdr", "0"),
        ("--fdr", "nan"),
        ("--fdr", "2"),
        ("--fdr", "1"),
        ("--case-min-effect", "mse_loss=nan"),
        ("--case-min-effect", "mse_loss=0"),
        ("--case-min-effect", "mse_loss"),
        ("--case-min-effect", "no_such_kernel=0.1"),
        ("--case-min-effect", "=0.1"),
    ],
)
def test_option_values_are_validated(option, tmp_path, cli) -> None:
    """Bad option values once made the gate PASS (`--min-effect nan`, `--fdr 0`); each is an exit-2 one-liner."""
    db_url = f"sqlite:///{tmp_path / 'kw.db'}"
    candidate = _history(db_url, runs=3, steps=[Step(3, 1.5, "mse_loss")])
    result = _gate(cli, db_url, candidate, tmp_path, *option)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    # A value that is no number of the option's kind (NaN, inf, a bare 10 read as 1000%) is refused by the option
    # itself (kernelwatch/options.py: Finite, Effect), the others by the gate's own checks.
    heads = ("kernelwatch gate: error: cannot decide: --", f"kernelwatch gate: error: Invalid value for '{option[0]}'")
    assert len(lines) == 1 and lines[0].startswith(heads), result.output
    assert option[0] in lines[0]


def test_a_case_min_effect_may_name_a_case(db_url, tmp_path, cli) -> None:
    candidate = _history(db_url, runs=6, steps=[Step(6, 1.15, "mse_loss")])
    mse = [c["key"] for c in candidate["cases"] if c["kernel"] == "mse_loss"]
    args = [a for key in mse for a in ("--case-min-effect", f"{key}=0.3")]
    assert _gate(cli, db_url, candidate, tmp_path, *args).exit_code == 0
    assert _gate(cli, db_url, candidate, tmp_path, *args[:-2]).exit_code == 1  # one case left at 5%


def test_a_partial_candidate_fails_and_names_the_missing_cases(db_url, tmp_path, cli) -> None:
    candidate = _history(db_url, runs=6)
    dropped = {c["key"] for c in candidate["cases"][5:]}
    candidate["run"]["status"] = "partial"
    candidate["accuracy"] = [a for a in candidate["accuracy"] if a["case"] not in dropped]
    candidate["perf"] = [p for p in candidate["perf"] if p["case"] not in dropped]
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 1, result.output
    for key in dropped:
        assert key in result.output
    junit = ET.parse(tmp_path / "report" / "gate-junit.xml").getroot()
    missing = {
        c.get("name")
        for c in junit.iter("testcase")
        if (f := c.find("failure")) is not None and f.get("type") == "missing"
    }
    assert missing == dropped


def test_a_complete_run_of_fewer_kernels_is_judged_on_what_it_set_out_to_measure(db_url, tmp_path, cli) -> None:
    candidate = _history(db_url, runs=6)
    keep = {c["key"] for c in candidate["cases"] if c["kernel"] == "mse_loss"}
    candidate["accuracy"] = [a for a in candidate["accuracy"] if a["case"] in keep]
    candidate["perf"] = [p for p in candidate["perf"] if p["case"] in keep]
    assert _gate(cli, db_url, candidate, tmp_path).exit_code == 0
    candidate["accuracy"] = candidate["accuracy"][1:]  # one mse_loss accuracy case gone: now it is missing
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 1 and "missing" in result.output


def test_a_failed_candidate_with_nothing_measured_cannot_decide(db_url, tmp_path, cli) -> None:
    candidate = _history(db_url, runs=3)
    candidate["run"].update(status="failed", notes="the cuda worker could not describe its device")
    candidate.update(cases=[], accuracy=[], perf=[])
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 2, result.output
    assert "nothing comparable was measured" in result.output and "20 missing" in result.output


def test_an_errored_candidate_lists_its_errors(db_url, tmp_path, cli) -> None:
    candidate = _history(db_url, runs=3)
    candidate["run"]["status"] = "partial"
    for a in candidate["accuracy"][:2]:
        a.update(
            passed=False,
            error_budget=None,
            max_abs_err=None,
            max_rel_err=None,
            error="the worker process was killed by SIGKILL while running this case",
        )
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 1 and result.output.count("killed by SIGKILL") == 2


@pytest.mark.parametrize("broken", ["no samples", "no trials"])
def test_a_result_without_a_measurement_never_passes(broken, db_url, tmp_path, cli) -> None:
    candidate = _history(db_url, runs=3)
    if broken == "no samples":
        row = next(p for p in candidate["perf"] if p["implementation"] == "triton")
        row.update(samples_ms=[], median_ms=None, p20_ms=None, p80_ms=None, min_ms=None)
    else:
        candidate["accuracy"][0].update(trials=0)
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 1 and "unmeasured" in result.output, result.output


def _ingest(db_url: str, *docs: dict) -> None:
    ingest_documents(open_database(db_url), [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(docs)])


def test_baseline_by_run_id_prefix_and_branch_never_the_candidate(db_url, tmp_path, cli) -> None:
    docs = [to_data(d) for d in SyntheticHistory(runs=3, cases=4, samples=30, base_ms=BASE_MS).documents()]
    first, second, candidate = docs
    _ingest(db_url, first)
    path = tmp_path / "c.json"
    path.write_text(dumps(candidate))

    def gate(baseline: str, *source: str):
        src = list(source) or ["--artifact", str(path)]
        return cli.invoke(
            main, ["gate", *src, "--baseline", baseline, "--db", db_url, "--report-dir", str(tmp_path / "r")]
        )

    for spec in (first["run"]["id"], first["run"]["id"][:6]):
        result = gate(spec)
        assert result.exit_code == 0 and f"run `{first['run']['id'][:8]}`" in _md(tmp_path, "r"), result.output
    _ingest(db_url, candidate)  # now the candidate is the newest run of its branch
    result = gate("synthetic/main", "--candidate", candidate["run"]["id"])
    assert result.exit_code == 0 and f"baseline `{first['run']['commit']['sha'][:12]}`" in _md(tmp_path, "r")
    _ingest(db_url, second)
    result = gate("synthetic/main", "--candidate", candidate["run"]["id"][:8])
    assert result.exit_code == 0 and f"baseline `{second['run']['commit']['sha'][:12]}`" in _md(tmp_path, "r")
    itself = gate(candidate["run"]["id"][:10], "--candidate", candidate["run"]["id"])
    assert itself.exit_code == 2 and "is the candidate run itself" in itself.output


def test_a_branch_whose_only_run_is_the_candidate_says_so(db_url, tmp_path, cli) -> None:
    (candidate,) = map(to_data, SyntheticHistory(runs=1, cases=4, samples=30, base_ms=BASE_MS).documents())
    _ingest(db_url, candidate)
    result = cli.invoke(
        main, ["gate", "--candidate", candidate["run"]["id"], "--baseline", "synthetic/main", "--db", db_url]
    )
    assert result.exit_code == 2, result.output
    assert "1 run of synthetic/main on NVIDIA H200 (synthetic); the newest is the candidate" in result.output


def test_a_branch_measured_only_on_other_hardware_names_it(db_url, tmp_path, cli) -> None:
    docs = [to_data(d) for d in SyntheticHistory(runs=2, cases=4, samples=30, hardware=2, base_ms=BASE_MS).documents()]
    _ingest(db_url, *[d for d in docs if d["hardware"]["vendor"] == "ascend"])
    path = tmp_path / "c.json"
    path.write_text(dumps(docs[0]))
    result = cli.invoke(main, ["gate", "--artifact", str(path), "--baseline", "synthetic/main", "--db", db_url])
    assert result.exit_code == 2
    assert "no run of branch 'synthetic/main' on NVIDIA H200 (synthetic)" in result.output
    assert "2 on other hardware: Ascend910B4 (synthetic)" in result.output


def test_an_ambiguous_run_id_prefix_is_refused(tmp_path, cli) -> None:
    db_url = f"sqlite:///{tmp_path / 'kw.db'}"
    docs = [to_data(d) for d in SyntheticHistory(runs=3, cases=2, samples=5).documents()]
    for i, d in enumerate(docs):
        d["run"]["id"] = f"abcdef0{i}-0000-4000-8000-000000000000"
    _ingest(db_url, *docs[:2])
    path = tmp_path / "c.json"
    path.write_text(dumps(docs[2]))
    result = cli.invoke(main, ["gate", "--artifact", str(path), "--baseline", "abcdef0", "--db", db_url])
    assert result.exit_code == 2 and "ambiguous run-id prefix" in result.output


# ---------------------------------------------------------------------------------------------
# Between-run noise
# ---------------------------------------------------------------------------------------------
def test_a_launch_bound_outlier_run_is_noisy_not_a_regression(db_url, tmp_path, cli) -> None:
    """docs/design.md: 1-3 runs in 30 of a launch-bound case come out 2-6x slower. One such run is no regression
    but a suspect (confirm decides it); a step beyond what outlier runs do is a regression."""
    case = "mse_loss/persistent/fp16/n=4096,synthetic=0"  # 5 us
    candidate = _history(db_url, steps=[Step(RUNS, 2.5, case)], base_ms=0.005)
    result = _gate(cli, db_url, candidate, tmp_path)
    # such a run cannot be decided from the runs: a suspect, failing until a confirmation decides it
    assert result.exit_code == 1, result.output
    assert f"| `{case}` | suspect (confirm) |" in _md(tmp_path) and "| slower |" not in _md(tmp_path)
    assert "launch-bound: one run cannot be told from the 2-6x outlier runs" in _md(tmp_path)
    candidate = _history(db_url, steps=[Step(RUNS, 8.0, case)], base_ms=0.005, seed=1)
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 1 and f"| `{case}` | slower |" in _md(tmp_path)


def test_with_little_history_a_within_run_p_alone_does_not_fail(db_url, tmp_path, cli) -> None:
    """Two runs with tight samples (p_within ~ 1e-11) 6% apart, on a 25 us case with one run of history:
    within its between-run noise floor (doubled without history: 4.1%, z = 1.4). A 25% step is past it."""
    case = "mse_loss/persistent/fp16/n=4096,synthetic=0"
    candidate = _history(db_url, runs=1, steps=[Step(1, 1.06, case)], base_ms=0.025, noise=0.002)
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 1 and "| slower |" not in _md(tmp_path), result.output  # a suspect
    assert f"| `{case}` | suspect (confirm) |" in _md(tmp_path)
    assert "within this case's between-run noise" in _md(tmp_path)
    candidate = _history(db_url, runs=1, steps=[Step(1, 1.25, case)], base_ms=0.025, seed=3)
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 1 and f"| `{case}` | slower |" in _md(tmp_path)


def _repeats_by_commit() -> dict[str, list[Path]]:
    """ci/history's repeated perf runs, by the commit in their names (DATE-COMMIT-...-repeatN.json.gz)."""
    groups: dict[str, list[Path]] = {}
    for path in sorted((Path(__file__).resolve().parents[1] / "ci" / "history").glob("*repeat*.json.gz")):
        groups.setdefault(path.name.split("-")[3], []).append(path)
    return groups


REPEAT_GROUPS = _repeats_by_commit()
A_A_CASES = [
    (commit, i) for commit, paths in sorted(REPEAT_GROUPS.items()) for i in sorted({0, len(paths) // 2, len(paths) - 1})
]


@pytest.mark.parametrize("commit,held_out", A_A_CASES, ids=[f"{c}-{i}" for c, i in A_A_CASES])
def test_a_to_a_on_real_h200_repeats_passes(commit, held_out, db_url, tmp_path, cli) -> None:
    """Repeated H200 runs of one commit: the others are history and baseline, the held-out one is the
    candidate. The four MSELoss repeats of 653a5717 once said FAIL (+8.7% slower, p=5.4e-27, on a 5 us
    launch-bound case); 73812d88 has 14 repeats of MSELoss and softmax."""
    repeats = REPEAT_GROUPS[commit]
    assert len(repeats) >= 4
    H200_REPEATS = repeats
    others = [p for i, p in enumerate(H200_REPEATS) if i != held_out]
    assert cli.invoke(main, ["ingest", "--db", db_url, *map(str, others)]).exit_code == 0
    gate = ["gate", "--artifact", str(H200_REPEATS[held_out]), "--db", db_url, "--report-dir", str(tmp_path / "r")]
    if held_out == 0:  # every other repeat is newer: never a baseline by the rule
        refused = cli.invoke(main, [*gate, "--baseline", "main"])
        assert refused.exit_code == 2 and "up to the candidate" in refused.output, refused.output
        # nor its history: the same run, started a day after the others, is judged by them
        doc = to_data(load_artifact(H200_REPEATS[0]))
        for key in ("started_at", "finished_at"):
            doc["run"][key] = format_time(parse_time(doc["run"][key]) + dt.timedelta(days=1))
        (tmp_path / "later.json").write_text(dumps(doc))
        gate[2] = str(tmp_path / "later.json")
    result = cli.invoke(main, [*gate, "--baseline", "main"])
    # no regression and nothing else failing; a case 6-11% apart that the statistics call noisy (a
    # launch-bound MSELoss, the atomic one at 268M elements) is a suspect, which a same-device confirmation decides
    failing = re.findall(r"^\| `([^`]+)` \| ([^|]+?) \|", _md(tmp_path, "r"), re.M)
    assert all(status == "suspect (confirm)" for _, status in failing), result.output
    assert result.exit_code == (1 if failing else 0) and len(failing) <= 3, result.output  # 3 of 38 at most


EVIL = 'mse_loss/x/fp16/n=`1`|2,<a href="http://evil.example/">x</a>,[y](https://evil.example),www.evil.example'


def test_reports_escape_case_names_and_messages(db_url, tmp_path, cli) -> None:
    """A case key or an error message from an artifact must not become a link, HTML, or a broken table."""
    candidate = _history(db_url, runs=3)
    old = candidate["cases"][0]["key"]
    for section in ("cases", "accuracy", "perf"):
        for row in candidate[section]:
            if row.get("key", row.get("case")) == old:
                row["key" if section == "cases" else "case"] = EVIL
    row = next(a for a in candidate["accuracy"] if a["case"] == EVIL)
    row.update(passed=False, error="see <b>http://evil.example</b> | `x` [z](http://evil.example)")
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 1
    md = (tmp_path / "report" / "gate.md").read_text()
    line = next(x for x in md.splitlines() if "evil" in x and x.startswith("| "))
    cells = [c for c in re.split(r"(?<!\\)\|", line)][1:-1]
    assert len(cells) == 5, line  # no pipe of the name or message split the row
    assert cells[0].strip().startswith("`` ") and cells[0].strip().endswith(" ``")  # fence past the `1` inside
    message = cells[4]
    assert "<" not in message.replace("\\<", "") and "[" not in message.replace("\\[", ""), message
    assert "http://" not in message and "`" not in message.replace("\\`", ""), message
    page = (tmp_path / "report" / "gate.html").read_text()
    assert '<a href="http://evil' not in page and "<b>http" not in page
    assert "&lt;a href=&quot;http://evil.example/&quot;&gt;" in page


CONTROL = "\x1b[2J\x1b[32mPASS\x1b[0m\rok\x08\x07"  # clear screen, green "PASS", overwrite, backspace, bell


def test_control_characters_reach_terminals_and_reports_escaped(db_url, tmp_path, cli) -> None:
    """An artifact's branch, subject and error text may carry ESC, CR or backspace (a compiler's coloured
    message, a hostile branch name): printed raw they would repaint a reviewer's terminal, and JUnit XML
    cannot hold them at all. Every command and report shows them escaped."""
    candidate = _history(db_url, runs=3)
    candidate["run"]["commit"].update(branch="synthetic/main" + CONTROL, subject="fix" + CONTROL)
    bad = candidate["accuracy"][0]
    bad.update(passed=False, error="boom" + CONTROL)
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 1
    report = tmp_path / "report"
    texts = {"terminal": result.output, **{f.name: f.read_text() for f in report.iterdir() if f.suffix != ".png"}}
    for name, text in texts.items():
        assert not set(text) & set("\x1b\r\x08\x07"), name
    assert (
        "(synthetic/main\\x1b[2J\\x1b[32mPASS" in result.output
    )  # shown escaped, not swallowed (plain text, no Markdown)
    assert "main\\\\x1b\\[2J" in _md(tmp_path)  # gate.md: escaped, as Markdown source
    suites = ET.fromstring((report / "gate-junit.xml").read_text())
    assert any("boom" in (f.get("message") or "") for f in suites.iter("failure"))

    _ingest(db_url, candidate)
    for command in (["runs"], ["show", candidate["run"]["id"]], ["show", candidate["run"]["id"], "--format", "csv"]):
        out = cli.invoke(main, [*command, "--db", db_url])
        assert out.exit_code == 0 and not set(out.output) & set("\x1b\r\x08\x07"), command
    listed = cli.invoke(main, ["runs", "--db", db_url, "--format", "json"]).output
    assert "synthetic/main" + CONTROL in {r["branch"] for r in json.loads(listed)}  # data kept whole in JSON
    shown = cli.invoke(main, ["show", candidate["run"]["id"], "--db", db_url, "--format", "json"]).output
    assert "\x1b" not in shown and "boom" + CONTROL in {r["error"] for r in json.loads(shown)}


def test_an_empty_report_dir_is_refused(db_url, tmp_path, cli, monkeypatch) -> None:
    """--report-dir '' wrote the reports into the working folder; '.' still means it, on purpose."""
    candidate = _history(db_url, runs=3)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    result = _gate(cli, db_url, candidate, tmp_path / "x", "--report-dir", "")
    assert result.exit_code == 2 and "--report-dir '': give a folder" in result.output
    assert not (tmp_path / "gate.md").exists()
    assert _gate(cli, db_url, candidate, tmp_path / "x", "--report-dir", ".").exit_code == 0
    assert (tmp_path / "gate.md").exists()


def test_markdown_helpers() -> None:
    from kernelwatch.gate.reports import md_code, md_text

    assert md_code("a`b") == "`` a`b ``" and md_code("plain") == "`plain`" and md_code("x|y") == "`x\\|y`"
    assert md_text("*a* _b_ <i> [l](u) $x$ ~s~ & |") == r"\*a\* \_b\_ \<i> \[l\](u) \$x\$ \~s\~ \& \|"
    assert "http://" not in md_text("go to http://x.example") and "www." not in md_text("www.x.example")


def test_the_cost_per_call_can_be_gated_too(db_url, tmp_path, cli) -> None:
    """--metric call compares wall time per call (the collector's call samples). An A/A of real H200 repeats
    passes: the held-out repeat paid 1.6-2x more host time on six cases, so host time is judged with the
    outlier-run model (one run fails only past those runs). On SYNTHETIC copies with ten call samples a
    run, 3x is flagged noisy and 8x fails, and the GPU-time gate stays green."""
    repeats = REPEAT_GROUPS["73812d88"]
    assert cli.invoke(main, ["ingest", "--db", db_url, *map(str, repeats[:-1])]).exit_code == 0
    gate = ["gate", "--baseline", "main", "--db", db_url, "--report-dir", str(tmp_path / "r"), "--metric", "call"]
    same = cli.invoke(main, [*gate, "--artifact", str(repeats[-1])])
    assert same.exit_code == 0 and "wall time per call" in same.output, same.output

    slow = "scaled_masked_softmax/masked/fp16/density=0.1,direction=fwd,mask=batch,scale=0.125,shape=32x16x512x512"
    synthetic = f"sqlite:///{tmp_path / 'synthetic.db'}"
    copies = [to_data(d) for d in stepped_copies(load_artifact(repeats[0]), 9, 1.0, slow)]
    for doc in copies:
        for p in doc["perf"]:  # ten call samples a run, around the run's own GPU samples
            p["call_samples_ms"] = [v * 1.5 for v in p["samples_ms"][:10]]
            p["call_ms"] = sorted(p["call_samples_ms"])[5] if p["call_samples_ms"] else None
    ingest_documents(open_database(synthetic), [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(copies[:-1])])
    candidate, path = copies[-1], tmp_path / "c.json"
    gate = [
        "gate",
        "--baseline",
        "synthetic/step",
        "--db",
        synthetic,
        "--report-dir",
        str(tmp_path / "s"),
        "--metric",
        "call",
        "--artifact",
        str(path),
    ]
    for factor, code, status in ((3.0, 0, "slower (within noise)"), (8.0, 1, "slower")):
        row = next(p for p in candidate["perf"] if p["case"] == slow and p["implementation"] == "triton")
        row["call_samples_ms"] = [
            v * factor
            for v in next(p for p in copies[-2]["perf"] if p["case"] == slow and p["implementation"] == "triton")[
                "call_samples_ms"
            ]
        ]
        row["call_ms"] = sorted(row["call_samples_ms"])[5]
        path.write_text(dumps(candidate))
        result = cli.invoke(main, gate)
        assert result.exit_code == code and f"| `{slow}` | {status} |" in _md(tmp_path, "s"), result.output
    assert _md(tmp_path, "s").count("| slower |") == 1
    assert cli.invoke(main, gate[:-4] + ["--artifact", str(path)]).exit_code == 0
