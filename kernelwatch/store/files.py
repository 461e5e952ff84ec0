"""Files a command reads or writes: no read ever hangs, no write ever goes through a link.

Reading (:func:`open_input`): a regular file, a link to one, or a pipe this process was handed
(``/dev/stdin``, ``/dev/fd/N``) is opened; anything else named by path (a FIFO, a device, a folder, a
socket) is refused in one line, never opened: opening a FIFO nobody writes to blocks forever, and
opening some devices does something. The file is opened non-blocking and checked again, so one
swapped in after the check cannot block either. Every artifact and journal a command reads comes
through here (``kernelwatch.store.artifact.load_artifact``, ``kernelwatch.store.journal``).

Writing (:func:`write_atomic`): the bytes go to a new temporary file beside the target, created
exclusively under a random name (``mkstemp``: ``O_CREAT | O_EXCL``, which never follows a link, so a
link planted at a guessable name is never written through), flushed to disk, then renamed over the
target. A reader never sees half a file and a failed write leaves the old one. The rename replaces
whatever entry is at the target's name, so a symbolic link there is replaced and its target never
touched; anything but a regular file or a link there (a folder, a FIFO, a device: ``-o /dev/null``
run as root must not replace the device) is refused. Artifacts, the gate's reports and
``confirm --report-file`` are written so.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

from kernelwatch.store.schema import ArtifactError, printable

__all__ = ["NotReplaced", "check_writable", "file_kind", "open_input", "replaced_link_note", "write_atomic"]


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a regular file" if stat.S_ISREG(mode) else "not a file"


def _handed_descriptor(path: Path, info: os.stat_result) -> bool:
    """Whether ``path`` names a descriptor this process was given (``/dev/stdin``, ``/dev/fd/N``, or the
    very pipe on its standard input): a pipe given so is read, whoever writes to it is already there."""
    text = str(path)
    if text == "/dev/stdin" or text.startswith(("/dev/fd/", "/proc/self/fd/")):
        return True
    with contextlib.suppress(OSError):
        own = os.fstat(0)
        return (info.st_dev, info.st_ino) == (own.st_dev, own.st_ino)
    return False


def open_input(path: str | Path, what: str = "an artifact file") -> BinaryIO:
    """Open a file a command reads; every refusal is an :class:`~kernelwatch.store.schema.ArtifactError` of one line
    naming the file (``what`` says what was expected there: "a journal")."""
    path = Path(path)
    name = printable(str(path))
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ArtifactError(f"{name}: no such file") from None
    except OSError as exc:
        raise ArtifactError(f"{name}: cannot read ({exc.strerror or exc})") from None
    handed = _handed_descriptor(path, info)
    if stat.S_ISDIR(info.st_mode):
        raise ArtifactError(f"{name}: is a folder, not {what}")
    if not stat.S_ISREG(info.st_mode) and not handed:
        raise _not_regular(name, info.st_mode)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | (0 if handed else os.O_NONBLOCK))
    except OSError as exc:
        raise ArtifactError(f"{name}: cannot read ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ArtifactError(f"{name}: is a folder, not {what}")
        if not stat.S_ISREG(mode) and not handed:  # swapped in between the check and the open
            raise _not_regular(name, mode)
        if not handed:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _not_regular(name: str, mode: int) -> ArtifactError:
    return ArtifactError(
        f"{name}: not a regular file but {file_kind(mode)} (not opened: reading it could block "
        "forever); give a file, or a pipe as /dev/stdin"
    )


class NotReplaced(OSError):
    """The target is neither a regular file nor a link (a folder, a FIFO, a device): never replaced."""


def write_atomic(path: str | Path, data: bytes) -> str | None:
    """Write ``data`` to ``path`` through a new temporary file renamed over it (see the module docstring).

    Returns the target of the symbolic link that was at ``path`` and is now replaced (that target was
    never opened), else None; :func:`replaced_link_note` says so in one line. Raises ``OSError``
    (:class:`NotReplaced` for a folder, FIFO or device at ``path``) and leaves no temporary file behind."""
    path = Path(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    link = None
    if info is not None and stat.S_ISLNK(info.st_mode):
        link = os.readlink(path)
    elif info is not None and not stat.S_ISREG(info.st_mode):
        raise NotReplaced(f"{path} is {file_kind(info.st_mode)}, not a regular file: it is never replaced")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:200]}.", suffix=".tmp", dir=path.absolute().parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # what a plain open() would have made (mkstemp makes 0600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return link


def check_writable(path: str | Path) -> None:
    """Raise the ``OSError`` :func:`write_atomic` would raise for ``path``, before the work whose result it will hold:
    a folder, FIFO or device there (:class:`NotReplaced`), a folder that is missing or not one, or one this
    process cannot create files in (read-only, another user's): a temporary file is created there and removed."""
    path = Path(path)
    with contextlib.suppress(FileNotFoundError):
        info = os.lstat(path)
        if not stat.S_ISLNK(info.st_mode) and not stat.S_ISREG(info.st_mode):
            raise NotReplaced(f"{path} is {file_kind(info.st_mode)}, not a regular file: it is never replaced")
    folder = path.absolute().parent
    if not folder.is_dir():
        raise NotADirectoryError(f"folder {folder} {'is not a folder' if folder.exists() else 'does not exist'}")
    with tempfile.TemporaryFile(prefix=f".{path.name[:200]}.", suffix=".tmp", dir=folder):
        pass


def replaced_link_note(path: str | Path, link: str) -> str:
    """The one line that says an output path was a symbolic link, replaced and not written through."""
    return (
        f"{printable(str(path))} was a symbolic link (to {printable(link)}): replaced by a regular file, "
        f"{printable(link)} not written"
    )
