"""Select: per node, the dispatcher's verdict and the tuning chain's parameters at the dims the
graph knows (sizes that are ints in every call).

A node whose dims are all known is decided here, as an eager call of those sizes would be. A
node with symbolic dims gets what ``dispatcher().compile`` gives a compiled op: the best
candidate for the known sizes, whose runtime guard each call's sizes check; where it does not
hold, that specialization re-dispatches (:mod:`clforge.graph.artifact`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from clforge.call.dispatcher import Dispatcher
from clforge.call.selection import Selection, chosen_or_raise
from clforge.errors import ClforgeError, GraphError
from clforge.graph.records import GraphIR, Node
from clforge.registry.records import Instance


@dataclass(frozen=True)
class NodeSelection:
    """The static verdict for one node."""

    node: int
    op: str
    dtype: str
    layouts: tuple[tuple[str, str], ...]
    known: tuple[tuple[str, int], ...]  # the op's dims that are ints in every call
    symbolic: tuple[str, ...]  # the op's dims each call sizes
    instance: str
    guard: str | None  # the instance's guard (checked per specialization when symbolic)
    params: str  # the parameters and where they came from (tuned, computed, spec default)
    table: str  # every candidate's verdict

    def lines(self) -> list[str]:
        known = ", ".join(f"{k}={v}" for k, v in self.known) or "none"
        sym = ", ".join(self.symbolic) or "none"
        when = "decided now" if not self.symbolic else "re-checked per specialization"
        out = [
            f"node {self.node} {self.op} [{self.dtype}] -> {self.instance} ({when})",
            f"  dims known: {known}; sized per call: {sym}",
            f"  params: {self.params}",
        ]
        if self.guard:
            out.append(f"  guard: {self.guard}")
        return out


def layouts_of(node: Node) -> dict[str, str]:
    """The kernel layouts of a node's tensors: every graph buffer is row-major in its own shape;
    gemm's ``trans_a``/``trans_b`` read the same memory col-major, and a folded permute's
    tensor is read or written in the layout it names (``Node.layouts``)."""
    opts = dict(node.options)
    out = {t: "row" for t, _ in (*node.inputs, *node.outputs)} | dict(node.layouts)
    for name, flag in (("a", "trans_a"), ("b", "trans_b")):
        if node.op == "gemm" and opts.get(flag):
            out[name] = "col"
    return out


def select_nodes(ir: GraphIR, d: Dispatcher) -> tuple[NodeSelection, ...]:
    """The stage, with dispatcher `d` (its registry, device profile and tuning files)."""
    out = []
    for n in ir.nodes:
        if n.view:
            continue
        dims = dict(n.dims)
        known = {k: v.value for k, v in dims.items() if v.is_int}
        symbolic = tuple(k for k, v in dims.items() if not v.is_int)
        layouts = layouts_of(n)
        try:
            sel = d.select(n.op, n.dtype, layouts, known)
            inst = d.first_that_builds(sel) if not symbolic else _best(d, sel)
        except ClforgeError as exc:
            raise GraphError(f"graph {ir.name!r}: node {n.id} ({n.op}): {exc}") from None
        out.append(
            NodeSelection(
                n.id,
                n.op,
                n.dtype,
                tuple(sorted(layouts.items())),
                tuple(sorted(known.items())),
                symbolic,
                inst.name,
                inst.guard,
                _params(d, inst, known, n.attrs, inst.packs_once(_constants(ir, n))),
                sel.table(),
            )
        )
    return tuple(out)


def _best(d: Dispatcher, sel: Selection) -> Instance:
    """The best accepted candidate, without building it (a specialization builds what it
    runs)."""
    chosen_or_raise(sel)
    chosen = sel.chosen
    if chosen is None or chosen.instance is None:  # pragma: no cover - chosen_or_raise raised
        raise GraphError(f"{sel.op}: no candidate")
    return d.registry.instance(chosen.instance)


def _constants(ir: GraphIR, n: Node) -> set[str]:
    """The node's input tensors that are constants of the graph (or omitted)."""
    return {t for t, vid in n.inputs if vid is None or vid in ir.constants}


def _params(
    d: Dispatcher,
    inst: Instance,
    known: Mapping[str, int],
    attrs: tuple[tuple[str, float | int], ...],
    hoisted: bool,
) -> str:
    try:
        env = {**known, **{k: v for k, v in attrs if isinstance(v, int)}}
        return str(d.params_for(inst, env, hoisted).describe())
    except ClforgeError as exc:  # a computed set that needs a dim the graph does not fix
        why = getattr(exc, "message", str(exc))
        return f"decided per specialization, at each call's sizes ({why})"
