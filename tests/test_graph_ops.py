"""Every op that graphs support, as a one-node graph with symbolic dims, against the eager call
at two sizes (one of them with 1s): capture, shapes and the compiled model agree with
`clforge.ops` for each calling convention graphs take."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from clforge import Graph, TensorType, load, ops
from clforge.errors import GraphError
from clforge.graph import supported_ops

rng = np.random.default_rng(7)
NP = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i32": np.int32}


def arr(dtype: str, shape: tuple[int, ...], positive: bool = False) -> np.ndarray:
    if dtype == "i32":
        return rng.integers(-5, 6, shape).astype(np.int32)
    a = rng.standard_normal(shape)
    return (np.abs(a) + 0.5 if positive else a).astype(NP[dtype])


# op -> (the inputs' dtypes and dims, the keyword arguments of the call)
Case = tuple[list[tuple[str, tuple[Any, ...]]], dict[str, Any]]
UNARY = ["abs", "exp", "gelu", "leaky_relu", "neg", "relu", "sigmoid", "silu", "tanh"]
POSITIVE = ["log", "rsqrt", "sqrt"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum"]
CASES: dict[str, Case] = {
    **{op: ([("f32", ("S", "D"))], {}) for op in UNARY + POSITIVE},
    **{op: ([("f32", ("S", "D")), ("f32", ("D",))], {}) for op in BINARY},
    "pow": ([("f32", ("S", "D")), ("f32", ("S", 1))], {}),
    "cast_f16": ([("f32", ("S", "D"))], {}),
    "cast_f32": ([("f64", ("S", "D"))], {}),
    "cast_f64": ([("i32", ("S", "D"))], {}),
    "cast_i32": ([("f32", ("S", "D"))], {}),
    "clip": ([("f32", ("S", "D")), ("f32", ()), ("f32", ("D",))], {}),
    "where": ([("i32", ("S", "D")), ("f32", ("S", "D")), ("f32", ("D",))], {}),
    "softmax": ([("f32", ("B", "S", "D"))], {"axis": 1}),
    "log_softmax": ([("f32", ("S", "D"))], {"axis": -1}),
    "sum": ([("f32", ("B", "S", "D"))], {"axis": (1, 2)}),
    "mean": ([("f32", ("S", "D"))], {"axis": 0, "keepdims": True}),
    "max": ([("f32", ("B", "S", "D"))], {"axis": -1}),
    "min": ([("f32", ("S", "D"))], {}),
    "argmax": ([("f32", ("S", "D"))], {"axis": 1}),
    "layer_norm": ([("f32", ("S", "D")), ("f32", ("D",)), ("f32", ("D",))], {"eps": 1e-3}),
    "rms_norm": ([("f32", ("B", "S", "D")), ("f32", ("S", "D"))], {"axes": 2}),
    "matmul": ([("f32", ("B", "S", "D")), ("f32", ("D", "N"))], {}),
    "gemm": (
        [("f32", ("D", "S")), ("f32", ("N", "D")), ("f32", ("N",))],
        {"trans_a": True, "trans_b": True, "alpha": 0.5, "beta": 2.0},
    ),
    "permute": ([("f32", ("B", "S", "D"))], {"axes": (2, 0, 1)}),
    "attention": ([("f32", ("B", "S", "D"))] * 3, {"causal": True}),
    "conv2d": (
        [("f32", ("B", 3, 7, 9)), ("f32", ("N", 3, 3, 2)), ("f32", ("N",))],
        {"stride": 2, "padding": (1, 0)},
    ),
    "max_pool2d": ([("f32", ("B", "S", 7, 9))], {"kernel_size": 3, "stride": 2, "padding": 1}),
    "avg_pool2d": ([("f32", ("B", "S", 6, 5))], {"kernel_size": 2, "ceil_mode": True}),
    "batch_norm": ([("f32", ("B", "S", "D"))] + [("f32", ("S",))] * 4, {"eps": 1e-3}),
}
# ops whose inputs must be positive (a variance among them)
POSITIVE_INPUTS = {*POSITIVE, "batch_norm"}
SIZES = [{"B": 2, "S": 3, "D": 5, "N": 7}, {"B": 1, "S": 1, "D": 1, "N": 1}]


def test_every_supported_op_has_a_case():
    assert sorted(CASES) == supported_ops()


@pytest.mark.parametrize("op", sorted(CASES))
def test_op_in_a_graph_matches_eager(op):
    specs, kwargs = CASES[op]
    g = Graph(op)
    values = [g.input(f"in{i}", TensorType(dt, dims)) for i, (dt, dims) in enumerate(specs)]
    out = getattr(g.ops, op)(*values, **kwargs)
    g.output(out)
    model = g.compile()
    for sizes in SIZES:
        args = [
            arr(
                dt,
                tuple(sizes.get(d, d) if isinstance(d, str) else d for d in dims),
                positive=op in POSITIVE_INPUTS,
            )
            for dt, dims in specs
        ]
        want = getattr(ops, op)(*args, **kwargs)
        got = model(*args)
        assert got.shape == want.shape, (op, sizes)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), rtol=1e-5, atol=1e-5
        )


def test_attention_with_heads_and_a_symbolic_head_size():
    """4-d q, k, v with grouped heads; the head size is symbolic, so the default scale
    1/sqrt(D) is not recorded on the node but computed per specialization."""
    g = Graph("gqa")
    q = g.input("q", TensorType("f32", ("B", 4, "S", "D")))
    k = g.input("k", TensorType("f32", ("B", 2, "T", "D")))
    v = g.input("v", TensorType("f32", ("B", 2, "T", 3)))
    g.output(g.ops.attention(q, k, v, causal=True, enable_gqa=True))
    model = g.compile()
    assert "scale" not in dict(model.plan.ir.nodes[0].attrs)
    for b, s, t, d in ((1, 1, 1, 1), (2, 5, 7, 3), (1, 13, 11, 8)):
        args = [arr("f32", (b, 4, s, d)), arr("f32", (b, 2, t, d)), arr("f32", (b, 2, t, 3))]
        want = ops.attention(*args, causal=True, enable_gqa=True)
        np.testing.assert_allclose(model(*args), want, rtol=1e-5, atol=1e-5)


def attention_ref(q, k, v, mask=None, causal=False):
    """NumPy's attention: scores scaled by 1/sqrt(D), an additive or a boolean (keep) mask
    broadcast, top-left causal; a row with no key left gives zeros."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + mask
    if causal:
        sq, sk = s.shape[-2:]
        s = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, s)
    top = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(top), top, 0))
    tot = e.sum(axis=-1, keepdims=True)
    return np.where(tot > 0, e / np.where(tot > 0, tot, 1), 0) @ v


