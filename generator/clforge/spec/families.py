"""Op families: one body (dims, tensors, dtypes, attrs, variants, ...) shared by several ops.

A family lives in `specs/families/<family>.yaml` and is checked once, as an op named after it:
a mistake in it is reported there, once, however many ops use it. An extension's ops may also
use clforge's own families (those the extension does not define itself): they share the
family's signature, dtypes, call convention, launch, parameters and requirements, and give each
variant they keep a template of their own tree (clforge's templates are written for clforge's
ops: they pick the math by the op's name). An op of the family,
`specs/<op>.yaml`, names it with `family:`; its other keys replace the family's, `variants:`
changes the family's variants by name and `omit_variants:` drops some (:mod:`family_model`).

The merge happens on the located YAML trees, before the op is validated, so every value keeps
the file:line:col it was written at. A finding on the merged op that points into the family
file, which is valid on its own, comes from what the member changed: it is reported in the
member's file (at the override of that variant, or at `family:`), naming the family's line.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from clforge.core.diagnostics import Collector, KeyPath
from clforge.core.located_yaml import LocList, LocMap, YamlProblem, load_yaml
from clforge.core.manifest import BUILTIN_NAME
from clforge.core.tree import DEFAULT, Tree
from clforge.errors import Diagnostic, Location, Severity
from clforge.spec.family_model import MEMBER_ONLY, NOT_INHERITED, FamilySpec, MemberSpec
from clforge.spec.files import FAMILIES, family_files, read_spec
from clforge.spec.model import OpSpec
from clforge.spec.op_checks import check_op
from clforge.spec.structure import structure_findings


@dataclass(frozen=True)
class FamilyDef:
    """A valid family: its name, its file, and the file's located tree."""

    name: str
    path: str
    tree: LocMap
    shared: bool = False  # clforge's own, used by an extension's op

    @property
    def variant_names(self) -> list[str]:
        return [v["name"] for v in self.tree["variants"]]


@dataclass(frozen=True)
class Families:
    """The families of one specs folder, valid or not, by name (the file's stem)."""

    folder: str  # as shown in messages, e.g. specs/families
    files: Mapping[str, str]  # name -> path as shown
    defs: Mapping[str, FamilyDef]  # the valid ones
    problems: Mapping[str, tuple[Diagnostic, ...]]  # the findings of each broken one

    def diagnostics(self) -> list[Diagnostic]:
        return [d for found in self.problems.values() for d in found]


def mapping_problem(doc: Any, path: str, what: str, first_key: str) -> Diagnostic:
    """The finding for a file whose document is not one mapping."""
    if doc is None:
        kind = "an empty document"
    elif isinstance(doc, list):
        kind = "a list"
    else:
        kind = f"a single {type(doc).__name__} value"
    return Diagnostic(
        getattr(doc, "loc", None) or Location(path, 1, 1),
        "type",
        f"{what} must hold one mapping ({first_key}:, dims:, inputs:, ...), not {kind}",
    )


def _validate(col: Collector, model: type[BaseModel], doc: LocMap) -> bool:
    try:
        model.model_validate(doc)
    except ValidationError as err:
        structure_findings(col, err, model)
        return False
    return True


def _copy(src: LocMap, keys: list[str], rename: dict[str, str] | None = None) -> LocMap:
    """A located mapping of `keys` of `src` (renamed by `rename`), each keeping its locations."""
    out = LocMap()
    out.loc = src.loc
    out.key_locs = {}
    out.value_locs = {}
    for key in keys:
        new = (rename or {}).get(key, key)
        out[new] = src[key]
        out.key_locs[new] = src.key_locs[key]
        out.value_locs[new] = src.value_locs[key]
    return out


# --- family files -------------------------------------------------------------------------------


def check_family_text(
    text: str, path: str, tree: Tree = DEFAULT
) -> tuple[FamilyDef | None, list[Diagnostic]]:
    """Load one family file from text; return it (if valid) and every diagnostic found."""
    try:
        doc = load_yaml(text, path)
    except YamlProblem as exc:
        return None, [exc.diagnostic]
    if not isinstance(doc, LocMap):
        return None, [mapping_problem(doc, path, "a family file", "family")]
    col = Collector(path, doc)
    if not _validate(col, FamilySpec, doc):
        return None, col.diags
    name = doc["family"]
    file = Path(path).name
    if name != file.removesuffix(".yaml"):
        col.add(
            ("family",),
            "file-name",
            f"family {name!r} must live in a file named {FAMILIES}/{name}.yaml, not "
            f"{FAMILIES}/{file}",
        )
    # the body, checked as an op named after the family
    body = _copy(doc, list(doc), {"family": "op"})
    ops = Collector(path, body)
    if _validate(ops, OpSpec, body):
        check_op(ops, OpSpec.model_validate(body), tree, name, kind="family")
    diags = col.diags + ops.diags
    return (None if diags else FamilyDef(name, path, doc)), diags


