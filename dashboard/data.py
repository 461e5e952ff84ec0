"""The dashboard's data access: one read-only engine and DataFrames built from ``db.queries``."""

from __future__ import annotations

import math
import os
import re
from typing import Any

import pandas as pd
import streamlit as st
from sqlalchemy import Engine

from db import queries
from db.engine import open_database


@st.cache_resource(show_spinner=False)
def _engine(url: str | None) -> Engine:
    return open_database(url, readonly=True)


def engine() -> Engine:
    return _engine(os.environ.get("KERNELWATCH_DB"))


def hardware_options(eng: Engine) -> dict[str, str]:
    """fingerprint -> label (device name, count, and a note when every run on it is synthetic)."""
    latest = {r["fingerprint"]: r for r in queries.latest_complete_runs(eng)}
    out = {}
    for hw in queries.list_hardware(eng):
        label = f"{hw['device_name']} ({hw['fingerprint'][:6]})"
        run = latest.get(hw["fingerprint"])
        if run and run["synthetic"]:
            label += " [synthetic]"
        out[hw["fingerprint"]] = label
    return out


def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def shape_of(params: dict[str, Any]) -> str:
    shape = params.get("shape") or params.get("n")
    if isinstance(shape, list):
        return "x".join(str(s) for s in shape)
    return str(shape)


def perf_frame(eng: Engine, runs: list[dict], kernel: str | None, with_samples: bool = False,
               implementations: tuple[str, ...] = (), with_params: bool = True) -> pd.DataFrame:
    rows = queries.perf_rows(eng, [r["id"] for r in runs], kernel, implementations, with_samples, with_params)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    meta = pd.DataFrame([{"run_id": r["id"], "commit": r["commit"], "subject": r["subject"],
                          "commit_time": r["commit_time"] or r["started"], "synthetic": r["synthetic"],
                          "hardware": r["hardware"], "fingerprint": r["fingerprint"], "device": r["device"],
                          "order": i} for i, r in enumerate(runs)])
    frame = frame.merge(meta, on="run_id")
    if with_params:
        frame["shape"] = frame["params"].map(shape_of)
    return frame.sort_values("order")


def target_speedup(target: str | None) -> float | None:
    if not isinstance(target, str):
        return None
    match = re.search(r">=([0-9.]+)x eager", target)
    return float(match.group(1)) if match else None


def reproduce(kernel: str, case: str, device: str, commit: str) -> str:
    return f"git checkout {commit[:12]} && kernelwatch collect --kernels {kernel} --match '{case}' --device {device}"
