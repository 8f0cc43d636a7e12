"""The plan: what every stage made, as frozen records; what a model runs and saves."""

from __future__ import annotations

from dataclasses import dataclass

from clforge.graph.buffers import BufferPlan
from clforge.graph.fuse import Fused
from clforge.graph.guards import GuardSet
from clforge.graph.records import GraphIR
from clforge.graph.schedule import Schedule
from clforge.graph.select import NodeSelection


@dataclass(frozen=True, eq=False)
class Plan:
    captured: GraphIR  # as captured (explain shows it; saved without its constants)
    guards: GuardSet
    ir: GraphIR  # simplified: what runs
    simplified: tuple[str, ...]  # the simplify stage's log
    fused: Fused
    selections: tuple[NodeSelection, ...]
    buffers: BufferPlan
    schedule: Schedule

    def selection(self, node: int) -> NodeSelection:
        for s in self.selections:
            if s.node == node:
                return s
        raise KeyError(node)
