"""The gate judges what it measures, against one baseline rule (docs/design.md, Verdicts): each test fails on the
gate before these rules (d78e329 / 2e925a4)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pytest

from kernelwatch.cli import main
from kernelwatch.gate.detect import contamination
from kernelwatch.gate.judge import choose_baseline, decide
from kernelwatch.store.artifact import dumps, load_artifact, parse_artifact, to_data
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.queries import find_hardware, list_runs, match_hardware
from kernelwatch.store.synthetic import SyntheticHistory

HISTORY = Path(__file__).resolve().parents[1] / "ci" / "history"
FULL = HISTORY / "2026-11-30T2052-cd36845f-h200x2-full-2gpu.json.gz"  # aad199d7: 62 perf + 358 accuracy cases
ACCURACY_ONLY = HISTORY / "2026-11-30T2126-f7be52d5-h200x2-rmsnorm-accuracy.json.gz"  # d4c33bb3: 0 perf
REPEATS = sorted(HISTORY.glob("*73812d88-h200-mse-softmax-perf-repeat*.json.gz"))
BASE_MS = 0.1


def _ingest(db_url: str, *docs) -> None:
    ingest_documents(
        open_database(db_url),
        [(str(i), d if not isinstance(d, dict) else parse_artifact(dumps(d))) for i, d in enumerate(docs)],
    )


def _md(tmp_path: Path) -> str:
    """The gate's Markdown report (the terminal gets plain text; the tables are in gate.md)."""
    return (tmp_path / "report" / "gate.md").read_text()


def _gate(cli, db_url: str, doc, tmp_path: Path, baseline: str = "main", *extra: str):
    path = tmp_path / "candidate.json"
    path.write_text(dumps(doc))
    return cli.invoke(
        main,
        [
            "gate",
            "--artifact",
            str(path),
            "--baseline",
            baseline,
            "--db",
            db_url,
            "--report-dir",
            str(tmp_path / "report"),
            *extra,
        ],
    )


def _slower(doc: dict, factor: float, match=lambda p: True, impl: str = "triton") -> dict:
    doc = copy.deepcopy(doc)
    for p in doc["perf"]:
        if p["implementation"] == impl and match(p):
            for key in ("median_ms", "p20_ms", "p80_ms", "min_ms", "call_ms"):
                if p.get(key) is not None:
                    p[key] *= factor
            p["samples_ms"] = [v * factor for v in p["samples_ms"]]
            p["call_samples_ms"] = [v * factor for v in p.get("call_samples_ms") or []]
    return doc


def _later(doc: dict, minutes: int = 30) -> dict:
    """The same run as a new, later run (another id, started later): a candidate after its baseline."""
    import datetime as dt
    import uuid

    from kernelwatch.store.schema import format_time, parse_time

    doc = copy.deepcopy(doc)
    doc["run"]["id"] = str(uuid.uuid4())
    for key in ("started_at", "finished_at"):
        if doc["run"].get(key):
            doc["run"][key] = format_time(parse_time(doc["run"][key]) + dt.timedelta(minutes=minutes))
    return doc


# ---------------------------------------------------------------------------------------------
# One baseline rule
# ---------------------------------------------------------------------------------------------
def test_a_newer_accuracy_only_run_never_hides_a_tenfold_slowdown(db_url, tmp_path, cli) -> None:
    """Hostile-input probe: main's newest complete run was accuracy-only, so all 62 perf cases were "new" and a
    candidate 10x slower passed. The rule takes the run sharing the kernel timings."""
    full = to_data(load_artifact(FULL))
    _ingest(db_url, full, load_artifact(ACCURACY_ONLY))
    candidate = _slower(_later(full, 60), 10.0)
    result = _gate(cli, db_url, candidate, tmp_path)
    assert result.exit_code == 1, result.output
    assert _md(tmp_path).count("| slower |") == 62
    assert f"run `{full['run']['id'][:8]}`" in _md(tmp_path)


