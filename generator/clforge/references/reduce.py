"""References for the reductions (sum, mean, max, min, argmax), softmax / log_softmax and the
normalizations (layer_norm, rms_norm), with their test cases.

Axis ops take x as [B, R, I] and reduce over R (the `axis` convention's canonical view); the
norms take x as [B, R] and normalize each row (the `trailing` convention's)."""

from __future__ import annotations

import numpy as np

from clforge.references.base import Case, Reference

EPS = 1e-5  # the specs' default eps, for callers (demo, bench) that pass no attributes


def _sum(x: np.ndarray) -> np.ndarray:
    # i32 sums wrap modulo 2**32 like the kernels (NumPy's default would widen to int64)
    return x.sum(axis=1, dtype=x.dtype if x.dtype == np.int32 else None)


def _mean(x: np.ndarray) -> np.ndarray:
    if x.shape[1] == 0:  # NumPy warns and returns NaN; the kernels return NaN without a warning
        return np.full((x.shape[0], x.shape[2]), np.nan)
    return x.mean(axis=1)


def _softmax(x: np.ndarray, log: bool) -> np.ndarray:
    if x.size == 0:
        return x.copy()
    m = x.max(axis=1, keepdims=True)
    s = np.exp(x - m).sum(axis=1, keepdims=True)
    return (x - m) - np.log(s) if log else np.exp(x - m) / s


def _layer_norm(a, attrs):  # type: ignore[no-untyped-def]
    x, eps = a["x"], attrs.get("eps", EPS)
    if x.size == 0:
        return {"y": x.copy()}
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return {"y": (x - mean) / np.sqrt(var + eps) * a["weight"] + a["bias"]}


def _rms_norm(a, attrs):  # type: ignore[no-untyped-def]
    x, eps = a["x"], attrs.get("eps", EPS)
    if x.size == 0:
        return {"y": x.copy()}
    return {"y": x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * a["weight"]}


def _cases(*sizes: tuple[int, ...], **attrs: float) -> tuple[Case, ...]:
    names = ("B", "R", "I") if len(sizes[0]) == 3 else ("B", "R")
    return tuple(Case(dict(zip(names, s, strict=True)), attrs=attrs) for s in sizes)


# [B, R, I]: R = 1, primes, R no multiple of 8 or of any work-group size, R a multiple of 8
# (the cpu_vec8 guard), I > 1 (a middle axis) with and without a partial block of 8, empty B
# and I, and a large reduction.
_NONEMPTY = (
    (1, 1, 1),
    (4, 1, 3),
    (7, 13, 1),
    (5, 257, 1),
    (9, 8, 1),
    (6, 64, 1),
    (3, 17, 11),
    (2, 31, 16),
    (2, 9, 8),
    (4, 8, 3),
    (0, 5, 1),
    (3, 5, 0),
    (3, 100_003, 1),
    (2, 100_008, 1),
)
AXIS_CASES = _cases(*_NONEMPTY, (3, 0, 1), (2, 0, 5))  # with empty axes: sum, mean, softmax
NONEMPTY_CASES = _cases(*_NONEMPTY)  # max, min, argmax: an empty axis is refused
NORM_CASES = _cases((1, 1), (7, 13), (5, 8), (4, 257), (3, 100_003), (0, 5), (4, 0)) + _cases(
    (6, 31), eps=0.5
)

REFERENCES: dict[str, Reference] = {
    "sum": Reference(lambda a, _: {"y": _sum(a["x"])}, cases=AXIS_CASES, reduce="R"),
    "mean": Reference(lambda a, _: {"y": _mean(a["x"])}, cases=AXIS_CASES, reduce="R"),
    "max": Reference(lambda a, _: {"y": a["x"].max(axis=1)}, cases=NONEMPTY_CASES, reduce="R"),
    "min": Reference(lambda a, _: {"y": a["x"].min(axis=1)}, cases=NONEMPTY_CASES, reduce="R"),
    "argmax": Reference(
        lambda a, _: {"y": a["x"].argmax(axis=1).astype(np.int32)}, cases=NONEMPTY_CASES
    ),
    "softmax": Reference(lambda a, _: {"y": _softmax(a["x"], False)}, cases=AXIS_CASES, reduce="R"),
    "log_softmax": Reference(
        lambda a, _: {"y": _softmax(a["x"], True)}, cases=AXIS_CASES, reduce="R"
    ),
    "layer_norm": Reference(_layer_norm, cases=NORM_CASES, reduce="R"),
    "rms_norm": Reference(_rms_norm, cases=NORM_CASES, reduce="R"),
}


def __getattr__(name: str) -> Reference:
    """`clforge.references.reduce:<op>`, the path a spec's `reference:` names."""
    try:
        return REFERENCES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no reference {name!r}") from None
