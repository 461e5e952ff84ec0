"""A case the checked-out specs no longer define is retired: listed, and failing until acknowledged; one they still
define that the candidate did not measure is missing, whatever the candidate's artifact says of itself.

Probe 2 of the hostile review: the gate used to retire a baseline case on the candidate's own word (its notes said it
measured "every case of its specs"), so dropping a kernel's rows passed as "retired". Only the specs retire a case
now (``kernelwatch.gate.judge.retire``), and a retirement is a change someone acknowledges (``kernelwatch ack``).
"""

from __future__ import annotations

import copy

from kernelwatch.gate.judge import SpecCases, decide
from kernelwatch.gate.statuses import ACKNOWLEDGED, MISSING, RETIRED
from kernelwatch.store.ack import add_ack
from kernelwatch.store.artifact import dumps, parse_artifact, to_data
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.schema import scope_from_notes, whole_from_notes, whole_note
from kernelwatch.store.synthetic import SyntheticHistory

DROPPED = "/prologue_gamma/"  # the variant the candidate's spec no longer has
KERNELS = ["fused_rmsnorm_matmul", "mse_loss", "scaled_masked_softmax"]


def _history(db_url: str) -> dict:
    docs = [to_data(d) for d in SyntheticHistory(runs=8, cases=12, samples=20, seed=3, base_ms=0.1).documents()]
    ingest_documents(open_database(db_url), [(str(i), parse_artifact(dumps(d))) for i, d in enumerate(docs[:-1])])
    return docs[-1]


def _without(doc: dict, text: str, notes: str | None, status: str = "complete") -> dict:
    doc = copy.deepcopy(doc)
    doc["cases"] = [c for c in doc["cases"] if text not in c["key"]]
    for section in ("accuracy", "perf", "profiler"):
        doc[section] = [r for r in doc.get(section, []) if text not in r["case"]]
    doc["run"]["notes"], doc["run"]["status"] = notes, status
    return doc


def _specs(doc: dict, leave_out: str | None = None) -> SpecCases:
    """The specs of a tree that defines the candidate's (synthetic) cases, less those holding ``leave_out``."""
    kernel = {c["key"]: c["kernel"] for c in doc["cases"]}
    suites = {
        "accuracy": {a["case"]: kernel[a["case"]] for a in doc["accuracy"] if a["kind"] == "gate"},
        "perf": {p["case"]: kernel[p["case"]] for p in doc["perf"] if p["implementation"] == "triton"},
    }
    if leave_out:
        suites = {s: {k: v for k, v in cases.items() if leave_out not in k} for s, cases in suites.items()}
    return SpecCases(suites)


def _decide(db_url: str, doc: dict, specs: SpecCases):
    return decide(open_database(db_url, readonly=True), parse_artifact(dumps(doc)), "synthetic/main", specs=specs)


def test_the_note_reads_back_as_the_scope_once() -> None:
    """The notes of runs from before the scope was a field are read in one place (scope_from_notes)."""
    note = whole_note(["perf", "accuracy"], ["mse_loss", "fused_rmsnorm_matmul"])
    notes = f"ceilings per device: a; b; {note}; kernels run, changed since main (abc): x"
    assert whole_from_notes(notes) == ({"accuracy", "perf"}, {"fused_rmsnorm_matmul", "mse_loss"})
    assert whole_from_notes(None) == (set(), set()) and whole_from_notes("synthetic history") == (set(), set())
    scope = scope_from_notes(notes)
    assert scope["suites"] == ["accuracy", "perf"] and scope["kernels"] == ["fused_rmsnorm_matmul", "mse_loss"]
    assert scope["match"] is None and scope["carried"] == [] and scope_from_notes("synthetic history") is None


def test_a_case_the_specs_dropped_is_retired_and_fails_until_acknowledged(db_url) -> None:
    """The tree's specs no longer define prologue_gamma: each of its baseline cases is "retired" (failing, listed in
    a note), none missing; `kernelwatch ack` of the change at the candidate's commit lets the gate pass. Defect:
    the gate called every case of a dropped variant missing (a retirement could never pass), or, on the
    candidate's word alone, retired it silently."""
    last = _history(db_url)
    gone = sorted({c["key"] for c in last["cases"] if DROPPED in c["key"]})
    candidate = _without(last, DROPPED, whole_note(["accuracy", "perf"], KERNELS))
    result = _decide(db_url, candidate, _specs(last, DROPPED))
    assert result.exit_code == 1 and gone, [(v.case, v.status) for v in result.failed]
    assert {v.case for v in result.failed} == set(gone) and all(v.status == RETIRED for v in result.failed)
    assert result.retired == gone and not any(v.status == MISSING for v in result.verdicts)
    note = next(n for n in result.notes if n.startswith("retired:"))
    assert f"retired: {len(gone)} case" in note and "fused_rmsnorm_matmul: " in note and "acknowledged" in note
    engine = open_database(db_url)
    for case in gone:
        add_ack(engine, case, "NVIDIA H200 (synthetic)", candidate["run"]["commit"]["sha"], "variant taken out")
    result = _decide(db_url, candidate, _specs(last, DROPPED))
    assert result.exit_code == 0, [(v.case, v.status) for v in result.failed]
    assert {v.case for v in result.verdicts if v.status == ACKNOWLEDGED} == set(gone)


def test_the_candidates_word_retires_nothing(db_url) -> None:
    """Probe 2 in small: the specs still define prologue_gamma. A complete candidate whose notes say it measured
    every case of its specs, a filtered one (no note), one cut short, one whose note covers only another kernel:
    every prologue_gamma case the baseline measured is missing (accuracy too where its scope has the suite), none
    retired, the gate fails."""
    last = _history(db_url)
    gone = {c["key"] for c in last["cases"] if DROPPED in c["key"]}
    for notes, status, accuracy in (
        (whole_note(["accuracy", "perf"], KERNELS), "complete", True),
        ("synthetic history: not a measurement", "complete", True),
        (whole_note(["accuracy", "perf"], KERNELS), "partial", True),
        (whole_note(["perf"], KERNELS), "complete", False),
    ):
        result = _decide(db_url, _without(last, DROPPED, notes, status), _specs(last))
        missing = {v.case for v in result.verdicts if v.status == MISSING and v.suite == "perf"}
        assert missing == gone and result.exit_code == 1, (notes, status, missing)
        assert result.retired == [] and not any(v.status == RETIRED for v in result.verdicts)
        missing_accuracy = {v.case for v in result.verdicts if v.status == MISSING and v.suite == "accuracy"}
        assert missing_accuracy == (gone if accuracy else set()), (notes, status, missing_accuracy)
