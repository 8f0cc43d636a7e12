"""The ceiling of memory-bound ops: the device's copy bandwidth, measured by copy kernels.

A copy moves `total_bytes` from one buffer to another, each work-item (work-groups of one) a
contiguous chunk of float16 vectors, once with plain stores and once with streaming
(non-temporal) stores, which skip the read of each destination line before it is written; the
faster counts. It is measured twice: large (DRAM: 256 MiB each way), for the headline, and at
each memory-bound case's own footprint (its bytes moved, half read and half written), since a
case small enough to stay in the last-level cache between back-to-back calls (this machine's L3
holds hundreds of MiB) runs at cache speed, and only a copy of the same size says how close it
gets."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from clforge.tools.bench.protocol import Timing
from clforge.tools.bench.timing import seconds

COPY_KERNELS = """
__kernel void copy(__global const float16 *restrict src, __global float16 *restrict dst,
                   const uint chunk) {
    const size_t base = get_global_id(0) * (size_t)chunk;
    for (uint i = 0; i < chunk; ++i)
        dst[base + i] = src[base + i];
}
__kernel void copy_nt(__global const float16 *restrict src, __global float16 *restrict dst,
                      const uint chunk) {
    const size_t base = get_global_id(0) * (size_t)chunk;
    for (uint i = 0; i < chunk; ++i)
        __builtin_nontemporal_store(src[base + i], dst + base + i);
}
"""

VECTOR_BYTES = 16 * 4  # a float16
CHUNK_BYTES = 2**18  # contiguous bytes per work-item (fewer for small copies)


@dataclass(frozen=True)
class Bandwidth:
    """A copy's rate: bytes read plus bytes written per second / 1e9, the faster of plain and
    streaming stores (both kept)."""

    plain_gbps: float
    streaming_gbps: float
    total_bytes: int  # copied (read once, written once)
    chunk_bytes: int  # contiguous bytes per work-item

    @property
    def gbps(self) -> float:
        return max(self.plain_gbps, self.streaming_gbps)


class Copier:
    """The copy kernels, built once on a queue's device."""

    def __init__(self, queue: cl.CommandQueue) -> None:
        self.queue = queue
        program = cl.Program(queue.context, COPY_KERNELS).build()
        self.kernels = (cl.Kernel(program, "copy"), cl.Kernel(program, "copy_nt"))

    def measure(self, timing: Timing, total_bytes: int) -> Bandwidth:
        """Copy `total_bytes` (rounded down to whole vectors and chunks; at least one vector)."""
        chunk = max(VECTOR_BYTES, min(CHUNK_BYTES, total_bytes // 2) // VECTOR_BYTES * VECTOR_BYTES)
        items = max(1, total_bytes // chunk)
        size = items * chunk
        ctx, q = self.queue.context, self.queue
        src = cl.Buffer(ctx, cl.mem_flags.READ_ONLY, size)
        dst = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, size)
        for buf in (src, dst):  # touch every page before timing
            cl.enqueue_fill_buffer(q, buf, np.ones(1, np.float32), 0, size)
        rates = []
        for kernel in self.kernels:
            kernel.set_args(src, dst, np.uint32(chunk // VECTOR_BYTES))
            run = lambda k=kernel: cl.enqueue_nd_range_kernel(q, k, (items,), (1,))
            rates.append(2 * size / seconds(run, q.finish, timing) / 1e9)
        src.release()
        dst.release()
        return Bandwidth(rates[0], rates[1], size, chunk)
