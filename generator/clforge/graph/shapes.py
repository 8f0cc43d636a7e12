"""Shape inference through one op, derived from the op's calling convention and signature.

No op has a shape function of its own here. The convention that maps an eager call's arrays
onto the op's canonical dims (:mod:`clforge.conventions`) and the binding that sizes the op's
dims from them (:func:`clforge.call.binding.bind`: one name one size, broadcast 1s, derived
dims, the op's checks) are run on *probe* arrays: every symbolic name (and every sum, such as
`S + 1`) becomes a distinct prime that divides no literal size of the call, the arrays are
zero-stride NumPy arrays of those sizes (nothing is allocated), and every size that comes out
(canonical shapes, derived dims, the eager result's shape) is factored back over the primes
into a :class:`Dim`. A call the convention or the binding refuses is refused while the graph is
built, with their message in the graph's names.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from clforge.call.binding import bind, named_attrs
from clforge.call.results import probe_array
from clforge.conventions import CONVENTIONS
from clforge.conventions.base import Canonical
from clforge.core.layouts import logical_shape
from clforge.errors import CallError, GraphError
from clforge.graph.dims import Dim, shape_str
from clforge.graph.records import GraphIR, Node, Value
from clforge.registry.records import OpSig

# the conventions a graph node may use; the others' ops are refused by name
SUPPORTED_CONVENTIONS = (
    "flat",
    "broadcast",
    "axis",
    "trailing",
    "matmul",
    "gemm",
    "permute",
    "attention",
    "conv2d",
    "pool2d",
    "channels",
)
# options a convention takes that graphs do not: (convention, option) -> (refused unless this
# value, why). Every graph buffer is row-major and read as such (select.layouts_of).
_REFUSED_OPTIONS: dict[tuple[str, str], tuple[Any, str]] = {
    ("conv2d", "layout"): ("NCHW", "graph buffers are row-major: give x as (N, C, H, W)"),
}
# keep masks: (convention, input position) -> the attribute that marks one. A boolean NumPy
# array given for such an input becomes a constant of the call's dtype (1 keeps, 0 masks out)
# with that attribute 1, as the eager call casts a boolean mask on the host
KEEP_MASKS: dict[tuple[str, int], str] = {("attention", 3): "bool_mask"}
_FIRST_PROBE = 101
_SMALL_PROBE = 3


@dataclass(frozen=True)
class Inferred:
    """What a call of an op on graph values gives: its dtype, the canonical shape of each tensor
    the kernel sees, the op's dims, the attributes (the convention's included), and each
    output's dtype and eager shape."""

    dtype: str
    canonical: tuple[tuple[str, tuple[Dim, ...]], ...]
    dims: tuple[tuple[str, Dim], ...]
    attrs: tuple[tuple[str, float | int], ...]
    outputs: tuple[tuple[str, str, tuple[Dim, ...]], ...]  # (tensor, dtype, eager shape)


def _primes(start: int) -> Any:
    n = start
    while True:
        if all(n % p for p in range(2, math.isqrt(n) + 1)):
            yield n
        n += 1


@dataclass(frozen=True)
class Probes:
    """One prime per symbolic atom (a name, or a sum that is not a product)."""

    of_atom: tuple[tuple[str, int], ...]  # atom text -> prime
    atoms: tuple[tuple[int, Dim], ...]  # prime -> atom

    @classmethod
    def for_shapes(cls, shapes: list[tuple[Dim, ...]], first: int = _FIRST_PROBE) -> Probes:
        atoms: dict[str, Dim] = {}
        literals: set[int] = set()
        for shape in shapes:
            for d in shape:
                if d.is_monomial:
                    for m, c in d.terms:
                        literals.add(abs(c))
                        for n in m:
                            atoms[n] = Dim.name(n)
                else:
                    atoms[str(d)] = d
                    literals.update(abs(c) for _, c in d.terms)
        gen = _primes(first)
        of_atom, back = [], []
        for key in sorted(atoms):
            p = next(gen)
            while any(lit and lit % p == 0 for lit in literals):
                p = next(gen)
            of_atom.append((key, p))
            back.append((p, atoms[key]))
        return cls(tuple(of_atom), tuple(back))

    def size(self, d: Dim) -> int:
        primes = dict(self.of_atom)
        if not d.is_monomial:
            return primes[str(d)]
        return sum(c * math.prod(primes[n] for n in m) for m, c in d.terms)

    def dim(self, n: int) -> Dim:
        """`n` factored back over the primes."""
        out = Dim.const(1)
        rest = int(n)
        if rest == 0:
            return Dim.const(0)
        for p, atom in self.atoms:
            while rest % p == 0:
                rest //= p
                out = out * atom
        return out * rest

    def words(self, text: str) -> str:
        """`text` with every probe size written as its dim."""

        def sub(m: re.Match[str]) -> str:
            d = self.dim(int(m.group(0)))
            return m.group(0) if d.is_int else str(d)

        return re.sub(r"\b\d{3,}\b", sub, text)


