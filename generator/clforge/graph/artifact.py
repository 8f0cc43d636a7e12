"""The compiled model: guards checked once per call, one specialization per binding of the
symbolic dims (made on first use, listed in ``model.cache``), its launches prepared ahead.

A specialization runs, per node, the calling convention on the bound sizes (views only: every
graph buffer is row-major and contiguous), binds the op's dims, takes the node's static
instance where its guard holds for these sizes (else re-dispatches, as a compiled op does),
plans the launch with the tuning chain's parameters, sizes the slots, and makes every kernel
ready (`clforge.runtime.launch.ready`): a kernel object of its own per launch with its scalars,
constants, slots, filled inputs and scratch bound once. Its buffers come from the runtime's
pool; a routine's steps that read constants only (gemm's `pack_b` of a weight) run once, then,
into scratch of their own, and every other step's scratch is one set of buffers shared by all
(`launch.constant_steps`, `launch.scratch_sizes`). A call binds only the caller's input
and output buffers and enqueues (`run_ready`). Device-array inputs that are views (an offset,
strides) are taken by `clforge.call.views`: in place through a sub-buffer where the offset is
aligned, else copied, and `explain` says which.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np
import pyopencl.array as cla

from clforge.call import views
from clforge.call.binding import bind, bind_dims, resolve_attrs
from clforge.call.dispatcher import Dispatcher, dispatcher
from clforge.call.eager import fill_value
from clforge.core.dtypes import DTYPES, dtype_of_numpy
from clforge.core.layouts import layout_strides
from clforge.errors import BuildError, CallError, ClforgeError, GraphError
from clforge.graph import fused_kernel
from clforge.graph.buffers import Place
from clforge.graph.explain import explain_plan
from clforge.graph.handoff import HandOff, Panels, panels_of, producer_of, without_packing
from clforge.graph.plan import Plan
from clforge.graph.records import Node
from clforge.graph.schedule import Step
from clforge.graph.select import layouts_of
from clforge.graph.serial import save
from clforge.graph.shapes import canonical_at
from clforge.graph.strides import Strided, strided_views
from clforge.interop.intake import intake_args
from clforge.registry.loader import guard_holds
from clforge.registry.records import Instance
from clforge.runtime.launch import (
    LaunchPlan,
    Ready,
    ReadyLaunch,
    Runtime,
    ScratchSpec,
    constant_steps,
    ready,
    run_ready,
    scratch_sizes,
    shared_scratch,
)
from clforge.runtime.transfer import to_host, upload


@dataclass(frozen=True, eq=False)
class Prepared:
    """One step at one specialization's sizes: its launch plan and its filled inputs."""

    step: Step
    plan: LaunchPlan
    fills: Mapping[str, cla.Array]
    held: bool  # the static instance's guard held (else the step re-dispatched)
    params: str  # the parameters and where they came from (the tuning chain's account)
    source: str = ""  # a fused group's generated OpenCL C (graph/fused_kernel.py)
    # scratch of the plan bound to a value's slot instead (a packed hand-off's panels)
    aliases: tuple[tuple[str, int], ...] = ()


