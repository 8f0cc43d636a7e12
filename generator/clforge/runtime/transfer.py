"""Moving arrays between host and device: a NumPy array copied into a tensor layout on the
device (through the pool), and a device array in any layout read back as NumPy."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from clforge.core.layouts import layout_strides, storage_view
from clforge.runtime.launch import Runtime


def upload(rt: Runtime, host: np.ndarray, layout: str) -> cla.Array:
    """`host` as a device array whose memory order is `layout`'s."""
    storage = np.ascontiguousarray(storage_view(host, layout))
    strides = layout_strides(host.shape, host.dtype.itemsize, layout)
    out = rt.empty((layout, tuple(host.shape), host.dtype, strides))
    if host.size:
        cl.enqueue_copy(rt.queue, out.base_data, storage)  # type: ignore[arg-type]
    return out


def to_host(arr: cla.Array) -> np.ndarray:
    """A NumPy copy of a device array in any layout (pyopencl's get() wants C or F order):
    read it in its memory order, then view it back in its logical order."""
    if arr.size == 0 or arr.flags.forc:
        return arr.get()
    order = sorted(range(arr.ndim), key=lambda ax: -arr.strides[ax])
    host = arr.transpose(order).get()
    return host.transpose(np.argsort(order))
