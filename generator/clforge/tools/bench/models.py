"""The bench's model cases (issue 35 point 6): a GPT-2-style pre-LN transformer block and a
two-layer MLP, each written once per way of running it: as clforge calls (the same code builds a
graph with ``g.ops`` and runs eagerly with ``clforge.ops``: both take the same arguments), as an
ONNX model built with ``onnx.helper`` (what ONNX Runtime runs, and what
:func:`clforge.graph.from_onnx` imports into the same graph), and in NumPy.

The block: ``layer_norm`` → q, k, v (three ``gemm`` + bias: a graph cannot slice a fused qkv
output without a copy yet) → heads (reshape, permute) → causal ``attention`` → merge heads →
``gemm`` + bias → residual ``add`` → ``layer_norm`` → ``gemm`` + bias → ``gelu`` (GPT-2's tanh
form) → ``gemm`` + bias → residual ``add``. The MLP: ``gemm`` + bias → ``gelu`` → ``gemm`` +
bias. Weights are drawn once from a seed, as GPT-2's are initialized (normal, std 0.02)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

Weights = dict[str, np.ndarray]
EPS = 1e-5


@dataclass(frozen=True)
class ModelCase:
    kind: str  # "block" or "mlp"
    s: int  # sequence length (the graph's symbolic dim S)
    d: int = 768
    heads: int = 12
    hidden: int = 3072  # the MLP's inner width (4 D)

    @property
    def title(self) -> str:
        if self.kind == "block":
            return f"block S={self.s} D={self.d} H={self.heads}"
        return f"mlp S={self.s} {self.d}-{self.hidden}-{self.d}"

    @property
    def head_dim(self) -> int:
        return self.d // self.heads

    def at(self, quick: bool) -> ModelCase:
        """The case at --quick's sizes (tiny: a run takes seconds; S an eighth)."""
        small = dataclasses.replace(self, s=self.s // 8, d=64, heads=4, hidden=256)
        return small if quick else self


MODEL_CASES: tuple[ModelCase, ...] = tuple(
    ModelCase(kind, s) for kind in ("block", "mlp") for s in (32, 256)
)
MODEL_KINDS = ("block", "mlp")


def selected(quick: bool, kinds: Any = None) -> list[ModelCase]:
    """The model cases of a run (of `kinds` only, if given)."""
    return [c.at(quick) for c in MODEL_CASES if kinds is None or c.kind in kinds]


# --- weights and input ------------------------------------------------------------------------


def weight_shapes(case: ModelCase) -> dict[str, tuple[int, ...]]:
    """Every weight's shape, in the order the model first reads them."""
    d, f = case.d, case.hidden
    mlp = {"w1": (d, f), "b1": (f,), "w2": (f, d), "b2": (d,)}
    if case.kind == "mlp":
        return mlp
    out: dict[str, tuple[int, ...]] = {"ln1_g": (d,), "ln1_b": (d,)}
    for p in "qkvo":
        out |= {f"w{p}": (d, d), f"b{p}": (d,)}
    return {**out, "ln2_g": (d,), "ln2_b": (d,), **mlp}


def weights(case: ModelCase, seed: int = 0) -> Weights:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in weight_shapes(case).items():
        if name.endswith("_g"):
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            w = 0.02 * rng.standard_normal(shape)
        out[name] = w.astype(np.float32)
    return out


def model_input(case: ModelCase, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((case.s, case.d)).astype(np.float32)


# --- clforge: one forward for graphs and eager calls -----------------------------------------


@dataclass(frozen=True)
class Calls:
    """What the forward needs of a way to run clforge's ops: the ops (``g.ops`` or
    ``clforge.ops``), a weight by name, and a view with another shape (dims: ints or "S")."""

    ops: Any
    weight: Callable[[str], Any]
    reshape: Callable[[Any, tuple[int | str, ...]], Any]


def forward(case: ModelCase, c: Calls, x: Any) -> Any:
    """The model as clforge calls, on a [S, D] input."""
    ops = c.ops

    def linear(t: Any, w: str, b: str) -> Any:
        return ops.gemm(t, c.weight(w), c.weight(b), beta=1.0)

    def mlp(t: Any) -> Any:
        return linear(ops.gelu(linear(t, "w1", "b1"), approximate=1), "w2", "b2")

    if case.kind == "mlp":
        return mlp(x)
    h, hd = case.heads, case.head_dim

    def heads(t: Any) -> Any:  # [S, D] -> [1, H, S, hd]
        return ops.permute(c.reshape(t, (1, "S", h, hd)), axes=(0, 2, 1, 3))

    a = ops.layer_norm(x, c.weight("ln1_g"), c.weight("ln1_b"), eps=EPS)
    q, k, v = (heads(linear(a, f"w{p}", f"b{p}")) for p in "qkv")
    o = c.reshape(
        ops.permute(ops.attention(q, k, v, causal=True), axes=(0, 2, 1, 3)), ("S", case.d)
    )
    x1 = ops.add(x, linear(o, "wo", "bo"))
    return ops.add(x1, mlp(ops.layer_norm(x1, c.weight("ln2_g"), c.weight("ln2_b"), eps=EPS)))


def build_graph(case: ModelCase, w: Weights) -> Any:
    """The model as a clforge graph (S symbolic), not yet compiled."""
    from clforge.call.compiled import TensorType
    from clforge.graph import Graph

    g = Graph(case.kind)
    x = g.input("x", TensorType("f32", ("S", case.d)))
    g.output(forward(case, Calls(g.ops, lambda n: g.constant(w[n], n), g.reshape), x))
    return g


def eager_calls(case: ModelCase, w_dev: dict[str, Any]) -> Callable[[Any], Any]:
    """The model as eager calls on device arrays (weights on the device already)."""
    from clforge import ops

    def run(x: Any) -> Any:
        s = x.shape[0]

        def reshape(t: Any, shape: tuple[int | str, ...]) -> Any:
            return t.reshape(tuple(s if n == "S" else n for n in shape))

        return forward(case, Calls(ops, w_dev.__getitem__, reshape), x)

    return run


# --- ONNX ---------------------------------------------------------------------------------------


def build_onnx(case: ModelCase, w: Weights) -> Any:
    """The model as an ONNX model (opset 23: LayerNormalization, Gemm, Gelu, Attention), its
    input [S, D] with S symbolic, the weights as initializers."""
    from onnx import TensorProto, helper, numpy_helper

    nodes: list[Any] = []
    inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    count = [0]

    def node(op: str, inputs: list[str], **attrs: Any) -> str:
        count[0] += 1
        out = f"t{count[0]}"
        nodes.append(helper.make_node(op, inputs, [out], name=f"{op.lower()}_{count[0]}", **attrs))
        return out

    def shape(name: str, dims: list[int]) -> str:
        inits.append(numpy_helper.from_array(np.array(dims, np.int64), name))
        return name

    def linear(t: str, wn: str, bn: str) -> str:
        return node("Gemm", [t, wn, bn])

    def mlp(t: str) -> str:
        return linear(node("Gelu", [linear(t, "w1", "b1")], approximate="tanh"), "w2", "b2")

    if case.kind == "mlp":
        mlp("x")
    else:
        to_heads = shape("heads_shape", [1, -1, case.heads, case.head_dim])
        to_rows = shape("rows_shape", [-1, case.d])

        def heads(t: str) -> str:
            return node("Transpose", [node("Reshape", [t, to_heads])], perm=[0, 2, 1, 3])

        a = node("LayerNormalization", ["x", "ln1_g", "ln1_b"], axis=-1, epsilon=EPS)
        q, k, v = (heads(linear(a, f"w{p}", f"b{p}")) for p in "qkv")
        o = node("Attention", [q, k, v], is_causal=1)
        o = node("Reshape", [node("Transpose", [o], perm=[0, 2, 1, 3]), to_rows])
        x1 = node("Add", ["x", linear(o, "wo", "bo")])
        h = node("LayerNormalization", [x1, "ln2_g", "ln2_b"], axis=-1, epsilon=EPS)
        node("Add", [x1, mlp(h)])
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes,
        case.kind,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["S", case.d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["S", case.d])],
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", 23)]
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    return m


# --- NumPy --------------------------------------------------------------------------------------


def numpy_forward(case: ModelCase, w: Weights) -> Callable[[np.ndarray], np.ndarray]:
    """The model as a NumPy user writes it (f32 throughout, BLAS for the products)."""

    def layer_norm(t: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
        mu = t.mean(-1, keepdims=True)
        var = ((t - mu) ** 2).mean(-1, keepdims=True)
        return (t - mu) / np.sqrt(var + np.float32(EPS)) * g + b

    def gelu(t: np.ndarray) -> np.ndarray:
        c = np.float32(math.sqrt(2.0 / math.pi))
        return 0.5 * t * (1.0 + np.tanh(c * (t + np.float32(0.044715) * t**3)))

    def mlp(t: np.ndarray) -> np.ndarray:
        return gelu(t @ w["w1"] + w["b1"]) @ w["w2"] + w["b2"]

    if case.kind == "mlp":
        return mlp
    h, hd = case.heads, case.head_dim

    def run(x: np.ndarray) -> np.ndarray:
        s = x.shape[0]
        a = layer_norm(x, w["ln1_g"], w["ln1_b"])
        q, k, v = (
            (a @ w[f"w{p}"] + w[f"b{p}"]).reshape(s, h, hd).transpose(1, 0, 2) for p in "qkv"
        )
        scores = q @ k.transpose(0, 2, 1) * np.float32(1.0 / math.sqrt(hd))
        scores = np.where(np.tri(s, dtype=bool), scores, np.float32(-np.inf))
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        o = (scores / scores.sum(-1, keepdims=True)) @ v
        x1 = x + o.transpose(1, 0, 2).reshape(s, case.d) @ w["wo"] + w["bo"]
        return x1 + mlp(layer_norm(x1, w["ln2_g"], w["ln2_b"]))

    return run


__all__ = [
    "MODEL_CASES",
    "MODEL_KINDS",
    "Calls",
    "ModelCase",
    "build_graph",
    "build_onnx",
    "eager_calls",
    "forward",
    "model_input",
    "numpy_forward",
    "selected",
    "weights",
]
