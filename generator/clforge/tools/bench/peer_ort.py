"""The ONNX Runtime peer (run in its own process): for each case, a one-node ONNX model built in
memory (onnx.helper) run by ORT's CPU kernels with one intra-op thread per core and every graph
optimization on; inputs and a preallocated output are bound once (IOBinding), so that a timed
call is `run_with_iobinding` alone.

Where ORT has several ways to run an op, the newest standard one is tried first and the
outcome's note says which ran: Gelu (opset 20, else the com.microsoft contrib op), Swish
(opset 24, else Sigmoid + Mul), RMSNormalization (opset 23, else SimplifiedLayerNormalization),
Attention (opset 23, else MatMul + Softmax + MatMul composed)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clforge.tools.bench.protocol import (
    Answer,
    Outcome,
    Request,
    Timing,
    first_line,
    host_inputs,
    skipped,
    unavailable,
)
from clforge.tools.bench.timing import Call, outcomes

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Graph:
    """One way to run a case: the nodes (the result is named "y"), the inputs fed, the
    opset, and a note for the table."""

    nodes: list[Any]
    feeds: Arrays
    opset: int = 18
    domains: tuple[str, ...] = ()
    initializers: list[Any] = field(default_factory=list)
    out_dtype: np.dtype | None = None  # None: the first input's
    note: str | None = None


def _node(op: str, inputs: list[str], output: str = "y", **attrs: Any) -> Any:
    from onnx import helper

    return helper.make_node(op, inputs, [output], **attrs)


def _ints(name: str, values: list[int]) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(np.array(values, np.int64), name)


def _same(onnx_op: str, names: tuple[str, ...]) -> Callable[[Request, Arrays], list[Graph]]:
    """An elementwise op of the same name on the case's inputs."""
    return lambda req, x: [Graph([_node(onnx_op, list(names))], {k: x[k] for k in names})]


def _reduce(onnx_op: str) -> Callable[[Request, Arrays], list[Graph]]:
    """A reduction over axis 1 of [B, R, I] (opset 18: axes as an input)."""
    return lambda req, x: [
        Graph(
            [_node(onnx_op, ["x", "axes"], keepdims=0)],
            {"x": x["x"]},
            initializers=[_ints("axes", [1])],
        )
    ]


def _argmax(req: Request, x: Arrays) -> list[Graph]:
    node = _node("ArgMax", ["x"], axis=1, keepdims=0)
    return [Graph([node], {"x": x["x"]}, out_dtype=np.dtype(np.int64))]


def _softmax(onnx_op: str) -> Callable[[Request, Arrays], list[Graph]]:
    return lambda req, x: [Graph([_node(onnx_op, ["x"], axis=1)], {"x": x["x"]})]


def _gelu(req: Request, x: Arrays) -> list[Graph]:
    tanh = bool(req["attrs"].get("approximate", 0))
    feeds = {"x": x["x"]}
    contrib = "FastGelu" if tanh else "Gelu"
    return [
        Graph(
            [_node("Gelu", ["x"], approximate="tanh" if tanh else "none")],
            feeds,
            opset=20,
            note="Gelu (opset 20)",
        ),
        Graph(
            [_node(contrib, ["x"], domain="com.microsoft")],
            feeds,
            domains=("com.microsoft",),
            note=f"com.microsoft {contrib}",
        ),
    ]


def _silu(req: Request, x: Arrays) -> list[Graph]:
    feeds = {"x": x["x"]}
    return [
        Graph([_node("Swish", ["x"])], feeds, opset=24, note="Swish (opset 24)"),
        Graph(
            [_node("Sigmoid", ["x"], "s"), _node("Mul", ["x", "s"])],
            feeds,
            note="Sigmoid + Mul (no Swish in this ORT)",
        ),
    ]


def _layer_norm(req: Request, x: Arrays) -> list[Graph]:
    eps = float(req["attrs"].get("eps", 1e-5))
    node = _node("LayerNormalization", ["x", "weight", "bias"], axis=-1, epsilon=eps)
    return [Graph([node], {k: x[k] for k in ("x", "weight", "bias")}, opset=17)]


def _rms_norm(req: Request, x: Arrays) -> list[Graph]:
    eps = float(req["attrs"].get("eps", 1e-5))
    feeds = {"x": x["x"], "weight": x["weight"]}
    return [
        Graph(
            [_node("RMSNormalization", ["x", "weight"], axis=-1, epsilon=eps)],
            feeds,
            opset=23,
            note="RMSNormalization (opset 23)",
        ),
        Graph(
            [_node("SimplifiedLayerNormalization", ["x", "weight"], axis=-1, epsilon=eps)],
            feeds,
            opset=17,
            note="SimplifiedLayerNormalization",
        ),
    ]


def _permute(req: Request, x: Arrays) -> list[Graph]:
    perm = [int(req["attrs"][f"p{k}"]) for k in range(4)]
    return [Graph([_node("Transpose", ["x"], perm=perm)], {"x": x["x"]})]


def _matmul(req: Request, x: Arrays) -> list[Graph]:
    return [Graph([_node("MatMul", ["a", "b"])], {"a": x["a"][0], "b": x["b"][0]})]


