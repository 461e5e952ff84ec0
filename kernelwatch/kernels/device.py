"""What the kernels need to know about the device they launch on, read once per device.

:func:`describe` turns a ``torch.device`` into the :class:`~kernelwatch.kernels.plan.DeviceInfo` every plan function
takes: SMs on CUDA, vector and AI (cube) cores on Ascend, never a hard-coded 132 or 48. Run metadata
records the same ``compute_units``. Nothing here runs at import: importing the kernels needs no device.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Iterator
from dataclasses import replace

import torch

from kernelwatch.kernels.names import vendor as _vendor
from kernelwatch.kernels.plan import DeviceInfo

INTERPRETER_PROGRAMS = 4  # CPU interpreter: few programs keep the interpreted grid quick

_simulated: contextvars.ContextVar[DeviceInfo | None] = contextvars.ContextVar("kernels_simulated", default=None)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def vendor(device: torch.device) -> str:
    """``nvidia``, ``ascend`` or ``cpu`` (the Triton interpreter)."""
    return _vendor(device.type)


def _ascend_cores(index: int) -> tuple[int, int]:
    """(vector cores, AI cores) from triton-ascend's driver, else from torch_npu's device properties."""
    try:
        import triton

        props = triton.runtime.driver.active.utils.get_device_properties(index)
        return int(props["num_vectorcore"]), int(props["num_aicore"])
    except (ImportError, AttributeError, KeyError, TypeError, RuntimeError):
        props = torch.npu.get_device_properties(index)
        return int(props.vector_core_num), int(props.cube_core_num)


@functools.cache
def _describe(device_type: str, index: int) -> DeviceInfo:
    if device_type == "cuda":
        props = torch.cuda.get_device_properties(index)
        return DeviceInfo(
            "nvidia", props.multi_processor_count, name=props.name, capability=props.major * 10 + props.minor
        )
    if device_type == "npu":
        vector, cube = _ascend_cores(index)
        return DeviceInfo("ascend", vector, name=torch.npu.get_device_name(index), cube_units=cube)
    return DeviceInfo("cpu", os.cpu_count() or 1, name="triton-interpreter", interpreter=True)


_BY_DEVICE: dict[torch.device, DeviceInfo] = {}


def describe(device: torch.device) -> DeviceInfo:
    """The description plans are made for. On the CPU, a simulated description may stand in (tests).

    On the launch path of every kernel call: one dict lookup when nothing is simulated (reading
    ``torch.device.type`` alone costs about a microsecond, so it is read once per device)."""
    info = _BY_DEVICE.get(device)
    if info is not None and not info.interpreter:
        return info
    if device.type == "cpu":
        simulated = _simulated.get()
        if simulated is not None:
            return simulated
    if info is None:
        index = device.index if device.index is not None else 0
        if device.type in ("cuda", "npu") and device.index is None:
            index = getattr(torch, device.type).current_device()
        info = _describe(device.type, index)
        if device.index is not None or device.type == "cpu":
            _BY_DEVICE[device] = info
    return info


def compute_units(device: torch.device) -> int:
    """SMs (CUDA), vector cores (Ascend), CPU cores: what run metadata records as compute units."""
    return describe(device).compute_units


@contextlib.contextmanager
def simulated(info: DeviceInfo) -> Iterator[DeviceInfo]:
    """Launch CPU tensors with the plans of another device, through the interpreter.

    The kernels, grids and tiles are those of ``info`` (an Ascend or NVIDIA description); only the
    execution is the CPU interpreter's, so ``interpreter`` is set on the description.
    """
    if not interpreting():
        raise RuntimeError("simulated(): plans of another device run on CPU tensors only with TRITON_INTERPRET=1")
    stand_in = replace(info, interpreter=True)
    token = _simulated.set(stand_in)
    try:
        yield stand_in
    finally:
        _simulated.reset(token)
