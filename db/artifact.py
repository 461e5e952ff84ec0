"""The run artifact, schema ``kernelwatch.run/1``: one whole run as plain JSON.

A CI runner without database access writes it (``kernelwatch collect --out``); ``kernelwatch
ingest`` loads it later. This module is pure Python (no SQLAlchemy, no torch) so that the
collector can write artifacts on machines that have neither.

``load_artifact`` validates a document completely and returns it normalised: timestamps in
one UTC form, lists in key order. ``content_hash`` of the normalised document is what makes
ingest idempotent and what tells "same run again" from "same id, different content".
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCHEMA = "kernelwatch.run/1"
TRIGGERS = ("pr", "nightly", "manual")
STATUSES = ("running", "complete", "failed", "partial")
DEVICES = ("cuda", "npu", "cpu")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class ArtifactError(ValueError):
    """A run artifact that cannot be ingested; the message names the file and the field."""


Check = Callable[[str, Any], Any]


def _fail(path: str, expected: str, value: Any) -> None:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    raise ArtifactError(f"{path}: expected {expected}, got {shown}")


def _optional(check: Check) -> Check:
    def inner(path: str, value: Any) -> Any:
        return None if value is None else check(path, value)

    return inner


def _str(path: str, value: Any) -> str:
    if not isinstance(value, str):
        _fail(path, "a string", value)
    return value


def _nonempty(path: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(path, "a non-empty string", value)
    return value


def _int(path: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(path, "an integer", value)
    return value


def _count(path: str, value: Any) -> int:
    if _int(path, value) < 0:
        _fail(path, "a non-negative integer", value)
    return value


def _num(path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(path, "a number", value)
    if not math.isfinite(value):
        _fail(path, "a finite number", value)
    return float(value)


def _bool(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        _fail(path, "true or false", value)
    return value


def _enum(*choices: str) -> Check:
    def inner(path: str, value: Any) -> str:
        if value not in choices:
            _fail(path, "one of " + ", ".join(choices), value)
        return value

    return inner


def _uuid(path: str, value: Any) -> str:
    if not isinstance(value, str) or not _UUID.match(value):
        _fail(path, "a lower-case UUID", value)
    return value


def format_time(value: dt.datetime) -> str:
    """The one textual form of a timestamp in artifacts: UTC, microseconds, trailing Z."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str) -> dt.datetime:
    parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError("no time zone")
    return parsed.astimezone(dt.timezone.utc)


def _time(path: str, value: Any) -> str:
    if not isinstance(value, str):
        _fail(path, "an ISO 8601 timestamp with a time zone", value)
    try:
        return format_time(parse_time(value))
    except ValueError:
        _fail(path, "an ISO 8601 timestamp with a time zone", value)
    raise AssertionError  # unreachable


