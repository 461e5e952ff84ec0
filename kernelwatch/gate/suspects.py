"""Suspects: the net (statistics over runs) and the judge (a paired re-measurement on one device); and the
acknowledged changes. What the rules of :mod:`kernelwatch.gate.rules` read of them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelwatch.gate.baseline import Baseline
from kernelwatch.gate.result import CaseVerdict, GateResult
from kernelwatch.gate.statuses import (
    MACHINE,
    NOISY,
    PASS,
    REGRESSION,
    SUSPECT,
)
from kernelwatch.kernels.names import (
    TIMING_EVENTS,
    TIMING_WALL,
)
from kernelwatch.store.schema import (
    RunDocument,
    is_commit_sha,
    parse_time,
)


def short_uuid(uuid: str | None) -> str:
    """``GPU-cadb0535`` of ``GPU-cadb0535-5296-...``: the prefix and the first whole group."""
    if not uuid:
        return "unknown GPU"
    parts = uuid.split("-")
    return "-".join(parts[:2]) if len(parts) > 2 else uuid


UNDECIDED = (NOISY, MACHINE)  # slowdowns past the minimum effect the statistics could not call
# Where candidate and baseline were not measured alike (another GPU, another timing method), a slowdown of at
# least this fraction of the minimum effect is a suspect: a faster machine hides part of a real change. Runs of
# one CUDA code on three H200s (benchmarks/cross_machine_aa.py, docs/design.md): at 1.0, 97.8% of the cases
# planted +10% were sent to confirm and 1.6% of the A/A cases; at 0.8, 98.7% and 2.8%; at 0.6, 99.1% and 4.7%.
UNLIKE_FRACTION = 0.8


def unlike(cand: Any, base: Any) -> list[str]:
    """How the candidate's and the baseline's timings of one case were not measured alike (empty: alike)."""
    why = []
    if cand.device_uuid != base.device_uuid:
        why.append(
            f"its baseline was measured on another GPU ({short_uuid(base.device_uuid)}; the candidate on "
            f"{short_uuid(cand.device_uuid)}), where a machine's own speed moves it"
        )
    now, then = cand.timing or TIMING_EVENTS, base.timing or TIMING_EVENTS  # unrecorded: events, the only method then
    if now != then:
        why.append(
            f"it was timed by {now} now and by {then} in the baseline (the two read a 5 us call up to 12% apart "
            "on one GPU)"
        )
    return why


def host_timed_across_gpus(cand: Any, base: Any) -> bool:
    """Whether one case's two timings include two hosts' paths: timed by the wall (host path counted) on
    different GPUs. Such a figure is largely the host CPU's speed where the host path is longer than the device's
    work: every Triton-launched eager stack (ours, Liger-Kernel's, FlagGems') read 1.4-1.7x slower on one H200
    host than on another, stable within each, where eager PyTorch's, bound by the device, agreed within 1%
    (benchmarks/results/2026-12-04-h200-eager-trace); so neither a slowdown nor a speed-up between two hosts says
    anything at the minimum effect (a planted +20% step read -31% against another GPU's run and passed)."""
    wall = TIMING_WALL in (cand.timing, base.timing)
    return wall and cand.device_uuid != base.device_uuid


# A wall-timed case whose figure is within this factor of its device twin's (the same stack as one CUDA graph:
# kernelwatch.kernels.names.CaseFacts.device_twin) in a run was bound by the device there, not by the host path. The
# 4096^3 eager stacks read 0.95-1.05 times their graph in every H200 run of ci/history (2026-12-04, six GPUs),
# the decode ones 1.05-3.3 and the mid ones 1.02-1.54; 1.05 keeps any host share it lets through under the
# cross-GPU suspect's reach (UNLIKE_FRACTION of a 5% minimum effect is 4%).
DEVICE_BOUND = 1.05


def bound_by_the_device(case: Any, twin: Any) -> bool:
    """Whether a wall-timed case's figure (a PerfResult) is its device's: at most DEVICE_BOUND times its device
    twin's in the same run (both measured, positive)."""
    if case is None or twin is None or not case.median_ms or not twin.median_ms:
        return False
    return 0 < case.median_ms <= DEVICE_BOUND * twin.median_ms


def host_timed_cases(compared: list[str], mine: Mapping[str, Any], theirs: Mapping[str, Any], facts: Mapping) -> set:
    """Of the ``compared`` cases, those whose two timings include two hosts' paths
    (:func:`host_timed_across_gpus`), less those bound by the device in both runs (:func:`bound_by_the_device`
    against the case's device twin in each): where neither run waited on its host, the host's speed did not
    decide either figure, and the case is compared as any case measured on two GPUs is."""
    out = set()
    for case in compared:
        if not host_timed_across_gpus(mine[case], theirs[case]):
            continue
        twin = getattr(facts.get(case), "device_twin", None)
        if twin and all(bound_by_the_device(run[case], run.get(twin)) for run in (mine, theirs)):
            continue
        out.add(case)
    return out


# Two runs' host probes (kernelwatch.collect.hostprobe) further apart than this are not read: past what the probe
# was seen to track. One H200 host's probe moved between 21 and 36 us a launch within one run, and its host-bound
# eager stacks with it (ci/history, 2026-12-04, GPU-a7829a6c).
HOST_SCALE_RANGE = (0.5, 2.0)


@dataclass(frozen=True)
class HostReading:
    """A wall-timed case across two hosts, read through the host probes: ``scale`` = the candidate's probe over the
    baseline's (how much slower the candidate's host ran a launch path as it timed the case); ``expected_ms`` = what
    the candidate reads if only the host changed (the baseline's figure times ``scale``, at least the candidate's
    device twin: a pass takes its host path or its device's work, whichever is longer); ``ratio`` = the candidate's
    figure over that. ``estimate``: the baseline's figure was its host path (or the candidate's its device's work);
    else the baseline's host path is only known to be at most its figure and ``expected_ms`` is an upper bound.

    Told with the suspect, to whoever reads it, and stored nowhere else: it decides nothing. Within one H200 run the
    probe followed the host between two speeds (21 and 36 us a launch) and the host-bound stacks with it, but the
    same kernel's 32- and 80-layer stacks, scaled by their probes, still read up to 15% apart (the Triton-launched
    implementations; ``benchmarks/host_probe_eval.py``): too far for a 5% minimum effect, so a wall-timed case
    compared across hosts still goes to ``confirm`` until runs on two hosts show the scaled figures agree."""

    scale: float
    candidate_probe_us: float
    baseline_probe_us: float
    expected_ms: float
    ratio: float
    estimate: bool

    def describe(self) -> str:
        bound = "" if self.estimate else " (at most: the baseline was bound by its device)"
        return (
            f"the host probe read {self.candidate_probe_us:.1f} us a launch beside the candidate and "
            f"{self.baseline_probe_us:.1f} beside the baseline (x{self.scale:.2f}), so the candidate's host alone "
            f"would read {self.expected_ms * 1e3:.1f} us{bound}; it reads {self.ratio - 1:+.1%} against that"
        )


def host_reading(cand: Any, base: Any, cand_twin: Any, base_twin: Any) -> HostReading | None:
    """The :class:`HostReading` of one wall-timed case compared across hosts (PerfResults of the kernel: the case and
    its device twin in each run), or None where either run lacks a probe or a twin, or the probes are further apart
    than :data:`HOST_SCALE_RANGE`."""
    measured = [r is not None and r.median_ms and r.median_ms > 0 for r in (cand, base, cand_twin, base_twin)]
    if not all(measured):
        return None
    pc, pb = cand.host_probe_us, base.host_probe_us
    if not pc or not pb or pc <= 0 or pb <= 0:
        return None
    scale = pc / pb
    if not HOST_SCALE_RANGE[0] <= scale <= HOST_SCALE_RANGE[1]:
        return None
    expected = max(cand_twin.median_ms, base.median_ms * scale)
    estimate = not bound_by_the_device(base, base_twin) or bound_by_the_device(cand, cand_twin)
    return HostReading(scale, pc, pb, expected, cand.median_ms / expected, estimate)


def host_readings(
    cases: set[str] | frozenset[str], mine: Mapping[str, Any], theirs: Mapping[str, Any], facts: Mapping
) -> dict[str, HostReading]:
    """:func:`host_reading` of each of the host-timed ``cases`` (:func:`host_timed_cases`) that has one."""
    out = {}
    for case in cases:
        twin = getattr(facts.get(case), "device_twin", None)
        if not twin:
            continue
        reading = host_reading(mine.get(case), theirs.get(case), mine.get(twin), theirs.get(twin))
        if reading is not None:
            out[case] = reading
    return out


HOST_TIMED = (
    "it is timed by the wall with the host path, here two hosts' (one commit's Triton-launched eager stacks read "
    "1.4-1.7x apart on two H200 hosts: the host CPU's speed), so its runs tell nothing at the minimum effect, "
    "whichever way they differ"
)


def suspect_reasons(v: CaseVerdict, unlike: list[str]) -> list[str]:
    """Why the runs alone cannot decide a slowdown of ``v`` (empty: they can), given how its two timings were
    not measured alike (:func:`unlike`)."""
    c = v.comparison
    why = list(unlike)
    if v.status in UNDECIDED:
        why.append(f"the statistics called it {v.status}")
    if why and c.launch_bound:  # GPU time only (undecided_by_the_runs): the case's facts, not --metric call's tails
        why.append(
            f"it is launch-bound ({c.baseline_ms * 1e3:.3g} us), where whole runs of one commit differ this much"
        )
    return why


CONFIRMED = {
    "SLOWER": (0, REGRESSION),
    "UNKNOWN": (1, SUSPECT),
    "SAME": (2, PASS),
    "NOT_SLOWER": (2, PASS),
    "FASTER": (2, PASS),
}
FULL_SHA = 40


def _full_sha(value: Any) -> str | None:
    """``value`` as a whole commit sha (40 hex digits, lower case), else None: a prefix can name two commits."""
    if not isinstance(value, str) or len(value) != FULL_SHA or not is_commit_sha(value):
        return None
    return value.lower()


def applicable_confirmations(
    result: GateResult,
    candidate: RunDocument,
    baseline: Baseline,
    confirmations: list[dict[str, Any]],
    commit_times: Mapping[str, str | None],
) -> dict[str, dict[str, Any]]:
    """Per case, the stored confirmation that decides it: of the candidate's whole commit sha against the whole sha
    of the commit that supplied the case's baseline (no prefixes), on the candidate's hardware (the query's
    fingerprint), re-measured with a minimum effect no larger than the gate's for the case, and confirmed after
    both commits were made (``commit_times``: commit -> its time; the candidate's from its run). Of several, the
    most cautious (:data:`CONFIRMED`), then the newest."""
    sha = _full_sha(candidate.run.commit.sha)
    if sha is None:
        return {}
    effect = {v.case: v.comparison.min_effect for v in result.verdicts if v.comparison is not None}
    made = candidate.run.commit.time or candidate.run.started_at
    chosen: dict[str, dict[str, Any]] = {}
    for row in confirmations:
        base_sha = _full_sha(baseline.commit_of(row["case"]))
        base_time = commit_times.get(baseline.commit_of(row["case"]) or "")
        if (
            base_sha is None
            or _full_sha(row["candidate_commit"]) != sha
            or _full_sha(row["baseline_commit"]) != base_sha
            or row["verdict"] not in CONFIRMED
            or row["min_effect"] is None
            or row["case"] not in effect
            or row["min_effect"] > effect[row["case"]] + 1e-12
            or not base_time
            or parse_time(row["confirmed_at"]) <= max(parse_time(made), parse_time(base_time))
        ):
            continue
        held = chosen.get(row["case"])
        key = (-CONFIRMED[row["verdict"]][0], row["confirmed_at"])
        if held is None or key > (-CONFIRMED[held["verdict"]][0], held["confirmed_at"]):
            chosen[row["case"]] = row
    return chosen


def covering_acks(acks: list[dict[str, Any]], candidate: RunDocument, since: str) -> dict[str, dict[str, Any]]:
    """Per case, the first acknowledgement (``kernelwatch ack``, stored order) that covers the candidate's change: of
    the candidate's own commit (whole sha or a prefix either way; it counts even when no run of that commit is stored
    yet), or of a commit after the baseline's (``since``: its commit time, else start) and up to the candidate's,
    inclusive. Commits are ordered by commit time, as the runs that measured them recorded it."""
    sha = candidate.run.commit.sha
    until = candidate.run.commit.time or candidate.run.started_at
    out: dict[str, dict[str, Any]] = {}
    for a in acks:
        own = a["commit"].startswith(sha) or sha.startswith(a["commit"])
        if a["case"] not in out and (own or (a["commit_time"] is not None and since < a["commit_time"] <= until)):
            out[a["case"]] = a
    return out
