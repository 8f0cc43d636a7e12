"""What a calling convention is: how an eager call's arrays map to an op's canonical tensors."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from clforge.errors import CallError
from clforge.registry.records import OpSig


class Probe(np.ndarray):
    """A probe array (:func:`clforge.call.results.probe_array`): sizes without memory, every
    stride 0. It stands for a row-major buffer of its shape (a graph value, or an eager call's
    array whose results are sized without running it), so a convention that reads strides to
    find axes stretched by broadcasting (attention's mask) takes none of its axes as stretched."""


@dataclass(frozen=True)
class PyParam:
    """A keyword parameter that a convention adds to the generated eager function."""

    name: str
    annotation: str
    default: str  # Python source of the default value


@dataclass(frozen=True)
class Then:
    """A further call of the same op, on the (one) result of this one, for a call that one
    launch cannot do (a reduction over axes that are not adjacent: one group of axes at a time;
    a concatenation of more than two arrays: two at a time). Its inputs are the call's inputs
    at the positions `before`, the result, then those at `after` (positions, not arrays, so
    that a memoized call replays with its own arrays); `options` are its convention options;
    its result is viewed as `shape`."""

    options: Mapping[str, Any]
    shape: tuple[int, ...]
    before: tuple[int, ...] = ()
    after: tuple[int, ...] = ()


@dataclass(frozen=True)
class Canonical:
    """A call in the op's own terms, and how to turn the op's outputs into the call's result."""

    inputs: dict[str, Any]  # arrays shaped as the spec says; omitted optional inputs absent
    attrs: dict[str, Any] = field(default_factory=dict)
    finish: Callable[[dict[str, Any]], dict[str, Any]] = lambda outs: outs
    then: Then | None = None  # a further call on the finished result, if one launch is not all
    # inputs to convert before the call (NumPy's promotion, see promotion.py): name -> dtype
    casts: Mapping[str, str] = field(default_factory=dict)


class Convention:
    """Subclasses map arrays of any shape onto an op's dims and back. They may only reshape
    (views), pad ranks, reinterpret and check (NumPy index arrays are read for their range);
    they never compute a result: conversions they need are `Canonical.casts`, further launches
    `Canonical.then`, both carried out by the eager layer."""

    name: ClassVar[str]
    doc: ClassVar[str]
    # the eager function takes one sequence of arrays (np.concatenate's) instead of the op's
    # inputs; canonical_many maps it
    variadic: ClassVar[bool] = False
    # the eager function takes NumPy's `out=` (an array the one result is written into): the
    # elementwise ops and the reductions
    takes_out: ClassVar[bool] = False

    def params(self, op: OpSig) -> tuple[PyParam, ...]:
        return ()

    def positional(self, op: OpSig) -> tuple[str, ...]:
        """The parameters (this convention's, or the op's attributes) that the eager function
        also takes by position after the inputs, in this order (PyTorch's, where PyTorch has
        the function); the others are keyword-only."""
        return ()

    def supplies(self, op: OpSig) -> tuple[str, ...]:
        """Attributes the convention computes from its own parameters (`Canonical.attrs`); the
        eager function does not take them, so their spec defaults cannot override the result."""
        return ()

    def problems(self, op: OpSig) -> list[str]:
        """Why `op`'s signature does not fit this convention (lint reports these)."""
        return []

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        raise NotImplementedError

    def canonical_many(
        self, op: OpSig, arrays: Sequence[Any], options: Mapping[str, Any]
    ) -> Canonical:
        """A variadic convention's call: any number of arrays, in the caller's order."""
        raise NotImplementedError


def reshape(op: OpSig, name: str, arr: Any, shape: tuple[int, ...]) -> Any:
    """A view of `arr` with `shape` (NumPy may copy; device arrays must be contiguous)."""
    shape = tuple(int(n) for n in shape)
    if tuple(arr.shape) == shape:
        return arr
    if not isinstance(arr, np.ndarray):  # a pyopencl array
        if not (arr.flags.c_contiguous or arr.size == 0):
            raise CallError(
                f"{op.name}: input {name!r} (shape {arr.shape}, strides "
                f"{arr.strides}) must be contiguous to be reshaped; pass a copy"
            )
        return arr.reshape(shape)
    return np.reshape(arr, shape)


def normalize_axis(op: OpSig, axis: Any, ndim: int, name: str = "axis") -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise CallError(f"{op.name}: {name} must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise CallError(f"{op.name}: {name} {axis} is out of range for an input of rank {ndim}")
    return int(axis) % ndim


def prod(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def array_of(op: OpSig, name: str, value: Any) -> Any:
    """`value` if it is an array the op can take; refuses what would lose meaning on the way
    (a masked array's mask, np.matrix's always-2-d semantics)."""
    if value is None or not hasattr(value, "shape") or not hasattr(value, "dtype"):
        what = "None" if value is None else f"a {type(value).__name__}"
        raise CallError(
            f"{op.name}: input {name!r} is {what}, not an array (pass a NumPy or pyopencl array)"
        )
    if isinstance(value, np.ma.MaskedArray):
        raise CallError(
            f"{op.name}: input {name!r} is a NumPy masked array (shape {value.shape}); clforge "
            "would drop its mask: pass np.ma.filled(x, fill) or x.data"
        )
    if isinstance(value, np.matrix):
        raise CallError(
            f"{op.name}: input {name!r} is an np.matrix (shape {value.shape}), whose operations "
            "stay 2-d; pass np.asarray(m)"
        )
    return value


def beside(arrays: Mapping[str, Any], host: np.ndarray) -> Any:
    """`host` where the call's arrays live: on the device of the first device array among them
    (a memoized call then finds it there), else as it is."""
    for a in arrays.values():
        if not isinstance(a, np.ndarray) and hasattr(a, "queue"):
            import pyopencl.array as cla  # only device arrays get here: lint runs without it

            return cla.to_device(a.queue, host)
    return host
