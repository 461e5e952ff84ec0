"""Every dashboard page through Streamlit's AppTest, on the shipped H200 history plus synthetic runs."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from db.artifact import dumps, load_artifact, parse_artifact, to_data
from db.engine import open_database
from db.ingest import ingest_documents
from db.synthetic import Step, SyntheticHistory

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "dashboard" / "views"
HISTORY = sorted((ROOT / "ci" / "history").glob("*.json"))


@pytest.fixture(scope="module")
def dash_db(tmp_path_factory) -> str:  # noqa: ANN001
    url = f"sqlite:///{tmp_path_factory.mktemp('dash') / 'dash.db'}"
    engine = open_database(url)
    ingest_documents(engine, [(str(p), load_artifact(p)) for p in HISTORY])
    synth = SyntheticHistory(runs=20, cases=9, hardware=2, steps=[Step(12, 1.25, "mse_loss")])
    ingest_documents(engine, [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(synth.documents())])
    engine.dispose()
    return url


@pytest.fixture
def page(dash_db: str, monkeypatch):  # noqa: ANN001, ANN201
    # AppTest leaves the page script installed as __main__; a later multiprocessing "spawn" child
    # would then re-run that page as its main module. Put the real __main__ back afterwards.
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    monkeypatch.setenv("KERNELWATCH_DB", dash_db)
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()

    def run(name: str, **query: str) -> AppTest:
        at = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=120)
        for key, value in query.items():
            at.query_params[key] = value
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    return run


def values(array) -> list:  # noqa: ANN001
    """Plotly >= 6 writes numeric arrays as {"dtype", "bdata"} (base64); lists stay lists."""
    if isinstance(array, dict) and "bdata" in array:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=np.dtype(array["dtype"])).tolist()
    return list(array)


def specs(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def _real_fingerprint(dash_db: str) -> str:
    from db.queries import latest_complete_runs

    return next(r["fingerprint"] for r in latest_complete_runs(open_database(dash_db, readonly=True))
                if r["device"] == "cuda" and not r["synthetic"])


def test_overview_lists_each_hardware_with_kernel_summaries(page, dash_db) -> None:  # noqa: ANN001
    at = page("overview")
    subheaders = [s.value for s in at.subheader]
    assert any("NVIDIA H200" in s and "SYNTHETIC" not in s for s in subheaders)
    assert sum("SYNTHETIC" in s for s in subheaders) == 2
    h200 = next(df.value for df, s in zip(at.dataframe, subheaders) if s == "NVIDIA H200")
    assert {"kernel", "accuracy passed", "geomean x eager", "geomean x torch.compile", "targets met",
            "regressions", "trend (x eager)"} <= set(h200.columns)
    mse = h200.set_index("kernel").loc["mse_loss"]
    assert mse["geomean x eager"] > 1.2 and re.fullmatch(r"\d+/\d+", mse["targets met"])
    synthetic = at.dataframe[subheaders.index(next(s for s in subheaders if "H200 (synthetic)" in s))].value
    assert synthetic.set_index("kernel").loc["mse_loss", "regressions"] >= 1


def test_performance_page_plots_speedups_with_log_axis_parity_and_target(page, dash_db) -> None:  # noqa: ANN001
    fp = _real_fingerprint(dash_db)
    at = page("performance", kernel="mse_loss", hardware=fp, variant="persistent", dtype="fp32")
    (spec,) = specs(at)
    assert spec["layout"]["yaxis"]["type"] == "log"
    assert spec["layout"]["xaxis"]["type"] == "category"
    names = [t["name"] for t in spec["data"]]
    assert names and all("persistent/fp32" in n for n in names if not n.startswith("change point"))
    lines = [s["y0"] for s in spec["layout"]["shapes"]]
    assert 1.0 in lines and 1.8 in lines  # parity and the documented 1.8x target
    hover = spec["data"][0]["hovertext"][0]
    assert "kernelwatch collect --kernels mse_loss" in hover and "median" in hover
    assert at.query_params["kernel"] == ["mse_loss"] or at.query_params["kernel"] == "mse_loss"


def test_performance_marks_the_synthetic_step_as_a_change_point(page, dash_db) -> None:  # noqa: ANN001
    from db.queries import latest_complete_runs

    fp = next(r["fingerprint"] for r in latest_complete_runs(open_database(dash_db, readonly=True))
              if r["synthetic"] and "H200" in r["hardware"])
    at = page("performance", kernel="mse_loss", hardware=fp)
    (spec,) = specs(at)
    assert "SYNTHETIC" in spec["layout"]["title"]["text"]
    marks = [t for t in spec["data"] if t["name"].startswith("change point")]
    assert marks, "the injected 25% step must be found"
    assert any("+25" in h or "+24" in h or "+26" in h for t in marks for h in t["hovertext"])


def test_roofline_shows_the_measured_ceiling(page, dash_db) -> None:  # noqa: ANN001
    at = page("roofline", hardware=_real_fingerprint(dash_db))
    (spec,) = specs(at)
    assert spec["layout"]["xaxis"]["type"] == "log" and spec["layout"]["yaxis"]["type"] == "log"
    assert any(t["name"] == "measured roofline" for t in spec["data"])
    assert {"triton", "torch_eager"} <= {t["name"] for t in spec["data"]}


def test_profiler_page_shows_real_ncu_counters_with_ideal_band(page, dash_db) -> None:  # noqa: ANN001
    at = page("profiler", kernel="mse_loss", hardware=_real_fingerprint(dash_db), metric="dram_throughput_pct")
    (spec,) = specs(at)
    assert spec["layout"]["shapes"], "the ideal band"
    ys = [v for t in spec["data"] for v in values(t["y"]) if v is not None]
    assert ys and max(ys) > 80


def test_accuracy_page_budget_lines_and_heatmap(page, dash_db) -> None:  # noqa: ANN001
    at = page("accuracy", kernel="mse_loss", hardware=_real_fingerprint(dash_db), dtype="fp16")
    budget, heat = specs(at)
    assert budget["layout"]["yaxis"]["type"] == "log" and 1.0 in [s["y0"] for s in budget["layout"]["shapes"]]
    assert heat["data"][0]["type"] == "heatmap"
    assert "Failing cases in the latest runs: 0" in [s.value for s in at.subheader]


def test_compare_two_runs_with_significance_and_csv(page, dash_db) -> None:  # noqa: ANN001
    from db.queries import list_runs

    runs = [r for r in list_runs(open_database(dash_db, readonly=True)) if r["synthetic"] and "H200" in r["hardware"]]
    at = page("compare", a=runs[10]["id"][:8], b=runs[0]["id"][:8])
    frame = at.dataframe[0].value
    assert {"B/A time", "p (B slower)", "budget delta"} <= set(frame.columns)
    slowed = frame[frame["case"].str.startswith("mse_loss") & (frame["implementation"] == "triton")]
    assert (slowed["B/A time"] > 1.15).all() and (slowed["p (B slower)"] < 0.01).all()
    assert at.get("download_button")


@pytest.mark.parametrize("query,message", [
    ({"kernel": "no_such_kernel"}, "Unknown kernel"),
    ({"bogus": "1"}, "Unknown URL parameter"),
    ({"last": "DROP TABLE run"}, "must be a whole number"),
    ({"hardware": "'; select 1; --"}, "Unknown hardware"),
])
def test_malformed_parameters_give_a_message_not_an_exception(page, query, message) -> None:  # noqa: ANN001
    at = page("performance", **query)
    assert any(message in w.value for w in at.warning), [w.value for w in at.warning]


def test_bad_run_id_in_the_url(page) -> None:  # noqa: ANN001
    at = page("compare", a="zz<script>", b="ffffffff")
    warnings = " ".join(w.value for w in at.warning)
    assert "must be a run id" in warnings and "No run 'ffffffff'" in warnings


def test_a_new_run_appears_without_restart(page, dash_db) -> None:  # noqa: ANN001
    before = page("overview")
    n_before = len(before.subheader)
    extra = to_data(next(SyntheticHistory(runs=1, cases=3, hardware=1, seed=99).documents()))
    extra["hardware"]["device_name"] = "NVIDIA A100-SXM4-80GB (synthetic)"
    ingest_documents(open_database(dash_db), [("extra", parse_artifact(dumps(extra)))])
    after = page("overview")
    assert len(after.subheader) == n_before + 1
