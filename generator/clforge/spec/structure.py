"""Structural findings: pydantic's validation errors on a spec, re-worded (the valid keys,
"did you mean", YAML type names) and located at the offending key or value."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from clforge.core.diagnostics import Collector, KeyPath, dotted
from clforge.core.located_yaml import LocList, LocMap
from clforge.spec.model import OpSpec


def _model_at(model: type[BaseModel], keys: KeyPath) -> type[BaseModel] | None:
    """The model class that validates the mapping found at `keys` under `model`."""
    ann: Any = model
    for key in keys:
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            field = ann.model_fields.get(str(key))
            if field is None:
                return None
            ann = field.annotation
            continue
        ann = _unwrap(ann)
        origin = typing.get_origin(ann)
        if origin in (tuple, list):
            ann = typing.get_args(ann)[0]
        elif origin is dict:
            ann = typing.get_args(ann)[1]
        else:
            return None
    ann = _unwrap(ann)
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def _unwrap(ann: Any) -> Any:
    """Strip Optional[...] so that `X | None` navigates like X."""
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return ann


_TYPE_NAMES = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "NoneType": "null",
    "LocList": "a list",
    "LocMap": "a mapping",
    "list": "a list",
    "dict": "a mapping",
}
# pydantic's words for Python types, in the words of YAML
_WORDS = (("valid tuple", "list"), ("valid dictionary", "mapping"), ("tuple", "list"))


def _type_name(value: Any) -> str:
    name = type(value).__name__
    return _TYPE_NAMES.get(name, name)


def _union_tag(tree: Any, keys: KeyPath, i: int) -> bool:
    """Whether keys[i] is a tag pydantic adds for a member of a union (`str`, `int`, ...)
    rather than a key that exists in the spec."""
    key = keys[i]
    if not isinstance(key, str) or key not in _TYPE_NAMES:
        return False
    node = tree
    for k in keys[:i]:
        try:
            node = node[k]
        except (KeyError, IndexError, TypeError):
            return False
    return not (isinstance(node, dict) and key in node)


def structure_findings(
    col: Collector, err: ValidationError, model: type[BaseModel] = OpSpec
) -> None:
    """Report pydantic's errors on the file `model` validated, re-worded and located."""
    errors = []
    unions: dict[KeyPath, list[str]] = {}  # a value checked against each member of a union
    for e in err.errors(include_url=False):
        raw: KeyPath = tuple(
            k for k in e["loc"] if not (isinstance(k, str) and k.startswith("function-"))
        )
        keys = tuple(k for i, k in enumerate(raw) if not _union_tag(col.tree, raw, i))
        if keys != raw:
            unions.setdefault(keys, []).extend(_TYPE_NAMES[str(k)] for k in raw if k not in keys)
            if len(unions[keys]) > len(raw) - len(keys):
                continue  # said once per value
        errors.append((keys, e))
    for keys, e in errors:
        where = dotted(keys)
        kind = e["type"]
        ctx = e.get("ctx", {})
        got = _type_name(e["input"]) if "input" in e else "?"
        if keys in unions:
            wanted = " or ".join(dict.fromkeys(unions[keys]))
            col.add(keys, "type", f"{where}: should be {wanted} (got {got})")
        elif kind == "extra_forbidden":
            parent = _model_at(model, keys[:-1])
            fields = list(parent.model_fields) if parent else []
            close = difflib.get_close_matches(str(keys[-1]), fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            col.add(
                keys,
                "unknown-key",
                f"unknown key {keys[-1]!r} in {dotted(keys[:-1])}{hint}; only the following "
                f"keys are supported: {', '.join(fields) or '?'}",
                at_key=True,
            )
        elif kind == "missing":
            col.add(
                keys[:-1],
                "missing-key",
                f"{dotted(keys[:-1])}: required key {keys[-1]!r} is missing",
            )
        elif kind == "literal_error":
            col.add(keys, "vocabulary", f"{where}: {e['input']!r} is not one of {ctx['expected']}")
        elif kind == "string_pattern_mismatch":
            col.add(
                keys,
                "type",
                f"{where}: {e['input']!r} is not a limit such as '>= 16384' (one of >=, <=, ==, "
                ">, < and then a whole number)",
            )
        elif kind in ("too_short", "too_long"):
            items = e.get("input")
            bound = ctx.get("min_length" if kind == "too_short" else "max_length", 0)
            if kind == "too_short" and isinstance(items, list) and len(items) >= bound:
                continue  # items that failed validation, each reported on its own
            n = ctx.get("actual_length", "?")
            need = "at least" if kind == "too_short" else "at most"
            col.add(
                keys,
                "type",
                f"{where}: needs {need} {bound} item{'s' * (bound != 1)}, has {n}",
            )
        else:
            msg = e["msg"][0].lower() + e["msg"][1:]
            for old, new in _WORDS:
                msg = msg.replace(old, new)
            col.add(keys, "type", f"{where}: {msg} (got {got})")


# --- the parts that parsed ----------------------------------------------------------------------

MAX_ROUNDS = 8
# findings that the cut-away parts of a broken spec may cause on the rest (a dropped generic
# variant leaves the op without one): not reported for a salvaged spec
SALVAGE_BLIND = frozenset({"generic-coverage", "unbound-dim", "undeclared-tensor"})


def salvage(
    doc: LocMap, err: ValidationError, model: type[BaseModel] = OpSpec
) -> tuple[Any, LocMap] | None:
    """A valid model (and its located tree) of what is left of `doc` once every part that
    failed validation is cut away: a variant with any broken key is dropped whole, an unknown
    or mistyped optional key elsewhere is dropped, so that the later checks still run on the
    rest; None when nothing valid is left (a required top-level key is broken)."""
    for _ in range(MAX_ROUNDS):
        cuts = {_cut(model, _keys(doc, e["loc"])) for e in err.errors(include_url=False)}
        if None in cuts:
            return None
        for cut in sorted(cuts, key=_order, reverse=True):  # deepest, then last items, first
            doc = _without(doc, cut)  # type: ignore[arg-type]
        try:
            return model.model_validate(doc), doc
        except ValidationError as again:
            err = again
    return None


def _order(keys: KeyPath | None) -> tuple[int, tuple[str, ...]]:
    keys = keys or ()
    return len(keys), tuple(f"{k:09d}" if isinstance(k, int) else k for k in keys)


def _keys(doc: LocMap, loc: tuple[Any, ...]) -> KeyPath:
    raw = tuple(k for k in loc if not (isinstance(k, str) and k.startswith("function-")))
    return tuple(k for i, k in enumerate(raw) if not _union_tag(doc, raw, i))


def _cut(model: type[BaseModel], keys: KeyPath) -> KeyPath | None:
    """The shortest removable path that holds the error at `keys`: the key itself when it is
    optional (or unknown), else the list item or optional key above it; None at the top. A
    variant goes whole: its other keys mean little without the broken one."""
    if len(keys) >= 2 and keys[0] == "variants" and isinstance(keys[1], int):
        return keys[:2]
    for end in range(len(keys), 0, -1):
        head, last = keys[: end - 1], keys[end - 1]
        if isinstance(last, int):
            return keys[:end]  # a list item: drop it whole
        parent = _model_at(model, head)
        if parent is None:
            continue  # inside a mapping of names (inputs, params, ...): its entry is optional
        field = parent.model_fields.get(str(last))
        if field is None or not field.is_required():
            return keys[:end]
    return None


def _without(node: Any, keys: KeyPath) -> Any:
    """A copy of `node` without the value at `keys` (copies only along the path)."""
    key, rest = keys[0], keys[1:]
    if isinstance(node, LocMap) and isinstance(key, str) and key in node:
        out = LocMap(node)
        out.loc, out.key_locs, out.value_locs = node.loc, dict(node.key_locs), dict(node.value_locs)
        if rest:
            out[key] = _without(node[key], rest)
        else:
            del out[key]
            out.key_locs.pop(key, None)
            out.value_locs.pop(key, None)
        return out
    if isinstance(node, LocList) and isinstance(key, int) and 0 <= key < len(node):
        items, locs = list(node), list(node.item_locs)
        if rest:
            items[key] = _without(node[key], rest)
        else:
            del items[key], locs[key]
        out_list = LocList(items)
        out_list.loc, out_list.item_locs = node.loc, locs
        return out_list
    return node
