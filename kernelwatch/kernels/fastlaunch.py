"""A shorter launch path for small, hot kernels on CUDA.

Triton's ``kernel[grid](...)`` re-derives every argument's specialization (dtype, 16-byte alignment
of pointers, integers equal to 1 or divisible by 16, 32- or 64-bit integers), builds a cache key and
looks the compiled kernel up on every call: on an H200 host that is 10-12 us for a one-argument
kernel and 17.5 us for the ten-argument MSELoss reduction, against 21.8 us for the whole eager
``F.mse_loss`` (benchmarks/results/2026-11-30-h200-dev3.log). :class:`FastLauncher` keys its own
cache on exactly those properties, takes the compiled kernel from Triton's normal path the first time
a key is seen, and afterwards calls the compiled launcher directly.

The key over-approximates Triton's specialization (any difference in what Triton specializes on is
a different key here), so a cached kernel is only reused where Triton itself would reuse it. It never
runs under the interpreter or with launch hooks installed (profilers), only on the Triton versions in
:data:`VERIFIED`, and a launcher that refuses the call (a ``TypeError``: another argument layout) sends
that kernel back to the normal path for good.

On by default where it applies; ``KERNELWATCH_FAST_LAUNCH=0`` turns it off (the collector records
which path a run took: ``versions["launch"]``). The first GPU runs (2026-11-30) never took it (Triton's
``launch_enter_hook`` is an empty ``HookChain``, not ``None``, and an earlier check read that as a profiler
being installed); once fixed it cut 12-23 us per call on the H200 and brought MSELoss to eager's cost per
call (kernelwatch/kernels/NOTES.md, "Cost per call"; checked and timed by benchmarks/launch_path.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
import triton

from kernelwatch.kernels.interpreter import install as install_interpreter

VERIFIED = ("3.6", "3.9")

try:
    from triton.tools.tensor_descriptor import TensorDescriptor as _TensorDescriptor
except ImportError:  # a Triton without host tensor descriptors (triton-ascend 3.2): they never reach here
    _TensorDescriptor = None


def requested() -> bool:
    """Not turned off with ``KERNELWATCH_FAST_LAUNCH=0`` (or ``false``, ``no``, ``off``)."""
    return os.environ.get("KERNELWATCH_FAST_LAUNCH", "1").strip().lower() not in ("0", "false", "no", "off")


def _enabled() -> bool:
    """Checked once per kernel, when its launcher is made."""
    if not requested():
        return False
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return False
    return triton.__version__.rsplit(".", 1)[0] in VERIFIED


def _int_key(value: int) -> tuple[bool, bool, bool, bool]:
    return value == 1, value % 16 == 0, -(2**31) <= value < 2**31, -(2**63) <= value < 2**63


class _NotKeyed(Exception):
    """An argument (a TMA descriptor, say) whose specialization this launcher does not model."""


def _descriptor_key(value: Any) -> Any:
    """A host TMA descriptor: Triton specializes on its element type and block shape (its layout follows
    from those); padding, tf32 rounding and the base's alignment are keyed too, to be sure."""
    base = value.base
    return (
        "tensordesc",
        base.dtype,
        tuple(value.block_shape),
        value.padding,
        getattr(value, "round_f32_to_tf32", False),
        not base.data_ptr() & 15,
    )


def _arg_key(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.dtype, value.data_ptr() % 16 == 0
    if _TensorDescriptor is not None and isinstance(value, _TensorDescriptor):
        return _descriptor_key(value)
    if isinstance(value, bool):
        return bool, value
    if isinstance(value, int):
        return _int_key(value)
    if isinstance(value, float):
        return float
    if value is None:
        return None
    raise _NotKeyed


def _tensor_key(value: torch.Tensor) -> Any:
    return value.dtype, not value.data_ptr() & 15


# The key of an argument by its exact type (one dict lookup); other types (subclasses) go through _arg_key.
_KEY_BY_TYPE: dict[type, Any] = {
    torch.Tensor: _tensor_key,
    int: _int_key,
    float: lambda v: float,
    bool: lambda v: (bool, v),
    type(None): lambda v: None,
}
if _TensorDescriptor is not None:
    _KEY_BY_TYPE[_TensorDescriptor] = _descriptor_key


def _hook_set(hook: Any) -> bool:
    """A launch hook is set: not None, and (Triton 3.9's ``HookChain``) not an empty chain."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return bool(calls) if calls is not None else True


def _hooks_installed() -> bool:
    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    if runtime is None:
        return True  # a Triton without knobs: not a version this path knows
    return _hook_set(getattr(runtime, "launch_enter_hook", None)) or _hook_set(
        getattr(runtime, "launch_exit_hook", None)
    )


class FastLauncher:
    """``FastLauncher(jit_fn)(grid, args, kwargs)`` does what ``jit_fn[grid](*args, **kwargs)`` does.

    ``kwargs`` holds every constexpr by name, and ``num_warps`` / ``num_stages``.
    """

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.names = list(fn.arg_names)
        self._cache: dict[Any, Any] = {}
        self._broken = not _enabled()
        if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
            install_interpreter()
        self.hits = 0  # launches that took the short path (what a GPU check counts)

    def __call__(
        self,
        grid: tuple[int, ...],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        static: tuple[tuple, tuple] | None = None,
    ) -> None:
        """``static``: (``tuple(kwargs.items())``, the constexpr values after ``args`` in parameter order),
        computed once per launch plan (:class:`kernelwatch.kernels.plan.Launch`) instead of on every call."""
        first = args[0]
        if self._broken or not isinstance(first, torch.Tensor) or not first.is_cuda:
            self.fn[grid](*args, **kwargs)
            return
        index = first.get_device()
        by_type = _KEY_BY_TYPE.get
        try:
            key = (
                index,
                tuple([by_type(type(a), _arg_key)(a) for a in args]),
                static[0] if static is not None else tuple(kwargs.items()),
            )
        except _NotKeyed:
            self.fn[grid](*args, **kwargs)
            return
        compiled = self._cache.get(key)
        if compiled is None or _hooks_installed():
            compiled = self.fn[grid](*args, **kwargs)
            if not all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata")):
                self._broken = True  # a Triton without the launcher this relies on: the normal path for good
            else:
                self._cache[key] = compiled
            return
        try:
            values = [*args, *(static[1] if static is not None else (kwargs[n] for n in self.names[len(args) :]))]
        except KeyError:  # a constexpr left to its default: only Triton's own path knows it
            self._broken = True
            self.fn[grid](*args, **kwargs)
            return
        g = (*grid, 1, 1)
        try:
            compiled.run(
                g[0],
                g[1],
                g[2],
                torch._C._cuda_getCurrentRawStream(index),
                compiled.function,
                compiled.packed_metadata,
                None,
                None,
                None,
                *values,
            )
        except TypeError:  # the launcher parses its arguments before launching: nothing ran
            self._broken = True
            self.fn[grid](*args, **kwargs)
            return
        self.hits += 1


_LAUNCHERS: dict[Any, FastLauncher] = {}


def path() -> str:
    """Which launch path kernels take here: ``short`` (this module) or ``triton`` (Triton's own)."""
    return "short" if _enabled() else "triton"


def short_launches() -> int:
    """Launches that took the short path in this process, over every kernel."""
    return sum(launcher.hits for launcher in _LAUNCHERS.values())


def fast_launcher(fn: Any) -> FastLauncher:
    launcher = _LAUNCHERS.get(fn)
    if launcher is None:
        launcher = _LAUNCHERS[fn] = FastLauncher(fn)
    return launcher
