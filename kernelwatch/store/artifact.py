"""Run artifacts on disk: read one (validated by ``kernelwatch.store.schema``), write one atomically.

The artifact's shape and every rule it must follow live in ``kernelwatch.store.schema``; this module only
moves it between files and :class:`~kernelwatch.store.schema.RunDocument` objects. Pure Python (no SQLAlchemy,
no torch): the collector writes artifacts on hosts that have neither.

An artifact may be gzip-compressed: a file whose first bytes are gzip's magic number is read
through ``gzip`` whatever its name, and a path ending in ``.gz`` is written compressed (level 9,
no name or time stamp in the header, so the same document gives the same bytes). The JSON inside
is what an uncompressed artifact holds; the content hash (:func:`~kernelwatch.store.schema.content_hash`) is over
the parsed document, so a recompressed artifact is the same run. The size limit
(:data:`~kernelwatch.store.schema.MAX_ARTIFACT_BYTES`) holds for the file and for what it decompresses to: a
small file that inflates past it (a gzip bomb) is refused after reading at most that much.
"""

from __future__ import annotations

import gzip
import os
import stat
import zlib
from pathlib import Path
from typing import Any

from kernelwatch.store.files import open_input, write_atomic
from kernelwatch.store.schema import (
    MAX_ARTIFACT_BYTES,
    SCHEMA,
    ArtifactError,
    RunDocument,
    content_hash,
    dumps,
    format_time,
    hardware_fingerprint,
    parse_artifact,
    parse_time,
    printable,
    to_data,
    validate,
)

__all__ = [
    "SCHEMA",
    "ArtifactError",
    "RunDocument",
    "content_hash",
    "dumps",
    "format_time",
    "hardware_fingerprint",
    "load_artifact",
    "parse_artifact",
    "parse_time",
    "to_data",
    "validate",
    "write_artifact",
]


def load_artifact(path: str | Path) -> RunDocument:
    """Read and validate one artifact; errors name the file and the field.

    Opened by :func:`kernelwatch.store.files.open_input`: a FIFO, device, folder or socket is refused without a blocking
    open. A regular file larger than :data:`MAX_ARTIFACT_BYTES` is refused before it is read; a pipe
    handed to this process (``/dev/stdin``) is read up to that size and refused beyond it.
    """
    path = Path(path)
    name = printable(str(path))
    limit = MAX_ARTIFACT_BYTES
    with open_input(path, "an artifact file") as fh:
        try:
            info = os.fstat(fh.fileno())
            if stat.S_ISREG(info.st_mode) and info.st_size > limit:
                raise ArtifactError(f"{name}: larger than {limit >> 20} MiB ({info.st_size} bytes)")
            data = fh.read(limit + 1)
        except OSError as exc:
            raise ArtifactError(f"{name}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise ArtifactError(f"{name}: larger than {limit >> 20} MiB")
    if data[:2] == GZIP_MAGIC:
        data = _gunzip(data, name, limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{name}: not UTF-8 text (byte {exc.start})") from None
    return parse_artifact(text, str(path))


GZIP_MAGIC = b"\x1f\x8b"
GZIP_CHUNK = 1 << 20


def _gunzip(data: bytes, name: str, limit: int) -> bytes:
    """The decompressed bytes of a gzip file (every member). Their size is counted first, holding at
    most :data:`GZIP_CHUNK` of them at a time, so a file that inflates past ``limit`` is refused
    without ever holding more than that chunk."""
    size = 0
    rest = data
    try:
        while rest:
            inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            chunk = rest
            while not inflater.eof:
                piece = inflater.decompress(chunk, GZIP_CHUNK)
                size += len(piece)
                if size > limit:
                    raise ArtifactError(f"{name}: decompresses to more than {limit >> 20} MiB")
                chunk = inflater.unconsumed_tail
                if not piece and not chunk:
                    raise ArtifactError(f"{name}: a gzip file cut short (truncated)")
            rest = inflater.unused_data.lstrip(b"\0")  # members follow one another; trailing zeros are padding
        return gzip.decompress(data)
    except (zlib.error, gzip.BadGzipFile, EOFError) as exc:
        raise ArtifactError(f"{name}: not a valid gzip file ({exc})") from None


def artifact_target(path: str | Path) -> Path:
    """Where an artifact for ``path`` is written: the path itself; a symbolic link there is replaced, its
    target never written (:func:`kernelwatch.store.files.write_atomic`).

    Refused in one line: no file name (a path ending in ``/`` names a folder: the artifact is never written
    as a file named like it), a folder that does not exist or is a file, and anything but a regular file or
    a link at the path (a device, a FIFO, a folder): an atomic write replaces what is there, and
    ``-o /dev/null`` run as root must not replace the device.
    """
    text = str(path)
    given = Path(path)
    if not text or not given.name or given.name in (".", ".."):
        raise ArtifactError(f"{text!r}: an artifact needs a file name")
    if text.endswith(("/", os.sep)):
        raise ArtifactError(
            f"{printable(text)}: names a folder; give the artifact's file name "
            f"(e.g. {printable(text.rstrip('/' + os.sep) or '.')}/run.json)"
        )
    folder = given.absolute().parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ArtifactError(f"{printable(text)}: folder {printable(str(folder))} {what}")
    if not given.is_symlink() and given.exists() and not given.is_file():
        raise ArtifactError(f"{printable(text)}: not a regular file (a folder, device or FIFO is never replaced)")
    return given


def write_artifact(doc: RunDocument | dict[str, Any], path: str | Path) -> str | None:
    """Validate and write atomically (:func:`kernelwatch.store.files.write_atomic`): a reader never sees half a file, a
    failed write leaves none, no link is written through. A path ending in ``.gz`` gets a gzip file (see
    the module docstring). Returns the target of a symbolic link at ``path`` that was replaced, else None."""
    normalised = doc if isinstance(doc, RunDocument) else validate(doc)
    target = artifact_target(path)
    data = dumps(normalised).encode("utf-8")
    if target.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=9, mtime=0)
    try:
        return write_atomic(target, data)
    except OSError as exc:
        raise ArtifactError(f"{printable(str(path))}: cannot write ({exc.strerror or exc})") from None
