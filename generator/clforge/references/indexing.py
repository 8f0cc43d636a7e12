"""References for the gathers: take_along_axis (NumPy's) and embedding (PyTorch's), on the ops'
canonical shapes, with index inputs that cover the whole axis (negative ones too, for
take_along_axis). The kernels' outputs are exact copies, so the comparison is exact."""

from __future__ import annotations

from typing import Any

import numpy as np

from clforge.references.base import Arrays, Case, Reference


def _take(a: Arrays, _: dict[str, Any]) -> dict[str, np.ndarray]:
    x, ind = a["x"], a["indices"]
    r = x.shape[1]
    if ind.size == 0:
        return {"y": np.zeros(ind.shape, x.dtype)}
    return {"y": np.take_along_axis(x, ind % r, axis=1)}  # negative ones count from the end


def _embedding(a: Arrays, _: dict[str, Any]) -> dict[str, np.ndarray]:
    w, ind = a["weight"], a["indices"]
    return {"y": w[ind] if ind.size else np.zeros((0, w.shape[1]), w.dtype)}


def _tk(b: int, r: int, i: int, j: int) -> Case:
    return Case({"B": b, "R": r, "I": i, "J": j})


TAKE_CASES = (
    _tk(1, 1, 1, 1),
    _tk(3, 7, 1, 5),  # the last axis
    _tk(2, 13, 11, 3),  # a middle axis
    _tk(1, 130, 1, 4099),  # more indices than elements: repeats
    _tk(4, 5, 6, 0),
    _tk(0, 3, 2, 2),
    _tk(2, 0, 3, 0),  # an empty axis, no index
    _tk(5, 31, 17, 31),
)
EMBEDDING_CASES = (
    Case({"M": 1, "V": 1, "D": 1}),
    Case({"M": 7, "V": 13, "D": 5}),
    Case({"M": 130, "V": 11, "D": 67}),
    Case({"M": 3, "V": 1000, "D": 257}),
    Case({"M": 0, "V": 4, "D": 3}),
    Case({"M": 5, "V": 4, "D": 0}),
)

REFERENCES: dict[str, Reference] = {
    "take_along_axis": Reference(
        _take, domains={"indices": "index_of:R:signed"}, cases=TAKE_CASES, exact=True
    ),
    "embedding": Reference(
        _embedding, domains={"indices": "index_of:V"}, cases=EMBEDDING_CASES, exact=True
    ),
}


def __getattr__(name: str) -> Reference:
    """`clforge.references.indexing:<op>`, the path a spec's `reference:` names."""
    try:
        return REFERENCES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no reference {name!r}") from None
