"""Checks of one variant against its op: targets, template path, dtypes and layouts, build
options, extensions, guards and launch expressions, params, tunables and constraints."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator
from pathlib import Path

from clforge.core import expressions
from clforge.core.diagnostics import Collector, KeyPath, dotted
from clforge.core.dtypes import DTYPES
from clforge.core.identifiers import identifier_problem
from clforge.core.targets import parse_target
from clforge.core.tree import DEFAULT, SHARED_TEMPLATES, Tree
from clforge.errors import GuardError
from clforge.params.properties import ANY_DEVICE, evaluation_order
from clforge.spec.model import CONSTRAINT_PROPERTIES, DEVICE_PROPERTIES, OpSpec, VariantSpec

# build options a spec may give: they reach clBuildProgram, so only known, harmless ones
BUILD_OPTION = re.compile(
    r"-cl-std=CL(1\.1|1\.2|2\.0|3\.0)|-cl-fast-relaxed-math|-cl-mad-enable|-cl-no-signed-zeros"
    r"|-cl-finite-math-only|-cl-unsafe-math-optimizations|-cl-denorms-are-zero"
    r"|-D[A-Za-z][A-Za-z0-9_]{0,47}(=-?[0-9]{1,18})?"
)


def check_variant(
    col: Collector,
    spec: OpSpec,
    v: VariantSpec,
    key: KeyPath,
    taken: dict[str, str],
    tree: Tree,
) -> None:
    for j, a in enumerate(v.arch):
        try:
            parse_target(a)
        except ValueError as exc:
            col.add((*key, "arch", j), "vocabulary", f"variant {v.name}: {exc}")
    for msg in template_problems(v.template, tree):
        col.add((*key, "template"), "template-path", f"variant {v.name}: {msg}")
    if v.epilogue is not None and v.epilogue not in spec.outputs:
        col.add(
            (*key, "epilogue"),
            "epilogue",
            f"variant {v.name}: epilogue names {v.epilogue!r}, which is not an output of "
            f"{spec.op!r} ({', '.join(spec.outputs)})",
        )
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
        check_expr(col, (*key, "when"), v.when, "bool", scope)
    if v.prefer_when is not None:
        check_expr(
            col,
            (*key, "prefer_when"),
            v.prefer_when,
            "bool",
            set(spec.dims) | set(DEVICE_PROPERTIES),
            "neither a dim of the op nor a device property",
        )
    for part in ("global_size", "local_size"):
        for j, e in enumerate(getattr(v.launch, part, None) or ()):
            check_expr(col, (*key, "launch", part, j), str(e), "int", scope)
    _check_constraints(col, v, key, v.dtypes or spec.dtypes)
    for p, text in v.device_params.items():
        if p not in v.params:
            col.add(
                (*key, "device_params", p),
                "tunable",
                f"variant {v.name}: device_params sets {p!r}, which is not in params",
                at_key=True,
            )
        check_expr(
            col,
            (*key, "device_params", p),
            text,
            "int",
            set(DEVICE_PROPERTIES) | set(spec.dims) | (set(v.device_params) - {p}),
            "neither a device property, a dim of the op nor another of the variant's device_params",
        )
    _check_device_params_order(col, v, key)
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
    "neither a param of this variant nor the device's register file (constraints name params, "
    f"{', '.join(CONSTRAINT_PROPERTIES)}; put conditions on dims in when:)"
)


def check_expr(
    col: Collector,
    keys: KeyPath,
    text: str,
    kind: expressions.Kind,
    scope: set[str],
    what: str = _DIM_OR_PARAM,
) -> expressions.Expr | None:
    """The parsed expression, or None after reporting why it is unusable."""
    try:
        expr = expressions.parse(text, kind)
    except GuardError as exc:
        at = exc.text[exc.pos] if 0 <= exc.pos < len(exc.text) else ""
        hint = _GUARD_HINTS.get(at, "")
        col.add(keys, "guard-syntax", f"{dotted(keys)}: {exc}{hint}")
        return None
    unknown = sorted(expr.names - scope)
    if unknown:
        col.add(
            keys,
            "guard-name",
            f"{dotted(keys)}: {', '.join(map(repr, unknown))} "
            f"{'is' if len(unknown) == 1 else 'are'} {what} "
            f"(known: {', '.join(sorted(scope)) or 'none'})",
        )
        return None
    return expr


def _check_device_params_order(col: Collector, v: VariantSpec, key: KeyPath) -> None:
    """The device_params that read each other must not do so in a cycle."""
    reads: dict[str, set[str]] = {}
    for p, text in v.device_params.items():
        try:
            reads[p] = set(expressions.parse(text, "int").names)
        except GuardError:
            return  # check_expr reports it
    if evaluation_order(reads) is None:
        col.add(
            (*key, "device_params"),
            "tunable",
            f"variant {v.name}: device_params read each other in a cycle "
            f"({', '.join(sorted(reads))}); each may read only those computed before it",
            at_key=True,
        )


MAX_COMBINATIONS = 100_000  # tunable combinations searched for one that meets the constraints


def _register_env(dtypes: tuple[str, ...] | list[str] = ()) -> dict[str, int]:
    """The register file constraints read where no device is named: the widest ISA's
    (params.properties.ANY_DEVICE), with the widest of `dtypes`' elements (the narrowest, 8
    bits, where none is given: the search for a combination that holds on some device)."""
    bits = max((8 * DTYPES[d].size for d in dtypes if d in DTYPES), default=8)
    return {**ANY_DEVICE, "dtype_bits": bits}


def _check_constraints(
    col: Collector, v: VariantSpec, key: KeyPath, dtypes: tuple[str, ...] | list[str]
) -> None:
    """Each constraint parses, names only params and the register file, and holds for the
    default params on the widest ISA with the variant's widest dtype; some combination of
    tunable values satisfies them all."""
    scope = set(v.params) | set(CONSTRAINT_PROPERTIES)
    exprs = [
        check_expr(col, (*key, "constraints", j), c, "bool", scope, _PARAM_ONLY)
        for j, c in enumerate(v.constraints)
    ]
    checked = [e for e in exprs if e is not None]
    if not checked or len(checked) != len(exprs):
        return
    defaults = dict(v.params)
    shown = ", ".join(f"{p}={n}" for p, n in defaults.items())
    broken = False
    at_defaults = {**_register_env(dtypes), **defaults}
    for j, expr in enumerate(checked):
        try:
            holds = expr.holds(at_defaults)
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
    tried = _combinations(v)
    if tried > MAX_COMBINATIONS or next(satisfying(v, checked), None) is not None:
        return  # too many to search (the default-params check above still stands), or one holds
    col.add(
        (*key, "constraints"),
        "constraint",
        f"variant {v.name}: none of the {tried} combinations of params and tunables satisfies "
        "all of the constraints, so the tuner has nothing to try; relax the constraints or "
        "change the values",
        at_key=True,
    )


def _combinations(v: VariantSpec) -> int:
    return math.prod(len(v.tunables.get(p) or (n,)) for p, n in v.params.items())


def satisfying(v: VariantSpec, checked: list[expressions.Expr]) -> Iterator[dict[str, int]]:
    """Every combination of `v`'s params and tunable values that meets all of `checked` (its
    parsed constraints), in product order; one that cannot be evaluated does not."""
    defaults = dict(v.params)
    device = _register_env()
    for combo in itertools.product(*(v.tunables.get(p) or (n,) for p, n in defaults.items())):
        env = dict(zip(defaults, combo, strict=True))
        try:
            if all(e.holds({**device, **env}) for e in checked):
                yield env
        except GuardError:
            continue


def dead_tunable_values(v: VariantSpec) -> list[tuple[str, int, int]]:
    """(param, index, value) of each tunable value that no combination meeting the constraints
    uses, so that the tuner never tries it; none when the space is too large to search, when a
    constraint does not parse (other checks say so), or when no combination meets them all."""
    if not v.tunables or not v.constraints or _combinations(v) > MAX_COMBINATIONS:
        return []
    try:
        checked = [expressions.parse(c, "bool") for c in v.constraints]
    except GuardError:
        return []
    used: set[tuple[str, int]] = set()
    for env in satisfying(v, checked):
        used |= set(env.items())
    if not used:
        return []
    return [
        (p, j, value)
        for p, values in v.tunables.items()
        for j, value in enumerate(values)
        if (p, value) not in used
    ]


_TEMPLATE_PATH = re.compile(r"[A-Za-z0-9_.+\-]+(/[A-Za-z0-9_.+\-]+)*\Z")
MAX_TEMPLATE_PATH = 255


def template_problems(template: str, tree: Tree) -> Iterator[str]:
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
    root = tree.templates.resolve()
    if p.parts[0] == SHARED_TEMPLATES and len(p.parts) > 1:  # one of clforge's own
        root, p = DEFAULT.templates.resolve(), Path(*p.parts[1:])
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
        yield f"template {template!r} does not exist under {tree.rel(root)}/"
