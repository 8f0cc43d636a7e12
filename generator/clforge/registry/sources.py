"""The trees whose ops make up the default registry: clforge's own, then its extensions.

An extension is a folder with `specs/`, `templates/` and a manifest (`clforge.yaml`, naming the
tree and its generated package), or the generated package alone once installed. Extensions are
found three ways, in this order:

1. the `clforge.extensions` entry-point group of installed distributions: the value names the
   generated package (``swiglu = "swiglu_gen"``) or an object that is a folder path;
2. `CLFORGE_PATH`: folders (extension roots or generated packages), separated by `os.pathsep`;
3. :func:`register`, from Python: a folder, a package name or the package module itself
   (importing an extension's generated `ops` module registers its package).

A broken entry point (a distribution the user may not control) is skipped with a warning; a
broken `CLFORGE_PATH` entry or :func:`register` call is an :class:`ExtensionError`.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from clforge.core.manifest import BUILTIN_NAME, MANIFEST
from clforge.core.tree import DEFAULT, Tree
from clforge.errors import ClforgeWarning, ExtensionError, SpecError

ENTRY_POINTS = "clforge.extensions"
ENV = "CLFORGE_PATH"


@dataclass(frozen=True)
class Source:
    """One tree of the registry: its name and package, where its generated package is, its
    folder (specs/, templates/, tuning/) when it has one here, and how it was found."""

    name: str
    package: str
    generated: Path
    root: Path | None
    found_by: str

    @property
    def tree(self) -> Tree | None:
        """The tree, when its folder is here (an installed package may come without one)."""
        if self.root is None:
            return None
        apart = self.generated if self.generated != self.root / self.package else None
        return Tree(self.root, self.name, self.package, apart)


BUILTIN = Source(BUILTIN_NAME, DEFAULT.package, DEFAULT.generated, DEFAULT.root, "built-in")


@dataclass
class _Registrations:
    """What :func:`register` added, and a count of changes (a cache key)."""

    found: list[Source] = field(default_factory=list)
    generation: int = 0


_registered = _Registrations()
_lock = threading.Lock()
_cache: dict[tuple[int, str | None], tuple[Source, ...]] = {}


def register(what: str | Path | ModuleType) -> Source:
    """Add an extension to the default registry: its folder (with `clforge.yaml`), its generated
    package's folder, or the package by name or module. Registering one twice is harmless."""
    found = _source_of(what, "register()")
    with _lock:
        if any(_same(found, s) for s in sources()):
            return found
        _registered.found.append(found)
        _registered.generation += 1
        try:
            sources()  # a name another tree has is an error now, at the call
        except ExtensionError:
            _registered.found.pop()
            _registered.generation += 1
            raise
    return found


def unregister(name: str) -> None:
    """Drop the extension registered by :func:`register` under the tree name `name`."""
    with _lock:
        _registered.found[:] = [s for s in _registered.found if s.name != name]
        _registered.generation += 1


def key() -> tuple[int, str | None]:
    """Changes whenever the set of sources may have: a registration, or `CLFORGE_PATH`."""
    return (_registered.generation, os.environ.get(ENV))


def sources() -> tuple[Source, ...]:
    """The trees of the default registry: the built-in one first, then each extension once."""
    k = key()
    cached = _cache.get(k)
    if cached is None:
        found = [BUILTIN, *_entry_points(), *_path_entries(k[1]), *_registered.found]
        cached = _cache[k] = _unique(found)
    return cached


def by_root(root: Path) -> Source | None:
    """The registered source whose folder is `root`."""
    for s in sources():
        if s.root is not None and s.root.resolve() == root.resolve():
            return s
    return None


def of_tree(tree: Tree, found_by: str = "--root") -> Source:
    """A tree as a source (e.g. one named by `--root`, registered or not)."""
    return Source(tree.name, tree.package, tree.generated, tree.root, found_by)


# --- finding them -------------------------------------------------------------------------------


def _same(a: Source, b: Source) -> bool:
    return a.name == b.name and a.generated.resolve() == b.generated.resolve()


def _unique(found: list[Source]) -> tuple[Source, ...]:
    out: list[Source] = []
    for s in found:
        twin = next((o for o in out if o.name == s.name), None)
        if twin is None:
            out.append(s)
        elif not _same(twin, s):
            raise ExtensionError(
                f"two trees are named {s.name!r}: {twin.generated} ({twin.found_by}) and "
                f"{s.generated} ({s.found_by}); rename one in its clforge.yaml"
            )
    return tuple(out)


