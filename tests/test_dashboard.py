"""Every dashboard page through Streamlit's AppTest, on the shipped H200 history plus labelled synthetic runs:
a step injected on the real H200 (copies of a real run), two synthetic machines with a 25% step, a CPU-like
accuracy-only machine with a failing case, and a machine whose names and case keys are hostile
(Markdown links and images, HTML, a shell injection)."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kernelwatch.collect.ceilings import fill_missing
from kernelwatch.dashboard.data import NOT_RECORDED, point_label, short_gpu
from kernelwatch.gate.reports import LABELS
from kernelwatch.store.artifact import dumps, load_artifact, parse_artifact, to_data
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.synthetic import Step, SyntheticHistory, stepped_copies
from tests.history import history_runs

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "kernelwatch" / "dashboard" / "views"
VIEWS = ("triage", "case", "overview", "performance", "accuracy", "compare", "roofline", "profiler")
# The H200 history these tests were written against. Later runs in ci/history would change which run is each
# hardware's newest, and so what the pages show; they are covered by `make demo` and the benchmarks.
HISTORY = sorted((ROOT / "ci" / "history").glob("2026-11-30T0*.json.gz"))
REPEAT = ROOT / "ci" / "history" / "2026-11-30T0447-653a5717-h200-mse_loss-repeat4.json.gz"
STEP_CASE = "mse_loss/persistent/fp32/direction=fwd,reduction=mean,shape=33554432"
STEP = 1.3
EVIL_HW = "GPU [hw](https://example.com/hw) <img src=https://example.com/hw.png> (synthetic)"
SHELL_CASE = "mse_loss/x'; touch pwned; echo '"
MD_CASE = (
    "mse_loss/[click here](https://example.com/c) ![t](https://example.com/t.png) "
    "<a href=https://example.com/a>a</a> :red[x] $x$"
)
CPU_HW = "CPU interpreter (synthetic)"


def _rename(doc: dict, names: dict[str, str]) -> None:
    for c in doc["cases"]:
        if c["key"] in names:
            c["key"], c["kernel"] = names[c["key"]], "mse_loss"
    for section in ("accuracy", "perf", "profiler"):
        for row in doc[section]:
            row["case"] = names.get(row["case"], row["case"])


def hostile_documents() -> list:
    """Two runs of a machine with hostile names; in the second the hostile cases are 1.5x slower."""
    docs = [to_data(d) for d in SyntheticHistory(runs=2, cases=3, hardware=1, seed=7).documents()]
    names = {docs[0]["cases"][0]["key"]: SHELL_CASE, docs[0]["cases"][1]["key"]: MD_CASE}
    for i, doc in enumerate(docs):
        doc["hardware"]["device_name"] = EVIL_HW
        _rename(doc, names)
        for p in doc["perf"]:
            if i == 1 and p["implementation"] == "triton" and p["case"] in names.values():
                for k in ("median_ms", "p20_ms", "p80_ms", "min_ms"):
                    p[k] *= 1.5
                p["samples_ms"] = [s * 1.5 for s in p["samples_ms"]]
    return [parse_artifact(dumps(d)) for d in docs]


def cpu_document():
    """An accuracy-only run on a CPU-like machine with one failing case (as `make demo` collects)."""
    doc = to_data(next(SyntheticHistory(runs=1, cases=3, hardware=1, seed=11).documents()))
    doc["hardware"].update(
        vendor="cpu",
        device_name=CPU_HW,
        compute_units=2,
        memory_bytes=None,
        peak_gbps=None,
        peak_tflops=None,
        peak_gbps_datasheet=None,
        peak_tflops_datasheet=None,
    )
    doc["run"]["device"] = "cpu"
    doc["perf"] = []
    doc["accuracy"][0].update(error_budget=1.7, passed=False)
    return parse_artifact(dumps(doc))


def build(url: str) -> None:
    engine = open_database(url)
    ingest_documents(engine, [(str(p), load_artifact(p)) for p in HISTORY])
    synth = SyntheticHistory(runs=20, cases=9, hardware=2, steps=[Step(12, 1.25, "mse_loss")])
    ingest_documents(engine, [(f"synthetic {i}", d) for i, d in enumerate(synth.documents())])
    copies = [to_data(d) for d in stepped_copies(load_artifact(REPEAT), 3, STEP, STEP_CASE)]
    for doc in copies:  # the copies also record wall time per call (the collector's newer field)
        for p in doc["perf"]:
            p["call_ms"] = p["median_ms"] * 1.4
    ingest_documents(engine, [(f"stepped {i}", parse_artifact(dumps(d))) for i, d in enumerate(copies)])
    ingest_documents(engine, [(f"hostile {i}", d) for i, d in enumerate(hostile_documents())])
    ingest_documents(engine, [("cpu", cpu_document())])
    fill_missing(engine)  # as `kernelwatch ingest` does: ci/history's runs predate the cases' ceilings
    engine.dispose()


@pytest.fixture(scope="module")
def dash_db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('dash') / 'dash.db'}"
    build(url)
    return url


@pytest.fixture
def page(dash_db: str, monkeypatch):
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


def values(array) -> list:
    """Plotly >= 6 writes numeric arrays as {"dtype", "bdata"} (base64); lists stay lists."""
    if isinstance(array, dict) and "bdata" in array:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=np.dtype(array["dtype"])).tolist()
    return list(array)


def specs(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def fingerprint(url: str, name: str, synthetic: bool | None = None) -> str:
    from kernelwatch.store.queries import list_hardware

    return next(h["fingerprint"] for h in list_hardware(open_database(url, readonly=True)) if h["device_name"] == name)


def raw_markup(text: str) -> list[str]:
    """Markdown or HTML syntax left unescaped in text a page renders as Markdown: links and images
    (``](``), tags (``<a``), Streamlit directives (``:red[``) and maths (``$``). The browser test checks
    the rendered page itself."""
    import re

    return re.findall(r"(?<!\\)\]\(|(?<!\\)<[A-Za-z!/]|(?<!\\):[a-z]+\[|(?<!\\)\$", text)


def texts(at: AppTest) -> str:
    """Everything a page renders as Markdown (st.text and st.code show plain text and are left out)."""
    parts = []
    for kind in ("title", "subheader", "caption", "warning", "info", "error", "success", "markdown"):
        parts += [str(e.value) for e in at.get(kind)]
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Triage
# ---------------------------------------------------------------------------------------------
def test_triage_ranks_the_injected_step_first_with_the_gates_numbers(page, dash_db) -> None:
    h200 = fingerprint(dash_db, "NVIDIA H200")
    at = page("triage", hardware=h200, show="all cases")
    table = at.dataframe[0].value
    assert list(table.columns[:9]) == [
        "verdict",
        "kernel",
        "case",
        "effect %",
        "p",
        "GPU",  # before the times: in sight at 1280 px whatever the table's width
        "now us",
        "before us",
        "budget change",
    ]
    top = table.iloc[0]
    assert top["verdict"] == "slower"
    assert top["case"].startswith("persistent/fp32 ") and "shape=33554432" in top["case"]
    assert 25 < top["effect %"] < 35 and top["p"] == "< 1e-6"  # a 30% step on a large, quiet case (7e-111 before)
    assert top["now us"] / top["before us"] == pytest.approx(1 + top["effect %"] / 100, rel=1e-6)
    import base64

    spark = base64.b64decode(top["trend us"].split(",", 1)[1]).decode()  # an SVG line, coloured as "slower"
    assert spark.startswith("<svg") and "stroke='#C00000'" in spark and spark.count(",") >= 8
    assert set(table["verdict"][1:]) == {"unchanged"}  # the other 11 cases of the copied run
    assert "SYNTHETIC" in texts(at)  # the judged run is a labelled synthetic copy
    assert "slower: 1 · unchanged: 11" in [t.value for t in at.text]
    # the command cells say what they run (a click shows the command whole: a 1,400 px command was cut to 76 px);
    # the commands, quoted for the shell, name the case and this hardware
    assert (top["reproduce"], top["bisect"]) == ("collect", "bisect")
    judged = _triage_rows(dash_db, h200)[0]
    assert shlex.split(judged["bisect"]) == ["kernelwatch", "bisect", "--hardware", h200[:12], "--", STEP_CASE]
    assert shlex.split(judged["reproduce"])[-2:] == ["--case", STEP_CASE]


def _triage_rows(url: str, fp: str) -> list[dict]:
    """The rows of Triage's first section on hardware ``fp``, commands included (the table shows their names)."""
    from kernelwatch.dashboard import data, verdicts

    eng = open_database(url)
    (_, run), *_ = data.triage_runs(eng, fp, None)
    return verdicts.triage(eng, run["id"], None, data.BASE_BRANCH).rows


def test_triage_default_shows_changes_of_every_hardware(page) -> None:
    at = page("triage")
    heads = [s.value for s in at.subheader]
    assert heads[0].startswith("NVIDIA H200")  # measured hardware first
    assert any("CPU interpreter" in h for h in heads) and len(heads) >= 4
    verdicts = {v for df in at.dataframe for v in df.value["verdict"]}
    assert "unchanged" not in verdicts and {"slower", "accuracy failed"} <= verdicts


def test_triage_kernel_filter(page, dash_db) -> None:
    """The newest H200 runs here are MSELoss-only copies: with softmax picked, Triage once judged them and said
    "Nothing changed in scaled_masked_softmax" about a run that never measured it. It judges the newest run
    holding softmax perf (and the newest holding its accuracy), and lists softmax cases only."""
    at = page("triage", hardware=fingerprint(dash_db, "NVIDIA H200"), kernel="scaled_masked_softmax")
    counts = [t.value for t in at.text]
    assert len(counts) == 2 and "no cases" not in counts and at.dataframe, counts
    assert all(set(d.value["kernel"]) == {"scaled_masked_softmax"} for d in at.dataframe)


def test_triage_warns_when_software_changed_since_the_baseline(tmp_path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'sw.db'}"
    engine = open_database(url)
    base = load_artifact(REPEAT)
    first, cand = stepped_copies(base, 2, 1.0, "nothing")  # a SYNTHETIC run is judged against its own branch's
    cand = to_data(cand)
    cand["hardware"]["driver"] = "590.12"
    cand["run"]["versions"]["torch"] = "2.12.0+cu130"
    ingest_documents(engine, [("base", base), ("first", first), ("cand", parse_artifact(dumps(cand)))])
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    monkeypatch.setenv("KERNELWATCH_DB", url)
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(PAGES / "triage.py"), default_timeout=120)
    at.run()
    assert not at.exception
    warning = " ".join(w.value for w in at.warning)
    assert "Software changed since the baseline" in warning
    assert "driver 580\\.159\\.04 \\-\\> 590\\.12" in warning and "torch 2\\.11\\.0\\+cu130" in warning


