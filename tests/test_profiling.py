"""Profiler output parsers on the documented formats and on real ncu output captured on an H200."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelwatch.collect.profiling import (
    ProfileError,
    ascend_launch,
    ascend_metrics,
    attribute,
    case_rows,
    meets,
    ncu_csv_kernels,
    ncu_export_command,
    ncu_import_command,
    parse_ascend_csv,
    parse_ncu_csv,
)

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _reference(name: str) -> str:
    for folder in (REFERENCE, FIXTURES):
        if (folder / name).exists():
            return (folder / name).read_text()
    pytest.skip(f"{name} not found")


def test_real_h200_ncu_csv() -> None:
    rows = {r["name"]: r for r in parse_ncu_csv(_reference("ncu_metrics_h200.csv"))}
    assert rows["dram_bytes_read"]["value"] == 268_451_072  # thousands separators handled
    assert rows["duration_ns"]["value"] == 123_712
    assert rows["dram_throughput_pct"]["meets_ideal"] is True
    assert rows["sm_throughput_pct"]["ideal"] is None
    compute = {r["name"]: r for r in parse_ncu_csv(_reference("ncu_metrics_h200.csv"), bound="compute")}
    assert compute["sm_throughput_pct"]["meets_ideal"] is False


def test_ncu_csv_with_na_extra_columns_and_missing_metric() -> None:
    text = (
        '==PROF== Connected\n"ID","Kernel Name","Metric Name","Metric Unit","Metric Value","Estimated Speedup"\n'
        '"0","k","gpu__time_duration.sum","ns","1,234","5"\n'
        '"0","k","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","n/a",""\n'
    )
    rows = {r["name"]: r for r in parse_ncu_csv(text)}
    assert rows["duration_ns"]["value"] == 1234
    assert rows["dram_throughput_pct"]["value"] is None and "n/a" in rows["dram_throughput_pct"]["error"]
    assert rows["l2_hit_rate_pct"]["value"] is None and "absent" in rows["l2_hit_rate_pct"]["error"]


@pytest.mark.parametrize(
    "text,message",
    [
        ("==PROF== nothing here\n", "no ncu CSV header"),
        ('"ID","Kernel Name"\n"0","k"\n', "lacks column"),
        ('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n', "no metric rows"),
    ],
)
def test_garbled_ncu_output_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_ncu_csv(text, "case x")


def test_ascend_op_summary_reference() -> None:
    parsed = parse_ascend_csv(
        _reference("ascend_op_summary_pipeutilization.csv"), "_layer_norm_fwd_fused", "op_summary.csv"
    )
    assert parsed["aiv_vec_ratio"] == pytest.approx((0.096 + 0.098 + 0.088) / 3)
    assert parsed["aiv_mte2_ratio"] == pytest.approx((0.072 + 0.061 + 0.063) / 3)
    assert parsed["block_dim"] == 128 and parsed["duration_us"] == pytest.approx((26.54 + 26.28 + 26.5) / 3)
    assert parsed["aiv_vec_wait_ratio"] is None  # not in the PipeUtilization pass: missing, not zero
    rows = {r["name"]: r for r in ascend_metrics(parsed)}
    assert rows["aiv_mte2_ratio"]["meets_ideal"] is False and rows["aiv_vec_ratio"]["meets_ideal"] is True
    assert rows["aiv_vec_wait_ratio"]["value"] is None and rows["aiv_vec_wait_ratio"]["error"]


def test_kernel_details_variant_with_step_id_and_block_num() -> None:
    text = (
        "Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Num,"
        "aiv_vec_wait_ratio,aiv_write_cache_hit,aiv_write_cache_miss_allocate\n"
        "1,_mse_persistent_kernel,_mse_persistent_kernel,AI_VECTOR_CORE,1,80.5,0,40,0.2,900,100\n"
        "1,other,other,AI_VECTOR_CORE,1,5,0,1,0.9,1,1\n"
    )
    parsed = parse_ascend_csv(text, "_mse_persistent")
    assert parsed["block_dim"] == 40 and parsed["duration_us"] == 80.5 and parsed["aiv_vec_wait_ratio"] == 0.2
    rows = {r["name"]: r for r in ascend_metrics(parsed)}
    assert rows["l2_write_hit_rate"]["value"] == pytest.approx(0.9)
    assert ascend_launch(text, "_mse_persistent") == "_mse_persistent_kernel"  # the row taken, not "other"
    assert ascend_launch(text.replace(",_mse_persistent_kernel,", ",opaque,", 1), "_mse_persistent") == (
        "_mse_persistent_kernel"
    )  # matched in the Type column when Name says nothing
    assert rows["aiv_vec_wait_ratio"]["meets_ideal"] is True


def test_ascend_errors_name_the_file() -> None:
    with pytest.raises(ProfileError, match="kd.csv: no Name"):
        parse_ascend_csv("a,b\n1,2\n", "x", "kd.csv")
    with pytest.raises(ProfileError, match="no row for a kernel matching"):
        parse_ascend_csv("Name,Duration(us)\nfoo,1\n", "_mse", "kd.csv")


def test_ideal_flags_and_ncu_commands(tmp_path) -> None:
    assert meets(">0.8", 0.9) and not meets("<0.01", 0.02) and meets(None, 1) is None
    report = tmp_path / "k.ncu-rep"
    cmd = ncu_export_command("ncu", "_mse_atomic|_mse_persistent_kernel", report, ["python", "-m", "x"])
    assert "--clock-control" in cmd and "none" in cmd and "regex:_mse_atomic|_mse_persistent_kernel" in cmd
    assert "--nvtx-include" in cmd and "--launch-count" not in cmd and cmd[-3:] == ["python", "-m", "x"]
    assert cmd[cmd.index("--export") + 1] == str(report)
    assert "--print-nvtx-rename" in ncu_import_command("ncu", report, by_range=True)
    assert "--print-nvtx-rename" not in ncu_import_command("ncu", report, by_range=False)


def _csv(rows: list[tuple[str, str, str, str]]) -> str:
    head = '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
    return head + "".join(f'"{i}","{k}","Command line profiler metrics","{m}","ns","{v}"\n' for i, k, m, v in rows)


def test_one_report_for_a_kernel_is_attributed_case_by_case_through_its_nvtx_ranges() -> None:
    """Case 0 launched a helper and its kernel, case 1 only a kernel another case's regex names, case 2
    nothing: each case takes its first launch matching its own regex, and says so when there is none."""
    t = "gpu__time_duration.sum"
    names = _csv(
        [
            ("0", "_zero_fill", t, "10"),
            ("1", "_mse_atomic", t, "1,500"),
            ("2", "_mse_persistent_kernel", t, "900"),
            ("3", "_mse_atomic", t, "700"),
        ]
    )
    ranges = _csv(
        [
            ("0", "kw-case-0", t, "10"),
            ("1", "kw-case-0", t, "1,500"),
            ("2", "kw-case-1", t, "900"),
            ("3", "kw-case-3", t, "700"),
        ]
    )
    launches = attribute(ncu_csv_kernels(names), ncu_csv_kernels(ranges))
    assert [k["name"] for k in launches[0]] == ["_zero_fill", "_mse_atomic"] and 2 not in launches
    rows = {r["name"]: r for r in case_rows(launches[0], "_mse_atomic")}
    assert rows["duration_ns"]["value"] == 1500 and "absent" in rows["dram_bytes_read"]["error"]
    assert {r["launch"] for r in rows.values()} == {"_mse_atomic"}  # the rows say which launch, not the helper
    assert case_rows(launches[1], "_mse_persistent_kernel")[0]["value"] == 900
    (missing,) = case_rows(launches.get(2, []), "_mse_atomic")
    assert missing["value"] is None and "no launch matching '_mse_atomic'" in missing["error"]
    assert missing.get("launch") is None
    (wrong,) = case_rows(launches[1], "_mse_atomic")
    assert "profiled: _mse_persistent_kernel" in wrong["error"]
    with pytest.raises(ProfileError, match="print-nvtx-rename"):
        attribute(ncu_csv_kernels(names), ncu_csv_kernels(names))  # an ncu that did not rename


def test_without_ncu_every_case_records_why_and_nothing_is_started(tmp_path, monkeypatch) -> None:
    from kernelwatch.collect.profile_phase import Job, profile_events

    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu here
    job = Job("mse_loss", "memory", {}, [("a", "_mse_atomic"), ("b", "_mse_atomic")])
    events = list(profile_events([job], ["cuda:0"], ()))
    rows = [e for e in events if e.kind == "rows"]
    assert [e.key for e in rows] == ["a", "b"]
    assert all(e.rows[0]["value"] is None and "ncu is not on the PATH" in e.rows[0]["error"] for e in rows)
    assert events[0].kind == "begin" and events[-1].kind == "end"


def test_the_profiling_phase_survives_a_case_that_raises_one_that_kills_its_process_and_one_that_hangs(
    monkeypatch,
) -> None:
    """A dry run on the CPU (no profiler: each case runs once in the target) of one kernel's batch: the cases
    after a crash go on in a fresh process, a hang is stopped after the no-progress limit, and each case's
    result says what happened to it."""
    from kernelwatch.collect.profile_phase import Job, profile_events

    variants = ("correct", "raises", "crashes", "after", "hangs", "nan")
    monkeypatch.setenv("PLANTED_PERF", "1")
    monkeypatch.setenv("PLANTED_VARIANTS", ",".join(variants))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    keys = [f"planted/{v}/fp32/shape=1000" for v in variants]
    job = Job("planted", "memory", {}, [(k, ".") for k in keys])
    events = list(profile_events([job], ["cpu"], ("tests.planted_kernels",), case_timeout_s=8))
    rows = {e.key: e.rows for e in events if e.kind == "rows"}
    assert set(rows) == set(keys)
    by = dict(zip(variants, keys, strict=True))
    assert rows[by["correct"]] == [] and rows[by["after"]] == [] and rows[by["nan"]] == []
    assert "raised in the profiled process: RuntimeError: planted failure" in rows[by["raises"]][0]["error"]
    assert "exited with status -11 during this case" in rows[by["crashes"]][0]["error"]
    assert "no progress in 8 s" in rows[by["hangs"]][0]["error"]
    ticks = [e.key for e in events if e.kind == "tick"]
    assert ticks == [by["correct"], by["raises"], by["after"], by["nan"]]  # a tick per case the target finished


def test_cube_bound_kernels_are_judged_by_the_cube_ratio_not_by_the_mseloss_ideals() -> None:
    """A matmul's MTE2 share has no 80% ideal; its cube ratio (aic_, or aic_mac_ in older CANN) has."""
    text = (
        "Name,Duration(us),Block Dim,aic_mac_ratio,aic_mte2_ratio,aiv_vec_ratio,aiv_mte2_ratio\n"
        "_fused_rmsnorm_matmul_persistent_kernel,120,24,0.85,0.4,0.2,0.3\n"
    )
    parsed = parse_ascend_csv(text, "_fused_rmsnorm_matmul")
    assert parsed["aic_cube_ratio"] == 0.85
    compute = {r["name"]: r for r in ascend_metrics(parsed, "compute")}
    assert compute["aic_cube_ratio"]["ideal"] == ">0.8" and compute["aic_cube_ratio"]["meets_ideal"] is True
    assert compute["aiv_mte2_ratio"]["ideal"] is None and compute["aiv_mte2_ratio"]["meets_ideal"] is None
    assert compute["aic_fixpipe_ratio"]["value"] is None and "absent" in compute["aic_fixpipe_ratio"]["error"]
    memory = {r["name"]: r for r in ascend_metrics(parsed, "memory")}
    assert memory["aiv_mte2_ratio"]["meets_ideal"] is False  # what the old, bound-blind ideals said
    assert "aic_fixpipe_ratio" not in memory  # a memory-bound kernel does not report missing cube columns


