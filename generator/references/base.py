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
    # "small" (|v| <= 3, for pow), "index" (non-negative ints)
    domains: Mapping[str, str] = field(default_factory=dict)
    cases: tuple[Case, ...] | None = None  # None: the default sizes for the op's number of dims
    reduce: str | None = None  # the dim summed over, for the tolerance


def make_input(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, domain: str = "normal"
) -> np.ndarray:
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
    return v.astype(dtype)
