"""A fused elementwise kernel: its description as data (saved with the model), and its launch
at one specialization's sizes.

The description (:class:`FusedKernel`) names the ops by their spec name, their operands, dtypes
and attribute values; its `expression` is each op's spec expression (`expr:`) written out on
named operands, and its name is a hash of that text, so the kernel is keyed by what it
computes. At a specialization the kernel is rendered from `templates/fused/elementwise.cl.j2`
through the same macros as the ops' own kernels (with the tuned parameters of the chain's last
node: its CHUNK and VW where it ran the cpu variant), built through the runtime's program cache
(memory, then disk), and prepared into the same kind of launch plan as any node.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pyopencl as cl

from clforge.call.binding import bind
from clforge.call.dispatcher import Dispatcher
from clforge.core import elementwise_expr
from clforge.core.dtypes import DTYPES
from clforge.core.layouts import layout_strides
from clforge.core.tree import Tree
from clforge.emit.render import Renderer
from clforge.errors import CallError, ClforgeError, GraphError
from clforge.graph.records import GraphIR, Node
from clforge.graph.shapes import canonical_at
from clforge.params.space import as_params
from clforge.registry.loader import Registry
from clforge.registry.records import Arg, Instance, Launch, OpSig, Requirements, TensorSig
from clforge.runtime.launch import SCALAR_TYPES, Geometry, KernelLaunch, LaunchPlan

TEMPLATE = "fused/elementwise.cl.j2"
# the unary ops whose cpu kernels use the float approximations of _common/transcendentals
FAST = ("exp", "sigmoid", "silu", "tanh", "gelu")


@dataclass(frozen=True)
class FusedOp:
    """One node of a fused chain: `args` are the group's inputs (in0, in1, ...) and earlier ops'
    results (t0, t1, ...)."""

    node: int
    op: str
    dtype: str  # the node's dtype: the type its expression is computed in
    out: str  # the dtype of the value it makes (a cast's destination)
    args: tuple[str, ...]
    attrs: tuple[tuple[str, float | int], ...] = ()


@dataclass(frozen=True)
class FusedKernel:
    name: str  # fused_<hash of the expression>
    inputs: tuple[int, ...]  # value ids, as in0, in1, ...
    ops: tuple[FusedOp, ...]  # as t0, t1, ...
    outputs: tuple[tuple[int, int], ...]  # (value id, op index), as out0, out1, ...
    expression: str  # one line per op: `t1 = ((t0) + (in1))  [add, f32]`
    # an epilogue: the node whose output is in0, stored by its own kernel through its template's
    # epilogue hook after the chain (None: an elementwise kernel of its own)
    producer: int | None = None


def elementwise_kind(reg: Registry, node: Node) -> str | None:
    """ "expr" (an op with an elementwise expression), "cast", or None (not fusable)."""
    if node.view or any(v is None for _, v in node.inputs) or len(node.outputs) != 1:
        return None
    if not all(isinstance(v, int) or math.isfinite(v) for _, v in node.attrs):
        return None
    sig = reg.op(node.op)
    if sig.expression(DTYPES[node.dtype].is_float) is not None:
        return "expr"
    if (
        node.op.startswith("cast_")
        and len(sig.inputs) == 1
        and sig.outputs[0].dtype is not None
        and sig.call == "flat"
    ):
        return "cast"
    return None


def _literal(value: float | int, compute: str) -> str:
    if isinstance(value, int):
        return str(value)
    return f"{value!r}f" if compute == "float" else repr(value)


def _attrs(sig: OpSig, op: FusedOp) -> dict[str, str]:
    given = dict(op.attrs)
    compute = DTYPES[op.dtype].compute
    return {
        a.name: _literal(given.get(a.name, a.default if a.default is not None else 0), compute)
        for a in sig.attrs
    }


def _line(reg: Registry, k: int, op: FusedOp) -> str:
    t = DTYPES[op.dtype]
    if op.op.startswith("cast_") and reg.op(op.op).expression(t.is_float) is None:
        return f"t{k} = ({op.out})({op.args[0]})  [{op.op}, {op.dtype}]"
    sig = reg.op(op.op)
    text = elementwise_expr.of_op(sig, t.is_float, op.args, t.compute, None, _attrs(sig, op))
    return f"t{k} = {text}  [{op.op}, {op.dtype}]"


def describe(
    reg: Registry,
    ir: GraphIR,
    nodes: Sequence[Node],
    reads: Sequence[int],
    writes: Sequence[int],
    producer: Node | None = None,
) -> FusedKernel:
    """The description of the group `nodes` (in order) reading `reads`, writing `writes`;
    `producer`: the node whose output (reads[0]) the chain is the epilogue of."""
    ref: dict[int, str] = {v: f"in{k}" for k, v in enumerate(reads)}
    ops = []
    for k, n in enumerate(nodes):
        sig = reg.op(n.op)
        order = [t.name for t in sig.inputs]
        given = {t: v for t, v in n.inputs if v is not None}
        args = tuple(ref[given[t]] for t in order if t in given)
        (vid,) = n.output_ids()
        ops.append(FusedOp(n.id, n.op, n.dtype, ir.value(vid).dtype, args, n.attrs))
        ref[vid] = f"t{k}"
    made = {v: k for k, n in enumerate(nodes) for v in n.output_ids()}
    outputs = tuple((v, made[v]) for v in writes)
    ins = ", ".join(f"in{k}: {ir.value(v).dtype}" for k, v in enumerate(reads))
    outs = ", ".join(f"out{k} = t{j}" for k, (_, j) in enumerate(outputs))
    lines = [_line(reg, k, op) for k, op in enumerate(ops)]
    head = [f"inputs {ins}"]
    if producer is not None:
        head.append(f"in0 = {producer.op}(...)  [node {producer.id}, its epilogue point]")
    text = "\n".join([*head, *lines, f"outputs {outs}"])
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    pid = None if producer is None else producer.id
    return FusedKernel(f"fused_{key}", tuple(reads), tuple(ops), outputs, text, pid)


def check_current(reg: Registry, ir: GraphIR, fk: FusedKernel) -> None:
    """A saved description against the specs at hand: the same expressions, or a GraphError
    that says to compile again."""
    nodes = [ir.node(op.node) for op in fk.ops]
    producer = None if fk.producer is None else ir.node(fk.producer)
    again = describe(reg, ir, nodes, fk.inputs, tuple(v for v, _ in fk.outputs), producer)
    if again.name != fk.name:
        raise GraphError(
            f"graph {ir.name!r}: fused kernel {fk.name} was made from other expressions than "
            f"this clforge's specs give ({again.name}); compile the graph again"
        )


# --- at one specialization ----------------------------------------------------------------------


@cache
def _renderer() -> Renderer:
    return Renderer()


@cache
def _renderer_of(tree: Tree) -> Renderer:
    return Renderer(tree)


def _kind(shape: tuple[int, ...], out: tuple[int, ...]) -> str:
    size, n = math.prod(shape), math.prod(out)
    if size == n:
        return "dense"
    if size == 1:
        return "scalar"
    padded = (1,) * (len(out) - len(shape)) + shape
    lead = next((k for k, d in enumerate(padded) if d != 1), len(out))
    if padded[lead:] == out[lead:]:
        return "trailing"
    return "strided"


def _node_params(
    d: Dispatcher, ir: GraphIR, node: Node, instance: str, env: Mapping[str, int]
) -> tuple[dict[str, int], str]:
    """The parameters of a node of the chain at these sizes (the tuning chain's choice for its
    instance, as the node alone would run), and where they came from."""
    sig = d.registry.op(node.op)
    try:
        canon, attrs = canonical_at(sig, ir, node, env)
        b = bind(sig, dict(canon.inputs), attrs)
        choice = d.params_for(d.registry.instance(instance), b.env)
    except ClforgeError as exc:
        return {}, f"spec defaults ({exc})"
    return dict(choice.params), f"those of node {node.id} {node.op}: {choice.describe()}"


@dataclass
class _Chain:
    """A chain's template data and its kernel arguments at one specialization."""

    context: dict[str, Any]
    tensors: list[TensorSig]  # inputs (the given one of an epilogue left out), outputs
    args: list[Arg]  # buffers, then scalars
    scalars: list[tuple[str, int]]  # each scalar argument's value