def test_ideals_follow_the_spec_bound_and_its_overrides() -> None:
    import importlib

    from kernelwatch.collect.profiling import ideals_for

    softmax = importlib.import_module("kernelwatch.kernels.scaled_masked_softmax").SPEC
    matmul = importlib.import_module("kernelwatch.kernels.fused_rmsnorm_matmul").SPEC
    mse = importlib.import_module("kernelwatch.kernels.mse_loss").SPEC
    assert ideals_for(mse.bound, mse.profiler_ideals)["aiv_mte3_ratio"] == "<0.01"
    assert ideals_for(softmax.bound, softmax.profiler_ideals)["aiv_mte3_ratio"] is None  # writes what it reads
    assert ideals_for(softmax.bound, softmax.profiler_ideals)["aiv_mte2_ratio"] == ">0.8"
    matmul_ideals = ideals_for(matmul.bound, matmul.profiler_ideals)
    assert matmul_ideals.get("aiv_mte2_ratio") is None and matmul_ideals["sm_throughput_pct"] == ">80"
    ncu = {r["name"]: r for r in parse_ncu_csv(_reference("ncu_metrics_h200.csv"), bound="compute")}
    assert ncu["dram_throughput_pct"]["ideal"] is None
    with pytest.raises(ValueError, match="unknown bound"):
        ideals_for("latency")