# ---------------------------------------------------------------------------------------------
# Case page
# ---------------------------------------------------------------------------------------------
def test_case_page_times_with_bands_speedups_floor_and_commands(page, dash_db) -> None:
    h200 = fingerprint(dash_db, "NVIDIA H200")
    at = page("case", case=STEP_CASE, hardware=h200)
    kernel_panel, speed, floor, times = specs(at)
    # the kernel alone, on a linear axis fitted to it, with its band and the two runs the verdict compares
    names = [t.get("name") for t in kernel_panel["data"]]
    assert "kernel (Triton)" in names and "eager PyTorch" not in names
    assert kernel_panel["layout"]["yaxis"].get("type", "linear") == "linear"
    assert sum(t.get("fill") == "tonexty" for t in kernel_panel["data"]) == 1
    assert any(n and n.startswith("candidate ") for n in names) and any(n and n.startswith("baseline ") for n in names)
    parts = [t for t in kernel_panel["data"] if t.get("name") == "kernel (Triton)"]  # measured, SYNTHETIC copies
    kernel = {k: [v for t in parts for v in (values(t[k]) if k == "y" else t[k])] for k in ("x", "y", "hovertext")}
    ys = kernel["y"]
    low, high = kernel_panel["layout"]["yaxis"]["range"]
    assert high - low <= 3 * (max(ys) - min(ys)) and len(kernel_panel["layout"]["yaxis"]["tickvals"]) >= 3
    # every implementation's absolute time, log axis, one band each (in an expander)
    names = [t.get("name") for t in times["data"]]
    assert {"kernel (Triton)", "eager PyTorch", "torch.compile"} <= set(names)
    assert sum(t.get("fill") == "tonexty" for t in times["data"]) == 3  # one p20-p80 band per implementation
    assert times["layout"]["yaxis"]["type"] == "log" and "µs" in times["layout"]["yaxis"]["title"]["text"]
    hover = kernel["hovertext"][-1]
    assert "SYNTHETIC" in hover and "run " in hover and "kernelwatch collect" in hover and "2026-11-30" in hover
    assert len(set(kernel["x"])) == len(kernel["x"])  # repeats of one commit stay apart
    # one speedup panel per other implementation, each with its own axis
    assert {"eager PyTorch", "torch.compile"} <= {t["name"] for t in speed["data"]}
    assert {"yaxis", "yaxis2"} <= set(speed["layout"])
    titles = [a["text"] for a in speed["layout"].get("annotations", [])]
    assert titles == [
        "over eager PyTorch (t eager PyTorch / t kernel)",
        "over torch.compile (t torch.compile / t kernel)",
    ]
    assert any(t["name"] == "100% = the ceiling" for t in floor["data"])
    assert any("copy rate" in c.value and "over 100% are possible" in c.value for c in at.caption)
    codes = [c.value for c in at.code]
    assert f"kernelwatch bisect --hardware {h200[:12]} -- {STEP_CASE}" in codes
    assert any("SYNTHETIC" in w.value for w in at.warning)


