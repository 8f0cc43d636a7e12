"""Checks that span an op's fields: names in one namespace, dims bound by inputs, derived dims,
the calling convention, every variant (see :mod:`variant_checks`), generic coverage and ties."""

from __future__ import annotations

from dataclasses import dataclass

from clforge.conventions import CONVENTIONS
from clforge.core import elementwise_expr
from clforge.core.diagnostics import Collector, KeyPath
from clforge.core.identifiers import identifier_problem
from clforge.core.layouts import LAYOUTS
from clforge.core.located_yaml import locate
from clforge.core.targets import Level, Target, parse_target
from clforge.core.tree import Tree
from clforge.spec.model import OpSpec, Requires, VariantSpec
from clforge.spec.routine_checks import check_routine
from clforge.spec.signature import signature_of
from clforge.spec.variant_checks import check_expr, check_variant


def check_op(col: Collector, spec: OpSpec, tree: Tree, stem: str, kind: str = "op") -> None:
    """Every check of one op; `kind` "family" checks a family's body as an op named after it
    (the family file's own name is checked where it is loaded)."""

    def ident(
        keys: KeyPath, name: str, what: str, *, at_key: bool = True, reserved: bool = True
    ) -> None:
        problem = identifier_problem(name, reserved=reserved)
        if problem:
            col.add(keys, "c-identifier", f"{what} {problem}", at_key=at_key)

    ident(("op",), spec.op, f"{kind} name", at_key=False, reserved=False)
    if spec.op != stem:
        col.add(
            ("op",),
            "file-name",
            f"op {spec.op!r} must live in a file named {spec.op}.yaml, not {stem}.yaml",
        )

    # one namespace: dims, tensors and attributes all become kernel arguments
    seen: dict[str, str] = {}

    def claim(keys: KeyPath, name: str, what: str, at_key: bool = True) -> None:
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
        check_expr(col, ("derived", d), text, "int", known)
        known.add(d)
        bound.add(d)
    for i, c in enumerate(spec.checks):
        check_expr(col, ("checks", i, "expr"), c.expr, "bool", set(spec.dims) | int_attrs)
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
        key: KeyPath = ("variants", i)
        problem = identifier_problem(v.name, reserved=False)
        if problem:
            col.add((*key, "name"), "c-identifier", f"variant name {problem}")
        if v.name in names_seen:
            first = _line(col, ("variants", names_seen[v.name], "name"))
            col.add(
                (*key, "name"),
                "duplicate-name",
                f"variant name {v.name!r} is used twice in {kind} {spec.op!r} (first at "
                f"{first}); instance names would collide",
            )
        else:
            names_seen[v.name] = i
        check_variant(col, spec, v, key, seen, tree)
        scope = set(spec.dims) | set(v.params) | int_attrs
        check_routine(col, spec, v, key, scope)

    _check_coverage(col, spec, kind)
    _check_ambiguity(col, spec)
    _check_accuracy(col, spec, int_attrs)
    _check_expr(col, spec)


def _check_expr(col: Collector, spec: OpSpec) -> None:
    """An elementwise expression (expr:) uses only the op's inputs, attributes, V and the
    built-ins, each input in parentheses; only an elementwise op (one output, every input of
    its shape) states one."""
    if spec.expr is None:
        return
    outs = list(spec.outputs.values())
    if len(outs) != 1 or any(t.shape != outs[0].shape for t in spec.inputs.values()):
        col.add(
            ("expr",),
            "elementwise-expr",
            f"expr: states an elementwise expression, but op {spec.op!r} is not elementwise "
            "(an elementwise op has one output, and every input has the output's shape)",
        )
        return
    forms = (
        [((), spec.expr)]
        if isinstance(spec.expr, str)
        else [(("float",), spec.expr.float), (("int",), spec.expr.int)]
    )
    for sub, text in forms:
        for problem in elementwise_expr.problems(text, list(spec.inputs), list(spec.attrs)):
            col.add(("expr", *sub), "elementwise-expr", f"expr {text!r}: {problem}")


