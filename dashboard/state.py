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

ALLOWED = {"kernel", "hardware", "variant", "dtype", "shape", "last", "run", "a", "b", "metric", "impl"}
_RUN = re.compile(r"^[0-9a-f-]{4,36}$")
_TEXT = re.compile(r"^[\w.,=x*/ -]{1,80}$")


@dataclass
class Params:
    values: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def choice(self, key: str, options: Iterable[str], default: str | None = None) -> str | None:
        options = list(options)
        value = self.values.get(key)
        if value is None:
            return default if default in options or default is None else (options[0] if options else None)
        if value not in options:
            self.problems.append(f"Unknown {key} {value!r}: showing {default or (options[0] if options else 'none')}.")
            self.values.pop(key)
            return default if default in options else (options[0] if options else None)
        return value

    def integer(self, key: str, default: int, lo: int, hi: int) -> int:
        value = self.values.get(key)
        if value is None:
            return default
        if not value.isdigit() or not lo <= int(value) <= hi:
            self.problems.append(f"{key} must be a whole number from {lo} to {hi}; got {value!r}.")
            self.values.pop(key)
            return default
        return int(value)

    def run_prefix(self, key: str) -> str | None:
        value = self.values.get(key)
        if value is not None and not _RUN.match(value):
            self.problems.append(f"{key} must be a run id (hex digits and dashes); got {value[:40]!r}.")
            self.values.pop(key)
            return None
        return value

    def text(self, key: str) -> str | None:
        value = self.values.get(key)
        if value is not None and not _TEXT.match(value):
            self.problems.append(f"{key} has characters a filter never needs; ignored.")
            self.values.pop(key)
            return None
        return value


def read_params() -> Params:
    raw = {k: st.query_params.get(k) for k in st.query_params}
    params = Params()
    for key, value in raw.items():
        if key not in ALLOWED:
            params.problems.append(f"Unknown URL parameter {key!r} ignored.")
        elif isinstance(value, str):
            params.values[key] = value.strip()
    return params


def write_params(values: dict[str, str | int | None]) -> None:
    """Put the page's state into the URL (so a pasted link opens the same view)."""
    clean = {k: str(v) for k, v in values.items() if v not in (None, "")}
    if clean != {k: st.query_params.get(k) for k in st.query_params}:
        st.query_params.from_dict(clean)


def show_problems(params: Params) -> None:
    for problem in params.problems:
        st.warning(problem, icon="⚠️")
