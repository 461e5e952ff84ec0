"""Run artifacts on disk: read one (validated by ``db.schema``), write one atomically.

The artifact's shape and every rule it must follow live in ``db.schema``; this module only
moves it between files and :class:`~db.schema.RunDocument` objects. Pure Python (no SQLAlchemy,
no torch): the collector writes artifacts on hosts that have neither.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from db.schema import (
    SCHEMA,
    ArtifactError,
    RunDocument,
    content_hash,
    dumps,
    format_time,
    hardware_fingerprint,
    parse_artifact,
    parse_time,
    to_data,
    validate,
)

__all__ = ["SCHEMA", "ArtifactError", "RunDocument", "content_hash", "dumps", "format_time", "hardware_fingerprint",
           "load_artifact", "parse_artifact", "parse_time", "to_data", "validate", "write_artifact"]


def load_artifact(path: str | Path) -> RunDocument:
    """Read and validate one artifact; errors name the file and the field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ArtifactError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ArtifactError(f"{path}: is a folder, not an artifact file") from None
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return parse_artifact(text, str(path))


def write_artifact(doc: RunDocument | dict[str, Any], path: str | Path) -> Path:
    """Validate and write atomically: a reader never sees half a file, a failed write leaves none."""
    normalised = doc if isinstance(doc, RunDocument) else validate(doc)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(dumps(normalised), encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ArtifactError(f"{path}: cannot write ({exc.strerror or exc})") from None
    return path
