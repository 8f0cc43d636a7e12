"""The CLBlast peer (run in its own process): SGEMM and DGEMM through pyclblast on device buffers
of the same OpenCL device as clforge's (the default device, $CLFORGE_DEVICE honoured), for the
matmul and gemm cases."""

from __future__ import annotations

from typing import Any

import numpy as np

from clforge.tools.bench.protocol import Outcome, Request, natural_inputs, skipped, unavailable
from clforge.tools.bench.timing import Call, Served, outcome

GEMM_OPS = ("matmul", "gemm")


def _prepare(queue: Any, req: Request) -> list[Call] | Outcome:
    import pyclblast
    import pyopencl.array as cla

    if req["op"] not in GEMM_OPS:
        return skipped("not a BLAS op")
    if req["dtype"] not in ("f32", "f64"):
        return skipped(f"no {req['dtype']} GEMM")
    x = natural_inputs(req)
    a, b = x["a"], x["b"]
    m, k = a.shape
    n = b.shape[1]
    alpha = float(req["attrs"].get("alpha", 1.0))
    da, db = cla.to_device(queue, np.ascontiguousarray(a)), cla.to_device(queue, b)
    dc = cla.zeros(queue, (m, n), a.dtype)

    def run() -> None:
        pyclblast.gemm(queue, m, n, k, da, db, dc, a_ld=k, b_ld=n, c_ld=n, alpha=alpha, beta=0.0)

    return [Call(run)]


def serve() -> Served:
    try:
        import pyclblast  # noqa: F401
    except ImportError as exc:
        return unavailable(exc), None
    import pyopencl as cl

    from clforge.device.discovery import default_device

    device = default_device()
    queue = cl.CommandQueue(cl.Context([device]))
    version = f"pyclblast {_version()} on {device.name.strip()}"
    return {"available": True, "version": version}, lambda req, timing: outcome(
        req, lambda r: _prepare(queue, r), timing, queue.finish
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyclblast")
    except PackageNotFoundError:
        return "?"
