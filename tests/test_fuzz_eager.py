"""The eager API fuzzed with Hypothesis (issue 33, point 5): for every op in the registry, calls
with random shapes (0, 1, primes, up to a few thousand elements), dtypes (the op's own and
others: i64, u8, bool, complex, byte-swapped, a clforge dtype the op lacks), strided, reversed,
offset, Fortran-ordered, batched col-major and broadcast (stride 0) NumPy views, canary-padded
device arrays (contiguous, offset, strided, reversed, transposed, last axes swapped), NumPy
scalars, where the convention takes them Python numbers (overflowing and non-finite ones too),
non-arrays, one array (or it and its transpose) for two arguments, and attributes and
convention options in and out of range or of the wrong type. A third of the calls are all on
device arrays; each accepted device call is made again on new arrays of the same forms (the
memoized path: the same key, other buffers and values).

Each call must either return the right result or raise a ClforgeError (CallError mostly) whose
message starts with the op's name; never another exception (NumPy's RuntimeWarnings inside the
call count as one), a crash, a write outside an output (every device array the test makes and
every array the runtime allocates during the call is canary-padded, the pool bypassed), a
modified input, or a wrong result. "Right" is the model in
tests/fuzz_support.py: the op's calling convention applied to plain C-contiguous NumPy copies of
the same arguments, the dispatcher's checks, then the op's NumPy reference in float64 compared at
the per-dtype tolerance of tests/checking.py. So the fuzzer tests everything between how an
argument is given (view, device array, number, dtype) and the kernels' result; what a convention
means for plain arrays is tested by tests/test_ops_*.py. A call of NumPy arrays and numbers that
the model accepts must also succeed (a NumPy input is copied anyway); device arrays may be
refused (offsets, strides, dtypes) with a CallError.

The strategies are read from the registry: per calling convention (15), never per op; an op's
dtypes, inputs (optional, fixed-dtype, broadcast), attributes (name, type, default) and its
reference's input domains come from its signature and reference. Index inputs (embedding,
take_along_axis) get in-range values from their domain ("index_of:DIM"), sometimes out-of-range.

Runs are reproducible: each op has its own fixed seed (@seed, from its name; no example
database), EXAMPLES examples per op in the normal run. A longer run:
`CLFORGE_FUZZ_EXAMPLES=2000 .venv/bin/pytest -q tests/test_fuzz_eager.py`; another sequence:
CLFORGE_FUZZ_SEED=<int>; CLFORGE_FUZZ_STATS=1 (with -s) prints per op how many calls were
checked, refused (and why) or replayed warm. Failing examples that were found are kept as plain
regression tests at the end of the module.
"""

from __future__ import annotations

import math
import os
import traceback
import warnings
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyopencl.array as cla
import pytest
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st

from clforge import references
from clforge.call.dispatcher import dispatcher
from clforge.conventions import CONVENTIONS
from clforge.errors import ClforgeError
from clforge.registry import loader as registry_mod
from clforge.registry.records import OpSig
from clforge.runtime.transfer import to_host
from clforge.tune.verify import mismatch

from .fuzz_support import Canaries, model

REG = registry_mod.default()
EXAMPLES = int(os.environ.get("CLFORGE_FUZZ_EXAMPLES", "80"))  # ~35-45 s in all here
SEED = int(os.environ.get("CLFORGE_FUZZ_SEED", "0"))
BUDGET = 4096  # elements of the largest array drawn

# dtypes an op does not declare: NumPy ones clforge lacks, and clforge's own (filtered per op)
FOREIGN = (np.int64, np.uint8, np.bool_, np.complex64, np.int16, ">f4", ">i4", ">f8")
CLFORGE = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32}
PRIMES = (127, 257, 521, 1031, 2053, 4093)


# --- the pieces of a call -----------------------------------------------------------------------


@dataclass
class Call:
    """One eager call: positional arguments (for concat, the sequence), keyword arguments, and
    the same arguments as the model takes them (plain contiguous NumPy arrays and numbers)."""

    op: OpSig
    args: list[Any] = field(default_factory=list)
    plain: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    forms: list[str] = field(default_factory=list)
    remake: dict[int, tuple[str, int]] = field(default_factory=dict)  # arg -> (form, axis)
    index_on_device: bool = False  # a device index array: not range-checked on the host


@dataclass
class Env:
    """What strategies draw with: hypothesis's `data`, a NumPy generator for values, the
    canaries for device arrays."""

    data: Any
    rng: np.random.Generator
    canaries: Canaries
    wild: bool  # a hostile call: wrong dtypes, options, views that a device call refuses
    on_device: bool  # every array a device array (the memoized path), else a mix of kinds

    def draw(self, strategy: st.SearchStrategy, label: str | None = None) -> Any:
        return self.data.draw(strategy, label=label)

    def pick(self, good: Sequence[Any], bad: Sequence[Any] = (), label: str | None = None) -> Any:
        """One of `good`; in a hostile call, sometimes one of `bad`."""
        if self.slip() and bad:
            return self.draw(st.sampled_from(tuple(bad)), label)
        return self.draw(st.sampled_from(tuple(good)), label)

    def slip(self) -> bool:
        """In a hostile call, sometimes True: make this part of it wrong."""
        return self.wild and self.draw(st.integers(0, 2)) == 0


def size(env: Env, *, lo: int = 0, hi: int = 9) -> int:
    return int(env.draw(st.one_of(st.sampled_from((0, 1, 2, 3, 5, 7, 13)), st.integers(lo, hi))))


