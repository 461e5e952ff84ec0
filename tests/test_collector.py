"""The collector on the CPU interpreter: real kernels, real worker processes, planted failures."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from collector.schedule import Dispatcher
from db.artifact import load_artifact, to_data
from kernelwatch.cli import main

PLANTED = ["collect", "--extra-kernels", "tests.planted_kernels", "--kernels", "planted", "--device", "cpu",
           "--no-progress"]


def _by_variant(doc: dict) -> dict[str, dict]:
    return {a["case"].split("/")[1]: a for a in doc["accuracy"]}


def test_planted_failures_are_recorded_and_the_suite_goes_on(tmp_path: Path, cli, monkeypatch) -> None:  # noqa: ANN001
    out = tmp_path / "run.json"
    result = cli.invoke(main, [*PLANTED, "--suite", "accuracy", "--case-timeout", "20", "--out", str(out)])
    assert result.exit_code == 3, result.output  # partial
    doc = to_data(load_artifact(out))
    assert doc["run"]["status"] == "partial"
    acc = _by_variant(doc)
    assert set(acc) == {"correct", "off_by_one_percent", "unwritten", "nan", "raises", "hangs", "crashes", "after"}
    assert acc["correct"]["passed"] and acc["correct"]["error_budget"] < 1
    assert acc["after"]["passed"], "a case after a crash and a hang must still run"
    wrong = acc["off_by_one_percent"]
    assert not wrong["passed"] and wrong["error_budget"] > 100 and wrong["error"] is None
    assert not acc["unwritten"]["passed"] and acc["unwritten"]["nan_mismatches"] == 2  # one element x 2 trials
    assert not acc["nan"]["passed"] and "NaN" in acc["nan"]["error"]
    assert "planted failure: this kernel always raises" in acc["raises"]["error"]
    assert "per-case time limit of 20 s" in acc["hangs"]["error"]
    assert "SIGSEGV" in acc["crashes"]["error"]
    assert all(a["seed"] >= 0 and a["trials"] == 2 for a in acc.values())


def test_collect_writes_to_the_database_and_show_reads_it(tmp_path: Path, cli, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("PLANTED_VARIANTS", "correct,off_by_one_percent")
    db = f"sqlite:///{tmp_path / 'kw.db'}"
    result = cli.invoke(main, [*PLANTED, "--db", db, "--seed", "7"])
    assert result.exit_code == 0, result.output
    runs = json.loads(cli.invoke(main, ["runs", "--db", db, "--format", "json"]).output)
    assert len(runs) == 1 and runs[0]["status"] == "complete"
    rows = json.loads(cli.invoke(main, ["show", runs[0]["id"], "--db", db, "--format", "json"]).output)
    assert {r["case"].split("/")[1]: r["passed"] for r in rows} == {"correct": True, "off_by_one_percent": False}


def test_devices_all_shards_over_workers_into_one_run(tmp_path: Path, cli, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("PLANTED_VARIANTS", "correct,after,off_by_one_percent")
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    out = tmp_path / "run.json"
    result = cli.invoke(main, [*PLANTED, "--suite", "accuracy", "--devices", "all", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = to_data(load_artifact(out))
    assert sorted(_by_variant(doc)) == ["after", "correct", "off_by_one_percent"]


def test_unknown_kernel_and_suite_are_named(cli) -> None:  # noqa: ANN001
    result = cli.invoke(main, ["collect", "--kernels", "nope", "--device", "cpu", "--out", "x.json"])
    assert result.exit_code != 0 and "unknown kernel 'nope'" in result.output
    result = cli.invoke(main, ["collect", "--suite", "speed", "--device", "cpu"])
    assert result.exit_code != 0 and "unknown suite 'speed'" in result.output


def test_dispatcher_hands_out_each_item_once_whatever_the_order() -> None:
    rng = random.Random(3)
    items = [("accuracy", f"case{i}") for i in range(97)]
    d = Dispatcher(items)
    workers = list(range(5))
    while not d.finished:
        for w in workers:
            if d.current(w) is None:
                d.take(w)
        busy = d.busy_workers
        w = rng.choice(busy)
        d.complete(w, {"by": w, "item": d.current(w)})
    results = d.results()
    assert [i for i, _ in results] == items
    assert all(r["item"] == i for i, r in results)
    assert len({r["by"] for _, r in results}) == 5


def test_dispatcher_refuses_duplicates_and_reports_missing() -> None:
    with pytest.raises(ValueError):
        Dispatcher(["a", "a"])
    d = Dispatcher(["a", "b"])
    d.take(0)
    d.complete(0, 1)
    with pytest.raises(RuntimeError, match="1 items have no result"):
        d.results()


@pytest.mark.slow
def test_every_mse_loss_accuracy_case_passes_on_the_interpreter(tmp_path: Path, cli) -> None:  # noqa: ANN001
    from kernels.mse_loss import SPEC

    out = tmp_path / "mse.json"
    result = cli.invoke(main, ["collect", "--kernels", "mse_loss", "--suite", "accuracy", "--device", "cpu",
                               "--devices", "all", "--no-progress", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = to_data(load_artifact(out))
    assert doc["run"]["status"] == "complete" and "perf suite" not in (doc["run"]["notes"] or "")
    assert len(doc["accuracy"]) == len(SPEC.accuracy_cases())
    assert [a["case"] for a in doc["accuracy"] if not a["passed"]] == []
    assert doc["hardware"]["toolkit"] == "triton-interpreter"