def load_families(specs: Path, tree: Tree = DEFAULT) -> Families:
    """Every family of a specs folder (its families/ sub-folder), each checked once."""
    files: dict[str, str] = {}
    defs: dict[str, FamilyDef] = {}
    problems: dict[str, tuple[Diagnostic, ...]] = {}
    for f in family_files(specs):
        name = f.name.removesuffix(".yaml")
        files[name] = tree.rel(f)
        text, found = read_spec(f, tree)
        if text is not None:
            fam, found = check_family_text(text, tree.rel(f), tree)
            if fam is not None:
                defs[name] = fam
        if found:
            problems[name] = tuple(found)
    if tree.name != BUILTIN_NAME:  # an extension: clforge's families too, unless its own
        for name, fam in builtin_families().items():
            if name not in files:
                files[name], defs[name] = fam.path, fam
    return Families(tree.rel(specs / FAMILIES), files, defs, problems)


_BUILTIN: dict[tuple[tuple[str, int], ...], dict[str, FamilyDef]] = {}


def builtin_families() -> Mapping[str, FamilyDef]:
    """clforge's own valid families, as an extension's ops see them: located by full path (so
    that what is inherited is told apart from the extension's files), loaded once per version
    of the files."""
    files = family_files(DEFAULT.specs)
    key = tuple((str(f), f.stat().st_mtime_ns) for f in files)
    if key not in _BUILTIN:
        defs: dict[str, FamilyDef] = {}
        for f in files:
            text, _ = read_spec(f, DEFAULT)
            fam = check_family_text(text, str(f), DEFAULT)[0] if text is not None else None
            if fam is not None:  # a broken one is clforge's to fix: its own lint reports it
                defs[fam.name] = dataclasses.replace(fam, shared=True)
        _BUILTIN.clear()
        _BUILTIN[key] = defs
    return _BUILTIN[key]


# --- members ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Membership:
    """An op's family and the op's own file: where a finding on the merged op belongs."""

    family: FamilyDef
    member: LocMap  # the member file's tree

    def _anchor(self, merged: LocMap, keys: KeyPath) -> Location:
        m = self.member
        overrides = m.get("variants")
        if keys[:1] == ("variants",) and len(keys) > 1 and isinstance(overrides, LocMap):
            variants = merged.get("variants")
            i = keys[1]
            if isinstance(variants, list) and isinstance(i, int) and 0 <= i < len(variants):
                name = variants[i].get("name") if isinstance(variants[i], dict) else None
                if isinstance(name, str) and name in overrides:
                    return overrides.key_locs[name]
        if keys == ("variants",):
            for key in ("omit_variants", "variants"):
                if key in m:
                    return m.key_locs[key]
        return m.value_locs.get("family", m.loc)

    def placed(
        self, path: str, merged: LocMap, keys: KeyPath, loc: Location, message: str
    ) -> tuple[Location, str]:
        """Where a finding at `keys` of the merged op is reported, and its message."""
        if loc.path == path:
            return loc, message
        return (
            self._anchor(merged, keys),
            f"{message} (inherited from family {self.family.name!r} at {loc})",
        )


class MemberCollector(Collector):
    """A collector on a merged op: findings on inherited values go to the member's file."""

    def __init__(self, path: str, tree: LocMap, membership: Membership) -> None:
        super().__init__(path, tree)
        self.membership = membership

    def add(
        self,
        keys: KeyPath,
        rule: str,
        message: str,
        *,
        at_key: bool = False,
        severity: Severity = Severity.ERROR,
    ) -> None:
        loc, message = self.membership.placed(
            self.path, self.tree, keys, self.where(keys, at_key=at_key), message
        )
        self.diags.append(Diagnostic(loc, rule, message, severity))