def infer(
    graph: str,
    sig: OpSig,
    args: Mapping[str, Value | None],
    options: Mapping[str, Any],
    attrs: Mapping[str, float | int],
) -> Inferred:
    """Shapes and dims of `sig` called on graph values `args` (by the spec's input names; None
    for an omitted optional input)."""
    given = {k: v for k, v in args.items() if v is not None}
    where = ", ".join(f"{k}={v.describe()}" for k, v in given.items())
    here = f"graph {graph!r}: {sig.name}({where})"
    dtype = _dtype(here, sig, given)
    _refused(here, sig, given, options)
    shapes = [v.shape for v in given.values()]
    probes = Probes.for_shapes(shapes)
    try:
        canon, merged, b = _run(sig, given, options, attrs, probes)
    except (CallError, TypeError, ValueError, np.exceptions.AxisError) as exc:
        # the primes of at least 101 keep messages readable (no small number is taken for a
        # dim); a tensor of several symbolic axes can pass the kernels' 32-bit index range
        # with them, so that refusal is tried again with the smallest primes that fit
        small = Probes.for_shapes(shapes, first=_SMALL_PROBE)
        try:
            if "32-bit" not in str(exc) and "2^31" not in str(exc):
                raise
            canon, merged, b = _run(sig, given, options, attrs, small)
            probes = small
        except (CallError, TypeError, ValueError, np.exceptions.AxisError):
            clash = _clash(given) if sig.call in ("broadcast", "flat") else ""
            raise GraphError(f"{here}: {probes.words(str(exc))}{clash}") from None
    if canon.casts:
        shown = ", ".join(f"{k} to {d}" for k, d in canon.casts.items())
        raise GraphError(
            f"{here}: the call converts {shown}; graphs do not promote dtypes yet: convert with "
            "g.ops.cast_<dtype> first"
        )
    if canon.then is not None:
        raise GraphError(
            f"{here}: this call takes more than one launch (axes that are not adjacent); graphs "
            "take one launch per op call: reduce one group of adjacent axes per call"
        )
    for k, arr in canon.inputs.items():
        if k in given and arr.size != math.prod(probes.size(d) for d in given[k].shape):
            raise GraphError(
                f"{here}: input {k!r} would be copied to shape {probes.words(str(arr.shape))} "
                "(a materialized broadcast); graphs take views only"
            )
    canonical = [(k, tuple(probes.dim(n) for n in arr.shape)) for k, arr in canon.inputs.items()]
    outs: dict[str, Any] = {}
    odt: dict[str, str] = {}
    for t in sig.outputs:
        shape = tuple(b.dims[d] for d in t.shape)
        canonical.append((t.name, tuple(probes.dim(n) for n in shape)))
        odt[t.name] = t.dtype or dtype
        outs[t.name] = probe_array(shape, odt[t.name])
    finished = canon.finish(outs)
    outputs = tuple(
        (t.name, odt[t.name], tuple(probes.dim(n) for n in finished[t.name].shape))
        for t in sig.outputs
    )
    dims = tuple((k, probes.dim(v)) for k, v in sorted(b.dims.items()))
    merged = _recheck(here, sig, given, options, attrs, probes, dims, merged)
    return Inferred(dtype, tuple(canonical), dims, tuple(sorted(merged.items())), outputs)


def _refused(here: str, sig: OpSig, given: Mapping[str, Value], options: Mapping[str, Any]) -> None:
    """Refuse the options graphs do not take (_REFUSED_OPTIONS)."""
    for (conv, option), (allowed, why) in _REFUSED_OPTIONS.items():
        if sig.call == conv and options.get(option, allowed) != allowed:
            raise GraphError(
                f"{here}: {option}={options[option]!r} is not supported in graphs; {why}"
            )


def _recheck(
    here: str,
    sig: OpSig,
    given: Mapping[str, Value],
    options: Mapping[str, Any],
    attrs: Mapping[str, float | int],
    probes: Probes,
    dims: tuple[tuple[str, Dim], ...],
    merged: dict[str, Any],
) -> dict[str, Any]:
    """The call again on other primes: an op's dim that does not come back as the same `Dim`
    is not a product of the graph's dims (a convolution's or a pool's output size from a
    symbolic input size), which graphs refuse; an attribute the convention computes that
    changes with the sizes (attention's default scale from a symbolic head size) is dropped
    from the node: each specialization computes it at its sizes."""
    if not probes.atoms:
        return merged
    other = Probes.for_shapes(
        [v.shape for v in given.values()], first=max(p for p, _ in probes.atoms) + 1
    )
    try:
        _, merged2, b2 = _run(sig, given, options, attrs, other)
    except (CallError, TypeError, ValueError, np.exceptions.AxisError):
        return merged  # past the 32-bit range on the larger primes: the first run stands
    for k, d in dims:
        again = other.dim(b2.dims[k])
        if again != d:
            sizes = ", ".join(
                f"{v.name} {shape_str(v.shape)}" for v in given.values() if not _all_int(v)
            )
            raise GraphError(
                f"{here}: the op's dim {k} is not a product of the graph's dims (it comes out "
                f"as {d} for one set of sizes and {again} for another); graphs take this op "
                f"with the dims it is computed from as ints (symbolic: {sizes})"
            )
    return {k: v for k, v in merged.items() if merged2.get(k) == v}


