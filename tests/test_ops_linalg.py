"""matmul, gemm and permute through the eager entry points (NumPy and device arrays), their
calling conventions, their errors, and the dispatcher's choice on each shipped profile."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest
from clforge.generated import ops

from clforge.call.dispatcher import dispatcher
from clforge.call.selection import select
from clforge.device.profile import DeviceProfile
from clforge.device.profile_files import find_profile
from clforge.errors import CallError
from clforge.registry import loader as registry_mod

REG = registry_mod.default()
rng = np.random.default_rng(11)
TOL = {np.float32: 1e-4, np.float64: 1e-10, np.float16: 2e-2}


def _r(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _queue():
    return dispatcher().runtime.queue


def _close(got: np.ndarray, want: np.ndarray, dtype: type = np.float32) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == np.dtype(dtype)
    tol = TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


# --- matmul ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((37, 19), (19, 23)),
        ((1, 1), (1, 1)),
        ((7,), (7, 5)),  # a 1-d a: a row, squeezed
        ((6, 7), (7,)),  # a 1-d b: a column, squeezed
        ((13,), (13,)),  # a dot product: a 0-d result
        ((3, 5, 7), (3, 7, 2)),
        ((3, 5, 7), (7, 2)),  # b shared by the batch
        ((1, 5, 7), (4, 7, 17)),  # a shared
        ((2, 3, 5, 7), (2, 3, 7, 4)),
        ((2, 1, 5, 7), (3, 7, 4)),  # broadcast batch: NumPy inputs are materialized
        ((2, 3, 5, 0), (2, 3, 0, 4)),  # K = 0
        ((0, 5, 7), (7, 3)),  # an empty batch
    ],
)
def test_matmul_matches_numpy_matmul(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = _r(*sa), _r(*sb)
    _close(ops.matmul(a, b), a.astype(np.float64) @ b)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_matmul_dtypes(dtype: type) -> None:
    a, b = _r(2, 9, 31, dtype=dtype), _r(31, 17, dtype=dtype)
    _close(ops.matmul(a, b), a.astype(np.float64) @ b.astype(np.float64), dtype)


def test_matmul_fortran_and_transposed_operands() -> None:
    d = dispatcher()
    a = np.asfortranarray(_r(30, 20))
    b = np.asfortranarray(_r(20, 10))
    _close(ops.matmul(a, b), a.astype(np.float64) @ b)
    x = _r(3, 30, 20)
    bt = np.swapaxes(_r(3, 10, 20), 1, 2)  # batched, last two axes swapped in memory
    _close(ops.matmul(x, bt), x.astype(np.float64) @ bt)
    big_a, big_b = np.asfortranarray(_r(1000, 800)), np.asfortranarray(_r(800, 1500))
    plan = d.plan_for(d.registry.op("matmul"), {"a": big_a[None], "b": big_b[None]}, {})
    # both stay col-major where the packed cpu routine runs: its pack step reads either layout,
    # so a Fortran-ordered operand needs no reordering copy on the host
    assert plan.inst.name == "matmul__cpu_packed__f32__a_col__b_col"
    # a small product runs the direct kernel, which reads a either way and b row-major
    small = d.plan_for(d.registry.op("matmul"), {"a": a[None], "b": b[None]}, {})
    assert small.inst.variant == "cpu_blocked" and small.inst.layout_of("a") == "col"


def test_matmul_device_arrays_keep_their_layout_without_copies() -> None:
    q = _queue()
    a, b = _r(2, 30, 20), _r(2, 10, 20)
    da, db = cla.to_device(q, a), cla.to_device(q, b)
    out = ops.matmul(da, db.transpose((0, 2, 1)))  # b col-major: a view
    assert isinstance(out, cla.Array)
    _close(out.get(), a.astype(np.float64) @ b.transpose(0, 2, 1))
    v = cla.to_device(q, _r(20))
    _close(ops.matmul(da, v).get(), a.astype(np.float64) @ v.get())


def test_matmul_device_broadcast_needing_a_copy_is_refused() -> None:
    q = _queue()
    a = cla.to_device(q, _r(2, 1, 5, 7))
    b = cla.to_device(q, _r(3, 7, 4))
    with pytest.raises(CallError) as err:
        ops.matmul(a, b)
    assert str(err.value) == (
        "matmul: batch dims (2, 1) of a and (3,) of b broadcast to (2, 3) only by copying an "
        "operand; for device arrays pass batch dims that are equal or all 1"
    )


@pytest.mark.parametrize(
    ("sa", "sb", "message"),
    [
        (
            (4,),
            (5, 2),
            "matmul: dim K is 4 in a (shape (4,)) but 5 in b (shape (5, 2)); one name means "
            "one size",
        ),
        ((2, 3, 4), (3, 4, 2), "matmul: batch dims (2,) of a and (3,) of b do not broadcast"),
        (
            (1, 1, 1, 1, 2, 2),
            (2, 2),
            "matmul: input 'a' has rank 6 (shape (1, 1, 1, 1, 2, 2)); matmul takes ranks 1 to 4",
        ),
        ((), (2, 2), "matmul: input 'a' has rank 0 (shape ()); matmul takes ranks 1 to 4"),
    ],
)
def test_matmul_bad_calls(sa, sb, message: str) -> None:
    with pytest.raises(CallError) as err:
        ops.matmul(np.ones(sa, np.float32), np.ones(sb, np.float32))
    assert str(err.value) == message


def test_matmul_batch_check_on_direct_calls() -> None:
    d = dispatcher()
    with pytest.raises(CallError) as err:
        d.call("matmul", {"a": np.ones((2, 3, 4), np.float32), "b": np.ones((3, 4, 5), np.float32)})
    assert str(err.value) == (
        "matmul: the batch sizes of a and b must be equal, or one of them 1 "
        "(BA == BB or BA == 1 or BB == 1 is false for BA=2, BB=3)"
    )


# --- gemm -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bias_shape", [None, (), (23,), (1, 23), (37, 1), (37, 23)], ids=str)
def test_gemm_bias_broadcasts(bias_shape) -> None:
    a, b = _r(37, 19), _r(19, 23)
    want = 0.5 * (a.astype(np.float64) @ b)
    if bias_shape is None:
        _close(ops.gemm(a, b, alpha=0.5, beta=3.0), want)
        return
    bias = _r(*bias_shape)
    _close(ops.gemm(a, b, bias, alpha=0.5, beta=3.0), want + 3.0 * bias)


def test_gemm_scalar_bias_and_defaults() -> None:
    a, b = _r(5, 7), _r(7, 3)
    _close(ops.gemm(a, b), a.astype(np.float64) @ b)
    _close(ops.gemm(a, b, 2.5, beta=2.0), a.astype(np.float64) @ b + 5.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize(("ta", "tb"), [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_transposes(dtype: type, ta: bool, tb: bool) -> None:
    a = _r(*((19, 37) if ta else (37, 19)), dtype=dtype)
    b = _r(*((23, 19) if tb else (19, 23)), dtype=dtype)
    bias = _r(23, dtype=dtype)
    want = -1.0 * (
        (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    ) + 0.5 * bias.astype(np.float64)
    got = ops.gemm(a, b, bias, trans_a=ta, trans_b=tb, alpha=-1.0, beta=0.5)
    _close(got, want, dtype)


def test_gemm_trans_on_device_is_a_view() -> None:
    q = _queue()
    a, b = _r(19, 37), _r(19, 23)
    da, db = cla.to_device(q, a), cla.to_device(q, b)
    d = dispatcher()
    canon = {"a": da.T, "b": db}
    plan = d.plan_for(d.registry.op("gemm"), {**canon, "bias": cla.to_device(q, _r(1, 1))}, {})
    assert plan.inst.layout_of("a") == "col"
    out = ops.gemm(da, db, trans_a=True)
    assert isinstance(out, cla.Array)
    _close(out.get(), a.T.astype(np.float64) @ b)
    _close(ops.gemm(da, db, 1.5, trans_a=True, beta=1.0).get(), a.T.astype(np.float64) @ b + 1.5)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: ops.gemm(np.ones((2, 3, 4), np.float32), np.ones((4, 2), np.float32)),
            "gemm: input 'a' has rank 3 (shape (2, 3, 4)); gemm takes matrices (use matmul for "
            "batches)",
        ),
        (
            lambda: ops.gemm(np.ones((3, 4), np.float32), np.ones((3, 2), np.float32)),
            "gemm: dim K is 4 in a (shape (3, 4)) but 3 in b (shape (3, 2)); one name means one "
            "size",
        ),
        (
            lambda: ops.gemm(
                np.ones((3, 4), np.float32), np.ones((4, 2), np.float32), np.ones(3, np.float32)
            ),
            "gemm: dim N is 2 in b (shape (4, 2)) but 3 in bias (shape (1, 3)); broadcasting "
            "needs equal sizes or 1",
        ),
        (
            lambda: ops.gemm(
                np.ones((3, 4), np.float32),
                np.ones((4, 2), np.float32),
                np.ones((1, 3, 2), np.float32),
            ),
            "gemm: bias has rank 3 (shape (1, 3, 2)); it broadcasts from a scalar, [N], [1, N], "
            "[M, 1] or [M, N]",
        ),
    ],
)
def test_gemm_bad_calls(call, message: str) -> None:
    with pytest.raises(CallError) as err:
        call()
    assert str(err.value) == message


# --- permute --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "axes"),
    [
        ((), None),
        ((7,), None),
        ((7, 13), None),  # transpose
        ((130, 67), (1, 0)),
        ((2, 3, 5), None),
        ((2, 3, 5), (1, -1, 0)),
        ((2, 3, 5, 7), None),
        ((2, 3, 5, 7), (0, 2, 3, 1)),  # NCHW -> NHWC
        ((3, 17, 16, 33), (2, 0, 3, 1)),
        ((4, 0, 5), (2, 0, 1)),  # empty
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
def test_permute_matches_numpy_transpose(shape, axes, dtype) -> None:
    x = (rng.standard_normal(shape) * 100).astype(dtype)
    got = ops.permute(x, axes=axes)
    np.testing.assert_array_equal(got, np.transpose(x, axes))
    assert got.dtype == x.dtype


def test_permute_device_arrays() -> None:
    x = _r(4, 5, 6)
    out = ops.permute(cla.to_device(_queue(), x), axes=(2, 0, 1))
    assert isinstance(out, cla.Array)
    np.testing.assert_array_equal(out.get(), x.transpose(2, 0, 1))


@pytest.mark.parametrize(
    ("shape", "axes", "message"),
    [
        ((2, 3), (0, 0), "permute: axes (0, 0) is not a permutation of the 2 axes of the input"),
        ((2, 3), (0,), "permute: axes (0,) is not a permutation of the 2 axes of the input"),
        ((2, 3), (0, 2), "permute: axes entry 2 is out of range for an input of rank 2"),
        ((2, 3), 1, "permute: axes must be a sequence of ints, got 1"),
        ((1,) * 5, None, "permute: input 'x' has rank 5; permute takes ranks up to 4"),
    ],
)
def test_permute_bad_calls(shape, axes, message: str) -> None:
    with pytest.raises(CallError) as err:
        ops.permute(np.ones(shape, np.float32), axes=axes)
    assert str(err.value) == message


def test_permute_attrs_are_checked_on_direct_calls() -> None:
    with pytest.raises(CallError) as err:
        dispatcher().call(
            "permute",
            {"x": np.ones((1, 2, 3, 4), np.float32)},
            {"p0": 0, "p1": 1, "p2": 1, "p3": 3},
        )
    assert str(err.value).startswith("permute: p0, p1, p2, p3 must be a permutation of 0, 1, 2, 3")


# --- the dispatcher's choice on each shipped profile -----------------------------------------

UNKNOWN = DeviceProfile(
    "Mystery Accelerator", "unknown", "accelerator", None, ("cl_khr_fp64",), 0, "global", 64, 1
)
UNKNOWN_FP16 = DeviceProfile(
    "Mystery Accelerator", "unknown", "accelerator", None, ("cl_khr_fp16",), 0, "global", 64, 1
)
DIMS = {  # large enough that the packed routine is the analytic choice on a CPU (prefer_when)
    "matmul": {"BATCH": 1, "M": 512, "N": 1024, "K": 1024, "BA": 1, "BB": 1},
    "gemm": {"M": 512, "N": 1024, "K": 1024},
    "permute": {"D0": 1, "D1": 2, "D2": 64, "D3": 64, "E0": 1, "E1": 2, "E2": 64, "E3": 64},
}
SUFFIX = {"matmul": "__a_row__b_row", "gemm": "__a_row__b_row", "permute": ""}


@pytest.mark.parametrize("op", ["matmul", "gemm", "permute"])
@pytest.mark.parametrize(
    ("profile", "variant"),
    [
        ("nvidia-h100", "gpu_tiled"),
        ("amd-mi250x", "gpu_tiled"),
        ("intel-max-1100", "gpu_tiled"),
        ("pocl-cpu", "cpu_packed"),
        (None, "generic"),
    ],
)
def test_dispatcher_choice_per_profile(op: str, profile: str | None, variant: str) -> None:
    prof = find_profile(profile) if profile else UNKNOWN
    if op == "permute" and variant == "cpu_packed":
        variant = "cpu"
    sel = select(REG, prof, op, "f32", {}, DIMS[op])
    assert sel.chosen and sel.chosen.instance == f"{op}__{variant}__f32{SUFFIX[op]}"


def test_f16_picks_native_half_only_with_the_extension() -> None:
    for op in ("matmul", "gemm"):
        sel = select(REG, UNKNOWN_FP16, op, "f16", {}, DIMS[op])
        assert sel.chosen and sel.chosen.variant == "generic_half"
        sel = select(REG, find_profile("pocl-cpu"), op, "f16", {}, DIMS[op])
        assert sel.chosen and sel.chosen.variant == "generic"
    sel = select(REG, find_profile("pocl-cpu"), "matmul", "f32", {"b": "col"}, DIMS["matmul"])
    # cpu_blocked takes b row-major only; the packed routine takes either layout
    assert sel.chosen and sel.chosen.variant == "cpu_packed"


def test_permute_convention_merges_axes_that_stay_together() -> None:
    from clforge.conventions import CONVENTIONS

    conv, op = CONVENTIONS["permute"], REG.op("permute")
    canon = conv.canonical(op, {"x": np.ones((2, 3, 5, 7))}, {"axes": (0, 2, 3, 1)})
    assert canon.inputs["x"].shape == (1, 2, 3, 35)
    assert canon.attrs == {"p0": 0, "p1": 1, "p2": 3, "p3": 2}
    canon = conv.canonical(op, {"x": np.ones((4, 1, 6))}, {"axes": (1, 0, 2)})
    assert canon.inputs["x"].shape == (1, 1, 1, 24)  # a copy


# --- concat -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize(
    ("shapes", "axis"),
    [
        ([(5,), (7,)], 0),
        ([(3, 4), (2, 4), (1, 4)], 0),
        ([(3, 4), (3, 1), (3, 6), (3, 2), (3, 5)], 1),  # five arrays: four joins
        ([(2, 3, 5), (2, 7, 5)], 1),
        ([(2, 3, 5), (2, 3, 1)], -1),
        ([(4, 3)], 0),  # one array: a copy
        ([(2, 0, 3), (2, 4, 3), (2, 0, 3)], 1),  # empty pieces
        ([(3, 4), (5,), (2, 2)], None),  # flattened
        ([(0, 3), (0, 3)], 1),
    ],
)
def test_concat_like_numpy(dtype: type, shapes: list, axis: int | None) -> None:
    arrays = [(rng.standard_normal(s) * 10).astype(dtype) for s in shapes]
    got = ops.concat(arrays, axis=axis)
    want = np.concatenate(arrays, axis=axis)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_concat_promotes_like_numpy() -> None:
    arrays = [np.ones((2, 2), np.float16), np.arange(4, dtype=np.int32).reshape(2, 2),
              np.full((1, 2), 0.5, np.float32)]  # fmt: skip
    got = ops.concat(arrays)
    want = np.concatenate(arrays)
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_array_equal(got, want)


def test_concat_on_device_arrays_and_warm_calls() -> None:
    q = dispatcher().runtime.queue
    hosts = [rng.standard_normal((3, n)).astype(np.float32) for n in (4, 1, 6, 2)]
    for _ in range(2):  # cold, then a memoized recipe replaying with these arrays
        devs = [cla.to_device(q, h) for h in hosts]
        got = ops.concat(devs, axis=1)
        assert isinstance(got, cla.Array)
        np.testing.assert_array_equal(got.get(), np.concatenate(hosts, axis=1))
        hosts = [h + 1 for h in hosts]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ops.concat([]), "concat: needs at least one array to join, got none"),
        (
            lambda: ops.concat([np.ones((2, 3), np.float32), np.ones((3, 3), np.float32)], axis=1),
            "concat: arrays[1] has shape (3, 3), arrays[0] (2, 3); they must have one rank and "
            "equal sizes off axis 1",
        ),
        (
            lambda: ops.concat([np.ones((2, 3), np.float32), np.ones(3, np.float32)]),
            "concat: arrays[1] has shape (3,), arrays[0] (2, 3); they must have one rank and "
            "equal sizes off axis 0",
        ),
        (
            lambda: ops.concat([np.ones(3, np.float32)], axis=1),
            "concat: axis 1 is out of range for an input of rank 1",
        ),
        (
            lambda: ops.concat([np.float32(1), np.float32(2)]),
            "concat: arrays[0] is 0-d (a scalar); 0-d arrays can only be joined with axis=None",
        ),
    ],
)
def test_concat_bad_calls(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CallError) as err:
        call()
    assert str(err.value) == message