@dataclass(eq=False)
class Specialization:
    dims: tuple[tuple[str, int], ...]
    steps: tuple[Prepared, ...]
    slots: tuple[Any, ...]  # cl.Buffer per slot
    outputs: tuple[tuple[int, tuple[int, ...], np.dtype], ...]  # output k: (value, shape, dtype)
    # per step, its kernels with every argument set but the call's buffers: the graph's inputs
    # (by position) then its outputs (see Model._call)
    ready: tuple[Ready, ...] = ()
    launches: tuple[ReadyLaunch, ...] = ()  # every launch of `ready`, in order
    # per graph output: where it is (an output buffer k, input k by position, a constant by
    # value id), its shape, and where its elements are when it is a view not in place
    results: tuple[tuple[str, int, tuple[int, ...], Strided | None], ...] = ()
    # per-call sub-buffers, appended to a call's buffers: (the call's buffer, byte origin, bytes)
    subs: tuple[tuple[int, int, int], ...] = ()
    views: tuple[str, ...] = ()  # what each view read by a kernel costs at these sizes
    once: tuple[str, ...] = ()  # the steps run once, when the specialization was made
    handoffs: tuple[str, ...] = ()  # the packed hand-offs made, and those not made and why
    # the scratch buffers every step's routine shares (launch.scratch_sizes), held here
    scratch: tuple[Any, ...] = ()
    slot_bytes: tuple[int, ...] = ()  # per slot (its pool block may be larger)
    scratch_bytes: tuple[int, ...] = ()  # per shared scratch buffer

    @property
    def rebound(self) -> int:
        """Kernel arguments a call binds (the caller's buffers); every other one is set ahead."""
        return sum(len(launch.rebind) for launch in self.launches)

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
            "slot_bytes": list(self.slot_bytes),
            "scratch_bytes": list(self.scratch_bytes),
            "kernels": len(self.launches),
            "rebound_per_call": self.rebound,
            "views": list(self.views),
            "run_once": list(self.once),
            "handoffs": list(self.handoffs),
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
    # device-array inputs that came as views (an offset, strides): the latest call's note each
    views: dict[str, str] = field(default_factory=dict, repr=False)
    _runtime: Runtime | None = field(default=None, repr=False)
    _types: tuple[tuple[str, np.dtype, str], ...] | None = field(default=None, repr=False)
    # the specialization of earlier calls by their inputs' key (_call_key): calls that need
    # no checks or views again
    _seen: dict[tuple[Any, ...], Specialization] = field(default_factory=dict, repr=False)

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
        context = self.runtime.context
        for name, np_dtype, dtype in self._input_types:
            a = given[name]
            if not hasattr(a, "shape") or not hasattr(a, "dtype"):
                raise CallError(f"{here}: input {name!r} is a {type(a).__name__}, not an array")
            if a.dtype != np_dtype:
                dt = dtype_of_numpy(np.dtype(a.dtype))
                if dt is None or dt.name != dtype:
                    raise CallError(
                        f"{here}: input {name!r} has dtype {a.dtype}; the graph takes {dtype}"
                    )
            if isinstance(a, cla.Array) and a.context != context:
                raise CallError(f"{here}: input {name!r} is a device array of another context")
        return given

    @property
    def runtime(self) -> Runtime:
        rt = self._runtime
        if rt is None:
            rt = self._runtime = self.dispatcher.runtime
        return rt

    @property
    def _input_types(self) -> tuple[tuple[str, np.dtype, str], ...]:
        """Per graph input: its name, NumPy dtype and dtype name (made once)."""
        types = self._types
        if types is None:
            ir = self.plan.ir
            values = [ir.value(vid) for vid in ir.inputs]
            types = self._types = tuple((v.name, DTYPES[v.dtype].np_dtype, v.dtype) for v in values)
        return types

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # a call like an earlier one (inputs by position, of the same types, shapes, dtypes and
        # memory layout: the guards are a function of these) takes the specialization that one
        # found, without checking and binding again
        key = None if kwargs else _call_key(args)
        if key is not None:
            with self._lock:
                spec = self._seen.get(key)
                if spec is not None:
                    inputs = [_on_device(self.runtime, a) for a in args]
                    return self._launch(spec, inputs, any(type(a) is cla.Array for a in args))
        # PyTorch tensors and DLPack producers: in without a copy where the device allows, the
        # results back as their type (clforge.interop.intake)
        taken = intake_args(f"graph {self.name!r}", args, kwargs, self.runtime)
        if taken is not None:
            return taken[2](self(*taken[0], **taken[1]))
        with self._lock:
            return self._call(args, kwargs, key)

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any], key: Any = None) -> Any:
        given = self._arrays(args, kwargs)
        shapes = {k: tuple(int(n) for n in a.shape) for k, a in given.items()}
        env = self.plan.guards.bind(self.name, shapes)
        spec = self.specialization(env)
        rt = self.runtime
        inputs: list[cla.Array] = []
        for name, _, _ in self._input_types:
            a = given[name]
            if not isinstance(a, cla.Array):
                a = _on_device(rt, a)
            elif views.pending((a,)):  # an offset or strides: graph inputs are read row-major
                taken = views.take(rt, (a,), (name,), (("row",),), f"graph {self.name!r}")
                a = taken.arrays[0]
                self.views[name] = taken.notes[0]
                key = None  # each such call gathers its view, and keeps the note
            inputs.append(a)
        if key is not None:
            if len(self._seen) >= SEEN:
                self._seen.clear()
            self._seen[key] = spec
        return self._launch(spec, inputs, any(isinstance(a, cla.Array) for a in given.values()))

    def _launch(self, spec: Specialization, inputs: list[cla.Array], on_device: bool) -> Any:
        """Run `spec` on the graph's inputs on the device (in declaration order); the results
        as device arrays where `on_device` (an input was one), else as NumPy arrays."""
        rt = self.runtime
        outs = [
            rt.empty(("out", shape, dt, layout_strides(shape, dt.itemsize, "row")))
            for _, shape, dt in spec.outputs
        ]
        buffers = [arr.base_data if arr.size else rt.dummy for arr in (*inputs, *outs)]
        for j, origin, nbytes in spec.subs:  # views of the call's buffers at aligned offsets
            buffers.append(views.sub_region(buffers[j], origin, nbytes))
        run_ready(rt.queue, spec.launches, buffers, rt.context)
        results = []
        for kind, index, shape, strided in spec.results:
            if strided is not None:
                if kind == "output":
                    whole = outs[index]
                elif kind == "input":
                    whole = inputs[index]
                else:
                    whole = self._constant(index)
                res = self._view_result(whole, strided)
            elif kind == "output":
                res = outs[index]
                if res.shape != shape:
                    res = res.reshape(shape)
            elif kind == "input":
                res = inputs[index].reshape(shape).copy()
            else:
                res = self._constant(index).reshape(shape).copy()
            results.append(res if on_device else to_host(res))
        return results[0] if len(results) == 1 else tuple(results)

    def _view_result(self, whole: cla.Array, s: Strided) -> cla.Array:
        """A graph output that is a view (a slice) of `whole`'s memory, as a new row-major
        array."""
        item = whole.dtype.itemsize
        rt = self.runtime
        if math.prod(s.shape) == 0:
            return rt.empty(("y", s.final, whole.dtype, layout_strides(s.final, item, "row")))
        seen = cla.Array(
            rt.queue,
            s.shape,
            whole.dtype,
            strides=tuple(x * item for x in s.strides),
            data=whole.base_data,
            offset=s.offset * item,
        )
        taken = views.take(rt, (seen,), ("y",), (("row",),), f"graph {self.name!r}")
        res = taken.arrays[0] if taken.copies else taken.arrays[0].copy()
        return res if s.final == s.shape else res.reshape(s.final)

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
        prepared = [
            self._prepare(by_id[s.node], s, env, d) if s.group is None else self._fused(s, env, d)
            for s in self.plan.schedule.steps
        ]
        prepared, handoffs, least = self._hand_off(prepared, env, d)
        rt = d.runtime
        # slots and scratch from the runtime's pool (large blocks get huge pages, as eager
        # calls' buffers do: runtime/hugepages.py), held by the specialization
        every = strided_views(ir, env)
        strided = {k: g for k, g in every.items() if not g.in_place}
        # steps that read constants only (gemm's pack_b of a weight) run once, here, with
        # scratch of their own; the others share one set of scratch buffers
        once = [constant_steps(p.plan, _constant_tensors(p.step, strided)) for p in prepared]
        shared = [
            tuple(x for x in p.plan.scratch if x[0] not in own)
            for p, (_, own) in zip(prepared, once, strict=True)
        ]
        slot_bytes = [max(s.nbytes(env), least.get(s.index, 0)) for s in self.plan.buffers.slots]
        scratch_bytes = scratch_sizes(shared)
        slots = [rt.allocator(n) if n else None for n in slot_bytes]
        scratch = [rt.allocator(n) if n else None for n in scratch_bytes]
        outputs: dict[int, tuple[int, tuple[int, ...], np.dtype]] = {}
        for vid, place in self.plan.buffers.places:
            if place.kind == "output" and place.index not in outputs:
                v = ir.value(vid)
                if v.node is not None and by_id[v.node].view:
                    continue
                shape = tuple(x.evaluate(env) for x in v.shape)
                outputs[place.index] = (vid, shape, DTYPES[v.dtype].np_dtype)
        binder = _ViewBinder(self, slots, scratch, strided, len(ir.inputs) + len(outputs))
        made = tuple(
            binder.ready(p, sh, hoist)
            for p, sh, (hoist, _) in zip(prepared, shared, once, strict=True)
        )
        position = {vid: k for k, vid in enumerate(ir.inputs)}
        results = []
        for vid in ir.outputs:
            place = self.plan.buffers.place(vid)
            index = position[place.index] if place.kind == "input" else place.index
            shape = tuple(x.evaluate(env) for x in ir.value(vid).shape)
            # a view output is taken out of its root unless it is the root's whole memory
            view = every.get(vid)
            if view is not None and view.in_place:
                root = math.prod(x.evaluate(env) for x in ir.value(view.root).shape)
                view = None if math.prod(shape) == root else view
            results.append((place.kind, index, shape, view))
        return Specialization(
            tuple(sorted(env.items())),
            tuple(prepared),
            tuple(slots),
            tuple(outputs[k] for k in sorted(outputs)),
            made,
            tuple(launch for r in made for launch in r.launches),
            tuple(results),
            tuple(binder.subs),
            tuple(binder.notes),
            tuple(binder.once),
            tuple(handoffs),
            tuple(scratch),
            tuple(slot_bytes),
            tuple(scratch_bytes),
        )

    def _prepare(self, n: Node, step: Step, env: Mapping[str, int], d: Dispatcher) -> Prepared:
        ir = self.plan.ir
        sig = d.registry.op(n.op)
        here = f"graph {self.name!r}: node {n.id} ({n.op})"
        try:
            canon, attrs = canonical_at(sig, ir, n, env)
            shapes: dict[str, Any] = dict(canon.inputs)
            fills: dict[str, cla.Array] = {}
            missing = [t for t in sig.inputs if t.name not in shapes]
            if missing:
                given_shapes = {k: tuple(a.shape) for k, a in shapes.items()}
                dims = bind_dims(sig, given_shapes, resolve_attrs(sig, attrs))
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
            plan = d.plan_instance(inst, b, _hoists(inst, step))
        except BuildError:
            if inst is not static:
                raise
            inst = d.choose(n.op, n.dtype, layouts, b.env)
            plan = d.plan_instance(inst, b, _hoists(inst, step))
        for (tensor, vid), (name, shape, _, _) in zip(n.outputs, plan.outputs, strict=True):
            want = math.prod(x.evaluate(env) for x in ir.value(vid).shape)
            if name != tensor or math.prod(shape) != want:  # pragma: no cover - a planning slip
                raise GraphError(
                    f"{here}: output {tensor} has {math.prod(shape)} elements, not {want}"
                )
        choice = d.params_for(inst, b.env, _hoists(inst, step))
        origin = (
            choice.describe()
            if dict(choice.params) == dict(plan.params)
            else f"{dict(plan.params)}: spec defaults (the chosen set could not be built)"
        )
        return Prepared(step, plan, fills, held, origin)

    def _hand_off(
        self, prepared: list[Prepared], env: Mapping[str, int], d: Dispatcher
    ) -> tuple[list[Prepared], list[str], dict[int, int]]:
        """The fuse stage's packed hand-offs (graph/handoff.py) that the instances chosen at
        these sizes allow: the producer re-planned to store the value in the panels its reader
        packs it into, the reader's packing step left out and its scratch bound to the value's
        slot. Also what each made or why not, and the least bytes of each slot that holds
        panels."""
        ir = self.plan.ir
        steps = list(prepared)
        at = {p.step.node: k for k, p in enumerate(steps)}
        made: list[tuple[HandOff, Panels]] = []
        notes: list[str] = []
        for h in self.plan.fused.handoffs:
            kp, kc = at.get(h.producer), at.get(h.consumer)
            if kp is None or kc is None:  # pragma: no cover - the schedule runs every node
                continue
            value = ir.value(h.value)
            here = f"{value.name} from node {h.producer} to node {h.consumer}"
            consumer = ir.node(h.consumer)
            canon, _ = canonical_at(d.registry.op(consumer.op), ir, consumer, env)
            panels, why = panels_of(h, steps[kc].plan, tuple(canon.inputs[h.tensor].shape))
            producer = steps[kp].plan
            if panels is not None and producer.inst.epilogue != producer_of(ir.node(h.producer)):
                panels, why = None, f"{producer.inst.name} declares no epilogue point"
            # its template stores by rows of its canonical output: they must be the panels' K
            rows = producer.outputs[0][1] if producer.outputs else ()
            if panels is not None and tuple(rows[-1:]) != (panels.K,):
                why = f"{producer.inst.name} stores rows of {rows[-1:]}, not of {panels.K}"
                panels = None
            if panels is None or self.plan.buffers.place(h.value).kind != "slot":
                notes.append(f"not handed off: {here}: {why or 'not in a slot'}")
                continue
            made.append((h, panels))
            notes.append(
                f"handed off: {here}: stored in the panels of {panels.R} rows that "
                f"{panels.step} would pack; {panels.step} not launched"
            )
        chosen = {s.node: s.instance for s in self.plan.selections}
        least: dict[int, int] = {}
        for h, panels in made:  # producers first: a re-planned producer starts from its base
            kp = at[h.producer]
            p = steps[kp]
            node = ir.node(h.producer)
            if p.step.group is not None:
                fk = self.plan.fused.groups[p.step.group].kernel
                base = self._prepare(node, p.step, env, d)
            else:
                fk, base = fused_kernel.describe(d.registry, ir, [], (h.value,), (), node), p
            if fk is None:  # pragma: no cover - a group's step names its kernel
                continue
            plan, how, source = fused_kernel.plan_epilogue(
                d, ir, fk, base.plan, chosen, env, panels.context()
            )
            steps[kp] = dataclasses.replace(
                p, plan=plan, params=f"{base.params}; {how}", source=source
            )
            slot = self.plan.buffers.place(h.value).index
            item = DTYPES[ir.value(h.value).dtype].size
            least[slot] = max(least.get(slot, 0), panels.elements * item)
        for h, panels in made:
            kc = at[h.consumer]
            p = steps[kc]
            steps[kc] = dataclasses.replace(
                p,
                plan=without_packing(p.plan, panels),
                aliases=(*p.aliases, (panels.scratch, h.value)),
            )
        return steps, notes, least

    def _fused(self, step: Step, env: Mapping[str, int], d: Dispatcher) -> Prepared:
        """A fused group's step: its generated kernel, planned as a node's launch is."""
        fk = self.plan.fused.groups[step.group or 0].kernel
        if fk is None:  # pragma: no cover - the schedule names fused groups only
            raise GraphError(f"graph {self.name!r}: step {step.op} names no fused kernel")
        chosen = {s.node: s.instance for s in self.plan.selections}
        if fk.producer is not None:  # the producer's own launch, the chain at its epilogue
            base = self._prepare(self.plan.ir.node(fk.producer), step, env, d)
            plan, how, source = fused_kernel.plan_epilogue(
                d, self.plan.ir, fk, base.plan, chosen, env
            )
            return Prepared(step, plan, base.fills, base.held, f"{base.params}; {how}", source)
        plan, params, source = fused_kernel.plan(d, self.plan.ir, fk, chosen, env)
        return Prepared(step, plan, {}, True, params, source)

    # --- explain, save ------------------------------------------------------------------------

    def explain(self, file: TextIO | None = sys.stdout, *, verbose: bool = False) -> str:
        """Every stage's output (and the specializations made so far); printed to `file`
        (None: not printed) and returned. `verbose` adds each node's full verdict table (every
        candidate, chosen, eligible or rejected, and why)."""
        text = explain_plan(self.plan, self.cache, verbose=verbose)
        if self.views:
            text += "\n== views (device-array inputs given as views: the latest call's note each)"
            text += "".join(f"\n  {note}" for note in self.views.values())
        if file is not None:
            print(text, file=file)
        return text

    def save(self, path: Any) -> None:
        """Write the plan and the guards as data (JSON), constants included."""
        save(self.plan, path)


