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
import pytest

from clforge.call.binding import resolve_attrs
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
