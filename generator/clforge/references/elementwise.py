"""References for the elementwise ops: unary (`call: flat`, dim N) and binary with NumPy
broadcasting (`call: broadcast`, dims D0..D3, inputs of shape [D0, D1, D2, D3] or any shape that
broadcasts to it)."""

from __future__ import annotations

from collections.abc import Callable
from math import erf
from typing import Any

import numpy as np

from clforge.references.base import Case, Reference

_erf = np.vectorize(erf, otypes=[np.float64])

Unary = Callable[[np.ndarray, dict[str, Any]], np.ndarray]
Binary = Callable[[np.ndarray, np.ndarray], np.ndarray]

# the default sizes of a one-dim op, with some attribute values on top
_N = (1, 7, 130, 8195, 0)


def _unary(f: Unary, attrs: tuple[dict[str, float | int], ...] = (), **kw: Any) -> Reference:
    cases = None
    if attrs:
        cases = tuple(Case({"N": n}) for n in _N) + tuple(
            Case({"N": n}, attrs=a) for a in attrs for n in (1, 8195, 0)
        )
    return Reference(lambda a, at: {"y": f(a["x"], at)}, cases=cases, **kw)


def _gelu(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    if attrs.get("approximate", 0):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / np.sqrt(2)))


def _leaky_relu(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    return np.where(x < 0, attrs.get("alpha", 0.01) * x, x)


def div_trunc(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b; for integers the quotient truncates toward zero like C (np.trunc, not floor)."""
    if not np.issubdtype(np.result_type(a, b), np.integer):
        return a / b
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q).astype(np.result_type(a, b))


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a ** b; for integers, NumPy's wrapping int32 power, and for a negative exponent (which
    NumPy refuses) the kernels' integer part of the real power: 1 for base 1, +-1 for base -1,
    else 0."""
    if not np.issubdtype(np.result_type(a, b), np.integer):
        return np.power(a, b)
    a, b = np.broadcast_arrays(a, b)
    neg = b < 0
    r = np.power(a, np.where(neg, 0, b))
    odd = (b & 1) == 1
    at_neg = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0))
    return np.where(neg, at_neg, r).astype(r.dtype)


def cast_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """x as NumPy's astype(dtype), with the saturating float-to-int conversion the kernels make
    where NumPy's is undefined (NaN gives 0, values beyond int32 its bounds)."""
    if dtype == "int32" and np.issubdtype(x.dtype, np.floating):
        wide = np.clip(np.nan_to_num(np.trunc(x.astype(np.float64))), INT32_MIN, INT32_MAX)
        return np.where(np.isnan(x), 0, wide).astype(np.int32)
    with np.errstate(over="ignore"):  # beyond the range of f16 or f32: infinities, as meant
        return x.astype(dtype)


def _cast(dtype: str) -> Reference:
    # the kernels' outputs are exact: the reference gives the very value, in its own dtype
    return Reference(lambda a, _: {"y": cast_to(a["x"], dtype)}, domains={"x": "cast"}, exact=True)


_DIMS = ("D0", "D1", "D2", "D3")


def _bcase(
    dims: tuple[int, int, int, int],
    a: tuple[int, ...] | None = None,
    b: tuple[int, ...] | None = None,
) -> Case:
    shapes = {k: s for k, s in (("a", a), ("b", b)) if s is not None}
    return Case(dict(zip(_DIMS, dims, strict=True)), shapes)


# Shapes of broadcast inputs are rank 4 here (the convention pads lower ranks with leading 1s):
# same shapes (1, primes, chunks with tails), a row (rank 1) and a column broadcast, a single
# element, both inputs stretched on different axes, rows of one element, an empty tensor.
BINARY_CASES: tuple[Case, ...] = (
    _bcase((1, 1, 1, 1)),
    _bcase((2, 3, 5, 7)),
    _bcase((1, 1, 1, 8195)),
    _bcase((1, 1, 3, 4099)),
    _bcase((3, 5, 7, 130), b=(1, 1, 1, 130)),
    _bcase((2, 3, 67, 13), b=(2, 3, 67, 1)),
    _bcase((1, 1, 13, 1001), a=(1, 1, 1, 1)),
    _bcase((1, 1, 1, 9001), b=(1, 1, 1, 1)),
    _bcase((3, 5, 11, 7), a=(1, 5, 1, 7), b=(3, 1, 11, 1)),
    _bcase((2, 3, 5, 8), a=(2, 1, 5, 8), b=(2, 3, 1, 8)),
    _bcase((1, 7, 4099, 1), a=(1, 1, 4099, 1), b=(1, 7, 1, 1)),
    _bcase((2, 0, 3, 5)),
    _bcase((4, 1, 3, 0), b=(1, 1, 1, 0)),
)