def _entry_points() -> list[Source]:
    out = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINTS):
        dist = ep.dist.name if ep.dist is not None else "?"
        how = f"entry point {ep.name!r} of {dist}"
        try:
            target: object = ep.load() if ":" in ep.value else ep.value
            out.append(_source_of(target, how))  # type: ignore[arg-type]
        except Exception as exc:  # a third party's package must not break clforge
            warnings.warn(
                f"clforge: skipping the extension of {how}: {exc}", ClforgeWarning, stacklevel=2
            )
    return out


def _path_entries(value: str | None) -> list[Source]:
    return [_source_of(Path(p), ENV) for p in (value or "").split(os.pathsep) if p.strip()]


def _source_of(what: object, how: str) -> Source:
    if isinstance(what, ModuleType):
        what = what.__name__
    if isinstance(what, Path) or (isinstance(what, str) and os.sep in what):
        return _from_folder(Path(what), how)
    if isinstance(what, str):
        if Path(what).is_dir() and not _importable(what):
            return _from_folder(Path(what), how)
        return _from_package(what, how)
    raise ExtensionError(f"{how}: cannot register a {type(what).__name__} ({what!r})")


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _from_folder(folder: Path, how: str) -> Source:
    folder = folder.expanduser().resolve()
    if not folder.is_dir():
        raise ExtensionError(f"{how}: {folder} is not a folder")
    if (folder / MANIFEST).is_file():
        tree = _tree_at(folder, how)
        _importable_from(folder)
        return Source(tree.name, tree.package, tree.generated, folder, how)
    if (folder / "registry.py").is_file():  # a generated package's own folder
        return _from_generated(folder, folder.name, how)
    raise ExtensionError(
        f"{how}: {folder} is neither an extension (no {MANIFEST}) nor a generated package "
        "(no registry.py)"
    )


def _from_package(name: str, how: str) -> Source:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise ExtensionError(f"{how}: cannot find package {name!r}: {exc}") from None
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError(f"{how}: {name!r} is not an importable package")
    return _from_generated(Path(next(iter(spec.submodule_search_locations))), name, how)


def _from_generated(folder: Path, package: str, how: str) -> Source:
    """A generated package: its tree is the folder above when that holds the manifest that
    names this package (a source checkout or an editable install), else it has none here."""
    folder = folder.resolve()
    parent = folder.parent
    if (parent / MANIFEST).is_file():
        tree = _tree_at(parent, how)
        if tree.package == folder.name:
            _importable_from(parent)
            return Source(tree.name, tree.package, folder, parent, how)
    name = _name_in_registry(folder, how)
    return Source(name, package, folder, None, how)


def _tree_at(folder: Path, how: str) -> Tree:
    try:
        return Tree.at(folder)
    except SpecError as exc:
        raise ExtensionError(f"{how}: {folder / MANIFEST}: {exc}") from None


def _name_in_registry(folder: Path, how: str) -> str:
    """The tree name a generated registry records (`TREE = ...`), read without importing."""
    try:
        for line in (folder / "registry.py").read_text(encoding="utf-8").splitlines():
            if line.startswith("TREE = "):
                value = line.removeprefix("TREE = ").split("#")[0].strip()
                name = ast.literal_eval(value) if value[:1] in "'\"" else None
                if isinstance(name, str) and name:
                    return name
    except OSError as exc:
        raise ExtensionError(f"{how}: cannot read {folder / 'registry.py'}: {exc}") from None
    raise ExtensionError(
        f"{how}: {folder / 'registry.py'} records no tree name; regenerate it with "
        "`clforge generate` in the extension's folder"
    )


def _importable_from(root: Path) -> None:
    """An extension's folder goes on sys.path (at the end), so that its generated package and
    its reference modules import as they would once installed."""
    if str(root) not in sys.path:
        sys.path.append(str(root))


__all__ = [
    "BUILTIN",
    "ENTRY_POINTS",
    "ENV",
    "ExtensionError",
    "Source",
    "by_root",
    "key",
    "of_tree",
    "register",
    "sources",
    "unregister",
]
