"""References for the reductions and softmax."""

from __future__ import annotations

import numpy as np

from .base import Reference


def _softmax(x: np.ndarray) -> np.ndarray:
    if x.shape[-1] == 0:
        return x.copy()
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


REFERENCES: dict[str, Reference] = {
    "sum": Reference(lambda a, _: {"y": a["x"].sum(axis=-1)}, reduce="N"),
    "softmax": Reference(lambda a, _: {"y": _softmax(a["x"])}, reduce="N"),
}
