"""benchmarks/gpu_dev.py: the studies kernelwatch/kernels/NOTES.md cites launch what `kernelwatch/kernels/` ships (no
copies) and the rejected candidates beside it; each computes y = diag(1/rms) x W^T (or the softmax) right in the
interpreter, and on a host without CUDA the script stops in one line."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_dev.py"


@pytest.fixture(scope="module")
def dev():
    spec = importlib.util.spec_from_file_location("gpu_dev", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_kernels_are_imported_not_copied(dev) -> None:
    rms = importlib.import_module("kernelwatch.kernels.fused_rmsnorm_matmul.kernel")
    smx = importlib.import_module("kernelwatch.kernels.scaled_masked_softmax.kernel")

    assert dev._softmax_fwd_heads_kernel is smx._softmax_fwd_heads_kernel
    assert dev._rms_gemm_tma_kernel is rms._rms_gemm_tma_kernel and dev._rstd_kernel is rms._rstd_kernel
    assert dev._decode_splitk_kernel is rms._decode_splitk_kernel
    source = SCRIPT.read_text()
    for shipped in (
        "def _softmax_fwd_heads_kernel",
        "def _rstd_kernel",
        "def _rms_gemm_tma_kernel",
        "def _decode_splitk_kernel",
        "def _splitk_fused_kernel",
    ):
        assert shipped not in source


def test_every_candidate_computes_the_fused_result(dev, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(multi_processor_count=4))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 8, 16, generator=g) * 4
    mask = torch.rand(2, 1, 8, 16, generator=g) < 0.2
    want = torch.softmax((x * 0.125).masked_fill(mask, float("-inf")), -1)
    for rows, stages in ((1, 1), (2, 2)):
        assert (dev.softmax_heads(x, mask.view(torch.uint8), 0.125, rows, 4, stages) - want).abs().max() < 1e-6
    m, k, n = 32, 64, 64
    a = torch.randn(m, k, generator=g)
    w = torch.randn(n, k, generator=g) / 8
    rstd = torch.rsqrt(a.pow(2).mean(-1) + 1e-6)
    ref = (a * rstd[:, None]) @ w.T
    assert (dev.rstd_prepass(a, 4, 32, 4) - rstd).abs().max() < 1e-5
    candidates = {
        "prepass + TMA GEMM": lambda: dev.rms_gemm_tma(
            a, w, (16, 32, 32, 1, 4, True), prepass=True, pre_cfg=(4, 32, 4)
        ),
        "in-loop sum of squares": lambda: dev.rms_gemm_tma(a, w, (16, 32, 32, 1, 4, True)),
        "A read twice": lambda: dev.rms_gemm_twice(a, w, (16, 32, 32, 1, 4), 16),
        "phase before the GEMM": lambda: dev.rms_gemm_phase(a, w, (16, 32, 32, 1, 4), 8, 32),
        "decode, last program adds": lambda: dev.rms_splitk_fused(a[:16], w, (32, 32, 2, 1, 4)),
    }
    for name, run in candidates.items():
        want_y = ref[:16] if name.startswith("decode") else ref
        assert (run() - want_y).abs().max() < 1e-4, name
    plain = dev.rms_gemm_tma(a, w, (16, 32, 32, 1, 4, True), norm=False)
    assert (plain - a @ w.T).abs().max() < 1e-4


def test_without_cuda_the_script_stops_in_one_line() -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "softmax"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "gpu_dev.py: no CUDA device visible; these studies time kernels on an NVIDIA GPU (Hopper for TMA)"
    ]
