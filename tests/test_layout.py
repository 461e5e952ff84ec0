"""Every arrow points down: kernelwatch.kernels -> .collect -> .store -> .dashboard / .gate, the command line
(kernelwatch.cli, .commands) on top."""

from __future__ import annotations

import subprocess
import sys

from tests.import_graph import PACKAGES, ROOT, cycles, module_edges, package_edges, package_of

ALLOWED = {  # package -> project packages it may import
    "kernelwatch.kernels": set(),
    "kernelwatch.store": set(),
    "kernelwatch.collect": {"kernelwatch.kernels", "kernelwatch.store"},
    "kernelwatch.gate": {"kernelwatch.store"},
    "kernelwatch.dashboard": {"kernelwatch.store", "kernelwatch.gate"},
    "kernelwatch": set(PACKAGES) - {"kernelwatch"},
}
# Facts every layer shares (implementation names and labels, the vendor map, ceilings; the project file and the
# kernel registry's module list): torch-free modules that import nothing of the project, which any package may import.
SHARED = {"kernelwatch.kernels.names", "kernelwatch.project"}


def test_packages_import_only_downwards() -> None:
    edges = package_edges(ignore=SHARED)
    for package, targets in edges.items():
        assert targets <= ALLOWED[package], f"{package} imports {sorted(targets - ALLOWED[package])}"
    assert cycles(edges) == []


def test_no_module_cycles_inside_any_package() -> None:
    edges = module_edges()
    for package in PACKAGES:
        inner = {s: {d for d in ds if package_of(d) == package} for s, ds in edges.items() if package_of(s) == package}
        assert cycles(inner) == [], f"import cycle inside {package}"


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_dashboard_and_the_database_never_import_torch() -> None:
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for package in ("dashboard", "store", "gate"):
        for path in (root / "kernelwatch" / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                )
                assert not any(n == "torch" or n.startswith("torch.") for n in names), f"{path} imports torch"


def test_the_shared_names_module_imports_nothing() -> None:
    """kernelwatch.kernels.names is what db, ci and the dashboard may import from kernels: no project module, no
    torch (the standard library's dataclasses and typing for CaseFacts)."""
    import ast

    assert module_edges().get("kernelwatch.kernels.names", set()) == set()
    tree = ast.parse((ROOT / "kernelwatch" / "kernels" / "names.py").read_text())
    imported = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [getattr(n, "module", None) for n in imported] == ["__future__", "dataclasses", "typing"]


def test_the_database_gate_and_dashboard_load_without_torch() -> None:
    """Importing them (and with them kernelwatch.kernels.names, through kernelwatch/kernels/__init__.py) must not load
    torch."""
    code = (
        "import sys, kernelwatch.store.queries, kernelwatch.store.synthetic, kernelwatch.gate.judge\n"
        "import kernelwatch.dashboard.data, kernelwatch.dashboard.charts\n"
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout


def test_the_namespace_package_imports_nothing() -> None:
    """kernelwatch/__init__.py runs on every import of a layer: it must not pull the command line (or anything)
    under the library packages."""
    import ast

    tree = ast.parse((ROOT / "kernelwatch" / "__init__.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_the_public_kernel_api_is_at_package_level_with_its_docstrings() -> None:
    """Every name a kernel's spec lists in ``public`` is ``kernels.<name>``, documented."""
    from kernelwatch import kernels

    specs = kernels.discover()
    names = [name for spec in specs.values() for name in spec.public]
    assert {"mse_loss", "scaled_masked_softmax", "fused_rmsnorm_matmul", "FusedRMSLinear"} <= set(names)
    assert all(spec.public for spec in specs.values())
    for name in names:
        obj = getattr(kernels, name)
        assert callable(obj) and name in kernels.__all__ and obj.__doc__ and len(obj.__doc__.strip()) > 20, name