def _json_value(path: str, value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return _num(path, value)
    if isinstance(value, list):
        return [_json_value(f"{path}[{i}]", v) for i, v in enumerate(value)]
    _fail(path, "a string, number, boolean, null or list of those", value)


def _params(path: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        _fail(path, "an object", value)
    return {k: _json_value(f"{path}.{k}", v) for k, v in sorted(value.items())}


def _versions(path: str, value: Any) -> dict[str, str | None]:
    if not isinstance(value, dict):
        _fail(path, "an object of version strings", value)
    return {k: _optional(_str)(f"{path}.{k}", v) for k, v in sorted(value.items())}


def _samples(path: str, value: Any) -> list[float]:
    if not isinstance(value, list):
        _fail(path, "a list of numbers", value)
    out = []
    for i, v in enumerate(value):
        if _num(f"{path}[{i}]", v) < 0:
            _fail(f"{path}[{i}]", "a non-negative number", v)
        out.append(float(v))
    return out


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _object(fields: dict[str, Check]) -> Check:
    def inner(path: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            _fail(path, "an object", value)
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise ArtifactError(f"{_join(path, unknown[0])}: unknown field (schema {SCHEMA})")
        out = {}
        for name, check in fields.items():
            if name not in value:
                raise ArtifactError(f"{_join(path, name)}: missing field")
            out[name] = check(_join(path, name), value[name])
        return out

    return inner


def _list_of(item: Check) -> Check:
    def inner(path: str, value: Any) -> list[Any]:
        if not isinstance(value, list):
            _fail(path, "a list", value)
        return [item(f"{path}[{i}]", v) for i, v in enumerate(value)]

    return inner


_opt_num, _opt_str, _opt_int = _optional(_num), _optional(_str), _optional(_count)

COMMIT = _object(
    {
        "sha": _nonempty,
        "branch": _nonempty,
        "time": _optional(_time),
        "subject": _opt_str,
        "dirty": _optional(_bool),
    }
)
RUN = _object(
    {
        "id": _uuid,
        "commit": COMMIT,
        "trigger": _enum(*TRIGGERS),
        "ci_job": _opt_str,
        "device": _enum(*DEVICES),
        "command": _opt_str,
        "versions": _versions,
        "started_at": _time,
        "finished_at": _optional(_time),
        "status": _enum(*STATUSES),
        "synthetic": _bool,
        "notes": _opt_str,
    }
)
HARDWARE = _object(
    {
        "vendor": _nonempty,
        "device_name": _nonempty,
        "device_count": _count,
        "compute_units": _opt_int,
        "memory_bytes": _opt_int,
        "driver": _opt_str,
        "toolkit": _opt_str,
        "peak_gbps": _opt_num,
        "peak_gbps_datasheet": _opt_num,
        "peak_tflops": _opt_num,
        "peak_tflops_datasheet": _opt_num,
    }
)
CASE = _object(
    {"key": _nonempty, "kernel": _nonempty, "variant": _nonempty, "dtype": _nonempty, "params": _params}
)
ACCURACY = _object(
    {
        "case": _nonempty,
        "max_abs_err": _opt_num,
        "max_rel_err": _opt_num,
        "rtol": _num,
        "atol": _num,
        "error_budget": _opt_num,
        "nan_mismatches": _count,
        "trials": _count,
        "seed": _int,
        "passed": _bool,
        "error": _opt_str,
    }
)
PERF = _object(
    {
        "case": _nonempty,
        "implementation": _nonempty,
        "median_ms": _opt_num,
        "p20_ms": _opt_num,
        "p80_ms": _opt_num,
        "min_ms": _opt_num,
        "samples_ms": _samples,
        "bytes": _opt_int,
        "flops": _opt_int,
        "gbps": _opt_num,
        "tflops": _opt_num,
        "pct_peak": _opt_num,
        "speedup_vs_eager": _opt_num,
        "target": _opt_str,
        "target_met": _optional(_bool),
        "error": _opt_str,
    }
)
PROFILER = _object(
    {
        "case": _nonempty,
        "source": _nonempty,
        "name": _nonempty,
        "value": _opt_num,
        "unit": _opt_str,
        "ideal": _opt_str,
        "meets_ideal": _optional(_bool),
        "error": _opt_str,
    }
)
DOCUMENT = _object(
    {
        "schema": _str,
        "run": RUN,
        "hardware": HARDWARE,
        "cases": _list_of(CASE),
        "accuracy": _list_of(ACCURACY),
        "perf": _list_of(PERF),
        "profiler": _list_of(PROFILER),
    }
)


def _unique(items: list[dict[str, Any]], fields: tuple[str, ...], section: str) -> None:
    seen: set[tuple[Any, ...]] = set()
    for i, item in enumerate(items):
        key = tuple(item[f] for f in fields)
        if key in seen:
            raise ArtifactError(f"{section}[{i}]: duplicate {'/'.join(fields)} {key!r}")
        seen.add(key)


def validate(doc: Any) -> dict[str, Any]:
    """Check every field of a parsed document and return its normalised form."""
    if not isinstance(doc, dict):
        _fail("(document)", "a JSON object", doc)
    if "schema" not in doc:
        raise ArtifactError("schema: missing field")
    if doc["schema"] != SCHEMA:
        raise ArtifactError(f"schema: unknown schema version {doc['schema']!r} (this KernelWatch reads {SCHEMA})")
    out = DOCUMENT("", doc)
    _unique(out["cases"], ("key",), "cases")
    _unique(out["accuracy"], ("case",), "accuracy")
    _unique(out["perf"], ("case", "implementation"), "perf")
    _unique(out["profiler"], ("case", "source", "name"), "profiler")
    keys = {c["key"] for c in out["cases"]}
    for section in ("accuracy", "perf", "profiler"):
        for i, item in enumerate(out[section]):
            if item["case"] not in keys:
                raise ArtifactError(f"{section}[{i}].case: {item['case']!r} is not listed in cases")
    used = {item["case"] for section in ("accuracy", "perf", "profiler") for item in out[section]}
    out["cases"] = sorted((c for c in out["cases"] if c["key"] in used), key=lambda c: c["key"])
    out["accuracy"].sort(key=lambda r: r["case"])
    out["perf"].sort(key=lambda r: (r["case"], r["implementation"]))
    out["profiler"].sort(key=lambda r: (r["case"], r["source"], r["name"]))
    return out


def _no_constants(name: str) -> float:
    raise ArtifactError(f"{name} is not valid JSON (non-finite numbers must be null)")


def parse_artifact(text: str, source: str = "<artifact>") -> dict[str, Any]:
    """Parse and validate artifact text; errors carry ``source`` and the field path."""
    try:
        doc = json.loads(text, parse_constant=_no_constants)
    except ArtifactError as exc:
        raise ArtifactError(f"{source}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    try:
        return validate(doc)
    except ArtifactError as exc:
        raise ArtifactError(f"{source}: {exc}") from None


def load_artifact(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path}: cannot read ({exc})") from None
    return parse_artifact(text, str(path))


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n"


def content_hash(doc: dict[str, Any]) -> str:
    """SHA-256 of a normalised document (``validate``'s output)."""
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def write_artifact(doc: dict[str, Any], path: str | Path) -> Path:
    """Validate and write atomically (a reader never sees half a file)."""
    normalised = validate(doc)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps(normalised), encoding="utf-8")
    tmp.replace(path)
    return path


HARDWARE_IDENTITY = ("vendor", "device_name", "device_count", "compute_units", "memory_bytes", "driver", "toolkit")


def hardware_fingerprint(hardware: dict[str, Any]) -> str:
    """Stable id of a machine kind: what it is, not what was measured on it."""
    ident = json.dumps([hardware.get(k) for k in HARDWARE_IDENTITY], separators=(",", ":"))
    return hashlib.sha256(ident.encode()).hexdigest()[:16]
