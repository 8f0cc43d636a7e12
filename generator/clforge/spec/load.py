"""Loading spec files into :class:`OpSpec` models, with every problem located at file:line:col.

Loading a file never raises anything but :class:`SpecError`, which carries all of the file's
diagnostics at once: YAML syntax, structure (via pydantic, re-worded with the valid keys), and
the meaning that spans fields (names, dims, guards, templates, coverage). An op of a family
(`family:`) is merged with its family first (:mod:`clforge.spec.families`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from clforge.core.diagnostics import Collector
from clforge.core.located_yaml import LocList, LocMap, YamlProblem, load_yaml, locate
from clforge.core.manifest import BUILTIN_NAME
from clforge.core.tree import DEFAULT, Tree
from clforge.errors import Diagnostic, Location, Severity, SpecError
from clforge.registry.records import OpSig
from clforge.spec.extends import check_extends, defining_tree
from clforge.spec.families import (
    Families,
    Membership,
    check_member,
    load_families,
    mapping_problem,
)
from clforge.spec.files import read_spec, spec_files
from clforge.spec.model import ExtendsSpec, OpSpec
from clforge.spec.op_checks import check_op
from clforge.spec.signature import signature_of
from clforge.spec.structure import SALVAGE_BLIND, salvage, structure_findings

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
    extends: str | None = None  # `extends:` file: the tree whose op these variants serve

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
    if "extends" in doc and "op" not in doc:
        ext, diags = check_extends(doc, path, tree, check_text)
        if ext is None:
            return None, diags
        return LoadedSpec(path, ext.spec, ext.tree, extends=ext.base), []
    if "family" in doc:
        return check_text_member(doc, path, tree, families)
    col = Collector(path, doc)
    stem = Path(path).name.split(".")[0]
    try:
        spec = OpSpec.model_validate(doc)
    except ValidationError as err:
        structure_findings(col, err)
        return None, col.diags + salvaged_findings(doc, path, err, tree, stem)
    check_op(col, spec, tree, stem)
    _check_defined_elsewhere(col, spec.op, tree)
    if col.diags:
        return None, col.diags
    return LoadedSpec(path, spec, doc), []


def salvaged_findings(
    doc: LocMap, path: str, err: ValidationError, tree: Tree, stem: str
) -> list[Diagnostic]:
    """Every later check's findings on the parts of a broken spec that parsed (see
    :func:`clforge.spec.structure.salvage`), so that one lint run reports all of a file."""
    saved = salvage(doc, err)
    if saved is None:
        return []
    spec, rest = saved
    col = Collector(path, rest)
    check_op(col, spec, tree, stem)
    return [renumbered(d, doc, rest) for d in col.diags if d.rule not in SALVAGE_BLIND]


def renumbered(d: Diagnostic, doc: LocMap, rest: LocMap) -> Diagnostic:
    """`d`, found on the salvaged `rest`, with `variants[i]` in its message numbered as in the
    file (`doc`): variants cut away before it shift the indices."""
    if not isinstance(doc.get("variants"), LocList) or not isinstance(rest.get("variants"), list):
        return d
    index = {id(v): i for i, v in enumerate(doc["variants"])}
    orig = [index.get(id(v), i) for i, v in enumerate(rest["variants"])]

    def fix(m: re.Match[str]) -> str:
        j = int(m.group(1))
        return f"variants[{orig[j] if j < len(orig) else j}]"

    return dataclasses.replace(d, message=re.sub(r"variants\[(\d+)\]", fix, d.message))


STRUCTURE_RULES = frozenset({"unknown-key", "missing-key", "type", "vocabulary"})


def clean_variants(
    text: str,
    path: str,
    findings: Sequence[Diagnostic],
    tree: Tree = DEFAULT,
    families: Families | None = None,
) -> LoadedSpec | None:
    """A spec with findings, reduced to the variants that have none (by line: a variant owns
    the lines from its first to the next's), so that lint can still render their templates;
    None when an op-level finding (beyond a key that validation dropped) makes that moot.
    An `extends:` file keeps its clean variants, checked again against the op they serve; an
    op of a family omits the variants whose overrides have findings (`omit_variants:`)."""
    try:
        doc = load_yaml(text, path)
    except YamlProblem:
        return None
    if not isinstance(doc, LocMap):
        return None
    if "extends" in doc and "op" not in doc:
        return _clean_extends(doc, path, findings, tree)
    if "family" in doc:
        return _clean_member(doc, path, findings, tree, families)
    try:
        spec, rest = OpSpec.model_validate(doc), doc
    except ValidationError as err:
        saved = salvage(doc, err)
        if saved is None:
            return None
        spec, rest = saved
    bad = _owners(findings, path, [v.loc.line for v in rest["variants"]])
    if bad is None:
        return None
    keep = [i for i in range(len(spec.variants)) if i not in bad]
    if not keep:
        return None
    variants = tuple(spec.variants[i] for i in keep)
    reduced = _with(rest, "variants", _kept(rest["variants"], keep))
    return LoadedSpec(path, spec.model_copy(update={"variants": variants}), reduced)


def _owners(findings: Sequence[Diagnostic], path: str, starts: list[int]) -> set[int] | None:
    """The indices of the parts (variants, overrides) starting at lines `starts`, in order,
    that hold an error of `path` (a part owns the lines from its first to the next's); None when
    an error that is not structural lies outside them all (the op itself is in question)."""
    ends = [*starts[1:], 1 << 30] if starts else []  # no parts (`variants: {}`): none own a line
    bad: set[int] = set()
    for d in findings:
        if d.loc.path != path or d.severity is not Severity.ERROR:
            continue
        owners = [
            i for i, (a, b) in enumerate(zip(starts, ends, strict=True)) if a <= d.loc.line < b
        ]
        if owners:
            bad.update(owners)
        elif d.rule not in STRUCTURE_RULES:
            return None
    return bad


def _kept(items: LocList, keep: Sequence[int]) -> LocList:
    out = LocList(items[i] for i in keep)
    out.loc, out.item_locs = items.loc, [items.item_locs[i] for i in keep]
    return out


def _with(doc: LocMap, key: str, value: object, at: str | None = None) -> LocMap:
    """A copy of `doc` with `key` set to `value` (a new key located at key `at`'s place)."""
    out = LocMap(doc)
    out.loc, out.key_locs, out.value_locs = doc.loc, dict(doc.key_locs), dict(doc.value_locs)
    out[key] = value
    if key not in doc.key_locs:
        out.key_locs[key] = doc.key_locs[at] if at else doc.loc
        out.value_locs[key] = doc.value_locs[at] if at else doc.loc
    return out


def _clean_extends(
    doc: LocMap, path: str, findings: Sequence[Diagnostic], tree: Tree
) -> LoadedSpec | None:
    """The variants of an `extends:` file that have no findings, checked against their op."""
    try:
        ExtendsSpec.model_validate(doc)
        rest: LocMap = doc
    except ValidationError as err:
        saved = salvage(doc, err, ExtendsSpec)
        if saved is None:
            return None
        rest = saved[1]
    if not isinstance(rest.get("variants"), LocList):
        return None
    bad = _owners(findings, path, [v.loc.line for v in rest["variants"]])
    keep = [i for i in range(len(rest["variants"])) if bad is not None and i not in bad]
    if not keep:
        return None
    ext, _ = check_extends(
        _with(rest, "variants", _kept(rest["variants"], keep)), path, tree, check_text
    )
    return None if ext is None else LoadedSpec(path, ext.spec, ext.tree, extends=ext.base)


def _clean_member(
    doc: LocMap,
    path: str,
    findings: Sequence[Diagnostic],
    tree: Tree,
    families: Families | None,
) -> LoadedSpec | None:
    """An op of a family without the variants whose overrides have findings (omitted)."""
    overrides = doc.get("variants")
    if not isinstance(overrides, LocMap):
        return None
    names = sorted(overrides, key=lambda n: overrides.key_locs[n].line)
    bad = _owners(findings, path, [overrides.key_locs[n].line for n in names])
    if not bad:
        return None  # nothing to leave out: the findings are elsewhere
    dropped = [names[i] for i in sorted(bad)]
    kept = LocMap({n: overrides[n] for n in names if n not in dropped})
    kept.loc = overrides.loc
    kept.key_locs = {n: overrides.key_locs[n] for n in kept}
    kept.value_locs = {n: overrides.value_locs[n] for n in kept}
    before = doc.get("omit_variants")
    omit = LocList([*(before if isinstance(before, list) else ()), *dropped])
    omit.loc = before.loc if isinstance(before, LocList) else doc.value_locs["variants"]
    omit.item_locs = [
        *(before.item_locs if isinstance(before, LocList) else ()),
        *(overrides.key_locs[n] for n in dropped),
    ]
    reduced = _with(_with(doc, "variants", kept), "omit_variants", omit, at="variants")
    found, _ = check_text_member(reduced, path, tree, families)
    return found


def check_text_member(
    doc: LocMap, path: str, tree: Tree, families: Families | None
) -> tuple[LoadedSpec | None, list[Diagnostic]]:
    """Check an op of a family from its located tree (see :func:`check_text`)."""
    if families is None:
        families = load_families(tree.specs, tree)
    found, diags = check_member(doc, path, tree, families)
    if found is None:
        return None, diags
    spec, merged, membership = found
    col = Collector(path, doc)
    _check_defined_elsewhere(col, spec.op, tree)
    if col.diags:
        return None, col.diags
    return LoadedSpec(path, spec, merged, membership), []


def _check_defined_elsewhere(col: Collector, op: str, tree: Tree) -> None:
    """An extension's op must not be one another tree defines (it may add variants to it)."""
    if tree.name == BUILTIN_NAME:
        return
    other = defining_tree(op, tree)
    if other is not None:
        col.add(
            ("op",),
            "duplicate-name",
            f"op {op!r} is already defined by tree {other.name!r} ({other.specs / (op + '.yaml')});"
            f" to add variants to it, write `extends: {op}` instead of `op:`",
        )


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
