"""The dispatcher: arrays in, the right kernel chosen and run, arrays out.

Eager calls (`Dispatcher.call`, and the generated `generated.ops` functions on top of it) infer
dtype, layouts and sizes from the arrays, select (see :mod:`generator.call.selection`), build (falling
back down the ranking when a build fails, unless strict), and launch. Everything that depends only
on the op, dtypes, layouts, shapes and attributes is planned once and memoized, so a warm call
costs a dict lookup, the output allocation and the enqueue.

Compiled entry points (`Dispatcher.compile`) select once for symbolic sizes and check the chosen
variant's guard on each call: a call that breaks it is re-dispatched, or rejected in strict mode.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyopencl as cl
import pyopencl.array as cla

from generator.call.binding import array_dtype, bind_dims, check_names, int_attrs, resolve_attrs
from generator.call.selection import Selection, chosen_or_raise, select
from generator.core.layouts import array_layout
from generator.device.profile import DeviceProfile
from generator.errors import BuildError, CallError, DispatchError
from generator.registry.loader import Registry
from generator.registry.records import Instance, OpSig
from generator.runtime.launch import LaunchPlan, Runtime, to_host

if TYPE_CHECKING:
    from generator.call.compiled import CompiledOp, TensorType
    from generator.call.eager import Recipe


class ClforgeWarning(UserWarning):
    """A fallback was taken (e.g. the chosen kernel failed to build on this device)."""


def call_types(
    op: OpSig, inputs: Mapping[str, Any], partial: bool = False
) -> tuple[str, dict[str, str]]:
    """The call's instance dtype and the layouts of its inputs, from the arrays (with partial,
    inputs not given are skipped)."""
    dtype: str | None = None
    layouts: dict[str, str] = {}
    for t in op.inputs:
        if partial and t.name not in inputs:
            continue
        arr = inputs[t.name]
        d = array_dtype(op, t.name, arr)
        if t.dtype is not None:
            if d.name != t.dtype:
                raise CallError(f"{op.name}: input {t.name!r} must be {t.dtype}, got {d.name}")
        elif dtype is None:
            dtype = d.name
        elif d.name != dtype:
            raise CallError(
                f"{op.name}: inputs have different dtypes ({dtype} and {d.name} "
                f"for {t.name!r}); cast one of them"
            )
        if arr.ndim != len(t.shape):
            raise CallError(
                f"{op.name}: input {t.name!r} has rank {arr.ndim} (shape "
                f"{tuple(arr.shape)}), expected rank {len(t.shape)} "
                f"[{', '.join(t.shape)}]"
            )
        lay = array_layout(arr, t.layouts) if arr.size else t.layouts[0]
        if lay is None:
            if isinstance(arr, cla.Array):
                raise CallError(
                    f"{op.name}: input {t.name!r} has strides {arr.strides} for "
                    f"shape {arr.shape}; the op takes it "
                    f"{' or '.join(t.layouts)}-major: pass a contiguous copy"
                )
            lay = t.layouts[0]  # NumPy inputs are copied anyway: copy into the first layout
        layouts[t.name] = lay
    if dtype is None:
        dtype = op.dtypes[0]
    if dtype not in op.dtypes:
        raise CallError(
            f"{op.name}: dtype {dtype} is not supported (supported: {', '.join(op.dtypes)})"
        )
    return dtype, layouts


@dataclass(frozen=True)
class Bound:
    """A call's sizes: dims (derived ones included), attribute values, the guard environment
    (dims and int attributes) and the inputs' shapes."""

    dims: dict[str, int]
    attrs: dict[str, float | int]
    env: dict[str, int]
    shapes: dict[str, tuple[int, ...]]


def bind(op: OpSig, inputs: Mapping[str, Any], attrs: Mapping[str, float | int]) -> Bound:
    shapes = {k: tuple(a.shape) for k, a in inputs.items()}
    values = resolve_attrs(op, attrs)
    dims = bind_dims(op, shapes, values)
    return Bound(dims, values, {**dims, **int_attrs(op, values)}, shapes)


