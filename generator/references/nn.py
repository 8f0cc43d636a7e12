"""References for the neural-network layers that are not convolutions or attention: batch_norm
(inference), max_pool2d and avg_pool2d (PyTorch's definitions, NCHW), embedding. Written to be
obviously right: explicit windows and loops over taps rather than clever indexing."""

from __future__ import annotations

from typing import Any

import numpy as np

from generator.references.base import Arrays, Case, Reference


def _batch_norm(a: Arrays, attrs: dict[str, Any]) -> dict[str, np.ndarray]:
    eps = attrs.get("eps", 1e-5)
    per = {k: a[k][None, :, None] for k in ("running_mean", "running_var", "weight", "bias")}
    y = (a["x"] - per["running_mean"]) / np.sqrt(per["running_var"] + eps)
    return {"y": y * per["weight"] + per["bias"]}


def _bn(n: int, c: int, s: int, **attrs: float) -> Case:
    return Case({"N": n, "C": c, "S": s}, attrs=attrs)


BATCH_NORM_CASES = (
    _bn(1, 1, 1),
    _bn(2, 3, 1),  # (N, C)
    _bn(2, 5, 49),  # a 7x7 plane: an 8-wide loop and its tail
    _bn(1, 16, 8),
    _bn(3, 7, 131, eps=0.5),
    _bn(1, 64, 3136),
    _bn(0, 4, 9),
    _bn(2, 3, 0),
)

REFERENCES: dict[str, Reference] = {
    "batch_norm": Reference(
        _batch_norm, domains={"running_var": "positive"}, cases=BATCH_NORM_CASES
    ),
}


def __getattr__(name: str) -> Reference:
    """`generator.references.nn:<op>`, the path a spec's `reference:` names."""
    try:
        return REFERENCES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no reference {name!r}") from None
