"""The tree explains itself: the README's layout lists every module, and every pointer to a document
points at a file in this repository (docs/...), never at one outside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Folders with code or data, as the layout names them (the layers are folders of kernelwatch/).
PACKAGES = (
    "kernelwatch",
    "kernelwatch/kernels",
    "kernelwatch/collect",
    "kernelwatch/store",
    "kernelwatch/dashboard",
    "kernelwatch/gate",
    "ci",
)
# Pointers at documents that live outside this repository (the sessions' shared folder, the issue tracker).
OUTSIDE = re.compile(
    r"DESIGN\.md|KERNELS\.md|STYLE\.md|ascend_facts\.md|\.\./shared|\b[Ii]ssues? \d+\b|"
    r"^(?!.*docs/).*design doc"
)  # "the design document" only beside the docs/ file that holds it


def _layout() -> dict[str, str]:
    """The README's Layout block: folder -> the text listing its contents (continuation lines joined)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Layout", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    sections: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        head = re.match(r"^([\w./-]+)/\s+(.*)$", line)
        if head:
            current = head.group(1)
            sections[current] = head.group(2)
        elif current and line.strip():
            sections[current] += " " + line.strip()
    return sections


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", *patterns], capture_output=True, text=True).stdout
    return [ROOT / p for p in out.split()] if out else [p for pat in patterns for p in ROOT.glob(f"**/{pat}")]


def _is_kernel(path: Path) -> bool:
    """A module that defines SPEC, or a package one of whose modules does."""
    if path.is_dir():
        return any(_is_kernel(module) for module in path.glob("*.py"))
    return path.suffix == ".py" and re.search(r"^SPEC = KernelSpec\(", path.read_text(), re.M) is not None


