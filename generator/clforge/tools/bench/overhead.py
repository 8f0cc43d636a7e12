"""The per-call overhead of an eager call against a raw pyopencl launch of the same kernel, the
first call in a fresh process with cold and warm caches, and the speed of the same calls from
one fresh process to the next (with PoCL's worker threads pinned, as clforge sets them, and
left to the OS, as before)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from clforge.call.dispatcher import dispatcher
from clforge.device.threads import AFFINITY_ENV
from clforge.tune.measure import median_time


def bench_overhead(rounds: int = 3, repeats: int = 9, inner: int = 2000) -> dict[str, Any]:
    from clforge.generated import ops

    d = dispatcher()
    q = d.runtime.queue
    n = 1024
    a = cla.to_device(q, np.ones(n, np.float32))
    b = cla.to_device(q, np.ones(n, np.float32))
    # add broadcasts over 4 dims: plan for the canonical shape (1, 1, 1, n) that ops.add uses
    plan = d.plan_for(
        d.registry.op("add"), {"a": a.reshape(1, 1, 1, n), "b": b.reshape(1, 1, 1, n)}, {}
    )
    (launch,) = plan.launches
    kernel = launch.kernel
    gs, ls = launch.geometry.global_size, launch.geometry.local_size
    scalars = launch.args[3:]  # the dims and strides, after the buffers a, b, c

    pool = d.runtime.allocator

    def raw() -> None:  # the least any caller does: allocate the output (same pool), launch
        c = cla.empty(q, (n,), np.float32, allocator=pool)
        kernel(q, gs, ls, a.base_data, b.base_data, c.base_data, *scalars)  # type: ignore[arg-type]

    def eager() -> None:
        ops.add(a, b)

    t_raw, t_eager = [], []
    for _ in range(rounds):  # interleave, so drift hits both
        t_raw.append(median_time(raw, q.finish, repeats, inner))
        t_eager.append(median_time(eager, q.finish, repeats, inner))
    r, e = statistics.median(t_raw), statistics.median(t_eager)
    return {
        "instance": plan.inst.name,
        "raw_us": r * 1e6,
        "eager_us": e * 1e6,
        "ratio": e / r,
        "rounds": rounds,
        "repeats": repeats,
        "inner": inner,
    }


def _fresh(code: str, env: dict[str, str]) -> str:
    """The standard output of `code` run by this Python in a fresh process with `env`."""
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    return out.stdout


_FIRST_CALL = """
import time, numpy as np
t0 = time.perf_counter()
from clforge.generated import ops
a = np.ones((300, 200), np.float32); b = np.ones((200, 100), np.float32)
ops.matmul(a, b)
print(time.perf_counter() - t0)
"""


def bench_first_call(repeats: int = 3) -> dict[str, float]:
    """Seconds from import to the first matmul result in a fresh process."""

    def run(env: dict[str, str]) -> float:
        return float(_fresh(_FIRST_CALL, env).strip().splitlines()[-1])

    cold, warm = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as ours, tempfile.TemporaryDirectory() as pocl:
            env = {
                **os.environ,
                "CLFORGE_CACHE_DIR": ours,
                "POCL_CACHE_DIR": pocl,
                "PYOPENCL_NO_CACHE": "1",
            }
            cold.append(run(env))
            warm.append(run(env))
    return {
        "cold_s": statistics.median(cold),
        "warm_s": statistics.median(warm),
        "repeats": repeats,
    }


_PROCESS_SPEED = """
import time, numpy as np
import pyopencl.array as cla
from clforge import dispatcher, ops
q = dispatcher().runtime.queue
x = cla.to_device(q, np.random.rand(4096, 1024).astype(np.float32))
y = cla.to_device(q, np.random.rand(4096, 4096).astype(np.float32))
g = cla.to_device(q, np.random.rand(4194304).astype(np.float32))
calls = {
    "softmax 4096x1024": lambda: ops.softmax(x, axis=-1),
    "sum 4096x4096": lambda: ops.sum(y, axis=-1),
    "gelu 4194304": lambda: ops.gelu(g),
}
for name, fn in calls.items():
    for _ in range(10):
        fn()
    q.finish()
    ts = []
    for _ in range(15):
        t0 = time.perf_counter(); fn(); q.finish(); ts.append(time.perf_counter() - t0)
    print(name, "=", sorted(ts)[7])
