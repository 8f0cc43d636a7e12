"""Every op that graphs support, as a one-node graph with symbolic dims, against the eager call
at two sizes (one of them with 1s): capture, shapes and the compiled model agree with
`clforge.ops` for each calling convention graphs take."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from clforge import Graph, TensorType, ops
from clforge.graph import supported_ops

rng = np.random.default_rng(7)
NP = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i32": np.int32}


def arr(dtype: str, shape: tuple[int, ...], positive: bool = False) -> np.ndarray:
    if dtype == "i32":
        return rng.integers(-5, 6, shape).astype(np.int32)
    a = rng.standard_normal(shape)
    return (np.abs(a) + 0.5 if positive else a).astype(NP[dtype])


# op -> (the inputs' dtypes and dims, the keyword arguments of the call)
Case = tuple[list[tuple[str, tuple[Any, ...]]], dict[str, Any]]
UNARY = ["abs", "exp", "gelu", "leaky_relu", "neg", "relu", "sigmoid", "silu", "tanh"]
POSITIVE = ["log", "rsqrt", "sqrt"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum"]
CASES: dict[str, Case] = {
    **{op: ([("f32", ("S", "D"))], {}) for op in UNARY + POSITIVE},
    **{op: ([("f32", ("S", "D")), ("f32", ("D",))], {}) for op in BINARY},
    "pow": ([("f32", ("S", "D")), ("f32", ("S", 1))], {}),
    "cast_f16": ([("f32", ("S", "D"))], {}),
    "cast_f32": ([("f64", ("S", "D"))], {}),
    "cast_f64": ([("i32", ("S", "D"))], {}),
    "cast_i32": ([("f32", ("S", "D"))], {}),
    "clip": ([("f32", ("S", "D")), ("f32", ()), ("f32", ("D",))], {}),
    "where": ([("i32", ("S", "D")), ("f32", ("S", "D")), ("f32", ("D",))], {}),
    "softmax": ([("f32", ("B", "S", "D"))], {"axis": 1}),
    "log_softmax": ([("f32", ("S", "D"))], {"axis": -1}),
    "sum": ([("f32", ("B", "S", "D"))], {"axis": (1, 2)}),
    "mean": ([("f32", ("S", "D"))], {"axis": 0, "keepdims": True}),
    "max": ([("f32", ("B", "S", "D"))], {"axis": -1}),
    "min": ([("f32", ("S", "D"))], {}),
    "argmax": ([("f32", ("S", "D"))], {"axis": 1}),
    "layer_norm": ([("f32", ("S", "D")), ("f32", ("D",)), ("f32", ("D",))], {"eps": 1e-3}),
    "rms_norm": ([("f32", ("B", "S", "D")), ("f32", ("S", "D"))], {"axes": 2}),
    "matmul": ([("f32", ("B", "S", "D")), ("f32", ("D", "N"))], {}),
    "gemm": (
        [("f32", ("D", "S")), ("f32", ("N", "D")), ("f32", ("N",))],
        {"trans_a": True, "trans_b": True, "alpha": 0.5, "beta": 2.0},
    ),
    "permute": ([("f32", ("B", "S", "D"))], {"axes": (2, 0, 1)}),
}
SIZES = [{"B": 2, "S": 3, "D": 5, "N": 7}, {"B": 1, "S": 1, "D": 1, "N": 1}]


def test_every_supported_op_has_a_case():
    assert sorted(CASES) == supported_ops()


@pytest.mark.parametrize("op", sorted(CASES))
def test_op_in_a_graph_matches_eager(op):
    specs, kwargs = CASES[op]
    g = Graph(op)
    values = [g.input(f"in{i}", TensorType(dt, dims)) for i, (dt, dims) in enumerate(specs)]
    out = getattr(g.ops, op)(*values, **kwargs)
    g.output(out)
    model = g.compile()
    for sizes in SIZES:
        args = [
            arr(
                dt,
                tuple(sizes.get(d, d) if isinstance(d, str) else d for d in dims),
                positive=op in POSITIVE,
            )
            for dt, dims in specs
        ]
        want = getattr(ops, op)(*args, **kwargs)
        got = model(*args)
        assert got.shape == want.shape, (op, sizes)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), rtol=1e-5, atol=1e-5
        )
