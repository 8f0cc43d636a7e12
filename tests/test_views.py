"""Views without copies (issue 35 point 4): device arrays with an offset or strides enter eager
calls and compiled models in place where a kernel can read them (their layout, a sub-buffer at
an aligned offset), copied otherwise, and explain says which. Every result is checked against
NumPy; launches and buffer copies are counted to show that the in-place paths copy nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest
from clforge.generated import ops

import clforge
from clforge import Graph, TensorType
from clforge.call import views
from clforge.call.dispatcher import dispatcher

rng = np.random.default_rng(35)


def rt():
    return dispatcher().runtime


def floats_per_alignment() -> int:
    return views.alignment(rt()) // 4  # 32 on PoCL's CPU device (1024 bits)


def dev(host: np.ndarray) -> cla.Array:
    return cla.to_device(rt().queue, np.ascontiguousarray(host))


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts kernel launches and buffer copies (clforge calls pyopencl's module functions)."""
    counts: Counter[str] = Counter()
    launch, copy = cl.enqueue_nd_range_kernel, cl.enqueue_copy

    def counted_launch(*args, **kwargs):  # type: ignore[no-untyped-def]
        counts["kernels"] += 1
        return launch(*args, **kwargs)

    def counted_copy(*args, **kwargs):  # type: ignore[no-untyped-def]
        counts["copies"] += 1
        return copy(*args, **kwargs)

    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", counted_launch)
    monkeypatch.setattr(cl, "enqueue_copy", counted_copy)
    yield counts


def close(got: cla.Array | np.ndarray, want: np.ndarray) -> None:
    host = got.get() if isinstance(got, cla.Array) else got
    np.testing.assert_allclose(host, want, rtol=1e-5, atol=1e-5)


# --- eager calls ----------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [1, 2, 7, 13])
def test_row_slices_at_aligned_offsets_are_read_in_place(rows: int, enqueued) -> None:
    """Two views of one buffer in one call (a fused output split along its first axis), each
    starting on the alignment: a sub-buffer each, the add's one kernel, no copy; cold and warm
    (the warm call replays the memoized recipe on the new sub-buffers)."""
    width = 3 * floats_per_alignment()
    host = rand(2 * rows + 1, width)
    whole = dev(host)
    for _ in range(2):
        enqueued.clear()
        got = ops.add(whole[:rows], whole[rows : 2 * rows])
        assert enqueued == {"kernels": 1}
        close(got, host[:rows] + host[rows : 2 * rows])
    other = rand(2 * rows + 1, width)  # the same key on another buffer: its own values
    close(ops.add(dev(other)[:rows], dev(other)[rows : 2 * rows]), other[:rows] + other[rows:-1])


@pytest.mark.parametrize(("rows", "width", "start"), [(1, 13, 1), (4, 13, 3), (5, 7, 2)])
def test_row_slices_at_unaligned_offsets_are_copied_once(rows, width, start, enqueued) -> None:
    host = rand(start + rows, width)
    view = dev(host)[start:]
    enqueued.clear()
    got = ops.exp(view)
    assert enqueued == {"kernels": 1, "copies": 1}
    close(got, np.exp(host[start:]))
    note = clforge.explain("exp", view).views[0]
    assert "copied by one buffer copy" in note and f"offset {start * width * 4}" in note


def test_a_transposed_matrix_is_a_col_major_operand_of_matmul(enqueued) -> None:
    a, b = rand(5, 7), rand(11, 7)
    da, db = dev(a), dev(b)
    plain = ops.matmul(da, db.T)  # warms the instance; counts below are of the next calls
    enqueued.clear()
    got = ops.matmul(da, db.T)
    assert enqueued["copies"] == 0
    close(got, a @ b.T)
    close(plain, a @ b.T)
    (note,) = clforge.explain("matmul", da, db.T).views
    assert note.endswith("read in place, col-major")


def test_a_transposed_matrix_at_an_aligned_offset_is_in_place_for_gemm(enqueued) -> None:
    """A block of rows starting on the alignment, transposed: col-major at an offset, a
    sub-buffer as gemm's col-major a; nothing copied."""
    k = floats_per_alignment()
    host = rand(3 + 7, k)  # rows 3.. of width k: offset 3 * k floats, aligned
    b = rand(7, 5)
    view, db = dev(host)[3:].T, dev(b)  # view: (k, 7), col-major
    ops.gemm(view, db)  # cold: fills the omitted bias (one upload)
    enqueued.clear()
    got = ops.gemm(view, db)
    assert enqueued == {"kernels": 1}
    close(got, host[3:].T @ b)
    (note,) = clforge.explain("gemm", view, db, None).views
    assert "through a sub-buffer" in note


