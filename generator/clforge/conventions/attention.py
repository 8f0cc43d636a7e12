"""The attention convention: PyTorch's scaled_dot_product_attention (with or without a heads
axis, grouped heads, a boolean or additive mask, scale 1/sqrt(D) by default)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from clforge.conventions.base import (
    Canonical,
    Convention,
    Probe,
    PyParam,
    array_of,
    reshape,
)
from clforge.core.dtypes import dtype_of_numpy
from clforge.errors import CallError
from clforge.registry.records import OpSig


class Attention(Convention):
    name = "attention"
    doc = (
        "PyTorch's scaled_dot_product_attention: q is (B, H, SQ, D) and k, v are (B, HK, SK, D) "
        "and (B, HK, SK, DV), or all without heads (B, S, D); HK < H (a divisor) needs "
        "enable_gqa=True; mask (bool: False masks out, or additive of q's dtype) broadcasts to "
        "(B, H, SQ, SK); causal is top-left aligned; scale defaults to 1 / sqrt(D); softcap > 0 "
        "caps the scores at softcap * tanh(s / softcap); a row without any key left gives zeros"
    )

    def params(self, op: OpSig) -> tuple[PyParam, ...]:
        return (
            PyParam("causal", "bool", "False"),
            PyParam("scale", "float | None", "None"),
            PyParam("softcap", "float", "0.0"),
            PyParam("enable_gqa", "bool", "False"),
        )

    def supplies(self, op: OpSig) -> tuple[str, ...]:
        return ("causal", "scale", "softcap", "bool_mask")

    def problems(self, op: OpSig) -> list[str]:
        out = []
        shapes = [t.shape for t in op.inputs + op.outputs]
        if len(op.inputs) != 4 or any(len(s) != 4 for s in shapes) or len(op.outputs) != 1:
            out.append(
                "call: attention needs 4-d inputs q, k, v, an optional broadcast mask "
                "[B, H, SQ, SK] and one 4-d output"
            )
        elif not (op.inputs[3].optional and op.inputs[3].broadcast):
            out.append("call: attention needs its fourth input (the mask) optional and broadcast")
        types = {a.name: a.type for a in op.attrs}
        wanted = {"causal": "int", "scale": "float", "softcap": "float", "bool_mask": "int"}
        missing = [f"{t} {n}" for n, t in wanted.items() if types.get(n) != t]
        if missing:
            out.append(f"call: attention needs the attributes {', '.join(missing)}")
        return out

    def canonical(
        self, op: OpSig, inputs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Canonical:
        names = [t.name for t in op.inputs]
        arrays = {k: array_of(op, k, v) for k, v in inputs.items() if v is not None}
        qkv = {k: arrays[k] for k in names[:3]}
        ranks = {a.ndim for a in qkv.values()}
        if len(ranks) != 1 or not ranks <= {3, 4}:
            shown = ", ".join(f"{k} {tuple(a.shape)}" for k, a in qkv.items())
            raise CallError(
                f"{op.name}: q, k and v must all be (B, H, S, D) or all (B, S, D); got {shown}"
            )
        q, k = qkv[names[0]], qkv[names[1]]
        if ranks == {4} and q.shape[1] != k.shape[1] and not options.get("enable_gqa", False):
            raise CallError(
                f"{op.name}: q has {q.shape[1]} heads (shape {tuple(q.shape)}) but k has "
                f"{k.shape[1]} (shape {tuple(k.shape)}); grouped-query attention (q's heads a "
                "multiple of k's and v's) needs enable_gqa=True"
            )
        attrs = {
            "causal": int(bool(options.get("causal", False))),
            "scale": _scale(op, options.get("scale"), q.shape[-1]),
            "softcap": _softcap(op, options.get("softcap", 0.0)),
            "bool_mask": 0,
        }
        casts: dict[str, str] = {}
        mask = names[3]
        if mask in arrays:
            scores = (*q.shape[:-1], k.shape[-2])
            arrays[mask] = _mask(op, mask, arrays[mask], scores)
            call_dtype = dtype_of_numpy(np.dtype(q.dtype))
            if np.dtype(arrays[mask].dtype) == np.bool_ and call_dtype is not None:
                # True / False become 1 / 0 of q's dtype, which the kernels read as a keep mask
                casts[mask], attrs["bool_mask"] = call_dtype.name, 1
        if ranks == {4}:
            return Canonical(arrays, attrs, casts=casts)
        headed = {k: reshape(op, k, a, (a.shape[0], 1, *a.shape[1:])) for k, a in arrays.items()}

        def finish(outs: dict[str, Any]) -> dict[str, Any]:
            return {k: v.reshape((v.shape[0], *v.shape[2:])) for k, v in outs.items()}

        return Canonical(headed, attrs, finish, casts=casts)


def _scale(op: OpSig, scale: Any, d: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(d) if d else 1.0  # D = 0: every score is 0 anyway
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise CallError(f"{op.name}: scale must be a number, got {scale!r}")
    return float(scale)


def _softcap(op: OpSig, softcap: Any) -> float:
    if (
        isinstance(softcap, bool)
        or not isinstance(softcap, numbers.Real)
        or not math.isfinite(softcap)
        or softcap < 0
    ):
        raise CallError(
            f"{op.name}: softcap must be a finite number >= 0 (0: off), got {softcap!r}"
        )
    return float(softcap)


def _mask(op: OpSig, name: str, mask: Any, scores: tuple[int, ...]) -> Any:
    """The mask with the scores' rank (size-1 axes stretch), as a view: a NumPy mask broadcast
    by stride 0 (np.broadcast_to) at its un-broadcast size. A boolean mask must be a NumPy
    array (the eager layer casts it to q's dtype on the host). A probe array (a graph value's
    sizes) is a row-major buffer: none of its axes is stretched."""
    if isinstance(mask, np.generic):  # a NumPy scalar (np.True_): a 0-d NumPy mask
        mask = np.asarray(mask)
    shape = tuple(int(n) for n in mask.shape)
    if len(shape) > len(scores) or any(
        n not in (1, s) for n, s in zip(shape[::-1], scores[::-1], strict=False)
    ):
        dims = "(B, H, SQ, SK)" if len(scores) == 4 else "(B, SQ, SK)"
        raise CallError(
            f"{op.name}: {name} of shape {shape} does not broadcast to the scores' shape "
            f"{dims} = {scores}"
        )
    if isinstance(mask, np.ndarray) and not isinstance(mask, Probe):
        stretched = tuple(
            slice(0, 1) if st == 0 and n > 1 else slice(None)
            for n, st in zip(shape, mask.strides, strict=True)
        )
        mask = mask[stretched]
    elif np.dtype(mask.dtype) == np.bool_:
        raise CallError(
            f"{op.name}: {name} is a boolean device array (shape {shape}); pass it as a "
            "NumPy array, or as an additive mask of q's dtype (0 to attend, -inf to mask out)"
        )
    return reshape(op, name, mask, (1,) * (len(scores) - mask.ndim) + tuple(mask.shape))
