"""The arrays and calls users already have, without PyTorch (tests/test_torch.py has those with
it): DLPack producers in, without a copy on a CPU device where aligned; device arrays of the
user's own context run on their queue; NumPy's out=; PyTorch's spellings (gelu's approximate,
the pools' and conv2d's positional order, conv2d's padding='same'); the result types that
clforge.torch's fake kernels give, against the eager calls."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

from clforge import Graph, TensorType, dispatcher, explain, ops
from clforge.call.results import probe_array, result_types
from clforge.errors import CallError
from clforge.interop.intake import in_place
from clforge.registry import loader

rng = np.random.default_rng(34)
_erf = np.vectorize(math.erf)


def rand(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


class Producer:
    """A DLPack producer that is not NumPy (as a third library's array would be)."""

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.arr.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


class GpuProducer(Producer):
    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)  # kDLCUDA


def aligned(n: int, align: int = 4096, offset: int = 0) -> np.ndarray:
    """n float32s starting `offset` bytes past an `align`-byte boundary."""
    raw = np.zeros(n * 4 + align + offset, np.uint8)
    start = (-raw.ctypes.data) % align + offset
    return raw[start : start + n * 4].view(np.float32)


def on_cpu_device() -> bool:
    return bool(dispatcher().runtime.device.type & cl.device_type.CPU)


