"""The model-like perf cases of the fused norm + GEMM kernels: L distinct layers called in turn, timed
eagerly with the host path or as one graph, stored per layer. On the CPU they run on the interpreter's stand-in."""

from __future__ import annotations

import os
import statistics

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

from kernelwatch.collect.backends import Backend
from kernelwatch.collect.perf import BaselineCache, perf_case
from kernelwatch.kernels.fused_layernorm_matmul.spec import SPEC as LN
from kernelwatch.kernels.fused_rmsnorm_matmul.spec import SPEC as RMS
from kernelwatch.kernels.names import COMPILE_IMPL, EAGER_IMPL, KERNEL_IMPL, TIMING_EVENTS, TIMING_WALL
from kernelwatch.kernels.norm_gemm import STACK_POINTS
from kernelwatch.kernels.spec import CPU_STACK, stack_of

SPECS = [RMS, LN]


def _stack_cases(spec):
    return [c for c in spec.perf_cases() if "layers" in c.p]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_each_fused_kernel_declares_its_stack_cases(spec) -> None:
    """Defect caught: a stack case missing at a shape, a depth or a mode, or a key that does not say which."""
    cases = _stack_cases(spec)
    assert len(cases) == 12
    got = {(c.p["shape"], c.p["n"], c.p["layers"], c.p["mode"]) for c in cases}
    want = {(s, n, layers, mode) for s, n in STACK_POINTS for layers in (32, 80) for mode in ("eager", "graph")}
    assert got == want
    for c in cases:
        assert f"layers={c.p['layers']}," in c.key and f"mode={c.p['mode']}," in c.key
        assert c.variant == "fold_gamma" and c.dtype == "fp16"
    assert len({spec.baseline_key(c) for c in cases}) == 12  # eager and graph never share a baseline
    cuda = stack_of(cases[0], torch.device("cuda"))
    assert (cuda.layers, cuda.shape, cuda.n) == (cases[0].p["layers"], cases[0].p["shape"], cases[0].p["n"])


class Recording(Backend):
    """The real CPU backend, keeping what its timers returned (a pass of the stack each) so the per-layer
    division can be checked against them."""

    def __init__(self) -> None:
        super().__init__(torch.device("cpu"), time_on_cpu=True)
        self.passes: dict[str, list[float]] = {}

    def wall_samples(self, fn, *args, **kwargs):
        samples, timing = super().wall_samples(fn, *args, **{**kwargs, "min_reps": 3, "max_reps": 3})
        self.passes.setdefault("wall", []).extend(samples)
        return samples, timing

    def device_samples(self, fn, *args, **kwargs):
        samples, timing = super().device_samples(fn, warmup_ms=0.0, min_reps=3, max_reps=3, method=kwargs["method"])
        self.passes.setdefault("device", []).extend(samples)
        return samples, timing

    def call_samples(self, fn, *args, **kwargs):
        return super().call_samples(fn, batch_ms=1.0, batches=2)


@pytest.mark.interpreter  # the fused kernels run through Triton's interpreter
@pytest.mark.parametrize(
    "spec,mode,timing",
    [(RMS, "eager", TIMING_WALL), (LN, "graph", TIMING_EVENTS)],
    ids=["rmsnorm-eager", "layernorm-graph"],
)
def test_a_stack_case_runs_on_the_cpu_stand_in_and_is_stored_per_layer(spec, mode, timing) -> None:
    """Defect caught: a stack case the collector cannot run (a missing implementation, an error), a sample
    stored per pass instead of per layer, a mode timed the other mode's way, or no cost per call (the figure
    the gate's ``--metric call`` reads), or an eager pass without the host probe beside it (what the gate scales a
    host-bound baseline by across hosts). The CPU has no graphs: mode=graph takes events there."""
    case = next(c for c in _stack_cases(spec) if c.p["mode"] == mode and c.p["layers"] == 32)
    backend = Recording()
    rows = {r.implementation: r for r in perf_case(spec, case, backend, {}, BaselineCache(), 0)}
    assert set(rows) == {KERNEL_IMPL, EAGER_IMPL, COMPILE_IMPL}
    layers = CPU_STACK[0]
    passes = backend.passes["wall" if mode == "eager" else "device"]
    stored = [s for r in rows.values() for s in r.samples_ms]
    for r in rows.values():
        assert r.error is None and r.timing == timing and r.case == case.key
        assert r.call_ms is not None and r.call_ms > 0 and r.median_ms > 0
        probes = r.host_probe_samples_us
        if mode == "eager":  # one probe after each sample, their median stored beside them
            assert len(probes) == len(r.samples_ms) == 3 and r.host_probe_us == statistics.median(probes) > 0
        else:
            assert r.host_probe_us is None and probes == []
    assert sorted(stored) == pytest.approx(sorted(p / layers for p in passes))


@pytest.mark.interpreter  # the fused kernels run through Triton's interpreter
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_the_kernel_pass_of_a_stack_computes_what_the_unfused_pass_does(spec) -> None:
    """Defect caught: a stack whose layers share a fold or a launcher they should not (every layer would give
    the first layer's output), or a module built over the wrong tensors."""
    case = _stack_cases(spec)[0]
    inputs = spec.make_inputs(case, torch.device("cpu"), 0)
    impls = spec.implementations(case, inputs)
    with torch.no_grad():
        fused, unfused = impls[KERNEL_IMPL](), impls[EAGER_IMPL]()
    assert len(fused) == len(unfused) == CPU_STACK[0]
    assert not torch.equal(fused[0], fused[1])
    for got, want in zip(fused, unfused):
        torch.testing.assert_close(got.float(), want.float(), rtol=case.tol.rtol, atol=case.tol.atol * 4)


