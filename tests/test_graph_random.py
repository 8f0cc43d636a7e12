"""Random graphs of elementwise, broadcast, softmax and layer_norm nodes with several values
live at once: the compiled model (slots reused by liveness, CSE, dead code) agrees with the same
calls made eagerly, at several sizes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from clforge import Graph, TensorType, ops

UNARY = ["tanh", "sigmoid", "relu", "neg", "gelu", "silu"]
BINARY = ["add", "sub", "mul", "maximum", "minimum"]


def build(seed: int) -> tuple[Graph, Callable[[dict[str, np.ndarray]], list[np.ndarray]]]:
    r = np.random.default_rng(seed)
    g = Graph(f"random{seed}")
    values: list[Any] = [g.input("x", TensorType("f32", ("S", "D")))]
    bias = r.standard_normal(1).astype(np.float32)
    steps: list[tuple[str, tuple[int, ...], dict[str, Any]]] = []
    for _ in range(14):
        kind = r.integers(0, 5)
        a = len(values) - 1 - int(r.integers(0, min(3, len(values))))  # mostly recent values
        if kind == 0:
            op, args, kw = str(r.choice(UNARY)), (a,), {}
        elif kind == 1:
            op, args, kw = str(r.choice(BINARY)), (a, int(r.integers(0, len(values)))), {}
        elif kind == 2:
            op, args, kw = "softmax", (a,), {"axis": int(r.choice([0, 1]))}
        elif kind == 3:
            op, args, kw = "layer_norm", (a,), {}
        else:
            op, args, kw = "add", (a, -1), {}  # the constant bias, broadcast
        steps.append((op, args, kw))
        ins = [values[i] if i >= 0 else g.constant(bias, "bias") for i in args]
        values.append(getattr(g.ops, op)(*ins, **kw))
    picks = sorted({len(values) - 1, int(r.integers(1, len(values))), 3})
    g.output(*(values[i] for i in picks))

    def eager(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        vals: list[np.ndarray] = [inputs["x"]]
        for op, args, kw in steps:
            ins = [vals[i] if i >= 0 else bias for i in args]
            vals.append(getattr(ops, op)(*ins, **kw))
        return [vals[i] for i in picks]

    return g, eager


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("seed", range(6))
def test_random_graph_matches_eager(seed, fusion):
    g, eager = build(seed)
    model = g.compile(fusion=fusion)
    r = np.random.default_rng(100 + seed)
    for s, d in ((1, 1), (3, 5), (11, 2)):
        x = r.standard_normal((s, d)).astype(np.float32)
        got = model(x)
        for a, b in zip(got, eager({"x": x}), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert len(model.cache) == 3
    if not fusion:  # reuse happened (fused chains keep most intermediates in registers)
        assert max(len(slot.values) for slot in model.plan.buffers.slots) > 1
