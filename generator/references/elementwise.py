"""References for the elementwise ops."""

from __future__ import annotations

from collections.abc import Callable
from math import erf

import numpy as np

from .base import Reference

_erf = np.vectorize(erf, otypes=[np.float64])


def _binary(f: Callable[[np.ndarray, np.ndarray], np.ndarray], **kw: object) -> Reference:
    return Reference(lambda a, _: {"c": f(a["a"], a["b"])}, **kw)  # type: ignore[arg-type]


def _unary(f: Callable[[np.ndarray], np.ndarray], **kw: object) -> Reference:
    return Reference(lambda a, _: {"y": f(a["x"])}, **kw)  # type: ignore[arg-type]


REFERENCES: dict[str, Reference] = {
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _binary(np.divide, domains={"b": "nonzero"}),
    "maximum": _binary(np.maximum),
    "minimum": _binary(np.minimum),
    "relu": _unary(lambda x: np.maximum(x, 0)),
    "gelu": _unary(lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2)))),
    "sigmoid": _unary(lambda x: 1 / (1 + np.exp(-x))),
    "tanh": _unary(np.tanh),
    "exp": _unary(np.exp),
}