def test_a_graph_stack_is_timed_from_its_graph_or_fails_never_falling_back_to_events() -> None:
    """Defect caught: a ``mode=graph`` stack timed by events when its capture fails (the case would read the eager
    figure under the graph's name), or a replay stored per pass instead of per layer. The host "graph" of
    tests/test_perf.py stands in for CUDA's: capture runs the call, replay runs the work it was given."""
    from test_perf import _graph_backend, _HostGraph, _sleep_us

    from kernelwatch.collect.perf import time_implementation
    from kernelwatch.kernels.names import TIMING_GRAPH
    from kernelwatch.kernels.spec import Stack

    stack = Stack(layers=4, mode="graph", shape=(2, 8), n=4)
    row = time_implementation(_graph_backend(replays=lambda: _sleep_us(2000)), KERNEL_IMPL, lambda: None, 1, stack)
    assert row["error"] is None and row["timing"] == TIMING_GRAPH
    # a 2 ms replay over 4 layers: 0.5 ms a layer, more on a loaded host (a 2-core runner read 1.35); a replay
    # stored per pass reads at least 2
    assert 0.5 <= row["median_ms"] < 2.0

    def synchronising() -> None:
        if _HostGraph.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")

    row = time_implementation(_graph_backend(), KERNEL_IMPL, synchronising, 1, stack)
    assert row["median_ms"] is None and "operation not permitted when stream is capturing" in row["error"]


def test_a_compile_peer_outlives_dynamos_recompile_limit():
    """A worker compiles one eager function per case at each case's shapes: past Dynamo's default limit of 8
    recompiles of one function, its torch_compile rows would silently time eager PyTorch."""
    import torch

    from kernelwatch.kernels.peers import RECOMPILE_LIMIT, compile_peer

    torch._dynamo.config.recompile_limit = 8
    compile_peer(lambda x: x + 1)
    assert torch._dynamo.config.recompile_limit >= RECOMPILE_LIMIT >= 64
    assert torch._dynamo.config.accumulated_recompile_limit >= RECOMPILE_LIMIT


def test_an_eager_pass_is_traced_only_when_asked(monkeypatch, capsys) -> None:
    """KERNELWATCH_TRACE_WALL=1: one stderr line per wall-timed measurement, naming the case and implementation
    with the host's and the device's state; unset, nothing (a collect's output stays as it was)."""
    from kernelwatch.collect.perf import time_implementation
    from kernelwatch.collect.walltrace import ENV, PREFIX
    from kernelwatch.kernels.spec import Stack

    stack = Stack(layers=2, mode="eager", shape=(4, 8), n=8)
    x = torch.ones(4, 8)
    monkeypatch.delenv(ENV, raising=False)
    row = time_implementation(
        Backend(torch.device("cpu"), time_on_cpu=True),
        KERNEL_IMPL,
        lambda: [x @ x.T for _ in range(2)],
        1,
        stack,
        "k/v/fp32/a=1",
    )
    assert row["error"] is None and PREFIX not in capsys.readouterr().err
    monkeypatch.setenv(ENV, "1")
    row = time_implementation(
        Backend(torch.device("cpu"), time_on_cpu=True),
        KERNEL_IMPL,
        lambda: [x @ x.T for _ in range(2)],
        1,
        stack,
        "k/v/fp32/a=1",
    )
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith(PREFIX)]
    assert row["error"] is None and len(lines) == 1, lines
    assert (
        lines[0].startswith(f"{PREFIX} k/v/fp32/a=1 triton: ")
        and "involuntary" in lines[0]
        and "SM -->-" in lines[0]
        and "gc-off" in lines[0]
    )


@pytest.mark.slow
def test_the_eager_stack_cases_are_collected_first_in_a_fresh_worker(tmp_path, cli, monkeypatch, capfd) -> None:
    """Defect caught: a stack's eager pass timed in a worker that had run other cases before it, where a Triton
    launch's host path read up to 2x a fresh process's on one H200, by how much depending on what ran before."""
    import re

    from kernelwatch.cli import main
    from kernelwatch.collect.walltrace import ENV, PREFIX
    from kernelwatch.store.artifact import load_artifact
    from kernelwatch.store.schema import to_data

    monkeypatch.setenv(ENV, "1")
    monkeypatch.setenv("KERNELWATCH_DB", f"sqlite:///{tmp_path / 'kw.db'}")
    argv = ["collect", "-k", "fused_rmsnorm_matmul", "--device", "cpu", "--suite", "perf", "--cpu-perf"]
    argv += ["--match", "layers=32", "--out", str(tmp_path / "run.json")]
    result = cli.invoke(main, argv)
    assert result.exit_code == 0, result.output
    traced = re.findall(rf"{PREFIX} (\S+) (\S+): .* pid (\d+) case (\d+),", capfd.readouterr().err)
    assert {case for case, *_ in traced} == {
        c.key for c in RMS.perf_cases() if "layers=32," in c.key and "eager" in c.key
    }
    assert len({pid for _, _, pid, _ in traced}) == 1, traced  # one process for all of them (and their peers)
    assert {int(n) for *_, n in traced} == {1, 2, 3}, traced  # before any other case in it
    doc = to_data(load_artifact(tmp_path / "run.json"))
    assert {r["case"] for r in doc["perf"]} == {c.key for c in RMS.perf_cases() if "layers=32," in c.key}
    for r in doc["perf"]:  # traced: each measurement timed twice more, their probes not piled onto the stored ones
        assert r["error"] is None, r["error"]
        if "mode=eager" in r["case"]:
            assert len(r["host_probe_samples_us"]) == len(r["samples_ms"]) >= 20, r["case"]