def _line(col: Collector, keys: KeyPath) -> str:
    """`line 12` of the file being checked, or `specs/families/unary.yaml:12` of another one
    (a value an op inherits from its family)."""
    loc = locate(col.tree, keys)
    if loc is None:
        return "line ?"
    return f"line {loc.line}" if loc.path == col.path else f"{loc.path}:{loc.line}"


def _check_convention(col: Collector, spec: OpSpec) -> None:
    for problem in CONVENTIONS[spec.call].problems(signature_of(spec, col.path)):
        col.add(("call",), "convention", problem)


def _check_coverage(col: Collector, spec: OpSpec, kind: str) -> None:
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
        f"{kind} {spec.op!r} has no generic fallback: one variant must have arch: generic, cover "
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


def _check_ambiguity(col: Collector, spec: OpSpec) -> None:
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
            first = _line(col, ("variants", j, "name"))
            where = " ".join(
                f"{t}:{'/'.join(sorted(lay))}"
                for t, lay in zip(tensors, layouts, strict=True)
                if len(spec.layouts_of(t)) > 1
            )
            guarded = " (when: guards do not break ties)" if v.when or w.when else ""
            col.add(
                ("variants", i, "name"),
                "ambiguous-variants",
                f"variants {w.name!r} ({first}) and {v.name!r} tie: "
                f"both target {', '.join(str(t) for t in sorted(shared))} with priority "
                f"{v.priority} for dtype{'s' * (len(dtypes) > 1)} {', '.join(sorted(dtypes))}"
                f"{' and layouts ' + where if where else ''}, so the dispatcher could not "
                f"choose{guarded}; give one a higher priority, or narrow its dtypes, layouts or "
                "arch",
            )
        earlier.append((i, v, reach))


def _check_accuracy(col: Collector, spec: OpSpec, int_attrs: set[str]) -> None:
    """Each accuracy bound names variants of the op, dtypes they serve and int attributes, over
    a non-empty range; no two bounds speak of one instance at the same attribute values."""
    variants = {v.name: v for v in spec.variants}
    defaults = {n: a.default for n, a in spec.attrs.items() if n in int_attrs}
    seen: dict[tuple[str, str, tuple[tuple[str, object], ...]], int] = {}
    for i, b in enumerate(spec.accuracy):
        key: KeyPath = ("accuracy", i)
        for n in b.attrs:
            if n not in int_attrs:
                col.add(
                    (*key, "attrs", n),
                    "accuracy",
                    f"accuracy[{i}]: {n!r} is not an int attribute of {spec.op!r} "
                    f"({', '.join(sorted(int_attrs)) or 'it has none'})",
                    at_key=True,
                )
        if not b.range[0] < b.range[1]:
            col.add((*key, "range"), "accuracy", f"accuracy[{i}]: range must be [lo, hi], lo < hi")
        at = tuple(sorted({**defaults, **b.attrs}.items()))
        for j, name in enumerate(b.variants):
            v = variants.get(name)
            if v is None:
                col.add(
                    (*key, "variants", j),
                    "accuracy",
                    f"accuracy[{i}]: {spec.op!r} has no variant {name!r} ({', '.join(variants)})",
                )
                continue
            served = v.dtypes or spec.dtypes
            for k, d in enumerate(b.dtypes):
                if d not in served:
                    col.add(
                        (*key, "dtypes", k),
                        "accuracy",
                        f"accuracy[{i}]: variant {name!r} does not serve {d} ({', '.join(served)})",
                    )
                elif (name, d, at) in seen:
                    values = ", ".join(f"{n}={x}" for n, x in at)
                    col.add(
                        (*key, "dtypes", k),
                        "accuracy",
                        f"accuracy[{i}]: variant {name!r} in {d}{' at ' + values if at else ''} "
                        f"already has a bound ({_line(col, ('accuracy', seen[(name, d, at)]))})",
                    )
                else:
                    seen[(name, d, at)] = i
