"""The one table of tensor layouts: how a tensor's logical axes are ordered in memory.

A layout names a memory order of the logical axes (outermost first): `row` is C order; `col`
swaps the last two axes (Fortran order for a matrix); `nhwc` stores a logical N, C, H, W tensor
channels-last; `bshd` stores a logical B, H, S, D tensor (attention's heads) as B, S, H, D, the
memory of PyTorch's ``x.view(B, S, H, D).transpose(1, 2)`` and of a model's heads before their
permute. Strides, the detection of an array's layout, and the templates' index macros all
derive from this table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LayoutKind:
    name: str
    min_rank: int
    max_rank: int | None
    order: Callable[[int], tuple[int, ...]]  # rank -> logical axes, outermost in memory first
    doc: str

    def fits(self, rank: int) -> bool:
        return rank >= self.min_rank and (self.max_rank is None or rank <= self.max_rank)


def _row(rank: int) -> tuple[int, ...]:
    return tuple(range(rank))


def _col(rank: int) -> tuple[int, ...]:
    return (*range(rank - 2), rank - 1, rank - 2)


def _nhwc(rank: int) -> tuple[int, ...]:
    return (0, 2, 3, 1)


def _bshd(rank: int) -> tuple[int, ...]:
    return (0, 2, 1, 3)


LAYOUTS: dict[str, LayoutKind] = {
    k.name: k
    for k in (
        LayoutKind("row", 0, None, _row, "row-major (C order)"),
        LayoutKind("col", 2, None, _col, "the last two axes swapped in memory (Fortran order)"),
        LayoutKind("nhwc", 4, 4, _nhwc, "a logical N, C, H, W tensor stored channels-last"),
        LayoutKind(
            "bshd", 4, 4, _bshd, "a logical B, H, S, D tensor stored as B, S, H, D (heads inner)"
        ),
    )
}
LAYOUT_NAMES: tuple[str, ...] = tuple(LAYOUTS)


def layout_strides(shape: tuple[int, ...], itemsize: int, layout: str) -> tuple[int, ...]:
    """Byte strides of a tensor of `shape` stored in `layout`."""
    strides = [0] * len(shape)
    step = itemsize
    for ax in reversed(LAYOUTS[layout].order(len(shape))):
        strides[ax] = step
        step *= max(shape[ax], 1)
    return tuple(strides)


def array_layout(arr: Any, candidates: tuple[str, ...] = LAYOUT_NAMES) -> str | None:
    """The first of `candidates` whose strides `arr` has (axes of size 1 match anything)."""
    shape = tuple(arr.shape)
    strides = tuple(arr.strides)
    item = arr.dtype.itemsize
    for name in candidates:
        if not LAYOUTS[name].fits(len(shape)):
            continue
        want = layout_strides(shape, item, name)
        if all(s == w for s, w, n in zip(strides, want, shape, strict=True) if n > 1):
            return name
    return None


def inverse(axes: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation that undoes `axes` (inverse(axes)[axes[k]] == k)."""
    out = [0] * len(axes)
    for k, a in enumerate(axes):
        out[a] = k
    return tuple(out)


def logical_shape(shape: tuple[Any, ...], layout: str) -> tuple[Any, ...]:
    """The logical shape of a buffer whose shape in memory order is `shape` (a row-major
    graph buffer holding a tensor in `layout`): storage_view's shape, undone."""
    back = inverse(LAYOUTS[layout].order(len(shape)))
    return tuple(shape[k] for k in back)


def storage_view(arr: Any, layout: str) -> Any:
    """The view of NumPy `arr` whose C order is the memory order of `layout`."""
    return arr.transpose(LAYOUTS[layout].order(arr.ndim))


def element_strides(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """Element strides of a broadcast input: its storage strides, 0 on axes of size 1."""
    full = layout_strides(shape, 1, layout)
    return tuple(0 if n == 1 else s for s, n in zip(full, shape, strict=True))