# (q's dims, k's and v's dims, the mask: dims of a graph input (additive), or a boolean NumPy
# array's shape, the call's options)
MASKS = [
    (("B", 3, "S", 4), ("B", 3, "T", 4), ("S", "T"), {}),  # over batch and heads
    (("B", 3, "S", 4), ("B", 3, "T", 4), ("B", 1, 1, "T"), {}),  # a padding mask
    (("B", 3, "S", 4), ("B", 3, "T", 4), ("B", 3, "S", "T"), {"causal": True}),
    (("B", "S", 5), ("B", "T", 5), ("B", "S", "T"), {}),  # no heads axis
    (("B", "S", 5), ("B", "T", 5), ("T",), {"causal": True}),
    ((2, 3, "S", 4), (2, 3, 7, 4), (2, 1, 1, 7), {}),  # bool: a keep mask
    ((2, "S", 5), (2, 7, 5), (1, 7), {"causal": True}),
]


@pytest.mark.parametrize(("qs", "ks", "mask", "options"), MASKS)
def test_attention_with_a_mask(qs, ks, mask, options, tmp_path):
    """Additive masks (graph values of the call's dtype) and boolean keep masks (NumPy arrays,
    constants of the call's dtype) broadcast over batch, heads and queries as the eager call
    takes them: the compiled model against the eager call and NumPy at odd sizes."""
    g = Graph("masked")
    q = g.input("q", TensorType("f32", qs))
    k = g.input("k", TensorType("f32", ks))
    v = g.input("v", TensorType("f32", ks))
    boolean = all(isinstance(d, int) for d in mask)
    if boolean:
        keep = rng.random(mask) > 0.4
        keep[0] = False  # every key of batch 0 masked out: its rows give zeros
        m = keep
    else:
        m = g.input("m", TensorType("f32", mask))
    g.output(g.ops.attention(q, k, v, mask=m, **options))
    compiled = g.compile()
    assert dict(compiled.plan.ir.nodes[0].attrs).get("bool_mask", 0) == int(boolean)
    compiled.save(tmp_path / "masked.json")  # the mask's kind and a keep mask's constant kept
    model = load(tmp_path / "masked.json")
    for b, s, t in ((1, 1, 1), (2, 5, 7), (3, 13, 11)):
        env = {"B": b, "S": s, "T": t}

        def sized(dims, env=env):
            return tuple(env[d] if isinstance(d, str) else d for d in dims)

        args = {
            "q": arr("f32", sized(qs)),
            "k": arr("f32", sized(ks)),
            "v": arr("f32", sized(ks)),
        }
        if boolean:
            mk = keep
        else:
            mk = np.where(rng.random(sized(mask)) > 0.3, 0.0, -np.inf).astype(np.float32)
            mk[..., 0] = rng.standard_normal(mk.shape[:-1])  # a finite score for every row
            args["m"] = mk
        got = model(**args)
        qkv = [args["q"], args["k"], args["v"]]
        want = ops.attention(*qkv, mask=mk, **options)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        ref = attention_ref(*qkv, mask=mk, **options)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("op", "shape", "kwargs", "match"),
    [
        ("conv2d", ("N", 3, "H", 9), {}, "dim OH is not a product of the graph's dims"),
        ("max_pool2d", ("N", 3, 8, "W"), {"kernel_size": 2}, "dim OW is not a product"),
        ("conv2d", ("N", 3, 8, 9), {"layout": "NHWC"}, "layout='NHWC' is not supported"),
        ("attention", ("B", "S", "D"), {"mask": ("T", "S")}, "does not broadcast to the scores"),
        ("attention", ("B", "S", "D"), {"mask": np.zeros((1, 1))}, "a NumPy array of float64"),
    ],
)
def test_refused_in_graphs_with_a_reason(op, shape, kwargs, match):
    g = Graph("refused")
    x = g.input("x", TensorType("f32", shape))
    if op == "conv2d":
        args = [x, g.input("w", TensorType("f32", (4, 3, 3, 3)))]
    elif op == "attention":
        args = [x, x, x]
        mask = kwargs["mask"]
        kwargs = {
            "mask": mask if isinstance(mask, np.ndarray) else g.input("m", TensorType("f32", mask))
        }
    else:
        args = [x]
    with pytest.raises(GraphError, match=match):
        getattr(g.ops, op)(*args, **kwargs)
