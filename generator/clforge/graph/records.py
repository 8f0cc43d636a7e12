"""The graph's IR: frozen records of values, nodes and guards that every stage reads and makes.

A stage never edits a record; it makes a new :class:`GraphIR` (simplify) or a record of its own
(fuse, select, plan buffers, schedule). Shapes are tuples of :class:`~clforge.graph.dims.Dim`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from clforge.errors import GraphError
from clforge.graph.dims import Dim, shape_str

ValueKind = Literal["input", "constant", "node"]
# a view node makes no kernel: its output is its input's memory seen with another shape (a
# slice: part of it, at an offset; graph/strides.py gives a view's offset and strides)
VIEW_OPS = ("reshape", "rebind", "slice")


@dataclass(frozen=True)
class Value:
    """A tensor of the graph: a graph input, a constant, or an output of a node."""

    id: int
    name: str
    dtype: str
    shape: tuple[Dim, ...]
    kind: ValueKind
    node: int | None = None  # the node that makes it (kind "node")

    def describe(self) -> str:
        return f"{self.name} {self.dtype}{shape_str(self.shape)}"


def value_id(v: Value | None) -> int | None:
    """`v`'s id (None for an omitted optional input)."""
    return None if v is None else v.id


def fresh_name(base: str, taken: set[str] | frozenset[str], n: int = 0) -> tuple[str, int]:
    """A value name not in `taken`: `base` itself where free (n 0), else the first `base_<n>`
    from `n` on; and the n to start from next time for this base."""
    while True:
        name = base if n == 0 and base not in taken else f"{base}_{n}"
        n += 1
        if name not in taken:
            return name, n


@dataclass(frozen=True)
class Node:
    """One op call, in the op's terms: its inputs and outputs by the spec's tensor names, the
    calling convention's options, the attributes, and the canonical shapes that the convention
    gives (the shapes the kernel sees)."""

    id: int
    op: str
    dtype: str
    inputs: tuple[tuple[str, int | None], ...]  # (tensor, value id; None: an omitted optional)
    outputs: tuple[tuple[str, int], ...]  # (tensor, value id)
    options: tuple[tuple[str, Any], ...] = ()  # the calling convention's options
    attrs: tuple[tuple[str, float | int], ...] = ()  # the op's attributes (convention's included)
    canonical: tuple[tuple[str, tuple[Dim, ...]], ...] = ()  # tensor -> the kernel's shape
    dims: tuple[tuple[str, Dim], ...] = ()  # the op's dims (derived ones included)
    # tensors whose buffer holds them in another layout than row-major (a permute folded into
    # the kernel, graph/layouts.py): the buffer's own shape is that layout's memory order
    layouts: tuple[tuple[str, str], ...] = ()

    @property
    def view(self) -> bool:
        return self.op in VIEW_OPS

    def input_ids(self) -> tuple[int, ...]:
        return tuple(v for _, v in self.inputs if v is not None)

    def output_ids(self) -> tuple[int, ...]:
        return tuple(v for _, v in self.outputs)


GuardKind = Literal["equal", "range"]


@dataclass(frozen=True)
class Guard:
    """A condition on the dims a call binds: `lhs == rhs`, or `lo <= lhs <= hi`; `origin` says
    which tensors or which call made it."""

    kind: GuardKind
    lhs: Dim
    origin: str
    rhs: Dim | None = None
    lo: int | None = None
    hi: int | None = None

    def __str__(self) -> str:
        if self.kind == "equal":
            return f"{self.lhs} == {self.rhs}  ({self.origin})"
        lo = "" if self.lo is None else f"{self.lo} <= "
        hi = "" if self.hi is None else f" <= {self.hi}"
        return f"{lo}{self.lhs}{hi}  ({self.origin})"

    def holds(self, env: Mapping[str, int]) -> bool:
        v = self.lhs.evaluate(env)
        if self.kind == "equal":
            if self.rhs is None:  # pragma: no cover - made by the graph only
                raise GraphError(f"guard {self.lhs}: an equality without a right side")
            return v == self.rhs.evaluate(env)
        return (self.lo is None or v >= self.lo) and (self.hi is None or v <= self.hi)


@dataclass(frozen=True, eq=False)
class GraphIR:
    """A captured graph: values (a value's id is its index), nodes in capture order (a node's
    inputs come before it), inputs and outputs by value id, the guards capture recorded
    (views, ranges), and the constants' data by value id."""

    name: str
    values: tuple[Value, ...]
    nodes: tuple[Node, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    guards: tuple[Guard, ...] = ()
    constants: Mapping[int, np.ndarray] = field(default_factory=dict)

    def value(self, vid: int) -> Value:
        return self.values[vid]

    def readers(self) -> dict[int, list[Node]]:
        """value id -> the nodes that read it, in order."""
        out: dict[int, list[Node]] = {}
        for n in self.nodes:
            for v in n.input_ids():
                out.setdefault(v, []).append(n)
        return out

    def node(self, nid: int) -> Node:
        for n in self.nodes:
            if n.id == nid:
                return n
        raise GraphError(f"graph {self.name!r}: no node {nid}")
