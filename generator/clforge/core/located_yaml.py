"""Safe YAML loading that remembers where every key and value came from.

Specs are loaded with PyYAML's safe composer only (no Python tags, nothing runs) and turned into
plain dicts/lists that also carry their :class:`Location`, so every later check can point at the
exact file:line:col. Duplicate keys, which PyYAML silently lets through, are errors here; so are
documents that expand to an absurd number of nodes through aliases (the billion-laughs bomb).
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.reader import Reader

from clforge.errors import Diagnostic, Location

MAX_NODES = 100_000
MAX_DEPTH = 64


class LocMap(dict[str, Any]):
    """A YAML mapping: a dict that also knows the location of itself, its keys and its values."""

    loc: Location
    key_locs: dict[str, Location]
    value_locs: dict[str, Location]


class LocList(list[Any]):
    """A YAML sequence: a list that also knows the location of itself and of each item."""

    loc: Location
    item_locs: list[Location]


class YamlProblem(Exception):
    def __init__(self, diagnostic: Diagnostic) -> None:
        self.diagnostic = diagnostic
        super().__init__(str(diagnostic))


def _loc(path: str, node: yaml.Node) -> Location:
    mark = node.start_mark
    return Location(path, mark.line + 1, mark.column + 1)


class _Converter:
    def __init__(self, path: str) -> None:
        self.path = path
        self.count = 0
        self.scalars = SafeConstructor()

    def convert(self, node: yaml.Node, depth: int = 0) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise YamlProblem(
                Diagnostic(
                    _loc(self.path, node),
                    "yaml-syntax",
                    f"document expands to more than {MAX_NODES} nodes (alias bomb?)",
                )
            )
        if depth > MAX_DEPTH:
            raise YamlProblem(
                Diagnostic(
                    _loc(self.path, node), "yaml-syntax", f"nesting deeper than {MAX_DEPTH} levels"
                )
            )
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, depth)
        if isinstance(node, yaml.SequenceNode):
            out = LocList()
            out.loc = _loc(self.path, node)
            out.item_locs = []
            for item in node.value:
                out.append(self.convert(item, depth + 1))
                out.item_locs.append(_loc(self.path, item))
            return out
        try:
            return self.scalars.construct_object(node, deep=True)
        except ConstructorError as exc:
            raise YamlProblem(
                Diagnostic(_loc(self.path, node), "yaml-syntax", f"bad scalar: {exc.problem}")
            ) from None
        except ValueError:  # int() refuses digit strings past sys.get_int_max_str_digits()
            limit = sys.get_int_max_str_digits() or 4300
            raise YamlProblem(
                Diagnostic(
                    _loc(self.path, node),
                    "yaml-syntax",
                    f"a number longer than {limit} digits cannot be read",
                )
            ) from None

    def _mapping(self, node: yaml.MappingNode, depth: int) -> LocMap:
        out = LocMap()
        out.loc = _loc(self.path, node)
        out.key_locs = {}
        out.value_locs = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise YamlProblem(
                    Diagnostic(
                        _loc(self.path, key_node),
                        "yaml-syntax",
                        "merge keys (<<) are not supported",
                    )
                )
            key = self.convert(key_node, depth + 1)
            where = _loc(self.path, key_node)
            if not isinstance(key, Hashable) or isinstance(key, (LocMap, LocList)):
                raise YamlProblem(
                    Diagnostic(where, "yaml-syntax", "a mapping key must be a scalar")
                )
            skey = key if isinstance(key, str) else str(key)
            if skey in out:
                raise YamlProblem(
                    Diagnostic(
                        where,
                        "duplicate-key",
                        f"key {skey!r} appears twice in one mapping (first at line "
                        f"{out.key_locs[skey].line})",
                    )
                )
            out[skey] = self.convert(value_node, depth + 1)
            out.key_locs[skey] = where
            out.value_locs[skey] = _loc(self.path, value_node)
        return out


MAX_BYTES = 1 << 20


def _flow_depth_problem(text: str, path: str) -> Diagnostic | None:
    """Flow collections nested deeper than MAX_DEPTH, found in one pass before PyYAML, whose
    scanner is quadratic in the nesting and whose composer recurses."""
    depth = 0
    quote = ""
    comment = False
    for i, ch in enumerate(text):
        if comment:
            comment = ch != "\n"
        elif quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            comment = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return Diagnostic(
                    offset_location(text, path, i),
                    "yaml-syntax",
                    f"nesting deeper than {MAX_DEPTH} levels",
                )
        elif ch in "]}":
            depth = max(depth - 1, 0)
    return None


_FAST = getattr(yaml, "CSafeLoader", None)  # libyaml's composer: the same nodes, 15x faster


def _compose(text: str) -> yaml.Node | None:
    """The document's node tree. libyaml composes ASCII text (its columns count bytes); any
    other text, and any text it finds fault with, goes to PyYAML's own composer, whose messages
    are the ones reported."""
    if _FAST is not None and text.isascii() and not Reader.NON_PRINTABLE.search(text):
        try:
            return yaml.compose(text, Loader=_FAST)
        except yaml.YAMLError:
            pass
    return yaml.compose(text, Loader=yaml.SafeLoader)


def load_yaml(text: str, path: str) -> Any:
    """Parse one YAML document into LocMap/LocList/scalars; raise YamlProblem on any problem."""
    if len(text) > MAX_BYTES:
        raise YamlProblem(
            Diagnostic(Location(path, 1, 1), "yaml-syntax", f"file larger than {MAX_BYTES} bytes")
        )
    problem = _flow_depth_problem(text, path)
    if problem is not None:
        raise YamlProblem(problem)
    try:
        node = _compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = Location(path, mark.line + 1, mark.column + 1) if mark else Location(path)
        what = exc.problem or exc.context or "invalid YAML"
        raise YamlProblem(Diagnostic(loc, "yaml-syntax", f"YAML syntax error: {what}")) from None
    except yaml.YAMLError as exc:  # e.g. a character YAML forbids: PyYAML gives no mark
        m = Reader.NON_PRINTABLE.search(text)
        if m:
            raise YamlProblem(
                Diagnostic(
                    offset_location(text, path, m.start()),
                    "yaml-syntax",
                    f"character U+{ord(m.group()):04X} is not allowed in YAML (a control or "
                    "special character)",
                )
            ) from None
        raise YamlProblem(
            Diagnostic(Location(path, 1, 1), "yaml-syntax", f"YAML error: {exc}")
        ) from None
    except RecursionError:
        raise YamlProblem(
            Diagnostic(Location(path), "yaml-syntax", "nesting too deep to parse")
        ) from None
    if node is None:
        return None
    return _Converter(path).convert(node)


def offset_location(text: str, path: str, offset: int) -> Location:
    """The line and column of character `offset` of `text`."""
    line = text.count("\n", 0, offset) + 1
    return Location(path, line, offset - (text.rfind("\n", 0, offset) + 1) + 1)


def locate(root: Any, keys: tuple[int | str, ...], *, at_key: bool = False) -> Location | None:
    """The location of the value (or, with at_key, the key) found by following `keys` from root.

    Stops at the deepest location that exists, so a path into a missing key points at the
    mapping that lacks it.
    """
    node = root
    best: Location | None = getattr(root, "loc", None)
    for i, key in enumerate(keys):
        last = i == len(keys) - 1
        if isinstance(node, LocMap) and isinstance(key, str) and key in node:
            best = node.key_locs[key] if (last and at_key) else node.value_locs[key]
            node = node[key]
        elif isinstance(node, LocList) and isinstance(key, int) and 0 <= key < len(node):
            best = node.item_locs[key]
            node = node[key]
        else:
            break
    return best
