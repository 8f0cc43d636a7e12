"""The shapes the tuner measures, by default: per op, a representative large call (the sizes
the benchmarks use) in the op's canonical dims, by calling convention where ops share one.
`clforge tune --shapes` replaces them. And the layouts it measures them in: every tensor in
its first layout, plus the combinations listed here (those the benchmarks run: channels-last
convs); `clforge tune --layouts` adds others."""

from __future__ import annotations

from collections.abc import Mapping

from clforge.errors import UsageError
from clforge.references.base import Case
from clforge.registry.records import OpSig

_M = 2**20

BY_CONVENTION: dict[str, tuple[Case, ...]] = {
    "flat": (Case({"N": 16 * _M}), Case({"N": 256 * 1024})),
    "broadcast": (
        Case({"D0": 1, "D1": 1, "D2": 1, "D3": 16 * _M}),
        Case({"D0": 1, "D1": 1, "D2": 4096, "D3": 1024}, {"b": (1, 1, 1, 1024)}),
    ),
    "axis": (Case({"B": 4096, "R": 4096, "I": 1}), Case({"B": 64, "R": 4096, "I": 64})),
    "trailing": (Case({"B": 4096, "R": 1024}),),
    "matmul": tuple(
        Case({"BATCH": 1, "M": n, "N": n, "K": n, "BA": 1, "BB": 1})
        for n in (64, 128, 256, 512, 1024, 2048)  # small ones: where one launch beats packing
    ),
    "gemm": tuple(Case({"M": n, "N": n, "K": n}, {"bias": (1, 1)}) for n in (512, 1024)),
    "permute": (
        Case(
            {"D0": 1, "D1": 1, "D2": 4096, "D3": 4096}, attrs={"p0": 0, "p1": 1, "p2": 3, "p3": 2}
        ),
    ),
    "conv2d": (
        Case({"N": 1, "C": 64, "H": 56, "W": 56, "K": 64, "CG": 64, "R": 3, "S": 3}),
        Case({"N": 1, "C": 64, "H": 56, "W": 56, "K": 128, "CG": 64, "R": 1, "S": 1}),
        # the bench's other layers: 1x1, 3x3 stride 2, grouped (ResNeXt) and depthwise
        Case({"N": 1, "C": 256, "H": 56, "W": 56, "K": 64, "CG": 256, "R": 1, "S": 1}),
        Case(
            {"N": 1, "C": 128, "H": 56, "W": 56, "K": 128, "CG": 128, "R": 3, "S": 3},
            attrs={"stride_h": 2, "stride_w": 2, "pad_h": 1, "pad_w": 1},
        ),
        Case(
            {"N": 1, "C": 128, "H": 56, "W": 56, "K": 128, "CG": 4, "R": 3, "S": 3},
            attrs={"pad_h": 1, "pad_w": 1, "groups": 32},
        ),
        Case(
            {"N": 1, "C": 128, "H": 56, "W": 56, "K": 128, "CG": 1, "R": 3, "S": 3},
            attrs={"pad_h": 1, "pad_w": 1, "groups": 128},
        ),
    ),
    "attention": (
        Case(
            {"B": 1, "H": 8, "HK": 8, "SQ": 512, "SK": 512, "D": 64, "DV": 64},
            {"mask": (1, 1, 1, 1)},  # no mask: what an eager call without one passes
        ),
    ),
    "channels": (Case({"N": 32, "C": 64, "S": 3136}),),
    "pool2d": (
        Case(
            {"N": 32, "C": 64, "H": 56, "W": 56},
            attrs={"kernel_h": 2, "kernel_w": 2, "stride_h": 2, "stride_w": 2},
        ),
    ),
    "along_axis": (Case({"B": 4096, "R": 1024, "I": 1, "J": 16}),),
    "embedding": (Case({"M": 4096, "V": 32000, "D": 1024}),),
    "concat": (Case({"B": 1, "RA": 2048, "RB": 2048, "I": 4096}),),
}


#: ops whose benchmark sizes differ from their convention's: the softmaxes run rows of 1024
#: (the reductions rows of 4096), mul a full 4096 x 4096, gelu 4M elements
BY_OP: dict[str, tuple[Case, ...]] = {
    **{
        op: (Case({"B": 4096, "R": 1024, "I": 1}), Case({"B": 64, "R": 1024, "I": 64}))
        for op in ("softmax", "log_softmax")
    },
    "mul": (*BY_CONVENTION["broadcast"], Case({"D0": 1, "D1": 1, "D2": 4096, "D3": 4096})),
    "gelu": (*BY_CONVENTION["flat"], Case({"N": 4 * _M})),
}

#: layout combinations tuned besides the first layouts, by calling convention (tensor ->
#: layout; a tensor not named keeps its first layout)
LAYOUTS_BY_CONVENTION: dict[str, tuple[dict[str, str], ...]] = {
    "conv2d": ({"x": "nhwc", "y": "nhwc"},),
}

Layouts = dict[str, str]


def default_cases(op: OpSig) -> tuple[Case, ...]:
    return BY_OP.get(op.name) or BY_CONVENTION.get(op.call, ())


def default_layouts(op: OpSig) -> tuple[Layouts, ...]:
    """The layout combinations the tuner measures `op` in by default: the first layouts ({}),
    then the convention's others."""
    return ({}, *LAYOUTS_BY_CONVENTION.get(op.call, ()))


def full_layouts(op: OpSig, chosen: Mapping[str, str]) -> Layouts:
    """Every tensor's layout: `chosen`'s, else the tensor's first; a tensor or layout the op
    does not have is a UsageError."""
    tensors = {t.name: t for t in op.inputs + op.outputs}
    for name, layout in chosen.items():
        t = tensors.get(name)
        if t is None:
            raise UsageError(f"--layouts: {op.name} has no tensor {name!r} ({', '.join(tensors)})")
        if layout not in t.layouts:
            raise UsageError(
                f"--layouts: {op.name}'s {name} has no layout {layout!r} "
                f"(it has {', '.join(t.layouts)})"
            )
    return {name: chosen.get(name, t.layouts[0]) for name, t in tensors.items()}


def parse_layouts(text: str) -> dict[str, tuple[Layouts, ...]]:
    """`OP:TENSOR=LAYOUT,...;OP:...` as layout combinations per op (repeat an op for several)."""
    out: dict[str, list[Layouts]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        op, sep, assigns = part.partition(":")
        combo: Layouts = {}
        for a in filter(None, (x.strip() for x in assigns.split(","))):
            k, eq, v = a.partition("=")
            if not (sep and eq and k.strip() and v.strip()):
                raise UsageError(f"--layouts: {part!r} is not OP:TENSOR=LAYOUT,...")
            combo[k.strip()] = v.strip()
        out.setdefault(op.strip(), []).append(combo)
    return {k: tuple(v) for k, v in out.items()}


def parse_shapes(text: str) -> dict[str, tuple[Case, ...]]:
    """`OP:DIM=N,DIM=N;OP:...` as cases per op (repeat an op for several shapes)."""
    out: dict[str, list[Case]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        op, sep, assigns = part.partition(":")
        dims: dict[str, int] = {}
        for a in filter(None, (x.strip() for x in assigns.split(","))):
            k, eq, v = a.partition("=")
            if not (sep and eq and v.strip().isdigit()):
                raise UsageError(f"--shapes: {part!r} is not OP:DIM=N,DIM=N,...")
            dims[k.strip()] = int(v)
        out.setdefault(op.strip(), []).append(Case(dims))
    return {k: tuple(v) for k, v in out.items()}
