"""An elementwise op's expression (the spec's `expr:`): OpenCL C over the op's operands, checked
token by token, and rendered by substitution.

The text is a C expression over the op's input tensors by name (each occurrence in parentheses
or as a function argument, so that any C expression can stand in its place), its attributes by
name, `V` (the compute type the expression is evaluated in: a scalar such as ACC_ or a vector
such as float16), number literals, C operators, and calls of a fixed list of OpenCL built-ins
(:data:`FUNCTIONS`). Nothing else passes: spec text never reaches OpenCL source unchecked.
Rendering replaces each name token by the caller's text and leaves every other character as
written, so the op's own kernels (the elementwise templates' `cf.unary`, `cf.binary`,
`cf.ternary`) and every fused kernel are rendered from this one expression.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# OpenCL C built-ins an expression may call (scalar and vector forms alike); `ipow` is clforge's
# integer power (emitted by _common/macros.cl.j2's helpers(), named per width by the caller)
FUNCTIONS = frozenset(
    {
        *("exp", "log", "sqrt", "rsqrt", "tanh", "erf", "fabs", "pow", "ipow"),
        *("fmin", "fmax", "sin", "cos", "floor", "ceil", "round", "trunc"),
    }
)
TYPE_NAME = "V"

_TOKEN = re.compile(
    r"(?P<space>\s+)"
    r"|(?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[fF]?)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op><=|>=|==|!=|&&|\|\||<<|>>|[-+*/%<>!?:(),&|^~])"
)


@dataclass(frozen=True)
class Token:
    kind: str  # space, number, name, op
    text: str


def tokens(text: str) -> tuple[Token, ...]:
    """The tokens of `text`; ValueError naming the first character no token takes."""
    out = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"unexpected {text[pos]!r} at column {pos + 1}")
        kind = m.lastgroup or "op"
        out.append(Token(kind, m.group()))
        pos = m.end()
    return tuple(out)


def problems(text: str, operands: Sequence[str], attrs: Sequence[str]) -> list[str]:
    """What is wrong with expression `text` of an op with these inputs and attributes."""
    try:
        toks = [t for t in tokens(text) if t.kind != "space"]
    except ValueError as exc:
        return [str(exc)]
    out: list[str] = []
    depth = 0
    for i, t in enumerate(toks):
        if t.text == "(":
            depth += 1
        elif t.text == ")":
            depth -= 1
            if depth < 0:
                out.append("a ')' closes no '('")
                depth = 0
        if t.kind != "name":
            continue
        before = toks[i - 1].text if i else ""
        after = toks[i + 1].text if i + 1 < len(toks) else ""
        if after == "(":
            if t.text not in FUNCTIONS:
                out.append(
                    f"{t.text!r} is called, but is not one of the functions an expression may "
                    f"call ({', '.join(sorted(FUNCTIONS))})"
                )
        elif t.text in operands:
            if before not in ("(", ",") or after not in (")", ","):
                out.append(
                    f"operand {t.text!r} must stand in parentheses or as a function argument, "
                    f"as ({t.text}), so that any expression can take its place"
                )
        elif t.text not in attrs and t.text != TYPE_NAME:
            out.append(
                f"{t.text!r} is not an input ({', '.join(operands)}), an attribute "
                f"({', '.join(attrs) or 'none'}) nor {TYPE_NAME} (the compute type)"
            )
    if depth:
        out.append("a '(' is never closed")
    missing = [o for o in operands if not any(t.text == o for t in toks)]
    if missing and not out:
        out.append(f"input {', '.join(missing)} is not used")
    return out


def render(
    text: str,
    names: Mapping[str, str],
    type_name: str,
    functions: Mapping[str, str] | None = None,
) -> str:
    """`text` with each operand or attribute replaced by `names[name]` (C text), V by
    `type_name`, and each function named in `functions` renamed; every other character kept."""
    functions = functions or {}
    toks = tokens(text)
    out = []
    for i, t in enumerate(toks):
        if t.kind != "name":
            out.append(t.text)
            continue
        nxt = next((u.text for u in toks[i + 1 :] if u.kind != "space"), "")
        if nxt == "(":
            out.append(functions.get(t.text, t.text))
        elif t.text == TYPE_NAME:
            out.append(type_name)
        else:
            out.append(names[t.text])
    return "".join(out)


def of_op(
    op: Any,
    is_float: bool,
    args: Sequence[str],
    type_name: str,
    functions: Mapping[str, str] | None = None,
    attrs: Mapping[str, str] | None = None,
) -> str:
    """Op `op`'s expression (an OpSig) on `args` (C text, one per input in order), for the
    templates (the global `elementwise_expression`); attributes by `attrs` (default: the kernel
    argument of the same name)."""
    text = op.expression(is_float)
    if text is None:
        raise ValueError(f"op {op.name!r} states no elementwise expression (expr:)")
    if len(args) != len(op.inputs):
        raise ValueError(f"op {op.name!r} takes {len(op.inputs)} operands, not {len(args)}")
    names = {t.name: str(a) for t, a in zip(op.inputs, args, strict=True)}
    names.update({a.name: a.name for a in op.attrs})
    names.update(attrs or {})
    return render(text, names, type_name, functions)
