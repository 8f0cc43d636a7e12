"""Permutes folded into the kernels that read or write them (part of the fuse stage): where a
node's op takes a tensor in a layout whose memory order is a permute's axes (attention's q, k,
v and o as `bshd`: a model's heads before their permute), the node reads the permute's source
in that layout, or writes its output in it into the permute's result, and the permute's kernel
is gone. A node records such tensors in :attr:`Node.layouts`; every buffer stays row-major in
its own shape. A fold is made only where the registry has an instance for the node's dtype and
resulting layouts (the generic fallback has every one); each is logged for `explain`.
"""

from __future__ import annotations

from dataclasses import replace

from clforge.core.layouts import LAYOUTS, inverse
from clforge.graph.records import GraphIR, Node
from clforge.registry.loader import Registry


def _axes(n: Node, rank: int) -> tuple[int, ...] | None:
    """A permute's axes, each in 0..rank-1 (None: not a permute, or the default reversal)."""
    if n.op != "permute":
        return None
    axes = dict(n.options).get("axes")
    return None if axes is None else tuple(a % rank for a in axes)


def _layout_for(tensors: dict[str, tuple[str, ...]], name: str, axes: tuple[int, ...]) -> str:
    """The layout of tensor `name` whose memory order (logical axes, outermost first) is `axes`
    ("" if none)."""
    for lay in tensors.get(name, ()):
        kind = LAYOUTS[lay]
        if lay != "row" and kind.fits(len(axes)) and kind.order(len(axes)) == axes:
            return lay
    return ""


def fold_layouts(ir: GraphIR, registry: Registry) -> tuple[GraphIR, tuple[str, ...]]:
    """`ir` with its permutes folded into their readers' and writers' layouts, and one log
    line per folding node."""
    maker = {v: n for n in ir.nodes for v in n.output_ids()}
    users = ir.readers()
    covered = {(i.op, i.dtype, i.layouts) for i in registry.instances.values()}
    log: list[str] = []
    gone: set[int] = set()
    nodes: list[Node] = []
    values = list(ir.values)
    for n in ir.nodes:
        if n.view or n.op == "permute" or n.id in gone:
            nodes.append(n)
            continue
        sig = registry.op(n.op)
        tensors = {t.name: t.layouts for t in (*sig.inputs, *sig.outputs) if len(t.layouts) > 1}
        if not tensors:
            nodes.append(n)
            continue
        lays = dict(n.layouts)
        inputs, outputs, why = dict(n.inputs), dict(n.outputs), []
        for t, vid in n.inputs:
            p = maker.get(vid) if vid is not None else None
            axes = _axes(p, len(ir.value(vid).shape)) if p is not None and vid is not None else None
            # the permute's result read from its source's memory: source axis k holds result
            # axis inverse(axes)[k], so that is the memory order the node reads
            lay = _layout_for(tensors, t, inverse(axes)) if axes is not None else ""
            if p is not None and lay and t not in lays:
                (src,) = p.input_ids()
                inputs[t], lays[t] = src, lay
                why.append(f"reads {ir.value(src).name} as {t} in {lay} (node {p.id}'s permute)")
        for t, vid in n.outputs:
            readers = users.get(vid, [])
            p = readers[0] if len(readers) == 1 else None
            axes = _axes(p, len(ir.value(vid).shape)) if p is not None else None
            # the permute's row-major result holds the node's axes in the order `axes`
            lay = _layout_for(tensors, t, axes) if axes is not None else ""
            if p is not None and lay and t not in lays and vid not in ir.outputs:
                (dst,) = p.output_ids()
                outputs[t], lays[t] = dst, lay
                values[dst] = replace(values[dst], node=n.id)
                gone.add(p.id)
                why.append(f"writes {t} in {lay} as {ir.value(dst).name} (node {p.id}'s permute)")
        full = tuple((t.name, lays.get(t.name, "row")) for t in (*sig.inputs, *sig.outputs))
        if not why or (n.op, n.dtype, full) not in covered:
            nodes.append(n)
            continue
        nodes.append(
            replace(
                n,
                inputs=tuple((t, inputs[t]) for t, _ in n.inputs),
                outputs=tuple((t, outputs[t]) for t, _ in n.outputs),
                layouts=tuple(sorted(lays.items())),
            )
        )
        log.append(f"node {n.id} ({n.op}) " + "; ".join(why) + ": no permute kernel")
    # permutes nothing reads any more
    read = {v for n in nodes if n.id not in gone for v in n.input_ids()} | set(ir.outputs)
    kept = []
    for n in nodes:
        dead = n.op == "permute" and not any(v in read for v in n.output_ids())
        if n.id in gone or dead:
            gone.add(n.id)
            continue
        kept.append(n)
    return replace(ir, values=tuple(values), nodes=tuple(kept)), tuple(log)
