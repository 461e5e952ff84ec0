"""Which kernels a change can move: ``kernelwatch collect --changed-since REF``.

The repository is the project's (:mod:`kernelwatch.project`: ``repository`` in its project file; KernelWatch's own
checkout without one), so a team's kernel edited in the team's repository is a change. A kernel's *sources* are
its spec's module and every module of the repository it imports, transitively:
every ``import`` and ``from ... import`` in the file, those inside functions included, resolved against the
repository's own files (a package's ``__init__.py`` counts for each of its modules). Some files decide how
every kernel is measured: the device worker's own sources (``kernelwatch.collect.worker``: the backends, the accuracy
and perf suites, the metadata) and :data:`EVERY_KERNEL` (dependency versions). The changed files are
``git diff --name-only REF`` (the working tree against REF: commits, staged and unstaged edits) and the
untracked files git does not ignore.

A kernel runs when one of its sources changed, every kernel runs when the measurement changed, and each
other kernel is *skipped*: nothing it imports changed, so its results would be those of the baseline. The run
names them (:func:`kernelwatch.store.schema.skipped_note`) and the gate carries them over from the baseline instead of
calling them missing (``kernelwatch.gate.judge.carry_over``). The analysis is static and errs towards running: an import
done by name at run time (``importlib``) is not followed, so a kernel module that loads another that way must
also import it plainly to be re-run when it changes.
"""

from __future__ import annotations

import ast
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

MEASUREMENT = ("kernelwatch.collect.worker",)  # its sources decide how every kernel is measured
EVERY_KERNEL = ("pyproject.toml",)  # dependency versions: every kernel's numbers may move
# What a ref may look like: a branch, tag, sha, HEAD~2, origin/main, main@{1}; never an option.
_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./@{}~^+-]*")
GIT_TIMEOUT_S = 60


class ChangeError(ValueError):
    """REF is not a commit of this repository, or git cannot answer (one line: a usage error)."""


@dataclass
class Changes:
    """``run``: kernel -> the changed files that make it run; ``skipped``: kernels none of whose sources changed."""

    ref: str
    commit: str
    files: list[str]
    run: dict[str, list[str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def notes(self) -> list[str]:
        """The run's notes: why each kernel that runs does, and which were skipped (the gate reads that one)."""
        from kernelwatch.store.schema import skipped_note

        out = []
        if self.run:
            why = ", ".join(
                f"{k} ({', '.join(files[:3])}{', ...' if len(files) > 3 else ''})"
                for k, files in sorted(self.run.items())
            )
            out.append(f"kernels run, changed since {self.ref} ({self.commit[:12]}): {why}".replace(";", ","))
        if self.skipped:
            out.append(skipped_note(f"{self.ref} ({self.commit[:12]})", self.skipped))
        return out


def _git(args: list[str], root: Path) -> str:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ChangeError(f"--changed-since: git could not run in {root}: {exc}") from None
    if proc.returncode != 0:
        raise ChangeError(
            f"--changed-since: git {args[0]} failed in {root}: "
            f"{(proc.stderr.strip().splitlines() or ['no message'])[-1]}"
        )
    return proc.stdout


def _repository() -> Path:
    from kernelwatch.project import active_project

    return active_project().repository


def resolve_ref(ref: str, root: Path | None = None) -> str:
    """The commit ``ref`` names in ``root`` (the project's repository), or :class:`ChangeError` naming what is
    wrong with it."""
    root = root or _repository()
    if not ref or not _REF.fullmatch(ref) or ".." in ref:
        raise ChangeError(
            f"--changed-since {ref!r}: not a git revision (a branch, tag or commit: letters, digits "
            "and ./_-~^@{}+, not starting with '-', no '..')"
        )
    try:
        return _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], root).strip()
    except ChangeError:
        raise ChangeError(f"--changed-since {ref!r}: no such commit in {root}") from None


def changed_files(commit: str, root: Path | None = None) -> list[str]:
    """Paths (relative to ``root``) that differ between ``commit`` and the working tree, and untracked ones."""
    root = root or _repository()
    diff = _git(["diff", "--name-only", "--no-renames", "--end-of-options", commit, "--"], root).splitlines()
    new = _git(["ls-files", "--others", "--exclude-standard", "--"], root).splitlines()
    return sorted(set(diff) | set(new))


def _module_file(module: str, root: Path) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, module: str) -> set[str]:
    """Every module name ``path`` (module ``module``) imports, and for ``from a import b`` also ``a.b``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join([*parts, node.module] if node.module else parts)
            else:
                base = node.module or ""
            if base:
                out.add(base)
                out.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return out


def sources(modules: list[str], root: Path | None = None, python_path: Path | None = None) -> set[str]:
    """Repository files (paths relative to ``root``) of ``modules`` and of everything they import, transitively;
    modules are found under ``python_path`` (default ``root``)."""
    root = root or _repository()
    python_path = python_path or root
    seen: set[str] = set()
    files: set[str] = set()
    todo = list(modules)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        for i in range(1, len(parts)):  # importing a.b.c runs a/__init__.py and a/b/__init__.py
            todo.append(".".join(parts[:i]))
        path = _module_file(module, python_path)
        if path is None or not path.is_relative_to(root):
            continue
        files.add(path.relative_to(root).as_posix())
        todo.extend(_imports(path, module))
    return files


def kernel_modules(extra_modules: tuple[str, ...] = ()) -> dict[str, str]:
    """Spec name -> the module that defines its ``SPEC`` (the registry: :func:`kernelwatch.kernels.spec_modules`)."""
    from kernelwatch.kernels import spec_modules

    return spec_modules(extra_modules)


def changed_kernels(
    ref: str, kernels: dict[str, str], root: Path | None = None, python_path: Path | None = None
) -> Changes:
    """Which of ``kernels`` (name -> module) run and which are skipped for the changes since ``ref`` in ``root``
    (the project's repository; its modules under ``python_path``, default the project's)."""
    if root is None:
        from kernelwatch.project import active_project

        project = active_project()
        root, python_path = project.repository, python_path or project.python_path
    commit = resolve_ref(ref, root)
    files = changed_files(commit, root)
    changes = Changes(ref, commit, files)
    changed = set(files)
    everyone = sorted(changed & (sources(list(MEASUREMENT), root, python_path) | set(EVERY_KERNEL)))
    for name, module in sorted(kernels.items()):
        mine = sorted(changed & sources([module], root, python_path))
        if mine or everyone:
            changes.run[name] = sorted(set(mine) | set(everyone))
        else:
            changes.skipped.append(name)
    return changes
