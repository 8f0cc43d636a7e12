"""The call a peer's user writes for a case: its inputs in the shapes of the case's label and
the axis it names, not clforge's canonical shapes with their size-1 axes. Kept apart from
:mod:`.cases` so that a peer's process, which reads it through :mod:`.protocol`, imports no
registry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Natural:
    """How a user of NumPy or ONNX Runtime holds a case's inputs: each input's shape as dims of
    the case (an input not named keeps its canonical shape), the axis an axis op works on (-1:
    the last; a middle-axis case: 1 of the 3-D tensor) and a transpose's permutation. A
    4096 x 1024 softmax is a (B, R) tensor with axis -1, never clforge's [B, R, I] with I = 1,
    which sends a peer down its slower non-last-axis path."""

    dims: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    axis: int | None = None
    perm: tuple[int, ...] | None = None
