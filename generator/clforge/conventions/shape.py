"""The shape conventions: direct, flat, broadcast, axis, trailing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from clforge.conventions.axes import first_step, reduced_axes, reduced_shape
from clforge.conventions.base import (
    Canonical,
    Convention,
    PyParam,
    Then,
    array_of,
    beside,
    normalize_axis,
    prod,
    reshape,
)
from clforge.conventions.promotion import casts, is_number, promoted, scalar_array
from clforge.errors import CallError
from clforge.registry.records import OpSig


class Direct(Convention):
    name = "direct"
    doc = "arrays shaped exactly as the spec says"

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        return Canonical({k: array_of(op, k, v) for k, v in inputs.items() if v is not None})


class Flat(Convention):
    name = "flat"
    takes_out = True
    doc = "one dim N; inputs of any equal shape are flattened, outputs take that shape"

    def problems(self, op: OpSig) -> list[str]:
        if len(op.dims) != 1 or any(t.shape != op.dims for t in op.inputs + op.outputs):
            dim = op.dims[0] if op.dims else "N"
            return [f"call: flat needs one dim and every tensor shaped [{dim}]"]
        return []

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        arrays = {k: array_of(op, k, v) for k, v in inputs.items() if v is not None}
        shapes = {tuple(a.shape) for a in arrays.values()}
        if len(shapes) > 1:
            shown = " and ".join(str(s) for s in sorted(shapes))
            raise CallError(f"{op.name}: inputs must have equal shapes, got {shown}")
        shape = shapes.pop()
        flat = {k: reshape(op, k, a, (prod(shape),)) for k, a in arrays.items()}
        return Canonical(flat, finish=lambda outs: {k: v.reshape(shape) for k, v in outs.items()})


class Broadcast(Convention):
    name = "broadcast"
    takes_out = True
    doc = (
        "NumPy broadcasting of inputs of rank up to the op's rank, and NumPy's dtype promotion "
        "(numpy.result_type; Python numbers are weak scalars) of the inputs of the op's dtype"
    )

    def problems(self, op: OpSig) -> list[str]:
        out = []
        for t in op.inputs + op.outputs:
            if t.shape != op.dims:
                out.append(
                    f"call: broadcast needs every tensor shaped [{', '.join(op.dims)}]; "
                    f"{t.name} is [{', '.join(t.shape)}]"
                )
        out += [
            f"call: broadcast needs input {t.name} to have broadcast: true"
            for t in op.inputs
            if not t.broadcast
        ]
        return out

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        rank = len(op.dims)
        given = {k: v for k, v in inputs.items() if v is not None}
        if given and all(is_number(v) for v in given.values()):
            raise CallError(f"{op.name}: at least one input must be an array, got only numbers")
        arrays = {k: array_of(op, k, v) for k, v in given.items() if not is_number(v)}
        target = promoted(op, given)
        for k, v in given.items():
            if is_number(v):
                fixed = op.tensor(k).dtype
                arrays[k] = beside(arrays, scalar_array(op, k, v, fixed or target or op.dtypes[0]))
        for k, a in arrays.items():
            if a.ndim > rank:
                raise CallError(f"{op.name}: input {k!r} has rank {a.ndim}; at most {rank}")
        try:
            shape = np.broadcast_shapes(*(tuple(a.shape) for a in arrays.values()))
        except ValueError:
            shown = " and ".join(str(tuple(a.shape)) for a in arrays.values())
            raise CallError(f"{op.name}: shapes {shown} do not broadcast") from None
        padded = {
            k: reshape(op, k, a, (1,) * (rank - a.ndim) + tuple(a.shape)) for k, a in arrays.items()
        }
        return Canonical(
            padded,
            finish=lambda outs: {k: v.reshape(shape) for k, v in outs.items()},
            casts=casts(op, given, target),
        )


def _first(op: OpSig) -> str:
    return op.inputs[0].name


class Axis(Convention):
    name = "axis"
    takes_out = True
    doc = (
        "an `axis` argument: the first input is viewed as [B, R, I] around that axis; "
        "outputs are [B, R, I] (same shape, `axis` an int, default -1) or [B, I] (a reduction: "
        "`axis` None (every axis, the default), an int or, where the outputs have the input's "
        "dtype, a tuple of axes, as NumPy's; adjacent axes are one R, others one launch per "
        "group of adjacent axes; `keepdims` keeps 1s)"
    )

    def _reduces(self, op: OpSig) -> bool:
        return any(len(t.shape) == 2 for t in op.outputs)

    def _several(self, op: OpSig) -> bool:
        """A reduction whose outputs have the input's dtype composes (sum of sums, max of
        maxes), so it can take several axes; one that outputs indices (argmax) cannot."""
        return all(t.dtype is None for t in op.outputs)

    def params(self, op: OpSig) -> tuple[PyParam, ...]:
        if not self._reduces(op):
            return (PyParam("axis", "int", "-1"),)
        kinds = "int | tuple[int, ...] | None" if self._several(op) else "int | None"
        return (PyParam("axis", kinds, "None"), PyParam("keepdims", "bool", "False"))

    def problems(self, op: OpSig) -> list[str]:
        if len(op.dims) != 3 or len(op.inputs) != 1 or op.inputs[0].shape != op.dims:
            return ["call: axis needs dims [B, R, I] and one input shaped [B, R, I]"]
        b, _, i = op.dims
        bad = [t.name for t in op.outputs if t.shape not in (op.dims, (b, i))]
        out = (
            [f"call: axis needs outputs shaped [B, R, I] or [B, I]; not {', '.join(bad)}"]
            if bad
            else []
        )
        if self._reduces(op) and len(op.outputs) != 1:
            out.append("call: axis needs one output for a reduction")
        return out

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        name = _first(op)
        x = array_of(op, name, inputs[name])
        if not self._reduces(op):
            return self._same_shape(op, name, x, options)
        shape = tuple(x.shape)
        axes = reduced_axes(op, options.get("axis"), shape, several=self._several(op))
        keep = bool(options.get("keepdims", False))
        step, rest = first_step(shape, axes)
        final = reduced_shape(shape, axes, keep)
        then = None
        if rest:  # axes that are not adjacent: this launch reduces one group, keeping its 1s
            then = Then({"axis": rest, "keepdims": True}, final)
        result = reduced_shape(shape, step.axes, True) if rest else final

        def finish(outs: dict[str, Any]) -> dict[str, Any]:
            return {k: v.reshape(result) for k, v in outs.items()}

        return Canonical({name: reshape(op, name, x, step.view)}, finish=finish, then=then)

    def _same_shape(self, op: OpSig, name: str, x: Any, options: Mapping[str, Any]) -> Canonical:
        if x.ndim == 0:
            raise CallError(f"{op.name}: input {name!r} is a scalar; it needs an axis")
        shape = tuple(x.shape)
        ax = normalize_axis(op, options.get("axis", -1), x.ndim)
        b, r, i = prod(shape[:ax]), shape[ax], prod(shape[ax + 1 :])

        def finish(outs: dict[str, Any]) -> dict[str, Any]:
            return {k: v.reshape(shape) for k, v in outs.items()}

        return Canonical({name: reshape(op, name, x, (b, r, i))}, finish=finish)


class Trailing(Convention):
    name = "trailing"
    doc = (
        "normalization over the trailing `axes` axes: the first input is viewed as [B, R], "
        "inputs shaped [R] (weights) take the trailing shape, outputs come back as [B, R] "
        "-> the input's shape and [B] -> its leading shape"
    )

    def params(self, op: OpSig) -> tuple[PyParam, ...]:
        return (PyParam("axes", "int", "1"),)

    def problems(self, op: OpSig) -> list[str]:
        if len(op.dims) != 2 or op.inputs[0].shape != op.dims:
            return ["call: trailing needs dims [B, R] and a first input shaped [B, R]"]
        b, r = op.dims
        bad = [t.name for t in op.inputs[1:] if t.shape != (r,)]
        bad += [t.name for t in op.outputs if t.shape not in (op.dims, (b,))]
        return (
            [
                f"call: trailing needs weights shaped [R] and outputs [B, R] or [B]; not "
                f"{', '.join(bad)}"
            ]
            if bad
            else []
        )

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        name = _first(op)
        x = array_of(op, name, inputs[name])
        axes = options.get("axes", 1)
        if isinstance(axes, bool) or not isinstance(axes, int) or not 1 <= axes <= x.ndim:
            raise CallError(
                f"{op.name}: axes must be an int from 1 to the input's rank {x.ndim}, got {axes!r}"
            )
        shape = tuple(x.shape)
        lead, tail = shape[: x.ndim - axes], shape[x.ndim - axes :]
        out = {name: reshape(op, name, x, (prod(lead), prod(tail)))}
        for t in op.inputs[1:]:
            w = inputs.get(t.name)
            if w is None:
                continue
            w = array_of(op, t.name, w)
            if tuple(w.shape) != tail:
                raise CallError(
                    f"{op.name}: {t.name} has shape {tuple(w.shape)}, expected the "
                    f"normalized shape {tail}"
                )
            out[t.name] = reshape(op, t.name, w, (prod(tail),))

        def finish(outs: dict[str, Any]) -> dict[str, Any]:
            return {k: v.reshape(shape if v.ndim == 2 else lead) for k, v in outs.items()}

        return Canonical(out, finish=finish)
