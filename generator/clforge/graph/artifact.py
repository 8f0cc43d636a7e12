"""The compiled model: guards checked once per call, one specialization per binding of the
symbolic dims (made on first use, listed in ``model.cache``), its launches prepared ahead.

A specialization runs, per node, the calling convention on the bound sizes (views only: every
graph buffer is row-major and contiguous), binds the op's dims, takes the node's static
instance where its guard holds for these sizes (else re-dispatches, as a compiled op does),
plans the launch with the tuning chain's parameters, and sizes the slots. A call binds the
caller's arrays and the planned buffers and enqueues.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from clforge.call.binding import bind, bind_dims
from clforge.call.dispatcher import Dispatcher, dispatcher
from clforge.call.eager import fill_value
from clforge.conventions import CONVENTIONS
from clforge.core.dtypes import DTYPES, dtype_of_numpy
from clforge.core.layouts import layout_strides
from clforge.errors import BuildError, CallError, ClforgeError, GraphError
from clforge.graph.buffers import Place
from clforge.graph.explain import explain_plan
from clforge.graph.plan import Plan
from clforge.graph.records import Node
from clforge.graph.schedule import Step
from clforge.graph.select import layouts_of
from clforge.graph.serial import save
from clforge.graph.shapes import probe_array
from clforge.interop.intake import intake_args
from clforge.registry.loader import guard_holds
from clforge.runtime.launch import LaunchPlan
from clforge.runtime.transfer import to_host, upload


@dataclass(frozen=True, eq=False)
class Prepared:
    """One step at one specialization's sizes: its launch plan and its filled inputs."""

    step: Step
    plan: LaunchPlan
    fills: Mapping[str, cla.Array]
    held: bool  # the static instance's guard held (else the step re-dispatched)
    params: str  # the parameters and where they came from (the tuning chain's account)


@dataclass(eq=False)
class Specialization:
    dims: tuple[tuple[str, int], ...]
    steps: tuple[Prepared, ...]
    slots: tuple[Any, ...]  # cl.Buffer per slot
    outputs: tuple[tuple[int, tuple[int, ...], np.dtype], ...]  # output k: (value, shape, dtype)

    def summary(self) -> dict[str, Any]:
        return {
            "dims": dict(self.dims),
            "nodes": [
                {
                    "node": p.step.node,
                    "op": p.step.op,
                    "instance": p.plan.inst.name,
                    "guard_held": p.held,
                    "params": dict(p.plan.params),
                    "params_from": p.params,
                }
                for p in self.steps
            ],
            "slot_bytes": [s.size if s is not None else 0 for s in self.slots],
        }


