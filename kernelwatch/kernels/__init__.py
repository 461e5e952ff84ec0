"""KernelWatch's Triton kernels, each with its PyTorch reference and its spec.

``from kernelwatch import kernels`` works without an accelerator: launches happen on whatever device the
tensors live on (CUDA, Ascend NPU, or the CPU through ``TRITON_INTERPRET=1``). It imports no
torch either: the public names below load their module on first use, so ``kernelwatch.kernels.names`` (what the
database, gate and dashboard share with the kernels) is torch-free.

A kernel is a module or a package with a ``SPEC`` (:class:`~kernelwatch.kernels.spec.KernelSpec`): :func:`discover`
finds it, and the names its spec lists in ``public`` (``mse_loss``, ``FusedRMSLinear``, ...) are this package's:
adding a kernel edits nothing here. This project's kernels are packages (``kernel.py``, ``plans.py``, ``api.py``,
``spec.py``) whose ``__init__`` exports ``SPEC`` and those names; modules here without a ``SPEC`` (``norm_gemm``,
``plan``, ...) are what they share.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import types
from typing import Any

_SPEC_NAMES = ("Case", "KernelSpec", "Target", "Tolerance")  # from kernelwatch.kernels.spec


def _kernel_modules() -> list[str]:
    return [f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]


def _public() -> dict[str, Any]:
    """Every kernel module's public names (its spec's ``public``), then the spec types and :func:`discover`."""
    out: dict[str, Any] = {}
    for name in _kernel_modules():
        module = importlib.import_module(name)
        for public in _exports(module):
            out[public] = getattr(module, public)
    spec = importlib.import_module(f"{__name__}.spec")
    out.update({name: getattr(spec, name) for name in _SPEC_NAMES})
    return out


def _exports(module: types.ModuleType) -> tuple[str, ...]:
    spec = getattr(module, "SPEC", None)
    return tuple(getattr(spec, "public", ()))


class _Package(types.ModuleType):
    """Importing ``kernelwatch.kernels.mse_loss`` binds the subpackage on the package under the name of its public
    function; the function keeps the name (``kernelwatch.kernels.mse_loss(x, y)``), as an eager import would leave it.
    Its modules are reached through ``from kernelwatch.kernels.mse_loss.plans import ...`` or
    ``importlib.import_module``."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and name in _exports(value):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name.startswith("__") and name != "__all__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    public = _public()
    globals().update(public)
    if name == "__all__":
        globals()["__all__"] = [*public, "discover"]
        return globals()["__all__"]
    if name not in globals():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return globals()[name]


def discover(extra_modules: tuple[str, ...] = ()) -> dict[str, Any]:
    """The kernel registry: every ``SPEC`` of the modules :func:`kernelwatch.project.kernel_modules` lists (the
    ``kernelwatch.kernels`` entry points, this package's own among them, and the active project's kernels), plus
    those of ``extra_modules``: spec name -> :class:`~kernelwatch.kernels.spec.KernelSpec`. Every command reads
    kernels through here."""
    from kernelwatch.kernels.spec import KernelSpec
    from kernelwatch.project import ProjectError, active_project, kernel_modules

    project = active_project()
    if str(project.python_path) not in sys.path:
        sys.path.insert(0, str(project.python_path))
    specs: dict[str, KernelSpec] = {}
    for name in dict.fromkeys([*kernel_modules(project), *extra_modules]):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not name.startswith(exc.name):
                raise
            raise ProjectError(f"kernel module {name!r} cannot be imported (from {project.python_path})") from None
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, KernelSpec):
            raise ProjectError(f"kernel module {name!r} has no SPEC (a kernelwatch.kernels.spec.KernelSpec)")
        if spec.name in specs:
            raise ValueError(f"two kernel specs are named {spec.name!r} ({name})")
        specs[spec.name] = spec
    return specs


def spec_modules(extra_modules: tuple[str, ...] = ()) -> dict[str, str]:
    """Spec name -> the module that defines its ``SPEC``, over :func:`discover`'s modules."""
    from kernelwatch.project import kernel_modules

    specs = discover(extra_modules)
    by_spec = {
        id(getattr(sys.modules.get(n), "SPEC", None)): n for n in dict.fromkeys([*kernel_modules(), *extra_modules])
    }
    return {name: by_spec[id(spec)] for name, spec in specs.items() if id(spec) in by_spec}
