"""Compiled entry points: an op specialized once for input types whose shapes may be symbolic.

`Dispatcher.compile` selects for the sizes it knows (:func:`specialize` reads them off the
types); guards that need the others are checked on each call, and a call that breaks the chosen
variant's guard is re-dispatched (or rejected in strict mode). `CompiledOp.cache` shows the
specializations made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyopencl.array as cla

from clforge.call.binding import (
    Bound,
    bind,
    call_types,
    check_allocations,
    check_names,
    outputs_in_order,
)
from clforge.call.selection import Selection
from clforge.device.profile import DeviceProfile
from clforge.errors import CallError
from clforge.interop.intake import intake_args
from clforge.registry.loader import Registry, guard_holds
from clforge.registry.records import Instance, OpSig
from clforge.runtime.launch import LaunchPlan, Runtime


@dataclass(frozen=True)
class TensorType:
    """An input's compile-time type: dtype, shape (ints or symbolic dim names), layout."""

    dtype: str
    shape: tuple[int | str, ...]
    layout: str = "row"


class Launcher(Protocol):
    """What a compiled op needs of its dispatcher."""

    runtime: Runtime
    profile: DeviceProfile

    @property
    def registry(self) -> Registry: ...

    def choose(
        self, op: str, dtype: str, layouts: Mapping[str, str], dims: Mapping[str, int]
    ) -> Instance: ...

    def execute(self, op: OpSig, plan: LaunchPlan, inputs: Mapping[str, Any]) -> dict[str, Any]: ...

    def check_device_arrays(self, op: OpSig, inst: Instance, inputs: Mapping[str, Any]) -> None: ...

    def plan_instance(self, inst: Instance, b: Bound) -> LaunchPlan: ...


def specialize(
    sig: OpSig, inputs: Mapping[str, TensorType]
) -> tuple[str, dict[str, str], dict[str, int]]:
    """The dtype, layouts and static dim sizes that input types fix."""
    op = sig.name
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
    return dtype, {t.name: inputs[t.name].layout for t in sig.inputs}, static


@dataclass
class CompiledOp:
    """A callable specialized once; each call checks the specialization's runtime guard.
    Inputs are positional in the spec's order, or by keyword (the spec's input names); other
    keywords are attributes. The integer sizes of the input types it was compiled for hold for
    every call (a symbolic dim takes any size)."""

    dispatcher: Launcher
    op: OpSig
    dtype: str
    layouts: dict[str, str]
    instance: Instance
    selection: Selection
    strict: bool
    types: Mapping[str, TensorType] = field(default_factory=dict)
    # (op, dtype, layouts, device, guard held) -> instance name: inspectable
    cache: dict[tuple, str] = field(default_factory=dict)
    redispatches: int = 0
    _plans: dict[tuple, LaunchPlan] = field(default_factory=dict, repr=False)

    def _inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The inputs by name, from positional and keyword arguments; `kwargs` keeps the
        attributes."""
        names = [t.name for t in self.op.inputs]
        if len(args) > len(names):
            raise CallError(
                f"{self.op.name}: takes {len(names)} inputs ({', '.join(names)}), got {len(args)}"
            )
        inputs = dict(zip(names, args, strict=False))
        for name in names[len(args) :]:
            if name in kwargs:
                inputs[name] = kwargs.pop(name)
        twice = [n for n in names[: len(args)] if n in kwargs]
        if twice:
            raise CallError(f"{self.op.name}: input {twice[0]!r} given by position and by keyword")
        missing = [n for n in names if n not in inputs]
        if missing:
            raise CallError(
                f"{self.op.name}: missing input {', '.join(map(repr, missing))} (inputs: "
                f"{', '.join(names)}, by position or keyword)"
            )
        for t in self.op.inputs:
            want = self.types.get(t.name)
            got = tuple(getattr(inputs[t.name], "shape", ()))
            if want is None or len(got) != len(want.shape):
                continue  # a rank mismatch is bind's to report
            for dim, size, n in zip(t.shape, want.shape, got, strict=True):
                if isinstance(size, int) and n != size:
                    shown = ", ".join(str(s) for s in want.shape)
                    raise CallError(
                        f"{self.op.name}: compiled for {t.name} [{shown}], called with "
                        f"{t.name} of shape {got} (dim {dim} must be {size})"
                    )
        return inputs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # PyTorch tensors and DLPack producers, taken as eager calls take them
        taken = intake_args(self.op.name, args, kwargs, self.dispatcher.runtime)
        if taken is not None:
            return taken[2](self(*taken[0], **taken[1]))
        attrs = dict(kwargs)
        inputs = self._inputs(args, attrs)
        dtype, layouts = call_types(self.op, inputs)
        if dtype != self.dtype:
            raise CallError(f"{self.op.name}: compiled for {self.dtype}, called with {dtype}")
        for t in self.op.inputs:
            if isinstance(inputs[t.name], cla.Array) and layouts[t.name] != self.layouts[t.name]:
                raise CallError(
                    f"{self.op.name}: compiled for {t.name} "
                    f"{self.layouts[t.name]}-major, called with "
                    f"{layouts[t.name]}-major"
                )
        b = bind(self.op, inputs, attrs)
        d = self.dispatcher
        host = {k: a for k, a in inputs.items() if not isinstance(a, cla.Array)}
        check_allocations(self.op, self.dtype, b, host, d.runtime.max_alloc)
        inst = self.instance
        holds = guard_holds(d.registry, inst, b.env)
        if not holds:
            if self.strict:
                shown = ", ".join(f"{k}={v}" for k, v in b.env.items())
                raise CallError(
                    f"{self.op.name}: compiled for {inst.name}, whose guard "
                    f"{inst.guard!r} does not hold for {shown} (strict mode)"
                )
            self.redispatches += 1
            inst = d.choose(self.op.name, self.dtype, self.layouts, b.env)
        spec_key = (
            self.op.name,
            self.dtype,
            tuple(sorted(self.layouts.items())),
            d.profile.name,
            holds,
        )
        self.cache.setdefault(spec_key, inst.name)
        d.check_device_arrays(self.op, inst, inputs)
        plan_key = (inst.name, tuple(sorted(b.shapes.items())), tuple(sorted(attrs.items())))
        plan = self._plans.get(plan_key)
        if plan is None:
            plan = d.plan_instance(inst, b)
            self._plans[plan_key] = plan
        return outputs_in_order(self.op, d.execute(self.op, plan, inputs))
