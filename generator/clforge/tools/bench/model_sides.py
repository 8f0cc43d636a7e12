"""The sides of the bench's model cases (:mod:`.models`): clforge's compiled graph and clforge's
eager calls (both on device arrays, in the bench's own process, as clforge's side of the op
cases is), and the peers NumPy and ONNX Runtime, each in its own process (asked through the
same worker processes as the op cases: a request with a ``model`` key is a model case).

Each side times one call of the whole model (:func:`~.timing.seconds`: a warm-up, then
calibrated repeats, synchronized), writes its output to the ``.npy`` file the request names
(the bench compares the sides' outputs), and clforge's sides also give the kernels one call
launches (counted at the runtime's enqueue) and the host time of one call: the time until the
call returns, the device idle when it starts (the kernels run after or while it returns)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, NotRequired, TypedDict

import numpy as np

from clforge.tools.bench.models import (
    ModelCase,
    build_graph,
    build_onnx,
    eager_calls,
    model_input,
    numpy_forward,
    weights,
)
from clforge.tools.bench.protocol import Timing, first_line
from clforge.tools.bench.timing import seconds

HOST_CALLS = 20  # calls whose host time is averaged


class ModelRequest(TypedDict):
    op: str  # the case's kind: what a peer is asked about (CLBlast is not)
    model: dict[str, Any]  # the ModelCase's fields
    out: str  # where the side writes its output (.npy)


class ModelOutcome(TypedDict):
    seconds: float | None
    note: NotRequired[str]
    kernels: NotRequired[int | None]  # kernels one call launches (None: not counted)
    host_s: NotRequired[float]  # host seconds of one call
    # clforge's sides: seconds of one call whose result is ready before the next call starts
    # (the peers' calls return their results: their `seconds` are this already)
    waited_s: NotRequired[float]


def model_request(case: ModelCase, out: str) -> ModelRequest:
    return {"op": case.kind, "model": dataclasses.asdict(case), "out": out}


def _case(req: ModelRequest) -> ModelCase:
    return ModelCase(**req["model"])


# --- the peers, in their processes --------------------------------------------------------------


def answer(peer: str, req: ModelRequest, timing: Timing) -> ModelOutcome:
    """A peer process's outcome for a model case (`peer`: the worker's name)."""
    try:
        case = _case(req)
        w, x = weights(case), model_input(case)
        if peer == "numpy":
            fn = numpy_forward(case, w)
            np.save(req["out"], fn(x))
            return {"seconds": seconds(lambda: fn(x), lambda: None, timing), "note": "NumPy"}
        if peer == "onnxruntime":
            from clforge.tools.bench.peer_ort import threads

            run, y = _ort_call(build_onnx(case, w), x, threads())
            run()
            np.save(req["out"], y)
            note = f"ONNX graph, all optimizations, {threads()} threads, IOBinding"
            return {"seconds": seconds(run, lambda: None, timing), "note": note}
    except Exception as exc:  # a peer's failure is a note in the table
        return {"seconds": None, "note": f"failed: {first_line(exc)}"}
    return {"seconds": None, "note": "n/a"}


def _ort_call(model: Any, x: np.ndarray, n_threads: int) -> tuple[Callable[[], None], np.ndarray]:
    """The model in an ORT session (every graph optimization, `n_threads` intra-op threads),
    its input and a preallocated output bound once: a call is `run_with_iobinding` alone."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = n_threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    y = np.empty_like(x)
    io = sess.io_binding()
    io.bind_cpu_input("x", x)
    out = ort.OrtValue.ortvalue_from_numpy(y)
    io.bind_ortvalue_output("y", out)

    def run() -> None:
        sess.run_with_iobinding(io)
        _ = out  # the output's memory lives with the binding

    return run, y


# --- clforge's sides, in the bench's process ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Prepared:
    """clforge's three ways of running a model case, on device arrays: the compiled graph, the
    same graph compiled without fusion, and eager calls."""

    graph: Callable[[], Any]
    unfused: Callable[[], Any]
    eager: Callable[[], Any]


def prepare(case: ModelCase, d: Any) -> Prepared:
    """The case's compiled graph and its eager calls, on the device arrays of the default
    dispatcher `d` (what eager calls and a model compiled without a queue use); the weights
    uploaded once, as constants of the model and as the eager calls' arrays."""
    import pyopencl.array as cla

    q = d.runtime.queue
    w = weights(case)
    x = cla.to_device(q, model_input(case))
    model = build_graph(case, w).compile()  # on d's queue: the default dispatcher's
    plain = build_graph(case, w).compile(fusion=False)
    run_eager = eager_calls(case, {k: cla.to_device(q, v) for k, v in w.items()})
    return Prepared(lambda: model(x), lambda: plain(x), lambda: run_eager(x))


def kernels_of(call: Callable[[], Any], rt: Any) -> int | None:
    """How many kernels one call launches, counted at pyopencl's enqueue (every launch path of
    clforge's calls it: ``Runtime.run``, a compiled model's ready kernels, a view's gather);
    None where the call launches none."""
    import pyopencl as cl

    count = [0]
    original = cl.enqueue_nd_range_kernel

    def counting(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return original(*args, **kwargs)

    cl.enqueue_nd_range_kernel = counting
    try:
        call()
    finally:
        cl.enqueue_nd_range_kernel = original
    rt.queue.finish()
    return count[0] or None


def host_seconds(call: Callable[[], Any], sync: Callable[[], Any]) -> float:
    """The host time of one call (the mean of HOST_CALLS), the device idle at each start."""
    total = 0.0
    for _ in range(HOST_CALLS):
        sync()
        t0 = time.perf_counter()
        call()
        total += time.perf_counter() - t0
    sync()
    return total / HOST_CALLS


def time_clforge(way: Callable[[], Any], rt: Any, timing: Timing, out: str | None) -> ModelOutcome:
    """One of clforge's ways timed: seconds per call back to back (the queue drained once per
    repeat) and per call waited for (drained after each), kernels, host time; its output
    written to `out` when given."""
    try:
        result = way()
        if out is not None:
            np.save(out, result.get())
        sync = rt.queue.finish

        def waited() -> None:
            way()
            sync()

        return {
            "seconds": seconds(way, sync, timing),
            "waited_s": seconds(waited, sync, timing),
            "kernels": kernels_of(way, rt),
            "host_s": host_seconds(way, sync),
        }
    except Exception as exc:
        return {"seconds": None, "note": f"failed: {first_line(exc)}"}


__all__ = [
    "ModelOutcome",
    "ModelRequest",
    "Prepared",
    "answer",
    "host_seconds",
    "kernels_of",
    "model_request",
    "prepare",
    "time_clforge",
]
