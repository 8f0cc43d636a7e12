"""Sibling gemms merged (graph/siblings.py): gemms of one value by constant weights of one shape
become one batched matmul with the stacked bias in its epilogue (a broadcast input read as
vectors), checked against the same graph unfused and against NumPy at S = 1, primes and 0,
with betas (0 reads no bias), f64, gemms that must stay apart, and save/load."""

from __future__ import annotations

import numpy as np
import pytest

import clforge
from clforge import Graph, TensorType, dispatcher
from clforge.call.views import alignment

rng = np.random.default_rng(38)
K = 40


def _graph(n: int, betas: tuple[float, ...], dtype: str = "f32", np_dtype: type = np.float32):
    g = Graph("siblings")
    x = g.input("x", TensorType(dtype, ("S", K)))
    ws = [rng.standard_normal((K, n)).astype(np_dtype) for _ in betas]
    bs = [rng.standard_normal(n).astype(np_dtype) for _ in betas]
    bs[-1][0] = np.nan if betas[-1] == 0 else bs[-1][0]  # beta 0: the bias is not read
    outs = [
        g.ops.gemm(x, g.constant(w), g.constant(b), beta=beta)
        for w, b, beta in zip(ws, bs, betas, strict=True)
    ]
    g.output(*outs)

    def want(xv: np.ndarray) -> list[np.ndarray]:
        return [
            xv.astype(np.float64) @ w + (beta * b if beta else 0)
            for w, b, beta in zip(ws, bs, betas, strict=True)
        ]

    return g, want


def _launched(model: clforge.graph.Model) -> list[str]:
    return [model.plan.ir.node(g.nodes[0]).op for g in model.plan.fused.groups]


