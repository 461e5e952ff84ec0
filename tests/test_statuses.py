"""The verdict vocabulary is one table (``kernelwatch.gate.statuses``): the gate's statuses, the reports' labels, order
and icons, the dashboard's colours and confirm's cases all come from it, and no other module spells a label."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kernelwatch.gate import judge as gate
from kernelwatch.gate import reports, statuses
from kernelwatch.gate.statuses import GATE_FAIL, GATE_PASS, GATE_WARN, LABELS, ROWS, SEVERITY, STATUSES, TABLE

ROOT = Path(__file__).resolve().parents[1]
# Where verdicts are judged, named and shown (the collector and the database say "errored" and "unchanged" of
# other things: a worker's reply, an ingest).
SOURCES = ("kernelwatch", "benchmarks")
OTHER_WORDS = ("kernelwatch/collect", "kernelwatch/store", "kernelwatch/kernels")
TABLE_FILE = Path("kernelwatch/gate/statuses.py")
# The labels today's README and tests quote: they stay word for word.
QUOTED = {
    "accuracy": "accuracy failed",
    "error": "errored",
    "missing": "missing",
    "retired": "retired (acknowledge)",
    "unmeasured": "unmeasured",
    "unreliable": "unreliable",
    "regression": "slower",
    "warning": "accuracy warning",
    "acknowledged": "acknowledged",
    "noisy": "slower (within noise)",
    "machine": "machine",
    "new": "new",
    "rebaselined": "re-baselined: timing changed",
    "pass": "unchanged",
    "suspect": "suspect (confirm)",
}


def test_the_labels_stay_word_for_word():
    assert LABELS == QUOTED and reports.LABELS is LABELS
    assert SEVERITY[: SEVERITY.index("slower (resolved)")] == (
        "accuracy failed",
        "errored",
        "missing",
        "retired (acknowledge)",
        "unmeasured",
        "unreliable",
        "slower",
    )


def test_one_row_per_status_and_label():
    assert len(ROWS) == len(TABLE) and len(set(SEVERITY)) == len(TABLE)
    assert set(STATUSES) == {s.name for s in TABLE if s.refines is None}
    for s in TABLE:
        assert s.gate in (GATE_FAIL, GATE_WARN, GATE_PASS), s
        assert s.refines is None or ROWS[s.refines].refines is None, s  # a refinement names a status of the gate
        assert not s.confirmable or s.gate == GATE_FAIL, s  # confirm re-measures what fails
    assert set(gate.FAILING) | set(gate.WARNING) <= set(STATUSES) and not set(gate.FAILING) & set(gate.WARNING)
    assert set(statuses.CONFIRMABLE) == {"regression", "unreliable", "suspect"}


def test_the_gate_fails_and_warns_by_the_table():
    for name in STATUSES:
        v = gate.CaseVerdict("k/case", "k", name)
        result = gate.GateResult(candidate={}, baseline={}, verdicts=[v])
        assert v.failed == (ROWS[name].gate == GATE_FAIL), name
        assert (result.warnings == [v]) == (ROWS[name].gate == GATE_WARN), name
        assert result.exit_code == (1 if ROWS[name].gate == GATE_FAIL else 0), name


def test_reports_and_pages_read_the_table():
    from kernelwatch.dashboard import charts, verdicts

    labels = set(SEVERITY)
    assert reports.SEVERITY is SEVERITY and verdicts.SEVERITY is SEVERITY
    assert set(reports.ICONS) <= labels and set(reports.LABEL_CLASS) <= labels
    assert set(reports.STATUS_CLASS) == set(STATUSES)
    assert set(charts.VERDICT_FILL) <= labels and set(charts.VERDICT_LINE) <= labels
    assert {label for group in verdicts.SUMMARY.values() for label in group} <= labels
    assert verdicts.RESOLVED in labels
    # every failing status is red on the pages and in the report
    for name in gate.FAILING:
        assert charts.VERDICT_FILL[LABELS[name]] == statuses.RED_FILL and reports.STATUS_CLASS[name] == "bad"


def _modules() -> list[Path]:
    return [
        p
        for top in SOURCES
        for p in sorted((ROOT / top).rglob("*.py"))
        if p.relative_to(ROOT) != TABLE_FILE and not str(p.relative_to(ROOT)).startswith(OTHER_WORDS)
    ]


def _words(node: ast.AST) -> list[str]:
    """The string literals of a constant or a tuple/list/set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [w for e in node.elts for w in _words(e)]
    return []