@pytest.mark.parametrize(
    ("rows", "cols", "lo", "hi"), [(2, 5, 1, 3), (7, 11, 3, 10), (13, 96, 32, 64)]
)
def test_column_slices_are_gathered(rows, cols, lo, hi, enqueued) -> None:
    """A column slice (qkv[:, D:2D]) has a row stride no kernel takes: one gather kernel copies
    it row-major, and explain says so."""
    host = rand(rows, cols)
    view = dev(host)[:, lo:hi]
    enqueued.clear()
    got = ops.add(view, view)
    assert enqueued == {"kernels": 3}  # a gather per argument, the add
    close(got, 2 * host[:, lo:hi])
    (note,) = clforge.explain("add", view, dev(host[:, lo:hi])).views
    assert "copied into a row-major array by a gather kernel" in note
    assert f"strides {(cols * 4, 4)}" in note


def test_a_transpose_into_an_op_that_reads_only_row_major_is_gathered() -> None:
    host = rand(6, 5)
    close(ops.softmax(dev(host).T, axis=-1), _softmax(host.T))


def test_heads_of_a_fused_projection_feed_attention() -> None:
    """q, k and v as the three blocks of one [3, B, H, S, D] buffer: whole blocks at offsets,
    sub-buffers where a block's size is a multiple of the alignment, copied where it is not."""
    for s, d in ((8, 16), (5, 3)):
        host = rand(3, 1, 2, s, d)
        qkv = dev(host)
        got = ops.attention(qkv[0], qkv[1], qkv[2], causal=True)
        close(got, _attention(host[0], host[1], host[2]))
        notes = clforge.explain("attention", qkv[0], qkv[1], qkv[2], None).views
        aligned = (2 * s * d * 4) % views.alignment(rt()) == 0
        assert len(notes) == 2  # k and v (q starts at offset 0)
        assert [("through a sub-buffer" in n) for n in notes] == [aligned, aligned], notes


def test_a_slice_of_an_eager_result_from_the_pool() -> None:
    """Outputs come from a memory pool whose buffers have no sub-regions of their own: the view
    is taken through the buffer's handle."""
    k = floats_per_alignment()
    host = rand(4, k)
    first = ops.add(dev(host), dev(host))  # a pooled buffer
    close(ops.exp(first[1:3]), np.exp(2 * host[1:3]))


def test_explain_describes_and_copies_nothing(enqueued) -> None:
    host = rand(7, 13)
    view = dev(host)[:, 2:9]
    enqueued.clear()
    e = clforge.explain("exp", view)
    assert enqueued == {} and e.as_dict()["views"] == list(e.views)
    assert "view: exp: input 'x'" in str(e)


# --- compiled models ------------------------------------------------------------------------


def _model():
    g = Graph("views")
    x = g.input("x", TensorType("f32", ("S", "D")))
    w = g.input("w", TensorType("f32", ("D", "N")))
    g.output(g.ops.softmax(g.ops.matmul(x, w), axis=-1))
    return g.compile()


def test_model_inputs_that_are_views(enqueued) -> None:
    model = _model()
    k = floats_per_alignment()
    x, w = rand(9, k), rand(k, 3)
    dw = dev(w)
    close(model(x[2:7], w), _softmax(x[2:7] @ w))
    # aligned row slice: a sub-buffer, the model's kernels only
    dx = dev(x)
    enqueued.clear()
    got = model(dx[2:7], dw)
    assert enqueued == {"kernels": sum(len(s.launches) for s in model.cache.values())}
    close(got, _softmax(x[2:7] @ w))
    assert "through a sub-buffer at byte" in model.views["x"]
    assert "through a sub-buffer" in model.explain(file=None)
    # unaligned: one buffer copy, said so
    x2, w2 = rand(6, 13), rand(13, 3)
    dx2, dw2 = dev(x2), dev(w2)
    enqueued.clear()
    got = model(dx2[1:], dw2)
    assert enqueued["copies"] == 1 and "copied by one buffer copy" in model.views["x"]
    close(got, _softmax(x2[1:] @ w2))
    # a transposed input: gathered row-major
    xt = rand(k, 4)
    close(model(dev(xt).T, dw), _softmax(xt.T @ w))
    assert "gather kernel" in model.views["x"]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    return _softmax(s) @ v


# --- slices of graph values -----------------------------------------------------------------


