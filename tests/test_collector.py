"""The collector on the CPU interpreter: real kernels, real worker processes, planted failures."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelwatch.cli import main
from kernelwatch.collect.backends import CALL_BATCHES
from kernelwatch.collect.metadata import host_name
from kernelwatch.collect.perf import summarise
from kernelwatch.collect.schedule import Dispatcher, plan
from kernelwatch.gate.reports import LABELS
from kernelwatch.store.artifact import load_artifact, to_data
from kernelwatch.store.schema import whole_from_notes

PLANTED = [
    "collect",
    "--project",
    str(Path(__file__).resolve().parent / "projects" / "planted.toml"),
    "--kernels",
    "planted",
    "--device",
    "cpu",
    "--no-progress",
]


def _by_variant(doc: dict) -> dict[str, dict]:
    return {a["case"].split("/")[1]: a for a in doc["accuracy"]}


def test_planted_failures_are_recorded_and_the_suite_goes_on(tmp_path: Path, cli, monkeypatch) -> None:
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


def test_collect_writes_to_the_database_and_show_reads_it(tmp_path: Path, cli, monkeypatch) -> None:
    monkeypatch.setenv("PLANTED_VARIANTS", "correct,off_by_one_percent")
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'kw.db'}"
    result = cli.invoke(main, [*PLANTED, "--db", db, "--seed", "7"])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / ".kw-journal").exists(), "the journal goes once the run is in the database"
    runs = json.loads(cli.invoke(main, ["runs", "--db", db, "--format", "json"]).output)
    assert len(runs) == 1 and runs[0]["status"] == "complete"
    rows = json.loads(cli.invoke(main, ["show", runs[0]["id"], "--db", db, "--format", "json"]).output)
    assert {r["case"].split("/")[1]: r["passed"] for r in rows} == {"correct": True, "off_by_one_percent": False}


def test_a_database_that_cannot_be_opened_is_refused_before_measuring(tmp_path: Path, cli, monkeypatch) -> None:
    monkeypatch.setenv("PLANTED_VARIANTS", "correct")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")  # no database can be made under a file (root ignores permissions)
    result = cli.invoke(main, [*PLANTED, "--db", f"sqlite:///{tmp_path / 'a-file' / 'kw.db'}"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "a-file" in result.stderr and "accuracy" not in result.output  # said why; measured nothing
    assert not (tmp_path / ".kw-journal").exists()


def test_a_run_that_cannot_be_stored_stays_in_its_journal(tmp_path: Path, cli, monkeypatch) -> None:
    """The database opened when collect checked it, and was gone (a folder in its place) when the run was
    stored: the run stays in its journal and --resume stores it elsewhere."""
    gone = tmp_path / "kw-gone.db"
    monkeypatch.setenv("PLANTED_VARIANTS", "breaks_db")
    monkeypatch.setenv("PLANTED_BREAK_PATH", str(gone))
    monkeypatch.chdir(tmp_path)
    result = cli.invoke(main, [*PLANTED, "--db", f"sqlite:///{gone}"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert gone.is_dir()  # the planted kernel did break it
    (journal,) = (tmp_path / ".kw-journal").iterdir()
    assert f"the run is kept in {Path('.kw-journal') / journal.name}" in result.stderr
    db = f"sqlite:///{tmp_path / 'kw.db'}"
    result = cli.invoke(main, ["collect", "--resume", str(journal), "--db", db])
    assert result.exit_code == 0, result.output  # the run had ended: its own status, complete
    assert not journal.exists()
    runs = json.loads(cli.invoke(main, ["runs", "--db", db, "--format", "json"]).output)
    assert [r["status"] for r in runs] == ["complete"]


def test_devices_all_shards_over_workers_into_one_run(tmp_path: Path, cli, monkeypatch) -> None:
    monkeypatch.setenv("PLANTED_VARIANTS", "correct,after,off_by_one_percent")
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    out = tmp_path / "run.json"
    result = cli.invoke(main, [*PLANTED, "--suite", "accuracy", "--devices", "all", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = to_data(load_artifact(out))
    assert sorted(_by_variant(doc)) == ["after", "correct", "off_by_one_percent"]
    phases = doc["run"]["phases_s"]
    assert sorted(k for k in phases if k.startswith("busy.")) == ["busy.cpu:0", "busy.cpu:1", "busy.cpu:2"]
    assert all(phases[f"busy.cpu:{i}"] > 0 for i in range(3)), phases  # three cases, three workers, one each
    # Nothing compiles in the interpreter: no compile-ahead phase, no cache note, no compile counts.
    notes = doc["run"]["notes"] or ""  # a run with nothing to remark has no notes (the host is a field)
    assert "precompile" not in phases and "Triton cache" not in notes
    assert "kernel compilations" not in notes


@pytest.mark.parametrize("devices", [1, 2, 3, 8])
def test_devices_all_deals_every_item_once_over_any_number_of_devices(devices: int, monkeypatch) -> None:
    """One worker per device, whatever their number (8 GPUs: cuda:0..cuda:7), and the dealing loop gives each
    item to exactly one of them, the items of a group to one worker, every worker some work."""
    from kernelwatch.collect.pool import worker_devices

    monkeypatch.setattr("kernelwatch.collect.backends.device_count", lambda kind: devices)
    labels = [label for _, label in worker_devices("cuda", True)]
    assert labels == [f"cuda:{i}" for i in range(devices)]
    assert worker_devices("cuda", False) == [("cuda:0", "cuda:0")]
    items = [(f"g{i % 11}", f"case{i}") for i in range(40)]
    dispatcher = Dispatcher(items, plan(items, lambda i: i[0], lambda i: 1.0))
    held: dict[int, list] = {w: [] for w in range(devices)}
    rng = random.Random(devices)
    while not dispatcher.finished:
        idle = [w for w in range(devices) if dispatcher.current(w) is None]
        for w in idle:
            item = dispatcher.take(w)
            if item is not None:
                held[w].append(item)
        busy = dispatcher.busy_workers
        dispatcher.complete(rng.choice(busy), None)  # workers finish in any order
    dealt = [i for got in held.values() for i in got]
    assert sorted(dealt) == sorted(items)
    for group in {i[0] for i in items}:
        assert sum(any(i[0] == group for i in got) for got in held.values()) == 1, group
    assert all(held.values()), "every device got work"


def test_perf_inputs_are_drawn_on_the_device_with_the_host_stream_untouched() -> None:
    """kernelwatch.collect.inputs on the CPU with ``force`` (no GPU here): each draw of make_inputs' CPU generator went
    to the stream made for the device (it advanced, the host generator did not), and the inputs keep their shapes,
    dtypes and strides (strided and transposed layouts included). Without ``force`` the CPU is left alone, and
    the accuracy suite never enters it: its gating inputs stay the host's, bit for bit."""
    import inspect

    import torch

    import kernelwatch.collect.accuracy
    from kernelwatch.collect.inputs import drawn_on
    from kernelwatch.kernels import discover

    assert "drawn_on" not in inspect.getsource(kernelwatch.collect.accuracy)
    with drawn_on(torch.device("cpu")) as mode:
        assert mode is None
    for spec in discover().values():
        layouts = [c for c in spec.accuracy_cases() if any(k in c.key for k in ("strided", "transposed"))][:1]
        smallest = min(spec.perf_cases(), key=spec.bytes_moved)  # the path is the same at any size; 5 s less
        for case in [smallest, *layouts]:
            plain = spec.make_inputs(case, torch.device("cpu"), 7)
            with drawn_on(torch.device("cpu"), force=True) as mode:
                drawn = spec.make_inputs(case, torch.device("cpu"), 7)
            assert mode.redirected >= 1, case.key
            for host, stream in mode._streams.values():
                assert torch.equal(host.get_state(), torch.Generator().manual_seed(7).get_state()), case.key
                assert not torch.equal(stream.get_state(), host.get_state()), case.key
            for name, value in plain.items():
                if isinstance(value, torch.Tensor):
                    got = drawn[name]
                    assert (got.shape, got.dtype, got.stride(), got.device) == (
                        value.shape,
                        value.dtype,
                        value.stride(),
                        value.device,
                    ), (case.key, name)
                    assert got.float().abs().sum() > 0, (case.key, name)  # inputs are never all zeros


