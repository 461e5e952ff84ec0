"""Output allocation that can be poisoned with NaN, so an element a kernel forgot to write fails.

Kernels allocate every output through :func:`new_output`. Normally that is ``torch.empty``;
inside ``with poisoned_outputs():`` (the accuracy suite) it is ``torch.full(..., nan)``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

_state = threading.local()


def poisoning() -> bool:
    return getattr(_state, "on", False)


@contextlib.contextmanager
def poisoned_outputs(on: bool = True) -> Iterator[None]:
    previous = poisoning()
    _state.on = on
    try:
        yield
    finally:
        _state.on = previous


def new_output(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if poisoning() and dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)