def _is_verdict(node: ast.AST) -> bool:
    """``x.status`` or ``row["verdict"]``: where a case's status or label is read or set."""
    return (isinstance(node, ast.Attribute) and node.attr == "status") or (
        isinstance(node, ast.Subscript) and _words(node.slice) == ["verdict"]
    )


def _spelled(tree: ast.AST, vocabulary: set[str], labels: set[str]) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in labels:
            found.append((node.lineno, node.value))
        elif isinstance(node, ast.Compare) and any(_is_verdict(n) for n in [node.left, *node.comparators]):
            found += [(node.lineno, w) for n in node.comparators + [node.left] for w in _words(n) if w in vocabulary]
        elif isinstance(node, ast.Assign):
            targets = [e for t in node.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
            if any(_is_verdict(t) for t in targets):
                found += [(node.lineno, w) for w in _words(node.value) if w in vocabulary]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("CaseVerdict", "Judged"):
            args = node.args[2:3] if node.func.id == "CaseVerdict" else node.args[:1]
            args += [k.value for k in node.keywords if k.arg == "status"]
            found += [(node.lineno, w) for a in args for w in _words(a) if w in vocabulary]
    return found


def test_no_module_spells_a_status_or_label():
    """Only kernelwatch/gate/statuses.py spells a label (a label that is not also its status's name: "slower",
    "errored"...), and no module reads, sets or builds a verdict from a literal status or label: the table's constants
    name them."""
    labels = {s.label for s in TABLE if s.label != s.name}
    vocabulary = labels | set(ROWS)
    found = {
        f"{path.relative_to(ROOT)}:{line}: {word!r}"
        for path in _modules()
        for line, word in _spelled(ast.parse(path.read_text(encoding="utf-8")), vocabulary, labels)
    }
    assert not found, sorted(found)


@pytest.mark.parametrize(
    "source",
    [
        'v.status = "regression"',
        'v.status, v.message = "pass", "fine"',
        'if v.status in ("noisy", "machine"): pass',
        'rows = [r for r in rows if r["verdict"] != "new"]',
        'CaseVerdict(case, kernel, "missing", "gone")',
        'Judged("error", "boom")',
        'FILL = {"slower (within noise)": "#fbeec2"}',
    ],
)
def test_the_scan_finds_a_spelled_status(source: str):
    labels = {s.label for s in TABLE if s.label != s.name}
    assert _spelled(ast.parse(source), labels | set(ROWS), labels)


def test_p_values_and_counts_read_as_people_read_them() -> None:
    """Pages showed p=7.2e-111 and "1 runs"."""
    from kernelwatch.gate.statuses import counted, p_text, p_value

    assert [p_value(p) for p in (7.2e-111, 9.9e-7, 1e-6, 3.04e-5, 0.0123, 0.9)] == [
        "< 1e-6",
        "< 1e-6",
        "1e-06",
        "3e-05",
        "0.012",
        "0.9",
    ]
    assert (p_text(7.2e-111), p_text(0.0123)) == ("p < 1e-6", "p=0.012")
    assert (counted(1, "run"), counted(2, "run"), counted(0, "case"), counted(1, "GPU", "GPUs")) == (
        "1 run",
        "2 runs",
        "0 cases",
        "1 GPU",
    )
