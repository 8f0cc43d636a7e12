"""Where clforge keeps its caches (program binaries, compiled templates, generation stamps, the
tuner's journal, parsed tuning files): $CLFORGE_CACHE_DIR, default ~/.cache/clforge;
`CLFORGE_CACHE=0` turns every disk cache off.

The folder holds code clforge runs (compiled templates) and binaries it hands to the OpenCL
driver, so it is created private (0700) and, like ssh with a private key, clforge refuses to use
one another user could write: owned by someone else, or writable by group or others."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from clforge.core.envelope import untrusted
from clforge.errors import CacheError

__all__ = ["CACHE_ENV", "CacheError", "cache_dir", "check_private", "private_dir"]

CACHE_ENV = "CLFORGE_CACHE_DIR"


def cache_dir(*parts: str) -> Path | None:
    """The cache folder (or a subfolder of it), or None when disk caches are off."""
    if os.environ.get("CLFORGE_CACHE", "1") == "0":
        return None
    base = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "clforge"
    return Path(base).joinpath(*parts)


_checked: set[tuple[str, int, int, int, int]] = set()


def check_private(folder: Path) -> None:
    """Raise CacheError unless `folder` is a folder of this user's that nobody else can write."""
    st = folder.stat()  # through a link: what counts is the folder it leads to
    sig = (str(folder), st.st_ino, st.st_dev, st.st_mode, st.st_uid)
    if sig in _checked:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise CacheError(
            f"clforge's cache folder {folder} is not a folder. Fix: remove it, or point "
            f"${CACHE_ENV} elsewhere (CLFORGE_CACHE=0 turns the disk caches off)."
        )
    why = untrusted(st)
    if why is not None:
        raise CacheError(
            f"clforge will not load code or binaries from its cache folder {folder}: {why}, so "
            "another user could have put them there. Fix: make it yours and private "
            f"(`chmod 700 {folder}`, after checking what it holds, or `rm -r {folder}`: clforge "
            f"rebuilds it), or point ${CACHE_ENV} at a private folder (CLFORGE_CACHE=0 turns "
            "the disk caches off)."
        )
    _checked.add(sig)


def private_dir(*parts: str) -> Path | None:
    """The cache folder (or a subfolder of it), created private (0700) where missing, and
    checked like an ssh key: None when disk caches are off or the folder cannot be created (a
    read-only home: everything is rebuilt in memory); CacheError when it, or the subfolder, is
    owned by another user or writable by group or others."""
    base = cache_dir()
    if base is None:
        return None
    levels = [base, *(base.joinpath(*parts[: i + 1]) for i in range(len(parts)))]
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    for level in levels:  # each one 0700 (mkdir's parents get the umask's mode), then checked
        try:
            level.mkdir(mode=0o700, exist_ok=True)
        except OSError:  # a read-only home: everything is rebuilt in memory
            return None
        check_private(level)
    return levels[-1]
