"""Packed hand-offs (graph/handoff.py): a producer with an epilogue point (a layer_norm, a gemm
with its fused chain) stores its output straight into the panels that its one reader's packing
step (`panels:` in matmul's and gemm's packed routines) would copy it into, and that step is not
launched. Checked against the same graph unfused and against NumPy at S = 1, 5 and 37 (rows
that fill no whole panel: the last row repeated into the padding), 0, f64, a batched matmul,
a value with a second reader (not handed off), and save/load."""

from __future__ import annotations

import math

import numpy as np
import pytest

import clforge
from clforge import Graph, TensorType

rng = np.random.default_rng(41)
D, H = 48, 80


def _ln(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    x = x.astype(np.float64)
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)


def _mlp(dtype: str = "f32", np_dtype: type = np.float32):
    """layer_norm -> gemm + gelu -> gemm: two hand-offs."""
    g = Graph("handoff_mlp")
    x = g.input("x", TensorType(dtype, ("S", D)))
    w1 = rng.standard_normal((D, H)).astype(np_dtype) / 8
    b1 = rng.standard_normal(H).astype(np_dtype)
    w2 = rng.standard_normal((H, D)).astype(np_dtype) / 8
    b2 = rng.standard_normal(D).astype(np_dtype)
    h = g.ops.layer_norm(x)
    h = g.ops.gelu(g.ops.gemm(h, g.constant(w1), g.constant(b1), beta=1.0))
    g.output(g.ops.gemm(h, g.constant(w2), g.constant(b2), beta=1.0))

    def want(xv: np.ndarray) -> np.ndarray:
        t = _ln(xv) @ w1 + b1
        return (0.5 * t * (1 + np.vectorize(math.erf, otypes=[float])(t / math.sqrt(2)))) @ w2 + b2

    return g, want


def _kernels(model: clforge.graph.Model) -> int:
    (spec,) = model.cache.values()
    return len(spec.launches)


def _handed(model: clforge.graph.Model, made: bool = True) -> list[str]:
    """The specializations' hand-off lines: those made (or those not made, and why)."""
    lines = [ln.strip() for ln in model.explain(file=None).splitlines()]
    return [ln for ln in lines if ln.startswith("handed off:" if made else "not handed off:")]


@pytest.mark.parametrize("s", [1, 5, 37, 0])
def test_mlp_hands_off_both_packs(s: int) -> None:
    g, want = _mlp()
    model, plain = g.compile(), g.compile(fusion=False)
    x = rng.standard_normal((s, D)).astype(np.float32)
    got, ref = np.asarray(model(x)), np.asarray(plain(x))
    assert got.shape == (s, D)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want(x), rtol=2e-3, atol=2e-3)
    text = model.explain(file=None)
    assert "hand-off: node 0 layer_norm may store" in text
    assert "hand-off: node 1 gemm may store" in text
    handed = _handed(model)
    if s == 0:  # nothing to pack: nothing handed off, nothing launched
        assert not handed
        assert all("launches no pack_a at these sizes" in ln for ln in _handed(model, False))
        return
    packed = [ln for ln in handed if "pack_a not launched" in ln]
    # where a gemm's instance at these sizes packs a, its pack_a is not launched; the count of
    # kernels drops by one per hand-off against the same plan without them
    packs = sum("__pack_a" in r.launches[0].kernel.function_name for r in _ready(plain))
    assert len(packed) == packs
    assert _kernels(model) == _kernels_fused_without_handoffs(g, x) - len(packed)


def _ready(model: clforge.graph.Model):
    (spec,) = model.cache.values()
    return spec.ready


def _kernels_fused_without_handoffs(g: Graph, x: np.ndarray) -> int:
    from clforge.graph.artifact import Model

    keep = Model._hand_off
    Model._hand_off = lambda self, p, env, d: (p, [], {})  # type: ignore[method-assign]
    try:
        m = g.compile()
        m(x)
        return _kernels(m)
    finally:
        Model._hand_off = keep  # type: ignore[method-assign]


