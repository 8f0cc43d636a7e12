"""The checked envelope of every file clforge reads back from its cache folder.

A cache entry is written whole (a temporary file with a name no other writer can have, renamed
over the entry) and read back only through :func:`read`, which checks, before anything is made
of its bytes:

- that the entry is a regular file owned by this user that no other user can write (a symbolic
  link, a folder, a FIFO, an entry someone else could have written are never read);
- its magic (which kind of entry, which envelope version), its length and the SHA-256 of all of
  it (header and content alike: a flipped, cut or appended byte anywhere is seen);
- the SHA-256 of what it was made from (its *origin*: the program source and build key, the
  template source, the tuning file's bytes), so that an entry made from something else is
  replaced quietly, as a stale one, not used.

A damaged or untrusted entry is removed with one :class:`ClforgeWarning` saying so, and the
caller rebuilds it; nothing in it is executed, unmarshalled or handed to a driver. The format:

    b"clforge-cache-1 <kind>\\n"   magic
    32 bytes                        SHA-256 of the origin
    8 bytes                         the content's length, little-endian
    content
    32 bytes                        SHA-256 of everything before it

Append-only logs (the tuner's journal) are checked line by line: each line a JSON record
carrying the SHA-256 of its kind and content (:func:`pack_record`, :func:`unpack_record`), read
through the same checks of the file (:func:`read_log`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import stat
import warnings
from enum import Enum
from pathlib import Path
from typing import Any

from clforge.core.atomic_file import TMP_SUFFIX
from clforge.errors import ClforgeWarning

_DIGEST = 32
_LENGTH = 8
SEAL = "sha256"  # the field of a log record that holds its checksum
MAX_ENTRY = 1 << 30  # no entry clforge writes comes near; a larger file is not read into memory


class Status(Enum):
    OK = "ok"
    MISSING = "missing"
    STALE = "stale"  # made from something else: replaced quietly
    DAMAGED = "damaged"  # removed with a warning


def _magic(kind: str) -> bytes:
    return f"clforge-cache-1 {kind}\n".encode()


def digest(*parts: bytes | str) -> bytes:
    """The SHA-256 of `parts`, each length-prefixed (so that no two lists of parts collide)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.digest()


def pack(kind: str, origin: bytes, content: bytes) -> bytes:
    if len(origin) != _DIGEST:
        raise ValueError("an envelope's origin is a SHA-256 digest")
    body = _magic(kind) + origin + len(content).to_bytes(_LENGTH, "little") + content
    return body + hashlib.sha256(body).digest()


def unpack(kind: str, origin: bytes, data: bytes) -> tuple[Status, bytes]:
    """(OK, content), (STALE, b"") for an intact entry of another origin, or (DAMAGED, b"")."""
    magic = _magic(kind)
    head = len(magic) + _DIGEST + _LENGTH
    if len(data) < head + _DIGEST or not data.startswith(magic):
        return Status.DAMAGED, b""
    body, check = data[:-_DIGEST], data[-_DIGEST:]
    length = int.from_bytes(body[head - _LENGTH : head], "little")
    if length != len(body) - head or hashlib.sha256(body).digest() != check:
        return Status.DAMAGED, b""
    if body[len(magic) : len(magic) + _DIGEST] != origin:
        return Status.STALE, b""
    return Status.OK, body[head:]