def _chain(
    reg: Registry,
    ir: GraphIR,
    fk: FusedKernel,
    env: Mapping[str, int],
    vw: int,
    *,
    given: bool = False,
    cpu: bool = True,
) -> _Chain:
    """The template data of `fk`'s chain at the sizes `env`, `vw` lanes (1: scalar only);
    `given`: in0 is an epilogue's value, not a buffer (and the chain stores nothing itself);
    `cpu`: the kernel is a cpu one, whose float exp/sigmoid/silu/tanh/gelu take
    _common/transcendentals.cl.j2's approximations, as the unary ops' cpu kernels do (the
    generic and gpu ones keep the built-ins)."""
    made = fk.outputs[0][0] if fk.outputs else fk.inputs[0]  # an empty chain: its given value
    out_shape = tuple(x.evaluate(env) for x in ir.value(made).shape)
    n = math.prod(out_shape)
    inputs, scalars, args = [], [], []
    tensors: list[TensorSig] = []
    rank = len(out_shape)
    for k, vid in enumerate(fk.inputs):
        v = ir.value(vid)
        shape = tuple(x.evaluate(env) for x in v.shape)
        kind = "given" if given and k == 0 else _kind(shape, out_shape)
        t = DTYPES[v.dtype]
        name = f"in{k}"
        inputs.append(
            {"name": name, "index": k, "kind": kind, "compute": t.compute, "half": t.cl == "half"}
        )
        if kind == "given":
            continue
        tensors.append(TensorSig(name, ("N",), v.dtype))
        args.append(Arg("input", name, t.cl, v.dtype))
        if kind == "trailing":
            scalars.append((f"{name}_m", math.prod(shape)))
        elif kind == "strided":
            padded = (1,) * (rank - len(shape)) + shape
            strides = layout_strides(padded, 1, "row")
            for a, (st, dim) in enumerate(zip(strides, padded, strict=True)):
                scalars.append((f"{name}_s{a}", 0 if dim == 1 else st))
    strided = any(i["kind"] == "strided" for i in inputs)
    outs = []
    for k, (vid, j) in enumerate(fk.outputs):
        t = DTYPES[ir.value(vid).dtype]
        name = f"out{k}"
        outs.append({"name": name, "var": f"t{j}_", "compute": t.compute, "half": t.cl == "half"})
        if not given:
            tensors.append(TensorSig(name, ("N",), t.name))
            args.append(Arg("output", name, t.cl, t.name))
    dims = [] if given else [("N", n)]
    dims += [(f"D{a}", out_shape[a]) for a in range(rank)] if strided else []
    scalar_args = [*dims, *scalars]
    args.extend(Arg("dim", s, "int") for s, _ in scalar_args)
    ops = []
    fast: list[str] = []
    computes = {f"in{k}": DTYPES[ir.value(v).dtype].compute for k, v in enumerate(fk.inputs)}
    for j, op in enumerate(fk.ops):
        src, dst = DTYPES[op.dtype], DTYPES[op.out]
        sig = reg.op(op.op)
        is_cast = sig.expression(src.is_float) is None
        var = f"t{j}_"
        c = src.compute

        def conv(a: str, w: int, c: str = c) -> str:
            text = f"a{a[2:]}_" if a.startswith("in") else f"{a}_"
            have = computes[a]
            if have == c:
                return text
            return f"convert_{c}{w}({text})" if w > 1 else f"(({c})({text}))"

        use_fast = cpu and op.op in FAST and c == "float" and not is_cast
        if use_fast and op.op not in fast:
            fast.append(op.op)
        ops.append(
            {
                "var": var,
                "op": op.op,
                "sig": None if is_cast else sig,
                "src": src,
                "dst": dst,
                "compute": c,
                "out_compute": dst.compute,
                "vargs": [conv(a, vw) for a in op.args],
                "sargs": [conv(a, 1) for a in op.args],
                "attrs": {} if is_cast else _attrs(sig, op),
                "fast": use_fast,
                "fast_index": fast.index(op.op) if use_fast else -1,
            }
        )
        computes[f"t{j}"] = dst.compute
    context = {
        "graph": ir.name,
        "expression": fk.expression.splitlines(),
        "inputs": inputs,
        "ops": ops,
        "outputs": outs,
        "fast": fast,
        "strided": strided,
        "rank": rank,
        "fp64": any(DTYPES[x].compute == "double" for op in fk.ops for x in (op.dtype, op.out))
        or any(ir.value(v).dtype == "f64" for v in fk.inputs),
        "ipow": any(op.op == "pow" and not DTYPES[op.dtype].is_float for op in fk.ops),
        "pow8": any(op.op == "pow" and DTYPES[op.dtype].compute == "double" for op in fk.ops),
        "result": f"t{len(fk.ops) - 1}_" if fk.ops else "a0_",
        "packed": None,  # an epilogue storing packed for its consumer (plan_epilogue)
    }
    return _Chain(context, tensors, args, scalar_args)