def test_mlp_f64_and_save_load(tmp_path) -> None:
    g, want = _mlp("f64", np.float64)
    model = g.compile()
    x = rng.standard_normal((13, D))
    got = np.asarray(model(x))
    np.testing.assert_allclose(got, want(x), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(got, np.asarray(g.compile(fusion=False)(x)), rtol=1e-10)
    model.save(tmp_path / "m.json")
    loaded = clforge.load(tmp_path / "m.json")
    assert loaded.plan.fused.handoffs == model.plan.fused.handoffs
    np.testing.assert_array_equal(np.asarray(loaded(x)), got)
    assert _handed(loaded) == _handed(model)


def test_batched_matmul_reader() -> None:
    """layer_norm of [B, S, D] into a matmul by one [D, N] weight: rows of every batch."""
    g = Graph("handoff_batched")
    x = g.input("x", TensorType("f32", (2, "S", D)))
    w = rng.standard_normal((D, 40)).astype(np.float32)
    g.output(g.ops.matmul(g.ops.layer_norm(x), g.constant(w)))
    model = g.compile()
    for s in (3, 8, 11):
        xv = rng.standard_normal((2, s, D)).astype(np.float32)
        got = np.asarray(model(xv))
        np.testing.assert_allclose(got, _ln(xv) @ w, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got, np.asarray(g.compile(fusion=False)(xv)), rtol=1e-5)


def test_a_value_read_twice_is_not_handed_off() -> None:
    g = Graph("handoff_two_readers")
    x = g.input("x", TensorType("f32", ("S", D)))
    w = rng.standard_normal((D, D)).astype(np.float32)
    h = g.ops.layer_norm(x)
    g.output(g.ops.add(g.ops.gemm(h, g.constant(w)), h))  # the residual reads h too
    model = g.compile()
    assert "hand-off:" not in model.explain(file=None)
    xv = rng.standard_normal((9, D)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(model(xv)), _ln(xv) @ w + _ln(xv), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mr", [4, 10])
def test_panels_of_another_block(mr: int) -> None:
    """The panels follow the reader's own MR (as tuned or computed for another device): the
    gemms' cpu_packed run with MR 4 and 10 (rows 1 to 3 and 1 to 9 of padding at S = 13)."""
    d = clforge.dispatcher()
    inst = "gemm__cpu_packed__f32__a_row__b_row"
    d.override_params(inst, {"MR": mr, "NR": 32, "VW": 16, "KB": 64, "PA": 1})
    try:
        g, want = _mlp()
        model = g.compile()
        x = rng.standard_normal((13, D)).astype(np.float32)
        got = np.asarray(model(x))
        np.testing.assert_allclose(got, want(x), rtol=2e-3, atol=2e-3)
        handed = _handed(model)
        assert len(handed) == 2 and all(f"panels of {mr} rows" in ln for ln in handed)
    finally:
        d.override_params(inst, None)


def test_the_gemms_take_parameters_tuned_as_the_graph_runs_them(monkeypatch) -> None:
    """A gemm whose b is a constant packs it once per specialization, so its parameters are
    looked up hoisted (`clforge tune --hoisted`'s HOIST~1 entries first); a step that packs
    a per-call input (the layer_norm's output handed to pack_a) does not make it so. The
    compile-time selection's `params:` line asks the same way."""
    from clforge.call.dispatcher import Dispatcher

    asked: list[tuple[str, bool]] = []
    real = Dispatcher.params_for

    def spy(self, inst, env, hoisted=False):  # type: ignore[no-untyped-def]
        asked.append((inst.name, hoisted))
        return real(self, inst, env, hoisted)

    monkeypatch.setattr(Dispatcher, "params_for", spy)
    g, want = _mlp()
    x = rng.standard_normal((37, D)).astype(np.float32)
    np.testing.assert_allclose(g.compile()(x), want(x), rtol=1e-4, atol=1e-4)
    packed = {hoisted for name, hoisted in asked if "__cpu_packed__" in name}
    others = {hoisted for name, hoisted in asked if "__cpu_packed__" not in name}
    assert packed == {True} and others <= {False}
