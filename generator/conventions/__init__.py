"""Calling conventions: how the eager function of an op maps arrays of any shape onto the op's
dims and back. A spec names one with `call:`; the names are in conventions_names.py."""

from __future__ import annotations

from generator.conventions.attention import Attention
from generator.conventions.base import Canonical, Convention, PyParam
from generator.conventions.indexing import AlongAxis, Embedding
from generator.conventions.joining import Concat
from generator.conventions.linalg import Gemm, Matmul, Permute
from generator.conventions.names import CONVENTION_NAMES
from generator.conventions.nn import Channels, Conv2d, Pool2d
from generator.conventions.shape import Axis, Broadcast, Direct, Flat, Trailing

CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in (
        Direct(),
        Flat(),
        Broadcast(),
        Axis(),
        Trailing(),
        Conv2d(),
        Attention(),
        Matmul(),
        Gemm(),
        Permute(),
        Channels(),
        Pool2d(),
        AlongAxis(),
        Embedding(),
        Concat(),
    )
}

if tuple(CONVENTIONS) != CONVENTION_NAMES:  # pragma: no cover - a developer's slip
    raise ImportError("generator.conventions and conventions_names.py list different names")

__all__ = ["CONVENTIONS", "Canonical", "Convention", "PyParam"]