def _record_digest(kind: str, record: dict[str, Any]) -> str:
    canonical = json.dumps(record, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(digest(kind, canonical)).hexdigest()


def pack_record(kind: str, record: dict[str, Any]) -> str:
    """One line of an append-only log: the record as JSON, with the SHA-256 of its kind and of
    its canonical JSON beside its own fields (so the line stays a plain JSON object)."""
    if SEAL in record:
        raise ValueError(f"a log record has no field {SEAL!r} of its own")
    return json.dumps({**record, SEAL: _record_digest(kind, record)}) + "\n"


def unpack_record(kind: str, line: str) -> dict[str, Any] | None:
    """The record of a line :func:`pack_record` wrote, or None when the line is damaged (cut
    short, bytes changed, edited, of another kind)."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    seal = record.pop(SEAL, None)
    if not isinstance(seal, str) or seal != _record_digest(kind, record):
        return None
    return record


# --- trust -------------------------------------------------------------------------------------


def untrusted(st: os.stat_result) -> str | None:
    """Why a file or folder with this status could hold what another user wrote, or None: it is
    owned by another user (root excepted), or group or others may write it. As ssh treats
    a private key, such a thing is not used."""
    if not hasattr(os, "geteuid"):  # no POSIX owners and modes (Windows): nothing to check
        return None
    me = os.geteuid()
    if st.st_uid not in (me, 0):
        return f"it is owned by uid {st.st_uid}, not by you (uid {me})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"group or others may write it (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


# --- reading and writing -----------------------------------------------------------------------


def remove(path: Path) -> None:
    """Remove whatever is at `path` (a file, a symbolic link, a folder), never following links;
    what cannot be removed is left (the caller rebuilds beside it)."""
    try:
        st = path.lstat()
    except OSError:
        return
    try:
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
        else:
            path.unlink()
    except OSError:
        pass


def _damaged(path: Path, what: str, problem: str) -> tuple[Status, bytes]:
    remove(path)
    warnings.warn(
        f"clforge: {what} ({path}) {problem}; removed and rebuilt from source",
        ClforgeWarning,
        stacklevel=4,
    )
    return Status.DAMAGED, b""


def _read_raw(path: Path, what: str) -> tuple[Status, bytes]:
    """The bytes of the regular file at `path`, opened without following a link, when this user
    wrote it and nobody else can: (OK, bytes), (MISSING, b""), or (DAMAGED, b"") after removing
    it with one warning."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return Status.MISSING, b""
    except OSError as exc:
        if path.is_symlink():
            return _damaged(path, what, "is a symbolic link, which clforge never follows")
        return _damaged(path, what, f"cannot be read ({exc.strerror or exc})")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind_of = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            problem = f"is {kind_of}"
        elif (why := untrusted(st)) is not None:
            problem = f"could have been written by another user: {why}"
        elif st.st_size > MAX_ENTRY:
            problem = f"is larger than any entry ({st.st_size} bytes)"
        else:
            with os.fdopen(os.dup(fd), "rb") as fh:
                return Status.OK, fh.read(MAX_ENTRY + 1)
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror or exc})"
    finally:
        os.close(fd)
    return _damaged(path, what, problem)


def read(path: Path, kind: str, origin: bytes, what: str) -> tuple[Status, bytes]:
    """The checked content of the entry at `path`: (OK, content), (MISSING, b""), (STALE, b"")
    for an intact entry made from something else (left for the caller to overwrite), or
    (DAMAGED, b"") after removing a damaged, unreadable or untrusted entry with one warning
    (`what` names it: "the cached binary of add__cpu__f32")."""
    status, data = _read_raw(path, what)
    if status is not Status.OK:
        return status, b""
    status, content = unpack(kind, origin, data)
    if status is Status.DAMAGED:
        problem = "is empty" if not data else "is damaged (its length or checksum does not match)"
        return _damaged(path, what, problem)
    return status, content


def read_log(path: Path, kind: str, what: str) -> list[dict[str, Any]]:
    """The intact lines of an append-only log :func:`append_log` wrote. Damaged lines (a line
    cut short by a killed writer, bytes changed, a hand edit) are dropped from the file with one
    warning; a file that cannot be used at all is removed with one warning."""
    status, data = _read_raw(path, what)
    if status is not Status.OK:
        return []
    good: list[dict[str, Any]] = []
    bad: list[int] = []
    lines = data.decode("utf-8", errors="replace").splitlines(keepends=True)
    for number, line in enumerate(lines, 1):
        record = unpack_record(kind, line) if line.endswith("\n") else None
        if record is None:
            bad.append(number)
        else:
            good.append(record)
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
        warnings.warn(
            f"clforge: {what} ({path}) has {len(bad)} damaged line(s) (line {shown}: cut short "
            "by a killed run, or changed); dropped, and what they held is measured again",
            ClforgeWarning,
            stacklevel=2,
        )
        with contextlib.suppress(OSError):
            _write_whole(path, "".join(pack_record(kind, r) for r in good).encode())
    return good


def append_log(path: Path, kind: str, record: dict[str, Any]) -> None:
    """Append one checked record to a log (created private where missing)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(pack_record(kind, record))


def write(path: Path, kind: str, origin: bytes, content: bytes) -> None:
    """Write an entry whole: a private temporary file (mode 0600) with a name no other writer,
    process or thread, can have, renamed over `path`; a reader sees the old entry or the new one,
    never a part. Raises OSError (the caller decides whether a read-only cache matters)."""
    _write_whole(path, pack(kind, origin, content))


def _write_whole(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(8)}{TMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
