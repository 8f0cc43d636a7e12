"""The dispatcher: arrays in, the right kernel chosen and run, arrays out.

Eager calls (`Dispatcher.call`, and the generated `clforge.ops` functions on top of it
through :mod:`clforge.call.eager`) infer dtype, layouts and sizes from the arrays (see
:mod:`clforge.call.binding`), select (:mod:`clforge.call.selection`), build (falling back
down the ranking when a build fails, unless strict), and launch through the runtime's one launch
path. Everything that depends only on the op, dtypes, layouts, shapes and attributes is planned
once and memoized, so a warm call costs a dict lookup, the output allocation and the enqueue.

`Dispatcher.compile` specializes an op once for symbolic sizes (:mod:`clforge.call.compiled`);
`Dispatcher.launch` runs one named instance.
"""

from __future__ import annotations

import itertools
import threading
import warnings
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyopencl as cl
import pyopencl.array as cla

from clforge.call.binding import (
    Bound,
    bind,
    call_types,
    check_allocations,
    check_names,
    device_array_problem,
    host_array,
)
from clforge.call.compiled import CompiledOp, TensorType, specialize
from clforge.call.selection import Selection, chosen_or_raise, measured, select
from clforge.conventions.base import Then
from clforge.device.profile import DeviceProfile
from clforge.device.query import from_device
from clforge.errors import (
    BuildError,
    CallError,
    ClforgeWarning,
    DispatchError,
    TemplateError,
)
from clforge.params.database import HOIST, load_folders
from clforge.params.lookup import Choice, ParamLookup
from clforge.params.space import as_params
from clforge.registry import loader as registry_mod
from clforge.registry.loader import Registry, guard_holds
from clforge.registry.records import Instance, OpSig
from clforge.runtime.launch import LaunchPlan, Runtime
from clforge.runtime.transfer import to_host, upload

__all__ = ["ClforgeWarning", "Dispatcher", "TensorType", "dispatcher"]


class Replay(Protocol):
    """A memoized eager call (see :class:`clforge.call.eager.Recipe`)."""

    @property
    def then(self) -> Then | None: ...  # the convention's further call on the result

    def run(self, rt: Runtime, given: Any) -> Any: ...