def _halves_model():
    """x [2*S, D] split along axis 0 into two halves, added: the second half starts at byte
    S*D*4 (in place where that is aligned), the first at 0."""
    g = Graph("halves")
    x = g.input("x", TensorType("f32", ("2*S", "D")))
    g.output(g.ops.add(g.slice(x, 0, "S"), g.slice(x, "S", "2*S")))
    return g.compile()


@pytest.mark.parametrize(("s", "d"), [(1, 32), (4, 8), (3, 5), (7, 13)])
def test_a_graph_input_split_along_its_first_axis(s, d, enqueued) -> None:
    model = _halves_model()
    host = rand(2 * s, d)
    dx = dev(host)
    aligned = (s * d * 4) % views.alignment(rt()) == 0
    for _ in range(2):  # cold (specializes), then warm
        enqueued.clear()
        got = model(dx)
        assert enqueued == {"kernels": 1 if aligned else 2}  # the add (and a gather)
        close(got, host[:s] + host[s:])
    (spec,) = model.cache.values()
    (note,) = spec.views
    assert ("through a sub-buffer" in note) == aligned, note
    assert ("gathered" in note) == (not aligned), note
    assert note in model.explain(file=None)
    close(model(host), host[:s] + host[s:])  # NumPy in, NumPy out


@pytest.mark.parametrize(("s", "h", "hd"), [(1, 1, 1), (5, 2, 3), (8, 4, 8)])
def test_a_fused_qkv_projection_split_into_heads(s, h, hd) -> None:
    """qkv = x @ w [S, 3*D]; q, k, v = its column thirds (a row stride of 3*D: gathered before
    their consumers, said so), q and k seen as heads [S, H, hd] by a reshape of the strided
    view; scores per head from a matmul of the gathered heads."""
    d = h * hd
    g = Graph("qkv")
    x = g.input("x", TensorType("f32", ("S", d)))
    w = g.constant(rand(d, 3 * d), "w")
    qkv = g.ops.matmul(x, w)
    q = g.ops.permute(g.reshape(g.slice(qkv, 0, d, axis=1), ("S", h, hd)), axes=(1, 0, 2))
    k = g.ops.permute(g.reshape(g.slice(qkv, d, 2 * d, axis=1), ("S", h, hd)), axes=(1, 2, 0))
    v = g.slice(qkv, 2 * d, 3 * d, axis=1)
    g.output(g.ops.matmul(q, k), g.ops.exp(v))
    model = g.compile()
    host = rand(s, d)
    whole = host @ model.plan.ir.constants[w.id]
    qh = whole[:, :d].reshape(s, h, hd).transpose(1, 0, 2)
    kh = whole[:, d : 2 * d].reshape(s, h, hd).transpose(1, 2, 0)
    scores, ev = model(host)
    close(scores, qh @ kh)
    close(ev, np.exp(whole[:, 2 * d :]))
    (spec,) = model.cache.values()
    if s > 1 and d > 1:
        assert sum("not row-major" in n for n in spec.views) == 3, spec.views


def test_slices_of_an_intermediate_and_as_outputs() -> None:
    """Slices of a slot (sub-buffers made once per specialization where aligned) and a slice
    that is itself an output (a new array)."""
    k = floats_per_alignment()
    g = Graph("mid")
    x = g.input("x", TensorType("f32", ("R", k)))
    y = g.ops.exp(x)  # a slot: its slices' sub-buffers are made with the specialization
    g.output(g.ops.mul(g.slice(y, 1, "R"), g.slice(y, 0, 1)))
    model = g.compile()
    host = rand(5, k)
    e = np.exp(host)
    close(model(host), e[1:] * e[:1])
    close(model(dev(host)), e[1:] * e[:1])
    (spec,) = model.cache.values()
    assert spec.subs == ()  # nothing made per call
    assert any(f"through a sub-buffer at byte {4 * k}" in n for n in spec.views), spec.views

    g = Graph("out")
    x = g.input("x", TensorType("f32", ("R", 3)))
    g.output(g.slice(g.ops.exp(x), 1, 3), g.slice(g.ops.neg(x), 2, "R"))
    model = g.compile()
    host = rand(5, 3)
    for given in (host, dev(host)):
        part, rest = model(given)
        close(part, np.exp(host[1:3]))
        close(rest, -host[2:])


