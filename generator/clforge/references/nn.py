"""References for the neural-network layers that are not convolutions or attention: batch_norm
(inference), max_pool2d and avg_pool2d (PyTorch's definitions, NCHW), embedding. Written to be
obviously right: explicit windows and loops over taps rather than clever indexing."""

from __future__ import annotations

from typing import Any

import numpy as np

from clforge.references.base import Arrays, Case, Reference


def _batch_norm(a: Arrays, attrs: dict[str, Any]) -> dict[str, np.ndarray]:
    eps = attrs.get("eps", 1e-5)
    per = {k: a[k][None, :, None] for k in ("running_mean", "running_var", "weight", "bias")}
    y = (a["x"] - per["running_mean"]) / np.sqrt(per["running_var"] + eps)
    return {"y": y * per["weight"] + per["bias"]}


def _bn(n: int, c: int, s: int, **attrs: float) -> Case:
    return Case({"N": n, "C": c, "S": s}, attrs=attrs)


BATCH_NORM_CASES = (
    _bn(1, 1, 1),
    _bn(2, 3, 1),  # (N, C)
    _bn(2, 5, 49),  # a 7x7 plane: an 8-wide loop and its tail
    _bn(1, 16, 8),
    _bn(3, 7, 131, eps=0.5),
    _bn(1, 64, 3136),
    _bn(0, 4, 9),
    _bn(2, 3, 0),
)


def _pool_geometry(h: int, k: int, s: int, p: int, d: int, ceil: int) -> int:
    """PyTorch's pooling_output_shape."""
    out = (h + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= h + p:
        out -= 1
    return out


def _pool(a: Arrays, attrs: dict[str, Any], kind: str) -> dict[str, np.ndarray]:
    """Window by window: the taps of each output, those inside the input and those inside the
    padded input counted explicitly."""
    x = a["x"]
    n, c, h, w = x.shape
    kh, kw = attrs["kernel_h"], attrs["kernel_w"]
    sh, sw = attrs.get("stride_h", 1), attrs.get("stride_w", 1)
    ph, pw = attrs.get("pad_h", 0), attrs.get("pad_w", 0)
    dh, dw = attrs.get("dil_h", 1), attrs.get("dil_w", 1)
    ceil = attrs.get("ceil_mode", 0)
    oh = _pool_geometry(h, kh, sh, ph, dh, ceil)
    ow = _pool_geometry(w, kw, sw, pw, dw, ceil)
    y = np.zeros((n, c, oh, ow))
    for i in range(oh):
        rows = [i * sh - ph + t * dh for t in range(kh)]
        for j in range(ow):
            cols = [j * sw - pw + t * dw for t in range(kw)]
            taps = [(r, q) for r in rows for q in cols if 0 <= r < h and 0 <= q < w]
            vals = np.stack([x[:, :, r, q] for r, q in taps], axis=-1) if taps else None
            if kind == "max":
                y[:, :, i, j] = np.max(vals, axis=-1) if vals is not None else -np.inf
                continue
            if vals is None:
                continue  # no tap inside: 0, as PyTorch
            padded = sum(-ph <= r < h + ph and -pw <= q < w + pw for r in rows for q in cols)
            div = attrs.get("divisor_override", 0) or (
                padded if attrs.get("count_include_pad", 1) else len(taps)
            )
            y[:, :, i, j] = vals.sum(axis=-1) / div
    return {"y": y}


def _pl(n: int, c: int, h: int, w: int, kh: int, kw: int, **attrs: int) -> Case:
    stride = {"stride_h": kh, "stride_w": kw}  # PyTorch's default stride, unless given
    attrs = {**stride, **attrs, "kernel_h": kh, "kernel_w": kw}
    return Case({"N": n, "C": c, "H": h, "W": w}, attrs=attrs)


POOL_CASES = (
    _pl(1, 1, 1, 1, 1, 1),
    _pl(2, 3, 8, 8, 2, 2),
    _pl(1, 2, 7, 9, 3, 3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    _pl(1, 3, 7, 9, 3, 3, stride_h=2, stride_w=2, pad_h=1, pad_w=1, ceil_mode=1),
    _pl(2, 2, 13, 11, 3, 2, stride_h=2, stride_w=3, ceil_mode=1),  # last windows clipped
    _pl(1, 2, 11, 13, 3, 3, stride_h=1, stride_w=1, pad_h=1, pad_w=1, dil_h=2, dil_w=2),
    _pl(1, 1, 5, 5, 2, 2, stride_h=1, stride_w=1),  # overlapping windows
    _pl(1, 4, 17, 31, 5, 3, stride_h=3, stride_w=2, pad_h=2, pad_w=1, ceil_mode=1),
    _pl(0, 3, 6, 6, 2, 2),
    _pl(1, 2, 6, 6, 2, 2, pad_h=1, pad_w=1, ceil_mode=1),
    _pl(1, 2, 5, 5, 2, 2, pad_h=1, pad_w=1, ceil_mode=1),  # a last window in the padding: dropped
)
AVG_POOL_CASES = (
    *POOL_CASES,
    _pl(1, 3, 7, 9, 3, 3, stride_h=2, stride_w=2, pad_h=1, pad_w=1, count_include_pad=0),
    _pl(1, 2, 13, 11, 3, 3, stride_h=2, pad_h=1, pad_w=1, ceil_mode=1, count_include_pad=0),
    _pl(1, 2, 9, 9, 3, 3, pad_h=1, pad_w=1, ceil_mode=1, divisor_override=5),
)

REFERENCES: dict[str, Reference] = {
    "max_pool2d": Reference(lambda a, at: _pool(a, at, "max"), cases=POOL_CASES),
    "avg_pool2d": Reference(lambda a, at: _pool(a, at, "avg"), cases=AVG_POOL_CASES),
    "batch_norm": Reference(
        _batch_norm, domains={"running_var": "positive"}, cases=BATCH_NORM_CASES
    ),
}


def __getattr__(name: str) -> Reference:
    """`clforge.references.nn:<op>`, the path a spec's `reference:` names."""
    try:
        return REFERENCES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no reference {name!r}") from None