def test_never_newer_never_future_never_empty(db_url, tmp_path, cli) -> None:
    docs = [to_data(d) for d in SyntheticHistory(runs=4, cases=4, samples=30, base_ms=BASE_MS).documents()]
    first, second, candidate, newer = docs
    future, empty = _later(second, 60 * 24 * 365 * 50), _later(second, 1)
    future["run"]["commit"]["time"] = future["run"]["started_at"]
    empty.update(accuracy=[], perf=[], profiler=[])
    _ingest(db_url, first, second, newer, future, empty)
    result = _gate(cli, db_url, candidate, tmp_path, "synthetic/main")
    assert result.exit_code == 0 and f"run `{second['run']['id'][:8]}`" in _md(tmp_path), result.output
    engine = open_database(db_url, readonly=True)
    chosen = choose_baseline(engine, parse_artifact(dumps(candidate)), "synthetic/main")
    assert chosen["id"] == second["run"]["id"]  # not newer, not the one dated 2076, not the empty one
    named_empty = _gate(cli, db_url, candidate, tmp_path, empty["run"]["id"])
    assert named_empty.exit_code == 2 and "holds no results" in named_empty.output
    assert empty["run"]["id"] in named_empty.output  # whole ids, never cut


def test_a_fragmented_branch_is_judged_case_by_case(db_url, tmp_path, cli) -> None:
    """A newer run lacking a kernel timing once chose the older run, and with the older run lacking
    another the gate refused (exit 2, "baseline selection"). Each case now takes its newest earlier result."""
    docs = [to_data(d) for d in SyntheticHistory(runs=3, cases=4, samples=30, base_ms=BASE_MS).documents()]
    first, second, candidate = docs
    keys = sorted({p["case"] for p in second["perf"] if p["implementation"] == "triton"})
    second["perf"] = [p for p in second["perf"] if p["case"] != keys[0]]  # lacks one kernel timing
    first["perf"] = [p for p in first["perf"] if p["case"] != keys[1]]  # lacks another
    _ingest(db_url, first, second)
    engine = open_database(db_url, readonly=True)
    # the run supplying the most cases is the newer one
    assert choose_baseline(engine, parse_artifact(dumps(candidate)), "synthetic/main")["id"] == second["run"]["id"]
    result = _gate(cli, db_url, candidate, tmp_path, "synthetic/main")
    assert result.exit_code == 0, result.output
    assert "baseline assembled per case from 2 runs" in _md(tmp_path)
    assert f"run {second['run']['id'][:8]}" in _md(tmp_path) and f"run {first['run']['id'][:8]}" in _md(tmp_path)
    assert "| missing |" not in _md(tmp_path) and "new: " not in _md(tmp_path)


# ---------------------------------------------------------------------------------------------
# The gate judges what it measures
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [{"error_budget": 5.0}, {"nan_mismatches": 3}])
def test_accuracy_is_judged_from_the_measurement_not_the_flag(bad, db_url, tmp_path, cli) -> None:
    docs = [to_data(d) for d in SyntheticHistory(runs=3, cases=4, samples=30, base_ms=BASE_MS).documents()]
    _ingest(db_url, *docs[:2])
    candidate = docs[2]
    candidate["accuracy"][0].update(passed=True, **bad)
    result = _gate(cli, db_url, candidate, tmp_path, "synthetic/main")
    assert result.exit_code == 1, result.output
    assert "| accuracy failed |" in _md(tmp_path) and "disagrees with the measurement" in _md(tmp_path)


def test_every_case_three_times_slower_in_call_time_fails(db_url, tmp_path, cli) -> None:
    """Found by the hostile-input probe: --metric call with every case 3x slower was all "noisy: launch-bound"."""
    _ingest(db_url, *map(load_artifact, REPEATS[:-1]))
    candidate = _slower(to_data(load_artifact(REPEATS[-1])), 3.0)
    result = _gate(cli, db_url, candidate, tmp_path, "main", "--metric", "call")
    assert result.exit_code == 1, result.output
    assert "run-wide shift" in _md(tmp_path) and "| slower |" in _md(tmp_path)


