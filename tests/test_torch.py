"""PyTorch tensors in eager and compiled calls, and clforge's ops as torch.ops.clforge.<op>
(clforge.torch.register), traced by torch.compile and checked by torch.library.opcheck. Skipped
where PyTorch is not installed (`make test` installs its CPU wheel where one is at hand)."""

from __future__ import annotations

import math

import numpy as np
import pyopencl as cl
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import clforge.torch as clforge_torch  # noqa: E402 (after the skip)
from clforge import Graph, TensorType, dispatcher, ops  # noqa: E402
from clforge.errors import CallError  # noqa: E402
from clforge.interop.intake import host_view, in_place  # noqa: E402

gen = torch.Generator().manual_seed(34)


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


@pytest.fixture(scope="module")
def clf() -> object:
    clforge_torch.register()
    return torch.ops.clforge


@pytest.mark.parametrize("n", [1, 7, 1031])
def test_tensors_in_tensors_out(n: int) -> None:
    x, y = rand(3, n), rand(n)
    got = ops.add(x, y)
    assert isinstance(got, torch.Tensor)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, x + y)
    torch.testing.assert_close(ops.add(x, 2), x + 2)  # a Python scalar operand
    torch.testing.assert_close(ops.sum(x, axis=1), x.sum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ops.softmax(x.T, axis=0), torch.softmax(x.T, 0))  # strided
    torch.testing.assert_close(ops.relu(x.to(torch.float16)), torch.relu(x.to(torch.float16)))
    grad = x.clone().requires_grad_(True)  # taken as data: clforge calls are not differentiable
    torch.testing.assert_close(ops.exp(grad), torch.exp(x))


def test_a_cpu_tensor_is_viewed_not_copied() -> None:
    x = rand(4, 33)
    view = host_view("relu", "input 'x'", x)
    assert view.ctypes.data == x.data_ptr()
    if not dispatcher().runtime.device.type & cl.device_type.CPU:
        return
    # a tensor aligned as the device wants enters as a device array over that memory (PyTorch
    # aligns to 64 bytes, PoCL asks for 128: this one is placed so)
    base = torch.empty(4 * 33 + 32)
    start = (-base.data_ptr() % 128) // 4
    t = base[start : start + 4 * 33].view(4, 33)
    t.copy_(x)
    dev = in_place(dispatcher().runtime.queue, host_view("relu", "input 'x'", t))
    assert dev is not None
    assert dev.base_data.get_host_array(t.numel(), np.float32).ctypes.data == t.data_ptr()
    torch.testing.assert_close(ops.relu(t), torch.relu(x))


def test_empty_and_integer_and_boolean_tensors() -> None:
    torch.testing.assert_close(ops.exp(rand(0, 3)), torch.empty(0, 3))
    w = rand(10, 4)
    idx = torch.tensor([[0, 9], [3, 3]])  # int64, as PyTorch makes them: checked on the host
    torch.testing.assert_close(ops.embedding(idx, w), F.embedding(idx, w))
    with pytest.raises(CallError, match="embedding"):
        ops.embedding(torch.tensor([10]), w)
    q, k, v = rand(1, 2, 5, 8), rand(1, 2, 6, 8), rand(1, 2, 6, 8)
    mask = torch.rand(5, 6, generator=gen) > 0.3
    mask[:, 0] = True
    torch.testing.assert_close(
        ops.attention(q, k, v, mask),
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        rtol=1e-5,
        atol=1e-5,
    )


def test_a_dtype_clforge_lacks_is_a_call_error() -> None:
    with pytest.raises(
        CallError, match=r"relu: input 'x' is a torch tensor of dtype torch.bfloat16"
    ):
        ops.relu(rand(4, dtype=torch.bfloat16))


def test_out_takes_a_tensor() -> None:
    x = rand(5, 6)
    out = torch.empty(5, 6)
    assert ops.gelu(x, approximate="tanh", out=out) is out
    torch.testing.assert_close(out, F.gelu(x, approximate="tanh"))
    total = torch.empty(6)
    ops.sum(ops.relu(x), axis=0, out=total)
    torch.testing.assert_close(total, torch.relu(x).sum(0), rtol=1e-5, atol=1e-5)
    with pytest.raises(CallError, match=r"sum: out has shape \(5,\)"):
        ops.sum(x, axis=0, out=torch.empty(5))


def test_pytorchs_own_calls_give_pytorchs_results() -> None:
    x = rand(2, 3, 11, 9)
    torch.testing.assert_close(ops.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 3, 2, 1))
    torch.testing.assert_close(
        ops.avg_pool2d(x, 3, 2, 1, True, False), F.avg_pool2d(x, 3, 2, 1, True, False)
    )
    w, b = rand(4, 3, 3, 3), rand(4)
    torch.testing.assert_close(ops.conv2d(x, w, b, 1, "same"), F.conv2d(x, w, b, 1, "same"))
    torch.testing.assert_close(
        ops.conv2d(x, w, b, 2, 1, 1, 1), F.conv2d(x, w, b, 2, 1, 1, 1), rtol=1e-5, atol=1e-5
    )