def test_case_page_shows_wall_time_per_call_where_recorded(page, dash_db) -> None:
    at = page("case", case=STEP_CASE, hardware=fingerprint(dash_db, "NVIDIA H200"))
    times = specs(at)[3]  # every implementation's time, in the expander
    wall = {t["name"]: t for t in times["data"] if "wall time per call" in (t.get("name") or "")}
    assert set(wall) == {
        "kernel (Triton): wall time per call",
        "eager PyTorch: wall time per call",
        "torch.compile: wall time per call",
    }
    assert len(wall["kernel (Triton): wall time per call"]["x"]) == 3  # only the three runs that recorded it
    runs = at.dataframe[0].value
    assert runs["kernel wall µs/call"].notna().sum() == 3


def test_floor_ceiling_uses_a_measured_read_ceiling_for_read_only_streams() -> None:
    from kernelwatch.dashboard.data import floor_ceiling

    factor, text = floor_ceiling({"peak_gbps": 4250.0, "peak_read_gbps": 4600.0}, "read")
    assert factor == pytest.approx(4250 / 4600) and "read ceiling" in text  # 108% of copy -> 99.8% of read
    factor, text = floor_ceiling({"peak_gbps": 4250.0, "peak_read_gbps": None}, "read")
    assert factor == 1.0 and "over 100% are possible" in text
    factor, text = floor_ceiling({"peak_gbps": 4250.0, "peak_read_gbps": 4600.0}, "copy")
    assert factor == 1.0 and "max(bytes / measured copy GB/s" in text  # reads and writes: the copy rate
    factor, text = floor_ceiling({"peak_gbps": 4250.0, "peak_read_gbps": 4600.0}, None)
    assert factor == 1.0 and "did not record its ceiling" in text


def test_case_page_marks_change_points_and_shows_profiler_counters(page, dash_db) -> None:
    synth = fingerprint(dash_db, "NVIDIA H200 (synthetic)")
    case = SyntheticHistory(cases=9).case_list()[0]["key"]  # mse_loss: 25% slower from run 12 on
    at = page("case", case=case, hardware=synth)
    times = specs(at)[0]
    marks = [t for t in times["data"] if t.get("name") == "change point"]
    assert marks and any("+2" in h for h in marks[0]["hovertext"])
    assert times["layout"]["shapes"], "a vertical line at the change"
    real = page(
        "case",
        case="mse_loss/persistent/fp32/direction=fwd,reduction=mean,shape=1048576",
        hardware=fingerprint(dash_db, "NVIDIA H200"),
    )
    counters = real.dataframe[-1].value
    assert "dram_throughput_pct" in set(counters["name"]) and (counters["ideal"] == ">80").any()


def test_case_page_marks_an_acknowledged_change(tmp_path, monkeypatch) -> None:
    from kernelwatch.store.ack import add_ack

    url = f"sqlite:///{tmp_path / 'ack.db'}"
    build(url)
    synth = fingerprint(url, "NVIDIA H200 (synthetic)")
    history = SyntheticHistory(runs=20, cases=9, hardware=2, steps=[Step(12, 1.25, "mse_loss")])
    case = history.case_list()[0]["key"]
    add_ack(open_database(url), case, synth, history.commit(12)["sha"], "new tiling: <b>expected</b>", "kw")
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    monkeypatch.setenv("KERNELWATCH_DB", url)
    at = AppTest.from_file(str(PAGES / "case.py"), default_timeout=120)
    at.query_params.update(case=case, hardware=synth)
    at.run()
    assert not at.exception
    acks = next(t for t in specs(at)[0]["data"] if t.get("name") == "acknowledged")
    assert "new tiling: &lt;b&gt;expected&lt;/b&gt;" in acks["hovertext"][0]  # HTML arrives escaped
    assert any(
        (df.value.get("reason") == "new tiling: <b>expected</b>").any() for df in at.dataframe if "reason" in df.value
    )


# ---------------------------------------------------------------------------------------------
# Charts a person can read
# ---------------------------------------------------------------------------------------------
def test_performance_groups_cases_into_few_labelled_series_with_stable_colours(page, dash_db) -> None:
    h200 = fingerprint(dash_db, "NVIDIA H200")
    at = page("performance", kernel="mse_loss", hardware=h200, group="shape")
    (spec,) = specs(at)
    lines = [
        t
        for t in spec["data"]
        if t.get("showlegend") is not False
        and t["name"] not in ("change point",)
        and not t["name"].startswith(("parity", "target"))
    ]
    # short labels, never raw case keys; a line per branch (runs of two branches are never joined): "· branch"
    assert 2 <= len(lines) <= 8 and all("/" not in t["name"].split(" · ")[0] for t in lines)
    assert {t["name"].split(" · ")[1] for t in lines if " · " in t["name"]} == {"synthetic/step"}
    assert all(t["line"]["dash"] == "dash" for t in lines if " · " in t["name"])
    assert {a["text"] for a in spec["layout"]["annotations"]} >= {
        "kernel speedup over eager PyTorch (t eager / t kernel)",
        "kernel speedup over torch.compile (t compile / t kernel)",
    }  # torch.compile has its own panel
    assert spec["layout"]["yaxis"]["type"] == "log" and spec["layout"]["yaxis2"]["type"] == "log"
    colour = {t["name"]: t["line"]["color"] for t in lines}
    filtered = specs(page("performance", kernel="mse_loss", hardware=h200, group="shape", dtype="fp32"))[0]
    for t in filtered["data"]:
        if t["name"] in colour and t.get("showlegend") is not False:
            assert t["line"]["color"] == colour[t["name"]], "a label keeps its colour when filters change"
    refs = [t["name"] for t in spec["data"] if t["name"].startswith(("parity", "target"))]
    assert "parity (1x)" in refs  # legend entries: they cannot overlap
    # a target line only for the lines whose every case has it: 1.8x eager is the target of the persistent
    # 33554432-element cases, not of the atomic ones the same line averages over
    assert not [r for r in refs if r.startswith("target")]
    assert "one line per shape; each point: geometric mean over 2 variants, 2 dtypes" in spec["layout"]["title"]["text"]
    persistent = specs(page("performance", kernel="mse_loss", hardware=h200, group="shape", variant="persistent"))[0]
    assert [t["name"] for t in persistent["data"] if t["name"].startswith("target")] == [
        "target 1x eager (4096)",
        "target 1.8x eager (33554432)",
    ]


