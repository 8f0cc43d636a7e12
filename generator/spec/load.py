"""Loading spec files into :class:`OpSpec` models, with every problem located at file:line:col.

Loading a file never raises anything but :class:`SpecError`, which carries all of the file's
diagnostics at once: YAML syntax, structure (via pydantic, re-worded with the valid keys), and
the meaning that spans fields (names, dims, guards, templates, coverage). An op of a family
(`family:`) is merged with its family first (:mod:`generator.spec.families`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from generator.core.diagnostics import Collector
from generator.core.located_yaml import LocMap, YamlProblem, load_yaml, locate
from generator.core.tree import DEFAULT, Tree
from generator.errors import Diagnostic, Location, SpecError
from generator.registry.records import OpSig
from generator.spec.families import (
    Families,
    Membership,
    check_member,
    load_families,
    mapping_problem,
)
from generator.spec.files import read_spec, spec_files
from generator.spec.model import OpSpec
from generator.spec.op_checks import check_op
from generator.spec.signature import signature_of
from generator.spec.structure import structure_findings

__all__ = [
    "LoadedSpec",
    "check_text",
    "duplicate_ops",
    "load_specs",
    "read_spec",
    "spec_files",
]


@dataclass(frozen=True)
class LoadedSpec:
    """A valid spec, the file it came from, and its located YAML tree for later messages (for
    an op of a family, the merged tree, whose inherited values are located in the family file)."""

    path: str  # as shown in messages: relative to the tree's root
    spec: OpSpec
    tree: LocMap
    membership: Membership | None = None

    def signature(self) -> OpSig:
        return signature_of(self.spec, self.path)

    def where(self, *keys: int | str, at_key: bool = False) -> Location:
        """Where the value at `keys` was written (in the family file, if inherited)."""
        return locate(self.tree, keys, at_key=at_key) or Location(self.path)

    def diagnostic(self, keys: tuple[int | str, ...], rule: str, message: str) -> Diagnostic:
        """A finding on the value at `keys`, in this op's own file: one on an inherited value
        is reported at the member's override or `family:`, naming the family's line."""
        loc = self.where(*keys)
        if self.membership is not None:
            loc, message = self.membership.placed(self.path, self.tree, keys, loc, message)
        return Diagnostic(loc, rule, message)


# --- entry points -------------------------------------------------------------------------------


def check_text(
    text: str, path: str, tree: Tree = DEFAULT, families: Families | None = None
) -> tuple[LoadedSpec | None, list[Diagnostic]]:
    """Load one spec from text; return it (if valid) and every diagnostic found. An op of a
    family is resolved in `families` (default: the tree's); if its family is broken, the
    family's findings are returned (the same for every member: report them once)."""
    try:
        doc = load_yaml(text, path)
    except YamlProblem as exc:
        return None, [exc.diagnostic]
    if not isinstance(doc, LocMap):
        return None, [mapping_problem(doc, path, "a spec file", "op")]
    if "family" in doc:
        if families is None:
            families = load_families(tree.specs, tree)
        found, diags = check_member(doc, path, tree, families)
        if found is None:
            return None, diags
        spec, merged, membership = found
        return LoadedSpec(path, spec, merged, membership), []
    col = Collector(path, doc)
    try:
        spec = OpSpec.model_validate(doc)
    except ValidationError as err:
        structure_findings(col, err)
        return None, col.diags
    stem = Path(path).name.split(".")[0]
    check_op(col, spec, tree, stem)
    if col.diags:
        return None, col.diags
    return LoadedSpec(path, spec, doc), []


def duplicate_ops(loaded: Sequence[LoadedSpec]) -> list[Diagnostic]:
    """An op defined by two files (e.g. add.yaml and add.v2.yaml): the later one is reported."""
    diags: list[Diagnostic] = []
    ops: dict[str, str] = {}
    for spec in loaded:
        if spec.spec.op in ops:
            diags.append(
                Diagnostic(
                    spec.where("op"),
                    "duplicate-name",
                    f"op {spec.spec.op!r} is also defined in {ops[spec.spec.op]}",
                )
            )
        else:
            ops[spec.spec.op] = spec.path
    return diags


def load_specs(tree: Tree = DEFAULT, files: list[Path] | None = None) -> list[LoadedSpec]:
    """Load every spec of a tree; raise one SpecError carrying all diagnostics of all files,
    the tree's family files included."""
    loaded: list[LoadedSpec] = []
    families = load_families(tree.specs, tree)
    diags: list[Diagnostic] = families.diagnostics()
    for f in files if files is not None else spec_files(tree.specs):
        text, problems = read_spec(f, tree)
        diags.extend(problems)
        if text is None:
            continue
        spec, found = check_text(text, tree.rel(f), tree, families)
        diags.extend(found)
        if spec is not None:
            loaded.append(spec)
    diags.extend(duplicate_ops(loaded))
    if diags:
        raise SpecError(sorted(set(diags)))
    return loaded
