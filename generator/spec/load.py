"""Loading spec files into :class:`OpSpec` models, with every problem located at file:line:col.

Loading a file never raises anything but :class:`SpecError`, which carries all of the file's
diagnostics at once: YAML syntax, structure (via pydantic, re-worded with the valid keys), and
the meaning that spans fields (names, dims, guards, templates, coverage).
"""

from __future__ import annotations

import difflib
import itertools
import re
import types
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from generator.core import expressions as guards
from generator.core.identifiers import identifier_problem
from generator.core.layouts import LAYOUTS
from generator.core.located_yaml import LocMap, YamlProblem, load_yaml, locate
from generator.core.targets import Level, Target, parse_target
from generator.core.tree import DEFAULT, Layout
from generator.errors import Diagnostic, GuardError, Location, SpecError
from generator.spec.model import OpSpec, Requires, VariantSpec

Path_ = tuple[int | str, ...]


@dataclass(frozen=True)
class LoadedSpec:
    """A valid spec, the file it came from, and its located YAML tree for later messages."""

    path: str  # as shown in messages: relative to the tree's root
    spec: OpSpec
    tree: LocMap

    def where(self, *keys: int | str, at_key: bool = False) -> Location:
        return locate(self.tree, keys, at_key=at_key) or Location(self.path)


class _Collector:
    def __init__(self, path: str, tree: Any) -> None:
        self.path = path
        self.tree = tree
        self.diags: list[Diagnostic] = []

    def add(self, keys: Path_, rule: str, message: str, *, at_key: bool = False) -> None:
        loc = locate(self.tree, keys, at_key=at_key) or Location(self.path)
        self.diags.append(Diagnostic(loc, rule, message))


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _dotted(keys: Path_) -> str:
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


# --- pydantic errors, re-worded and located ---------------------------------------------------


def _model_at(model: type[BaseModel], keys: Path_) -> type[BaseModel] | None:
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


def _union_tag(tree: Any, keys: Path_, i: int) -> bool:
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


