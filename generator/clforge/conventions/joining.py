"""The concat convention: numpy.concatenate's sequence of arrays, joined two at a time.

A launch joins two arrays viewed as a [B, RA, I] and b [B, RB, I] around the axis. A longer
sequence joins the adjacent pair with the fewest elements, then asks for a further call on the
rest with the joined array in that pair's place (:class:`Then`), so arrays of equal sizes are
copied about log2(k) times each. Dtypes promote as NumPy's (numpy.result_type).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

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
from clforge.conventions.promotion import casts, promoted
from clforge.errors import CallError
from clforge.registry.records import OpSig


class Concat(Convention):
    name = "concat"
    doc = (
        "numpy.concatenate(arrays, axis): one sequence of arrays of one rank, equal sizes off "
        "`axis` (an int, default 0, or None: every array flattened); dtypes promote as "
        "numpy.result_type; a launch joins two arrays viewed as [B, RA, I] and [B, RB, I], "
        "more take one launch per join, the smallest adjacent pair first"
    )
    variadic = True

    def params(self, op: OpSig) -> tuple[PyParam, ...]:
        return (PyParam("axis", "int | None", "0"),)

    def problems(self, op: OpSig) -> list[str]:
        if len(op.inputs) != 2 or len(op.outputs) != 1 or len(op.dims) != 5:
            return ["call: concat needs dims [B, RA, RB, I, R], inputs a and b, one output"]
        b, ra, rb, i, r = op.dims
        a_, b_ = op.inputs
        if (a_.shape, b_.shape, op.outputs[0].shape) != ((b, ra, i), (b, rb, i), (b, r, i)):
            return ["call: concat needs a [B, RA, I], b [B, RB, I] and y [B, R, I]"]
        return []

    def canonical_many(
        self, op: OpSig, arrays: Sequence[Any], options: Mapping[str, Any]
    ) -> Canonical:
        if not arrays:
            raise CallError(f"{op.name}: needs at least one array to join, got none")
        given = [array_of(op, f"arrays[{k}]", a) for k, a in enumerate(arrays)]
        axis = options.get("axis", 0)
        if axis is None:  # NumPy: every array flattened
            given = [reshape(op, f"arrays[{k}]", a, (prod(a.shape),)) for k, a in enumerate(given)]
            axis = 0
        first = tuple(given[0].shape)
        if not first:
            raise CallError(
                f"{op.name}: arrays[0] is 0-d (a scalar); 0-d arrays can only be joined with "
                "axis=None"
            )
        ax = normalize_axis(op, axis, len(first))
        for k, a in enumerate(given[1:], start=1):
            shape = tuple(a.shape)
            if len(shape) != len(first) or any(
                n != m for j, (n, m) in enumerate(zip(shape, first, strict=True)) if j != ax
            ):
                raise CallError(
                    f"{op.name}: arrays[{k}] has shape {shape}, arrays[0] {first}; they must "
                    f"have one rank and equal sizes off axis {ax}"
                )
        final = (*first[:ax], sum(int(a.shape[ax]) for a in given), *first[ax + 1 :])
        if len(given) == 1:  # a copy: join with an empty array
            empty = np.empty((*first[:ax], 0, *first[ax + 1 :]), np.dtype(given[0].dtype))
            given.append(beside({"a": given[0]}, empty))
        sizes = [prod(tuple(a.shape)) for a in given]
        k = min(range(len(given) - 1), key=lambda j: sizes[j] + sizes[j + 1])
        pair = {"a": given[k], "b": given[k + 1]}
        target = promoted(op, pair)
        b, i = prod(first[:ax]), prod(first[ax + 1 :])
        canon = {n: reshape(op, n, v, (b, int(v.shape[ax]), i)) for n, v in pair.items()}
        joined = (*first[:ax], sum(int(v.shape[ax]) for v in pair.values()), *first[ax + 1 :])
        then = None
        if len(given) > 2:  # the joined pair in its place, the same axis option
            rest = {"axis": options.get("axis", 0)}
            then = Then(rest, final, tuple(range(k)), tuple(range(k + 2, len(given))))

        def finish(outs: dict[str, Any]) -> dict[str, Any]:
            return {n: v.reshape(joined) for n, v in outs.items()}

        return Canonical(canon, finish=finish, then=then, casts=casts(op, pair, target))