# Three inputs (by position), rank 4: all full; one stretched along each axis in turn; single
# elements; rows and columns; an empty tensor.
_Shapes = tuple[tuple[int, ...] | None, ...]  # per input, None for the full shape
_TERNARY_SHAPES: tuple[tuple[tuple[int, int, int, int], _Shapes], ...] = (
    ((1, 1, 1, 1), (None, None, None)),
    ((2, 3, 5, 7), (None, None, None)),
    ((1, 1, 3, 4099), (None, None, None)),
    ((1, 1, 1, 9001), (None, (1, 1, 1, 1), (1, 1, 1, 1))),
    ((3, 5, 7, 130), ((1, 1, 1, 130), None, (3, 5, 7, 1))),
    ((2, 3, 67, 13), (None, (2, 3, 67, 1), (1, 1, 1, 13))),
    ((3, 5, 11, 7), ((1, 5, 1, 7), (3, 1, 11, 1), (1, 1, 1, 1))),
    ((1, 7, 4099, 1), ((1, 1, 4099, 1), (1, 7, 1, 1), None)),
    ((2, 0, 3, 5), (None, None, None)),
    ((4, 1, 3, 0), (None, (1, 1, 1, 0), (1, 1, 1, 1))),
)


def _ternary(f: Callable[..., np.ndarray], names: tuple[str, str, str], **kw: Any) -> Reference:
    cases = tuple(
        Case(
            dict(zip(_DIMS, dims, strict=True)),
            {n: s for n, s in zip(names, shapes, strict=True) if s is not None},
        )
        for dims, shapes in _TERNARY_SHAPES
    )
    return Reference(lambda a, _: {"out": np.asarray(f(*(a[n] for n in names)))}, cases=cases, **kw)


def _where(cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.asarray(np.where(cond != 0, x, y))


def _binary(f: Binary, **kw: Any) -> Reference:
    return Reference(lambda a, _: {"c": f(a["a"], a["b"])}, cases=BINARY_CASES, **kw)


def _arith(f: Callable[[np.ndarray], np.ndarray]) -> Unary:
    return lambda x, _: f(x)


REFERENCES: dict[str, Reference] = {
    # unary
    "relu": _unary(_arith(lambda x: np.where(x < 0, np.zeros_like(x), x))),
    "leaky_relu": _unary(_leaky_relu, attrs=({"alpha": 0.2},)),
    "gelu": _unary(_gelu, attrs=({"approximate": 1},)),
    "silu": _unary(_arith(lambda x: x / (1 + np.exp(-x)))),
    "sigmoid": _unary(_arith(lambda x: 1 / (1 + np.exp(-x)))),
    "tanh": _unary(_arith(np.tanh)),
    "exp": _unary(_arith(np.exp)),
    "log": _unary(_arith(np.log), domains={"x": "positive"}),
    "sqrt": _unary(_arith(np.sqrt), domains={"x": "positive"}),
    "rsqrt": _unary(_arith(lambda x: 1 / np.sqrt(x)), domains={"x": "positive"}),
    "neg": _unary(_arith(np.negative)),
    "abs": _unary(_arith(np.abs)),
    # binary, broadcasting
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _binary(div_trunc, domains={"b": "nonzero"}),
    "maximum": _binary(np.maximum),
    "minimum": _binary(np.minimum),
    "pow": _binary(power, domains={"a": "positive", "b": "small"}),
    # three inputs, broadcasting
    "clip": _ternary(lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi), ("x", "lo", "hi")),
    "where": _ternary(_where, ("cond", "x", "y"), domains={"cond": "mask"}),
    # casts, named after the destination dtype
    "cast_f16": _cast("float16"),
    "cast_f32": _cast("float32"),
    "cast_f64": _cast("float64"),
    "cast_i32": _cast("int32"),
}

__all__ = ["BINARY_CASES", "REFERENCES", "cast_to", "div_trunc", "power"]


def __getattr__(name: str) -> Reference:
    """`clforge.references.elementwise:<op>`, the path a spec's `reference:` names."""
    try:
        return REFERENCES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no reference {name!r}") from None
