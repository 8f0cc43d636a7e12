"""NumPy references for the shipped ops, and the cases to test them on.

Each op has a :class:`Reference`: a function computing its outputs in float64 from its inputs
(canonical shapes, as the spec declares them), the input domains, and the test cases (sizes,
broadcast shapes, attributes). Tests, the demo and the benchmarks compare kernels with these.
Families live in their own modules; this one merges them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from generator.references.base import Arrays, Case, Reference, make_input
from generator.references.conv import REFERENCES as _CONV
from generator.references.elementwise import REFERENCES as _ELEMENTWISE
from generator.references.linalg import REFERENCES as _LINALG
from generator.references.reduce import REFERENCES as _REDUCE

REFERENCES: dict[str, Reference] = {**_ELEMENTWISE, **_REDUCE, **_LINALG, **_CONV}


def expected(
    op: str, inputs: Arrays, attrs: Mapping[str, float | int] | None = None
) -> dict[str, np.ndarray]:
    """The reference outputs, computed in float64 (integers stay integers)."""
    wide = {
        k: v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v
        for k, v in inputs.items()
    }
    return REFERENCES[op].fn(wide, dict(attrs or {}))


# the cases of an op whose reference lists none, by its number of dims: 1, primes, sizes that
# are no multiple of any tile or vector width, empty tensors
DEFAULT_SIZES: dict[int, list[tuple[int, ...]]] = {
    1: [(1,), (7,), (130,), (8195,), (0,)],
    2: [(1, 1), (7, 13), (31, 130), (3, 100_003), (9, 8), (13, 1000), (0, 5), (5, 0)],
    3: [(1, 1, 1), (7, 13, 31), (67, 130, 33), (6, 16, 8), (13, 17, 0), (0, 5, 7)],
}


def cases_of(op: str, dims: tuple[str, ...]) -> tuple[Case, ...]:
    """The verification cases of `op` (whose dims are `dims`)."""
    ref = REFERENCES[op]
    if ref.cases is not None:
        return ref.cases
    return tuple(Case(dict(zip(dims, sizes, strict=True))) for sizes in DEFAULT_SIZES[len(dims)])


__all__ = [
    "DEFAULT_SIZES",
    "REFERENCES",
    "Case",
    "Reference",
    "cases_of",
    "expected",
    "make_input",
]
