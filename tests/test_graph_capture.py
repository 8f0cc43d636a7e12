"""Graph capture: shapes inferred through each supported op from its calling convention, and
errors while the graph is built that name both tensors and both dims."""

from __future__ import annotations

import numpy as np
import pytest

from clforge import Graph, TensorType
from clforge.errors import GraphError
from clforge.graph.dims import Dim, parse_dim


def shape(v) -> tuple[str, ...]:
    return tuple(str(d) for d in v.shape)


def f32(*dims):
    return TensorType("f32", dims)


@pytest.fixture
def g() -> Graph:
    return Graph("t")


def test_dims_parse_and_algebra():
    assert str(parse_dim("H*hd")) == "H*hd"
    assert str(parse_dim("2*(S + 1)")) == "2*S + 2"
    assert parse_dim("hd * H") == parse_dim("H*hd")
    assert parse_dim("S + 1").evaluate({"S": 4}) == 5
    assert Dim.of(7).value == 7
    with pytest.raises(GraphError, match="unexpected"):
        parse_dim("S - 1")
    with pytest.raises(GraphError, match="negative"):
        Dim.of(-1)


def test_elementwise_and_broadcasting(g):
    x = g.input("x", f32("S", "D"))
    b = g.constant(np.zeros(7, np.float32), "b")
    assert shape(g.ops.gelu(x)) == ("S", "D")
    assert shape(g.ops.exp(x)) == ("S", "D")
    assert shape(g.ops.add(x, 1.0)) == ("S", "D")  # a number is a weak scalar
    y = g.input("y", f32("S", 7))
    assert shape(g.ops.add(y, b)) == ("S", "7")
    one = g.input("one", f32(1, "D"))
    assert shape(g.ops.mul(x, one)) == ("S", "D")  # a broadcast 1
    col = g.input("col", f32("S", 1))
    assert shape(col * one) == ("S", "D")
    assert g.ops.add(x, 1.0).dtype == "f32"


def test_algebraic_dims_flow_through(g):
    x = g.input("x", f32("S", "H*hd"))
    assert shape(g.ops.layer_norm(x)) == ("S", "H*hd")
    assert shape(g.ops.permute(x)) == ("H*hd", "S")
    z = g.input("z", f32("S + 1", "D"))
    assert shape(g.ops.softmax(z, axis=0)) == ("S + 1", "D")
    assert shape(g.ops.sum(z, axis=0)) == ("D",)


def test_linalg_reductions_norms(g):
    x = g.input("x", f32("S", "D"))
    w = g.input("w", f32("D", "N"))
    assert shape(g.ops.matmul(x, w)) == ("S", "N")
    v = g.input(
        "v",
        f32(
            "D",
        ),
    )
    assert shape(g.ops.matmul(x, v)) == ("S",)
    bx = g.input("bx", f32("B", "S", "D"))
    assert shape(bx @ w) == ("B", "S", "N")
    assert shape(g.ops.gemm(x, w, 1.0)) == ("S", "N")
    assert shape(g.ops.gemm(w, x, trans_a=True, trans_b=True)) == ("N", "S")
    assert shape(g.ops.sum(bx, axis=(1, 2))) == ("B",)
    assert shape(g.ops.max(bx, axis=1, keepdims=True)) == ("B", "1", "D")
    assert shape(g.ops.mean(bx)) == ()
    assert shape(g.ops.argmax(bx, axis=-1)) == ("B", "S")
    assert g.ops.argmax(bx, axis=-1).dtype == "i32"
    assert shape(g.ops.log_softmax(bx, axis=1)) == ("B", "S", "D")
    assert shape(g.ops.rms_norm(bx, axes=2)) == ("B", "S", "D")
    assert shape(g.ops.permute(bx, axes=(2, 0, 1))) == ("D", "B", "S")
    node = g._nodes[-1]
    assert dict(node.attrs)["p0"] in range(4)  # the convention's attributes are recorded


def test_mismatch_names_both_tensors_and_dims(g):
    a = g.input("a", f32("batch", "vector_width"))
    b = g.input("b", f32("batch", "vw"))
    with pytest.raises(GraphError) as err:
        g.ops.add(a, b)
    msg = str(err.value)
    assert "a=a" in msg and "b=b" in msg and "vector_width" in msg and "vw" in msg
    w = g.input("w", f32(5, "N"))
    with pytest.raises(GraphError, match=r"dim K is vector_width in a .* but 5 in b"):
        g.ops.matmul(a, w)
    gamma = g.input(
        "gamma",
        f32(
            "E",
        ),
    )
    with pytest.raises(GraphError, match=r"gamma .*normalized shape"):
        g.ops.layer_norm(a, gamma)


def test_refusals_are_clear(g):
    x = g.input("x", f32("A", "B", "C"))
    with pytest.raises(GraphError, match=r"'take_along_axis'.*not supported in graphs yet"):
        g.ops.take_along_axis(x, x)
    with pytest.raises(GraphError, match="no op 'nope'"):
        g.ops.nope(x)
    with pytest.raises(GraphError, match="more than one launch"):
        g.ops.sum(x, axis=(0, 2))
    h = g.input("h", TensorType("f16", ("A", "B", "C")))
    with pytest.raises(GraphError, match="do not promote"):
        g.ops.add(x, h)
    with pytest.raises(GraphError, match="unknown keyword 'axs'"):
        g.ops.softmax(x, axs=1)
    with pytest.raises(GraphError, match="graph values"):
        g.ops.exp(np.zeros(3, np.float32))
    with pytest.raises(GraphError, match="belongs to graph"):
        g.ops.exp(Graph("other").input("y", f32(3)))
    m = g.input("m", f32(2, 3))
    n = g.input("n", f32(2, 4))
    with pytest.raises(GraphError, match=r"batch dims .* do not broadcast|do not broadcast"):
        g.ops.matmul(g.input("p", f32(3, 2, 3)), g.input("q", f32(2, 3, 4)))
    with pytest.raises(GraphError, match="exists already"):
        g.input("x", f32(1))
    with pytest.raises(GraphError, match="no outputs"):
        g.ir()
    del m, n


def test_reshape_and_rebind_record_guards(g):
    x = g.input("x", f32("S", "D"))
    r = g.reshape(x, ("S", "H", "hd"))
    assert shape(r) == ("S", "H", "hd")
    assert [str(gd.lhs) + "==" + str(gd.rhs) for gd in g._guards] == ["D==H*hd"]
    rb = g.rebind(x, ("S", "E"))
    assert shape(g.ops.exp(rb)) == ("S", "E")
    with pytest.raises(GraphError, match="6 is not 5"):
        g.reshape(g.input("c", f32(2, 3)), (5,))


def test_many_symbolic_axes_within_the_index_range(g):
    # four symbolic axes and a literal 64 pass 2^31 with the readable primes: retried smaller
    x = g.input("x", f32("B", "H", "S", 64))
    y = g.ops.matmul(x, g.ops.permute(x, axes=(0, 1, 3, 2)))
    assert shape(y) == ("B", "H", "S", "S")
    assert shape(g.ops.softmax(y)) == ("B", "H", "S", "S")


def test_numpy_options_are_plain_data(g):
    x = g.input("x", f32("A", "B"))
    g.ops.sum(x, axis=[np.int64(1)], keepdims=np.bool_(True))
    assert g._nodes[-1].options == (("axis", (1,)), ("keepdims", True))
    with pytest.raises(GraphError, match="keepdims must be True or False"):
        g.ops.sum(x, axis=1, keepdims="yes")