"""
PROCESS_MODES = {"pinned": None, "unpinned": "0"}  # mode: $POCL_AFFINITY (None: clforge's)


def bench_process_speed(processes: int = 5) -> dict[str, Any]:
    """The same eager calls (softmax, a last-axis sum, gelu) in `processes` fresh processes per
    mode, the modes alternating: each process's median of 15 calls after 10 warm-up calls, in
    ms. "pinned" is what clforge sets up (PoCL's workers one per core, device/threads.py);
    "unpinned" the same with $POCL_AFFINITY=0, the OS placing the threads."""
    per: dict[str, dict[str, list[float]]] = {m: {} for m in PROCESS_MODES}
    for _ in range(processes):
        for mode, value in PROCESS_MODES.items():
            env = {k: v for k, v in os.environ.items() if k != AFFINITY_ENV}
            if value is not None:
                env[AFFINITY_ENV] = value
            for line in _fresh(_PROCESS_SPEED, env).splitlines():
                name, _, secs = line.rpartition(" = ")
                if name:
                    per[mode].setdefault(name, []).append(float(secs) * 1e3)
    return {"processes": processes, "ms": per}


def bench_host_per_kernel(
    kernels: int = 64, n: int = 16, rounds: int = 7, inner: int = 200
) -> dict[str, Any]:
    """Host time per kernel of a compiled model against the same ops as eager calls: a chain of
    `kernels` adds of `n` f32 on device arrays (y = y + x, each reading the previous result),
    kernels so small that the host's work is what is timed (fusion off: fused, the chain would
    be one kernel). Each call is timed alone with
    `time.perf_counter_ns`, the queue drained after it outside the timed part (host time only);
    a round's figure is the mean of `inner` calls over the kernels they launch, and the result
    the median of `rounds` rounds, with the lowest and highest. Beside them, the floor: the
    bare `enqueue_nd_range_kernel` of the model's ready kernels, what the driver alone costs."""
    from clforge.call.compiled import TensorType
    from clforge.generated import ops
    from clforge.graph import Graph

    d = dispatcher()
    q = d.runtime.queue
    g = Graph("add_chain")
    x = g.input("x", TensorType("f32", (n,)))
    y = x
    for _ in range(kernels):
        y = g.ops.add(y, x)
    g.output(y)
    model = g.compile(fusion=False)  # one kernel per add, as eager: the host's cost per launch
    xd = cla.to_device(q, np.ones(n, np.float32))

    def compiled() -> Any:
        return model(xd)

    def eager() -> Any:
        out = xd
        for _ in range(kernels):
            out = ops.add(out, xd)
        return out

    want = float(kernels + 1)
    for fn in (compiled, eager):  # warm, and checked: every element is kernels + 1
        got = fn().get()
        if not np.all(got == want):  # pragma: no cover - a wrong result is not timed
            raise AssertionError(f"host-per-kernel chain: got {got[:4]}, expected {want}")
    (spec,) = model.cache.values()
    launched = len(spec.launches)

    def floor() -> None:  # the bare enqueues of the same ready kernels, nothing else
        for launch in spec.launches:
            cl.enqueue_nd_range_kernel(q, launch.kernel, launch.global_size, launch.local_size)

    def per_kernel_us(fn: Any) -> float:
        total = 0
        for _ in range(inner):
            t0 = time.perf_counter_ns()
            fn()
            total += time.perf_counter_ns() - t0
            q.finish()
        return total / inner / kernels / 1e3

    t_compiled, t_eager, t_floor = [], [], []
    for _ in range(rounds):  # interleaved, so drift hits all three
        t_compiled.append(per_kernel_us(compiled))
        t_eager.append(per_kernel_us(eager))
        t_floor.append(per_kernel_us(floor))
    return {
        "kernels": kernels,
        "launched": launched,
        "n": n,
        "compiled_us": statistics.median(t_compiled),
        "compiled_range_us": (min(t_compiled), max(t_compiled)),
        "eager_us": statistics.median(t_eager),
        "eager_range_us": (min(t_eager), max(t_eager)),
        "enqueue_us": statistics.median(t_floor),
        "enqueue_range_us": (min(t_floor), max(t_floor)),
        "rounds": rounds,
        "inner": inner,
    }
