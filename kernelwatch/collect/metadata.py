"""What a run records about itself: the commit, the software and the hardware."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

UNKNOWN = "unknown"
GIT_META_ENV = "KERNELWATCH_GIT_META"  # a JSON file standing in for git where the tree has no .git

# Datasheet ceilings (GB/s of HBM, dense bf16 TFLOP/s) keyed by the name the driver reports.
DATASHEET: dict[str, tuple[float, float]] = {
    "NVIDIA H200": (4800.0, 989.0),
    "NVIDIA H100 80GB HBM3": (3350.0, 989.0),
    "NVIDIA H100 PCIe": (2000.0, 756.0),
    "NVIDIA A100-SXM4-80GB": (2039.0, 312.0),
    "NVIDIA A100-SXM4-40GB": (1555.0, 312.0),
    "NVIDIA A100 80GB PCIe": (1935.0, 312.0),
}


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_info(cwd: str | Path | None = None) -> dict[str, Any]:
    """sha, branch, time, subject, dirty of the checkout at ``cwd``; unknown outside a checkout. Default: the
    project's repository (:mod:`kernelwatch.project`), the working directory where no project file names one."""
    if cwd is None:
        from kernelwatch.project import active_project

        project = active_project()
        cwd = project.repository if project.file is not None else "."
    meta_file = os.environ.get(GIT_META_ENV)
    if meta_file:
        data = json.loads(Path(meta_file).read_text())
        return {k: data.get(k) for k in ("sha", "branch", "time", "subject", "dirty")}
    cwd = Path(cwd)
    sha = _git(["rev-parse", "HEAD"], cwd)
    if sha is None:
        return {"sha": UNKNOWN, "branch": UNKNOWN, "time": None, "subject": None, "dirty": None}
    branch = (
        os.environ.get("GITHUB_HEAD_REF")
        or os.environ.get("GITHUB_REF_NAME")
        or _git(["rev-parse", "--abbrev-ref", "HEAD"], cwd)
        or UNKNOWN
    )
    status = _git(["status", "--porcelain", "--untracked-files=no"], cwd)
    return {
        "sha": sha,
        "branch": branch,
        "time": _git(["show", "-s", "--format=%cI", "HEAD"], cwd),
        "subject": _git(["show", "-s", "--format=%s", "HEAD"], cwd),
        "dirty": None if status is None else bool(status),
    }


def software_versions() -> dict[str, str | None]:
    import torch

    versions: dict[str, str | None] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": None,
        "torch_npu": None,
        "cuda": torch.version.cuda,
        "cann": None,
    }
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        import torch_npu

        versions["torch_npu"] = torch_npu.__version__
        versions["cann"] = _cann_version()
    except ImportError:
        pass
    if versions["triton"] is not None and torch.cuda.is_available():
        from kernelwatch.kernels.fastlaunch import path

        versions["launch"] = path()  # short or triton: it decides a small kernel's cost per call
        from kernelwatch.kernels.peers import versions as peer_versions

        versions.update(peer_versions())  # the peers this run timed (liger, flaggems, apex), where importable
    return versions


def cann_version(env: Mapping[str, str]) -> str | None:
    """The toolkit's version from its version files (``ASCEND_TOOLKIT_HOME`` or ``ASCEND_HOME_PATH``)."""
    for var in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"):
        home = env.get(var)
        if not home:
            continue
        for name in ("version.cfg", "compiler/version.info", "runtime/version.info", "version.info"):
            path = Path(home) / name
            if path.is_file():
                for line in path.read_text(errors="replace").splitlines():
                    if "version" in line.lower() and "=" in line:
                        return line.split("=", 1)[1].strip().strip('"[]')
    return None


def _cann_version() -> str | None:
    env = dict(os.environ)
    env.setdefault("ASCEND_TOOLKIT_HOME", "/usr/local/Ascend/ascend-toolkit/latest")
    return cann_version(env)


