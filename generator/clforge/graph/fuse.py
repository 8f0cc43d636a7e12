"""Fuse: groups of nodes to run as one kernel. Nothing is fused yet: every group holds one
node and runs the op's own instance (elementwise chains and epilogues generated from the specs
are the fusion issue's to add, here)."""

from __future__ import annotations

from dataclasses import dataclass

from clforge.graph.records import GraphIR


@dataclass(frozen=True)
class Group:
    nodes: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class Fused:
    groups: tuple[Group, ...]

    def lines(self) -> list[str]:
        return [
            "no fusion yet: one group per node (generated fused kernels are not implemented)",
            *(
                f"group {i}: node {', '.join(map(str, g.nodes))} ({g.reason})"
                for i, g in enumerate(self.groups)
            ),
        ]


def fuse(ir: GraphIR) -> Fused:
    """The stage: one group per node that launches kernels (views launch none)."""
    return Fused(tuple(Group((n.id,), "alone") for n in ir.nodes if not n.view))
