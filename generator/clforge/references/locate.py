"""An op's NumPy reference, found by the `module:name` path its spec names.

The built-in ops name the references of this package (``clforge.references.elementwise:relu``);
an extension names its own module (``my_kernels.refs:swiglu``), importable as installed or from
the extension's root folder. The path may name a :class:`Reference` or a bare function
``(inputs, attrs) -> outputs``, which gets the default input domains and cases.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Protocol

from clforge.errors import ReferenceLookupError
from clforge.references.base import Reference


class Referenced(Protocol):
    """What names a reference: an op signature (:class:`clforge.registry.records.OpSig`)."""

    @property
    def name(self) -> str: ...

    @property
    def reference(self) -> str | None: ...


def problem(path: str, roots: Sequence[Path] = ()) -> str | None:
    """Why `path` does not resolve to a reference (None when it does)."""
    try:
        _resolve(path, tuple(roots))
    except ReferenceLookupError as exc:
        return str(exc)
    return None


def resolve(path: str, roots: Sequence[Path] = ()) -> Reference:
    """The reference at `path` (`module:name`); modules are imported as installed, else from
    `roots` (an extension's folder)."""
    return _resolve(path, tuple(roots))


def reference_of(op: Referenced, roots: Sequence[Path] = ()) -> Reference:
    """The reference of `op`, or a ReferenceLookupError saying that its spec names none."""
    if not op.reference:
        raise ReferenceLookupError(
            f"op {op.name!r} has no NumPy reference: its spec needs `reference: module:name`"
        )
    try:
        return _resolve(op.reference, tuple(roots))
    except ReferenceLookupError as exc:
        raise ReferenceLookupError(f"op {op.name!r}: {exc}") from None


@cache
def _resolve(path: str, roots: tuple[Path, ...]) -> Reference:
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ReferenceLookupError(
            f"reference {path!r} is not a path `module:name` (e.g. my_kernels.refs:swiglu)"
        )
    module = _import(module_name, roots, path)
    target = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ReferenceLookupError(
                f"reference {path!r}: module {module_name!r} has no {attr!r}"
            ) from None
    if isinstance(target, Reference):
        return target
    if callable(target):
        return Reference(target)
    raise ReferenceLookupError(
        f"reference {path!r} is a {type(target).__name__}, not a Reference or a function"
    )


def _import(module_name: str, roots: tuple[Path, ...], path: str) -> object:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".", maxsplit=1)[0]
        if exc.name is None or top != exc.name.split(".")[0] or not roots:
            raise ReferenceLookupError(f"reference {path!r}: cannot import: {exc}") from None
    except Exception as exc:  # the module itself is broken: say so, not a traceback
        raise ReferenceLookupError(
            f"reference {path!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    for root in roots:  # an extension's own modules, importable from its folder
        if str(root) not in sys.path:
            sys.path.append(str(root))
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ReferenceLookupError(
            f"reference {path!r}: cannot import {module_name!r}, neither installed nor from the "
            f"tree's folder: {exc}"
        ) from None
    except Exception as exc:
        raise ReferenceLookupError(
            f"reference {path!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