def _all_int(v: Value) -> bool:
    return all(d.is_int for d in v.shape)


def _clash(given: Mapping[str, Value]) -> str:
    """The first axis (from the right, as broadcasting aligns them) where two inputs have
    different dims, neither of them 1: both tensors and both dims, for an error message."""
    items = list(given.items())
    for i, (ka, a) in enumerate(items):
        for kb, b in items[i + 1 :]:
            for k in range(1, min(len(a.shape), len(b.shape)) + 1):
                da, db = a.shape[-k], b.shape[-k]
                if da != db and Dim.const(1) not in (da, db):
                    return (
                        f" (axis -{k}: dim {da} of {ka}={a.name} against dim {db} of {kb}={b.name})"
                    )
    return ""


def _run(
    sig: OpSig,
    given: Mapping[str, Value],
    options: Mapping[str, Any],
    attrs: Mapping[str, float | int],
    probes: Probes,
) -> tuple[Any, dict[str, Any], Any]:
    """The convention and the binding on probe arrays: (canonical call, attributes, bound)."""
    fakes = {
        k: probe_array(tuple(probes.size(d) for d in v.shape), v.dtype) for k, v in given.items()
    }
    conv = CONVENTIONS[sig.call]
    canon = conv.canonical(sig, {t.name: fakes.get(t.name) for t in sig.inputs}, options)
    merged = named_attrs(sig, {**canon.attrs, **dict(attrs)})
    return canon, merged, bind(sig, canon.inputs, merged)


def _dtype(here: str, sig: OpSig, given: Mapping[str, Value]) -> str:
    """The call's dtype: the inputs of the op's dtype must share one (no promotion yet)."""
    free = {k: v for k, v in given.items() if sig.tensor(k).dtype is None}
    kinds = sorted({v.dtype for v in free.values()})
    if len(kinds) > 1:
        shown = " but ".join(f"{k}={v.name} is {v.dtype}" for k, v in free.items())
        raise GraphError(
            f"{here}: {shown}; graphs do not promote dtypes yet: convert with "
            "g.ops.cast_<dtype> first"
        )
    for k, v in given.items():
        fixed = sig.tensor(k).dtype
        if fixed is not None and v.dtype != fixed:
            raise GraphError(f"{here}: {k}={v.name} must be {fixed}, not {v.dtype}")
    dtype = kinds[0] if kinds else sig.dtypes[0]
    if dtype not in sig.dtypes:
        raise GraphError(
            f"{here}: dtype {dtype} is not supported (supported: {', '.join(sig.dtypes)})"
        )
    return dtype


def same_size(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, Dim] | None:
    """None when two shapes have the same element count for every size; else the two counts
    with their common factors cancelled (the guard a reshape needs)."""
    pa = math.prod(a, start=Dim.const(1))
    pb = math.prod(b, start=Dim.const(1))
    if pa == pb:
        return None
    if pa.is_monomial and pb.is_monomial and pa.terms and pb.terms:
        (ma, ca), (mb, cb) = pa.terms[0], pb.terms[0]
        common = list(ma)
        ra, rb = [], list(mb)
        for n in common:
            if n in rb:
                rb.remove(n)
            else:
                ra.append(n)
        g = math.gcd(ca, cb)
        left = Dim.const(ca // g)
        for n in ra:
            left = left * Dim.name(n)
        right = Dim.const(cb // g)
        for n in rb:
            right = right * Dim.name(n)
        return left, right
    return pa, pb


def canonical_at(
    sig: OpSig, ir: GraphIR, node: Node, env: Mapping[str, int]
) -> tuple[Canonical, dict[str, Any]]:
    """Node `node` of `ir` at the sizes `env`, through its op's calling convention on probe
    arrays (no memory): the canonical call, and its attributes: the node's win (a keep mask's
    `bool_mask=1`, which the probes do not show), the convention gives those left off the node
    (a scale computed from a symbolic head size)."""
    given: dict[str, Any] = {}
    lays = dict(node.layouts)
    for tensor, vid in node.inputs:
        if vid is not None:
            v = ir.value(vid)
            shape = tuple(x.evaluate(env) for x in v.shape)
            if tensor in lays:  # a folded permute: the buffer is the layout's memory order
                shape = logical_shape(shape, lays[tensor])
            given[tensor] = probe_array(shape, v.dtype)
    canon = CONVENTIONS[sig.call].canonical(
        sig, {t.name: given.get(t.name) for t in sig.inputs}, dict(node.options)
    )
    return canon, {**canon.attrs, **dict(node.attrs)}


__all__ = [
    "KEEP_MASKS",
    "SUPPORTED_CONVENTIONS",
    "Inferred",
    "Probes",
    "canonical_at",
    "infer",
    "probe_array",
    "same_size",
    "shape_str",
]
