"""The dashboard's data access: one read-only engine and plain tables built from ``kernelwatch.store.queries``.

Everything here but :func:`engine` is a pure function of query results, so tests call it directly.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

import pandas as pd
import streamlit as st
from sqlalchemy import Engine

from kernelwatch.dashboard.charts import IMPL_NAMES
from kernelwatch.gate.judge import BASE_BRANCH as GATE_BASE_BRANCH
from kernelwatch.kernels.names import (
    ALL_LABELS,
    COMPILE_IMPL,
    EAGER_IMPL,
    KERNEL_IMPL,
    PEER_IMPLS,
    READ_CEILING,
)
from kernelwatch.store import queries
from kernelwatch.store.engine import open_database
from kernelwatch.store.schema import isolate

NAMES = IMPL_NAMES  # implementation -> what a page calls it (one table, in kernelwatch/dashboard/charts.py)
BASE_BRANCH = GATE_BASE_BRANCH  # the baseline rule is kernelwatch.gate.judge.baseline_branch


@st.cache_resource(show_spinner=False)
def _engine(url: str | None) -> Engine:
    return open_database(url, readonly=True)


def engine() -> Engine:
    return _engine(os.environ.get("KERNELWATCH_DB"))


# ---------------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------------
def hardware_options(eng: Engine) -> dict[str, str]:
    """fingerprint -> label (device name, fingerprint prefix, and a note when it has no measured run)."""
    measured = {r["fingerprint"] for r in queries.latest_complete_runs(eng, include_synthetic=False)}
    out = {}
    for hw in queries.list_hardware(eng):
        label = f"{isolate(hw['device_name'])} ({hw['fingerprint'][:6]})"
        if hw["fingerprint"] not in measured and "synthetic" not in hw["device_name"].lower():
            label += " [synthetic]"
        out[hw["fingerprint"]] = label
    return out


def hardware_rank(run: dict[str, Any]) -> tuple:
    """Order of hardware on a page (by each one's newest run): real machines before synthetic ones (named
    "(synthetic)"), accelerators before the CPU, measured runs before synthetic ones, newest first. A
    synthetic run on a real GPU (the demo branch) still comes before the CPU."""
    started = run["started"] or ""
    return (
        "synthetic" in (run.get("hardware") or "").lower(),
        run["device"] == "cpu",
        bool(run["synthetic"]),
        [-ord(c) for c in started],
    )


def when(iso: str | None) -> str:
    """A stored UTC time as a reader writes it: "2026-11-30 22:56 UTC" ("-" when missing)."""
    if not iso:
        return "-"
    return iso[:16].replace("T", " ") + " UTC"


# Profiler counters as stored (kernelwatch/collect/profiling.py: NCU_METRICS short names, Ascend pipe ratios) -> what a
# reader calls them; a metric not listed shows its stored name.
METRIC_NAMES = {
    "duration_ns": "kernel duration",
    "dram_throughput_pct": "DRAM throughput (% of peak)",
    "dram_bytes_read": "DRAM bytes read",
    "dram_bytes_write": "DRAM bytes written",
    "sm_throughput_pct": "SM throughput (% of peak)",
    "l2_hit_rate_pct": "L2 hit rate",
    "l2_write_hit_rate_pct": "L2 write hit rate",
    "aiv_vec_ratio": "vector unit busy (AIV vec)",
    "aiv_mte2_ratio": "MTE2 busy: loads GM->UB (AIV)",
    "aiv_mte3_ratio": "MTE3 busy: stores UB->GM (AIV)",
    "aiv_scalar_ratio": "scalar unit busy (AIV)",
    "aiv_vec_wait_ratio": "vector unit waiting (AIV)",
    "aic_cube_ratio": "cube unit busy (AIC)",
    "aic_mte1_ratio": "MTE1 busy (AIC)",
    "aic_mte2_ratio": "MTE2 busy (AIC)",
    "aic_fixpipe_ratio": "fixpipe busy (AIC)",
    "aic_scalar_ratio": "scalar unit busy (AIC)",
}


def metric_name(name: str) -> str:
    return METRIC_NAMES.get(name, name)


def run_label(run: dict[str, Any], contents: dict[str, Any] | None = None) -> str:
    """A unique, readable run label: commit, start time, run id (repeats of one commit differ); with
    ``contents`` (``queries.run_contents``) also what the run holds: result counts, kernels, GPUs."""
    when = (run.get("started") or "")[:16].replace("T", " ")
    label = f"{run['commit'][:8]} · {when} · run {run['id'][:8]}"
    if contents is not None:
        label += " · " + isolate(queries.contents_text(contents, run.get("device"), run.get("device_count")))
    return label + (" · SYNTHETIC" if run.get("synthetic") else "")


TRIAGE_SCAN = 60  # how many of a hardware's newest runs Triage looks through for one with perf and one with accuracy


def triage_runs(eng: Engine, fingerprint: str, kernel: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """What Triage judges on one hardware: its newest run (complete or partial) with kernel timings and its
    newest with gating accuracy results (of ``kernel`` when one is picked), as [(role, run)]: one entry "perf and
    accuracy" when one run is both, else "perf" then "accuracy" (either may be missing). A newer perf-only run
    does not hide accuracy, nor a newer run of other kernels the picked kernel's results."""
    runs = [
        r
        for r in queries.list_runs(eng, hardware=fingerprint, limit=TRIAGE_SCAN)
        if r["fingerprint"] == fingerprint and r["status"] in ("complete", "partial")
    ]
    contents = queries.run_contents(eng, [r["id"] for r in runs])

    def has(run: dict[str, Any], kind: str) -> bool:
        held = contents[run["id"]]
        return bool(held[kind]) and (kernel is None or kernel in held[f"{kind}_kernels"])

    perf = next((r for r in runs if has(r, "perf")), None)
    acc = next((r for r in runs if has(r, "accuracy")), None)
    if perf is not None and acc is not None and perf["id"] == acc["id"]:
        return [("perf and accuracy", perf)]
    out = [("perf", perf), ("accuracy", acc)]
    found = [(role, r) for role, r in out if r is not None]
    return found or ([("newest", runs[0])] if runs else [])


