"""`clforge bench`: speed as ratios, measured side by side in one run, medians of repeats.

Three tables:
- per-call overhead: an eager `generated.ops` call on small device arrays against a raw pyopencl
  launch of the same kernel (output allocation included in both);
- throughput: each op's chosen instance and its generic fallback against NumPy, on device
  arrays (no transfers), as GB/s or GFLOP/s and ratios;
- first call in a fresh process: cold caches against warm caches.

These machines are shared and noisy: every figure is the median of several repeats, and only
ratios taken in the same run mean much.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyopencl.array as cla

from . import references as reference
from .dispatch import dispatcher
from .dtypes import DTYPES


def median_time(
    fn: Callable[[], object], sync: Callable[[], object], repeats: int, inner: int
) -> float:
    """Median over `repeats` of the mean time of `inner` back-to-back calls, in seconds."""
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


# --- per-call overhead ---------------------------------------------------------------------


def bench_overhead(repeats: int = 9, inner: int = 2000) -> dict[str, float]:
    from generated import ops

    d = dispatcher()
    q = d.runtime.queue
    n = 1024
    a = cla.to_device(q, np.ones(n, np.float32))
    b = cla.to_device(q, np.ones(n, np.float32))
    # add broadcasts over 4 dims: plan for the canonical shape (1, 1, 1, n) that ops.add uses
    plan = d.plan_for(
        d.registry.op("add"), {"a": a.reshape(1, 1, 1, n), "b": b.reshape(1, 1, 1, n)}, {}
    )
    kernel = d.runtime.kernel(plan.inst)
    gs, ls = plan.geometry.global_size, plan.geometry.local_size
    scalars = plan.args[3:]  # the dims and strides, after the buffers a, b, c

    def raw() -> None:
        c = cla.empty(q, (n,), np.float32)
        kernel(q, gs, ls, a.data, b.data, c.data, *scalars)

    def eager() -> None:
        ops.add(a, b)

    t_raw, t_eager = [], []
    for _ in range(3):  # interleave, so drift hits both
        t_raw.append(median_time(raw, q.finish, repeats, inner))
        t_eager.append(median_time(eager, q.finish, repeats, inner))
    r, e = statistics.median(t_raw), statistics.median(t_eager)
    return {
        "instance": plan.inst.name,
        "raw_us": r * 1e6,
        "eager_us": e * 1e6,  # type: ignore[dict-item]
        "ratio": e / r,
    }


# --- throughput ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    op: str
    sizes: dict[str, int]
    work: Callable[[dict[str, int]], float]  # bytes or flops of one call
    unit: str  # GB/s or GFLOP/s
    numpy: bool = True  # False where NumPy has no equivalent (gelu needs erf)


def _bytes(n_arrays: int) -> Callable[[dict[str, int]], float]:
    return lambda s: n_arrays * 4.0 * float(np.prod(list(s.values())))


CASES = (
    Case("add", {"D0": 1, "D1": 1, "D2": 1, "D3": 16 * 2**20}, _bytes(3), "GB/s"),
    Case("relu", {"N": 16 * 2**20}, _bytes(2), "GB/s"),
    Case("gelu", {"N": 4 * 2**20}, _bytes(2), "GB/s", numpy=False),
    Case("sum", {"M": 4096, "N": 4096}, _bytes(1), "GB/s"),
    Case("softmax", {"M": 4096, "N": 1024}, _bytes(2), "GB/s"),
    Case(
        "matmul",
        {"M": 512, "N": 512, "K": 512},
        lambda s: 2.0 * s["M"] * s["N"] * s["K"],
        "GFLOP/s",
    ),
    Case(
        "matmul",
        {"M": 1024, "N": 1024, "K": 1024},
        lambda s: 2.0 * s["M"] * s["N"] * s["K"],
        "GFLOP/s",
    ),
    Case("mul", {"D0": 1, "D1": 1, "D2": 4096, "D3": 4096}, _bytes(3), "GB/s"),
    Case("maximum", {"D0": 1, "D1": 1, "D2": 1, "D3": 16 * 2**20}, _bytes(3), "GB/s"),
    Case("exp", {"N": 16 * 2**20}, _bytes(2), "GB/s"),
    Case("sigmoid", {"N": 16 * 2**20}, _bytes(2), "GB/s"),
)


def bench_throughput(repeats: int = 5) -> list[dict[str, object]]:
    d = dispatcher()
    reg, rt, q = d.registry, d.runtime, d.runtime.queue
    rng = np.random.default_rng(0)
    rows: list[dict[str, object]] = []
    for case in CASES:
        op = reg.op(case.op)
        host = {
            t.name: reference.make_input(
                rng, tuple(case.sizes[x] for x in t.shape), DTYPES["f32"].np_dtype
            )
            for t in op.inputs
        }
        dev = {k: cla.to_device(q, v) for k, v in host.items()}
        chosen = d.plan_for(op, dev, {})
        generic = reg.instance(
            chosen.inst.name.replace(f"__{chosen.inst.variant}__", "__generic__")
        )
        plans = {
            "chosen": chosen,
            "generic": rt.plan(
                generic, dict(zip(op.dims, (case.sizes[x] for x in op.dims), strict=True)), {}
            ),
        }
        np_fn = reference.REFERENCES[case.op].fn
        np_in = dict(host)
        inner = 1 if case.work(case.sizes) > 1e9 else 3
        t_np = (
            median_time(lambda f=np_fn, x=np_in: f(x, {}), lambda: None, repeats, inner)
            if case.numpy
            else float("nan")
        )
        times = {
            k: median_time(lambda p=p, x=dev: rt.run(p, x), q.finish, repeats, inner)
            for k, p in plans.items()
        }
        scale = 1e9
        rows.append(
            {
                "op": case.op,
                "sizes": case.sizes,
                "unit": case.unit,
                "chosen": chosen.inst.name,
                "chosen_rate": case.work(case.sizes) / times["chosen"] / scale,
                "generic_rate": case.work(case.sizes) / times["generic"] / scale,
                "numpy_rate": case.work(case.sizes) / t_np / scale,
                "chosen_vs_numpy": t_np / times["chosen"],
                "chosen_vs_generic": times["generic"] / times["chosen"],
            }
        )
    return rows


# --- first call in a fresh process -----------------------------------------------------------

_FIRST_CALL = """
import time, numpy as np
t0 = time.perf_counter()
from generated import ops
a = np.ones((300, 200), np.float32); b = np.ones((200, 100), np.float32)
ops.matmul(a, b)
print(time.perf_counter() - t0)
"""


def bench_first_call(repeats: int = 3) -> dict[str, float]:
    """Seconds from import to the first matmul result in a fresh process."""

    def run(env: dict[str, str]) -> float:
        out = subprocess.run(
            [sys.executable, "-c", _FIRST_CALL], env=env, check=True, capture_output=True, text=True
        )
        return float(out.stdout.strip().splitlines()[-1])

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
    return {"cold_s": statistics.median(cold), "warm_s": statistics.median(warm)}


def run_bench(as_json: bool = False) -> int:
    d = dispatcher()
    over = bench_overhead()
    rows = bench_throughput()
    first = bench_first_call()
    if as_json:
        print(
            json.dumps(
                {
                    "device": d.profile.name,
                    "overhead": over,
                    "throughput": rows,
                    "first_call": first,
                },
                indent=2,
            )
        )
        return 0
    print(f"device: {d.profile.name} ({d.runtime.device.platform.version})")
    print("\nper-call overhead, add of 1024 f32 on device arrays (median of 3x9 runs of 2000):")
    print(
        f"  raw pyopencl launch {over['raw_us']:.1f} us, eager ops.add {over['eager_us']:.1f} us,"
        f" ratio {over['ratio']:.2f}x  ({over['instance']})"
    )
    print("\nthroughput, f32, device arrays, median of 5 (higher is better):")
    print(
        f"  {'op':8} {'sizes':26} {'chosen instance':34} {'chosen':>9} {'generic':>9} "
        f"{'numpy':>9} {'unit':8} {'vs numpy':>8} {'vs generic':>10}"
    )
    for r in rows:
        sizes = ",".join(f"{k}={v}" for k, v in r["sizes"].items())  # type: ignore[attr-defined]
        print(
            f"  {r['op']:8} {sizes:26} {r['chosen']:34} {r['chosen_rate']:9.2f} "
            f"{r['generic_rate']:9.2f} {r['numpy_rate']:9.2f} {r['unit']:8} "
            f"{r['chosen_vs_numpy']:7.2f}x {r['chosen_vs_generic']:9.2f}x"
        )
    print("\nfirst matmul in a fresh process (import included), median of 3:")
    print(f"  cold caches {first['cold_s']:.2f} s, warm caches {first['warm_s']:.2f} s")
    return 0