def test_a_real_h200_report_of_twenty_mse_loss_cases_gives_each_case_its_own_kernel() -> None:
    """Both imports of the one report ``collect --profile`` wrote for MSELoss's 20 perf cases (GPU-44732af5,
    ncu 2025.3.1): every case's range holds its kernel, and its counters are that launch's."""
    names = ncu_csv_kernels((FIXTURES / "ncu_h200_mse_loss_report.names.csv").read_text())
    ranges = ncu_csv_kernels((FIXTURES / "ncu_h200_mse_loss_report.ranges.csv").read_text())
    launches = attribute(names, ranges)
    assert sorted(launches) == list(range(20)) and all(len(v) == 1 for v in launches.values())
    assert {k["name"] for v in launches.values() for k in v} == {"_mse_atomic_kernel", "_mse_persistent_kernel"}
    for index, (entry,) in launches.items():
        regex = "_mse_atomic" if "atomic" in entry["name"] else "_mse_persistent_kernel"
        rows = {r["name"]: r for r in case_rows(launches[index], regex)}
        assert rows["duration_ns"]["value"] > 1000 and all(r["error"] is None for r in rows.values())
        assert {r["launch"] for r in rows.values()} == {entry["name"]}
    with pytest.raises(ProfileError, match="print-nvtx-rename"):
        attribute(names, names)


