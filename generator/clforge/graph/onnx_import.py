"""An ONNX model as a :class:`~clforge.graph.capture.Graph`: each node becomes the ``g.ops``
call (or view) of the clforge op that computes it, its attributes mapped as the ONNX operator
set defines them; initializers (and ``Constant`` nodes) become constants; an input's
``dim_param`` becomes a graph dim of that name (an axis with neither a value nor a name gets
``<input>_<axis>``). A model with nodes clforge has no op for fails once, with a GraphError that
names every such operator and its nodes, before anything is recorded.

Shape-like inputs (``Reshape``'s shape, ``Reduce*``'s and ``Squeeze``'s axes from opset 13 or
18 on) are read at import: initializers, ``Constant`` outputs, or shape subgraphs (``Shape`` →
``Gather`` → ``Concat`` ...) folded into symbolic dims (:mod:`clforge.graph.onnx_shapes`), never
computed by the graph. The ``onnx`` package is an optional extra (``pip install
'clforge[onnx]'``); this module imports it when called.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from clforge.call.compiled import TensorType
from clforge.errors import GraphError
from clforge.graph import onnx_shapes as sym
from clforge.graph.capture import Graph, GraphValue
from clforge.graph.dims import Dim
from clforge.graph.onnx_patterns import OnnxNode, fold_erf_gelu
from clforge.graph.onnx_shapes import SymShape
from clforge.graph.shapes import same_size

# ONNX TensorProto element types clforge has
_DTYPES = {1: "f32", 10: "f16", 11: "f64", 6: "i32"}
_CASTS = {1: "cast_f32", 10: "cast_f16", 11: "cast_f64", 6: "cast_i32"}
_UNARY = {
    "Abs": "abs",
    "Exp": "exp",
    "Log": "log",
    "Neg": "neg",
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Sqrt": "sqrt",
    "Tanh": "tanh",
}
_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow"}
_VARIADIC = {"Max": "maximum", "Min": "minimum", "Sum": "add"}
_REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min"}
# the opset from which a reduction takes its axes as an input, not an attribute
_AXES_INPUT_FROM = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18}

# a graph value, an array known at import (not yet a constant), or an integer tensor known at
# import as symbolic dims (a shape subgraph's value)
Operand = GraphValue | np.ndarray | SymShape


class _Importer:
    def __init__(self, g: Graph, opset: int) -> None:
        self.g = g
        self.opset = opset
        self.values: dict[str, Operand] = {}

    # --- operands -----------------------------------------------------------------------------

    def value(self, node: OnnxNode, name: str) -> GraphValue:
        """Input `name` as a graph value (an array known at import becomes a constant here)."""
        v = self.values[name]
        if isinstance(v, SymShape):
            if not v.is_int:
                raise self.fail(
                    node,
                    f"input {name!r} is the shape {v}, folded at import from symbolic dims; it is "
                    "taken as a shape (Reshape's), not as a tensor",
                )
            v = v.array()
        if isinstance(v, np.ndarray):
            if v.dtype in (np.bool_, np.int64):
                v = self._narrowed(node, name, v)
            v = self.g.constant(v, _safe(name))
            self.values[name] = v
        return v

    def _narrowed(self, node: OnnxNode, name: str, v: np.ndarray) -> np.ndarray:
        """A bool or int64 constant used as a tensor: i32 (clforge's integer dtype; a where's
        condition is i32), refused if a value does not fit."""
        if v.size and (v.min() < -(2**31) or v.max() >= 2**31):
            raise GraphError(
                f"graph {self.g.name!r}: {node.where}: input {name!r} is int64 with values "
                "beyond int32 (clforge's integer dtype)"
            )
        return v.astype(np.int32)

    def known(self, node: OnnxNode, name: str, what: str) -> np.ndarray:
        """Input `name` as an array known at import (an initializer or a Constant's output)."""
        v = self.values.get(name)
        if isinstance(v, SymShape) and v.is_int:
            return v.array()
        if not isinstance(v, np.ndarray):
            raise GraphError(
                f"graph {self.g.name!r}: {node.where}: {what} ({name!r}) must be an initializer "
                "or a Constant, or a shape subgraph that folds to ints, not computed by the graph"
            )
        return v

    def dims(self, node: OnnxNode, name: str, what: str) -> SymShape:
        """Input `name` as dims known at import: an integer initializer or Constant, or a shape
        subgraph's value (``Shape`` → ``Gather`` → ``Concat`` ...)."""
        v = self.values.get(name)
        if isinstance(v, SymShape):
            return v
        if isinstance(v, np.ndarray):
            try:
                return SymShape.of(v)
            except GraphError as exc:
                raise self.fail(node, f"{what} ({name!r}): {exc}") from None
        raise self.fail(
            node,
            f"{what} ({name!r}) must be an initializer, a Constant, or computed from shapes "
            "(Shape, Gather, Slice, Concat, Unsqueeze, Squeeze, Add, Sub, Mul, Div, Cast), not "
            "computed by the graph from data",
        )

    def is_shape(self, name: str) -> bool:
        """Whether input `name` is an integer tensor of rank 0 or 1 known at import."""
        v = self.values.get(name)
        return isinstance(v, SymShape) or (
            isinstance(v, np.ndarray) and v.ndim <= 1 and np.issubdtype(v.dtype, np.integer)
        )

    def ints(self, node: OnnxNode, name: str, what: str) -> tuple[int, ...]:
        return tuple(int(n) for n in self.known(node, name, what).reshape(-1))

    def optional(self, node: OnnxNode, k: int) -> GraphValue | None:
        return self.value(node, node.inputs[k]) if len(node.inputs) > k and node.inputs[k] else None

    def fail(self, node: OnnxNode, why: str) -> GraphError:
        return GraphError(f"graph {self.g.name!r}: {node.where}: {why}")


Handler = Callable[[_Importer, OnnxNode], Sequence[Operand]]


def _unary(op: str) -> Handler:
    return lambda im, n: [getattr(im.g.ops, op)(im.value(n, n.inputs[0]))]


def _binary(op: str) -> Handler:
    def handle(im: _Importer, n: OnnxNode) -> list[Operand]:
        if op != "pow" and all(im.is_shape(x) for x in n.inputs[:2]):
            a_dims, b_dims = (im.dims(n, x, "an operand") for x in n.inputs[:2])
            return [_folded(im, n, lambda: sym.arith(n.op_type, a_dims, b_dims))]
        a, b = (im.value(n, x) for x in n.inputs[:2])
        return [getattr(im.g.ops, op)(a, b)]

    return handle


def _variadic(op: str) -> Handler:
    def handle(im: _Importer, n: OnnxNode) -> list[Operand]:
        out = im.value(n, n.inputs[0])
        for x in n.inputs[1:]:
            out = getattr(im.g.ops, op)(out, im.value(n, x))
        return [out]

    return handle


def _identity(im: _Importer, n: OnnxNode) -> list[Operand]:
    return [im.values[n.inputs[0]]]


def _dropout(im: _Importer, n: OnnxNode) -> list[Operand]:
    """Inference: the input as it is (no mask output, no training mode)."""
    if len([o for o in n.outputs if o]) > 1:
        raise im.fail(n, "its mask output is not supported (inference: Y only)")
    training = len(n.inputs) > 2 and bool(n.inputs[2])
    if training and bool(im.known(n, n.inputs[2], "training_mode").reshape(-1)[0]):
        raise im.fail(n, "training_mode is true; graphs run inference")
    return [im.values[n.inputs[0]]]


def _reciprocal(im: _Importer, n: OnnxNode) -> list[Operand]:
    return [im.g.ops.div(1.0, im.value(n, n.inputs[0]))]


def _constant(im: _Importer, n: OnnxNode) -> list[Operand]:
    from onnx import numpy_helper

    if "value" in n.attrs:
        return [numpy_helper.to_array(n.attrs["value"])]
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if key in n.attrs:
            return [np.array(n.attrs[key], dtype)]
    for key, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if key in n.attrs:
            return [np.array(list(n.attrs[key]), dtype)]
    raise im.fail(n, f"takes value, value_float(s) or value_int(s), not {sorted(n.attrs)}")


def _matmul(im: _Importer, n: OnnxNode) -> list[Operand]:
    return [im.g.ops.matmul(im.value(n, n.inputs[0]), im.value(n, n.inputs[1]))]


def _gemm(im: _Importer, n: OnnxNode) -> list[Operand]:
    a, b = im.value(n, n.inputs[0]), im.value(n, n.inputs[1])
    c = im.optional(n, 2)
    kw: dict[str, Any] = {}  # clforge's defaults left out, so the node reads as one written
    for attr, option in (("transA", "trans_a"), ("transB", "trans_b")):
        if n.attrs.get(attr, 0):
            kw[option] = True
    if _f32(n.attrs.get("alpha", 1.0)) != 1.0:
        kw["alpha"] = _f32(n.attrs["alpha"])
    if c is not None:  # ONNX's beta defaults to 1, clforge's to 0 (no bias)
        kw["beta"] = _f32(n.attrs.get("beta", 1.0))
    return [im.g.ops.gemm(a, b, c, **kw)]


def _gelu(im: _Importer, n: OnnxNode) -> list[Operand]:
    approx = n.attrs.get("approximate", b"none")
    approx = approx.decode() if isinstance(approx, bytes) else str(approx)
    if approx not in ("none", "tanh"):
        raise im.fail(n, f"approximate must be 'none' or 'tanh', got {approx!r}")
    return [im.g.ops.gelu(im.value(n, n.inputs[0]), approximate=int(approx == "tanh"))]


def _leaky_relu(im: _Importer, n: OnnxNode) -> list[Operand]:
    x = im.value(n, n.inputs[0])
    return [im.g.ops.leaky_relu(x, alpha=_f32(n.attrs.get("alpha", 0.01)))]


def _softmax(op: str) -> Handler:
    def handle(im: _Importer, n: OnnxNode) -> list[Operand]:
        x = im.value(n, n.inputs[0])
        if im.opset >= 13:
            return [getattr(im.g.ops, op)(x, axis=int(n.attrs.get("axis", -1)))]
        # before opset 13: the input flattened to 2-d at `axis`, the op over the second axis
        axis = int(n.attrs.get("axis", 1)) % max(x.ndim, 1)
        lead = math.prod(x.shape[:axis], start=Dim.const(1))
        tail = math.prod(x.shape[axis:], start=Dim.const(1))
        flat = getattr(im.g.ops, op)(im.g.reshape(x, (str(lead), str(tail))), axis=-1)
        return [im.g.reshape(flat, tuple(str(d) for d in x.shape))]

    return handle


def _reduce(op: str) -> Handler:
    def handle(im: _Importer, n: OnnxNode) -> list[Operand]:
        x = im.value(n, n.inputs[0])
        if im.opset >= _AXES_INPUT_FROM[n.op_type]:
            axes = im.ints(n, n.inputs[1], "axes") if len(n.inputs) > 1 and n.inputs[1] else ()
        else:
            axes = tuple(int(a) for a in n.attrs.get("axes", ()))
        keepdims = bool(n.attrs.get("keepdims", 1))
        if not axes:
            if n.attrs.get("noop_with_empty_axes", 0):
                return [x]
            axes = tuple(range(x.ndim))
        return [getattr(im.g.ops, op)(x, axis=axes, keepdims=keepdims)]

    return handle


def _argmax(im: _Importer, n: OnnxNode) -> list[Operand]:
    if n.attrs.get("select_last_index", 0):
        raise im.fail(n, "select_last_index=1 is not supported (clforge's argmax takes the first)")
    x = im.value(n, n.inputs[0])
    axis, keepdims = int(n.attrs.get("axis", 0)), bool(n.attrs.get("keepdims", 1))
    return [im.g.ops.argmax(x, axis=axis, keepdims=keepdims)]


def _layer_norm(im: _Importer, n: OnnxNode) -> list[Operand]:
    if len([o for o in n.outputs if o]) > 1:
        raise im.fail(n, "its Mean and InvStdDev outputs are not supported (Y only)")
    x = im.value(n, n.inputs[0])
    axis = int(n.attrs.get("axis", -1))
    if not -x.ndim <= axis < x.ndim:
        raise im.fail(n, f"axis {axis} is out of range for an input of rank {x.ndim}")
    axes = x.ndim - axis % x.ndim
    weights = (im.optional(n, 1), im.optional(n, 2))  # in the normalized shape, as ONNX's
    kw: dict[str, Any] = {"eps": _f32(n.attrs.get("epsilon", 1e-5))}
    if axes != 1:
        kw["axes"] = axes
    return [im.g.ops.layer_norm(x, *weights, **kw)]


def _transpose(im: _Importer, n: OnnxNode) -> list[Operand]:
    x = im.value(n, n.inputs[0])
    perm = n.attrs.get("perm")
    axes = tuple(int(p) for p in perm) if perm is not None else tuple(reversed(range(x.ndim)))
    return [im.g.ops.permute(x, axes=axes)]


def _target(im: _Importer, n: OnnxNode, x: GraphValue, target: SymShape) -> tuple[str, ...]:
    """Reshape's target as dims (ints, or symbolic from a folded shape subgraph): 0 copies the
    input's dim (unless allowzero), -1 takes the rest."""
    allowzero = bool(n.attrs.get("allowzero", 0))
    shape = str(target)
    dims: list[Dim | None] = []
    for i, s in enumerate(target.dims):
        if not s.is_int:
            dims.append(s)
        elif s.value == 0 and not allowzero:
            if i >= x.ndim:
                raise im.fail(n, f"shape {shape}: 0 at axis {i}, past the input's rank")
            dims.append(x.shape[i])
        elif s.value == -1:
            dims.append(None)
        elif s.value < 0:
            raise im.fail(n, f"shape {shape} has {s}")
        else:
            dims.append(s)
    if dims.count(None) > 1:
        raise im.fail(n, f"shape {shape} has more than one -1")
    if None in dims:
        rest = same_size(tuple(x.shape), tuple(d for d in dims if d is not None))
        if rest is None:
            fill = Dim.const(1)
        elif rest[1] == Dim.const(1):
            fill = rest[0]
        else:
            raise im.fail(
                n,
                f"shape {shape}: -1 is not a whole dim for an input of shape "
                f"{tuple(str(d) for d in x.shape)}",
            )
        dims = [fill if d is None else d for d in dims]
    return tuple(str(d) for d in dims if d is not None)


def _reshape(im: _Importer, n: OnnxNode) -> list[Operand]:
    x = im.value(n, n.inputs[0])
    return [im.g.reshape(x, _target(im, n, x, im.dims(n, n.inputs[1], "the shape")))]


def _flatten(im: _Importer, n: OnnxNode) -> list[Operand]:
    x = im.value(n, n.inputs[0])
    axis = int(n.attrs.get("axis", 1)) % (x.ndim + 1) if x.ndim else 0
    lead = math.prod(x.shape[:axis], start=Dim.const(1))
    tail = math.prod(x.shape[axis:], start=Dim.const(1))
    return [im.g.reshape(x, (str(lead), str(tail)))]


def _squeeze(im: _Importer, n: OnnxNode) -> list[Operand]:
    if im.is_shape(n.inputs[0]):
        data = im.dims(n, n.inputs[0], "the input")
        return [_folded(im, n, lambda: sym.squeeze(data))]
    x = im.value(n, n.inputs[0])
    if im.opset >= 13:
        axes = im.ints(n, n.inputs[1], "axes") if len(n.inputs) > 1 and n.inputs[1] else None
    else:
        axes = tuple(int(a) for a in n.attrs["axes"]) if "axes" in n.attrs else None
    one = Dim.const(1)
    if axes is None:
        keep = [d for d in x.shape if d != one]
    else:
        drop = {a % x.ndim for a in axes}
        bad = [a for a in drop if x.shape[a] != one]
        if bad:
            raise im.fail(n, f"axis {bad[0]} of {x.name} is {x.shape[bad[0]]}, not 1")
        keep = [d for i, d in enumerate(x.shape) if i not in drop]
    return [im.g.reshape(x, tuple(str(d) for d in keep))]


def _unsqueeze(im: _Importer, n: OnnxNode) -> list[Operand]:
    if im.opset >= 13:
        axes = im.ints(n, n.inputs[1], "axes")
    else:
        axes = tuple(int(a) for a in n.attrs["axes"])
    if im.is_shape(n.inputs[0]) and im.dims(n, n.inputs[0], "the input").scalar:
        data = im.dims(n, n.inputs[0], "the input")
        return [_folded(im, n, lambda: sym.unsqueeze(data, axes))]
    x = im.value(n, n.inputs[0])
    rank = x.ndim + len(axes)
    at = {a % rank for a in axes}
    rest = iter(x.shape)
    return [im.g.reshape(x, tuple("1" if i in at else str(next(rest)) for i in range(rank)))]


def _cast(im: _Importer, n: OnnxNode) -> list[Operand]:
    to = int(n.attrs["to"])
    if isinstance(im.values[n.inputs[0]], SymShape) and to in (6, 7):  # int32, int64
        return [im.values[n.inputs[0]]]
    if to not in _CASTS:
        raise im.fail(n, f"to={to}: clforge casts to f16, f32, f64 and i32 only")
    return [getattr(im.g.ops, _CASTS[to])(im.value(n, n.inputs[0]))]


def _where(im: _Importer, n: OnnxNode) -> list[Operand]:
    cond, x, y = (im.value(n, k) for k in n.inputs[:3])
    return [im.g.ops.where(cond, x, y)]


def _clip(im: _Importer, n: OnnxNode) -> list[Operand]:
    x = im.value(n, n.inputs[0])
    if im.opset >= 11:
        lo, hi = im.optional(n, 1), im.optional(n, 2)
    else:
        lo = im.g.constant(np.float32(n.attrs["min"])) if "min" in n.attrs else None
        hi = im.g.constant(np.float32(n.attrs["max"])) if "max" in n.attrs else None
    return [im.g.ops.clip(x, lo, hi)]


def _attention(im: _Importer, n: OnnxNode) -> list[Operand]:
    """ONNX's Attention (opset 23): q, k, v of rank 4 (B, H, S, D) and an optional attn_mask
    (boolean: True takes part, as an initializer or a Constant; or additive, of q's type),
    broadcast to (B, H, SQ, SK); no past keys or extra outputs; is_causal, scale and softcap as
    clforge's attention takes them."""
    extra = [k for k in n.inputs[4:] if k] + [o for o in n.outputs[1:] if o]
    if extra:
        raise im.fail(
            n,
            "takes q, k, v and attn_mask only (no past key/value, nonpad_kv_seqlen or extra "
            "outputs)",
        )
    q, k, v = (im.value(n, x) for x in n.inputs[:3])
    if q.ndim != 4:
        raise im.fail(
            n, f"q has rank {q.ndim}; the 3-d form (heads in the last axis) is not supported"
        )
    kw: dict[str, Any] = {"causal": bool(n.attrs.get("is_causal", 0))}
    if "scale" in n.attrs:
        kw["scale"] = _f32(n.attrs["scale"])
    if n.attrs.get("softcap", 0.0):
        kw["softcap"] = _f32(n.attrs["softcap"])
    if q.shape[1] != k.shape[1]:
        kw["enable_gqa"] = True
    if len(n.inputs) > 3 and n.inputs[3]:
        mask = im.values[n.inputs[3]]
        is_bool = isinstance(mask, np.ndarray) and mask.dtype == np.bool_
        kw["mask"] = mask if is_bool else im.value(n, n.inputs[3])  # a keep mask, or additive
    return [im.g.ops.attention(q, k, v, **kw)]


def _folded(im: _Importer, n: OnnxNode, fold: Callable[[], SymShape]) -> SymShape:
    """A shape subgraph's node evaluated at import; what cannot be is refused, naming it."""
    try:
        return fold()
    except GraphError as exc:
        raise im.fail(n, f"cannot fold this shape computation at import: {exc}") from None


def _shape(im: _Importer, n: OnnxNode) -> list[Operand]:
    """ONNX's Shape (``start``, ``end`` from opset 15): the input's dims, symbolic or not."""
    x = im.values[n.inputs[0]]
    if isinstance(x, SymShape):
        dims: tuple[Dim, ...] = () if x.scalar else (Dim.const(len(x.dims)),)
    elif isinstance(x, np.ndarray):
        dims = tuple(Dim.const(int(s)) for s in x.shape)
    else:
        dims = x.shape
    start, end = int(n.attrs.get("start", 0)), n.attrs.get("end")
    return [SymShape(dims[slice(start, None if end is None else int(end))])]


def _data(im: _Importer, n: OnnxNode, k: int, why: str) -> None:
    """Refuse a data tensor (a graph value) where only shapes are folded."""
    if isinstance(im.values.get(n.inputs[k]), GraphValue):
        raise im.fail(n, f"input {n.inputs[k]!r} is a tensor the graph computes; {why}")


def _gather(im: _Importer, n: OnnxNode) -> list[Operand]:
    _data(im, n, 0, "Gather is taken on shapes (folded at import) and initializers only")
    data, indices = im.values[n.inputs[0]], im.known(n, n.inputs[1], "the indices")
    axis = int(n.attrs.get("axis", 0))
    if isinstance(data, np.ndarray):
        return [np.take(data, indices, axis=axis)]
    if axis != 0:
        raise im.fail(n, f"axis {axis} of a shape of rank 1")
    return [_folded(im, n, lambda: sym.gather(im.dims(n, n.inputs[0], "the data"), indices))]


def _slice(im: _Importer, n: OnnxNode) -> list[Operand]:
    """ONNX's Slice: of a shape, folded at import; of a data tensor, a view (``g.slice`` per
    axis, step 1)."""
    if im.opset >= 10:
        starts, ends = (im.dims(n, n.inputs[k], what) for k, what in ((1, "starts"), (2, "ends")))
        axes = im.ints(n, n.inputs[3], "axes") if len(n.inputs) > 3 and n.inputs[3] else None
        steps = im.ints(n, n.inputs[4], "steps") if len(n.inputs) > 4 and n.inputs[4] else None
    else:
        starts, ends = (SymShape.of(np.array(n.attrs[k], np.int64)) for k in ("starts", "ends"))
        axes, steps = tuple(n.attrs["axes"]) if "axes" in n.attrs else None, None
    axes = axes if axes is not None else tuple(range(len(starts.dims)))
    steps = steps if steps is not None else (1,) * len(axes)
    if not len(starts.dims) == len(ends.dims) == len(axes) == len(steps):
        raise im.fail(
            n, f"starts {starts}, ends {ends}, axes {axes}, steps {steps} differ in length"
        )
    data = im.values[n.inputs[0]]
    if isinstance(data, GraphValue):
        return [_data_slice(im, n, data, starts.dims, ends.dims, axes, steps)]
    shape = im.dims(n, n.inputs[0], "the data")
    if shape.scalar or tuple(axes) not in ((0,), (-1,)):
        raise im.fail(n, f"a shape has one axis: starts {starts}, axes {axes}")
    lo, hi = starts.dims[0], ends.dims[0]
    if not (lo.is_int and hi.is_int):
        raise im.fail(n, f"a slice of the shape {shape} from {lo} to {hi} is not folded")
    return [_folded(im, n, lambda: sym.slice_(shape, lo.value, hi.value, steps[0]))]


_TO_THE_END = 2**31 - 1  # an end at or past this is "to the end" (exporters write INT64_MAX)


def _data_slice(
    im: _Importer,
    n: OnnxNode,
    x: GraphValue,
    starts: tuple[Dim, ...],
    ends: tuple[Dim, ...],
    axes: Sequence[int],
    steps: Sequence[int],
) -> GraphValue:
    """A Slice of a graph tensor as views, one ``g.slice`` per axis: negative bounds count from
    the end, an end past the axis is the axis's size; bounds the axis's size would clamp at a
    symbolic size are checked by the call's guards instead."""
    for lo, hi, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step != 1:
            raise im.fail(n, f"step {step} along axis {axis}: a strided slice is not a view")
        if not -x.ndim <= axis < x.ndim:
            raise im.fail(n, f"axis {axis} is out of range for an input of rank {x.ndim}")
        size = x.shape[axis % x.ndim]
        bounds = [_bound(b, size) for b in (lo, hi)]
        if bounds == [Dim.const(0), size]:
            continue
        x = im.g.slice(x, str(bounds[0]), str(bounds[1]), axis=axis % x.ndim)
    return x


def _expand(im: _Importer, n: OnnxNode) -> list[Operand]:
    """ONNX's Expand where it is a view: to the input's own dims, or with leading axes of 1 (a
    reshape); a broadcast that would copy the input is refused."""
    target = im.dims(n, n.inputs[1], "the shape")
    x = im.values[n.inputs[0]]
    if isinstance(x, SymShape):
        x = im.value(n, n.inputs[0])
    if isinstance(x, np.ndarray):
        if not target.is_int:
            raise im.fail(n, f"a constant expanded to the symbolic shape {target} is not taken")
        shape = tuple(int(v) for v in target.array().reshape(-1))
        return [np.broadcast_to(x, np.broadcast_shapes(x.shape, shape)).copy()]
    rank = max(x.ndim, len(target.dims))
    ours = (Dim.const(1),) * (rank - x.ndim) + tuple(x.shape)
    theirs = (Dim.const(1),) * (rank - len(target.dims)) + target.dims
    out = [a if b in (a, Dim.const(1)) else b for a, b in zip(ours, theirs, strict=True)]
    if out != list(ours):
        raise im.fail(
            n,
            f"expanding {x.name} {[str(d) for d in x.shape]} to {target} would copy it (a "
            "materialized broadcast); graphs take Expand as a view only (its consumers "
            "broadcast by themselves)",
        )
    return [x if rank == x.ndim else im.g.reshape(x, tuple(str(d) for d in ours))]


def _bound(b: Dim, size: Dim) -> Dim:
    """A Slice's bound on an axis of `size`: from the end if negative, the size if past it."""
    if b.is_int and b.value >= _TO_THE_END:
        return size
    out = size + b if b.is_int and b.value < 0 else b
    return Dim.const(min(max(out.value, 0), size.value)) if out.is_int and size.is_int else out


def _split(im: _Importer, n: OnnxNode) -> list[Operand]:
    """ONNX's Split of a data tensor: one view (``g.slice``) per output, of the sizes its
    `split` input (or attribute, before opset 13) gives, else equal parts (the axis's size a
    multiple of the outputs' count)."""
    x = im.values[n.inputs[0]]
    if not isinstance(x, GraphValue):
        raise im.fail(n, "Split is taken on tensors the graph computes (a view of each part)")
    axis = int(n.attrs.get("axis", 0))
    if not -x.ndim <= axis < x.ndim:
        raise im.fail(n, f"axis {axis} is out of range for an input of rank {x.ndim}")
    axis %= x.ndim
    size = x.shape[axis]
    if len(n.inputs) > 1 and n.inputs[1]:
        parts = [Dim.const(v) for v in im.ints(n, n.inputs[1], "split")]
    elif "split" in n.attrs:
        parts = [Dim.const(int(v)) for v in n.attrs["split"]]
    else:
        count = len(n.outputs)
        if not size.is_int or size.value % count:
            raise im.fail(n, f"an axis of size {size} does not split into {count} equal parts")
        parts = [Dim.const(size.value // count)] * count
    if len(parts) != len(n.outputs):
        raise im.fail(n, f"{len(parts)} split sizes for {len(n.outputs)} outputs")
    out: list[Operand] = []
    lo = Dim.const(0)
    for part in parts:
        hi = lo + part
        out.append(im.g.slice(x, str(lo), str(hi), axis=axis))
        lo = hi
    if size.is_int and lo.is_int and lo.value != size.value:
        raise im.fail(n, f"split sizes {[str(p) for p in parts]} do not add up to {size}")
    return out


def _concat(im: _Importer, n: OnnxNode) -> list[Operand]:
    for k in range(len(n.inputs)):
        _data(im, n, k, "Concat is taken on shapes (folded at import) only")
    parts = [im.dims(n, x, "an input") for x in n.inputs if x]
    return [_folded(im, n, lambda: sym.concat(parts))]


def _constant_of_shape(im: _Importer, n: OnnxNode) -> list[Operand]:
    from onnx import numpy_helper

    shape = im.dims(n, n.inputs[0], "the shape")
    if not shape.is_int:
        raise im.fail(
            n, f"the shape {shape} is symbolic; a filled tensor of a symbolic size is not taken"
        )
    fill = numpy_helper.to_array(n.attrs["value"]) if "value" in n.attrs else np.zeros(1, "f4")
    return [np.full(tuple(shape.array().reshape(-1)), fill.reshape(-1)[0], fill.dtype)]


def _window(im: _Importer, n: OnnxNode, x: GraphValue) -> dict[str, Any]:
    """A Conv's or a pool's strides, pads (the same at both ends of an axis) and dilations as
    clforge's (h, w) pairs; 2-d only, explicit padding only."""
    if x.ndim != 4:
        raise im.fail(n, f"takes 4-d (N, C, H, W) input, not rank {x.ndim}")
    auto = n.attrs.get("auto_pad", b"NOTSET")
    if (auto.decode() if isinstance(auto, bytes) else str(auto)) != "NOTSET":
        raise im.fail(n, f"auto_pad={auto!r} is not supported (give pads)")
    pads = tuple(int(p) for p in n.attrs.get("pads", (0, 0, 0, 0)))
    if pads[:2] != pads[2:]:
        raise im.fail(n, f"pads {pads}: clforge pads both ends of an axis alike")
    kw: dict[str, Any] = {}
    for attr, option, default in (("strides", "stride", 1), ("dilations", "dilation", 1)):
        pair = tuple(int(v) for v in n.attrs.get(attr, (default, default)))
        if pair != (default, default):
            kw[option] = pair
    if pads != (0, 0, 0, 0):
        kw["padding"] = pads[:2]
    return kw


def _conv(im: _Importer, n: OnnxNode) -> list[Operand]:
    x, w = im.value(n, n.inputs[0]), im.value(n, n.inputs[1])
    kw = _window(im, n, x)
    if int(n.attrs.get("group", 1)) != 1:
        kw["groups"] = int(n.attrs["group"])
    return [im.g.ops.conv2d(x, w, im.optional(n, 2), **kw)]


def _pool(op: str) -> Handler:
    def handle(im: _Importer, n: OnnxNode) -> list[Operand]:
        if len([o for o in n.outputs if o]) > 1:
            raise im.fail(n, "its Indices output is not supported")
        x = im.value(n, n.inputs[0])
        kw = _window(im, n, x)
        kw["kernel_size"] = tuple(int(k) for k in n.attrs["kernel_shape"])
        kw.setdefault("stride", 1)  # ONNX's strides default to 1, clforge's to the kernel size
        if n.attrs.get("ceil_mode", 0):
            kw["ceil_mode"] = True
        if op == "avg_pool2d":  # ONNX leaves the padding out of the average unless asked
            kw["count_include_pad"] = bool(n.attrs.get("count_include_pad", 0))
        return [getattr(im.g.ops, op)(x, **kw)]

    return handle


def _batch_norm(im: _Importer, n: OnnxNode) -> list[Operand]:
    if len([o for o in n.outputs if o]) > 1 or n.attrs.get("training_mode", 0):
        raise im.fail(n, "inference only (one output, training_mode=0)")
    x, scale, bias, mean, var = (im.value(n, k) for k in n.inputs[:5])
    eps = _f32(n.attrs.get("epsilon", 1e-5))
    return [im.g.ops.batch_norm(x, mean, var, scale, bias, eps=eps)]


HANDLERS: dict[str, Handler] = {
    **{k: _unary(v) for k, v in _UNARY.items()},
    **{k: _binary(v) for k, v in _BINARY.items()},
    **{k: _variadic(v) for k, v in _VARIADIC.items()},
    **{k: _reduce(v) for k, v in _REDUCE.items()},
    "ArgMax": _argmax,
    "Attention": _attention,
    "AveragePool": _pool("avg_pool2d"),
    "BatchNormalization": _batch_norm,
    "Cast": _cast,
    "Clip": _clip,
    "Concat": _concat,
    "Constant": _constant,
    "ConstantOfShape": _constant_of_shape,
    "Dropout": _dropout,
    "Expand": _expand,
    "Conv": _conv,
    "Flatten": _flatten,
    "Gather": _gather,
    "Gelu": _gelu,
    "Gemm": _gemm,
    "Identity": _identity,
    "LayerNormalization": _layer_norm,
    "LeakyRelu": _leaky_relu,
    "LogSoftmax": _softmax("log_softmax"),
    "MatMul": _matmul,
    "MaxPool": _pool("max_pool2d"),
    "Reciprocal": _reciprocal,
    "Reshape": _reshape,
    "Shape": _shape,
    "Slice": _slice,
    "Split": _split,
    "Softmax": _softmax("softmax"),
    "Squeeze": _squeeze,
    "Transpose": _transpose,
    "Unsqueeze": _unsqueeze,
    "Where": _where,
}


def supported_onnx_ops() -> list[str]:
    """The ONNX operators the importer maps onto clforge's ops."""
    return sorted(HANDLERS)


def from_onnx(model: Any, name: str | None = None) -> Graph:
    """An ONNX model (a ``ModelProto``, or the path of an ``.onnx`` file) as a graph, not yet
    compiled; `name`: the graph's (default: the ONNX graph's name)."""
    try:
        import onnx
    except ModuleNotFoundError:
        raise GraphError(
            "importing ONNX needs the onnx package: pip install 'clforge[onnx]'"
        ) from None
    from onnx import helper, numpy_helper

    if isinstance(model, (str, Path)):
        try:
            model = onnx.load(str(model))
        except Exception as exc:  # a missing file, or bytes protobuf cannot parse
            raise GraphError(f"{model}: not a readable ONNX model ({exc})") from None
    if not isinstance(model, onnx.ModelProto):
        raise GraphError(
            f"from_onnx takes an onnx.ModelProto or a path, not {type(model).__name__}"
        )
    opset = next(
        (o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        onnx.defs.onnx_opset_version(),
    )
    graph = model.graph
    g = Graph(name or graph.name or "onnx")
    nodes = [
        OnnxNode(
            n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}",
            n.name or f"#{i}",
            tuple(n.input),
            tuple(n.output),
            {a.name: helper.get_attribute_value(a) for a in n.attribute},
        )
        for i, n in enumerate(graph.node)
    ]
    known = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    for n in nodes:
        if n.op_type == "Constant" and "value" in n.attrs:
            known[n.outputs[0]] = numpy_helper.to_array(n.attrs["value"])
    nodes = fold_erf_gelu(nodes, known, [o.name for o in graph.output])
    missing: dict[str, list[str]] = {}
    for n in nodes:
        if n.op_type not in HANDLERS:
            missing.setdefault(n.op_type, []).append(n.name)
    if missing:
        shown = "; ".join(f"{op} ({', '.join(map(repr, names))})" for op, names in missing.items())
        erf = (
            " Erf is taken only within GELU's x * 0.5 * (1 + erf(x / sqrt(2)))."
            if "Erf" in missing
            else ""
        )
        raise GraphError(
            f"graph {g.name!r}: clforge has no op for {len(missing)} ONNX operator"
            f"{'s' if len(missing) > 1 else ''} of this model: {shown} (the importer takes "
            f"{', '.join(supported_onnx_ops())}).{erf}"
        )
    im = _Importer(g, opset)
    for init in graph.initializer:
        im.values[init.name] = known[init.name]
    for inp in graph.input:
        if inp.name in im.values:  # an initializer listed as an input too (older exporters)
            continue
        im.values[inp.name] = g.input(inp.name, _tensor_type(g, inp))
    for n in nodes:
        try:
            outs = HANDLERS[n.op_type](im, n)
        except GraphError as exc:  # a capture error in the graph's words: say which node
            if n.where in str(exc):
                raise
            raise GraphError(f"{exc} (ONNX {n.where})") from None
        for key, out in zip(n.outputs, outs, strict=False):
            if key:
                im.values[key] = out
    for out in graph.output:
        if out.name not in im.values:
            raise GraphError(f"graph {g.name!r}: output {out.name!r} is computed by no node")
        g.output(im.value(OnnxNode("output", out.name, (), (), {}), out.name))
    return g


def _tensor_type(g: Graph, inp: Any) -> TensorType:
    t = inp.type.tensor_type
    if t.elem_type not in _DTYPES:
        raise GraphError(
            f"graph {g.name!r}: input {inp.name!r} has ONNX element type {t.elem_type}; clforge "
            "takes float, float16, double and int32"
        )
    if not t.HasField("shape"):
        raise GraphError(f"graph {g.name!r}: input {inp.name!r} has no shape (its rank is needed)")
    dims: list[int | str] = []
    for axis, d in enumerate(t.shape.dim):
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.dim_param:
            dims.append(_safe(d.dim_param))
        else:
            dims.append(f"{_safe(inp.name)}_{axis}")
    return TensorType(_DTYPES[t.elem_type], tuple(dims))


def _f32(value: Any) -> float:
    """An ONNX float attribute (stored as float32) as the shortest decimal that float32 reads
    back the same: epsilon 1e-5, not 9.999999747378752e-06."""
    return float(str(np.float32(value)))


def _safe(name: str) -> str:
    """An ONNX name as a clforge name (a dim or a constant's): letters, digits and _."""
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else f"_{out}"


__all__ = ["HANDLERS", "from_onnx", "supported_onnx_ops"]
