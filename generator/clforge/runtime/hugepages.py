"""Transparent huge pages for the buffers of CPU devices.

A CPU device's buffers are host memory, and a kernel that streams tens of MiB through 4 KiB
pages misses the TLB every page; in a virtual machine each miss walks two page tables. Linux
backs memory with 2 MiB pages where a process asks for them (`madvise(MADV_HUGEPAGE)`, the
`madvise` setting of /sys/kernel/mm/transparent_hugepage/enabled), as NumPy does for its large
arrays, but no OpenCL driver asks for its buffers. The middle-axis sum and exp ran faster from
huge pages on the development machine (PoCL 3.0 in a KVM guest; docs/calling.md, "Huge pages").

:class:`AdvisingAllocator` wraps the runtime's pool: the first time the pool hands out a block of
at least :data:`MIN_BYTES`, the block is mapped (on a CPU device the mapping is the buffer's own
memory), its 2 MiB-aligned part advised, and unmapped; a block the pool hands out again is not
mapped again. The advice is a hint: where the kernel has no huge pages, or the driver's mapping is
a copy, nothing changes but the one map per block. `CLFORGE_HUGEPAGES=0` turns it off.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl

ENV = "CLFORGE_HUGEPAGES"
HUGE = 1 << 21  # x86-64 and arm64 (4 KiB base pages): the size of a transparent huge page
MIN_BYTES = 2 * HUGE  # smaller blocks hold at most one whole huge page: not worth a map
_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_setting(path: Path = _SETTING) -> str:
    """The kernel's transparent huge page mode (`always`, `madvise` or `never`), or
    `unavailable` where there is none (not Linux, or a kernel without them)."""
    try:
        text = path.read_text()
    except OSError:
        return "unavailable"
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return "unavailable"


def wanted(device: cl.Device) -> bool:
    """Whether buffers of `device` are advised: a CPU device, on a kernel whose huge pages
    follow advice (`madvise`; under `always` every buffer has them already), unless
    $CLFORGE_HUGEPAGES is 0."""
    if os.environ.get(ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return False
    return bool(device.type & cl.device_type.CPU) and thp_setting() == "madvise"


@cache
def _madvise() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.madvise
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def huge_span(address: int, nbytes: int) -> tuple[int, int] | None:
    """The whole huge pages inside [address, address + nbytes): (start, length), or None."""
    start = -(-address // HUGE) * HUGE
    end = (address + nbytes) // HUGE * HUGE
    return (start, end - start) if end > start else None


def advise(address: int, nbytes: int) -> bool:
    """Ask for huge pages on the whole huge pages of a host range; False where the kernel
    refused (the range is not this process's anonymous memory) or none fit."""
    span = huge_span(address, nbytes)
    return span is not None and _madvise()(span[0], span[1], mmap.MADV_HUGEPAGE) == 0


class AdvisingAllocator:
    """A pool's allocator (callable with a byte count, as pyopencl's arrays call it) that advises
    each large block the first time the pool hands it out."""

    def __init__(self, queue: cl.CommandQueue, pool: Any) -> None:
        self.queue = queue
        self.pool = pool
        self.advised: set[int] = set()  # the cl_mem handles already mapped
        self.refused = 0  # blocks whose advice the kernel refused (a driver's staging copy)

    def __call__(self, nbytes: int) -> Any:
        buf = self.pool(nbytes)
        if nbytes >= MIN_BYTES and buf.int_ptr not in self.advised:
            self.advised.add(buf.int_ptr)
            if not self._advise(buf, nbytes):
                self.refused += 1
        return buf

    def _advise(self, buf: Any, nbytes: int) -> bool:
        # a blocking map waits for what the queue still runs on the block (the pool hands a
        # block out again as soon as its array is freed); invalidating: its content is garbage
        host, _ = cl.enqueue_map_buffer(  # type: ignore[type-var,misc]
            self.queue, buf, cl.map_flags.WRITE_INVALIDATE_REGION, 0, (nbytes,), np.dtype(np.uint8)
        )
        try:
            return advise(host.ctypes.data, nbytes)
        finally:
            host.base.release(self.queue)
