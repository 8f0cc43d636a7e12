"""Binding a call to an op's signature, in one place: input names, ranks, dtypes and layouts
(:func:`call_types`), the size of every dim (one name, one size; broadcasting; derived dims),
attributes with their defaults, the op's preconditions, the 32-bit index range and the device's
allocation limit (:func:`bind`), and whether a device array can be passed as it is
(:func:`device_array_problem`). Everything here raises :class:`CallError` naming the op, the
argument and the sizes, before anything is allocated or launched."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from clforge.core import expressions
from clforge.core.dtypes import DTYPES, DType, dtype_of_numpy
from clforge.core.layouts import array_layout
from clforge.errors import CallError
from clforge.registry.records import OpSig, TensorSig

INT32_MAX = 2**31 - 1


def check_names(
    op: OpSig, given: Mapping[str, Any], expected: tuple[TensorSig, ...], what: str
) -> None:
    names = [t.name for t in expected]
    missing = [n for n in names if n not in given]
    unknown = [n for n in given if n not in names]
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing {what} {', '.join(missing)}")
        if unknown:
            parts.append(f"unknown {what} {', '.join(unknown)}")
        raise CallError(f"{op.name}: {'; '.join(parts)} (expects {', '.join(names)})")


def named_attrs(op: OpSig, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """`attrs` with every value given by name (gelu's approximate='tanh', as PyTorch spells it)
    replaced by its number; a name the attribute does not have is a CallError listing those it
    has."""
    out = dict(attrs)
    for a in op.attrs:
        value = out.get(a.name)
        if a.names and isinstance(value, str):
            names = dict(a.names)
            if value not in names:
                shown = ", ".join(f"{n!r} ({v})" for n, v in a.names)
                raise CallError(f"{op.name}: {a.name} must be one of {shown}, got {value!r}")
            out[a.name] = names[value]
    return out


def resolve_attrs(op: OpSig, attrs: Mapping[str, float | int]) -> dict[str, float | int]:
    """Every attribute's value: given (by number, or by name where the spec names its values),
    else its default; unknown or missing ones are errors."""
    attrs = named_attrs(op, attrs)
    defaults = {a.name: a for a in op.attrs}
    unknown = sorted(set(attrs) - set(defaults))
    if unknown:
        raise CallError(
            f"{op.name}: unknown attribute {', '.join(unknown)} (expects "
            f"{', '.join(defaults) or 'none'})"
        )
    out: dict[str, float | int] = {}
    for name, a in defaults.items():
        value = attrs.get(name, a.default)
        if value is None:
            raise CallError(f"{op.name}: attribute {name!r} has no default; pass it")
        if a.type == "int" and (
            isinstance(value, bool) or not isinstance(value, (int, np.integer))
        ):
            raise CallError(f"{op.name}: attribute {name!r} must be an int, got {value!r}")
        if a.type == "float" and (
            isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating))
        ):
            raise CallError(f"{op.name}: attribute {name!r} must be a number, got {value!r}")
        if a.type == "int" and abs(int(value)) > INT32_MAX:
            raise CallError(f"{op.name}: attribute {name!r} = {value} does not fit a 32-bit int")
        out[name] = int(value) if a.type == "int" else float(value)
    return out


def int_attrs(op: OpSig, attrs: Mapping[str, float | int]) -> dict[str, int]:
    return {a.name: int(attrs[a.name]) for a in op.attrs if a.type == "int" and a.name in attrs}


@cache
def _expr(text: str, kind: expressions.Kind) -> expressions.Expr:
    return expressions.parse(text, kind)


def _rank_error(op: OpSig, t: TensorSig, shape: tuple[int, ...]) -> CallError:
    return CallError(
        f"{op.name}: input {t.name!r} has rank {len(shape)} (shape {shape}), expected rank "
        f"{len(t.shape)} [{', '.join(t.shape)}]"
    )


def bind_dims(
    op: OpSig, shapes: Mapping[str, tuple[int, ...]], attrs: Mapping[str, float | int] | None = None
) -> dict[str, int]:
    """Sizes of the op's dims from the inputs' shapes (and derived dims from int attributes).

    A dim bound by two inputs must agree, except that a broadcast input's size 1 stretches;
    then the op's checks must hold."""
    dims: dict[str, int] = {}
    source: dict[str, str] = {}
    soft: set[str] = set()  # dims seen only as a broadcast input's 1 so far
    for t in op.inputs:
        if t.name not in shapes:
            continue
        shape = tuple(int(n) for n in shapes[t.name])
        if len(shape) != len(t.shape):
            raise _rank_error(op, t, shape)
        for dim, size in zip(t.shape, shape, strict=True):
            if size > INT32_MAX:
                raise CallError(f"{op.name}: dim {dim} = {size} exceeds the 32-bit index range")
            here = f"{t.name} (shape {shape})"
            if t.broadcast and size == 1:
                if dim not in dims:
                    dims[dim], source[dim] = 1, here
                    soft.add(dim)
                continue
            if dim in dims and dims[dim] != size and dim not in soft:
                rule = (
                    "one name means one size"
                    if not t.broadcast
                    else "broadcasting needs equal sizes or 1"
                )
                raise CallError(
                    f"{op.name}: dim {dim} is {dims[dim]} in {source[dim]} but {size} in "
                    f"{here}; {rule}"
                )
            dims[dim], source[dim] = size, here
            soft.discard(dim)
    return dims if attrs is None else derive_dims(op, dims, attrs)


def derive_dims(
    op: OpSig, dims: Mapping[str, int], attrs: Mapping[str, float | int], *, partial: bool = False
) -> dict[str, int]:
    """`dims` with the op's derived dims (from dims and int attributes), then the op's checks.
    `partial` (what `clforge explain` asks for) skips a derived dim or a check that names a dim
    or attribute not given, instead of failing on it."""
    env = {**dims, **int_attrs(op, attrs)}
    out = dict(dims)
    for dim, text in op.derived:
        if partial and not _expr(text, "int").names <= env.keys():
            continue
        value = _expr(text, "int").evaluate(env)
        if value < 0:
            shown = ", ".join(f"{k}={v}" for k, v in sorted(env.items()))
            raise CallError(
                f"{op.name}: {dim} = {text} is {value} for {shown}; the sizes "
                "and attributes leave no output"
            )
        if value > INT32_MAX:
            raise CallError(f"{op.name}: {dim} = {text} is {value}, beyond the 32-bit index range")
        out[dim] = env[dim] = value
    for text, message in op.checks:
        names = _expr(text, "bool").names
        if partial and not names <= env.keys():
            continue
        if not _expr(text, "bool").holds(env):
            shown = ", ".join(f"{k}={env[k]}" for k in sorted(names))
            raise CallError(f"{op.name}: {message} ({text} is false for {shown})")
    return out


def array_dtype(op: OpSig, name: str, arr: Any) -> DType:
    d = dtype_of_numpy(np.dtype(arr.dtype))
    if d is None:
        raise CallError(
            f"{op.name}: input {name!r} has dtype {arr.dtype}, which clforge does not "
            f"support (supported: {', '.join(DTYPES)})"
        )
    return d


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
            raise _rank_error(op, t, tuple(arr.shape))
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
    shapes = {k: tuple(int(n) for n in a.shape) for k, a in inputs.items()}
    values = resolve_attrs(op, attrs)
    dims = bind_dims(op, shapes, values)
    for t in op.inputs + op.outputs:
        shape = shapes.get(t.name) or tuple(dims[d] for d in t.shape)
        if math.prod(shape) > INT32_MAX:
            raise CallError(
                f"{op.name}: {t.name} (shape {shape}) has {math.prod(shape)} elements, beyond "
                f"the kernels' 32-bit index range ({INT32_MAX})"
            )
    return Bound(dims, values, {**dims, **int_attrs(op, values)}, shapes)


def check_allocations(
    op: OpSig, dtype: str, b: Bound, host_inputs: Mapping[str, Any], max_alloc: int
) -> None:
    """Every output, and every host input that will be copied, fits one device allocation."""
    sized = [(t, tuple(b.dims[d] for d in t.shape), "output") for t in op.outputs]
    sized += [(t, b.shapes[t.name], "input") for t in op.inputs if t.name in host_inputs]
    for t, shape, what in sized:
        nbytes = math.prod(shape) * DTYPES[t.dtype or dtype].size
        if nbytes > max_alloc:
            raise CallError(
                f"{op.name}: {what} {t.name!r} of shape {shape} needs {nbytes} bytes, more than "
                f"the device's largest allocation ({max_alloc} bytes)"
            )


def device_array_problem(
    op: OpSig, dtype: str, name: str, arr: cla.Array, layout: str, context: cl.Context
) -> str | None:
    """Why device array `arr` cannot be bound as tensor `name` of an instance of `dtype` in
    `layout` on `context`, or None when it can be passed as it is."""
    want = DTYPES[op.tensor(name).dtype or dtype]
    got = array_dtype(op, name, arr)
    if got != want:
        return f"input {name!r} is {got.name}, expected {want.name}"
    if arr.context != context:
        return (
            f"input {name!r} (shape {arr.shape}) lives in another OpenCL context than the "
            "queue's; copy it to this context first"
        )
    if arr.offset and arr.size:  # clforge.ops calls take views first (call/views.py)
        return (
            f"input {name!r} is a view with an offset ({arr.offset} bytes); a call by "
            "canonical names binds buffers as they are: pass a copy, or call clforge.ops.<op>, "
            "which takes views"
        )
    if arr.size and array_layout(arr) != layout:
        return (
            f"input {name!r} (shape {arr.shape}, strides {arr.strides}) is not "
            f"{layout}-major as needed"
        )
    return None


def host_array(op: OpSig, dtype: str, name: str, arr: Any) -> np.ndarray:
    """A host input as a NumPy array of the tensor's dtype."""
    want = DTYPES[op.tensor(name).dtype or dtype]
    try:
        host = np.asarray(arr)
    except MemoryError:
        raise CallError(f"{op.name}: input {name!r} cannot be read into host memory") from None
    if host.dtype != want.np_dtype:
        raise CallError(f"{op.name}: input {name!r} is {host.dtype}, expected {want.numpy}")
    return host


def outputs_in_order(op: OpSig, outs: Mapping[str, Any]) -> Any:
    """The outputs as the op's functions return them: one value, or a tuple in spec order."""
    vals = tuple(outs[t.name] for t in op.outputs)
    return vals[0] if len(vals) == 1 else vals
