"""Which files of a specs folder hold what: `<op>.yaml` an op each, `families/<family>.yaml`
the bodies that several ops share."""

from __future__ import annotations

from pathlib import Path

from generator.core.tree import DEFAULT, Tree
from generator.errors import Diagnostic, Location

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
    """The text of one spec or family file, or None and why it cannot be read."""
    try:
        return path.read_text(encoding="utf-8"), []
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Diagnostic(Location(tree.rel(path)), "io", f"cannot read spec: {exc}")]