def _nvidia_smi(field: str) -> list[str] | None:
    """``field`` of every GPU of this machine as ``nvidia-smi --query-gpu`` lists it; None where nvidia-smi is
    missing or fails."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return lines if out.returncode == 0 and lines else None


def _nvidia_driver() -> str | None:
    versions = _nvidia_smi("driver_version")
    return versions[0] if versions else None


def machine_gpu_uuids() -> list[str] | None:
    """The UUIDs (``GPU-...``) of this machine's NVIDIA GPUs as ``nvidia-smi`` lists them, whatever
    ``CUDA_VISIBLE_DEVICES`` hides; None where nvidia-smi is missing or fails."""
    uuids = [u for u in _nvidia_smi("uuid") or [] if u.startswith("GPU-")]
    return uuids or None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def device_uuid(props: Any) -> str | None:
    """Which physical GPU a CUDA device index is (its UUID, ``GPU-...``), from its properties.

    Two devices of one model are one hardware identity, yet not always equally fast: on a two-H200 host
    the atomic MSELoss at 268M elements took 583 us on one GPU and 527 us on the other in every one of 14
    repeats. ``cuda:0`` names a different GPU under each ``CUDA_VISIBLE_DEVICES``; this does not."""
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid and not uuid.startswith("GPU-"):
        uuid = f"GPU-{uuid}"
    return uuid or None


def host_name() -> str | None:
    """This machine's host name, cut to the column (``kernelwatch.store.schema.NAME_LEN``); None where it has none."""
    from kernelwatch.store.schema import NAME_LEN

    name = socket.gethostname().strip()[:NAME_LEN]
    return name if name and name != UNKNOWN else None


def sm_clock_mhz(device_type: str, index: int = 0) -> int | None:
    """The SM clock (MHz) of device ``index`` now: ``torch.cuda.clock_rate`` (NVML, through pynvml), or pynvml
    itself where torch has no such function; None where neither can read it, on the CPU and on Ascend
    (torch_npu documents no clock reading)."""
    if device_type != "cuda":
        return None
    import torch

    try:
        if hasattr(torch.cuda, "clock_rate"):
            return int(torch.cuda.clock_rate(index))
        import pynvml

        pynvml.nvmlInit()
        uuid = device_uuid(torch.cuda.get_device_properties(index))
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else pynvml.nvmlDeviceGetHandleByIndex(index)
        return int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # no pynvml, no NVML library, a driver that refuses the query: the clock is not known
        return None


def hardware_info(device_type: str, index: int = 0) -> dict[str, Any]:
    """The hardware block of a run artifact for device ``index`` (peaks come from the backend's measurement)."""
    import torch

    from kernelwatch.kernels.device import describe

    if device_type == "cuda":
        props = torch.cuda.get_device_properties(index)
        bw, tf = DATASHEET.get(props.name, (None, None))
        return {
            "vendor": "nvidia",
            "device_name": props.name,
            "device_count": torch.cuda.device_count(),
            "compute_units": describe(torch.device("cuda", index)).compute_units,
            "memory_bytes": props.total_memory,
            "driver": _nvidia_driver(),
            "toolkit": f"CUDA {torch.version.cuda}",
            "peak_gbps_datasheet": bw,
            "peak_tflops_datasheet": tf,
        }
    if device_type == "npu":
        import torch_npu  # noqa: F401

        props = torch.npu.get_device_properties(index)
        cann = _cann_version()
        # vector cores, as the grids use them (kernelwatch.kernels.device.describe), not vector + cube cores
        return {
            "vendor": "ascend",
            "device_name": torch.npu.get_device_name(index),
            "device_count": torch.npu.device_count(),
            "compute_units": describe(torch.device("npu", index)).compute_units,
            "memory_bytes": props.total_memory,
            "driver": None,
            "toolkit": f"CANN {cann}" if cann else None,
            "peak_gbps_datasheet": None,
            "peak_tflops_datasheet": None,
        }
    return {
        "vendor": "cpu",
        "device_name": _cpu_name(),
        "device_count": 1,
        "compute_units": describe(torch.device("cpu")).compute_units,
        "memory_bytes": _memory_bytes(),
        "driver": None,
        "toolkit": "triton-interpreter",
        "peak_gbps_datasheet": None,
        "peak_tflops_datasheet": None,
    }
