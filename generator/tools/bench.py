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

import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyopencl.array as cla

from generator import references as reference
from generator.call.binding import bind
from generator.call.dispatcher import dispatcher
from generator.core.dtypes import DTYPES
from generator.tune.measure import median_time

# --- per-call overhead ---------------------------------------------------------------------


def bench_overhead(repeats: int = 9, inner: int = 2000) -> dict[str, Any]:
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
    for _ in range(3):  # interleave, so drift hits both
        t_raw.append(median_time(raw, q.finish, repeats, inner))
        t_eager.append(median_time(eager, q.finish, repeats, inner))
    r, e = statistics.median(t_raw), statistics.median(t_eager)
    return {
        "instance": plan.inst.name,
        "raw_us": r * 1e6,
        "eager_us": e * 1e6,
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
    attrs: dict[str, float | int] = field(default_factory=dict)


def _bytes(n_arrays: int) -> Callable[[dict[str, int]], float]:
    return lambda s: n_arrays * 4.0 * float(np.prod(list(s.values())))


CASES: tuple[Case, ...] = (
    Case("add", {"D0": 1, "D1": 1, "D2": 1, "D3": 16 * 2**20}, _bytes(3), "GB/s"),
    Case("relu", {"N": 16 * 2**20}, _bytes(2), "GB/s"),
    Case("gelu", {"N": 4 * 2**20}, _bytes(2), "GB/s", numpy=False),
    Case("sum", {"B": 4096, "R": 4096, "I": 1}, _bytes(1), "GB/s"),
    Case("softmax", {"B": 4096, "R": 1024, "I": 1}, _bytes(2), "GB/s"),
    Case(
        "matmul",
        {"BATCH": 1, "M": 512, "N": 512, "K": 512, "BA": 1, "BB": 1},
        lambda s: 2.0 * s["M"] * s["N"] * s["K"],
        "GFLOP/s",
    ),
    Case(
        "matmul",
        {"BATCH": 1, "M": 1024, "N": 1024, "K": 1024, "BA": 1, "BB": 1},
        lambda s: 2.0 * s["M"] * s["N"] * s["K"],
        "GFLOP/s",
    ),
    Case(
        "conv2d",
        {"N": 1, "C": 64, "H": 56, "W": 56, "K": 64, "CG": 64, "R": 3, "S": 3, "OH": 54, "OW": 54},
        lambda s: 2.0 * s["N"] * s["K"] * s["OH"] * s["OW"] * s["CG"] * s["R"] * s["S"],
        "GFLOP/s",
    ),
    Case(
        "attention",
        {"B": 1, "H": 8, "SQ": 512, "SK": 512, "D": 64, "DV": 64},
        lambda s: 2.0 * s["B"] * s["H"] * s["SQ"] * s["SK"] * (s["D"] + s["DV"]),
        "GFLOP/s",
    ),
    Case("sum", {"B": 64, "R": 4096, "I": 64}, _bytes(1), "GB/s"),
    Case("mean", {"B": 4096, "R": 4096, "I": 1}, _bytes(1), "GB/s"),
    Case("max", {"B": 4096, "R": 4096, "I": 1}, _bytes(1), "GB/s"),
    Case("argmax", {"B": 4096, "R": 4096, "I": 1}, _bytes(1), "GB/s"),
    Case("softmax", {"B": 64, "R": 1024, "I": 64}, _bytes(2), "GB/s"),
    Case("log_softmax", {"B": 4096, "R": 1024, "I": 1}, _bytes(2), "GB/s"),
    Case("layer_norm", {"B": 4096, "R": 1024}, _bytes(2), "GB/s"),
    Case("rms_norm", {"B": 4096, "R": 1024}, _bytes(2), "GB/s"),
    Case(
        "permute",
        {"D0": 1, "D1": 1, "D2": 4096, "D3": 4096},
        _bytes(2),
        "GB/s",
        attrs={"p0": 0, "p1": 1, "p2": 3, "p3": 2},
    ),
    Case(
        "gemm",
        {"M": 1024, "N": 1024, "K": 1024},
        lambda s: 2.0 * s["M"] * s["N"] * s["K"],
        "GFLOP/s",
    ),
    Case("mul", {"D0": 1, "D1": 1, "D2": 4096, "D3": 4096}, _bytes(3), "GB/s"),
    Case("maximum", {"D0": 1, "D1": 1, "D2": 1, "D3": 16 * 2**20}, _bytes(3), "GB/s"),
    Case("exp", {"N": 16 * 2**20}, _bytes(2), "GB/s"),
    Case("sigmoid", {"N": 16 * 2**20}, _bytes(2), "GB/s"),
)


def _inputs(op_name: str, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    ref = reference.REFERENCES[op_name]
    return {
        k: reference.make_input(rng, v, DTYPES["f32"].np_dtype, ref.domains.get(k, "normal"))
        for k, v in shapes.items()
    }


_NUMPY_SCRIPT = """
import functools
import json, sys
from generator.tools.bench import numpy_times
print(json.dumps(numpy_times(json.loads(sys.argv[1]), int(sys.argv[2]))))
"""


def _materialized(fn: Callable[..., dict[str, np.ndarray]], x: Any, attrs: Any) -> None:
    """Run a reference and make its results real arrays: NumPy may return views (a transpose
    costs nothing until it is read), a kernel always writes its output."""
    for v in fn(x, attrs).values():
        np.ascontiguousarray(v)


def numpy_times(
    cases: list[tuple[str, dict[str, list[int]], dict[str, float | int]]], repeats: int
) -> list[float]:
    """Median seconds of each case's NumPy reference on f32 data (run in its own process)."""
    out = []
    for op_name, shapes, attrs in cases:
        x = _inputs(op_name, {k: tuple(v) for k, v in shapes.items()})
        fn = reference.REFERENCES[op_name].fn
        out.append(
            median_time(functools.partial(_materialized, fn, x, attrs), lambda: None, repeats, 1)
        )
    return out


def bench_throughput(repeats: int = 5) -> list[dict[str, object]]:
    """The chosen instance and the generic one against NumPy. NumPy runs in a separate process:
    PoCL's worker threads, once started, compete with OpenBLAS's for the cores and would make
    NumPy look several times slower than it is."""
    d = dispatcher()
    reg, rt, q = d.registry, d.runtime, d.runtime.queue
    shapes = []
    for case in CASES:
        op = reg.op(case.op)
        shapes.append((case.op, {t.name: [case.sizes[x] for x in t.shape] for t in op.inputs}))
    np_cases = [(*sh, case.attrs) for case, sh in zip(CASES, shapes, strict=True) if case.numpy]
    proc = subprocess.run(
        [sys.executable, "-c", _NUMPY_SCRIPT, json.dumps(np_cases), str(repeats)],
        check=True,
        capture_output=True,
        text=True,
    )
    np_times = iter(json.loads(proc.stdout.strip().splitlines()[-1]))
    rows: list[dict[str, object]] = []
    for case, (_, sh) in zip(CASES, shapes, strict=True):
        op = reg.op(case.op)
        host = _inputs(case.op, {k: tuple(v) for k, v in sh.items()})
        dev = {k: cla.to_device(q, v) for k, v in host.items()}
        chosen = d.plan_for(op, dev, case.attrs)
        generic = reg.instance(
            chosen.inst.name.replace(f"__{chosen.inst.variant}__", "__generic__")
        )
        b = bind(op, dev, case.attrs)
        plans = {"chosen": chosen, "generic": rt.plan(generic, b.dims, b.attrs, b.shapes)}
        inner = 1 if case.work(case.sizes) > 1e9 else 3
        t_np = next(np_times) if case.numpy else float("nan")
        times = {
            k: median_time(functools.partial(rt.enqueue, p, dev), q.finish, repeats, inner)
            for k, p in plans.items()
        }
        work = case.work(case.sizes) / 1e9
        rows.append(
            {
                "op": case.op,
                "sizes": case.sizes,
                "unit": case.unit,
                "chosen": chosen.inst.name,
                "chosen_rate": work / times["chosen"],
                "generic_rate": work / times["generic"],
                "numpy_rate": work / t_np,
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
    print("\nthroughput, f32, device arrays, median of 5 (higher is better); NumPy runs the")
    print("reference implementation (generator/references) in its own process:")
    head = (
        "op",
        "sizes",
        "chosen instance",
        "chosen",
        "generic",
        "numpy",
        "unit",
        "vs numpy",
        "vs generic",
    )
    table = [head]
    for r in rows:
        sizes = ",".join(f"{k}={v}" for k, v in r["sizes"].items())  # type: ignore[attr-defined]
        table.append(
            (
                str(r["op"]),
                sizes,
                str(r["chosen"]),
                f"{r['chosen_rate']:.2f}",
                f"{r['generic_rate']:.2f}",
                f"{r['numpy_rate']:.2f}",
                str(r["unit"]),
                f"{r['chosen_vs_numpy']:.2f}x",
                f"{r['chosen_vs_generic']:.2f}x",
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        cells = [
            c.ljust(w) if i < 3 or i == 6 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("  " + "  ".join(cells))
    print("\nfirst matmul in a fresh process (import included), median of 3:")
    print(f"  cold caches {first['cold_s']:.2f} s, warm caches {first['warm_s']:.2f} s")
    return 0
