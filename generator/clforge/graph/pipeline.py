"""The lowering pipeline, stage by stage: capture (done by :class:`~clforge.graph.Graph`) →
shapes and guards → simplify → fuse → select → plan buffers → schedule → a model."""

from __future__ import annotations

from typing import Any

from clforge.call.dispatcher import dispatcher
from clforge.call.views import alignment
from clforge.graph.artifact import Model
from clforge.graph.buffers import plan_buffers
from clforge.graph.fuse import fuse
from clforge.graph.guards import guards_of
from clforge.graph.layouts import fold_layouts
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
    runs = simple.ir  # what runs: the simplified graph, rewritten to fuse
    rewrites: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    if fusion:
        merged, merges, notes = merge_sibling_gemms(simple.ir, d.registry, alignment(d.runtime))
        runs, folds = fold_layouts(merged, d.registry)
        rewrites = merges + folds
    before = sum(not n.view for n in simple.ir.nodes)
    fused = fuse(runs, d.registry if fusion else None, rewrites, before, notes)
    selections = select_nodes(runs, d)
    buffers = plan_buffers(runs, fused)
    steps = schedule(runs, buffers, fused)
    captured = GraphIR(ir.name, ir.values, ir.nodes, ir.inputs, ir.outputs, ir.guards, {})
    plan = Plan(captured, guards, runs, simple.log, fused, selections, buffers, steps)
    return Model(plan, queue)
