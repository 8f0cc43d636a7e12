"""Variants for another tree's op: a spec file with `extends: <op>` instead of `op:`.

An extension adds a vendor kernel for new hardware, or a faster cpu kernel, to an op that
clforge (or another registered extension) defines, without touching that tree. The op's
signature, dtypes and layouts come from the tree that defines it; the variants are checked
against them exactly as the op's own are (targets, templates, dtypes, layouts, guards,
tunables), and for ties with every variant of the op in every registered tree. Findings are
reported in the extending file; the instances are generated into the extension's package and
join the op in the merged registry.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from clforge.core.diagnostics import Collector
from clforge.core.located_yaml import LocList, LocMap, YamlProblem, load_yaml
from clforge.core.tree import Tree
from clforge.errors import Diagnostic, Severity
from clforge.registry import sources
from clforge.spec.model import ExtendsSpec, OpSpec
from clforge.spec.op_checks import check_op
from clforge.spec.structure import SALVAGE_BLIND, salvage, structure_findings


def other_trees(tree: Tree) -> list[Tree]:
    """The registered trees with a folder here, but `tree`, clforge's first."""
    own = tree.root.resolve()
    return [s.tree for s in sources.sources() if s.tree is not None and s.root.resolve() != own]  # type: ignore[union-attr]


def defining_tree(op: str, tree: Tree) -> Tree | None:
    """The other registered tree whose specs define `op` (not merely extend it)."""
    for t in other_trees(tree):
        f = t.specs / f"{op}.yaml"
        if f.is_file() and not _extends_of(f):
            return t
    return None


def defined_ops(tree: Tree) -> list[str]:
    """The ops that the other registered trees define (not merely extend), by name."""
    return sorted(
        {
            f.name.removesuffix(".yaml")
            for t in other_trees(tree)
            for f in t.specs.glob("*.yaml")
            if f.is_file() and not _extends_of(f)
        }
    )


def _extends_of(f: Path) -> str | None:
    try:
        doc = load_yaml(f.read_text(encoding="utf-8"), f.name)
    except (OSError, UnicodeDecodeError, YamlProblem):
        return None
    value = doc.get("extends") if isinstance(doc, LocMap) else None
    return value if isinstance(value, str) else None


def _variants_elsewhere(op: str, tree: Tree, base: Tree) -> list[tuple[LocMap, object]]:
    """The variants that other extensions add to `op`: (located tree, model), for the ties."""
    out: list[tuple[LocMap, object]] = []
    for t in other_trees(tree):
        f = t.specs / f"{op}.yaml"
        if t.root == base.root or not f.is_file() or _extends_of(f) != op:
            continue
        doc = load_yaml(f.read_text(encoding="utf-8"), t.rel(f))
        try:
            spec = ExtendsSpec.model_validate(doc)
        except ValidationError:
            continue  # that extension's own lint reports it
        out += list(zip(doc["variants"], spec.variants, strict=True))
    return out


@dataclass(frozen=True)
class Extension:
    """A valid `extends:` file: the base op with only this file's variants (what this tree
    generates), located in this file, and the name of the tree that defines the op."""

    spec: OpSpec
    tree: LocMap
    base: str


class Loaded(Protocol):
    """What loading the base op's spec gives (:class:`clforge.spec.load.LoadedSpec`)."""

    @property
    def spec(self) -> OpSpec: ...

    @property
    def tree(self) -> LocMap: ...


# checks a spec file's text: (text, path shown, tree) -> (the spec or None, findings)
CheckText = Callable[[str, str, Tree], tuple[Loaded | None, list[Diagnostic]]]


def check_extends(
    doc: LocMap, path: str, tree: Tree, check_text: CheckText
) -> tuple[Extension | None, list[Diagnostic]]:
    """Check an `extends:` file; every finding is located in it. `check_text` loads the base
    op's spec (passed in: loading specs is what calls this)."""
    col = Collector(path, doc)
    try:
        ext = ExtendsSpec.model_validate(doc)
    except ValidationError as err:
        structure_findings(col, err, ExtendsSpec)
        saved = salvage(doc, err, ExtendsSpec)  # the variants that parsed are checked too
        if saved is None:
            return None, col.diags
        _, rest = saved
        _, more = check_extends(rest, path, tree, check_text)
        return None, col.diags + [d for d in more if d.rule not in SALVAGE_BLIND]
    stem = Path(path).name.split(".")[0]
    base_tree = defining_tree(ext.extends, tree)
    if base_tree is None:
        # a typo: the op meant, by the file's name first, else the nearest name
        known = defined_ops(tree)
        close = [stem] if stem in known else difflib.get_close_matches(ext.extends, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        names = ", ".join(s.name for s in sources.sources())
        col.add(
            ("extends",),
            "extends",
            f"no other registered tree defines op {ext.extends!r}{hint} (registered trees: "
            f"{names}; an op of another extension needs that extension registered: its entry "
            "point, or CLFORGE_PATH)",
        )
        return None, col.diags
    if ext.extends != stem:
        col.add(
            ("extends",),
            "file-name",
            f"variants for op {ext.extends!r} must live in a file named {ext.extends}.yaml, not "
            f"{stem}.yaml",
        )
        return None, col.diags
    base_file = base_tree.specs / f"{ext.extends}.yaml"
    # located by its full path, so that what is the base's own is told apart from this file's
    base, problems = check_text(base_file.read_text(encoding="utf-8"), str(base_file), base_tree)
    if base is None:
        first = problems[0] if problems else "?"
        col.add(
            ("extends",),
            "extends",
            f"op {ext.extends!r} of tree {base_tree.name!r} does not load: {first}",
        )
        return None, col.diags
    elsewhere = _variants_elsewhere(ext.extends, tree, base_tree)
    located = [*base.tree["variants"], *(t for t, _ in elsewhere), *doc["variants"]]
    models = (*base.spec.variants, *(m for _, m in elsewhere), *ext.variants)
    every = base.spec.model_copy(update={"variants": models})
    check = Collector(path, _with_variants(base.tree, located, doc))
    check_op(check, every, tree, ext.extends)
    # the base op and the other trees are checked by their own lint: keep what is this file's
    diags = [d for d in check.diags if d.loc.path == path]
    if any(d.severity is Severity.ERROR for d in diags):
        return None, diags
    own: OpSpec = base.spec.model_copy(update={"variants": ext.variants})
    return Extension(own, _with_variants(base.tree, list(doc["variants"]), doc), base_tree.name), []


def _with_variants(base: LocMap, variants: list[LocMap], doc: LocMap) -> LocMap:
    """`base` with its variant list replaced by `variants`, located in `doc`'s file."""
    out = LocMap(base)
    out.loc = base.loc
    out.key_locs = dict(base.key_locs)
    out.value_locs = dict(base.value_locs)
    items = LocList(variants)
    items.loc = doc["variants"].loc
    items.item_locs = [v.loc for v in variants]
    out["variants"] = items
    out.key_locs["variants"] = doc.key_locs["variants"]
    out.value_locs["variants"] = doc.value_locs["variants"]
    return out