def test_unknown_kernel_and_suite_are_named(cli) -> None:
    result = cli.invoke(main, ["collect", "--kernels", "nope", "--device", "cpu", "--out", "x.json"])
    assert result.exit_code != 0 and "unknown kernel 'nope'" in result.output
    result = cli.invoke(main, ["collect", "--suite", "speed", "--device", "cpu"])
    assert result.exit_code != 0 and "unknown suite 'speed'" in result.output


MSE_KEY = "mse_loss/persistent/fp32/direction=fwd,reduction=none,shape=1"


def test_case_selects_exactly_one_key_and_a_selection_of_nothing_is_refused(tmp_path: Path, cli) -> None:
    """--case is exact (--match on the same text also takes ...shape=1280 style neighbours); a typo or a case
    this commit lacks is a usage error (exit 2, nothing written), never an empty "complete" run."""
    out = tmp_path / "run.json"
    collect = ["collect", "--kernels", "mse_loss", "--device", "cpu", "--no-progress", "--out", str(out)]
    result = cli.invoke(main, [*collect, "--case", MSE_KEY])
    assert result.exit_code == 0, result.output
    assert [a["case"] for a in to_data(load_artifact(out))["accuracy"]] == [MSE_KEY]
    assert len([k for k in _accuracy_keys() if MSE_KEY in k]) > 1  # the substring takes shape=128, 1024...
    out.unlink()
    for args, message in (
        (["--case", MSE_KEY + "9"], "did you mean"),
        (["--case", "nonsense"], "--case 'nonsense': no such case in mse_loss"),
        (["--match", "nonsense"], "--match 'nonsense' selects no case of mse_loss"),
    ):
        result = cli.invoke(main, [*collect, *args])
        assert result.exit_code == 2 and message in result.output, result.output
        assert not out.exists() and "Traceback" not in result.output


