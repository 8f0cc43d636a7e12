"""Binding a call to an op's signature: names, ranks, dtypes, sizes of every dim (one name, one
size; broadcasting; derived dims), attributes with their defaults, and the op's preconditions."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import numpy as np

from generator.core import expressions as guards
from generator.core.dtypes import DTYPES, DType, dtype_of_numpy
from generator.core.layouts import layout_strides
from generator.errors import CallError
from generator.registry.records import OpSig, TensorSig

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


def resolve_attrs(op: OpSig, attrs: Mapping[str, float | int]) -> dict[str, float | int]:
    """Every attribute's value: given, else its default; unknown or missing ones are errors."""
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
        if a.type == "float" and not isinstance(value, (int, float, np.integer, np.floating)):
            raise CallError(f"{op.name}: attribute {name!r} must be a number, got {value!r}")
        out[name] = int(value) if a.type == "int" else float(value)
    return out


def int_attrs(op: OpSig, attrs: Mapping[str, float | int]) -> dict[str, int]:
    return {a.name: int(attrs[a.name]) for a in op.attrs if a.type == "int" and a.name in attrs}


@cache
def _expr(text: str, kind: guards.Kind) -> guards.Expr:
    return guards.parse(text, kind)


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
            raise CallError(
                f"{op.name}: input {t.name!r} has rank {len(shape)} (shape {shape}), expected rank "
                f"{len(t.shape)} [{', '.join(t.shape)}]"
            )
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
    if attrs is not None:
        env = {**dims, **int_attrs(op, attrs)}
        for dim, text in op.derived:
            value = _expr(text, "int").evaluate(env)
            if value < 0:
                shown = ", ".join(f"{k}={v}" for k, v in sorted(env.items()))
                raise CallError(
                    f"{op.name}: {dim} = {text} is {value} for {shown}; the sizes "
                    "and attributes leave no output"
                )
            dims[dim] = env[dim] = value
        for text, message in op.checks:
            if not _expr(text, "bool").holds(env):
                shown = ", ".join(f"{k}={env[k]}" for k in sorted(_expr(text, "bool").names))
                raise CallError(f"{op.name}: {message} ({text} is false for {shown})")
    return dims


def element_dtype(tensor: TensorSig, instance_dtype: str) -> DType:
    return DTYPES[tensor.dtype or instance_dtype]


def array_dtype(op: OpSig, name: str, arr: Any) -> DType:
    d = dtype_of_numpy(np.dtype(arr.dtype))
    if d is None:
        raise CallError(
            f"{op.name}: input {name!r} has dtype {arr.dtype}, which clforge does not "
            f"support (supported: {', '.join(DTYPES)})"
        )
    return d


def element_strides(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """Element strides of a broadcast input: its storage strides, 0 on axes of size 1."""
    full = layout_strides(shape, 1, layout)
    return tuple(0 if n == 1 else s for s, n in zip(full, shape, strict=True))
