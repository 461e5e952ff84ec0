"""Synthetic run history for tests, demos of scale and benchmarks. Always labelled synthetic.

Every generated run has ``synthetic: true``, the branch ``synthetic/...``, a commit subject that
starts with ``[synthetic]`` and hardware names that end in ``(synthetic)``, so nothing generated
here can be mistaken for a measurement. Deterministic for a given seed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from kernelwatch.kernels.names import (
    COPY_CEILING,
    EAGER_IMPL,
    IMPLEMENTATIONS,
    KERNEL_IMPL,
    LABELS,
    NOISE_ATOMIC,
    NOISE_MEMORY,
    CaseFacts,
    vendor,
)
from kernelwatch.store.schema import SCHEMA, RunDocument, describe, format_time, parse_time, to_data

HARDWARE = (
    {
        "vendor": "nvidia",
        "device_name": "NVIDIA H200 (synthetic)",
        "device_count": 1,
        "compute_units": 132,
        "memory_bytes": 150_109_880_320,
        "driver": "synthetic",
        "toolkit": "CUDA (synthetic)",
        "peak_gbps": 4250.0,
        "peak_gbps_datasheet": 4800.0,
        "peak_tflops": 690.0,
        "peak_tflops_datasheet": 989.0,
    },
    {
        "vendor": "ascend",
        "device_name": "Ascend910B4 (synthetic)",
        "device_count": 8,
        "compute_units": 60,
        "memory_bytes": 68_719_476_736,
        "driver": "synthetic",
        "toolkit": "CANN (synthetic)",
        "peak_gbps": 1300.0,
        "peak_gbps_datasheet": None,
        "peak_tflops": 280.0,
        "peak_tflops_datasheet": None,
    },
)
# (kernel, variants) the history is drawn from when no kernels are given: stand-ins for the tests and
# benchmarks of the database, gate and dashboard, which import no torch. `kernelwatch synth` passes the
# discovered specs' names and variants instead; tests/test_kernel_contract.py checks these against them.
STAND_INS = (
    ("mse_loss", ("persistent", "atomic")),
    ("scaled_masked_softmax", ("masked", "causal")),
    ("fused_rmsnorm_matmul", ("fold_gamma", "prologue_gamma", "rstd_prepass")),
)


# The stand-ins' facts, as a spec would declare them: the atomic variant an atomic reduction; launch-bound, a case
# whose first hardware's median is under this (4x the ~5 us a near-empty launch takes on an H200): their sizes
# (``n``) are labels, not what their times come from.
STAND_IN_ATOMIC = "atomic"
STAND_IN_LAUNCH_MS = 0.02

SYNTHETIC_BRANCHES = "synthetic/"  # every generated run's branch starts so


class SyntheticError(ValueError):
    """Options that make a run the schema refuses; the message names the run and the field."""


@dataclass
class Step:
    """From commit index ``at`` on, cases whose key contains ``match`` run ``factor`` times as long."""

    at: int
    factor: float
    match: str = ""


@dataclass
class SyntheticHistory:
    runs: int = 20
    cases: int = 12
    hardware: int = 1
    samples: int = 30
    noise: float = 0.01
    seed: int = 0
    base_ms: float = 0.005  # the fastest case's median; cases run 1-7x (x4 on the second hardware) that
    steps: list[Step] = field(default_factory=list)
    accuracy: bool = True
    kernels: tuple[tuple[str, tuple[str, ...]], ...] = STAND_INS
    start: dt.datetime = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.timezone.utc)

    def case_list(self) -> list[dict[str, Any]]:
        out = []
        i = 0
        while len(out) < self.cases:
            kernel, variants = self.kernels[i % len(self.kernels)]
            variant = variants[(i // len(self.kernels)) % len(variants)]
            dtype = ("fp16", "bf16", "fp32")[(i // 7) % 3]
            size = 4096 * 4 ** (i % 6)
            out.append(
                {
                    "key": f"{kernel}/{variant}/{dtype}/n={size},synthetic={i}",
                    "kernel": kernel,
                    "variant": variant,
                    "dtype": dtype,
                    "params": {"n": size, "synthetic": i},
                    "ceiling": COPY_CEILING,
                    "facts": CaseFacts(
                        NOISE_ATOMIC if variant == STAND_IN_ATOMIC else NOISE_MEMORY,
                        self.base_ms * (1 + i % 7) < STAND_IN_LAUNCH_MS,
                        1,
                        ((EAGER_IMPL, LABELS[EAGER_IMPL]),),
                    ).to_data(),
                }
            )
            i += 1
        return out

    def commit(self, index: int) -> dict[str, Any]:
        sha = hashlib.sha1(f"synthetic-{self.seed}-{index}".encode()).hexdigest()
        when = self.start + dt.timedelta(hours=7 * index)
        return {
            "sha": sha,
            "branch": f"{SYNTHETIC_BRANCHES}main",
            "time": format_time(when),
            "subject": f"[synthetic] change {index}",
            "dirty": False,
        }

    def documents(self):
        """Every run in order; a run the schema refuses (a step factor of 1e-300 makes infinite GB/s) is a
        :class:`SyntheticError` naming the run and the steps in effect."""
        cases = self.case_list()
        for index in range(self.runs):
            for h in range(self.hardware):
                try:
                    doc = self.document(index, h, cases)
                except ValidationError as exc:
                    steps = ", ".join(
                        f"{s.at}:{s.factor:g}" + (f":{s.match}" if s.match else "") for s in self.steps if s.at <= index
                    )
                    raise SyntheticError(
                        f"synthetic run {index} cannot be stored"
                        + (f" (steps in effect: {steps})" if steps else "")
                        + f": {describe(exc)}"
                    ) from None
                yield doc

    def sourced_documents(self):
        for i, doc in enumerate(self.documents()):
            yield f"synthetic run {i}", doc

    def document(self, index: int, h: int, cases: list[dict[str, Any]]) -> RunDocument:
        rng = random.Random(f"{self.seed}-{index}-{h}")
        hw = HARDWARE[h % len(HARDWARE)]
        commit = self.commit(index)
        started = dt.datetime.fromisoformat(commit["time"].replace("Z", "+00:00")) + dt.timedelta(minutes=30 + h)
        run_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        perf, accuracy = [], []
        for c_index, case in enumerate(cases):
            base_ms = self.base_ms * (1 + c_index % 7) * (1 + 3 * (h % 2))
            factor = math.prod(s.factor for s in self.steps if index >= s.at and s.match in case["key"])
            medians = {}
            for impl, scale in zip(IMPLEMENTATIONS, (1.0, 1.9, 1.4)):
                center = base_ms * scale * (factor if impl == KERNEL_IMPL else 1.0)
                samples = sorted(center * (1 + rng.gauss(0, self.noise)) for _ in range(self.samples))
                med = samples[len(samples) // 2]
                medians[impl] = med
                nbytes = case["params"]["n"] * 12
                perf.append(
                    {
                        "case": case["key"],
                        "implementation": impl,
                        "median_ms": med,
                        "p20_ms": samples[int(0.2 * (len(samples) - 1))],
                        "p80_ms": samples[max(int(0.8 * (len(samples) - 1)), len(samples) // 2)],
                        "min_ms": samples[0],
                        "samples_ms": [round(v, 6) for v in samples],
                        "bytes": nbytes,
                        "flops": None,
                        "gbps": nbytes / (med * 1e-3) / 1e9,
                        "tflops": None,
                        "pct_peak": 100 * nbytes / (med * 1e-3) / 1e9 / hw["peak_gbps"],
                        "speedup_vs_eager": None,
                        "target": None,
                        "target_met": None,
                        "error": None,
                    }
                )
            for row in perf[-3:]:
                row["speedup_vs_eager"] = medians[EAGER_IMPL] / row["median_ms"]
            if self.accuracy:
                budget = abs(rng.gauss(0.1, 0.05))
                accuracy.append(
                    {
                        "case": case["key"],
                        "max_abs_err": budget * 1e-3,
                        "max_rel_err": budget * 1e-3,
                        "rtol": 1e-3,
                        "atol": 1e-3,
                        "error_budget": budget,
                        "nan_mismatches": 0,
                        "trials": 3,
                        "seed": rng.randrange(1 << 30),
                        "passed": budget <= 1.0,
                        "error": None,
                    }
                )
        return RunDocument.model_validate(
            {
                "schema": SCHEMA,
                "run": {
                    "id": run_id,
                    "commit": commit,
                    "trigger": "nightly",
                    "ci_job": None,
                    "device": next(t for t in ("cuda", "npu") if vendor(t) == hw["vendor"]),
                    "command": None,
                    "versions": {"python": "3.12", "torch": "synthetic", "triton": "synthetic"},
                    "started_at": format_time(started),
                    "finished_at": format_time(started + dt.timedelta(minutes=5)),
                    "status": "complete",
                    "synthetic": True,
                    "notes": "synthetic history: not a measurement",
                },
                "hardware": dict(hw),
                "cases": cases,
                "accuracy": accuracy,
                "perf": perf,
                "profiler": [],
            }
        )


def stepped_copies(
    doc: RunDocument,
    runs: int,
    factor: float,
    match: str,
    at: int | None = None,
    noise: float = 0.003,
    seed: int = 0,
    after: dt.datetime | None = None,
    now: dt.datetime | None = None,
) -> list[RunDocument]:
    """SYNTHETIC runs derived from a real one, on its hardware: ``runs`` copies, one commit each, an hour
    apart after it, whose kernel timings of cases containing ``match`` take ``factor`` times as long from
    copy ``at`` on (default: the last copy only). Every timing also gets a per-run jitter of relative
    size ``noise``. Labelled as every synthetic run is (flag, branch, subject, notes); the hardware name is
    the real one so that the copies extend the real history (a demo of a step, never a measurement). With
    ``after`` (the newest real run, so that the copies are the newest), they fall a second apart right after it:
    never in the future (``now``, default the clock; the gate never takes a baseline from there), and on the
    same dates whenever they are built (a second ``make demo`` finds its runs unchanged; dates
    spread towards the clock moved with it for half an hour after a real run)."""
    at = runs - 1 if at is None else at
    data = to_data(doc)
    start = parse_time(data["run"]["commit"]["time"] or data["run"]["started_at"])
    step = dt.timedelta(hours=1)
    if after is not None:
        start, step = max(start, after), dt.timedelta(seconds=1)
        room = (now or dt.datetime.now(dt.timezone.utc)) - start
        if room < step * (runs + 1):  # built within seconds of the real run: squeezed in before the clock
            step = max(room, dt.timedelta(0)) / (runs + 1)
    out = []
    for index in range(runs):
        rng = random.Random(f"stepped-{seed}-{index}")
        copy = json.loads(json.dumps(data))
        when = start + step * (index + (1 if after is None else 0.1))
        run = copy["run"]
        run.update(
            id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            synthetic=True,
            trigger="manual",
            started_at=format_time(when + (dt.timedelta(minutes=5) if after is None else step * 0.4)),
            finished_at=format_time(when + (dt.timedelta(minutes=9) if after is None else step * 0.8)),
            ci_job=None,
            notes=f"synthetic: derived from run {data['run']['id']}; not a measurement",
        )
        run["commit"] = {
            "sha": hashlib.sha1(f"stepped-{seed}-{index}".encode()).hexdigest(),
            "branch": f"{SYNTHETIC_BRANCHES}step",
            "time": format_time(when),
            "dirty": False,
            "subject": f"[synthetic] copy {index} of {data['run']['commit']['sha'][:8]}"
            + (f", {match} x{factor:g}" if index >= at else ""),
        }
        for p in copy["perf"]:
            scale = 1 + rng.gauss(0, noise)
            if p["implementation"] == KERNEL_IMPL and match in p["case"] and index >= at:
                scale *= factor
            for k in ("median_ms", "p20_ms", "p80_ms", "min_ms", "call_ms"):
                if p.get(k) is not None:
                    p[k] *= scale
            p["samples_ms"] = [s * scale for s in p["samples_ms"]]
            p["call_samples_ms"] = [s * scale for s in p.get("call_samples_ms") or []]
            for k in ("gbps", "tflops", "pct_peak"):
                if p.get(k) is not None:
                    p[k] /= scale
        eager = {p["case"]: p["median_ms"] for p in copy["perf"] if p["implementation"] == EAGER_IMPL}
        for p in copy["perf"]:
            if p["median_ms"] and eager.get(p["case"]):
                p["speedup_vs_eager"] = eager[p["case"]] / p["median_ms"]
        out.append(_validated(copy, f"synthetic copy {index}"))
    return out


def _validated(data: dict[str, Any], what: str) -> RunDocument:
    try:
        return RunDocument.model_validate(data)
    except ValidationError as exc:
        raise SyntheticError(f"{what} cannot be stored: {describe(exc)}") from None


@dataclass(frozen=True)
class DemoChange:
    """In the demo branch's second run: kernel times (``what="time"``) or gating error budgets
    (``what="budget"``) of the cases whose key contains ``match`` are multiplied by ``factor``."""

    what: str
    match: str
    factor: float
    story: str


# The story `make demo` tells on the Triage page, on top of the real H200 history: one regression, one
# improvement, one accuracy drift (budgets x3, past the gate's 2x warning, still within tolerance).
DEMO_CHANGES = (
    DemoChange("time", "scaled_masked_softmax/masked/bf16/", 1.15, "softmax masked bf16 15% slower"),
    DemoChange("time", "mse_loss/atomic/fp32/direction=fwd", 0.8, "MSELoss atomic fp32 forward 20% faster"),
    DemoChange(
        "budget",
        "fused_rmsnorm_matmul/fold_gamma/fp16/",
        3.0,
        "RMSNorm+MatMul fold_gamma fp16 error budgets x3 (still <= 1)",
    ),
)
DEMO_BRANCH = f"{SYNTHETIC_BRANCHES}demo"


def demo_branch(
    doc: RunDocument,
    changes: tuple[DemoChange, ...] = DEMO_CHANGES,
    after: dt.datetime | None = None,
    now: dt.datetime | None = None,
) -> list[RunDocument]:
    """Two SYNTHETIC runs derived from a real one on its hardware, branch ``synthetic/demo``: a copy with
    only the per-run jitter of :func:`stepped_copies`, then a copy with ``changes`` applied, both after
    ``after`` when given (the newest real run: the demo is what the landing page opens on). Labelled as
    every synthetic run is; the subject of the second names each change."""
    out = []
    for index, copy in enumerate(stepped_copies(doc, 2, 1.0, "", at=2, after=after, now=now)):
        data = to_data(copy)
        data["run"]["commit"]["branch"] = DEMO_BRANCH
        data["run"]["notes"] += (
            f"; judged against the earlier runs of {DEMO_BRANCH} alone, never against measured history "
            "(kernelwatch.gate.judge.baseline_branch)"
        )
        if index == 1:
            data["run"]["commit"]["subject"] = "[synthetic] demo: " + "; ".join(c.story for c in changes)
            for change in changes:
                _apply(data, change)
        out.append(_validated(data, f"synthetic demo run {index}"))
    return out


def _apply(data: dict[str, Any], change: DemoChange) -> None:
    if change.what == "budget":
        for a in data["accuracy"]:
            if change.match in a["case"] and a.get("error_budget") is not None:
                a["error_budget"] = min(a["error_budget"] * change.factor, 0.99) if a["passed"] else a["error_budget"]
                for k in ("max_abs_err", "max_rel_err"):
                    if a.get(k) is not None:
                        a[k] *= change.factor
        return
    eager = {p["case"]: p["median_ms"] for p in data["perf"] if p["implementation"] == "torch_eager"}
    for p in data["perf"]:
        if p["implementation"] != "triton" or change.match not in p["case"]:
            continue
        for k in ("median_ms", "p20_ms", "p80_ms", "min_ms", "call_ms"):
            if p.get(k) is not None:
                p[k] *= change.factor
        p["samples_ms"] = [s * change.factor for s in p["samples_ms"]]
        p["call_samples_ms"] = [s * change.factor for s in p.get("call_samples_ms") or []]
        for k in ("gbps", "tflops", "pct_peak"):
            if p.get(k) is not None:
                p[k] /= change.factor
        if p["median_ms"] and eager.get(p["case"]):
            p["speedup_vs_eager"] = eager[p["case"]] / p["median_ms"]
