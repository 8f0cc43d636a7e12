"""Accuracy against float64: the dense sweep of inputs that the specs' `accuracy:` bounds are
measured on, exact references of the ops that have such bounds (with their limits at +-inf), and
the error measures the bounds are stated in.

The sweep of a dtype over a range [lo, hi]: every STEPS[dtype]-th bit pattern of the dtype (all
binades of both signs, denormals, infinities and NaNs among them; every f16 value), 2**20 evenly
spaced points of [lo, hi], and the special values (+-0, +-inf, NaN, +-the smallest normal,
+-the largest finite, +-the smallest denormal). The measures (see :func:`measure`): the largest
absolute error where |ref| <= 1, the largest relative error where |ref| is at least the
dtype's smallest normal, and the special values, which must match exactly: NaN for NaN, the
reference's infinities (including results that overflow the dtype) and the sign of zero
results at +-0 and +-inf.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

# every STEPS[dtype]-th bit pattern: a prime, so that all mantissa bits vary
STEPS = {"f16": 1, "f32": 4093}
DENSE = 2**20

SWEEP_DOC = (
    "every 4093rd float32 bit pattern (for f16: every value), so all binades of both signs, "
    "2^20 evenly spaced points of the bound's range, and +-0, +-inf, NaN, +-FLT_MIN, +-FLT_MAX "
    "and the smallest denormals"
)
MEASURES_DOC = (
    "max abs err: the largest |y - ref| where |ref| <= 1; max rel err: the largest "
    "|y - ref| / |ref| where |ref| >= the dtype's smallest normal (FLT_MIN for f32); ref: the "
    "float64 value; NaN, infinities (results that overflow included) and the sign of zero at "
    "+-0 and +-inf must match exactly"
)

_UINT = {"f16": np.uint16, "f32": np.uint32}
_FLOAT: dict[str, type[np.floating[Any]]] = {"f16": np.float16, "f32": np.float32}


def sweep(dtype: str, lo: float, hi: float) -> np.ndarray:
    """The inputs of an accuracy measurement of `dtype` (f16 or f32) over [lo, hi]."""
    ft = _FLOAT[dtype]
    info = np.finfo(ft)
    count = 2 ** (8 * np.dtype(ft).itemsize)
    patterns = np.arange(0, count, STEPS[dtype], dtype=np.int64).astype(_UINT[dtype]).view(ft)
    dense = np.linspace(lo, hi, DENSE).astype(ft)
    tiny = np.array(info.smallest_subnormal, ft)
    special = np.array([0.0, np.inf, np.nan, info.tiny, info.max, tiny, lo, hi], ft)
    return np.concatenate([patterns, dense, special, -special])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _at_minus_inf(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x * (something that tends to 0) is -0 at x = -inf (not -inf * 0 = NaN)."""
    return np.where(np.isneginf(x), -0.0, y)


_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _gelu(x: np.ndarray, attrs: Mapping[str, int]) -> np.ndarray:
    if attrs.get("approximate", 0):
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
        return _at_minus_inf(x, x * _sigmoid(2 * u))  # (1 + tanh(u)) / 2 = sigmoid(2u)
    return _at_minus_inf(x, 0.5 * x * _erfc(-x / math.sqrt(2)))


EXACT: dict[str, Callable[[np.ndarray, Mapping[str, int]], np.ndarray]] = {
    "exp": lambda x, _: np.exp(x),
    "tanh": lambda x, _: np.tanh(x),
    "sigmoid": lambda x, _: _sigmoid(x),
    "silu": lambda x, _: _at_minus_inf(x, x * _sigmoid(x)),
    "gelu": _gelu,
}


def exact(op: str, x: np.ndarray, attrs: Mapping[str, int] | None = None) -> np.ndarray:
    """The float64 value of op at x (NaN where x is NaN), with the limits at +-inf."""
    with np.errstate(all="ignore"):
        return EXACT[op](x.astype(np.float64), dict(attrs or {}))


@dataclass(frozen=True)
class Errors:
    max_abs: float
    max_abs_at: float  # the input where it is reached
    max_rel: float
    max_rel_at: float
    special: tuple[str, ...]  # special values that do not match, as "f(x) = y, not z"

    def __str__(self) -> str:
        text = (
            f"max abs err {self.max_abs:.3g} (at x = {self.max_abs_at:.9g}), "
            f"max rel err {self.max_rel:.3g} (at x = {self.max_rel_at:.9g})"
        )
        if self.special:
            text += f"; {len(self.special)} special values wrong: " + ", ".join(self.special[:5])
        return text


def _largest(err: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    if not err.size:
        return 0.0, math.nan
    i = int(np.argmax(err))
    return float(err[i]), float(x[i])


def measure(dtype: str, x: np.ndarray, y: np.ndarray, ref: np.ndarray) -> Errors:
    """The errors of y = f(x) (in `dtype`) against ref, f's float64 value at x."""
    ft = _FLOAT[dtype]
    with np.errstate(all="ignore"):
        target = ref.astype(ft)  # where the dtype overflows, and zeros' signs
        got = y.astype(np.float64)
        err = np.abs(got - ref)
        rel = err / np.abs(ref)
    finite = np.isfinite(target)
    wrong = (np.isnan(y) != np.isnan(ref)) | (finite & ~np.isfinite(y))
    wrong |= ~finite & ~np.isnan(ref) & (y != target)
    edge = (x == 0) | np.isinf(x)
    wrong |= edge & ~np.isnan(ref) & ((y != target) | (np.signbit(y) != np.signbit(target)))
    special = tuple(
        f"f({xv!r}) = {yv!r}, not {tv!r}"
        for xv, yv, tv in zip(
            x[wrong].tolist(), y[wrong].tolist(), target[wrong].tolist(), strict=True
        )
    )
    small = finite & np.isfinite(y) & (np.abs(ref) <= 1)
    normal = finite & np.isfinite(y) & (np.abs(ref) >= np.finfo(ft).tiny)
    return Errors(*_largest(err[small], x[small]), *_largest(rel[normal], x[normal]), special)


__all__ = ["EXACT", "MEASURES_DOC", "SWEEP_DOC", "Errors", "exact", "measure", "sweep"]
