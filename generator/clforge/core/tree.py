"""Where a clforge tree keeps its specs, templates, tuning files and generated package.

A tree is clforge's own (the checkout, or the installed package's data: see
:mod:`clforge.core.resources`) or an extension's: a folder with `specs/`, `templates/` and a
manifest, `clforge.yaml` (:mod:`clforge.core.manifest`), naming the tree and the Python package
that `clforge generate` writes there (clforge's is the folder `generated/`, imported as
`clforge.generated`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clforge.core import resources
from clforge.core.manifest import BUILTIN, BUILTIN_NAME, BUILTIN_PACKAGE, MANIFEST, read_manifest

ROOT = resources.builtin_root()
# the prefix under which every tree's templates reach clforge's own (its shared macros):
# "clforge/_common/macros.cl.j2"
SHARED_TEMPLATES = "clforge"


@dataclass(frozen=True)
class Tree:
    """The folders of one clforge tree (clforge's own by default)."""

    root: Path = ROOT
    name: str = BUILTIN_NAME
    package: str = BUILTIN_PACKAGE
    # where the generated package is when not `root/package` (clforge's own, installed)
    generated_at: Path | None = None

    @classmethod
    def at(cls, root: Path) -> Tree:
        """The tree at `root`, named by its `clforge.yaml` (a folder without one is read as a
        tree named like clforge's, generating `generated/`: a scratch copy of clforge's)."""
        root = Path(root)
        if root.resolve() == ROOT.resolve():
            return DEFAULT
        m = read_manifest(root) or BUILTIN
        return cls(root, m.name, m.package)

    @property
    def specs(self) -> Path:
        return self.root / "specs"

    @property
    def templates(self) -> Path:
        return self.root / "templates"

    @property
    def tuning(self) -> Path:
        """The tuning database: one file per device (see :mod:`clforge.params.database`)."""
        return self.root / "tuning"

    @property
    def tuning_out(self) -> Path:
        """Where `clforge tune` writes this tree's entries: its tuning/ folder, or, for an
        installed clforge, the user's tuning folder (never site-packages)."""
        return self.tuning if self.writable else resources.user_tuning_folders()[0]

    @property
    def profiles(self) -> Path:
        """Device profiles shipped with the tree (clforge's: see :mod:`clforge.device`)."""
        return self.root / "profiles"

    @property
    def generated(self) -> Path:
        """The generated package: registry.py, ops.py and kernels/."""
        return self.generated_at or self.root / self.package

    @property
    def writable(self) -> bool:
        """Whether `clforge generate` and `clforge tune` may write here: any tree but the data
        of an installed clforge (site-packages is the installer's)."""
        return not (self.name == BUILTIN_NAME and resources.installed())

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


BUILTIN_MODULE = "clforge.generated"  # clforge's generated package, by import name
DEFAULT = Tree(generated_at=resources.generated_dir())
