"""Page state in the URL: every filter is a query parameter, validated before it is used.

Values are checked against what the database offers (kernel names, hardware fingerprints, run id
prefixes) or a fixed pattern; anything else is dropped with a visible message. Nothing from the
URL is evaluated, unpickled or pasted into SQL: the queries bind it as a parameter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import streamlit as st

from kernelwatch.dashboard.safe import md

ALLOWED = {
    "kernel",
    "hardware",
    "variant",
    "dtype",
    "shape",
    "last",
    "run",
    "a",
    "b",
    "metric",
    "impl",
    "case",
    "base",
    "group",
    "series",
    "view",
    "show",
    "cell",
}
_RUN = re.compile(r"^[0-9a-f-]{4,36}$")
_TEXT = re.compile(r"^[\w.,=x*/ -]{1,80}$")
_INT = re.compile(r"^[0-9]{1,9}$", re.ASCII)  # ASCII digits only: str.isdigit() accepts "²", which int() refuses


@dataclass
class Params:
    values: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    used: set[str] = field(default_factory=set)

    def get(self, key: str, default: str | None = None) -> str | None:
        self.used.add(key)
        return self.values.get(key, default)

    def unused(self) -> list[str]:
        """Parameters in the URL that this page never read: reported, so nothing is silently ignored."""
        return [k for k in self.values if k not in self.used]

    def choice(self, key: str, options: Iterable[str], default: str | None = None) -> str | None:
        self.used.add(key)
        options = list(options)
        value = self.values.get(key)
        if value is None:
            return default if default in options or default is None else (options[0] if options else None)
        if value not in options:
            shown = default or (options[0] if options else "none")
            self.problems.append(f"Unknown {key} {_shown(value)}: showing {_shown(shown)}.")
            self.values.pop(key)
            return default if default in options else (options[0] if options else None)
        return value

    def integer(self, key: str, default: int, lo: int, hi: int) -> int:
        self.used.add(key)
        value = self.values.get(key)
        if value is None:
            return default
        if not _INT.match(value) or not lo <= int(value) <= hi:
            self.problems.append(f"{key} must be a whole number from {lo} to {hi}; got {_shown(value)}.")
            self.values.pop(key)
            return default
        return int(value)

    def run_prefix(self, key: str) -> str | None:
        self.used.add(key)
        value = self.values.get(key)
        if value is not None and not _RUN.match(value):
            self.problems.append(f"{key} must be a run id (hex digits and dashes); got {_shown(value)}.")
            self.values.pop(key)
            return None
        return value

    def text(self, key: str) -> str | None:
        self.used.add(key)
        value = self.values.get(key)
        if value is not None and not _TEXT.match(value):
            self.problems.append(f"{key} has characters a filter never needs; ignored.")
            self.values.pop(key)
            return None
        return value


def _shown(value: str, limit: int = 60) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "…")


def read_params() -> Params:
    """The URL's query parameters; unknown names are dropped with a message. Never raises."""
    params = Params()
    for key in list(st.query_params):
        value = st.query_params.get(key)
        if key not in ALLOWED:
            params.problems.append(f"Unknown URL parameter {_shown(str(key), 40)} ignored.")
        elif isinstance(value, str):
            params.values[key] = value.strip()
    return params


def write_params(values: dict[str, str | int | None]) -> None:
    """Put the page's state into the URL (so a pasted link opens the same view)."""
    clean = {k: str(v) for k, v in values.items() if v not in (None, "")}
    if clean != {k: st.query_params.get(k) for k in st.query_params}:
        st.query_params.from_dict(clean)


def show_problems(params: Params) -> None:
    """Each problem as a warning; the message quotes URL text, so it is shown escaped, never as Markdown."""
    for key in params.unused():
        params.problems.append(f"URL parameter {_shown(key, 40)} is not used on this page; ignored.")
    for problem in params.problems:
        st.warning(md(problem, limit=400), icon=":material/warning:")