def point_label(commit: str, run_id: str) -> str:
    """The x-axis category of one run on a chart: unique per run, short."""
    return f"{commit[:7]}·{run_id[:4]}"


def short_case(case: str, kernel: str | None = None) -> str:
    """A case key without its kernel name (the page already says which kernel)."""
    if kernel and case.startswith(kernel + "/"):
        return case[len(kernel) + 1 :]
    return case


def case_labels(cases: list[str], kernels: list[str]) -> list[str]:
    """Per row, a case label that tells rows apart in a narrow column: the key without its kernel, variant and
    dtype kept, and of its parameters only those that the same kernel's other rows do not all share, a word-valued
    one as its value, a flag as its name ("VARIANT/bf16 bwd shape=4x16x1024x1024", "VARIANT/fp16 no bias fwd").
    One row of a kernel keeps every parameter."""

    def split(case: str, kernel: str) -> tuple[str, list[str]]:
        head, _, params = short_case(case, kernel).rpartition("/")
        return (head, params.split(",")) if head else (params, [])

    groups: dict[str, list[list[str]]] = {}
    for case, kernel in zip(cases, kernels):
        groups.setdefault(kernel, []).append(split(case, kernel)[1])
    common = {k: set.intersection(*map(set, v)) if len({tuple(p) for p in v}) > 1 else set() for k, v in groups.items()}
    out = []
    for case, kernel in zip(cases, kernels):
        head, params = split(case, kernel)
        out.append(" ".join([head, *(_word(p) for p in params if p not in common[kernel])]).strip())
    return out


def _word(param: str) -> str:
    """A parameter whose value is a lower-case word names itself ("direction=bwd" -> "bwd"); a flag reads
    "bias" or "no bias"."""
    name, _, value = param.partition("=")
    if value in ("True", "False"):
        return name if value == "True" else f"no {name}"
    return value if re.fullmatch(r"[a-z][a-z_]*", value) else param