def test_performance_defaults_to_one_line_per_variant_and_dtype(page, dash_db) -> None:
    """One geometric mean over variants and dtypes under "kernel speedup" hid which variant is slow."""
    at = page("performance", kernel="mse_loss", hardware=fingerprint(dash_db, "NVIDIA H200"))
    assert at.selectbox(key=f"group-{fingerprint(dash_db, 'NVIDIA H200')}").value == "variant/dtype"
    (spec,) = specs(at)
    lines = {t["name"] for t in spec["data"] if t.get("mode") == "lines+markers" and t.get("showlegend") is not False}
    assert lines and all(len(n.split(" · ")[0].split("/")) == 2 for n in lines)
    assert "geometric mean" not in spec["layout"]["title"]["text"]  # nothing mixed: nothing to warn about


def test_performance_caps_series_at_eight(page, dash_db) -> None:
    at = page("performance", kernel="mse_loss", hardware=fingerprint(dash_db, "NVIDIA H200"), group="shape", last="200")
    for spec in specs(at):
        shown = {t["name"] for t in spec["data"] if t.get("mode") == "lines+markers"}
        assert len(shown) <= 8


def test_performance_marks_the_synthetic_step_as_a_change_point(page, dash_db) -> None:
    at = page("performance", kernel="mse_loss", hardware=fingerprint(dash_db, "NVIDIA H200 (synthetic)"))
    (spec,) = specs(at)
    assert "SYNTHETIC" in spec["layout"]["title"]["text"]
    marks = [t for t in spec["data"] if t["name"] == "change point"]
    assert marks and any("+25" in h or "+24" in h or "+26" in h for t in marks for h in t["hovertext"])


def test_roofline_shows_the_measured_ceiling(page, dash_db) -> None:
    at = page("roofline", hardware=fingerprint(dash_db, "NVIDIA H200"), run="9816bd90")
    (spec,) = specs(at)
    assert spec["layout"]["xaxis"]["type"] == "log" and spec["layout"]["yaxis"]["type"] == "log"
    assert any(t["name"] == "measured roofline" for t in spec["data"])
    assert {"kernel (Triton)", "eager PyTorch"} <= {t["name"] for t in spec["data"]}
    assert any("copy rate" in c.value for c in at.caption)


# ---------------------------------------------------------------------------------------------
# Accuracy across hardware
# ---------------------------------------------------------------------------------------------
def test_accuracy_heatmap_keeps_the_h200_whose_newest_run_is_perf_only(page) -> None:
    at = page("accuracy")
    heat = specs(at)[0]["data"][0]
    assert heat["type"] == "heatmap"
    assert "NVIDIA H200 (b10424)" in heat["x"] and any("CPU interpreter" in x for x in heat["x"])
    col = heat["x"].index("NVIDIA H200 (b10424)")
    rows = dict(zip(heat["y"], (r[col] for r in heat["z"])))
    assert rows["mse_loss fp32"] is not None and rows["scaled_masked_softmax fp16"] is not None
    failing = next(df.value for df in at.dataframe if "budget" in df.value)
    assert list(failing.columns[:2]) == ["hardware", "kernel"] and set(failing["hardware"]) == {
        next(x for x in heat["x"] if "CPU interpreter" in x)
    }
    assert "Failing cases: 1" in [s.value for s in at.subheader]


def test_accuracy_drill_down_lists_every_case_per_hardware(page) -> None:
    at = page("accuracy", cell="mse_loss fp16")
    detail = next(df.value for df in at.dataframe if "case" in df.value and "NVIDIA H200 (b10424)" in df.value)
    assert len(detail) > 10 and set(detail["NVIDIA H200 (b10424)"]) - {"-"}


# ---------------------------------------------------------------------------------------------
# Defaults that show something
# ---------------------------------------------------------------------------------------------
def test_compare_opens_on_two_comparable_runs_with_unique_labels(page, dash_db) -> None:
    from kernelwatch.store.queries import list_runs

    at = page("compare")
    a, b = at.selectbox(key="a"), at.selectbox(key="b")
    runs = {r["id"]: r for r in list_runs(open_database(dash_db, readonly=True))}
    assert runs[a.value]["fingerprint"] == runs[b.value]["fingerprint"] and a.value != b.value
    assert b.value == next(iter(runs))  # the newest run (a synthetic one here), against Triage's baseline for it
    frame = at.dataframe[0].value
    assert len(frame) >= 10 and {"B/A time", "p", "budget delta"} <= set(frame.columns)
    ratios = list(frame["B/A time"].dropna())
    assert ratios == sorted(ratios, reverse=True)  # by effect, most slowed first (it was alphabetical)
    assert len(set(a.options)) == len(a.options) == len(runs)  # the four repeats of 653a5717 are told apart
    assert all(" kernel" in o or " · mse_loss" in o or " · scaled" in o or " · fused" in o for o in a.options)
    assert all("perf " in o or "accuracy " in o for o in a.options)  # what each run holds
    assert at.get("download_button")


