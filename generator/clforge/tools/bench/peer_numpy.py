"""The NumPy peer (run in its own process), on each case's natural shapes: BLAS's `a @ b` for
matmul and gemm, `np.sum`/`mean`/`max`/`argmax` over the case's axis, a transpose made
contiguous, and this project's reference implementation (generator/clforge/references) for the
other ops."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from clforge import references
from clforge.tools.bench.protocol import Outcome, Request, natural_inputs, skipped
from clforge.tools.bench.timing import Call, Served, outcome

# ops whose reference is no NumPy way of computing them (gelu's erf is a Python loop)
NOT_NUMPY = {"gelu": "no NumPy equivalent (erf)"}


def _materialized(fn: Callable[..., dict[str, np.ndarray]], x: Any, attrs: Any) -> None:
    """Run a reference and make its results real arrays: NumPy may return views (a transpose
    costs nothing until it is read), a kernel always writes its output."""
    for v in fn(x, attrs).values():
        np.ascontiguousarray(v)


# what a NumPy user writes for the reductions over the case's axis
AXIS_CALLS: dict[str, Callable[..., np.ndarray]] = {
    "sum": np.sum,
    "mean": np.mean,
    "max": np.max,
    "argmax": np.argmax,
}


def prepare(req: Request) -> list[Call] | Outcome:
    """The call a NumPy user writes, on the case's natural shapes: `a @ b` (matmul, gemm), the
    reduction over the case's axis, `np.ascontiguousarray(x.transpose(perm))`, else the op's
    reference (generator/clforge/references), which computes over axis 1, the natural axis of
    both a (B, R) and a middle-axis (B, R, I) case."""
    op, natural = req["op"], req["natural"]
    if op in NOT_NUMPY:
        return skipped(NOT_NUMPY[op])
    x = natural_inputs(req)
    if op == "matmul" or (op == "gemm" and _plain_gemm(req)):
        a, b = x["a"], x["b"]
        return [Call(lambda: a @ b, "a @ b")]
    axis = natural["axis"]
    if op in AXIS_CALLS and axis is not None:
        reduce, v = AXIS_CALLS[op], x["x"]
        return [Call(lambda: reduce(v, axis=axis), f"np.{op}(x, axis={axis})")]
    if op == "permute" and natural["perm"] is not None:
        perm, v = tuple(natural["perm"]), x["x"]
        return [Call(lambda: np.ascontiguousarray(v.transpose(perm)), f"x.transpose({perm})")]
    if axis is not None and axis % len(natural["shapes"]["x"]) != 1:
        return skipped(f"the reference computes over axis 1, the case's is {axis}")
    fn = references.resolve(req["reference"], [Path(r) for r in req["roots"]]).fn
    note = "the reference on the row-major (NCHW) equivalent" if req["layouts"] else "the reference"
    return [Call(functools.partial(_materialized, fn, x, req["attrs"]), note)]


def _plain_gemm(req: Request) -> bool:
    return req["attrs"].get("alpha", 1) == 1 and not req["attrs"].get("beta")


def blas() -> str:
    try:
        deps = np.show_config(mode="dicts")["Build Dependencies"]  # type: ignore[func-returns-value]
        return f"{deps['blas']['name']} {deps['blas'].get('version', '')}".strip()
    except Exception:  # the layout of NumPy's build information is not a stable API
        return "BLAS unknown"


def serve() -> Served:
    return (
        {"available": True, "version": f"{np.__version__} ({blas()})"},
        lambda req, timing: outcome(req, prepare, timing),
    )
