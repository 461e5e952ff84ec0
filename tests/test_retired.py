"""A case the candidate's specs no longer define is retired, not missing; one it failed to measure is missing.

The collector notes a run with no case filter as having measured every case of its specs in its suites
(``kernelwatch.store.schema.whole_note``). The gate retires a baseline case only on that word from a complete
candidate: a variant taken out of a spec passes with a note, while a filtered, a cut-short or an older run
(no note) still fails on every case it lacks.
"""

from __future__ import annotations

import copy

from kernelwatch.gate.judge import decide
from kernelwatch.gate.statuses import MISSING
from kernelwatch.store.artifact import dumps, parse_artifact, to_data
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.schema import whole_from_notes, whole_note
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


def _decide(db_url: str, doc: dict):
    return decide(open_database(db_url, readonly=True), parse_artifact(dumps(doc)), "synthetic/main")


def test_the_note_reads_back() -> None:
    note = whole_note(["perf", "accuracy"], ["mse_loss", "fused_rmsnorm_matmul"])
    notes = f"ceilings per device: a; b; {note}; kernels run, changed since main (abc): x"
    assert whole_from_notes(notes) == ({"accuracy", "perf"}, {"fused_rmsnorm_matmul", "mse_loss"})
    assert whole_from_notes(None) == (set(), set()) and whole_from_notes("synthetic history") == (set(), set())


def test_a_variant_taken_out_of_its_spec_is_retired_and_the_gate_passes(db_url) -> None:
    """The candidate measured every case of its specs and has no prologue_gamma case: PASS, the note names the
    retired cases per kernel, nothing missing. Defect: the gate called every case of a dropped variant missing
    and failed every later run against a baseline that had it."""
    last = _history(db_url)
    gone = sorted({c["key"] for c in last["cases"] if DROPPED in c["key"]})
    result = _decide(db_url, _without(last, DROPPED, whole_note(["accuracy", "perf"], KERNELS)))
    assert result.verdict == "PASS" and result.exit_code == 0, [(v.case, v.status) for v in result.failed]
    assert result.retired == gone and gone
    note = next(n for n in result.notes if n.startswith("retired:"))
    assert f"retired: {len(gone)} case" in note and "fused_rmsnorm_matmul: " in note
    assert not any(v.status == MISSING for v in result.verdicts)


def test_without_the_whole_spec_word_a_lacking_case_is_missing(db_url) -> None:
    """The same candidate from a filtered run (no note), a run cut short (partial), or one whose note covers only
    another kernel, or only the accuracy suite (its accuracy cases retired, not its perf): every prologue_gamma
    perf case is missing, the gate fails."""
    last = _history(db_url)
    gone = {c["key"] for c in last["cases"] if DROPPED in c["key"]}
    for notes, status, retired in (
        ("synthetic history: not a measurement", "complete", []),
        (whole_note(["accuracy", "perf"], KERNELS), "partial", []),
        (whole_note(["accuracy", "perf"], ["mse_loss"]), "complete", []),
        (whole_note(["accuracy"], KERNELS), "complete", sorted(gone)),
    ):
        result = _decide(db_url, _without(last, DROPPED, notes, status))
        missing = {v.case for v in result.verdicts if v.status == MISSING and v.suite == "perf"}
        assert missing == gone and result.exit_code == 1, (notes, status, missing)
        assert result.retired == retired
        missing_accuracy = {v.case for v in result.verdicts if v.status == MISSING and v.suite == "accuracy"}
        assert missing_accuracy == (set() if retired else gone), (notes, status, missing_accuracy)