def test_compare_significance_on_the_synthetic_step(page, dash_db) -> None:
    from kernelwatch.store.queries import list_runs

    runs = [r for r in list_runs(open_database(dash_db, readonly=True)) if r["hardware"] == "NVIDIA H200 (synthetic)"]
    at = page("compare", a=runs[10]["id"][:8], b=runs[0]["id"][:8])
    frame = at.dataframe[0].value
    slowed = frame[frame["kernel"] == "mse_loss"]
    assert (slowed["B/A time"] > 1.15).all()
    # the gate's verdicts and p-values, not a statistic of its own (it once coloured red, p=4e-49, a case the
    # gate called noise): launch-bound cases stay "noisy", the others are regressions
    from kernelwatch.gate.judge import decide
    from kernelwatch.store.export import export_run

    engine = open_database(dash_db, readonly=True)
    gate = {v.case: v for v in decide(engine, export_run(engine, runs[0]["id"]), runs[10]["id"]).verdicts}
    from kernelwatch.dashboard.data import case_labels

    by_label = dict(zip(case_labels(list(gate), [v.kernel for v in gate.values()]), gate.values()))
    triton = frame[frame["impl"] == "kernel (Triton)"]
    from kernelwatch.dashboard.verdicts import triage

    judged = {r["case"]: r["verdict"] for r in triage(engine, runs[0]["id"], runs[10]["id"]).rows}
    assert list(triton["gate"]) == [judged[by_label[c].case] for c in triton["case"]]  # Triage's words
    assert "slower" in set(slowed["gate"])
    shown_p = slowed[slowed["gate"] == "slower"]["p"]  # as people read it: "0.0012", "< 1e-6"
    assert all(p == "< 1e-6" or float(p) < 0.01 for p in shown_p), list(shown_p)


def test_profiler_opens_on_a_ratio_metric_with_data(page) -> None:
    at = page("profiler")
    assert at.selectbox(key="kernel").value == "mse_loss"
    assert at.selectbox(key="metric").value == "dram_throughput_pct"
    (spec,) = specs(at)
    ys = [v for t in spec["data"] for v in values(t["y"]) if v is not None]
    assert ys and max(ys) > 80 and spec["layout"]["shapes"]  # values and the ideal band
    assert all("/" not in t["name"] for t in spec["data"])


def test_overview_lists_each_hardware_and_missing_cells_read_dash(page) -> None:
    at = page("overview")
    heads = [s.value for s in at.subheader]
    assert heads[0].startswith("NVIDIA H200") and any("CPU interpreter" in h for h in heads)
    cpu = at.dataframe[next(i for i, h in enumerate(heads) if "CPU interpreter" in h)]
    assert cpu.value.iloc[0]["accuracy failed"] == 1
    # a CPU run has no speed: its columns are named once, not drawn as a column of dashes (or zeros)
    assert "x eager" not in cpu.value.columns and "slower" not in cpu.value.columns
    assert any("none on this hardware" in c.value and "x eager" in c.value for c in at.caption), [
        c.value for c in at.caption
    ]
    h200 = at.dataframe[0].value.set_index("kernel")
    # Triage's counts: the newest run with kernel timings (the stepped copy: 1 slower) and the newest WITH
    # accuracy results (192 gating cases judged against their baseline)
    assert h200.loc["mse_loss", "slower"] == 1 and h200.loc["mse_loss", "unchanged"] >= 192


@pytest.mark.parametrize("name", VIEWS)
def test_every_table_shows_missing_values_as_a_dash(page, name) -> None:
    at = page(name)
    assert at.dataframe or name == "case"
    assert all(df.proto.placeholder == "-" for df in at.dataframe)


# ---------------------------------------------------------------------------------------------
# Safe by construction
# ---------------------------------------------------------------------------------------------
HOSTILE_QUERIES = [
    {"kernel": "[click here](https://example.com/k)"},
    {"kernel": "![t](https://example.com/t.png)"},
    {"hardware": "<img src=https://example.com/i.png>"},
    {"last": "²"},
    {"last": "٣"},  # an Arabic-Indic digit three
    {"last": "１２"},  # full-width digits
    {"last": "DROP TABLE run"},
    {"case": SHELL_CASE + "x"},
    {"run": "zz<script>", "a": "[a](https://example.com)", "base": "ffff"},
    {"[x](https://example.com/p)": "1"},
]


def _page_queries() -> list:
    """Every page with every hostile query (80 page runs, about 50 s): the fast lane runs two queries per page, page
    ``i`` taking queries ``i`` and ``i + len(VIEWS)`` (mod their number), so each page and each query is in it once at
    least; the rest are marked slow (`make test` runs all)."""
    ids = [",".join(q) for q in HOSTILE_QUERIES]
    ids = [f"{i}{ids[:n].count(i)}" if ids.count(i) > 1 else i for n, i in enumerate(ids)]  # pytest's own ids
    fast = {(v, (v + k * len(VIEWS)) % len(HOSTILE_QUERIES)) for v in range(len(VIEWS)) for k in (0, 1)}
    assert {q for _, q in fast} == set(range(len(HOSTILE_QUERIES)))
    return [
        pytest.param(name, query, id=f"{name}-{ids[q]}", marks=() if (v, q) in fast else pytest.mark.slow)
        for v, name in enumerate(VIEWS)
        for q, query in enumerate(HOSTILE_QUERIES)
    ]


@pytest.mark.parametrize(("name", "query"), _page_queries())
def test_url_values_never_raise_and_never_render_as_markdown(page, name, query) -> None:
    at = page(name, **query)  # page() asserts no exception
    shown = texts(at)  # Markdown sources: an escaped URL reads "https\:\/\/example\.com"
    assert "https://example.com" not in shown and not raw_markup(shown)
    assert any(w.value for w in [*at.warning, *at.error])  # the bad value is reported, not silently used


def test_hostile_names_reach_pages_escaped_and_commands_quoted(page, dash_db, tmp_path) -> None:
    evil = fingerprint(dash_db, EVIL_HW)
    at = page("triage", hardware=evil)
    assert "https://example.com" not in texts(at) and not raw_markup(texts(at))
    table = at.dataframe[0].value
    rows = _triage_rows(dash_db, evil)
    assert [r["verdict"] for r in rows[:2]] == list(table["verdict"][:2])  # the rows the table shows first
    assert {shlex.split(r["bisect"])[-1] for r in rows[:2]} == {SHELL_CASE, MD_CASE}
    # 1.5x on two runs of history: slower, or sent to confirm when the runs cannot settle it; both fail the gate
    assert set(table["verdict"][:2]) <= {LABELS["regression"], LABELS["suspect"]}, list(table["verdict"][:4])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "kernelwatch"):  # stand-ins that print their arguments, one per line
        (bin_dir / tool).write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    for row in rows[:2]:
        case = shlex.split(row["bisect"])[-1]
        for command in (row["reproduce"], row["bisect"]):
            out = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
            assert case in out.stdout.splitlines()  # one argument, intact
    assert not (tmp_path / "pwned").exists()
    case_page = page("case", case=MD_CASE, hardware=evil)
    blobs = [json.dumps(spec) for spec in specs(case_page)]
    assert all("<a href" not in b and "<img" not in b for b in blobs)  # Plotly would render those
    assert any("&lt;a href" in b for b in blobs)  # the case name is there, escaped


