"""The runtime: build an instance's program, bind arguments in the registry's order, launch.

`Runtime.launch` is the named-instance entry point: the caller says which instance to run
(choosing one is the dispatcher's job). NumPy inputs are copied to the device in the layout the
instance wants; pyopencl arrays must already have it. Outputs come back as the same kind.

A launch is split into a :class:`LaunchPlan` (everything that depends only on the instance, the
dims and the attributes: kernel, NDRange, scalar arguments, output shapes), which callers cache,
and :meth:`Runtime.run`, which binds arrays and enqueues.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
from pyopencl.tools import ImmediateAllocator, MemoryPool

from generator.call.binding import (
    array_dtype,
    bind_dims,
    check_names,
    element_dtype,
    element_strides,
    int_attrs,
    resolve_attrs,
)
from generator.core.layouts import array_layout, layout_strides, storage_view
from generator.device.discovery import default_device
from generator.errors import CallError
from generator.registry import loader as registry_mod
from generator.registry.loader import Registry
from generator.registry.records import Instance, OpSig
from generator.runtime.program_cache import ProgramCache

_SCALAR = {"int": np.int32, "float": np.float32, "double": np.float64}


@dataclass(frozen=True)
class Geometry:
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None

    @property
    def empty(self) -> bool:
        return any(g == 0 for g in self.global_size)


def geometry(reg: Registry, inst: Instance, dims: Mapping[str, int]) -> Geometry:
    """The NDRange of `inst` for these dims, from the registry's expressions."""
    env = {**dims, **inst.param_map}
    ex = reg.exprs(inst)
    gs = tuple(e.evaluate(env) for e in ex.global_size)
    ls = tuple(e.evaluate(env) for e in ex.local_size) if ex.local_size is not None else None
    if ls is not None and (
        len(ls) != len(gs) or any(g % l_ for g, l_ in zip(gs, ls, strict=False) if l_)
    ):
        raise CallError(
            f"{inst.name}: global size {gs} is not a multiple of local size {ls} "
            "(a spec error in launch:)"
        )
    return Geometry(gs, ls)


def guard_holds(reg: Registry, inst: Instance, env: Mapping[str, int]) -> bool:
    """Whether `inst`'s guard holds for `env` (the dims and the int attributes)."""
    guard = reg.exprs(inst).guard
    return guard is None or guard.holds({**env, **inst.param_map})


@dataclass(frozen=True, eq=False)
class LaunchPlan:
    """A launch with everything but the arrays decided."""

    inst: Instance
    kernel: cl.Kernel | None  # None when the NDRange is empty: nothing to run
    geometry: Geometry
    args: tuple[Any, ...]  # scalars in place; None where a buffer goes
    buffers: tuple[tuple[int, str], ...]  # (argument index, tensor name)
    # name, shape, dtype, byte strides
    outputs: tuple[tuple[str, tuple[int, ...], np.dtype, tuple[int, ...]], ...]