def _pydantic_diags(col: _Collector, err: ValidationError) -> None:
    errors = []
    unions: dict[Path_, list[str]] = {}  # a value checked against each member of a union
    for e in err.errors(include_url=False):
        raw: Path_ = tuple(
            k for k in e["loc"] if not (isinstance(k, str) and k.startswith("function-"))
        )
        keys = tuple(k for i, k in enumerate(raw) if not _union_tag(col.tree, raw, i))
        if keys != raw:
            unions.setdefault(keys, []).extend(_TYPE_NAMES[str(k)] for k in raw if k not in keys)
            if len(unions[keys]) > len(raw) - len(keys):
                continue  # said once per value
        errors.append((keys, e))
    for keys, e in errors:
        where = _dotted(keys)
        kind = e["type"]
        ctx = e.get("ctx", {})
        got = _type_name(e["input"]) if "input" in e else "?"
        if keys in unions:
            wanted = " or ".join(dict.fromkeys(unions[keys]))
            col.add(keys, "type", f"{where}: should be {wanted} (got {got})")
        elif kind == "extra_forbidden":
            parent = _model_at(OpSpec, keys[:-1])
            fields = list(parent.model_fields) if parent else []
            close = difflib.get_close_matches(str(keys[-1]), fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            col.add(
                keys,
                "unknown-key",
                f"unknown key {keys[-1]!r} in {_dotted(keys[:-1])}{hint}; only the following "
                f"keys are supported: {', '.join(fields) or '?'}",
                at_key=True,
            )
        elif kind == "missing":
            col.add(
                keys[:-1],
                "missing-key",
                f"{_dotted(keys[:-1])}: required key {keys[-1]!r} is missing",
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


# --- meaning that spans fields ------------------------------------------------------------------


def _check(col: _Collector, spec: OpSpec, layout: Layout, stem: str) -> None:
    def ident(
        keys: Path_, name: str, what: str, *, at_key: bool = True, reserved: bool = True
    ) -> None:
        problem = identifier_problem(name, reserved=reserved)
        if problem:
            col.add(keys, "c-identifier", f"{what} {problem}", at_key=at_key)

    ident(("op",), spec.op, "op name", at_key=False, reserved=False)
    if spec.op != stem:
        col.add(
            ("op",),
            "file-name",
            f"op {spec.op!r} must live in a file named {spec.op}.yaml, not {stem}.yaml",
        )

    # one namespace: dims, tensors and attributes all become kernel arguments
    seen: dict[str, str] = {}

    def claim(keys: Path_, name: str, what: str, at_key: bool = True) -> None:
        ident(keys, name, what, at_key=at_key)
        if name in seen:
            col.add(
                keys,
                "duplicate-name",
                f"{what} {name!r} is already used as {seen[name]}",
                at_key=at_key,
            )
        else:
            seen[name] = what

    for i, d in enumerate(spec.dims):
        claim(("dims", i), d, "dim", at_key=False)
    bound: set[str] = set()
    for group in ("inputs", "outputs"):
        for name, t in getattr(spec, group).items():
            claim((group, name), name, group[:-1])
            for j, d in enumerate(t.shape):
                if d not in spec.dims:
                    col.add(
                        (group, name, j),
                        "undeclared-dim",
                        f"{group}.{name}: dim {d!r} is not declared in dims "
                        f"({', '.join(spec.dims) or 'none'})",
                    )
            if group == "inputs":
                bound.update(t.shape)
    seen_optional = ""
    for name, t in spec.inputs.items():
        if t.broadcast:
            for k in range(len(t.shape)):
                claim(("inputs", name), f"{name}_s{k}", f"the stride argument of input {name}")
        if t.optional:
            seen_optional = name
        elif seen_optional:
            col.add(
                ("inputs", name),
                "tensor-option",
                f"inputs.{name}: a required input "
                f"cannot follow the optional input {seen_optional!r}",
                at_key=True,
            )
        if t.fill is not None and not t.optional:
            col.add(
                ("inputs", name, "fill"),
                "tensor-option",
                f"inputs.{name}: fill only applies to an optional input",
                at_key=True,
            )
    for name, t in spec.outputs.items():
        for option in ("broadcast", "optional", "fill"):
            if getattr(t, option) not in (False, None):
                col.add(
                    (("outputs", name, option)),
                    "tensor-option",
                    f"outputs.{name}: {option} applies to inputs only",
                    at_key=True,
                )
    for name, a in spec.attrs.items():
        claim(("attrs", name), name, "attribute")
        if a.default is not None and a.type == "int" and not isinstance(a.default, int):
            col.add(
                ("attrs", name, "default"),
                "type",
                f"attrs.{name}: an int attribute needs an int default, not {a.default!r}",
            )
    int_attrs = {n for n, a in spec.attrs.items() if a.type == "int"}
    known = set(bound) | int_attrs
    for d, text in spec.derived.items():
        if d not in spec.dims:
            col.add(
                ("derived", d),
                "derived-dim",
                f"derived dim {d!r} is not declared in dims",
                at_key=True,
            )
        elif d in bound:
            col.add(
                ("derived", d),
                "derived-dim",
                f"derived dim {d!r} is also an input's dim; "
                "a dim is either bound by inputs or derived",
                at_key=True,
            )
        _check_expr(col, ("derived", d), text, "int", known)
        known.add(d)
        bound.add(d)
    for i, c in enumerate(spec.checks):
        _check_expr(col, ("checks", i, "expr"), c.expr, "bool", set(spec.dims) | int_attrs)
    _check_convention(col, spec)
    for i, d in enumerate(spec.dims):
        if d not in bound:
            col.add(
                ("dims", i),
                "unbound-dim",
                f"dim {d!r} appears in no input's shape, so no call can give it a size",
            )

    tensors = spec.tensors
    for t, lays in spec.layouts.items():
        if t not in tensors:
            col.add(
                ("layouts", t),
                "undeclared-tensor",
                f"layouts names {t!r}, which is not an input or output",
                at_key=True,
            )
        else:
            for j, lay in enumerate(lays):
                rank = len(tensors[t].shape)
                if not LAYOUTS[lay].fits(rank):
                    col.add(
                        ("layouts", t, j),
                        "layout",
                        f"layouts.{t}: {lay!r} does not fit a "
                        f"tensor of rank {rank} ({LAYOUTS[lay].doc})",
                    )

    names_seen: dict[str, int] = {}
    for i, v in enumerate(spec.variants):
        key: Path_ = ("variants", i)
        problem = identifier_problem(v.name, reserved=False)
        if problem:
            col.add((*key, "name"), "c-identifier", f"variant name {problem}")
        if v.name in names_seen:
            first = locate(col.tree, ("variants", names_seen[v.name], "name"))
            col.add(
                (*key, "name"),
                "duplicate-name",
                f"variant name {v.name!r} is used twice in op {spec.op!r} (first at line "
                f"{first.line if first else '?'}); instance names would collide",
            )
        else:
            names_seen[v.name] = i
        _check_variant(col, spec, v, key, seen, layout)

    _check_coverage(col, spec)
    _check_ambiguity(col, spec)


# build options a spec may give: they reach clBuildProgram, so only known, harmless ones
BUILD_OPTION = re.compile(
    r"-cl-std=CL(1\.1|1\.2|2\.0|3\.0)|-cl-fast-relaxed-math|-cl-mad-enable|-cl-no-signed-zeros"
    r"|-cl-finite-math-only|-cl-unsafe-math-optimizations|-cl-denorms-are-zero"
    r"|-D[A-Za-z][A-Za-z0-9_]{0,47}(=-?[0-9]{1,18})?"
)


def _check_variant(
    col: _Collector, spec: OpSpec, v: VariantSpec, key: Path_, taken: dict[str, str], layout: Layout
) -> None:
    for j, a in enumerate(v.arch):
        try:
            parse_target(a)
        except ValueError as exc:
            col.add((*key, "arch", j), "vocabulary", f"variant {v.name}: {exc}")
    for msg in template_problems(v.template, layout):
        col.add((*key, "template"), "template-path", f"variant {v.name}: {msg}")
    for j, d in enumerate(v.dtypes or ()):
        if d not in spec.dtypes:
            col.add(
                (*key, "dtypes", j),
                "vocabulary",
                f"variant {v.name}: dtype {d!r} is not among the op's dtypes "
                f"({', '.join(spec.dtypes)})",
            )
    for t, lays in (v.layouts or {}).items():
        if t not in spec.tensors:
            col.add(
                (*key, "layouts", t),
                "undeclared-tensor",
                f"variant {v.name}: layouts names {t!r}, which is not an input or output",
                at_key=True,
            )
            continue
        for j, lay in enumerate(lays):
            if lay not in spec.layouts_of(t):
                col.add(
                    (*key, "layouts", t, j),
                    "layout",
                    f"variant {v.name}: layout {lay!r} of {t!r} is not declared for the op "
                    f"({', '.join(spec.layouts_of(t))})",
                )
    for p in v.params:
        problem = identifier_problem(p)
        if problem:
            col.add((*key, "params", p), "c-identifier", f"param {problem}", at_key=True)
        elif p in taken:
            col.add(
                (*key, "params", p),
                "duplicate-name",
                f"param {p!r} is already used as {taken[p]}",
                at_key=True,
            )
    for p, values in v.tunables.items():
        if p not in v.params:
            col.add(
                (*key, "tunables", p),
                "tunable",
                f"variant {v.name}: tunable {p!r} has no default in params",
                at_key=True,
            )
        elif not values:
            col.add(
                (*key, "tunables", p), "tunable", f"variant {v.name}: tunable {p!r} lists no values"
            )
        elif v.params[p] not in values:
            col.add(
                (*key, "tunables", p),
                "tunable",
                f"variant {v.name}: tunable {p!r} values "
                f"{list(values)} do not include the default {v.params[p]}",
            )
    scope = set(spec.dims) | set(v.params) | {n for n, a in spec.attrs.items() if a.type == "int"}
    if v.when is not None:
        _check_expr(col, (*key, "when"), v.when, "bool", scope)
    for part in ("global_size", "local_size"):
        for j, e in enumerate(getattr(v.launch, part) or ()):
            _check_expr(col, (*key, "launch", part, j), str(e), "int", scope)
    _check_constraints(col, v, key)
    for j, option in enumerate(v.build_options):
        if not BUILD_OPTION.fullmatch(option):
            col.add(
                (*key, "build_options", j),
                "build-option",
                f"variant {v.name}: build option {option!r} is not one clforge passes on "
                "(-cl-std=CL1.1|CL1.2|CL2.0|CL3.0, -cl-fast-relaxed-math, -cl-mad-enable, "
                "-cl-no-signed-zeros, -cl-finite-math-only, -cl-unsafe-math-optimizations, "
                "-cl-denorms-are-zero, -DNAME, -DNAME=INTEGER)",
            )
    for j, ext in enumerate(v.requires.extensions):
        if not _EXTENSION.match(ext):
            col.add(
                (*key, "requires", "extensions", j),
                "vocabulary",
                f"variant {v.name}: {ext!r} is not an OpenCL extension name "
                "(cl_<vendor>_<name>, e.g. cl_khr_fp16)",
            )


_EXTENSION = re.compile(r"cl_[a-z0-9]+_[A-Za-z0-9_]+\Z")
# what a character the guard language refuses usually means
_GUARD_HINTS = {
    "'": " (the guard language has no strings)",
    '"': " (the guard language has no strings)",
    ".": " (the guard language has no attribute access and no fractions)",
    "[": " (the guard language has no indexing)",
    "=": " (compare with ==)",
    "&": " (write 'and')",
    "|": " (write 'or')",
    "!": " (write 'not', or != to compare)",
}
_DIM_OR_PARAM = "neither a dim nor a param of this variant"
_PARAM_ONLY = (
    "not a param of this variant (constraints name params only; put conditions on dims in when:)"
)


def _check_convention(col: _Collector, spec: OpSpec) -> None:
    from generator.conventions import CONVENTIONS
    from generator.emit.expand import signature_of

    for problem in CONVENTIONS[spec.call].problems(signature_of(spec, col.path)):
        col.add(("call",), "convention", problem)


def _check_expr(
    col: _Collector,
    keys: Path_,
    text: str,
    kind: guards.Kind,
    scope: set[str],
    what: str = _DIM_OR_PARAM,
) -> guards.Expr | None:
    """The parsed expression, or None after reporting why it is unusable."""
    try:
        expr = guards.parse(text, kind)
    except GuardError as exc:
        at = exc.text[exc.pos] if 0 <= exc.pos < len(exc.text) else ""
        hint = _GUARD_HINTS.get(at, "")
        col.add(keys, "guard-syntax", f"{_dotted(keys)}: {exc}{hint}")
        return None
    unknown = sorted(expr.names - scope)
    if unknown:
        col.add(
            keys,
            "guard-name",
            f"{_dotted(keys)}: {', '.join(map(repr, unknown))} "
            f"{'is' if len(unknown) == 1 else 'are'} {what} "
            f"(known: {', '.join(sorted(scope)) or 'none'})",
        )
        return None
    return expr


MAX_COMBINATIONS = 100_000  # tunable combinations searched for one that meets the constraints


def _check_constraints(col: _Collector, v: VariantSpec, key: Path_) -> None:
    """Each constraint parses, names only params, and holds for the default params; some
    combination of tunable values satisfies them all."""
    exprs = [
        _check_expr(col, (*key, "constraints", j), c, "bool", set(v.params), _PARAM_ONLY)
        for j, c in enumerate(v.constraints)
    ]
    checked = [e for e in exprs if e is not None]
    if not checked or len(checked) != len(exprs):
        return
    defaults = dict(v.params)
    shown = ", ".join(f"{p}={n}" for p, n in defaults.items())
    broken = False
    for j, expr in enumerate(checked):
        try:
            holds = expr.holds(defaults)
        except GuardError as exc:
            col.add(
                (*key, "constraints", j),
                "constraint",
                f"variant {v.name}: constraint {expr.text!r} cannot be evaluated for the default "
                f"params ({shown}): {exc.message}",
            )
            broken = True
            continue
        if not holds:
            col.add(
                (*key, "constraints", j),
                "constraint",
                f"variant {v.name}: the default params ({shown}) break constraint {expr.text!r}; "
                "change params: or the constraint",
            )
            broken = True
    defaults_tunable = all(defaults.get(p) in vals for p, vals in v.tunables.items())
    if not v.tunables or (not broken and defaults_tunable):
        return  # the defaults are one tunable combination, and they satisfy every constraint
    axes = [v.tunables.get(p) or (n,) for p, n in defaults.items()]
    tried = 0
    for combo in itertools.product(*axes):
        tried += 1
        if tried > MAX_COMBINATIONS:
            return  # too many to search; the default-params check above still stands
        env = dict(zip(defaults, combo, strict=True))
        try:
            if all(e.holds(env) for e in checked):
                return
        except GuardError:
            continue
    col.add(
        (*key, "constraints"),
        "constraint",
        f"variant {v.name}: none of the {tried} combinations of params and tunables satisfies "
        "all of the constraints, so the tuner has nothing to try; relax the constraints or "
        "change the values",
        at_key=True,
    )


def _check_coverage(col: _Collector, spec: OpSpec) -> None:
    near: list[str] = []  # generic variants that fall short, and why
    for v in spec.variants:
        try:
            generic = bool(v.arch) and all(parse_target(a).level is Level.GENERIC for a in v.arch)
        except ValueError:
            continue
        if not generic:
            continue
        short: list[str] = []
        missing = [d for d in spec.dtypes if v.dtypes is not None and d not in v.dtypes]
        if missing:
            short.append(f"lacks dtype {', '.join(missing)}")
        for t in spec.tensors:
            allowed = (v.layouts or {}).get(t, spec.layouts_of(t))
            lacking = [lay for lay in spec.layouts_of(t) if lay not in allowed]
            if lacking:
                short.append(f"lacks layout {'/'.join(lacking)} of {t}")
        if v.when is not None:
            short.append("has a when: guard")
        if v.requires != Requires():
            short.append("has requires:")
        if not short:
            return
        near.append(f"{v.name} {' and '.join(short)}")
    why = f" ({'; '.join(near)})" if near else ""
    col.add(
        ("variants",),
        "generic-coverage",
        f"op {spec.op!r} has no generic fallback: one variant must have arch: generic, cover "
        f"every dtype ({', '.join(spec.dtypes)}) and layout, and have no guard or "
        f"requirement{why}",
    )


@dataclass(frozen=True)
class _Reach:
    """What one variant can serve: the calls it matches, before guards and requirements."""

    targets: frozenset[Target]
    dtypes: frozenset[str]
    layouts: tuple[frozenset[str], ...]  # per tensor, in spec.tensors order


def _reach(spec: OpSpec, v: VariantSpec) -> _Reach | None:
    try:
        targets = frozenset(parse_target(a) for a in v.arch)
    except ValueError:
        return None  # reported as vocabulary
    allowed = v.layouts or {}
    return _Reach(
        targets,
        frozenset(v.dtypes or spec.dtypes),
        tuple(frozenset(allowed.get(t, spec.layouts_of(t))) for t in spec.tensors),
    )


def _check_ambiguity(col: _Collector, spec: OpSpec) -> None:
    """Two variants tie when one call can match both with equal rank: the same priority, a
    target they share (a device has one vendor, type, arch and name, so only equal targets can
    match it at one level), and overlapping dtypes and layouts. Guards are not considered: they
    are decided per call, and a tie is refused here, at generation, not at run time."""
    earlier: list[tuple[int, VariantSpec, _Reach]] = []
    tensors = list(spec.tensors)
    for i, v in enumerate(spec.variants):
        reach = _reach(spec, v)
        if reach is None:
            continue
        for j, w, other in earlier:
            shared = reach.targets & other.targets
            dtypes = reach.dtypes & other.dtypes
            layouts = [a & b for a, b in zip(reach.layouts, other.layouts, strict=True)]
            if v.priority != w.priority or not shared or not dtypes or not all(layouts):
                continue
            first = locate(col.tree, ("variants", j, "name"))
            where = " ".join(
                f"{t}:{'/'.join(sorted(lay))}"
                for t, lay in zip(tensors, layouts, strict=True)
                if len(spec.layouts_of(t)) > 1
            )
            guarded = " (when: guards do not break ties)" if v.when or w.when else ""
            col.add(
                ("variants", i, "name"),
                "ambiguous-variants",
                f"variants {w.name!r} (line {first.line if first else '?'}) and {v.name!r} tie: "
                f"both target {', '.join(str(t) for t in sorted(shared))} with priority "
                f"{v.priority} for dtype{'s' * (len(dtypes) > 1)} {', '.join(sorted(dtypes))}"
                f"{' and layouts ' + where if where else ''}, so the dispatcher could not "
                f"choose{guarded}; give one a higher priority, or narrow its dtypes, layouts or "
                "arch",
            )
        earlier.append((i, v, reach))


_TEMPLATE_PATH = re.compile(r"[A-Za-z0-9_.+\-]+(/[A-Za-z0-9_.+\-]+)*\Z")
MAX_TEMPLATE_PATH = 255


def template_problems(template: str, layout: Layout) -> Iterator[str]:
    """Why `template` cannot be used: outside the template folder, oddly named, or missing."""
    p = Path(template)
    if p.is_absolute() or ".." in p.parts or "\\" in template:
        yield f"template path {template!r} must be relative to templates/ and stay inside it"
        return
    if not _TEMPLATE_PATH.match(template) or len(template) > MAX_TEMPLATE_PATH:
        yield (
            f"template path {template!r} must be folder and file names of letters, digits and "
            f"'_.+-', joined by '/', at most {MAX_TEMPLATE_PATH} characters"
        )
        return
    if not template.endswith(".cl.j2"):
        yield f"template {template!r} must end in .cl.j2"
    root = layout.templates.resolve()
    try:
        full = (root / p).resolve()
        inside = full.is_relative_to(root)
        exists = inside and full.is_file()
    except (OSError, ValueError) as exc:
        yield f"template path {template!r} cannot be used: {exc}"
        return
    if not inside:
        yield f"template path {template!r} leaves templates/"
    elif not exists:
        yield f"template {template!r} does not exist under {layout.rel(root)}/"


# --- entry points -------------------------------------------------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "an empty document"
    if isinstance(value, list):
        return "a list"
    return f"a single {type(value).__name__} value"


def check_text(
    text: str, path: str, layout: Layout = DEFAULT
) -> tuple[LoadedSpec | None, list[Diagnostic]]:
    """Load one spec from text; return it (if valid) and every diagnostic found."""
    try:
        tree = load_yaml(text, path)
    except YamlProblem as exc:
        return None, [exc.diagnostic]
    col = _Collector(path, tree)
    if not isinstance(tree, LocMap):
        col.diags.append(
            Diagnostic(
                getattr(tree, "loc", None) or Location(path, 1, 1),
                "type",
                f"a spec file must hold one mapping (op:, dims:, inputs:, ...), not {_kind(tree)}",
            )
        )
        return None, col.diags
    try:
        spec = OpSpec.model_validate(tree)
    except ValidationError as err:
        _pydantic_diags(col, err)
        return None, col.diags
    stem = Path(path).name.split(".")[0]
    _check(col, spec, layout, stem)
    if col.diags:
        return None, col.diags
    return LoadedSpec(path, spec, tree), []


def spec_files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*.yaml") if p.is_file())


def read_spec(path: Path, layout: Layout = DEFAULT) -> tuple[str | None, list[Diagnostic]]:
    """The text of one spec file, or None and why it cannot be read."""
    try:
        return path.read_text(encoding="utf-8"), []
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Diagnostic(Location(layout.rel(path)), "io", f"cannot read spec: {exc}")]


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


def load_specs(layout: Layout = DEFAULT, files: list[Path] | None = None) -> list[LoadedSpec]:
    """Load every spec of a tree; raise one SpecError carrying all diagnostics of all files."""
    loaded: list[LoadedSpec] = []
    diags: list[Diagnostic] = []
    for f in files if files is not None else spec_files(layout.specs):
        text, problems = read_spec(f, layout)
        diags.extend(problems)
        if text is None:
            continue
        spec, found = check_text(text, layout.rel(f), layout)
        diags.extend(found)
        if spec is not None:
            loaded.append(spec)
    diags.extend(duplicate_ops(loaded))
    if diags:
        raise SpecError(diags)
    return loaded
