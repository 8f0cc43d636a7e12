"""The shape and dtype of each result of an eager call, found without running it: the op's
calling convention and the binding (:func:`clforge.call.binding.bind`) run on *probe* arrays,
NumPy arrays of the call's shapes and dtypes with every stride 0 (nothing is allocated), as the
graph's shape inference does with symbolic sizes (:mod:`clforge.graph.shapes`). No op has a
shape function of its own: this is what `clforge.torch` gives PyTorch as each op's fake (meta)
kernel. A call the convention or the binding refuses raises their `CallError`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from clforge.call.binding import bind, call_types, outputs_in_order
from clforge.conventions import CONVENTIONS
from clforge.conventions.base import Probe
from clforge.core.dtypes import DTYPES
from clforge.registry.records import OpSig

Result = tuple[tuple[int, ...], np.dtype]  # one result's shape and dtype


def probe_array(shape: tuple[int, ...], dtype: str | np.dtype) -> np.ndarray:
    """A read-only array of `shape` with all strides 0: sizes without memory. `dtype` is a
    clforge dtype's name or a NumPy dtype. It is a :class:`~clforge.conventions.base.Probe`,
    which conventions take for a row-major array of its shape (no axis stretched)."""
    np_dtype = DTYPES[dtype].np_dtype if isinstance(dtype, str) else np.dtype(dtype)
    base = np.zeros(1, np_dtype)
    return as_strided(base, shape, (0,) * len(shape), writeable=False).view(Probe)


def result_types(
    sig: OpSig,
    inputs: Sequence[Any],
    attrs: Mapping[str, Any],
    options: Mapping[str, Any],
) -> tuple[Result, ...]:
    """The results of the eager call `sig(*inputs, **attrs, **options)`, in the op's output order;
    `inputs` are probe arrays (see :func:`probe_array`), Python numbers or None."""
    conv = CONVENTIONS[sig.call]
    if conv.variadic:
        canon = conv.canonical_many(sig, inputs, options)
    else:
        given = {t.name: a for t, a in zip(sig.inputs, inputs, strict=True)}
        canon = conv.canonical(sig, given, options)
    arrays = dict(canon.inputs)
    for name, dtype in canon.casts.items():  # NumPy's promotion: the converted inputs
        arrays[name] = probe_array(tuple(arrays[name].shape), dtype)
    dtype, _ = call_types(sig, arrays, partial=True)
    merged = {**canon.attrs, **{k: v for k, v in attrs.items() if v is not None}}
    b = bind(sig, arrays, merged)
    outs = {
        t.name: probe_array(tuple(b.dims[d] for d in t.shape), t.dtype or dtype)
        for t in sig.outputs
    }
    finished = outputs_in_order(sig, canon.finish(outs))
    results = finished if isinstance(finished, tuple) else (finished,)
    shapes = [tuple(int(n) for n in r.shape) for r in results]
    if canon.then is not None:  # further launches of the op on the one result
        shapes = [tuple(canon.then.shape)]
    return tuple((s, np.dtype(r.dtype)) for s, r in zip(shapes, results, strict=True))