@dataclass
class Dispatcher:
    """Selection and launching for one runtime (context, queue) and its device profile."""

    runtime: Runtime
    profile: DeviceProfile
    strict: bool = False  # a build failure of the chosen kernel is an error, not a fallback
    _plans: dict[tuple, LaunchPlan] = field(default_factory=dict, repr=False)
    _choices: dict[tuple, Instance] = field(default_factory=dict, repr=False)
    _recipes: dict[tuple, Recipe] = field(default_factory=dict, repr=False)

    @classmethod
    def for_runtime(cls, runtime: Runtime, *, strict: bool = False) -> Dispatcher:
        from generator.device.profile import from_device

        return cls(runtime, from_device(runtime.device), strict)

    @property
    def registry(self) -> Registry:
        return self.runtime.registry

    # --- selection --------------------------------------------------------------------------

    def select(
        self, op: str, dtype: str, layouts: Mapping[str, str], dims: Mapping[str, int]
    ) -> Selection:
        return select(self.registry, self.profile, op, dtype, layouts, dims)

    def choose(
        self, op: str, dtype: str, layouts: Mapping[str, str], dims: Mapping[str, int]
    ) -> Instance:
        """The instance to run (memoized): the best candidate that builds on this device."""
        key = (op, dtype, tuple(sorted(layouts.items())), tuple(sorted(dims.items())))
        inst = self._choices.get(key)
        if inst is None:
            inst = self._first_that_builds(self.select(op, dtype, layouts, dims))
            self._choices[key] = inst
        return inst

    def _first_that_builds(self, sel: Selection) -> Instance:
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
        return self.execute(op, self.plan_for(op, inputs, attrs or {}), inputs, validated=True)

    def plan_for(
        self, op: OpSig, inputs: Mapping[str, Any], attrs: Mapping[str, float | int]
    ) -> LaunchPlan:
        """The launch plan for these arrays, memoized by their dtypes, shapes, strides and the
        attributes; `plan.inst` is the instance the dispatcher chose."""
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
                )
                for k, a in inputs.items()
            ),
            tuple(sorted(attrs.items())),
        )
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan(op, inputs, attrs)
            self._plans[key] = plan
        return plan

    def execute(
        self, op: OpSig, plan: LaunchPlan, inputs: Mapping[str, Any], *, validated: bool = False
    ) -> dict[str, Any]:
        """Move inputs to the device if needed, run `plan`, bring outputs back if needed.

        `validated`: the device arrays among `inputs` were checked when `plan` was made for
        their dtype, shape, strides and offset (plan_for's memo key), so they pass as they are.
        """
        rt = self.runtime
        on_device = all(isinstance(a, cla.Array) for a in inputs.values())
        if on_device and validated:
            arrays = inputs
        else:
            arrays = {
                t.name: rt.to_device(
                    op, plan.inst.dtype, t.name, inputs[t.name], plan.inst.layout_of(t.name)
                )
                for t in op.inputs
            }
        outs = rt.run(plan, arrays)
        if on_device:
            return outs
        return {k: to_host(v) for k, v in outs.items()}

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
        layouts = self._best_host_layouts(op, inputs, dtype, layouts, b.env)
        inst = self.choose(op.name, dtype, layouts, b.env)
        for t in op.inputs:  # device arrays: refused now (bad strides, offset) or trusted later
            if isinstance(inputs[t.name], cla.Array):
                self.runtime.to_device(
                    op, inst.dtype, t.name, inputs[t.name], inst.layout_of(t.name)
                )
        return self.runtime.plan(inst, b.dims, b.attrs, b.shapes)

    def _best_host_layouts(
        self,
        op: OpSig,
        inputs: Mapping[str, Any],
        dtype: str,
        layouts: dict[str, str],
        env: Mapping[str, int],
    ) -> dict[str, str]:
        """NumPy inputs are copied to the device anyway, so they may as well be copied into the
        layout whose best instance ranks highest (a Fortran-ordered B for matmul is copied
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
    ) -> tuple[int, int]:
        chosen = self.select(op.name, dtype, layouts, env).chosen
        return chosen.rank if chosen else (-1, 0)

    def cache_info(self) -> dict[str, int]:
        return {
            "plans": len(self._plans),
            "recipes": len(self._recipes),
            "choices": len(self._choices),
            **vars(self.runtime.cache.stats),
        }

    # --- compiled entry points --------------------------------------------------------------

    def compile(
        self, op: str, inputs: Mapping[str, TensorType], *, strict: bool = False
    ) -> CompiledOp:
        """Specialize `op` once for these input types (shapes may use symbolic dims)."""
        from generator.call.compiled import CompiledOp

        sig = self.registry.op(op)
        check_names(sig, inputs, sig.inputs, "input")
        dtypes = {t.name: inputs[t.name].dtype for t in sig.inputs if t.dtype is None}
        kinds = set(dtypes.values())
        if len(kinds) > 1:
            raise CallError(f"{op}: inputs have different dtypes {dtypes}")
        dtype = kinds.pop() if kinds else sig.dtypes[0]
        static: dict[str, int] = {}
        for t in sig.inputs:
            shape = inputs[t.name].shape
            if len(shape) != len(t.shape):
                raise CallError(
                    f"{op}: input {t.name!r} has rank {len(shape)}, expected "
                    f"{len(t.shape)} [{', '.join(t.shape)}]"
                )
            for dim, size in zip(t.shape, shape, strict=True):
                if isinstance(size, int):
                    if static.get(dim, size) != size:
                        raise CallError(
                            f"{op}: dim {dim} is {static[dim]} and {size}; one name means one size"
                        )
                    static[dim] = size
        layouts = {t.name: inputs[t.name].layout for t in sig.inputs}
        sel = self.select(op, dtype, layouts, static)
        inst = self._first_that_builds(sel)
        return CompiledOp(self, sig, dtype, layouts, inst, sel, strict)


# --- the default dispatcher, per queue ------------------------------------------------------

_DISPATCHERS: dict[int, Dispatcher] = {}


def dispatcher(queue: cl.CommandQueue | None = None) -> Dispatcher:
    """The dispatcher of `queue`, or of the default device's queue when None."""
    key = 0 if queue is None else queue.int_ptr
    d = _DISPATCHERS.get(key)
    if d is None:
        d = Dispatcher.for_runtime(Runtime(queue))
        _DISPATCHERS[key] = d
    return d
