"""The gate's silent-PASS probes: a hostile or careless user's candidates, each a committed H200 run (ci/history)
changed as named, gated with ``--baseline main`` on SQLite and PostgreSQL.
Before the gate bounded the machine and filtered its history, every one of them passed (exit 0)
unless its test says otherwise: a whole run 10x slower was "machine", junk runs of other branches and future-dated
runs widened the noise until a real regression was "noisy", a forged error budget was a warning, and a run without
its kernel timings passed on its reference rows."""

from __future__ import annotations

import copy
import datetime as dt
import functools
import re
import uuid
from pathlib import Path

import pytest

from kernelwatch.cli import main
from kernelwatch.store.artifact import dumps, load_artifact, parse_artifact, to_data
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.schema import format_time, parse_time

HISTORY = Path(__file__).resolve().parents[1] / "ci" / "history"
# Three full runs of one commit on the x2 host (62 kernel timings, 234 perf rows, 358 gating accuracy rows each)
FULL_HISTORY = [
    HISTORY / "2026-11-30T1851-73812d88-h200x2-full-2gpu-cold.json.gz",
    HISTORY / "2026-11-30T1853-73812d88-h200x2-full-1gpu.json.gz",
]
FULL = HISTORY / "2026-11-30T1856-73812d88-h200x2-full-2gpu.json.gz"
# 14 repeats of one commit (38 kernel timings each): six are main's history, the seventh the candidate
REPEATS = sorted(HISTORY.glob("*73812d88-h200-mse-softmax-perf-repeat*.json.gz"))[:7]
SLOWED = (
    "mse_loss/persistent/fp32/direction=fwd,reduction=mean,shape=268435456",
    "scaled_masked_softmax/masked/fp16/density=0.1,direction=fwd,mask=batch,scale=0.125,shape=32x16x1024x1024",
    "scaled_masked_softmax/masked/bf16/density=0.1,direction=bwd,mask=batch,scale=0.125,shape=32x16x512x512",
)
REFERENCES = ("torch_eager", "torch_compile", "cublas_linear")
YEAR = 60 * 24 * 366


@functools.cache
def _load(path: Path) -> dict:
    return to_data(load_artifact(path))


def run(path: Path) -> dict:
    return copy.deepcopy(_load(path))


def slower(doc: dict, factor: float, impls: tuple[str, ...] = ("triton",), cases: tuple[str, ...] = ()) -> dict:
    """Every quantile and sample of ``impls`` (of ``cases``; all when empty) times ``factor``."""
    doc = copy.deepcopy(doc)
    for p in doc["perf"]:
        if p["implementation"] in impls and (not cases or p["case"] in cases):
            for key in ("median_ms", "p20_ms", "p80_ms", "min_ms", "call_ms"):
                if p.get(key) is not None:
                    p[key] *= factor
            p["samples_ms"] = [v * factor for v in p["samples_ms"]]
            p["call_samples_ms"] = [v * factor for v in p.get("call_samples_ms") or []]
    return doc


def everything(doc: dict, factor: float) -> dict:
    return slower(doc, factor, ("triton", *REFERENCES))


def moved(
    doc: dict, minutes: int, branch: str | None = None, trigger: str | None = None, commit_too: bool = False
) -> dict:
    """The same run as another run (a new id), started ``minutes`` later (the commit time too with
    ``commit_too``), optionally on another branch or by another trigger."""
    doc = copy.deepcopy(doc)
    doc["run"]["id"] = str(uuid.uuid4())
    keys = ("started_at", "finished_at")
    for key in keys:
        if doc["run"].get(key):
            doc["run"][key] = format_time(parse_time(doc["run"][key]) + dt.timedelta(minutes=minutes))
    if commit_too and doc["run"]["commit"].get("time"):
        doc["run"]["commit"]["time"] = format_time(
            parse_time(doc["run"]["commit"]["time"]) + dt.timedelta(minutes=minutes)
        )
    if branch:
        doc["run"]["commit"]["branch"] = branch
    if trigger:
        doc["run"]["trigger"] = trigger
    return doc


def ingest(db_url: str, *docs: dict) -> None:
    ingest_documents(open_database(db_url), [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(docs)])


def gate(cli, db_url: str, doc: dict | None, tmp_path: Path, *extra: str):
    args = ["gate", "--baseline", "main", "--db", db_url, "--report-dir", str(tmp_path / "report"), *extra]
    if doc is not None:
        path = tmp_path / "candidate.json"
        path.write_text(dumps(doc))
        args += ["--artifact", str(path)]
    return cli.invoke(main, args)


def _md(tmp_path: Path) -> str:
    """The gate's Markdown report (the terminal gets plain text; the tables are in gate.md)."""
    return (tmp_path / "report" / "gate.md").read_text()


