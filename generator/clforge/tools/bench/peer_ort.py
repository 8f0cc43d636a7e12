"""The ONNX Runtime peer (run in its own process): for each case, the ONNX graph its users would
run, built in memory (onnx.helper) on the case's natural shapes and axis
(:mod:`.natural`: a 4096 x 1024 softmax is Softmax of a (4096, 1024) tensor with axis -1), run
by ORT's CPU kernels with one intra-op thread per core and every graph optimization on; inputs
and a preallocated output are bound once (IOBinding), so that a timed call is
`run_with_iobinding` alone.

Where ORT offers several ways to run an op, every way this ORT can build is timed and the
fastest counts (the peer at its best); the outcome's note names the ONNX op(s) of the way that
counted, and of the others: Gelu (opset 20) or the com.microsoft Gelu/FastGelu; Swish (opset 24)
or Sigmoid + Mul; RMSNormalization (opset 23) or SimplifiedLayerNormalization; attention as the
Attention op (opset 23), as the com.microsoft MultiHeadAttention (on the (B, S, H * D) tensors it
takes) and as the MatMul + Softmax + MatMul graph an exporter writes. (The com.microsoft
Attention op is left out: it computes the Q, K and V projections too, a different and larger
computation.)"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clforge.core.dtypes import DTYPES
from clforge.tools.bench.protocol import (
    Outcome,
    Request,
    first_line,
    host_inputs,
    skipped,
    unavailable,
)
from clforge.tools.bench.timing import Call, Served, outcome

Arrays = dict[str, np.ndarray]
MS = "com.microsoft"


@dataclass(frozen=True)
class Feed:
    """An input of a peer graph: the request's input `source` (its canonical array), transposed
    by `perm` where given, then reshaped to `shape`."""

    source: str
    shape: tuple[int, ...]
    dtype: str  # NumPy's name: float32
    perm: tuple[int, ...] | None = None

    def array(self, x: Mapping[str, np.ndarray]) -> np.ndarray:
        a = x[self.source]
        if self.perm is not None:
            a = np.ascontiguousarray(a.transpose(self.perm))
        return a.reshape(self.shape)


@dataclass(frozen=True)
class Graph:
    """One way to run a case: the nodes (the result is named "y"), its inputs, the opset, and
    the note that names the ONNX op(s) it runs. `heads`: the output is (B, SQ, H * DV) with
    the heads in its last axis (MultiHeadAttention's), split back into (B, H, SQ, DV) by
    :meth:`canonical`."""

    nodes: list[Any]
    inputs: dict[str, Feed]
    note: str
    opset: int = 18
    domains: tuple[str, ...] = ()
    initializers: list[Any] = field(default_factory=list)
    out_dtype: str | None = None  # None: the first input's
    heads: int | None = None

    def feeds(self, x: Mapping[str, np.ndarray]) -> Arrays:
        return {name: feed.array(x) for name, feed in self.inputs.items()}

    def canonical(self, y: np.ndarray) -> np.ndarray:
        """The graph's output in the layout of the op's canonical output."""
        if self.heads is None:
            return y
        b, s, hd = y.shape
        return y.reshape(b, s, self.heads, hd // self.heads).transpose(0, 2, 1, 3)


Builder = Callable[[Request], list[Graph]]


def _node(op: str, inputs: list[str], output: str = "y", **attrs: Any) -> Any:
    from onnx import helper

    return helper.make_node(op, inputs, [output], **attrs)


def _ints(name: str, values: list[int]) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(np.array(values, np.int64), name)


def _natural(req: Request, *names: str) -> dict[str, Feed]:
    """The request's inputs `names` in their natural shapes."""
    shapes = req["natural"]["shapes"]
    dtype = {k: np.dtype(DTYPES[req["inputs"][k]["dtype"]].np_dtype).name for k in names}
    return {k: Feed(k, tuple(shapes[k]), dtype[k]) for k in names}


def _axis(req: Request) -> int:
    axis = req["natural"]["axis"]
    if axis is None:
        raise ValueError(f"{req['op']}: the case names no axis")
    return axis


def _same(onnx_op: str, names: tuple[str, ...]) -> Builder:
    """An elementwise op of the same name on the case's inputs."""
    return lambda req: [Graph([_node(onnx_op, list(names))], _natural(req, *names), onnx_op)]


def _reduce(onnx_op: str) -> Builder:
    """A reduction over the case's axis (opset 18: axes as an input)."""

    def build(req: Request) -> list[Graph]:
        axis = _axis(req)
        node = _node(onnx_op, ["x", "axes"], keepdims=0)
        feeds = _natural(req, "x")
        return [
            Graph([node], feeds, f"{onnx_op} (axes [{axis}])", initializers=[_ints("axes", [axis])])
        ]

    return build


def _argmax(req: Request) -> list[Graph]:
    axis = _axis(req)
    node = _node("ArgMax", ["x"], axis=axis, keepdims=0)
    return [Graph([node], _natural(req, "x"), f"ArgMax (axis {axis})", out_dtype="int64")]


def _softmax(onnx_op: str) -> Builder:
    def build(req: Request) -> list[Graph]:
        axis = _axis(req)
        node = _node(onnx_op, ["x"], axis=axis)
        return [Graph([node], _natural(req, "x"), f"{onnx_op} (axis {axis})")]

    return build


def _gelu(req: Request) -> list[Graph]:
    tanh = bool(req["attrs"].get("approximate", 0))
    feeds = _natural(req, "x")
    contrib = "FastGelu" if tanh else "Gelu"
    form = "tanh" if tanh else "none"
    return [
        Graph([_node("Gelu", ["x"], approximate=form)], feeds, "Gelu (opset 20)", opset=20),
        Graph([_node(contrib, ["x"], domain=MS)], feeds, f"{MS} {contrib}", domains=(MS,)),
    ]


def _silu(req: Request) -> list[Graph]:
    feeds = _natural(req, "x")
    return [
        Graph([_node("Swish", ["x"])], feeds, "Swish (opset 24)", opset=24),
        Graph([_node("Sigmoid", ["x"], "s"), _node("Mul", ["x", "s"])], feeds, "Sigmoid + Mul"),
    ]


def _layer_norm(req: Request) -> list[Graph]:
    eps, axis = float(req["attrs"].get("eps", 1e-5)), _axis(req)
    node = _node("LayerNormalization", ["x", "weight", "bias"], axis=axis, epsilon=eps)
    feeds = _natural(req, "x", "weight", "bias")
    return [Graph([node], feeds, f"LayerNormalization (axis {axis})", opset=17)]


def _rms_norm(req: Request) -> list[Graph]:
    eps, axis = float(req["attrs"].get("eps", 1e-5)), _axis(req)
    feeds = _natural(req, "x", "weight")
    standard = _node("RMSNormalization", ["x", "weight"], axis=axis, epsilon=eps)
    contrib = _node("SimplifiedLayerNormalization", ["x", "weight"], axis=axis, epsilon=eps)
    return [
        Graph([standard], feeds, f"RMSNormalization (opset 23, axis {axis})", opset=23),
        Graph([contrib], feeds, f"SimplifiedLayerNormalization (axis {axis})", opset=17),
    ]


def _permute(req: Request) -> list[Graph]:
    perm = req["natural"]["perm"]
    if perm is None:
        perm = [int(req["attrs"][f"p{k}"]) for k in range(4)]
    node = _node("Transpose", ["x"], perm=perm)
    return [Graph([node], _natural(req, "x"), f"Transpose (perm {perm})")]


def _matmul(req: Request) -> list[Graph]:
    return [Graph([_node("MatMul", ["a", "b"])], _natural(req, "a", "b"), "MatMul")]


def _gemm(req: Request) -> list[Graph]:
    alpha, beta = float(req["attrs"].get("alpha", 1)), float(req["attrs"].get("beta", 0))
    names = ("a", "b", "bias") if beta else ("a", "b")
    node = _node("Gemm", list(names), alpha=alpha, beta=beta)
    return [Graph([node], _natural(req, *names), "Gemm")]


def _conv2d(req: Request) -> list[Graph]:
    a = req["attrs"]
    w = req["natural"]["shapes"]["w"]
    node = _node(
        "Conv",
        ["x", "w", "bias"],
        kernel_shape=list(w[2:]),
        pads=[int(a.get("pad_h", 0)), int(a.get("pad_w", 0))] * 2,
        strides=[int(a.get("stride_h", 1)), int(a.get("stride_w", 1))],
        dilations=[int(a.get("dil_h", 1)), int(a.get("dil_w", 1))],
        group=int(a.get("groups", 1)),
    )
    nhwc = req["layouts"].get("x") == "nhwc"
    note = "Conv (NCHW" + (": the NCHW equivalent, ONNX's Conv is NCHW only)" if nhwc else ")")
    return [Graph([node], _natural(req, "x", "w", "bias"), note)]


def _attention(req: Request) -> list[Graph]:
    scale = float(req["attrs"].get("scale", 1.0))
    causal = int(req["attrs"].get("causal", 0))
    feeds = _natural(req, "q", "k", "v")
    standard = Graph(
        [_node("Attention", ["q", "k", "v"], scale=scale, is_causal=causal)],
        feeds,
        "Attention (opset 23)",
        opset=23,
    )
    # MultiHeadAttention takes (B, S, H * D): the heads moved next to the features
    h, grouped = feeds["q"].shape[1], feeds["q"].shape[1] != feeds["k"].shape[1]
    bsh = {
        k: Feed(k, (f.shape[0], f.shape[2], f.shape[1] * f.shape[3]), f.dtype, (0, 2, 1, 3))
        for k, f in feeds.items()
    }
    contrib = Graph(
        [
            _node(
                "MultiHeadAttention",
                ["q", "k", "v"],
                domain=MS,
                num_heads=h,
                scale=scale,
                unidirectional=causal,
            )
        ],
        bsh,
        f"{MS} MultiHeadAttention",
        domains=(MS,),
        heads=h,
    )
    sq, sk = feeds["q"].shape[2], feeds["k"].shape[2]
    composed = _composed_attention(feeds, scale, causal, sq, sk)
    # grouped-query attention (H != HK) has no MultiHeadAttention form
    return [standard, *([] if grouped else [contrib, composed])]


def _composed_attention(
    feeds: dict[str, Feed], scale: float, causal: int, sq: int, sk: int
) -> Graph:
    """The graph an exporter writes for scaled dot-product attention: MatMul, Mul by the scale,
    (causal: Add of a constant mask, -inf above the diagonal), Softmax, MatMul."""
    from onnx import numpy_helper

    dtype = np.dtype(feeds["q"].dtype)
    consts = [numpy_helper.from_array(np.array(scale, dtype), "scale")]
    nodes = [
        _node("Transpose", ["k"], "kt", perm=[0, 1, 3, 2]),
        _node("MatMul", ["q", "kt"], "s"),
        _node("Mul", ["s", "scale"], "ss"),
    ]
    if causal:
        mask = np.where(np.tri(sq, sk, dtype=bool), 0.0, -np.inf).astype(dtype)
        consts.append(numpy_helper.from_array(mask, "mask"))
        nodes.append(_node("Add", ["ss", "mask"], "sm"))
    nodes += [
        _node("Softmax", ["sm" if causal else "ss"], "p", axis=-1),
        _node("MatMul", ["p", "v"]),
    ]
    note = "MatMul + Softmax + MatMul" + (" (causal mask added)" if causal else "")
    return Graph(nodes, feeds, note, initializers=consts)


BUILDERS: dict[str, Builder] = {
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


def model(g: Graph) -> Any:
    """The graph as an ONNX model, its inputs typed and shaped as fed."""
    from onnx import helper

    def info(name: str, dtype: str, shape: Any) -> Any:
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape
        )

    first = next(iter(g.inputs.values()))
    graph = helper.make_graph(
        g.nodes,
        "bench",
        [info(k, f.dtype, f.shape) for k, f in g.inputs.items()],
        [info("y", g.out_dtype or first.dtype, None)],
        initializer=g.initializers,
    )
    opsets = [helper.make_opsetid("", g.opset), *(helper.make_opsetid(d, 1) for d in g.domains)]
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    return m


def session(g: Graph) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads()
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3  # no warnings on stderr for the ways that this ORT lacks
    data = model(g).SerializeToString()
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


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


def prepare(req: Request) -> list[Call] | Outcome:
    """A call per way of running the case that this ORT can build."""
    builder = BUILDERS.get(req["op"])
    if builder is None:
        return skipped("no such ONNX op")
    x = host_inputs(req)
    calls, errors = [], []
    for g in builder(req):
        try:
            sess = session(g)
        except Exception as exc:  # this ORT lacks the op or opset: the other ways go on
            errors.append(f"{g.note}: {first_line(exc)}")
            continue
        calls.append(Call(_bound(sess, g.feeds(x)), g.note))
    return calls or skipped("failed: " + "; ".join(errors))


def serve() -> Served:
    """Whether ONNX Runtime is here, and how this process times a request."""
    try:
        import onnx  # noqa: F401
        import onnxruntime as ort
    except ImportError as exc:
        return unavailable(exc), None
    version = f"{ort.__version__} (CPU, {threads()} threads, IOBinding)"
    return {"available": True, "version": version}, lambda req, timing: outcome(
        req, prepare, timing
    )
