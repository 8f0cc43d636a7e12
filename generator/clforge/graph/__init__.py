"""Graphs of ops: capture with symbolic dims, lowering in named stages, a compiled model with
runtime guards that saves and loads as data.

One module per stage, in the order the pipeline runs them (:mod:`clforge.graph.pipeline`):
``capture`` (with ``shapes`` and ``dims``) → ``guards`` → ``simplify`` → ``fuse`` → ``select`` →
``buffers`` → ``schedule`` → ``artifact`` (the model; ``serial`` saves and loads it,
``explain`` prints every stage). See docs/graph.md.
"""

from __future__ import annotations

from typing import Any

from clforge.errors import GraphError
from clforge.graph.artifact import Model
from clforge.graph.capture import Graph, GraphValue, supported_ops
from clforge.graph.dims import Dim
from clforge.graph.fused_kernel import check_current
from clforge.graph.onnx_import import from_onnx
from clforge.graph.serial import load_plan


def load(path: Any, queue: Any = None) -> Model:
    """A model saved by ``Model.save``, ready to run (no capture, no planning). The instances
    its plan names must be in this clforge's registry (else a GraphError says to compile the
    graph again)."""
    model = Model(load_plan(path), queue)
    reg = model.dispatcher.registry
    missing = [s.instance for s in model.plan.selections if s.instance not in reg.instances]
    if missing:
        raise GraphError(
            f"{path}: the saved plan names instances this clforge does not have "
            f"({', '.join(missing)}); compile the graph again"
        )
    for group in model.plan.fused.groups:  # fused kernels: regenerated from the same expressions
        if group.kernel is not None:
            check_current(reg, model.plan.ir, group.kernel)
    return model


__all__ = ["Dim", "Graph", "GraphValue", "Model", "from_onnx", "load", "supported_ops"]