class Runtime:
    """One OpenCL context and queue, with its built programs and kernels."""

    def __init__(
        self,
        queue: cl.CommandQueue | None = None,
        reg: Registry | None = None,
        cache: ProgramCache | None = None,
    ) -> None:
        if queue is None:
            queue = cl.CommandQueue(cl.Context([default_device()]))
        self.queue = queue
        self.context: cl.Context = queue.context
        self.device: cl.Device = queue.device
        self.registry = reg or registry_mod.default()
        self.cache = cache if cache is not None else ProgramCache.default()
        self._kernels: dict[str, cl.Kernel] = {}
        self.dummy = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, 64)  # for empty tensors
        # outputs and input copies come from a pool: a fresh buffer per call would pay page
        # faults on first touch (a 64 MiB output costs more than the kernel that fills it)
        self.allocator = MemoryPool(ImmediateAllocator(queue))

    # --- building ---------------------------------------------------------------------------

    def build(self, inst: Instance) -> cl.Program:
        """The built program of `inst` (memory cache, then disk cache, then source), with the
        variant's build options."""
        return self.cache.program(
            self.context, self.device, inst.name, self.registry.source(inst), inst.build_options
        )

    def kernel(self, inst: Instance) -> cl.Kernel:
        k = self._kernels.get(inst.name)
        if k is None:
            k = getattr(self.build(inst), inst.name)
            # declared scalar types let pyopencl bind arguments without probing each one
            # (15 arguments: 63 us -> 1.2 us per set_args)
            k.set_scalar_arg_dtypes(
                [None if a.kind in ("input", "output") else _SCALAR[a.ctype] for a in inst.args]
            )
            self._kernels[inst.name] = k
        return k

    # --- planning and running ---------------------------------------------------------------

    def plan(
        self,
        inst: Instance,
        dims: Mapping[str, int],
        attrs: Mapping[str, float | int],
        shapes: Mapping[str, tuple[int, ...]] | None = None,
    ) -> LaunchPlan:
        """Everything about a launch but the arrays. `shapes` (the inputs' shapes) give the
        strides of broadcast inputs; without them every input has the full shape."""
        op = self.registry.op(inst.op)
        geo = geometry(self.registry, inst, dims)
        scalars: dict[str, float | int] = {**dims, **resolve_attrs(op, attrs)}
        for t in op.inputs:
            if t.broadcast:
                shape = tuple(shapes[t.name]) if shapes else tuple(dims[d] for d in t.shape)
                for k, st in enumerate(element_strides(shape, inst.layout_of(t.name))):
                    scalars[f"{t.name}_s{k}"] = st
        args: list[Any] = []
        buffers: list[tuple[int, str]] = []
        for i, a in enumerate(inst.args):
            if a.kind in ("input", "output"):
                buffers.append((i, a.name))
                args.append(None)
            else:
                args.append(_SCALAR[a.ctype](scalars[a.name]))  # type: ignore[arg-type]
        outputs = []
        for t in op.outputs:
            shape = tuple(dims[d] for d in t.shape)
            dt = element_dtype(t, inst.dtype).np_dtype
            strides = layout_strides(shape, dt.itemsize, inst.layout_of(t.name))
            outputs.append((t.name, shape, dt, strides))
        kernel = None if geo.empty else self.kernel(inst)
        return LaunchPlan(inst, kernel, geo, tuple(args), tuple(buffers), tuple(outputs))

    def run(self, plan: LaunchPlan, arrays: Mapping[str, cla.Array]) -> dict[str, cla.Array]:
        """Allocate the outputs, bind, enqueue; return the outputs (not waited for)."""
        outs = {
            name: cla.empty(self.queue, shape, dt, strides=strides, allocator=self.allocator)
            for name, shape, dt, strides in plan.outputs
        }
        if plan.kernel is None:
            return outs
        args = list(plan.args)
        for i, name in plan.buffers:
            arr = outs[name] if name in outs else arrays[name]
            args[i] = arr.base_data if arr.size else self.dummy
        plan.kernel.set_args(*args)
        cl.enqueue_nd_range_kernel(
            self.queue, plan.kernel, plan.geometry.global_size, plan.geometry.local_size
        )
        return outs

    # --- the named-instance entry point -----------------------------------------------------

    def launch(
        self,
        instance: Instance | str,
        inputs: Mapping[str, Any],
        attrs: Mapping[str, float | int] | None = None,
    ) -> dict[str, Any]:
        """Run `instance` on `inputs` (NumPy or pyopencl arrays, by name); return the outputs
        by name, as NumPy arrays if the inputs were NumPy, else as pyopencl arrays."""
        reg = self.registry
        inst = reg.instance(instance) if isinstance(instance, str) else instance
        op = reg.op(inst.op)
        check_names(op, inputs, op.inputs, "input")
        on_device = all(isinstance(a, cla.Array) for a in inputs.values())
        arrays = {
            t.name: self.to_device(op, inst.dtype, t.name, inputs[t.name], inst.layout_of(t.name))
            for t in op.inputs
        }
        shapes = {k: tuple(a.shape) for k, a in arrays.items()}
        values = resolve_attrs(op, attrs or {})
        dims = bind_dims(op, shapes, values)
        env = {**dims, **int_attrs(op, values)}
        if not guard_holds(reg, inst, env):
            shown = ", ".join(f"{k}={v}" for k, v in env.items())
            raise CallError(f"{inst.name}: guard {inst.guard!r} does not hold for {shown}")
        outs = self.run(self.plan(inst, dims, values, shapes), arrays)
        if on_device:
            return outs
        return {k: to_host(v) for k, v in outs.items()}

    def to_device(self, op: OpSig, dtype: str, name: str, arr: Any, layout: str) -> cla.Array:
        """`arr` as a device array of the tensor's dtype in `layout`; NumPy arrays are copied
        (into that layout), device arrays must already match."""
        want = element_dtype(op.tensor(name), dtype)
        if isinstance(arr, cla.Array):
            got = array_dtype(op, name, arr)
            if got != want:
                raise CallError(f"{op.name}: input {name!r} is {got.name}, expected {want.name}")
            if arr.offset:
                raise CallError(f"{op.name}: input {name!r} is a view with an offset; pass a copy")
            if arr.size and array_layout(arr) != layout:
                raise CallError(
                    f"{op.name}: input {name!r} (shape {arr.shape}, strides "
                    f"{arr.strides}) is not {layout}-major as needed"
                )
            return arr
        host = np.asarray(arr)
        if host.dtype != want.np_dtype:
            raise CallError(f"{op.name}: input {name!r} is {host.dtype}, expected {want.numpy}")
        storage = np.ascontiguousarray(storage_view(host, layout))
        out = cla.empty(
            self.queue,
            host.shape,
            host.dtype,
            strides=layout_strides(host.shape, host.dtype.itemsize, layout),
            allocator=self.allocator,
        )
        if host.size:
            cl.enqueue_copy(self.queue, out.base_data, storage)  # type: ignore[arg-type]
        return out


def to_host(arr: cla.Array) -> np.ndarray:
    """A NumPy copy of a device array in any layout (pyopencl's get() wants C or F order):
    read it in its memory order, then view it back in its logical order."""
    if arr.size == 0 or arr.flags.forc:
        return arr.get()
    order = sorted(range(arr.ndim), key=lambda ax: -arr.strides[ax])
    host = arr.transpose(order).get()
    return host.transpose(np.argsort(order))