def statuses(output: str) -> dict[str, int]:
    """{verdict label (kernelwatch.gate.reports.LABELS): rows} of the gate's report tables."""
    counts: dict[str, int] = {}
    for status in re.findall(r"^\| `[^`]+` \| ([^|]+?) \|", output, flags=re.M):
        counts[status] = counts.get(status, 0) + 1
    return counts


def rows(output: str, case: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(f"| `{case}`"))


# ---------------------------------------------------------------------------------------------
# A whole run slower: the machine has a bound (MACHINE_BOUND, MACHINE_RUN_BOUND)
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def full_main(db_url: str) -> dict:
    """main's two full runs stored; returns the third, later one (the candidate's origin)."""
    ingest(db_url, *map(run, FULL_HISTORY))
    return run(FULL)


@pytest.mark.parametrize("factor", [10.0, 2.0, 1.5])
def test_every_implementation_slower_is_no_machine_of_this_model(factor, full_main, db_url, tmp_path, cli) -> None:
    """Probe: kernel, eager, compile and cuBLAS all x10 (or x2, x1.5) was "machine: 62 · pass: 358", exit 0. No two
    H200s in ci/history differ by more than 4.5% over a run: the run is unmeasured, exit 1."""
    result = gate(cli, db_url, everything(full_main, factor), tmp_path)
    _unmeasured(result, factor, tmp_path)


def _unmeasured(result, factor: float, tmp_path: Path) -> None:
    """Every kernel timing unmeasured, but the one GEMM case 5.8% slower than its cuBLAS even so (a regression)."""
    counts = statuses(_md(tmp_path))
    assert result.exit_code == 1, result.output
    assert "machine" not in counts and "unchanged" not in counts and "slower (within noise)" not in counts, counts
    assert counts["unmeasured"] >= 60 and counts["unmeasured"] + counts.get("slower", 0) == 62, counts
    note = next(line for line in _md(tmp_path).splitlines() if "the run is unmeasured" in line)
    assert re.search(r"this machine ran (\d+\.?\d*)x slower", note) and "re-run on a healthy runner" in note, note
    assert abs(float(re.search(r"ran (\d+\.?\d*)x", note).group(1)) / factor - 1) < 0.05, note


def test_with_the_measured_ceilings_cut_too(full_main, db_url, tmp_path, cli) -> None:
    doc = everything(full_main, 10.0)
    for key in ("peak_gbps", "peak_tflops", "peak_read_gbps"):
        if doc["hardware"].get(key):
            doc["hardware"][key] /= 10
    _unmeasured(gate(cli, db_url, doc, tmp_path), 10.0, tmp_path)


def test_a_partial_run_ten_times_slower(full_main, db_url, tmp_path, cli) -> None:
    doc = everything(full_main, 10.0)
    doc["run"]["status"] = "partial"
    kept = sorted({p["case"] for p in doc["perf"]})[::2]
    doc["perf"] = [p for p in doc["perf"] if p["case"] in kept]
    result = gate(cli, db_url, doc, tmp_path)
    counts = statuses(_md(tmp_path))
    assert result.exit_code == 1 and counts.get("unmeasured") and counts.get("missing"), result.output
    assert "machine" not in counts


def test_stored_and_gated_by_id(full_main, db_url, tmp_path, cli) -> None:
    doc = moved(everything(full_main, 10.0), 1)
    ingest(db_url, doc)
    _unmeasured(gate(cli, db_url, None, tmp_path, "--candidate", doc["run"]["id"]), 10.0, tmp_path)


def test_ten_times_slower_on_one_implementation(full_main, db_url, tmp_path, cli) -> None:
    """The kernel alone x10 is 62 regressions; eager alone x10 leaves the kernel's times, which pass."""
    result = gate(cli, db_url, slower(full_main, 10.0), tmp_path)
    assert result.exit_code == 1 and statuses(_md(tmp_path)).get("slower") == 62, result.output
    result = gate(cli, db_url, slower(full_main, 10.0, ("torch_eager",)), tmp_path)
    counts = statuses(_md(tmp_path))
    # eager's rows moved, the kernel's did not: nothing is slower or unmeasured; a launch-bound case that two GPUs
    # measured 10% apart is a suspect (kernelwatch confirm decides it), whatever eager did
    assert set(counts) <= {"unchanged", "slower (within noise)", "accuracy warning", "suspect (confirm)"}, result.output
    assert result.exit_code == (1 if "suspect (confirm)" in counts else 0), result.output


# ---------------------------------------------------------------------------------------------
# History that may judge: main's complete runs, up to the candidate and now
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def repeats_main(db_url: str) -> dict:
    """Six repeats of one commit stored as main's history; returns the seventh (the candidate's origin)."""
    ingest(db_url, *map(run, REPEATS[:-1]))
    return run(REPEATS[-1])


