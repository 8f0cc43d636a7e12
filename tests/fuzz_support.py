"""What tests/test_fuzz_eager.py needs besides its strategies: canary-padded device memory for
the eager calls (inputs the test makes, and every array the runtime allocates while a call
runs), and the model an eager call is judged against (the call's own calling convention on
plain contiguous NumPy copies of its arguments, then the op's NumPy reference)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from clforge import references
from clforge.call.binding import bind, call_types, outputs_in_order
from clforge.call.eager import prepare
from clforge.conventions import CONVENTIONS
from clforge.core.dtypes import DTYPES
from clforge.registry.loader import Registry
from clforge.runtime.launch import Runtime
from clforge.tune.verify import CANARY, PAD

# --- canaries ---------------------------------------------------------------------------------


@dataclass
class _Guarded:
    what: str
    parent: cl.Buffer
    before: np.ndarray  # the parent's bytes when made (pads, and an input's content)
    nbytes: int
    content_fixed: bool  # an input: its content must not change either


class Canaries:
    """Device memory with `PAD` canary bytes before and after each buffer. Inputs the test makes
    with :meth:`device`; while :meth:`watching`, every array the runtime allocates (outputs,
    copies of NumPy inputs) too. :meth:`damage` says what a call wrote outside its outputs."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.guarded: list[_Guarded] = []

    def _padded(self, nbytes: int, content: np.ndarray | None) -> tuple[cl.Buffer, cl.Buffer]:
        host = np.full(PAD + max(nbytes, 1) + PAD, CANARY, np.uint8)
        if content is not None and nbytes:
            host[PAD : PAD + nbytes] = content.reshape(-1).view(np.uint8)
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
        parent = cl.Buffer(self.rt.context, flags, hostbuf=host)
        return parent, parent.get_sub_region(PAD, max(nbytes, 1))

    def device(self, host: np.ndarray, what: str) -> cla.Array:
        """A C-contiguous device copy of `host`, canary-padded; its content is checked too."""
        host = np.array(host, order="C")  # (np.ascontiguousarray makes a 0-d array 1-d)
        parent, sub = self._padded(host.nbytes, host)
        before = np.empty(PAD + max(host.nbytes, 1) + PAD, np.uint8)
        cl.enqueue_copy(self.rt.queue, before, parent)
        self.guarded.append(_Guarded(what, parent, before, host.nbytes, True))
        return cla.Array(self.rt.queue, host.shape, host.dtype, data=sub)

    def _empty(self, spec: Any) -> cla.Array:
        name, shape, dt, strides = spec
        nbytes = math.prod(shape) * np.dtype(dt).itemsize
        parent, sub = self._padded(nbytes, None)
        before = np.full(PAD + max(nbytes, 1) + PAD, CANARY, np.uint8)
        self.guarded.append(_Guarded(f"runtime array {name}", parent, before, nbytes, False))
        return cla.Array(self.rt.queue, shape, dt, strides=strides, data=sub)

    @contextmanager
    def watching(self) -> Iterator[None]:
        """Every array the runtime allocates is canary-padded (the pool is bypassed)."""
        self.rt.empty = self._empty  # type: ignore[method-assign]
        try:
            yield
        finally:
            del self.rt.empty

    def damage(self) -> list[str]:
        """What was written outside an output, or into an input, since the arrays were made."""
        self.rt.queue.finish()
        out = []
        for g in self.guarded:
            after = np.empty_like(g.before)
            cl.enqueue_copy(self.rt.queue, after, g.parent)
            if not (after[:PAD] == CANARY).all():
                out.append(f"written before {g.what}")
            if not (after[PAD + max(g.nbytes, 1) :] == CANARY).all():
                out.append(f"written past the end of {g.what}")
            if g.content_fixed and not (after == g.before).all():
                out.append(f"{g.what} modified")
        return out

    def forget(self) -> None:
        self.guarded.clear()


# --- the model --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    outputs: tuple[np.ndarray, ...]  # float64 (integers stay integers), the call's final shapes
    dtypes: tuple[str, ...]  # each output's clforge dtype
    reduce_len: int  # elements summed into one output, for the tolerance
    exact: bool


def split_kwargs(reg: Registry, name: str, kwargs: Mapping[str, Any]) -> tuple[dict, dict]:
    """An eager call's keyword arguments as the generated function passes them to call_op:
    (attributes, convention options): the convention's parameters are options."""
    op = reg.op(name)
    names = {p.name for p in CONVENTIONS[op.call].params(op)}
    options = {k: v for k, v in kwargs.items() if k in names}
    return {k: v for k, v in kwargs.items() if k not in names}, options


def model(reg: Registry, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Expected:
    """What the eager call `ops.<name>(*args, **kwargs)` must return, from host arguments (NumPy
    arrays, C-contiguous, or Python numbers): the op's calling convention maps them as for the
    eager call (`prepare`, which raises the call's CallError), the dispatcher's checks are made
    (`call_types`, `bind`), then the op's NumPy reference runs in float64 and the convention's
    `finish` shapes its outputs; a convention's further call (`then`) is modelled in turn on the
    result rounded to its dtype."""
    attrs, options = split_kwargs(reg, name, kwargs)
    c = prepare(name, args, attrs, options)
    assert all(not isinstance(v, cla.Array) for v in c.inputs.values())
    host = {k: np.array(v, order="C") for k, v in c.inputs.items()}
    dtype, _ = call_types(c.op, host)
    b = bind(c.op, host, c.attrs)
    ref = references.reference_of(c.op)
    with np.errstate(all="ignore"):  # inf and NaN are results here, not warnings
        outs = references.expected(c.op, host, b.attrs)
    dtypes = tuple(t.dtype or dtype for t in c.op.outputs)
    reduce_len = b.dims.get(ref.reduce, 0) if ref.reduce else 0
    result = outputs_in_order(c.op, c.finish(outs))
    if c.then is None:
        got = result if isinstance(result, tuple) else (result,)
        return Expected(tuple(np.asarray(g) for g in got), dtypes, reduce_len, ref.exact)
    with np.errstate(all="ignore"):
        rounded = np.asarray(result).astype(DTYPES[dtypes[0]].np_dtype)
    further = (*(args[i] for i in c.then.before), rounded, *(args[i] for i in c.then.after))
    more = model(reg, name, further, {**attrs, **c.then.options})
    shaped = tuple(np.reshape(o, c.then.shape) for o in more.outputs)
    return Expected(
        shaped, more.dtypes, max(reduce_len, 1) * max(more.reduce_len, 1), more.exact and ref.exact
    )
