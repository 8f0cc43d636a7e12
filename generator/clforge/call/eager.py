"""Eager calls: what the generated `clforge.generated.ops` functions run.

A call goes through the op's calling convention (arrays of any shape onto the op's dims),
omitted optional inputs are filled, and the dispatcher plans and launches. Calls on device
arrays are memoized as a :class:`Recipe`, so a warm call binds the caller's buffers directly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from clforge.call import views
from clforge.call.binding import bind_dims, call_types, outputs_in_order
from clforge.call.dispatcher import Dispatcher, dispatcher, memo_items
from clforge.conventions import CONVENTIONS
from clforge.conventions.base import Then
from clforge.core.dtypes import DTYPES, dtype_of_numpy
from clforge.errors import CallError, ClforgeError
from clforge.interop.intake import intake
from clforge.interop.out import check_out, write_out
from clforge.registry.records import OpSig
from clforge.runtime.launch import LaunchPlan, OutputSpec, Runtime
from clforge.runtime.transfer import to_host, upload


def _filled(d: Dispatcher, op: OpSig, inputs: dict[str, Any]) -> dict[str, Any]:
    """`inputs` with every omitted optional input made, filled with its `fill` value."""
    missing = [t for t in op.inputs if t.name not in inputs]
    if not missing:
        return inputs
    required = [t.name for t in missing if not t.optional]
    if required:
        raise CallError(f"{op.name}: missing input {', '.join(required)}")
    present = {t.name: inputs[t.name] for t in op.inputs if t.name in inputs}
    dtype, _ = call_types(op, present, partial=True)
    dims = bind_dims(op, {k: tuple(a.shape) for k, a in present.items()})
    on_device = any(isinstance(a, cla.Array) for a in present.values())
    out = dict(inputs)
    for t in missing:
        # a broadcast input needs one element, stretched; others the full shape
        shape = (1,) * len(t.shape) if t.broadcast else tuple(dims[x] for x in t.shape)
        np_dtype = DTYPES[t.dtype or dtype].np_dtype
        host = np.full(shape, fill_value(t.fill, np_dtype), np_dtype)
        out[t.name] = cla.to_device(d.runtime.queue, host) if on_device else host
    return out


def fill_value(fill: float | None, np_dtype: np.dtype) -> float | int:
    """An optional input's fill in `np_dtype`: 0 when the spec gives none; for an integer dtype a
    fill beyond its range (clip's -inf and inf bounds) is its lowest or highest value."""
    if fill is None:
        return 0
    if np.issubdtype(np_dtype, np.integer):
        info = np.iinfo(np_dtype)
        return int(max(info.min, min(info.max, fill)))
    return fill


def _cast(
    d: Dispatcher,
    op: OpSig,
    inputs: dict[str, Any],
    casts: Mapping[str, str],
    queue: cl.CommandQueue | None,
) -> dict[str, Any]:
    """`inputs` with the conversions the convention asked for (NumPy's promotion): NumPy
    arrays converted on the host (they are copied to the device anyway), device arrays by the
    op `cast_<dtype>`."""
    if not casts:
        return inputs
    out = dict(inputs)
    for name, dtype in casts.items():
        arr = inputs[name]
        if not isinstance(arr, cla.Array):
            out[name] = np.asarray(arr).astype(DTYPES[dtype].np_dtype)
            continue
        caster = f"cast_{dtype}"
        if caster not in d.registry.ops or dtype_of_numpy(arr.dtype) is None:
            raise CallError(
                f"{op.name}: input {name!r} is a device array of dtype {arr.dtype} (shape "
                f"{arr.shape}); the call needs it as {dtype}: convert it first"
            )
        try:
            out[name] = call_op(caster, (arr,), {}, {}, queue)
        except ClforgeError as exc:  # the caster's message names its own op and input 'x'
            reason = str(exc).removeprefix(f"{caster}: ")
            raise CallError(
                f"{op.name}: input {name!r} (a device array of dtype {arr.dtype}, shape "
                f"{arr.shape}) must become {dtype} first, which {caster} refused: {reason}"
            ) from None
    return out


def _check_options(sig: OpSig, options: Mapping[str, Any]) -> None:
    """Options typed bool take True or False only, as NumPy's keepdims does (a string would be
    taken by its truthiness)."""
    for p in CONVENTIONS[sig.call].params(sig):
        value = options.get(p.name)
        if p.annotation == "bool" and p.name in options and not isinstance(value, bool | np.bool_):
            raise CallError(
                f"{sig.name}: {p.name} must be True or False, got {value!r} "
                f"({type(value).__name__})"
            )


@dataclass(frozen=True)
class EagerCall:
    """An eager call in the op's own terms: canonical inputs (optional ones filled) and
    attributes, and how to turn the op's outputs into what the eager function returns."""

    dispatcher: Dispatcher
    op: OpSig
    inputs: dict[str, Any]
    attrs: dict[str, Any]
    finish: Callable[[dict[str, Any]], dict[str, Any]]
    then: Then | None = None
    cast: bool = False  # some inputs were converted first (a memo would keep the old copies)


def prepare(
    op: str,
    inputs: Sequence[Any],
    attrs: Mapping[str, Any],
    options: Mapping[str, Any] | None = None,
    queue: cl.CommandQueue | None = None,
) -> EagerCall:
    d = dispatcher(queue)
    sig = d.registry.op(op)
    conv = CONVENTIONS[sig.call]
    if not conv.variadic and len(inputs) != len(sig.inputs):
        raise CallError(f"{op}: takes {len(sig.inputs)} inputs, got {len(inputs)}")
    given = {t.name: a for t, a in zip(sig.inputs, inputs, strict=not conv.variadic)}
    for t in () if conv.variadic else sig.inputs:
        if given[t.name] is None and not t.optional:
            raise CallError(f"{op}: input {t.name!r} is None; it is required (an array)")
    _check_options(sig, options or {})
    try:
        if conv.variadic:
            canon = conv.canonical_many(sig, inputs, options or {})
        else:
            canon = conv.canonical(sig, given, options or {})
        filled = _filled(d, sig, _cast(d, sig, canon.inputs, canon.casts, queue))
    except ClforgeError:
        raise
    except (TypeError, ValueError, np.exceptions.AxisError) as exc:  # last line of defence
        raise CallError(f"{op}: {exc}") from None
    merged = {**canon.attrs, **{k: v for k, v in attrs.items() if v is not None}}
    return EagerCall(d, sig, filled, merged, canon.finish, canon.then, bool(canon.casts))


def call_op(
    op: str,
    inputs: Sequence[Any],
    attrs: Mapping[str, Any],
    options: Mapping[str, Any] | None = None,
    queue: cl.CommandQueue | None = None,
    out: Any = None,
) -> Any:
    """What every generated eager function calls: positional inputs in the spec's order,
    attributes, and the options of the op's calling convention; `out`, NumPy's, where the
    function takes it.

    Tensors and DLPack producers, and device arrays of another context (run on their queue),
    are taken by :func:`clforge.interop.intake.intake`, which gives the result back as the
    caller's type. Calls on device arrays are memoized as a :class:`Recipe` (keyed by the arrays'
    dtypes, shapes, strides and offsets, and the attributes and options): a warm call skips the
    calling convention's views and binds the caller's buffers directly."""
    d = dispatcher(queue)
    taken = intake(d.registry, op, inputs, d.runtime, queue is None, out)
    if taken is not None:
        queue = taken.queue or queue
        return taken.back(call_op(op, taken.inputs, attrs, options, queue, taken.out))
    if out is not None:
        check_out(op, out)
        return write_out(op, call_op(op, inputs, attrs, options, queue), out)
    if views.pending(inputs):  # device arrays with an offset or strides: see views.py
        inputs = take_views(d, op, inputs).arrays
    key = _recipe_key(op, inputs, attrs, options)
    if key is not None:
        recipe = d._recipes.get(key)
        if recipe is not None:
            return _then(op, recipe.run(d.runtime, inputs), inputs, attrs, recipe.then, queue)
    c = prepare(op, inputs, attrs, options, queue)
    if c.then is not None and any(isinstance(a, np.ndarray | np.generic) for a in inputs):
        # several launches: NumPy inputs go to the device once, the result comes back once
        on_device = tuple(
            upload(d.runtime, np.asarray(a), "row") if isinstance(a, np.ndarray | np.generic) else a
            for a in inputs
        )
        return to_host(call_op(op, on_device, attrs, options, queue))
    plan = d.plan_for(c.op, c.inputs, c.attrs)
    outs = d.execute(c.op, plan, c.inputs)
    result = c.finish(outs)
    if key is not None and not c.cast:
        recipe = Recipe.learn(c, plan, inputs, outs, result)
        if recipe is not None:
            d._recipes[key] = recipe
    return _then(op, outputs_in_order(c.op, result), inputs, attrs, c.then, queue)


def take_views(d: Dispatcher, op: str, inputs: Sequence[Any], *, copy: bool = True) -> views.Taken:
    """The call's inputs with its device-array views made bindable (:func:`views.take`), each
    read as the op's tensor at its position takes it (a variadic op's inputs as its first)."""
    sig = d.registry.op(op)
    tensors = ((sig.inputs[0],) * len(inputs) if CONVENTIONS[sig.call].variadic else sig.inputs)[
        : len(inputs)
    ]
    names, layouts = [t.name for t in tensors], [t.layouts for t in tensors]
    return views.take(d.runtime, inputs, names, layouts, op, copy=copy)


def _then(
    op: str,
    result: Any,
    inputs: Sequence[Any],
    attrs: Mapping[str, Any],
    then: Then | None,
    queue: cl.CommandQueue | None,
) -> Any:
    """`result`, or, when the convention asked for a further call of the op on it and on some
    of the call's `inputs` (see :class:`clforge.conventions.base.Then`), that call's result
    viewed as `then.shape`."""
    if then is None:
        return result
    further = (
        *(inputs[i] for i in then.before),
        result,
        *(inputs[i] for i in then.after),
    )
    return call_op(op, further, attrs, then.options, queue).reshape(then.shape)


def _recipe_key(
    op: str, inputs: Sequence[Any], attrs: Mapping[str, Any], options: Mapping[str, Any] | None
) -> tuple | None:
    """The memo key of an eager call on device arrays, or None when it is not memoizable."""
    parts: list[Any] = []
    for a in inputs:
        if isinstance(a, cla.Array):
            parts.append((a.dtype, a.shape, a.strides, a.offset, id(a.context)))
        elif a is None or (isinstance(a, (bool, int, float)) and not isinstance(a, np.generic)):
            # (np.float64 is a float, but an array to the conventions: not a value here)
            parts.append(("value", type(a), a))
        else:
            return None  # NumPy inputs are copied anyway; nothing to save
    if not any(isinstance(a, cla.Array) for a in inputs):
        return None
    key = (op, tuple(parts), memo_items(attrs), memo_items(options or {}))
    try:
        hash(key)
    except TypeError:
        return None
    return key


@dataclass(frozen=True, eq=False)
class Recipe:
    """A warm eager call on device arrays: the plan, where each kernel buffer comes from (an
    argument of the call, or a constant such as a filled optional input), and the final shape
    and strides of each output, allocated directly so that no view needs to be made."""

    op: OpSig
    plan: LaunchPlan
    sources: tuple[tuple[str, int | None, Any], ...]  # (tensor, call input index, constant)
    outputs: tuple[OutputSpec, ...]  # the final shapes and strides, allocated directly
    then: Then | None = None  # the convention's further call on the result

    @classmethod
    def learn(
        cls,
        c: EagerCall,
        plan: LaunchPlan,
        given: Sequence[Any],
        outs: Mapping[str, Any],
        result: Mapping[str, Any],
    ) -> Recipe | None:
        if not plan.launches:
            return None
        memory = [id(g.base_data) for g in given if isinstance(g, cla.Array)]
        if len(set(memory)) < len(memory):
            # two arguments share memory (add(x, x), matmul(w, w.T)): which one an input came
            # from is ambiguous, and a replay on other arrays (same key) could bind the wrong one
            return None
        sources = []
        for t in c.op.inputs:
            name = t.name
            arr = c.inputs[name]
            index = next(
                (
                    j
                    for j, g in enumerate(given)
                    if isinstance(g, cla.Array)
                    and g.base_data is arr.base_data
                    and g.offset == arr.offset
                ),
                None,
            )
            sources.append((name, index, None if index is not None else arr))
        outputs = []
        for name, shape, dt, _ in plan.outputs:
            final = result.get(name)
            if (
                not isinstance(final, cla.Array)
                or final.base_data is not outs[name].base_data
                or final.offset
                or final.size != math.prod(shape)
            ):
                return None  # the convention made something other than a view: not memoized
            outputs.append((name, tuple(final.shape), dt, tuple(final.strides)))
        return cls(c.op, plan, tuple(sources), tuple(outputs), c.then)

    def run(self, rt: Runtime, given: Sequence[Any]) -> Any:
        buffers = {
            name: given[index] if index is not None else const
            for name, index, const in self.sources
        }
        return outputs_in_order(self.op, rt.enqueue(self.plan, buffers, self.outputs))


def eager_plan(
    op: str,
    inputs: Sequence[Any],
    attrs: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    queue: cl.CommandQueue | None = None,
) -> LaunchPlan:
    """The launch plan an eager call with these arguments gets (`.inst` is the chosen
    instance), without running it."""
    if views.pending(inputs):
        inputs = take_views(dispatcher(queue), op, inputs, copy=False).arrays
    c = prepare(op, inputs, attrs or {}, options, queue)
    return c.dispatcher.plan_for(c.op, c.inputs, c.attrs)
