"""Schedule: the launches in order, each with where its buffers come from.

The order is the fuse stage's (each group after the groups it reads from), one step per group:
a node's own instance, or a fused group's generated kernel (its inputs in0.., its stored
values out0..). Each step names, per tensor of the op, the place of its memory (an input, a
constant, a slot, an output; an omitted optional input is filled per specialization). The
kernels' launch plans (instance, parameters, NDRange, arguments) are prepared per
specialization (:mod:`clforge.graph.artifact`), so that a call only binds buffers and enqueues.
"""

from __future__ import annotations

from dataclasses import dataclass

from clforge.graph.buffers import BufferPlan, Place
from clforge.graph.fuse import Fused
from clforge.graph.records import GraphIR


@dataclass(frozen=True)
class Step:
    node: int
    op: str
    inputs: tuple[tuple[str, int | None, Place | None], ...]  # (tensor, value, place)
    outputs: tuple[tuple[str, int, Place], ...]
    group: int | None = None  # a fused group's index in the fuse stage's groups (None: a node)

    def line(self, ir: GraphIR) -> str:
        ins = ", ".join(
            f"{t}={'fill' if v is None else ir.value(v).name}@{p if p else 'fill'}"
            for t, v, p in self.inputs
        )
        outs = ", ".join(f"{t}={ir.value(v).name}@{p}" for t, v, p in self.outputs)
        if self.group is not None:
            return f"group {self.group} {self.op}({ins}) -> {outs}"
        return f"node {self.node} {self.op}({ins}) -> {outs}"


@dataclass(frozen=True)
class Schedule:
    steps: tuple[Step, ...]

    def lines(self, ir: GraphIR) -> list[str]:
        return [f"step {i}: {s.line(ir)}" for i, s in enumerate(self.steps)]


def schedule(ir: GraphIR, buffers: BufferPlan, fused: Fused) -> Schedule:
    """The stage."""
    by_id = {n.id: n for n in ir.nodes}
    steps = []
    for k, g in enumerate(fused.groups):
        if g.kernel is not None and g.kernel.producer is not None:
            fk = g.kernel
            p = by_id[g.kernel.producer]
            ((c, _),) = p.outputs
            ((final, _),) = fk.outputs
            steps.append(
                Step(
                    p.id,
                    f"{p.op}+{fk.name}",
                    (
                        *((t, v, None if v is None else buffers.place(v)) for t, v in p.inputs),
                        *((f"in{i}", v, buffers.place(v)) for i, v in enumerate(fk.inputs) if i),
                    ),
                    ((c, final, buffers.place(final)),),
                    k,
                )
            )
            continue
        if g.kernel is not None:
            fk = g.kernel
            steps.append(
                Step(
                    g.nodes[-1],
                    fk.name,
                    tuple((f"in{i}", v, buffers.place(v)) for i, v in enumerate(fk.inputs)),
                    tuple((f"out{i}", v, buffers.place(v)) for i, (v, _) in enumerate(fk.outputs)),
                    k,
                )
            )
            continue
        (nid,) = g.nodes
        n = by_id[nid]
        steps.append(
            Step(
                n.id,
                n.op,
                tuple((t, v, None if v is None else buffers.place(v)) for t, v in n.inputs),
                tuple((t, v, buffers.place(v)) for t, v in n.outputs),
            )
        )
    return Schedule(tuple(steps))
