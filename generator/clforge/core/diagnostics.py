"""The one collector of located diagnostics, shared by every loader of YAML files (op specs,
device profiles): a finding is added at a key path of the located tree and reported together
with all the others of the file."""

from __future__ import annotations

import re
from typing import Any

from clforge.core.located_yaml import locate
from clforge.errors import Diagnostic, Location, Severity

KeyPath = tuple[int | str, ...]

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def dotted(keys: KeyPath) -> str:
    """`variants[0].launch`; keys that are not plain names are quoted: `inputs['a;b']`."""
    out = ""
    for k in keys:
        if isinstance(k, int):
            out += f"[{k}]"
        elif not _PLAIN_KEY.match(str(k)):
            out += f"[{str(k)!r}]"
        else:
            out += f".{k}" if out else str(k)
    return out or "(top level)"


class Collector:
    """Every diagnostic of one file, each located at a key path of its YAML tree (or at the file
    when the path is not in the tree)."""

    def __init__(self, path: str, tree: Any) -> None:
        self.path = path
        self.tree = tree
        self.diags: list[Diagnostic] = []

    def where(self, keys: KeyPath, *, at_key: bool = False) -> Location:
        return locate(self.tree, keys, at_key=at_key) or Location(self.path)

    def add(
        self,
        keys: KeyPath,
        rule: str,
        message: str,
        *,
        at_key: bool = False,
        severity: Severity = Severity.ERROR,
    ) -> None:
        self.diags.append(Diagnostic(self.where(keys, at_key=at_key), rule, message, severity))
