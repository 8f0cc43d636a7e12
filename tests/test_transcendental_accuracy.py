"""The accuracy of the vectorized approximations of exp, sigmoid, silu, tanh and gelu (both forms)
that the unary family's cpu kernels use instead of libm: each instance an op spec's `accuracy:`
bound names is run on the device over a dense sweep of inputs (every 4093rd float32 bit
pattern, every f16 value, 2^20 points of the bound's range, the special values) and compared
with float64 (generator/clforge/references/accuracy.py). The bounds are the measured errors with a
small margin, also shown in docs/ops.md; special values (NaN, infinities, signed zeros) must
match exactly.

`pytest -s` prints the measured errors next to the bounds (to update a spec after changing an
approximation)."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

from clforge.call.binding import resolve_attrs
from clforge.emit.render import Renderer
from clforge.references import accuracy
from clforge.registry import loader as registry_mod
from clforge.spec.load import load_specs
from clforge.spec.model import AccuracySpec

from .checking import launch_with_canaries

REG = registry_mod.default()
BOUNDS: dict[str, tuple[AccuracySpec, ...]] = {
    s.spec.op: s.spec.accuracy for s in load_specs() if s.spec.accuracy
}
CASES = [
    pytest.param(op, b, variant, dtype, id=f"{op}-{variant}-{dtype}-{i}")
    for op, bounds in sorted(BOUNDS.items())
    for i, b in enumerate(bounds)
    for variant in b.variants
    for dtype in b.dtypes
]


def _instance(op: str, variant: str, dtype: str):  # type: ignore[no-untyped-def]
    (inst,) = [
        i for i in REG.instances.values() if (i.op, i.variant, i.dtype) == (op, variant, dtype)
    ]
    return inst


@pytest.mark.parametrize(("op", "bound", "variant", "dtype"), CASES)
def test_accuracy_bound(runtime, op: str, bound: AccuracySpec, variant: str, dtype: str) -> None:
    inst = _instance(op, variant, dtype)
    missing = [e for e in inst.requires.extensions if e not in runtime.device.extensions]
    if missing:
        pytest.skip(f"the device lacks {', '.join(missing)}")
    x = accuracy.sweep(dtype, *bound.range)
    attrs = resolve_attrs(REG.op(op), bound.attrs)
    y = launch_with_canaries(runtime, inst, {"x": x}, {"N": x.size}, attrs)["y"]
    errors = accuracy.measure(dtype, x, y, accuracy.exact(op, x, bound.attrs))
    print(
        f"\n{inst.name} {bound.attrs or ''}: {errors}; bound {bound.max_abs:g}, {bound.max_rel:g}"
    )
    assert not errors.special, f"{inst.name}: {errors}"
    assert errors.max_abs <= bound.max_abs, f"{inst.name}: {errors}, above {bound.max_abs:g}"
    assert errors.max_rel <= bound.max_rel, f"{inst.name}: {errors}, above {bound.max_rel:g}"


def test_every_approximation_states_its_accuracy() -> None:
    """Every op the approximations serve has bounds for its cpu variant in f32 and f16, and
    gelu for both of its forms."""
    for op in accuracy.EXACT:
        defaults = {a.name: a.default for a in REG.op(op).attrs if a.type == "int"}
        covered = {
            (d, tuple(sorted({**defaults, **b.attrs}.items())))
            for b in BOUNDS.get(op, ())
            if "cpu" in b.variants
            for d in b.dtypes
        }
        forms = [(("approximate", 0),), (("approximate", 1),)] if op == "gelu" else [()]
        for dtype in ("f32", "f16"):
            for form in forms:
                assert (dtype, form) in covered, (op, dtype, form)


# --- the measures themselves --------------------------------------------------------------


def test_measures_find_wrong_special_values() -> None:
    x = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, 1.0, 100.0], np.float32)
    ref = accuracy.exact("exp", x)
    good = np.array([np.nan, 0.0, np.inf, 1.0, 1.0, np.e, np.inf], np.float32)
    errors = accuracy.measure("f32", x, good, ref)
    assert errors.special == () and errors.max_rel < 1e-7
    for i, wrong in ((0, 1.0), (1, np.nan), (2, 3.4e38), (6, 3.4e38), (5, np.inf)):
        y = good.copy()
        y[i] = wrong
        assert len(accuracy.measure("f32", x, y, ref).special) == 1, (i, wrong)


def test_measures_check_the_sign_of_zero_and_the_limits() -> None:
    x = np.array([-0.0, 0.0, -np.inf, np.inf], np.float32)
    ref = accuracy.exact("silu", x)
    assert list(np.signbit(ref)) == [True, False, True, False] and ref[3] == np.inf
    ok = np.array([-0.0, 0.0, -0.0, np.inf], np.float32)
    assert accuracy.measure("f32", x, ok, ref).special == ()
    flipped = np.array([0.0, 0.0, np.nan, np.inf], np.float32)  # silu(-inf) = -inf * 0 = NaN
    assert len(accuracy.measure("f32", x, flipped, ref).special) == 2


def test_measures_abs_and_rel_where_they_are_defined() -> None:
    x = np.array([-200.0, -1.0, -0.5, 10.0], np.float32)
    ref = accuracy.exact("exp", x)  # exp(-200) is below FLT_MIN: no relative error there
    y = (ref * (1 + np.array([0.5, 1e-7, 2e-7, 3e-7]))).astype(np.float32)
    errors = accuracy.measure("f32", x, y, ref)
    assert errors.max_rel == pytest.approx(3e-7, rel=0.3) and errors.max_rel_at == 10.0
    assert errors.max_abs == pytest.approx(2e-7 * np.exp(-0.5), rel=0.3)
    assert errors.max_abs_at == -0.5  # exp(10) > 1: no absolute error there


def test_sweep_covers_the_line_and_the_specials() -> None:
    x = accuracy.sweep("f32", -20, 20)
    assert np.isnan(x).any() and np.isposinf(x).any() and np.isneginf(x).any()
    assert (x == 0).sum() >= 2 and np.signbit(x[x == 0]).any()
    finite = x[np.isfinite(x)]
    assert finite.max() == np.finfo(np.float32).max == -finite.min()
    assert ((x > 19) & (x <= 20)).sum() > 20000  # the dense range
    h = accuracy.sweep("f16", -20, 20)
    assert np.unique(h.view(np.uint16)).size == 2**16  # every half value


# --- exp for x <= 0 (softmax, log_softmax and attention's cpu kernels) ------------------------

_EXP_NONPOS_KERNEL = """
{% import "_common/transcendentals.cl.j2" as tx %}
{{ "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" if S == "double" }}
{{ tx.functions("exp", S ~ "8", I ~ "8", "v", domain="nonpositive") }}
{{ tx.functions("exp", S, I, "s", domain="nonpositive") }}
{% set xv = "*(__global const " ~ S ~ "8*)(x + i)" %}
__kernel void expn(__global const {{ S }}* x, __global {{ S }}* yv, __global {{ S }}* ys) {
    const size_t i = get_global_id(0) * 8;
    *(__global {{ S }}8*)(yv + i) = {{ tx.call("exp", xv, "v", domain="nonpositive") }};
    for (int e = 0; e < 8; ++e) {
        ys[i + e] = {{ tx.call("exp", "x[i + e]", "s", domain="nonpositive") }};
    }
}
"""


@pytest.mark.parametrize(
    ("dtype", "cut", "rel"),
    [("f32", -86.0, 1e-7), ("f64", -707.0, 2 * np.finfo(np.float64).eps)],
)
def test_exp_nonpositive_form(runtime, dtype: str, cut: float, rel: float) -> None:  # type: ignore[no-untyped-def]
    """tx's exp for x <= 0 (vectors and scalars), the one softmax, log_softmax and attention's
    cpu kernels call: within `rel` of exp from the cut (e^-86 in float, measured 7.6e-8; e^-707
    in double, measured 1.6 eps) to 0, exactly 0 below it (so never a denormal), e^-inf = 0,
    e^-0 = 1 and NaN kept."""
    dt = np.dtype(np.float32 if dtype == "f32" else np.float64)
    if dtype == "f64" and "cl_khr_fp64" not in runtime.device.extensions:
        pytest.skip("the device lacks cl_khr_fp64")
    scalar, integer = ("float", "int") if dtype == "f32" else ("double", "long")
    source = Renderer().env.from_string(_EXP_NONPOS_KERNEL).render(S=scalar, I=integer)
    specials = [-np.inf, np.nan, -0.0, 0.0, cut, np.nextafter(cut, -np.inf), cut - 20.0, -1e30]
    x = np.concatenate(
        [np.linspace(cut - 4.0, 0.0, 2**20 - 16), np.array(specials + [-1.0] * 8)]
    ).astype(dt)
    ctx, q = runtime.context, runtime.queue
    mf = cl.mem_flags
    xb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yv, ys = np.empty_like(x), np.empty_like(x)
    bv, bs = cl.Buffer(ctx, mf.WRITE_ONLY, x.nbytes), cl.Buffer(ctx, mf.WRITE_ONLY, x.nbytes)
    cl.Program(ctx, source).build().expn(q, (x.size // 8,), None, xb, bv, bs)
    cl.enqueue_copy(q, yv, bv)
    cl.enqueue_copy(q, ys, bs)
    ref = np.exp(x.astype(np.longdouble))
    for y in (yv, ys):
        assert np.isnan(y[np.isnan(x)]).all()
        assert np.all(y[x == 0] == 1.0)
        kept = ~np.isnan(x) & (x >= cut)
        err = np.abs((y[kept] - ref[kept]) / ref[kept]).max()
        print(f"\nexp_nonpos {dtype}: max relative error {float(err):.3g} (bound {rel:.3g})")
        assert err <= rel, float(err)
        assert np.all(y[x < cut] == 0), y[x < cut].max()
