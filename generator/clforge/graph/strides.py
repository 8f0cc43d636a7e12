"""Where a view's elements are, at a specialization's sizes: the value whose memory it is, the
offset of its first element and its strides (in elements). Reshapes, rebinds and slices are
views (`records.VIEW_OPS`); a slice moves the offset and keeps the strides, so a slice along an
inner axis (``qkv[:, D:2*D]``) has a row stride that no kernel reads, and a reshape of such a
view is taken as NumPy takes it (strides when it can be one without a copy, else the view is
gathered row-major first and seen with the new shape). The model reads a view in place when its
strides are row-major, and decides per specialization what an offset costs (artifact.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from clforge.errors import GraphError
from clforge.graph.records import GraphIR


@dataclass(frozen=True)
class Strided:
    """A view's elements: value `root`'s memory from element `offset`, `shape` with `strides`
    (elements). `final` is the value's own shape: `shape` unless a reshape needed a gather
    (then the elements of `shape`/`strides`, gathered row-major, are seen as `final`)."""

    root: int
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    final: tuple[int, ...]

    @property
    def row_major(self) -> bool:
        """Whether the elements are row-major and contiguous (axes of size 1 aside)."""
        want = 1
        for n, s in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if n > 1 and s != want:
                return False
            want *= n
        return True

    @property
    def in_place(self) -> bool:
        """Readable as the root's own buffer: offset 0, row-major."""
        return self.offset == 0 and self.row_major


def _row_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def strided_views(ir: GraphIR, env: Mapping[str, int]) -> dict[int, Strided]:
    """Every view value's elements at the sizes `env`, by value id."""
    out: dict[int, Strided] = {}
    for n in ir.nodes:
        if not n.view:
            continue
        (src,) = n.input_ids()
        (vid,) = n.output_ids()
        shape = tuple(d.evaluate(env) for d in ir.value(vid).shape)
        s = out.get(src)
        if s is None:
            root_shape = tuple(d.evaluate(env) for d in ir.value(src).shape)
            s = Strided(src, 0, root_shape, _row_strides(root_shape), root_shape)
        if s.final != s.shape:
            raise GraphError(
                f"graph {ir.name!r}: node {n.id} ({n.op}) views {ir.value(src).name}, a reshape "
                "of a slice that needs a copy; reshape the source before slicing it"
            )
        if n.op == "slice":
            o = dict(n.options)
            axis, start = int(o["axis"]), o["start"].evaluate(env)
            out[vid] = Strided(s.root, s.offset + start * s.strides[axis], shape, s.strides, shape)
        elif s.row_major:
            out[vid] = Strided(s.root, s.offset, shape, _row_strides(shape), shape)
        else:
            out[vid] = _reshaped(s, shape)
    return out


def _reshaped(s: Strided, shape: tuple[int, ...]) -> Strided:
    """A strided view reshaped: NumPy's strides where no copy is needed, else gathered."""
    if math.prod(s.shape) == 0:
        return Strided(s.root, s.offset, shape, _row_strides(shape), shape)
    fake = np.lib.stride_tricks.as_strided(np.empty(1, np.uint8), s.shape, s.strides)
    try:
        moved = np.reshape(fake, shape, copy=False)
    except ValueError:
        return Strided(s.root, s.offset, s.shape, s.strides, shape)
    return Strided(s.root, s.offset, shape, tuple(int(x) for x in moved.strides), shape)
