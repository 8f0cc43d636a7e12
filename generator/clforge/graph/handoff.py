"""Packed hand-offs: a producer stores its output straight into the panels that its one
reader's packing step would copy it into, and that step is not launched.

matmul's and gemm's packed routines (`cpu_packed`, `cpu_packed64`) begin with `pack_a`, which
copies `a` into panels of MR rows interleaved along k; their spec marks it (`panels: MR` on the
step, `clforge.spec.model.StepSpec`). Where `a` is a value the graph makes, whose producer
stores it through an epilogue point (a gemm with its fused chain, a layer_norm) and which
nothing else reads, the producer's kernel can store each element at its place in those panels
(`templates/fused/_chain.cl.j2`, `put`): the value's slot holds the panels, and the reader's
compute step reads them there. One launch and one pass over `a` fewer per hand-off.

Two stages decide it. The fuse stage lists the candidates (:func:`candidates`: which values,
from the ops and the readers alone); each specialization then makes the hand-offs its chosen
instances allow (:func:`plan_handoffs`: the reader's instance at those sizes packs `a`, the
producer's instance declares the epilogue point, with the reader's MR), and says which it made
and why not the others.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clforge.graph.records import GraphIR, Node
from clforge.registry.loader import Registry
from clforge.registry.records import Instance, Step
from clforge.runtime.launch import LaunchPlan


@dataclass(frozen=True)
class HandOff:
    """A value its producer may store in the packed panels of its one reader's input."""

    value: int
    producer: int  # the node whose epilogue point stores the value (a fused group's producer)
    consumer: int  # the node that reads it
    tensor: str  # the consumer's input that it is

    def line(self, ir: GraphIR) -> str:
        p, c = ir.node(self.producer), ir.node(self.consumer)
        return (
            f"hand-off: node {p.id} {p.op} may store {ir.value(self.value).name} in the panels "
            f"node {c.id} {c.op} packs its {self.tensor} into (where the instances chosen at a "
            "call's sizes pack it and declare the epilogue point)"
        )


def packing_step(inst: Instance, tensor: str) -> Step | None:
    """The step of `inst` that only packs `tensor` into panels (`panels:` in its spec)."""
    return next((s for s in inst.steps if s.panels and s.reads == (tensor,)), None)


def candidates(ir: GraphIR, registry: Registry, stored: Mapping[int, int]) -> tuple[HandOff, ...]:
    """The hand-offs the ops allow: `stored` maps each value that a kernel stores through its
    producer's epilogue point (a node alone, or a fused group's last value) to that producer."""
    readers = ir.readers()
    out = []
    for vid, pid in stored.items():
        users = readers.get(vid, [])
        if vid in ir.outputs or len(users) != 1:
            continue
        (c,) = users
        tensors = [t for t, v in c.inputs if v == vid]
        if c.view or len(tensors) != 1 or ir.value(vid).dtype != c.dtype:
            continue
        (t,) = tensors
        if dict(c.layouts).get(t, "row") != "row":
            continue
        if not any(packing_step(i, t) for i in registry.of_op(c.op)):
            continue
        producer = ir.node(pid)
        ((out_tensor, _),) = producer.outputs
        if not any(i.epilogue == out_tensor for i in registry.of_op(producer.op)):
            continue
        out.append(HandOff(vid, pid, c.id, t))
    return tuple(out)


@dataclass(frozen=True)
class Panels:
    """Where a handed-off value goes: panels of R rows of its [batch,] M x K matrix."""

    scratch: str  # the consumer's scratch buffer that the packing step wrote
    step: str  # the packing step's kernel
    R: int
    M: int
    K: int
    batch: int

    @property
    def elements(self) -> int:
        return self.batch * -(-self.M // self.R) * self.R * self.K

    def context(self) -> dict[str, int]:
        """The template data of `put` (templates/fused/_chain.cl.j2)."""
        return {"R": self.R, "M": self.M, "K": self.K, "MP": -(-self.M // self.R)}


def panels_of(
    h: HandOff, consumer: LaunchPlan, a_shape: Sequence[int]
) -> tuple[Panels | None, str]:
    """The panels the consumer's plan packs its input into, at the input's canonical shape
    `a_shape` ([batch,] M, K), or None and why not."""
    inst = consumer.inst
    step = packing_step(inst, h.tensor)
    if step is None or step.panels is None:
        return None, f"{inst.name} packs no {h.tensor}"
    if not any(x.kernel.function_name == step.kernel for x in consumer.launches):
        return None, f"{inst.name} launches no {step.name} at these sizes"
    *lead, m, k = a_shape
    if m == 0 or k == 0:
        return None, f"{h.tensor} is empty"
    rows = dict(consumer.params)[step.panels]
    return Panels(step.writes[0], step.kernel, rows, m, k, math.prod(lead)), ""


def without_packing(plan: LaunchPlan, panels: Panels) -> LaunchPlan:
    """The consumer's plan with its packing step left out and the panels' scratch removed
    (bound to the handed-off value's slot instead)."""
    return LaunchPlan(
        plan.inst,
        plan.params,
        tuple(x for x in plan.launches if x.kernel.function_name != panels.step),
        tuple(s for s in plan.scratch if s[0] != panels.scratch),
        plan.outputs,
    )


def producer_of(node: Node) -> str:
    """The tensor a producer's epilogue point stores (its one output)."""
    ((tensor, _),) = node.outputs
    return tensor


__all__ = ["HandOff", "Panels", "candidates", "packing_step", "panels_of", "without_packing"]
