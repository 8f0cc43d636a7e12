"""The neural-network layers through their eager entry points, as PyTorch defines them:
batch_norm for inference, max_pool2d and avg_pool2d; bad calls rejected before launch with the
op, the argument and the sizes named; the dispatcher's choice on the shipped profiles."""

from __future__ import annotations

from typing import Any

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
rng = np.random.default_rng(31)
TOL = {np.float32: 2e-5, np.float64: 1e-12, np.float16: 3e-3}


def _close(got: Any, want: np.ndarray, dtype: Any) -> None:
    assert got.shape == want.shape and got.dtype == np.dtype(dtype)
    tol = TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=10 * tol, atol=10 * tol)


# --- batch_norm -------------------------------------------------------------------------------


def _np_batch_norm(x, mean, var, w, b, eps):  # type: ignore[no-untyped-def]
    shape = (1, -1) + (1,) * (x.ndim - 2)
    x = x.astype(np.float64)
    y = (x - mean.reshape(shape)) / np.sqrt(var.astype(np.float64).reshape(shape) + eps)
    return y * (1 if w is None else w.reshape(shape)) + (0 if b is None else b.reshape(shape))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 7), (2, 3, 5, 7), (1, 16, 3, 4, 5), (0, 3, 4)])
@pytest.mark.parametrize("given", ["none", "weight", "both"])
def test_batch_norm_like_pytorch(dtype: Any, shape: tuple, given: str) -> None:
    c = shape[1]
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    mean = rng.standard_normal(c).astype(dtype)
    var = (rng.random(c) + 0.1).astype(dtype)
    w = rng.standard_normal(c).astype(dtype) if given != "none" else None
    b = rng.standard_normal(c).astype(dtype) if given == "both" else None
    for eps in (1e-5, 0.5):
        got = ops.batch_norm(x, mean, var, w, b, eps=eps)
        _close(got, _np_batch_norm(x, mean, var, w, b, eps), dtype)


def test_batch_norm_on_device_arrays() -> None:
    q = dispatcher().runtime.queue
    x = rng.standard_normal((2, 6, 9, 9)).astype(np.float32)
    mean, var = rng.standard_normal(6).astype(np.float32), (rng.random(6) + 0.5).astype(np.float32)
    got = ops.batch_norm(*(cla.to_device(q, a) for a in (x, mean, var)))
    assert isinstance(got, cla.Array) and got.shape == x.shape
    _close(got.get(), _np_batch_norm(x, mean, var, None, None, 1e-5), np.float32)


# --- max_pool2d, avg_pool2d ------------------------------------------------------------------

