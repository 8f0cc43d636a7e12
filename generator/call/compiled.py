"""Compiled entry points: an op specialized once for input types whose shapes may be symbolic.

`Dispatcher.compile` selects for the sizes it knows; guards that need the others are checked on
each call, and a call that breaks the chosen variant's guard is re-dispatched (or rejected in
strict mode). `CompiledOp.cache` shows the specializations made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyopencl.array as cla

from generator.call.dispatcher import Dispatcher, bind, call_types
from generator.call.eager import outputs_in_order
from generator.call.selection import Selection
from generator.errors import CallError
from generator.registry.records import Instance, OpSig
from generator.runtime.launch import LaunchPlan, guard_holds


@dataclass(frozen=True)
class TensorType:
    """An input's compile-time type: dtype, shape (ints or symbolic dim names), layout."""

    dtype: str
    shape: tuple[int | str, ...]
    layout: str = "row"


@dataclass
class CompiledOp:
    """A callable specialized once; each call checks the specialization's runtime guard."""

    dispatcher: Dispatcher
    op: OpSig
    dtype: str
    layouts: dict[str, str]
    instance: Instance
    selection: Selection
    strict: bool
    # (op, dtype, layouts, device, guard held) -> instance name: inspectable
    cache: dict[tuple, str] = field(default_factory=dict)
    redispatches: int = 0
    _plans: dict[tuple, LaunchPlan] = field(default_factory=dict, repr=False)

    def __call__(self, *args: Any, **attrs: float | int) -> Any:
        names = [t.name for t in self.op.inputs]
        if len(args) != len(names):
            raise CallError(
                f"{self.op.name}: takes {len(names)} inputs ({', '.join(names)}), got {len(args)}"
            )
        inputs = dict(zip(names, args, strict=True))
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
        plan_key = (inst.name, tuple(sorted(b.shapes.items())), tuple(sorted(attrs.items())))
        plan = self._plans.get(plan_key)
        if plan is None:
            plan = d.runtime.plan(inst, b.dims, b.attrs, b.shapes)
            self._plans[plan_key] = plan
        return outputs_in_order(self.op, d.execute(self.op, plan, inputs))
