"""A compiled model's launch path and buffers: the scratch buffers every step's routine shares
(sized for the largest), slots from the runtime's pool, calls that alternate specializations
and inputs, against NumPy at odd sizes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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


@pytest.fixture(scope="module", params=[False, True], ids=["unfused", "fused"])
def model(request):
    """Unfused, and fused (relu at the first gemm's epilogue: the fused kernel packs too)."""
    return two_gemms().compile(fusion=request.param)


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


PACKED = "gemm__cpu_packed__f32__a_row__b_row"


@contextlib.contextmanager
def packing_a(pa: int) -> Iterator[None]:
    """gemm's packed routine with a packed first (PA 1) or read in place (PA 0)."""
    d = dispatcher()
    d.override_params(PACKED, {"PA": pa})
    try:
        yield
    finally:
        d.override_params(PACKED, None)


@pytest.mark.parametrize("pa", [0, 1])
@pytest.mark.parametrize("fusion", [False, True], ids=["unfused", "fused"])
def test_scratch_is_shared_and_sized_for_the_largest(fusion, pa):
    with packing_a(pa):
        model = two_gemms().compile(fusion=fusion)
        x = rand(37, K)
        close(model(x), numpy_two_gemms(x))
    spec = model.cache[(("S", 37),)]
    gemms = [p for p in spec.steps if p.plan.scratch]
    assert len(gemms) == 2  # both gemms run a packed routine with scratch (ap, bp)
    assert all(p.plan.inst.name == PACKED and dict(p.plan.params)["PA"] == pa for p in gemms)
    s = spec.summary()
    assert "scratch shared by every step [" in model.explain(file=None)
    first, second = gemms
    if not pa:
        # a read in place: no ap (bound to the runtime's dummy), no hand-off; h is a slot
        assert first.plan.scratch[0][:2] == ("ap", 0)
        assert not [h for h in s["handoffs"] if h.startswith("handed off")]
        why = f"relu from node 0 to node 2: {PACKED} launches no pack_a at these sizes"
        assert s["handoffs"] == ([f"not handed off: {why}"] if fusion else [])
        assert s["scratch_bytes"] in ([], [0])
        assert s["slot_bytes"] == [37 * H * 4] * (1 if fusion else 2)
        return
    if fusion:
        # fused: relu at the first gemm's epilogue, which stores h in the panels the second
        # gemm's pack_a would make (graph/handoff.py): the second gemm's ap is h's slot
        assert [name for name, _, _ in second.plan.scratch] == ["bp"]
        assert [name for name, _ in second.aliases] == ["ap"]
        mr = dict(second.plan.params)["MR"]
        assert s["scratch_bytes"] == [first.plan.scratch[0][1] * 4]  # only the first's ap
        assert s["slot_bytes"] == [-(-37 // mr) * mr * H * 4]  # h in panels of MR rows
        return
    # bp (the packed weight) is each gemm's own, packed once; ap is shared, as large as the
    # larger gemm's
    ap = [p.plan.scratch[0] for p in gemms]
    assert [name for name, _, _ in ap] == ["ap", "ap"]
    assert ap[0][1] != ap[1][1]  # the two gemms' ap differ in size (K = 37, then H = 129)
    assert s["scratch_bytes"] == [max(n * dt.itemsize for _, n, dt in ap)]
    assert len(spec.scratch) == 1  # one buffer per shared scratch position, not one per step
    assert s["slot_bytes"] == [37 * H * 4] * 2  # the first gemm's output, relu's


@pytest.mark.parametrize("pa", [0, 1])
@pytest.mark.parametrize("fusion", [False, True], ids=["unfused", "fused"])
def test_packing_a_constant_runs_once(fusion, pa):
    """gemm's pack_b of a constant weight runs when the specialization is made, not per call:
    per call, each gemm's compute (and pack_a, with PA 1) and relu; fused, relu is the first
    gemm's epilogue, which with PA 1 stores h packed for the second: no second pack_a."""
    with packing_a(pa):
        model = two_gemms().compile(fusion=fusion)
        x = rand(5, K)
        close(model(x), numpy_two_gemms(x))
    s = model.cache[(("S", 5),)].summary()
    packs_a = pa * (1 if fusion else 2)  # with PA 1, fused: the second gemm's is handed off
    assert s["kernels"] == (2 if fusion else 3) + packs_a
    assert len([h for h in s["handoffs"] if h.startswith("handed off")]) == (pa and fusion)
    assert len(s["run_once"]) == 2
    assert all("pack_b run once" in note for note in s["run_once"])
    assert "pack_b run once" in model.explain(file=None)


@pytest.mark.parametrize("pa", [0, 1])
def test_packing_an_input_runs_every_call(pa):
    """Nothing is packed once where b is a graph input: each call packs its own b (and a, with
    PA 1), and a second call with another b gives that b's product."""
    with packing_a(pa):
        g = Graph("xy")
        x = g.input("x", TensorType("f32", ("S", K)))
        y = g.input("y", TensorType("f32", (K, H)))
        g.output(g.ops.gemm(x, y, g.constant(B1, "b1"), beta=1.0))
        m = g.compile()
        for _ in range(2):
            a, b = rand(9, K), rand(K, H)
            close(m(a, b), a.astype(np.float64) @ b + B1)
    s = m.cache[(("S", 9),)].summary()
    assert s["nodes"][0]["instance"] == PACKED
    assert s["run_once"] == [] and s["kernels"] == 2 + pa


def test_empty_batch(model):
    x = rand(0, K)
    got = model(x)
    assert got.shape == (0, N)


def _constant_weight_cases() -> dict[str, tuple[tuple[int, ...], np.ndarray, dict, object]]:
    """op -> (input shape, constant weight, attributes, NumPy reference of (x, w))."""
    w_mm, w_t, w_conv = rand(K, 11), rand(11, K), rand(5, 3, 3, 2)

    def conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        from clforge import ops

        return ops.conv2d(x, w, stride=2, padding=(1, 0))

    return {
        "matmul": ((3, 13, K), w_mm, {}, lambda x, w: x.astype(np.float64) @ w),
        "gemm": ((13, K), w_t, {"trans_b": True}, lambda x, w: x.astype(np.float64) @ w.T),
        "conv2d": ((2, 3, 7, 9), w_conv, {"stride": 2, "padding": (1, 0)}, conv),
    }


@pytest.mark.parametrize("op", ["matmul", "gemm", "conv2d"])
def test_constant_weights_of_packed_routines(op):
    """A weight packed once gives the same results as packing it per call (eager), over calls
    with other inputs and batch sizes, and the packing ran once. conv2d has no bias: the
    omitted input is filled (its dims were bound without the attributes' defaults, a
    CallError naming `groups`)."""
    shape, w, attrs, reference = _constant_weight_cases()[op]
    g = Graph(op)
    x = g.input("x", TensorType("f32", ("B", *shape[1:])))
    g.output(getattr(g.ops, op)(x, g.constant(w, "w"), **attrs))
    m = g.compile()
    for b in (shape[0], 1, shape[0]):
        xs = rand(b, *shape[1:])
        close(m(xs), np.asarray(reference(xs, w), np.float64))
    spec = next(iter(m.cache.values()))
    packs = [s.name for p in spec.steps for s in p.plan.inst.steps if s.reads in (("b",), ("w",))]
    assert [note.split(": ")[1].split(" ")[0] for note in spec.once] == packs
    # gemm's b is column-major (trans_b), which only the packed routine takes, and conv2d runs
    # its routine: each packs its weight once; matmul's 13-row product may take the direct
    # kernel (the measured or analytic crossover), which has nothing to pack
    variant = next(p.plan.inst.variant for p in spec.steps if p.plan.inst.op == op)
    if op == "matmul" and variant == "cpu_blocked":
        assert packs == [] and spec.once == ()
    else:
        assert packs == (["pack_w"] if op == "conv2d" else ["pack_b"])


def test_a_call_failing_midway_opens_its_gate():
    """The kernels a call enqueued behind its gate run even where a later launch fails to be
    enqueued (the gate is completed in a `finally`), so the queue drains instead of hanging."""
    import dataclasses

    import pyopencl as cl

    from clforge.runtime.launch import run_ready

    g = Graph("chain")
    x = g.input("x", TensorType("f32", (5,)))
    g.output(g.ops.relu(g.ops.exp(g.ops.neg(x))))
    model = g.compile(fusion=False)
    rt = model.dispatcher.runtime
    xd = cla.to_device(rt.queue, rand(5))
    model(xd)
    (spec,) = model.cache.values()
    launches = spec.launches
    assert len(launches) == 3
    out = cla.empty(rt.queue, (5,), np.float32)
    buffers = [xd.base_data, out.base_data]
    broken = dataclasses.replace(launches[1], global_size=(-1,))  # refused by the driver
    with pytest.raises((cl.Error, RuntimeError)):
        run_ready(rt.queue, (launches[0], broken, launches[2]), buffers, rt.context)
    import time

    done = cl.enqueue_marker(rt.queue)  # completes once the gated kernel has run
    deadline = time.monotonic() + 20
    while done.command_execution_status != cl.command_execution_status.COMPLETE:
        assert time.monotonic() < deadline, "the gate stayed closed: the queue hangs"
        time.sleep(0.01)


def test_calls_like_earlier_ones_take_their_specialization(model):
    """A call whose inputs match an earlier call's (types, shapes, dtypes, a device array's
    strides and offset) skips the guards and reuses its specialization; a device-array view or
    a transposed host array of the same shape is still read as it is."""
    q = dispatcher().runtime.queue
    x = rand(13, K)
    close(model(x), numpy_two_gemms(x))
    seen = dict(model._seen)
    close(model(x + 1), numpy_two_gemms(x + 1))
    assert model._seen == seen  # the same key: nothing new remembered
    t = np.ascontiguousarray(rand(K, 13)).T  # the same shape, not contiguous
    close(model(t), numpy_two_gemms(t))
    big = rand(14, K)
    view = cla.to_device(q, big)[1:]  # an offset: gathered row-major, not remembered
    close(model(view).get(), numpy_two_gemms(big[1:]))
    close(model(view).get(), numpy_two_gemms(big[1:]))
    assert "x" in model.views
    d = cla.to_device(q, x)
    close(model(d).get(), numpy_two_gemms(x))
    close(model(d).get(), numpy_two_gemms(x))