@pytest.mark.parametrize("s", [1, 7, 37, 0])
@pytest.mark.parametrize("n", [96, 100])
def test_sibling_gemms_become_one_matmul(s: int, n: int) -> None:
    g, want = _graph(n, (1.0, 0.5, 0.0))
    model = g.compile()
    # merged where a part's rows keep the device's sub-buffer alignment (its blocks in place)
    aligned = n * 4 % alignment(dispatcher().runtime) == 0
    assert _launched(model) == (["matmul"] if aligned else ["gemm"] * 3)
    x = rng.standard_normal((s, K)).astype(np.float32)
    got, plain = model(x), g.compile(fusion=False)(x)
    for a, b, w in zip(got, plain, want(x), strict=True):
        assert np.asarray(a).shape == (s, n)
        np.testing.assert_allclose(np.asarray(a), w, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    text = model.explain(file=None)
    if aligned:
        assert "merged the sibling gemms node 0, node 1, node 2 (gemm of x by 3 weights" in text
        assert "epilogue of node" in text
    else:
        assert "not merged: the sibling gemms node 0, node 1, node 2: a part's row of 400" in text


def test_f64_siblings_and_save_load(tmp_path) -> None:
    g, want = _graph(32, (1.0, 1.0), "f64", np.float64)
    model = g.compile()
    x = rng.standard_normal((5, K))
    got = model(x)
    for a, w in zip(got, want(x), strict=True):
        np.testing.assert_allclose(np.asarray(a), w, rtol=1e-10, atol=1e-10)
    model.save(tmp_path / "m.json")
    loaded = clforge.load(tmp_path / "m.json")
    assert _launched(loaded) == ["matmul"]
    for a, b in zip(loaded(x), got, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_gemms_that_differ_stay_apart() -> None:
    g = Graph("apart")
    x = g.input("x", TensorType("f32", ("S", K)))
    w = rng.standard_normal((K, 16)).astype(np.float32)
    wide = rng.standard_normal((K, 32)).astype(np.float32)
    outs = (
        g.ops.gemm(x, g.constant(w)),
        g.ops.gemm(x, g.constant(wide)),  # another shape
        g.ops.gemm(x, g.constant(w.T.copy()), trans_b=True),  # a transposed weight
        g.ops.gemm(x, g.constant(w), alpha=2.0),  # alpha
        g.ops.gemm(x, x, trans_b=True),  # not a constant
    )
    g.output(*outs)
    model = g.compile()
    assert sorted(_launched(model)) == ["gemm"] * 5
    xv = rng.standard_normal((6, K)).astype(np.float32)
    wants = (xv @ w, xv @ wide, xv @ w, 2 * (xv @ w), xv @ xv.T)
    for a, b in zip(model(xv), wants, strict=True):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-4)


H, HD = 2, 16  # heads and head size of the split-projection tests (N = H * HD, 128 bytes)


def _split_block(g: Graph, parts: tuple[tuple[int, int], ...] | None = None):
    """x [S, 16] -> one gemm [16, 48] + bias -> its column slices (`parts`, default the three
    q, k, v thirds, taken in the order k, q, v) -> heads -> causal attention."""
    n = H * HD
    x = g.input("x", TensorType("f32", ("S", 16)))
    w = rng.standard_normal((16, 3 * n)).astype(np.float32)
    bias = rng.standard_normal(3 * n).astype(np.float32)
    qkv = g.ops.gemm(x, g.constant(w), g.constant(bias), beta=1.0)
    spans = parts or ((n, 2 * n), (0, n), (2 * n, 3 * n))
    sl = [g.slice(qkv, lo, hi, axis=1) for lo, hi in spans]

    def heads(t):
        return g.ops.permute(g.reshape(t, (1, "S", H, HD)), axes=(0, 2, 1, 3))

    if parts is None:
        k, q, v = sl
        o = g.ops.attention(heads(q), heads(k), heads(v), causal=True)
        g.output(g.reshape(g.ops.permute(o, axes=(0, 2, 1, 3)), ("S", n)))
    else:
        g.output(*sl)
    return w, bias


def _attention_ref(x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    n = H * HD
    if not len(x):
        return np.zeros((0, n))
    qkv = x.astype(np.float64) @ w + bias
    q, k, v = (qkv[:, i * n : (i + 1) * n].reshape(-1, H, HD).transpose(1, 0, 2) for i in range(3))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(HD)
    s = np.where(np.tri(len(x), dtype=bool), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    o = (p / p.sum(-1, keepdims=True)) @ v
    return o.transpose(1, 0, 2).reshape(len(x), n)


@pytest.mark.parametrize("s", [1, 13, 0])
def test_a_split_projection_becomes_blocks_read_in_place(s: int) -> None:
    g = Graph("split")
    w, bias = _split_block(g)
    model = g.compile()
    assert _launched(model) == ["matmul", "attention"]
    x = rng.standard_normal((s, 16)).astype(np.float32)
    got, plain = np.asarray(model(x)), np.asarray(g.compile(fusion=False)(x))
    np.testing.assert_allclose(got, _attention_ref(x, w, bias), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-6)
    text = model.explain(file=None)
    assert "merged node 0's 3 column slices (gemm of x by 3 weights (16, 32))" in text
    assert "q_bshd__k_bshd__v_bshd__o_bshd" in text


@pytest.mark.parametrize(
    ("parts", "merged"),
    [
        (((0, 32), (32, 64), (64, 96)), True),  # thirds, the parts graph outputs
        (((0, 32), (32, 64)), False),  # two of three parts
        (((0, 32), (32, 80), (80, 96)), False),  # unequal parts
        (((0, 32), (16, 48), (32, 64), (64, 96)), False),  # overlapping
    ],
)
def test_only_equal_parts_of_the_whole_are_merged(parts, merged: bool) -> None:
    g = Graph("slices")
    w, bias = _split_block(g, parts)
    model = g.compile()
    assert ("matmul" in _launched(model)) == merged
    x = rng.standard_normal((5, 16)).astype(np.float32)
    want = x.astype(np.float64) @ w + bias
    for got, (lo, hi) in zip(model(x), parts, strict=True):
        np.testing.assert_allclose(np.asarray(got), want[:, lo:hi], rtol=1e-4, atol=1e-5)


def test_an_imported_fused_qkv_and_split_compiles_to_the_same_plan() -> None:
    """GPT-2 as exporters write it: one Gemm to [S, 3D], Split into q, k, v."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from clforge.graph import from_onnx

    n = H * HD
    w = rng.standard_normal((16, 3 * n)).astype(np.float32)
    bias = rng.standard_normal(3 * n).astype(np.float32)
    heads = np.array([1, -1, H, HD], np.int64)
    rows = np.array([-1, n], np.int64)
    split = np.array([n, n, n], np.int64)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["qkv"]),
        helper.make_node("Split", ["qkv", "split"], ["q0", "k0", "v0"], axis=1),
        *(
            node
            for t in "qkv"
            for node in (
                helper.make_node("Reshape", [f"{t}0", "heads"], [f"{t}1"]),
                helper.make_node("Transpose", [f"{t}1"], [f"{t}2"], perm=[0, 2, 1, 3]),
            )
        ),
        helper.make_node("Attention", ["q2", "k2", "v2"], ["o"], is_causal=1),
        helper.make_node("Transpose", ["o"], ["o1"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["o1", "rows"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "gpt2_attn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["S", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["S", n])],
        [
            numpy_helper.from_array(a, name)
            for a, name in (
                (w, "w"),
                (bias, "b"),
                (heads, "heads"),
                (rows, "rows"),
                (split, "split"),
            )
        ],
    )
    model = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]))
    compiled = model.compile()
    assert _launched(compiled) == ["matmul", "attention"]
    x = rng.standard_normal((11, 16)).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(compiled(x)), _attention_ref(x, w, bias), rtol=1e-4, atol=1e-5
    )
    del onnx
