"""A tree's manifest, `clforge.yaml`: the tree's name and the Python package it generates.

clforge's own tree names itself `clforge` and generates the package `generated`; an extension
(a folder of specs and templates in another repository) names itself and its package, so that
trees never collide: each generates its own package, and one registry holds them all.

```yaml
name: swiglu_ops          # the tree's name: shown by `clforge list`/`explain`, unique
package: swiglu_ops_gen   # the package `clforge generate` writes (registry, eager ops, kernels)
```
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from pathlib import Path

from clforge.core.located_yaml import LocMap, YamlProblem, load_yaml, locate
from clforge.errors import Diagnostic, Location, SpecError

MANIFEST = "clforge.yaml"
BUILTIN_NAME = "clforge"
BUILTIN_PACKAGE = "generated"
_NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")
_KEYS = {"name": "the tree's name", "package": "the Python package it generates"}


@dataclass(frozen=True)
class Manifest:
    name: str
    package: str


BUILTIN = Manifest(BUILTIN_NAME, BUILTIN_PACKAGE)


def read_manifest(root: Path, *, builtin: bool = False) -> Manifest | None:
    """The manifest of the tree at `root` (None when it has none); a broken one is a SpecError
    located in the file. Only clforge's own tree (`builtin`) may take clforge's names."""
    path = root / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([Diagnostic(Location(MANIFEST), "io", f"cannot read: {exc}")]) from None
    try:
        doc = load_yaml(text, MANIFEST)
    except YamlProblem as exc:
        raise SpecError([exc.diagnostic]) from None
    diags: list[Diagnostic] = []

    def bad(keys: tuple[str, ...], rule: str, message: str) -> None:
        loc = locate(doc, keys) if isinstance(doc, LocMap) else None
        diags.append(Diagnostic(loc or Location(MANIFEST, 1, 1), rule, message))

    if not isinstance(doc, LocMap):
        bad((), "type", "clforge.yaml must hold one mapping with the keys name: and package:")
        raise SpecError(diags)
    for key in doc:
        if key not in _KEYS:
            bad((key,), "unknown-key", f"unknown key {key!r}; the keys are: name, package")
    values: dict[str, str] = {}
    for key, what in _KEYS.items():
        value = doc.get(key)
        if value is None:
            bad((), "missing-key", f"required key {key!r} ({what}) is missing")
        elif not isinstance(value, str) or not _NAME.fullmatch(value) or keyword.iskeyword(value):
            bad(
                (key,),
                "c-identifier",
                f"{key} {value!r} must be a lowercase Python identifier (a-z, 0-9, _; at most 48)",
            )
        else:
            values[key] = value
    if not builtin:
        if values.get("name") == BUILTIN_NAME:
            bad(("name",), "duplicate-name", f"the name {BUILTIN_NAME!r} is clforge's own")
        if values.get("package") in (BUILTIN_PACKAGE, "generator"):
            bad(("package",), "duplicate-name", f"the package {values['package']!r} is clforge's")
    if diags:
        raise SpecError(diags)
    return Manifest(values["name"], values["package"])