def _gemm(req: Request, x: Arrays) -> list[Graph]:
    alpha, beta = float(req["attrs"].get("alpha", 1)), float(req["attrs"].get("beta", 0))
    names = ["a", "b", "bias"] if beta else ["a", "b"]
    node = _node("Gemm", names, alpha=alpha, beta=beta)
    return [Graph([node], {k: x[k] for k in names})]


def _conv2d(req: Request, x: Arrays) -> list[Graph]:
    a = req["attrs"]
    node = _node(
        "Conv",
        ["x", "w", "bias"],
        kernel_shape=list(x["w"].shape[2:]),
        pads=[int(a.get("pad_h", 0)), int(a.get("pad_w", 0))] * 2,
        strides=[int(a.get("stride_h", 1)), int(a.get("stride_w", 1))],
        dilations=[int(a.get("dil_h", 1)), int(a.get("dil_w", 1))],
        group=int(a.get("groups", 1)),
    )
    nhwc = req["layouts"].get("x") == "nhwc"
    note = "Conv on the NCHW equivalent (ONNX's Conv is NCHW only)" if nhwc else None
    return [Graph([node], {k: x[k] for k in ("x", "w", "bias")}, note=note)]


def _attention(req: Request, x: Arrays) -> list[Graph]:
    from onnx import numpy_helper

    scale = float(req["attrs"].get("scale", 1.0))
    causal = int(req["attrs"].get("causal", 0))
    feeds = {k: x[k] for k in ("q", "k", "v")}
    standard = Graph(
        [_node("Attention", ["q", "k", "v"], scale=scale, is_causal=causal)],
        feeds,
        opset=23,
        note="Attention (opset 23)",
    )
    if causal:
        return [standard]
    composed = Graph(
        [
            _node("Transpose", ["k"], "kt", perm=[0, 1, 3, 2]),
            _node("MatMul", ["q", "kt"], "s"),
            _node("Mul", ["s", "scale"], "ss"),
            _node("Softmax", ["ss"], "p", axis=-1),
            _node("MatMul", ["p", "v"]),
        ],
        feeds,
        initializers=[numpy_helper.from_array(np.array(scale, x["q"].dtype), "scale")],
        note="MatMul + Softmax + MatMul (no Attention op in this ORT)",
    )
    return [standard, composed]


BUILDERS: dict[str, Callable[[Request, Arrays], list[Graph]]] = {
    "add": _same("Add", ("a", "b")),
    "mul": _same("Mul", ("a", "b")),
    "maximum": _same("Max", ("a", "b")),
    "relu": _same("Relu", ("x",)),
    "exp": _same("Exp", ("x",)),
    "sigmoid": _same("Sigmoid", ("x",)),
    "tanh": _same("Tanh", ("x",)),
    "silu": _silu,
    "gelu": _gelu,
    "sum": _reduce("ReduceSum"),
    "mean": _reduce("ReduceMean"),
    "max": _reduce("ReduceMax"),
    "argmax": _argmax,
    "softmax": _softmax("Softmax"),
    "log_softmax": _softmax("LogSoftmax"),
    "layer_norm": _layer_norm,
    "rms_norm": _rms_norm,
    "permute": _permute,
    "matmul": _matmul,
    "gemm": _gemm,
    "conv2d": _conv2d,
    "attention": _attention,
}


def threads() -> int:
    """One intra-op thread per core this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _session(g: Graph) -> Any:
    import onnxruntime as ort
    from onnx import helper

    def info(name: str, dtype: np.dtype, shape: Any) -> Any:
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dtype), shape)

    first = next(iter(g.feeds.values()))
    graph = helper.make_graph(
        g.nodes,
        "bench",
        [info(k, v.dtype, v.shape) for k, v in g.feeds.items()],
        [info("y", g.out_dtype or first.dtype, None)],
        initializer=g.initializers,
    )
    opsets = [helper.make_opsetid("", g.opset), *(helper.make_opsetid(d, 1) for d in g.domains)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads()
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3  # no warnings on stderr for the alternatives that ORT lacks
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _bound(sess: Any, feeds: Arrays) -> Callable[[], object]:
    """A call with the inputs and a preallocated output bound once."""
    import onnxruntime as ort

    y = np.empty_like(sess.run(None, feeds)[0])
    io = sess.io_binding()
    for k, v in feeds.items():
        io.bind_cpu_input(k, v)
    out = ort.OrtValue.ortvalue_from_numpy(y)
    io.bind_ortvalue_output("y", out)

    def run() -> None:
        sess.run_with_iobinding(io)
        _ = (y, out)  # keep the output's memory alive with the binding

    return run


def prepare(req: Request) -> Call | Outcome:
    builder = BUILDERS.get(req["op"])
    if builder is None:
        return skipped("no such ONNX op")
    errors = []
    for g in builder(req, host_inputs(req)):
        try:
            sess = _session(g)
        except Exception as exc:  # this ORT lacks the op or opset: try the next way
            errors.append(first_line(exc))
            continue
        return Call(_bound(sess, g.feeds), g.note)
    return skipped("failed: " + "; ".join(errors))


def answer(requests: list[Request], timing: Timing) -> Answer:
    try:
        import onnx  # noqa: F401
        import onnxruntime as ort
    except ImportError as exc:
        return unavailable(exc)
    return {
        "available": True,
        "version": f"{ort.__version__} (CPU, {threads()} threads, IOBinding)",
        "outcomes": outcomes(requests, prepare, timing),
    }
