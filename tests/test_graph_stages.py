"""Each lowering stage's output on small graphs: guards, simplify, fuse, select, plan buffers,
schedule, and explain showing them all."""

from __future__ import annotations

import numpy as np
import pytest

from clforge import Graph, TensorType
from clforge.errors import GraphError
from clforge.graph.buffers import plan_buffers
from clforge.graph.fuse import fuse
from clforge.graph.guards import guards_of
from clforge.graph.pipeline import STAGES
from clforge.graph.schedule import schedule
from clforge.graph.simplify import simplify


def f32(*dims):
    return TensorType("f32", dims)


def test_guards_bind_check_and_solve():
    g = Graph("gd")
    x = g.input("x", f32("S", "D"))
    g.input("w", f32("D", 4))
    g.input("z", f32("S + 1", "H*hd"))
    h = g.input(
        "h",
        f32(
            "H",
        ),
    )
    g.output(g.reshape(x, ("S", "H", "k")))
    g.dim_range("S", 1, 64)
    gs = guards_of(g.ir())
    assert [str(b) for b in gs.bindings] == [
        "S := x.shape[0]",
        "D := x.shape[1]",
        "H := h.shape[0]",
        "z.shape[1]: read, to solve a dim from",
    ]
    assert [str(a) for a in gs.axes] == [
        "w.shape[0] == D",
        "w.shape[1] == 4",
        "z.shape[0] == S + 1",
    ]
    assert {s.dim for s in gs.solves} == {"k", "hd"}
    assert gs.dims == ("S", "D", "H", "k", "hd") or set(gs.dims) == {"S", "D", "H", "k", "hd"}
    assert gs.bind("gd", {"x": (3, 12), "w": (12, 4), "z": (4, 8), "h": (4,)}) == {
        "S": 3,
        "D": 12,
        "H": 4,
        "k": 3,
        "hd": 2,
    }
    assert "S := x.shape[0]" in "\n".join(gs.lines())
    del h
    g2 = Graph("unbound")
    x2 = g2.input("x", f32("S", "H*hd"))
    g2.output(g2.ops.exp(x2))
    with pytest.raises(GraphError, match="dim H, hd is bound by no graph input"):
        guards_of(g2.ir())


def test_simplify_dead_code_cse_noops():
    g = Graph("simp")
    x = g.input("x", f32("S", "D"))
    a = g.ops.exp(x)
    b = g.ops.exp(x)  # the same op on the same input
    g.ops.tanh(x)  # dead
    c = g.ops.cast_f32(g.ops.add(a, b))  # a no-op cast
    d = g.ops.permute(c, axes=(0, 1))  # a no-op permute
    e = g.ops.add(d, 2.0) + 2.0  # two equal constants
    g.output(e)
    s = simplify(g.ir())
    ops = [n.op for n in s.ir.nodes]
    assert ops == ["exp", "add", "add", "add"]
    text = "\n".join(s.log)
    assert "merged node 1 (exp" in text
    assert "a cast of add to its own dtype f32" in text
    assert "keeps the axes in order" in text
    assert "(tanh -> tanh): no output depends on it" in text
    assert "merged constant scalar_1 into scalar" in text
    add = s.ir.nodes[1]
    assert add.input_ids()[0] == add.input_ids()[1]  # both read the one exp


def test_fuse_without_a_registry_groups_nothing():
    g = Graph("f")
    x = g.input("x", f32("N"))
    g.output(g.ops.relu(g.ops.exp(x)))
    fused = fuse(g.ir())
    assert [grp.nodes for grp in fused.groups] == [(0,), (1,)]
    assert (
        fused.lines()[0]
        == "launch steps per call: 2 before fusion (one per node), 2 after (0 fused groups)"
    )


def test_buffers_reuse_by_liveness_and_schedule():
    g = Graph("chain")
    x = g.input("x", f32("S", "D"))
    a = g.ops.exp(x)
    b = g.ops.tanh(a)
    c = g.ops.sigmoid(b)
    d = g.ops.relu(c)
    g.output(d, g.reshape(d, ("S*D",)))
    ir = g.ir()
    bp = plan_buffers(ir)
    places = {ir.value(v).name: str(p) for v, p in bp.places}
    # exp and sigmoid share a slot: exp is dead once tanh has read it
    assert places["exp"] == places["sigmoid"] == "slot 0"
    assert places["tanh"] == "slot 1"
    assert places["relu"] == "output 0" == places["reshape"]
    assert places["x"].startswith("input")
    assert len(bp.slots) == 2 and len(bp.slots[0].values) == 2
    steps = schedule(ir, bp, fuse(ir))
    assert [s.op for s in steps.steps] == ["exp", "tanh", "sigmoid", "relu"]
    assert steps.lines(ir)[1] == "step 1: node 1 tanh(x=exp@slot 0) -> y=tanh@slot 1"


def test_select_and_explain_show_every_stage():
    g = Graph("ex")
    x = g.input("x", f32("S", 8))
    w = g.constant(np.ones((8, 3), np.float32), "w")
    y = g.ops.softmax(g.ops.matmul(x, w))
    g.output(y, g.ops.sum(g.constant(np.ones((2, 5), np.float32)), axis=1))
    m = g.compile()
    sel = {s.op: s for s in m.plan.selections}
    assert sel["matmul"].symbolic == ("M",) and dict(sel["matmul"].known)["K"] == 8
    assert sel["sum"].symbolic == () and "decided now" in sel["sum"].lines()[0]
    assert sel["sum"].instance.startswith("sum__")
    assert ":" in sel["sum"].params  # the values and where they came from
    m(np.ones((3, 8), np.float32))
    text = m.explain(file=None)
    for k, title in enumerate(STAGES, 1):
        assert f"== {k}. {title}" in text
    assert "== 8. specializations" in text and "S=3" in text
    assert "S := x.shape[0]" in text and "x.shape[1] == 8" in text
    (spec,) = m.cache.values()
    nodes = spec.summary()["nodes"]
    assert [n["op"] for n in nodes] == ["matmul", "softmax", "sum"]
    assert all(":" in n["params_from"] and n["params_from"] in text for n in nodes)
    assert sel["matmul"].instance in text
    verbose = m.explain(file=None, verbose=True)
    assert "CHOSEN" in verbose and "CHOSEN" not in text
