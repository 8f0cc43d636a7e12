"""Writing one file atomically: through a temporary file in the same folder, renamed over the
target, so a reader (or an interrupted writer) sees the old file or the new one, never half.

The temporary files are named `.<name>.<pid>-<n>.clforge-tmp`; a writer killed before its rename
leaves one behind, which :func:`is_debris` recognises and generation removes. The new file gets
the mode of the file it replaces, else the user's umask (not mkstemp's 0600).
"""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

TMP_SUFFIX = ".clforge-tmp"
# what writers before clforge 0.2 left: `.<name>.<mkstemp's 8 random characters>.tmp`
_LEGACY_DEBRIS = re.compile(r"\..+\.[A-Za-z0-9_]{8}\.tmp\Z")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_DEFAULT_MODE = 0o666 & ~_umask()


def is_debris(path: Path) -> bool:
    """A temporary file an interrupted atomic write left behind."""
    name = path.name
    return (name.startswith(".") and name.endswith(TMP_SUFFIX)) or bool(_LEGACY_DEBRIS.match(name))


_counter = itertools.count()


def _temporary(path: Path) -> tuple[int, Path]:
    """A new file beside `path`, opened for writing, that no other writer can have."""
    while True:
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{next(_counter)}{TMP_SUFFIX}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), tmp
        except FileExistsError:  # debris of an earlier process with this pid
            continue


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same folder and rename: old or new, never half."""
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = _DEFAULT_MODE
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _temporary(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
