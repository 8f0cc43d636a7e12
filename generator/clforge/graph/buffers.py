"""Plan buffers: where every value lives, and which intermediates share a device buffer.

Graph inputs stay in the caller's arrays, constants in their device copies, outputs in fresh
arrays per call. Each other value (an intermediate) takes a slot: a device buffer kept by the
specialization between calls. A slot is free again after the last node that reads its value
(liveness over the schedule's order), and the next value to be made takes the first free slot
(its size is the largest value it holds, at each specialization's sizes). A view (reshape,
rebind) lives where its source lives. Nothing is computed in place yet: a node's output never
shares a buffer with an input of the same node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from clforge.core.dtypes import DTYPES
from clforge.graph.dims import Dim, shape_str
from clforge.graph.fuse import Fused
from clforge.graph.records import GraphIR

PlaceKind = Literal["input", "constant", "slot", "output"]


@dataclass(frozen=True)
class Place:
    """Where a value's memory is: an input (by value id), a constant, slot k, output k."""

    kind: PlaceKind
    index: int

    def __str__(self) -> str:
        return f"{self.kind} {self.index}"


@dataclass(frozen=True)
class Slot:
    index: int
    values: tuple[int, ...]  # in the order they take it
    sizes: tuple[Dim, ...]  # each value's size in bytes

    def nbytes(self, env: dict[str, int]) -> int:
        return max((s.evaluate(env) for s in self.sizes), default=0)


@dataclass(frozen=True)
class BufferPlan:
    places: tuple[tuple[int, Place], ...]  # value id -> place (views: their source's place)
    slots: tuple[Slot, ...]
    lifetimes: tuple[tuple[int, int, int], ...]  # (value id, made at step, last read at step)

    def place(self, vid: int) -> Place:
        return dict(self.places)[vid]

    def lines(self, ir: GraphIR) -> list[str]:
        out = []
        for vid, p in self.places:
            v = ir.value(vid)
            out.append(f"{v.name} {v.dtype}{shape_str(v.shape)}: {p}")
        for s in self.slots:
            names = ", ".join(ir.value(v).name for v in s.values)
            sizes = ", ".join(str(x) for x in s.sizes)
            shared = f" (reused by {len(s.values)} values)" if len(s.values) > 1 else ""
            out.append(f"slot {s.index}: {names}; bytes max({sizes}){shared}")
        for vid, made, last in self.lifetimes:
            out.append(f"{ir.value(vid).name}: made at step {made}, last read at step {last}")
        if not self.slots:
            out.append("no intermediate buffers")
        return out


def _nbytes(ir: GraphIR, vid: int) -> Dim:
    v = ir.value(vid)
    return math.prod(v.shape, start=Dim.const(DTYPES[v.dtype].size))


def _steps(ir: GraphIR, fused: Fused | None) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """What each step reads and writes: a node's inputs and outputs, or a fused group's inputs
    and the values it stores (its other values never leave the kernel: no buffer)."""
    by_id = {n.id: n for n in ir.nodes}
    if fused is None:
        return [(n.input_ids(), n.output_ids()) for n in ir.nodes if not n.view]
    out = []
    for g in fused.groups:
        if g.kernel is None:
            (nid,) = g.nodes
            out.append((by_id[nid].input_ids(), by_id[nid].output_ids()))
        elif g.kernel.producer is not None:  # the producer's inputs, the chain's others
            reads = by_id[g.kernel.producer].input_ids() + g.kernel.inputs[1:]
            out.append((reads, tuple(v for v, _ in g.kernel.outputs)))
        else:
            out.append((g.kernel.inputs, tuple(v for v, _ in g.kernel.outputs)))
    return out


def plan_buffers(ir: GraphIR, fused: Fused | None = None) -> BufferPlan:
    """The stage (`fused`: the fuse stage's groups, each a step; default one per node)."""
    root: dict[int, int] = {}  # value -> the value whose memory it is
    for vid in ir.inputs:
        root[vid] = vid
    for vid in ir.constants:
        root[vid] = vid
    steps = _steps(ir, fused)
    for n in ir.nodes:
        for vid in n.output_ids():
            root[vid] = root[n.input_ids()[0]] if n.view else vid
    step_of = {vid: i for i, (_, writes) in enumerate(steps) for vid in writes}
    last: dict[int, int] = {}
    for i, (reads, _) in enumerate(steps):
        for vid in reads:
            r = root[vid]
            last[r] = max(last.get(r, -1), i)
    outputs: dict[int, int] = {}
    for vid in ir.outputs:
        r = root[vid]
        if r in step_of and r not in outputs:
            outputs[r] = len(outputs)
    places: dict[int, Place] = {}
    for vid in ir.inputs:
        places[vid] = Place("input", vid)
    for vid in ir.constants:
        places[vid] = Place("constant", vid)
    slot_values: list[list[int]] = []
    free: list[int] = []
    busy: dict[int, int] = {}  # slot -> value root
    lifetimes = []
    for i, (_, writes) in enumerate(steps):
        for s, r in list(busy.items()):
            if last.get(r, step_of[r]) < i:
                del busy[s]
                free.append(s)
        free.sort()
        for vid in writes:
            if vid in outputs:
                places[vid] = Place("output", outputs[vid])
                continue
            if free:
                s = free.pop(0)
            else:
                s = len(slot_values)
                slot_values.append([])
            slot_values[s].append(vid)
            busy[s] = vid
            places[vid] = Place("slot", s)
            lifetimes.append((vid, i, last.get(vid, i)))
    for n in ir.nodes:  # views: where their source is
        if n.view:
            for vid in n.output_ids():
                places[vid] = places[root[vid]]
    slots = tuple(
        Slot(k, tuple(vs), tuple(_nbytes(ir, v) for v in vs)) for k, vs in enumerate(slot_values)
    )
    return BufferPlan(tuple(sorted(places.items())), slots, tuple(lifetimes))
