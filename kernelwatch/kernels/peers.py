"""Peers: other projects' implementations of this project's kernels, loaded only when they are importable.

* ``liger``: Liger-Kernel (``liger_kernel.transformers.functional.liger_rms_norm``, ``liger_layer_norm``);
* ``flaggems``: FlagGems (``flag_gems.rms_norm``, ``flag_gems.mse_loss``, ``flag_gems.layer_norm``);
* ``apex``: NVIDIA apex's Megatron fused softmax extensions ``scaled_masked_softmax_cuda`` and
  ``scaled_upper_triang_masked_softmax_cuda`` (installed with apex's CUDA extensions, or built from
  apex's ``csrc/megatron`` by ``benchmarks/peers.py`` onto ``sys.path``).

Each loader returns None where the package is missing or fails to import, and always on a device that is not
CUDA (FlagGems probes the device at import; the interpreter runs no peer). :func:`versions` names what a run
used; the collector records it with the run's software versions.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from kernelwatch.kernels.spec import APEX_IMPL, FLAGGEMS_IMPL, LIGER_IMPL

APEX_MODULES = ("scaled_masked_softmax_cuda", "scaled_upper_triang_masked_softmax_cuda")
APEX_COMMIT_FILE = "APEX_COMMIT"  # written by benchmarks/peers.py beside the extensions it builds


def _cuda(device: torch.device | str) -> bool:
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


@functools.cache
def _import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except Exception:
        return None


RECOMPILE_LIMIT = 4096  # Dynamo's default (8 per function) would turn a worker's 9th shape into eager PyTorch


def compile_peer(fn: Any) -> Any:
    """``torch.compile(fn, dynamic=False)`` for a torch.compile peer. Every case compiles the same Python
    function at its own shapes in one long-lived worker; past Dynamo's recompile limit (8 per code object by
    default) it would silently run ``fn`` eagerly and the "torch_compile" row would time eager PyTorch."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, RECOMPILE_LIMIT)
    return torch.compile(fn, dynamic=False)


def liger_rms_norm(device: torch.device | str) -> Any:
    """Liger-Kernel's ``liger_rms_norm(X, W, eps, offset=0.0, casting_mode="llama", in_place=True)`` or None."""
    if not _cuda(device):
        return None
    mod = _import("liger_kernel.transformers.functional")
    return getattr(mod, "liger_rms_norm", None)


def liger_layer_norm(device: torch.device | str) -> Any:
    """Liger-Kernel's ``liger_layer_norm(X, W, B, eps)`` or None."""
    if not _cuda(device):
        return None
    mod = _import("liger_kernel.transformers.functional")
    return getattr(mod, "liger_layer_norm", None)


def flaggems(device: torch.device | str) -> ModuleType | None:
    """The ``flag_gems`` module (``rms_norm``, ``mse_loss``) or None."""
    if not _cuda(device):
        return None
    mod = _import("flag_gems")
    return mod if mod is not None and hasattr(mod, "rms_norm") and hasattr(mod, "mse_loss") else None


def flaggems_layer_norm(device: torch.device | str) -> Any:
    """FlagGems' layer norm as ``norm(x, normalized_shape, weight, bias, eps) -> y``, or None. FlagGems 5.0.2's
    ``layer_norm`` returns ``(y, mean, rstd)`` (the aten ``native_layer_norm`` triple): the first is the output
    (an H200 run of benchmarks/model_stack.py passed the triple to ``F.linear`` and raised TypeError)."""
    gems = flaggems(device)
    norm = getattr(gems, "layer_norm", None)
    if norm is None:
        return None

    def layer_norm(x: torch.Tensor, shape: list[int], weight: Any, bias: Any, eps: float) -> torch.Tensor:
        out = norm(x, shape, weight, bias, eps)
        return out[0] if isinstance(out, tuple) else out

    return layer_norm


def apex_softmax(device: torch.device | str, causal: bool) -> ModuleType | None:
    """apex's masked (or causal) softmax extension, with ``forward`` and ``backward``, or None."""
    if not _cuda(device):
        return None
    return _import(APEX_MODULES[1] if causal else APEX_MODULES[0])


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def versions() -> dict[str, str]:
    """Peer -> version of every peer importable here (on CUDA): the distribution's version, or for apex
    extensions built from source ``source <commit>`` from the file the build left beside them."""
    out: dict[str, str] = {}
    if not torch.cuda.is_available():
        return out
    if liger_rms_norm("cuda") is not None:
        out[LIGER_IMPL] = _dist_version("liger-kernel", "liger_kernel") or "unknown"
    if flaggems("cuda") is not None:
        out[FLAGGEMS_IMPL] = _dist_version("flag-gems", "flag_gems") or "unknown"
    ext = apex_softmax("cuda", False) or apex_softmax("cuda", True)
    if ext is not None:
        version = _dist_version("apex")
        if version is None:
            commit = Path(getattr(ext, "__file__", "") or ".").parent / APEX_COMMIT_FILE
            version = f"source {commit.read_text().strip()[:40]}" if commit.is_file() else "source"
        out[APEX_IMPL] = version
    return out
