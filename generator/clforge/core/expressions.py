"""The guard and launch-size expression language: parsed by this module, never `eval`.

Grammar (integers only; `/` is floor division, `%` the non-negative remainder)::

    expr    := or
    or      := and ('or' and)*
    and     := not ('and' not)*
    not     := 'not' not | compare
    compare := sum (('=='|'!='|'<'|'<='|'>'|'>=') sum)?
    sum     := product (('+'|'-') product)*
    product := unary (('*'|'/'|'%') unary)*
    unary   := '-' unary | atom
    atom    := INT | 'true' | 'false' | NAME | FUNC '(' expr (',' expr)* ')' | '(' expr ')'

Functions: min(a, b, ...), max(a, b, ...), cdiv(a, b) (ceiling division), is_pow2(a),
pick(i, x0, x1, ...) (x_i, with i clamped to the list: a permutation's dims from int attrs).
Names are dims and params, bound when evaluated. Expressions are type-checked when parsed:
a guard must be boolean, a launch size an integer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from clforge.errors import GuardError

Kind = Literal["int", "bool"]
Env = Mapping[str, int]

_TOKEN = re.compile(
    r"\s*(?:(?P<int>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>==|!=|<=|>=|[-+*/%<>(),]))"
)
_KEYWORDS = {"and", "or", "not", "true", "false"}
_MAX_LEN = 1000
_MAX_INT = 2**62


@dataclass(frozen=True)
class _Tok:
    kind: str  # int, name, op, end
    text: str
    pos: int


def _tokenize(text: str) -> list[_Tok]:
    if len(text) > _MAX_LEN:
        raise GuardError(text[:40] + "...", 0, f"expression longer than {_MAX_LEN} characters")
    toks: list[_Tok] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise GuardError(text, pos, f"unexpected character {text[pos]!r}")
        kind = m.lastgroup or "op"
        toks.append(_Tok(kind, m.group(kind), m.start(kind)))
        pos = m.end()
    toks.append(_Tok("end", "", len(text)))
    return toks


# --- AST: each node evaluates itself against an environment of integer names -------------------


@dataclass(frozen=True)
class Expr:
    text: str  # the whole expression, for messages
    kind: Kind
    names: frozenset[str]
    fn: Callable[[Env], int]  # compiled closure; bools are 0/1

    def evaluate(self, env: Env) -> int:
        try:
            return self.fn(env)
        except KeyError as exc:
            raise GuardError(self.text, 0, f"name {exc.args[0]!r} is not bound") from None
        except ZeroDivisionError:
            raise GuardError(self.text, 0, "division by zero") from None

    def holds(self, env: Env) -> bool:
        return bool(self.evaluate(env))


def _is_pow2(v: int) -> int:
    return int(v > 0 and (v & (v - 1)) == 0)


def _pick(i: int, *xs: int) -> int:
    return xs[min(max(i, 0), len(xs) - 1)]


_FUNCS: dict[str, tuple[int, int | None, Kind, Callable[..., int]]] = {
    # name: (min args, max args or None, result kind, implementation)
    "min": (1, None, "int", min),
    "max": (1, None, "int", max),
    "cdiv": (2, 2, "int", lambda a, b: -(-a // b)),
    "is_pow2": (1, 1, "bool", _is_pow2),
    "pick": (2, None, "int", _pick),
}
FUNCTIONS = tuple(sorted(_FUNCS))

_CMP: dict[str, Callable[[int, int], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}
_ARITH: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a // b,
    "%": lambda a, b: a % b,
}


Fn = Callable[[Env], int]


def _both(lf: Fn, rf: Fn) -> Fn:
    return lambda e: int(bool(lf(e)) and bool(rf(e)))


def _either(lf: Fn, rf: Fn) -> Fn:
    return lambda e: int(bool(lf(e)) or bool(rf(e)))


def _apply(f: Callable[[int, int], int], lf: Fn, rf: Fn) -> Fn:
    return lambda e: f(lf(e), rf(e))


@dataclass(frozen=True)
class _Node:
    kind: Kind
    names: frozenset[str]
    fn: Callable[[Env], int]


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def error(self, tok: _Tok, message: str) -> GuardError:
        return GuardError(self.text, tok.pos, message)

    def expect(self, text: str) -> None:
        tok = self.take()
        if tok.text != text:
            got = "end of expression" if tok.kind == "end" else repr(tok.text)
            raise self.error(tok, f"expected {text!r}, found {got}")

    def want(self, node: _Node, kind: Kind, tok: _Tok, what: str) -> None:
        if node.kind != kind:
            raise self.error(
                tok, f"{what} needs {'an integer' if kind == 'int' else 'a condition'}"
            )

    def parse(self) -> _Node:
        node = self.or_()
        tok = self.peek()
        if tok.kind != "end":
            raise self.error(tok, f"unexpected {tok.text!r}")
        return node

    def _logic(self, word: str, sub: Callable[[], _Node]) -> _Node:
        first_tok = self.peek()
        node = sub()
        while self.peek().text == word:
            op_tok = self.take()
            self.want(node, "bool", first_tok, f"'{word}'")
            rhs_tok = self.peek()
            rhs = sub()
            self.want(rhs, "bool", rhs_tok, f"'{word}'")
            node = _Node(
                "bool",
                node.names | rhs.names,
                _both(node.fn, rhs.fn) if word == "and" else _either(node.fn, rhs.fn),
            )
            del op_tok
        return node

    def or_(self) -> _Node:
        return self._logic("or", self.and_)

    def and_(self) -> _Node:
        return self._logic("and", self.not_)

    def not_(self) -> _Node:
        if self.peek().text == "not":
            self.take()
            tok = self.peek()
            inner = self.not_()
            self.want(inner, "bool", tok, "'not'")
            f = inner.fn
            return _Node("bool", inner.names, lambda e: int(not f(e)))
        return self.compare()

    def compare(self) -> _Node:
        tok = self.peek()
        lhs = self.sum_()
        if self.peek().text in _CMP:
            op = self.take().text
            rtok = self.peek()
            rhs = self.sum_()
            self.want(lhs, "int", tok, f"'{op}'")
            self.want(rhs, "int", rtok, f"'{op}'")
            cmp, lf, rf = _CMP[op], lhs.fn, rhs.fn
            node = _Node("bool", lhs.names | rhs.names, lambda e: int(cmp(lf(e), rf(e))))
            if self.peek().text in _CMP:
                raise self.error(self.peek(), "comparisons do not chain; join them with 'and'")
            return node
        return lhs

    def _arith(self, ops: str, sub: Callable[[], _Node]) -> _Node:
        tok = self.peek()
        node = sub()
        while self.peek().text in ops and self.peek().kind == "op":
            op = self.take().text
            rtok = self.peek()
            rhs = sub()
            self.want(node, "int", tok, f"'{op}'")
            self.want(rhs, "int", rtok, f"'{op}'")
            node = _Node("int", node.names | rhs.names, _apply(_ARITH[op], node.fn, rhs.fn))
        return node

    def sum_(self) -> _Node:
        return self._arith("+-", self.product)

    def product(self) -> _Node:
        return self._arith("*/%", self.unary)

    def unary(self) -> _Node:
        if self.peek().text == "-":
            tok = self.take()
            inner = self.unary()
            self.want(inner, "int", tok, "'-'")
            f = inner.fn
            return _Node("int", inner.names, lambda e: -f(e))
        return self.atom()

    def atom(self) -> _Node:
        tok = self.take()
        if tok.kind == "int":
            value = int(tok.text)
            if value > _MAX_INT:
                raise self.error(tok, "integer literal too large")
            return _Node("int", frozenset(), lambda e: value)
        if tok.kind == "name":
            if tok.text in ("true", "false"):
                b = int(tok.text == "true")
                return _Node("bool", frozenset(), lambda e: b)
            if tok.text in _KEYWORDS:
                raise self.error(tok, f"unexpected {tok.text!r}")
            if self.peek().text == "(":
                return self.call(tok)
            name = tok.text
            if name in _FUNCS:
                raise self.error(tok, f"function {name!r} needs arguments: {name}(...)")
            return _Node("int", frozenset({name}), lambda e: e[name])
        if tok.text == "(":
            node = self.or_()
            self.expect(")")
            return node
        got = "end of expression" if tok.kind == "end" else repr(tok.text)
        raise self.error(tok, f"expected a number, name or '(', found {got}")

    def call(self, name_tok: _Tok) -> _Node:
        name = name_tok.text
        if name not in _FUNCS:
            raise self.error(
                name_tok, f"unknown function {name!r}; available: {', '.join(FUNCTIONS)}"
            )
        lo, hi, kind, impl = _FUNCS[name]
        self.expect("(")
        args: list[_Node] = []
        while True:
            tok = self.peek()
            arg = self.or_()
            self.want(arg, "int", tok, f"{name}()")
            args.append(arg)
            if self.peek().text == ",":
                self.take()
                continue
            self.expect(")")
            break
        if len(args) < lo or (hi is not None and len(args) > hi):
            want = str(lo) if hi == lo else f"{lo} or more" if hi is None else f"{lo}..{hi}"
            raise self.error(name_tok, f"{name}() takes {want} arguments, got {len(args)}")
        fns = tuple(a.fn for a in args)
        names = frozenset().union(*(a.names for a in args))
        if name == "cdiv":

            def checked(e: Env, fns: tuple = fns) -> int:
                a, b = fns[0](e), fns[1](e)
                return -(-a // b)

            return _Node(kind, names, checked)
        return _Node(kind, names, lambda e: int(impl(*(f(e) for f in fns))))


def parse(text: str, kind: Kind = "bool") -> Expr:
    """Parse `text` as an expression of `kind`; raise GuardError with the column on failure."""
    if not isinstance(text, str) or not text.strip():
        raise GuardError(str(text), 0, "empty expression")
    node = _Parser(text).parse()
    if node.kind != kind:
        want = "a condition (true/false)" if kind == "bool" else "an integer"
        raise GuardError(text, 0, f"expression must be {want}")
    return Expr(text, node.kind, node.names, node.fn)
