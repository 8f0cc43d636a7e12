"""`model.explain()`: every stage's output, as text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clforge.graph.dims import shape_str
from clforge.graph.plan import Plan
from clforge.graph.records import GraphIR
from clforge.graph.select import NodeSelection


def _nodes(ir: GraphIR) -> list[str]:
    out = []
    for vid in ir.inputs:
        out.append(f"input {ir.value(vid).describe()}")
    for v in ir.values:
        if v.kind == "constant":
            out.append(f"constant {v.describe()}")
    for n in ir.nodes:
        ins = ", ".join(f"{t}={'-' if v is None else ir.value(v).name}" for t, v in n.inputs)
        outs = ", ".join(ir.value(v).describe() for v in n.output_ids())
        extra = "".join(f" {k}={v}" for k, v in n.options)
        if n.view and n.op == "slice":
            o = dict(n.options)
            extra = f" [{o['start']}:{o['stop']}] axis={o['axis']}"
        elif n.view:
            extra = f" shape={shape_str(dict(n.options)['shape'])}"
        attrs = "".join(f" {k}={v}" for k, v in n.attrs)
        canon = "; ".join(f"{t} {shape_str(s)}" for t, s in n.canonical)
        out.append(f"node {n.id}: {n.op}({ins}){extra}{attrs} -> {outs}")
        if canon:
            out.append(f"  kernel shapes: {canon}")
    out.append("outputs: " + ", ".join(ir.value(v).name for v in ir.outputs))
    return out


def _selection(s: NodeSelection, verbose: bool) -> list[str]:
    if not verbose:
        return s.lines()
    return [*s.lines(), *(f"    {ln}" for ln in s.table.splitlines())]


def explain_plan(plan: Plan, cache: Mapping[Any, Any], *, verbose: bool = False) -> str:
    ir = plan.ir
    sections: list[tuple[str, list[str]]] = [
        ("capture", _nodes(plan.captured)),
        ("shapes and guards", plan.guards.lines() or ["no guards"]),
        ("simplify", list(plan.simplified) or ["nothing to simplify"]),
        ("fuse", plan.fused.lines(ir)),
        ("select", [ln for s in plan.selections for ln in _selection(s, verbose)]),
        ("plan buffers", plan.buffers.lines(ir)),
        ("schedule", plan.schedule.lines(ir)),
    ]
    specs = []
    for spec in cache.values():
        s = spec.summary()
        dims = ", ".join(f"{k}={v}" for k, v in s["dims"].items()) or "(no symbolic dims)"
        specs.append(
            f"{dims}: slots {s['slot_bytes']} bytes, scratch shared by every step "
            f"{s['scratch_bytes']} bytes; {s['kernels']} kernels with their arguments "
            f"set ahead, {s['rebound_per_call']} bound per call (the caller's buffers)"
        )
        specs.extend(f"  view: {note}" for note in s["views"])
        specs.extend(f"  {note}" for note in s["run_once"])
        specs.extend(f"  {note}" for note in s["handoffs"])
        for node, step in zip(s["nodes"], spec.steps, strict=True):
            if step.step.group is not None:
                specs.append(f"  group {step.step.group}: {node['instance']} (generated)")
                specs.append(f"    params {node['params_from']}")
                if verbose:
                    specs.extend(f"    | {ln}" for ln in step.source.splitlines())
                continue
            held = "static choice" if node["guard_held"] else "re-dispatched (guard failed)"
            specs.append(f"  node {node['node']} {node['op']}: {node['instance']} ({held})")
            specs.append(f"    params {node['params_from']}")
    sections.append(("specializations", specs or ["none yet (one is made on a call's first use)"]))
    out = [f"graph {ir.name!r}"]
    for k, (title, lines) in enumerate(sections, 1):
        out.append(f"== {k}. {title}")
        out.extend(f"  {ln}" for ln in lines)
    return "\n".join(out)
