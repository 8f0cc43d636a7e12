"""Capture: a graph built in Python from the ops users already call, recorded, not run.

``g.ops.<op>(...)`` takes exactly the arguments of the eager ``clforge.ops.<op>`` (inputs by
position in the spec's order, the calling convention's options and the op's attributes by
keyword) with graph values, Python numbers (weak scalars: they take the other inputs' dtype)
or None (an omitted optional input) in place of arrays. Each call is checked and its shapes
inferred at once (:mod:`clforge.graph.shapes`), so a mismatch is an error where it is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from clforge.call.compiled import TensorType
from clforge.conventions import CONVENTIONS
from clforge.core.dtypes import DTYPES, dtype_of_numpy
from clforge.errors import GraphError
from clforge.graph.dims import Dim, shape_str
from clforge.graph.records import GraphIR, Guard, Node, Value, fresh_name, value_id
from clforge.graph.shapes import KEEP_MASKS, SUPPORTED_CONVENTIONS, infer, same_size
from clforge.registry import loader as registry_mod
from clforge.registry.records import OpSig

if TYPE_CHECKING:
    from clforge.graph.artifact import Model

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, eq=False)
class GraphValue:
    """A handle on a value of a graph being built: its name, dtype and symbolic shape."""

    graph: Graph
    id: int

    @property
    def _value(self) -> Value:
        return self.graph._values[self.id]

    @property
    def name(self) -> str:
        return self._value.name

    @property
    def dtype(self) -> str:
        return self._value.dtype

    @property
    def shape(self) -> tuple[Dim, ...]:
        return self._value.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"GraphValue({self._value.describe()})"

    # the operators record the ops of the same names
    def __add__(self, other: Any) -> GraphValue:
        return self.graph.ops.add(self, other)

    def __radd__(self, other: Any) -> GraphValue:
        return self.graph.ops.add(other, self)

    def __sub__(self, other: Any) -> GraphValue:
        return self.graph.ops.sub(self, other)

    def __rsub__(self, other: Any) -> GraphValue:
        return self.graph.ops.sub(other, self)

    def __mul__(self, other: Any) -> GraphValue:
        return self.graph.ops.mul(self, other)

    def __rmul__(self, other: Any) -> GraphValue:
        return self.graph.ops.mul(other, self)

    def __truediv__(self, other: Any) -> GraphValue:
        return self.graph.ops.div(self, other)

    def __matmul__(self, other: Any) -> GraphValue:
        return self.graph.ops.matmul(self, other)

    def __neg__(self) -> GraphValue:
        return self.graph.ops.neg(self)


class OpRecorder:
    """``g.ops``: one recording function per op that graphs support, with the eager
    function's arguments."""

    def __init__(self, graph: Graph) -> None:
        self._graph = graph

    def __getattr__(self, op: str) -> Any:
        if op.startswith("_"):
            raise AttributeError(op)
        sig = self._graph._sig(op)

        def record(*inputs: Any, **kwargs: Any) -> Any:
            return self._graph._record(sig, inputs, kwargs)

        record.__name__ = op
        record.__doc__ = sig.doc
        return record

    def __dir__(self) -> list[str]:
        return supported_ops()


def supported_ops() -> list[str]:
    """The ops a graph can record (those whose calling convention graphs support)."""
    reg = registry_mod.default()
    return sorted(n for n, s in reg.ops.items() if s.call in SUPPORTED_CONVENTIONS)


