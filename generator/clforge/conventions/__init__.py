"""Calling conventions: how the eager function of an op maps arrays of any shape onto the op's
dims and back. A spec names one with `call:`; the names are in conventions_names.py."""

from __future__ import annotations

from clforge.conventions.attention import Attention
from clforge.conventions.base import Canonical, Convention, PyParam
from clforge.conventions.indexing import AlongAxis, Embedding
from clforge.conventions.joining import Concat
from clforge.conventions.linalg import Gemm, Matmul, Permute
from clforge.conventions.names import CONVENTION_NAMES
from clforge.conventions.nn import Channels, Conv2d, Pool2d
from clforge.conventions.shape import Axis, Broadcast, Direct, Flat, Trailing

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
    raise ImportError("clforge.conventions and conventions_names.py list different names")

__all__ = ["CONVENTIONS", "Canonical", "Convention", "PyParam"]
