"""Case facts (kernelwatch.kernels.names.CaseFacts): declared by each kernel's spec, recorded with each case of a run,
stored with the case, and read by the gate from the checked-out specs where they define the case, else from the run.
Each test names the defect it catches."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from kernelwatch.gate.judge import SpecCases, decide
from kernelwatch.kernels import discover
from kernelwatch.kernels.names import (
    CUBLAS_IMPL,
    EAGER_IMPL,
    LAUNCH_BATCH,
    NOISE_ATOMIC,
    NOISE_CLASSES,
    NOISE_GEMM,
    PEER_IMPLS,
    CaseFacts,
)
from kernelwatch.kernels.spec import case_facts, case_kernels
from kernelwatch.store.artifact import dumps, load_artifact, parse_artifact, to_data
from kernelwatch.store.engine import open_database
from kernelwatch.store.export import export_run
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.schema import ArtifactError, content_hash, recorded_facts

HISTORY = Path(__file__).resolve().parents[1] / "ci" / "history"
FULL = HISTORY / "2026-11-30T2052-cd36845f-h200x2-full-2gpu.json.gz"  # aad199d7: 62 perf + 358 accuracy cases
GEMM = "fused_rmsnorm_matmul/rstd_prepass/bf16/bias=False,direction=fwd,layout=contiguous,n=4096,shape=4096x4096"


@pytest.fixture(scope="module")
def specs():
    return discover()


def test_every_spec_declares_facts_the_collector_and_the_gate_agree_on(specs) -> None:
    """One definition of launch-bound: the cases the collector batches are the ones the gate gives the outlier-run
    term; an atomic reduction is declared by its spec (the gate guessed it from a variant name); eager PyTorch is
    every case's last reference; peers are peers."""
    from kernelwatch.collect.perf import calls_per_sample

    facts = case_facts(specs)
    assert len(facts) == sum(len(s.perf_cases()) for s in specs.values())
    for spec in specs.values():
        for case in spec.perf_cases():
            f = facts[case.key]
            assert f.noise in NOISE_CLASSES and f.references[-1][0] == EAGER_IMPL, case.key
            assert f.calls_per_sample == calls_per_sample(spec, case) == (LAUNCH_BATCH if f.launch_bound else 1)
            assert set(f.peers) <= set(PEER_IMPLS), case.key
    noise = {f.noise for f in facts.values()}
    assert {NOISE_ATOMIC, NOISE_GEMM} <= noise and any(f.launch_bound for f in facts.values())
    assert facts[GEMM].noise == NOISE_GEMM and facts[GEMM].reference_names == (CUBLAS_IMPL, EAGER_IMPL)


def test_the_committed_history_reads_the_facts_the_specs_declare(specs) -> None:
    """Runs from before facts were recorded are read off their rows (recorded_facts): for every case of the history
    the specs still define, the same noise class, launch-bound and calls per sample as the specs, and the specs'
    references among those the run timed. A drift here would judge history and new runs by different classes."""
    declared = case_facts(specs)
    compared = 0
    for path in sorted(HISTORY.glob("*.json.gz")):
        doc = load_artifact(path)
        timed = {(p.case, p.implementation) for p in doc.perf}
        for key, f in recorded_facts(doc).items():
            if key not in declared or (key, "triton") not in timed:
                continue
            want = declared[key]
            assert (f.noise, f.launch_bound, f.calls_per_sample) == (
                want.noise,
                want.launch_bound,
                want.calls_per_sample,
            ), (path.name, key)
            assert [r for r in want.reference_names if (key, r) in timed] == list(f.reference_names), (path.name, key)
            compared += 1
    assert compared > 1000


def test_facts_are_stored_with_the_case_and_never_change_the_runs_hash(db_url) -> None:
    """A run that records its cases' facts gets them back from the database (SQLite and PostgreSQL), and its content
    hash is an old artifact's: the facts are the spec's word, not a measurement."""
    data = to_data(load_artifact(FULL))
    before = content_hash(parse_artifact(dumps(data)))
    facts = case_facts(discover())
    for c in data["cases"]:
        if c["key"] in facts:
            c["facts"] = facts[c["key"]].to_data()
    doc = parse_artifact(dumps(data))
    assert content_hash(doc) == before
    engine = open_database(db_url)
    ingest_documents(engine, [("facts", doc)])
    back = export_run(engine, doc.run.id)
    stored = {c.key: c.facts for c in back.cases if c.facts is not None}
    assert stored and stored[GEMM] == facts[GEMM].to_data()
    assert recorded_facts(back)[GEMM] == facts[GEMM]


