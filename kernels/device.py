"""What the kernels need to know about the device they launch on, cached per device.

Persistent grids size themselves from here: SMs on CUDA, vector cores on Ascend. Never a
hard-coded 132 or 56.
"""

from __future__ import annotations

import functools
import os

import torch

INTERPRETER_PROGRAMS = 4  # CPU interpreter: few programs keep the interpreted grid quick


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def vendor(device: torch.device) -> str:
    """``nvidia``, ``ascend`` or ``cpu`` (the Triton interpreter)."""
    return {"cuda": "nvidia", "npu": "ascend"}.get(device.type, "cpu")


@functools.cache
def _compute_units(device_type: str, index: int) -> int:
    if device_type == "cuda":
        return torch.cuda.get_device_properties(index).multi_processor_count
    if device_type == "npu":
        try:
            import triton

            props = triton.runtime.driver.active.utils.get_device_properties(index)
            return int(props["num_vectorcore"])
        except (ImportError, AttributeError, KeyError, TypeError):
            return int(torch.npu.get_device_properties(index).vector_core_num)
    return INTERPRETER_PROGRAMS


def compute_units(device: torch.device) -> int:
    """SMs (CUDA), vector cores (Ascend) or the interpreter's program count (CPU)."""
    index = device.index if device.index is not None else 0
    if device.type in ("cuda", "npu") and device.index is None:
        index = getattr(torch, device.type).current_device()
    return _compute_units(device.type, index)
