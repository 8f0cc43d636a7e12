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
