"""benchmarks/mutation_table.py cannot rot: each of its mutations still names source text that exists once."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("mutation_table", ROOT / "benchmarks" / "mutation_table.py")
mutation_table = importlib.util.module_from_spec(_spec)
sys.modules["mutation_table"] = mutation_table  # dataclasses look their module up there
_spec.loader.exec_module(mutation_table)


@pytest.mark.parametrize("m", mutation_table.MUTATIONS, ids=[m.name for m in mutation_table.MUTATIONS])
def test_every_mutation_pattern_occurs_exactly_once(m) -> None:
    text = (ROOT / m.path).read_text()
    assert text.count(m.old) == 1, f"{m.name}: {m.old!r} occurs {text.count(m.old)} times in {m.path}"
    assert m.new != m.old


def test_the_issues_mutations_are_all_there() -> None:
    names = {m.name for m in mutation_table.MUTATIONS}
    assert {
        "drop Benjamini-Hochberg",
        "ignore the history",
        "min instead of max p-value",
        "no outlier clipping",
        "within-run p forced to 0",
        "ratio inverted",
        "quantile off by one",
        "% of peak from the wrong byte count",
    } <= names
