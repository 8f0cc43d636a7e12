"""Robustness of `clforge lint`, property-based: whatever is done to a valid spec, the linter
finishes with located findings from its catalogue, never a traceback, never an internal-error.

The specs mutated are a full op spec (matmul), ops of a family (add, max) and family files
(binary, reduce; each with one of its ops beside it, whose findings then count as the family's).
Mutations, one to four per example, on the parsed spec (delete, add, retype or rename a key,
swap two values, deep nesting, huge numbers, unicode, hostile strings) and on its text (broken
YAML, truncation, an empty file, huge numbers, deep brackets, alias bombs, tags). CI runs a fixed
sequence of examples (derandomized); `CLFORGE_FUZZ_EXAMPLES=5000 pytest tests/test_lint_fuzz.py`
explores afresh.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clforge.core.tree import Tree
from clforge.lint import rules
from clforge.lint.checks import format_github, format_json, format_text, lint
from clforge.spec.load import load_specs
from clforge.spec.schema import json_schema

ROOT = Path(__file__).resolve().parent.parent
BASES = ("add", "matmul", "max", "families/binary", "families/reduce")
COMPANION = {"families/binary": "add", "families/reduce": "max"}  # an op of the mutated family
TEXTS = {op: (ROOT / "specs" / f"{op}.yaml").read_text(encoding="utf-8") for op in BASES}
TREES = {op: yaml.safe_load(text) for op, text in TEXTS.items()}
FAMILIES = {
    f.name: f.read_text(encoding="utf-8") for f in sorted((ROOT / "specs" / "families").iterdir())
}
MODELINES = {op: text.splitlines(keepends=True)[0] for op, text in TEXTS.items()}
EXAMPLES = int(os.environ.get("CLFORGE_FUZZ_EXAMPLES", "150"))


def _schema_keys() -> list[str]:
    schema = json_schema()
    keys: set[str] = set()
    for d in schema["$defs"].values():
        for part in [d, *d.get("anyOf", [])]:
            keys |= set(part.get("properties", {}))
    return sorted(keys)


KEYS = _schema_keys()
HOSTILE = [
    "../../etc/passwd.cl.j2",
    "/etc/passwd",
    "elementwise/../../x.cl.j2",
    "a;b",
    "x)+(y",
    "float",
    "__import__('os')",
    "N.__class__",
    "open('x')",
    "exp(N) > 0",
    "N % 0 == 0",
    "cdiv(N, 0)",
    "is_pow2(N) and",
    "{{ 7 * 7 }}",
    "{% include '/etc/passwd' %}",
    "generic",
    "cpu",
    "arch:",
    "device:x",
    "f32",
    "f16",
    "row",
    "col",
    "N",
    "M",
    ">= 99999999999999999999999",
    "",
    " ",
    "é",
    "名前",
    "\U0001d518",
    "\u202e",
    "a\u0000b",
]

scalars = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([0, -1, 2**31, 2**63, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
    st.sampled_from(HOSTILE),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), inner, max_size=4),
    ),
    max_leaves=12,
)

BREAKERS = [
    "[",
    "]",
    "{",
    "}",
    ":",
    ": :",
    "- ",
    "\t",
    "\n  - ",
    "&a ",
    "*a",
    "*nope",
    "!!python/object/apply:os.system ['true'] ",
    "!!binary ",
    "!!set ",
    "<<: *a\n",
    '"',
    "'",
    "%YAML 9.9\n",
    "---\n",
    "...\n",
    "? ",
    "|",
    ">-\n",
    "#",
    "\ufeff",
    "\x00",
    "\x85",
    "\u2028",
]

BOMB = (
    'a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]\n'
    "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
    "f: [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value inside `node` (not the root itself)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield (*prefix, i)
            yield from _paths(v, (*prefix, i))


def _get(tree: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        tree = tree[k]
    return tree


def _nested(depth: int, leaf: Any) -> Any:
    out = leaf
    for i in range(depth):
        out = [out] if i % 2 else {"k": out}
    return out


def _mutate_tree(data: st.DataObject, tree: Any) -> Any:
    kind = data.draw(
        st.sampled_from(
            ["delete", "add", "retype", "rename", "swap", "nest", "root"] + ["same type"] * 4
        ),
        "kind",
    )
    paths = list(_paths(tree))
    if kind == "root" or not paths:
        return data.draw(values, "new root")
    path = data.draw(st.sampled_from(paths), "path")
    parent, key = _get(tree, path[:-1]), path[-1]
    if kind == "delete":
        del parent[key]
    elif kind == "add":
        target = _get(tree, path)
        value = data.draw(values, "value")
        if isinstance(target, dict):
            target[data.draw(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), "key")] = value
        elif isinstance(target, list):
            target.insert(data.draw(st.integers(0, len(target)), "at"), value)
        else:
            parent[key] = [target, value]
    elif kind == "retype":
        parent[key] = data.draw(values, "value")
    elif kind == "same type":  # keeps the schema happy, so the checks of meaning run
        old = parent[key]
        if isinstance(old, bool) or old is None:
            parent[key] = data.draw(scalars, "value")
        elif isinstance(old, int):
            parent[key] = data.draw(
                st.one_of(st.integers(-10, 70_000), st.sampled_from([0, 2**62, 10**40])), "int"
            )
        elif isinstance(old, str):
            parent[key] = data.draw(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=10)))
        elif isinstance(old, list) and old:
            i = data.draw(st.integers(0, len(old) - 1), "item")
            if data.draw(st.booleans(), "drop"):
                del old[i]
            else:
                old.append(copy.deepcopy(old[i]))
        elif isinstance(old, dict) and old:
            k = data.draw(st.sampled_from(sorted(old, key=str)), "entry")
            old[data.draw(st.sampled_from(HOSTILE), "new name")] = old.pop(k)
    elif kind == "rename" and isinstance(parent, dict):
        new = data.draw(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), "new key")
        parent[new] = parent.pop(key)
    elif kind == "swap":
        other = data.draw(st.sampled_from(paths), "other")
        a, b = _get(tree, path), _get(tree, other)
        parent[key] = copy.deepcopy(b)
        with contextlib.suppress(KeyError, IndexError, TypeError):  # gone with the first write
            _get(tree, other[:-1])[other[-1]] = copy.deepcopy(a)
    else:
        parent[key] = _nested(data.draw(st.integers(1, 120), "depth"), parent[key])
    return tree


def _mutate_text(data: st.DataObject, text: str) -> str:
    kind = data.draw(
        st.sampled_from(
            ["insert", "truncate", "empty", "huge", "brackets", "bomb", "unicode", "dup-line"]
        ),
        "text kind",
    )
    at = data.draw(st.integers(0, len(text)), "at")
    if kind == "insert":
        return text[:at] + data.draw(st.sampled_from(BREAKERS), "breaker") + text[at:]
    if kind == "truncate":
        return text[:at]
    if kind == "empty":
        return data.draw(st.sampled_from(["", "\n", "# only a comment\n", "---\n", "~\n"]), "e")
    if kind == "huge":
        digits = "9" * data.draw(st.sampled_from([20, 400, 4300, 4400, 6000]), "digits")
        return text[:at] + digits + text[at:]
    if kind == "brackets":
        n = data.draw(st.sampled_from([10, 70, 200, 3000]), "depth")
        return text[:at] + "[" * n + "]" * n + text[at:]
    if kind == "bomb":
        return BOMB + text
    if kind == "unicode":
        return text[:at] + data.draw(st.text(min_size=1, max_size=6), "chars") + text[at:]
    lines = text.splitlines(keepends=True)
    i = data.draw(st.integers(0, max(len(lines) - 1, 0)), "line")
    return "".join(lines[: i + 1] + lines[i:])


@pytest.fixture(scope="module")
def tree_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="clforge-fuzz-") as tmp:
        root = Path(tmp)
        shutil.copytree(ROOT / "templates", root / "templates")
        (root / "specs" / "families").mkdir(parents=True)
        yield root


def _dump(tree: Any, modeline: str) -> str | None:
    try:
        return modeline + yaml.safe_dump(tree, allow_unicode=True, sort_keys=False)
    except (yaml.YAMLError, ValueError, RecursionError):
        return None  # not representable as YAML (e.g. a NaN key): use the text mutations


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="CLFORGE_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_lint_survives_any_mutation(tree_root: Path, data: st.DataObject) -> None:
    op = data.draw(st.sampled_from(BASES), "base")
    text = TEXTS[op]
    tree: Any = copy.deepcopy(TREES[op])
    for _ in range(data.draw(st.integers(1, 4), "mutations")):
        if data.draw(st.integers(0, 3), "on text") == 0:
            text = _mutate_text(data, text)
        else:
            tree = _mutate_tree(data, tree)
            text = _dump(tree, MODELINES[op]) or text
    specs = tree_root / "specs"
    for old in specs.glob("*.yaml"):
        old.unlink()
    for name, family in FAMILIES.items():
        (specs / "families" / name).write_text(family, encoding="utf-8")
    (specs / f"{op}.yaml").write_text(text, encoding="utf-8")
    shown = {f"specs/{op}.yaml"}
    if op in COMPANION:
        (specs / f"{COMPANION[op]}.yaml").write_text(TEXTS[COMPANION[op]], encoding="utf-8")
        shown.add(f"specs/{COMPANION[op]}.yaml")

    report = lint((), Tree(tree_root))

    for d in report.findings:
        assert d.rule in rules.BY_ID, str(d)
        assert d.rule != "internal-error", f"{d}\n--- spec:\n{text[:2000]}"
        if d.loc.path in shown:
            assert d.loc.line >= 1, str(d)  # located in the file
        else:
            assert d.rule == "stale-output", str(d)  # generated files, before any generation
    if not any(d.loc.path in shown and d.severity.value == "error" for d in report.findings):
        load_specs(Tree(tree_root))  # no finding in the spec: generation accepts it
    assert len(format_text(report).splitlines()) == len(report.findings)
    assert len(json.loads(format_json(report))["findings"]) == len(report.findings)
    assert len(format_github(report).splitlines()) == len(report.findings)
