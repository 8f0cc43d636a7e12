"""Fuse: groups of nodes that run as one kernel.

A node whose op has a variant with an epilogue point (`epilogue:` in its spec: matmul, gemm)
and whose output only an elementwise group of its shape and dtype reads, the group storing one
value, takes that group as its epilogue: the producer's own kernel applies the chain to each
element before it stores it (where the instance chosen at a call's sizes declares no epilogue
point, the two run as two kernels). Where a producer has none, the fuse stage notes why.

A chain of elementwise nodes (ops whose spec states an `expr:`, and the casts) whose outputs
have one shape becomes one group: one generated kernel (:mod:`clforge.graph.fused_kernel`)
that reads the group's inputs (each dense, one element, repeated along the leading axes, or
broadcast by strides), evaluates every node's expression in registers, and writes only the
values that something outside the group reads (another node, a view, a graph output). Every
other node is a group of its own and runs its op's instance.

Nodes join a group in capture order. A node joins the group of one of its inputs when its
output has that group's shape and joining makes no cycle (no value it reads from outside the
group depends on the group); another elementwise group of that shape that only this node reads
(a sibling chain, as the two arms of a `where`) joins with it. Groups are then ordered so that
each runs after the groups it reads from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from clforge.core.dtypes import DTYPES
from clforge.graph.dims import shape_str
from clforge.graph.fused_kernel import FusedKernel, describe, elementwise_kind
from clforge.graph.handoff import HandOff, candidates
from clforge.graph.records import GraphIR, Node
from clforge.registry.loader import Registry


@dataclass(frozen=True)
class Group:
    nodes: tuple[int, ...]
    reason: str
    # a fused group: its generated kernel's description (None: one node, its op's instance)
    kernel: FusedKernel | None = None

    @property
    def fused(self) -> bool:
        return self.kernel is not None


@dataclass(frozen=True)
class Fused:
    groups: tuple[Group, ...]
    notes: tuple[str, ...] = ()  # why nodes that could have been fused were not
    # the graph's rewrites before grouping: sibling gemms merged, permutes folded into layouts
    folds: tuple[str, ...] = ()
    before: int = 0  # nodes that launch kernels before fusion (0: those of the groups)
    # values a producer may store in the packed panels of their reader (graph/handoff.py)
    handoffs: tuple[HandOff, ...] = ()

    def lines(self, ir: GraphIR | None = None) -> list[str]:
        before = self.before or sum(len(g.nodes) for g in self.groups)
        out = [
            f"launch steps per call: {before} before fusion (one per node), "
            f"{len(self.groups)} after ({sum(g.fused for g in self.groups)} fused groups"
            + (f", {len(self.folds)} rewrites)" if self.folds else ")"),
            *(f"rewrite: {ln}" for ln in self.folds),
        ]
        for i, g in enumerate(self.groups):
            nodes = ", ".join(map(str, g.nodes))
            if g.kernel is None:
                out.append(f"group {i}: node {nodes} ({g.reason})")
                continue
            ops = " -> ".join(op.op for op in g.kernel.ops)
            out.append(f"group {i}: nodes {nodes} fused ({g.reason}): {ops}")
            if g.kernel.producer is not None:
                out.append(
                    f"  kernel {g.kernel.name}: {len(g.kernel.ops)} ops applied where the "
                    f"producer's instance stores its output (its epilogue point)"
                )
            else:
                out.append(f"  kernel {g.kernel.name}: {len(g.kernel.ops)} ops, one launch")
            if ir is not None:
                ins = ", ".join(ir.value(v).describe() for v in g.kernel.inputs)
                outs = ", ".join(ir.value(v).describe() for v, _ in g.kernel.outputs)
                out.append(f"  reads {ins or 'nothing'}; writes {outs}")
            out.extend(f"  {ln}" for ln in g.kernel.expression.splitlines())
        out.extend(h.line(ir) if ir is not None else str(h) for h in self.handoffs)
        out.extend(self.notes)
        return out


def fuse(
    ir: GraphIR,
    registry: Registry | None = None,
    rewrites: tuple[str, ...] = (),
    before: int = 0,
    skipped: tuple[str, ...] = (),
) -> Fused:
    """The stage, on `ir` after the rewrites logged in `rewrites` (graph/siblings.py,
    graph/layouts.py) of a graph that launched `before` nodes; `skipped` says which rewrites
    were not made and why. Without a registry (or with
    fusion off) every node that launches kernels is a group of its own (views launch none)."""
    nodes = [n for n in ir.nodes if not n.view]
    if registry is None:
        return Fused(tuple(Group((n.id,), "alone") for n in nodes))
    by_id = {n.id: n for n in ir.nodes}
    maker = {v: n.id for n in ir.nodes for v in n.output_ids()}
    users = {v: [n.id for n in ns] for v, ns in ir.readers().items()}
    kind = {n.id: elementwise_kind(registry, n) for n in nodes}

    group_of: dict[int, int] = {}  # node -> group index
    members: list[list[int]] = []

    def downstream(g: int) -> set[int]:
        """Nodes that depend on group g's nodes (not in g)."""
        seen: set[int] = set()
        todo = list(members[g])
        while todo:
            nid = todo.pop()
            for v in by_id[nid].output_ids():
                for u in users.get(v, ()):
                    if u not in seen and group_of.get(u) != g:
                        seen.add(u)
                        todo.append(u)
        return seen

    for n in nodes:
        joined = None
        if kind[n.id] is not None:
            shape = ir.value(n.output_ids()[0]).shape
            for v in n.input_ids():
                p = maker.get(v)
                if p is None or p not in group_of or kind[p] is None:
                    continue
                g = group_of[p]
                sink = by_id[members[g][-1]]
                if ir.value(sink.output_ids()[0]).shape != shape:
                    continue
                below = downstream(g)
                if any(maker.get(w) in below for w in n.input_ids()):
                    continue  # joining would make a cycle
                joined = g
                break
        if joined is None:
            group_of[n.id] = len(members)
            members.append([n.id])
            continue
        group_of[n.id] = joined
        members[joined].append(n.id)
        for v in n.input_ids():  # sibling chains that only this node reads join too
            p = maker.get(v)
            h = group_of.get(p) if p is not None else None
            if h is None or h == joined or kind[members[h][-1]] is None:
                continue
            if ir.value(by_id[members[h][-1]].output_ids()[0]).shape != shape:
                continue
            inside = set(members[joined]) | set(members[h])
            readers = {
                u for m in members[h] for w in by_id[m].output_ids() for u in users.get(w, ())
            }
            if any(w in ir.outputs for m in members[h] for w in by_id[m].output_ids()):
                continue
            if not readers <= inside:
                continue
            below = downstream(joined)
            if any(maker.get(w) in below for m in members[h] for w in by_id[m].input_ids()):
                continue
            for m in members[h]:
                group_of[m] = joined
            members[joined] = sorted(inside)
            members[h] = []

    notes = list(skipped)
    producer_of: dict[int, Node] = {}  # group -> the node whose epilogue it is
    for prod in nodes:
        if kind[prod.id] is not None or len(prod.outputs) != 1:
            continue
        (v,) = prod.output_ids()
        takers = users.get(v, [])
        if not takers or v in ir.outputs or any(u not in group_of for u in takers):
            continue  # read by a view, or nobody: nothing to fuse into
        homes = {group_of[u] for u in takers}
        g = homes.pop()
        ids = members[g]
        if homes or g in producer_of or any(kind[i] is None for i in ids):
            continue
        if ir.value(by_id[ids[-1]].output_ids()[0]).shape != ir.value(v).shape:
            continue
        label = f"node {prod.id} {prod.op} -> nodes {', '.join(map(str, ids))}"
        if not any(i.epilogue for i in registry.of_op(prod.op)):
            notes.append(f"not fused: {label}: no variant of {prod.op} declares an epilogue point")
            continue
        reads, writes = _boundary(ir, [by_id[i] for i in ids], users)
        seen = {by_id[i].dtype for i in ids} | {ir.value(w).dtype for w in (*reads, *writes)}
        if seen != {prod.dtype}:
            notes.append(
                f"not fused: {label}: the chain changes dtype (an epilogue keeps {prod.dtype})"
            )
            continue
        if len(writes) != 1 or writes[0] != by_id[ids[-1]].output_ids()[0]:
            notes.append(f"not fused: {label}: the chain stores more than its last value")
            continue
        producer_of[g] = prod
        members[group_of[prod.id]] = []
        group_of[prod.id] = g

    groups = []
    for k, ids in enumerate(members):
        if not ids:
            continue
        if k in producer_of:
            prod = producer_of[k]
            ops = [by_id[i] for i in ids]
            reads, writes = _boundary(ir, ops, users)
            (v,) = prod.output_ids()
            reads = (v, *(r for r in reads if r != v))
            kernel = describe(registry, ir, ops, reads, writes, prod)
            why = (
                f"epilogue of node {prod.id} {prod.op}, {shape_str(ir.value(v).shape)} {prod.dtype}"
            )
            groups.append(Group((prod.id, *ids), why, kernel))
            continue
        if len(ids) == 1:
            groups.append(Group((ids[0],), "alone"))
            continue
        ops = [by_id[i] for i in ids]
        reads, writes = _boundary(ir, ops, users)
        kernel = describe(registry, ir, ops, reads, writes)
        dtypes = sorted({DTYPES[ir.value(v).dtype].name for n in ops for v in n.output_ids()})
        why = f"elementwise chain, {shape_str(ir.value(ops[-1].output_ids()[0]).shape)}"
        groups.append(Group(tuple(ids), f"{why} {'/'.join(dtypes)}", kernel))
    stored: dict[int, int] = {}  # value -> the producer whose epilogue point stores it
    for group in groups:
        fk = group.kernel
        if fk is None and len(by_id[group.nodes[0]].outputs) == 1:
            stored[by_id[group.nodes[0]].output_ids()[0]] = group.nodes[0]
        elif fk is not None and fk.producer is not None:
            stored[fk.outputs[0][0]] = fk.producer
    handoffs = candidates(ir, registry, stored)
    return Fused(_ordered(ir, groups, maker), tuple(notes), rewrites, before, handoffs)