@pytest.mark.parametrize(
    "bad, says",
    [
        ({"noise": "fast"}, "noise class 'fast' is not one of"),
        ({"calls_per_sample": 0}, "calls_per_sample must be at least 1"),
        ({"references": [["torch_eager"]]}, "references must be a list of [implementation, label] pairs"),
        ({"extra": 1}, "case facts must hold exactly"),
    ],
)
def test_bad_facts_in_an_artifact_are_refused_naming_the_field(bad, says) -> None:
    data = to_data(load_artifact(FULL))
    good = case_facts(discover())[GEMM].to_data()
    case = next(c for c in data["cases"] if c["key"] == GEMM)
    case["facts"] = {**good, **bad}
    with pytest.raises(ArtifactError) as exc:
        parse_artifact(dumps(data))
    assert says in str(exc.value) and "facts" in str(exc.value), str(exc.value)


def _slower(doc: dict, factor: float, impl: str) -> dict:
    for p in doc["perf"]:
        if p["case"] == GEMM and p["implementation"] == impl:
            for key in ("median_ms", "p20_ms", "p80_ms", "min_ms", "call_ms"):
                if p.get(key) is not None:
                    p[key] *= factor
            p["samples_ms"] = [v * factor for v in p["samples_ms"]]
    return doc


def _later(doc: dict) -> dict:
    import datetime as dt
    import uuid

    from kernelwatch.store.schema import format_time, parse_time

    doc = copy.deepcopy(doc)
    doc["run"]["id"] = str(uuid.uuid4())
    for key in ("started_at", "finished_at"):
        if doc["run"].get(key):
            doc["run"][key] = format_time(parse_time(doc["run"][key]) + dt.timedelta(minutes=30))
    return doc


def test_the_gate_takes_a_cases_reference_from_its_facts(tmp_path, specs) -> None:
    """The gate's same-run references were a literal tuple (cuBLAS, eager) applied to every case. Now: the GEMM
    case 5.5% slower beside cuBLAS 4.5% slower is the machine (a suspect for confirm) when its facts name cuBLAS,
    from the checked-out specs or, where they do not define it, from the run; when the run's facts name eager
    PyTorch alone (which did not move), the kernel is slower. The specs' word beats the run's."""
    engine = open_database(f"sqlite:///{tmp_path / 'kw.db'}")
    full = to_data(load_artifact(FULL))
    ingest_documents(engine, [("base", parse_artifact(dumps(full)))])
    moved = _slower(_slower(_later(full), 1.055, "triton"), 1.045, CUBLAS_IMPL)
    declared = case_facts(specs)

    def verdict(recorded: CaseFacts | None, with_specs: bool) -> str:
        data = copy.deepcopy(moved)
        for c in data["cases"]:
            c["facts"] = None
            if c["key"] == GEMM and recorded is not None:
                c["facts"] = recorded.to_data()
        defined = SpecCases(case_kernels(specs), facts=declared) if with_specs else None
        result = decide(engine, parse_artifact(dumps(data)), "main", specs=defined)
        v = next(v for v in result.verdicts if v.case == GEMM and v.suite == "perf")
        return f"{v.status}: {v.reference}"

    eager_only = CaseFacts(NOISE_GEMM, False, 1, ((EAGER_IMPL, "eager PyTorch"),))
    assert verdict(declared[GEMM], with_specs=False) == f"suspect: {CUBLAS_IMPL}"
    assert verdict(eager_only, with_specs=False) == f"regression: {EAGER_IMPL}"
    assert verdict(eager_only, with_specs=True) == f"suspect: {CUBLAS_IMPL}"
    assert verdict(None, with_specs=False) == f"suspect: {CUBLAS_IMPL}"  # an old run: read off its rows
