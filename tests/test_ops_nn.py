"""The neural-network layers through their eager entry points, as PyTorch defines them:
batch_norm for inference; bad calls rejected before launch with the op, the argument and the
sizes named; the dispatcher's choice on the shipped profiles."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl.array as cla
import pytest

from generated import ops
from generator.call.dispatcher import dispatcher
from generator.call.selection import select
from generator.device.profile_files import find_profile
from generator.errors import CallError
from generator.registry import loader as registry_mod

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
    ],
)
def test_bad_calls(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CallError) as err:
        call()
    assert str(err.value) == message


# --- the dispatcher's choice on each shipped profile -----------------------------------------

CHOICES = {
    "batch_norm": ({"N": 8, "C": 64, "S": 3136}, {"pocl-cpu": "cpu"}),
}


@pytest.mark.parametrize("op", sorted(CHOICES))
@pytest.mark.parametrize("profile", ["nvidia-h100", "amd-mi250x", "intel-max-1100", "pocl-cpu"])
def test_dispatch_on_shipped_profiles(op: str, profile: str) -> None:
    dims, cpu = CHOICES[op]
    sel = select(REG, find_profile(profile), op, "f32", {}, dims)
    want = cpu.get(profile, "gpu")
    assert sel.chosen is not None and sel.chosen.instance == f"{op}__{want}__f32"
