"""Peers (Liger-Kernel, FlagGems, apex): optional implementations, never gating, drawn on the case page."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pandas as pd  # noqa: E402
import torch  # noqa: E402

import kernels  # noqa: E402
from dashboard import charts, data  # noqa: E402
from kernels import peers  # noqa: E402
from kernels.spec import PEER_IMPLS  # noqa: E402


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
    rows = pd.DataFrame([
        {"case": "a", "implementation": "triton", "median_ms": 1.0},
        {"case": "a", "implementation": "liger", "median_ms": 1.2},
        {"case": "a", "implementation": "flaggems", "median_ms": 1.5},
        {"case": "b", "implementation": "triton", "median_ms": 2.0},
        {"case": "b", "implementation": "apex", "median_ms": 1.0},
        {"case": "c", "implementation": "triton", "median_ms": 3.0},  # no peer: not counted
        {"case": "c", "implementation": "torch_compile", "median_ms": 0.1},
    ])
    assert abs(data.vs_best_peer(rows) - (1.2 * 0.5) ** 0.5) < 1e-12
    assert abs(data.vs_best_peer(rows[rows["implementation"] != "liger"]) - (1.5 * 0.5) ** 0.5) < 1e-12
    assert data.vs_best_peer(rows[~rows["implementation"].isin(PEER_IMPLS)]) is None


def test_case_page_draws_a_peer_as_a_dashed_named_line() -> None:
    frame = pd.DataFrame([
        {"x": f"r{i}", "order": i, "implementation": impl, "median_us": t, "p20_us": t, "p80_us": t,
         "call_us": None, "hover": "h", "synthetic": False}
        for i in range(2) for impl, t in (("triton", 10.0), ("apex", 12.0))])
    fig = charts.case_times(frame, "t")
    lines = {tr.name: tr.line.dash for tr in fig.data if tr.mode == "lines+markers"}
    assert lines == {"kernel (Triton)": "solid", "peer: apex (Megatron)": "dash"}
