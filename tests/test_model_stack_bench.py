"""benchmarks/model_stack.py's CPU smoke path: the same code the H200 runs, on tiny shapes in the interpreter."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("model_stack", ROOT / "benchmarks" / "model_stack.py")
model_stack = importlib.util.module_from_spec(_spec)
assert _spec.loader is not None
_spec.loader.exec_module(model_stack)


def test_the_smoke_run_times_and_checks_every_stack(tmp_path, capsys) -> None:
    """Defect caught: a smoke path that no longer runs (the H200 run would be the first to find out), a row
    without its figures, a depth the table leaves out, or a fused stack timed without its output checked."""
    out = tmp_path / "stack.json"
    assert model_stack.main(["--device", "cpu", "--depths", "1,2", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    timed = [r for r in result["rows"] if "skipped" not in r]
    combos = {(r["kernel"], tuple(r["shape"]), r["layers"]) for r in timed}
    assert combos == {(k, s, d) for k in ("rms", "ln") for s, _ in model_stack.SMOKE_SHAPES for d in (1, 2)}
    for r in timed:
        assert r["impl"] in ("triton", "torch_eager") and r["eager_us"] > 0 and r["host_us"] > 0
        assert r["graph_us"] is None  # no CUDA graphs on the CPU
        if r["impl"] == "triton":
            assert r["check_rel_err"] <= 2e-2
    assert {r["impl"] for r in result["rows"] if "skipped" in r} == {"torch_compile"}
    assert set(result["missing"]) == {"liger", "flaggems"}
    printed = capsys.readouterr().out
    assert "| LayerNorm+MM | `2x64->32` | 2 | triton |" in printed


def test_a_fused_stack_that_differs_from_the_unfused_one_is_refused() -> None:
    """Defect caught: timing a stack whose layers compute the wrong thing (the check comparing nothing)."""
    right = [torch.ones(2, 3), torch.full((2, 3), 2.0)]
    wrong = [torch.ones(2, 3), torch.full((2, 3), 2.2)]
    assert model_stack.check(lambda: right, lambda: right) == 0
    with pytest.raises(AssertionError, match="differs from the unfused one"):
        model_stack.check(lambda: wrong, lambda: right)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--device", "cpu", "--depths", "1,x"], "--depths must be integers"),
        (["--device", "cpu", "--depths", "0"], "every depth must be at least 1"),
        (["--device", "cpu", "--only", "triton,cublas"], "unknown implementation 'cublas'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys) -> None:
    assert model_stack.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_the_host_path_script_prints_a_row_per_path_kernel_and_depth() -> None:
    """Defect caught: benchmarks/host_path.py (the before / after of the host path) broken by an API change. It
    replaces the launches in its own process, so it runs in a child."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "host_path.py"), "--depths", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| decode") or line.startswith("| tiles")]
    assert len(rows) == 4 and all(float(r.split("|")[4]) > 0 for r in rows)
