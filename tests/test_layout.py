"""Every arrow points down: kernels -> collector -> db -> dashboard / ci, the command line on top."""

from __future__ import annotations

from tests.import_graph import PACKAGES, cycles, module_edges, package_edges, package_of

ALLOWED = {  # package -> project packages it may import
    "kernels": set(),
    "db": set(),
    "collector": {"kernels", "db"},
    "ci": {"db"},
    "dashboard": {"db", "ci"},
    "kernelwatch": set(PACKAGES) - {"kernelwatch"},
}


def test_packages_import_only_downwards() -> None:
    edges = package_edges()
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
    for package in ("dashboard", "db", "ci"):
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                assert not any(n == "torch" or n.startswith("torch.") for n in names), f"{path} imports torch"


def test_the_public_kernel_api_is_at_package_level_with_its_docstrings() -> None:
    import kernels

    for name in ("mse_loss", "scaled_masked_softmax", "scaled_upper_triang_masked_softmax", "fused_rmsnorm_matmul",
                 "FusedRMSLinear"):
        obj = getattr(kernels, name)
        assert name in kernels.__all__ and obj.__doc__ and len(obj.__doc__.strip()) > 20, name
