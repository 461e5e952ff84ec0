"""Profiler counters per perf case: Nsight Compute on CUDA, torch_npu's profiler on Ascend.

Never timed under a profiler: after the suites, each kernel's perf cases are profiled in one separate
process (:mod:`kernelwatch.collect.profile_phase`, ``python -m kernelwatch.collect.profile_target``) that warms each
case's kernel up and runs it once more inside NVTX ranges, the only launches ``ncu`` collects. This module holds
the tools' commands and the parsers of what they write: ``ncu`` exports one report per kernel
(:func:`ncu_export_command`), imported twice as CSV (:func:`ncu_import_command`), once with kernel names and
once with each kernel's NVTX range, which says which case it ran in (:func:`attribute`, :func:`case_rows`).

Ascend: three ``torch_npu.profiler`` passes at ``ProfilerLevel.Level1`` (PipeUtilization,
ResourceConflictRatio, L2Cache) whose ``kernel_details.csv`` rows for the case's Triton kernel are
parsed by :func:`parse_ascend_csv`. Written against the documented formats; never run on an NPU here.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernelwatch.store.schema import NAME_LEN

NVTX_RANGE = "kernelwatch_profile"  # the range ncu collects in: the target's one profiled call per case
CASE_RANGE = "kw-case-{index}"  # inside it, one range per case: its name says which case a kernel belongs to

# ncu metric -> (short name, unit)
NCU_METRICS: dict[str, tuple[str, str]] = {
    "gpu__time_duration.sum": ("duration_ns", "ns"),
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("dram_throughput_pct", "%"),
    "dram__bytes_read.sum": ("dram_bytes_read", "byte"),
    "dram__bytes_write.sum": ("dram_bytes_write", "byte"),
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": ("sm_throughput_pct", "%"),
    "lts__t_sector_hit_rate.pct": ("l2_hit_rate_pct", "%"),
    "lts__t_sector_op_write_hit_rate.pct": ("l2_write_hit_rate_pct", "%"),
}

# Ascend pipe-utilization columns (ratios in [0, 1]): vector cores (aiv_) and cube cores (aic_).
ASCEND_VECTOR = ("aiv_vec_ratio", "aiv_mte2_ratio", "aiv_mte3_ratio", "aiv_scalar_ratio", "aiv_vec_wait_ratio")
ASCEND_CUBE = ("aic_cube_ratio", "aic_mte1_ratio", "aic_mte2_ratio", "aic_fixpipe_ratio", "aic_scalar_ratio")
ASCEND_ALIASES = {"aic_mac_ratio": "aic_cube_ratio"}  # the cube ratio's name in older CANN
ASCEND_RATIOS = (*ASCEND_VECTOR, *ASCEND_CUBE)

# Ideals by what bounds a kernel (KernelSpec.bound); a spec's ``profiler_ideals`` overrides single metrics.
# memory: the MSELoss design document's Ascend ideals (docs/metrics.md: MTE2 > 80%, MTE3 < 1% for a reduction,
# vector < 30%, vector wait < 40%) and DRAM busy on CUDA. compute: the matrix units busy, cube ratio on Ascend, SM
# throughput on CUDA; what the vector side or DRAM does then has no documented ideal.
IDEALS: dict[str, dict[str, str | None]] = {
    "memory": {
        "dram_throughput_pct": ">80",
        "aiv_mte2_ratio": ">0.8",
        "aiv_mte3_ratio": "<0.01",
        "aiv_vec_ratio": "<0.3",
        "aiv_vec_wait_ratio": "<0.4",
    },
    "compute": {"sm_throughput_pct": ">80", "aic_cube_ratio": ">0.8"},
}


def ideals_for(bound: str, overrides: Mapping[str, str | None] | None = None) -> dict[str, str | None]:
    """Metric short name -> ideal (``">0.8"``, ``"<0.01"``) for a kernel bounded by ``bound``."""
    if bound not in IDEALS:
        raise ValueError(f"unknown bound {bound!r}: use {', '.join(IDEALS)}")
    return {**IDEALS[bound], **dict(overrides or {})}


ASCEND_PASSES = ("PipeUtilization", "ResourceConflictRatio", "L2Cache")


class ProfileError(RuntimeError):
    """A profiler output that cannot be read; the message names the file and what is wrong."""


def meets(ideal: str | None, value: float | None) -> bool | None:
    if ideal is None or value is None:
        return None
    bound = float(ideal[1:])
    return value > bound if ideal[0] == ">" else value < bound


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if text.lower() in ("", "n/a", "nan", "-"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def metric(
    source: str, name: str, value: float | None, unit: str | None, ideal: str | None = None, error: str | None = None
) -> dict[str, Any]:
    return {
        "source": source,
        "name": name,
        "value": value,
        "unit": unit,
        "ideal": ideal,
        "meets_ideal": meets(ideal, value),
        "error": error,
    }


# ---------------------------------------------------------------------------------------------
# Nsight Compute
# ---------------------------------------------------------------------------------------------
def ncu_csv_kernels(text: str, source: str = "ncu output") -> dict[str, dict[str, Any]]:
    """Every profiled kernel of ``ncu --csv`` output, in ID order: ID -> ``{"name": kernel name,
    "metrics": {metric: (unit, value text)}}``.

    Tolerates the ``==PROF==``/``==WARNING==`` preamble and extra columns that newer versions append.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ProfileError(f'{source}: no ncu CSV header (a line starting with "ID") found')
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    needed = {"ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"}
    missing = needed - set(reader.fieldnames or ())
    if missing:
        raise ProfileError(f"{source}: ncu CSV lacks column(s) {', '.join(sorted(missing))}")
    kernels: dict[str, dict[str, Any]] = {}
    for r in reader:
        if not r.get("Metric Name"):
            continue
        entry = kernels.setdefault(r["ID"], {"name": r["Kernel Name"] or "", "metrics": {}})
        entry["metrics"][r["Metric Name"]] = (r["Metric Unit"], r["Metric Value"] or "")
    if not kernels:
        raise ProfileError(f"{source}: ncu CSV has a header but no metric rows (did the kernel name match?)")
    return kernels