def _hint(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _changed(variant: LocMap, change: LocMap) -> LocMap:
    """A family variant with the keys of a member's override of it replaced (or added)."""
    out = _copy(variant, [k for k in variant if k not in change])
    for key in change:
        out[key] = change[key]
        out.key_locs[key] = change.key_locs[key]
        out.value_locs[key] = change.value_locs[key]
    return out


def _merged_variants(member: LocMap, fam: FamilyDef, col: Collector) -> LocList:
    """The family's variants, each changed by the member's override of it, less those it omits;
    an override or omission of a variant the family lacks is reported in the member's file."""
    overrides: LocMap = member.get("variants") or LocMap()
    omit = list(member.get("omit_variants") or ())
    names = fam.variant_names
    listed = f"family {fam.name!r} has {', '.join(names)}"
    if fam.shared:
        _own_templates(member, fam, overrides, omit, col)
    for j, name in enumerate(omit):
        if name not in names:
            col.add(
                ("omit_variants", j),
                "family-override",
                f"omit_variants: no variant {name!r} to omit ({listed}){_hint(name, names)}",
            )
        elif name in omit[:j]:
            col.add(("omit_variants", j), "family-override", f"omit_variants: {name!r} twice")
        elif name in overrides:
            col.add(
                ("variants", name),
                "family-override",
                f"variants.{name}: changes a variant that omit_variants drops",
                at_key=True,
            )
    for name in overrides:
        if name not in names:
            col.add(
                ("variants", name),
                "family-override",
                f"variants: no variant {name!r} to change ({listed}; a member changes the "
                f"family's variants by name, it cannot add one){_hint(name, names)}",
                at_key=True,
            )
    source: LocList = fam.tree["variants"]
    out = LocList()
    out.loc = source.loc
    out.item_locs = []
    for item, loc in zip(source, source.item_locs, strict=True):
        name = item["name"]
        if name in omit:
            continue
        out.append(_changed(item, overrides[name]) if name in overrides else item)
        out.item_locs.append(loc)
    return out


def _own_templates(
    member: LocMap, fam: FamilyDef, overrides: LocMap, omit: list[str], col: Collector
) -> None:
    """An extension's op of one of clforge's families writes a template for every variant it
    keeps: clforge's templates serve clforge's ops only (they pick the math by the op's name,
    and import clforge's other templates, which an extension's templates reach under
    `clforge/`)."""
    bare = [
        n
        for n in fam.variant_names
        if n not in omit and not (isinstance(overrides.get(n), dict) and "template" in overrides[n])
    ]
    if bare:
        op = member.get("op") if isinstance(member.get("op"), str) else "<op>"
        col.add(
            ("family",),
            "family-override",
            f"family {fam.name!r} is clforge's ({fam.path}): an extension's op shares its "
            "signature, dtypes, launch and parameters, but not its templates, which are written "
            "for clforge's ops; give each variant it keeps a template of this tree "
            f"(`variants: {{{bare[0]}: {{template: {op}/{bare[0]}.cl.j2}}, ...}}`) or drop it "
            f"(`omit_variants: [...]`): {', '.join(bare)} {'have' if len(bare) > 1 else 'has'} "
            "none",
        )


def merge(member: LocMap, fam: FamilyDef, col: Collector) -> LocMap:
    """The op spec tree of a member: its own keys, then the family's it does not write."""
    own = [k for k in member if k not in MEMBER_ONLY]
    out = _copy(member, own)
    body = fam.tree
    for key in body:
        if key not in NOT_INHERITED and key not in out:
            out[key] = body[key]
            out.key_locs[key] = body.key_locs[key]
            out.value_locs[key] = body.value_locs[key]
    out["variants"] = _merged_variants(member, fam, col)
    out.key_locs["variants"] = body.key_locs["variants"]
    out.value_locs["variants"] = body.value_locs["variants"]
    return out


def check_member(
    doc: LocMap, path: str, tree: Tree, families: Families
) -> tuple[tuple[OpSpec, LocMap, Membership] | None, list[Diagnostic]]:
    """Check an op of a family: its own structure, the family it names, its overrides, then
    the merged op; return the op, its merged tree and its membership, or every finding.
    A member of a broken family is not checked further: the family's findings stand for it."""
    col = Collector(path, doc)
    _validate(col, MemberSpec, doc)
    name = doc.get("family")
    if isinstance(name, str) and name not in families.files:
        known = sorted(families.files)
        col.add(
            ("family",),
            "unknown-family",
            f"family {name!r} is not defined: there is no {families.folder}/{name}.yaml "
            f"(known families: {', '.join(known) or 'none'}){_hint(name, known)}",
        )
    fam = families.defs.get(name) if isinstance(name, str) else None
    if fam is None or col.diags:
        broken = families.problems.get(name, ()) if isinstance(name, str) else ()
        return None, col.diags + list(broken)
    membership = Membership(fam, doc)
    merged = merge(doc, fam, col)
    if col.diags:
        return None, col.diags
    ops = MemberCollector(path, merged, membership)
    if not _validate(ops, OpSpec, merged):
        return None, ops.diags
    spec = OpSpec.model_validate(merged)
    check_op(ops, spec, tree, Path(path).name.split(".")[0])
    if ops.diags:
        return None, ops.diags
    return (spec, merged, membership), []
