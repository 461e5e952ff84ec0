"""Every verdict the gate gives on the committed history is the one recorded in tests/data/gate-golden.json.gz
(tests/golden.py): a refactor of the gate that moves a verdict on a real run fails here, naming the run and case."""

from __future__ import annotations

import copy

import pytest

from tests import golden

pytestmark = pytest.mark.slow  # ~30 s: every committed run judged twice (GPU time and time per call)


@pytest.fixture(scope="module")
def now() -> dict:
    return golden.everything()


def test_every_verdict_on_the_committed_history_is_the_recorded_one(now) -> None:
    recorded = golden.load()
    committed = len(list(golden.HISTORY.glob("*.json.gz")))
    assert {m: len(runs) for m, runs in recorded.items()} == {m: committed for m in golden.METRICS}, (
        f"ci/history holds {committed} runs and tests/data/gate-golden.json.gz another count: record an added run's "
        "verdicts with `PYTHONPATH=$PWD python -m tests.golden --write` (and say so in the commit)"
    )
    diff = golden.differences(recorded, now)
    assert not diff, f"{len(diff)} verdicts moved on the committed history:\n" + "\n".join(diff[:40])


def test_the_recording_holds_every_kind_of_outcome() -> None:
    """A golden file of passes alone would let a refactor break every failing rule unseen."""
    statuses = {c[0] for runs in golden.load().values() for r in runs.values() for c in r.get("cases", {}).values()}
    exits = {r["exit"] for runs in golden.load().values() for r in runs.values()}
    assert exits == {0, 1, 2}
    assert {
        "pass",
        "regression",
        "suspect",
        "missing",
        "noisy",
        "new",
        "unmeasured",
        "unreliable",
        "retired",
    } <= statuses


def test_a_moved_verdict_is_named_by_run_and_case(now) -> None:
    """The comparison itself: one case's status changed, one run's exit code changed, one run gone."""
    moved = copy.deepcopy(now)
    runs = moved["gpu"]
    run = next(r for r, v in runs.items() if v.get("cases"))
    case = next(iter(runs[run]["cases"]))
    runs[run]["cases"][case][0] = "regression" if runs[run]["cases"][case][0] != "regression" else "pass"
    runs[run]["exit"] = 7
    gone = next(r for r in runs if r != run)
    del runs[gone]
    diff = golden.differences(now, moved)
    assert f"gpu {run} {case}: " in "\n".join(diff)
    assert any(line.startswith(f"gpu {run}: exit ") for line in diff)
    assert f"gpu {gone}: gone run" in diff
    assert len(diff) == 3, diff
