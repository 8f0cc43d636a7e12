"""Warm eager calls on device arrays replay a memoized recipe: same results as a cold call,
for every calling convention, and the memo never applies to a different call."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest
from clforge.generated import ops

from clforge.call.dispatcher import dispatcher
from clforge.runtime.transfer import to_host

rng = np.random.default_rng(11)


def dev(*shape: int, order: str = "C") -> cla.Array:
    host = rng.standard_normal(shape).astype(np.float32)
    return cla.to_device(dispatcher().runtime.queue, np.asarray(host, order=order))


CALLS = {
    "broadcast add": lambda a: ops.add(a["x"], a["row"]),
    "flat exp": lambda a: ops.exp(a["x"]),
    "axis softmax": lambda a: ops.softmax(a["x"], axis=0),
    "axis sum keepdims": lambda a: ops.sum(a["x"], axis=1, keepdims=True),
    "trailing layer_norm without weights": lambda a: ops.layer_norm(a["x"]),
    "matmul": lambda a: ops.matmul(a["x"], a["m"]),
    "gemm with a scalar bias": lambda a: ops.gemm(a["x"], a["m"], 2.0, beta=0.5),
    "permute": lambda a: ops.permute(a["x"]),
    "conv2d nhwc": lambda a: ops.conv2d(a["img"], a["w"], layout="NHWC", padding=1),
}


@pytest.fixture(scope="module")
def arrays() -> dict[str, cla.Array]:
    return {
        "x": dev(6, 7),
        "row": dev(7),
        "m": dev(7, 5),
        "img": dev(2, 5, 6, 3),
        "w": dev(4, 3, 3, 3),
    }


@pytest.mark.parametrize("name", sorted(CALLS))
def test_warm_call_equals_cold_call(name: str, arrays: dict[str, cla.Array]) -> None:
    d = dispatcher()
    call = CALLS[name]
    d._recipes.clear()
    cold = call(arrays)
    assert len(d._recipes) == 1, "the call on device arrays was not memoized"
    warm = call(arrays)
    assert warm.shape == cold.shape and warm.strides == cold.strides
    np.testing.assert_array_equal(to_host(warm), to_host(cold))


def test_other_arrays_same_shape_use_their_own_buffers(arrays: dict[str, cla.Array]) -> None:
    x2 = dev(6, 7)
    first = ops.add(arrays["x"], arrays["row"]).get()
    second = ops.add(x2, arrays["row"]).get()
    np.testing.assert_allclose(second, x2.get() + arrays["row"].get(), rtol=1e-6)
    assert not np.array_equal(first, second)


def test_scalar_bias_value_is_part_of_the_key(arrays: dict[str, cla.Array]) -> None:
    x, m = arrays["x"].get(), arrays["m"].get()
    for bias in (1.0, -3.0):
        got = ops.gemm(arrays["x"], arrays["m"], bias, beta=1.0).get()
        np.testing.assert_allclose(got, x @ m + bias, rtol=1e-5, atol=1e-5)
