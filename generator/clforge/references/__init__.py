"""NumPy references for the ops, and the cases to test them on.

Each op has a :class:`Reference`: a function computing its outputs in float64 from its inputs
(canonical shapes, as the spec declares them), the input domains, and the test cases (sizes,
broadcast shapes, attributes). Each op's spec names its reference (`reference: module:name`,
see :mod:`clforge.references.resolve`); the shipped ops' live in this package's modules.
Tests, `clforge verify`, the tuner, the demo and the benchmarks compare kernels with these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from clforge.references.base import Arrays, Case, Reference, make_input
from clforge.references.locate import Referenced, reference_of, resolve


def expected(
    op: Referenced,
    inputs: Arrays,
    attrs: Mapping[str, float | int] | None = None,
    roots: Sequence[Path] = (),
) -> dict[str, np.ndarray]:
    """The reference outputs of `op`, computed in float64 (integers stay integers)."""
    wide = {
        k: v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v
        for k, v in inputs.items()
    }
    return reference_of(op, roots).fn(wide, dict(attrs or {}))


def domain_of(ref: Reference, name: str, dims: Mapping[str, int]) -> str:
    """The domain `make_input` draws input `name` from, with the case's sizes `dims` filled in
    (an "index_of:DIM" domain needs the size of DIM)."""
    domain = ref.domains.get(name, "normal")
    if domain.startswith("index_of:"):
        _, dim, *rest = domain.split(":")
        return ":".join(["below", str(dims[dim]), *rest])
    return domain


# the cases of an op whose reference lists none, by its number of dims: 1, primes, sizes that
# are no multiple of any tile or vector width, empty tensors
DEFAULT_SIZES: dict[int, list[tuple[int, ...]]] = {
    1: [(1,), (7,), (130,), (8195,), (0,)],
    2: [(1, 1), (7, 13), (31, 130), (3, 100_003), (9, 8), (13, 1000), (0, 5), (5, 0)],
    3: [(1, 1, 1), (7, 13, 31), (67, 130, 33), (6, 16, 8), (13, 17, 0), (0, 5, 7)],
    4: [(1, 1, 1, 1), (2, 3, 5, 7), (1, 7, 13, 31), (3, 5, 0, 2), (0, 2, 3, 4)],
}


def cases_of(ref: Reference, dims: tuple[str, ...]) -> tuple[Case, ...]:
    """The verification cases of an op with reference `ref` and dims `dims`."""
    if ref.cases is not None:
        return ref.cases
    sizes = DEFAULT_SIZES.get(len(dims))
    if sizes is None:  # a rank the defaults lack: 1, a prime, a size no tile divides, empty
        sizes = [(1,) * len(dims), (3,) * len(dims), (7,) + (2,) * (len(dims) - 1)]
        sizes.append((0,) + (2,) * (len(dims) - 1))
    return tuple(Case(dict(zip(dims, s, strict=True))) for s in sizes)


__all__ = [
    "DEFAULT_SIZES",
    "Case",
    "Reference",
    "Referenced",
    "cases_of",
    "domain_of",
    "expected",
    "make_input",
    "reference_of",
    "resolve",
]