def test_a_uniform_slowdown_shared_by_the_references_is_past_any_machine(db_url, tmp_path, cli) -> None:
    """A whole run 15% slower, its references with it, was "machine" (exit 0). No two H200s in ci/history
    differ by more than 4.5% over a run (MACHINE_RUN_BOUND): this machine is broken, the run unmeasured (exit 1)."""
    _ingest(db_url, *map(load_artifact, REPEATS[:-1]))
    everything = to_data(load_artifact(REPEATS[-1]))
    for impl in ("triton", "torch_eager", "torch_compile"):
        everything = _slower(everything, 1.15, impl=impl)
    result = _gate(cli, db_url, everything, tmp_path)
    assert result.exit_code == 1, result.output
    assert "| unmeasured |" in _md(tmp_path) and "| slower |" not in _md(tmp_path)
    assert "| machine |" not in _md(tmp_path) and "1.15x slower" in _md(tmp_path)
    assert "re-run on a healthy runner" in _md(tmp_path)
    kernel_only = _slower(to_data(load_artifact(REPEATS[-1])), 1.15)
    result = _gate(cli, db_url, kernel_only, tmp_path)
    assert result.exit_code == 1 and "| machine |" not in _md(tmp_path), result.output


# ---------------------------------------------------------------------------------------------
# Contaminated samples (docs/design.md: host delay never enters a sample)
# ---------------------------------------------------------------------------------------------
DECODE = "fused_rmsnorm_matmul/rstd_prepass/bf16/bias=False,direction=fwd,layout=contiguous,n=8192,shape=16x8192"


def _real_samples(name: str) -> list[float]:
    doc = load_artifact(HISTORY / name)
    return next(p.samples_ms for p in doc.perf if p.case == DECODE and p.implementation == "triton")


def _issue19_samples() -> tuple[list[float], list[float]]:
    """RMSNorm+MatMul rstd_prepass bf16 16x8192 on the H200: the baseline is the real run aad199d7 in ci/history
    (300 samples, p20 51.5 us, median 52.4); the candidate is the contaminated run a fresh H200 gave (not in
    ci/history), rebuilt from its numbers: 49.7-167.7 us, p20 51.3, median 70.8, p80 93.0 (ms)."""
    base = _real_samples("2026-11-30T2052-cd36845f-h200x2-full-2gpu.json.gz")
    clean = np.linspace(49.7, 52.6, 30)
    delayed = np.concatenate([np.linspace(55.0, 70.6, 20), np.linspace(71.0, 93.0, 30), np.linspace(94, 167.7, 20)])
    return base, list(np.concatenate([clean, delayed]) / 1e3)


def test_contamination_rule_on_the_issue_19_samples() -> None:
    base, cand = _issue19_samples()
    found = contamination(base, cand)
    assert found is not None and found.median_ratio > 1.3
    text = found.describe()
    assert "p20 and min unchanged" in text and "re-measure" in text and "absorbed host delay" in text
    assert contamination(base, [v * 1.35 for v in base]) is None  # a real slowdown moves every quantile
    assert contamination(base, base) is None
    # The real "cold" run of ci/history (11c43fe6): median +81%, but p20 and min moved too (64.5 vs 50.5 us):
    # not the signature of added host delay, so it is judged as a slowdown, never hidden as "unreliable".
    cold = _real_samples("2026-11-30T1851-73812d88-h200x2-full-2gpu-cold.json.gz")
    assert float(np.median(cold)) / float(np.median(base)) > 1.5 and contamination(base, cold) is None


def test_a_contaminated_case_is_unreliable_not_slower_within_noise(db_url, tmp_path, cli) -> None:
    docs = [to_data(d) for d in SyntheticHistory(runs=8, cases=4, samples=100, base_ms=0.0522).documents()]
    _ingest(db_url, *docs[:-1])
    candidate = docs[-1]
    base, cand = _issue19_samples()
    row = next(p for p in candidate["perf"] if p["implementation"] == "triton")
    before = next(p for p in docs[-2]["perf"] if p["case"] == row["case"] and p["implementation"] == "triton")
    before_samples = before["samples_ms"]
    scale = float(np.median(before_samples)) / float(np.median(base))
    row["samples_ms"] = [v * scale for v in cand]
    ordered = sorted(row["samples_ms"])
    row.update(
        median_ms=float(np.median(ordered)),
        p20_ms=float(np.quantile(ordered, 0.2)),
        p80_ms=float(np.quantile(ordered, 0.8)),
        min_ms=ordered[0],
    )
    result = _gate(cli, db_url, candidate, tmp_path, "synthetic/main")
    assert result.exit_code == 1, result.output
    line = next(x for x in _md(tmp_path).splitlines() if row["case"] in x and x.startswith("| "))
    assert "| unreliable |" in line and "p20 and min unchanged" in line and "re-measure" in line
    assert "within" not in line and "| slower |" not in line
    # Replayed from a CUDA graph a sample holds no host time: the same spread is the device's own, judged as
    # a slowdown (on 3 H200s a launch-bound 4,096-element MSELoss was once called unreliable so).
    row["timing"] = "graph"
    result = _gate(cli, db_url, candidate, tmp_path, "synthetic/main")
    line = next(x for x in _md(tmp_path).splitlines() if row["case"] in x and x.startswith("| "))
    assert "| unreliable |" not in line, line


