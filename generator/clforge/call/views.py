"""Device arrays that are views (an offset into their buffer, strides of a slice or a transpose)
made bindable to a kernel, without a copy where a kernel can read them in place.

A kernel argument is a buffer whose element 0 is the tensor's first element, in one of the
layouts its tensor takes (`clforge.core.layouts`). So a view is taken:

- in place, when its strides are a layout the op's tensor takes (a transposed matrix is `col`,
  which matmul and gemm read) and its offset is 0;
- in place through an OpenCL sub-buffer starting at the view's first element, when the offset is
  a multiple of the device's base address alignment (`CL_DEVICE_MEM_BASE_ADDR_ALIGN`; 128 bytes
  on PoCL's CPU device); no data moves;
- copied, and said so, otherwise: a contiguous span at an unaligned offset by one buffer copy
  (`clEnqueueCopyBuffer`), strides that are no layout the tensor takes (a column slice such as
  `qkv[:, 768:1536]`, a transpose for an op that reads only row-major) by one gather kernel into
  the tensor's first layout.

:func:`take` returns the arrays to bind and one note per view, which `clforge.explain` and a
compiled model's `explain` print.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from clforge.core.layouts import array_layout, layout_strides
from clforge.runtime.launch import ReadyLaunch, Runtime

# the gather kernel moves elements as unsigned integers of the element's size (any dtype)
_MOVED = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}


@dataclass(frozen=True)
class Taken:
    """The arrays to bind (views replaced) and what was done with each view."""

    arrays: tuple[Any, ...]
    notes: tuple[str, ...]  # one line per view: in place, through a sub-buffer, or copied why
    copies: int  # how many of them were copied


def pending(arrays: Sequence[Any]) -> bool:
    """Whether any of `arrays` is a device array that is not plainly bindable (an offset, or not
    C-contiguous): the cheap test every eager call on device arrays makes."""
    return any(
        isinstance(a, cla.Array) and (a.offset or not a.flags.c_contiguous) and a.size
        for a in arrays
    )


def alignment(rt: Runtime) -> int:
    """The device's base address alignment of a sub-buffer, in bytes."""
    return max(1, int(rt.device.mem_base_addr_align) // 8)


def take(
    rt: Runtime,
    arrays: Sequence[Any],
    names: Sequence[str],
    layouts: Sequence[tuple[str, ...]],
    op: str,
    *,
    copy: bool = True,
) -> Taken:
    """`arrays` (a call's inputs; anything not a device array passes through) with every device
    array that is a view made bindable: array i is the tensor `names[i]`, which kernels read in
    `layouts[i]` (first preferred); arrays past `names` pass through. `copy=False` (what
    explain asks for) describes a copy and stands an uninitialized array in for it, moving no
    data."""
    out = list(arrays)
    notes = []
    copies = 0
    for i, arr in enumerate(arrays):
        if i >= len(names) or not isinstance(arr, cla.Array) or arr.size == 0:
            continue
        if not arr.offset and arr.flags.c_contiguous and "row" in layouts[i]:
            continue
        where = (
            f"{op}: input {names[i]!r} (shape {tuple(arr.shape)}, strides {tuple(arr.strides)}, "
            f"offset {arr.offset})"
        )
        lay = array_layout(arr, layouts[i])
        if lay is None:
            out[i] = _gather(rt, arr, layouts[i][0], copy)
            notes.append(
                f"{where}: copied into a {layouts[i][0]}-major array by a gather kernel (no "
                f"instance reads these strides; the tensor is read {'/'.join(layouts[i])}-major)"
            )
            copies += 1
        elif not arr.offset:
            notes.append(f"{where}: read in place, {lay}-major")
        elif arr.offset % alignment(rt) == 0:
            out[i] = _sub_buffer(rt, arr)
            notes.append(f"{where}: read in place through a sub-buffer at byte {arr.offset}")
        else:
            out[i] = _copy_span(rt, arr, copy)
            notes.append(
                f"{where}: copied by one buffer copy (the offset is not a multiple of the "
                f"device's {alignment(rt)}-byte sub-buffer alignment)"
            )
            copies += 1
    return Taken(tuple(out), tuple(notes), copies)


def _extent(arr: cla.Array) -> int:
    """Bytes from the view's first element to past its last (positive strides)."""
    return (
        sum((n - 1) * s for n, s in zip(arr.shape, arr.strides, strict=True)) + arr.dtype.itemsize
    )


def _like(rt: Runtime, arr: cla.Array, strides: tuple[int, ...], data: Any = None) -> cla.Array:
    """A device array of `arr`'s shape and dtype with `strides`: over `data`, else from the
    pool (pyopencl's fast constructor, as :meth:`Runtime.empty`)."""
    shape = tuple(int(n) for n in arr.shape)
    if data is None:
        return rt.empty(("view", shape, arr.dtype, strides))
    return cla.Array(
        None,
        shape,
        arr.dtype,
        strides=strides,
        data=data,
        _fast=True,
        _size=math.prod(shape),
        _context=rt.context,
        _queue=rt.queue,
    )


def _sub_buffer(rt: Runtime, arr: cla.Array) -> cla.Array:
    """`arr` over a sub-buffer that starts at its first element: no data moves."""
    sub = sub_region(arr.base_data, int(arr.offset), _extent(arr))
    return _like(rt, arr, tuple(arr.strides), sub)


def sub_region(base: Any, origin: int, nbytes: int) -> cl.Buffer:
    """A sub-buffer of `base` at byte `origin` (a multiple of :func:`alignment`). A buffer from
    a memory pool is wrapped by its handle (a pooled buffer has no sub-regions of its own); a
    sub-buffer's own parent takes the sub-region (OpenCL has no sub-buffers of sub-buffers)."""
    if not isinstance(base, cl.Buffer):
        base = cl.Buffer.from_int_ptr(base.int_ptr, retain=True)
    parent = base.get_info(cl.mem_info.ASSOCIATED_MEMOBJECT)
    if parent is not None:
        origin += int(base.get_info(cl.mem_info.OFFSET))
        base = parent
    return base.get_sub_region(origin, nbytes)


def _copy_span(rt: Runtime, arr: cla.Array, copy: bool) -> cla.Array:
    """`arr` (contiguous in its layout, at an unaligned offset) copied as one span of bytes."""
    strides = tuple(int(s) for s in arr.strides)
    out = _like(rt, arr, strides)
    if copy:
        dst: Any = out.base_data
        src: Any = arr.base_data
        cl.enqueue_copy(rt.queue, dst, src, byte_count=_extent(arr), src_offset=int(arr.offset))
    return out


def _gather(rt: Runtime, arr: cla.Array, layout: str, copy: bool) -> cla.Array:
    """`arr` (any strides, any offset) gathered into a new array in `layout`."""
    shape = tuple(int(n) for n in arr.shape)
    item = arr.dtype.itemsize
    out = _like(rt, arr, layout_strides(shape, item, layout))
    if not copy:
        return out
    if any(s % item for s in arr.strides) or arr.offset % item:  # pragma: no cover - NumPy-made
        raise ValueError(f"a view with strides {arr.strides} splits elements")
    kernel = _gather_kernel(rt, item, len(shape))
    strides = tuple(int(s) // item for s in arr.strides)
    dst = layout_strides(shape, 1, layout)
    args = [out.base_data, arr.base_data, *_gather_scalars(arr.offset // item, shape, strides, dst)]
    with rt.lock:  # a kernel holds its arguments (see clforge.runtime.launch)
        kernel.set_args(*args)
        cl.enqueue_nd_range_kernel(rt.queue, kernel, (math.prod(shape),), None)
    return out


def _gather_scalars(
    offset: int, shape: tuple[int, ...], strides: tuple[int, ...], dst: tuple[int, ...]
) -> list[Any]:
    """The gather kernel's scalars after its two buffers: the source offset, then per axis its
    size, source stride and destination stride (elements)."""
    out: list[Any] = [np.int64(offset)]
    for n, s, d in zip(shape, strides, dst, strict=True):
        out += [np.int64(n), np.int64(s), np.int64(d)]
    return out


def gather_launch(
    rt: Runtime,
    itemsize: int,
    offset: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    dst: Any,
    src: Any | None,
    src_index: int | None = None,
) -> ReadyLaunch:
    """A ready gather (:mod:`clforge.runtime.launch`): elements `offset` + `strides` (in
    elements) of shape `shape` copied row-major into `dst`; the source is buffer `src`, or the
    call's buffer at `src_index` (rebound per call)."""
    shared = _gather_kernel(rt, itemsize, len(shape))
    with rt.lock:
        k = cl.Kernel(shared.program, shared.function_name)
    k.set_arg(0, dst)
    if src is not None:
        k.set_arg(1, src)
    row = layout_strides(shape, 1, "row")
    for i, a in enumerate(_gather_scalars(offset, shape, strides, row), 2):
        k.set_arg(i, a)
    rebind = ((1, src_index),) if src_index is not None else ()
    return ReadyLaunch(k, (math.prod(shape),), None, rebind, [None] * len(rebind))


def _gather_source(item: int, rank: int) -> str:
    t = _MOVED[item]
    params = "".join(f", long n{k}, long s{k}, long d{k}" for k in range(rank))
    walk = "".join(
        f"    c = rem % n{k}; rem /= n{k}; si += c * s{k}; di += c * d{k};\n"
        for k in reversed(range(rank))
    )
    return (
        f"__kernel void view_gather(__global {t} *dst, __global const {t} *src, long off{params})\n"
        "{\n"
        "    long rem = get_global_id(0), si = off, di = 0, c;\n"
        f"{walk}"
        "    dst[di] = src[si];\n"
        "}\n"
    )


def _gather_kernel(rt: Runtime, item: int, rank: int) -> cl.Kernel:
    return rt.helper_kernel(f"view_gather_{item}_{rank}", _gather_source(item, rank), "view_gather")
