"""Run metadata: git facts (or 'unknown' outside a checkout), versions, the CPU hardware fingerprint."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kernelwatch.collect.metadata import UNKNOWN, git_info, hardware_info, sm_clock_mhz, software_versions
from kernelwatch.store.artifact import hardware_fingerprint


def test_outside_a_git_checkout_everything_is_unknown_not_a_crash(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KERNELWATCH_GIT_META", raising=False)
    info = git_info(tmp_path)
    assert info == {"sha": UNKNOWN, "branch": UNKNOWN, "time": None, "subject": None, "dirty": None}


def test_inside_a_checkout_sha_branch_subject_and_dirty(tmp_path: Path, monkeypatch) -> None:
    for var in ("KERNELWATCH_GIT_META", "GITHUB_HEAD_REF", "GITHUB_REF_NAME"):
        monkeypatch.delenv(var, raising=False)
    run = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)
    run("init", "-q", "-b", "feature/x")
    (tmp_path / "f.txt").write_text("1")
    run("add", "f.txt")
    run("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "add a file")
    info = git_info(tmp_path)
    assert len(info["sha"]) == 40 and info["branch"] == "feature/x" and info["subject"] == "add a file"
    assert info["dirty"] is False and info["time"]
    (tmp_path / "f.txt").write_text("2")
    assert git_info(tmp_path)["dirty"] is True


def test_git_facts_can_come_from_a_file_where_the_tree_has_no_git(tmp_path: Path, monkeypatch) -> None:
    meta = tmp_path / "git.json"
    meta.write_text(json.dumps({"sha": "a" * 40, "branch": "main", "time": None, "subject": "s", "dirty": False}))
    monkeypatch.setenv("KERNELWATCH_GIT_META", str(meta))
    assert git_info(tmp_path)["sha"] == "a" * 40


def test_versions_and_cpu_fingerprint() -> None:
    versions = software_versions()
    assert versions["python"] and versions["torch"] and versions["triton"]
    assert "torch_npu" in versions and "cann" in versions and "cuda" in versions
    hw = hardware_info("cpu")
    assert hw["vendor"] == "cpu" and hw["toolkit"] == "triton-interpreter" and hw["compute_units"] >= 1
    assert hardware_fingerprint(hw) == hardware_fingerprint(dict(hw, peak_gbps=123.0))  # identity only
    # identity is vendor, device, compute units, memory: the device count is context of the run
    assert hardware_fingerprint(hw) == hardware_fingerprint(dict(hw, device_count=2))
    assert hardware_fingerprint(hw) != hardware_fingerprint(dict(hw, compute_units=hw["compute_units"] + 1))


def test_compute_units_are_the_ones_the_grids_size_from() -> None:
    """One definition: what run metadata records is what kernelwatch.kernels.device.describe gives the plans."""
    import torch

    from kernelwatch.kernels.device import describe

    assert hardware_info("cpu")["compute_units"] == describe(torch.device("cpu")).compute_units


def test_the_physical_device_is_named_by_uuid() -> None:
    """cuda:0 is another GPU under each CUDA_VISIBLE_DEVICES; a result names the physical GPU by its UUID."""
    from types import SimpleNamespace

    from kernelwatch.collect.metadata import device_uuid

    props = SimpleNamespace(
        uuid="8c1e0f6a-0000-1111-2222-333344445555", pci_domain_id=0, pci_bus_id=0x1B, pci_device_id=0
    )
    assert device_uuid(props) == "GPU-8c1e0f6a-0000-1111-2222-333344445555"
    assert device_uuid(SimpleNamespace(uuid="GPU-x")) == "GPU-x"
    assert device_uuid(SimpleNamespace()) is None


def test_the_sm_clock_is_none_where_nothing_can_read_it() -> None:
    """The CPU and Ascend have no clock reading; a CUDA query without a GPU or NVML gives None, never an error."""
    import torch

    assert sm_clock_mhz("cpu") is None and sm_clock_mhz("npu") is None
    if not torch.cuda.is_available():
        assert sm_clock_mhz("cuda") is None
    else:
        clock = sm_clock_mhz("cuda")
        assert clock is None or 100 <= clock <= 5000
