"""What every page does first: open the database, read the URL, offer hardware and kernel."""

from __future__ import annotations

import streamlit as st

from dashboard import data
from dashboard.state import Params, read_params, show_problems, write_params
from db import queries
from db.engine import DatabaseError


def start(title: str):  # noqa: ANN201 - (engine, params) or stops the page
    st.title(title)
    try:
        eng = data.engine()
    except DatabaseError as exc:
        st.error(f"Cannot open the results database: {exc}")
        st.stop()
    return eng, read_params()


def pick_hardware(eng, params: Params, key: str = "hardware", label: str = "Hardware") -> str | None:  # noqa: ANN001
    options = data.hardware_options(eng)
    if not options:
        st.info("No runs in this database yet: `kernelwatch collect` or `kernelwatch ingest ci/history/*.json`.")
        st.stop()
    default = default_hardware(eng, options)
    chosen = params.choice(key, options, default)
    return st.selectbox(label, list(options), index=list(options).index(chosen), format_func=options.get, key=key)


def default_hardware(eng, options: dict[str, str]) -> str:  # noqa: ANN001
    """The newest measured accelerator: real runs before synthetic ones, GPUs/NPUs before the CPU."""
    latest = queries.latest_complete_runs(eng)
    ranked = sorted(latest, key=lambda r: r["started"] or "", reverse=True)
    ranked.sort(key=lambda r: (r["synthetic"], r["device"] == "cpu"))
    return ranked[0]["fingerprint"] if ranked else next(iter(options))


def pick_kernel(eng, params: Params) -> str | None:  # noqa: ANN001
    names = queries.kernel_names(eng)
    if not names:
        st.info("No kernels recorded yet.")
        st.stop()
    chosen = params.choice("kernel", names, names[0])
    return st.selectbox("Kernel", names, index=names.index(chosen), key="kernel")


def finish(params: Params, state: dict) -> None:
    show_problems(params)
    write_params(state)