def test_a_profile_dir_that_cannot_be_written_is_a_warning_and_the_counters_stay(tmp_path, monkeypatch, capsys) -> None:
    from kernelwatch.collect.profile_phase import KEEP_ENV, _keep

    report = tmp_path / "k.ncu-rep"
    report.write_bytes(b"report")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(KEEP_ENV, str(blocker))
    warning = _keep(report, ["names", "ranges"], "mse_loss-cuda0-x")
    assert warning and KEEP_ENV in warning and "not kept" in capsys.readouterr().err
    monkeypatch.setenv(KEEP_ENV, str(tmp_path / "kept"))
    assert _keep(report, ["names", "ranges"], "mse/loss:cuda0") is None
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == [
        "mse_loss_cuda0.names.csv",
        "mse_loss_cuda0.ncu-rep",
        "mse_loss_cuda0.ranges.csv",
    ]


def test_a_failure_of_the_profiling_machinery_is_each_case_s_error_not_the_run_s_end(monkeypatch) -> None:
    from kernelwatch.collect import profile_phase
    from kernelwatch.collect.profile_phase import Job, profile_events

    def broken(self, job, cases, ncu):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(profile_phase.Runner, "_batch", broken)
    job = Job("mse_loss", "memory", {}, [("a", "."), ("b", ".")])
    events = list(profile_events([job], ["cpu"], ()))
    rows = {e.key: e.rows for e in events if e.kind == "rows"}
    assert set(rows) == {"a", "b"} and all("profiling failed: OSError" in r[0]["error"] for r in rows.values())
    assert events[-1].kind == "end"


def test_the_newest_real_h200_profile_names_each_case_s_launch_and_its_spec_regex_names_it() -> None:
    """The shipped history's newest H200 run with counters (collected after the launch was recorded): every
    counter with a value names its launch, the case's own profiler regex matches it, and a compute-bound
    kernel's counters come from a GEMM, never a statistics prepass."""
    import re

    from kernelwatch import kernels
    from kernelwatch.store.artifact import load_artifact

    specs = kernels.discover()
    runs = [load_artifact(p) for p in sorted((FIXTURES.parents[1] / "ci" / "history").glob("*.json.gz"))]
    named = [d for d in runs if d.hardware.device_name == "NVIDIA H200" and any(r.launch for r in d.profiler)]
    assert named, "no H200 run in ci/history names its launches"
    doc = max(named, key=lambda d: d.run.started_at)
    cases = {c.key: c for spec in specs.values() for c in spec.perf_cases()}
    valued = [r for r in doc.profiler if r.value is not None]
    assert valued and all(r.launch for r in valued)
    current = [r for r in valued if r.case in cases]  # a case retired from its spec since has no regex to check
    assert len(current) >= len(valued) // 2, (len(current), len(valued))
    for r in current:
        spec = specs[r.case.split("/")[0]]
        assert re.search(spec.profile_kernel(cases[r.case]), r.launch), (r.case, r.launch)
        assert "stats" not in r.launch and "rstd" not in r.launch, (r.case, r.launch)