def plan(
    d: Dispatcher,
    ir: GraphIR,
    fk: FusedKernel,
    selections: Mapping[int, str],
    env: Mapping[str, int],
) -> tuple[LaunchPlan, str, str]:
    """The launch plan of `fk` at the sizes `env`, with the tuned parameters of its last node's
    instance (`selections`: node -> instance): CHUNK, and VW (where the last node has none, the
    nearest unary node's); where those came from; the kernel's OpenCL C."""
    reg = d.registry
    sink = ir.node(fk.ops[-1].node)
    instance = selections[sink.id]
    out_shape = tuple(x.evaluate(env) for x in ir.value(fk.outputs[0][0]).shape)
    n = math.prod(out_shape)
    if n > np.iinfo(np.int32).max:
        raise CallError(
            f"graph {ir.name!r}: fused kernel {fk.name} ({' -> '.join(o.op for o in fk.ops)}): "
            f"{n} elements do not fit its 32-bit index (at most {np.iinfo(np.int32).max})"
        )
    chosen, origin = _node_params(d, ir, sink, instance, env)
    needs8 = any(op.op == "pow" and DTYPES[op.dtype].compute != "float" for op in fk.ops)
    params: dict[str, int] = {}
    if "CHUNK" in chosen:
        vw = chosen.get("VW", 0)
        for op in reversed(fk.ops[:-1]):  # a binary last node has no VW: the nearest unary's
            if vw:
                break
            other, _ = _node_params(d, ir, ir.node(op.node), selections[op.node], env)
            vw = other.get("VW", 0)
        vw = 8 if needs8 or not vw else vw
        chunk = chosen["CHUNK"] if chosen["CHUNK"] % vw == 0 else 4096
        params = {"CHUNK": chunk, "VW": vw}
    chain = _chain(reg, ir, fk, env, params.get("VW", 1))
    tensors, args, scalar_args = chain.tensors, chain.args, chain.scalars
    out_tensors = [t for t in tensors if t.name.startswith("out")]
    tensors = [t for t in tensors if not t.name.startswith("out")]
    out_specs = []
    for k, (vid, _) in enumerate(fk.outputs):
        dt = DTYPES[ir.value(vid).dtype].np_dtype
        strides = layout_strides(out_shape, dt.itemsize, "row")
        out_specs.append((f"out{k}", out_shape, dt, strides))
    fused = chain.context
    sink_dtype = DTYPES[fk.ops[-1].dtype]
    sig = OpSig(fk.name, fk.expression, ("N",), tuple(tensors), tuple(out_tensors), (), (), "")
    inst = Instance(
        name=fk.name,
        op=fk.name,
        variant="cpu" if params else "generic",
        dtype=sink_dtype.name,
        layouts=tuple((t.name, "row") for t in (*tensors, *out_tensors)),
        targets=("cpu",) if params else ("generic",),
        priority=0,
        params=tuple(sorted(params.items())),
        guard=None,
        requires=Requirements(),
        args=tuple(args),
        launch=Launch(("cdiv(N, CHUNK)",), ("1",)) if params else Launch(("N",)),
        source="",
        template=TEMPLATE,
    )
    source = _renderer().render(inst, sig, TEMPLATE, {"fused": fused})
    rt = d.runtime
    with rt.lock:
        prog = rt.cache.program(rt.context, rt.device, fk.name, source, "")
        kernel = cl.Kernel(prog, fk.name)
    kernel.set_scalar_arg_dtypes(
        [None if a.kind in ("input", "output") else SCALAR_TYPES[a.ctype] for a in args]
    )
    values = dict(scalar_args)
    bound = tuple(None if a.kind in ("input", "output") else np.int32(values[a.name]) for a in args)
    buffers = tuple((i, a.name) for i, a in enumerate(args) if a.kind in ("input", "output"))
    geo = Geometry((-(-n // params["CHUNK"]),), (1,)) if params else Geometry((n,), None)
    launches = () if geo.empty else (KernelLaunch(kernel, geo, bound, buffers),)
    why = f"{params}: {origin}" if params else f"one element per work-item ({origin})"
    return LaunchPlan(inst, as_params(params), launches, (), tuple(out_specs)), why, source


def _rename(launch: KernelLaunch, names: Mapping[str, str]) -> KernelLaunch:
    return KernelLaunch(
        launch.kernel,
        launch.geometry,
        launch.args,
        tuple((i, names.get(t, t)) for i, t in launch.buffers),
    )


def plan_epilogue(
    d: Dispatcher,
    ir: GraphIR,
    fk: FusedKernel,
    base: LaunchPlan,
    selections: Mapping[int, str],
    env: Mapping[str, int],
    packed: Mapping[str, int] | None = None,
) -> tuple[LaunchPlan, str, str]:
    """The producer's launch plan `base` with the chain `fk` applied at its epilogue point: its
    template rendered with the epilogue (its tuned parameters kept), the chain's inputs added to
    the arguments of the kernel that stores the output. Where the instance chosen at these sizes
    declares no epilogue point, the producer and the chain run as two kernels with a scratch
    buffer between them. Also says which, and gives the OpenCL C. `packed`: the output is
    stored in its consumer's packed panels (graph/handoff.py, `Panels.context`); the caller
    has checked that the instance declares the epilogue point."""
    inst = base.inst
    out = inst.epilogue
    if out is None:
        alone, why, source = plan(d, ir, fk, selections, env)
        (c_name, shape, dt, _) = base.outputs[0]
        hop = "epilogue_"
        both = (
            *(_rename(x, {c_name: hop}) for x in base.launches),
            *(_rename(x, {"in0": hop, "out0": c_name}) for x in alone.launches),
        )
        scratch = (*base.scratch, (hop, math.prod(shape), dt))
        note = (
            f"{inst.name} declares no epilogue point: it and the chain run as two kernels "
            f"(chain {why})"
        )
        return LaunchPlan(inst, base.params, both, scratch, base.outputs), note, source
    params = dict(base.params)
    chain = _chain(
        d.registry, ir, fk, env, params.get("VW", 1), given=True, cpu="cpu" in inst.targets
    )
    chain.context["packed"] = dict(packed) if packed else None
    extra = chain.args
    writer = next((s for s in inst.kernels if out in s.writes), inst.kernels[0])
    if inst.steps:
        steps = tuple(
            dataclasses.replace(s, args=s.args + tuple(extra)) if s is writer else s
            for s in inst.steps
        )
        tuned = dataclasses.replace(inst, params=tuple(sorted(params.items())), steps=steps)
    else:
        tuned = dataclasses.replace(
            inst, params=tuple(sorted(params.items())), args=inst.args + tuple(extra)
        )
    reg = d.registry
    tree = reg.tree_of(inst)
    renderer = _renderer() if tree is None else _renderer_of(tree)
    source = renderer.render(tuned, reg.op(inst.op), inst.template, {"epilogue": chain.context})
    rt = d.runtime
    with rt.lock:
        prog = rt.cache.program(rt.context, rt.device, inst.name, source, inst.build_options)
    values = dict(chain.scalars)
    launches = []
    for x in base.launches:
        kernel = cl.Kernel(prog, x.kernel.function_name)
        step = next(s for s in tuned.kernels if s.kernel == x.kernel.function_name)
        kernel.set_scalar_arg_dtypes(
            [None if a.kind in ("input", "output") else SCALAR_TYPES[a.ctype] for a in step.args]
        )
        args, buffers = x.args, x.buffers
        if step.name == writer.name:
            first = len(args)
            args = args + tuple(
                None if a.kind == "input" else np.int32(values[a.name]) for a in extra
            )
            buffers = buffers + tuple(
                (first + i, a.name) for i, a in enumerate(extra) if a.kind == "input"
            )
        launches.append(KernelLaunch(kernel, x.geometry, args, buffers))
    note = f"{inst.name} with the chain at its epilogue point (one kernel stores {out})"
    if not fk.ops:
        note = f"{inst.name} storing {out} through its epilogue point"
    if packed:
        note += f", in its reader's packed panels of {packed['R']} rows"
    plan_ = LaunchPlan(tuned, base.params, tuple(launches), base.scratch, base.outputs)
    return plan_, note, source