def shape(env: Env, rank: int, *, lo: int = 0, budget: int = BUDGET) -> tuple[int, ...]:
    """A shape of `rank`: small sizes (0, 1, primes), sometimes one large prime, at most
    `budget` elements."""
    dims = [max(lo, size(env)) for _ in range(rank)]
    if rank and env.draw(st.integers(0, 4)) == 0:
        dims[env.draw(st.integers(0, rank - 1))] = env.draw(st.sampled_from(PRIMES))
    while math.prod(max(1, n) for n in dims) > budget:  # an empty axis still leaves the rest
        k = dims.index(max(dims))
        dims[k] = max(lo, dims[k] // 3)
    return tuple(dims)


def dtype_for(env: Env, op: OpSig, fixed: str | None = None) -> np.dtype:
    """One of the op's dtypes (or the input's fixed one) mostly, sometimes one it lacks."""
    own = [CLFORGE[fixed]] if fixed else [CLFORGE[d] for d in op.dtypes]
    other = [*FOREIGN, *(v for k, v in CLFORGE.items() if v not in own)]
    return np.dtype(env.pick(own, other))


def values(env: Env, op: OpSig, name: str, shp: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """Values for input `name` from its reference's domain (NumPy dtypes clforge lacks are drawn
    as f64 or i32 values, then converted)."""
    domain = references.reference_of(op).domains.get(name, "normal")
    if domain.startswith("index_of:"):
        domain = "index"
    if dt == np.bool_:
        return env.rng.integers(0, 2, size=shp).astype(np.bool_)
    base = np.dtype(np.float64) if dt.kind in "fc" else np.dtype(np.int32)
    with np.errstate(all="ignore"):
        # (make_input wants at least one axis for some domains)
        return references.make_input(env.rng, shp or (1,), base, domain).reshape(shp).astype(dt)


HOST_FORMS = ("plain", "plain", "reversed", "strided", "offset", "fortran", "broadcast")
DEVICE_FORMS = ("device", "device", "device_offset", "device_strided", "device_reversed")


def form_of(env: Env, host: np.ndarray, *, device: bool = True) -> tuple[str, int]:
    """A way to give `host` (a form, and the axis it strides, reverses or offsets): views of
    every kind; in a hostile call also device views that the conventions refuse."""
    device_forms = DEVICE_FORMS[: 2 + 3 * env.wild] if device else ()
    forms = device_forms if env.on_device and device else HOST_FORMS + device_forms
    if host.ndim == 0:
        forms = ("device",) if env.on_device and device else ("plain", "numpy_scalar", "device")
    if host.ndim >= 2:
        forms += ("swapped",) + (("device_transposed", "device_swapped") if device else ())
    form = env.draw(st.sampled_from(forms), label="form")
    return form, env.draw(st.integers(0, host.ndim - 1)) if host.ndim else 0


def made(canaries: Canaries, host: np.ndarray, form: str, ax: int) -> tuple[Any, np.ndarray]:
    """`host` given as `form` says: (the argument, the plain values it holds). A 'broadcast'
    form changes the values (one axis stretched from its first entry)."""
    if form == "plain":
        return host.copy(), host
    if form == "numpy_scalar":  # (of the native byte order, whatever the array's)
        return host[()], np.asarray(host[()])
    if form == "fortran":
        return np.asfortranarray(host), host
    if form == "broadcast":
        first = np.take(host, [0], axis=ax) if host.shape[ax] else host
        b = np.broadcast_to(first, host.shape)
        return b, np.array(b, order="C")
    if form == "device_transposed":
        return canaries.device(host.T, "a transposed device input").T, host
    if form.endswith("swapped"):  # the last two axes swapped in memory (batched col-major)
        perm = (*range(host.ndim - 2), host.ndim - 1, host.ndim - 2)
        storage = np.transpose(host, perm).copy()
        if form == "swapped":
            return np.transpose(storage, perm), host
        return canaries.device(storage, "a swapped device input").transpose(perm), host
    storage, view = _strided(host, form.removeprefix("device_"), ax)
    if not form.startswith("device"):
        return storage[view], host
    return canaries.device(storage, f"a {form} input")[view], host


def _strided(host: np.ndarray, how: str, ax: int) -> tuple[np.ndarray, tuple[slice, ...]]:
    """Storage and the index that views `host` in it as `how` says (along axis `ax`)."""
    pre = (slice(None),) * ax
    if how == "reversed":
        return np.flip(host, ax).copy(), (*pre, slice(None, None, -1))
    if how == "strided":
        big = np.repeat(host, 2, axis=ax)
        return big, (*pre, slice(None, None, 2))
    if how == "offset":
        pad = np.concatenate([np.take(host, [0], axis=ax) if host.shape[ax] else host, host], ax)
        if not host.shape[ax]:
            pad = np.zeros((*host.shape[:ax], 1, *host.shape[ax + 1 :]), host.dtype)
        return pad.astype(host.dtype), (*pre, slice(1, None))  # (concatenate: native order)
    return host.copy(), (slice(None),) * host.ndim  # "device": plain


def add_input(env: Env, call: Call, name: str, host: np.ndarray, *, device: bool = True) -> None:
    if env.slip() and env.draw(st.integers(0, 3)) == 0:  # not an array at all
        add_value(call, name, env.draw(st.sampled_from((host.tolist(), "x", None, object, 2.5))))
        return
    form, ax = form_of(env, host, device=device)
    arg, plain = made(env.canaries, host, form, ax)
    call.args.append(arg)
    call.plain.append(plain)
    call.forms.append(f"{name}: {form} {plain.dtype} {plain.shape}")
    call.remake[len(call.args) - 1] = (form, ax)


def add_value(call: Call, name: str, value: Any) -> None:
    call.args.append(value)
    call.plain.append(value)
    call.forms.append(f"{name}: {value!r}")


def number(env: Env, dt: np.dtype) -> int | float:
    """A Python number (NumPy's weak scalar) beside arrays of `dt`; in a hostile call also
    ones that overflow the dtype or are not finite."""
    if env.slip():
        return env.draw(st.sampled_from((2**31, -(2**31) - 1, 1e300, math.nan, -math.inf, 70000)))
    if dt.kind in "iub" or env.draw(st.booleans()):
        return int(env.draw(st.sampled_from((1, 2, -3, 0, 7))))
    return float(env.draw(st.sampled_from((0.5, -1.25, 2.0, 3.0, 1e-3))))


def attr_values(env: Env, call: Call, supplied: tuple[str, ...]) -> None:
    """The op's attributes the eager function takes (not the ones its convention supplies):
    omitted, the default, values in and out of range, and values of the wrong type."""
    for a in call.op.attrs:
        if a.name in supplied or a.name in call.kwargs or env.draw(st.integers(0, 2)) == 0:
            continue
        if a.type == "int":  # the in-range values of an int attribute: its checks say
            good, bad = [a.default, 0, 1, 2, 3, None], [-1, 2**31, "1", 1.5, True]
        else:
            good, bad = [a.default, 0.0, 0.5, 2.5, 1e-3, None], [-1.0, math.inf, "0.1", True]
        call.kwargs[a.name] = env.pick([v for v in good if v is not None or a.default], bad)


# --- a strategy per calling convention ----------------------------------------------------------


def flat(env: Env, call: Call) -> None:
    (t,) = call.op.inputs
    dt = dtype_for(env, call.op, t.dtype)
    add_input(env, call, t.name, values(env, call.op, t.name, shape(env, size(env, hi=4)), dt))


def broadcast(env: Env, call: Call) -> None:
    op = call.op
    rank = len(op.dims)
    full = shape(env, env.draw(st.integers(0, rank + env.slip())))
    common = dtype_for(env, op)
    for t in op.inputs:
        how = env.draw(st.sampled_from(("array",) * 4 + ("number", "omitted")))
        if how == "omitted" and t.optional:
            add_value(call, t.name, None)
            continue
        dt = dtype_for(env, op, t.dtype) if t.dtype or env.draw(st.integers(0, 3)) == 0 else common
        if t.dtype == "i32" and env.draw(st.booleans()):
            dt = np.dtype(np.bool_)  # a NumPy condition
        if how == "number":
            value = number(env, dt)
            domain = references.reference_of(op).domains.get(t.name)
            if domain in ("nonzero", "positive"):  # as the reference's domain for it says
                value = (abs(value) if domain == "positive" else value) or 2
            add_value(call, t.name, value)
            continue
        mine = list(full[env.draw(st.integers(0, len(full))) :])
        for k in range(len(mine)):
            if env.draw(st.integers(0, 3)) == 0:
                mine[k] = 1
        if mine and env.slip():
            mine[-1] += 1  # does not broadcast
        add_input(env, call, t.name, values(env, op, t.name, tuple(mine), dt))


def axis(env: Env, call: Call) -> None:
    op = call.op
    (t,) = op.inputs
    conv = CONVENTIONS[op.call]
    rank = size(env, hi=4) if env.draw(st.integers(0, 5)) else env.draw(st.integers(0, 5))
    x = values(env, op, t.name, shape(env, rank), dtype_for(env, op, t.dtype))
    add_input(env, call, t.name, x)
    opts = {p.name: p for p in conv.params(op)}
    if "keepdims" in opts:
        several = "tuple" in opts["axis"].annotation
        good = [None, *range(-rank, rank)]
        if several:
            good += [tuple(a for a in range(rank) if env.draw(st.booleans())), (0, -1)][: rank + 1]
        bad = [rank, -rank - 1, (0, 0), "0", 1.0]
        call.kwargs["axis"] = env.pick(good, bad, label="axis")
        call.kwargs["keepdims"] = env.pick((False, True), ("no",))
    elif env.draw(st.booleans()):
        call.kwargs["axis"] = env.pick(range(-rank, rank) or [0], [rank, None, "0"], "axis")


def trailing(env: Env, call: Call) -> None:
    op = call.op
    x_t, *rest = op.inputs
    rank = env.draw(st.integers(0 if env.wild else 1, 4))
    dt = dtype_for(env, op)
    shp = shape(env, rank)
    add_input(env, call, x_t.name, values(env, op, x_t.name, shp, dt))
    axes = env.pick((None, *range(1, rank + 1)), (0, rank + 1, True), "axes")
    if axes is not None:
        call.kwargs["axes"] = axes
    tail = shp[rank - axes :] if isinstance(axes, int) and 1 <= axes <= rank else shp[-1:]
    for t in rest:
        if env.draw(st.integers(0, 2)) == 0:
            add_value(call, t.name, None)
            continue
        mine = (*tail, 2) if env.slip() else tail
        add_input(env, call, t.name, values(env, op, t.name, mine, dt))


def channels(env: Env, call: Call) -> None:
    op = call.op
    x_t, *rest = op.inputs
    dt = dtype_for(env, op)
    shp = shape(env, env.draw(st.integers(1 if env.wild else 2, 4)))
    add_input(env, call, x_t.name, values(env, op, x_t.name, shp, dt))
    c = shp[1] if len(shp) > 1 else 1
    for t in rest:
        if t.optional and env.draw(st.integers(0, 2)) == 0:
            add_value(call, t.name, None)
            continue
        mine = (c + 1,) if env.slip() else (c,)
        add_input(env, call, t.name, values(env, op, t.name, mine, dt))


def _pair_or_int(env: Env, lo: int, hi: int, bad: tuple[Any, ...]) -> Any:
    if env.slip():
        return env.draw(st.sampled_from(bad))
    return env.draw(
        st.one_of(st.integers(lo, hi), st.tuples(st.integers(lo, hi), st.integers(lo, hi)))
    )


def _hw(pair: Any) -> tuple[int, int]:
    """An option's (h, w) as the conventions read it (1 for what is not a pair or an int)."""
    if isinstance(pair, int) and not isinstance(pair, bool):
        return pair, pair
    if isinstance(pair, tuple) and len(pair) == 2 and all(type(v) is int for v in pair):
        return pair[0], pair[1]
    return 1, 1


def _windows(env: Env, call: Call, kernel: tuple[int, int]) -> tuple[int, int]:
    """Stride, padding and dilation options for a window of `kernel`; the smallest input
    (h, w) that leaves an output (a hostile call may be smaller)."""
    call.kwargs["stride"] = _pair_or_int(env, 1, 3, (0, (1, 0), (1, 2, 3), "2"))
    half = min(kernel) // 2 if "kernel_size" in call.kwargs else 2  # pooling: at most half
    call.kwargs["padding"] = _pair_or_int(env, 0, half, (-1, (0, -2)))
    call.kwargs["dilation"] = _pair_or_int(env, 1, 2, (0,))
    (ph, pw), (dh, dw) = _hw(call.kwargs["padding"]), _hw(call.kwargs["dilation"])
    return (
        max(0, dh * (kernel[0] - 1) + 1 - 2 * ph),
        max(0, dw * (kernel[1] - 1) + 1 - 2 * pw),
    )


def _plane(env: Env, lo: tuple[int, int]) -> tuple[int, int]:
    h, w = size(env, hi=12), size(env, hi=12)
    if env.wild:
        return h, w
    return max(h, lo[0]), max(w, lo[1])


def conv2d(env: Env, call: Call) -> None:
    op = call.op
    dt = dtype_for(env, op)
    groups = env.draw(st.sampled_from((1, 1, 2, 3)))
    n, cg, kpg = size(env, hi=3), max(1, size(env, hi=4)), max(1, size(env, hi=4))
    r, s = env.draw(st.integers(1, 4)), env.draw(st.integers(1, 4))
    layout = env.pick(("NCHW", "NHWC"), ("nchw", None))
    call.kwargs["layout"] = layout
    h, w = _plane(env, _windows(env, call, (r, s)))
    n = min(n, max(1, BUDGET // max(1, cg * groups * h * w)))
    xs = (n, cg * groups, h, w) if layout != "NHWC" else (n, h, w, cg * groups)
    x_t, w_t, b_t = op.inputs
    add_input(env, call, x_t.name, values(env, op, x_t.name, xs, dt))
    add_input(env, call, w_t.name, values(env, op, w_t.name, (kpg * groups, cg, r, s), dt))
    if env.draw(st.booleans()):
        add_input(env, call, b_t.name, values(env, op, b_t.name, (kpg * groups,), dt))
    else:
        add_value(call, b_t.name, None)
    call.kwargs["groups"] = env.pick((groups,), (0, groups + 1, -1))


def pool2d(env: Env, call: Call) -> None:
    op = call.op
    (t,) = op.inputs
    names = {p.name for p in CONVENTIONS[op.call].params(op)}
    kernel = _pair_or_int(env, 1, 4, (None, 0, 2**31, (2, 2**40)))
    call.kwargs["kernel_size"] = kernel
    lo = _windows(env, call, _hw(kernel))
    if env.draw(st.booleans()):
        del call.kwargs["stride"]  # default: the kernel size
    call.kwargs["ceil_mode"] = env.draw(st.booleans())
    if "count_include_pad" in names:
        call.kwargs["count_include_pad"] = env.draw(st.booleans())
    if "divisor_override" in names:
        call.kwargs["divisor_override"] = env.pick((None, None, 1, 3, -2), (0, 1.5))
    rank = env.pick((4, 3), (2, 5))
    h, w = _plane(env, lo)
    n, c = size(env, hi=2), size(env, hi=3)
    n = min(n, max(1, BUDGET // max(1, 2 * c * h * w)))
    shp = {5: (n, c, h, w, 2), 4: (n, c, h, w), 3: (c, h, w), 2: (h, w)}[rank]
    add_input(env, call, t.name, values(env, op, t.name, shp, dtype_for(env, op)))


def attention(env: Env, call: Call) -> None:
    op = call.op
    q_t, k_t, v_t, m_t = op.inputs
    dt = dtype_for(env, op)
    heads = env.draw(st.booleans())
    b, hk = size(env, hi=2), max(1, size(env, hi=2))
    h = hk * env.draw(st.sampled_from((1, 1, 2)))
    sq, sk = size(env, hi=9), size(env, hi=9)
    d, dv = size(env, hi=16), max(1, size(env, hi=16))
    lead_q, lead_k = ((b, h), (b, hk)) if heads else ((b,), (b,))
    add_input(env, call, q_t.name, values(env, op, q_t.name, (*lead_q, sq, d), dt))
    add_input(env, call, k_t.name, values(env, op, k_t.name, (*lead_k, sk, d), dt))
    add_input(env, call, v_t.name, values(env, op, v_t.name, (*lead_k, sk, dv), dt))
    kind = env.draw(st.sampled_from(("none", "additive", "bool")))
    if kind == "none":
        add_value(call, m_t.name, None)
    else:
        scores = [*lead_q, sq, sk]
        mine = scores[env.draw(st.integers(0, len(scores))) :]
        mine = [1 if env.draw(st.integers(0, 2)) == 0 else n for n in mine]
        if kind == "bool":
            mask = env.rng.random(mine) < 0.7
        else:
            mask = values(env, op, m_t.name, tuple(mine), dt)
        add_input(env, call, m_t.name, mask)
    call.kwargs["causal"] = env.draw(st.booleans())
    # grouped heads need enable_gqa=True (PyTorch's rule): without it, a CallError
    call.kwargs["enable_gqa"] = env.pick((True, False)) if h == hk else env.pick((True,), (False,))
    call.kwargs["scale"] = env.pick((None, None, 0.5, 2.0, 0.0), ("1", math.nan))
    call.kwargs["softcap"] = env.pick((0.0, 0.0, 5.0, 0.5), (-1.0, math.nan, math.inf))


def matmul(env: Env, call: Call) -> None:
    op = call.op
    dt = dtype_for(env, op)
    m, k, n = size(env, hi=40), size(env, hi=40), size(env, hi=40)
    if env.draw(st.integers(0, 4)) == 0:
        k, m, n = env.draw(st.sampled_from((127, 257))), min(m, 7), min(n, 7)
    batch = [max(1, size(env, hi=4)) for _ in range(env.draw(st.integers(0, 2)))]
    while batch and math.prod(batch) * max(m, n, 1) * max(k, 1) > BUDGET:
        batch.pop()
    ra, rb = env.draw(st.integers(1, 4)), env.draw(st.integers(1, 4))

    def operand(rank: int, mat: tuple[int, ...]) -> tuple[int, ...]:
        if rank == 1:
            return mat
        lead = list(batch[max(0, len(batch) - (rank - 2)) :])
        lead = [1 if env.draw(st.integers(0, 2)) == 0 else x for x in lead]
        return (*lead, *mat)

    a = values(env, op, "a", operand(ra, (m, k) if ra > 1 else (k,)), dt)
    b = values(env, op, "b", operand(rb, (k, n) if rb > 1 else (k,)), dt)
    add_input(env, call, "a", a)
    add_input(env, call, "b", b)


def gemm(env: Env, call: Call) -> None:
    op = call.op
    dt = dtype_for(env, op)
    m, k, n = size(env, hi=40), size(env, hi=40), size(env, hi=40)
    ta, tb = env.draw(st.booleans()), env.draw(st.booleans())
    add_input(env, call, "a", values(env, op, "a", (k, m) if ta else (m, k), dt))
    add_input(env, call, "b", values(env, op, "b", (n, k) if tb else (k, n), dt))
    bias = env.pick(("none", "number", "n", "1n", "m1", "mn"), ("bad",))
    shapes = {"n": (n,), "1n": (1, n), "m1": (m, 1), "mn": (m, n), "bad": (m + 1, n)}
    if bias == "none":
        add_value(call, "bias", None)
    elif bias == "number":
        add_value(call, "bias", number(env, dt))
    else:
        add_input(env, call, "bias", values(env, op, "bias", shapes[bias], dt))
    call.kwargs.update(trans_a=ta, trans_b=tb)


def permute(env: Env, call: Call) -> None:
    op = call.op
    (t,) = op.inputs
    rank = env.draw(st.integers(0, 4 + env.slip()))
    add_input(env, call, t.name, values(env, op, t.name, shape(env, rank), dtype_for(env, op)))
    perm = list(env.draw(st.permutations(range(rank))))
    choice = env.pick(("perm", "perm", "none", "negative"), ("bad",))
    if choice == "none":
        return
    if choice == "negative" and perm:
        perm[0] -= rank
    elif choice == "bad":
        perm = [*perm, 0] if env.draw(st.booleans()) else perm[1:]
    call.kwargs["axes"] = tuple(perm)


def along_axis(env: Env, call: Call) -> None:
    op = call.op
    x_t, i_t = op.inputs
    rank = env.draw(st.integers(1, 3))
    shp = shape(env, rank)
    add_input(env, call, x_t.name, values(env, op, x_t.name, shp, dtype_for(env, op)))
    ax = env.pick((*range(-rank, rank), None), (rank,), label="axis")
    if ax is None:
        n, ishape = math.prod(shp), (size(env),)
    else:
        a = ax % rank if -rank <= ax < rank else 0
        n = shp[a]
        ishape = tuple(
            size(env, hi=6) if k == a else (1 if env.draw(st.integers(0, 3)) == 0 else m)
            for k, m in enumerate(shp)
        )
    call.kwargs["axis"] = ax
    index(env, call, i_t.name, ishape, -n, n)


def index(env: Env, call: Call, name: str, shp: tuple[int, ...], lo: int, hi: int) -> None:
    """An index array of `shp` with values in [lo, hi), sometimes one out of range (a CallError
    for NumPy indices; device ones are clamped by the kernels); i32 mostly, other integer
    dtypes (converted once checked; device indices must be i32) and wrong ones."""
    ints = (np.int32,) * 3 + ((np.int64,) if env.on_device else (np.int64, np.int16))
    dt = np.dtype(env.pick(ints, (np.float32, np.bool_, np.int16)))
    host = env.rng.integers(lo, max(hi, lo + 1), size=shp)
    if dt == np.int16:
        host = np.clip(host, -(2**15), 2**15 - 1)
    if host.size and (env.slip() or (env.on_device and env.draw(st.integers(0, 3)) == 0)):
        host.flat[env.draw(st.integers(0, host.size - 1))] = env.draw(
            st.sampled_from((hi, lo - 1, 2**31 - 1, -(2**31)))
        )
    with np.errstate(all="ignore"):
        host = host.astype(dt)
    add_input(env, call, name, host)


def embedding(env: Env, call: Call) -> None:
    op = call.op
    i_t, w_t = op.inputs
    v, d = size(env, hi=20), size(env, hi=20)
    ishape = shape(env, env.draw(st.integers(0, 3)))
    index(env, call, i_t.name, ishape, 0, v)
    add_input(env, call, w_t.name, values(env, op, w_t.name, (v, d), dtype_for(env, op)))


def concat(env: Env, call: Call) -> None:
    op = call.op
    rank = env.draw(st.integers(1, 3))
    shp = list(shape(env, rank, budget=BUDGET // 16))  # an axis may take up to 13 more
    count = env.draw(st.integers(1, 4))
    ax = env.pick((*range(-rank, rank), None), (rank,), label="axis")
    common = dtype_for(env, op)
    for k in range(count):
        mine = list(shp)
        if ax is not None and -rank <= ax < rank:
            mine[ax] = size(env)
        if env.slip():
            mine[0] += 1  # sizes differ off the axis (or on it)
        dt = common if env.draw(st.integers(0, 3)) else dtype_for(env, op)
        add_input(env, call, f"arrays[{k}]", values(env, op, "a", tuple(mine), dt))
    if env.draw(st.integers(0, 4)):
        call.kwargs["axis"] = ax


STRATEGIES: dict[str, Callable[[Env, Call], None]] = {
    "direct": flat,  # no shipped op uses it; an extension's would get flat arrays
    "flat": flat,
    "broadcast": broadcast,
    "axis": axis,
    "trailing": trailing,
    "channels": channels,
    "conv2d": conv2d,
    "pool2d": pool2d,
    "attention": attention,
    "matmul": matmul,
    "gemm": gemm,
    "permute": permute,
    "along_axis": along_axis,
    "embedding": embedding,
    "concat": concat,
}


def test_every_convention_has_a_strategy() -> None:
    assert set(STRATEGIES) == set(CONVENTIONS)


# --- the property -------------------------------------------------------------------------------


def draw_call(env: Env, op: OpSig) -> Call:
    call = Call(op)
    STRATEGIES[op.call](env, call)
    attr_values(env, call, CONVENTIONS[op.call].supplies(op))
    alias(env, call)
    # device indices are not range-checked on the host (the kernels clamp them)
    domains = references.reference_of(op).domains
    call.index_on_device = any(
        isinstance(a, cla.Array) and domains.get(t.name, "").startswith("index_of:")
        for t, a in zip(op.inputs, call.args, strict=False)
    )
    return call


def alias(env: Env, call: Call) -> None:
    """Sometimes one array passed for two arguments (add(x, x)): where two arguments could be
    the same array (one kind, shape, dtype and strides), the later one becomes the earlier."""
    arrays = [
        i for i, a in enumerate(call.args) if isinstance(a, np.ndarray | cla.Array) and a.ndim
    ]
    same = [
        (i, j)
        for i in arrays
        for j in arrays
        if i < j
        and type(call.args[i]) is type(call.args[j])
        and (call.args[i].shape, call.args[i].dtype, call.args[i].strides)
        == (call.args[j].shape, call.args[j].dtype, call.args[j].strides)
    ]
    if same and env.draw(st.integers(0, 1 if env.on_device else 3)) == 0:
        i, j = env.draw(st.sampled_from(same), label="alias")
        call.args[j], call.plain[j] = call.args[i], call.plain[i]
        call.forms[j] += f" (the array of argument {i})"
        if i in call.remake:
            call.remake[j] = call.remake[i]
        return
    # or the transpose of another argument's array (matmul(w, w.T))
    flipped = [
        (i, j)
        for i in arrays
        for j in arrays
        if i != j
        and call.args[i].ndim >= 2
        and isinstance(call.args[i], cla.Array)
        and call.args[i].flags.c_contiguous
        and call.args[j].shape == call.args[i].shape[::-1]
        and call.args[j].dtype == call.args[i].dtype
    ]
    if flipped and env.draw(st.integers(0, 2)) == 0:
        i, j = env.draw(st.sampled_from(flipped), label="alias transposed")
        call.args[j], call.plain[j] = call.args[i].T, call.plain[i].T.copy()
        call.forms[j] = call.forms[j].split(":")[0] + f": argument {i}'s array transposed"
        call.remake[j] = ("device_transposed", 0)


def invoke(call: Call) -> Any:
    from clforge import ops

    fn = getattr(ops, call.op.name)
    if CONVENTIONS[call.op.call].variadic:
        return fn(call.args, **call.kwargs)
    return fn(*call.args, **call.kwargs)


def again(call: Call, rng: np.random.Generator, canaries: Canaries) -> Call | None:
    """`call` with new device arrays of the same forms holding other values (each one's own,
    shuffled: they stay in its domain), or None when it has no device array. Its eager call
    has the same memo key, so it replays the first call's Recipe with the new buffers."""
    out = Call(call.op, list(call.args), list(call.plain), call.kwargs, call.forms, call.remake)
    out.index_on_device = call.index_on_device
    changed = False
    for i, (form, ax) in call.remake.items():
        if form.startswith("device"):
            old = call.plain[i]
            new = rng.permutation(old.reshape(-1)).reshape(old.shape)
            out.args[i], out.plain[i] = made(canaries, new, form, ax)
            changed = True
    return out if changed else None


def expect_right_or_refused(call: Call, canaries: Canaries, *, warm: bool = False) -> str:
    """Run `call` and judge it; returns what happened ('ok', 'refused', 'unchecked') for the
    statistics. `warm`: the same call was accepted before, so it must be again."""
    op = call.op.name
    note(f"{'again: ' if warm else ''}{op}({'; '.join(call.forms)}, {call.kwargs})")
    try:
        want = model(REG, op, call.plain, call.kwargs)
        wanted: Exception | None = None
    except ClforgeError as exc:
        want, wanted = None, exc
    host_before = [a.copy() if isinstance(a, np.ndarray) else None for a in call.args]
    got: Any = None
    refused: ClforgeError | None = None
    try:
        with canaries.watching(), warnings.catch_warnings():
            # NumPy's warnings inside a call are noise to the caller (an error under -W error)
            warnings.simplefilter("error", RuntimeWarning)
            got = invoke(call)
            dispatcher().runtime.queue.finish()
    except ClforgeError as exc:
        refused = exc
    except Exception:  # the property: nothing but a ClforgeError
        pytest.fail(f"{op}: not a ClforgeError:\n{traceback.format_exc()}")
    damage = canaries.damage()
    assert not damage, f"{op}: {', '.join(damage)}"
    for before, a in zip(host_before, call.args, strict=True):
        if before is not None:
            assert np.array_equal(before, a, equal_nan=True), f"{op}: a NumPy input modified"
    if refused is not None:
        assert not warm, f"{op}: refused a call it accepted before: {refused}"
        message = str(refused)
        assert message.startswith(f"{op}:"), f"the error does not name {op}: {message}"
        on_device = any(isinstance(a, cla.Array) for a in call.args)
        assert wanted is not None or on_device, (
            f"{op}: refused a call of NumPy arrays and numbers that the model accepts: {message}"
        )
        if os.environ.get("CLFORGE_FUZZ_STATS"):
            print(f"  {'; '.join(call.forms)} {call.kwargs}: {message[:150]}")
        return "refused"
    outcome = "ok"
    if wanted is not None:
        assert call.index_on_device, f"{op}: accepted a call the model refuses ({wanted})"
        # device indices are not read on the host: the kernels clamp them, as documented
        try:
            want = model(REG, op, clamped(call), call.kwargs)
        except ClforgeError:
            return "unchecked"
        outcome = "ok, indices clamped"
    assert want is not None
    outs = got if isinstance(got, tuple) else (got,)
    # NumPy in, NumPy out; device arrays in (with numbers or nothing else), device arrays out
    host_args = any(isinstance(a, np.ndarray | np.generic) for a in call.args)
    device = not host_args and any(isinstance(a, cla.Array) for a in call.args)
    assert len(outs) == len(want.outputs)
    for out, expected, dtype in zip(outs, want.outputs, want.dtypes, strict=True):
        kind = cla.Array if device else np.ndarray
        assert isinstance(out, kind), f"{op}: returned a {type(out).__name__}, not {kind}"
        host = to_host(out) if isinstance(out, cla.Array) else out
        assert host.dtype == np.dtype(CLFORGE[dtype]), f"{op}: dtype {host.dtype}, not {dtype}"
        problem = mismatch(op, dtype, host, expected, want.reduce_len, want.exact)
        assert problem is None, problem
    return outcome


def clamped(call: Call) -> list[Any]:
    """The model's arguments with device indices as the kernels take them (docs/calling.md):
    embedding's clamped into [0, V - 1]; take_along_axis's negative ones counted from the end,
    then clamped into the axis."""
    plain = list(call.plain)
    if call.op.call == "embedding":
        plain[0] = np.clip(plain[0], 0, max(0, np.shape(plain[1])[0] - 1))
    elif call.op.call == "along_axis":
        x, ind, axis = plain[0], plain[1], call.kwargs.get("axis", -1)
        n = np.size(x) if axis is None else np.shape(x)[axis]
        plain[1] = np.clip(np.where(ind < 0, ind + n, ind), 0, max(0, n - 1)).astype(ind.dtype)
    return plain


def pocl30() -> bool:
    return "PoCL 3.0" in dispatcher().runtime.device.platform.version


FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=False,  # each op its own fixed seed instead (@seed): one sequence per op
    deadline=None,
    database=None,
    print_blob=False,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module")
def canaries() -> Canaries:
    return Canaries(dispatcher().runtime)


@pytest.mark.parametrize("name", sorted(REG.ops))
def test_eager_call_is_right_or_refused(name: str, canaries: Canaries) -> None:
    op = REG.op(name)

    @FUZZ
    @seed(zlib.crc32(name.encode()) + SEED)
    @given(data=st.data(), values_seed=st.integers(0, 2**32 - 1))
    def run(data: Any, values_seed: int) -> None:
        canaries.forget()
        wild = data.draw(st.integers(0, 3), label="hostile") == 0
        on_device = data.draw(st.integers(0, 2), label="on device") == 0
        env = Env(data, np.random.default_rng(values_seed), canaries, wild, on_device)
        call = draw_call(env, op)
        outcome = expect_right_or_refused(call, canaries)
        OUTCOMES.setdefault(name, Counter())[outcome] += 1
        warm = again(call, env.rng, canaries) if outcome.startswith("ok") else None
        if warm is not None:
            OUTCOMES[name]["warm " + expect_right_or_refused(warm, canaries, warm=True)] += 1

    run()
    seen = OUTCOMES.get(name, Counter())
    if os.environ.get("CLFORGE_FUZZ_STATS"):
        print(f"\n{name}: {dict(seen)}")
    # the strategies must reach the kernels, not only the refusals
    assert seen["ok"] >= min(3, EXAMPLES // 4), f"{name}: {dict(seen)}"


OUTCOMES: dict[str, Counter[str]] = {}


# --- what the fuzzer found, kept as plain tests ---------------------------------------------------


def test_a_numpy_float64_scalar_beside_a_device_array() -> None:
    """np.float64 is a Python float: the memo key took it for a weak number, and learning the
    recipe then read `.base_data` of its NumPy copy (AttributeError). Found by the fuzzer:
    add(np.float64(1.0), a 0-d f64 device array)."""
    q = dispatcher().runtime.queue
    b = cla.to_device(q, np.array(2.5, np.float64))
    for _ in range(2):  # the second call would replay a recipe
        got = ops_call("add", np.float64(1.0), b)
        assert isinstance(got, np.ndarray) and got.shape == () and float(got) == 3.5


def test_a_device_view_that_needs_a_cast_is_taken_then_cast() -> None:
    """A device array that must be converted for NumPy's promotion goes through cast_<dtype>.
    Found by the fuzzer: add(f32 array, f16 device view [1:]) was refused by cast_f32 (an offset
    view), and the CallError must name add and 'b'. Views are now taken before the cast (this
    one copied: its 2-byte offset is no sub-buffer origin), so the call is right."""
    q = dispatcher().runtime.queue
    b = cla.to_device(q, np.arange(3, dtype=np.float16))[1:]
    got = ops_call("add", np.ones((1, 2), np.float32), b)
    np.testing.assert_array_equal(got, np.array([[2.0, 3.0]], np.float32))


def ops_call(name: str, *args: Any, **kwargs: Any) -> Any:
    from clforge import ops

    return getattr(ops, name)(*args, **kwargs)


POW_BASES = np.array([33, 31, 14, 41, 0, 10, 47, 22], np.float64)
POW_EXPONENT = 0.3289696276187897


@pytest.mark.parametrize("special", [0.0, -0.0, np.inf, np.nan, 1e-310, -2.0])
def test_pow_f64_vectors_with_a_special_base(special: float) -> None:
    """Found by the fuzzer: pow(i32 device array, f32 0-d device array) promotes to f64 and one
    element in 127 came back wrong (14 ** 0.329 = 0.957, not 2.383), also with NumPy inputs.
    PoCL 3.0's pow(double8) gives wrong lanes beside a lane whose base is 0, infinite, NaN or
    subnormal (test_pocl_vector_pow_f64 shows it on a bare kernel); pow's f64 cpu kernel now
    takes such a vector lane by lane (helpers()'s pow8_ in _common/macros.cl.j2)."""
    bases = np.tile(POW_BASES, 40)
    bases[4::8] = special
    bases[13::17] = special
    with np.errstate(invalid="ignore", divide="ignore"):
        want = bases**POW_EXPONENT
    got = ops_call("pow", bases, np.float64(POW_EXPONENT))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_pocl_vector_pow_f64() -> None:
    """The device's own pow(double8) on the bases above, against its scalar pow: shows whether
    a wrong pow result is the device's (xfail) or clforge's (the test above fails alone)."""
    import pyopencl as cl

    rt = dispatcher().runtime
    if "cl_khr_fp64" not in rt.device.extensions:
        pytest.skip("no f64 on this device")
    src = """
    __kernel void vec(__global const double* a, double b, __global double* c) {
        vstore8(pow(vload8(0, a), (double8)(b)), 0, c); }
    __kernel void one(__global const double* a, double b, __global double* c) {
        c[get_global_id(0)] = pow(a[get_global_id(0)], b); }
    """
    prg = cl.Program(rt.context, src).build()
    flags = cl.mem_flags
    a = cl.Buffer(rt.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=POW_BASES)
    outs = []
    for name, size in (("vec", 1), ("one", 8)):
        c = cl.Buffer(rt.context, flags.WRITE_ONLY, POW_BASES.nbytes)
        getattr(prg, name)(rt.queue, (size,), None, a, np.float64(POW_EXPONENT), c)
        host = np.empty_like(POW_BASES)
        cl.enqueue_copy(rt.queue, host, c)
        outs.append(host)
    if pocl30() and not np.allclose(outs[0], outs[1]):
        pytest.xfail(f"the device's pow(double8) is wrong: {outs[0]} vs scalar {outs[1]}")
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-12)


def test_one_array_for_two_arguments_does_not_poison_the_memo() -> None:
    """A call on device arrays is memoized by the arrays' dtypes, shapes, strides and offsets;
    learning it mapped each input to the first argument with the same buffer, so add(x, x) was
    learned as (x, x) -> both inputs from argument 0, and a later add(y, z) returned y + y.
    Found by the fuzzer (an array passed twice, then the same call on new arrays):
    matmul(v, v) on 1-d device arrays, then matmul(p, q) gave p . p."""
    q = dispatcher().runtime.queue

    def dev(value: float, shape: tuple[int, ...]) -> cla.Array:
        return cla.to_device(q, np.full(shape, value, np.float32))

    x = dev(1.0, (5,))
    assert (ops_call("add", x, x).get() == 2).all()
    assert (ops_call("add", dev(2.0, (5,)), dev(10.0, (5,))).get() == 12).all()
    w = cla.to_device(q, np.arange(12, dtype=np.float32).reshape(3, 4))
    ops_call("matmul", w, w.T)  # a and b views of one buffer, b transposed
    got = ops_call("matmul", dev(1.0, (3, 4)), dev(2.0, (3, 4)).T).get()
    assert (got == 8).all(), got


def test_attention_takes_a_numpy_bool_scalar_as_mask() -> None:
    """A NumPy scalar mask (np.True_, a 0-d np.generic, not an np.ndarray) was taken for a
    device array and refused as 'a boolean device array'. Found by the fuzzer:
    attention(q, k, v, np.bool_(True)) on empty NumPy arrays."""
    q = np.random.default_rng(3).standard_normal((1, 2, 3, 4)).astype(np.float32)
    want = ops_call("attention", q, q, q)
    np.testing.assert_allclose(ops_call("attention", q, q, q, np.True_), want, rtol=1e-6)
    masked = ops_call("attention", q, q, q, np.False_)  # every key masked out: zeros
    assert masked.shape == want.shape and not masked.any()


@pytest.mark.parametrize(
    ("name", "shape", "first", "then"),
    [
        ("gelu", (4,), {"approximate": 1}, {"approximate": True}),  # an int attribute
        ("leaky_relu", (4,), {"alpha": 1}, {"alpha": True}),  # a float attribute
        ("sum", (3, 4), {"axis": 1}, {"axis": 1.0}),  # a convention option
        ("sum", (3, 4), {"axis": 1, "keepdims": True}, {"axis": 1, "keepdims": 1}),
        ("sum", (3, 4), {"axis": (1,)}, {"axis": (True,)}),
    ],
)
@pytest.mark.parametrize("on_device", [False, True])
def test_a_memoized_call_does_not_skip_the_type_checks(
    name: str, shape: tuple[int, ...], first: dict, then: dict, on_device: bool
) -> None:
    """Plans and recipes were memoized by the attribute and option values alone, and True, 1
    and 1.0 are equal keys: after gelu(x, approximate=1), gelu(x, approximate=True) (refused
    when cold: 'must be an int') was accepted, as was sum(x, axis=1.0) on device arrays after
    sum(x, axis=1). Found by the fuzzer: gelu(f32 device array (0,), approximate=True) accepted
    where its model refused it."""
    x = np.ones(shape, np.float32)
    arg = cla.to_device(dispatcher().runtime.queue, x) if on_device else x
    ops_call(name, arg, **first)
    with pytest.raises(ClforgeError, match=f"^{name}: "):
        ops_call(name, arg, **then)


def test_gemm_a_number_bias_beyond_the_dtype_warns_nothing() -> None:
    """gemm's convention made a number bias an array of a's dtype without NumPy's errstate:
    1e300 beside f16 arrays, or NaN beside i32 ones (refused afterwards), raised NumPy's
    RuntimeWarning (an exception under -W error) where add(x, 1e300) gives inf quietly. Found
    by the fuzzer (CLFORGE_FUZZ_SEED=99, 2000 examples: a RuntimeWarning in gemm)."""
    ones = np.ones((2, 2), np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = ops_call("gemm", ones, ones, 1e300, beta=1.0)
        assert np.isinf(got).all()
        with pytest.raises(ClforgeError, match=r"^gemm: "):
            ops_call("gemm", ones.astype(np.int32), ones.astype(np.int32), math.nan)
