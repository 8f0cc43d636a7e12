"""`clforge.explain`: what an eager call would run, and why, without running it.

It takes the arguments the eager function takes (``explain("matmul", a, b)``, ``explain("softmax",
x, axis=-1)``), goes through the same calling convention, binding and selection as the call, and
returns every candidate's verdict with the chosen instance's parameters and where they came from:
the same account as `clforge explain` on the command line, for the arrays at hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyopencl as cl

from clforge.call.binding import bind, call_types
from clforge.call.eager import prepare, take_views
from clforge.call.selection import Selection
from clforge.conventions import CONVENTIONS
from clforge.interop.intake import intake
from clforge.params.lookup import Choice, not_borrowed
from clforge.registry.records import OpSig


@dataclass(frozen=True)
class Explanation:
    """The selection for one call (every candidate's verdict, ranked) and the chosen instance's
    parameters with their origin (None when nothing was chosen)."""

    selection: Selection
    params: Choice | None
    passed: tuple[tuple[str, str], ...] = ()  # (tuning file, why it is not read for this device)
    device_isa: str = ""  # the device's vector ISA, as explain names it
    views: tuple[str, ...] = ()  # per device-array view: read in place, or copied and why

    @property
    def instance(self) -> str | None:
        chosen = self.selection.chosen
        return chosen.instance if chosen is not None else None

    def as_dict(self) -> dict[str, Any]:
        doc = self.selection.as_dict()
        if self.params is not None:
            doc["params"] = dict(self.params.params)
            doc["params_origin"] = self.params.describe()
        doc["device_isa"] = self.device_isa
        doc["tuning_passed_over"] = [{"file": f, "reason": why} for f, why in self.passed]
        doc["views"] = list(self.views)
        return doc

    def __str__(self) -> str:
        lines = self.selection.table().splitlines()
        if self.params is not None:  # above the verdict, which stays the last line
            lines.insert(-1, f"  params of the chosen instance: {self.params.describe()}")
        for name, why in self.passed:
            lines.insert(-1, f"  tuning file passed over: {not_borrowed(name, why)}")
        for note in self.views:
            lines.insert(-1, f"  view: {note}")
        return "\n".join(lines)


def _as_eager(sig: OpSig, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The inputs as the eager function takes them: optional ones given by name (popped from
    `kwargs`) or left off the end are None (a fixed-arity op only)."""
    if CONVENTIONS[sig.call].variadic:
        return inputs
    rest = sig.inputs[len(inputs) :]
    return (*inputs, *(kwargs.pop(t.name, None) for t in rest))


def explain(
    op: str, *inputs: Any, queue: cl.CommandQueue | None = None, **kwargs: Any
) -> Explanation:
    """What `clforge.ops.<op>(*inputs, **kwargs)` would run on the default device (or `queue`'s):
    keyword arguments are the eager function's (attributes and calling-convention options)."""
    from clforge.call.dispatcher import dispatcher

    d0 = dispatcher(queue)
    taken = intake(d0.registry, op, inputs, d0.runtime, queue is None)  # as the call takes them
    if taken is not None:
        inputs, queue = taken.inputs, taken.queue or queue
    sig = d0.registry.op(op)
    inputs = _as_eager(sig, inputs, kwargs)
    # as the eager function splits them: its convention's parameters (attention's `causal`,
    # which it turns into the attribute), then the op's attributes
    conv_params = {p.name for p in CONVENTIONS[sig.call].params(sig)}
    attr_names = {a.name for a in sig.attrs} - conv_params
    attrs = {k: v for k, v in kwargs.items() if k in attr_names}
    options = {k: v for k, v in kwargs.items() if k not in attr_names}
    seen = take_views(dispatcher(queue), op, inputs, copy=False)  # describes, copies nothing
    c = prepare(op, seen.arrays, attrs, options, queue)
    d = c.dispatcher
    dtype, layouts = call_types(c.op, c.inputs)
    b = bind(c.op, c.inputs, c.attrs)
    layouts = d.best_host_layouts(c.op, c.inputs, dtype, layouts, b.env)
    sel = d.select(op, dtype, layouts, b.env)
    chosen = sel.chosen.instance if sel.chosen is not None else None
    params = d.params_for(d.registry.instance(chosen), b.env) if chosen else None
    return Explanation(sel, params, d.lookup.passed, d.lookup.device.isa_text, seen.notes)
