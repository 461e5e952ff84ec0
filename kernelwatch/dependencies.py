"""A KernelWatch command run by a Python that lacks one of its packages (the system's `python3 -m kernelwatch`
from a checkout, a venv without the `postgres` extra): one line naming the package and the install command,
never an import traceback. Imports only the standard library: it runs when nothing else could be imported."""

from __future__ import annotations

import sys
from typing import NoReturn

PROJECT_PACKAGES = ("kernelwatch", "tests", "benchmarks")

# Module name -> (what pip calls it, the install that brings it: pyproject.toml's dependencies or an extra).
PACKAGES = {
    "psycopg": ("psycopg[binary]", "pip install -e '.[postgres]'"),
    "triton": ("triton", "pip install -e '.[triton]' (NVIDIA and CPU) or '.[npu]' (Ascend)"),
    "torch_npu": ("torch-npu", "pip install -e '.[npu]'"),
    "yaml": ("pyyaml", "pip install -e '.[test]'"),
    "pytest": ("pytest", "pip install -e '.[test]'"),
    "playwright": ("playwright", "pip install -e '.[test]'"),
    "otava": ("apache-otava", "pip install -e '.[eval]'"),
}
INSTALL = "`make install` (or `pip install -e .` in a virtual environment)"


def missing_package(exc: ModuleNotFoundError) -> str | None:
    """The top-level module ``exc`` says is missing, or None when it is one of KernelWatch's own (a bug, not an
    environment without a dependency: its traceback is the answer)."""
    top = (exc.name or "").split(".")[0]
    return None if not top or top in PROJECT_PACKAGES else top


def missing_message(module: str) -> str:
    pip_name, install = PACKAGES.get(module, (module, None))
    if install:
        return f"the Python package {pip_name!r} is missing from {sys.executable}: install it with `{install}`"
    return (
        f"the Python package {pip_name!r} is missing from {sys.executable}: install KernelWatch with "
        f"{INSTALL}, then run .venv/bin/kernelwatch"
    )


def exit_missing(exc: ModuleNotFoundError, command: str = "kernelwatch") -> NoReturn:
    """Print the one line for ``exc`` on stderr and exit with status 2; re-raise a missing module of our own."""
    module = missing_package(exc)
    if module is None:
        raise exc
    sys.stderr.write(f"{command}: error: {missing_message(module)}\n")
    sys.stderr.flush()
    raise SystemExit(2)


def command_named(argv: list[str], commands: dict[str, object] | tuple[str, ...]) -> str:
    """``kernelwatch CMD`` for the first argument that names a command (``kernelwatch`` if none does)."""
    for arg in argv:
        if arg in commands:
            return f"kernelwatch {arg}"
    return "kernelwatch"
