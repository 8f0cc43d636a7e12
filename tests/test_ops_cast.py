"""The casts through the eager entry points: every pair of clforge dtypes, element for element
as NumPy's astype where NumPy defines the result, the documented saturating float-to-int
conversion where it does not, any shape, device arrays."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest
from clforge.generated import ops

from clforge.call.dispatcher import dispatcher
from clforge.errors import CallError

rng = np.random.default_rng(23)
DTYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i32": np.int32}


def _sample(dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    """Values every conversion must get right: halfway cases, large magnitudes, signed zeros
    (no NaN, no value beyond i32 for an i32 destination: NumPy leaves those undefined)."""
    if np.issubdtype(dtype, np.integer):
        v = rng.integers(-(2**31), 2**31 - 1, size=shape, endpoint=True)
        v.flat[::3] = rng.integers(-70000, 70000, size=v.flat[::3].shape)
        return v.astype(dtype)
    v = rng.standard_normal(shape) * 10.0 ** rng.integers(-1, 9, size=shape)
    v.flat[:8] = [0.5, -0.5, 2.5, -3.5, 65519.0, 65520.0, -0.0, 1 + 2.0**-11][: v.size]
    with np.errstate(over="ignore"):  # beyond f16: infinities
        return v.astype(dtype)


@pytest.mark.parametrize("src", sorted(DTYPES))
@pytest.mark.parametrize("dst", sorted(DTYPES))
@pytest.mark.parametrize("shape", [(1,), (13,), (3, 7, 11), (0, 4), (8195,)])
def test_every_pair_as_numpy(src: str, dst: str, shape: tuple[int, ...]) -> None:
    x = _sample(DTYPES[src], shape)
    if dst == "i32" and src != "i32":  # NumPy's defined range: finite, within i32
        wide = x.astype(np.float64)
        x = np.where(np.isfinite(wide) & (np.abs(wide) < 2**31 - 128), x, 0).astype(x.dtype)
    with np.errstate(over="ignore"):
        want = x.astype(DTYPES[dst])
    got = getattr(ops, f"cast_{dst}")(x)
    assert got.dtype == DTYPES[dst] and got.shape == x.shape
    np.testing.assert_array_equal(got, want)
    assert (np.signbit(got) == np.signbit(want)).all()  # -0.0 stays -0.0


@pytest.mark.parametrize("src", ["f16", "f32", "f64"])
def test_float_to_i32_truncates_and_saturates(src: str) -> None:
    x = np.array([2.9, -2.9, 0.5, -0.5, np.nan, np.inf, -np.inf, 1e30, -1e30, 65504.0], np.float64)
    with np.errstate(over="ignore"):
        got = ops.cast_i32(x.astype(DTYPES[src]))
    imax, imin = 2**31 - 1, -(2**31)
    # f16 has no 1e30: it is inf there, which saturates the same way
    np.testing.assert_array_equal(got, [2, -2, 0, 0, 0, imax, imin, imax, imin, 65504])


def test_rounding_to_nearest_even_and_overflow() -> None:
    big = np.array([2**24 + 1, 2**24 + 3, 2**31 - 1, -(2**31)], np.int32)
    np.testing.assert_array_equal(ops.cast_f32(big), [2**24, 2**24 + 4, 2**31, -(2**31)])
    np.testing.assert_array_equal(
        ops.cast_f16(np.array([2049, 65519, 65520, -70000], np.int32)),
        np.array([2048, 65504, np.inf, -np.inf], np.float16),
    )
    # f64 to f16 rounds once: 1 + 2**-11 + 2**-40 is above the halfway point, so it rounds up
    # (via f32 it would round to the halfway point first, then to even: 1.0)
    x = np.array([1 + 2.0**-11 + 2.0**-40, 1e300], np.float64)
    np.testing.assert_array_equal(ops.cast_f16(x), np.array([1 + 2.0**-10, np.inf], np.float16))
    np.testing.assert_array_equal(ops.cast_f32(x), np.array([1 + 2.0**-11, np.inf], np.float32))


def test_device_arrays() -> None:
    q = dispatcher().runtime.queue
    x = _sample(np.float32, (5, 9))
    got = ops.cast_f64(cla.to_device(q, x))
    assert isinstance(got, cla.Array) and got.shape == (5, 9)
    np.testing.assert_array_equal(got.get(), x.astype(np.float64))


def test_bad_calls() -> None:
    with pytest.raises(CallError) as err:
        ops.cast_f32(np.ones(3, np.int64))
    assert str(err.value) == (
        "cast_f32: input 'x' has dtype int64, which clforge does not support (supported: f16, "
        "f32, f64, i32)"
    )
