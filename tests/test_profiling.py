"""Profiler output parsers on the documented formats and on real ncu output captured on an H200."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.profiling import ProfileError, ascend_metrics, meets, ncu_command, parse_ascend_csv, parse_ncu_csv

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
    text = ('==PROF== Connected\n"ID","Kernel Name","Metric Name","Metric Unit","Metric Value","Estimated Speedup"\n'
            '"0","k","gpu__time_duration.sum","ns","1,234","5"\n'
            '"0","k","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","n/a",""\n')
    rows = {r["name"]: r for r in parse_ncu_csv(text)}
    assert rows["duration_ns"]["value"] == 1234
    assert rows["dram_throughput_pct"]["value"] is None and "n/a" in rows["dram_throughput_pct"]["error"]
    assert rows["l2_hit_rate_pct"]["value"] is None and "absent" in rows["l2_hit_rate_pct"]["error"]


@pytest.mark.parametrize("text,message", [
    ("==PROF== nothing here\n", "no ncu CSV header"),
    ('"ID","Kernel Name"\n"0","k"\n', "lacks column"),
    ('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n', "no metric rows"),
])
def test_garbled_ncu_output_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_ncu_csv(text, "case x")


def test_ascend_op_summary_reference() -> None:
    parsed = parse_ascend_csv(_reference("ascend_op_summary_pipeutilization.csv"), "_layer_norm_fwd_fused",
                              "op_summary.csv")
    assert parsed["aiv_vec_ratio"] == pytest.approx((0.096 + 0.098 + 0.088) / 3)
    assert parsed["aiv_mte2_ratio"] == pytest.approx((0.072 + 0.061 + 0.063) / 3)
    assert parsed["block_dim"] == 128 and parsed["duration_us"] == pytest.approx((26.54 + 26.28 + 26.5) / 3)
    assert parsed["aiv_vec_wait_ratio"] is None  # not in the PipeUtilization pass: missing, not zero
    rows = {r["name"]: r for r in ascend_metrics(parsed)}
    assert rows["aiv_mte2_ratio"]["meets_ideal"] is False and rows["aiv_vec_ratio"]["meets_ideal"] is True
    assert rows["aiv_vec_wait_ratio"]["value"] is None and rows["aiv_vec_wait_ratio"]["error"]


def test_kernel_details_variant_with_step_id_and_block_num() -> None:
    text = ("Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Num,"
            "aiv_vec_wait_ratio,aiv_write_cache_hit,aiv_write_cache_miss_allocate\n"
            "1,_mse_persistent_kernel,_mse_persistent_kernel,AI_VECTOR_CORE,1,80.5,0,40,0.2,900,100\n"
            "1,other,other,AI_VECTOR_CORE,1,5,0,1,0.9,1,1\n")
    parsed = parse_ascend_csv(text, "_mse_persistent")
    assert parsed["block_dim"] == 40 and parsed["duration_us"] == 80.5 and parsed["aiv_vec_wait_ratio"] == 0.2
    rows = {r["name"]: r for r in ascend_metrics(parsed)}
    assert rows["l2_write_hit_rate"]["value"] == pytest.approx(0.9)
    assert rows["aiv_vec_wait_ratio"]["meets_ideal"] is True


def test_ascend_errors_name_the_file() -> None:
    with pytest.raises(ProfileError, match="kd.csv: no Name"):
        parse_ascend_csv("a,b\n1,2\n", "x", "kd.csv")
    with pytest.raises(ProfileError, match="no row for a kernel matching"):
        parse_ascend_csv("Name,Duration(us)\nfoo,1\n", "_mse", "kd.csv")


def test_ideal_flags_and_ncu_command() -> None:
    assert meets(">0.8", 0.9) and not meets("<0.01", 0.02) and meets(None, 1) is None
    cmd = ncu_command("ncu", "_mse_persistent_kernel", ["python", "-m", "x"])
    assert "--clock-control" in cmd and "none" in cmd and "regex:_mse_persistent_kernel" in cmd
    assert "--nvtx-include" in cmd and cmd[-3:] == ["python", "-m", "x"]


def test_collect_profile_on_a_machine_without_a_profiler_records_why(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    from collector.profiling import profile_cuda

    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu here
    (row,) = profile_cuda("mse_loss", "k", "cuda:0", (), ".", "memory")
    assert row["value"] is None and "ncu is not on the PATH" in row["error"]


def test_cube_bound_kernels_are_judged_by_the_cube_ratio_not_by_the_mseloss_ideals() -> None:
    """A matmul's MTE2 share has no 80% ideal; its cube ratio (aic_, or aic_mac_ in older CANN) has."""
    text = ("Name,Duration(us),Block Dim,aic_mac_ratio,aic_mte2_ratio,aiv_vec_ratio,aiv_mte2_ratio\n"
            "_fused_rmsnorm_matmul_persistent_kernel,120,24,0.85,0.4,0.2,0.3\n")
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

    from collector.profiling import ideals_for

    softmax = importlib.import_module("kernels.scaled_masked_softmax").SPEC
    matmul = importlib.import_module("kernels.fused_rmsnorm_matmul").SPEC
    mse = importlib.import_module("kernels.mse_loss").SPEC
    assert ideals_for(mse.bound, mse.profiler_ideals)["aiv_mte3_ratio"] == "<0.01"
    assert ideals_for(softmax.bound, softmax.profiler_ideals)["aiv_mte3_ratio"] is None  # writes what it reads
    assert ideals_for(softmax.bound, softmax.profiler_ideals)["aiv_mte2_ratio"] == ">0.8"
    matmul_ideals = ideals_for(matmul.bound, matmul.profiler_ideals)
    assert matmul_ideals.get("aiv_mte2_ratio") is None and matmul_ideals["sm_throughput_pct"] == ">80"
    ncu = {r["name"]: r for r in parse_ncu_csv(_reference("ncu_metrics_h200.csv"), bound="compute")}
    assert ncu["dram_throughput_pct"]["ideal"] is None
    with pytest.raises(ValueError, match="unknown bound"):
        ideals_for("latency")