@pytest.mark.parametrize("n", [1, 7, 1031])
def test_dlpack_producers_in_numpy_out(n: int) -> None:
    a, b = rand(3, n), rand(n)
    got = ops.add(Producer(a), Producer(b))
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, a + b, rtol=1e-6)
    np.testing.assert_allclose(ops.sum(Producer(a), axis=1), a.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(ops.add(Producer(a), 2.5), a + 2.5, rtol=1e-6)


class Wrapped:
    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr


class Namespace:
    """An array namespace (the array API's `x.__array_namespace__()`), here a wrapper's."""

    @staticmethod
    def from_dlpack(x: Any) -> Wrapped:
        return Wrapped(np.from_dlpack(x))


class NamespacedProducer(Producer):
    def __array_namespace__(self) -> type[Namespace]:
        return Namespace


def test_results_come_back_through_the_producers_namespace() -> None:
    a = rand(2, 9)
    got = ops.tanh(NamespacedProducer(a))
    assert isinstance(got, Wrapped)
    np.testing.assert_allclose(got.arr, np.tanh(a), rtol=1e-6)


def test_a_producer_off_the_host_is_refused() -> None:
    with pytest.raises(CallError, match=r"relu: input 'x' \(GpuProducer\) lives in DLPack device"):
        ops.relu(GpuProducer(rand(4)))


@pytest.mark.skipif(not on_cpu_device(), reason="host-pointer buffers are used in place on CPUs")
def test_an_aligned_host_array_enters_without_a_copy() -> None:
    queue = dispatcher().runtime.queue
    host = aligned(97)
    host[:] = rand(97)
    dev = in_place(queue, host)
    assert dev is not None
    host[:] = np.arange(97, dtype=np.float32) - 40  # written after: the kernel reads it there
    np.testing.assert_array_equal(ops.relu(dev).get(), np.maximum(host, 0))
    assert in_place(queue, aligned(97, offset=4)) is None  # misaligned: copied instead
    assert in_place(queue, aligned(97)[::2]) is None  # not contiguous
    assert in_place(queue, aligned(0)) is None
    assert in_place(queue, np.zeros(64, np.int32)) is None  # integers keep NumPy's checks
    # a call on a misaligned producer is still right (it is copied)
    odd = aligned(13, offset=4)
    odd[:] = rand(13)
    np.testing.assert_allclose(ops.exp(Producer(odd)), np.exp(odd), rtol=1e-6)


def _own_queue() -> cl.CommandQueue:
    return cl.CommandQueue(cl.Context([dispatcher().runtime.device]))


def test_device_arrays_of_the_users_context_run_on_their_queue() -> None:
    q = _own_queue()
    x, y = rand(1, 1, 1, 1024), rand(1024)
    xa, ya = cla.to_device(q, x), cla.to_device(q, y)
    got = ops.add(xa, ya)
    assert got.context == q.context
    np.testing.assert_allclose(got.get(), x + y, rtol=1e-6)
    mixed = ops.add(xa, y)  # NumPy beside them: NumPy out, as before
    np.testing.assert_allclose(mixed, x + y, rtol=1e-6)
    np.testing.assert_allclose(ops.sum(xa, axis=(0, 2)).get(), x.sum(axis=(0, 2)), rtol=1e-5)
    # an array made without a queue gets one of its context
    np.testing.assert_allclose(ops.relu(xa.with_queue(None)).get(), np.maximum(x, 0))


def test_explain_follows_the_arrays_as_the_call_does() -> None:
    q = _own_queue()
    xa = cla.to_device(q, rand(3, 5))
    assert explain("relu", xa).instance == explain("relu", rand(3, 5)).instance
    assert explain("gelu", Producer(rand(4)), approximate="tanh").instance is not None


def test_device_arrays_of_two_contexts_are_refused() -> None:
    xa = cla.to_device(_own_queue(), rand(5))
    ya = cla.to_device(dispatcher().runtime.queue, rand(5))
    with pytest.raises(
        CallError,
        match=r"add: input 'b' \(shape \(5,\)\) lives in another OpenCL context than input 'a'",
    ):
        ops.add(xa, ya)
    with pytest.raises(CallError, match=r"concat: arrays\[1\] .* than arrays\[0\]"):
        ops.concat([xa, ya])


@pytest.mark.parametrize("n", [1, 13])
def test_out_writes_numpy_and_device_arrays(n: int) -> None:
    x, y = rand(3, n), rand(3, n)
    out = np.empty((3, n), np.float32)
    assert ops.add(x, y, out=out) is out
    np.testing.assert_allclose(out, x + y, rtol=1e-6)
    assert ops.mul(x, 2, out=x) is x  # into an input, as NumPy allows
    total = np.empty(n, np.float32)
    ops.sum(out, axis=0, out=total)
    np.testing.assert_allclose(total, out.sum(axis=0), rtol=1e-5)
    q = dispatcher().runtime.queue
    dev = cla.empty(q, (3, n), np.float32)
    assert ops.relu(cla.to_device(q, out), out=dev) is dev
    np.testing.assert_allclose(dev.get(), np.maximum(out, 0))
    ops.neg(out, out=dev)  # a host result into a device array
    np.testing.assert_allclose(dev.get(), -out)
    part = cla.empty(q, (4, n), np.float32)[1:]  # a view with an offset
    ops.exp(cla.to_device(q, out), out=part)
    np.testing.assert_allclose(part.get(), np.exp(out), rtol=1e-6)


def test_out_mismatches_are_call_errors() -> None:
    x = rand(4, 5)
    with pytest.raises(
        CallError, match=r"add: out has shape \(5, 4\) and dtype float32; the result"
    ):
        ops.add(x, x, out=np.empty((5, 4), np.float32))
    with pytest.raises(
        CallError, match=r"out has shape .* dtype float64; the result has .* float32"
    ):
        ops.sum(x, axis=1, out=np.empty(4, np.float64))
    ro = np.empty((4, 5), np.float32)
    ro.flags.writeable = False
    with pytest.raises(CallError, match=r"relu: out \(shape \(4, 5\)\) is read-only"):
        ops.relu(x, out=ro)
    with pytest.raises(CallError, match="relu: out must be a NumPy or pyopencl array"):
        ops.relu(x, out=[0.0] * 20)


def gelu(x: np.ndarray, tanh: bool) -> np.ndarray:
    if tanh:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def test_gelu_takes_pytorchs_approximate() -> None:
    x = rand(37)
    np.testing.assert_allclose(ops.gelu(x, approximate="tanh"), gelu(x, True), atol=1e-6)
    np.testing.assert_array_equal(ops.gelu(x, approximate="tanh"), ops.gelu(x, approximate=1))
    np.testing.assert_allclose(ops.gelu(x), gelu(x, False), atol=1e-6)
    np.testing.assert_array_equal(ops.gelu(x, approximate="none"), ops.gelu(x, approximate=0))
    with pytest.raises(CallError, match=r"gelu: approximate must be one of 'none' \(0\), 'tanh'"):
        ops.gelu(x, approximate="erf")


def test_pools_and_conv2d_take_pytorchs_positional_order() -> None:
    x = rand(2, 3, 11, 13)
    np.testing.assert_array_equal(
        ops.max_pool2d(x, 3, 2, 1, 2, True),
        ops.max_pool2d(x, kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True),
    )
    # avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor)
    np.testing.assert_array_equal(
        ops.avg_pool2d(x, 3, 2, 1, True, False, 5),
        ops.avg_pool2d(
            x,
            kernel_size=3,
            stride=2,
            padding=1,
            ceil_mode=True,
            count_include_pad=False,
            divisor_override=5,
        ),
    )
    w, b = rand(4, 3, 3, 3), rand(4)
    np.testing.assert_array_equal(
        ops.conv2d(x, w, b, 2, 1, 1, 1), ops.conv2d(x, w, b, stride=2, padding=1)
    )


@pytest.mark.parametrize(("kernel", "dilation"), [(1, 1), (3, 1), (5, 1), (3, 2), (2, 2)])
def test_conv2d_padding_same_and_valid(kernel: int, dilation: int) -> None:
    x, w = rand(1, 2, 9, 7), rand(3, 2, kernel, kernel)
    same = ops.conv2d(x, w, padding="same", dilation=dilation)
    assert same.shape == (1, 3, 9, 7)
    half = dilation * (kernel - 1) // 2
    np.testing.assert_array_equal(same, ops.conv2d(x, w, padding=half, dilation=dilation))
    np.testing.assert_array_equal(ops.conv2d(x, w, None, 1, "valid"), ops.conv2d(x, w))


def test_conv2d_padding_names_that_cannot_be_met_are_refused() -> None:
    x = rand(1, 2, 9, 7)
    with pytest.raises(CallError, match="conv2d: padding='same' needs stride 1"):
        ops.conv2d(x, rand(3, 2, 3, 3), padding="same", stride=2)
    with pytest.raises(CallError, match=r"padding='same' with kernel \(2, 2\) .* one side only"):
        ops.conv2d(x, rand(3, 2, 2, 2), padding="same")
    with pytest.raises(CallError, match=r"padding must be an int, an .* 'valid' or 'same'"):
        ops.conv2d(x, rand(3, 2, 3, 3), padding="full")


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "options"),
    [
        ("add", [(3, 1, 5), (4, 1)], {}, {}),
        ("add", [(7,), 2.5], {}, {}),
        ("sum", [(3, 4, 5, 6)], {}, {"axis": (0, 2), "keepdims": True}),
        ("sum", [(3, 4, 5)], {}, {"axis": None}),
        ("argmax", [(3, 4, 5)], {}, {"axis": 1}),
        ("softmax", [(2, 9)], {}, {"axis": 0}),
        ("matmul", [(2, 3, 4), (4, 5)], {}, {}),
        ("conv2d", [(1, 2, 9, 7), (3, 2, 3, 3)], {}, {"stride": 2, "padding": 1}),
        ("max_pool2d", [(2, 10, 9)], {}, {"kernel_size": 3, "ceil_mode": True}),
        ("permute", [(2, 3, 4)], {}, {"axes": (2, 0, 1)}),
        ("gelu", [(0, 3)], {"approximate": "tanh"}, {}),
    ],
)
def test_result_types_are_the_eager_calls(
    op: str, inputs: list[Any], attrs: dict[str, Any], options: dict[str, Any]
) -> None:
    sig = loader.default().op(op)
    real = [rand(*a) if isinstance(a, tuple) else a for a in inputs]
    probes = [probe_array(a, np.dtype(np.float32)) if isinstance(a, tuple) else a for a in inputs]
    if len(probes) < len(sig.inputs):  # optional inputs omitted
        probes += [None] * (len(sig.inputs) - len(probes))
    got = getattr(ops, op)(*real, **attrs, **options)
    assert result_types(sig, probes, attrs, options) == ((got.shape, got.dtype),)