# ---------------------------------------------------------------------------------------------
# The demo: the whole shipped H200 history, then the SYNTHETIC demo branch `make demo` adds
# ---------------------------------------------------------------------------------------------


def _all_history() -> tuple:
    """Every run of ci/history, read once per process (tests/history.py); none of these tests changes one."""
    return tuple(doc for _, doc in history_runs())


DEMO_SOURCE = ROOT / "ci" / "history" / "2026-11-30T2052-cd36845f-h200x2-full-2gpu.json.gz"


@pytest.fixture(scope="module")
def history_dbs(tmp_path_factory) -> tuple[str, str]:
    """(every real run of ci/history, the same plus the demo branch) as two SQLite files."""
    import shutil

    folder = tmp_path_factory.mktemp("demo")
    engine = open_database(f"sqlite:///{folder / 'real.db'}")
    ingest_documents(engine, list(history_runs()))
    engine.dispose()
    shutil.copy(folder / "real.db", folder / "demo.db")
    from click.testing import CliRunner  # as `make demo` plants it: after the newest real run

    from kernelwatch.cli import main

    planted = CliRunner().invoke(
        main, ["synth", "--db", f"sqlite:///{folder / 'demo.db'}", "--demo-from", str(DEMO_SOURCE)]
    )
    assert planted.exit_code == 0, planted.output
    return f"sqlite:///{folder / 'real.db'}", f"sqlite:///{folder / 'demo.db'}"


def _triage_at(url: str, monkeypatch, **query: str) -> AppTest:
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    monkeypatch.setenv("KERNELWATCH_DB", url)
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(PAGES / "triage.py"), default_timeout=180)
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture(scope="module")
def newest_h200() -> dict[str, object]:
    """The newest single-model H200 run of the shipped history with perf results, and the newest with accuracy."""
    docs = [d for d in _all_history() if d.hardware.device_name == "NVIDIA H200"]
    return {
        section: max((d for d in docs if getattr(d, section)), key=lambda d: d.run.started_at)
        for section in ("perf", "accuracy")
    }


def test_triage_judges_the_newest_perf_run_and_the_newest_accuracy_run(history_dbs, newest_h200, monkeypatch) -> None:
    """A newest H200 run may hold only RMSNorm+MatMul accuracy (it once did): judging only it hid every perf
    result. Both defaults get a section, each with its own run."""
    at = _triage_at(history_dbs[0], monkeypatch)
    heads = [s.value.split(" — ")[1] for s in at.subheader]
    captions = " ".join(c.value for c in at.caption)
    perf, accuracy = newest_h200["perf"].run.id[:8], newest_h200["accuracy"].run.id[:8]
    assert f"run {perf}" in captions and f"run {accuracy}" in captions
    if perf == accuracy:  # one run holds both: one section
        assert heads == ["newest run with perf and accuracy"]
    else:
        assert heads == ["newest run with perf", "newest run with accuracy"]


def test_a_picked_kernel_is_judged_in_the_newest_runs_that_hold_it(tmp_path, monkeypatch) -> None:
    """With a kernel picked, Triage judges the newest runs holding that kernel's perf and its accuracy: the
    shipped history's newest H200 run once held only softmax, and judging it for MSELoss showed "no cases".
    The history is cut just after the newest H200 perf run that lacks some kernel, so that run is the newest."""
    docs = sorted(_all_history(), key=lambda d: d.run.started_at)
    h200 = [d for d in docs if d.hardware.device_name == "NVIDIA H200" and d.perf]
    every = {r.case.split("/")[0] for d in h200 for r in d.perf}
    partial = max((d for d in h200 if {r.case.split("/")[0] for r in d.perf} < every), key=lambda d: d.run.started_at)
    kept = [d for d in docs if d.run.started_at <= partial.run.started_at]
    url = f"sqlite:///{tmp_path / 'cut.db'}"
    engine = open_database(url)
    ingest_documents(engine, [(d.run.id, d) for d in kept])
    engine.dispose()
    elsewhere = sorted(every - {r.case.split("/")[0] for r in partial.perf})
    at = _triage_at(url, monkeypatch, kernel=elsewhere[0])
    assert [s.value.split(" — ")[1] for s in at.subheader][0] in (
        "newest run with perf",
        "newest run with perf and accuracy",
    )
    counts = [t.value for t in at.text]
    assert counts and "no cases" not in counts, counts
    assert f"run {partial.run.id[:8]}" not in " ".join(c.value for c in at.caption)


def test_triage_run_picker_says_what_each_run_holds(history_dbs, monkeypatch) -> None:
    at = _triage_at(history_dbs[0], monkeypatch, hardware=fingerprint(history_dbs[0], "NVIDIA H200"))
    picker = at.selectbox(key="run")
    labels = list(picker.options)
    assert labels[0].startswith("newest with perf and with accuracy")
    assert any("f7be52d5" in x and "accuracy 96 · fused_rmsnorm_matmul · 2 GPUs" in x for x in labels)
    assert any("cd36845f" in x and "perf 62 + accuracy 358 · 3 kernels · 2 GPUs" in x for x in labels)


def test_a_demo_built_right_after_a_real_run_is_dated_between_it_and_now() -> None:
    """A real run 3 minutes ago: copies 10 minutes apart after it were dated in the future, where the gate never
    takes a baseline from, and the demo's slowed cases read "suspect" against another branch's run."""
    import datetime as dt

    from kernelwatch.store.schema import parse_time
    from kernelwatch.store.synthetic import demo_branch

    now = dt.datetime(2026, 12, 2, 17, 20, tzinfo=dt.timezone.utc)
    for ago in (dt.timedelta(minutes=3), dt.timedelta(days=2)):
        docs = demo_branch(load_artifact(DEMO_SOURCE), after=now - ago, now=now)
        stamps = [parse_time(t) for d in docs for t in (d.run.commit.time, d.run.started_at, d.run.finished_at)]
        assert now - ago < stamps[0] and stamps == sorted(stamps) and stamps[-1] <= now, stamps


