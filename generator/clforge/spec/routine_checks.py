"""Checks of a routine (a variant whose work is several kernels): a variant has a launch or a
routine, not both; step and scratch names are identifiers that clash with nothing; each step
reads only the op's inputs or scratch an earlier step wrote, and writes only outputs or
scratch; every output is written; scratch sizes and step launches are integer expressions
over dims and params."""

from __future__ import annotations

from clforge.core.diagnostics import Collector, KeyPath
from clforge.core.identifiers import identifier_problem
from clforge.spec.model import OpSpec, StepSpec, VariantSpec
from clforge.spec.variant_checks import check_expr


def check_routine(
    col: Collector, spec: OpSpec, v: VariantSpec, key: KeyPath, scope: set[str]
) -> None:
    r = v.routine
    if r is None:
        if v.launch is None:
            col.add(key, "routine", f"variant {v.name}: needs launch: (or routine: with steps)")
        return
    if v.launch is not None:
        col.add(
            (*key, "launch"),
            "routine",
            f"variant {v.name}: has both launch: and routine:; a routine's steps carry their "
            "launches",
            at_key=True,
        )
    rkey = (*key, "routine")
    taken = set(spec.tensors) | set(spec.dims) | set(spec.attrs) | set(v.params)
    for name, size in r.scratch.items():
        problem = identifier_problem(name)
        if problem:
            col.add((*rkey, "scratch", name), "c-identifier", f"scratch {problem}", at_key=True)
        elif name in taken:
            col.add(
                (*rkey, "scratch", name),
                "routine",
                f"variant {v.name}: scratch {name!r} is already a tensor, dim, attribute or param",
                at_key=True,
            )
        check_expr(col, (*rkey, "scratch", name), size, "int", set(spec.dims) | set(v.params))
    written: set[str] = set()
    names: set[str] = set()
    for i, step in enumerate(r.steps):
        skey = (*rkey, "steps", i)
        problem = identifier_problem(step.name, reserved=False)  # only inside kernel names
        if problem:
            col.add((*skey, "name"), "c-identifier", f"step {problem}")
        elif step.name in names:
            col.add((*skey, "name"), "routine", f"variant {v.name}: step {step.name!r} twice")
        names.add(step.name)
        for j, buf in enumerate(step.reads):
            if buf in spec.inputs or buf in written:
                continue
            why = (
                "is scratch that no earlier step writes"
                if buf in r.scratch
                else "is neither an input of the op nor scratch of the routine"
            )
            col.add(
                (*skey, "reads", j),
                "routine",
                f"variant {v.name}: step {step.name} reads {buf!r}, which {why}",
            )
        for j, buf in enumerate(step.writes):
            if buf not in spec.outputs and buf not in r.scratch:
                col.add(
                    (*skey, "writes", j),
                    "routine",
                    f"variant {v.name}: step {step.name} writes {buf!r}, which is neither an "
                    f"output of the op ({', '.join(spec.outputs)}) nor scratch of the routine",
                )
            written.add(buf)
        if step.panels is not None:
            _check_panels(col, spec, v, step, skey)
        for part in ("global_size", "local_size"):
            for j, e in enumerate(getattr(step.launch, part) or ()):
                check_expr(col, (*skey, "launch", part, j), str(e), "int", scope)
    for out in spec.outputs:
        if out not in written:
            col.add(
                (*rkey, "steps"),
                "routine",
                f"variant {v.name}: no step writes the output {out!r}",
                at_key=True,
            )


def _check_panels(
    col: Collector, spec: OpSpec, v: VariantSpec, step: StepSpec, skey: KeyPath
) -> None:
    """A packing step (`panels:`) reads one input of the op and writes one scratch buffer,
    its panels' rows a param of the variant."""
    r = v.routine
    scratch = r.scratch if r is not None else {}
    if len(step.reads) != 1 or step.reads[0] not in spec.inputs:
        col.add(
            (*skey, "panels"),
            "routine",
            f"variant {v.name}: step {step.name} packs (panels:), so it reads one input of the "
            f"op, not {', '.join(step.reads)}",
        )
    if len(step.writes) != 1 or step.writes[0] not in scratch:
        col.add(
            (*skey, "panels"),
            "routine",
            f"variant {v.name}: step {step.name} packs (panels:), so it writes one scratch "
            f"buffer, not {', '.join(step.writes)}",
        )
    if step.panels not in v.params:
        col.add(
            (*skey, "panels"),
            "routine",
            f"variant {v.name}: step {step.name}'s panels: {step.panels!r} is not a param of "
            f"the variant ({', '.join(v.params) or 'none'})",
        )
