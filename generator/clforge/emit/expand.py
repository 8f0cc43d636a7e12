"""Expansion: each variant × its dtypes × its layouts becomes one named kernel instance."""

from __future__ import annotations

import itertools
import re

from clforge.core.dtypes import DTYPES
from clforge.errors import Diagnostic, SpecError
from clforge.registry.records import (
    Arg,
    Instance,
    Launch,
    Requirements,
    Scratch,
    Step,
)
from clforge.spec.load import LoadedSpec
from clforge.spec.model import LaunchSpec, OpSpec, VariantSpec

_LIMIT = re.compile(r"\s*(>=|<=|==|>|<)\s*([0-9]+)\s*")


def instance_name(
    op: str, variant: str, dtype: str, layouts: dict[str, str], multi: tuple[str, ...]
) -> str:
    """`op__variant__dtype` plus `__tensor_layout` for every tensor that has a layout choice."""
    parts = [op, variant, dtype] + [f"{t}_{layouts[t]}" for t in multi]
    return "__".join(parts)


def _args(
    spec: OpSpec,
    dtype: str,
    reads: tuple[str, ...] | None = None,
    writes: tuple[str, ...] | None = None,
) -> tuple[Arg, ...]:
    """A kernel's arguments: buffers (the op's inputs and outputs, or a routine step's reads and
    writes, scratch included), then every dim, the strides of the broadcast inputs it reads,
    and every attribute."""
    reads = tuple(spec.inputs) if reads is None else reads
    writes = tuple(spec.outputs) if writes is None else writes
    out: list[Arg] = []
    for kind, names in (("input", reads), ("output", writes)):
        for name in names:
            t = spec.tensors.get(name)
            d = DTYPES[(t.dtype if t is not None else None) or dtype]
            out.append(Arg(kind, name, d.cl, d.name))  # type: ignore[arg-type]
    out.extend(Arg("dim", d, "int") for d in spec.dims)
    for name, t in spec.inputs.items():
        if t.broadcast and name in reads:
            out.extend(
                Arg("stride", f"{name}_s{k}", "int", tensor=name, axis=k)
                for k in range(len(t.shape))
            )
    compute = DTYPES[dtype].compute if DTYPES[dtype].is_float else "float"
    out.extend(Arg("attr", n, "int" if a.type == "int" else compute) for n, a in spec.attrs.items())
    return tuple(out)


def _launch(launch: LaunchSpec) -> Launch:
    return Launch(
        tuple(str(e) for e in launch.global_size),
        tuple(str(e) for e in launch.local_size) if launch.local_size is not None else None,
    )


def _steps(spec: OpSpec, v: VariantSpec, instance: str, dtype: str) -> tuple[Step, ...]:
    if v.routine is None:
        return ()
    return tuple(
        Step(
            s.name,
            f"{instance}__{s.name}",
            _args(spec, dtype, s.reads, s.writes),
            _launch(s.launch),
            s.reads,
            s.writes,
            s.panels,
        )
        for s in v.routine.steps
    )


def _requirements(spec: OpSpec, v: VariantSpec, dtype: str) -> Requirements:
    exts = set(v.requires.extensions)
    for t in spec.tensors.values():
        ext = DTYPES[t.dtype or dtype].extension
        if ext:
            exts.add(ext)
    limits = []
    for field in ("local_mem_bytes", "max_work_group_size", "compute_units"):
        text = getattr(v.requires, field)
        if text is not None:
            m = _LIMIT.fullmatch(text)
            if m:  # the schema's pattern guarantees it
                limits.append((field, m.group(1), int(m.group(2))))
    return Requirements(tuple(sorted(exts)), v.requires.device_type, tuple(limits))


def expand(loaded: LoadedSpec) -> list[Instance]:
    """Every instance of one op, sorted by name; two instances with one name are an error."""
    spec = loaded.spec
    multi = tuple(t for t in spec.tensors if len(spec.layouts_of(t)) > 1)
    seen: dict[str, int] = {}
    out: list[Instance] = []
    diags: list[Diagnostic] = []
    for vi, v in enumerate(spec.variants):
        allowed = {t: (v.layouts or {}).get(t, spec.layouts_of(t)) for t in spec.tensors}
        for dtype in v.dtypes or spec.dtypes:
            for combo in itertools.product(*(allowed[t] for t in spec.tensors)):
                layouts = dict(zip(spec.tensors, combo, strict=True))
                name = instance_name(spec.op, v.name, dtype, layouts, multi)
                if name in seen:
                    diags.append(
                        loaded.diagnostic(
                            ("variants", vi, "name"),
                            "duplicate-name",
                            f"instance name {name!r} is produced twice (also by variant "
                            f"{spec.variants[seen[name]].name!r}); rename one variant",
                        )
                    )
                    continue
                seen[name] = vi
                out.append(
                    Instance(
                        name=name,
                        op=spec.op,
                        variant=v.name,
                        dtype=dtype,
                        layouts=tuple(layouts.items()),
                        targets=v.arch,
                        priority=v.priority,
                        params=tuple(sorted(v.params.items())),
                        guard=v.when,
                        requires=_requirements(spec, v, dtype),
                        args=_args(spec, dtype),
                        launch=_launch(v.launch or v.routine.steps[-1].launch),  # type: ignore[union-attr]
                        steps=_steps(spec, v, name, dtype),
                        scratch=tuple(
                            Scratch(k, s)
                            for k, s in (v.routine.scratch if v.routine else {}).items()
                        ),
                        source=f"kernels/{spec.op}/{name}.cl",
                        template=v.template,
                        tunables=tuple(sorted(v.tunables.items())),
                        device_params=tuple(sorted(v.device_params.items())),
                        constraints=v.constraints,
                        build_options=" ".join(v.build_options),
                        epilogue=v.epilogue,
                        prefer_when=v.prefer_when,
                    )
                )
    if diags:
        raise SpecError(diags)
    return sorted(out, key=lambda i: i.name)