def test_demo_branch_shows_a_regression_an_improvement_and_an_accuracy_drift(history_dbs, monkeypatch) -> None:
    at = _triage_at(history_dbs[1], monkeypatch)
    assert "SYNTHETIC" in at.subheader[0].value and "perf and accuracy" in at.subheader[0].value
    table = at.dataframe[0].value
    verdicts = dict(zip(table["verdict"], table["case"]))
    assert {"slower", "faster", "accuracy warning"} <= set(verdicts)
    assert verdicts["slower"].startswith("masked/bf16 ") and verdicts["faster"].startswith("atomic/fp32 ")
    assert verdicts["accuracy warning"].startswith("fold_gamma/fp16 ")
    slower = table[table["verdict"] == "slower"]["effect %"]
    assert ((slower > 10) & (slower < 20)).all()
    # case labels tell rows apart within the case column's width: softmax keys are ~80 characters long
    for _, rows in table.groupby("kernel"):
        assert rows["case"].is_unique and rows["case"].str.len().max() <= 60, list(rows["case"])


def _page_at(url: str, name: str, monkeypatch, **query: str) -> AppTest:
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    monkeypatch.setenv("KERNELWATCH_DB", url)
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=180)
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


DEMO_SLOWER = "scaled_masked_softmax/masked/bf16/density=0.1,direction=fwd,mask=batch,scale=0.125,shape=8x16x4096x4096"


def test_case_page_labels_at_most_twelve_runs_with_short_commits(history_dbs, monkeypatch) -> None:
    """~35 rotated "commit·run" labels overlapped; past 12 runs every k-th run is labelled by its commit."""
    url = history_dbs[1]
    at = _page_at(url, "case", monkeypatch, case=DEMO_SLOWER, hardware=fingerprint(url, "NVIDIA H200"))
    times = specs(at)[0]
    xs = [x for t in times["data"] if t.get("name") == "kernel (Triton)" for x in t["x"]]  # the line's parts
    assert len(xs) > 12
    axis = times["layout"]["xaxis"]
    assert len(axis["tickvals"]) <= 12 and all(len(t) <= 8 and "·" not in t for t in axis["ticktext"])
    assert set(axis["tickvals"]) <= set(xs)


def test_log_axes_read_as_plain_ascending_numbers(history_dbs, monkeypatch) -> None:
    """The accuracy drift chart's log axis read "1, 5, 2, 0.1" (Plotly's minor 2 and 5 labels, dtick D2)."""
    at = _page_at(history_dbs[1], "accuracy", monkeypatch)
    drift = specs(at)[-1]
    axis = drift["layout"]["yaxis"]
    assert axis["type"] == "log" and "dtick" not in axis
    ticks = [float(t) for t in axis["ticktext"]]
    assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks) and 1.0 in ticks
    assert ticks == pytest.approx(axis["tickvals"])  # each label is its tick's own value ("1" or "1.0")


def test_roofline_table_names_implementations_and_units_and_the_axis_fits_the_points(page, dash_db) -> None:
    at = page("roofline", hardware=fingerprint(dash_db, "NVIDIA H200"), run="9816bd90")
    table = at.dataframe[0].value
    assert list(table.columns[:2]) == ["kernel", "case"]
    assert "kernel (Triton) (% of floor)" in table.columns and "triton" not in table.columns
    assert not any(c.startswith(("fused_rmsnorm_matmul/", "mse_loss/")) for c in table["case"])
    (spec,) = specs(at)
    points = [x for t in spec["data"] if t.get("mode") == "markers" for x in values(t["x"])]
    lo, hi = spec["layout"]["xaxis"]["range"]
    assert lo <= math.log10(min(points)) and math.log10(max(points)) <= hi
    assert hi - lo <= math.log10(max(points) / min(points)) + 1.5  # not five decades for points in one


def test_profiler_shows_metric_display_names_and_how_old_the_counters_are(page) -> None:
    at = page("profiler")
    assert at.selectbox(key="metric").value == "dram_throughput_pct"  # the URL keeps the stored name
    (spec,) = specs(at)
    assert "DRAM throughput (% of peak)" in spec["layout"]["title"]["text"]
    assert "DRAM throughput (% of peak)" in at.selectbox(key="metric").options[0]
    assert any("Counters from 1 run" in c.value and "behind" in c.value for c in at.caption)


def test_overview_times_read_as_dates_not_iso_strings(page) -> None:
    captions = " ".join(c.value for c in page("overview").caption)
    assert "UTC" in captions and not re.search(r"\d{2}:\d{2}:\d{2}\.\d+Z", captions)


def test_case_page_plain_text_has_no_markdown_backticks(page, dash_db) -> None:
    at = page(
        "case",
        case="scaled_masked_softmax/causal/bf16/direction=bwd,scale=0.5,shape=1x100x100",
        hardware=fingerprint(dash_db, "NVIDIA H200"),
    )  # an accuracy case: no profiler counters
    assert any("kernelwatch collect --profile" in c.value for c in at.caption)
    assert not [t.value for t in at.text if "`" in t.value]


def test_compare_and_performance_tables_tell_long_keys_apart(history_dbs, monkeypatch) -> None:
    """Softmax keys are ~90 characters: cut at the column's width, rows looked identical."""
    url = history_dbs[1]
    compare = _page_at(url, "compare", monkeypatch).dataframe[0].value
    perf = (
        _page_at(
            url, "performance", monkeypatch, kernel="scaled_masked_softmax", hardware=fingerprint(url, "NVIDIA H200")
        )
        .dataframe[0]
        .value
    )
    timed = compare[compare["B/A time"].notna()]  # the accuracy-only rows are labelled among themselves
    for frame in (timed, perf):
        assert frame["case"].str.len().max() <= 60, frame["case"].str.len().max()
    for _, rows in compare.groupby(["kernel", "impl", compare["B/A time"].isna()]):
        assert rows["case"].is_unique
    assert perf["case"].is_unique


def _h200_case_page(url: str, case: str, monkeypatch):
    """The case page of ``case`` on the H200 of ``url``, run without an exception: (the page, its table of runs)."""
    monkeypatch.setenv("KERNELWATCH_DB", url)
    page = AppTest.from_file(str(PAGES / "case.py"), default_timeout=180)
    page.query_params["case"] = case
    page.query_params["hardware"] = fingerprint(url, "NVIDIA H200")
    page.run()
    assert not page.exception, [e.value for e in page.exception]
    return page, next(d.value for d in page.dataframe if "GPU" in d.value.columns)


