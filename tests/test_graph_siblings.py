"""Sibling gemms merged (graph/siblings.py): gemms of one value by constant weights of one shape
become one batched matmul with the stacked bias in its epilogue (a broadcast input read as
vectors), checked against the same graph unfused and against NumPy at S = 1, primes and 0,
with betas (0 reads no bias), f64, gemms that must stay apart, and save/load."""

from __future__ import annotations

import numpy as np
import pytest

import clforge
from clforge import Graph, TensorType

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
    assert _launched(model) == ["matmul"]
    x = rng.standard_normal((s, K)).astype(np.float32)
    got, plain = model(x), g.compile(fusion=False)(x)
    for a, b, w in zip(got, plain, want(x), strict=True):
        assert np.asarray(a).shape == (s, n)
        np.testing.assert_allclose(np.asarray(a), w, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
    text = model.explain(file=None)
    assert "merged node 0, node 1, node 2 (gemm of x by 3 weights" in text
    assert "epilogue of node" in text


def test_f64_siblings_and_save_load(tmp_path) -> None:
    g, want = _graph(24, (1.0, 1.0), "f64", np.float64)
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
