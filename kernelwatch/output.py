"""Printing records as a table, JSON or CSV (for `kernelwatch runs` and `show`), and any stored text to a terminal.

Text from artifacts and the database (branch names, commit subjects, error messages) may hold ESC, carriage
returns or backspaces; printed as they are, they would recolour, overwrite or hide what a reviewer reads.
Tables, CSV and every message show them escaped (``\\x1b``); JSON escapes them itself.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from kernelwatch.store.schema import printable


def tolerant_streams() -> None:
    """Let stdout and stderr print any text: a character the terminal's encoding lacks (``PYTHONIOENCODING=
    latin-1`` and a ✅) is replaced, never an error that would change a command's exit status."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):  # a closed stream
                reconfigure(errors="replace")


def say(text: str, err: bool = False) -> None:
    """``click.echo`` that survives a reader who stopped reading (``gate ... | head -1``).

    The rest of the output goes to /dev/null, so the command still finishes its work (the gate writes its
    reports) and exits with its own status, not with the broken pipe's."""
    import click

    try:
        click.echo(text, err=err)
    except BrokenPipeError:
        stream = sys.stderr if err else sys.stdout
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass
        finally:
            os.close(devnull)


def terminal(text: str) -> str:
    """``text`` safe to print: every character that is not printable escaped, line breaks kept."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return printable(",".join(f"{k}={v}" for k, v in value.items()))
    return printable(str(value))


GAP = 2  # spaces between table columns


def table(
    records: Sequence[dict[str, Any]], columns: Sequence[str], width: int | None = None, shrink: Sequence[str] = ()
) -> str:
    """Records as an aligned text table; columns of integers are right-aligned.

    ``width``: lines at most this long, the ``shrink`` columns cut (widest first, never below their heading) and
    their longer cells ending in "…"; the other columns keep their width."""
    rows = [[_cell(r.get(c)) for c in columns] for r in records]
    widths = [max([len(c)] + [len(row[i]) for row in rows]) for i, c in enumerate(columns)]
    if width is not None:
        _fit(widths, [columns.index(c) for c in shrink if c in columns], [len(c) for c in columns], width)
    numeric = [bool(records) and all(r.get(c) is None or type(r.get(c)) is int for r in records) for c in columns]
    fit = lambda v, w: v if len(v) <= w else v[: w - 1] + "…"
    line = lambda cells: (
        (" " * GAP)
        .join(fit(v, w).rjust(w) if right else fit(v, w).ljust(w) for v, w, right in zip(cells, widths, numeric))
        .rstrip()
    )
    return "\n".join([line(columns), line(["-" * w for w in widths]), *map(line, rows)])


def _fit(widths: list[int], shrinkable: list[int], floors: list[int], width: int) -> None:
    """Narrow the shrinkable columns, the widest first, until the line fits ``width`` or all are at their floor."""
    excess = sum(widths) + GAP * (len(widths) - 1) - width
    while excess > 0:
        cut = [i for i in shrinkable if widths[i] > floors[i]]
        if not cut:
            return
        widest = max(cut, key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1


def as_json(records: Sequence[dict[str, Any]]) -> str:
    return json.dumps(list(records), indent=1, default=str, allow_nan=False)


def as_csv(records: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow({c: _csv_cell(r.get(c)) for c in columns})
    return buf.getvalue()


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, dict):
        return json.dumps(value)
    return printable(value) if isinstance(value, str) else value


def render(
    records: Sequence[dict[str, Any]],
    columns: Sequence[str],
    fmt: str,
    width: int | None = None,
    shrink: Sequence[str] = (),
) -> str:
    if fmt == "json":
        return as_json([{c: r.get(c) for c in columns} for r in records])
    if fmt == "csv":
        return as_csv(records, columns).rstrip("\n")
    return table(records, columns, width, shrink)
