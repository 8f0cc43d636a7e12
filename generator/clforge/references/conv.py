"""References for conv2d and scaled dot-product attention, written to be obviously right: conv2d
sums filter taps over an explicitly zero-padded input, one tap and one group at a time;
attention builds the full score matrix, masks it and takes a max-subtracted softmax."""

from __future__ import annotations

from typing import Any

import numpy as np

from clforge.references.base import Arrays, Case, Reference


def _conv2d(a: Arrays, attrs: dict[str, Any]) -> dict[str, np.ndarray]:
    x, w = a["x"], a["w"]
    n, _, h, wd = x.shape
    k, cg, r, s = w.shape
    sh, sw = attrs.get("stride_h", 1), attrs.get("stride_w", 1)
    ph, pw = attrs.get("pad_h", 0), attrs.get("pad_w", 0)
    dh, dw = attrs.get("dil_h", 1), attrs.get("dil_w", 1)
    groups = attrs.get("groups", 1)
    oh = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (s - 1) - 1) // sw + 1
    bias = a["bias"] if "bias" in a else np.zeros(k)
    y = np.zeros((n, k, oh, ow)) + bias[None, :, None, None]
    if y.size == 0:
        return {"y": y}
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    kg = k // groups
    for i in range(r):
        for j in range(s):
            # tap (i, j) meets input row oh * sh + i * dh and column ow * sw + j * dw (padded)
            tap = xp[
                :,
                :,
                i * dh : i * dh + sh * (oh - 1) + 1 : sh,
                j * dw : j * dw + sw * (ow - 1) + 1 : sw,
            ]
            for g in range(groups):
                y[:, g * kg : (g + 1) * kg] += np.einsum(
                    "nchw,kc->nkhw",
                    tap[:, g * cg : (g + 1) * cg],
                    w[g * kg : (g + 1) * kg, :, i, j],
                )
    return {"y": y}


def _attention(a: Arrays, attrs: dict[str, Any]) -> dict[str, np.ndarray]:
    """PyTorch's scaled_dot_product_attention, written out: query head h reads kv head
    h // (H / HK) (repeat_interleave), scores scaled, soft-capped, the mask added (with
    bool_mask, a keep mask: -inf where it is 0), causal keys set to -inf; a row whose every
    score is -inf gives zeros (PyTorch's _safe_softmax)."""
    q, k, v = a["q"], a["k"], a["v"]
    sq, sk, d = q.shape[2], k.shape[2], q.shape[3]
    scale = attrs.get("scale", 1.0 / np.sqrt(d) if d else 1.0)
    out = np.zeros((*q.shape[:3], v.shape[3]))
    if sk == 0 or out.size == 0:
        return {"o": out}
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("bhid,bhjd->bhij", q, k) * scale
    cap = attrs.get("softcap", 0.0)
    if cap > 0:
        scores = cap * np.tanh(scores / cap)
    if "mask" in a:
        mask = a["mask"]  # broadcast from its own shape
        if attrs.get("bool_mask", 0):  # a keep mask: PyTorch's boolean mask as 1 and 0
            mask = np.where(mask != 0, 0.0, -np.inf)
        scores = scores + mask
    if attrs.get("causal", 0):
        i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]
        scores = np.where(j > i, -np.inf, scores)  # top-left aligned, as PyTorch's is_causal
    masked = np.isneginf(scores).all(axis=-1, keepdims=True)
    e = np.exp(scores - np.where(masked, 0.0, scores.max(axis=-1, keepdims=True)))
    p = np.where(masked, 0.0, e / np.where(masked, 1.0, e.sum(axis=-1, keepdims=True)))
    return {"o": np.einsum("bhij,bhjd->bhid", p, v)}


def _conv(n: int, c: int, h: int, w: int, k: int, r: int, s: int, **attrs: int) -> Case:
    cg = c // attrs.get("groups", 1)
    return Case({"N": n, "C": c, "H": h, "W": w, "K": k, "CG": cg, "R": r, "S": s}, attrs=attrs)