def distinct_labels(keys: list[str]) -> dict[str, str]:
    """key -> a short label: the key's "/"- and ","-separated parts that not every key shares."""
    parts = {k: re.split(r"[/,]", k) for k in keys}
    common = set.intersection(*(set(p) for p in parts.values())) if len(parts) > 1 else set()
    out = {}
    for key, tokens in parts.items():
        rest = [t for t in tokens if t not in common]
        out[key] = " ".join(rest) or tokens[-1]
    return out


def param_text(value: Any) -> str:
    if isinstance(value, list):
        return "x".join(param_text(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


VARIANT_DTYPE = "variant/dtype"


def group_options(cases: list[dict[str, Any]]) -> list[str]:
    """The parameters a kernel's cases can be grouped by: variant/dtype (one line per variant and dtype, so no
    line averages over either) when either varies, variant, dtype, then every parameter that varies."""
    out = [VARIANT_DTYPE] if len({(c["variant"], c["dtype"]) for c in cases}) > 1 else []
    for name in ("variant", "dtype"):
        if len({c[name] for c in cases}) > 1:
            out.append(name)
    keys = sorted({k for c in cases for k in (c.get("params") or {})})
    for key in keys:
        if len({param_text((c.get("params") or {}).get(key)) for c in cases}) > 1:
            out.append(key)
    return out or ["variant"]


def group_value(case: dict[str, Any], by: str) -> str:
    if by == VARIANT_DTYPE:
        return f"{case['variant']}/{case['dtype']}"
    if by in ("variant", "dtype"):
        return str(case[by])
    value = (case.get("params") or {}).get(by)
    return "-" if value is None else param_text(value)


def shape_of(params: dict[str, Any]) -> str:
    shape = params.get("shape") or params.get("n")
    return param_text(shape)


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------
def geomean(values: list[float]) -> float | None:
    """exp(mean(log v)) over the positive finite values; None when there are none."""
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def targets(target: str | None) -> dict[str, float]:
    """The speedup targets of a documented target string, e.g. ">=85% of peak; >=1.8x eager; >=2x torch.compile"
    -> {EAGER_IMPL: 1.8, COMPILE_IMPL: 2.0}."""
    out: dict[str, float] = {}
    if not isinstance(target, str):
        return out
    for value, impl in re.findall(r">=([0-9.]+)x (eager|torch\.compile)", target):
        out[EAGER_IMPL if impl == "eager" else COMPILE_IMPL] = float(value)
    return out


def target_text(target: str | None) -> str:
    """A documented target as a page shows it: implementation names as people call them ("<=1.05x time of
    cuBLAS (F.linear)", stored as "... of" the implementation's name); "-" when there is none."""
    if not isinstance(target, str):
        return "-"
    return re.sub(r"\b[a-z][a-z_]*[a-z]\b", lambda m: ALL_LABELS.get(m.group(0), m.group(0)), target)


def floor_ceiling(run: dict[str, Any], ceiling: str | None) -> tuple[float, str]:
    """(factor, description) for the % of the roofline floor of one case in one run.

    The collector's % of peak is floor / time with floor = max(bytes / copy GB/s, FLOPs / matmul rate),
    both measured on the device. ``ceiling`` is the case's, as its kernel's spec names it and the
    collector stored it (``kernelwatch.kernels.names.CEILINGS``; None when no run that measured the case recorded it).
    A read-only stream can run faster than a copy, so for a ``read`` case the measured read ceiling
    (``peak_read_gbps``) is the honest 100% when the run has it: the stored value is multiplied by
    copy / read. Without it the description says that values over 100% are possible.
    """
    copy, read = run.get("peak_gbps"), run.get("peak_read_gbps")
    if ceiling == READ_CEILING:
        if copy and read:
            return copy / read, f"% of the read ceiling (measured read-only stream, {read:,.0f} GB/s)"
        ceiling = f"{copy:,.0f} GB/s" if copy else "not recorded"
        return 1.0, (
            f"% of the copy-bandwidth floor (measured copy rate, {ceiling}); this case only reads, "
            "and a read-only stream can beat the copy rate: values over 100% are possible"
        )
    text = "% of the roofline floor: max(bytes / measured copy GB/s, FLOPs / measured matmul rate)"
    if ceiling is None:
        text += " (the runs that measured this case did not record its ceiling; a read-only stream may exceed 100%)"
    return 1.0, text


def software_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs in the software context of two runs (driver, toolkit, device count, versions)."""
    out = []
    for key, name in (("driver", "driver"), ("toolkit", "toolkit"), ("device_count", "device count")):
        if before.get(key) != after.get(key):
            out.append(f"{name} {before.get(key) or '-'} -> {after.get(key) or '-'}")
    b, a = before.get("versions") or {}, after.get("versions") or {}
    for key in sorted(set(b) | set(a)):
        if b.get(key) != a.get(key):
            out.append(f"{key} {b.get(key) or '-'} -> {a.get(key) or '-'}")
    return out


NOT_RECORDED = "not recorded"  # a profiler row of a run from before the launch was stored with it


def launch_of(values: Any) -> str:
    """The launch a group of profiler rows was taken from (the first named), or :data:`NOT_RECORDED`."""
    return next((v for v in values if isinstance(v, str) and v), NOT_RECORDED)


def fmt(value: Any, spec: str = ".3g") -> str:
    """A cell for a table of text: "-" for what is missing, never "None" or "nan"."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return format(value, spec)
    return str(value)


# ---------------------------------------------------------------------------------------------
# Frames
# ---------------------------------------------------------------------------------------------
def vs_best_peer(rows: pd.DataFrame) -> float | None:
    """Geometric mean over the cases that have a peer of t(fastest peer) / t(kernel), from perf rows of one
    run (columns case, implementation, median_ms); > 1: the kernel is faster. None without peers."""
    if rows.empty:
        return None
    kern = rows[rows["implementation"] == KERNEL_IMPL].set_index("case")["median_ms"]
    peers = rows[rows["implementation"].isin(PEER_IMPLS) & (rows["median_ms"] > 0)]
    best = peers.groupby("case")["median_ms"].min()
    return geomean([b / kern[c] for c, b in best.items() if c in kern.index and kern[c] and kern[c] > 0])


def perf_frame(
    eng: Engine,
    runs: list[dict],
    kernel: str | None,
    with_samples: bool = False,
    implementations: tuple[str, ...] = (),
    with_params: bool = True,
) -> pd.DataFrame:
    """Perf rows of some runs with each run's commit, labels and order (oldest first)."""
    rows = queries.perf_rows(eng, [r["id"] for r in runs], kernel, implementations, with_samples, with_params)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    meta = pd.DataFrame(
        [
            {
                "run_id": r["id"],
                "commit": r["commit"],
                "subject": r["subject"],
                "commit_time": r["commit_time"] or r["started"],
                "started": r["started"],
                "synthetic": r["synthetic"],
                "hardware": r["hardware"],
                "fingerprint": r["fingerprint"],
                "device": r["device"],
                "order": i,
                "x": point_label(r["commit"], r["id"]),
            }
            for i, r in enumerate(runs)
        ]
    )
    frame = frame.merge(meta, on="run_id")
    if with_params:
        frame["shape"] = frame["params"].map(shape_of)
    return frame.sort_values("order")


def short_gpu(uuid: str | None) -> str | None:
    """A physical device as a page shows it: ``GPU-7b44cc34`` (the UUID's first group names it uniquely)."""
    if not uuid or not isinstance(uuid, str):
        return None
    return uuid.split("-")[0] + ("-" + uuid.split("-")[1] if uuid.count("-") else "")


def device_label(device_name: str | None, uuid: str | None, device: str | None) -> str | None:
    """Where one result was measured, as a row shows it: the model and the physical device,
    ``H200 · GPU-44f1bea0``; a run that recorded no UUID (before 2026-12-01) names its device label,
    ``H200 · cuda:1``."""
    model = re.sub(r"^(NVIDIA|AMD|Intel|Huawei)\s+", "", device_name or "").strip()
    ident = short_gpu(uuid) or device
    if ident is None:
        return None
    return f"{model} · {ident}" if model else ident
