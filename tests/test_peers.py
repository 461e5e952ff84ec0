"""Peers (Liger-Kernel, FlagGems, apex): optional implementations, never gating, drawn on the case page."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pandas as pd
import torch

from kernelwatch import kernels
from kernelwatch.dashboard import charts, data
from kernelwatch.kernels import peers
from kernelwatch.kernels.spec import PEER_IMPLS


def test_peer_names_are_one_list_and_no_target_names_a_peer() -> None:
    assert data.PEER_IMPLS == PEER_IMPLS and set(charts.PEER_NAMES) == set(PEER_IMPLS)
    for spec in kernels.discover().values():
        for case in spec.perf_cases():
            if case.target is not None and case.target.max_ratio_to is not None:
                assert case.target.max_ratio_to[0] not in PEER_IMPLS, case.key


def test_no_peer_loads_off_cuda_and_the_cpu_implementations_have_none() -> None:
    assert peers.liger_rms_norm("cpu") is None and peers.flaggems("cpu") is None
    assert peers.apex_softmax("cpu", causal=True) is None and peers.apex_softmax("cpu", causal=False) is None
    for spec in kernels.discover().values():
        case = spec.accuracy_cases()[0]
        impls = spec.implementations(case, spec.make_inputs(case, torch.device("cpu"), 0))
        assert not set(impls) & set(PEER_IMPLS), spec.name


def test_vs_best_peer_is_the_fastest_peer_over_the_kernel_on_cases_with_a_peer() -> None:
    rows = pd.DataFrame(
        [
            {"case": "a", "implementation": "triton", "median_ms": 1.0},
            {"case": "a", "implementation": "liger", "median_ms": 1.2},
            {"case": "a", "implementation": "flaggems", "median_ms": 1.5},
            {"case": "b", "implementation": "triton", "median_ms": 2.0},
            {"case": "b", "implementation": "apex", "median_ms": 1.0},
            {"case": "c", "implementation": "triton", "median_ms": 3.0},  # no peer: not counted
            {"case": "c", "implementation": "torch_compile", "median_ms": 0.1},
        ]
    )
    assert abs(data.vs_best_peer(rows) - (1.2 * 0.5) ** 0.5) < 1e-12
    assert abs(data.vs_best_peer(rows[rows["implementation"] != "liger"]) - (1.5 * 0.5) ** 0.5) < 1e-12
    assert data.vs_best_peer(rows[~rows["implementation"].isin(PEER_IMPLS)]) is None


def test_case_page_draws_a_peer_as_a_dashed_named_line() -> None:
    frame = pd.DataFrame(
        [
            {
                "x": f"r{i}",
                "order": i,
                "implementation": impl,
                "median_us": t,
                "p20_us": t,
                "p80_us": t,
                "call_us": None,
                "hover": "h",
                "synthetic": False,
            }
            for i in range(2)
            for impl, t in (("triton", 10.0), ("apex", 12.0))
        ]
    )
    fig = charts.case_times(frame, "t")
    lines = {tr.name: tr.line.dash for tr in fig.data if tr.mode == "lines+markers"}
    assert lines == {"kernel (Triton)": "solid", "peer: apex (Megatron)": "dash"}


def _peer_db(tmp_path) -> str:
    """The stepped MSELoss copies of test_dashboard, each run with an ``apex`` row 1.25x the kernel's time."""
    from kernelwatch.store.artifact import dumps, load_artifact, parse_artifact, to_data
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.ingest import ingest_documents
    from kernelwatch.store.synthetic import stepped_copies
    from tests.test_dashboard import REPEAT, STEP, STEP_CASE

    docs = []
    for doc in (to_data(d) for d in stepped_copies(load_artifact(REPEAT), 3, STEP, STEP_CASE)):
        peers_rows = []
        for p in doc["perf"]:
            if p["implementation"] == "triton":
                row = {**p, "implementation": "apex", "target": None, "target_met": None}
                for k in ("median_ms", "p20_ms", "p80_ms", "min_ms"):
                    row[k] = p[k] * 1.25
                row["samples_ms"] = [s * 1.25 for s in p["samples_ms"]]
                peers_rows.append(row)
        doc["perf"] += peers_rows
        docs.append(parse_artifact(dumps(doc)))
    url = f"sqlite:///{tmp_path / 'peers.db'}"
    engine = open_database(url)
    ingest_documents(engine, [(f"peer {i}", d) for i, d in enumerate(docs)])
    engine.dispose()
    return url


def test_case_page_and_overview_show_the_peer(tmp_path, monkeypatch) -> None:
    import sys

    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from tests.test_dashboard import PAGES, STEP_CASE, fingerprint, specs

    url = _peer_db(tmp_path)
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    monkeypatch.setenv("KERNELWATCH_DB", url)
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(PAGES / "case.py"), default_timeout=120)
    at.query_params["case"] = STEP_CASE
    at.query_params["hardware"] = fingerprint(url, "NVIDIA H200")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    every = [s for s in specs(at) if "every implementation" in str(s["layout"].get("title"))]
    assert len(every) == 1, [s["layout"].get("title") for s in specs(at)]
    peer = [t for t in every[0]["data"] if t.get("name") == "peer: apex (Megatron)"]
    assert len(peer) == 1 and peer[0]["line"]["dash"] == "dash"
    assert at.dataframe[0].value["peer: apex (Megatron) µs"].notna().all()
    at = AppTest.from_file(str(PAGES / "overview.py"), default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value
    row = table[table["kernel"] == "mse_loss"].iloc[0]
    assert abs(row["vs best peer"] - 1.25) < 1e-6