def test_the_readme_layout_names_every_module_and_folder_of_every_package() -> None:
    layout = _layout()
    assert set(PACKAGES) <= set(layout), f"packages missing from the layout: {set(PACKAGES) - set(layout)}"
    for package in PACKAGES:
        listed = set(re.findall(r"[\w.-]+\.(?:py|sh|md)|[\w-]+/", layout[package]))
        folder = ROOT / package
        present = {
            p.name
            for p in folder.iterdir()
            if p.is_file() and p.suffix in (".py", ".sh", ".md") and p.name not in ("__init__.py", "__main__.py")
        }
        present |= {f"{p.name}/" for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
        if package == "kernelwatch/kernels":  # a kernel module or package (one defining SPEC) is found by discovery:
            present = {n for n in present if not _is_kernel(folder / n.rstrip("/"))}  # adding one touches no other file
        missing = present - listed
        assert not missing, f"README layout of {package}/ lacks {sorted(missing)}"
        gone = {n for n in listed if n.endswith(".py") and not (folder / n).exists()}
        assert not gone, f"README layout of {package}/ lists {sorted(gone)}, which {package}/ does not have"


def test_the_layout_check_catches_a_module_left_out(monkeypatch, tmp_path: Path) -> None:
    """Break the README on purpose: a layout without ``plan.py`` must fail the check above."""
    import pytest

    readme = (ROOT / "README.md").read_text()
    broken = tmp_path / "repo"
    broken.mkdir()
    (broken / "README.md").write_text(re.sub(r"plan\.py \([^)]*\),\s*", "", readme, count=1))
    for top in {package.split("/")[0] for package in PACKAGES}:
        (broken / top).symlink_to(ROOT / top)
    monkeypatch.setattr(__import__(__name__), "ROOT", broken)
    with pytest.raises(AssertionError, match="plan.py"):
        test_the_readme_layout_names_every_module_and_folder_of_every_package()


def test_no_pointer_at_a_document_outside_the_repository() -> None:
    hits = []
    for path in _tracked("*.py", "*.md", "*.sh", "*.yml", "Makefile", "*.toml"):
        if path == Path(__file__) or "fixtures" in path.parts or "results" in path.parts or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            match = OUTSIDE.search(line)
            if match and not (path.parts[-2] == "docs" and "design doc" in match.group(0)):  # docs/ is where they live
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not hits, "point these at docs/... instead:\n" + "\n".join(hits)


def test_every_docs_pointer_names_a_file_that_exists() -> None:
    named = set()
    for path in _tracked("*.py", "*.md", "*.sh"):
        if path.is_file():
            named |= set(re.findall(r"docs/[\w.-]+\.md", path.read_text(errors="replace")))
    assert named, "nothing points at docs/"
    assert {n for n in named if not (ROOT / n).is_file()} == set()
    for doc in (ROOT / "docs").glob("*.md"):  # links between the documents
        for target in re.findall(r"\]\(([\w.-]+\.md)", doc.read_text()):
            assert (ROOT / "docs" / target).is_file(), f"{doc.name} links to {target}"


# ---------------------------------------------------------------------------------------------
# The figures the README quotes, each read from what it describes
# ---------------------------------------------------------------------------------------------
README = (ROOT / "README.md").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()


def test_the_readme_quotes_no_figure_that_goes_stale_unchecked() -> None:
    """It said 1,184 tests (there were 1,428), ~60 s for the CPU run (175 s measured), gate.html about 115 KB
    (148.7 KB): figures of a machine's mood or of a tree that grows. What stays is checked below."""
    flat = " ".join(README.split())
    assert not re.search(r"\b\d[\d,]* tests\b", flat), "a test count"
    assert not re.search(r"\b\d+(\.\d+)? ?KB for\b|about \d+ KB", flat), "a report's size"
    assert not re.search(r"CPU run takes ~?\d", flat), "the CPU run's time"
    assert not re.search(r"\d+(\.\d+)? MB for \d", flat), "the history's size"


def test_the_demo_cpu_run_counts_are_the_specs_counts() -> None:
    """`the 134 fp32 cases` / `The full 385-case CPU run` / `new: 134`: what `--match /fp32/` and no filter select."""
    from kernelwatch.collect.selection import Options, select_items

    flat = " ".join(README.split())
    (demo_match,) = re.findall(r"^DEMO_CPU \?= --match (\S+)$", MAKEFILE, re.M)
    reduced = len(select_items(Options(suites=("accuracy",), match=demo_match))[0])
    full = len(select_items(Options(suites=("accuracy",)))[0])
    quoted = re.search(r"the (\d+) fp32 cases .* The full (\d+)-case CPU run", flat)
    assert quoted and (int(quoted[1]), int(quoted[2])) == (reduced, full), (quoted and quoted.groups(), reduced, full)
    assert f"`new: {reduced}`" in flat
    assert f"the {reduced} fp32 cases" in MAKEFILE and f"the full {full}-case run" in MAKEFILE


def test_the_fingerprint_note_names_what_the_hash_covers() -> None:
    """Pages and reports said the fingerprint hashes the "software stack" and the device count; it hashes
    IDENTITY alone: a driver or a version change leaves it, each IDENTITY field moves it."""
    from kernelwatch.gate.reports import FINGERPRINT_NOTE
    from kernelwatch.store.artifact import load_artifact
    from kernelwatch.store.schema import IDENTITY, hardware_fingerprint

    hw = load_artifact(sorted((ROOT / "ci" / "history").glob("*.json.gz"))[0]).hardware.model_dump()
    base = hardware_fingerprint(hw)
    context = [k for k in hw if k not in IDENTITY]
    assert context and all(hardware_fingerprint({**hw, k: "changed"}) == base for k in context)
    assert all(hardware_fingerprint({**hw, k: "changed"}) != base for k in IDENTITY)
    assert "software" not in FINGERPRINT_NOTE and "count" not in FINGERPRINT_NOTE
    for word in ("vendor", "device model", "compute units", "memory size"):
        assert word in FINGERPRINT_NOTE


def test_gate_help_says_a_branch_baseline_is_assembled_per_case() -> None:
    """`gate --help` described a branch's baseline as one run (the one sharing the most cases)."""
    from click.testing import CliRunner

    from kernelwatch.cli import main

    text = " ".join(CliRunner().invoke(main, ["gate", "--help"], terminal_width=200).output.split())
    assert "assembled per case" in text and "the one sharing the most" not in text
