"""The CLBlast peer (run in its own process): SGEMM and DGEMM through pyclblast on device buffers
of the same OpenCL device as clforge's (the default device, $CLFORGE_DEVICE honoured), for the
matmul and gemm cases."""

from __future__ import annotations

from typing import Any

import numpy as np

from clforge.tools.bench.protocol import (
    Answer,
    Outcome,
    Request,
    Timing,
    host_inputs,
    skipped,
    unavailable,
)
from clforge.tools.bench.timing import Call, outcomes

GEMM_OPS = ("matmul", "gemm")


def _prepare(queue: Any, req: Request) -> Call | Outcome:
    import pyclblast
    import pyopencl.array as cla

    if req["op"] not in GEMM_OPS:
        return skipped("not a BLAS op")
    if req["dtype"] not in ("f32", "f64"):
        return skipped(f"no {req['dtype']} GEMM")
    x = host_inputs(req)
    a, b = (x["a"][0], x["b"][0]) if req["op"] == "matmul" else (x["a"], x["b"])
    m, k = a.shape
    n = b.shape[1]
    alpha = float(req["attrs"].get("alpha", 1.0))
    da, db = cla.to_device(queue, np.ascontiguousarray(a)), cla.to_device(queue, b)
    dc = cla.zeros(queue, (m, n), a.dtype)

    def run() -> None:
        pyclblast.gemm(queue, m, n, k, da, db, dc, a_ld=k, b_ld=n, c_ld=n, alpha=alpha, beta=0.0)

    return Call(run)


def answer(requests: list[Request], timing: Timing) -> Answer:
    try:
        import pyclblast  # noqa: F401
    except ImportError as exc:
        return unavailable(exc)
    import pyopencl as cl

    from clforge.device.discovery import default_device

    device = default_device()
    queue = cl.CommandQueue(cl.Context([device]))
    return {
        "available": True,
        "version": f"pyclblast {_version()} on {device.name.strip()}",
        "outcomes": outcomes(requests, lambda r: _prepare(queue, r), timing, queue.finish),
    }


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyclblast")
    except PackageNotFoundError:
        return "?"
