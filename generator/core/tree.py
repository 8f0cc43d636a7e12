"""Where a clforge tree keeps its specs, templates and generated output."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Tree:
    """The folders of one clforge tree (this repository's by default)."""

    root: Path = ROOT

    @property
    def specs(self) -> Path:
        return self.root / "specs"

    @property
    def templates(self) -> Path:
        return self.root / "templates"

    @property
    def tuning(self) -> Path:
        """The tuning database: one file per device (see :mod:`generator.params.database`)."""
        return self.root / "tuning"

    @property
    def generated(self) -> Path:
        return self.root / "generated"

    def rel(self, path: Path) -> str:
        """`path` relative to the root when inside it, for stable messages and headers."""
        try:
            return path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return path.as_posix()


DEFAULT = Tree()
