"""The one launch path: a :class:`LaunchPlan` (everything that depends only on the instance, the
dims and the attributes: kernel, NDRange, scalar arguments, output shapes), which callers
memoize, and :meth:`Runtime.enqueue`, which allocates the outputs, binds the buffers and
enqueues. Every caller (dispatcher, memoized eager recipes, compiled ops) launches through it.

Launches are safe from any number of threads: binding a kernel's arguments and enqueueing it
are one step under the runtime's lock (a `cl.Kernel` holds its arguments, so two threads that
interleave the two would run each other's buffers), and kernels are created under it too.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
from pyopencl.tools import ImmediateAllocator, MemoryPool

from clforge.core import expressions
from clforge.core.dtypes import DTYPES
from clforge.core.layouts import element_strides, layout_strides
from clforge.device.discovery import default_device
from clforge.errors import BuildError, CallError, TemplateError
from clforge.params.space import Params, as_params
from clforge.registry import loader as registry_mod
from clforge.registry.loader import Registry
from clforge.registry.records import Instance, Step
from clforge.runtime import hugepages
from clforge.runtime.program_cache import ProgramCache

SCALAR_TYPES = {"int": np.int32, "float": np.float32, "double": np.float64}
_INT32 = np.iinfo(np.int32)

# name, shape, dtype, byte strides
OutputSpec = tuple[str, tuple[int, ...], np.dtype, tuple[int, ...]]


@dataclass(frozen=True)
class Geometry:
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None

    @property
    def empty(self) -> bool:
        return any(g == 0 for g in self.global_size)


def geometry(
    reg: Registry,
    inst: Instance,
    dims: Mapping[str, int],
    params: Mapping[str, int] | None = None,
    step: Step | None = None,
) -> Geometry:
    """The NDRange of `inst` (or of its `step`) for these dims and parameters (default the
    spec's), from the registry's expressions."""
    env = {**dims, **(inst.param_map if params is None else params)}
    ex = reg.exprs(inst, step)
    gs = tuple(e.evaluate(env) for e in ex.global_size)
    ls = tuple(e.evaluate(env) for e in ex.local_size) if ex.local_size is not None else None
    if ls is not None and (
        len(ls) != len(gs) or any(g % l_ for g, l_ in zip(gs, ls, strict=False) if l_)
    ):
        where = f"{inst.name} step {step.name}" if step is not None else inst.name
        raise CallError(
            f"{where}: global size {gs} is not a multiple of local size {ls} "
            "(a spec error in launch:)"
        )
    return Geometry(gs, ls)


@dataclass(frozen=True, eq=False)
class KernelLaunch:
    """One kernel of a plan: the kernel, its NDRange, its arguments with the scalars in place
    and None where a buffer goes, and which buffer goes where."""

    kernel: cl.Kernel
    geometry: Geometry
    args: tuple[Any, ...]
    buffers: tuple[tuple[int, str], ...]  # (argument index, tensor or scratch name)


@dataclass(frozen=True, eq=False)
class LaunchPlan:
    """A launch with everything but the arrays decided: the kernels in order (one, or a
    routine's steps; those with an empty NDRange left out), the scratch buffers between them,
    and the outputs."""

    inst: Instance
    params: Params  # the compile-time parameters the kernels were built with
    launches: tuple[KernelLaunch, ...]
    scratch: tuple[tuple[str, int, np.dtype], ...]  # (name, elements, dtype)
    outputs: tuple[OutputSpec, ...]


def _scalar(inst: Instance, name: str, ctype: str, value: float | int) -> Any:
    if ctype == "int" and not _INT32.min <= int(value) <= _INT32.max:
        raise CallError(
            f"{inst.op}: {name} = {value} does not fit the kernel's 32-bit int argument "
            f"(range {_INT32.min}..{_INT32.max})"
        )
    return SCALAR_TYPES[ctype](value)  # type: ignore[arg-type]


class Runtime:
    """One OpenCL context and queue, with its built programs and kernels and its buffer pool."""

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
        self.max_alloc: int = int(self.device.max_mem_alloc_size)
        self.registry = reg or registry_mod.default()
        self.cache = cache if cache is not None else ProgramCache.default()
        self._kernels: dict[tuple[str, Params], cl.Kernel] = {}
        self._sources: dict[tuple[str, Params], str] = {}
        self._helpers: dict[str, cl.Kernel] = {}  # kernels of the runtime's own, by name
        # a kernel holds its arguments: binding and enqueueing are one step under this lock
        self.lock = threading.RLock()
        self.dummy = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, 64)  # for empty tensors
        # outputs and input copies come from a pool: a fresh buffer per call would pay page
        # faults on first touch (a 64 MiB output costs more than the kernel that fills it)
        self.pool = MemoryPool(ImmediateAllocator(queue))
        # on a CPU device, large blocks also get transparent huge pages (hugepages.py)
        self.allocator: Any = (
            hugepages.AdvisingAllocator(queue, self.pool)
            if hugepages.wanted(self.device)
            else self.pool
        )

    # --- building ---------------------------------------------------------------------------

    def source(self, inst: Instance, params: Params | None = None) -> str:
        """The OpenCL C of `inst` with `params` (default: the spec's, as generated). Other
        parameters are rendered from the tree's templates, once per runtime."""
        if params is None or params == as_params(inst.param_map):
            return self.registry.source(inst)
        key = (inst.name, params)
        text = self._sources.get(key)
        if text is None:
            from clforge.emit.render import Renderer  # Jinja only when a tuned set needs it

            tuned = dataclasses.replace(inst, params=params)
            tree = self.registry.tree_of(inst)
            if tree is None:
                raise TemplateError(
                    f"{inst.name}: its tree is installed without its templates, so only its "
                    "generated defaults can run"
                )
            text = Renderer(tree).render(tuned, self.registry.op(inst.op), inst.template)
            self._sources[key] = text
        return text

    def build(self, inst: Instance, params: Params | None = None) -> cl.Program:
        """The built program of `inst` (memory cache, then disk cache, then source), with the
        variant's build options."""
        with self.lock:
            return self.cache.program(
                self.context, self.device, inst.name, self.source(inst, params), inst.build_options
            )

    def kernel(
        self, inst: Instance, params: Params | None = None, step: Step | None = None
    ) -> cl.Kernel:
        """A kernel of `inst` (its own, or the entry point of one of its routine's steps)."""
        step = step or inst.kernels[0]
        key = (step.kernel, params if params is not None else as_params(inst.param_map))
        k = self._kernels.get(key)
        if k is not None:
            return k
        with self.lock:
            k = self._kernels.get(key)
            if k is None:
                prog = self.build(inst, params)
                # cl.Kernel, not getattr(prog, name): a program shared by parameter sets that
                # render the same source gives each its own kernel object without pyopencl's
                # RepeatedKernelRetrieval warning (the same cost either way)
                try:
                    k = cl.Kernel(prog, step.kernel)
                except cl.Error:
                    names = prog.get_info(cl.program_info.KERNEL_NAMES) or "none"
                    raise BuildError(
                        inst.name, f"its program holds no kernel {step.kernel!r} (it has: {names})"
                    ) from None
                # declared scalar types let pyopencl bind arguments without probing each one
                # (15 arguments: 63 us -> 1.2 us per set_args)
                k.set_scalar_arg_dtypes(
                    [
                        None if a.kind in ("input", "output") else SCALAR_TYPES[a.ctype]
                        for a in step.args
                    ]
                )
                self._kernels[key] = k
        return k

    def helper_kernel(self, name: str, source: str, entry: str) -> cl.Kernel:
        """Kernel `entry` of `source`, a small kernel of clforge's own that is no op (a view's
        gather copy), built once per runtime through the program cache. Shared: bind and enqueue
        it under :attr:`lock`."""
        k = self._helpers.get(name)
        if k is None:
            with self.lock:
                prog = self.cache.program(self.context, self.device, name, source)
                k = self._helpers[name] = getattr(prog, entry)
        return k

    # --- planning and launching -------------------------------------------------------------

    def plan(
        self,
        inst: Instance,
        dims: Mapping[str, int],
        attrs: Mapping[str, float | int],
        shapes: Mapping[str, tuple[int, ...]] | None = None,
        params: Params | None = None,
    ) -> LaunchPlan:
        """Everything about a launch but the arrays. `attrs` are every attribute's value
        (defaults resolved, see :func:`clforge.call.binding.resolve_attrs`); `shapes` (the
        inputs' shapes) give the strides of broadcast inputs, else every input has the full
        shape. `params` are the compile-time parameters (default: the spec's)."""
        op = self.registry.op(inst.op)
        params = params if params is not None else as_params(inst.param_map)
        env = {**dims, **dict(params)}
        scalars: dict[str, float | int] = {**dims, **attrs}
        for t in op.inputs:
            if t.broadcast:
                shape = tuple(shapes[t.name]) if shapes else tuple(dims[d] for d in t.shape)
                for k, st in enumerate(element_strides(shape, inst.layout_of(t.name))):
                    scalars[f"{t.name}_s{k}"] = st
        launches = []
        for step in inst.kernels:
            geo = geometry(self.registry, inst, dims, dict(params), step)
            if geo.empty:
                continue
            args: list[Any] = []
            buffers: list[tuple[int, str]] = []
            for i, a in enumerate(step.args):
                if a.kind in ("input", "output"):
                    buffers.append((i, a.name))
                    args.append(None)
                else:
                    args.append(_scalar(inst, a.name, a.ctype, scalars[a.name]))
            kernel = self.kernel(inst, params, step)
            launches.append(KernelLaunch(kernel, geo, tuple(args), tuple(buffers)))
        scratch = tuple(
            (s.name, _sized(s.size).evaluate(env), DTYPES[s.dtype or inst.dtype].np_dtype)
            for s in inst.scratch
        )
        outputs = []
        for t in op.outputs:
            shape = tuple(dims[d] for d in t.shape)
            dt = DTYPES[t.dtype or inst.dtype].np_dtype
            strides = layout_strides(shape, dt.itemsize, inst.layout_of(t.name))
            outputs.append((t.name, shape, dt, strides))
        return LaunchPlan(inst, params, tuple(launches), scratch, tuple(outputs))

    def empty(self, spec: OutputSpec) -> cla.Array:
        """A device array from the pool: `spec` is (name, shape, dtype, byte strides)."""
        _, shape, dt, strides = spec
        # pyopencl's fast constructor: the spec is already checked (a tuple of ints, a NumPy
        # dtype, byte strides); the general one re-validates it at ~25 us a call
        return cla.Array(
            None,
            shape,
            dt,
            strides=strides,
            allocator=self.allocator,
            _fast=True,
            _size=math.prod(shape),
            _context=self.context,
            _queue=self.queue,
        )

    def enqueue(
        self,
        plan: LaunchPlan,
        buffers: Mapping[str, cla.Array],
        outputs: tuple[OutputSpec, ...] | None = None,
    ) -> dict[str, cla.Array]:
        """Allocate the outputs (`outputs`, default the plan's), bind `buffers` (the inputs, by
        tensor name) and the outputs, enqueue; return the outputs (not waited for)."""
        outs = {spec[0]: self.empty(spec) for spec in outputs or plan.outputs}
        if plan.launches:
            bound = {
                name: arr.base_data if arr.size else self.dummy
                for name, arr in (*buffers.items(), *outs.items())
            }
            self.run(plan, bound)
        return outs

    def run(self, plan: LaunchPlan, buffers: Mapping[str, Any]) -> None:
        """Enqueue every kernel of `plan` in order, binding `buffers` (by tensor name) and
        scratch buffers from the pool (held until the last kernel is enqueued: the queue is
        in order, so a buffer the pool hands out again is written only after they ran)."""
        bound: dict[str, Any] = dict(buffers)
        held = []
        for name, elements, dt in plan.scratch:
            if elements > 0:
                held.append(self.allocator(elements * dt.itemsize))
                bound[name] = held[-1]
            else:
                bound[name] = self.dummy
        with self.lock:
            for launch in plan.launches:
                args = list(launch.args)
                for i, name in launch.buffers:
                    args[i] = bound[name]
                launch.kernel.set_args(*args)
                cl.enqueue_nd_range_kernel(
                    self.queue,
                    launch.kernel,
                    launch.geometry.global_size,
                    launch.geometry.local_size,
                )


@dataclass(frozen=True, eq=False, slots=True)
class ReadyLaunch:
    """One kernel with every argument set ahead but the call's own buffers: a kernel object of
    its own (a `cl.Kernel` holds its arguments, and the runtime's kernels are shared by every
    plan of their instance), its NDRange, and which argument takes which of the call's
    buffers (by index into the list a call passes to :func:`run_ready`)."""

    kernel: cl.Kernel
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    rebind: tuple[tuple[int, int], ...]  # (argument index, index of the call's buffer)
    # the buffer each rebound argument holds now (by rebind position): a call that passes the
    # same buffer object again skips its set_arg (held until the next call rebinds it)
    bound: list[Any] = dataclasses.field(default_factory=list)


@dataclass(frozen=True, eq=False)
class Ready:
    """A plan's kernels made ready (:func:`ready`), and what their fixed arguments hold on to:
    the scratch buffers between a routine's steps, allocated once."""

    launches: tuple[ReadyLaunch, ...]
    held: tuple[Any, ...]


def ready(
    rt: Runtime, plan: LaunchPlan, fixed: Mapping[str, Any], per_call: Mapping[str, int]
) -> Ready:
    """`plan`'s kernels with their arguments set once: the scalars, the buffers in `fixed` (by
    tensor or scratch name: constants, a compiled model's slots, scratch it shares between
    plans, see :func:`scratch_sizes`) and, for scratch not in `fixed`, buffers of their own
    from the runtime's pool. The tensors in `per_call` are left to each call, which passes a
    list of buffers: tensor `t` is the buffer at index `per_call[t]` (:func:`run_ready`). One
    ready plan is run by one caller at a time (its scratch and its kernels' arguments are its
    own)."""
    bound: dict[str, Any] = dict(fixed)
    held = []
    for name, elements, dt in plan.scratch:
        if name in fixed:
            continue
        if elements > 0:
            held.append(rt.allocator(elements * dt.itemsize))
            bound[name] = held[-1]
        else:
            bound[name] = rt.dummy
    out = []
    with rt.lock:
        for launch in plan.launches:
            k = cl.Kernel(launch.kernel.program, launch.kernel.function_name)
            for i, a in enumerate(launch.args):
                if a is not None:
                    k.set_arg(i, a)
            rebind = []
            for i, name in launch.buffers:
                if name in per_call:
                    rebind.append((i, per_call[name]))
                else:
                    k.set_arg(i, bound[name])
            geo = launch.geometry
            out.append(
                ReadyLaunch(k, geo.global_size, geo.local_size, tuple(rebind), [None] * len(rebind))
            )
    return Ready(tuple(out), tuple(held))


ScratchSpec = tuple[str, int, np.dtype]  # a plan's scratch buffer: name, elements, dtype


def scratch_sizes(scratches: Iterable[Sequence[ScratchSpec]]) -> list[int]:
    """Bytes of each shared scratch buffer for plans (their scratch, `LaunchPlan.scratch` or
    part of it) that run one after another on one in-order queue, one call at a time: a plan's
    k-th scratch buffer is the k-th shared one, as large as the largest plan needs. A routine's
    scratch is dead once its last step ran, so the next plan may overwrite it; sharing keeps
    the working set of a compiled model to one set of scratch buffers, hot in the caches, as
    the pool keeps eager calls' (a buffer of its own per step left pack kernels writing memory
    out of the caches)."""
    sizes: list[int] = []
    for scratch in scratches:
        for k, (_, elements, dt) in enumerate(scratch):
            if k == len(sizes):
                sizes.append(0)
            sizes[k] = max(sizes[k], elements * dt.itemsize)
    return sizes


def shared_scratch(
    rt: Runtime, scratch: Sequence[ScratchSpec], shared: Sequence[Any]
) -> dict[str, Any]:
    """Scratch names bound to the shared buffers (:func:`scratch_sizes`), an empty scratch to
    the runtime's dummy buffer."""
    return {
        name: shared[k] if elements > 0 else rt.dummy
        for k, (name, elements, _) in enumerate(scratch)
    }


def constant_steps(
    plan: LaunchPlan, constant: Collection[str]
) -> tuple[tuple[int, ...], frozenset[str]]:
    """:meth:`Instance.constant_steps` of the plan's routine, as indices into `plan.launches`
    (which may leave a step out: a packed hand-off's pack_a); none where a launch is no step
    of the routine (a generated kernel, which runs every call)."""
    steps = [s.kernel for s in plan.inst.steps]
    names = [launch.kernel.function_name for launch in plan.launches]
    if not set(names) <= set(steps):
        return (), frozenset()
    found, hoisted = plan.inst.constant_steps(constant)
    once = {steps[i] for i in found}
    return tuple(i for i, name in enumerate(names) if name in once), hoisted


def run_ready(
    queue: cl.CommandQueue,
    launches: tuple[ReadyLaunch, ...],
    buffers: Any,
    context: cl.Context | None = None,
) -> None:
    """Enqueue ready kernels in order, binding only the call's `buffers` (indexed by each
    launch's `rebind`): per kernel a `set_arg` per buffer of the call that is not the one it
    holds already, and pyopencl's enqueue (a C++ entry point: nothing left to check in
    Python).

    Given the queue's `context`, several launches are enqueued behind a gate: the first waits
    on a user event that is completed once all are enqueued. The driver then queues each one
    without waking the device's worker threads, which on a CPU device share the host's cores:
    on PoCL (2 cores) the host's cost per kernel fell from 4.3 to 2.2 us (a chain of 64 tiny
    adds, docs/graph.md "The launch path"), the device starting a few microseconds later."""
    enqueue = cl.enqueue_nd_range_kernel
    gate = cl.UserEvent(context) if context is not None and len(launches) > 1 else None
    wait = [gate] if gate is not None else None
    try:
        for launch in launches:
            k = launch.kernel
            if launch.rebind:
                bound = launch.bound
                for n, (i, j) in enumerate(launch.rebind):
                    buf = buffers[j]
                    if bound[n] is not buf:
                        k.set_arg(i, buf)
                        bound[n] = buf
            enqueue(queue, k, launch.global_size, launch.local_size, wait_for=wait)
            wait = None
    finally:
        if gate is not None:  # what was enqueued runs, even where a later step failed
            gate.set_status(cl.command_execution_status.COMPLETE)


@cache
def _sized(text: str) -> expressions.Expr:
    return expressions.parse(text, "int")