def test_triage_rows_and_the_case_page_name_the_physical_gpu(history_dbs, newest_h200, monkeypatch) -> None:
    """The physical device is data: each run of the shipped history ran on its own H200 (by UUID), and both
    pages say which GPU measured what."""
    at = _triage_at(history_dbs[0], monkeypatch, show="all cases")
    table = at.dataframe[0].value
    uuids = {r.device_uuid for r in newest_h200["perf"].perf if r.device_uuid}
    assert len(uuids) == 1 and set(table["GPU"].dropna()) == {f"H200 · {short_gpu(next(iter(uuids)))}"}  # model too
    case = "mse_loss/persistent/fp32/direction=fwd,reduction=mean,shape=268435456"
    _page, runs = _h200_case_page(history_dbs[0], case, monkeypatch)
    assert {f"H200 · {g}" for g in ("GPU-c848f83d", "GPU-12456339", "GPU-7b44cc34", "GPU-44732af5")} <= set(runs["GPU"])
    assert "graph" in set(runs["timing"])
    assert "host probe µs/launch" not in runs.columns  # timed on the device: no host probe to show


def test_case_page_shows_the_host_probe_of_a_wall_timed_case(history_dbs, monkeypatch) -> None:
    """An eager stack's figure follows its host's speed: the case page shows the host probe stored beside each
    run's kernel time (the real H200 run GPU-a7829a6c holds it; runs from before it show a dash) and says what
    it means. Defect caught: the probe stored but never shown, or shown for a case with no probe."""
    path = next((ROOT / "ci" / "history").glob("*host-probe*gpua7829a6c*"))
    case = "fused_rmsnorm_matmul/fold_gamma/fp16/bias=False,direction=fwd,layers=80,layout=contiguous,mode=eager,"
    case += "n=8192,shape=16x8192"
    stored = next(p for p in load_artifact(path).perf if p.case == case and p.implementation == "triton")
    page, runs = _h200_case_page(history_dbs[0], case, monkeypatch)
    probes = runs.set_index("GPU")["host probe µs/launch"]
    assert probes["H200 · GPU-a7829a6c"] == pytest.approx(stored.host_probe_us)
    assert probes.drop("H200 · GPU-a7829a6c").isna().all()
    assert any("Host probe" in c.value for c in page.caption)


def test_profiler_counters_name_the_launch_they_were_taken_from(tmp_path, monkeypatch) -> None:
    """A case starts helpers beside its kernel (LayerNorm+MatMul's statistics prepass): which launch the counters
    came from was invisible, and the prepass's SM throughput once stood under the GEMM's cases. The newest run
    names its launch; a run from before it was recorded says so."""
    real = max(
        (
            d
            for d in _all_history()
            if d.hardware.device_name == "NVIDIA H200"
            and any(r.value is not None for r in d.profiler)
            and all(r.launch is None for r in d.profiler)
        ),
        key=lambda d: d.run.started_at,
    )
    (newer,) = [to_data(d) for d in stepped_copies(real, 1, 1.0, "no case has this in its key")]
    launch = "<b>_ln_gemm_tma_kernel</b>"  # from a profiler's output: text, never markup
    for row in newer["profiler"]:
        row["launch"] = launch if row["value"] is not None else None
    url = f"sqlite:///{tmp_path / 'launch.db'}"
    engine = open_database(url)
    ingest_documents(engine, [("real", real), ("newer", parse_artifact(dumps(newer)))])
    engine.dispose()
    kernel = next(c.kernel for c in real.cases if any(r.case == c.key and r.value is not None for r in real.profiler))
    at = _page_at(url, "profiler", monkeypatch, hardware=fingerprint(url, "NVIDIA H200"), kernel=kernel)
    newest = at.dataframe[0].value
    assert set(newest["taken from launch"]) == {launch}
    assert newest["case"].is_unique and newest["case"].str.len().max() <= 60, list(newest["case"])  # rows apart
    (spec,) = specs(at)
    hovers = [h for t in spec["data"] for h in (t.get("hovertext") or t.get("text") or [])]
    assert any("launch &lt;b&gt;_ln_gemm_tma_kernel" in h for h in hovers) and not any("<b>_ln" in h for h in hovers)
    case = next(r.case for r in real.profiler if r.value is not None and r.case.startswith(kernel))
    h200 = fingerprint(url, "NVIDIA H200")
    counters = _page_at(url, "case", monkeypatch, case=case, hardware=h200).dataframe[-1].value
    row = counters[counters["name"] == "launch"].iloc[0]
    assert [v for k, v in row.items() if k not in ("name", "ideal")] == [NOT_RECORDED, launch]  # oldest first


def test_case_page_counters_read_oldest_run_first(history_dbs, monkeypatch) -> None:
    """The counters table put its runs in alphabetical order of their labels (3592a8c, 474a944, be613d2)."""
    case = (
        "fused_layernorm_matmul/center_prologue/bf16/bias=False,direction=fwd,layout=contiguous,n=4096,"
        "shape=4096x4096,shift=0.0"
    )
    docs = [
        d for d in _all_history() if d.hardware.device_name == "NVIDIA H200" and any(r.case == case for r in d.profiler)
    ]
    assert len(docs) >= 3
    docs.sort(key=lambda d: (d.run.commit.time or d.run.started_at, d.run.started_at))
    url = history_dbs[0]
    counters = _page_at(url, "case", monkeypatch, case=case, hardware=fingerprint(url, "NVIDIA H200")).dataframe[-1]
    assert list(counters.value.columns[2:]) == [point_label(d.run.commit.sha, d.run.id) for d in docs]


def test_the_readme_quotes_the_demos_triage_counts(history_dbs, monkeypatch) -> None:
    """README's "What you will see" quotes Triage's counts line of the demo: read it from the page it describes."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    quoted = re.search(r"SYNTHETIC\": `([^`]+)`", readme)
    assert quoted, "the README quotes the demo's Triage counts"
    at = _triage_at(history_dbs[1], monkeypatch)
    assert at.text[0].value == quoted[1]
    counts = dict(part.rsplit(": ", 1) for part in quoted[1].split(" · "))
    words = {"8": "eight", "16": "sixteen"}
    assert f"The first {words[counts['slower']]} rows are the slowed softmax cases" in readme
    assert f"the {words[counts['accuracy warning']]} RMSNorm+MatMul accuracy warnings" in readme
