"""Verifying a kernel against its NumPy reference, as the test suite and the tuner both do:
every buffer padded on both sides with canary bytes (a kernel that writes out of bounds, which
on a CPU device can corrupt the host's heap silently, or into an input, is caught), outputs
compared with the float64 reference at the dtype's tolerance, widened by the square root of
the length of any reduction."""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from clforge import references
from clforge.call.binding import bind_dims, int_attrs, resolve_attrs
from clforge.core.dtypes import DTYPES
from clforge.core.layouts import layout_strides, storage_view
from clforge.errors import ClforgeError
from clforge.params.space import Params, params_text
from clforge.registry.loader import guard_holds
from clforge.registry.records import Instance
from clforge.runtime.launch import LaunchPlan, Runtime

PAD = 4096  # bytes of canary before and after every buffer (a multiple of any base alignment)
CANARY = 0xA5


class VerifyError(AssertionError):
    """A kernel wrote where it must not, or computed the wrong result."""


def mismatch(
    what: str,
    dtype: str,
    got: np.ndarray,
    want: np.ndarray,
    reduce_len: int,
    exact: bool = False,
) -> str | None:
    """Why `got` is not `want` at the tolerance of `dtype` (the output's), or None when it is;
    `exact`: equal element for element (NaN equal to NaN), whatever the dtype."""
    d = DTYPES[dtype]
    if got.shape != want.shape:
        return f"{what}: shape {got.shape} != {want.shape}"
    if not got.size:
        return None
    try:
        if exact or (not d.is_float and np.issubdtype(want.dtype, np.integer)):
            np.testing.assert_array_equal(got, want, err_msg=what)
            return None
        finite = np.isfinite(want)
        scale = float(np.mean(np.abs(want[finite]))) + 1.0 if finite.any() else 1.0
        atol = d.atol * math.sqrt(reduce_len + 1) * scale
        np.testing.assert_allclose(
            got.astype(np.float64), want, rtol=d.rtol * 10, atol=atol, err_msg=what
        )
    except AssertionError as exc:
        return str(exc)
    return None


def canary_launch(
    rt: Runtime, plan: LaunchPlan, inputs: Mapping[str, np.ndarray], dims: Mapping[str, int]
) -> dict[str, np.ndarray]:
    """Run `plan` with every buffer canary-padded; raise VerifyError if the kernel wrote outside
    an output or into an input; return the outputs."""
    inst = plan.inst
    op = rt.registry.op(inst.op)
    shapes = {k: tuple(v.shape) for k, v in inputs.items()}
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
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
        parent = cl.Buffer(ctx, flags, hostbuf=host)
        parents[t.name] = (parent, host.copy())
        subs[t.name] = parent.get_sub_region(PAD, max(nbytes, 1))
    rt.run(plan, subs)
    outs: dict[str, np.ndarray] = {}
    for t in op.inputs + op.outputs:
        parent, before = parents[t.name]
        after = np.empty_like(before)
        cl.enqueue_copy(queue, after, parent)
        queue.finish()
        if not (after[:PAD] == CANARY).all():
            raise VerifyError(f"{inst.name}: wrote before {t.name}")
        if not (after[-PAD:] == CANARY).all():
            raise VerifyError(f"{inst.name}: wrote past the end of {t.name}")
        if t.name in inputs:
            if not (after == before).all():
                raise VerifyError(f"{inst.name}: modified its input {t.name}")
            continue
        dt = DTYPES[t.dtype or inst.dtype].np_dtype
        shape = tuple(dims[d] for d in t.shape)
        n = int(np.prod(shape, dtype=np.int64))
        flat = after[PAD : PAD + n * dt.itemsize].view(dt)
        strides = layout_strides(shape, dt.itemsize, inst.layout_of(t.name))
        outs[t.name] = np.lib.stride_tricks.as_strided(flat, shape, strides).copy()
    return outs