class Graph:
    """A graph being built: ``g.input``, ``g.constant``, ``g.ops.<op>``, ``g.output``, then
    ``g.compile()``."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise GraphError(f"a graph needs a name (a non-empty str), got {name!r}")
        self.name = name
        self._values: list[Value] = []
        self._nodes: list[Node] = []
        self._inputs: list[int] = []
        self._outputs: list[int] = []
        self._guards: list[Guard] = []
        self._constants: dict[int, np.ndarray] = {}
        self._counts: dict[str, int] = {}
        self.ops = OpRecorder(self)

    # --- values -------------------------------------------------------------------------------

    def _new_name(self, base: str) -> str:
        name, self._counts[base] = fresh_name(
            base, {v.name for v in self._values}, self._counts.get(base, 0)
        )
        return name

    def _add(
        self, name: str, dtype: str, shape: tuple[Dim, ...], kind: Any, node: int | None
    ) -> GraphValue:
        v = Value(len(self._values), name, dtype, shape, kind, node)
        self._values.append(v)
        return GraphValue(self, v.id)

    def input(self, name: str, type: TensorType) -> GraphValue:
        """A graph input: its dtype and shape (ints, dim names, or products and sums of
        them: ``"S"``, ``64``, ``"H*hd"``, ``"S + 1"``); row-major."""
        if not isinstance(type, TensorType):
            raise GraphError(f"graph {self.name!r}: input {name!r} needs a TensorType")
        if any(v.name == name for v in self._values):
            raise GraphError(f"graph {self.name!r}: a value named {name!r} exists already")
        if type.layout != "row":
            raise GraphError(
                f"graph {self.name!r}: input {name!r} is {type.layout}-major; graph inputs are "
                "row-major (not supported yet: other layouts)"
            )
        if type.dtype not in DTYPES:
            raise GraphError(
                f"graph {self.name!r}: input {name!r} has unknown dtype {type.dtype} (clforge's "
                f"dtypes: {', '.join(DTYPES)})"
            )
        shape = tuple(Dim.of(d) for d in type.shape)
        gv = self._add(name, type.dtype, shape, "input", None)
        self._inputs.append(gv.id)
        return gv

    def constant(self, array: Any, name: str | None = None) -> GraphValue:
        """A constant (weights): a NumPy array (or anything np.asarray takes), copied now; it
        goes to the device once per compiled model and is saved with it."""
        host = np.array(array, copy=True)
        dt = dtype_of_numpy(host.dtype)
        if dt is None:
            raise GraphError(
                f"graph {self.name!r}: constant of NumPy dtype {host.dtype} (clforge's dtypes: "
                "f16, f32, f64, i32)"
            )
        host = np.ascontiguousarray(host)
        host.setflags(write=False)
        gv = self._add(
            self._new_name(name or "const"),
            dt.name,
            tuple(Dim.const(int(n)) for n in host.shape),
            "constant",
            None,
        )
        self._constants[gv.id] = host
        return gv

    def output(self, *values: GraphValue) -> None:
        """Mark values as the graph's outputs, in order (a call returns them in this order)."""
        for v in values:
            self._own(v, "output")
            self._outputs.append(v.id)

    def dim_range(self, dim: str, lo: int | None = None, hi: int | None = None) -> None:
        """A guard: every call must have ``lo <= dim <= hi``."""
        d = Dim.of(dim)
        self._guards.append(Guard("range", d, f"dim_range({dim!r})", lo=lo, hi=hi))

    def _own(self, v: Any, what: str) -> Value:
        if not isinstance(v, GraphValue):
            raise GraphError(f"graph {self.name!r}: {what} takes graph values, got {v!r}")
        if v.graph is not self:
            raise GraphError(
                f"graph {self.name!r}: {what}: {v.name} belongs to graph {v.graph.name!r}"
            )
        return v._value

    # --- views --------------------------------------------------------------------------------

    def reshape(self, x: GraphValue, shape: tuple[int | str, ...]) -> GraphValue:
        """`x` seen with another shape (a view, no kernel); the element counts must agree,
        which a call checks as a guard when they are not equal for every size (``S*D ==
        S*H*hd`` gives the guard ``D == H*hd``)."""
        return self._view("reshape", x, shape)

    def rebind(self, x: GraphValue, shape: tuple[int | str, ...]) -> GraphValue:
        """`x` with its dims renamed (MAX's ``rebind``): a guard per axis whose dims differ,
        checked when a call binds the sizes; later ops see the new dims."""
        return self._view("rebind", x, shape)

    def slice(self, x: GraphValue, start: int | str, stop: int | str, axis: int = 0) -> GraphValue:
        """`x[start:stop]` along `axis`, a view (no kernel of its own): `start` and `stop` are
        ints or dims (``"D"``, ``"2*D"``, ``"D + -3"``), and a call checks ``0 <= start``,
        ``0 <= stop - start`` and ``stop <=`` the axis's size. Its consumers read it in place
        where they can (its memory a layout they read, its first element on a sub-buffer
        boundary), else it is gathered before them; ``model.explain()`` says which
        (docs/graph.md, "Views")."""
        v = self._own(x, "slice")
        rank = len(v.shape)
        if isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= axis < rank:
            raise GraphError(
                f"graph {self.name!r}: slice of {v.name} {shape_str(v.shape)}: axis {axis!r} is "
                f"not an axis of a rank-{rank} value"
            )
        axis %= rank
        lo, hi = Dim.of(start), Dim.of(stop)
        minus = Dim.const(-1)
        width, room = hi + lo * minus, v.shape[axis] + hi * minus
        origin = f"slice of {v.name} {shape_str(v.shape)} [{lo}:{hi}] along axis {axis}"
        checks = [(width, "stop - start"), (room, "the axis's size - stop")]
        if any(c < 0 for _, c in lo.terms):  # a start counted from the end: "D + -3"
            checks.insert(0, (lo, "start"))
        for dim, what in checks:
            if dim.is_int and dim.value < 0:
                raise GraphError(f"graph {self.name!r}: {origin}: {what} is {dim.value} < 0")
            if not dim.is_int:
                self._guards.append(Guard("range", dim, origin, lo=0))
        new = tuple(width if k == axis else d for k, d in enumerate(v.shape))
        nid = len(self._nodes)
        out = self._add(self._new_name("slice"), v.dtype, new, "node", nid)
        options = (("axis", axis), ("start", lo), ("stop", hi))
        self._nodes.append(Node(nid, "slice", v.dtype, (("x", v.id),), (("y", out.id),), options))
        return out

    def _view(self, kind: str, x: GraphValue, shape: tuple[int | str, ...]) -> GraphValue:
        v = self._own(x, kind)
        new = tuple(Dim.of(d) for d in shape)
        origin = f"{kind} of {v.name} {shape_str(v.shape)} to {shape_str(new)}"
        guards: list[Guard] = []
        if kind == "rebind":
            if len(new) != len(v.shape):
                raise GraphError(f"graph {self.name!r}: {origin}: ranks differ")
            for old, nd in zip(v.shape, new, strict=True):
                if old != nd:
                    guards.append(_equal(self.name, old, nd, origin))
        else:
            diff = same_size(v.shape, new)
            if diff is not None:
                guards.append(_equal(self.name, diff[0], diff[1], origin))
        self._guards.extend(guards)
        nid = len(self._nodes)
        out = self._add(self._new_name(f"{kind}"), v.dtype, new, "node", nid)
        self._nodes.append(
            Node(nid, kind, v.dtype, (("x", v.id),), (("y", out.id),), (("shape", new),))
        )
        return out

    # --- ops ----------------------------------------------------------------------------------

    def _sig(self, op: str) -> OpSig:
        reg = registry_mod.default()
        if op not in reg.ops:
            raise GraphError(f"graph {self.name!r}: clforge has no op {op!r}")
        sig = reg.op(op)
        if sig.call not in SUPPORTED_CONVENTIONS:
            raise GraphError(
                f"graph {self.name!r}: op {op!r} (calling convention {sig.call!r}) is not "
                f"supported in graphs yet; graphs take the ops of the conventions "
                f"{', '.join(SUPPORTED_CONVENTIONS)}"
            )
        return sig

    def _record(self, sig: OpSig, inputs: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        here = f"graph {self.name!r}: {sig.name}"
        conv = CONVENTIONS[sig.call]
        if len(inputs) > len(sig.inputs):
            raise GraphError(f"{here}: takes {len(sig.inputs)} inputs, got {len(inputs)}")
        named = dict(zip((t.name for t in sig.inputs), inputs, strict=False))
        options: dict[str, Any] = {}
        attrs: dict[str, float | int] = {}
        option_names = {p.name for p in conv.params(sig)}
        bool_options = {p.name for p in conv.params(sig) if p.annotation == "bool"}
        attr_names = {a.name for a in sig.attrs} - set(conv.supplies(sig))
        for k, val in kwargs.items():
            if k in named or (k in {t.name for t in sig.inputs} and k not in option_names):
                if k in named:
                    raise GraphError(f"{here}: input {k!r} given by position and by keyword")
                named[k] = val
            elif k in option_names:
                options[k] = _plain(val)
                if k in bool_options and not isinstance(options[k], bool):
                    raise GraphError(f"{here}: {k} must be True or False, got {val!r}")
            elif k in attr_names:
                if val is not None:
                    attrs[k] = _plain(val)
            else:
                known = sorted(option_names | attr_names)
                raise GraphError(
                    f"{here}: unknown keyword {k!r} (options and attributes: "
                    f"{', '.join(known) or 'none'})"
                )
        arrays = [v for v in named.values() if isinstance(v, GraphValue)]
        args: dict[str, Value | None] = {}
        for pos, t in enumerate(sig.inputs):
            val = named.get(t.name)
            if val is None:
                if not t.optional:
                    raise GraphError(f"{here}: input {t.name!r} is missing; it is required")
                args[t.name] = None
            elif isinstance(val, GraphValue):
                args[t.name] = self._own(val, sig.name)
            elif isinstance(val, (int, float)) and not isinstance(val, bool):
                dtype = t.dtype or (arrays[0].dtype if arrays else sig.dtypes[0])
                args[t.name] = self._scalar(val, dtype)._value
            elif (sig.call, pos) in KEEP_MASKS and isinstance(val, (np.ndarray, np.bool_)):
                if np.asarray(val).dtype != np.bool_:
                    raise GraphError(
                        f"{here}: input {t.name!r} is a NumPy array of {np.asarray(val).dtype}; "
                        "a mask is a graph value (additive, of the call's dtype) or a boolean "
                        "NumPy array (a keep mask)"
                    )
                dtype = arrays[0].dtype if arrays else sig.dtypes[0]
                keep = np.asarray(val).astype(DTYPES[dtype].np_dtype)
                args[t.name] = self.constant(keep, name=t.name)._value
                attrs[KEEP_MASKS[(sig.call, pos)]] = 1
            else:
                raise GraphError(
                    f"{here}: input {t.name!r} is a {type(val).__name__}; in a graph, inputs are "
                    "graph values (g.input, g.constant, an op's result) or numbers"
                )
        inf = infer(self.name, sig, args, options, attrs)
        nid = len(self._nodes)
        outs = []
        for _tensor, dtype, shape in inf.outputs:
            outs.append(self._add(self._new_name(sig.name), dtype, shape, "node", nid))
        self._nodes.append(
            Node(
                nid,
                sig.name,
                inf.dtype,
                tuple((t.name, value_id(args[t.name])) for t in sig.inputs),
                tuple((t, o.id) for (t, _, _), o in zip(inf.outputs, outs, strict=True)),
                tuple(sorted(options.items())),
                inf.attrs,
                inf.canonical,
                inf.dims,
            )
        )
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _scalar(self, value: float, dtype: str) -> GraphValue:
        """A Python number as a constant of `dtype` (NumPy's weak scalars)."""
        if dtype == "i32" and isinstance(value, float):
            raise GraphError(
                f"graph {self.name!r}: {value!r} with an i32 tensor would promote to f64; "
                "graphs do not promote dtypes yet"
            )
        if dtype == "i32" and not -(2**31) <= value <= _INT32_MAX:
            raise GraphError(f"graph {self.name!r}: {value} does not fit i32")
        return self.constant(np.array(value, DTYPES[dtype].np_dtype), name="scalar")

    # --- the result ---------------------------------------------------------------------------

    def ir(self) -> GraphIR:
        """The captured graph as frozen records (what the stages read)."""
        if not self._outputs:
            raise GraphError(f"graph {self.name!r} has no outputs; call g.output(...)")
        return GraphIR(
            self.name,
            tuple(self._values),
            tuple(self._nodes),
            tuple(self._inputs),
            tuple(self._outputs),
            tuple(self._guards),
            dict(self._constants),
        )

    def compile(self, queue: Any = None, *, fusion: bool = True) -> Model:
        """Run the lowering stages (see :mod:`clforge.graph.pipeline`): a :class:`Model`
        (`fusion` False: no fused kernels, every node runs its op's instance)."""
        from clforge.graph.pipeline import lower

        return lower(self.ir(), queue, fusion=fusion)


def _plain(value: Any) -> Any:
    """An option or attribute as plain Python data (saved as JSON): NumPy scalars become
    Python numbers, lists tuples."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value


def _equal(graph: str, a: Dim, b: Dim, origin: str) -> Guard:
    if a.is_int and b.is_int:
        raise GraphError(f"graph {graph!r}: {origin}: {a} is not {b}")
    return Guard("equal", a, origin, rhs=b)
