"""The linear-algebra conventions: matmul (NumPy's matmul), gemm (BLAS), permute (transpose)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from clforge.core.layouts import array_layout, layout_strides
from clforge.errors import CallError
from clforge.registry.records import OpSig

MAX_RANK = 4


def _shape_problems(op: OpSig, want: dict[str, int], name: str) -> list[str]:
    names = {t.name: len(t.shape) for t in op.inputs + op.outputs}
    if any(names.get(k) != r for k, r in want.items()):
        shown = ", ".join(f"{k} of rank {r}" for k, r in want.items())
        return [f"call: {name} needs tensors {shown}"]
    return []


def _matrix_view(op: OpSig, name: str, arr: Any, shape: tuple[int, ...]) -> Any:
    """`arr` seen as `shape`, keeping its layout (row, or col: the last two axes swapped in
    memory): batch axes merge, size-1 axes come and go. NumPy may copy; a device array must be
    row- or col-major as a whole."""
    if isinstance(arr, np.ndarray):
        if arr.ndim >= 2 and array_layout(arr, ("row", "col")) == "col":
            swapped = np.swapaxes(arr, -1, -2)  # C order when arr is col-major
            return np.swapaxes(np.reshape(swapped, (*shape[:-2], shape[-1], shape[-2])), -1, -2)
        return np.reshape(arr, shape)
    import pyopencl.array as cla  # only device arrays get here: lint runs without pyopencl

    if arr.size == 0:
        return cla.empty(arr.queue, shape, arr.dtype)
    lay = array_layout(arr, ("row", "col"))
    if lay is None:
        raise CallError(
            f"{op.name}: input {name!r} (shape {arr.shape}, strides {arr.strides}) must be "
            "row- or col-major; pass a contiguous copy"
        )
    if lay == "col" and len(shape) < 2:  # pragma: no cover - callers pass rank >= 2
        lay = "row"
    return cla.Array(
        arr.queue,
        shape,
        arr.dtype,
        data=arr.base_data,
        offset=arr.offset,
        strides=layout_strides(shape, arr.dtype.itemsize, lay),
    )


class Matmul(Convention):
    name = "matmul"
    doc = (
        "NumPy's matmul: a 1-d a is a row (promoted to [1, K], then squeezed), a 1-d b a column; "
        "batch dims (rank up to 4 in all) broadcast; a side whose batch dims are all 1, or both "
        "sides' equal, flatten into BA and BB; any other broadcast is materialized by NumPy for "
        "NumPy inputs (a copy) and refused for device arrays; F-ordered (and batched "
        "last-two-axes-swapped) operands are taken col-major, without a copy"
    )

    def problems(self, op: OpSig) -> list[str]:
        out = _shape_problems(op, {"a": 3, "b": 3, "c": 3}, "matmul")
        if out:
            return out
        (a, b), (c,) = op.inputs, op.outputs
        if not (a.shape[2] == b.shape[1] and c.shape[1:] == (a.shape[1], b.shape[2])):
            return ["call: matmul needs a [BA, M, K], b [BB, K, N] and c [BATCH, M, N]"]
        return []

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        a = array_of(op, "a", inputs["a"])
        b = array_of(op, "b", inputs["b"])
        for name, x in (("a", a), ("b", b)):
            if not 1 <= x.ndim <= MAX_RANK:
                raise CallError(
                    f"{op.name}: input {name!r} has rank {x.ndim} (shape {tuple(x.shape)}); "
                    f"matmul takes ranks 1 to {MAX_RANK}"
                )
        sa, sb = tuple(a.shape), tuple(b.shape)
        a2 = sa if a.ndim > 1 else (1, *sa)
        b2 = sb if b.ndim > 1 else (*sb, 1)
        if a2[-1] != b2[-2]:
            raise CallError(
                f"{op.name}: dim K is {a2[-1]} in a (shape {sa}) but {b2[-2]} in b (shape "
                f"{sb}); one name means one size"
            )
        ba, bb = a2[:-2], b2[:-2]
        try:
            batch = tuple(np.broadcast_shapes(ba, bb))
        except ValueError:
            raise CallError(
                f"{op.name}: batch dims {ba} of a and {bb} of b do not broadcast"
            ) from None
        m, n = a2[-2], b2[-1]
        rank = len(batch)
        if (
            prod(ba) == 1
            or prod(bb) == 1
            or (1,) * (rank - len(ba)) + ba == (1,) * (rank - len(bb)) + bb
        ):
            na, nb = prod(ba), prod(bb)
        else:
            on_device = [k for k, x in (("a", a), ("b", b)) if not isinstance(x, np.ndarray)]
            if on_device:
                raise CallError(
                    f"{op.name}: batch dims {ba} of a and {bb} of b broadcast to {batch} only "
                    "by copying an operand; for device arrays pass batch dims that are equal "
                    "or all 1"
                )
            # NumPy inputs: materialize the broadcast (a copy) so that both batches are equal
            a = np.broadcast_to(np.reshape(a, a2), (*batch, *a2[-2:]))
            b = np.broadcast_to(np.reshape(b, b2), (*batch, *b2[-2:]))
            na = nb = prod(batch)
        canon = {
            "a": _matrix_view(op, "a", a, (na, m, a2[-1])),
            "b": _matrix_view(op, "b", b, (nb, b2[-2], n)),
        }
        final = batch + ((m,) if len(sa) > 1 else ()) + ((n,) if len(sb) > 1 else ())

        def finish(outs: dict[str, Any]) -> dict[str, Any]:
            return {k: v.reshape(final) for k, v in outs.items()}

        return Canonical(canon, finish=finish)


class Gemm(Convention):
    name = "gemm"
    doc = (
        "BLAS GEMM: trans_a / trans_b take a or b transposed (a view: the col layout of the "
        "same memory, no copy); bias may be omitted, a number, or broadcast from [N], [1, N], "
        "[M, 1] or [M, N]"
    )

    def params(self, op: OpSig) -> tuple[PyParam, ...]:
        return (PyParam("trans_a", "bool", "False"), PyParam("trans_b", "bool", "False"))

    def problems(self, op: OpSig) -> list[str]:
        out = _shape_problems(op, {"a": 2, "b": 2, "bias": 2, "c": 2}, "gemm")
        if not out and not op.tensor("bias").broadcast:
            out.append("call: gemm needs bias to have broadcast: true")
        return out

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        out: dict[str, Any] = {}
        for name, trans in (("a", "trans_a"), ("b", "trans_b")):
            x = array_of(op, name, inputs[name])
            if x.ndim != 2:
                raise CallError(
                    f"{op.name}: input {name!r} has rank {x.ndim} (shape {tuple(x.shape)}); "
                    "gemm takes matrices (use matmul for batches)"
                )
            out[name] = x.T if bool(options.get(trans, False)) else x
        bias = inputs.get("bias")
        if bias is not None:
            if isinstance(bias, (int, float, np.integer, np.floating)) and not isinstance(
                bias, bool
            ):
                with np.errstate(over="ignore", invalid="ignore"):  # as a broadcast's number:
                    host = np.full((1, 1), bias, out["a"].dtype)  # beyond f16 or f32 is inf
                a = out["a"]
                if isinstance(a, np.ndarray):
                    bias = host
                else:
                    import pyopencl.array as cla  # device arrays only

                    bias = cla.to_device(a.queue, host)
            bias = array_of(op, "bias", bias)
            if bias.ndim > 2:
                raise CallError(
                    f"{op.name}: bias has rank {bias.ndim} (shape {tuple(bias.shape)}); it "
                    "broadcasts from a scalar, [N], [1, N], [M, 1] or [M, N]"
                )
            out["bias"] = reshape(op, "bias", bias, (1,) * (2 - bias.ndim) + tuple(bias.shape))
        return Canonical(out)


def _axes(op: OpSig, axes: Any, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(reversed(range(ndim)))
    if not isinstance(axes, Sequence) or isinstance(axes, str):
        raise CallError(f"{op.name}: axes must be a sequence of ints, got {axes!r}")
    out = tuple(normalize_axis(op, a, ndim, "axes entry") for a in axes)
    if sorted(out) != list(range(ndim)):
        raise CallError(
            f"{op.name}: axes {tuple(axes)} is not a permutation of the {ndim} axes of the input"
        )
    return out


class Permute(Convention):
    name = "permute"
    doc = (
        "numpy.transpose: an input of rank 0 to 4 and `axes` (default: reversed); the input is "
        "padded to rank 4 with leading 1s and p0..p3 are set from axes (leave them unset)"
    )

    def params(self, op: OpSig) -> tuple[PyParam, ...]:
        return (PyParam("axes", "tuple[int, ...] | None", "None"),)

    def supplies(self, op: OpSig) -> tuple[str, ...]:
        return tuple(f"p{k}" for k in range(MAX_RANK))

    def problems(self, op: OpSig) -> list[str]:
        out = _shape_problems(op, {"x": MAX_RANK, "y": MAX_RANK}, "permute")
        attrs = [a.name for a in op.attrs if a.type == "int"]
        if attrs[:MAX_RANK] != [f"p{k}" for k in range(MAX_RANK)]:
            out.append("call: permute needs int attrs p0, p1, p2, p3")
        return out

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        name = op.inputs[0].name
        x = array_of(op, name, inputs[name])
        if x.ndim > MAX_RANK:
            raise CallError(
                f"{op.name}: input {name!r} has rank {x.ndim}; permute takes ranks up to {MAX_RANK}"
            )
        shape = tuple(x.shape)
        axes = _axes(op, options.get("axes"), x.ndim)
        final = tuple(shape[a] for a in axes)
        merged, perm = _simplified(shape, axes)
        pad = MAX_RANK - len(merged)
        perm = tuple(range(pad)) + tuple(pad + a for a in perm)

        def finish(outs: dict[str, Any]) -> dict[str, Any]:
            return {k: v.reshape(final) for k, v in outs.items()}

        return Canonical(
            {name: reshape(op, name, x, (1,) * pad + merged)},
            attrs={f"p{k}": p for k, p in enumerate(perm)},
            finish=finish,
        )


def _simplified(
    shape: tuple[int, ...], axes: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The same data movement on fewer axes: size-1 axes dropped, and axes that stay adjacent
    and in order merged (a copy becomes rank 1, NCHW -> NHWC becomes [N, C, HW] -> [N, HW, C]).
    Only views: the row-major order of the input and of the output is unchanged."""
    if 0 in shape:
        return shape, axes
    renum = {a: i for i, a in enumerate(a for a in range(len(shape)) if shape[a] != 1)}
    shape = tuple(n for n in shape if n != 1)
    kept = [renum[a] for a in axes if a in renum]
    groups: list[list[int]] = []
    for a in kept:
        if groups and groups[-1][-1] + 1 == a:
            groups[-1].append(a)
        else:
            groups.append([a])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])  # groups in input order
    merged = tuple(prod(tuple(shape[a] for a in groups[g])) for g in order)
    rank_of = {g: r for r, g in enumerate(order)}
    return merged, tuple(rank_of[g] for g in range(len(groups)))
