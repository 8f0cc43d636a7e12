"""A compiled model's launch path and buffers: the scratch buffers every step's routine shares
(sized for the largest), slots from the runtime's pool, calls that alternate specializations
and inputs, against NumPy at odd sizes."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

from clforge import Graph, TensorType, dispatcher

rng = np.random.default_rng(36)


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


K, H, N = 37, 129, 67
W1, B1, W2, B2 = rand(K, H), rand(H), rand(H, N), rand(N)


def two_gemms() -> Graph:
    """gemm + bias → relu → gemm + bias: two packed routines whose scratch sizes differ."""
    g = Graph("two_gemms")
    x = g.input("x", TensorType("f32", ("S", K)))
    h = g.ops.gemm(x, g.constant(W1, "w1"), g.constant(B1, "b1"), beta=1.0)
    h = g.ops.relu(h)
    g.output(g.ops.gemm(h, g.constant(W2, "w2"), g.constant(B2, "b2"), beta=1.0))
    return g


def numpy_two_gemms(x: np.ndarray) -> np.ndarray:
    h = np.maximum(x.astype(np.float64) @ W1 + B1, 0)
    return h @ W2 + B2


def close(a: np.ndarray, b: np.ndarray) -> None:
    np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=2e-4, atol=2e-4)


@pytest.fixture(scope="module")
def model():
    return two_gemms().compile(fusion=False)


def test_calls_alternating_sizes_and_inputs(model):
    """Each call's results are its own: the shared scratch and the slots are rewritten by
    every call, also when calls alternate between specializations."""
    for s in (11, 1, 37, 11, 1, 37):
        x = rand(s, K)
        close(model(x), numpy_two_gemms(x))
    q = dispatcher().runtime.queue
    x = rand(23, K)
    got = model(cla.to_device(q, x))
    assert isinstance(got, cla.Array)
    close(got.get(), numpy_two_gemms(x))


def test_scratch_is_shared_and_sized_for_the_largest(model):
    x = rand(37, K)
    model(x)
    spec = model.cache[(("S", 37),)]
    gemms = [p for p in spec.steps if p.plan.scratch]
    assert len(gemms) == 2  # both gemms run a packed routine with scratch (ap, bp)
    want = [
        max(p.plan.scratch[k][1] * p.plan.scratch[k][2].itemsize for p in gemms) for k in range(2)
    ]
    s = spec.summary()
    assert s["scratch_bytes"] == want
    assert len(spec.scratch) == 2  # one buffer per scratch position, not one per step
    assert s["slot_bytes"] == [37 * H * 4, 37 * H * 4]  # the first gemm's output, relu's
    assert "scratch shared by every step [" in model.explain(file=None)


def test_empty_batch(model):
    x = rand(0, K)
    got = model(x)
    assert got.shape == (0, N)
