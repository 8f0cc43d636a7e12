"""Binding a call's arrays to an op's signature: ranks, dtypes, layouts, and one name, one size."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .contract import OpSig, TensorSig
from .dtypes import DTYPES, DType, dtype_of_numpy
from .errors import CallError

INT32_MAX = 2**31 - 1


def check_names(
    op: OpSig, given: Mapping[str, Any], expected: tuple[TensorSig, ...], what: str
) -> None:
    names = [t.name for t in expected]
    missing = [n for n in names if n not in given]
    unknown = [n for n in given if n not in names]
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing {what} {', '.join(missing)}")
        if unknown:
            parts.append(f"unknown {what} {', '.join(unknown)}")
        raise CallError(f"{op.name}: {'; '.join(parts)} (expects {', '.join(names)})")


def bind_dims(op: OpSig, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """Sizes of the op's dims from the inputs' shapes; a dim bound twice must agree."""
    dims: dict[str, int] = {}
    source: dict[str, str] = {}
    for t in op.inputs:
        shape = tuple(shapes[t.name])
        if len(shape) != len(t.shape):
            raise CallError(
                f"{op.name}: input {t.name!r} has rank {len(shape)} (shape {shape}), expected rank "
                f"{len(t.shape)} [{', '.join(t.shape)}]"
            )
        for dim, size in zip(t.shape, shape, strict=True):
            if dim in dims and dims[dim] != size:
                raise CallError(
                    f"{op.name}: dim {dim} is {dims[dim]} in {source[dim]} but {size} in "
                    f"{t.name} (shape {shape}); one name means one size"
                )
            if size > INT32_MAX:
                raise CallError(f"{op.name}: dim {dim} = {size} exceeds the 32-bit index range")
            dims[dim] = int(size)
            source[dim] = f"{t.name} (shape {shape})"
    return dims


def element_dtype(tensor: TensorSig, instance_dtype: str) -> DType:
    return DTYPES[tensor.dtype or instance_dtype]


def array_dtype(op: OpSig, name: str, arr: Any) -> DType:
    d = dtype_of_numpy(np.dtype(arr.dtype))
    if d is None:
        raise CallError(
            f"{op.name}: input {name!r} has dtype {arr.dtype}, which clforge does not "
            f"support (supported: {', '.join(DTYPES)})"
        )
    return d


def array_layout(arr: Any) -> str | None:
    """'row' for a C-contiguous array, 'col' for one whose last two axes are swapped in memory
    (Fortran order, for rank 2), None for any other strides."""
    shape = tuple(arr.shape)
    strides = tuple(arr.strides)
    item = arr.dtype.itemsize
    for layout in ("row", "col"):
        want = layout_strides(shape, item, layout)
        if all(s == w for s, w, n in zip(strides, want, shape, strict=True) if n > 1):
            return layout
    return None


def layout_strides(shape: tuple[int, ...], itemsize: int, layout: str) -> tuple[int, ...]:
    """Byte strides of a tensor of `shape` stored in `layout` (col: last two axes swapped)."""
    order = list(range(len(shape)))
    if layout == "col" and len(shape) >= 2:
        order[-1], order[-2] = order[-2], order[-1]
    strides = [0] * len(shape)
    step = itemsize
    for ax in reversed(order):
        strides[ax] = step
        step *= max(shape[ax], 1)
    return tuple(strides)
