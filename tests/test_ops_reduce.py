"""The reduce family through the eager entry points: reductions over any axis (sum, mean, max,
min, argmax), softmax / log_softmax, layer_norm / rms_norm; bad calls; the dispatcher's choice
on every shipped profile; the instances this device cannot build still pass clang's checks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyopencl.array as cla
import pytest
from clforge.generated import ops

from clforge.call.dispatcher import dispatcher
from clforge.call.selection import select
from clforge.core.tree import DEFAULT
from clforge.device.profile import DeviceProfile
from clforge.device.profile_files import find_profile
from clforge.errors import CallError
from clforge.registry import loader as registry_mod

rng = np.random.default_rng(5)
REG = registry_mod.default()
REDUCTIONS = ("sum", "mean", "max", "min", "argmax")
TOL = {np.float32: 1e-5, np.float64: 1e-12, np.float16: 2e-3}


def _np_reduce(name: str, x: np.ndarray, axis: int, keepdims: bool) -> np.ndarray:
    if name == "argmax":
        out = x.argmax(axis=axis, keepdims=keepdims)
        return out.astype(np.int32)
    wide = x if np.issubdtype(x.dtype, np.integer) else x.astype(np.float64)
    return getattr(np, name)(wide, axis=axis, keepdims=keepdims)


def _check(got: np.ndarray, want: np.ndarray, dtype: type) -> None:
    assert got.shape == want.shape
    if np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got, want)
    else:
        tol = TOL[dtype]
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=10 * tol, atol=100 * tol)


# --- reductions ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize(
    ("shape", "axis"),
    [((37,), 0), ((37,), -1), ((5, 19), -1), ((5, 19), 0), ((4, 13, 11), 1), ((3, 6, 17), 0)],
)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_over_any_axis(name: str, shape: tuple, axis: int, keepdims: bool) -> None:
    x = rng.standard_normal(shape).astype(np.float32)
    got = getattr(ops, name)(x, axis=axis, keepdims=keepdims)
    _check(got, _np_reduce(name, x, axis, keepdims), np.float32)


@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        (n, d)
        for n in REDUCTIONS
        for d in (np.float64, np.float16, np.int32)
        if not (n == "mean" and d is np.int32)
    ],  # mean has no i32 instance
)
def test_reduction_dtypes(name: str, dtype: type) -> None:
    x = (rng.standard_normal((6, 23, 9)) * 20).astype(dtype)
    for axis in (0, 1, 2):
        got = getattr(ops, name)(x, axis=axis)
        want = _np_reduce(name, x, axis, False)
        if name == "sum" and dtype is np.int32:
            want = x.sum(axis=axis, dtype=np.int32)
        assert got.dtype == (np.int32 if name == "argmax" else dtype)
        _check(got, want, dtype)


def test_reductions_on_device_arrays() -> None:
    q = dispatcher().runtime.queue
    x = rng.standard_normal((8, 33, 5)).astype(np.float32)
    dx = cla.to_device(q, x)
    for name in REDUCTIONS:
        got = getattr(ops, name)(dx, axis=1, keepdims=True)
        assert isinstance(got, cla.Array)
        _check(got.get(), _np_reduce(name, x, 1, True), np.float32)


def test_argmax_ties_go_to_the_first_index() -> None:
    x = np.array([[1, 5, 5, 2, 5], [3, 3, 3, 3, 3]], np.int32)
    np.testing.assert_array_equal(ops.argmax(x, axis=-1), [1, 0])
    np.testing.assert_array_equal(ops.argmax(x, axis=0), x.argmax(axis=0))
    big = np.zeros((2, 1001), np.float32)
    big[:, [17, 400, 1000]] = 2.0  # ties across the cpu variant's eight accumulators
    np.testing.assert_array_equal(ops.argmax(big, axis=1), [17, 17])


def test_nan_propagates_like_numpy() -> None:
    x = rng.standard_normal((3, 50)).astype(np.float32)
    x[1, 20] = x[1, 33] = np.nan
    for name in ("max", "min", "argmax"):
        np.testing.assert_array_equal(getattr(ops, name)(x, axis=1), getattr(np, name)(x, axis=1))
        np.testing.assert_array_equal(getattr(ops, name)(x), getattr(np, name)(x))
    # across a middle axis: the cpu variant's vector blocks of outputs (i < 64) and its
    # one-by-one tail (i = 69), a NaN first, in the middle and last along the axis
    m = rng.standard_normal((2, 7, 70)).astype(np.float32)
    m[1, 3, 9] = m[0, 0, 40] = m[1, 6, 69] = m[0, 2, 69] = np.nan
    for name in ("max", "min", "argmax"):
        np.testing.assert_array_equal(getattr(ops, name)(m, axis=1), getattr(np, name)(m, axis=1))


def test_empty_axes() -> None:
    x = np.ones((4, 0, 3), np.float32)
    np.testing.assert_array_equal(ops.sum(x, axis=1), np.zeros((4, 3)))
    with pytest.warns(RuntimeWarning):
        want = np.mean(x, axis=1)
    np.testing.assert_array_equal(ops.mean(x, axis=1), want)  # NaN, like NumPy
    assert ops.max(np.ones((0, 5), np.float32), axis=1).shape == (0,)
    assert ops.sum(np.ones((3, 4), np.float32), axis=0, keepdims=True).shape == (1, 4)


def test_i32_sum_wraps_like_c() -> None:
    x = np.full((2, 5), 2**30, np.int32)
    np.testing.assert_array_equal(ops.sum(x, axis=1), x.sum(axis=1, dtype=np.int32))
    assert ops.sum(x, axis=1)[0] == 2**30  # 5 * 2**30 modulo 2**32, as a signed 32-bit int
    m = np.full((2, 5, 70), 2**30, np.int32)  # across a middle axis: vector blocks and a tail
    m[1, 2, 3] = -7
    np.testing.assert_array_equal(ops.sum(m, axis=1), m.sum(axis=1, dtype=np.int32))


# --- several axes, all axes (axis=None | int | tuple, as NumPy) ---------------------------------

MULTI_AXES = [
    ((3, 4, 5, 6), None),  # every axis, the default: one launch over [1, N, 1]
    ((3, 4, 5, 6), ()),  # no axis: every element is its own result
    ((3, 4, 5, 6), (1, 2)),  # adjacent: one launch, R = 4 * 5
    ((3, 4, 5, 6), (-1, -2)),  # negative, unsorted
    ((3, 4, 5, 6), (0, 2)),  # not adjacent: two launches
    ((3, 4, 5, 6), (0, 3)),
    ((3, 4, 5, 6), (0, 1, 3)),  # two groups of different sizes
    ((7, 2, 3, 11), (0, 2)),
    ((5, 1, 7), (0, 2)),  # a size-1 axis between them: still one launch
    ((2, 3, 5, 7), (0, 1, 2, 3)),
    ((13,), (0,)),
    ((1,), None),
    ((), None),  # a 0-d array
    ((3, 0, 4), (0, 2)),  # an empty kept axis
]


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize(("shape", "axis"), MULTI_AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_over_several_axes(
    name: str, shape: tuple, axis: tuple | None, keepdims: bool
) -> None:
    x = rng.standard_normal(shape).astype(np.float32)
    got = getattr(ops, name)(x, axis=axis, keepdims=keepdims)
    want = getattr(np, name)(x.astype(np.float64), axis=axis, keepdims=keepdims)
    _check(np.asarray(got), np.asarray(want), np.float32)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32])
def test_several_axes_in_every_dtype(dtype: type) -> None:
    x = (rng.standard_normal((4, 5, 6, 3)) * 20).astype(dtype)
    for name in ("sum", "max", "min") + (("mean",) if dtype is not np.int32 else ()):
        for axis in ((0, 2), (1, 3), (0, 1, 3), None):
            got = getattr(ops, name)(x, axis=axis)
            if name == "sum" and dtype is np.int32:
                want = x.sum(axis=axis, dtype=np.int32)  # wraps in 32 bits, like the kernels
            else:
                want = _np_reduce(name, x, axis, False)  # type: ignore[arg-type]
            assert got.dtype == dtype
            _check(np.asarray(got), np.asarray(want), dtype)


def test_several_axes_on_device_arrays_and_warm_calls() -> None:
    d = dispatcher()
    x = rng.standard_normal((6, 5, 7, 4)).astype(np.float32)
    dx = cla.to_device(d.runtime.queue, x)
    for name in ("sum", "mean", "max", "min"):
        for axis, keep in (((0, 2), False), ((1, 3), True), (None, False), ((0, 1, 3), True)):
            want = getattr(np, name)(x.astype(np.float64), axis=axis, keepdims=keep)
            cold = getattr(ops, name)(dx, axis=axis, keepdims=keep)
            warm = getattr(ops, name)(dx, axis=axis, keepdims=keep)  # a memoized recipe
            for got in (cold, warm):
                assert isinstance(got, cla.Array)
                _check(got.get(), want, np.float32)


def test_argmax_over_every_axis_is_an_index_into_the_flat_array() -> None:
    x = rng.standard_normal((4, 7, 3)).astype(np.float32)
    assert int(ops.argmax(x)) == int(np.argmax(x))
    assert ops.argmax(x).shape == ()
    assert ops.argmax(x, keepdims=True).shape == (1, 1, 1)
    np.testing.assert_array_equal(ops.argmax(x, axis=1), np.argmax(x, axis=1))


def test_several_axes_edge_cases() -> None:
    x = np.ones((3, 0, 4), np.float32)
    with pytest.warns(RuntimeWarning):
        want = np.mean(x, axis=(0, 1))
    np.testing.assert_array_equal(ops.mean(x, axis=(0, 1)), want)  # NaN, like NumPy
    np.testing.assert_array_equal(ops.sum(x, axis=(0, 1)), np.zeros(4))
    assert ops.sum(x).shape == () and float(ops.sum(x)) == 0.0
    big = np.full((3, 4, 5), 2**28, np.int32)
    np.testing.assert_array_equal(ops.sum(big, axis=(0, 2)), big.sum(axis=(0, 2), dtype=np.int32))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: ops.sum(np.ones((2, 3, 4), np.float32), axis=(0, -3)),
            "sum: axis (0, -3) names axis 0 twice (input of shape (2, 3, 4))",
        ),
        (
            lambda: ops.mean(np.ones((2, 3, 4), np.float32), axis=(1, 3)),
            "mean: axis 3 is out of range for an input of rank 3 (shape (2, 3, 4))",
        ),
        (
            lambda: ops.max(np.ones((2, 3), np.float32), axis=(0, "1")),
            "max: axis entries must be ints, got '1' in (0, '1')",
        ),
        (
            lambda: ops.min(np.ones((2, 3), np.float32), axis=1.5),
            "min: axis must be an int, a tuple of ints or None, got 1.5",
        ),
        (
            lambda: ops.argmax(np.ones((2, 3), np.float32), axis=(0, 1)),
            "argmax: axis must be an int or None, got (0, 1) (argmax reduces over one axis or "
            "all of them, like NumPy's)",
        ),
        (
            lambda: ops.max(np.ones((2, 0, 3), np.float32), axis=(0, 1)),
            "max: max of an empty axis has no identity; the reduced axis must have at least one "
            "element (R > 0 is false for R=0)",
        ),
        (
            lambda: ops.argmax(np.ones((0, 3), np.float32)),
            "argmax: argmax of an empty axis has no identity; the reduced axis must have at "
            "least one element (R > 0 is false for R=0)",
        ),
    ],
)
def test_bad_axes(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CallError) as err:
        call()
    assert str(err.value) == message


# --- softmax, log_softmax ----------------------------------------------------------------------


def _np_softmax(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=axis, keepdims=True)
    s = np.exp(x - m).sum(axis=axis, keepdims=True)
    return (x - m) - np.log(s) if log else np.exp(x - m) / s


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize(
    ("shape", "axis"), [((40,), 0), ((6, 64), -1), ((6, 7), 0), ((3, 13, 21), 1), ((5, 4, 9), 0)]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_softmax_over_any_axis(log: bool, shape: tuple, axis: int, dtype: type) -> None:
    x = rng.standard_normal(shape).astype(dtype)
    fn = ops.log_softmax if log else ops.softmax
    got = fn(x, axis=axis)
    assert got.shape == x.shape and got.dtype == dtype
    _check(got, _np_softmax(x, axis, log), dtype)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(2, 40960), (3, 40001), (1, 32768)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_of_rows_past_the_prefetch_limit(log: bool, shape: tuple, dtype: type) -> None:
    """Rows over 128 KiB (40960 and 40001 floats, 32768 doubles) take the cpu kernel's exp pass
    without its prefetches; 32768 floats, exactly 128 KiB, the last length with them."""
    x = rng.standard_normal(shape).astype(dtype)
    got = (ops.log_softmax if log else ops.softmax)(x, axis=-1)
    _check(got, _np_softmax(x, -1, log), dtype)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(4, 1000), (3, 24), (5, 7)])
def test_softmax_is_stable_for_large_inputs(log: bool, shape: tuple) -> None:
    x = (rng.standard_normal(shape) * 1e4).astype(np.float32)
    got = (ops.log_softmax if log else ops.softmax)(x)
    assert np.isfinite(got).all()
    want = _np_softmax(x, -1, log)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6 if not log else 1e-2)


# --- layer_norm, rms_norm ----------------------------------------------------------------------


def _np_layer_norm(x, w, b, axes, eps):  # type: ignore[no-untyped-def]
    x = x.astype(np.float64)
    ax = tuple(range(x.ndim - axes, x.ndim))
    mean = x.mean(axis=ax, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=ax, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * (1 if w is None else w) + (0 if b is None else b)


def _np_rms_norm(x, w, axes, eps):  # type: ignore[no-untyped-def]
    x = x.astype(np.float64)
    ax = tuple(range(x.ndim - axes, x.ndim))
    return x / np.sqrt((x * x).mean(axis=ax, keepdims=True) + eps) * (1 if w is None else w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize(("shape", "axes"), [((9, 37), 1), ((4, 5, 24), 1), ((3, 5, 7), 2)])
@pytest.mark.parametrize("given", ["none", "weight", "both"])
def test_norms(dtype: type, shape: tuple, axes: int, given: str) -> None:
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    tail = shape[len(shape) - axes :]
    w = rng.standard_normal(tail).astype(dtype) if given != "none" else None
    b = rng.standard_normal(tail).astype(dtype) if given == "both" else None
    _check(ops.layer_norm(x, w, b, axes=axes), _np_layer_norm(x, w, b, axes, 1e-5), dtype)
    _check(ops.rms_norm(x, w, axes=axes), _np_rms_norm(x, w, axes, 1e-5), dtype)
    _check(ops.layer_norm(x, w, b, axes=axes, eps=0.25), _np_layer_norm(x, w, b, axes, 0.25), dtype)
    _check(ops.rms_norm(x, w, axes=axes, eps=0.25), _np_rms_norm(x, w, axes, 0.25), dtype)


def test_norms_on_device_arrays() -> None:
    q = dispatcher().runtime.queue
    x = rng.standard_normal((6, 40)).astype(np.float32)
    w = rng.standard_normal(40).astype(np.float32)
    got = ops.layer_norm(cla.to_device(q, x), cla.to_device(q, w))
    assert isinstance(got, cla.Array)
    _check(got.get(), _np_layer_norm(x, w, None, 1, 1e-5), np.float32)
    got = ops.rms_norm(cla.to_device(q, x))
    _check(got.get(), _np_rms_norm(x, None, 1, 1e-5), np.float32)


# --- bad calls ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: ops.sum(np.ones((2, 3), np.float32), axis=2),
            "sum: axis 2 is out of range for an input of rank 2 (shape (2, 3))",
        ),
        (
            lambda: ops.softmax(np.ones((2, 3), np.float32), axis=-3),
            "softmax: axis -3 is out of range for an input of rank 2",
        ),
        (
            lambda: ops.argmax(np.ones(3, np.float32), axis=1.0),
            "argmax: axis must be an int or None, got 1.0",
        ),
        (
            lambda: ops.max(np.ones((4, 0), np.float32), axis=-1),
            "max: max of an empty axis has no identity; the reduced axis must have at least one "
            "element (R > 0 is false for R=0)",
        ),
        (
            lambda: ops.argmax(np.ones((0, 3), np.float32), axis=0),
            "argmax: argmax of an empty axis has no identity; the reduced axis must have at "
            "least one element (R > 0 is false for R=0)",
        ),
        (
            lambda: ops.mean(np.ones(3, np.int32)),
            "mean: dtype i32 is not supported (supported: f32, f64, f16)",
        ),
        (
            lambda: ops.layer_norm(np.ones((2, 4), np.float32), np.ones(3, np.float32)),
            "layer_norm: weight has shape (3,), expected the normalized shape (4,)",
        ),
        (
            lambda: ops.rms_norm(np.ones((2, 4), np.float32), axes=3),
            "rms_norm: axes must be an int from 1 to the input's rank 2, got 3",
        ),
    ],
)
def test_bad_calls(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CallError) as err:
        call()
    assert str(err.value) == message


# --- the dispatcher's choice on each profile ---------------------------------------------

UNKNOWN = DeviceProfile(
    "Mystery Accelerator", "unknown", "accelerator", None, (), 0, "global", 64, 1
)
AXIS = {"B": 4, "R": 64, "I": 1}
NORM = {"B": 4, "R": 64}
OPS = (*REDUCTIONS, "softmax", "log_softmax", "layer_norm", "rms_norm")
SUBGROUP_OPS = ("sum", "mean", "softmax", "log_softmax")


def _want(profile: str, op: str) -> str:
    if profile == "pocl-cpu":
        return "cpu_vec8" if op in ("softmax", "log_softmax") else "cpu"
    if profile == "amd-mi250x" and op in SUBGROUP_OPS:
        return "subgroup"
    if profile == "intel-max-1100" and op in SUBGROUP_OPS:
        return "subgroup_intel"
    return "gpu_workgroup"


@pytest.mark.parametrize("profile", ["nvidia-h100", "amd-mi250x", "intel-max-1100", "pocl-cpu"])
@pytest.mark.parametrize("op", OPS)
def test_dispatch_on_shipped_profiles(profile: str, op: str) -> None:
    dims = NORM if op in ("layer_norm", "rms_norm") else AXIS
    sel = select(REG, find_profile(profile), op, "f32", {}, dims)
    assert sel.chosen and sel.chosen.instance == f"{op}__{_want(profile, op)}__f32"
    assert select(REG, UNKNOWN, op, "f32", {}, dims).chosen.instance == f"{op}__generic__f32"


def test_dispatch_details() -> None:
    pocl = find_profile("pocl-cpu")
    odd = {"B": 4, "R": 63, "I": 1}
    assert select(REG, pocl, "softmax", "f32", {}, odd).chosen.instance == "softmax__cpu__f32"
    assert select(REG, pocl, "sum", "i32", {}, AXIS).chosen.instance == "sum__cpu__i32"
    # f16: native half where the device has cl_khr_fp16, storage-only half elsewhere
    for profile, variant in (("amd-mi250x", "generic_fp16"), ("pocl-cpu", "generic")):
        sel = select(REG, find_profile(profile), "softmax", "f16", {}, AXIS)
        assert sel.chosen.instance == f"softmax__{variant}__f16"
    sel = select(REG, find_profile("nvidia-h100"), "sum", "f32", {}, AXIS)
    reasons = {c.variant: c.reason for c in sel.candidates}
    assert reasons["subgroup"] == "needs cl_khr_subgroups, which the device lacks"


# --- instances this device cannot build -------------------------------------------------------

CLANG = shutil.which("clang-15") or shutil.which("clang")
CLANG_ARGS = ("-target", "spir64", "-fsyntax-only", "-Werror")
FAMILY = {"sum", "mean", "max", "min", "argmax", "softmax", "log_softmax", "layer_norm", "rms_norm"}


@pytest.mark.skipif(CLANG is None, reason="no clang to check OpenCL C with")
def test_unbuildable_instances_pass_clang() -> None:
    """Subgroup and native-half instances are skipped on PoCL; clang still parses and checks
    them as OpenCL C 2.0 with every extension enabled (the SPIR target)."""
    names = [
        n
        for n, inst in REG.instances.items()
        if inst.op in FAMILY
        and {"cl_khr_subgroups", "cl_intel_subgroups", "cl_khr_fp16"}
        & set(inst.requires.extensions)
    ]
    assert len(names) >= 20
    paths = [str(Path(DEFAULT.generated) / REG.instance(n).source) for n in names]
    out = subprocess.run(
        [
            CLANG,
            "-x",
            "cl",
            "-cl-std=CL2.0",
            "-Xclang",
            "-finclude-default-header",
            *CLANG_ARGS,
            *paths,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
