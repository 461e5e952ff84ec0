"""The gate in two parts: :func:`kernelwatch.gate.gather.gather` reads the store once into plain data, and
:func:`kernelwatch.gate.judge.judge` decides from that data alone. The judge and its rules are tested here without a
database (plain data in, statuses out); the gather step on SQLite and PostgreSQL."""

from __future__ import annotations

import copy

import pytest

from kernelwatch.gate import rules
from kernelwatch.gate.detect import compare_case
from kernelwatch.gate.gather import Gathered, gather
from kernelwatch.gate.judge import GateUndecided, judge
from kernelwatch.gate.result import Baseline, CaseVerdict
from kernelwatch.gate.rules import RULES, RUN_RULES, RunFacts
from kernelwatch.store.ack import add_ack
from kernelwatch.store.artifact import dumps, parse_artifact, to_data
from kernelwatch.store.engine import open_database
from kernelwatch.store.ingest import ingest_documents
from kernelwatch.store.schema import RunDocument
from kernelwatch.store.synthetic import Step, SyntheticHistory

RUNS = 10
KERNEL = "mse_loss"
HISTORY = SyntheticHistory(runs=RUNS + 1, cases=6, samples=30, base_ms=0.1, steps=[Step(RUNS, 1.2, KERNEL)])


@pytest.fixture(scope="module")
def docs() -> list[RunDocument]:
    return list(HISTORY.documents())


def _stepped() -> set[str]:
    return {c["key"] for c in HISTORY.case_list() if c["kernel"] == KERNEL}


def _plain(docs: list[RunDocument], acks: list[dict] | None = None) -> Gathered:
    """What gather would read for the last run against the one before it, built by hand: no database anywhere."""
    candidate, base = docs[-1], docs[-2]
    run = {"id": base.run.id, "commit": base.run.commit.sha, "branch": base.run.commit.branch, "status": "complete"}
    assembled = Baseline(run=run, sources=[{**run, "perf": 6, "accuracy": 6}], run_of={})
    histories: dict[str, list[tuple[float, str | None]]] = {}
    for doc in docs[:-1]:
        for p in doc.perf:
            if p.implementation == "triton":
                histories.setdefault(p.case, []).append((p.median_ms, p.device_uuid))
    infos = {base.run.id: {"commit_time": base.run.commit.time, "started": base.run.started_at}}
    return Gathered(candidate, assembled, base, infos, "gpu", histories, len(docs) - 1, [], acks or [])


def test_the_judge_decides_from_plain_data_alone(docs) -> None:
    """A 20% step on mse_loss, judged from hand-built data: its cases regress, the others pass, the run fails."""
    result = judge(_plain(docs))
    perf = {v.case: v.status for v in result.verdicts if v.suite == "perf"}
    assert {c for c, s in perf.items() if s == "regression"} == _stepped()
    assert {s for c, s in perf.items() if c not in _stepped()} == {"pass"}
    assert result.exit_code == 1 and result.baseline["id"] == docs[-2].run.id


def test_an_acknowledgement_in_the_gathered_data_turns_the_regression(docs) -> None:
    """The acknowledgement rule reads what gather gathered: an ack of the candidate's own commit on one stepped case
    makes it acknowledged; one of a commit before the baseline changes nothing."""
    first, second = sorted(_stepped())[:2]
    own = {"case": first, "commit": docs[-1].run.commit.sha, "commit_time": None, "author": "kw", "reason": "tiling"}
    old = {**own, "case": second, "commit": docs[0].run.commit.sha, "commit_time": docs[0].run.commit.time}
    result = judge(_plain(docs, [own, old]))
    perf = {v.case: v for v in result.verdicts if v.suite == "perf"}
    assert perf[first].status == "acknowledged" and "acknowledged at" in perf[first].message
    assert perf[second].status == "regression"


def test_the_rules_are_one_ordered_list() -> None:
    """Accuracy first, then a timing's input rules, its comparison's rules, then the run's rules in turn; every rule
    answers with a status of the table or nothing."""
    assert (*rules.ACCURACY_RULES, *rules.INPUT_RULES, *rules.PERF_RULES, *RUN_RULES) == RULES
    assert [r.__name__ for r in RUN_RULES] == ["broken_machine", "undecided_by_the_runs", "confirmed", "acknowledged"]


