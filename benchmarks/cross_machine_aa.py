"""Cross-machine A/A: runs of one commit measured on different physical GPUs, gated against each other
(docs/design.md, machines of one model).

    python benchmarks/cross_machine_aa.py ci/history/*744fa8bf*.json.gz
    python benchmarks/cross_machine_aa.py RUN1.json RUN2.json RUN3.json --history ci/history/*.json.gz

The code is the same in every run, so every FAIL between them is a false alarm caused by the machine. A
run's perf results are split by the physical device that measured them (``device_uuid``; a two-GPU run
gives two devices, and results without a UUID are left out), giving one *device run* per (run, GPU). Every
ordered pair of device runs on different GPUs is gated with ``kernelwatch.gate.judge.decide`` as it is: a fresh SQLite
database per pair holding the baseline device run (plus the ``--history`` runs, for the gate's between-run
noise), candidate and baseline both cut to the perf cases they share (a case one of them lacks is no
question about the machine).

Then the same pairs with a planted step: the candidate's kernel samples (and its summary quantiles) of one
memory-bound case and one matmul case multiplied by ``1 + --step`` (default +10%). Every pair must FAIL on
both planted cases. ``--plant CASE`` picks the cases; by default the slowest shared kernel case of a
memory-bound kernel (mse_loss, then scaled_masked_softmax) and of a matmul kernel (fused_rmsnorm_matmul,
fused_layernorm_matmul; where the runs hold none, of the other memory-bound kernel) among the cases the
pair's A/A left quiet (:func:`default_plants`).

Targets: 0 false FAILs in every pair; every planted case FAILs in every pair. Exit 0 when both hold.

The gate as a net, ``kernelwatch confirm`` as the judge (docs/design.md): with ``--every N`` the question is what the
gate sends to confirmation. Per pair: how many shared cases the A/A gate sends to confirm (a suspect, a
regression or an unreliable case: target at most 5%) or fails otherwise; then every Nth shared case (each of N
offsets in turn) planted ``--steps`` slower, and how many planted cases are sent to confirm or fail (targets:
at least 98% at +10%, 100% at +20%)::

    python benchmarks/cross_machine_aa.py ci/history/*9b9d362d*perf*.json.gz --history ci/history/*.json.gz \
        --every 5 --steps 0.05 0.10 0.20

Runs of several commits are one A/A only when their GPU code is the same: ``--same-code`` takes them once
``benchmarks/cuda_unchanged.py REF`` has shown every launch's PTX identical between the commits.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import sys
import tempfile
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KERNEL_IMPL = "triton"
MEMORY_BOUND = ("mse_loss", "scaled_masked_softmax")  # in order of preference
MATMUL = ("fused_rmsnorm_matmul", "fused_layernorm_matmul")
NAMESPACE = uuid.UUID("5b0f3e1e-19a7-4c1d-9b0e-000000000019")


def device_runs(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """{(run id, device uuid): the run cut to that device's perf results}; accuracy and profiles dropped."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for doc in docs:
        by_uuid: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in doc["perf"]:
            if row.get("device_uuid"):
                by_uuid[row["device_uuid"]].append(row)
        for dev, rows in by_uuid.items():
            out[doc["run"]["id"], dev] = {**doc, "perf": rows, "accuracy": [], "profiler": []}
    return out


@functools.cache
def code_facts() -> dict[str, dict[str, Any]]:
    """Each case's facts as this checkout's specs declare them (what ``kernelwatch gate`` reads over a run's own
    record of them, which an older run may lack: a stack's device twin)."""
    from kernelwatch.kernels import discover
    from kernelwatch.kernels.spec import case_facts

    return {key: facts.to_data() for key, facts in case_facts(discover()).items()}


def restrict(doc: dict[str, Any], cases: set[str], tag: str) -> dict[str, Any]:
    """``doc`` with only the perf results of ``cases`` and the specs' facts of them (:func:`code_facts`), under a
    fresh run id derived from ``tag``."""
    d = copy.deepcopy(doc)
    d["perf"] = [r for r in d["perf"] if r["case"] in cases]
    d["cases"] = [c for c in d["cases"] if c["key"] in cases]
    for c in d["cases"]:
        c["facts"] = code_facts().get(c["key"], c.get("facts"))
    d["run"]["id"] = str(uuid.uuid5(NAMESPACE, tag))
    return d


def plant(doc: dict[str, Any], cases: list[str], step: float) -> dict[str, Any]:
    """The kernel's samples and quantiles of ``cases`` scaled by ``1 + step`` (a slower kernel)."""
    d = copy.deepcopy(doc)
    for r in d["perf"]:
        if r["case"] in cases and r["implementation"] == KERNEL_IMPL:
            r["samples_ms"] = [v * (1 + step) for v in r["samples_ms"]]
            for k in ("median_ms", "p20_ms", "p80_ms", "min_ms"):
                if r.get(k) is not None:
                    r[k] *= 1 + step
    return d


def kernel_times(doc: dict[str, Any]) -> dict[str, float]:
    return {
        r["case"]: r["median_ms"]
        for r in doc["perf"]
        if r["implementation"] == KERNEL_IMPL and r.get("median_ms") is not None
    }


def default_plants(shared: set[str], kernel_of: dict[str, str], times: dict[str, float], quiet: set[str]) -> list[str]:
    """The slowest A/A-quiet case of a memory-bound kernel and of a matmul kernel (where there is none, of
    the next memory-bound kernel). Quiet: the A/A gate passed it and its A/A change is under half the
    gate's minimum effect either way; a case the two machines already tell apart (the atomic MSELoss at
    268M elements differs by ~10% between the two GPUs of the x2 host) would test the machines, not the
    planted step: faster on the candidate's GPU, it hides the step."""
    from kernelwatch.kernels import discover
    from kernelwatch.kernels.names import NOISE_ATOMIC
    from kernelwatch.kernels.spec import case_facts

    atomic = {key for key, f in case_facts(discover()).items() if f.noise == NOISE_ATOMIC}

    chosen: list[str] = []
    for family in (MEMORY_BOUND, MATMUL, MEMORY_BOUND):
        for kernel in family:  # never an atomic-reduction case: its between-GPU noise (7.2%) is the step's size
            pool = [
                c
                for c in shared & quiet
                if kernel_of.get(c) == kernel
                and c in times
                and c not in atomic
                and not any(kernel_of.get(x) == kernel for x in chosen)
            ]
            if pool:
                chosen.append(max(pool, key=times.__getitem__))
                break
        if len(chosen) == 2:
            break
    return chosen


def gate_pair(cand: dict[str, Any], base: dict[str, Any], history: list[tuple[str, Any]]):
    """``kernelwatch.gate.judge.decide`` of ``cand`` against ``base`` in a fresh database holding ``base`` and
    ``history``."""
    from kernelwatch.gate.judge import decide
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.ingest import ingest_documents
    from kernelwatch.store.schema import RunDocument

    with tempfile.TemporaryDirectory() as tmp:
        engine = open_database(f"sqlite:///{tmp}/pair.db")
        try:
            ingest_documents(engine, [("baseline", RunDocument.model_validate(base)), *history])
            return decide(engine, RunDocument.model_validate(cand), base["run"]["id"])
        finally:
            engine.dispose()


@contextlib.contextmanager
def pair_database(base: dict[str, Any], history: list[tuple[str, Any]]):
    """A fresh SQLite database holding ``base`` and ``history``, for many gates against ``base``."""
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.ingest import ingest_documents
    from kernelwatch.store.schema import RunDocument

    with tempfile.TemporaryDirectory() as tmp:
        engine = open_database(f"sqlite:///{tmp}/pair.db")
        try:
            ingest_documents(engine, [("baseline", RunDocument.model_validate(base)), *history])
            yield engine
        finally:
            engine.dispose()


def sent(result) -> tuple[set[str], set[str]]:
    """(perf cases the gate sends to confirm, cases it fails on that confirmation cannot settle)."""
    from kernelwatch.gate.statuses import CONFIRMABLE

    confirm = {v.case for v in result.verdicts if v.suite == "perf" and v.status in CONFIRMABLE}
    return confirm, {v.case for v in result.failed} - confirm


def confirm_table(
    pairs: list, devs: dict, history: list, kernel_of: dict[str, str], every: int, steps: list[float]
) -> None:
    """The confirm table: A/A cases sent to confirm, planted cases sent to confirm or failed (see the docstring)."""
    from kernelwatch.gate.judge import decide
    from kernelwatch.store.schema import RunDocument

    print(
        "| candidate (run/GPU) | baseline (run/GPU) | shared | A/A sent to confirm | A/A other fails | "
        + " | ".join(f"+{s:.0%} planted: caught" for s in steps)
        + " |"
    )
    print("| --- | --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in steps) + " |")
    totals = {"shared": 0, "aa": 0, "other": 0, **{s: [0, 0] for s in steps}}
    misses: list[str] = []
    for a, b in pairs:
        cand_all, base_all = devs[a], devs[b]
        shared = {r["case"] for r in cand_all["perf"] if r["implementation"] == KERNEL_IMPL} & {
            r["case"] for r in base_all["perf"] if r["implementation"] == KERNEL_IMPL
        }
        if not shared:
            continue
        tag = f"{a}|{b}"
        cand, base = restrict(cand_all, shared, "cand|" + tag), restrict(base_all, shared, "base|" + tag)
        ordered = sorted(shared)
        with pair_database(base, history) as engine:
            aa = decide(engine, RunDocument.model_validate(cand), base["run"]["id"])
            to_confirm, other = sent(aa)
            cells = []
            for step in steps:
                caught = planted = 0
                for offset in range(every):
                    plants = ordered[offset::every]
                    got = decide(engine, RunDocument.model_validate(plant(cand, plants, step)), base["run"]["id"])
                    flagged = set().union(*sent(got))
                    caught += sum(c in flagged for c in plants)
                    planted += len(plants)
                    status = {v.case: (v.status, v.effect) for v in got.verdicts if v.suite == "perf"}
                    misses += [
                        f"+{step:.0%} {short(a)} vs {short(b)}: {c}: {status[c][0]} ({status[c][1]:+.1%})"
                        for c in plants
                        if c not in flagged and step >= 0.1
                    ]
                totals[step][0] += caught
                totals[step][1] += planted
                cells.append(f"{caught}/{planted} ({caught / planted:.0%})")
        totals["shared"] += len(shared)
        totals["aa"] += len(to_confirm)
        totals["other"] += len(other)
        print(
            f"| {short(a)} | {short(b)} | {len(shared)} | {len(to_confirm)} ({len(to_confirm) / len(shared):.1%}) | "
            f"{len(other)} | " + " | ".join(cells) + " |"
        )
    cells = [f"{c}/{n} ({c / n:.1%})" if n else "-" for c, n in (totals[s] for s in steps)]
    aa = totals["aa"] / totals["shared"] if totals["shared"] else 0.0
    print(
        f"| all pairs | | {totals['shared']} | {totals['aa']} ({aa:.1%}) | {totals['other']} | "
        + " | ".join(cells)
        + " |"
    )
    for line in misses:
        print("missed:", line)


def short(key: tuple[str, str]) -> str:
    return f"{key[0][:8]}/{key[1][:12]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="run artifacts of one commit")
    ap.add_argument("--history", nargs="*", default=[], help="more runs to load into every pair's database")
    ap.add_argument("--plant", action="append", default=None, help="a case to plant the step on (repeatable)")
    ap.add_argument("--step", type=float, default=0.10, help="the planted slowdown (default 0.10 = +10%%)")
    ap.add_argument(
        "--every",
        type=int,
        default=0,
        help="the confirm table: plant on every Nth shared case (N offsets) and count what goes to confirm",
    )
    ap.add_argument("--steps", type=float, nargs="+", default=[0.05, 0.10, 0.20], help="planted steps for --every")
    ap.add_argument(
        "--unlike-fraction",
        type=float,
        default=None,
        help="the gate's UNLIKE_FRACTION for this run (kernelwatch/gate/suspects.py; default: as shipped)",
    )
    ap.add_argument(
        "--same-code",
        action="store_true",
        help="runs of several commits whose CUDA code is the same (shown by benchmarks/cuda_unchanged.py)",
    )
    args = ap.parse_args()
    from kernelwatch.gate import suspects
    from kernelwatch.gate.statuses import PASS

    if args.unlike_fraction is not None:
        suspects.UNLIKE_FRACTION = args.unlike_fraction
    from kernelwatch.store.ingest import load_files
    from kernelwatch.store.schema import ArtifactError, to_data

    try:
        docs = [to_data(d) for _, d in load_files(args.runs)]
        ids = {d["run"]["id"] for d in docs}
        history = [(s, d) for s, d in load_files(args.history) if d.run.id not in ids]
    except (ArtifactError, OSError, ValueError) as exc:
        print(f"cross_machine_aa: {exc}", file=sys.stderr)
        return 2
    commits = {d["run"]["commit"]["sha"] for d in docs}
    if len(commits) != 1 and not args.same_code:
        listed = ", ".join(sorted(c[:8] for c in commits))
        print(
            f"cross_machine_aa: the runs are of {len(commits)} commits ({listed}); give runs of one commit, "
            "or --same-code when benchmarks/cuda_unchanged.py shows their PTX is the same",
            file=sys.stderr,
        )
        return 2
    devs = device_runs(docs)
    uuids = {k[1] for k in devs}
    if len(uuids) < 2:
        print(
            f"cross_machine_aa: the runs name {len(uuids)} physical GPU(s) (device_uuid): need two or more",
            file=sys.stderr,
        )
        return 2
    kernel_of = {c["key"]: c["kernel"] for d in docs for c in d["cases"]}
    pairs = [(a, b) for a in devs for b in devs if a[1] != b[1]]
    print(
        f"commit {', '.join(sorted(c[:8] for c in commits))}: {len(docs)} runs, {len(devs)} device runs on "
        f"{len(uuids)} GPUs, "
        f"{len(pairs)} ordered pairs; history loaded: {len(history)} runs; planted step +{args.step:.0%}; "
        f"suspects across unlike measurements from {suspects.UNLIKE_FRACTION:g} x the minimum effect\n"
    )
    if args.every:
        confirm_table(pairs, devs, history, kernel_of, args.every, args.steps)
        return 0
    rows, false_fails, missed, disjoint = [], 0, 0, 0
    notes: list[str] = []
    for a, b in pairs:
        cand_all, base_all = devs[a], devs[b]
        shared = {r["case"] for r in cand_all["perf"] if r["implementation"] == KERNEL_IMPL} & {
            r["case"] for r in base_all["perf"] if r["implementation"] == KERNEL_IMPL
        }
        if not shared:
            disjoint += 1  # two devices of one run: the collector dealt each case to one of them
            continue
        tag = f"{a}|{b}"
        cand = restrict(cand_all, shared, "cand|" + tag)
        base = restrict(base_all, shared, "base|" + tag)
        aa = gate_pair(cand, base, history)
        fails = [v for v in aa.verdicts if v.failed]
        false_fails += len(fails)
        aa_text = aa.verdict + (
            f" ({len(fails)}: " + ", ".join(f"{v.case} {v.status}" for v in fails[:3]) + ")" if fails else ""
        )
        quiet = {
            v.case
            for v in aa.verdicts
            if v.status == PASS and v.effect is not None and abs(v.effect) < aa.min_effect / 2
        }
        plants = args.plant or default_plants(shared, kernel_of, kernel_times(cand), quiet)
        plants = [c for c in plants if c in shared]
        if plants:
            stepped = gate_pair(plant(cand, plants, args.step), base, history)
            status = {v.case: v.status for v in stepped.verdicts}
            caught = [c for c in plants if status.get(c) in ("regression",)]
            missed += len(plants) - len(caught)
            notes += [
                f"missed: {short(a)} vs {short(b)}: {v.case}: {v.status}: {v.message}"
                for v in stepped.verdicts
                if v.case in plants and v.case not in caught
            ]
            step_text = f"{stepped.verdict}: " + ", ".join(f"{kernel_of.get(c, '?')} {status.get(c)}" for c in plants)
        else:
            step_text = "no case to plant on"
        rows.append((a, b, len(shared), aa_text, step_text, ", ".join(plants)))
    print("| candidate (run/GPU) | baseline (run/GPU) | shared | A/A verdict | planted +step verdict |")
    print("| --- | --- | ---: | --- | --- |")
    for a, b, n, aa_text, step_text, _ in rows:
        print(f"| {short(a)} | {short(b)} | {n} | {aa_text} | {step_text} |")
    if disjoint:
        print(f"\n{disjoint} pairs share no case (two GPUs of one run: each case was measured on one of them)")
    planted = sorted({c for *_, p in rows for c in p.split(", ") if c})
    print(f"\nplanted cases: {'; '.join(planted) or 'none'}")
    for line in notes:
        print(line)
    print(f"false FAILs (A/A): {false_fails}; planted steps missed: {missed}")
    return 0 if false_fails == 0 and missed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
