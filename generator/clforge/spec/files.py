"""Which files of a specs folder hold what: `<op>.yaml` an op each, `families/<family>.yaml`
the bodies that several ops share."""

from __future__ import annotations

from pathlib import Path

from clforge.core.tree import DEFAULT, Tree
from clforge.errors import Diagnostic, Location

FAMILIES = "families"  # the sub-folder of a specs folder that holds its family files


def spec_files(root: Path) -> list[Path]:
    """The op files of a specs folder (its family files are in families/, see family_files)."""
    return sorted(p for p in root.glob("*.yaml") if p.is_file())


def family_files(root: Path) -> list[Path]:
    """The family files of a specs folder: families/*.yaml."""
    return sorted(p for p in (root / FAMILIES).glob("*.yaml") if p.is_file())


def is_family_file(path: Path) -> bool:
    return path.parent.name == FAMILIES


def read_spec(path: Path, tree: Tree = DEFAULT) -> tuple[str | None, list[Diagnostic]]:
    """The text of one spec or family file, or None and why it cannot be read (located, for
    bytes that are not UTF-8)."""
    shown = tree.rel(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, [Diagnostic(Location(shown), "io", f"cannot read spec: {exc}")]
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError as exc:
        return None, [utf8_problem(data, exc, shown)]


def utf8_problem(data: bytes, exc: UnicodeDecodeError, path: str) -> Diagnostic:
    """Where the first byte that is not UTF-8 sits, as line and column (of characters)."""
    before = data[: exc.start]
    line = before.count(b"\n") + 1
    col = len(before[before.rfind(b"\n") + 1 :].decode("utf-8", errors="replace")) + 1
    return Diagnostic(
        Location(path, line, col),
        "io",
        f"byte 0x{data[exc.start]:02x} is not valid UTF-8 ({exc.reason}); specs are UTF-8 text",
    )