def _compared(status: str, effect: float = 0.0) -> CaseVerdict:
    c = compare_case("k", [1.0] * 10, [1.0 + effect] * 10)
    return CaseVerdict("k", "kernel", status, "why", comparison=c, effect=c.effect)


def test_a_broken_machine_unmeasures_what_passed_and_keeps_a_regression() -> None:
    run = RunFacts("gpu", broken="this machine ran 1.2x slower")
    assert rules.broken_machine(_compared("pass"), run).status == "unmeasured"
    assert rules.broken_machine(_compared("noisy"), run).message.startswith("this machine ran 1.2x slower; this case")
    assert rules.broken_machine(_compared("regression"), run) is None
    assert rules.broken_machine(_compared("pass"), RunFacts("gpu")) is None


def test_a_slowdown_measured_unlike_is_a_suspect_on_gpu_time_only() -> None:
    """Past the minimum effect on another GPU: a suspect; the same under --metric call keeps its verdict; a case
    measured alike with clear statistics stays a regression."""
    v = _compared("regression", 0.2)
    other = {"k": ["its baseline was measured on another GPU"]}
    assert rules.undecided_by_the_runs(v, RunFacts("gpu", unlike=other)).status == "suspect"
    assert rules.undecided_by_the_runs(v, RunFacts("call", unlike=other)) is None
    assert rules.undecided_by_the_runs(v, RunFacts("gpu")) is None


def test_a_case_timed_with_two_hosts_paths_is_a_suspect_whichever_way_it_moved() -> None:
    """An eager stack case (timed by the wall, host path counted) read 62 to 114 us a layer on three H200s running
    one commit: a planted +20% read -31% against another GPU's run and passed. Across GPUs such a case is sent to
    confirm at any effect, faster too; on one GPU, or timed on the device, it keeps the ordinary rule."""
    hosts = RunFacts("gpu", unlike={"k": ["its baseline was measured on another GPU"]}, host_timed=frozenset({"k"}))
    for status, effect in (("pass", -0.31), ("pass", 0.0), ("pass", 0.03), ("regression", 0.2)):
        judged = rules.undecided_by_the_runs(_compared(status, effect), hosts)
        assert judged is not None and judged.status == "suspect", (status, effect)
        assert "two hosts'" in judged.message
    assert "-31.0% in time as the runs read it" in rules.undecided_by_the_runs(_compared("pass", -0.31), hosts).message
    other = RunFacts("gpu", unlike={"k": ["its baseline was measured on another GPU"]})
    assert rules.undecided_by_the_runs(_compared("pass", -0.31), other) is None
    assert rules.undecided_by_the_runs(_compared("pass", -0.31), RunFacts("call", host_timed=frozenset({"k"}))) is None


def test_two_hosts_paths_are_wall_timings_on_different_gpus() -> None:
    from types import SimpleNamespace as Timed

    from kernelwatch.gate.suspects import host_timed_across_gpus

    assert host_timed_across_gpus(Timed(timing="wall", device_uuid="GPU-a"), Timed(timing="wall", device_uuid="GPU-b"))
    assert not host_timed_across_gpus(
        Timed(timing="wall", device_uuid="GPU-a"), Timed(timing="wall", device_uuid="GPU-a")
    )
    assert not host_timed_across_gpus(
        Timed(timing="graph", device_uuid="GPU-a"), Timed(timing="graph", device_uuid="GPU-b")
    )