def with_launch(rows: list[dict[str, Any]], launch: str) -> list[dict[str, Any]]:
    """``rows`` stating the launch they were taken from (cut to the column's length)."""
    return [{**r, "launch": launch[:NAME_LEN]} for r in rows]


def ncu_rows(
    metrics: Mapping[str, tuple[str, str]], bound: str = "memory", overrides: Mapping[str, str | None] | None = None
) -> list[dict[str, Any]]:
    """The metric rows of one profiled kernel (``ncu_csv_kernels``' ``metrics``), one per :data:`NCU_METRICS`;
    a metric ncu did not report, or reported as ``n/a``, is a row without a value that says so."""
    ideals = ideals_for(bound, overrides)
    rows = []
    for name, (short, unit) in NCU_METRICS.items():
        if name not in metrics:
            rows.append(metric("ncu", short, None, unit, ideals.get(short), f"{name} absent from the ncu output"))
            continue
        reported_unit, text = metrics[name]
        value = _number(text)
        rows.append(
            metric(
                "ncu",
                short,
                value,
                reported_unit or unit,
                ideals.get(short),
                None if value is not None else f"ncu reported {text!r}",
            )
        )
    return rows


def parse_ncu_csv(
    text: str, source: str = "ncu output", bound: str = "memory", overrides: Mapping[str, str | None] | None = None
) -> list[dict[str, Any]]:
    """Metric rows of the first profiled kernel in ``ncu --csv`` output (thousands separators, ``n/a``)."""
    first = next(iter(ncu_csv_kernels(text, source).values()))
    return ncu_rows(first["metrics"], bound, overrides)


def ncu_export_command(ncu: str, kernel_regex: str, report: Path, target: list[str]) -> list[str]:
    """Profile every launch matching ``kernel_regex`` inside the target's NVTX range into ``report``."""
    return [
        ncu,
        "--export",
        str(report),
        "--force-overwrite",
        "--clock-control",
        "none",
        "--metrics",
        ",".join(NCU_METRICS),
        "--nvtx",
        "--nvtx-include",
        f"{NVTX_RANGE}/",
        "--kernel-name",
        f"regex:{kernel_regex}",
        *target,
    ]


