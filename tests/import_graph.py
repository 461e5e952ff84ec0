"""The project's import graph, read from the source (every ``import``, also inside functions).

python -m tests.import_graph     # the edges between packages, and inside each package
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "kernelwatch.kernels",
    "kernelwatch.collect",
    "kernelwatch.store",
    "kernelwatch.gate",
    "kernelwatch.dashboard",
    "kernelwatch",
)


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES[-1:]:  # the command line's package holds every other one
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def module_edges() -> dict[str, set[str]]:
    """module -> project modules it imports."""
    known = modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for target in targets:
                hit = _resolve(target, known)
                if hit and hit != name and hit != PACKAGES[-1]:  # the namespace, not the command line
                    edges[name].add(hit)
    return edges


def package_of(module: str) -> str:
    """The innermost of PACKAGES that holds ``module`` (the command line's ``kernelwatch`` last)."""
    return next(p for p in PACKAGES if module == p or module.startswith(p + "."))


def package_edges(ignore: set[str] = frozenset()) -> dict[str, set[str]]:
    """package -> other packages it imports; edges to the modules of ``ignore`` are left out."""
    out: dict[str, set[str]] = defaultdict(set)
    for src, targets in module_edges().items():
        for dst in targets:
            if package_of(src) != package_of(dst) and dst not in ignore:
                out[package_of(src)].add(package_of(dst))
    return out


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return found


def main() -> None:
    print("between packages:")
    for src, dsts in sorted(package_edges().items()):
        print(f"  {src:<22} -> {', '.join(sorted(dsts))}")
    print("inside packages:")
    for package in PACKAGES:
        inner = {
            s: {d for d in ds if package_of(d) == package}
            for s, ds in module_edges().items()
            if package_of(s) == package
        }
        n = sum(len(v) for v in inner.values())
        print(f"  {package:<22} {n} edges, cycles: {cycles(inner) or 'none'}")


if __name__ == "__main__":
    main()
