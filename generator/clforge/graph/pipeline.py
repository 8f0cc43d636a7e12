"""The lowering pipeline, stage by stage: capture (done by :class:`~clforge.graph.Graph`) →
shapes and guards → simplify → fuse → select → plan buffers → schedule → a model."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from clforge.call.dispatcher import dispatcher
from clforge.call.views import alignment
from clforge.graph.artifact import Model
from clforge.graph.buffers import plan_buffers
from clforge.graph.fuse import fuse
from clforge.graph.guards import guards_of
from clforge.graph.layouts import Folded, fold_layouts
from clforge.graph.plan import Plan
from clforge.graph.records import GraphIR
from clforge.graph.schedule import schedule
from clforge.graph.select import select_nodes
from clforge.graph.siblings import merge_sibling_gemms
from clforge.graph.simplify import simplify

STAGES = ("capture", "shapes and guards", "simplify", "fuse", "select", "plan buffers", "schedule")


def lower(ir: GraphIR, queue: Any = None, *, fusion: bool = True) -> Model:
    """Every stage after capture, in order (`fusion` False: every node runs alone)."""
    guards = guards_of(ir)
    simple = simplify(ir)
    d = dispatcher(queue)
    if fusion:
        merged, merges = merge_sibling_gemms(simple.ir, d.registry, alignment(d.runtime))
        folded = fold_layouts(merged, d.registry)
        folded = replace(folded, log=merges + folded.log)
    else:
        folded = Folded(simple.ir, ())
    before = sum(not n.view for n in simple.ir.nodes)
    fused = fuse(folded.ir, d.registry if fusion else None, folded, before)
    selections = select_nodes(folded.ir, d)
    buffers = plan_buffers(folded.ir, fused)
    steps = schedule(folded.ir, buffers, fused)
    captured = GraphIR(ir.name, ir.values, ir.nodes, ir.inputs, ir.outputs, ir.guards, {})
    plan = Plan(captured, guards, folded.ir, simple.log, fused, selections, buffers, steps)
    return Model(plan, queue)
