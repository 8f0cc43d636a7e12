"""Sets of axes, as NumPy's reductions take them (`axis=None | int | tuple`), and how to reduce
over one with [B, R, I] views: axes that are adjacent (size-1 axes between them do not count)
merge into one R; axes that are not take one launch per group of adjacent ones."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from clforge.conventions.base import normalize_axis, prod
from clforge.errors import CallError
from clforge.registry.records import OpSig


def reduced_axes(op: OpSig, axis: Any, shape: tuple[int, ...], *, several: bool) -> tuple[int, ...]:
    """The axes `axis` names, normalized (negative ones counted from the end) and sorted: None
    is every axis, an int one, a tuple (when `several`) any set of them, () none. Duplicates and
    axes out of range are errors that name the op, the argument and the input's shape."""
    ndim = len(shape)
    if axis is None:
        return tuple(range(ndim))
    if (
        isinstance(axis, bool)
        or not isinstance(axis, (int, np.integer, Sequence))
        or isinstance(axis, str)
    ):
        kinds = "an int, a tuple of ints or None" if several else "an int or None"
        raise CallError(f"{op.name}: axis must be {kinds}, got {axis!r}")
    if not isinstance(axis, Sequence):
        _in_range(op, axis, shape)
        return (normalize_axis(op, axis, ndim),)
    if not several:
        raise CallError(
            f"{op.name}: axis must be an int or None, got {tuple(axis)!r} ({op.name} reduces "
            "over one axis or all of them, like NumPy's)"
        )
    out: list[int] = []
    for a in axis:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise CallError(f"{op.name}: axis entries must be ints, got {a!r} in {tuple(axis)!r}")
        _in_range(op, a, shape)
        n = normalize_axis(op, a, ndim)
        if n in out:
            raise CallError(
                f"{op.name}: axis {tuple(axis)!r} names axis {n} twice (input of shape {shape})"
            )
        out.append(n)
    return tuple(sorted(out))


def _in_range(op: OpSig, axis: Any, shape: tuple[int, ...]) -> None:
    if not -len(shape) <= axis < len(shape):
        raise CallError(
            f"{op.name}: axis {axis} is out of range for an input of rank {len(shape)} "
            f"(shape {shape})"
        )


@dataclass(frozen=True)
class Step:
    """One launch of a reduction: the input viewed as [B, R, I], and the axes it reduces."""

    view: tuple[int, int, int]
    axes: tuple[int, ...]


def first_step(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[Step, tuple[int, ...]]:
    """The launch that reduces the first group of adjacent `axes` of an array of `shape`, and
    the axes left for later launches (none when the axes are adjacent). Size-1 axes are
    ignored when grouping (reducing over them or not is the same); of several groups, the one
    with the most elements goes first, so that later launches read the least."""
    real = [a for a in range(len(shape)) if shape[a] != 1 or a in axes]
    groups: list[list[int]] = []
    for pos, a in enumerate(real):
        if a not in axes:
            continue
        if groups and real[pos - 1] == groups[-1][-1]:
            groups[-1].append(a)
        else:
            groups.append([a])
    if not groups:  # no axis: every element is its own result
        return Step((prod(shape), 1, 1), ()), ()
    group = max(groups, key=lambda g: prod(tuple(shape[a] for a in g)))
    lo, hi = group[0], group[-1]
    view = (prod(shape[:lo]), prod(shape[lo : hi + 1]), prod(shape[hi + 1 :]))
    rest = tuple(a for a in axes if a not in group)
    return Step(view, tuple(range(lo, hi + 1))), rest


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    """The shape of a reduction's result, as NumPy gives it."""
    if keepdims:
        return tuple(1 if a in axes else n for a, n in enumerate(shape))
    return tuple(n for a, n in enumerate(shape) if a not in axes)