_CONV_CASES = (
    _conv(2, 3, 5, 7, 4, 1, 1),  # 1x1
    _conv(1, 1, 1, 1, 1, 1, 1),
    _conv(2, 37, 9, 9, 13, 1, 1),  # 1x1: 81 pixels (a whole panel of 64 and a tail), 13 channels
    _conv(1, 64, 8, 16, 40, 1, 1),  # 1x1: whole panels of pixels only
    _conv(3, 1, 3, 3, 1, 1, 1),  # 1x1: one channel in and out, three images
    _conv(1, 5, 13, 11, 7, 3, 3, pad_h=1, pad_w=1),  # 3x3, same size
    _conv(2, 3, 17, 19, 5, 3, 3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    _conv(1, 2, 11, 13, 3, 3, 3, dil_h=2, dil_w=2, pad_h=2, pad_w=2),
    _conv(1, 4, 9, 10, 6, 3, 2, groups=2),
    _conv(2, 5, 7, 9, 5, 3, 3, groups=5, pad_h=1, pad_w=1),  # depthwise
    _conv(1, 3, 8, 23, 6, 3, 3, groups=3, stride_w=3),  # depthwise, channel multiplier 2
    _conv(1, 3, 6, 37, 3, 3, 3, groups=3, pad_h=1, pad_w=1),  # depthwise, rows of 37
    _conv(1, 2, 9, 19, 8, 3, 3, groups=2, pad_h=1, pad_w=1),  # depthwise, channel multiplier 4
    _conv(2, 4, 5, 41, 8, 3, 3, groups=4, stride_h=2, stride_w=2, pad_h=1, pad_w=1),  # x2, /2
    _conv(1, 4, 21, 23, 4, 3, 3, groups=4, pad_h=1, pad_w=1),  # depthwise: 21 rows, blocks of rows
    _conv(2, 3, 26, 29, 6, 3, 3, groups=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    _conv(1, 2, 25, 34, 2, 3, 3, groups=2, dil_h=2, dil_w=2, pad_h=2, pad_w=2),  # depthwise, dil 2
    _conv(1, 3, 19, 40, 3, 5, 5, groups=3, pad_h=2, pad_w=1),  # depthwise 5x5, uneven padding
    _conv(1, 2, 17, 20, 2, 3, 3, groups=2),  # depthwise, no padding: every row inside
    _conv(1, 6, 7, 29, 9, 3, 3, groups=3, pad_h=1, pad_w=1),  # groups of 2 -> 3 channels
    _conv(1, 34, 9, 11, 38, 3, 3, groups=2, pad_h=1, pad_w=1),  # groups of 17 -> 19 channels
    _conv(2, 48, 7, 5, 102, 1, 1, groups=3, stride_h=2),  # groups of 16 -> 34, 1x1 /2
    _conv(0, 3, 5, 5, 2, 3, 3),  # N = 0
    _conv(1, 3, 2, 3, 5, 5, 4, pad_h=2, pad_w=2),  # the input smaller than the filter
    _conv(1, 2, 7, 31, 3, 2, 5, stride_h=1, stride_w=3, pad_h=0, pad_w=2, dil_h=2, dil_w=1),
    _conv(1, 37, 29, 31, 17, 3, 3, pad_h=1, pad_w=1),  # primes, a reduction of 333
    _conv(1, 96, 12, 12, 9, 3, 3, pad_h=1, pad_w=1),  # a reduction of 864
)


def _attn(
    b: int,
    h: int,
    sq: int,
    sk: int,
    d: int,
    dv: int,
    hk: int | None = None,
    mask: tuple[int, ...] = (1, 1, 1, 1),
    **attrs: float,
) -> Case:
    """A case; `mask`: the additive mask's shape, 2-d to 4-d (broadcast to [B, H, SQ, SK];
    the default, one element, is what an eager call without a mask passes)."""
    dims = {"B": b, "H": h, "HK": h if hk is None else hk, "SQ": sq, "SK": sk, "D": d, "DV": dv}
    return Case(dims, {"mask": (1,) * (4 - len(mask)) + mask}, attrs)


_ATTENTION_CASES = (
    _attn(1, 1, 1, 1, 1, 1),
    _attn(2, 3, 7, 13, 5, 11, mask=(2, 3, 7, 13), scale=0.4),  # SQ != SK, D no multiple of 8
    _attn(2, 3, 7, 13, 5, 11, mask=(7, 13), scale=0.4, causal=1),
    _attn(1, 2, 19, 5, 16, 8, mask=(1, 5), scale=0.25, causal=1),  # SQ > SK; a key mask
    _attn(1, 1, 33, 1, 9, 3, scale=0.3),  # SK = 1
    _attn(1, 2, 37, 300, 64, 64, scale=0.125),  # a long softmax, vector-width head dims
    _attn(1, 2, 37, 300, 64, 64, scale=0.125, causal=1),
    _attn(1, 2, 37, 300, 64, 64, mask=(37, 300), scale=0.5, softcap=3.0),
    _attn(1, 1, 6, 6, 3, 17, scale=20.0),  # large scores: the max subtraction matters
    _attn(1, 1, 6, 6, 3, 17, scale=20.0, softcap=2.5),
    _attn(2, 6, 29, 45, 24, 20, hk=2, mask=(2, 1, 29, 45), scale=0.2),  # grouped heads
    _attn(1, 4, 17, 70, 64, 64, hk=1, mask=(4, 1, 70), scale=0.3, causal=1, softcap=5.0),
    _attn(1, 4, 70, 130, 64, 40, hk=2, mask=(70, 1), scale=0.125, causal=1),  # a query mask
    _attn(1, 2, 130, 67, 32, 17, mask=(2, 130, 67), scale=0.2),
    # keep masks (a boolean mask, as 1 and 0): the domain's zeros mask out, a row of them too
    _attn(2, 3, 7, 13, 5, 11, mask=(2, 3, 7, 13), scale=0.4, bool_mask=1),
    _attn(1, 4, 70, 130, 64, 64, hk=2, mask=(70, 130), scale=0.125, causal=1, bool_mask=1),
    _attn(1, 2, 37, 300, 64, 40, mask=(1, 300), scale=0.5, softcap=3.0, bool_mask=1),
    _attn(0, 2, 5, 5, 8, 8, scale=0.5),  # B = 0
    _attn(1, 1, 4, 0, 8, 8, scale=0.5),  # SK = 0: zeros
)

REFERENCES: dict[str, Reference] = {
    "conv2d": Reference(_conv2d, cases=_CONV_CASES, reduce="CG"),
    "attention": Reference(
        _attention, domains={"mask": "attn_mask"}, cases=_ATTENTION_CASES, reduce="SK"
    ),
}


def __getattr__(name: str) -> Reference:
    """`clforge.references.conv:<op>`, the path a spec's `reference:` names."""
    try:
        return REFERENCES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no reference {name!r}") from None
