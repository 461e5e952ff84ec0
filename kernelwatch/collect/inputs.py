"""Perf inputs drawn on the device they are timed on, from the case's seed.

The kernels' ``make_inputs`` draw on the host: ``torch.Generator(device="cpu").manual_seed(seed)``, float32
``torch.randn``/``torch.rand`` on the CPU, arithmetic and casts there, then a copy to the device. That keeps
the accuracy suite's inputs identical on every machine (the gating inputs of a case are a pure function of its
key: ``kernelwatch.collect.accuracy``), and it is what a fresh H200 spent 58.1 s of a full run on ("perf: inputs",
). Measured on the CPU for every perf case (``benchmarks/perf_inputs.py``): 21.6 GB drawn by the host's
random number generator, 50.8 GB written by host arithmetic and casts, 14.4 GB copied to the device, at
0.16 GB/s of ``randn`` on a shared 2-core machine.

For the perf suite the values do not matter (these kernels' time does not depend on them: no data-dependent
control flow, no sparsity), only shapes, dtypes, strides and "finite, not all zeros" do. :func:`drawn_on`
runs ``make_inputs`` under a ``TorchFunctionMode`` that sends each draw of a CPU generator to a generator on
the device, seeded with the CPU generator's seed (one device stream per CPU generator, so successive draws
continue one stream as they did on the host): every random tensor is born on the device and the arithmetic,
casts and ``.to(device)`` that follow run there or do nothing. The perf inputs' *values* therefore differ from
the host-drawn ones (and between device kinds), which the perf suite does not see; the accuracy suite never
uses this and its inputs are bit-identical to before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# Factories that take a generator and, without a device, draw on the host.
DRAWS = (torch.randn, torch.rand, torch.randint, torch.randperm, torch.normal)


class DeviceDraws(TorchFunctionMode):
    """Draws from a CPU ``torch.Generator`` made on ``device`` instead (see the module docstring).
    ``redirected`` counts them."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.redirected = 0
        self._streams: dict[int, tuple[torch.Generator, torch.Generator]] = {}

    def _stream(self, host: torch.Generator) -> torch.Generator:
        held = self._streams.get(id(host))
        if held is None or held[0] is not host:
            stream = torch.Generator(device=self.device).manual_seed(host.initial_seed())
            held = self._streams[id(host)] = (host, stream)
        return held[1]

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = dict(kwargs or {})
        host = kwargs.get("generator")
        if (
            any(func is draw for draw in DRAWS)
            and isinstance(host, torch.Generator)
            and host.device.type == "cpu"
            and torch.device(kwargs.get("device") or "cpu").type == "cpu"
        ):
            kwargs["generator"] = self._stream(host)
            kwargs["device"] = self.device
            self.redirected += 1
        return func(*args, **kwargs)


@contextlib.contextmanager
def drawn_on(device: torch.device, force: bool = False) -> Iterator[DeviceDraws | None]:
    """Inside the block, host draws of ``make_inputs`` happen on ``device``. Nothing changes on the CPU (the
    interpreter's perf path keeps its inputs) unless ``force`` (tests of the redirection itself)."""
    if device.type == "cpu" and not force:
        yield None
        return
    with DeviceDraws(device) as mode:
        yield mode