SEEN = 64  # calls remembered by their inputs (Model._seen), forgotten all at once beyond


def _call_key(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What a call's guards and input handling depend on, where every input is a NumPy array
    (taken row-major) or a device array (its strides, offset and context too); None for any
    other input."""
    key: list[Any] = []
    for a in args:
        t = type(a)
        if t is cla.Array:
            key.append((a.shape, a.dtype, a.strides, a.offset, a.context.int_ptr))
        elif t is np.ndarray:
            key.append((None, a.shape, a.dtype))
        else:
            return None
    return tuple(key)


def _on_device(rt: Runtime, a: Any) -> cla.Array:
    """A graph input on the device: a device array as it is, a host array uploaded row-major."""
    return a if type(a) is cla.Array else upload(rt, np.ascontiguousarray(a), "row")


def _hoists(inst: Instance, step: Step) -> bool:
    """Whether `inst` has a step that reads only the node's constants (gemm's pack_b of a
    weight): it runs once per specialization (`Dispatcher.params_for`'s `hoisted`)."""
    return inst.packs_once(
        {t for t, _, place in step.inputs if place is None or place.kind == "constant"}
    )


def _constant_tensors(step: Step, strided: Mapping[int, Strided]) -> set[str]:
    """The step's input tensors whose buffers hold the same data every call: constants (read
    as they are, not through a gather) and filled inputs."""
    return {
        tensor
        for tensor, vid, place in step.inputs
        if place is None or (place.kind == "constant" and vid not in strided)
    }


class _ViewBinder:
    """Makes a specialization's steps ready (`clforge.runtime.launch.ready`): a graph input is
    the call's buffer at its position among the inputs, output k at len(inputs) + k. A kernel
    input that is a view not in place (`strides.Strided`) is read through a sub-buffer where it
    is row-major at an aligned offset (made once for a slot or a constant, per call for a
    call's buffer: `subs`), else gathered row-major into a buffer of the specialization by a
    kernel before the step; `notes` says which, per view."""

    def __init__(
        self,
        model: Model,
        slots: list[Any],
        scratch: list[Any],
        strided: Mapping[int, Strided],
        per_call: int,
    ) -> None:
        self.model = model
        self.rt = model.runtime
        self.slots = slots
        self.scratch = scratch
        self.strided = strided
        self.first_sub = per_call
        self.subs: list[tuple[int, int, int]] = []
        self.notes: list[str] = []
        self.once: list[str] = []
        self.position = {vid: k for k, vid in enumerate(model.plan.ir.inputs)}

    def _base(self, place: Place) -> tuple[Any, int | None]:
        """The buffer of a place (fixed), or the index of the call's buffer."""
        if place.kind == "input":
            return None, self.position[place.index]
        if place.kind == "output":
            return None, len(self.position) + place.index
        if place.kind == "constant":
            arr = self.model._constant(place.index)
            return (arr.base_data if arr.size else self.rt.dummy), None
        buf = self.slots[place.index]
        return (buf if buf is not None else self.rt.dummy), None

    def ready(self, p: Prepared, shared: tuple[ScratchSpec, ...], once: tuple[int, ...]) -> Ready:
        """`p`'s kernels made ready, its scratch in `shared` bound to the shared buffers; the
        launches at indices `once` (`launch.constant_steps`) are enqueued now and left out."""
        rt = self.rt
        ir = self.model.plan.ir
        fixed: dict[str, Any] = shared_scratch(rt, shared, self.scratch)
        for name, value in p.aliases:  # a packed hand-off's panels: the value's slot
            fixed[name] = self._base(self.model.plan.buffers.place(value))[0]
        per_call: dict[str, int] = {}
        before: list[ReadyLaunch] = []
        held: list[Any] = []
        for tensor, vid, place in (*p.step.inputs, *p.step.outputs):
            if place is None:
                fill = p.fills[tensor]
                fixed[tensor] = fill.base_data if fill.size else rt.dummy
                continue
            base, index = self._base(place)
            s = self.strided.get(vid) if vid is not None else None
            if s is None or vid is None or math.prod(s.shape) == 0:
                if index is None:
                    fixed[tensor] = base
                else:
                    per_call[tensor] = index
                continue
            item = DTYPES[ir.value(vid).dtype].size
            origin, nbytes = s.offset * item, math.prod(s.shape) * item
            here = f"node {p.step.node} ({p.step.op}) input {tensor} = {ir.value(vid).name}"
            if s.row_major and origin % views.alignment(rt) == 0:
                if index is None:
                    fixed[tensor] = views.sub_region(base, origin, nbytes)
                else:
                    self.subs.append((index, origin, nbytes))
                    per_call[tensor] = self.first_sub + len(self.subs) - 1
                self.notes.append(f"{here}: read in place through a sub-buffer at byte {origin}")
                continue
            dst = rt.allocator(nbytes)
            held.append(dst)
            before.append(
                views.gather_launch(rt, item, s.offset, s.shape, s.strides, dst, base, index)
            )
            fixed[tensor] = dst
            why = (
                f"offset {origin} bytes is not a multiple of the device's "
                f"{views.alignment(rt)}-byte sub-buffer alignment"
                if s.row_major
                else f"strides {s.strides} (elements) for shape {s.shape} are not row-major"
            )
            self.notes.append(f"{here}: gathered row-major by a kernel before the step ({why})")
        r = ready(rt, p.plan, fixed, per_call)
        if once:  # no argument of theirs is the call's: nothing to rebind
            run_ready(rt.queue, tuple(r.launches[i] for i in once), ())
            step_of = {s.kernel: s.name for s in p.plan.inst.kernels}
            names = ", ".join(step_of[p.plan.launches[i].kernel.function_name] for i in once)
            self.once.append(
                f"node {p.step.node} ({p.step.op}): {names} run once, when the specialization "
                "was made (reading constants only, into scratch of its own)"
            )
        kept = tuple(x for i, x in enumerate(r.launches) if i not in once)
        return Ready((*before, *kept), (*r.held, *held))