# ---------------------------------------------------------------------------------------------
# Machine-aware noise (docs/design.md, machines of one model)
# ---------------------------------------------------------------------------------------------
def test_a_baseline_from_another_gpu_says_so_and_widens_the_noise(db_url, tmp_path, cli) -> None:
    """Two runs of one commit on the two GPUs of one host (744fa8bf, device labels swapped)."""
    one, other = sorted(HISTORY.glob("*744fa8bf*.json.gz"))
    _ingest(db_url, load_artifact(one))
    candidate = to_data(load_artifact(other))
    result = _gate(cli, db_url, candidate, tmp_path)
    page = (tmp_path / "report" / "gate.html").read_text()  # every case's row, passes included
    assert "baseline from another GPU (GPU-cadb0535, candidate on GPU-d83c984e)" in page
    assert "between-GPU noise 2.7%, default for memory-bound cases" in page
    assert re.search(
        r"Note: baseline from another GPU \(GPU-cadb0535, GPU-d83c984e\) for 38 of 38 compared cases", _md(tmp_path)
    ), result.output  # the two GPUs' labels are swapped between the runs
    # the atomic MSELoss differs 7-11% between these two GPUs (docs/design.md): within its class's between-GPU term
    assert "between-GPU noise 7.2%, default for atomic-reduction cases" in page
    # across GPUs a slowdown past the minimum effect is a suspect, sent to confirm: here that atomic case
    # alone (+10.6%), 1 of 38; nothing is a regression
    assert result.exit_code == 1 and "🔍 suspect (confirm): 1" in _md(tmp_path) and "| slower |" not in _md(tmp_path)
    key = "mse_loss/atomic/fp16/direction=fwd,reduction=mean,shape=268435456"
    assert f"| `{key}` | suspect (confirm) |" in _md(tmp_path)


# ---------------------------------------------------------------------------------------------
# Typed data, one hardware rule
# ---------------------------------------------------------------------------------------------
def test_decide_takes_run_documents_only(db_url) -> None:
    docs = list(SyntheticHistory(runs=2, cases=2, samples=5).documents())
    _ingest(db_url, docs[0])
    with pytest.raises(TypeError, match="RunDocument"):
        decide(open_database(db_url, readonly=True), to_data(docs[1]), "synthetic/main")


def test_one_hardware_rule_for_runs_bisect_and_ack(db_url) -> None:
    docs = list(SyntheticHistory(runs=1, cases=2, samples=5, hardware=2).documents())
    _ingest(db_url, *docs)
    engine = open_database(db_url, readonly=True)
    names = [h["device_name"] for h in match_hardware(engine, "synthetic")]
    assert len(names) == 2
    assert find_hardware(engine, "ascend910b4 (synthetic)")["device_name"].startswith("Ascend")  # exact, any case
    with pytest.raises(LookupError, match="must match exactly one hardware: it matches 2"):
        find_hardware(engine, "synthetic")
    assert {r["hardware"] for r in list_runs(engine, hardware="synthetic")} == set(names)
    fp = match_hardware(engine, "ascend")[0]["fingerprint"]
    assert [h["fingerprint"] for h in match_hardware(engine, fp[:8])] == [fp]