def _boundary(
    ir: GraphIR, ops: list[Node], users: Mapping[int, list[int]]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The values a group reads from outside it, and the values it makes that something
    outside it reads (another node, a graph output), each in first-use order."""
    inside = {n.id for n in ops}
    made = {v for n in ops for v in n.output_ids()}
    reads: list[int] = []
    for n in ops:
        for v in n.input_ids():
            if v not in made and v not in reads:
                reads.append(v)
    writes = [
        v
        for n in ops
        for v in n.output_ids()
        if v in ir.outputs or any(u not in inside for u in users.get(v, ()))
    ]
    return tuple(reads), tuple(writes)


def _ordered(ir: GraphIR, groups: list[Group], maker: Mapping[int, int]) -> tuple[Group, ...]:
    """The groups so that each comes after every group it reads from (views pass through to
    their source), earliest first node first among those ready."""
    by_id = {n.id: n for n in ir.nodes}
    home = {nid: k for k, g in enumerate(groups) for nid in g.nodes}

    def sources(nid: int) -> set[int]:
        out: set[int] = set()
        for v in by_id[nid].input_ids():
            p = maker.get(v)
            while p is not None and by_id[p].view:
                p = maker.get(by_id[p].input_ids()[0])
            if p is not None:
                out.add(home[p])
        return out

    needs = [set().union(*(sources(n) for n in g.nodes)) - {k} for k, g in enumerate(groups)]
    done: list[int] = []
    left = set(range(len(groups)))
    while left:
        ready = [k for k in left if needs[k] <= set(done)]
        k = min(ready, key=lambda j: groups[j].nodes[0])
        done.append(k)
        left.remove(k)
    return tuple(groups[k] for k in done)
