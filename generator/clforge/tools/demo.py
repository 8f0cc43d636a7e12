"""`clforge demo`: the main job. Every op in the registry, dispatched and run on the default
OpenCL device; prints the instance the dispatcher chose and the check against NumPy.

Each op runs on the largest non-empty case of its reference (clforge.references), dtype f32
(or its first dtype), through the same dispatcher the eager functions use; then a few eager
calls show the calling conventions (broadcasting, an axis, a column-major operand).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from clforge import references
from clforge.call.binding import bind_dims, resolve_attrs
from clforge.call.dispatcher import Dispatcher, dispatcher
from clforge.call.eager import eager_plan
from clforge.call.selection import describe
from clforge.core.dtypes import DTYPES


def _largest_case(d: Dispatcher, op_name: str) -> references.Case:
    op = d.registry.op(op_name)
    cases = references.reference_of(op, d.registry.roots()).cases or (
        references.Case(dict.fromkeys(op.dims, 257)),
    )

    def size(c: references.Case) -> int:
        return math.prod(c.dims.values())

    return max((c for c in cases if size(c) > 0), key=size, default=cases[0])


def _check(dtype: str, got: np.ndarray, want: np.ndarray) -> tuple[bool, float]:
    tol = DTYPES[dtype]
    got64 = np.asarray(got, np.float64)
    if not got64.size or got64.shape != want.shape:
        return got64.shape == want.shape, 0.0
    finite = np.isfinite(want)  # casts give infinities: they must match, not set the scale
    scale = max(float(np.max(np.abs(want[finite]), initial=0.0)), 1.0)
    err = float(np.max(np.abs(got64[finite] - want[finite]), initial=0.0)) / scale
    ok = bool(
        np.allclose(got64, want, rtol=tol.rtol * 10, atol=tol.atol * 10 * scale, equal_nan=True)
    )
    return ok, err


def _registry_rows(d: Dispatcher, rng: np.random.Generator) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for op_name in sorted(d.registry.ops):
        op = d.registry.op(op_name)
        if not op.reference:
            continue
        ref = references.reference_of(op, d.registry.roots())
        dtype = "f32" if "f32" in op.dtypes else op.dtypes[0]
        case = _largest_case(d, op_name)
        shapes = {
            t.name: tuple(case.shapes.get(t.name, tuple(case.dims[x] for x in t.shape)))
            for t in op.inputs
        }
        dims = bind_dims(op, shapes, resolve_attrs(op, case.attrs))  # fails loudly on a bad case
        inputs = {
            t.name: references.make_input(
                rng,
                shapes[t.name],
                DTYPES[t.dtype or dtype].np_dtype,
                references.domain_of(ref, t.name, dims),
            )
            for t in op.inputs
        }
        plan = d.plan_for(op, inputs, dict(case.attrs))  # select, build, plan
        t0 = time.perf_counter()
        outs = d.execute(op, plan, inputs)
        ms = (time.perf_counter() - t0) * 1e3
        want = references.expected(op, inputs, resolve_attrs(op, case.attrs), d.registry.roots())
        checks = [_check(dtype, outs[t.name], want[t.name]) for t in op.outputs]
        ok = all(c[0] for c in checks)
        err = max(c[1] for c in checks)
        shown = " ".join(f"{k}{'x'.join(map(str, v))}" for k, v in shapes.items())
        rows.append(
            (
                op_name,
                dtype,
                shown[:34],
                plan.inst.name,
                f"{err:.1e}",
                f"{ms:.2f}",
                "ok" if ok else "FAIL",
            )
        )
    return rows


def _eager_rows(d: Dispatcher, rng: np.random.Generator) -> list[tuple[str, ...]]:
    """A few calls through clforge.generated.ops, in NumPy's own terms (those whose op has the
    calling convention the call needs)."""
    from clforge.generated import ops

    def call_of(name: str) -> str:
        return d.registry.ops[name].call if name in d.registry.ops else ""

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    a, b = f32(257, 129), np.asfortranarray(f32(129, 263))
    x = f32(64, 1001)
    # (shown, op, inputs, convention options, NumPy's answer)
    calls: list[tuple[str, str, tuple[Any, ...], dict[str, Any], Callable[[], np.ndarray]]] = [
        ("ops.matmul(a, b_fortran)", "matmul", (a, b), {}, lambda: a @ b),
    ]
    if call_of("tanh") == "flat":
        calls.append(("ops.tanh(x)", "tanh", (x,), {}, lambda: np.tanh(x)))
    if call_of("softmax") == "axis":
        calls.append(("ops.softmax(x, axis=0)", "softmax", (x,), {"axis": 0}, lambda: _softmax0(x)))
    if call_of("add") == "broadcast":
        row = f32(1001)
        calls.append(("ops.add(x, row)", "add", (x, row), {}, lambda: x + row))
    rows: list[tuple[str, ...]] = []
    for shown, name, args, options, want in calls:
        chosen = eager_plan(name, args, {}, options).inst.name
        t0 = time.perf_counter()
        got = getattr(ops, name)(*args, **options)
        ms = (time.perf_counter() - t0) * 1e3
        ok, err = _check("f32", got, want().astype(np.float64))
        inputs = " ".join("x".join(map(str, v.shape)) for v in args)
        rows.append(
            (shown, "f32", inputs, chosen, f"{err:.1e}", f"{ms:.2f}", "ok" if ok else "FAIL")
        )
    return rows


def _softmax0(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def run_demo() -> int:
    d = dispatcher()
    dev = d.runtime.device
    print(f"device: {describe(d.profile)}")
    print(f"        {dev.platform.name}, {' '.join(dev.platform.version.split()[:4])}")
    rng = np.random.default_rng(2026)
    rows = _registry_rows(d, rng) + _eager_rows(d, rng)
    head = ("op", "dtype", "inputs", "chosen instance", "max err", "ms", "check")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    failures = sum(r[-1] != "ok" for r in rows)
    print(
        f"{len(rows) - failures} of {len(rows)} calls match NumPy "
        "(max err: largest absolute error over the largest |reference| value)"
    )
    return 1 if failures else 0