POOL_CALLS = [
    ((2, 3, 8, 8), {"kernel_size": 2}),
    ((1, 2, 7, 9), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((1, 2, 7, 9), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ((2, 2, 13, 11), {"kernel_size": (3, 2), "stride": (2, 3), "ceil_mode": True}),
    ((1, 2, 11, 13), {"kernel_size": 3, "stride": 1, "padding": 1, "dilation": 2}),
    ((1, 4, 17, 31), {"kernel_size": (5, 3), "stride": (3, 2), "padding": (2, 1)}),
    ((3, 7, 9), {"kernel_size": 2, "stride": 1}),  # unbatched (C, H, W)
    ((0, 3, 6, 6), {"kernel_size": 2}),
    ((1, 1, 1, 1), {"kernel_size": 1}),
]


def _pool_ref(kind: str, x: np.ndarray, kernel_size, stride=None, padding=0, dilation=1,  # type: ignore[no-untyped-def]
              ceil_mode=False, count_include_pad=True, divisor_override=None):  # fmt: skip
    from clforge.references import nn

    def pair(v):  # type: ignore[no-untyped-def]
        return (v, v) if isinstance(v, int) else v

    (kh, kw), (sh, sw) = pair(kernel_size), pair(kernel_size if stride is None else stride)
    (ph, pw), (dh, dw) = pair(padding), pair(dilation)
    attrs = {"kernel_h": kh, "kernel_w": kw, "stride_h": sh, "stride_w": sw, "pad_h": ph,
             "pad_w": pw, "dil_h": dh, "dil_w": dw, "ceil_mode": int(ceil_mode),
             "count_include_pad": int(count_include_pad),
             "divisor_override": divisor_override or 0}  # fmt: skip
    x4 = x.astype(np.float64).reshape((1,) * (4 - x.ndim) + x.shape)
    y = nn.REFERENCES[f"{kind}_pool2d"].fn({"x": x4}, attrs)["y"]
    return y.reshape(y.shape[4 - x.ndim :])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize(("shape", "options"), POOL_CALLS)
def test_max_pool2d(dtype: Any, shape: tuple, options: dict) -> None:
    x = rng.standard_normal(shape).astype(dtype)
    _close(ops.max_pool2d(x, **options), _pool_ref("max", x, **options), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize(("shape", "options"), POOL_CALLS)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d(dtype: Any, shape: tuple, options: dict, count_include_pad: bool) -> None:
    x = rng.standard_normal(shape).astype(dtype)
    got = ops.avg_pool2d(x, **options, count_include_pad=count_include_pad)
    _close(got, _pool_ref("avg", x, **options, count_include_pad=count_include_pad), dtype)


def test_pooling_worked_by_hand() -> None:
    """Values worked out by hand from PyTorch's definitions."""
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    np.testing.assert_array_equal(ops.max_pool2d(x, kernel_size=2), [[[[5, 7], [13, 15]]]])
    np.testing.assert_array_equal(ops.avg_pool2d(x, kernel_size=2), [[[[2.5, 4.5], [10.5, 12.5]]]])
    ones = np.ones((1, 1, 3, 3), np.float32)
    # each 3x3 window at stride 2, padding 1 holds 4 of the input's ones among 9 taps
    np.testing.assert_allclose(
        ops.avg_pool2d(ones, kernel_size=3, stride=2, padding=1), np.full((1, 1, 2, 2), 4 / 9)
    )
    np.testing.assert_array_equal(
        ops.avg_pool2d(ones, kernel_size=3, stride=2, padding=1, count_include_pad=False),
        np.ones((1, 1, 2, 2)),
    )
    np.testing.assert_array_equal(
        ops.avg_pool2d(ones, kernel_size=3, stride=2, padding=1, divisor_override=2),
        np.full((1, 1, 2, 2), 2.0),
    )
    # ceil_mode: 5 rows, windows of 2 at stride 2 give 3 rows (the last window has one row);
    # with padding 1 a fourth window would start in the right padding, and is dropped
    five = np.ones((1, 1, 5, 5), np.float32)
    assert ops.max_pool2d(five, kernel_size=2, ceil_mode=True).shape == (1, 1, 3, 3)
    assert ops.max_pool2d(five, kernel_size=2, padding=1, ceil_mode=True).shape == (1, 1, 3, 3)
    assert ops.max_pool2d(five, kernel_size=2).shape == (1, 1, 2, 2)
    # the last window of a ceil_mode row is clipped to the input: its divisor counts 1 tap
    np.testing.assert_array_equal(ops.avg_pool2d(five, kernel_size=2, ceil_mode=True), 1.0)
    nan = np.array([[[[1, np.nan], [3, 4]]]], np.float32)
    assert np.isnan(ops.max_pool2d(nan, kernel_size=2)).all()  # NaN propagates, as PyTorch's


def test_pooling_on_device_arrays() -> None:
    q = dispatcher().runtime.queue
    x = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    for kind in ("max", "avg"):
        got = getattr(ops, f"{kind}_pool2d")(cla.to_device(q, x), kernel_size=3, stride=2)
        assert isinstance(got, cla.Array)
        _close(got.get(), _pool_ref(kind, x, 3, 2), np.float32)


# --- bad calls ----------------------------------------------------------------------------------

F32 = np.float32


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: ops.batch_norm(np.ones(5, F32), np.ones(5, F32), np.ones(5, F32)),
            "batch_norm: input 'x' has rank 1 (shape (5,)); it must be (N, C) or (N, C, ...)",
        ),
        (
            lambda: ops.batch_norm(np.ones((2, 3, 4), F32), np.ones(4, F32), np.ones(3, F32)),
            "batch_norm: running_mean has shape (4,), expected (3,): one value per channel of "
            "x (shape (2, 3, 4))",
        ),
        (
            lambda: ops.batch_norm(
                np.ones((2, 3), F32), np.ones(3, F32), np.ones(3, F32), np.ones((3, 1), F32)
            ),
            "batch_norm: weight has shape (3, 1), expected (3,): one value per channel of x "
            "(shape (2, 3))",
        ),
        (
            lambda: ops.max_pool2d(np.ones((1, 1, 4, 4), F32)),
            "max_pool2d: kernel_size is required (an int or an (h, w) pair)",
        ),
        (
            lambda: ops.max_pool2d(np.ones((4, 4), F32), kernel_size=2),
            "max_pool2d: input 'x' has rank 2 (shape (4, 4)); it must be (N, C, H, W) or (C, H, W)",
        ),
        (
            lambda: ops.avg_pool2d(np.ones((1, 1, 4, 4), F32), kernel_size=2, padding=2),
            "avg_pool2d: padding must be at most half of the kernel size (PyTorch's rule) (2 * "
            "pad_h <= kernel_h and 2 * pad_w <= kernel_w is false for kernel_h=2, kernel_w=2, "
            "pad_h=2, pad_w=2)",
        ),
        (
            lambda: ops.max_pool2d(np.ones((1, 1, 2, 9), F32), kernel_size=3),
            "max_pool2d: the output would be empty: the padded input is smaller than the dilated "
            "window (OH >= 1 and OW >= 1 is false for OH=0, OW=3)",
        ),
        (
            lambda: ops.max_pool2d(np.ones((1, 1, 4, 4), F32), kernel_size=2, stride=0),
            "max_pool2d: strides must be at least 1 (stride_h >= 1 and stride_w >= 1 is false "
            "for stride_h=0, stride_w=0)",
        ),
        (
            lambda: ops.avg_pool2d(np.ones((1, 1, 4, 4), F32), kernel_size=2, divisor_override=0),
            "avg_pool2d: divisor_override must be a nonzero int or None, got 0",
        ),
        (
            lambda: ops.max_pool2d(np.ones((1, 1, 4, 4), F32), kernel_size=(2, 2, 2)),
            "max_pool2d: kernel_size must be an int or a pair of ints, got (2, 2, 2)",
        ),
        (
            lambda: ops.max_pool2d(np.ones((1, 1, 4, 4), F32), kernel_size=2, ceil_mode=1),
            "max_pool2d: ceil_mode must be True or False, got 1 (int)",
        ),
    ],
)
def test_bad_calls(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CallError) as err:
        call()
    assert str(err.value) == message


# --- the dispatcher's choice on each shipped profile -----------------------------------------

POOL = {"N": 1, "C": 64, "H": 56, "W": 56, "OH": 28, "OW": 28}
CHOICES = {
    "batch_norm": ({"N": 8, "C": 64, "S": 3136}, {"pocl-cpu": "cpu"}),
    "max_pool2d": (POOL, {"pocl-cpu": "cpu"}),
    "avg_pool2d": (POOL, {"pocl-cpu": "cpu"}),
}


@pytest.mark.parametrize("op", sorted(CHOICES))
@pytest.mark.parametrize("profile", ["nvidia-h100", "amd-mi250x", "intel-max-1100", "pocl-cpu"])
def test_dispatch_on_shipped_profiles(op: str, profile: str) -> None:
    dims, cpu = CHOICES[op]
    sel = select(REG, find_profile(profile), op, "f32", {}, dims)
    want = cpu.get(profile, "gpu")
    assert sel.chosen is not None and sel.chosen.instance == f"{op}__{want}__f32"
