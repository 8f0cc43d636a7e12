"""The runtime: build an instance's program, bind arguments in the registry's order, launch.

`Runtime.launch` is the named-instance entry point: the caller says which instance to run
(choosing one is the dispatcher's job). NumPy inputs are copied to the device in the layout the
instance wants; pyopencl arrays must already have it. Outputs come back as the same kind.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from . import registry as registry_mod
from .binding import array_dtype, array_layout, bind_dims, check_names, element_dtype
from .contract import Instance, OpSig
from .device import default_device
from .errors import BuildError, CallError
from .registry import Registry


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


def check_guard(reg: Registry, inst: Instance, dims: Mapping[str, int]) -> None:
    guard = reg.exprs(inst).guard
    if guard is not None and not guard.holds({**dims, **inst.param_map}):
        shown = ", ".join(f"{k}={v}" for k, v in dims.items())
        raise CallError(f"{inst.name}: guard {inst.guard!r} does not hold for {shown}")


class Runtime:
    """One OpenCL context and queue, with its built programs and kernels."""

    def __init__(self, queue: cl.CommandQueue | None = None, reg: Registry | None = None) -> None:
        if queue is None:
            device = default_device()
            queue = cl.CommandQueue(cl.Context([device]))
        self.queue = queue
        self.context: cl.Context = queue.context
        self.device: cl.Device = queue.device
        self.registry = reg or registry_mod.default()
        self._kernels: dict[str, cl.Kernel] = {}
        self._programs: dict[tuple[str, str], cl.Program] = {}
        self._dummy = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, 64)

    # --- building ---------------------------------------------------------------------------

    def build(self, inst: Instance, options: str = "") -> cl.Program:
        key = (inst.sha256, options)
        prog = self._programs.get(key)
        if prog is None:
            source = self.registry.source(inst)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", cl.CompilerWarning)
                    prog = cl.Program(self.context, source).build(options=options)
            except cl.RuntimeError as exc:
                raise BuildError(inst.name, str(exc)) from None
            self._programs[key] = prog
        return prog

    def kernel(self, inst: Instance) -> cl.Kernel:
        k = self._kernels.get(inst.name)
        if k is None:
            k = getattr(self.build(inst), inst.name)
            self._kernels[inst.name] = k
        return k

    # --- launching --------------------------------------------------------------------------

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
        arrays = {t.name: self._input(op, inst, t.name, inputs[t.name]) for t in op.inputs}
        dims = bind_dims(op, {k: a.shape for k, a in arrays.items()})
        check_guard(reg, inst, dims)
        outs = {
            t.name: cla.empty(
                self.queue,
                tuple(dims[d] for d in t.shape),
                element_dtype(t, inst.dtype).np_dtype,
                order="F" if inst.layout_of(t.name) == "col" else "C",
            )
            for t in op.outputs
        }
        self.enqueue(inst, {**arrays, **outs}, dims, attrs or {})
        if on_device:
            return outs
        return {k: v.get() for k, v in outs.items()}

    def _input(self, op: OpSig, inst: Instance, name: str, arr: Any) -> cla.Array:
        want = element_dtype(op.tensor(name), inst.dtype)
        lay = inst.layout_of(name)
        if isinstance(arr, cla.Array):
            got = array_dtype(op, name, arr)
            if got != want:
                raise CallError(
                    f"{op.name}: input {name!r} is {got.name}, {inst.name} needs {want.name}"
                )
            if arr.offset:
                raise CallError(f"{op.name}: input {name!r} is a view with an offset; pass a copy")
            if arr.size and array_layout(arr) != lay:
                raise CallError(
                    f"{op.name}: input {name!r} (shape {arr.shape}, strides "
                    f"{arr.strides}) is not {lay}-major as {inst.name} needs"
                )
            return arr
        host = np.asarray(arr)
        if host.dtype != want.np_dtype:
            raise CallError(
                f"{op.name}: input {name!r} is {host.dtype}, {inst.name} needs {want.numpy}"
            )
        host = (
            np.asfortranarray(host)
            if (lay == "col" and host.ndim == 2)
            else np.ascontiguousarray(host)
        )
        out = cla.empty(
            self.queue,
            host.shape,
            host.dtype,
            order="F" if lay == "col" and host.ndim == 2 else "C",
        )
        if host.size:
            out.set(host)
        return out

    def scalar_args(
        self, inst: Instance, dims: Mapping[str, int], attrs: Mapping[str, float | int]
    ) -> list[Any]:
        op = self.registry.op(inst.op)
        defaults = {a.name: a.default for a in op.attrs}
        unknown = sorted(set(attrs) - set(defaults))
        if unknown:
            raise CallError(
                f"{op.name}: unknown attribute {', '.join(unknown)} (expects "
                f"{', '.join(defaults) or 'none'})"
            )
        out: list[Any] = []
        for a in inst.args:
            if a.kind == "dim":
                out.append(np.int32(dims[a.name]))
            elif a.kind == "attr":
                value = attrs.get(a.name, defaults[a.name])
                if value is None:
                    raise CallError(f"{op.name}: attribute {a.name!r} has no default; pass it")
                ctype = {"int": np.int32, "float": np.float32, "double": np.float64}[a.ctype]
                out.append(ctype(value))
        return out

    def enqueue(
        self,
        inst: Instance,
        arrays: Mapping[str, cla.Array | cl.Buffer],
        dims: Mapping[str, int],
        attrs: Mapping[str, float | int],
    ) -> cl.Event | None:
        """Bind arrays/buffers and scalars in the registry's order and launch; no copies."""
        geo = geometry(self.registry, inst, dims)
        scalars = iter(self.scalar_args(inst, dims, attrs))
        args: list[Any] = []
        for a in inst.args:
            if a.kind in ("input", "output"):
                buf = arrays[a.name]
                if isinstance(buf, cla.Array):
                    buf = buf.base_data if buf.size else self._dummy
                args.append(buf)
            else:
                args.append(next(scalars))
        if geo.empty:
            return None
        kernel = self.kernel(inst)
        kernel.set_args(*args)
        return cl.enqueue_nd_range_kernel(self.queue, kernel, geo.global_size, geo.local_size)