@dataclass(eq=False)
class Model:
    """A compiled graph. Call it with the graph's inputs (by position in declaration order, or
    by name): NumPy arrays in, NumPy arrays out; pyopencl arrays in, pyopencl arrays out."""

    plan: Plan
    queue: Any = None
    # the specializations made: (dim, size) pairs -> what each node runs
    cache: dict[tuple[tuple[str, int], ...], Specialization] = field(default_factory=dict)
    _constants: dict[int, cla.Array] = field(default_factory=dict, repr=False)
    # one call at a time: the slots are shared by every call of a specialization
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def name(self) -> str:
        return self.plan.ir.name

    @property
    def dispatcher(self) -> Dispatcher:
        return dispatcher(self.queue)

    # --- a call -------------------------------------------------------------------------------

    def _arrays(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        ir = self.plan.ir
        names = [ir.value(v).name for v in ir.inputs]
        here = f"graph {self.name!r}"
        if len(args) > len(names):
            raise CallError(
                f"{here}: takes {len(names)} inputs ({', '.join(names)}), got {len(args)}"
            )
        given = dict(zip(names, args, strict=False))
        for k, a in kwargs.items():
            if k not in names:
                raise CallError(f"{here}: no input named {k!r} (inputs: {', '.join(names)})")
            if k in given:
                raise CallError(f"{here}: input {k!r} given by position and by keyword")
            given[k] = a
        missing = [n for n in names if n not in given]
        if missing:
            raise CallError(f"{here}: missing input {', '.join(map(repr, missing))}")
        for vid in ir.inputs:
            v = ir.value(vid)
            a = given[v.name]
            if not hasattr(a, "shape") or not hasattr(a, "dtype"):
                raise CallError(f"{here}: input {v.name!r} is a {type(a).__name__}, not an array")
            dt = dtype_of_numpy(np.dtype(a.dtype))
            if dt is None or dt.name != v.dtype:
                raise CallError(
                    f"{here}: input {v.name!r} has dtype {a.dtype}; the graph takes {v.dtype}"
                )
            if isinstance(a, cla.Array):
                if a.context != self.dispatcher.runtime.context:
                    raise CallError(
                        f"{here}: input {v.name!r} is a device array of another context"
                    )
                if a.offset or not (a.flags.c_contiguous or a.size == 0):
                    raise CallError(
                        f"{here}: input {v.name!r} (shape {a.shape}, strides {a.strides}, offset "
                        f"{a.offset}) must be a contiguous row-major array; pass a copy (views "
                        "without copies are not supported in graphs yet)"
                    )
        return given

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # PyTorch tensors and DLPack producers: in without a copy where the device allows, the
        # results back as their type (clforge.interop.intake)
        taken = intake_args(f"graph {self.name!r}", args, kwargs, self.dispatcher.runtime)
        if taken is not None:
            return taken[2](self(*taken[0], **taken[1]))
        with self._lock:
            return self._call(args, kwargs)

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        ir = self.plan.ir
        given = self._arrays(args, kwargs)
        shapes = {k: tuple(int(n) for n in a.shape) for k, a in given.items()}
        env = self.plan.guards.bind(self.name, shapes)
        spec = self.specialization(env)
        d = self.dispatcher
        rt = d.runtime
        on_device = any(isinstance(a, cla.Array) for a in given.values())
        inputs: dict[int, cla.Array] = {}
        for vid in ir.inputs:
            a = given[ir.value(vid).name]
            if not isinstance(a, cla.Array):
                a = upload(rt, np.ascontiguousarray(a), "row")
            inputs[vid] = a
        outs = [
            rt.empty(("out", shape, dt, layout_strides(shape, dt.itemsize, "row")))
            for _, shape, dt in spec.outputs
        ]

        def memory(place: Place) -> Any:
            if place.kind == "input":
                arr = inputs[place.index]
            elif place.kind == "constant":
                arr = self._constant(place.index)
            elif place.kind == "output":
                arr = outs[place.index]
            else:
                buf = spec.slots[place.index]
                return buf if buf is not None else rt.dummy
            return arr.base_data if arr.size else rt.dummy

        for p in spec.steps:
            buffers: dict[str, Any] = {}
            for tensor, _, place in p.step.inputs:
                if place is None:
                    fill = p.fills[tensor]
                    buffers[tensor] = fill.base_data if fill.size else rt.dummy
                else:
                    buffers[tensor] = memory(place)
            for tensor, _, place in p.step.outputs:
                buffers[tensor] = memory(place)
            rt.run(p.plan, buffers)
        results = []
        for vid in ir.outputs:
            v = ir.value(vid)
            shape = tuple(d.evaluate(env) for d in v.shape)
            place = self.plan.buffers.place(vid)
            if place.kind == "output":
                res = outs[place.index].reshape(shape)
            elif place.kind == "input":
                res = inputs[place.index].reshape(shape).copy()
            else:
                res = self._constant(place.index).reshape(shape).copy()
            results.append(res if on_device else to_host(res))
        return results[0] if len(results) == 1 else tuple(results)

    def _constant(self, vid: int) -> cla.Array:
        arr = self._constants.get(vid)
        if arr is None:
            host = self.plan.ir.constants[vid]
            arr = upload(self.dispatcher.runtime, np.ascontiguousarray(host), "row")
            self._constants[vid] = arr
        return arr

    # --- specializations ----------------------------------------------------------------------

    def specialization(self, env: Mapping[str, int]) -> Specialization:
        """The specialization for these dims (made on first use)."""
        key = tuple(sorted(env.items()))
        spec = self.cache.get(key)
        if spec is None:
            spec = self._specialize(dict(env))
            self.cache[key] = spec
        return spec

    def _specialize(self, env: dict[str, int]) -> Specialization:
        ir = self.plan.ir
        d = self.dispatcher
        by_id = {n.id: n for n in ir.nodes}
        prepared = [self._prepare(by_id[s.node], s, env, d) for s in self.plan.schedule.steps]
        slots = []
        for s in self.plan.buffers.slots:
            nbytes = s.nbytes(env)
            slots.append(
                cl.Buffer(d.runtime.context, cl.mem_flags.READ_WRITE, nbytes) if nbytes else None
            )
        outputs: dict[int, tuple[int, tuple[int, ...], np.dtype]] = {}
        for vid, place in self.plan.buffers.places:
            if place.kind == "output" and place.index not in outputs:
                v = ir.value(vid)
                if v.node is not None and by_id[v.node].view:
                    continue
                shape = tuple(x.evaluate(env) for x in v.shape)
                outputs[place.index] = (vid, shape, DTYPES[v.dtype].np_dtype)
        return Specialization(
            tuple(sorted(env.items())),
            tuple(prepared),
            tuple(slots),
            tuple(outputs[k] for k in sorted(outputs)),
        )

    def _prepare(self, n: Node, step: Step, env: Mapping[str, int], d: Dispatcher) -> Prepared:
        ir = self.plan.ir
        sig = d.registry.op(n.op)
        here = f"graph {self.name!r}: node {n.id} ({n.op})"
        given: dict[str, Any] = {}
        for tensor, vid in n.inputs:
            if vid is not None:
                v = ir.value(vid)
                given[tensor] = probe_array(tuple(x.evaluate(env) for x in v.shape), v.dtype)
        try:
            canon = CONVENTIONS[sig.call].canonical(
                sig, {t.name: given.get(t.name) for t in sig.inputs}, dict(n.options)
            )
            attrs = {**dict(n.attrs), **canon.attrs}
            shapes: dict[str, Any] = dict(canon.inputs)
            fills: dict[str, cla.Array] = {}
            missing = [t for t in sig.inputs if t.name not in shapes]
            if missing:
                dims = bind_dims(sig, {k: tuple(a.shape) for k, a in shapes.items()}, attrs)
                for t in missing:
                    shape = (1,) * len(t.shape) if t.broadcast else tuple(dims[x] for x in t.shape)
                    np_dtype = DTYPES[t.dtype or n.dtype].np_dtype
                    host = np.full(shape, fill_value(t.fill, np_dtype), np_dtype)
                    fills[t.name] = cla.to_device(d.runtime.queue, host)
                    shapes[t.name] = host
            b = bind(sig, shapes, attrs)
        except ClforgeError as exc:
            raise CallError(f"{here}: {exc}") from None
        if canon.then is not None or canon.casts:  # pragma: no cover - refused at capture
            raise GraphError(f"{here}: the call needs more than one launch at these sizes")
        layouts = layouts_of(n)
        static = d.registry.instance(self.plan.selection(n.id).instance)
        held = guard_holds(d.registry, static, b.env)
        inst = static if held else d.choose(n.op, n.dtype, layouts, b.env)
        try:
            plan = d.plan_instance(inst, b)
        except BuildError:
            if inst is not static:
                raise
            inst = d.choose(n.op, n.dtype, layouts, b.env)
            plan = d.plan_instance(inst, b)
        for (tensor, vid), (name, shape, _, _) in zip(n.outputs, plan.outputs, strict=True):
            want = math.prod(x.evaluate(env) for x in ir.value(vid).shape)
            if name != tensor or math.prod(shape) != want:  # pragma: no cover - a planning slip
                raise GraphError(
                    f"{here}: output {tensor} has {math.prod(shape)} elements, not {want}"
                )
        choice = d.params_for(inst, b.env)
        origin = (
            choice.describe()
            if dict(choice.params) == dict(plan.params)
            else f"{dict(plan.params)}: spec defaults (the chosen set could not be built)"
        )
        return Prepared(step, plan, fills, held, origin)

    # --- explain, save ------------------------------------------------------------------------

    def explain(self, file: TextIO | None = sys.stdout, *, verbose: bool = False) -> str:
        """Every stage's output (and the specializations made so far); printed to `file`
        (None: not printed) and returned. `verbose` adds each node's full verdict table (every
        candidate, chosen, eligible or rejected, and why)."""
        text = explain_plan(self.plan, self.cache, verbose=verbose)
        if file is not None:
            print(text, file=file)
        return text

    def save(self, path: Any) -> None:
        """Write the plan and the guards as data (JSON), constants included."""
        save(self.plan, path)
