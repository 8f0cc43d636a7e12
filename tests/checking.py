"""How tests compare kernels with NumPy: one tolerance rule, and canary-padded launches."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pyopencl as cl

from generator.core.dtypes import DTYPES
from generator.core.layouts import layout_strides, storage_view
from generator.registry.records import Instance
from generator.runtime.launch import Runtime

PAD = 4096  # bytes of canary before and after every buffer (a multiple of any base alignment)
CANARY = 0xA5


def assert_close(what: str, dtype: str, got: np.ndarray, want: np.ndarray,
                 reduce_len: int) -> None:
    """Compare with the float64 reference at the dtype's tolerance (dtypes.py), widened by the
    square root of the length of any reduction (rounding error grows with it)."""
    d = DTYPES[dtype]
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if not got.size:
        return
    if not d.is_float and np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    scale = float(np.mean(np.abs(want[np.isfinite(want)]))) + 1.0 if np.isfinite(want).any() \
        else 1.0
    atol = d.atol * math.sqrt(reduce_len + 1) * scale
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=d.rtol * 10, atol=atol,
                               err_msg=what)


def launch_with_canaries(rt: Runtime, inst: Instance, inputs: Mapping[str, np.ndarray],
                         dims: Mapping[str, int],
                         attrs: Mapping[str, float | int]) -> dict[str, np.ndarray]:
    """Launch `inst` with every buffer padded by canary bytes on both sides; fail if the kernel
    wrote outside an output or into an input."""
    op = rt.registry.op(inst.op)
    shapes = {k: tuple(v.shape) for k, v in inputs.items()}
    plan = rt.plan(inst, dims, attrs, shapes)
    ctx, queue = rt.context, rt.queue
    parents: dict[str, tuple[cl.Buffer, np.ndarray]] = {}
    subs: dict[str, cl.Buffer] = {}
    for t in op.inputs + op.outputs:
        dt = DTYPES[t.dtype or inst.dtype].np_dtype
        shape = shapes.get(t.name, tuple(dims[d] for d in t.shape))
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        host = np.full(PAD + max(nbytes, 1) + PAD, CANARY, np.uint8)
        if t.name in inputs:
            storage = np.ascontiguousarray(storage_view(inputs[t.name], inst.layout_of(t.name)))
            host[PAD : PAD + nbytes] = storage.view(np.uint8).reshape(-1)
        parent = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                           hostbuf=host)
        parents[t.name] = (parent, host.copy())
        subs[t.name] = parent.get_sub_region(PAD, max(nbytes, 1))
    if plan.kernel is not None:
        args = list(plan.args)
        for i, name in plan.buffers:
            args[i] = subs[name]
        plan.kernel.set_args(*args)
        cl.enqueue_nd_range_kernel(queue, plan.kernel, plan.geometry.global_size,
                                   plan.geometry.local_size)
    outs: dict[str, np.ndarray] = {}
    for t in op.inputs + op.outputs:
        parent, before = parents[t.name]
        after = np.empty_like(before)
        cl.enqueue_copy(queue, after, parent)
        queue.finish()
        assert (after[:PAD] == CANARY).all(), f"{inst.name} wrote before {t.name}"
        assert (after[-PAD:] == CANARY).all(), f"{inst.name} wrote past the end of {t.name}"
        if t.name in inputs:
            assert (after == before).all(), f"{inst.name} modified its input {t.name}"
            continue
        dt = DTYPES[t.dtype or inst.dtype].np_dtype
        shape = tuple(dims[d] for d in t.shape)
        n = int(np.prod(shape, dtype=np.int64))
        flat = after[PAD : PAD + n * dt.itemsize].view(dt)
        strides = layout_strides(shape, dt.itemsize, inst.layout_of(t.name))
        outs[t.name] = np.lib.stride_tricks.as_strided(flat, shape, strides).copy()
    return outs
