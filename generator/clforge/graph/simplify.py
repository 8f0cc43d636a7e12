"""Simplify: no-op casts, permutes and views removed, transposes read in place (a 2-d permute
feeding matmul or gemm becomes gemm's trans_a / trans_b: a col-major read of the same memory),
common subexpressions merged, dead code dropped. Each rewrite is logged for `explain`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from clforge.graph.records import GraphIR, Node


@dataclass(frozen=True)
class Simplified:
    ir: GraphIR
    log: tuple[str, ...]  # one line per rewrite


def _swap_of(ir: GraphIR, n: Node | None) -> int | None:
    """The source of `n` when it is a permute that transposes a 2-d value, else None."""
    if n is None or n.op != "permute":
        return None
    (src,) = n.input_ids()
    axes = dict(n.options).get("axes")
    if len(ir.value(src).shape) != 2 or axes not in (None, (1, 0), (-1, -2), (1, -2), (-1, 0)):
        return None
    return src


def _transposes_read_in_place(
    ir: GraphIR, n: Node, producers: dict[int, Node]
) -> tuple[Node, str | None]:
    """`n` reading the sources of the 2-d transposes it takes as col-major operands: gemm's
    trans flags toggled; a 2-d matmul becomes the gemm with those flags."""
    if n.op not in ("matmul", "gemm"):
        return n, None
    inputs = dict(n.inputs)
    options = dict(n.options)
    folded = []
    for name, flag in (("a", "trans_a"), ("b", "trans_b")):
        vid = inputs.get(name)
        src = _swap_of(ir, producers.get(vid)) if vid is not None else None
        if n.op == "matmul" and (vid is None or len(ir.value(vid).shape) != 2):
            return n, None
        if src is not None:
            inputs[name] = src
            options[flag] = not options.get(flag, False)
            folded.append(f"{ir.value(vid).name} as {flag}" if vid is not None else flag)
    if not folded:
        return n, None
    why = f"read {', '.join(folded)}: the transposed value's memory read col-major, no kernel"
    flags = tuple((f, True) for f in ("trans_a", "trans_b") if options.get(f))
    if n.op == "gemm":
        rest = tuple((k, v) for k, v in n.options if k not in ("trans_a", "trans_b"))
        new_inputs = tuple((t, inputs.get(t, v)) for t, v in n.inputs)
        return replace(n, inputs=new_inputs, options=(*rest, *flags)), why
    dims = dict(n.dims)
    m, k, cols = dims["M"], dims["K"], dims["N"]
    gemm = Node(
        n.id,
        "gemm",
        n.dtype,
        (("a", inputs["a"]), ("b", inputs["b"]), ("bias", None)),
        n.outputs,
        flags,
        (),
        (("a", (m, k)), ("b", (k, cols)), ("c", (m, cols))),
        (("K", k), ("M", m), ("N", cols)),
    )
    return gemm, f"{why} (the 2-d matmul becomes gemm)"


def _noop(ir: GraphIR, n: Node) -> str | None:
    """Why `n` does nothing (its output is its input), or None."""
    ins = n.input_ids()
    if len(ins) != 1 or len(n.outputs) != 1:
        return None
    src, out = ir.value(ins[0]), ir.value(n.output_ids()[0])
    if n.op.startswith("cast_") and n.op == f"cast_{src.dtype}":
        return f"a cast of {src.name} to its own dtype {src.dtype}"
    if n.op == "permute":
        axes = dict(n.options).get("axes")
        rank = len(src.shape)
        order = tuple(range(rank)) if axes is None and rank <= 1 else axes
        if order is not None and tuple(a % max(rank, 1) for a in order) == tuple(range(rank)):
            return f"a permute of {src.name} that keeps the axes in order"
    if n.view and src.shape == out.shape:
        return f"a {n.op} of {src.name} to its own shape"
    return None


def simplify(ir: GraphIR) -> Simplified:
    """The stage."""
    log: list[str] = []
    alias: dict[int, int] = {}

    def res(v: int | None) -> int | None:
        while v is not None and v in alias:
            v = alias[v]
        return v

    same: dict[tuple, int] = {}
    for vid, arr in sorted(ir.constants.items()):
        ckey = (arr.dtype.str, arr.shape, arr.tobytes())
        if ckey in same:
            alias[vid] = same[ckey]
            log.append(
                f"merged constant {ir.value(vid).name} into {ir.value(same[ckey]).name}: equal data"
            )
        else:
            same[ckey] = vid
    kept: list[Node] = []
    seen: dict[tuple, Node] = {}
    producers = {vid: n for n in ir.nodes for vid in n.output_ids()}
    for captured in ir.nodes:
        n = replace(captured, inputs=tuple((t, res(v)) for t, v in captured.inputs))
        n, folded = _transposes_read_in_place(ir, n, producers)
        if folded is not None:
            log.append(f"node {n.id} ({captured.op} -> {n.op}): {folded}")
        why = _noop(ir, n)
        if why is not None:
            alias[n.output_ids()[0]] = n.input_ids()[0]
            log.append(f"removed node {n.id} ({n.op}): {why}")
            continue
        key = (n.op, n.dtype, n.inputs, repr(n.options), n.attrs)
        first = seen.get(key)
        if first is not None:
            for (_, mine), (_, theirs) in zip(n.outputs, first.outputs, strict=True):
                alias[mine] = theirs
            names = ", ".join(ir.value(v).name for v in n.output_ids())
            log.append(
                f"merged node {n.id} ({n.op} -> {names}) into node {first.id}: the same op on "
                "the same inputs"
            )
            continue
        seen[key] = n
        kept.append(n)
    outputs = tuple(res(v) for v in ir.outputs)
    live: set[int] = {v for v in outputs if v is not None}
    needed: list[Node] = []
    for n in reversed(kept):
        if any(v in live for v in n.output_ids()):
            needed.append(n)
            live.update(n.input_ids())
        else:
            names = ", ".join(ir.value(v).name for v in n.output_ids())
            log.append(f"removed node {n.id} ({n.op} -> {names}): no output depends on it")
    needed.reverse()
    out = replace(
        ir,
        nodes=tuple(needed),
        outputs=tuple(v for v in outputs if v is not None),
        constants={k: a for k, a in ir.constants.items() if k in live},
    )
    return Simplified(out, tuple(log))
