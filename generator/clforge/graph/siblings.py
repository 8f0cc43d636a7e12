"""Sibling gemms merged (part of the fuse stage): gemms that read one value `a` with constant
weights of one shape [K, N] (a transformer's q, k and v projections) become one batched matmul
of `a` by the stacked weights [G, K, N], its bias (each gemm's `beta * bias`, stacked to
[G, 1, N]) added in its epilogue, and each gemm's output is the matmul's block g: a slice along
the outermost axis, read in place. One kernel (and one pack of `a`) instead of G; the merge is
logged for `explain`. Gemms with `alpha != 1`, transposed operands or a bias of another shape
than [N] stay as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from clforge.core.dtypes import DTYPES
from clforge.graph.dims import Dim
from clforge.graph.records import GraphIR, Node, Value, ValueKind
from clforge.graph.shapes import infer
from clforge.registry.loader import Registry


@dataclass(frozen=True)
class _Gemm:
    """A gemm that may merge: its node, operand `a`, constant weight and bias (value ids)."""

    node: Node
    a: int
    b: int
    bias: int | None
    beta: float


def _mergeable(ir: GraphIR, n: Node) -> _Gemm | None:
    """`n` as a gemm that may merge, or None."""
    if n.op != "gemm":
        return None
    ins, opts, attrs = dict(n.inputs), dict(n.options), dict(n.attrs)
    a, b, bias = ins.get("a"), ins.get("b"), ins.get("bias")
    if a is None or b is None or b not in ir.constants or ir.constants[b].ndim != 2:
        return None
    if opts.get("trans_a") or opts.get("trans_b") or attrs.get("alpha", 1.0) != 1.0:
        return None
    if bias is not None and (
        bias not in ir.constants or ir.constants[bias].shape != (ir.constants[b].shape[1],)
    ):
        return None
    return _Gemm(n, a, b, bias, float(attrs.get("beta", 0.0)))


class _Builder:
    """New values and nodes of the rewritten graph, made as capture makes them."""

    def __init__(self, ir: GraphIR, registry: Registry) -> None:
        self.ir, self.registry = ir, registry
        self.values = list(ir.values)
        self.constants: dict[int, np.ndarray] = dict(ir.constants)
        self.next_id = max((n.id for n in ir.nodes), default=-1) + 1
        self.made: list[Node] = []

    def value(self, name: str, dtype: str, shape: tuple[Dim, ...], node: int | None) -> Value:
        kind: ValueKind = "constant" if node is None else "node"
        taken = {v.name for v in self.values}
        unique, k = name, 0
        while unique in taken:
            k += 1
            unique = f"{name}_{k}"
        v = Value(len(self.values), unique, dtype, shape, kind, node)
        self.values.append(v)
        return v

    def constant(self, name: str, array: np.ndarray) -> Value:
        dtype = next(d.name for d in DTYPES.values() if d.np_dtype == array.dtype)
        v = self.value(name, dtype, tuple(Dim.const(s) for s in array.shape), None)
        self.constants[v.id] = array
        return v

    def op(self, op: str, args: Mapping[str, Value | None], name: str) -> Value:
        sig = self.registry.op(op)
        inf = infer(self.ir.name, sig, args, {}, {})
        nid, self.next_id = self.next_id, self.next_id + 1
        ((tensor, dtype, shape),) = inf.outputs
        out = self.value(name, dtype, shape, nid)
        self.made.append(
            Node(
                nid,
                op,
                inf.dtype,
                tuple((t.name, _id(args.get(t.name))) for t in sig.inputs),
                ((tensor, out.id),),
                (),
                inf.attrs,
                inf.canonical,
                inf.dims,
            )
        )
        return out

    def reshape_into(self, src: Value, out: int) -> None:
        """A reshape (a view) of `src` that makes the existing value `out`, its shape kept."""
        nid, self.next_id = self.next_id, self.next_id + 1
        self.values[out] = replace(self.values[out], node=nid)
        shape = (("shape", self.values[out].shape),)
        self.made.append(Node(nid, "reshape", src.dtype, (("x", src.id),), (("y", out),), shape))

    def slice0(self, src: Value, g: int) -> Value:
        """Block g of `src` along axis 0 (a view), shape [1, ...]."""
        nid, self.next_id = self.next_id, self.next_id + 1
        shape = (Dim.const(1), *src.shape[1:])
        out = self.value(f"{src.name}_{g}", src.dtype, shape, nid)
        options = (("axis", 0), ("start", Dim.const(g)), ("stop", Dim.const(g + 1)))
        self.made.append(Node(nid, "slice", src.dtype, (("x", src.id),), (("y", out.id),), options))
        return out


def _id(v: Value | None) -> int | None:
    return None if v is None else v.id


def merge_sibling_gemms(ir: GraphIR, registry: Registry) -> tuple[GraphIR, tuple[str, ...]]:
    """`ir` with every set of mergeable sibling gemms merged, and one log line per merge."""
    sets: dict[tuple[Any, ...], list[_Gemm]] = {}
    for n in ir.nodes:
        m = _mergeable(ir, n)
        if m is not None:
            key = (m.a, n.dtype, ir.constants[m.b].shape, m.bias is not None)
            sets.setdefault(key, []).append(m)
    first = {ms[0].node.id: ms for ms in sets.values() if len(ms) > 1}
    if not first:
        return ir, ()
    merged = {m.node.id for ms in first.values() for m in ms}
    b = _Builder(ir, registry)
    nodes: list[Node] = []
    log: list[str] = []
    for n in ir.nodes:
        if n.id not in merged:
            nodes.append(n)
        elif n.id in first:
            nodes.extend(_merge(ir, b, first[n.id], log))
    out = replace(ir, values=tuple(b.values), nodes=tuple(nodes), constants=b.constants)
    return out, tuple(log)


def _merge(ir: GraphIR, b: _Builder, ms: list[_Gemm], log: list[str]) -> list[Node]:
    """The nodes that replace the sibling gemms `ms` (a log line added)."""
    b.made = []
    a = ir.value(ms[0].a)
    names = ir.value(ms[0].node.output_ids()[0]).name  # the merged values, after the first
    w = b.constant(f"{names}_weights", np.stack([ir.constants[m.b] for m in ms]))
    c = b.op("matmul", {"a": a, "b": w}, f"{names}_merged")
    if ms[0].bias is not None:
        # beta 0 reads no bias (BLAS), so a NaN in it does not reach the result
        biases = [ir.constants[m.bias] for m in ms if m.bias is not None]
        terms = [
            m.beta * t if m.beta else np.zeros_like(t) for m, t in zip(ms, biases, strict=True)
        ]
        stacked = np.stack(terms).astype(biases[0].dtype)
        bias = b.constant(f"{names}_biases", stacked[:, None, :])
        c = b.op("add", {"a": c, "b": bias}, f"{names}_merged_biased")
    for g, m in enumerate(ms):
        (out,) = m.node.output_ids()
        b.reshape_into(b.slice0(c, g), out)
    gemms = ", ".join(f"node {m.node.id}" for m in ms)
    shape = ir.constants[ms[0].b].shape
    log.append(
        f"merged {gemms} (gemm of {a.name} by {len(ms)} weights {shape}): one matmul by the "
        f"stacked weights, its outputs blocks of {c.name}"
    )
    return b.made