def test_an_artifact_folder_that_does_not_exist_is_refused_before_measuring(tmp_path: Path, cli) -> None:
    out = tmp_path / "absent" / "run.json"
    result = cli.invoke(main, ["collect", "--kernels", "mse_loss", "--device", "cpu", "--out", str(out)])
    assert result.exit_code == 2 and f"folder {out.parent} does not exist" in result.output, result.output
    assert "perf suite skipped" not in result.output and not out.parent.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--suite", "perf"], "nothing to run: the perf suite is skipped on cpu"),
        (["--match", ""], "--match '': empty text would select every case"),
        (["--kernels", ""], "'' names no kernel"),
        (["--kernels", ","], "',' names no kernel"),
        (
            ["--case", "mse_loss/persistent/fp32/direction=fwd,reduction=mean,shape=4096"],
            "is a case of the perf suite, which this run does not include (suites: accuracy)",
        ),
        (["--ci-job", "j" * 300], "the run cannot be recorded: run.ci_job: at most 255 characters (got 300)"),
        (["--out", ""], "an artifact needs a file name"),
    ],
)
def test_usage_errors_create_nothing(args: list[str], message: str, tmp_path: Path, cli, monkeypatch) -> None:
    """Exit 2 and one line, before a database, a folder or a journal is made (they were: a usage error
    created and migrated ./kernelwatch.db; a 300-character --ci-job left an empty journal that blocked the
    next run)."""
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "new" / "kw.db"
    result = cli.invoke(
        main, ["collect", "--device", "cpu", "--no-progress", "--kernels", "mse_loss", *args, "--db", f"sqlite:///{db}"]
    )
    assert result.exit_code == 2 and message in result.output, result.output
    assert "perf suite skipped" not in result.output and list(tmp_path.iterdir()) == []


def test_an_empty_journal_holds_nothing_and_does_not_block_the_next_run(tmp_path: Path, cli) -> None:
    out = tmp_path / "run.json"
    (tmp_path / "run.json.journal").write_text("")
    result = cli.invoke(main, [*PLANTED, "--out", str(out)], env={"PLANTED_VARIANTS": "correct"})
    assert result.exit_code == 0, result.output
    assert out.exists() and not (tmp_path / "run.json.journal").exists()


