"""kernelwatch/kernels/interpreter.py: Triton's interpreter re-patches its language once per helper and launch, not per
call, and the kernels compute the same bits as with Triton's own interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter as triton_interpreter

from kernelwatch.kernels import interpreter
from kernelwatch.kernels.plan import Launch, launch

ROOT = Path(__file__).resolve().parents[1]

# Every kernel's accuracy cases whose kernels call @triton.jit helpers per tile or row, small enough to be quick.
OUTPUTS = r"""
import json, sys
import torch
from kernelwatch import kernels
from kernelwatch.kernels import interpreter
from kernelwatch.kernels.spec import numel

picked = []
for name, spec in sorted(kernels.discover().items()):
    cases = [c for c in spec.accuracy_cases() if numel(c.p.get("shape") or (1,)) <= 70_000]
    picked += [(spec, c) for c in cases[:: max(1, len(cases) // 5)]]
out = {}
for spec, case in picked:
    inputs = spec.make_inputs(case, torch.device("cpu"), 7)
    results = spec.run(case, inputs)
    out[case.key] = [r.detach().double().flatten().tolist() if r.is_floating_point() else r.tolist() for r in results]
json.dump({"status": interpreter.status(), "outputs": out}, open(sys.argv[1], "w"), allow_nan=True)
"""


def _outputs(tmp_path: Path, name: str, **env: str) -> dict:
    out = tmp_path / f"{name}.json"
    subprocess.run(
        [sys.executable, "-c", OUTPUTS, str(out)],
        check=True,
        cwd=ROOT,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", **env},
    )
    return json.loads(out.read_text())


@pytest.mark.slow
def test_every_kernel_computes_the_same_bits_as_with_triton_s_own_interpreter(tmp_path: Path) -> None:
    plain = _outputs(tmp_path, "plain", **{interpreter.PLAIN_ENV: "1"})
    fast = _outputs(tmp_path, "fast")
    assert plain["status"] == f"{interpreter.PLAIN_ENV} is set" and fast["status"] == "installed"
    assert len(plain["outputs"]) >= 12 and {k.split("/")[0] for k in plain["outputs"]} >= {
        "mse_loss",
        "scaled_masked_softmax",
        "fused_rmsnorm_matmul",
        "fused_layernorm_matmul",
    }
    for key, values in plain["outputs"].items():
        assert json.dumps(values) == json.dumps(fast["outputs"][key]), key  # NaN included, bit for bit


@triton.jit
def _add_one(ptr, i):
    tl.store(ptr + i, tl.load(ptr + i) + 1.0)


@triton.jit
def _calls_a_helper_per_element(ptr, N: tl.constexpr):
    base = tl.program_id(0) * N
    for i in range(N):
        _add_one(ptr, base + i)


def test_a_launch_patches_the_language_once_per_helper_not_once_per_call(monkeypatch) -> None:
    """4 programs x 8 helper calls: Triton patches 1 + 32 times, this 1 + 1, and the values are right."""
    assert interpreter.install() and interpreter.status() == "installed"
    calls = []
    original = triton_interpreter._patch_lang
    monkeypatch.setattr(triton_interpreter, "_patch_lang", lambda fn: calls.append(fn) or original(fn))
    x = torch.zeros(32)
    sig = {"ptr": "*fp32"}
    launch(Launch(_calls_a_helper_per_element, (4,), {"N": 8}, sig), x)
    assert torch.equal(x, torch.ones(32)) and len(calls) == 2
    launch(Launch(_calls_a_helper_per_element, (4,), {"N": 8}, sig), x)  # a new launch patches its helper anew
    assert torch.equal(x, torch.full((32,), 2.0)) and len(calls) == 4


def test_an_interpreter_it_does_not_know_is_left_as_it_is(monkeypatch) -> None:
    class Other:
        def __call__(self, *args, **kwargs):
            return self.fn(*args, **kwargs)  # an interpreter that no longer re-patches per call

    monkeypatch.setattr(triton_interpreter, "InterpretedFunction", Other)
    monkeypatch.setitem(interpreter._state, "installed", None)
    assert interpreter.install() is False
    assert "not the re-patching one" in interpreter.status()
    assert triton_interpreter.InterpretedFunction.__call__ is Other.__call__
    monkeypatch.setenv(interpreter.PLAIN_ENV, "1")
    monkeypatch.setitem(interpreter._state, "installed", None)
    assert interpreter.install() is False and interpreter.status() == f"{interpreter.PLAIN_ENV} is set"