def test_a_gemm_slowdown_cublas_shares_is_the_machine(db_url, tmp_path, cli) -> None:
    """RMSNorm+MatMul's same-run reference is cuBLAS alone: the failing H200 had the fp16 cuBLAS of
    the same shape 4.3% slower too. The kernel +5.5% beside cuBLAS +4.5% is the machine; the kernel alone +8%
    fails; both +8% is within two H200s' GEMM difference (up to 14.6% at the power-capped Llama GEMM,
    MACHINE_BOUND 1.15): the machine, a suspect confirm decides; both +20% is past it: unmeasured."""
    full = to_data(load_artifact(FULL))
    _ingest(db_url, full)
    gemm = "fused_rmsnorm_matmul/rstd_prepass/bf16/bias=False,direction=fwd,layout=contiguous,n=4096,shape=4096x4096"
    both = _slower(
        _slower(_later(full), 1.055, lambda p: p["case"] == gemm),
        1.045,
        lambda p: p["case"] == gemm,
        impl="cublas_linear",
    )
    result = _gate(cli, db_url, both, tmp_path)
    line = next(x for x in _md(tmp_path).splitlines() if x.startswith(f"| `{gemm}`"))
    # within the machines' spread: the statistics say machine, a suspect that a same-device confirmation decides
    assert "| suspect (confirm) |" in line and "the statistics: machine" in line, line
    assert "relative to cublas\\_linear in the same runs +1.0%" in line, line
    assert result.exit_code == 1, result.output
    for factor, status, says in (
        (1.08, "suspect (confirm)", "the statistics: machine"),
        (1.2, "unmeasured", "ran 1.2x slower"),
    ):
        both = _slower(
            _slower(_later(full), factor, lambda p: p["case"] == gemm),
            factor,
            lambda p: p["case"] == gemm,
            impl="cublas_linear",
        )
        result = _gate(cli, db_url, both, tmp_path)
        line = next(x for x in _md(tmp_path).splitlines() if x.startswith(f"| `{gemm}`"))
        assert result.exit_code == 1 and f"| {status} |" in line and says in line, line
    assert "past the 1.15x any NVIDIA H200 in the history ran slower than another for GEMM cases" in line, line
    # cuBLAS 4.5% slower beside the kernel 9.4% slower: the reference explains half of it, not the machine
    # (a planted +10% step on one of three H200s looked so; benchmarks/cross_machine_aa.py)
    half = _slower(
        _slower(_later(full), 1.094, lambda p: p["case"] == gemm),
        1.045,
        lambda p: p["case"] == gemm,
        impl="cublas_linear",
    )
    result = _gate(cli, db_url, half, tmp_path)
    line = next(x for x in _md(tmp_path).splitlines() if x.startswith(f"| `{gemm}`"))
    assert result.exit_code == 1 and "| slower |" in line, line
    alone = _slower(_later(full), 1.08, lambda p: p["case"] == gemm)
    result = _gate(cli, db_url, alone, tmp_path)
    line = next(x for x in _md(tmp_path).splitlines() if x.startswith(f"| `{gemm}`"))
    assert result.exit_code == 1 and "| slower |" in line and "cublas\\_linear +0.0%" in line, line


def test_a_change_of_timing_method_is_named_in_the_row(db_url, tmp_path, cli) -> None:
    """Graph replay leaves out launch gaps that events keep: a row comparing the two methods says so."""
    _ingest(db_url, *map(load_artifact, REPEATS[:-1]))
    candidate = to_data(load_artifact(REPEATS[-1]))
    for p in candidate["perf"]:
        p["timing"] = "graph"
    assert _gate(cli, db_url, candidate, tmp_path).exit_code == 1
    assert "| slower |" not in _md(tmp_path), _md(tmp_path)  # launch-bound outlier runs are suspects
    rows = [x for x in _md(tmp_path).splitlines() if x.startswith("| `mse_loss")]
    assert rows and all(
        "timed by graph now, by events (before timing was recorded) in the baseline" in x for x in rows
    ), rows[:2]


