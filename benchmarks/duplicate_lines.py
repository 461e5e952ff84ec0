"""Code duplicated between files: every window of WINDOW consecutive code lines that occurs in two files.

    python benchmarks/duplicate_lines.py [DIR ...] [--window 6] [--top 15]     # default: kernelwatch/kernels

Lines are compared stripped of indentation, with blank lines, comments, docstrings and import statements left
out (as pylint's duplicate-code check does by default; pylint is not a dependency here). For each pair of files
the count is the lines of the first file inside a window the second shares; pairs are listed largest first,
then the largest files by line count.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import itertools
import tokenize
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, normalized text) of every code line of ``path``."""
    source = path.read_text()
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            skip.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                skip.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    text: dict[int, list[str]] = defaultdict(list)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            continue
        if tok.type == tokenize.ENDMARKER:
            break
        text[tok.start[0]].append(tok.string)
    return [(n, " ".join(parts)) for n, parts in sorted(text.items()) if n not in skip]


def windows(lines: list[tuple[int, str]], size: int) -> dict[str, list[int]]:
    """hash of each window -> the line numbers it covers."""
    out: dict[str, list[int]] = {}
    for i in range(len(lines) - size + 1):
        chunk = lines[i : i + size]
        key = hashlib.sha1("\n".join(t for _, t in chunk).encode()).hexdigest()
        out.setdefault(key, [n for n, _ in chunk])
    return out


def duplicate_pairs(files: list[Path], size: int) -> list[tuple[int, str, str]]:
    """(lines of the first file shared with the second, first, second), largest first."""
    per_file = {f: windows(code_lines(f), size) for f in files}
    pairs = []
    for a, b in itertools.combinations(files, 2):
        shared = per_file[a].keys() & per_file[b].keys()
        if shared:
            lines_a = {n for key in shared for n in per_file[a][key]}
            lines_b = {n for key in shared for n in per_file[b][key]}
            pairs.append((max(len(lines_a), len(lines_b)), str(a.relative_to(ROOT)), str(b.relative_to(ROOT))))
    return sorted(pairs, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dirs", nargs="*", default=["kernelwatch/kernels"])
    parser.add_argument("--window", type=int, default=6)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    files = sorted(p for d in args.dirs for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts)
    pairs = duplicate_pairs(files, args.window)
    print(f"| duplicated code lines (windows of {args.window}) | file | file |\n| --- | --- | --- |")
    for count, a, b in pairs:
        print(f"| {count} | `{a}` | `{b}` |")
    sizes = sorted(((len(p.read_text().splitlines()), p) for p in files), reverse=True)[: args.top]
    print(f"\n| lines | file (the {args.top} largest) |\n| --- | --- |")
    for n, p in sizes:
        print(f"| {n} | `{p.relative_to(ROOT)}` |")


if __name__ == "__main__":
    main()
