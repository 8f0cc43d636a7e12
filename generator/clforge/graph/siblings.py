"""Projections merged (part of the fuse stage), two forms of one rewrite:

- sibling gemms: gemms that read one value `a` with constant weights of one shape [K, N] (a
  transformer's q, k and v projections written as three);
- a split gemm: one gemm whose output only slices read, each a part of width N along its last
  axis, together the whole (a fused qkv projection [K, 3N] and its Split, as exporters write
  GPT-2's `c_attn`).

Either becomes one batched matmul of `a` by the weights stacked to [G, K, N], each part's
`beta * bias` stacked to [G, 1, N] and added in the matmul's epilogue; each part is then block
g of the result (a slice along the outermost axis and a reshape: views, read in place), so
that a heads permute of it folds into attention (graph/layouts.py). One kernel (and one pack of
`a`) instead of G, and no gathered column slices; each merge is logged for `explain`. Gemms
with `alpha != 1`, transposed operands or a bias of another shape than [N] stay as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from clforge.core.dtypes import dtype_of_numpy
from clforge.errors import GraphError
from clforge.graph.dims import Dim
from clforge.graph.records import GraphIR, Node, Value, ValueKind, fresh_name, value_id
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
        unique, _ = fresh_name(name, {v.name for v in self.values})
        v = Value(len(self.values), unique, dtype, shape, kind, node)
        self.values.append(v)
        return v

    def constant(self, name: str, array: np.ndarray) -> Value:
        """A constant made here (the stacked weights), read-only as capture makes them."""
        host = np.ascontiguousarray(array)
        host.setflags(write=False)
        dt = dtype_of_numpy(host.dtype)
        if dt is None:  # pragma: no cover - stacked from the graph's own constants
            raise GraphError(f"graph {self.ir.name!r}: a constant of NumPy dtype {host.dtype}")
        v = self.value(name, dt.name, tuple(Dim.const(s) for s in host.shape), None)
        self.constants[v.id] = host
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
                tuple((t.name, value_id(args.get(t.name))) for t in sig.inputs),
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


@dataclass(frozen=True)
class _Part:
    """One of the merged projections: its weight [K, N], its bias with beta applied (None: no
    bias term), and the value its block becomes."""

    weight: np.ndarray
    bias: np.ndarray | None
    out: int


def _term(g: _Gemm, bias: np.ndarray) -> np.ndarray:
    """beta * bias; beta 0 reads no bias (BLAS), so a NaN in it does not reach the result."""
    return g.beta * bias if g.beta else np.zeros_like(bias)


def _split_parts(ir: GraphIR, g: _Gemm, readers: list[Node]) -> list[_Part] | None:
    """The parts of gemm `g` whose output only `readers` read, when they are slices of equal
    width along its last axis that tile it (None otherwise)."""
    (out,) = g.node.output_ids()
    w = ir.constants[g.b]
    bias = None if g.bias is None else _term(g, ir.constants[g.bias])
    if out in ir.outputs or len(readers) < 2 or any(r.op != "slice" for r in readers):
        return None
    spans = []
    for r in readers:
        o = dict(r.options)
        lo, hi = o["start"], o["stop"]
        if o["axis"] != len(ir.value(out).shape) - 1 or not (lo.is_int and hi.is_int):
            return None
        spans.append((lo.value, hi.value, r.output_ids()[0]))
    spans.sort()
    width = spans[0][1] - spans[0][0]
    if [(lo, hi) for lo, hi, _ in spans] != [
        (k * width, (k + 1) * width) for k in range(len(spans))
    ]:
        return None
    if width * len(spans) != w.shape[1]:
        return None
    return [_Part(w[:, lo:hi], None if bias is None else bias[lo:hi], vid) for lo, hi, vid in spans]


def merge_sibling_gemms(
    ir: GraphIR, registry: Registry, align: int = 1
) -> tuple[GraphIR, tuple[str, ...], tuple[str, ...]]:
    """`ir` with every split gemm and every set of sibling gemms merged, a log line per merge,
    and a note per merge not made: one is made only where a part's rows are a multiple of
    `align` bytes (the device's sub-buffer alignment), so that every block is read in place at
    any size."""
    users = ir.readers()
    # first node -> `a`, the parts, what merged, the nodes the merge replaces
    plans: dict[int, tuple[int, list[_Part], str, set[int]]] = {}
    sets: dict[tuple[Any, ...], list[_Gemm]] = {}
    for n in ir.nodes:
        g = _mergeable(ir, n)
        if g is None:
            continue
        readers = users.get(n.output_ids()[0], [])
        parts = _split_parts(ir, g, readers)
        if parts is not None:
            what = f"node {n.id}'s {len(parts)} column slices"
            plans[n.id] = (g.a, parts, what, {n.id, *(r.id for r in readers)})
            continue
        key = (g.a, n.dtype, ir.constants[g.b].shape, g.bias is not None)
        sets.setdefault(key, []).append(g)
    for gs in sets.values():
        if len(gs) > 1:
            parts = [
                _Part(
                    ir.constants[g.b],
                    None if g.bias is None else _term(g, ir.constants[g.bias]),
                    g.node.output_ids()[0],
                )
                for g in gs
            ]
            what = "the sibling gemms " + ", ".join(f"node {g.node.id}" for g in gs)
            plans[gs[0].node.id] = (gs[0].a, parts, what, {g.node.id for g in gs})
    notes: list[str] = []
    for first, (_, parts, what, _) in list(plans.items()):
        row = parts[0].weight.shape[1] * parts[0].weight.dtype.itemsize
        if row % align:
            notes.append(
                f"not merged: {what}: a part's row of {row} bytes is not a multiple of the "
                f"device's {align}-byte sub-buffer alignment (its blocks would be copied)"
            )
            del plans[first]
    if not plans:
        return ir, (), tuple(notes)
    log: list[str] = []
    gone = {nid for *_, replaced in plans.values() for nid in replaced}
    b = _Builder(ir, registry)
    nodes: list[Node] = []
    for n in ir.nodes:
        if n.id in plans:
            a, parts, what, _ = plans[n.id]
            nodes.extend(_merge(ir, b, n, a, parts, what, log))
        elif n.id not in gone:
            nodes.append(n)
    out = replace(ir, values=tuple(b.values), nodes=tuple(nodes), constants=b.constants)
    return out, tuple(log), tuple(notes)


def _merge(
    ir: GraphIR, b: _Builder, first: Node, a_id: int, parts: list[_Part], what: str, log: list[str]
) -> list[Node]:
    """The nodes that make `parts` from one matmul of value `a_id` (a log line added)."""
    b.made = []
    a = ir.value(a_id)
    names = ir.value(first.output_ids()[0]).name  # the merged values, after the first
    w = b.constant(f"{names}_weights", np.stack([p.weight for p in parts]))
    c = b.op("matmul", {"a": a, "b": w}, f"{names}_merged")
    biases = [p.bias for p in parts if p.bias is not None]
    if biases:
        stacked = np.stack(biases).astype(biases[0].dtype)
        bias = b.constant(f"{names}_biases", stacked[:, None, :])
        c = b.op("add", {"a": c, "b": bias}, f"{names}_merged_biased")
    for g, p in enumerate(parts):
        b.reshape_into(b.slice0(c, g), p.out)
    shape = parts[0].weight.shape
    log.append(
        f"merged {what} (gemm of {a.name} by {len(parts)} weights {shape}): one matmul by "
        f"the stacked weights, its outputs blocks of {c.name}"
    )
    return b.made