def _regressed(result, tmp_path: Path) -> None:
    assert result.exit_code == 1, result.output
    for case in SLOWED:
        assert "| slower |" in rows(_md(tmp_path), case), rows(_md(tmp_path), case)
    assert statuses(_md(tmp_path)).get("slower") == len(SLOWED), result.output


def test_a_regression_among_junk_runs_of_other_branches(repeats_main, db_url, tmp_path, cli) -> None:
    """Probe: six future-dated runs of branches junk0..junk5 (kernel 0.5-2x) made three +30% cases "noisy" ("runs
    of its history deviated this much 6 times in 14"). Other branches never judge main's candidates."""
    junk = [
        moved(slower(repeats_main, f), YEAR, branch=f"junk{i}", commit_too=True)
        for i, f in enumerate((0.5, 0.7, 0.85, 1.2, 1.5, 2.0))
    ]
    ingest(db_url, *junk)
    result = gate(cli, db_url, slower(repeats_main, 1.3, cases=SLOWED), tmp_path)
    _regressed(result, tmp_path)
    assert "history: 6 complete runs of main" in _md(tmp_path)
    assert "from 6 runs of main" in rows(_md(tmp_path), SLOWED[0])


def test_a_regression_beside_future_dated_runs_on_main(repeats_main, db_url, tmp_path, cli) -> None:
    """Probe: an empty run and x10 runs of main dated a year ahead (a runner's clock) entered the noise."""
    empty = moved(repeats_main, YEAR, commit_too=True)
    empty.update(perf=[], accuracy=[], profiler=[], cases=[])
    future = [moved(slower(repeats_main, 10.0), YEAR + i, commit_too=True) for i in range(1, 4)]
    ingest(db_url, empty, *future)
    result = gate(cli, db_url, slower(repeats_main, 1.3, cases=SLOWED), tmp_path)
    _regressed(result, tmp_path)
    assert "history: 6 complete runs of main" in _md(tmp_path)


