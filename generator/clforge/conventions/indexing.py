"""The indexing conventions: along_axis (numpy.take_along_axis) and embedding (PyTorch's).

Index tensors are i32 in the kernels. NumPy index arrays of another integer dtype are checked
on the host (every index in range, which also makes it fit i32) and then converted; device index
arrays must already be i32, and are not read on the host: the kernels clamp them into range.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from clforge.conventions.base import (
    Canonical,
    Convention,
    PyParam,
    array_of,
    normalize_axis,
    prod,
    reshape,
)
from clforge.errors import CallError
from clforge.registry.records import OpSig


def _index_array(op: OpSig, name: str, value: Any) -> tuple[Any, dict[str, str]]:
    """The index array `value`, and the cast it needs (a NumPy integer array that is not i32)."""
    arr = array_of(op, name, value)
    dt = np.dtype(arr.dtype)
    if dt == np.bool_ or not np.issubdtype(dt, np.integer):
        raise CallError(
            f"{op.name}: {name} must be an integer array (i32), got dtype {dt} (shape "
            f"{tuple(arr.shape)})"
        )
    if dt == np.int32:
        return arr, {}
    if not isinstance(arr, np.ndarray | np.generic):
        raise CallError(
            f"{op.name}: {name} is a device array of dtype {dt} (shape {tuple(arr.shape)}); "
            "device indices must be i32"
        )
    return arr, {name: "i32"}


def check_range(op: OpSig, name: str, arr: Any, lo: int, hi: int, where: str) -> None:
    """Every index of a NumPy index array in [lo, hi); device arrays are left to the kernel."""
    if not isinstance(arr, np.ndarray | np.generic) or not np.size(arr):
        return
    if hi <= max(lo, 0):
        raise CallError(
            f"{op.name}: {name} (shape {tuple(np.shape(arr))}) indexes {where}, which is empty"
        )
    small, big = int(np.min(arr)), int(np.max(arr))
    bad = small if small < lo else big if big >= hi else None
    if bad is not None:
        raise CallError(
            f"{op.name}: index {bad} in {name} (shape {tuple(np.shape(arr))}) is out of range "
            f"for {where} (valid: {lo} to {hi - 1})"
        )


class AlongAxis(Convention):
    name = "along_axis"
    doc = (
        "numpy.take_along_axis(x, indices, axis): axis an int (default -1) or None (x "
        "flattened, indices 1-d); x viewed as [B, R, I] around the axis and indices, of x's "
        "rank, as [B, J, I]; off the axis indices has x's sizes or broadcasts (NumPy inputs); "
        "negative indices count from the end; NumPy indices out of range are refused"
    )

    def params(self, op: OpSig) -> tuple[PyParam, ...]:
        return (PyParam("axis", "int | None", "-1"),)

    def problems(self, op: OpSig) -> list[str]:
        if len(op.inputs) != 2 or len(op.outputs) != 1 or len(op.dims) != 4:
            return ["call: along_axis needs inputs x [B, R, I], indices [B, J, I], one output"]
        b, r, i, j = op.dims
        x, ind = op.inputs
        if x.shape != (b, r, i) or ind.shape != (b, j, i) or op.outputs[0].shape != (b, j, i):
            return ["call: along_axis needs x [B, R, I], indices [B, J, I] and y [B, J, I]"]
        if ind.dtype != "i32":
            return ["call: along_axis needs indices of dtype i32"]
        return []

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        xn, iname = op.inputs[0].name, op.inputs[1].name
        x = array_of(op, xn, inputs[xn])
        ind, casts = _index_array(op, iname, inputs[iname])
        axis = options.get("axis", -1)
        if axis is None:
            if ind.ndim != 1:
                raise CallError(
                    f"{op.name}: with axis=None, {iname} must be 1-d, got shape {tuple(ind.shape)}"
                )
            x = reshape(op, xn, x, (prod(tuple(x.shape)),))
            axis = 0
        if ind.ndim != x.ndim:
            raise CallError(
                f"{op.name}: {iname} (shape {tuple(ind.shape)}) must have the rank of {xn} "
                f"(shape {tuple(x.shape)})"
            )
        if x.ndim == 0:
            raise CallError(f"{op.name}: input {xn!r} is a scalar; it needs an axis")
        ax = normalize_axis(op, axis, x.ndim)
        xs, js = tuple(x.shape), tuple(ind.shape)
        off = [n for k, n in enumerate(xs) if k != ax]
        joff = [n for k, n in enumerate(js) if k != ax]
        try:
            common = np.broadcast_shapes(tuple(off), tuple(joff))
        except ValueError:
            raise CallError(
                f"{op.name}: {iname} (shape {js}) and {xn} (shape {xs}) do not broadcast off "
                f"axis {ax}"
            ) from None
        full_x = (*common[:ax], xs[ax], *common[ax:])
        full_i = (*common[:ax], js[ax], *common[ax:])
        x = _stretched(op, xn, x, full_x)
        ind = _stretched(op, iname, ind, full_i)
        check_range(op, iname, ind, -xs[ax], xs[ax], f"axis {ax} of {xn} (size {xs[ax]})")
        b, i = prod(full_x[:ax]), prod(full_x[ax + 1 :])
        canon = {
            xn: reshape(op, xn, x, (b, xs[ax], i)),
            iname: reshape(op, iname, ind, (b, js[ax], i)),
        }

        def finish(outs: dict[str, Any]) -> dict[str, Any]:
            return {k: v.reshape(full_i) for k, v in outs.items()}

        return Canonical(canon, finish=finish, casts=casts)


def _stretched(op: OpSig, name: str, arr: Any, shape: tuple[int, ...]) -> Any:
    """`arr` broadcast to `shape`: a NumPy view (copied on upload); a device array must have
    the shape already."""
    if tuple(arr.shape) == shape:
        return arr
    if not isinstance(arr, np.ndarray | np.generic):
        raise CallError(
            f"{op.name}: {name} (shape {tuple(arr.shape)}) would have to be broadcast to "
            f"{shape}, which clforge does for NumPy inputs only; pass a device array of that shape"
        )
    return np.broadcast_to(arr, shape)


class Embedding(Convention):
    name = "embedding"
    doc = (
        "torch.nn.functional.embedding(indices, weight): indices of any shape, flattened to "
        "[M]; weight (V, D); y is indices.shape + (D,); NumPy indices outside [0, V) are refused"
    )

    def problems(self, op: OpSig) -> list[str]:
        if (
            len(op.inputs) != 2
            or len(op.inputs[0].shape) != 1
            or op.inputs[0].dtype != "i32"
            or len(op.inputs[1].shape) != 2
            or len(op.outputs) != 1
            or op.outputs[0].shape != (op.inputs[0].shape[0], op.inputs[1].shape[1])
        ):
            return ["call: embedding needs indices [M] (i32), weight [V, D] and y [M, D]"]
        return []

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        iname, wname = op.inputs[0].name, op.inputs[1].name
        ind, casts = _index_array(op, iname, inputs[iname])
        w = array_of(op, wname, inputs[wname])
        if w.ndim != 2:
            raise CallError(
                f"{op.name}: {wname} has rank {w.ndim} (shape {tuple(w.shape)}); it must be "
                "(num_embeddings, embedding_dim)"
            )
        v, d = (int(n) for n in w.shape)
        check_range(op, iname, ind, 0, v, f"{wname} with {v} rows (shape {tuple(w.shape)})")
        shape = tuple(ind.shape)
        canon = {iname: reshape(op, iname, ind, (prod(shape),)), wname: w}

        def finish(outs: dict[str, Any]) -> dict[str, Any]:
            return {k: out.reshape((*shape, d)) for k, out in outs.items()}

        return Canonical(canon, finish=finish, casts=casts)
