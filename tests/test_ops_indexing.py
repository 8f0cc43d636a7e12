"""The gathers through their eager entry points: take_along_axis as NumPy's, embedding as
PyTorch's; index arrays of any integer dtype from NumPy (checked, then converted to i32), i32
device arrays (clamped by the kernels, as documented); bad calls rejected before launch."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest
from clforge.generated import ops

from clforge.call.dispatcher import dispatcher
from clforge.call.selection import select
from clforge.device.profile_files import find_profile
from clforge.errors import CallError
from clforge.registry import loader as registry_mod

REG = registry_mod.default()
rng = np.random.default_rng(41)


def _q():  # type: ignore[no-untyped-def]
    return dispatcher().runtime.queue


# --- take_along_axis ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize(
    ("shape", "axis"), [((7,), 0), ((5, 9), 1), ((5, 9), 0), ((3, 4, 6), 1), ((2, 3, 4, 5), -1)]
)
def test_take_along_axis_with_argsort_indices(dtype: type, shape: tuple, axis: int) -> None:
    x = (rng.standard_normal(shape) * 100).astype(dtype)
    order = np.argsort(x, axis=axis)  # int64, as NumPy makes them
    got = ops.take_along_axis(x, order, axis=axis)
    np.testing.assert_array_equal(got, np.take_along_axis(x, order, axis=axis))
    top = order.take(range(-2, 0), axis=axis)  # fewer indices than elements along the axis
    np.testing.assert_array_equal(
        ops.take_along_axis(x, top, axis=axis), np.take_along_axis(x, top, axis=axis)
    )


def test_take_along_axis_semantics() -> None:
    x = rng.standard_normal((4, 6)).astype(np.float32)
    neg = rng.integers(-6, 6, size=(4, 9)).astype(np.int32)  # negative: from the end
    want = np.take_along_axis(x, neg, 1)
    np.testing.assert_array_equal(ops.take_along_axis(x, neg, axis=1), want)
    col = rng.integers(0, 4, size=(2, 1))  # broadcast along axis 1, as NumPy does
    want = np.take_along_axis(x, col, 0)
    np.testing.assert_array_equal(ops.take_along_axis(x, col, axis=0), want)
    flat = np.array([23, 0, -1, 5])
    np.testing.assert_array_equal(
        ops.take_along_axis(x, flat, axis=None), np.take_along_axis(x, flat, axis=None)
    )
    empty = np.zeros((4, 0), np.int32)
    assert ops.take_along_axis(x, empty, axis=1).shape == (4, 0)


def test_take_along_axis_on_device_clamps_out_of_range_indices() -> None:
    x = rng.standard_normal((3, 5)).astype(np.float32)
    ind = np.array([[0, 4, -1], [7, -9, 2], [100, -100, 3]], np.int32)
    got = ops.take_along_axis(cla.to_device(_q(), x), cla.to_device(_q(), ind), axis=1)
    assert isinstance(got, cla.Array)
    wrapped = np.where(ind < 0, ind + 5, ind)
    np.testing.assert_array_equal(got.get(), np.take_along_axis(x, np.clip(wrapped, 0, 4), 1))


# --- embedding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize("ishape", [(), (1,), (7,), (3, 5), (2, 0), (2, 3, 4)])
def test_embedding_like_pytorch(dtype: type, ishape: tuple) -> None:
    w = (rng.standard_normal((11, 6)) * 10).astype(dtype)
    ind = rng.integers(0, 11, size=ishape)
    got = ops.embedding(ind, w)
    assert got.shape == (*ishape, 6) and got.dtype == dtype
    np.testing.assert_array_equal(got, w[ind])


def test_embedding_on_device_clamps_out_of_range_indices() -> None:
    w = rng.standard_normal((5, 3)).astype(np.float32)
    ind = np.array([0, 4, 5, -1, 99], np.int32)
    got = ops.embedding(cla.to_device(_q(), ind), cla.to_device(_q(), w))
    np.testing.assert_array_equal(got.get(), w[np.clip(ind, 0, 4)])


# --- bad calls ------------------------------------------------------------------------------------

F32 = np.float32


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: ops.take_along_axis(np.ones((3, 5), F32), np.array([[0, 5]]), axis=1),
            "take_along_axis: index 5 in indices (shape (3, 2)) is out of range for axis 1 of x "
            "(size 5) (valid: -5 to 4)",
        ),
        (
            lambda: ops.take_along_axis(np.ones((3, 5), F32), np.array([[0, -6]]), axis=1),
            "take_along_axis: index -6 in indices (shape (3, 2)) is out of range for axis 1 of x "
            "(size 5) (valid: -5 to 4)",
        ),
        (
            lambda: ops.take_along_axis(np.ones((3, 5), F32), np.zeros(3, np.int32), axis=1),
            "take_along_axis: indices (shape (3,)) must have the rank of x (shape (3, 5))",
        ),
        (
            lambda: ops.take_along_axis(np.ones((3, 5), F32), np.zeros((2, 5), np.int32), axis=1),
            "take_along_axis: indices (shape (2, 5)) and x (shape (3, 5)) do not broadcast off "
            "axis 1",
        ),
        (
            lambda: ops.take_along_axis(np.ones((3, 5), F32), np.zeros((3, 1), F32), axis=1),
            "take_along_axis: indices must be an integer array (i32), got dtype float32 (shape "
            "(3, 1))",
        ),
        (
            lambda: ops.take_along_axis(np.ones((3, 5), F32), np.zeros((3, 1), np.int32), axis=2),
            "take_along_axis: axis 2 is out of range for an input of rank 2",
        ),
        (
            lambda: ops.take_along_axis(np.ones((3, 0), F32), np.zeros((3, 1), np.int32), axis=1),
            "take_along_axis: indices (shape (3, 1)) indexes axis 1 of x (size 0), which is empty",
        ),
        (
            lambda: ops.embedding(np.array([1, 11]), np.ones((11, 4), F32)),
            "embedding: index 11 in indices (shape (2,)) is out of range for weight with 11 rows "
            "(shape (11, 4)) (valid: 0 to 10)",
        ),
        (
            lambda: ops.embedding(np.array([-1]), np.ones((11, 4), F32)),
            "embedding: index -1 in indices (shape (1,)) is out of range for weight with 11 rows "
            "(shape (11, 4)) (valid: 0 to 10)",
        ),
        (
            lambda: ops.embedding(np.array([0]), np.ones(4, F32)),
            "embedding: weight has rank 1 (shape (4,)); it must be (num_embeddings, embedding_dim)",
        ),
        (
            lambda: ops.embedding(np.array([True]), np.ones((2, 4), F32)),
            "embedding: indices must be an integer array (i32), got dtype bool (shape (1,))",
        ),
    ],
)
def test_bad_calls(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CallError) as err:
        call()
    assert str(err.value) == message


def test_device_indices_must_be_i32() -> None:
    w = cla.to_device(_q(), np.ones((4, 2), F32))
    with pytest.raises(CallError) as err:
        ops.embedding(cla.to_device(_q(), np.zeros(3, np.int64)), w)
    assert str(err.value) == (
        "embedding: indices is a device array of dtype int64 (shape (3,)); device indices must "
        "be i32"
    )


@pytest.mark.parametrize("profile", ["nvidia-h100", "amd-mi250x", "intel-max-1100", "pocl-cpu"])
def test_dispatch_on_shipped_profiles(profile: str) -> None:
    want = "cpu" if profile == "pocl-cpu" else "gpu"
    for op, dims in (
        ("take_along_axis", {"B": 64, "R": 1000, "I": 1, "J": 10}),
        ("embedding", {"M": 4096, "V": 32000, "D": 512}),
    ):
        sel = select(REG, find_profile(profile), op, "f32", {}, dims)
        assert sel.chosen is not None and sel.chosen.instance == f"{op}__{want}__f32"