def test_result_types_of_variadic_and_promoted_calls() -> None:
    concat = loader.default().op("concat")
    arrays = [probe_array((2, n), np.dtype(np.float32)) for n in (3, 1, 4)]
    assert result_types(concat, arrays, {}, {"axis": 1}) == (((2, 8), np.dtype(np.float32)),)
    add = loader.default().op("add")
    mixed = [probe_array((3,), np.dtype(np.float16)), probe_array((3,), np.dtype(np.float64))]
    assert result_types(add, mixed, {}, {}) == (((3,), np.dtype(np.float64)),)


def test_a_compiled_op_takes_dlpack_producers() -> None:
    add = dispatcher().compile(
        "add", {"a": TensorType("f32", (1, 1, 1, "N")), "b": TensorType("f32", (1, 1, 1, "N"))}
    )
    a, b = rand(1, 1, 1, 23), rand(1, 1, 1, 23)
    got = add(Producer(a), b=Producer(b))
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, a + b, rtol=1e-6)


def test_a_compiled_graph_takes_dlpack_producers() -> None:
    g = Graph("interop")
    x = g.input("x", TensorType("f32", ("N",)))
    g.output(g.ops.relu(x) * 2.0)
    model = g.compile()
    for n in (1, 29):
        host = rand(n)
        got = model(Producer(host))
        assert isinstance(got, np.ndarray)
        np.testing.assert_allclose(got, np.maximum(host, 0) * 2, rtol=1e-6)
        np.testing.assert_allclose(model(x=Producer(host)), np.maximum(host, 0) * 2, rtol=1e-6)