def test_a_change_to_batched_timing_is_re_baselined_never_faster_or_slower(db_url, tmp_path, cli) -> None:
    """A launch-bound case timed as a graph of many calls (``graph-batch``) reads a third of its one-call time: against
    a one-call baseline that is a change of what the number means, not of speed, and the one-call cases are judged
    by one-call history only. Defect: 621ddb38's nine MSELoss cases "faster (within noise)" at -38% to -66%."""
    from kernelwatch.gate.statuses import REBASELINED

    _ingest(db_url, *map(load_artifact, REPEATS[:-1]))
    candidate = to_data(load_artifact(REPEATS[-1]))
    small = "shape=4096"
    for p in candidate["perf"]:
        if p["case"].startswith("mse_loss") and p["case"].endswith(small):
            p["timing"] = "graph-batch"
            for k in ("median_ms", "p20_ms", "p80_ms", "min_ms"):
                p[k] /= 3  # what batching does to a launch-bound case
            p["samples_ms"] = [v / 3 for v in p["samples_ms"]]
    batched = {p["case"] for p in candidate["perf"] if p.get("timing") == "graph-batch"}
    result = decide(open_database(db_url), parse_artifact(dumps(candidate)), "main")
    status = {v.case: v for v in result.verdicts if v.suite == "perf"}
    assert batched and all(status[c].status == REBASELINED for c in batched), [status[c].status for c in batched]
    assert all(
        "a batch of calls per sample now (graph-batch), with one call in the baseline" in status[c].message
        for c in batched
    )
    assert not any(status[c].failed for c in batched) and not result.faster & batched
    gated = _gate(cli, db_url, candidate, tmp_path)
    assert f"re-baselined: timing changed: {len(batched)}" in gated.output, gated.output
    single = [x for x in _md(tmp_path).splitlines() if x.startswith("| `mse_loss") and "shape=1048576`" in x]
    assert all(re.search(r"from 1[0-9] runs of main", r) for r in single), single[:1]


# ---------------------------------------------------------------------------------------------
# The error budget against the errors it comes from (kernelwatch.gate.budget)
# ---------------------------------------------------------------------------------------------
def _errors(out: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> tuple[float, float, float]:
    """(max abs, max rel, budget) by kernelwatch.collect.accuracy.compare's formulas."""
    diff, mag = np.abs(out - ref), np.abs(ref)
    nz = mag > 0
    return float(diff.max()), float((diff[nz] / mag[nz]).max()), float((diff / (atol + rtol * mag)).max())


def test_the_ceiling_bounds_every_budget_and_is_reached_where_both_errors_meet() -> None:
    from kernelwatch.gate.budget import budget_ceiling

    rng = np.random.default_rng(0)
    for _ in range(200):
        ref = rng.normal(size=257) * 10.0 ** rng.uniform(-3, 3, size=257)
        out = ref + rng.normal(size=257) * 10.0 ** rng.uniform(-6, -2)
        rtol, atol = 10.0 ** rng.uniform(-3, -1), 10.0 ** rng.uniform(-5, -1)
        a, r, budget = _errors(out, ref, rtol, atol)
        assert budget <= budget_ceiling(a, r, rtol, atol) * (1 + 1e-12) and budget <= a / atol * (1 + 1e-12)
    ref, out = np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.0, 4.4])  # one element holds both maxima
    a, r, budget = _errors(out, ref, 0.01, 0.001)
    assert budget_ceiling(a, r, 0.01, 0.001) == pytest.approx(budget)


def test_a_budget_that_disagrees_with_its_errors_is_named() -> None:
    """Errors x1000 on the same gating inputs under a budget that barely moved imply far more than the budget."""
    from types import SimpleNamespace

    from kernelwatch.gate.budget import BUDGET_RATIO_SPREAD, disagreements, implied_budget, recomputed_pass

    def row(scale: float, budget: float, **kw) -> SimpleNamespace:
        return SimpleNamespace(
            **{
                "max_abs_err": 2e-3 * scale,
                "max_rel_err": 4e-2 * scale,
                "rtol": 1e-2,
                "atol": 1e-3,
                "error_budget": budget,
                "seed": 7,
                "nan_mismatches": 0,
                "passed": budget <= 1,
                **kw,
            }
        )

    base = row(1.0, 0.3)
    assert disagreements(row(1.5, 0.45), base) == []  # an honest growth
    assert implied_budget(row(1000.0, 0.5), base) == pytest.approx(0.3 * 1000 / BUDGET_RATIO_SPREAD)
    named = disagreements(row(1000.0, 0.5), base)
    assert any("disagrees with its errors" in n and "imply at least 25" in n for n in named), named
    assert any("'passed: true' disagrees" in n for n in named) and recomputed_pass(row(1000.0, 0.5), base) is False
    assert implied_budget(row(1000.0, 0.5, seed=8), base) is None  # other inputs: nothing to compare
    assert any("larger than its errors allow" in n for n in disagreements(row(1.0, 2.5)))  # 2e-3 / 1e-3 = 2
    assert any("looser than the spec's" in n for n in disagreements(row(1.0, 0.3), spec=(1e-3, 1e-3)))
    assert disagreements(row(1.0, 0.3), spec=(1e-2, 1e-3)) == []
