"""A queue for device arrays that carry none (a pyopencl array made with `queue=None`): one per
context, made on first use, as PyOpenCL's operations need one."""

from __future__ import annotations

import threading

import pyopencl as cl

_QUEUES: dict[int, cl.CommandQueue] = {}
_LOCK = threading.Lock()


def queue_of(context: cl.Context) -> cl.CommandQueue:
    """clforge's queue on `context` (its first device), kept for later calls."""
    with _LOCK:
        queue = _QUEUES.get(context.int_ptr)
        if queue is None or queue.context != context:
            queue = _QUEUES[context.int_ptr] = cl.CommandQueue(context)
        return queue
