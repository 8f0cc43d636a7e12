"""The shape of a reference: a NumPy function, input domains, and test cases."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Arrays = Mapping[str, np.ndarray]
RefFn = Callable[[Arrays, dict[str, Any]], dict[str, np.ndarray]]


@dataclass(frozen=True)
class Case:
    """One test case: sizes of the dims, shapes of broadcast inputs that differ from the full
    shape, attribute values."""

    dims: Mapping[str, int]
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    attrs: Mapping[str, float | int] = field(default_factory=dict)


@dataclass(frozen=True)
class Reference:
    fn: RefFn
    # per input: "normal" (standard normal), "nonzero" (|v| in [0.5, 2]), "positive",
    # "small" (|v| <= 3, for pow), "index" (non-negative ints), "cast" (values that probe
    # conversions: halfway cases, beyond the i32 and f16 ranges, NaN, infinities, any i32),
    # "mask" (-1, 0 or 1: a condition), "attn_mask" (an attention mask: normal values, along
    # the last axis a fifth -inf and a fifth 0, the last row all -inf and the one before all 0,
    # so that an additive mask and a keep mask both mask out keys and whole rows),
    # "index_of:DIM" (indices into an axis of size DIM:
    # [0, DIM); "index_of:DIM:signed": [-DIM, DIM)), which `domain_of` resolves with the
    # case's sizes into "below:N" / "below:N:signed" for make_input
    domains: Mapping[str, str] = field(default_factory=dict)
    cases: tuple[Case, ...] | None = None  # None: the default sizes for the op's number of dims
    reduce: str | None = None  # the dim summed over, for the tolerance
    exact: bool = False  # outputs equal the reference element for element (casts, gathers)


def make_input(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, domain: str = "normal"
) -> np.ndarray:
    if domain == "cast":
        return _cast_probe(rng, shape, dtype)
    if domain == "mask":  # a condition: -1, 0 or 1 (nonzero is true)
        return rng.integers(-1, 2, size=shape).astype(dtype)
    if domain.startswith("below:"):  # indices into an axis of n: [0, n), or [-n, n) if signed
        _, n, *signed = domain.split(":")
        lo = -int(n) if signed else 0
        return rng.integers(lo, max(int(n), lo + 1), size=shape).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        ints = rng.integers(-50, 50, size=shape)
        if domain in ("nonzero",):
            ints[ints == 0] = 1
        if domain in ("positive", "index"):
            ints = np.abs(ints)
        return ints.astype(dtype)
    v: np.ndarray = rng.standard_normal(shape)
    if domain == "nonzero":
        v = np.sign(v) * (0.5 + np.abs(v) % 1.5)
        v[v == 0] = 1
    elif domain == "positive":
        v = 0.1 + np.abs(v)
    elif domain == "small":
        v = np.clip(v, -3, 3)
    elif domain == "attn_mask" and v.ndim >= 2:
        if shape[-1] > 1:
            draw = rng.random(shape)
            v[draw < 0.2] = -np.inf  # keys an additive mask masks out
            v[draw > 0.8] = 0.0  # keys a keep mask masks out
        if shape[-2] > 1:
            v[..., -1, :] = -np.inf  # a query that sees no key: its output row is zeros
        if shape[-2] > 2:
            v[..., -2, :] = 0.0  # the same for a keep mask
    return v.astype(dtype)


# values a conversion can get wrong: halfway cases of every rounding (to an integer, to f16 at
# 1 and 2048, to f32 beyond 2**24), the edges of the i32 and f16 ranges and beyond, subnormals,
# signed zeros, NaN and the infinities
_FLOAT_PROBES = (
    0.5,
    -0.5,
    1.5,
    -2.5,
    0.49999997,
    2.0**31,
    -(2.0**31),
    2.0**31 - 1,
    2.0**31 - 0.5,
    3e9,
    -3e9,
    1e30,
    -1e30,
    1e300,
    65504.0,
    65519.0,
    65520.0,
    -65536.0,
    1 + 2.0**-11,
    2049.0,
    2.0**24 + 1,
    2.0**24 + 3,
    1e-8,
    6e-8,
    -0.0,
    0.0,
    float("nan"),
    float("inf"),
    float("-inf"),
)
_INT_PROBES = (0, 1, -1, 2**31 - 1, -(2**31), 2**24 + 1, 2**24 + 3, 65504, 65520, -65536, 2049)


def _cast_probe(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        probes = np.array(_INT_PROBES, np.int64)
        pool = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=np.int64)
        small = rng.integers(-70000, 70000, size=n)
        pool = np.where(rng.random(n) < 0.5, small, pool)
    else:
        probes = np.array(_FLOAT_PROBES, np.float64)
        pool = rng.standard_normal(n) * 10.0 ** rng.integers(-1, 11, size=n)
    pool[: min(n, len(probes))] = probes[: min(n, len(probes))]
    with np.errstate(over="ignore"):
        return rng.permutation(pool).astype(dtype).reshape(shape)
