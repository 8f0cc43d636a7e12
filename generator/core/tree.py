"""Where a clforge tree keeps its specs, templates, tuning files and generated package.

A tree is clforge's own (this repository) or an extension's: a folder with `specs/`,
`templates/` and a manifest, `clforge.yaml` (:mod:`generator.core.manifest`), naming the tree and
the Python package that `clforge generate` writes there (clforge's is `generated`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from generator.core.manifest import BUILTIN, BUILTIN_NAME, BUILTIN_PACKAGE, MANIFEST, read_manifest

ROOT = Path(__file__).resolve().parents[2]
# the prefix under which every tree's templates reach clforge's own (its shared macros):
# "clforge/_common/macros.cl.j2"
SHARED_TEMPLATES = "clforge"


@dataclass(frozen=True)
class Tree:
    """The folders of one clforge tree (this repository's by default)."""

    root: Path = ROOT
    name: str = BUILTIN_NAME
    package: str = BUILTIN_PACKAGE

    @classmethod
    def at(cls, root: Path) -> Tree:
        """The tree at `root`, named by its `clforge.yaml` (a folder without one is read as a
        tree named like clforge's, generating `generated/`: a scratch copy of clforge's)."""
        root = Path(root)
        m = read_manifest(root, builtin=root.resolve() == ROOT.resolve()) or BUILTIN
        return cls(root, m.name, m.package)

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
        """The generated package: registry.py, ops.py and kernels/."""
        return self.root / self.package

    @property
    def docs(self) -> Path:
        return self.root / "docs"

    def rel(self, path: Path) -> str:
        """`path` relative to the root when inside it, for stable messages and headers."""
        try:
            return path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return path.as_posix()


def find(start: Path) -> Tree | None:
    """The tree whose manifest is in `start` or the nearest folder above it (as git finds its
    repository), or None."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / MANIFEST).is_file():
            return Tree.at(folder)
    return None


DEFAULT = Tree()