@dataclass(frozen=True)
class Verdict:
    instance: str
    params: Params
    ran: int  # cases whose guard held
    problem: str | None  # the first failure, or None

    @property
    def ok(self) -> bool:
        return self.problem is None and self.ran > 0

    def __str__(self) -> str:
        head = f"{self.instance} [{params_text(self.params)}]"
        if self.problem:
            return f"{head}: FAILED: {self.problem}"
        if not self.ran:
            return f"{head}: FAILED: no verification case satisfies its guard"
        return f"{head}: {self.ran} cases match NumPy"


GROWN_ELEMENTS = 1 << 25  # the largest tensor a grown case may have
GROWN_CASES = 3


def grown(case: references.Case, k: int) -> references.Case:
    """`case` with every dim d scaled to d * 2**k + 1: larger, odd, so no tile divides it."""
    return references.Case({d: n * (1 << k) + 1 for d, n in case.dims.items()}, {}, case.attrs)


def cases_for(
    rt: Runtime, inst: Instance, ref: references.Reference, params: Params
) -> list[tuple[references.Case, dict[str, tuple[int, ...]], dict, dict[str, int]]]:
    """The op's cases whose guard `inst` (with `params`) satisfies, each as (case, shapes,
    attrs, dims); when the guard rejects some (a variant for large tensors), those are also
    tried grown (:func:`grown`, up to GROWN_CASES of them), so that every variant is checked."""
    reg = rt.registry
    op = reg.op(inst.op)

    def bound(case: references.Case) -> tuple[dict, dict, dict[str, int]] | None:
        shapes = {
            t.name: tuple(case.shapes.get(t.name, tuple(case.dims[d] for d in t.shape)))
            for t in op.inputs
        }
        attrs = resolve_attrs(op, case.attrs)
        try:
            dims = bind_dims(op, shapes, attrs)
        except ClforgeError:
            return None  # a grown case the op's checks refuse
        if not guard_holds(reg, inst, {**dims, **int_attrs(op, attrs)}, dict(params)):
            return None
        return shapes, attrs, dims

    out = []
    rejected = []
    for case in references.cases_of(ref, op.dims):
        b = bound(case)
        if b is not None:
            out.append((case, *b))
        elif not case.shapes and all(case.dims.values()):
            rejected.append(case)
    for case in rejected[:GROWN_CASES] if inst.guard else ():
        for k in range(1, 25):
            big = grown(case, k)
            shapes = [math.prod(big.dims[d] for d in t.shape) for t in op.inputs]
            if max(shapes, default=0) > GROWN_ELEMENTS:
                break
            b = bound(big)
            if b is not None:
                out.append((big, *b))
                break
    return out


def verify(rt: Runtime, inst: Instance, params: Params | None = None) -> Verdict:
    """Run `inst` (with `params`, default the spec's) on every verification case of its op whose
    guard holds, canary-padded, and compare each output with the NumPy reference."""
    reg = rt.registry
    op = reg.op(inst.op)
    ref = references.reference_of(op, reg.roots())
    chosen = params if params is not None else tuple(sorted(inst.params))
    rng = np.random.default_rng(zlib.crc32(inst.name.encode()))
    ran = 0
    for case, shapes, attrs, dims in cases_for(rt, inst, ref, chosen):
        inputs = {
            t.name: references.make_input(
                rng,
                shapes[t.name],
                DTYPES[t.dtype or inst.dtype].np_dtype,
                references.domain_of(ref, t.name, dims),
            )
            for t in op.inputs
        }
        try:
            got = canary_launch(rt, rt.plan(inst, dims, attrs, shapes, chosen), inputs, dims)
        except VerifyError as exc:
            return Verdict(inst.name, chosen, ran, f"{case}: {exc}")
        want = references.expected(op, inputs, attrs, reg.roots())
        reduce_len = dims.get(ref.reduce, 0) if ref.reduce else 0
        for t in op.outputs:
            problem = mismatch(
                f"{t.name} {case}",
                t.dtype or inst.dtype,
                got[t.name],
                want[t.name],
                reduce_len,
                ref.exact,
            )
            if problem:
                return Verdict(inst.name, chosen, ran, problem)
        ran += 1
    return Verdict(inst.name, chosen, ran, None)