def test_a_wall_timed_case_bound_by_the_device_in_both_runs_is_compared_as_any_case_on_two_gpus() -> None:
    """An eager stack whose wall figure is within 5% of its device twin's (the same stack as one CUDA graph) in
    both runs waited on neither host: it is not sent to confirm for its hosts (the 4096^3 eager stacks read
    0.95-1.05 times their graph in six H200 runs). Host-bound in either run (decode: 1.05-3.3), a twin missing
    or unmeasured, or no twin declared: still a case of two hosts. On one GPU: never."""
    from types import SimpleNamespace as Timed

    from kernelwatch.gate.suspects import DEVICE_BOUND, host_timed_cases
    from kernelwatch.kernels.names import NOISE_GEMM, CaseFacts

    def run(gpu: str, eager: float, graph: float | None) -> dict:
        out = {"e": Timed(timing="wall", device_uuid=gpu, median_ms=eager)}
        if graph is not None:
            out["g"] = Timed(timing="graph", device_uuid=gpu, median_ms=graph)
        return out

    facts = {"e": CaseFacts(NOISE_GEMM, False, 1, (("torch_eager", "eager PyTorch"),), device_twin="g")}
    untwinned = {"e": CaseFacts(NOISE_GEMM, False, 1, (("torch_eager", "eager PyTorch"),))}
    device = (run("GPU-a", 0.242, 0.237), run("GPU-b", 0.245, 0.240))
    assert host_timed_cases(["e"], *device, facts) == set()
    assert host_timed_cases(["e"], *device, untwinned) == {"e"}
    edge = 0.2 * DEVICE_BOUND
    assert host_timed_cases(["e"], run("GPU-a", edge, 0.2), run("GPU-b", edge, 0.2), facts) == set()
    assert host_timed_cases(["e"], run("GPU-a", edge * 1.001, 0.2), run("GPU-b", 0.2, 0.2), facts) == {"e"}
    decode = (run("GPU-a", 0.062, 0.038), run("GPU-b", 0.102, 0.039))
    assert host_timed_cases(["e"], *decode, facts) == {"e"}
    one_host_bound = (run("GPU-a", 0.242, 0.237), run("GPU-b", 0.300, 0.240))
    assert host_timed_cases(["e"], *one_host_bound, facts) == {"e"}
    for missing in (run("GPU-b", 0.245, None), run("GPU-b", 0.245, 0.0), run("GPU-b", None, 0.240)):
        assert host_timed_cases(["e"], device[0], missing, facts) == {"e"}, missing
    assert host_timed_cases(["e"], *decode[:1], run("GPU-a", 0.102, 0.039), facts) == set()  # one GPU


def _probed(gpu: str, eager: float | None, graph: float | None, probe_us: float | None) -> dict:
    from types import SimpleNamespace as Timed

    return {
        "e": Timed(timing="wall", device_uuid=gpu, median_ms=eager, host_probe_us=probe_us),
        "g": Timed(timing="graph", device_uuid=gpu, median_ms=graph, host_probe_us=None),
    }


def _host_rule(cand: dict, base: dict):
    """The rule over one eager case compared across hosts, the reading worked out as the judge does."""
    from kernelwatch.gate.suspects import host_readings
    from kernelwatch.kernels.names import NOISE_GEMM, CaseFacts

    facts = {"e": CaseFacts(NOISE_GEMM, False, 1, (("torch_eager", "eager PyTorch"),), device_twin="g")}
    readings = host_readings(frozenset({"e"}), cand, base, facts)
    effect = cand["e"].median_ms / base["e"].median_ms - 1
    run = RunFacts(
        "gpu", unlike={"k": ["its baseline was measured on another GPU"]}, host_timed=frozenset({"k"}),
        host_readings={"k": readings["e"]} if "e" in readings else {},
    )  # fmt: skip
    return rules.undecided_by_the_runs(_compared("pass" if effect < 0.05 else "regression", effect), run)


def test_a_host_bound_case_across_hosts_is_told_through_the_host_probes_and_still_confirmed() -> None:
    """One commit's RMSNorm+MM decode eager stack on one H200 host (GPU-a7829a6c) read 48.8 us a layer beside a
    host probe of 21.2 us a launch and 85.6 beside 36.1, its graph twin ~38: the host's speed. The suspect says
    what the probes make of it (the baseline scaled by their ratio: what the candidate's host alone would read) so
    whoever reads it sees the host, but the case still goes to confirm, whatever the reading: scaled figures were
    not yet seen to agree across hosts within a minimum effect. Defect caught: a reading that clears a case (a
    planted +10%, or a slower wall the probe did not see, would pass), or the reading lost from the message."""
    base = _probed("GPU-a", 0.0488, 0.0380, 21.2)
    for cand, against in (
        (_probed("GPU-b", 0.0856, 0.0381, 36.1), "+3.0%"),
        (_probed("GPU-b", 0.0856 * 1.10, 0.0381, 36.1), "+13.3%"),
        (_probed("GPU-b", 0.0856, 0.0381, 21.2), "+75.4%"),
        (_probed("GPU-b", 0.0488 * 1.10, 0.0380, 21.2 / 1.7), "+41.3%"),  # at least the twin: 38.0
    ):
        judged = _host_rule(cand, base)
        assert judged.status == "suspect", judged.message
        assert "two hosts'" in judged.message and f"it reads {against} against that" in judged.message, judged.message
    told = _host_rule(_probed("GPU-b", 0.0856, 0.0381, 36.1), base).message
    assert "36.1 us a launch beside the candidate and 21.2 beside the baseline (x1.70)" in told
    assert "would read 83.1 us;" in told


