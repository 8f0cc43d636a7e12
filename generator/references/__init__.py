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


__all__ = ["REFERENCES", "Case", "Reference", "expected", "make_input"]