def test_a_future_dated_candidate_is_judged_by_the_past_only(repeats_main, db_url, tmp_path, cli) -> None:
    """The candidate's clock a year ahead, main's future-dated x10 runs between now and it: only runs up to now
    judge it."""
    future = [moved(slower(repeats_main, 10.0), YEAR // 2 + i, commit_too=True) for i in range(3)]
    ingest(db_url, *future)
    result = gate(cli, db_url, moved(slower(repeats_main, 1.3, cases=SLOWED), YEAR, commit_too=True), tmp_path)
    _regressed(result, tmp_path)
    assert "history: 6 complete runs of main" in _md(tmp_path)


def test_a_pull_request_push_stored_before_the_gate(repeats_main, db_url, tmp_path, cli) -> None:
    """A pull request from a fork's branch named main, its timer broken (every time x10), stored by
    pull-request.yml before the gate: it was main's newest run, the baseline (the candidate 7x faster, PASS)."""
    push = moved(slower(repeats_main, 10.0), -1, branch="main", trigger="pr")
    ingest(db_url, push)
    result = gate(cli, db_url, slower(repeats_main, 1.3, cases=SLOWED), tmp_path)
    _regressed(result, tmp_path)
    assert push["run"]["id"][:8] not in _md(tmp_path).split("Note:")[0]
    assert "history: 6 complete runs of main" in _md(tmp_path)


# ---------------------------------------------------------------------------------------------
# Accuracy from the numbers, every kernel timing accounted for
# ---------------------------------------------------------------------------------------------
def _worst_case(doc: dict) -> str:
    """The gating case with the largest budget (the one a forged budget hides best)."""
    return max(
        (a for a in doc["accuracy"] if a["kind"] == "gate" and a["error_budget"]), key=lambda a: a["error_budget"]
    )["case"]


def test_a_forged_error_budget_fails(full_main, db_url, tmp_path, cli) -> None:
    """Probe: errors x1000 with the stored budget forged to 0.5 was "warning: error budget grew 2.2x ... still
    within tolerance", exit 0. The same gating inputs under the baseline's budget imply at least ~80x the budget."""
    doc = copy.deepcopy(full_main)
    case = _worst_case(doc)
    row = next(a for a in doc["accuracy"] if a["case"] == case and a["kind"] == "gate")
    row.update(max_abs_err=row["max_abs_err"] * 1000, max_rel_err=row["max_rel_err"] * 1000, error_budget=0.5)
    result = gate(cli, db_url, doc, tmp_path)
    assert result.exit_code == 1, result.output
    line = rows(_md(tmp_path), case)
    assert "| accuracy failed |" in line and "disagrees with its errors" in line, line
    assert "'passed: true' disagrees" in line


def test_a_forged_tolerance_or_an_impossible_budget_fails(full_main, db_url, tmp_path, cli) -> None:
    doc = copy.deepcopy(full_main)
    gated = [a for a in doc["accuracy"] if a["kind"] == "gate" and a["error_budget"]]
    loose, high = gated[0], gated[1]
    loose.update(rtol=loose["rtol"] * 100, atol=loose["atol"] * 100, error_budget=loose["error_budget"] / 100)
    high.update(error_budget=high["max_abs_err"] / high["atol"] * 2)  # more than the largest error allows
    result = gate(cli, db_url, doc, tmp_path)
    assert result.exit_code == 1, result.output
    assert "looser than the spec's" in rows(_md(tmp_path), loose["case"])
    assert "larger than its errors allow" in rows(_md(tmp_path), high["case"])


def test_a_run_without_its_kernel_timings_is_missing_them(full_main, db_url, tmp_path, cli) -> None:
    """Probe: a complete run whose kernel perf rows were removed (eager, compile and cuBLAS rows left) was
    "pass: 357 · warning: 1", exit 0."""
    doc = copy.deepcopy(full_main)
    doc["perf"] = [p for p in doc["perf"] if p["implementation"] != "triton"]
    result = gate(cli, db_url, doc, tmp_path)
    counts = statuses(_md(tmp_path))
    assert result.exit_code == 1 and counts.get("missing") == 62, result.output
    assert "but not the kernel" in _md(tmp_path)


def _fake_nvidia_smi(folder: Path, *uuids: str) -> dict[str, str]:
    """A PATH whose ``nvidia-smi`` lists ``uuids`` as this machine's GPUs (none: it fails, as with no driver)."""
    import os
    import stat

    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "nvidia-smi"
    lines = "".join(f"echo {u}\n" for u in uuids)
    tool.write_text(f"#!/bin/sh\n{lines}" + ("exit 0\n" if uuids else "exit 9\n"))
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_gate_here_refuses_a_candidate_that_names_a_gpu_this_machine_lacks(cli, tmp_path: Path) -> None:
    """``gate --here`` (the CI job gates the run it just collected): a real H200 run, gated on a machine whose
    nvidia-smi lists its GPU, is judged; the same run rewritten to name its baseline's GPU (so every cross-GPU rule
    would see one GPU and pass host-timed cases without confirm) is refused with the GPU named, exit 2; a machine
    that lists no GPU cannot check and says so. Without --here the rewritten run is judged as before."""
    import gzip
    import json

    history = Path(__file__).resolve().parents[1] / "ci" / "history"
    base = history / "2026-12-04T1541-6a28503c-h200-full-warm-peers-eager-first-gpud8119f1f.json.gz"
    cand = history / "2026-12-04T1841-8f25622f-h200-full-warm-peers-one-launch-ln-decode-gpu4fa55142.json.gz"
    url = f"sqlite:///{tmp_path / 'kw.db'}"
    assert cli.invoke(main, ["ingest", "--db", url, str(base)]).exit_code == 0
    real = "GPU-4fa55142-1e27-3c33-7f69-2434146b9107"
    doc = json.loads(gzip.decompress(cand.read_bytes()))
    theirs = {r["device_uuid"] for r in json.loads(gzip.decompress(base.read_bytes()))["perf"] if r["device_uuid"]}
    assert {r["device_uuid"] for r in doc["perf"] if r["device_uuid"]} == {real} and len(theirs) == 1
    for r in doc["perf"]:
        r["device_uuid"] = next(iter(theirs)) if r["device_uuid"] else None
    spoofed = tmp_path / "spoofed.json"
    spoofed.write_text(json.dumps(doc))
    gate = ["gate", "--db", url, "--baseline", "main", "--report-dir", str(tmp_path / "r")]

    honest = cli.invoke(main, [*gate, "--artifact", str(cand), "--here"], env=_fake_nvidia_smi(tmp_path / "a", real))
    assert honest.exit_code in (0, 1) and "KernelWatch gate:" in honest.output, honest.output
    assert "--here" not in honest.output
    refused = cli.invoke(
        main, [*gate, "--artifact", str(spoofed), "--here"], env=_fake_nvidia_smi(tmp_path / "b", real)
    )
    assert refused.exit_code == 2, refused.output
    assert next(iter(theirs)) in refused.output and "which this machine does not have" in refused.output
    assert real in refused.output
    blind = cli.invoke(main, [*gate, "--artifact", str(cand), "--here"], env=_fake_nvidia_smi(tmp_path / "c"))
    assert blind.exit_code == 2 and "lists no GPU" in blind.output, blind.output
    trusted = cli.invoke(main, [*gate, "--artifact", str(spoofed)])
    assert trusted.exit_code in (0, 1) and "KernelWatch gate:" in trusted.output, trusted.output
