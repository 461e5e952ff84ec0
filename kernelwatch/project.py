"""The project KernelWatch watches: which kernels, which git repository, which baseline branch, which thresholds.

asv reads a project's benchmarks from the project's own repository; KernelWatch does the same for kernels. A
kernel is a module with a ``SPEC`` (:class:`kernelwatch.kernels.spec.KernelSpec`). The registry
(:func:`kernel_modules`, read by :func:`kernelwatch.kernels.discover`) lists them from three places:

* entry points of the group ``kernelwatch.kernels`` (``[project.entry-points."kernelwatch.kernels"]``:
  ``NAME = "package.module"``) of every installed distribution. KernelWatch declares its own kernels so too; read
  from a source checkout (``kernelwatch/`` beside a ``pyproject.toml`` named ``kernelwatch``) that file's table
  is read instead of the installed metadata, so a kernel added there counts before any reinstall;
* the project file: ``kernelwatch.toml`` (keys at its top level or under ``[tool.kernelwatch]``) or a
  ``pyproject.toml`` with a ``[tool.kernelwatch]`` table, found by ``--project PATH`` (a file or its folder),
  else ``KERNELWATCH_PROJECT``, else the nearest one from the working directory upwards. A pyproject's own
  ``kernelwatch.kernels`` entry points count as if installed. Keys::

      kernels = ["team_kernels.rownorm"]   # modules, imported with `python-path` first on sys.path
      repository = "."                     # the git repository (relative to the file): --changed-since, confirm,
                                           # the run's commit; default: the file's folder
      python-path = "."                    # where the modules are imported from; default: the repository
      baseline = "main"                    # the gate's and confirm's --baseline when not given
      min-effect = 0.05                    # the gate's --min-effect when not given
      case-min-effect = {rownorm = 0.1}    # the gate's --case-min-effect, per kernel or case

Without a project file the project is KernelWatch's own checkout (today's behaviour) with no extra kernels.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

GROUP = "kernelwatch.kernels"
ENV = "KERNELWATCH_PROJECT"
FILES = ("kernelwatch.toml", "pyproject.toml")
KEYS = ("kernels", "repository", "python-path", "baseline", "min-effect", "case-min-effect")
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the folder holding kernelwatch/: a checkout or site-packages


class ProjectError(ValueError):
    """A project file that cannot be used; the message names the file and what is wrong (one line)."""


@dataclass(frozen=True)
class Project:
    """``file``: the project file (None: KernelWatch's own checkout); ``kernels``: its modules beside the entry
    points; ``repository``: the git repository that --changed-since, confirm and the run's commit read."""

    file: Path | None
    repository: Path
    python_path: Path
    kernels: tuple[str, ...] = ()
    baseline: str | None = None
    min_effect: float | None = None
    case_min_effect: dict[str, float] = field(default_factory=dict)
    distribution: str | None = None  # the pyproject's [project] name: its installed entry points are read here

    def activate(self) -> Callable[[], None]:
        """Make the project's modules importable here and in every child process (workers), and name the project
        to them (``KERNELWATCH_PROJECT``). Returns the function that undoes it."""
        global _active
        saved = (list(sys.path), {k: os.environ.get(k) for k in ("PYTHONPATH", ENV)}, _active)

        def restore() -> None:
            global _active
            sys.path[:], _active = saved[0], saved[2]
            for key, value in saved[1].items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

        path = str(self.python_path)
        if path not in sys.path:
            sys.path.insert(0, path)
        parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if path not in parts:
            os.environ["PYTHONPATH"] = os.pathsep.join([path, *parts])
        if self.file is not None:
            os.environ[ENV] = str(self.file)
        _active = self
        return restore


_active: Project | None = None


def _read(path: Path) -> dict[str, Any] | None:
    """The [tool.kernelwatch] table of ``path`` (a kernelwatch.toml's top level too), None when it has none."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ProjectError(f"project file {path}: cannot be read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProjectError(f"project file {path}: not valid TOML: {exc}") from None
    table = data.get("tool", {}).get("kernelwatch")
    if table is None and path.name != "pyproject.toml":
        table = {k: v for k, v in data.items() if k != "tool"}
    return table


def _find(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        for name in FILES:
            candidate = folder / name
            if candidate.is_file() and _read(candidate) is not None:
                return candidate
    return None


def _default() -> Project:
    return Project(file=None, repository=PACKAGE_ROOT, python_path=PACKAGE_ROOT)


def load_project(path: str | os.PathLike[str] | None = None) -> Project:
    """The project named by ``path`` (a project file or a folder holding one), else by ``KERNELWATCH_PROJECT``,
    else the nearest project file from the working directory upwards, else KernelWatch's own checkout."""
    given = path if path is not None else os.environ.get(ENV) or None
    if given is not None:
        where = Path(given).expanduser()
        if where.is_dir():
            found = next((where / n for n in FILES if (where / n).is_file() and _read(where / n) is not None), None)
            if found is None:
                raise ProjectError(f"project {where}: no kernelwatch.toml or pyproject.toml with [tool.kernelwatch]")
            where = found
        elif not where.is_file():
            raise ProjectError(f"project file {where}: no such file or folder")
    else:
        where = _find(Path.cwd())
        if where is None:
            return _default()
    return _parse(where.resolve())


def _parse(path: Path) -> Project:
    table = _read(path)
    if table is None:
        raise ProjectError(f"project file {path}: no [tool.kernelwatch] table")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ProjectError(f"project file {path}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")

    def text(key: str) -> str | None:
        value = table.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ProjectError(f"project file {path}: {key} must be a non-empty string, got {value!r}")
        return value

    def fraction(name: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 10:
            raise ProjectError(f"project file {path}: {name} must be a number in (0, 10), got {value!r}")
        return float(value)

    kernels = table.get("kernels", [])
    if not isinstance(kernels, list) or not all(isinstance(k, str) and k.strip() for k in kernels):
        raise ProjectError(f"project file {path}: kernels must be a list of module names, got {kernels!r}")
    repository = (path.parent / (text("repository") or ".")).resolve()
    if not repository.is_dir():
        raise ProjectError(f"project file {path}: repository {repository} is no folder")
    python_path = (path.parent / text("python-path")).resolve() if text("python-path") else repository
    efforts = table.get("case-min-effect", {})
    if not isinstance(efforts, dict):
        raise ProjectError(f"project file {path}: case-min-effect must be a table of NAME = FRACTION")
    distribution = None
    if path.name == "pyproject.toml":
        data = tomllib.loads(path.read_text())
        distribution = data.get("project", {}).get("name")
        declared = data.get("project", {}).get("entry-points", {}).get(GROUP, {})
        kernels = [*kernels, *(_module(v) for v in declared.values())]
    return Project(
        file=path,
        repository=repository,
        python_path=python_path,
        kernels=tuple(dict.fromkeys(kernels)),
        baseline=text("baseline"),
        min_effect=fraction("min-effect", table["min-effect"]) if "min-effect" in table else None,
        case_min_effect={str(k): fraction(f"case-min-effect {k}", v) for k, v in efforts.items()},
        distribution=distribution,
    )


def _module(value: str) -> str:
    """An entry point's module: ``package.module`` or ``package.module:SPEC``."""
    return value.partition(":")[0].strip()


def _own_checkout() -> dict[str, str] | None:
    """KernelWatch's own entry points from the pyproject.toml beside the imported package (a source checkout),
    None when the package was installed from a wheel."""
    pyproject = PACKAGE_ROOT / "pyproject.toml"
    if not pyproject.is_file():
        return None
    data = tomllib.loads(pyproject.read_text()).get("project", {})
    if data.get("name") != "kernelwatch":
        return None
    return dict(data.get("entry-points", {}).get(GROUP, {}))


def active_project() -> Project:
    """The project this process works for: the one :meth:`Project.activate` named, else :func:`load_project`."""
    return _active if _active is not None else load_project()


def kernel_modules(project: Project | None = None) -> tuple[str, ...]:
    """Every kernel module of the registry, KernelWatch's own first: entry points, then the project's kernels."""
    project = project or active_project()
    own = _own_checkout()
    skip = {"kernelwatch"} if own is not None else set()
    if project.distribution:
        skip.add(project.distribution)
    modules = [_module(v) for v in (own or {}).values()]
    for ep in sorted(metadata.entry_points(group=GROUP), key=lambda e: e.name):
        dist = ep.dist.name if ep.dist is not None else None
        if dist not in skip:
            modules.append(_module(ep.value))
    return tuple(dict.fromkeys([*modules, *project.kernels]))
