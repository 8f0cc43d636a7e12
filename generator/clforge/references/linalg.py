"""References for matmul, gemm and permute, and the cases to test them on.

Sizes include 1, primes, sizes that are no multiple of 6, 16 or any tile, K = 0 (c = 0, or
beta * bias), empty outputs (M, N or a batch of 0), shared batches (a batch of 1 against 3) and
long reductions; gemm's bias comes as [N], [M, 1], a scalar and [M, N]; permute tries
transposes, reversals and rotations of the axes. Layouts are the instances' own (each
instance is tested in its layouts), so both layouts of each operand are covered.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clforge.references.base import Arrays, Case, Reference


def _gemm(a: Arrays, attrs: dict[str, Any]) -> dict[str, np.ndarray]:
    ab = attrs.get("alpha", 1.0) * (a["a"] @ a["b"])
    beta = attrs.get("beta", 0.0)
    return {"c": ab + beta * a["bias"] if beta else ab}


def _permute(a: Arrays, attrs: dict[str, Any]) -> dict[str, np.ndarray]:
    return {"y": np.transpose(a["x"], tuple(attrs[f"p{k}"] for k in range(4)))}


def _mm(ba: int, bb: int, m: int, n: int, k: int) -> Case:
    return Case({"BA": ba, "BB": bb, "M": m, "N": n, "K": k})


MATMUL_CASES = (
    _mm(1, 1, 1, 1, 1),
    _mm(1, 1, 7, 13, 31),
    _mm(1, 1, 67, 130, 33),
    _mm(1, 1, 6, 16, 8),  # exactly one register block
    _mm(1, 1, 12, 32, 129),
    _mm(1, 1, 37, 101, 257),
    _mm(1, 1, 7, 18, 1000),  # a long reduction
    _mm(1, 3, 13, 17, 5),  # a shared
    _mm(3, 1, 5, 19, 11),  # b shared
    _mm(2, 2, 7, 33, 3),
    _mm(1, 1, 13, 17, 0),  # K = 0: c = 0
    _mm(1, 1, 0, 5, 7),
    _mm(1, 1, 5, 0, 7),
    _mm(0, 1, 3, 4, 5),  # an empty batch
)


def _gm(m: int, n: int, k: int, bias: tuple[int, ...] | None, **attrs: float) -> Case:
    return Case({"M": m, "N": n, "K": k}, {"bias": bias} if bias else {}, attrs)


GEMM_CASES = (
    _gm(1, 1, 1, None),
    _gm(7, 13, 31, (1, 13), alpha=0.5, beta=2.0),
    _gm(67, 130, 33, (67, 1), alpha=-1.5, beta=0.25),
    _gm(6, 16, 8, (1, 1), alpha=2.0, beta=1.0),
    _gm(13, 17, 0, None, beta=1.0),  # K = 0: c = beta * bias
    _gm(37, 101, 257, (1, 101), beta=1.0),
    _gm(12, 32, 1000, None, alpha=0.125),
    _gm(0, 5, 7, (1, 5), beta=1.0),
    _gm(5, 0, 7, None, beta=1.0),
)


def _pm(dims: tuple[int, int, int, int], perm: tuple[int, int, int, int]) -> Case:
    return Case(
        dict(zip(("D0", "D1", "D2", "D3"), dims, strict=True)),
        attrs={f"p{k}": p for k, p in enumerate(perm)},
    )


PERMUTE_CASES = (
    _pm((1, 1, 1, 1), (0, 1, 2, 3)),
    _pm((1, 1, 7, 13), (0, 1, 3, 2)),  # a matrix transpose
    _pm((1, 1, 129, 257), (0, 1, 3, 2)),
    _pm((2, 3, 5, 7), (3, 2, 1, 0)),  # numpy.transpose's default
    _pm((2, 3, 5, 7), (0, 2, 3, 1)),  # NCHW -> NHWC
    _pm((3, 17, 16, 33), (2, 0, 3, 1)),
    _pm((5, 1, 31, 6), (1, 3, 0, 2)),
    _pm((11, 13, 1, 17), (0, 1, 2, 3)),  # a copy
    _pm((1, 1, 3, 2053), (0, 1, 2, 3)),  # rows longer than the cpu variant's TC
    _pm((1, 1, 2053, 5), (0, 1, 3, 2)),
    _pm((2, 3, 24, 40), (0, 1, 3, 2)),  # batched transposes of whole 8 x 8 blocks
    _pm((1, 64, 9, 16), (0, 2, 3, 1)),  # NCHW -> NHWC, 64 channels
    _pm((0, 3, 4, 5), (3, 2, 1, 0)),
    _pm((4, 3, 0, 5), (0, 1, 3, 2)),
)


def _cc(b: int, ra: int, rb: int, i: int) -> Case:
    return Case({"B": b, "RA": ra, "RB": rb, "I": i})


CONCAT_CASES = (
    _cc(1, 1, 1, 1),
    _cc(1, 7, 13, 1),  # the last axis of vectors
    _cc(3, 5, 2, 7),  # a middle axis
    _cc(1, 130, 67, 33),  # axis 0: two contiguous blocks
    _cc(2, 0, 5, 3),  # a is empty
    _cc(2, 5, 0, 3),
    _cc(0, 3, 4, 5),
    _cc(4, 3, 4, 0),
    _cc(5, 3000, 4100, 1),  # runs across the cpu variant's chunks
)

REFERENCES: dict[str, Reference] = {
    "matmul": Reference(lambda a, _: {"c": a["a"] @ a["b"]}, cases=MATMUL_CASES, reduce="K"),
    "gemm": Reference(_gemm, cases=GEMM_CASES, reduce="K"),
    "permute": Reference(_permute, cases=PERMUTE_CASES),
    "concat": Reference(
        lambda a, _: {"y": np.concatenate((a["a"], a["b"]), axis=1)},
        cases=CONCAT_CASES,
        exact=True,
    ),
}


def __getattr__(name: str) -> Reference:
    """`clforge.references.linalg:<op>`, the path a spec's `reference:` names."""
    try:
        return REFERENCES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no reference {name!r}") from None