def _accuracy_keys() -> list[str]:
    from kernelwatch.kernels import discover

    return [c.key for c in discover()["mse_loss"].accuracy_cases()]


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
def test_every_mse_loss_accuracy_case_passes_on_the_interpreter(tmp_path: Path, cli) -> None:
    from kernelwatch.kernels.mse_loss.spec import SPEC

    out = tmp_path / "mse.json"
    result = cli.invoke(
        main,
        [
            "collect",
            "--kernels",
            "mse_loss",
            "--suite",
            "accuracy",
            "--device",
            "cpu",
            "--devices",
            "all",
            "--no-progress",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    doc = to_data(load_artifact(out))
    assert doc["run"]["status"] == "complete" and "perf suite" not in (doc["run"]["notes"] or "")
    assert len(doc["accuracy"]) == len(SPEC.accuracy_cases())
    assert [a["case"] for a in doc["accuracy"] if not a["passed"]] == []
    assert doc["hardware"]["toolkit"] == "triton-interpreter"


# ---------------------------------------------------------------------------------------------
# Reproducible verdicts (docs/design.md, Verdicts): the gating inputs are a function of the case alone
# ---------------------------------------------------------------------------------------------
AA_MATCH = "prologue_gamma/bf16"  # the cases that once failed one run of a commit and passed the next


def _collect_aa(cli, out: Path, *extra: str):
    return cli.invoke(
        main,
        [
            "collect",
            "--kernels",
            "fused_rmsnorm_matmul",
            "--match",
            AA_MATCH,
            "--suite",
            "accuracy",
            "--device",
            "cpu",
            "--no-progress",
            "--out",
            str(out),
            *extra,
        ],
    )


def test_two_cpu_runs_of_one_commit_are_bit_identical_and_gate_pass(tmp_path: Path, cli) -> None:
    """A/A on the CPU interpreter: two collector runs of the same code draw the same inputs (seeds from the
    case keys, whatever --seed says), so every budget is bit-identical and the gate passes."""
    from kernelwatch.collect.accuracy import case_seed
    from kernelwatch.kernels.fused_rmsnorm_matmul.spec import SPEC

    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert _collect_aa(cli, first, "--seed", "1").exit_code == 0
    assert _collect_aa(cli, second, "--seed", "2").exit_code == 0
    a, b = to_data(load_artifact(first)), to_data(load_artifact(second))
    expected = sum(AA_MATCH in c.key for c in SPEC.accuracy_cases())
    assert a["run"]["id"] != b["run"]["id"] and len(a["accuracy"]) == expected >= 6
    assert whole_from_notes(a["run"]["notes"]) == (set(), set())  # --match: not every case
    scope = a["run"]["scope"]  # what the gate expects of it: the spec's cases holding AA_MATCH, accuracy only (cpu)
    assert scope["match"] == AA_MATCH and scope["suites"] == ["accuracy"] and scope["kernels"] is not None
    assert a["accuracy"] == b["accuracy"]  # budgets, errors and seeds: the same bits
    seeds = {c.key: case_seed(c) for c in SPEC.accuracy_cases()}
    assert all(r["seed"] == seeds[r["case"]] and r["kind"] == "gate" for r in a["accuracy"])
    db = f"sqlite:///{tmp_path / 'kw.db'}"
    assert cli.invoke(main, ["ingest", "--db", db, str(first)]).exit_code == 0
    gate = cli.invoke(
        main,
        [
            "gate",
            "--artifact",
            str(second),
            "--baseline",
            a["run"]["id"][:8],
            "--db",
            db,
            "--report-dir",
            str(tmp_path / "report"),
        ],
    )
    assert gate.exit_code == 0, gate.output
    assert gate.output.startswith("KernelWatch gate: PASS") and f"{LABELS['pass']}: {expected}" in gate.output


def test_exploration_is_stored_apart_and_never_decides(tmp_path: Path, cli, monkeypatch) -> None:
    """--explore-seeds adds kind="explore" rows on fresh seeds; the gating rows are those of a plain run,
    the exit status ignores exploration, and the gate reports it without judging it."""
    monkeypatch.setenv("PLANTED_VARIANTS", "correct,off_by_one_percent")
    plain, explored = tmp_path / "plain.json", tmp_path / "explore.json"
    assert cli.invoke(main, [*PLANTED, "--suite", "accuracy", "--out", str(plain)]).exit_code == 0
    result = cli.invoke(
        main, [*PLANTED, "--suite", "accuracy", "--out", str(explored), "--explore-seeds", "3", "--seed", "11"]
    )
    assert result.exit_code == 0, result.output
    assert "exploration (kind explore; not part of the verdict): 1/2" in result.output
    p, e = to_data(load_artifact(plain)), to_data(load_artifact(explored))
    gate_rows = [r for r in e["accuracy"] if r["kind"] == "gate"]
    explore_rows = [r for r in e["accuracy"] if r["kind"] == "explore"]
    assert gate_rows == p["accuracy"]
    assert len(explore_rows) == 2 and all(r["trials"] == 2 * 3 for r in explore_rows)
    assert {r["seed"] for r in explore_rows}.isdisjoint({r["seed"] for r in gate_rows})
    assert e["run"]["status"] == "complete" and "exploration: 3 fresh seeds" in e["run"]["notes"]
    db = f"sqlite:///{tmp_path / 'kw.db'}"
    assert cli.invoke(main, ["ingest", "--db", db, str(plain)]).exit_code == 0
    gate = cli.invoke(
        main,
        [
            "gate",
            "--artifact",
            str(explored),
            "--baseline",
            p["run"]["id"],
            "--db",
            db,
            "--report-dir",
            str(tmp_path / "r"),
        ],
    )
    assert gate.exit_code == 1  # off_by_one_percent fails on its gating inputs, as before
    report = (tmp_path / "r" / "gate.md").read_text()  # the terminal gets the plain summary
    assert report.count("| accuracy failed |") == 1
    assert "Exploration (fresh seeds; not part of the verdict)" in report
    assert "1 of 2 cases passed" in report


# ---------------------------------------------------------------------------------------------
# Scheduling, the perf path on the interpreter, phases, the journal and SIGKILL recovery
# ---------------------------------------------------------------------------------------------
TIMED = [
    "collect",
    "--project",
    str(Path(__file__).resolve().parent / "projects" / "timing.toml"),
    "--kernels",
    "timed",
    "--device",
    "cpu",
]


def test_dispatcher_deals_a_group_to_one_worker_and_every_item_once() -> None:
    """Defect caught: variants sharing a baseline key dealt to different workers (each re-times the baselines)."""
    items = [f"c{i}" for i in range(12)]
    groups = plan(items, group_of=lambda i: int(i[1:]) % 4, cost_of=lambda i: int(i[1:]))
    assert groups[0] == ["c3", "c7", "c11"] and groups[-1] == ["c0", "c4", "c8"]  # largest total cost first
    d = Dispatcher(items, groups)
    taken: dict[int, list[str]] = {0: [], 1: [], 2: []}
    rng = random.Random(5)
    while not d.finished:
        for w in taken:
            if d.current(w) is None and (item := d.take(w)) is not None:
                taken[w].append(item)
        w = rng.choice(d.busy_workers)
        d.complete(w, w)
    owner = {item: w for w, got in taken.items() for item in got}
    for group in groups:
        assert len({owner[i] for i in group}) == 1, group
    assert [i for i, _ in d.results()] == items
    with pytest.raises(ValueError, match="exactly once"):
        Dispatcher(items, [items[:5]])


def test_lpt_plan_ends_sooner_than_suite_order_with_a_big_case_last() -> None:
    """Defect caught: dealing in suite order, a big case dealt last runs alone while the others idle."""
    costs = {f"c{i}": 1.0 for i in range(8)} | {"big": 8.0}
    items = list(costs)

    def makespan(groups: list[list[str]], workers: int = 2) -> float:
        load = [0.0] * workers
        for g in groups:
            w = load.index(min(load))
            load[w] += sum(costs[i] for i in g)
        return max(load)

    assert makespan(plan(items, lambda i: i, costs.__getitem__)) == 8.0
    assert makespan([[i] for i in items]) == 12.0


def test_profile_runs_after_the_suites_one_process_per_kernel_counted_in_the_progress(tmp_path: Path, cli) -> None:
    """--profile with --cpu-perf on the CPU: the profiling phase as it runs on a GPU, without a profiler. Its
    cases are items of the run's progress, each kernel says when its one process starts and ends, and the
    phase has its own line in the time summary."""
    out = tmp_path / "run.json"
    result = cli.invoke(main, [*TIMED, "--suite", "perf", "--cpu-perf", "--profile", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "profiling 6 timed case(s) on cpu in one profiled process" in result.output
    assert re.search(r"profiled timed on cpu: 6 case\(s\) in \d+ s\n", result.output), result.output
    assert "12/12 items (100%)" in result.output and "profiling (after the suites)" in result.output
    doc = to_data(load_artifact(out))
    assert doc["run"]["status"] == "complete" and doc["run"]["phases_s"]["profiling"] > 0
    assert "--profile with --cpu-perf: the profiling phase ran each case once" in doc["run"]["notes"]
    assert doc["profiler"] == [] and len(doc["perf"]) == 12


def _ceilings_from_notes(notes: str) -> dict[str, float]:
    return {m[0]: float(m[1]) for m in re.findall(r"(cpu:\d) copy ([0-9.]+) GB/s", notes)}


def test_devices_all_times_each_baseline_once_on_the_device_that_times_its_variants(
    tmp_path: Path, cli, monkeypatch
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    log = tmp_path / "baselines.log"
    monkeypatch.setenv("TIMED_LOG", str(log))
    out = tmp_path / "run.json"
    result = cli.invoke(main, [*TIMED, "--devices", "all", "--suite", "perf", "--cpu-perf", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = to_data(load_artifact(out))
    assert not (tmp_path / "run.json.journal").exists(), "the journal is removed once the run is stored"
    perf = doc["perf"]
    assert len(perf) == 12  # 6 cases x (triton, torch_eager)
    # Baselines: measured once per baseline key (3), each by the worker that timed both variants of that key.
    lines = log.read_text().split("\n")[:-1]
    assert sorted(line.split()[1] for line in lines) == sorted(
        {r["case"].replace("/v1/", "/*/").replace("/v2/", "/*/") for r in perf}
    )
    by_key: dict[str, set[str]] = {}
    for r in perf:
        by_key.setdefault(r["case"].split("/")[-1], set()).add(r["device"])
    assert all(len(devices) == 1 for devices in by_key.values()), by_key
    assert {r["device"] for r in perf} == {"cpu:0", "cpu:1"}
    # The stored samples are the samples summarised; cost per call is the median of its batches.
    for r in perf:
        assert r["error"] is None
        assert r["median_ms"] == statistics.median(r["samples_ms"])
        assert r["min_ms"] == min(r["samples_ms"])
        assert len(r["call_samples_ms"]) == CALL_BATCHES and r["call_ms"] == statistics.median(r["call_samples_ms"])
        assert r["peak_mem_bytes"] is None  # the CPU allocator keeps no high-water mark
        assert r["timing"] == "events"  # how the GPU time was taken reaches the artifact (no graphs on the CPU)
        # Where it was measured: fields of the result (a CPU has no UUID), never prose in the notes.
        assert r["host"] == host_name() and r["host"] and r["device_uuid"] is None
    assert "host: " not in doc["run"]["notes"] and "devices: " not in doc["run"]["notes"]
    # Each result is compared with the ceilings of the device that measured it.
    ceilings = _ceilings_from_notes(doc["run"]["notes"])
    assert set(ceilings) == {"cpu:0", "cpu:1"}
    for r in perf:
        expected = 100.0 * r["bytes"] / (ceilings[r["device"]] * 1e9) / (r["median_ms"] * 1e-3)
        assert r["pct_peak"] == pytest.approx(expected, rel=1e-9)
    hw = doc["hardware"]
    assert hw["peak_read_gbps"] > 0 and hw["peak_gbps"] > 0 and hw["peak_tflops"] > 0
    phases = doc["run"]["phases_s"]
    for key in (
        "setup",
        "workers",
        "suites",
        "total",
        "worker.startup",
        "worker.ceilings",
        "worker.perf.warmup",
        "worker.perf.timing",
        "worker.perf.call",
        "busy.cpu:0",
        "busy.cpu:1",
        "idle.cpu:0",
    ):
        assert key in phases, key
    assert phases["suites"] <= phases["total"]
    assert "time by phase" in result.stderr and "perf: cost per call" in result.stderr
    # Progress in a log (stderr is not a terminal here): plain lines, no carriage returns.
    assert "\r" not in result.stderr and "6/6 items (100%)" in result.stderr


def test_per_call_cost_fills_a_batch_and_reports_the_median() -> None:
    """call_samples: N calls per batch chosen so a batch lasts ~batch_ms; time per call of a 1 ms sleep."""
    import time

    import torch

    from kernelwatch.collect.backends import CALL_BATCHES, Backend

    calls = []

    def fn() -> None:
        calls.append(1)
        time.sleep(0.001)

    samples = Backend(torch.device("cpu"), time_on_cpu=True).call_samples(fn, batch_ms=60.0)
    assert len(samples) == CALL_BATCHES
    assert all(1.0 <= s < 30.0 for s in samples), samples  # a 1 ms sleep, on a loaded host
    assert len(calls) >= CALL_BATCHES * 3, "each batch holds several calls, not one"


def test_summary_is_computed_from_exactly_the_stored_samples() -> None:
    """Defect caught: 300 samples summarised but only the first 200 stored (the gate reads the stored ones)."""
    rng = random.Random(1)
    samples = [rng.uniform(1, 2) for _ in range(200)] + [rng.uniform(5, 6) for _ in range(100)]
    summary = summarise(samples)
    assert len(summary["samples_ms"]) == 300
    assert summary["samples_ms"] == samples
    assert summary["median_ms"] == statistics.median(samples) and summary["min_ms"] == min(samples)


def test_progress_is_a_line_per_n_items_in_a_log() -> None:
    import io

    from kernelwatch.collect.progress import Progress

    stream = io.StringIO()
    progress = Progress(100, stream=stream)
    for i in range(100):
        progress.update(f"case{i}")
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 20 and lines[-1].startswith("kernelwatch: 100/100 items (100%)")
    assert "\r" not in stream.getvalue()
    quiet = io.StringIO()
    off = Progress(10, enabled=False, stream=quiet)
    off.update("x")
    assert quiet.getvalue() == ""


def test_progress_is_a_bar_on_a_terminal() -> None:
    import fcntl
    import pty
    import struct
    import termios

    from kernelwatch.collect.progress import Progress

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a new pty is 0 columns wide
    with os.fdopen(follower, "w") as terminal:
        progress = Progress(3, stream=terminal)
        for i in range(3):
            progress.update(f"case{i}")
        progress.close()
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other end is closed and everything has been read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    drawn = b"".join(chunks).decode()
    assert "\r" in drawn and "3/3" in drawn and "kernelwatch:" not in drawn


def test_an_old_journal_is_never_overwritten(tmp_path: Path, cli) -> None:
    out = tmp_path / "run.json"
    journal = tmp_path / "run.json.journal"
    journal.write_text("{}\n")
    result = cli.invoke(main, [*TIMED, "--suite", "accuracy", "--no-progress", "--out", str(out)])
    assert result.exit_code == 1
    assert f"{journal}: a journal of an earlier run is there" in result.output
    assert journal.read_text() == "{}\n" and not out.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--resume", "x.journal", "--kernels", "timed"],
            "--resume stores a journal's run as it is; it cannot go with --kernels",
        ),
        (["--resume", "x.journal", "--devices", "all"], "cannot go with --devices"),
        (["--cpu-perf", "--device", "auto"], "--cpu-perf"),
        (["--case-timeout", "0"], "--case-timeout"),
    ],
)
def test_new_options_are_validated(cli, args: list[str], message: str) -> None:
    result = cli.invoke(main, ["collect", *args])
    assert result.exit_code == 2 and message in result.output, result.output


def test_resume_of_a_file_that_is_no_journal_is_one_line(tmp_path: Path, cli) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    result = cli.invoke(main, ["collect", "--resume", str(bad), "--out", str(tmp_path / "r.json")])
    assert result.exit_code == 2  # bad input
    assert result.stderr.strip() == f"kernelwatch collect: error: {bad}: line 1: not a JSON line"
    result = cli.invoke(main, ["collect", "--resume", str(tmp_path / "missing.journal")])
    assert result.exit_code == 2 and "missing.journal: no such file" in result.stderr


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.slow
def test_sigkill_keeps_every_finished_case_and_no_worker_survives(tmp_path: Path, cli) -> None:
    """A real collect on two interpreter workers, SIGKILLed while both workers are inside a case."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "TIMED_CASES": "8", "TIMED_SLEEP_S": "0.3", "TIMED_SLOW_FROM": "4"}
    out = tmp_path / "run.json"
    journal = tmp_path / "run.json.journal"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelwatch", *TIMED, "--devices", "all", "--suite", "accuracy", "--out", str(out)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 240
        finished: list[str] = []
        while time.monotonic() < deadline and proc.poll() is None:
            text = journal.read_text() if journal.exists() else ""
            finished = [line for line in text.split("\n") if '"kind":"result"' in line]
            if len(finished) >= 4:
                break
            time.sleep(0.1)
        assert len(finished) >= 4, proc.stderr.read().decode() if proc.poll() is not None else "no results"
        workers = _children(proc.pid)
        assert len(workers) >= 2
        time.sleep(0.5)  # both workers are now asleep inside a case that would last an hour
        proc.kill()
        killed_at = time.monotonic()
        while any(_running(p) for p in workers) and time.monotonic() - killed_at < 15:
            time.sleep(0.1)
        assert not [p for p in workers if _running(p)], "a worker outlived its killed parent"
        _, err = proc.communicate(timeout=60)  # EOF on stderr: every process holding it has exited
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in workers:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)  # the test's own orphans, should the check above fail
    stderr = err.decode()
    assert "Traceback" not in stderr and "Error" not in stderr, stderr
    assert not out.exists()

    journal_rows = [json.loads(line) for line in journal.read_text().split("\n") if '"kind":"result"' in line]
    assert len(journal_rows) >= 4
    copy = tmp_path / "copy.journal"
    copy.write_bytes(journal.read_bytes())
    result = cli.invoke(main, ["collect", "--resume", str(journal), "--out", str(out)])
    assert result.exit_code == 3, result.output  # partial
    assert not journal.exists(), "a recovered journal is removed once its run is stored"
    doc = to_data(load_artifact(out))
    assert doc["run"]["status"] == "partial"
    assert (
        f"recovered from its journal after the collector stopped: {len(journal_rows)} of 8 "
        "work items had finished" in doc["run"]["notes"]
    )
    assert {a["case"]: a for a in doc["accuracy"]} == {r["accuracy"][0]["case"]: r["accuracy"][0] for r in journal_rows}
    assert all(a["passed"] for a in doc["accuracy"])
    assert doc["hardware"]["toolkit"] == "triton-interpreter"
    # The same journal through `ingest` gives the same run.
    db = f"sqlite:///{tmp_path / 'kw.db'}"
    result = cli.invoke(main, ["ingest", "--db", db, str(copy)])
    assert result.exit_code == 0, result.output
    result = cli.invoke(main, ["export", doc["run"]["id"], "--db", db, "--output", str(tmp_path / "exported.json")])
    assert result.exit_code == 0, result.output
    exported = to_data(load_artifact(tmp_path / "exported.json"))
    assert exported["accuracy"] == doc["accuracy"] and exported["run"]["status"] == "partial"


def test_progress_estimate_is_sane_when_kernels_differ_in_seconds_per_cost() -> None:
    """A 5:54 run printed "~20:42 left": one rate over everything, measured on the heavy items that run first,
    and elapsed time over finished items while other workers' items were in flight. Replayed here on a fake
    clock: two workers, largest first; 10 heavy items (cost 10, 40 s each) and 90 light ones (cost 1, 0.25 s each,
    16x less time per unit of cost)."""
    import heapq
    import io
    import re

    from kernelwatch.collect.progress import Progress

    items = [("acc/heavy", 10.0, 40.0)] * 10 + [("acc/light", 1.0, 0.25)] * 90
    now = [0.0]
    stream = io.StringIO()
    groups = {"acc/heavy": 100.0, "acc/light": 90.0}
    progress = Progress(
        len(items), stream=stream, every=1, total_cost=190.0, group_costs=groups, workers=2, clock=lambda: now[0]
    )
    free, finishes = [0.0, 0.0], []
    for group, cost, seconds in items:  # two workers, each takes the next item when it is free
        start = heapq.heappop(free)
        heapq.heappush(free, start + seconds)
        finishes.append((start + seconds, group, cost, seconds))
    end = max(f[0] for f in finishes)
    estimates = []
    for t, group, cost, seconds in sorted(finishes):
        now[0] = t
        progress.update("x", cost, seconds, group)
        estimates.append((t, progress.left_s(t)))
    line = stream.getvalue().splitlines()[30]
    minutes, secs = map(int, re.search(r"~(\d+):(\d+) left", line).groups())
    assert abs(minutes * 60 + secs - estimates[30][1]) <= 1  # the line prints the estimate
    for t, left in estimates[12:]:  # once each group has a finished item
        truth = end - t
        assert abs(left - truth) <= max(0.25 * truth, 2.0), (t, left, truth)
    t, left = estimates[3]  # only heavy items done: the light ones are priced at the heavy rate, an honest worst case
    assert left < 2.5 * (end - t)


def test_progress_estimate_ignores_a_workers_warm_up() -> None:
    """On the CPU a worker's first case also pays the interpreter's warm-up (49 s, then ~2 s per case)."""
    from kernelwatch.collect.progress import Progress

    progress = Progress(
        14, enabled=False, total_cost=14.0, group_costs={"accuracy/k": 14.0}, workers=2, clock=lambda: 0.0
    )
    for seconds in (49.0, 49.0, 2.0, 2.0):
        progress.update("x", 1.0, seconds, "accuracy/k")
    assert progress.left_s(0.0) == 10 * 2.0 / 2  # 10 cases of ~2 s left on two workers, not ~100 s


QUIET_PROBE = """
import sys, warnings
import torch, triton, triton.language as tl
from kernelwatch.collect.worker import quiet_interpreter

@triton.jit
def _div(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(x + offs, mask=mask, other=1.0)
    b = tl.load(y + offs, mask=mask, other=0.0)  # masked-off lanes: 1 / 0 in NumPy
    tl.store(out + offs, a / b, mask=mask)

if sys.argv[1] == "quiet":
    quiet_interpreter()
warnings.simplefilter("always", RuntimeWarning) if sys.argv[1] == "loud" else None
x = torch.ones(3); out = torch.empty(3)
_div[(1,)](x, x, out, 3, BLOCK=8)
assert out.tolist() == [1.0, 1.0, 1.0]
"""


@pytest.mark.parametrize("mode", ["loud", "quiet"])
def test_interpreter_warnings_on_masked_lanes_stay_out_of_the_output(mode) -> None:
    """collect on the CPU printed "interpreter.py:599: RuntimeWarning: divide by zero" for lanes never stored."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", QUIET_PROBE, mode], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert ("RuntimeWarning" in out.stderr) == (mode == "loud"), out.stderr


def test_plan_deals_the_groups_it_is_told_to_first_before_any_other() -> None:
    """Defect caught: a case that must run in a fresh worker dealt after others (each then restarts a worker)."""
    costs = {"a": 5.0, "b": 1.0, "c": 3.0, "d": 2.0}
    groups = plan(list(costs), lambda i: i, costs.__getitem__, first=lambda i: i in ("b", "d"))
    assert groups == [["d"], ["b"], ["a"], ["c"]]
