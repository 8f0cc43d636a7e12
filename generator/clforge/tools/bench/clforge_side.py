"""clforge's side of the bench, in the bench's own process: each case's chosen instance and its
generic fallback on device arrays (no transfers)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

from clforge.call.binding import bind, resolve_attrs
from clforge.call.dispatcher import Dispatcher
from clforge.registry.loader import Registry
from clforge.runtime.transfer import upload
from clforge.tools.bench.cases import Case
from clforge.tools.bench.protocol import Request, Timing, host_inputs, request
from clforge.tools.bench.timing import calls_per_timing, seconds


@dataclass(frozen=True)
class Figures:
    """Seconds per call of a case's chosen instance and of its generic fallback (None, with a
    note, where timing the generic would take too long)."""

    instance: str
    seconds: float
    generic_seconds: float | None
    generic_note: str | None = None


def requests(reg: Registry, cases: Sequence[Case]) -> list[Request]:
    """What each case is, for the peers' processes."""
    out = []
    for case in cases:
        op = reg.op(case.op)
        attrs = resolve_attrs(op, case.attrs)
        sizes, roots = dict(case.sizes), reg.roots()
        out.append(
            request(op, case.dtype, sizes, attrs, roots, case.shapes, case.layouts, case.natural)
        )
    return out


@dataclass
class GenericPace:
    """The generic fallbacks' measured rates, to skip timing a generic that would take longer
    than `budget_s` (the matmul sweep's generic at 2048 needs tens of seconds a call)."""

    budget_s: float
    rates: dict[tuple[str, str], float] = field(default_factory=dict)  # (op, dtype): slowest

    def predicted_s(self, case: Case) -> float | None:
        """Seconds per call of the case's generic at the slowest rate measured on its op (of
        its dtype where one was measured), or None before any was."""
        exact = [r for (op, dt), r in self.rates.items() if op == case.op and dt == case.dtype]
        known = exact or [r for (op, _), r in self.rates.items() if op == case.op]
        return case.amount() / min(known) if known else None

    def too_slow(self, case: Case, timing: Timing) -> str | None:
        """A note saying why the case's generic is not timed, or None to time it."""
        per_call = self.predicted_s(case)
        if per_call is None or per_call * calls_per_timing(timing) <= self.budget_s:
            return None
        return (
            f"generic not timed: ~{per_call:.0f} s a call, {calls_per_timing(timing)} calls "
            f"(predicted from the generic's rate on a smaller {case.op})"
        )

    def record(self, case: Case, seconds_per_call: float) -> None:
        rate = case.amount() / seconds_per_call
        key = (case.op, case.dtype)
        self.rates[key] = min(rate, self.rates.get(key, rate))


def time_case(
    d: Dispatcher,
    case: Case,
    req: Request,
    timing: Timing,
    pace: GenericPace,
    with_generic: bool = True,
) -> Figures:
    """The case's chosen instance, timed; and its generic fallback, unless `with_generic` is false
    or `pace` predicts it too slow (then None, with a note if predicted)."""
    reg, rt, q = d.registry, d.runtime, d.runtime.queue
    op = reg.op(case.op)
    # an input in another layout (NHWC) is that layout's memory, viewed in logical order
    dev = {k: upload(rt, v, req["layouts"].get(k, "row")) for k, v in host_inputs(req).items()}
    chosen = d.plan_for(op, dev, case.attrs)
    t_chosen = seconds(functools.partial(rt.enqueue, chosen, dev), q.finish, timing)
    if chosen.inst.variant == "generic":
        return Figures(chosen.inst.name, t_chosen, t_chosen)
    if not with_generic:
        return Figures(chosen.inst.name, t_chosen, None)
    note = pace.too_slow(case, timing)
    if note:
        return Figures(chosen.inst.name, t_chosen, None, note)
    generic = reg.instance(chosen.inst.name.replace(f"__{chosen.inst.variant}__", "__generic__"))
    b = bind(op, dev, case.attrs)
    plan = rt.plan(generic, b.dims, b.attrs, b.shapes)
    t_generic = seconds(functools.partial(rt.enqueue, plan, dev), q.finish, timing)
    pace.record(case, t_generic)
    return Figures(chosen.inst.name, t_chosen, t_generic)
