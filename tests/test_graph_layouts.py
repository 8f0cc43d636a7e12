"""Permutes folded into layouts (graph/layouts.py): a model's heads permute feeding attention is
read in place as the bshd layout, and the permute back after it is written by attention
directly; checked against the same graph without fusion and against NumPy at S = 1, primes and
0, where a permute has other readers, where its axes are not a layout's, and through save/load."""

from __future__ import annotations

import numpy as np
import pytest

import clforge
from clforge import Graph, TensorType
from clforge.references import expected
from clforge.registry import loader as registry_mod

REG = registry_mod.default()
H, D = 3, 8
rng = np.random.default_rng(37)


def _heads(g: Graph, t: object) -> object:
    return g.ops.permute(g.reshape(t, (1, "S", H, D)), axes=(0, 2, 1, 3))


def _graph(extra_reader: bool = False, back: tuple[int, ...] = (0, 2, 1, 3)) -> Graph:
    """x, y, z [S, H*D] -> heads -> causal attention -> merged heads [S, H*D] (+ q itself,
    where `extra_reader`: the permute of x has a second reader)."""
    g = Graph("heads")
    x, y, z = (g.input(n, TensorType("f32", ("S", H * D))) for n in "xyz")
    q = _heads(g, x)
    o = g.ops.attention(q, _heads(g, y), _heads(g, z), causal=True)
    merged = g.ops.permute(o, axes=back)
    if back == (0, 2, 1, 3):
        merged = g.reshape(merged, ("S", H * D))
    g.output(merged)
    if extra_reader:
        g.output(g.ops.relu(q))
    return g


def _want(x: np.ndarray, y: np.ndarray, z: np.ndarray, back: tuple[int, ...]) -> np.ndarray:
    def heads(t: np.ndarray) -> np.ndarray:
        return t.reshape(1, -1, H, D).transpose(0, 2, 1, 3)

    o = expected(
        REG.op("attention"),
        {"q": heads(x), "k": heads(y), "v": heads(z)},
        {"causal": 1, "scale": D**-0.5, "softcap": 0.0},
    )["o"].transpose(back)
    return o.reshape(x.shape) if back == (0, 2, 1, 3) else o


def _launched(model: clforge.graph.Model) -> list[str]:
    return [n.op for g in model.plan.fused.groups for n in (model.plan.ir.node(g.nodes[0]),)]


@pytest.mark.parametrize("s", [1, 7, 31, 0])
def test_the_heads_permutes_fold_into_attention(s: int) -> None:
    g = _graph()
    x, y, z = (rng.standard_normal((s, H * D)).astype(np.float32) for _ in range(3))
    model = g.compile()
    got, plain = model(x, y, z), g.compile(fusion=False)(x, y, z)
    assert _launched(model) == ["attention"]
    node = next(n for n in model.plan.ir.nodes if n.op == "attention")
    assert dict(node.layouts) == {"q": "bshd", "k": "bshd", "v": "bshd", "o": "bshd"}
    want = _want(x, y, z, (0, 2, 1, 3))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got), np.asarray(plain), rtol=1e-6, atol=1e-7)
    text = model.explain(file=None)
    assert "1 after (0 fused groups, 1 rewrites)" in text
    assert "writes o in bshd as permute_3 (node 7's permute)" in text
    assert "attention__cpu_flash__f32__q_bshd__k_bshd__v_bshd__o_bshd" in text


def test_a_permute_with_other_readers_stays_for_them() -> None:
    model = _graph(extra_reader=True).compile()
    x, y, z = (rng.standard_normal((5, H * D)).astype(np.float32) for _ in range(3))
    merged, relu = model(x, y, z)
    assert sorted(_launched(model)) == ["attention", "permute", "relu"]
    np.testing.assert_allclose(
        np.asarray(merged), _want(x, y, z, (0, 2, 1, 3)), rtol=1e-5, atol=1e-6
    )
    want_q = np.maximum(x.reshape(1, 5, H, D).transpose(0, 2, 1, 3), 0)
    np.testing.assert_array_equal(np.asarray(relu), want_q)


def test_a_permute_that_is_no_layout_of_the_output_is_kept() -> None:
    back = (0, 1, 3, 2)  # o transposed within a head: no layout of attention's o
    model = _graph(back=back).compile()
    x, y, z = (rng.standard_normal((6, H * D)).astype(np.float32) for _ in range(3))
    assert _launched(model) == ["attention", "permute"]
    node = next(n for n in model.plan.ir.nodes if n.op == "attention")
    assert "o" not in dict(node.layouts)
    np.testing.assert_allclose(
        np.asarray(model(x, y, z)), _want(x, y, z, back), rtol=1e-5, atol=1e-6
    )


def test_the_folds_are_saved_and_loaded(tmp_path) -> None:
    model = _graph().compile()
    x, y, z = (rng.standard_normal((11, H * D)).astype(np.float32) for _ in range(3))
    want = np.asarray(model(x, y, z))
    path = tmp_path / "heads.json"
    model.save(path)
    loaded = clforge.load(path)
    assert _launched(loaded) == ["attention"]
    np.testing.assert_array_equal(np.asarray(loaded(x, y, z)), want)


def test_channels_last_permutes_fold_into_conv2d() -> None:
    """An NHWC model around an NCHW conv (the permutes an exporter writes): conv2d reads the
    NHWC input in place and writes its output channels-last (the nhwc layout), no permute
    kernel; against NumPy and the unfused graph."""
    g = Graph("nhwc")
    x = g.input("x", TensorType("f32", ("N", 9, 7, 5)))
    w = rng.standard_normal((6, 5, 3, 3)).astype(np.float32)
    nchw = g.ops.permute(x, axes=(0, 3, 1, 2))
    y = g.ops.conv2d(nchw, g.constant(w), padding=1)
    g.output(g.ops.permute(y, axes=(0, 2, 3, 1)))
    model = g.compile()
    assert _launched(model)[-1] == "conv2d" and "permute" not in _launched(model)
    node = next(n for n in model.plan.ir.nodes if n.op == "conv2d")
    assert dict(node.layouts) == {"x": "nhwc", "y": "nhwc"}
    for n in (1, 2, 0):
        xv = rng.standard_normal((n, 9, 7, 5)).astype(np.float32)
        want = expected(
            REG.op("conv2d"),
            {"x": xv.transpose(0, 3, 1, 2), "w": w, "bias": np.zeros(6, np.float32)},
            {
                "stride_h": 1,
                "stride_w": 1,
                "pad_h": 1,
                "pad_w": 1,
                "dil_h": 1,
                "dil_w": 1,
                "groups": 1,
            },
        )["y"].transpose(0, 2, 3, 1)
        got = np.asarray(model(xv))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(
            got, np.asarray(g.compile(fusion=False)(xv)), rtol=1e-5, atol=1e-6
        )
