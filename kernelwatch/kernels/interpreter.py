"""Triton's CPU interpreter (``TRITON_INTERPRET=1``) without its repeated patching.

Each call of a ``@triton.jit`` helper from inside an interpreted kernel runs Triton's ``_patch_lang``
again: ``inspect.getmembers`` over ``triton.language``, its tensor and math modules, about 0.25 ms, and
never undone (the launch's own patch is). Our kernels call a helper per tile (``_mse_atomic_tile``,
``_ln_stats_rows``), so a 1,048,576-element atomic MSELoss spent half its interpreted time there.

:func:`install` lets the first call of each helper in a launch patch as Triton does, and later calls
of that helper in the same launch skip the identical re-patch: the modules end in the state Triton
leaves them in, and the kernels compute the same bits (``tests/test_interpreter.py``). It applies only
where Triton's helper call is the one described above (checked in its source) and
``KERNELWATCH_PLAIN_INTERPRETER`` is not set; anywhere else the interpreter is left as it is.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any

PLAIN_ENV = "KERNELWATCH_PLAIN_INTERPRETER"
_state: dict[str, Any] = {"installed": None, "why": "not tried", "launches": []}


def _applies() -> tuple[bool, str]:
    if os.environ.get(PLAIN_ENV, "").strip().lower() not in ("", "0", "false", "no", "off"):
        return False, f"{PLAIN_ENV} is set"
    try:
        from triton.runtime import interpreter
    except ImportError as exc:
        return False, f"no triton.runtime.interpreter ({exc})"
    classes = [getattr(interpreter, name, None) for name in ("InterpretedFunction", "GridExecutor")]
    if None in classes or not hasattr(interpreter, "InterpreterError"):
        return False, "this Triton's interpreter has no InterpretedFunction/GridExecutor"
    try:
        source = inspect.getsource(classes[0].__call__)
    except (OSError, TypeError):
        return False, "the source of InterpretedFunction.__call__ is not readable"
    if "_patch_lang(self.fn)" not in source or "self.rewrite()" not in source:
        return False, "InterpretedFunction.__call__ is not the re-patching one this module replaces"
    return True, "installed"


def install() -> bool:
    """Replace the helper call once per process; True when in effect. Idempotent and cheap after the first call."""
    if _state["installed"] is not None:
        return _state["installed"]
    ok, why = _applies()
    _state.update(installed=ok, why=why)
    if not ok:
        return False
    from triton.runtime import interpreter

    grid_call, fn_call = interpreter.GridExecutor.__call__, interpreter.InterpretedFunction.__call__
    launches: list[set[Any]] = _state["launches"]  # the helpers patched in each running launch, innermost last

    @functools.wraps(grid_call)
    def launch(self: Any, *args: Any, **kwargs: Any) -> Any:
        launches.append(set())
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            launches.pop()

    @functools.wraps(fn_call)
    def helper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not launches or self.fn not in launches[-1]:
            if launches:
                launches[-1].add(self.fn)
            return fn_call(self, *args, **kwargs)
        try:
            return self.rewrite()(*args, **kwargs)
        except Exception as exc:
            raise interpreter.InterpreterError(repr(exc)) from exc

    interpreter.GridExecutor.__call__ = launch
    interpreter.InterpretedFunction.__call__ = helper
    return True


def status() -> str:
    """``installed``, or why not (for ``doctor`` and the tests)."""
    return _state["why"]
