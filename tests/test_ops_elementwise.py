"""The elementwise ops through their eager functions (`call: flat` for unary ops, NumPy
broadcasting for binary ops), their edge semantics (NaN, integer division), bad calls, and the
dispatcher's choice on every shipped device profile.

Every instance is also checked against the references over their cases in test_instances.py;
here the calling conventions, attributes and semantics are the subject."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl.array as cla
import pytest
from clforge.generated import ops

from clforge import references
from clforge.call.dispatcher import dispatcher
from clforge.call.selection import select
from clforge.device.profile import DeviceProfile
from clforge.device.profile_files import find_profile
from clforge.errors import CallError
from clforge.registry import loader as registry_mod

REG = registry_mod.default()
rng = np.random.default_rng(11)

UNARY = ("relu", "leaky_relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt",
         "neg", "abs")  # fmt: skip
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "pow")
INT_OPS = ("relu", "neg", "abs", "add", "sub", "mul", "div", "maximum", "minimum", "pow", "where",
           "clip")  # fmt: skip
TERNARY = ("where", "clip")
RTOL = {np.float16: 5e-3, np.float32: 2e-5, np.float64: 1e-12}


def _input(op: str, name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    domain = references.reference_of(REG.op(op)).domains.get(name, "normal")
    return references.make_input(rng, shape, np.dtype(dtype), domain)


def _want(op: str, inputs: dict[str, np.ndarray], **attrs: Any) -> np.ndarray:
    (out,) = references.expected(REG.op(op), inputs, attrs).values()
    return out


def _check(got: Any, want: np.ndarray, dtype: Any) -> None:
    assert isinstance(got, np.ndarray)
    assert got.shape == want.shape and got.dtype == np.dtype(dtype)
    if np.issubdtype(np.dtype(dtype), np.integer):
        np.testing.assert_array_equal(got, want)
    else:
        tol = RTOL[dtype]
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


# --- unary: any shape, flattened -------------------------------------------------------------

SHAPES = [(), (1,), (9,), (3, 4), (2, 3, 17), (0, 3)]


@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_unary_any_shape(op: str, dtype: Any) -> None:
    for shape in SHAPES:
        x = _input(op, "x", shape, dtype)
        _check(getattr(ops, op)(x), _want(op, {"x": x}), dtype)


@pytest.mark.parametrize("op", ["relu", "neg", "abs"])
def test_unary_i32(op: str) -> None:
    x = np.arange(-20, 21, dtype=np.int32).reshape(1, 41)
    _check(getattr(ops, op)(x), _want(op, {"x": x}), np.int32)


def test_unary_on_device_arrays_keeps_shape() -> None:
    q = dispatcher().runtime.queue
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    y = ops.sigmoid(cla.to_device(q, x))
    assert isinstance(y, cla.Array) and y.shape == (4, 5, 6)
    np.testing.assert_allclose(y.get(), 1 / (1 + np.exp(-x)), rtol=1e-5)


def test_attributes() -> None:
    x = np.linspace(-4, 4, 1001, dtype=np.float64).reshape(7, 143)
    erf_form = _want("gelu", {"x": x}, approximate=0)
    tanh_form = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(ops.gelu(x), erf_form, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ops.gelu(x, approximate=1), tanh_form, rtol=1e-12, atol=1e-12)
    assert np.abs(erf_form - tanh_form).max() > 1e-5  # the two forms really differ
    np.testing.assert_allclose(ops.leaky_relu(x), np.where(x < 0, 0.01 * x, x), rtol=1e-12)
    np.testing.assert_allclose(
        ops.leaky_relu(x, alpha=0.25), np.where(x < 0, 0.25 * x, x), rtol=1e-12
    )


def test_relu_keeps_nan() -> None:
    x = np.array([np.nan, -1.0, 2.0, -np.inf] * 5, np.float32)
    np.testing.assert_array_equal(ops.relu(x), np.array([np.nan, 0.0, 2.0, 0.0] * 5, np.float32))
    np.testing.assert_array_equal(ops.leaky_relu(x, alpha=0.5)[:4], [np.nan, -0.5, 2.0, -np.inf])


# --- binary: NumPy broadcasting ----------------------------------------------------------------

BROADCASTS = [
    ((5,), (5,)),
    ((3, 4), (4,)),  # a row
    ((3, 1), (1, 4)),  # an outer product
    ((2, 3, 17), (3, 1)),  # a column, lower rank
    ((), (5,)),  # a scalar
    ((2, 1, 3, 1), (1, 4, 1, 5)),
    ((6, 1, 9), (1,)),
    ((0, 3), (3,)),  # empty
    ((1,), (7, 1)),
]


@pytest.mark.parametrize(
    ("op", "dtype"),
    [
        (o, d)
        for o in BINARY
        for d in (np.float32, np.float64, np.float16, np.int32)
        if d is not np.int32 or o in INT_OPS
    ],
)
def test_binary_broadcasts_like_numpy(op: str, dtype: Any) -> None:
    for sa, sb in BROADCASTS:
        a, b = _input(op, "a", sa, dtype), _input(op, "b", sb, dtype)
        got = getattr(ops, op)(a, b)
        want = _want(op, {"a": a, "b": b})
        assert got.shape == np.broadcast_shapes(sa, sb)
        _check(got, want, dtype)


def test_binary_on_device_arrays() -> None:
    q = dispatcher().runtime.queue
    a = rng.standard_normal((64, 33)).astype(np.float32)
    b = rng.standard_normal(33).astype(np.float32)
    c = ops.mul(cla.to_device(q, a), cla.to_device(q, b))
    assert isinstance(c, cla.Array) and c.shape == (64, 33)
    np.testing.assert_allclose(c.get(), a * b, rtol=1e-6)


# Launch every runnable instance by name on canonical (rank-4) shapes: lengths that exercise
# both the 8-wide vector loops and their scalar tails.
def _instances(op: str, dtype: str) -> list[str]:
    exts = dispatcher().runtime.device.extensions
    return [
        i.name
        for i in REG.instances.values()
        if i.op == op and i.dtype == dtype and all(e in exts for e in i.requires.extensions)
    ]


def _launch(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return dispatcher().launch(name, {"a": a, "b": b})["c"]


@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("dtype", ["f32", "f64", "f16"])
def test_maximum_minimum_propagate_nan_like_numpy(op: str, dtype: str) -> None:
    np_dtype = np.dtype({"f32": "float32", "f64": "float64", "f16": "float16"}[dtype])
    n = 21
    a = rng.standard_normal(n).astype(np_dtype)
    b = rng.standard_normal(n).astype(np_dtype)
    a[[0, 3, 9, 20]] = np.nan
    b[[3, 5, 10, 19]] = np.nan
    b[7] = np.inf
    want = getattr(np, op)(a, b)
    shape4 = (1, 1, 1, n)
    for name in _instances(op, dtype):
        got = _launch(name, a.reshape(shape4), b.reshape(shape4)).reshape(n)
        np.testing.assert_array_equal(got, want, err_msg=name)
        # a single-element b, stretched: NaN there makes every result NaN
        nan = np.full((1, 1, 1, 1), np.nan, np_dtype)
        assert np.isnan(_launch(name, a.reshape(shape4), nan)).all(), name
    np.testing.assert_array_equal(getattr(ops, op)(a, b), want)


def test_integer_division_truncates_toward_zero() -> None:
    a = np.array([-7, 7, -7, 7, -1, 1, 0, -9, 9, 100, -100, 5, -5, 6, -6, 1], np.int32)
    b = np.array([2, 2, -2, -2, 3, -3, 5, 4, -4, 7, 7, -1, 1, 6, 6, -1], np.int32)
    want = np.trunc(a / b).astype(np.int32)
    assert want[0] == -3 and np.floor_divide(a, b)[0] == -4  # not floor
    np.testing.assert_array_equal(references.elementwise.div_trunc(a, b), want)
    np.testing.assert_array_equal(ops.div(a, b), want)
    for name in _instances("div", "i32"):
        got = _launch(name, a.reshape(1, 1, 1, -1), b.reshape(1, 1, 1, -1))
        np.testing.assert_array_equal(got.reshape(-1), want, err_msg=name)
    np.testing.assert_array_equal(ops.div(a, np.int32(-2)), np.trunc(a / -2).astype(np.int32))


# --- dtype promotion (numpy.result_type) and integer pow -----------------------------------

DTYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i32": np.int32}


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum", "pow"])
@pytest.mark.parametrize(("da", "db"), [(a, b) for a in DTYPES for b in DTYPES if a != b])
def test_mixed_dtypes_promote_like_numpy(op: str, da: str, db: str) -> None:
    a = _input(op, "a", (3, 5), DTYPES[da])
    b = _input(op, "b", (5,), DTYPES[db])
    want_dtype = np.result_type(a, b)
    got = getattr(ops, op)(a, b)
    assert got.dtype == want_dtype
    _check(got, _want(op, {"a": a.astype(want_dtype), "b": b.astype(want_dtype)}), want_dtype.type)


def test_promotion_on_device_arrays() -> None:
    q = dispatcher().runtime.queue
    a = rng.standard_normal((4, 7)).astype(np.float16)
    b = rng.integers(-5, 5, size=7).astype(np.int32)
    got = ops.add(cla.to_device(q, a), cla.to_device(q, b))  # through cast_f64 on the device
    assert isinstance(got, cla.Array) and got.dtype == np.float64
    np.testing.assert_array_equal(got.get(), a.astype(np.float64) + b)
    again = ops.add(cla.to_device(q, a + 1), cla.to_device(q, b))  # a fresh cast, not a memo
    np.testing.assert_array_equal(again.get(), (a + 1).astype(np.float64) + b)


@pytest.mark.parametrize(
    ("x", "number", "want"),
    [
        (np.arange(4, dtype=np.int32), 2, np.int32),  # NEP 50: Python numbers are weak
        (np.arange(4, dtype=np.int32), 2.5, np.float64),  # a float with ints: f64
        (np.arange(4, dtype=np.float16), 3.0, np.float16),
        (np.arange(4, dtype=np.float32), 7, np.float32),
    ],
)
def test_python_numbers_are_weak_scalars(x: np.ndarray, number: float, want: type) -> None:
    for op in ("add", "mul", "maximum"):
        got = getattr(ops, op)(x, number)
        expect = getattr(np, {"add": "add", "mul": "multiply", "maximum": "maximum"}[op])(x, number)
        assert got.dtype == expect.dtype == want
        np.testing.assert_array_equal(got, expect)
    assert ops.sub(number, x).dtype == want


def test_a_promotion_to_an_unsupported_dtype_is_refused() -> None:
    from clforge.conventions.promotion import promoted

    sig = REG.op("add")
    narrow = type(sig)(**{**vars(sig), "dtypes": ("f32", "f16", "i32")})
    with pytest.raises(CallError) as err:
        promoted(narrow, {"a": np.ones(2, np.float32), "b": np.ones(2, np.int32)})
    assert str(err.value) == (
        "add: inputs a (f32), b (i32) promote to f64 (numpy.result_type), which add does not "
        "support (supported: f32, f16, i32); cast them first"
    )


def test_integer_pow_wraps_and_documents_negative_exponents() -> None:
    a = np.array([2, 3, -3, 7, 0, 1, -1, -1, 5, 0, 2, -2], np.int32)
    b = np.array([10, 20, 5, 11, 0, -3, -3, -4, -1, -2, 31, 31], np.int32)
    ok = b >= 0
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(ops.pow(a[ok], b[ok]), np.power(a[ok], b[ok]))  # wraps
    with pytest.raises(ValueError):
        np.power(a, b)  # NumPy refuses negative integer powers of integers
    np.testing.assert_array_equal(ops.pow(a, b)[~ok], [1, -1, 1, 0, 0])
    for name in _instances("pow", "i32"):
        got = _launch(name, a.reshape(1, 1, 1, -1), b.reshape(1, 1, 1, -1)).reshape(-1)
        np.testing.assert_array_equal(got, references.elementwise.power(a, b), err_msg=name)
    # an i32 exponent with f32 bases promotes to f64, as NumPy
    x = rng.standard_normal(9).astype(np.float32)
    got = ops.pow(x, np.int32(3) * np.ones(9, np.int32))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, x.astype(np.float64) ** 3, rtol=1e-12)


# --- three inputs: where, clip ------------------------------------------------------------------

TERNARY_SHAPES = [
    ((5,), (5,), (5,)),
    ((3, 4), (4,), (3, 1)),
    ((2, 3, 17), (), (17,)),
    ((1,), (7, 1), (1, 6)),
    ((2, 1, 3, 1), (1, 4, 1, 5), (1,)),
    ((0, 3), (3,), (1,)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize(("sc", "sx", "sy"), TERNARY_SHAPES)
def test_where_broadcasts_like_numpy(dtype: Any, sc: tuple, sx: tuple, sy: tuple) -> None:
    cond = rng.standard_normal(sc) > 0  # a NumPy bool array: converted to i32 on the host
    x, y = _input("where", "x", sx, dtype), _input("where", "y", sy, dtype)
    want = np.where(cond, x, y)
    got = ops.where(cond, x, y)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    icond = rng.integers(-2, 3, size=sc).astype(np.int32)  # nonzero is true, of either sign
    np.testing.assert_array_equal(ops.where(icond, x, y), np.where(icond, x, y))


def test_where_promotes_and_takes_numbers() -> None:
    cond = np.array([[True, False, True]])
    x = np.arange(3, dtype=np.int32)
    for a, b in ((x, 0.5), (x, x.astype(np.float16)), (1.0, 0.0), (x, 7), (np.float32(2), x)):
        want = np.where(cond, a, b)
        got = ops.where(cond, a, b)
        assert got.dtype == want.dtype, (a, b)
        np.testing.assert_array_equal(got, want)


def test_where_on_device_arrays() -> None:
    q = dispatcher().runtime.queue
    x = rng.standard_normal((6, 5)).astype(np.float32)
    cond = (x > 0).astype(np.int32)
    got = ops.where(cla.to_device(q, cond), cla.to_device(q, x), 0.0)
    assert isinstance(got, cla.Array)
    np.testing.assert_array_equal(got.get(), np.where(cond, x, np.float32(0)))
    with pytest.raises(CallError) as err:
        ops.where(cla.to_device(q, x > 0), cla.to_device(q, x), 0.0)
    assert str(err.value) == (
        "where: input 'cond' is a device array of dtype bool (shape (6, 5)); the call needs it as "
        "i32: convert it first"
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
def test_clip_like_numpy(dtype: Any) -> None:
    x = (rng.standard_normal((4, 9)) * 10).astype(dtype)
    lo = (rng.standard_normal(9) * 5 - 3).astype(dtype)
    hi = (rng.standard_normal((4, 1)) * 5 + 3).astype(dtype)
    for a, b in ((lo, hi), (-2, 3), (lo, None), (None, hi), (None, None), (5, -5)):
        # NumPy before 2.1 refuses two Nones; since then they return x unchanged
        want = x.copy() if a is None and b is None else np.clip(x, a, b)
        got = ops.clip(x, a, b)
        assert got.dtype == want.dtype, (a, b)
        np.testing.assert_array_equal(got, want)


def test_clip_semantics() -> None:
    x = np.array([np.nan, -np.inf, np.inf, -1.5, 0.25, 3.0], np.float32)
    np.testing.assert_array_equal(ops.clip(x, -1.0, 1.0), np.clip(x, -1.0, 1.0))  # NaN stays
    lo = np.array([np.nan, 0, 0, 0, 0, 0], np.float32)
    np.testing.assert_array_equal(ops.clip(x, lo, 1.0), np.clip(x, lo, 1.0))  # a NaN bound too
    xi = np.arange(-4, 5, dtype=np.int32)
    got = ops.clip(xi, 0.5, 2.5)  # a float bound with i32 makes f64, as NumPy
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, np.clip(xi, 0.5, 2.5))
    big = np.array([-(2**31), 2**31 - 1, 0], np.int32)
    np.testing.assert_array_equal(ops.clip(big, None, None), big)  # -inf / inf fills saturate
    q = dispatcher().runtime.queue
    got = ops.clip(cla.to_device(q, x[3:]), lo=-1.0)
    np.testing.assert_array_equal(got.get(), np.clip(x[3:], -1.0, None))


# --- bad calls -------------------------------------------------------------------------------

F32 = np.float32


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: ops.add(np.ones((3, 4), F32), np.ones((3,), F32)),
            "add: shapes (3, 4) and (3,) do not broadcast",
        ),
        (
            lambda: ops.mul(np.ones((1, 2, 1, 1, 3), F32), np.ones(3, F32)),
            "mul: input 'a' has rank 5; at most 4",
        ),
        (
            lambda: dispatcher().call(
                "sub", {"a": np.ones((1, 1, 1, 3), F32), "b": np.ones((1, 1, 1, 3), np.float64)}
            ),
            "sub: inputs have different dtypes (f32 and f64 for 'b'); cast one of them",
        ),  # calls in the op's own terms take one dtype; eager calls promote
        (
            lambda: ops.add(np.ones(3, np.int64), np.ones(3, F32)),
            "add: input 'a' has dtype int64, which clforge does not support (supported: f16, "
            "f32, f64, i32)",
        ),
        (
            lambda: ops.add(np.ones(3, np.int32), 2**31),
            "add: b = 2147483648 is out of the range of i32",
        ),
        (
            lambda: ops.mul(2, 3.5),
            "mul: at least one input must be an array, got only numbers",
        ),
        (
            lambda: ops.where(np.ones((2, 3), bool), np.ones(4, F32), 0.0),
            "where: shapes (2, 3) and (4,) and () do not broadcast",
        ),
        (
            lambda: ops.clip(np.ones(3, np.int32), 2**40),
            "clip: lo = 1099511627776 is out of the range of i32",
        ),
        (
            lambda: ops.sqrt(np.ones(3, np.int32)),
            "sqrt: dtype i32 is not supported (supported: f32, f64, f16)",
        ),
        (
            lambda: ops.gelu(np.ones(3, F32), approximate=2),
            "gelu: approximate must be 0 (the erf form) or 1 (the tanh form) "
            "(approximate == 0 or approximate == 1 is false for approximate=2)",
        ),
        (
            lambda: ops.maximum([1.0], np.ones(1, F32)),
            "maximum: input 'a' is a list, not an array (pass a NumPy or pyopencl array)",
        ),
    ],
)
def test_bad_calls(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(CallError) as err:
        call()
    if "out of the range of i32" in message and np.lib.NumpyVersion(np.__version__) < "2.0.0":
        # NumPy 1.x promotes an int beyond i32 to int64 (NEP 50 came with 2.0): that is refused
        op = message.partition(":")[0]
        assert str(err.value).startswith(f"{op}: inputs ") and "promote to int64" in str(err.value)
        return
    assert str(err.value) == message


# --- the dispatcher's choice per device profile -----------------------------------------------

UNKNOWN = DeviceProfile("Mystery Accelerator", "unknown", "accelerator", None, (), 0, "global", 64)
PROFILES = {
    name: find_profile(name) for name in ("nvidia-h100", "amd-mi250x", "intel-max-1100", "pocl-cpu")
}
PROFILES["unknown"] = UNKNOWN
# variant chosen per profile, for f32/f64/i32 and for f16 (native half needs cl_khr_fp16, which
# the H100 profile and PoCL lack; the gpu variants have no f16, and the cpu variant has it only
# for the ops of its float approximations, computed in float)
WIDE = {"nvidia-h100": "gpu", "amd-mi250x": "gpu", "intel-max-1100": "gpu", "pocl-cpu": "cpu"}
HALF = {"amd-mi250x": "half", "intel-max-1100": "half"}
CPU_HALF = ("exp", "sigmoid", "silu", "tanh", "gelu")


@pytest.mark.parametrize("op", UNARY + BINARY + TERNARY)
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_dispatcher_choice_per_profile(op: str, profile: str) -> None:
    p = PROFILES[profile]
    dtypes = ["f32", "f64", "f16"] + (["i32"] if op in INT_OPS else [])
    for dtype in dtypes:
        if dtype == "f64" and not p.has("cl_khr_fp64"):
            continue
        sel = select(REG, p, op, dtype, {}, {})
        want = WIDE.get(profile, "generic")
        if dtype == "f16":
            cpu_half = profile == "pocl-cpu" and op in CPU_HALF
            want = "cpu" if cpu_half else HALF.get(profile, "generic")
        assert sel.chosen is not None, (op, dtype, profile)
        assert sel.chosen.instance == f"{op}__{want}__{dtype}", (op, dtype, profile)
