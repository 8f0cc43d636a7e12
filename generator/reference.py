"""NumPy references for the shipped ops, and the input domains to test them on.

Each reference computes in float64 from the inputs and returns the outputs by name; the tests,
the demo and the benchmarks all compare kernels with these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from math import erf

import numpy as np

Arrays = Mapping[str, np.ndarray]

_erf = np.vectorize(erf, otypes=[np.float64])


def _softmax(x: np.ndarray) -> np.ndarray:
    if x.shape[-1] == 0:
        return x.copy()
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@dataclass(frozen=True)
class Reference:
    fn: Callable[[Arrays], dict[str, np.ndarray]]
    # per input: "normal" (standard normal), "nonzero" (|v| in [0.5, 2]), "positive"
    domains: Mapping[str, str] = field(default_factory=dict)


def _binary(f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Reference:
    return Reference(lambda a: {"c": f(a["a"], a["b"])})


def _unary(f: Callable[[np.ndarray], np.ndarray]) -> Reference:
    return Reference(lambda a: {"y": f(a["x"])})


REFERENCES: dict[str, Reference] = {
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": Reference(lambda a: {"c": a["a"] / a["b"]}, {"b": "nonzero"}),
    "maximum": _binary(np.maximum),
    "minimum": _binary(np.minimum),
    "relu": _unary(lambda x: np.maximum(x, 0)),
    "gelu": _unary(lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2)))),
    "sigmoid": _unary(lambda x: 1 / (1 + np.exp(-x))),
    "tanh": _unary(np.tanh),
    "exp": _unary(np.exp),
    "sum": Reference(lambda a: {"y": a["x"].sum(axis=-1)}),
    "softmax": Reference(lambda a: {"y": _softmax(a["x"])}),
    "matmul": Reference(lambda a: {"c": a["a"] @ a["b"]}),
}


def make_input(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, domain: str = "normal"
) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        v = rng.integers(-50, 50, size=shape)
        if domain == "nonzero":
            v[v == 0] = 1
        return v.astype(dtype)
    v = rng.standard_normal(shape)
    if domain == "nonzero":
        v = np.sign(v) * (0.5 + np.abs(v) % 1.5)
        v[v == 0] = 1
    elif domain == "positive":
        v = 0.1 + np.abs(v)
    return v.astype(dtype)


def expected(op: str, inputs: Arrays) -> dict[str, np.ndarray]:
    """The reference outputs, computed in float64 (integers stay integers)."""
    ref = REFERENCES[op]
    wide = {
        k: v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v
        for k, v in inputs.items()
    }
    return ref.fn(wide)
