"""Writing generated files: deterministic, write-if-changed, atomic, stale files removed."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Files under the output folder that clforge owns; anything else there is left alone.
OWNED_SUFFIXES = (".cl", ".py", ".md")


@dataclass(frozen=True)
class Plan:
    """What writing `wanted` into a folder would do."""

    write: tuple[str, ...]  # new or changed, relative paths
    remove: tuple[str, ...]  # stale files clforge owns
    unchanged: int

    @property
    def clean(self) -> bool:
        return not self.write and not self.remove


def _owned(root: Path, managed: tuple[str, ...]) -> list[str]:
    found: list[str] = []
    for sub in managed:
        base = root / sub
        if base.is_file():
            found.append(sub)
        elif base.is_dir():
            found.extend(
                p.relative_to(root).as_posix()
                for p in base.rglob("*")
                if p.is_file() and p.suffix in OWNED_SUFFIXES
            )
    return sorted(found)


def plan(root: Path, wanted: dict[str, str], managed: tuple[str, ...]) -> Plan:
    """Compare `wanted` (relative path -> text) with what `root` holds under `managed` paths."""
    write = []
    unchanged = 0
    for rel, text in sorted(wanted.items()):
        path = root / rel
        try:
            same = path.read_bytes() == text.encode("utf-8")
        except OSError:
            same = False
        if same:
            unchanged += 1
        else:
            write.append(rel)
    remove = [rel for rel in _owned(root, managed) if rel not in wanted]
    return Plan(tuple(write), tuple(remove), unchanged)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same folder and rename: old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def apply(root: Path, wanted: dict[str, str], p: Plan) -> None:
    for rel in p.write:
        atomic_write(root / rel, wanted[rel])
    for rel in p.remove:
        (root / rel).unlink(missing_ok=True)
    # drop folders the removals emptied (never the managed roots themselves)
    for rel in p.remove:
        parent = (root / rel).parent
        while parent != root and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