@dataclass(eq=False)
class Dispatcher:
    """Selection and launching for one runtime (context, queue) and its device profile."""

    runtime: Runtime
    profile: DeviceProfile
    strict: bool = False  # a build failure of the chosen kernel is an error, not a fallback
    params: ParamLookup | None = None  # tuned parameters; default: the registry's tuning/ folder
    _plans: dict[tuple, LaunchPlan] = field(default_factory=dict, repr=False)
    _choices: dict[tuple, Instance] = field(default_factory=dict, repr=False)
    _recipes: dict[tuple, Replay] = field(default_factory=dict, repr=False)  # eager calls

    def __post_init__(self) -> None:
        self.lookup: ParamLookup = self.params or ParamLookup.from_env(
            self.profile, load_folders(self.runtime.registry.tuning_folders())
        )
        self._shared = _shared(self.runtime.device)
        self._shared.join(self)

    def adopt(self, reg: Registry) -> None:
        """Serve `reg` from now on (the default registry after an extension registered): the
        memoized choices, plans and recipes are dropped, tuning files re-read. Built programs
        stay: an instance's kernel does not change with the registry that lists it."""
        with self.runtime.lock:
            self.runtime.registry = reg
            self._plans.clear()
            self._choices.clear()
            self._recipes.clear()
            self.lookup = self.params or ParamLookup.from_env(
                self.profile, load_folders(reg.tuning_folders())
            )
            self._shared.join(self)  # the device's overrides, not the environment's again

    @classmethod
    def for_runtime(cls, runtime: Runtime, *, strict: bool = False) -> Dispatcher:
        return cls(runtime, from_device(runtime.device), strict)

    def params_for(self, inst: Instance, env: Mapping[str, int], hoisted: bool = False) -> Choice:
        """The compile-time parameters `inst` runs with for these sizes, and where they came
        from: tuned ones whose guard still holds, else the spec defaults. `hoisted`: the
        routine's steps that read only weights run once (a compiled graph's constants), so a
        set tuned that way comes first (`HOIST`)."""
        dims = self.registry.op(inst.op).dims_of(env)
        choice = self.lookup.choose(inst, {**dims, HOIST: 1} if hoisted else dims)
        if choice.params and not guard_holds(self.registry, inst, env, dict(choice.params)):
            return Choice(as_params(inst.param_map), "spec default (the tuned set's guard fails)")
        return choice

    def override_params(self, instance: str, values: Mapping[str, int] | None) -> None:
        """Run `instance` with these compile-time parameters from now on (None: back to the
        tuned ones) on this dispatcher's device: overrides are kept per device, so they reach
        every dispatcher of it (calls with `queue=` of another queue or context on the same
        device, and device arrays of it); their memoized plans are dropped so that every later
        call sees it."""
        self.registry.instance(instance)  # an unknown name is an error now, not later
        self._shared.override(instance, values)

    def plan_instance(self, inst: Instance, b: Bound, hoisted: bool = False) -> LaunchPlan:
        """The launch plan of `inst` with the parameters :meth:`params_for` gives (`hoisted`:
        as its); a tuned or computed set that cannot be rendered (an installed tree without
        templates/) or built falls back to the generated spec defaults, with a warning
        (strict: an error)."""
        choice = self.params_for(inst, b.env, hoisted)
        try:
            return self.runtime.plan(inst, b.dims, b.attrs, b.shapes, choice.params)
        except (TemplateError, BuildError) as exc:
            if self.strict or choice.params == as_params(inst.param_map):
                raise
            first = str(exc).strip().splitlines()[0][:200]
            warnings.warn(
                f"clforge: {inst.name} with {choice.describe()} is not available ({first}); "
                "running its spec defaults",
                ClforgeWarning,
                stacklevel=3,
            )
            return self.runtime.plan(inst, b.dims, b.attrs, b.shapes, None)

    @property
    def registry(self) -> Registry:
        return self.runtime.registry

    # --- selection --------------------------------------------------------------------------

    def select(
        self, op: str, dtype: str, layouts: Mapping[str, str], dims: Mapping[str, int]
    ) -> Selection:
        """Every candidate's verdict, ranked; where the tuner measured two or more accepted
        ones at this shape (all of the op's dims known), the fastest first."""
        sel = select(self.registry, self.profile, op, dtype, layouts, dims)
        return measured(sel, self.registry, self.lookup, dims)

    def choose(
        self, op: str, dtype: str, layouts: Mapping[str, str], dims: Mapping[str, int]
    ) -> Instance:
        """The instance to run (memoized): the best candidate that builds on this device."""
        key = (op, dtype, tuple(sorted(layouts.items())), tuple(sorted(dims.items())))
        inst = self._choices.get(key)
        if inst is None:
            inst = self.first_that_builds(self.select(op, dtype, layouts, dims))
            self._choices[key] = inst
        return inst

    def first_that_builds(self, sel: Selection) -> Instance:
        chosen_or_raise(sel)
        failures = []
        for cand in sel.candidates:
            if not cand.accepted or cand.instance is None:
                continue
            inst = self.registry.instance(cand.instance)
            try:
                self.runtime.kernel(inst)
            except BuildError as exc:
                if self.strict:
                    raise
                first = next(
                    (ln for ln in exc.log.splitlines() if "error" in ln.lower()), exc.log[:200]
                )
                failures.append(f"{inst.name}: {first.strip()}")
                warnings.warn(
                    f"clforge: {inst.name} failed to build on {sel.device}; trying "
                    f"the next candidate ({first.strip()})",
                    ClforgeWarning,
                    stacklevel=4,
                )
                continue
            return inst
        raise DispatchError(
            f"{sel.op}: every eligible instance failed to build on "
            f"{sel.device}:\n  " + "\n  ".join(failures)
        )

    # --- eager calls ------------------------------------------------------------------------

    def call(
        self,
        op_name: str,
        inputs: Mapping[str, Any],
        attrs: Mapping[str, float | int] | None = None,
    ) -> dict[str, Any]:
        """Run `op_name` on NumPy or pyopencl arrays (by input name); outputs by name, of the
        same kind as the inputs."""
        op = self.registry.op(op_name)
        return self.execute(op, self.plan_for(op, inputs, attrs or {}), inputs)

    def plan_for(
        self, op: OpSig, inputs: Mapping[str, Any], attrs: Mapping[str, float | int]
    ) -> LaunchPlan:
        """The launch plan for these arrays, memoized by their dtypes, shapes, strides, offsets,
        contexts and the attributes; `plan.inst` is the instance the dispatcher chose. Device
        arrays among `inputs` are checked here, once per memo key."""
        check_names(op, inputs, op.inputs, "input")
        key = (
            op.name,
            tuple(
                (
                    k,
                    getattr(a, "dtype", None),
                    getattr(a, "shape", None),
                    getattr(a, "strides", None),
                    getattr(a, "offset", 0),
                    type(a),
                    id(a.context) if isinstance(a, cla.Array) else None,
                )
                for k, a in inputs.items()
            ),
            memo_items(attrs),
        )
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan(op, inputs, attrs)
            self._plans[key] = plan
        return plan

    def execute(self, op: OpSig, plan: LaunchPlan, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Copy NumPy inputs to the device, run `plan`, bring outputs back if the inputs were
        NumPy. Device arrays must be those `plan` was made for (see :meth:`plan_for`)."""
        rt = self.runtime
        on_device = True
        buffers: dict[str, cla.Array] = {}
        for t in op.inputs:
            arr = inputs[t.name]
            if isinstance(arr, cla.Array):
                buffers[t.name] = arr
            else:
                on_device = False
                host = host_array(op, plan.inst.dtype, t.name, arr)
                try:
                    buffers[t.name] = upload(rt, host, plan.inst.layout_of(t.name))
                except MemoryError:
                    raise CallError(
                        f"{op.name}: input {t.name!r} (shape {host.shape}) cannot be copied "
                        "into contiguous host memory"
                    ) from None
        outs = rt.enqueue(plan, buffers)
        if on_device:
            return outs
        return {k: to_host(v) for k, v in outs.items()}

    def check_device_arrays(self, op: OpSig, inst: Instance, inputs: Mapping[str, Any]) -> None:
        for t in op.inputs:
            arr = inputs[t.name]
            if isinstance(arr, cla.Array):
                problem = device_array_problem(
                    op, inst.dtype, t.name, arr, inst.layout_of(t.name), self.runtime.context
                )
                if problem:
                    raise CallError(f"{op.name}: {problem}")

    def _plan(
        self, op: OpSig, inputs: Mapping[str, Any], attrs: Mapping[str, float | int]
    ) -> LaunchPlan:
        for name, arr in inputs.items():
            if not hasattr(arr, "dtype") or not hasattr(arr, "shape"):
                raise CallError(
                    f"{op.name}: input {name!r} is a {type(arr).__name__}, not an "
                    "array (pass a NumPy or pyopencl array)"
                )
        dtype, layouts = call_types(op, inputs)
        b = bind(op, inputs, attrs)
        host = {k: a for k, a in inputs.items() if not isinstance(a, cla.Array)}
        check_allocations(op, dtype, b, host, self.runtime.max_alloc)
        layouts = self.best_host_layouts(op, inputs, dtype, layouts, b.env)
        inst = self.choose(op.name, dtype, layouts, b.env)
        self.check_device_arrays(op, inst, inputs)
        return self.plan_instance(inst, b)

    def best_host_layouts(
        self,
        op: OpSig,
        inputs: Mapping[str, Any],
        dtype: str,
        layouts: dict[str, str],
        env: Mapping[str, int],
    ) -> dict[str, str]:
        """NumPy inputs are copied to the device anyway, so they may as well be copied into the
        layout whose best instance stands highest (`Selection.standing`: its rank, or for one
        measured fastest the best rank it outran; a Fortran-ordered B for matmul is copied
        row-major when only the row-major B has a cpu variant). Ties keep the layouts the
        arrays have: no reordering copy without a better kernel."""
        free = [
            t for t in op.inputs if len(t.layouts) > 1 and not isinstance(inputs[t.name], cla.Array)
        ]
        if not free:
            return layouts
        best, best_key = layouts, (self._rank(op, dtype, layouts, env), 0)
        for combo in itertools.product(*(t.layouts for t in free)):
            trial = {**layouts, **{t.name: lay for t, lay in zip(free, combo, strict=True)}}
            copies = sum(trial[t.name] != layouts[t.name] for t in free)
            key = (self._rank(op, dtype, trial, env), -copies)  # then the fewest reorderings
            if key > best_key:
                best, best_key = trial, key
        return best

    def _rank(
        self, op: OpSig, dtype: str, layouts: Mapping[str, str], env: Mapping[str, int]
    ) -> tuple[int, int, int]:
        return self.select(op.name, dtype, layouts, env).standing

    def cache_info(self) -> dict[str, int]:
        return {
            "plans": len(self._plans),
            "recipes": len(self._recipes),
            "choices": len(self._choices),
            **vars(self.runtime.cache.stats),
        }

    # --- one named instance -----------------------------------------------------------------

    def launch(
        self,
        instance: Instance | str,
        inputs: Mapping[str, Any],
        attrs: Mapping[str, float | int] | None = None,
    ) -> dict[str, Any]:
        """Run exactly `instance` on `inputs` (NumPy or pyopencl arrays of the op's canonical
        shapes, by name); outputs by name, NumPy if the inputs were NumPy. Its guard must
        hold; choosing an instance is the dispatcher's other job."""
        reg = self.registry
        inst = reg.instance(instance) if isinstance(instance, str) else instance
        op = reg.op(inst.op)
        check_names(op, inputs, op.inputs, "input")
        host = {k: a for k, a in inputs.items() if not isinstance(a, cla.Array)}
        for name, arr in host.items():
            host_array(op, inst.dtype, name, arr)
        self.check_device_arrays(op, inst, inputs)
        b = bind(op, inputs, attrs or {})
        check_allocations(op, inst.dtype, b, host, self.runtime.max_alloc)
        if not guard_holds(reg, inst, b.env):
            shown = ", ".join(f"{k}={v}" for k, v in b.env.items())
            raise CallError(f"{inst.name}: guard {inst.guard!r} does not hold for {shown}")
        return self.execute(op, self.plan_instance(inst, b), inputs)

    # --- compiled entry points --------------------------------------------------------------

    def compile(
        self, op: str, inputs: Mapping[str, TensorType], *, strict: bool = False
    ) -> CompiledOp:
        """Specialize `op` once for these input types (shapes may use symbolic dims)."""
        sig = self.registry.op(op)
        dtype, layouts, static = specialize(sig, inputs)
        sel = self.select(op, dtype, layouts, static)
        chosen = self.first_that_builds(sel)
        return CompiledOp(self, sig, dtype, layouts, chosen, sel, strict, dict(inputs))


# --- what the dispatchers of one device share --------------------------------------------


@dataclass(eq=False)
class _DeviceShared:
    """The parameter overrides of one device, one dict that the lookup of every dispatcher of
    the device holds, and those dispatchers (weakly), whose memoized plans an override drops.
    The first dispatcher of a device brings the overrides its lookup was given
    ($CLFORGE_PARAMS); a later one adds those the device does not have yet."""

    overrides: dict[str, dict[str, int]] = field(default_factory=dict)
    members: weakref.WeakSet[Dispatcher] = field(default_factory=weakref.WeakSet)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def join(self, d: Dispatcher) -> None:
        """Make `d`'s lookup read the device's overrides (again, after `d` re-made it)."""
        with self.lock:
            given = d.lookup.overrides
            if given is not self.overrides and d not in self.members:
                for name, values in given.items():
                    self.overrides.setdefault(name, values)
            d.lookup.overrides = self.overrides
            self.members.add(d)

    def override(self, instance: str, values: Mapping[str, int] | None) -> None:
        """Set (None: drop) an override, and drop the plans of every dispatcher of the device."""
        with self.lock:
            if values is None:
                self.overrides.pop(instance, None)
            else:
                self.overrides[instance] = dict(values)
            members = list(self.members)
        for d in members:
            with d.runtime.lock:
                d._plans.clear()
                d._recipes.clear()


_SHARED: dict[int, _DeviceShared] = {}
_SHARED_LOCK = threading.Lock()


def _shared(device: cl.Device) -> _DeviceShared:
    """What the dispatchers of `device` share (by its cl_device_id)."""
    with _SHARED_LOCK:
        return _SHARED.setdefault(device.int_ptr, _DeviceShared())


def memo_items(values: Mapping[str, Any]) -> tuple:
    """`values` (attributes or options) as part of a memo key, each value with its type: True,
    1 and 1.0 are equal and hash alike, but a call with one of them may be refused (an int
    attribute given True, an axis given 1.0) where another is accepted, and a memoized plan or
    recipe must not skip that check."""

    def typed(v: Any) -> Any:
        if isinstance(v, tuple | list):
            return (type(v), tuple(typed(x) for x in v))
        return (type(v), v)

    return tuple((k, typed(values[k])) for k in sorted(values))


# --- the default dispatcher, per queue ------------------------------------------------------

_DISPATCHERS: dict[int, Dispatcher] = {}
_DISPATCHERS_LOCK = threading.Lock()


def dispatcher(queue: cl.CommandQueue | None = None) -> Dispatcher:
    """The dispatcher of `queue`, or of the default device's queue when None."""
    key = 0 if queue is None else queue.int_ptr
    reg = registry_mod.default()  # clforge's ops and every registered extension's
    d = _DISPATCHERS.get(key)
    if d is None:
        with _DISPATCHERS_LOCK:  # one runtime per queue, however many threads ask at once
            d = _DISPATCHERS.get(key)
            if d is None:
                d = _DISPATCHERS[key] = Dispatcher.for_runtime(Runtime(queue, reg))
    if d.registry is not reg:
        d.adopt(reg)
    return d
