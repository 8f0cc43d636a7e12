"""NumPy's `out=`: an eager call's one result written into an array the caller gives (NumPy, or
a pyopencl array, or a tensor's NumPy view; see :mod:`clforge.interop.intake`), which the call
then returns. Its shape and dtype must be the result's; nothing is converted."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from clforge.errors import CallError
from clforge.interop.queues import queue_of
from clforge.runtime.transfer import to_host


def check_out(op: str, out: Any) -> None:
    """`out` can be written at all (before the call runs)."""
    if not isinstance(out, np.ndarray | cla.Array):
        raise CallError(
            f"{op}: out must be a NumPy or pyopencl array (or a CPU tensor), got "
            f"{type(out).__name__}"
        )
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise CallError(f"{op}: out (shape {out.shape}) is read-only")


def write_out(op: str, result: Any, out: Any) -> Any:
    """Write `result` (NumPy or a device array) into `out` and return `out`."""
    shape, dtype = tuple(int(n) for n in np.shape(result)), np.dtype(result.dtype)
    if tuple(out.shape) != shape or np.dtype(out.dtype) != dtype:
        raise CallError(
            f"{op}: out has shape {tuple(out.shape)} and dtype {np.dtype(out.dtype)}; the result "
            f"has shape {shape} and dtype {dtype}"
        )
    if isinstance(out, np.ndarray):
        np.copyto(out, to_host(result) if isinstance(result, cla.Array) else result)
        return out
    if out.size == 0:
        return out
    queue = out.queue if out.queue is not None else queue_of(out.context)
    if isinstance(result, cla.Array) and result.context != out.context:
        raise CallError(f"{op}: out lives in another OpenCL context than the call's arrays")
    if not out.flags.c_contiguous:
        if isinstance(result, cla.Array):
            out.setitem(..., result, queue=queue)
            return out
        raise CallError(
            f"{op}: out (shape {out.shape}, strides {out.strides}) must be contiguous to take "
            "a result from the host"
        )
    if isinstance(result, cla.Array) and result.flags.c_contiguous:
        cl.enqueue_copy(
            queue,
            out.base_data,
            result.base_data,  # type: ignore[arg-type]
            byte_count=result.nbytes,
            dst_offset=out.offset,
            src_offset=result.offset,
        )
    else:
        host = to_host(result) if isinstance(result, cla.Array) else result
        cl.enqueue_copy(queue, out.base_data, np.ascontiguousarray(host), dst_offset=out.offset)
    return out