def test_a_compiled_graph_takes_and_returns_tensors() -> None:
    g = Graph("torch_in")
    x = g.input("x", TensorType("f32", ("N", 5)))
    g.output(g.ops.softmax(x, axis=-1))
    model = g.compile()
    for n in (1, 17):
        t = rand(n, 5)
        got = model(t)
        assert isinstance(got, torch.Tensor)
        torch.testing.assert_close(got, torch.softmax(t, -1))


def test_a_compiled_op_takes_and_returns_tensors() -> None:
    softmax = dispatcher().compile("softmax", {"x": TensorType("f32", ("B", "R", 1))})
    for b in (1, 5):
        t = rand(b, 7, 1)
        got = softmax(t)
        assert isinstance(got, torch.Tensor)
        torch.testing.assert_close(got, torch.softmax(t, 1))


def test_register_defines_every_op_once(clf: object) -> None:
    assert clforge_torch.register() == []  # again: nothing twice
    for op in ("add", "gelu", "max_pool2d", "conv2d", "concat", "attention", "sum"):
        assert hasattr(clf, op)
    assert str(torch.ops.clforge.gelu.default._schema) == (
        'clforge::gelu(Tensor x, str approximate="none") -> Tensor'
    )
    assert "int[2]? kernel_size=None, int[2]? stride=None" in str(
        torch.ops.clforge.max_pool2d.default._schema
    )


def test_operators_match_pytorch(clf: object) -> None:
    x = rand(3, 7)
    torch.testing.assert_close(torch.ops.clforge.add(x, x), 2 * x)
    torch.testing.assert_close(torch.ops.clforge.sum(x, [1]), x.sum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.ops.clforge.concat([x, x[:1]], 0), torch.cat([x, x[:1]]))
    a = rand(1, 2, 9, 10)
    torch.testing.assert_close(
        torch.ops.clforge.max_pool2d(a, [3, 3], [2, 2], [1, 1]), F.max_pool2d(a, 3, 2, 1)
    )
    torch.testing.assert_close(
        torch.ops.clforge.gelu(x, approximate="tanh"), F.gelu(x, approximate="tanh")
    )


def test_torch_compile_traces_through_the_operators(clf: object) -> None:
    def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = torch.ops.clforge.matmul(x, w)
        h = torch.ops.clforge.gelu(h, approximate="tanh")
        return torch.ops.clforge.softmax(h, axis=-1) * 2

    def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.softmax(F.gelu(x @ w, approximate="tanh"), -1) * 2

    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    for m in (1, 13):
        x, w = rand(m, 8), rand(8, 5)
        torch.testing.assert_close(compiled(x, w), reference(x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("op", "args"),
    [
        ("add", lambda: (rand(3, 1, 5), rand(4, 1))),
        ("sum", lambda: (rand(3, 4, 5), [0, 2], True)),
        ("argmax", lambda: (rand(3, 4), 1)),
        ("gelu", lambda: (rand(9),)),
        ("max_pool2d", lambda: (rand(1, 2, 7, 7), [3, 3], [2, 2])),
        ("conv2d", lambda: (rand(1, 2, 6, 5), rand(3, 2, 3, 3), rand(3), [1, 1], [1, 1])),
        ("concat", lambda: ([rand(2, 3), rand(1, 3)],)),
        ("layer_norm", lambda: (rand(4, 6), rand(6), rand(6))),
        ("permute", lambda: (rand(2, 3, 4), [2, 0, 1])),
    ],
)
def test_opcheck(clf: object, op: str, args: object) -> None:
    torch.library.opcheck(getattr(torch.ops.clforge, op).default, args())  # type: ignore[operator]


def test_a_result_that_would_alias_its_input_is_a_copy(clf: object) -> None:
    x = rand(2, 3)
    y = torch.ops.clforge.sum(x, [])  # reduces nothing
    torch.testing.assert_close(y, x)
    assert y.data_ptr() != x.data_ptr() or math.prod(x.shape) == 0


@pytest.mark.parametrize("s", [1, 13])
def test_heads_as_pytorch_transposes_them(s: int) -> None:
    """q, k, v as PyTorch code makes them, x.view(B, S, H, D).transpose(1, 2): read as the bshd
    layout, the output with q's strides (as scaled_dot_product_attention gives it)."""
    q, k, v = (rand(2, s, 3, 16).transpose(1, 2) for _ in range(3))
    got = ops.attention(q, k, v, causal=True)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert isinstance(got, torch.Tensor) and got.shape == want.shape
    # q's memory order (axes of size 1 have no stride that matters)
    assert [st for st, n in zip(got.stride(), got.shape, strict=True) if n > 1] == [
        st for st, n in zip(q.stride(), q.shape, strict=True) if n > 1
    ]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
