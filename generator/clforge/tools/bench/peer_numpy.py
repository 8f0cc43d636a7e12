"""The NumPy peer (run in its own process): BLAS's `a @ b` for matmul and gemm, this project's
reference implementation (generator/clforge/references) for the other ops."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from clforge import references
from clforge.tools.bench.protocol import Answer, Outcome, Request, Timing, host_inputs, skipped
from clforge.tools.bench.timing import Call, outcomes

# ops whose reference is no NumPy way of computing them (gelu's erf is a Python loop)
NOT_NUMPY = {"gelu": "no NumPy equivalent (erf)"}


def _materialized(fn: Callable[..., dict[str, np.ndarray]], x: Any, attrs: Any) -> None:
    """Run a reference and make its results real arrays: NumPy may return views (a transpose
    costs nothing until it is read), a kernel always writes its output."""
    for v in fn(x, attrs).values():
        np.ascontiguousarray(v)


def prepare(req: Request) -> Call | Outcome:
    if req["op"] in NOT_NUMPY:
        return skipped(NOT_NUMPY[req["op"]])
    x = host_inputs(req)
    if req["op"] == "matmul":  # one batch of [M, K] @ [K, N]: plain BLAS GEMM
        a, b = x["a"][0], x["b"][0]
        return Call(lambda: a @ b)
    if req["op"] == "gemm" and req["attrs"].get("alpha", 1) == 1 and not req["attrs"].get("beta"):
        a, b = x["a"], x["b"]
        return Call(lambda: a @ b)
    fn = references.resolve(req["reference"], [Path(r) for r in req["roots"]]).fn
    note = "the reference on the row-major (NCHW) equivalent" if req["layouts"] else None
    return Call(functools.partial(_materialized, fn, x, req["attrs"]), note)


def blas() -> str:
    try:
        deps = np.show_config(mode="dicts")["Build Dependencies"]  # type: ignore[func-returns-value]
        return f"{deps['blas']['name']} {deps['blas'].get('version', '')}".strip()
    except Exception:  # the layout of NumPy's build information is not a stable API
        return "BLAS unknown"


def answer(requests: list[Request], timing: Timing) -> Answer:
    return {
        "available": True,
        "version": f"{np.__version__} ({blas()})",
        "outcomes": outcomes(requests, prepare, timing),
    }
