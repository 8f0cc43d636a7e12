"""Shape subgraphs of an ONNX model folded at import into symbolic dims.

Exporters write a reshape whose target depends on the input's sizes as a small graph of integer
tensors: ``Shape`` → ``Gather`` → ``Unsqueeze`` → ``Concat`` → ``Reshape`` (PyTorch's
``x.view(B, S, H, hd)`` with symbolic batch and sequence dims), with ``Slice``, ``Squeeze``,
``Mul``, ``Div``, ``Add``, ``Sub``, ``Cast``, ``Constant`` and ``ConstantOfShape`` on the way.
The importer evaluates such a graph at import: the ``Shape`` of a value whose dims are known
(symbolic or not) is a :class:`SymShape`, a tuple of :class:`~clforge.graph.dims.Dim`, and each of
those operators on it gives another. Nothing of it reaches the compiled graph: a ``Reshape``
reads the dims. A chain that cannot be evaluated so (a shape computed from data, a division
that is not exact) fails naming its node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from clforge.errors import GraphError
from clforge.graph.dims import Dim


@dataclass(frozen=True)
class SymShape:
    """An integer tensor of rank 0 or 1 known at import as dims: a value's shape, or part of it,
    or arithmetic on it (`scalar`: rank 0, one dim)."""

    dims: tuple[Dim, ...]
    scalar: bool = False

    @staticmethod
    def of(arr: np.ndarray) -> SymShape:
        """An integer array of rank 0 or 1 as a SymShape."""
        if arr.ndim > 1 or not np.issubdtype(arr.dtype, np.integer):
            raise GraphError(f"a {arr.dtype} array of shape {arr.shape} is no shape (rank 0 or 1)")
        return SymShape(tuple(Dim.const(int(n)) for n in arr.reshape(-1)), arr.ndim == 0)

    @property
    def is_int(self) -> bool:
        return all(d.is_int for d in self.dims)

    def array(self) -> np.ndarray:
        """The int64 array of an all-int SymShape."""
        out = np.array([d.value for d in self.dims], np.int64)
        return out.reshape(()) if self.scalar else out

    def __str__(self) -> str:
        shown = ", ".join(str(d) for d in self.dims)
        return shown if self.scalar else f"[{shown}]"


def gather(data: SymShape, indices: np.ndarray) -> SymShape:
    """ONNX's Gather along axis 0 of a 1-d SymShape by known indices (negative from the end)."""
    if data.scalar:
        raise GraphError("Gather of a 0-d shape")
    n = len(data.dims)
    picked = []
    for i in indices.reshape(-1):
        k = int(i)
        if not -n <= k < n:
            raise GraphError(f"index {k} is out of range for a shape of {n} dims ({data})")
        picked.append(data.dims[k % n])
    return SymShape(tuple(picked), indices.ndim == 0)


def slice_(data: SymShape, start: int, end: int, step: int) -> SymShape:
    """ONNX's Slice of a 1-d SymShape (Python's slice clamping, as ONNX's)."""
    if data.scalar:
        raise GraphError("Slice of a 0-d shape")
    if step == 0:
        raise GraphError("Slice with step 0")
    return SymShape(data.dims[slice(start, end, step)])


def concat(parts: Sequence[SymShape]) -> SymShape:
    if any(p.scalar for p in parts):
        raise GraphError("Concat of a 0-d shape (ONNX concatenates tensors of rank 1 here)")
    return SymShape(tuple(d for p in parts for d in p.dims))


def unsqueeze(data: SymShape, axes: Sequence[int]) -> SymShape:
    if not data.scalar or tuple(axes) not in ((0,), (-1,)):
        raise GraphError(f"Unsqueeze of a shape {data} at axes {tuple(axes)} (rank 0 at 0 only)")
    return SymShape(data.dims)


def squeeze(data: SymShape) -> SymShape:
    if data.scalar or len(data.dims) != 1:
        raise GraphError(f"Squeeze of the shape {data} (one dim of rank 1 only)")
    return SymShape(data.dims, scalar=True)


def arith(op: str, a: SymShape, b: SymShape) -> SymShape:
    """`Add`, `Sub`, `Mul` or `Div` (integer division, exact where symbolic) of two shapes,
    broadcast as ONNX's (a 0-d or 1-element operand against the other)."""
    if len(a.dims) != len(b.dims) and 1 not in (len(a.dims), len(b.dims)):
        raise GraphError(f"{op} of the shapes {a} and {b} does not broadcast")
    n = max(len(a.dims), len(b.dims))
    xs = a.dims * n if len(a.dims) == 1 else a.dims
    ys = b.dims * n if len(b.dims) == 1 else b.dims
    out = tuple(_arith(op, x, y) for x, y in zip(xs, ys, strict=True))
    return SymShape(out, a.scalar and b.scalar)


def _arith(op: str, x: Dim, y: Dim) -> Dim:
    if op == "Add":
        return x + y
    if op == "Sub":
        return x + y * -1
    if op == "Mul":
        return x * y
    if x.is_int and y.is_int:
        if y.value == 0:
            raise GraphError(f"Div of {x} by 0")
        q = abs(x.value) // abs(y.value)  # ONNX's integer Div truncates toward 0
        return Dim.const(q if (x.value < 0) == (y.value < 0) else -q)
    quotient = exact_div(x, y)
    if quotient is None:
        raise GraphError(f"Div of {x} by {y} is not a whole dim for every size")
    return quotient


def exact_div(x: Dim, y: Dim) -> Dim | None:
    """`x / y` where `y` is one term dividing every term of `x` (``2*H*hd / H`` is ``2*hd``);
    else None."""
    if len(y.terms) != 1 or not y.terms[0][1]:
        return None
    (ym, yc), out = y.terms[0], Dim.const(0)
    for m, c in x.terms:
        rest = list(m)
        for name in ym:
            if name not in rest:
                return None
            rest.remove(name)
        if c % yc:
            return None
        term = Dim.const(c // yc)
        for name in rest:
            term = term * Dim.name(name)
        out = out + term
    return out


__all__ = ["SymShape", "arith", "concat", "exact_div", "gather", "slice_", "squeeze", "unsqueeze"]
