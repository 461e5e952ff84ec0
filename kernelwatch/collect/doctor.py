"""What a collector run on this host will use, and what is missing for it: ``kernelwatch doctor``.

Each check returns a :class:`Check`. A required check that fails stops a CI job before it spends an hour
finding out: the device, its vendor's Triton (community Triton on CPU and CUDA, triton-ascend on Ascend and
never both), the CANN environment triton-ascend builds its launcher with (``ASCEND_HOME_PATH``, a C
compiler, Python headers), the profiler when ``--profile`` is asked for, and the database. Nothing here
launches a kernel; the environment and PATH are parameters so tests can take pieces away.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sysconfig
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kernelwatch.collect.metadata import cann_version
from kernelwatch.kernels.names import vendor as vendor_of

# triton-ascend 3.2.0 documents CANN 8.5.0 and torch_npu 2.7.1 (installation_guide.md); pyproject pins them
ASCEND_PINS = {"triton-ascend": "3.2.0", "torch-npu": "2.7.1", "cann": "8.5.0"}
COMPILERS = ("cc", "gcc", "clang")


@dataclass(frozen=True)
class Check:
    """One line of the report. ``ok`` False on a ``required`` check fails the doctor; ``reason`` says why in
    one line and what to do."""

    name: str
    ok: bool
    value: str
    reason: str = ""
    required: bool = True

    @property
    def failed(self) -> bool:
        return self.required and not self.ok

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _which(name: str, env: Mapping[str, str]) -> str | None:
    return shutil.which(name, path=env.get("PATH", ""))


# ---------------------------------------------------------------------------------------------
# Individual checks
# ---------------------------------------------------------------------------------------------
def cpu_only_torch() -> str | None:
    """The version of this PyTorch when it is built without CUDA (``torch.version.cuda`` is None), else None."""
    import torch

    return torch.__version__ if torch.version.cuda is None else None


def check_device(requested: str) -> tuple[Check, str]:
    """(check, the device type a run will use) for ``auto``, ``cuda``, ``npu`` or ``cpu``."""
    from kernelwatch.collect.backends import DEVICE_TYPES, check_available, detect_device, device_count

    if requested not in ("auto", *DEVICE_TYPES):
        return Check("device", False, requested, f"unknown device {requested!r}: use auto, cuda, npu or cpu"), "cpu"
    try:
        kind = detect_device() if requested == "auto" else requested
        check_available(kind)
    except Exception as exc:
        kind = requested if requested != "auto" else "cpu"
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        build = cpu_only_torch() if kind == "cuda" else None
        if build:
            reason = f"--device cuda: this PyTorch is the CPU-only build ({build}), which never sees a GPU"
        return Check("device", False, kind, reason), kind
    count = device_count(kind)
    name = "Triton interpreter"
    if kind == "cuda":
        import torch

        name = torch.cuda.get_device_name(0)
    elif kind == "npu":
        import torch

        name = torch.npu.get_device_name(0)
    return Check("device", True, f"{kind} x{count} ({name})"), kind


def check_compute_units(kind: str) -> Check:
    """The number the grids size from and the run records (vector cores on Ascend, SMs on CUDA)."""
    import torch

    from kernelwatch.kernels.device import describe

    try:
        info = describe(torch.device(kind if kind != "cpu" else "cpu"))
    except Exception as exc:
        return Check("compute units", False, "?", f"cannot read the device's core counts: {exc}")
    extra = f", {info.cube_units} AI cores" if info.cube_units else ""
    return Check("compute units", True, f"{info.compute_units} ({info.vendor}{extra})", required=False)


def check_versions(kind: str) -> list[Check]:
    """torch, triton and which distribution provides it, torch_npu and triton-ascend."""
    import torch

    build = cpu_only_torch() if kind == "cuda" else None
    checks = [
        Check(
            "torch",
            False,
            f"{torch.__version__} (CPU-only build)",
            "a CUDA run needs a CUDA build of PyTorch: pip install torch from the index of your CUDA version "
            "(https://pytorch.org/get-started/locally/)",
        )
        if build
        else Check("torch", True, torch.__version__, required=False)
    ]
    triton_spec = importlib.util.find_spec("triton")
    community, ascend = _dist_version("triton"), _dist_version("triton-ascend")
    if triton_spec is None:
        checks.append(
            Check(
                "triton",
                False,
                "missing",
                "triton is not importable: install kernelwatch[triton] (CPU, CUDA) or kernelwatch[npu] (Ascend)",
            )
        )
    elif kind == "npu" and community is not None:
        checks.append(
            Check(
                "triton",
                False,
                f"community triton {community}",
                "community triton is installed on an NPU host and overwrites triton-ascend's package: "
                "pip uninstall -y triton && pip install --force-reinstall triton-ascend=="
                f"{ASCEND_PINS['triton-ascend']}",
            )
        )
    elif kind == "npu" and ascend is None:
        checks.append(
            Check(
                "triton",
                False,
                "not triton-ascend",
                f"the NPU needs triton-ascend {ASCEND_PINS['triton-ascend']}: pip install kernelwatch[npu]",
            )
        )
    elif kind in ("cuda", "cpu") and community is None and ascend is not None:
        checks.append(
            Check(
                "triton",
                False,
                f"triton-ascend {ascend}",
                "triton-ascend cannot run CUDA or the CPU interpreter here: use community triton "
                "(kernelwatch[triton]) in its own environment",
            )
        )
    else:
        checks.append(
            Check("triton", True, f"triton-ascend {ascend}" if ascend else f"triton {community}", required=False)
        )
    npu = _dist_version("torch-npu") or _dist_version("torch_npu")
    if kind == "npu":
        for name, have in (("torch_npu", npu), ("triton-ascend", ascend)):
            pin = ASCEND_PINS[name.replace("_", "-")]
            if have is None:
                checks.append(Check(name, False, "missing", f"{name} is not installed: pip install kernelwatch[npu]"))
            else:
                note = "" if have.split("+")[0] == pin else f"not the documented {pin}"
                checks.append(Check(name, True, have + (f" ({note})" if note else ""), required=False))
    else:
        checks.append(Check("torch_npu", True, npu or "not installed", required=False))
        checks.append(Check("triton-ascend", True, ascend or "not installed", required=False))
    return checks


def check_cann(kind: str, env: Mapping[str, str]) -> list[Check]:
    """ASCEND_HOME_PATH (triton-ascend raises without it when it builds its launcher) and the CANN version."""
    required = kind == "npu"
    home = env.get("ASCEND_HOME_PATH")
    if not home:
        home_check = Check(
            "ASCEND_HOME_PATH",
            not required,
            "not set",
            "ASCEND_HOME_PATH is not set: source CANN's set_env.sh (ci/ascend-env.sh does) before kernelwatch"
            if required
            else "",
            required=required,
        )
    elif not Path(home).is_dir():
        home_check = Check(
            "ASCEND_HOME_PATH", not required, home, f"ASCEND_HOME_PATH={home} is not a directory", required=required
        )
    else:
        home_check = Check("ASCEND_HOME_PATH", True, home, required=required)
    version = cann_version(env)
    pin = ASCEND_PINS["cann"]
    if version is None:
        cann = Check(
            "CANN",
            not required,
            "not found",
            "no CANN version file under ASCEND_TOOLKIT_HOME / ASCEND_HOME_PATH" if required else "",
            required=required,
        )
    else:
        note = "" if version.startswith(pin) else f" (not the documented {pin})"
        cann = Check("CANN", True, version + note, required=False)
    return [home_check, cann]


def check_compiler(kind: str, env: Mapping[str, str]) -> list[Check]:
    """A C compiler and Python headers: Triton builds its launcher stub with them on CUDA and Ascend."""
    required = kind in ("cuda", "npu")
    found = next(
        (path for name in ([env["CC"]] if env.get("CC") else []) + list(COMPILERS) if (path := _which(name, env))), None
    )
    compiler = Check(
        "C compiler",
        found is not None or not required,
        found or "not found",
        ""
        if found or not required
        else "no C compiler (cc, gcc, clang or $CC) on PATH: Triton compiles its launcher with one; install gcc",
        required=required,
    )
    include = sysconfig.get_paths().get("include", "")
    has_headers = Path(include, "Python.h").is_file()
    headers = Check(
        "Python headers",
        has_headers or not required,
        include if has_headers else "not found",
        ""
        if has_headers or not required
        else f"no Python.h under {include}: install the python3-dev package for this Python",
        required=required,
    )
    return [compiler, headers]


def check_profiler(kind: str, profile: bool, env: Mapping[str, str]) -> Check:
    """ncu on CUDA, msprof (CANN) on Ascend; required only with ``--profile``."""
    if kind == "cpu":
        return Check("profiler", True, "none on the CPU", required=False)
    tool = "ncu" if kind == "cuda" else "msprof"
    path = _which(tool, env)
    if path:
        return Check("profiler", True, f"{tool} {path}", required=profile)
    hint = "install Nsight Compute" if tool == "ncu" else "source CANN's set_env.sh"
    return Check(
        "profiler",
        not profile,
        f"{tool} not found",
        f"--profile needs {tool} on PATH: {hint}" if profile else "",
        required=profile,
    )


def check_database(url: str | None) -> Check:
    """Can a run be stored there? SQLite: the file or its directory is writable; PostgreSQL: SELECT 1."""
    try:
        from sqlalchemy import text

        from kernelwatch.store.engine import DatabaseError, create_db_engine, redact, resolve_url
    except ImportError as exc:
        return Check("database", False, "?", f"the database packages are not installed ({exc.name})")
    resolved = resolve_url(url)
    shown = redact(resolved)
    if resolved.startswith("sqlite"):
        path = Path(resolved.split(":///", 1)[-1])
        target = path if path.exists() else path.parent
        while not target.exists() and target != target.parent:
            target = target.parent
        if os.access(target, os.W_OK):
            return Check("database", True, shown + ("" if path.exists() else " (will be created)"))
        return Check("database", False, shown, f"cannot write {target}: give --db a writable path")
    try:
        engine = create_db_engine(resolved, readonly=True)
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except (DatabaseError, Exception) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Check("database", False, shown, f"database {shown} is not reachable: {first[:200]}")
    return Check("database", True, shown)


def check_kernels() -> Check:
    """The kernel registry as collect will read it: the project file, and every kernel module importable."""
    from kernelwatch.kernels import discover
    from kernelwatch.project import ProjectError, active_project

    project = active_project()
    where = str(project.file) if project.file is not None else "this checkout (no project file)"
    try:
        names = sorted(discover())
    except ProjectError as exc:
        return Check("kernels", False, where, str(exc))
    return Check(
        "kernels",
        True,
        f"{len(names)} ({', '.join(names)}) from {where}",
    )


def diagnose(
    device: str = "auto",
    profile: bool = False,
    db_url: str | None = None,
    env: Mapping[str, str] | None = None,
    check_db: bool = True,
) -> list[Check]:
    """Every check, in the order the report prints them."""
    env = dict(os.environ if env is None else env)
    device_check, kind = check_device(device)
    vendor = vendor_of(kind)
    checks = [device_check, Check("vendor", True, vendor, required=False)]
    if device_check.ok:
        checks.append(check_compute_units(kind))
    checks += check_versions(kind)
    checks += check_cann(kind, env)
    checks += check_compiler(kind, env)
    checks.append(check_profiler(kind, profile, env))
    checks.append(check_kernels())
    if check_db:
        checks.append(check_database(db_url))
    return checks
