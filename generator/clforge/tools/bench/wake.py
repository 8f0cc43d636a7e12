"""What a kernel launch costs in PoCL's thread pool beyond the kernel: how late the second worker
thread joins a kernel, and an empty kernel's round trip.

PoCL's CPU driver runs a kernel's work-groups on its worker threads, which block on a condition
variable whenever they find no work: between two kernels the thread that finishes the first
wakes the others for the next (a futex wake), and a call that waits for its result is woken the
same way. Where waking a sleeping thread is cheap this is noise; in a virtual machine whose idle
CPUs halt, each wake is an inter-processor interrupt through the hypervisor. ONNX Runtime's and
OpenBLAS's pools spin for a while before they sleep, so they rarely pay it. These figures say how
much of a short call (a 256 x 256 matmul takes ~100 us) is this cost on the machine at hand; see
docs/benchmarks.md, "Where the time of a short call goes".

The join delay is measured inside a kernel of two work-groups of one work-item each: work-group
1 writes the call's number to a flag, work-group 0 spins until it sees it, counting its turns, so
the count is how long the second worker took to start after the first. PoCL deals the first
half of the work-groups to the thread that picks the kernel up, so each work-group goes to its
own thread. A spin's length in time is calibrated by one work-group spinning a known number of
turns; a spin gives up after a bound, so that a pool of one thread cannot hang.
"""

from __future__ import annotations

import itertools
import statistics
import time
from typing import Any

import numpy as np
import pyopencl as cl

from clforge.tune.measure import median_time

_SOURCE = """
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void join(volatile __global int* flag, __global int* turns, const int call, const int bound) {
    if (get_global_id(0) == 1) { flag[0] = call; return; }
    int n = 0;
    while (flag[0] != call && n < bound) ++n;
    turns[call] = n;
}
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void spin(volatile __global int* flag, __global int* turns, const int never, const int bound) {
    int n = 0;
    while (flag[0] != never && n < bound) ++n;
    turns[0] = n;
}
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void empty(__global int* turns) {}
"""
BOUND = 50_000_000  # spins before a join gives up (~15-50 ms)
CALIBRATION = 10_000_000  # spins timed to convert turns to time


def bench_wake(queue: cl.CommandQueue, calls: int = 200, repeats: int = 7) -> dict[str, Any]:
    """The second worker's join delay over `calls` back-to-back kernels (median, 90th
    percentile, in us), the gap between back-to-back kernels of two work-groups, and an empty
    kernel's time enqueued back to back and each waited for;
    {"skipped": why} where the device is not a CPU of two or more compute units."""
    device = queue.device
    if not device.type & cl.device_type.CPU or device.max_compute_units < 2:
        return {"skipped": "needs a CPU device with two or more compute units"}
    ctx = queue.context
    prg = cl.Program(ctx, _SOURCE).build()
    join, spin, empty = (cl.Kernel(prg, name) for name in ("join", "spin", "empty"))
    mf = cl.mem_flags
    flag = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.full(1, -1, np.int32))
    turns = cl.Buffer(ctx, mf.READ_WRITE, 4 * max(calls, 1))

    spin.set_args(flag, turns, np.int32(-2), np.int32(CALIBRATION))
    cl.enqueue_nd_range_kernel(queue, spin, (1,), (1,))
    queue.finish()
    t0 = time.perf_counter()
    cl.enqueue_nd_range_kernel(queue, spin, (1,), (1,))
    queue.finish()
    us_per_turn = (time.perf_counter() - t0) * 1e6 / CALIBRATION

    for call in range(calls):  # back to back, as a bench loop's calls run
        join.set_args(flag, turns, np.int32(call), np.int32(BOUND))
        cl.enqueue_nd_range_kernel(queue, join, (2,), (1,))
    queue.finish()
    counts = np.empty(calls, np.int32)
    cl.enqueue_copy(queue, counts, turns)
    queue.finish()
    settled = counts[min(10, calls // 4) :]  # past the pool's first wake-ups
    joined = settled[settled < BOUND]
    delays = joined * us_per_turn

    # the gap between back-to-back kernels of two work-groups of ~50 us each, from the queue's
    # own timestamps: one kernel's end to the next one's start
    prof = cl.CommandQueue(ctx, device, properties=cl.command_queue_properties.PROFILING_ENABLE)
    spin.set_args(flag, turns, np.int32(-2), np.int32(max(1, round(50 / us_per_turn))))
    events = [cl.enqueue_nd_range_kernel(prof, spin, (2,), (1,)) for _ in range(40)]
    prof.finish()
    stamps = [(e.profile.start, e.profile.end) for e in events[5:]]
    gaps = [(b[0] - a[1]) / 1e3 for a, b in itertools.pairwise(stamps)]

    empty.set_args(turns)

    def launch() -> None:
        cl.enqueue_nd_range_kernel(queue, empty, (1,), (1,))

    def launch_and_wait() -> None:
        launch()
        queue.finish()

    return {
        "calls": int(settled.size),
        "joined": int(joined.size),
        "join_us": float(np.median(delays)) if delays.size else None,
        "join_p90_us": float(np.percentile(delays, 90)) if delays.size else None,
        "gap_us": statistics.median(gaps),
        "gaps": len(gaps),
        "back_to_back_us": median_time(launch, queue.finish, repeats, 100) * 1e6,
        "round_trip_us": median_time(launch_and_wait, queue.finish, repeats, 30) * 1e6,
        "spin_ns": us_per_turn * 1e3,
        "repeats": repeats,
    }


def wake_lines(w: dict[str, Any] | None) -> list[str]:
    """The report's lines for bench_wake's figures."""
    if not w:
        return []
    head = "PoCL's worker threads (wake.py):"
    if "skipped" in w:
        return [f"{head} not measured: {w['skipped']}"]
    if w["join_us"] is None:
        joined = "the second worker never joined a kernel of two work-groups"
    else:
        joined = (
            f"the second worker joins a kernel {w['join_us']:.1f} us after the first starts "
            f"(median of {w['joined']} back-to-back kernels of 2 work-groups, 90th percentile "
            f"{w['join_p90_us']:.1f})"
        )
    return [
        head,
        f"  {joined};",
        f"  {w['gap_us']:.1f} us from one kernel's end to the next one's start (back-to-back "
        f"kernels of 2 work-groups of ~50 us, the queue's timestamps, median of {w['gaps']});",
        f"  an empty kernel: {w['back_to_back_us']:.1f} us back to back, "
        f"{w['round_trip_us']:.1f} us enqueued and waited for (median of {w['repeats']})",
    ]


__all__ = ["bench_wake", "wake_lines"]