def ncu_import_command(ncu: str, report: Path, by_range: bool) -> list[str]:
    """The report as CSV; ``by_range`` names each kernel by its innermost NVTX range instead (which case)."""
    return [
        ncu,
        "--import",
        str(report),
        "--csv",
        "--page",
        "details",
        "--print-units",
        "base",
        *(["--print-nvtx-rename", "kernel"] if by_range else []),
    ]


def attribute(kernels: dict[str, dict[str, Any]], ranges: dict[str, dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Case index -> its profiled kernels (``ncu_csv_kernels`` entries, in launch order): the two imports of one
    report list the same IDs, one with kernel names and one with each kernel's NVTX range (``kw-case-<i>``)."""
    pattern = re.compile(re.escape(CASE_RANGE).replace(re.escape("{index}"), r"(\d+)"))
    out: dict[int, list[dict[str, Any]]] = {}
    for kid, entry in kernels.items():
        found = pattern.search(ranges.get(kid, {}).get("name", ""))
        if found is None:
            raise ProfileError(
                f"ncu report: kernel {kid} ({entry['name'][:60]}) has no {CASE_RANGE} range name "
                "(does this ncu support --print-nvtx-rename?)"
            )
        out.setdefault(int(found.group(1)), []).append(entry)
    return out


def case_rows(
    launches: list[dict[str, Any]],
    kernel_regex: str,
    bound: str = "memory",
    overrides: Mapping[str, str | None] | None = None,
) -> list[dict[str, Any]]:
    """One case's metric rows: its first profiled launch whose name matches the case's own kernel regex."""
    pattern = re.compile(kernel_regex)
    chosen = next((k for k in launches if pattern.search(k["name"])), None)
    if chosen is None:
        ran = ", ".join(sorted({k["name"][:60] for k in launches})) or "none"
        return [
            metric(
                "ncu",
                "ncu",
                None,
                None,
                error=f"no launch matching {kernel_regex!r} in the profiled call (profiled: {ran})",
            )
        ]
    return with_launch(ncu_rows(chosen["metrics"], bound, overrides), chosen["name"])


# ---------------------------------------------------------------------------------------------
# Ascend (torch_npu profiler)
# ---------------------------------------------------------------------------------------------
NAME_COLUMNS = ("Name", "Op Name", "OP Type", "Type")  # a Triton kernel's name shows in either
DURATION_COLUMNS = ("Duration(us)", "Task Duration(us)")
BLOCK_COLUMNS = ("Block Dim", "Block Num")
LAUNCH_COLUMN = "\0launch"  # the matched name, under a key no CSV header can hold


def _pick(row: dict[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        if name in row:
            return row[name]
    return None


def _matching_rows(text: str, kernel_regex: str, source: str) -> list[dict[str, str]]:
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    fields = reader.fieldnames or []
    name_columns = [c for c in NAME_COLUMNS if c in fields]
    if not name_columns:
        raise ProfileError(
            f"{source}: no Name, Op Name, OP Type or Type column (columns: {', '.join(fields[:6]) or 'none'})"
        )
    pattern = re.compile(kernel_regex)
    rows = [r for r in reader if any(pattern.search(r.get(c) or "") for c in name_columns)]
    if not rows:
        raise ProfileError(f"{source}: no row for a kernel matching {kernel_regex!r}")
    for r in rows:
        r[LAUNCH_COLUMN] = next(r[c] for c in name_columns if pattern.search(r.get(c) or ""))
    return rows


def ascend_launch(text: str, kernel_regex: str, source: str = "kernel_details.csv") -> str:
    """The name of the first row :func:`parse_ascend_csv` takes its metrics from."""
    return _matching_rows(text, kernel_regex, source)[0][LAUNCH_COLUMN]


def parse_ascend_csv(text: str, kernel_regex: str, source: str = "kernel_details.csv") -> dict[str, float | None]:
    """Mean of each metric column over the rows whose name matches ``kernel_regex``.

    Reads ``kernel_details.csv`` (torch_npu) and ``op_summary_*.csv`` (msprof) alike: ``Name`` or
    ``Op Name``, ``Block Dim`` or ``Block Num``, an optional leading ``Step Id``. A metric column
    that is absent maps to None (missing), never to 0.
    """
    return _ascend_means(_matching_rows(text, kernel_regex, source))


def _ascend_means(rows: list[dict[str, str]]) -> dict[str, float | None]:
    wanted = [*ASCEND_RATIOS, *ASCEND_ALIASES, "aiv_write_cache_hit", "aiv_write_cache_miss_allocate"]
    out: dict[str, float | None] = {}
    for column in wanted:
        values = [_number(r[column]) for r in rows if column in r]
        values = [v for v in values if v is not None]
        name = ASCEND_ALIASES.get(column, column)
        if values or name not in out:
            out[name] = sum(values) / len(values) if values else None
    durations = [_number(_pick(r, DURATION_COLUMNS) or "") for r in rows]
    durations = [d for d in durations if d is not None]
    out["duration_us"] = sum(durations) / len(durations) if durations else None
    blocks = [_number(_pick(r, BLOCK_COLUMNS) or "") for r in rows]
    out["block_dim"] = next((b for b in blocks if b is not None), None)
    return out


def ascend_metrics(
    parsed: dict[str, float | None], bound: str = "memory", overrides: Mapping[str, str | None] | None = None
) -> list[dict[str, Any]]:
    """Metric rows with the ideals of ``bound``: the vector columns of a memory-bound kernel and the cube
    columns of a compute-bound one are always reported (missing ones as missing); the other core type's
    columns only when the profiler wrote them (a mixed cube+vector kernel has both)."""
    ideals = ideals_for(bound, overrides)
    expected = ASCEND_VECTOR if bound == "memory" else ASCEND_CUBE
    rows = []
    for name in ASCEND_RATIOS:
        value = parsed.get(name)
        if name not in expected and value is None:
            continue
        rows.append(
            metric(
                "torch_npu",
                name,
                value,
                "ratio",
                ideals.get(name),
                None if value is not None else f"{name} absent from the profiler output",
            )
        )
    hit, miss = parsed.get("aiv_write_cache_hit"), parsed.get("aiv_write_cache_miss_allocate")
    rate = hit / (hit + miss) if hit is not None and miss is not None and hit + miss > 0 else None
    rows.append(
        metric(
            "torch_npu",
            "l2_write_hit_rate",
            rate,
            "ratio",
            None,
            None if rate is not None else "L2Cache pass columns absent",
        )
    )
    rows.append(metric("torch_npu", "duration_us", parsed.get("duration_us"), "us"))
    rows.append(metric("torch_npu", "block_dim", parsed.get("block_dim"), None))
    return rows


def profile_npu(
    run_once, kernel_regex: str, bound: str = "memory", overrides: Mapping[str, str | None] | None = None
) -> list[dict[str, Any]]:
    """Three profiler passes over ``run_once`` (never run on an NPU in this project's own CI)."""
    try:
        import torch_npu
    except ImportError:
        return [metric("torch_npu", "torch_npu", None, None, error="torch_npu is not importable")]
    merged: dict[str, float | None] = {}
    launch = ""
    for group in ASCEND_PASSES:
        folder = Path(tempfile.mkdtemp(prefix=f"kw-npu-{group}-"))
        try:
            config = torch_npu.profiler._ExperimentalConfig(
                profiler_level=torch_npu.profiler.ProfilerLevel.Level1,
                aic_metrics=getattr(torch_npu.profiler.AiCMetrics, group),
            )
            with torch_npu.profiler.profile(
                activities=[torch_npu.profiler.ProfilerActivity.NPU],
                experimental_config=config,
                on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(str(folder)),
            ):
                run_once()
            found = sorted(folder.rglob("ASCEND_PROFILER_OUTPUT/kernel_details.csv"))
            if not found:
                raise ProfileError(f"{folder}: no ASCEND_PROFILER_OUTPUT/kernel_details.csv was written")
            rows = _matching_rows(found[-1].read_text(), kernel_regex, str(found[-1]))
            parsed = _ascend_means(rows)
            launch = launch or rows[0][LAUNCH_COLUMN]
            merged.update({k: v for k, v in parsed.items() if v is not None or k not in merged})
        except (ProfileError, AttributeError, RuntimeError) as exc:
            return [metric("torch_npu", "torch_npu", None, None, error=f"{group} pass: {exc}")]
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return with_launch(ascend_metrics(merged, bound, overrides), launch)