def test_slice_capture_errors_and_guards(tmp_path) -> None:
    g = Graph("bad")
    x = g.input("x", TensorType("f32", ("S", 4)))
    with pytest.raises(clforge.errors.GraphError, match=r"stop - start is -1 < 0"):
        g.slice(x, 2, 1, axis=1)
    with pytest.raises(clforge.errors.GraphError, match=r"the axis's size - stop is -1 < 0"):
        g.slice(x, 0, 5, axis=1)
    with pytest.raises(clforge.errors.GraphError, match=r"axis 2 is not an axis of a rank-2"):
        g.slice(x, 0, 1, axis=2)
    g.output(g.ops.neg(g.slice(x, 1, "T")))
    with pytest.raises(clforge.errors.GraphError, match="dim T is bound by no graph input"):
        g.compile()
    # a symbolic bound is a guard, checked by a call
    g = Graph("guarded")
    x = g.input("x", TensorType("f32", ("S", "D")))
    n = g.input("n", TensorType("f32", ("H",)))
    g.output(g.ops.add(g.slice(x, 0, "H", axis=1), n))
    model = g.compile()
    close(model(rand(2, 5) * 0 + 1, np.arange(3, dtype=np.float32)), np.arange(3) + np.ones((2, 3)))
    with pytest.raises(clforge.errors.CallError, match=r"D \+ -1\*H|H"):
        model(rand(2, 3), rand(5))
    # saved and loaded: the slice is data
    g2 = Graph("saved")
    x2 = g2.input("x", TensorType("f32", ("S", 3)))
    g2.output(g2.ops.neg(g2.slice(x2, 2, "S")))
    path = tmp_path / "m.json"
    g2.compile().save(path)
    host = rand(6, 3)
    close(clforge.load(path)(host), -host[2:])


@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (5, 3, 7), (13, 17, 2)])
def test_transposes_feeding_matmul_and_gemm_are_read_col_major(m, k, n, enqueued) -> None:
    """A 2-d permute feeding gemm toggles its trans flag, a 2-d matmul of a transpose becomes
    gemm with it: the permutes' kernels go (the gemms' own launches only), and simplify says
    so."""
    g = Graph("transposes")
    a = g.input("a", TensorType("f32", ("M", "K")))
    w = g.input("w", TensorType("f32", ("N", "K")))
    g.output(
        g.ops.gemm(a, g.ops.permute(w, axes=(1, 0)), alpha=0.5),
        g.ops.matmul(g.ops.permute(a), a),
    )
    model = g.compile()
    ha, hw = rand(m, k), rand(n, k)
    da, dw = dev(ha), dev(hw)
    model(da, dw)  # specializes (fills gemm's omitted bias)
    enqueued.clear()
    first, second = model(da, dw)
    (spec,) = model.cache.values()
    assert [p.step.op for p in spec.steps] == ["gemm", "gemm"]  # no permute launched
    assert enqueued == {"kernels": sum(len(p.plan.launches) for p in spec.steps)}
    close(first, 0.5 * ha @ hw.T)
    close(second, ha.T @ ha)
    log = "\n".join(model.plan.simplified)
    assert "read permute as trans_b" in log
    assert "read permute_1 as trans_a" in log and "the 2-d matmul becomes gemm" in log
    assert [n.op for n in model.plan.ir.nodes] == ["gemm", "gemm"]


def test_empty_views_and_calls_by_canonical_names() -> None:
    """An empty view at an offset reads nothing: no refusal. A call by canonical names
    (dispatcher().call) binds buffers as they are, so it still refuses an offset, naming
    clforge.ops as the way that takes views."""
    whole = dev(rand(6, 4))
    assert ops.add(whole[5:5], whole[5:5]).shape == (0, 4)
    with pytest.raises(clforge.CallError, match=r"offset \(16 bytes\).*clforge\.ops"):
        dispatcher().call("exp", {"x": whole.reshape(24)[4:]})
    close(ops.exp(whole.reshape(24)[4:]), np.exp(whole.get().reshape(24)[4:]))


@pytest.mark.parametrize("width", [32, 5])
def test_slices_of_a_constant(width: int) -> None:
    """A constant's rows from 2 on: a sub-buffer of the constant made once (aligned), or
    gathered before the step (5 floats a row: 40 bytes, off the alignment)."""
    w = rand(6, width)
    g = Graph("const")
    x = g.input("x", TensorType("f32", (4, width)))
    g.output(g.ops.add(x, g.slice(g.constant(w, "w"), 2, 6)))
    model = g.compile()
    host = rand(4, width)
    close(model(host), host + w[2:])
    (spec,) = model.cache.values()
    (note,) = spec.views
    aligned = (2 * width * 4) % views.alignment(rt()) == 0
    assert ("through a sub-buffer" in note) == aligned and ("gathered" in note) != aligned