def test_the_host_reading_is_an_upper_bound_where_the_baseline_hid_its_host_path() -> None:
    """A baseline bound by its device (wall within 5% of its twin) hid its host path: scaled by the probes it is
    only an upper bound, and the suspect says so. No probe on either side, a zero one, or probes further apart than
    the range the probe was seen to track (a damaged or hostile figure): no reading told."""
    from kernelwatch.gate.suspects import HOST_SCALE_RANGE

    device_bound = _probed("GPU-a", 0.1124, 0.1100, 21.2)
    host_bound_slow = _probed("GPU-b", 0.1586, 0.1100, 35.9)
    assert "(at most: the baseline was bound by its device)" in _host_rule(host_bound_slow, device_bound).message
    assert "at most" not in _host_rule(device_bound, _probed("GPU-b", 0.1586, 0.1100, 35.9)).message
    far = 21.2 * HOST_SCALE_RANGE[1] * 1.01
    for cand, base in (
        (_probed("GPU-b", 0.0856, 0.0381, None), _probed("GPU-a", 0.0488, 0.0380, 21.2)),
        (_probed("GPU-b", 0.0856, 0.0381, 35.9), _probed("GPU-a", 0.0488, 0.0380, None)),
        (_probed("GPU-b", 0.0856, 0.0381, 0.0), _probed("GPU-a", 0.0488, 0.0380, 21.2)),
        (_probed("GPU-b", 0.0488 * 2.5, 0.0381, far), _probed("GPU-a", 0.0488, 0.0380, 21.2)),
    ):
        judged = _host_rule(cand, base)
        assert judged.status == "suspect" and "host probe" not in judged.message, judged.message


def test_a_stack_timed_by_the_wall_declares_its_device_twin() -> None:
    """Every eager stack case names its graph twin, which the suite also times; no other case names one; the fact
    survives a run's record of it, and a malformed one is refused."""
    from kernelwatch.kernels import discover
    from kernelwatch.kernels.names import CaseFacts
    from kernelwatch.kernels.spec import wall_timed

    specs = discover()
    perf = {c.key: (spec, c) for spec in specs.values() for c in spec.perf_cases()}
    twins = {key: spec.facts(c).device_twin for key, (spec, c) in perf.items()}
    walls = {key for key, (_, c) in perf.items() if wall_timed(c)}
    assert walls and {k for k, t in twins.items() if t} == walls
    for key in walls:
        assert twins[key] in perf and twins[key] == key.replace("mode=eager", "mode=graph"), key
        spec, case = perf[key]
        assert CaseFacts.from_data(spec.facts(case).to_data()) == spec.facts(case)
    some = next(iter(walls))
    data = perf[some][0].facts(perf[some][1]).to_data()
    for bad in ("", 3, ["k"]):
        with pytest.raises(ValueError, match="device_twin"):
            CaseFacts.from_data({**data, "device_twin": bad})
    with pytest.raises(ValueError, match="not: twin"):
        CaseFacts.from_data({**data, "twin": "x"})


def test_gather_reads_the_baseline_history_and_acks_once(db_url, docs) -> None:
    """On SQLite and PostgreSQL: the newest earlier run is the baseline, every case's history is the runs before the
    candidate, and an ack stored for the hardware is gathered; a metric the gate does not know is refused."""
    engine = open_database(db_url)
    ingest_documents(engine, [(str(i), d) for i, d in enumerate(docs[:-1])])
    case = sorted(_stepped())[0]
    add_ack(engine, case, docs[0].hardware.device_name, docs[-1].run.commit.sha, "expected", "kw")
    candidate = parse_artifact(dumps(copy.deepcopy(to_data(docs[-1]))))
    g = gather(open_database(db_url, readonly=True), candidate, "synthetic/main")
    assert g.assembled.run["id"] == docs[-2].run.id and g.base.run.id == docs[-2].run.id
    assert g.judges == RUNS and {len(h) for h in g.histories.values()} == {RUNS}
    assert [a["case"] for a in g.acks] == [case] and g.confirmations == []
    assert judge(g).exit_code == 1
    with pytest.raises(GateUndecided, match="--metric must be one of gpu, call"):
        gather(engine, candidate, "synthetic/main", metric="wall")
