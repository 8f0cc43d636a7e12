"""The generation stamp, which makes a no-op `clforge generate` take milliseconds.

A stamp records a digest of everything generation reads (the tree's specs/ and templates/,
clforge's own code, the versions of the libraries that load and render) beside a digest of
everything it owns on disk afterwards. When both still match, the files on disk are exactly what
generation would write, and nothing is loaded or rendered. Any difference (an edited spec or
template, a hand-edited or deleted output, debris of an interrupted run, another clforge)
misses, and generation runs in full. Stamps live in clforge's cache folder, one per tree, each
in the checked envelope (core/envelope.py); a damaged one is removed with a warning and
generation runs in full.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from importlib import metadata
from pathlib import Path

from clforge.core import envelope
from clforge.core.cache_dir import private_dir
from clforge.core.tree import Tree
from clforge.emit.writer import owned

_CODE = Path(__file__).resolve().parents[1]  # the generator package
_LIBRARIES = ("jinja2", "pyyaml", "pydantic")


def _files(base: Path, pattern: str) -> list[Path]:
    return sorted(p for p in base.rglob(pattern) if p.is_file()) if base.is_dir() else []


def _digest(paths: list[tuple[str, Path]], extra: str = "") -> str:
    h = hashlib.sha256(extra.encode())
    for name, path in paths:
        h.update(name.encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def inputs_digest(tree: Tree) -> str:
    files = [
        (f"{label}/{p.relative_to(base)}", p)
        for label, base, pattern in (
            ("specs", tree.specs, "*"),
            ("templates", tree.templates, "*"),
            ("code", _CODE, "*.py"),
        )
        for p in _files(base, pattern)
    ]
    versions = ",".join(f"{lib}={metadata.version(lib)}" for lib in _LIBRARIES)
    return _digest(files, versions)


def outputs_digest(tree: Tree, managed: tuple[str, ...]) -> tuple[str, int]:
    rels = owned(tree.root, managed)
    return _digest([(rel, tree.root / rel) for rel in rels]), len(rels)


KIND = "stamp"


def _path(tree: Tree) -> tuple[Path, bytes] | None:
    """Where the tree's stamp lives, and its envelope's origin (the tree's folder)."""
    base = private_dir("stamps")
    if base is None:
        return None
    root = str(tree.root.resolve())
    return base / f"{hashlib.sha256(root.encode()).hexdigest()[:24]}.stamp", envelope.digest(root)


def fresh(tree: Tree, managed: tuple[str, ...]) -> int | None:
    """The number of files generation owns when the tree's stamp still holds, else None."""
    where = _path(tree)
    if where is None:
        return None
    path, origin = where
    status, data = envelope.read(path, KIND, origin, "the generation stamp")
    try:
        stamp = json.loads(data) if status is envelope.Status.OK else None
    except ValueError:  # intact, so written by a clforge that wrote no JSON: never seen
        return None
    if not isinstance(stamp, dict) or stamp.get("inputs") != inputs_digest(tree):
        return None
    outputs, count = outputs_digest(tree, managed)
    return count if stamp.get("outputs") == outputs else None


def record(tree: Tree, managed: tuple[str, ...]) -> None:
    """Stamp the tree as generated from its present inputs (a read-only cache is no error)."""
    where = _path(tree)
    if where is None:
        return
    outputs, _ = outputs_digest(tree, managed)
    text = json.dumps({"inputs": inputs_digest(tree), "outputs": outputs, "root": str(tree.root)})
    with contextlib.suppress(OSError):
        envelope.write(where[0], KIND, where[1], text.encode())
