"""Symbolic dims: integer polynomials over dim names (`S`, `H*hd`, `S + 1`, `64`).

A graph value's shape is a tuple of :class:`Dim`. One name means one size everywhere in the
graph; a dim written as a product or sum (an algebraic dim) is checked against the others when
a call binds the names. Dims are parsed with a small grammar of names, ints, `+`, `*` and
parentheses (never `eval`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from clforge.errors import GraphError

Monomial = tuple[str, ...]  # sorted names, a name repeated for a power


@dataclass(frozen=True)
class Dim:
    """A polynomial with int coefficients: terms (monomial, coefficient), sorted, no zeros."""

    terms: tuple[tuple[Monomial, int], ...]

    @staticmethod
    def of(value: int | str | Dim) -> Dim:
        if isinstance(value, Dim):
            return value
        if isinstance(value, bool):
            raise GraphError(f"a dim is an int or a name, not {value!r}")
        if isinstance(value, int):
            if value < 0:
                raise GraphError(f"a dim cannot be negative, got {value}")
            return Dim.const(value)
        if isinstance(value, str):
            return parse_dim(value)
        raise GraphError(f"a dim is an int or a name, not {value!r} ({type(value).__name__})")

    @staticmethod
    def const(value: int) -> Dim:
        return Dim(_norm({(): value}))

    @staticmethod
    def name(name: str) -> Dim:
        return Dim(_norm({(name,): 1}))

    # --- algebra --------------------------------------------------------------------------

    def __add__(self, other: Dim | int) -> Dim:
        o = Dim.of(other)
        acc = dict(self.terms)
        for m, c in o.terms:
            acc[m] = acc.get(m, 0) + c
        return Dim(_norm(acc))

    def __mul__(self, other: Dim | int) -> Dim:
        o = Dim.of(other)
        acc: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in o.terms:
                m = tuple(sorted(m1 + m2))
                acc[m] = acc.get(m, 0) + c1 * c2
        return Dim(_norm(acc))

    @property
    def names(self) -> frozenset[str]:
        return frozenset(n for m, _ in self.terms for n in m)

    @property
    def is_int(self) -> bool:
        return not self.names

    @property
    def value(self) -> int:
        """The int of a constant dim (GraphError for a symbolic one)."""
        if not self.is_int:
            raise GraphError(f"dim {self} is symbolic")
        return self.terms[0][1] if self.terms else 0

    @property
    def single_name(self) -> str | None:
        """The name when the dim is exactly one name."""
        if len(self.terms) == 1 and self.terms[0][1] == 1 and len(self.terms[0][0]) == 1:
            return self.terms[0][0][0]
        return None

    @property
    def is_monomial(self) -> bool:
        return len(self.terms) <= 1

    def evaluate(self, env: Mapping[str, int]) -> int:
        missing = sorted(self.names - env.keys())
        if missing:
            raise GraphError(f"dim {self}: no size for {', '.join(missing)}")
        return sum(c * math.prod(env[n] for n in m) for m, c in self.terms)

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for m, c in self.terms:
            if not m:
                parts.append(str(c))
            elif c == 1:
                parts.append("*".join(m))
            else:
                parts.append(f"{c}*" + "*".join(m))
        return " + ".join(parts)

    def __repr__(self) -> str:
        return f"Dim({str(self)!r})"


def _norm(acc: Mapping[Monomial, int]) -> tuple[tuple[Monomial, int], ...]:
    # names (longer monomials) first, the constant last: "S + 1", "2*D", "H*hd"
    return tuple(sorted(((m, c) for m, c in acc.items() if c), key=lambda t: (-len(t[0]), t[0])))


def shape_str(shape: tuple[Dim, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z_0-9]*)|(.))")


def parse_dim(text: str) -> Dim:
    """`S`, `64`, `H*hd`, `S + 1`, `2*(S + 1)`: names, ints, `+`, `*` and parentheses."""
    tokens: list[tuple[str, str]] = []
    for m in _TOKEN.finditer(text):
        if m.group(1):
            tokens.append(("int", m.group(1)))
        elif m.group(2):
            tokens.append(("name", m.group(2)))
        elif m.group(3) and not m.group(3).isspace():
            tokens.append(("op", m.group(3)))
    pos = 0

    def fail(why: str) -> GraphError:
        return GraphError(f"dim {text!r}: {why} (a dim is a name, an int, or +, * of them)")

    def peek() -> tuple[str, str] | None:
        return tokens[pos] if pos < len(tokens) else None

    def atom() -> Dim:
        nonlocal pos
        tok = peek()
        if tok is None:
            raise fail("ends early")
        pos += 1
        if tok[0] == "int":
            return Dim.const(int(tok[1]))
        if tok[0] == "name":
            return Dim.name(tok[1])
        if tok[1] == "-":  # as str() writes a negative coefficient: "S + -1", "-1*H"
            return atom() * Dim.const(-1)
        if tok[1] == "(":
            inner = total()
            if peek() != ("op", ")"):
                raise fail("a '(' is not closed")
            pos += 1
            return inner
        raise fail(f"unexpected {tok[1]!r}")

    def product() -> Dim:
        nonlocal pos
        acc = atom()
        while peek() == ("op", "*"):
            pos += 1
            acc = acc * atom()
        return acc

    def total() -> Dim:
        nonlocal pos
        acc = product()
        while peek() == ("op", "+"):
            pos += 1
            acc = acc + product()
        return acc

    if not tokens:
        raise fail("is empty")
    out = total()
    if pos != len(tokens):
        raise fail(f"unexpected {tokens[pos][1]!r}")
    return out
