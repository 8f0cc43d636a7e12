"""Fusion: elementwise chains compiled into one generated kernel, checked against the same graph
unfused (every node its op's own instance) and against NumPy, at sizes 1, primes and empty,
with broadcasts (trailing, single element, strided), dtype casts inside the chain, attributes,
several stored values, explain, and save/load."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

import clforge
from clforge import Graph, TensorType
from clforge.core import elementwise_expr
from clforge.errors import GraphError
from clforge.graph import fused_kernel

rng = np.random.default_rng(36)
_erf = np.vectorize(math.erf, otypes=[np.float64])


def rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def gelu(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return 0.5 * x64 * (1 + _erf(x64 / math.sqrt(2)))


def fused_groups(model: clforge.graph.Model) -> list[tuple[int, ...]]:
    return [g.nodes for g in model.plan.fused.groups if g.kernel is not None]


def both(g: Graph, *args: np.ndarray) -> tuple[object, object, clforge.graph.Model]:
    fused = g.compile()
    return fused(*args), g.compile(fusion=False)(*args), fused


SIZES = [(1, 1), (13, 7), (5, 16), (0, 7), (31, 33)]


@pytest.mark.parametrize(("s", "d"), SIZES)
def test_bias_gelu_residual_is_one_kernel(s, d):
    g = Graph("block")
    x = g.input("x", TensorType("f32", ("S", d)))
    b = g.constant(rand(d), "b")
    h = g.ops.gelu(g.ops.add(x, b))
    g.output(g.ops.add(h, x))
    xs = rand(s, d)
    got, ref, model = both(g, xs)
    assert fused_groups(model) == [(0, 1, 2)]
    assert len(model.plan.schedule.steps) == 1 and not model.plan.buffers.slots
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(
        got, gelu(xs + model.plan.ir.constants[1]) + xs, rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize(("s", "d"), SIZES)
def test_broadcasts_single_trailing_and_strided(s, d):
    g = Graph("bc")
    x = g.input("x", TensorType("f32", ("S", d)))
    col = g.input("col", TensorType("f32", ("S", 1)))  # strided against [S, d]
    row = g.input("row", TensorType("f32", (1, d)))  # trailing
    y = g.ops.maximum(g.ops.sub(g.ops.mul(x, col), row), 0.25)  # 0.25: a single element
    g.output(g.ops.tanh(y))
    xs, cs, rs = rand(s, d), rand(s, 1), rand(1, d)
    got, ref, model = both(g, xs, cs, rs)
    assert fused_groups(model) == [(0, 1, 2, 3)]
    kinds = model.plan.fused.groups[0].kernel
    assert kinds is not None and len(kinds.inputs) == 4
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, np.tanh(np.maximum(xs * cs - rs, 0.25)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [1, 17, 1000, 0])
def test_casts_inside_the_chain(n):
    g = Graph("casts")
    x = g.input("x", TensorType("f32", ("N",)))
    i = g.ops.abs(g.ops.cast_i32(g.ops.mul(x, 3.0)))  # f32 -> i32 (truncation), integer abs
    z = g.ops.sqrt(g.ops.cast_f64(g.ops.add(i, 1)))  # i32 -> f64
    g.output(z, g.ops.relu(g.ops.cast_f16(x)))  # a second chain ending in half storage
    xs = rand(n) * 10
    (got, half), (ref, ref_half), model = both(g, xs)
    assert (0, 1, 2, 3, 4, 5) in fused_groups(model)
    assert got.dtype == np.float64 and half.dtype == np.float16
    want = np.sqrt((np.abs((xs * np.float32(3)).astype(np.int32)) + 1).astype(np.float64))
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_allclose(got, want, rtol=1e-15)
    np.testing.assert_array_equal(half, ref_half)
    np.testing.assert_array_equal(half, np.maximum(xs.astype(np.float16), 0))


@pytest.mark.parametrize("n", [1, 23, 0])
def test_integer_and_double_pow_use_the_helpers(n):
    g = Graph("pow")
    a = g.input("a", TensorType("i32", ("N",)))
    x = g.input("x", TensorType("f64", ("N",)))
    g.output(g.ops.neg(g.ops.pow(a, 3)), g.ops.sqrt(g.ops.pow(g.ops.abs(x), x)))
    av = rng.integers(-9, 9, n).astype(np.int32)
    xv = rand(n, dtype=np.float64)
    (p, q), (rp, rq), model = both(g, av, xv)
    assert len(fused_groups(model)) == 2
    np.testing.assert_array_equal(p, rp)
    np.testing.assert_array_equal(p, -(av**3))
    np.testing.assert_allclose(q, rq, rtol=1e-14)
    np.testing.assert_allclose(q, np.sqrt(np.abs(xv) ** xv), rtol=1e-13)


@pytest.mark.parametrize(("s", "d"), [(1, 1), (7, 5), (0, 3)])
def test_where_clip_and_attributes(s, d):
    g = Graph("attrs")
    x = g.input("x", TensorType("f32", ("S", d)))
    c = g.input("c", TensorType("i32", ("S", d)))
    lo = g.constant(np.full(d, -0.5, np.float32), "lo")
    y = g.ops.where(c, g.ops.leaky_relu(x, alpha=0.2), g.ops.gelu(x, approximate=1))
    g.output(g.ops.clip(y, lo, 0.75))
    xs, cs = rand(s, d) * 3, rng.integers(0, 2, (s, d)).astype(np.int32)
    got, ref, model = both(g, xs, cs)
    assert fused_groups(model) == [(0, 1, 2, 3)]
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=2e-6)
    x64 = xs.astype(np.float64)
    tanh_gelu = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))
    want = np.clip(np.where(cs != 0, np.where(x64 < 0, 0.2 * x64, x64), tanh_gelu), -0.5, 0.75)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_values_read_outside_are_stored_and_chains_stop_at_other_ops():
    g = Graph("mixed")
    x = g.input("x", TensorType("f32", ("S", 6)))
    w = g.constant(rand(6, 6), "w")
    h = g.ops.exp(g.ops.neg(x))
    s = g.ops.softmax(h, axis=-1)  # reads h: h is stored
    y = g.ops.sigmoid(g.ops.add(g.ops.matmul(g.ops.relu(h), w), s))
    g.output(y, h)
    xs = rand(9, 6)
    (gy, gh), (ry, rh), model = both(g, xs)
    groups = fused_groups(model)
    assert groups == [(0, 1, 3), (4, 5, 6)]  # neg exp relu; matmul with add sigmoid
    first = model.plan.fused.groups[0].kernel
    assert first is not None and len(first.outputs) == 2  # h (softmax, an output) and relu
    last = [g.kernel for g in model.plan.fused.groups if g.kernel is not None][-1]
    assert last is not None and last.producer == 4  # the add and sigmoid: the matmul's epilogue
    assert (
        "not fused: node 2 softmax -> nodes 5, 6: no variant of softmax"
        in model.plan.fused.notes[0]
    )
    np.testing.assert_allclose(gy, ry, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gh, rh, rtol=1e-6, atol=1e-6)


def test_a_node_that_would_make_a_cycle_does_not_join():
    g = Graph("cycle")
    x = g.input("x", TensorType("f32", ("N",)))
    a = g.ops.exp(x)
    s = g.ops.sum(a, axis=0, keepdims=True)  # reads the group
    g.output(g.ops.add(g.ops.relu(a), s))  # reads the group and the sum
    xs = rand(11)
    got, ref, model = both(g, xs)
    for grp in model.plan.fused.groups:
        assert 1 not in grp.nodes or len(grp.nodes) == 1
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_explain_shows_groups_kernels_and_launch_counts():
    g = Graph("ex")
    x = g.input("x", TensorType("f32", ("S", 8)))
    g.output(g.ops.relu(g.ops.mul(g.ops.add(x, 1.0), x)))
    model = g.compile()
    model(rand(3, 8))
    text = model.explain(file=None, verbose=True)
    assert "launch steps per call: 3 before fusion (one per node), 1 after (1 fused groups)" in text
    fk = model.plan.fused.groups[0].kernel
    assert fk is not None and f"kernel {fk.name}: 3 ops, one launch" in text
    assert "t1 = ((t0) * (in0))  [mul, f32]" in text
    assert f"group 0: {fk.name} (generated)" in text
    assert f"__kernel void {fk.name}(" in text  # the generated source, verbose


def test_saved_model_regenerates_the_fused_kernel(tmp_path):
    g = Graph("saved")
    x = g.input("x", TensorType("f32", ("S", 5)))
    g.output(g.ops.silu(g.ops.add(x, g.constant(rand(5), "b"))))
    model = g.compile()
    path = tmp_path / "m.json"
    model.save(path)
    loaded = clforge.load(path)
    assert loaded.plan.fused == model.plan.fused
    xs = rand(4, 5)
    np.testing.assert_array_equal(loaded(xs), model(xs))
    doc = json.loads(path.read_text())
    assert "FusedKernel" in path.read_text() and doc["format"] == "clforge-graph/1"
    fk = model.plan.fused.groups[0].kernel
    assert fk is not None
    stale = tmp_path / "stale.json"  # saved by specs whose silu was another expression
    stale.write_text(path.read_text().replace('"silu"', '"sigmoid"'))
    with pytest.raises(GraphError, match=r"other expressions.*compile the graph again"):
        clforge.load(stale)


def test_expressions_render_by_substitution_and_refuse_unknown_names():
    assert elementwise_expr.render("((a) + (b))", {"a": "x_", "b": "y_"}, "ACC_") == "((x_) + (y_))"
    assert elementwise_expr.render(
        "ipow(a, b)", {"a": "p", "b": "q"}, "int", {"ipow": "ipow_"}
    ) == ("ipow_(p, q)")
    assert elementwise_expr.problems("((x) < (V)0 ? (V)0 : (x))", ["x"], []) == []
    assert any("not an input" in p for p in elementwise_expr.problems("(y)", ["x"], []))
    assert any("unexpected" in p for p in elementwise_expr.problems("x; system()", ["x"], []))
    assert any("parentheses" in p for p in elementwise_expr.problems("x + 1", ["x"], []))


# --- epilogues ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("s", "k", "n"), [(1, 1, 1), (13, 33, 40), (0, 5, 7), (67, 17, 129)])
def test_matmul_bias_gelu_residual_in_the_matmul_kernel(s, k, n, dtype):
    name = "f32" if dtype == np.float32 else "f64"
    g = Graph("mlp")
    x = g.input("x", TensorType(name, ("S", k)))
    r = g.input("r", TensorType(name, ("S", n)))
    w = g.constant(rand(k, n, dtype=dtype), "w")
    b = g.constant(rand(n, dtype=dtype), "b")
    g.output(g.ops.add(g.ops.gelu(g.ops.add(g.ops.matmul(x, w), b)), r))
    xs, rs = rand(s, k, dtype=dtype), rand(s, n, dtype=dtype)
    got, ref, model = both(g, xs, rs)
    (grp,) = model.plan.fused.groups
    assert grp.kernel is not None and grp.kernel.producer == 0 and grp.nodes == (0, 1, 2, 3)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    c = model.plan.ir.constants
    want = gelu(xs.astype(np.float64) @ c[2] + c[3]) + rs
    np.testing.assert_allclose(got, want, rtol=tol * 10, atol=tol * 10)
    text = model.explain(file=None)
    assert "its epilogue point" in text and "1 after (1 fused groups)" in text


@pytest.mark.parametrize(("s", "n"), [(1, 3), (9, 64), (10, 65), (0, 4)])
def test_gemm_with_bias_and_broadcast_inputs_in_its_epilogue(s, n):
    g = Graph("gemm")
    a = g.input("a", TensorType("f32", ("S", 24)))
    col = g.input("col", TensorType("f32", ("S", 1)))  # strided: the element path only
    bt = g.constant(rand(n, 24), "bt")
    bias = g.constant(rand(n), "bias")
    y = g.ops.gemm(a, bt, bias, trans_b=True, alpha=0.5, beta=2.0)
    g.output(g.ops.relu(g.ops.mul(y, col)))
    av, cv = rand(s, 24), rand(s, 1)
    got, ref, model = both(g, av, cv)
    assert [grp.kernel.producer for grp in model.plan.fused.groups if grp.kernel] == [0]
    c = model.plan.ir.constants
    want = np.maximum((0.5 * (av @ c[2].T) + 2.0 * c[3]) * cv, 0)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_producer_without_an_epilogue_point_is_not_fused_and_explain_says_why():
    g = Graph("sm")
    x = g.input("x", TensorType("f32", ("S", 6)))
    g.output(g.ops.mul(g.ops.softmax(x, axis=-1), 3.0))
    model = g.compile()
    assert fused_groups(model) == []
    text = model.explain(file=None)
    assert (
        "not fused: node 0 softmax -> nodes 1: no variant of softmax declares an epilogue" in text
    )
    xs = rand(5, 6)
    e = np.exp(xs - xs.max(-1, keepdims=True))
    np.testing.assert_allclose(model(xs), 3 * e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_an_instance_without_the_hook_runs_the_chain_as_a_second_kernel():
    g = Graph("two")
    x = g.input("x", TensorType("f32", ("S", 9)))
    w = g.constant(rand(9, 10), "w")
    g.output(g.ops.tanh(g.ops.matmul(x, w)))
    model = g.compile()
    env = {"S": 7}
    spec = model.specialization(env)
    (prepared,) = spec.steps
    step = prepared.step
    d = model.dispatcher
    node = model.plan.ir.node(0)
    base = model._prepare(node, step, env, d).plan
    hookless = dataclasses.replace(base, inst=dataclasses.replace(base.inst, epilogue=None))
    fk = model.plan.fused.groups[0].kernel
    chosen = {s.node: s.instance for s in model.plan.selections}
    plan, note, _ = fused_kernel.plan_epilogue(d, model.plan.ir, fk, hookless, chosen, env)
    assert "declares no epilogue point" in note
    assert len(plan.launches) == len(base.launches) + 1 and plan.scratch[-1][0] == "epilogue_"
    spec.steps = (dataclasses.replace(prepared, plan=plan),)
    xs = rand(7, 9)
    np.testing.assert_allclose(model(xs), np.tanh(xs @ model.plan.ir.constants[1]), rtol=1e-5)


def test_a_saved_epilogue_is_regenerated(tmp_path):
    g = Graph("saved_epi")
    x = g.input("x", TensorType("f32", ("S", 4)))
    g.output(g.ops.sigmoid(g.ops.matmul(x, g.constant(rand(4, 3), "w"))))
    model = g.compile()
    model.save(tmp_path / "m.json")
    loaded = clforge.load(tmp_path / "m.json")
    assert loaded.plan.fused == model.plan.fused
    xs = rand(5, 4)
    np.testing.assert_array_equal(loaded(xs), model(xs))


def test_epilogues_of_half_batched_and_biasless_producers():
    g = Graph("h")
    x = g.input("x", TensorType("f16", ("S", 9)))
    w = g.constant(rand(9, 5).astype(np.float16), "w")
    b = g.constant(rand(5).astype(np.float16), "b")
    g.output(g.ops.relu(g.ops.add(g.ops.matmul(x, w), b)))
    xs = rand(7, 9).astype(np.float16)
    got, ref, model = both(g, xs)
    assert [grp.kernel.producer for grp in model.plan.fused.groups if grp.kernel] == [0]
    # the unfused graph rounds the product to half before the bias; the epilogue does not
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), atol=8e-3, rtol=4e-3)

    g = Graph("batched")
    a = g.input("a", TensorType("f32", (3, "S", 8)))
    bb = g.input("b", TensorType("f32", (3, 8, 6)))
    r = g.input("r", TensorType("f32", (3, "S", 6)))
    g.output(g.ops.tanh(g.ops.add(g.ops.matmul(a, bb), r)))
    av, bv, rv = rand(3, 5, 8), rand(3, 8, 6), rand(3, 5, 6)
    got, ref, model = both(g, av, bv, rv)
    assert [grp.kernel.producer for grp in model.plan.fused.groups if grp.kernel] == [0]
    np.testing.assert_allclose(got, np.tanh(av @ bv + rv), rtol=1e-5, atol=1e-6)

    g = Graph("biasless")
    a = g.input("a", TensorType("f32", ("S", 8)))
    g.output(g.ops.mul(g.ops.gemm(a, g.constant(rand(8, 70), "b"), alpha=2.0), 0.5))
    av = rand(13, 8)
    got, ref, model = both(g, av)
    assert [grp.kernel.producer for grp in model.plan.fused.groups if grp.kernel] == [0]
    np.testing.assert_allclose(got, av @ model.plan.ir.constants[1], rtol=1e-5, atol=1e-5)


def test_fused_kernels_go_through_the_program_cache():
    g = Graph("cached")
    x = g.input("x", TensorType("f32", ("N",)))
    g.output(g.ops.sqrt(g.ops.abs(g.ops.sub(x, 0.125))))
    first = g.compile()
    stats = first.dispatcher.runtime.cache.stats
    seen = stats.memory_hits + stats.disk_hits + stats.builds
    first(rand(9))
    assert stats.memory_hits + stats.disk_hits + stats.builds == seen + 1  # one program
    hits = stats.memory_hits
    second = g.compile()  # another model, the same expression: the program built before
    second(rand(9))
    assert stats.memory_hits == hits + 1
    assert first.plan.fused.groups[0].kernel == second.plan.fused.groups[0].kernel


@pytest.mark.parametrize(("s", "d"), [(1, 1), (7, 13), (5, 64), (0, 8), (3, 100)])
def test_norms_take_the_elementwise_ops_after_them(s, d):
    g = Graph("ln")
    x = g.input("x", TensorType("f32", ("S", d)))
    r = g.input("r", TensorType("f32", ("S", d)))
    gamma, beta, scale = (g.constant(rand(d), n) for n in ("gamma", "beta", "scale"))
    y = g.ops.add(g.ops.silu(g.ops.mul(g.ops.layer_norm(x, gamma, beta, eps=1e-5), scale)), r)
    g.output(y, g.ops.relu(g.ops.rms_norm(r, gamma, eps=1e-6)))
    xs, rs = rand(s, d), rand(s, d)
    (a, b), (ra, rb), model = both(g, xs, rs)
    assert [grp.kernel.producer for grp in model.plan.fused.groups if grp.kernel] == [0, 4]
    np.testing.assert_allclose(a, ra, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, rb, rtol=1e-6, atol=1e-6)
    c = model.plan.ir.constants
    mu, var = xs.mean(-1, keepdims=True), xs.var(-1, keepdims=True)
    ln = ((xs - mu) / np.sqrt(var + 1e-5) * c[2] + c[3]) * c[4]
    np.testing.assert_allclose(a, ln / (1 + np.exp(-ln)) + rs, rtol=1e-4, atol=1e-5)
    rms = rs / np.sqrt((rs * rs).mean(-1, keepdims=True) + 1e-6) * c[2]
    np.testing.assert_allclose(b, np.maximum(rms, 0), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("s", "k", "n"), [(13, 33, 40), (67, 17, 129), (8, 64, 256)])
def test_epilogues_at_static_sizes(s, k, n, dtype):
    """Sizes all known: the instance decided at compile time (cpu_blocked here) applies it."""
    name = "f32" if dtype == np.float32 else "f64"
    g = Graph("static")
    x = g.input("x", TensorType(name, (s, k)))
    g.output(g.ops.relu(g.ops.add(g.ops.matmul(x, g.constant(rand(k, n, dtype=dtype))), 0.5)))
    model = g.compile()
    xs = rand(s, k, dtype=dtype)
    got = model(xs)
    (step,) = model.cache[()].steps
    assert step.plan.inst.epilogue == "c" and "/* epilogue */" in step.source
    tol = 1e-5 if dtype == np.float32 else 1e-12
    want = np.maximum(xs @ model.plan.ir.constants[1] + 0.5, 0)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_a_fused_kernel_past_the_32_bit_index_is_refused_before_anything_is_allocated():
    g = Graph("big")
    x = g.input("x", TensorType("f32", ("A", "B")))
    g.output(g.ops.relu(g.ops.exp(x)))
    model = g.compile()
    with pytest.raises(clforge.CallError, match=r"exp -> relu.*4294967296 elements do not fit"):
        model.specialization({"A": 65536, "B": 65536})
