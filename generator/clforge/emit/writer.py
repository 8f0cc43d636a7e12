"""Writing generated files: deterministic, write-if-changed, atomic (see
:mod:`clforge.core.atomic_file`), stale files and the debris of interrupted writes removed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clforge.core.atomic_file import atomic_write, is_debris

# Files under the output folder that clforge owns; anything else there is left alone.
OWNED_SUFFIXES = (".cl", ".py", ".md")


@dataclass(frozen=True)
class Plan:
    """What writing `wanted` into a folder would do."""

    write: tuple[str, ...]  # new or changed, relative paths
    remove: tuple[str, ...]  # stale files clforge owns, and debris of interrupted writes
    unchanged: int

    @property
    def clean(self) -> bool:
        return not self.write and not self.remove


def owned(root: Path, managed: tuple[str, ...]) -> list[str]:
    found: set[str] = set()
    for sub in managed:
        base = root / sub
        if base.is_file():
            found.add(sub)
        elif base.is_dir():
            found.update(
                p.relative_to(root).as_posix()
                for p in base.rglob("*")
                if p.is_file() and (p.suffix in OWNED_SUFFIXES or is_debris(p))
            )
        if base.parent.is_dir():  # debris of a managed file sits beside it
            found.update(
                p.relative_to(root).as_posix()
                for p in base.parent.glob(f".{base.name}.*")
                if is_debris(p)
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
    remove = [rel for rel in owned(root, managed) if rel not in wanted]
    return Plan(tuple(write), tuple(remove), unchanged)


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
